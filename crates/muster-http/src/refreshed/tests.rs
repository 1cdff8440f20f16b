use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use super::Refreshed;

async fn counted(loads: &AtomicU32) -> u32 {
    tokio::time::sleep(Duration::from_millis(20)).await;
    loads.fetch_add(1, Ordering::SeqCst) + 1
}

#[tokio::test]
async fn a_flood_of_callers_within_the_interval_costs_one_load() {
    let cell = Arc::new(Refreshed::new(Duration::from_secs(60)));
    let loads = Arc::new(AtomicU32::new(0));
    let callers: Vec<_> = (0..200)
        .map(|_| {
            let (cell, loads) = (cell.clone(), loads.clone());
            tokio::spawn(async move { cell.get(|| counted(&loads)).await })
        })
        .collect();
    for c in callers {
        assert_eq!(c.await.unwrap(), 1);
    }
    assert_eq!(loads.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn a_caller_after_the_interval_loads_afresh() {
    let cell = Refreshed::new(Duration::from_millis(50));
    let loads = AtomicU32::new(0);
    assert_eq!(cell.get(|| counted(&loads)).await, 1);
    tokio::time::sleep(Duration::from_millis(60)).await;
    assert_eq!(cell.get(|| counted(&loads)).await, 2);
}
