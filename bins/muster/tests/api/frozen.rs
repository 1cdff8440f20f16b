//! A frozen Logbook: a primary that keeps the connection but stops answering, and a COMMIT
//! whose answer is lost. Muster reaches the database through a proxy of the test's own that
//! can hold every byte (frozen) or drop the answer to a COMMIT and everything after it on that
//! connection (as TCP would, the lost segment blocking the ones behind it).

use std::sync::Arc;
use std::time::{Duration, Instant};

use hyper::StatusCode;
use muster_pg::ROUND_TRIP_TIMEOUT;
use muster_testkit::TestDb;
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

use crate::harness::TestApp;

/// What the proxy does with the bytes it carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Forward,
    /// Holds every byte, both ways, until the mode changes; connections stay open.
    Frozen,
    /// A server answer carrying a COMMIT's CommandComplete is dropped, and with it everything
    /// the server sends on that connection afterwards.
    LoseCommitAnswers,
}

/// CommandComplete (`C`, length 11) with the tag `COMMIT`.
const COMMIT_COMPLETE: &[u8] = b"C\0\0\0\x0bCOMMIT\0";

struct Proxy {
    port: u16,
    mode: Arc<watch::Sender<Mode>>,
}

impl Proxy {
    async fn start(upstream: u16) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let port = listener.local_addr().expect("addr").port();
        let mode = Arc::new(watch::Sender::new(Mode::Forward));
        let modes = Arc::clone(&mode);
        tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let Ok(server) = TcpStream::connect(("127.0.0.1", upstream)).await else {
                    continue;
                };
                let (client_read, client_write) = client.into_split();
                let (server_read, server_write) = server.into_split();
                tokio::spawn(pump(client_read, server_write, modes.subscribe(), false));
                tokio::spawn(pump(server_read, client_write, modes.subscribe(), true));
            }
        });
        Proxy { port, mode }
    }

    fn set(&self, mode: Mode) {
        self.mode.send_replace(mode);
    }
}

/// Carries bytes one way until either side closes.
async fn pump(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    mut mode: watch::Receiver<Mode>,
    from_server: bool,
) {
    let mut buf = vec![0u8; 64 * 1024];
    let mut lost = false;
    loop {
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        // Held while frozen (the connection stays open; nothing gets through).
        if mode.wait_for(|m| *m != Mode::Frozen).await.is_err() {
            break;
        }
        let chunk = &buf[..n];
        if from_server
            && *mode.borrow() == Mode::LoseCommitAnswers
            && chunk
                .windows(COMMIT_COMPLETE.len())
                .any(|w| w == COMMIT_COMPLETE)
        {
            lost = true;
        }
        if lost {
            continue;
        }
        if to.write_all(chunk).await.is_err() {
            break;
        }
    }
    let _ = to.shutdown().await;
}

/// A server on a fresh database reached through a [`Proxy`].
async fn behind_a_proxy() -> (TestApp, Proxy) {
    let db = muster_testkit::fresh_db().await;
    let port = port_of(&db.app_url);
    let proxy = Proxy::start(port).await;
    let proxied = TestDb {
        app_url: db
            .app_url
            .replace(&format!(":{port}/"), &format!(":{}/", proxy.port)),
        ..db
    };
    let app = TestApp::spawn_on(proxied, |_| {}).await;
    (app, proxy)
}

fn port_of(url: &str) -> u16 {
    let after_at = &url[url.rfind('@').expect("a user in the url") + 1..];
    let host_port = &after_at[..after_at.find('/').expect("a database in the url")];
    host_port
        .rsplit(':')
        .next()
        .and_then(|p| p.parse().ok())
        .expect("a port in the url")
}

/// How long a call may take when Logbook does not answer: one round trip's deadline, and the
/// pool's wait for a connection (2 s) should every connection be held, and a margin for a
/// busy machine. Far below the 45 s request timeout a hang would end at.
fn unanswered_limit() -> Duration {
    ROUND_TRIP_TIMEOUT + Duration::from_secs(2) + Duration::from_secs(3)
}

