use super::*;

#[tokio::test(start_paused = true)]
async fn a_notification_after_reading_the_generation_is_not_lost() {
    let s = WorkSignal::new();
    let seen = s.generation(Kind::Trawl);
    s.notify(Kind::Trawl);
    assert!(
        s.wait_past(Kind::Trawl, seen, Duration::from_secs(30))
            .await
    );
}

#[tokio::test(start_paused = true)]
async fn another_kinds_work_does_not_wake_the_waiter() {
    let s = WorkSignal::new();
    let seen = s.generation(Kind::Trawl);
    s.notify(Kind::Sextant);
    assert!(!s.wait_past(Kind::Trawl, seen, Duration::from_secs(1)).await);
}

#[tokio::test(start_paused = true)]
async fn shutdown_ends_a_wait_at_once() {
    let s = WorkSignal::new();
    let seen = s.generation(Kind::Trawl);
    let waiter = {
        let s = s.clone();
        tokio::spawn(async move {
            s.wait_past(Kind::Trawl, seen, Duration::from_secs(3600))
                .await
        })
    };
    tokio::task::yield_now().await;
    s.shut_down();
    assert!(!waiter.await.unwrap());
}
