use muster_testkit::TempDir;

use super::*;

#[test]
fn a_second_lock_on_one_spool_directory_is_refused_until_the_first_is_dropped() {
    let tmp = TempDir::new("muster-runtime-unit");
    let dir = tmp.path();
    let first = SpoolLock::acquire(dir).unwrap();
    let second = SpoolLock::acquire(dir).unwrap_err();
    assert_eq!(second.code(), "E_SPOOL_LOCKED");
    drop(first);
    assert!(SpoolLock::acquire(dir).is_ok());
}

#[test]
fn the_lock_file_is_not_a_spool_entry() {
    let tmp = TempDir::new("muster-runtime-unit");
    let dir = tmp.path();
    let _lock = SpoolLock::acquire(dir).unwrap();
    assert_eq!(crate::spool::list(dir).unwrap(), Vec::<PathBuf>::new());
}

#[test]
fn concurrency_outside_one_to_the_batch_cap_is_refused_before_the_lock() {
    let tmp = TempDir::new("muster-runtime-unit");
    let dir = tmp.path();
    for n in [0, MAX_BATCH + 1] {
        let err = Runner::builder("http://127.0.0.1:1", "t", "trawl")
            .spool_dir(dir)
            .concurrency(n)
            .build()
            .err()
            .unwrap();
        assert_eq!(err.code(), "E_INVALID_ARGUMENT", "{n}");
    }
    assert!(!dir.join(lock::LOCK_FILE).exists());
}

#[test]
fn outcome_constructors_fill_the_variants() {
    assert_eq!(
        Outcome::done(serde_json::json!(1)),
        Outcome::Done {
            result: serde_json::json!(1),
            next: vec![]
        }
    );
    assert_eq!(
        Outcome::retry("E_X", "later"),
        Outcome::Retry {
            code: "E_X".into(),
            message: "later".into()
        }
    );
    assert_eq!(
        Outcome::fail("E_Y", "never"),
        Outcome::Fail {
            code: "E_Y".into(),
            message: "never".into()
        }
    );
}

#[test]
fn a_lease_retry_waits_at_least_the_servers_retry_after() {
    let policy = RetryPolicy {
        base: Duration::from_millis(10),
        factor: 2,
        cap: Duration::from_secs(30),
        max_attempts: None,
    };
    let busy = ClientError::Unavailable {
        status: 503,
        code: Some("E_UNAVAILABLE".into()),
        message: String::new(),
        retry_after: Some(Duration::from_secs(2)),
    };
    for attempt in 1..5 {
        assert!(runner::lease_delay(&policy, attempt, &busy) >= Duration::from_secs(2));
    }
}
