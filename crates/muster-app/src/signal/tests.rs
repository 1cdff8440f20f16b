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

#[tokio::test(start_paused = true)]
async fn the_kinds_notified_since_the_last_look_are_handed_out_together_once() {
    let s = WorkSignal::new();
    s.notify(Kind::Sextant);
    s.notify(Kind::Trawl);
    s.notify(Kind::Sextant);
    assert_eq!(s.outbound().await, vec![Kind::Trawl, Kind::Sextant]);
    let again = tokio::time::timeout(Duration::from_secs(1), s.outbound()).await;
    assert!(again.is_err(), "nothing new was notified: {again:?}");
}

#[tokio::test(start_paused = true)]
async fn a_peers_work_wakes_the_waiter_but_is_not_announced_again() {
    let s = WorkSignal::new();
    let seen = s.generation(Kind::Trawl);
    s.wake_from_peer(Kind::Trawl);
    assert!(s.wait_past(Kind::Trawl, seen, Duration::from_secs(1)).await);
    let announced = tokio::time::timeout(Duration::from_secs(1), s.outbound()).await;
    assert!(announced.is_err(), "{announced:?}");
}

#[tokio::test(start_paused = true)]
async fn kinds_that_could_not_be_announced_are_handed_out_again() {
    let s = WorkSignal::new();
    s.notify(Kind::Trawl);
    let taken = s.outbound().await;
    s.retry_outbound(&taken);
    assert_eq!(s.outbound().await, vec![Kind::Trawl]);
}
