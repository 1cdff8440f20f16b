//! The simulated fleet against a real Muster server on a real PostgreSQL: chains end where
//! their plans say, the database check passes on a clean run and catches a doubled effect, a
//! restarted fleet delivers its spool, and workers fail over to the second replica.

use std::time::{Duration, Instant};

use muster_domain::Kind;
use muster_sim::api::Api;
use muster_sim::check::{self, DbStats, Evidence};
use muster_sim::enqueue::{self, Planned};
use muster_sim::fleet::{self, FleetConfig, Tokens};
use muster_sim::plan::{Plan, SimPayload};
use muster_sim::stats::{Stats, Summary};
use muster_testkit::{TempDir, TestApp, dead_addr, principals, token};
use muster_worker::{RetryPolicy, WorkerClient};
use tokio::sync::watch;

fn tokens() -> Tokens {
    principals()
        .into_iter()
        .map(|p| {
            let t = token(&p);
            (p, t)
        })
        .collect()
}

/// A real server with a short lease TTL and quick retries for every kind, on a fresh database.
async fn start_server() -> TestApp {
    TestApp::spawn_with(|s| {
        muster_testkit::retry_pipeline(&Kind::ALL, 50, 2, 200, 5)(s);
        // Short, so crashed workers' items come back quickly; long enough that a worker starved
        // of CPU for a moment on a busy 2-core machine (four of these fleets and their clusters
        // run at once) does not lose a live lease: at 600 ms one CI run lost one.
        s.lease_ttl_ms = 1_500;
    })
    .await
}

async fn db(server: &TestApp) -> tokio_postgres::Client {
    check::connect(&server.db.url).await.unwrap()
}

/// A running fleet; `stop` ends it and answers its summary.
struct Fleet {
    stats: Stats,
    stop: watch::Sender<bool>,
    task: tokio::task::JoinHandle<anyhow::Result<()>>,
}

impl Fleet {
    fn start(urls: Vec<String>, spool: &TempDir, workers: usize) -> Fleet {
        Fleet::start_counting(urls, spool, workers, Stats::default())
    }

    /// A fleet counting into `stats` (e.g. one that records acknowledged completions).
    fn start_counting(urls: Vec<String>, spool: &TempDir, workers: usize, stats: Stats) -> Fleet {
        let cfg = FleetConfig {
            urls,
            tokens: tokens(),
            spool: spool.0.clone(),
            name: "t".into(),
            workers,
            kinds: Kind::ALL.to_vec(),
            work_ms: 2,
            wait_ms: 500,
            shipkeeper: true,
            deploy_every_ms: 300,
        };
        let (stop, rx) = watch::channel(false);
        let task = tokio::spawn(fleet::run(cfg, stats.clone(), rx));
        Fleet { stats, stop, task }
    }

    async fn stop(self) -> Summary {
        self.stop.send(true).unwrap();
        tokio::time::timeout(Duration::from_secs(20), self.task)
            .await
            .expect("the fleet stops")
            .unwrap()
            .unwrap();
        self.stats.snapshot()
    }
}

async fn enqueue(server: &TestApp, plans: Vec<(u64, Plan)>) -> Planned {
    let api = Api::new(&[server.url()], &token("operator")).unwrap();
    let planned = enqueue::planned(&plans);
    enqueue::enqueue(&api, &Stats::default(), plans, 4)
        .await
        .unwrap();
    planned
}

