use super::*;

#[test]
fn image_digests_are_valid_and_differ_by_kind_and_generation() {
    let d = image_digest(Kind::Assay, 7);
    assert_eq!(d.len(), "sha256:".len() + 64);
    assert!(d.starts_with("sha256:"));
    assert!(
        d[7..]
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    );
    assert_eq!(d, image_digest(Kind::Assay, 7));
    assert_ne!(d, image_digest(Kind::Assay, 8));
    assert_ne!(d, image_digest(Kind::Waybill, 7));
}

#[test]
fn generations_advance_once_per_period() {
    let at_2_s = [0, 1_999, 2_000].map(|ms| generation(ms, 2_000));
    assert_eq!(at_2_s, [0, 0, 1]);
    assert_eq!(generation(7_000, 0), 7_000);
}

#[test]
fn backoff_doubles_from_100_ms_to_a_2_s_cap_with_jitter() {
    for (attempt, full) in [
        (1, 100),
        (2, 200),
        (3, 400),
        (5, 1_600),
        (6, 2_000),
        (30, 2_000),
    ] {
        let d = backoff(attempt).as_millis() as u64;
        assert!((full / 2..=full).contains(&d), "attempt {attempt}: {d} ms");
    }
}

#[test]
fn spool_directory_names_round_trip() {
    assert_eq!(spool_dir_name(Kind::Countersign, 3), "countersign-3");
    assert_eq!(
        parse_spool_dir_name("countersign-3"),
        Some((Kind::Countersign, 3))
    );
    assert_eq!(parse_spool_dir_name("nonsense-3"), None);
    assert_eq!(parse_spool_dir_name("trawl"), None);
}

#[test]
fn orphan_spool_dirs_are_those_no_current_worker_owns() {
    let root = std::env::temp_dir().join(format!("muster-sim-orphans-{}", std::process::id()));
    for d in ["trawl-0", "trawl-1", "assay-0", "junk"] {
        std::fs::create_dir_all(root.join(d)).unwrap();
    }
    let owned = [(Kind::Trawl, 0), (Kind::Assay, 0)];
    assert_eq!(orphan_dirs(&root, &owned), vec![(Kind::Trawl, 1)]);
    std::fs::remove_dir_all(root).unwrap();
}