#[tokio::test]
async fn a_frozen_primary_gets_503_within_the_round_trip_deadline_and_service_resumes_when_it_thaws()
 {
    let (app, proxy) = behind_a_proxy().await;
    let lease = app.enqueue_and_lease("trawl").await;
    let item = lease["item"]["id"].as_str().expect("an item id").to_owned();

    proxy.set(Mode::Frozen);
    let asked = Instant::now();
    let r = app.complete(&lease, json!({"result": {"n": 1}})).await;
    let took = asked.elapsed();
    assert_eq!(
        (r.status, r.code()),
        (StatusCode::SERVICE_UNAVAILABLE, "E_UNAVAILABLE")
    );
    assert!(took < unanswered_limit(), "the completion took {took:?}");
    let asked = Instant::now();
    let r = app.lease_waiting("sextant", "w2", 0).await;
    let took = asked.elapsed();
    assert_eq!(
        (r.status, r.code()),
        (StatusCode::SERVICE_UNAVAILABLE, "E_UNAVAILABLE")
    );
    assert!(took < unanswered_limit(), "the lease took {took:?}");

    proxy.set(Mode::Forward);
    let mut answer = None;
    for _ in 0..50 {
        let r = app.complete(&lease, json!({"result": {"n": 1}})).await;
        if r.status != StatusCode::SERVICE_UNAVAILABLE {
            answer = Some(r);
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let answer = answer.expect("service resumed once Logbook answered again");
    assert_eq!(answer.status, StatusCode::OK, "{:?}", answer.body);
    assert_eq!(
        answer.body["replayed"], false,
        "the frozen completion never reached Logbook's commit"
    );
    assert_eq!(app.ledger_events(&item, "completed").await, 1);
}

#[tokio::test]
async fn a_completion_whose_commit_answer_was_lost_is_503_and_its_retry_is_replayed_once() {
    let (app, proxy) = behind_a_proxy().await;
    let lease = app.enqueue_and_lease("trawl").await;
    let item = lease["item"]["id"].as_str().expect("an item id").to_owned();
    let body = json!({"result": {"n": 1}, "next": [{"kind": "sextant", "payload": {}}]});

    proxy.set(Mode::LoseCommitAnswers);
    let asked = Instant::now();
    let r = app.complete(&lease, body.clone()).await;
    let took = asked.elapsed();
    proxy.set(Mode::Forward);
    assert_eq!(
        (r.status, r.code()),
        (StatusCode::SERVICE_UNAVAILABLE, "E_UNAVAILABLE"),
        "a COMMIT without an answer is in doubt: neither outcome is claimed"
    );
    assert!(took < unanswered_limit(), "the completion took {took:?}");
    assert_eq!(
        app.ledger_events(&item, "completed").await,
        1,
        "the COMMIT happened; only its answer was lost"
    );

    let retried = app.complete(&lease, body).await;
    assert_eq!(retried.status, StatusCode::OK, "{:?}", retried.body);
    assert_eq!(retried.body["replayed"], true);
    assert_eq!(app.ledger_events(&item, "completed").await, 1);
    assert_eq!(
        app.count(&format!("core.items WHERE parent_id = '{item}'"))
            .await,
        1,
        "the next item was enqueued once"
    );
}

#[tokio::test]
async fn reads_outside_a_transaction_get_503_within_the_round_trip_deadline_when_frozen() {
    let (app, proxy) = behind_a_proxy().await;
    let item = app.enqueue("trawl", "normal", json!({})).await;
    proxy.set(Mode::Frozen);
    for path in [
        format!("/v1/items/{item}"),
        "/v1/items?state=queued".to_owned(),
        "/v1/health".to_owned(),
    ] {
        let asked = Instant::now();
        let r = app.get(&path, "operator").await;
        let took = asked.elapsed();
        assert_eq!(
            (r.status, r.code()),
            (StatusCode::SERVICE_UNAVAILABLE, "E_UNAVAILABLE"),
            "{path}"
        );
        assert!(took < unanswered_limit(), "{path} took {took:?}");
    }
    proxy.set(Mode::Forward);
    let mut state = None;
    for _ in 0..50 {
        let r = app.get(&format!("/v1/items/{item}"), "operator").await;
        if r.status == StatusCode::OK {
            state = Some(r.body["state"].clone());
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(state, Some(json!("queued")), "reads resumed after the thaw");
}