/// Waits until the database holds `items` items, all finished.
async fn wait_finished(db: &tokio_postgres::Client, items: u64) -> DbStats {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let stats = check::stats(db).await.unwrap();
        if stats.items == items as i64 && stats.unfinished == 0 {
            return stats;
        }
        assert!(Instant::now() < deadline, "not finished in time: {stats:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn at(kind: Kind) -> Option<Kind> {
    Some(kind)
}

/// Plans covering every event alone, together at one stage, and cut off by a failure.
fn varied_plans() -> Vec<(u64, Plan)> {
    use Kind::*;
    let p = |fail, flaky, subtool, crash| Plan {
        fail_at: fail,
        flaky_at: flaky,
        subtool_at: subtool,
        crash_at: crash,
    };
    let plans = [
        p(None, None, None, None),
        p(at(Assay), None, None, None),
        p(None, at(Sextant), None, None),
        p(None, None, at(Waybill), None),
        p(None, None, None, at(Trawl)),
        p(None, at(Shakedown), at(Shakedown), at(Shakedown)),
        p(at(Trawl), at(Bellbuoy), at(Assay), at(Sextant)),
        p(None, at(Bellbuoy), at(Bellbuoy), at(Tidegauge)),
        p(at(Chartroom), at(Chartroom), at(Chartroom), None),
        p(None, None, None, None),
    ];
    plans
        .into_iter()
        .enumerate()
        .map(|(i, p)| (i as u64, p))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fleet_takes_every_chain_to_the_end_its_plan_dictates_and_the_database_check_passes() {
    let server = start_server().await;
    let spool = TempDir::new("muster-sim-spool");
    let planned = enqueue(&server, varied_plans()).await;
    assert_eq!(planned.items, 10 + 3 + 10 + 10 + 10 + 10 + 1 + 10 + 8 + 10);
    assert_eq!((planned.done_roots, planned.failed_roots), (7, 3));
    assert_eq!(
        (planned.crashes, planned.parks, planned.flaky_failures),
        (3, 4, 3)
    );

    let started_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
        * 1000.0;
    let fleet = Fleet::start(vec![server.url()], &spool, 10);
    let db = db(&server).await;
    let stats = wait_finished(&db, planned.items).await;
    let summary = fleet.stop().await;

    assert_eq!(stats.roots, 10);
    assert_eq!(stats.roots_done, 7);
    assert_eq!(stats.failed, 3);
    assert_eq!(stats.done, planned.items as i64 - 3);
    assert_eq!(stats.retryable_failures, 3);
    assert_eq!(stats.parks, 4);
    assert_eq!(stats.replays, 4);
    assert_eq!(stats.late_results, 0);

    assert_eq!(summary.crashes, 3);
    assert_eq!(summary.parks, 4);
    assert_eq!(summary.fails, 3 + 3);
    assert_eq!(summary.completes, planned.items - 3);
    assert_eq!(summary.completes_replayed, 0);
    assert_eq!(
        (summary.bad_5xx, summary.unexpected_total),
        (0, 0),
        "{summary:?}"
    );
    assert_eq!((summary.lease_lost, summary.conflicts), (0, 0));

    // The fleet's start, seen as a fault repaired at once: the stall before the first
    // completion is exactly the time to that completion.
    let start = check::Fault {
        name: "fleet start".into(),
        start_ms: started_ms,
        end_ms: started_ms,
        worker_prefix: Some("nobody-".into()),
        hides_commit_outcomes: false,
        probes: None,
    };
    let evidence = Evidence {
        faults: vec![start],
        acked: Vec::new(),
        clients: Some(summary.clone()),
    };
    let report = check::check(&db, 10, &evidence).await.unwrap();
    assert_eq!(report.violations, vec![], "{report:?}");
    assert!(report.ok);
    assert_eq!(report.clients.as_ref(), Some(&summary));
    let recovery = &report.recoveries[0];
    let first = recovery
        .first_completion_ms
        .expect("a completion after the start");
    assert!(first > 0.0 && first < 30_000.0, "{recovery:?}");
    // The stall is measured between PostgreSQL timestamps, which keep whole microseconds:
    // it may come out up to 1 µs shorter than the first completion's float offset.
    assert_eq!(
        recovery.longest_stall_ms.map(|s| s + 0.001 >= first),
        Some(true),
        "{recovery:?}"
    );
    assert_eq!(recovery.abandoned_leases, Some(0));
    assert_eq!(recovery.slowest_release_ms, None);
    assert_eq!(
        report.figures.longest_stall.map(|s| s.fault),
        Some("fleet start".to_owned())
    );
    assert_eq!(report.planned, planned);
    let verified = muster::ledger_verify(&server.settings).await.unwrap();
    assert_eq!(verified.entries as i64, stats.ledger_rows);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_database_check_reports_a_duplicated_next_item_and_a_lost_root() {
    let server = start_server().await;
    let spool = TempDir::new("muster-sim-spool");
    let planned = enqueue(&server, vec![(0, Plan::default()), (1, Plan::default())]).await;
    let fleet = Fleet::start(vec![server.url()], &spool, 10);
    let db = db(&server).await;
    wait_finished(&db, planned.items).await;
    fleet.stop().await;
    assert!(check::check(&db, 2, &Evidence::default()).await.unwrap().ok);

    // A second `assay` item for root 0, as a doubled completion of `sextant` would make it.
    db.batch_execute(
        "INSERT INTO core.items (id, kind, priority, state, attempt, fence, enqueued_at, payload,
                                 parent_id, created_at, chain_len, chain_head)
         SELECT gen_random_uuid(), kind, priority, 'queued', 0, 0, now(), payload, parent_id, now(),
                0, chain_head
         FROM core.items WHERE kind = 'assay' AND payload->>'root' = '0'",
    )
    .await
    .unwrap();
    let report = check::check(&db, 3, &Evidence::default()).await.unwrap();
    assert!(!report.ok);
    let rules: Vec<&str> = report.violations.iter().map(|v| v.rule.as_str()).collect();
    for expected in [
        "each root has at most one item per stage (no duplicate next items)",
        "each chain reaches exactly the last stage its plan dictates",
        "each item was enqueued once, completed once if done, failed once if failed, nothing else",
        "a completion names exactly the next stage's item as its next",
        "every item finished: none left queued, leased (by a dead lease) or parked",
        "every enqueued root 0..3 is in the database",
    ] {
        assert!(
            rules.contains(&expected),
            "{expected} missing from {rules:#?}"
        );
    }
    let dup = &report.violations[rules
        .iter()
        .position(|r| r.starts_with("each root has at most one"))
        .unwrap()];
    assert_eq!(dup.count, 1);
    assert_eq!(dup.samples, vec!["root 0 assay: 2 items".to_owned()]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_fleet_first_delivers_what_a_killed_one_left_in_its_spool() {
    let server = start_server().await;
    let spool = TempDir::new("muster-sim-spool");
    enqueue(&server, vec![(0, Plan::default())]).await;

    // A trawl worker leases the root and spools its completion, but the replica it delivers to
    // is gone (the process "dies" with the delivery spooled).
    let dir = spool.0.join(fleet::spool_dir_name(Kind::Trawl, 0));
    let live = WorkerClient::new(
        &server.url(),
        &token("worker:trawl"),
        "trawl",
        "t-old",
        &dir,
    )
    .unwrap();
    let lease = live.lease(1_000).await.unwrap().expect("a lease");
    let dead = dead_addr().await;
    let gone = WorkerClient::new(
        &format!("http://{dead}"),
        &token("worker:trawl"),
        "trawl",
        "t-old",
        &dir,
    )
    .unwrap()
    .with_retry(RetryPolicy {
        max_attempts: Some(1),
        ..RetryPolicy::default()
    });
    let payload: SimPayload = serde_json::from_value(lease.item.payload.clone()).unwrap();
    let next = vec![muster_worker::NextStep::new(
        "sextant",
        lease.item.payload.clone(),
    )];
    let undelivered = gone
        .complete(&lease, serde_json::json!({"root": payload.root}), next)
        .await
        .unwrap_err();
    assert_eq!(undelivered.code(), "E_UNDELIVERED");
    assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 1);

    let fleet = Fleet::start(vec![server.url()], &spool, 10);
    let db = db(&server).await;
    wait_finished(&db, 10).await;
    let summary = fleet.stop().await;
    assert_eq!(summary.redelivered_from_spool, 1);
    assert_eq!(summary.completes, 10);
    assert_eq!(summary.leases, 9, "the root was not leased again");
    let left: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(
        left,
        vec![".lock".to_owned()],
        "only the runner's lock file"
    );
    assert!(check::check(&db, 1, &Evidence::default()).await.unwrap().ok);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn workers_fail_over_to_the_second_url_when_the_first_refuses_connections() {
    let server = start_server().await;
    let spool = TempDir::new("muster-sim-spool");
    let planned = enqueue(&server, vec![(0, Plan::default()), (1, Plan::default())]).await;
    let dead = dead_addr().await;

    let fleet = Fleet::start(vec![format!("http://{dead}"), server.url()], &spool, 20);
    let db = db(&server).await;
    wait_finished(&db, planned.items).await;
    let summary = fleet.stop().await;
    assert_eq!(summary.completes, 20);
    assert!(summary.failovers >= 1, "{summary:?}");
    assert!(summary.statuses["lease"]["transport"] >= 1);
    assert_eq!((summary.bad_5xx, summary.unexpected_total), (0, 0));
    assert!(check::check(&db, 2, &Evidence::default()).await.unwrap().ok);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_acknowledged_completion_is_found_in_the_ledger_and_a_lost_one_is_a_violation() {
    let server = start_server().await;
    let spool = TempDir::new("muster-sim-spool");
    let acks_path = spool.0.join("acks.txt");
    let stats = Stats::default().with_acks(&acks_path).unwrap();
    let planned = enqueue(&server, vec![(0, Plan::default()), (1, Plan::default())]).await;
    let fleet = Fleet::start_counting(vec![server.url()], &spool, 10, stats);
    let db = db(&server).await;
    wait_finished(&db, planned.items).await;
    let summary = fleet.stop().await;
    let acked = check::parse_acks(&std::fs::read_to_string(&acks_path).unwrap());
    assert_eq!(acked.len() as u64, summary.completes);
    assert_eq!(acked.len() as u64, planned.items);
    let evidence = Evidence {
        acked: acked.clone(),
        ..Evidence::default()
    };
    let report = check::check(&db, 2, &evidence).await.unwrap();
    assert_eq!(report.violations, vec![], "{report:?}");

    // An acknowledgement the ledger does not hold at the sequence it named: a lost commit.
    let mut lost = acked.clone();
    lost[0].ledger_seq = 1_000_000_000;
    let evidence = Evidence {
        acked: lost,
        ..Evidence::default()
    };
    let report = check::check(&db, 2, &evidence).await.unwrap();
    let rules: Vec<(&str, u64)> = report
        .violations
        .iter()
        .map(|v| (v.rule.as_str(), v.count))
        .collect();
    assert_eq!(
        rules,
        vec![(
            "every acknowledged completion is in the ledger at the sequence number its answer named",
            1
        )]
    );
}

#[test]
fn an_acks_line_cut_short_by_a_kill_is_skipped() {
    let acked = check::parse_acks("a 5\nb 7\nc");
    assert_eq!(
        acked,
        vec![
            check::Acked {
                item_id: "a".into(),
                ledger_seq: 5
            },
            check::Acked {
                item_id: "b".into(),
                ledger_seq: 7
            },
        ]
    );
}
