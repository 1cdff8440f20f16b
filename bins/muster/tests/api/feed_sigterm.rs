//! The live feed through a rollout: a real SIGTERM to a real `muster serve` process ends every
//! stream with `shutdown`, and the client resumes on the next server with `Last-Event-ID`
//! without a `reset`.

use std::process::Command;
use std::time::Duration;

use serde_json::json;

use crate::harness::{KillOnDrop, TempDir, TestApp, serve_process};

const WAIT: Duration = Duration::from_secs(10);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_ends_the_stream_with_shutdown_and_the_resume_gets_no_reset() {
    let db = muster_testkit::fresh_db().await;
    let dir = TempDir::new("muster-feed-sigterm");
    let (mut serve, addr) = serve_process(&db.app_url, &dir);
    let mut child = KillOnDrop(Some(serve.spawn().expect("start muster")));
    let first = TestApp::attach(db.clone(), addr).await;
    let mut s = first.events("conn", None).await;
    s.next_named("queues", WAIT)
        .await
        .expect("the queues snapshot");
    first.enqueue_many("trawl", "normal", 3).await;
    let mut last_id = 0;
    for _ in 0..3 {
        last_id = s
            .next_named("transition", WAIT)
            .await
            .expect("a transition")
            .id
            .unwrap();
    }

    let killed = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    let mut events = Vec::new();
    while let Some(e) = s.next_within(WAIT).await {
        events.push(e);
    }
    let exit = tokio::task::spawn_blocking(move || child.take().wait())
        .await
        .unwrap()
        .unwrap();
    assert!(exit.success(), "muster exited with {exit}");
    let last = events.last().expect("a final event");
    assert_eq!(
        (last.event.as_str(), &last.data),
        (
            "shutdown",
            &json!({"reason": "draining", "retry_ms": s.retry_ms.unwrap()})
        )
    );

    let next = TestApp::spawn_on(db, |_| {}).await;
    let mut resumed = next.events("conn", Some(&last_id.to_string())).await;
    next.enqueue("trawl", "normal", json!({})).await;
    let t = resumed
        .next_named("transition", WAIT)
        .await
        .expect("the transition after the resume");
    assert_eq!(t.id, Some(last_id + 1));
    assert!(
        !resumed.raw.contains("event: reset"),
        "the resume got a reset: {}",
        resumed.raw
    );
}
