use super::*;
use proptest::prelude::*;
use time::macros::datetime;

fn entry(event: &str, data: &str) -> Entry {
    Entry {
        subject_type: "item".into(),
        subject_id: "0193a0b0-0000-7000-8000-000000000001".into(),
        event: event.into(),
        from_state: Some("queued".into()),
        to_state: Some("leased".into()),
        actor: "worker:trawl".into(),
        fence: Some(1),
        at: datetime!(2026-12-02 14:00:00.123456789 UTC),
        data: data.into(),
    }
}

fn chain_of(n: usize) -> Vec<SealedEntry> {
    let mut head = ChainHead::genesis();
    (0..n)
        .map(|i| head.seal(entry("leased", &format!("{{\"i\":{i}}}"))))
        .collect()
}

const ID: &str = "0193a0b0-0000-7000-8000-000000000001";

#[test]
fn sealing_numbers_entries_from_one_and_links_them() {
    let chain = chain_of(3);
    assert_eq!(
        chain.iter().map(|e| e.subject_seq).collect::<Vec<_>>(),
        [1, 2, 3]
    );
    assert_eq!(chain[0].prev_hash, GENESIS);
    assert_eq!(chain[1].prev_hash, chain[0].hash);
    assert_eq!(chain[2].prev_hash, chain[1].hash);
}

#[test]
fn sealing_truncates_the_time_to_microseconds() {
    let sealed = ChainHead::genesis().seal(entry("leased", "{}"));
    assert_eq!(sealed.entry.at, datetime!(2026-12-02 14:00:00.123456 UTC));
}

#[test]
fn an_intact_chain_verifies_to_its_head() {
    let chain = chain_of(4);
    let head = verify_chain("item", ID, &chain).unwrap();
    assert_eq!(head.len, 4);
    assert_eq!(head.hash, chain[3].hash);
}

#[test]
fn changing_any_byte_of_the_data_is_detected() {
    let mut chain = chain_of(3);
    chain[1].entry.data = "{\"i\":7}".into();
    assert_eq!(
        verify_chain("item", ID, &chain),
        Err(ChainError::Tampered {
            subject: format!("item:{ID}"),
            seq: 2
        })
    );
}

#[test]
fn removing_an_entry_is_detected() {
    let mut chain = chain_of(3);
    chain.remove(1);
    assert_eq!(
        verify_chain("item", ID, &chain).unwrap_err().code(),
        "E_LEDGER_SEQUENCE"
    );
}

#[test]
fn a_truncated_tail_is_detected_against_the_recorded_head() {
    let chain = chain_of(3);
    let recorded = ChainHead {
        len: 3,
        hash: chain[2].hash,
    };
    assert_eq!(
        verify_against_head("item", ID, &chain[..2], recorded)
            .unwrap_err()
            .code(),
        "E_LEDGER_HEAD"
    );
}

#[test]
fn fields_cannot_be_spliced_between_neighbours() {
    // "ab" + "c" and "a" + "bc" must hash differently: the encoding is length-prefixed.
    let mut a = entry("ab", "c");
    let mut b = entry("a", "bc");
    a.from_state = None;
    b.from_state = None;
    assert_ne!(entry_hash(&GENESIS, 1, &a), entry_hash(&GENESIS, 1, &b));
}

#[test]
fn an_absent_fence_differs_from_fence_zero() {
    let mut a = entry("leased", "{}");
    let mut b = a.clone();
    a.fence = None;
    b.fence = Some(0);
    assert_ne!(entry_hash(&GENESIS, 1, &a), entry_hash(&GENESIS, 1, &b));
}

#[test]
fn an_entry_moved_to_another_subject_is_detected() {
    let chain = chain_of(2);
    assert_eq!(
        verify_chain("item", "other", &chain).unwrap_err().code(),
        "E_LEDGER_FOREIGN"
    );
}

proptest! {
    /// Any sequence of appended entries verifies; flipping any single field of any entry does not.
    #[test]
    fn every_single_field_change_breaks_verification(
        events in proptest::collection::vec("[a-z_]{1,12}", 1..20),
        victim in any::<prop::sample::Index>(),
        field in 0usize..6,
    ) {
        let mut head = ChainHead::genesis();
        let mut chain: Vec<SealedEntry> = events.iter().map(|e| head.seal(entry(e, "{}"))).collect();
        prop_assert_eq!(verify_chain("item", ID, &chain).unwrap(), head);
        let i = victim.index(chain.len());
        let e = &mut chain[i].entry;
        match field {
            0 => e.event.push('x'),
            1 => e.from_state = None,
            2 => e.actor.push('x'),
            3 => e.fence = Some(e.fence.unwrap_or(0) + 1),
            4 => e.at += time::Duration::microseconds(1),
            _ => e.data.push(' '),
        }
        prop_assert!(verify_chain("item", ID, &chain).is_err());
    }
}

fn head(len: u64, byte: u8) -> ChainHead {
    ChainHead {
        len,
        hash: [byte; 32],
    }
}

#[test]
fn the_heads_digest_does_not_depend_on_the_order_subjects_are_given_in() {
    let a = heads_digest(7, [("item", "a", head(2, 1)), ("edit", "b", head(1, 2))]);
    let b = heads_digest(7, [("edit", "b", head(1, 2)), ("item", "a", head(2, 1))]);
    assert_eq!(a, b);
}

#[test]
fn a_shorter_chain_changes_the_heads_digest() {
    let whole = heads_digest(7, [("item", "a", head(2, 1))]);
    let cut = heads_digest(7, [("item", "a", head(1, 1))]);
    assert_ne!(whole, cut);
}

#[test]
fn a_removed_subject_changes_the_heads_digest() {
    let both = heads_digest(7, [("item", "a", head(2, 1)), ("item", "b", head(1, 3))]);
    let one = heads_digest(7, [("item", "a", head(2, 1))]);
    assert_ne!(both, one);
}

#[test]
fn the_sequence_the_digest_is_taken_at_is_part_of_it() {
    assert_ne!(
        heads_digest(7, [("item", "a", head(2, 1))]),
        heads_digest(8, [("item", "a", head(2, 1))])
    );
}

/// A walk of the test item's chain that trusts a head of `len` entries ending in `hash`.
fn walk_after(len: u64, hash: Hash) -> ChainWalk {
    ChainWalk::after("item", ID, ChainHead { len, hash })
}

#[test]
fn a_walk_from_a_trusted_head_verifies_the_rest_of_the_chain() {
    let chain = chain_of(4);
    let mut walk = walk_after(2, chain[1].hash);
    for e in &chain[2..] {
        walk.push(e).expect("links");
    }
    assert_eq!(walk.head().len, 4);
}

#[test]
fn a_walk_from_a_head_the_next_entry_does_not_link_to_is_refused() {
    let chain = chain_of(3);
    let mut walk = walk_after(1, [9; 32]);
    assert_eq!(
        walk.push(&chain[1]),
        Err(ChainError::Link {
            subject: format!("item:{ID}"),
            seq: 2
        })
    );
}

fn fold(prev: Checkpoint, seq: u64, entries: &[(u64, Hash)]) -> Checkpoint {
    let mut fold = CheckpointFold::new(prev, seq);
    for (s, h) in entries {
        fold.push(*s, h).expect("in order");
    }
    fold.finish()
}

#[test]
fn a_checkpoint_commits_to_every_entry_it_folds() {
    let entries = [(1, [1; 32]), (2, [2; 32]), (4, [4; 32])];
    let whole = fold(Checkpoint::ORIGIN, 4, &entries);
    let altered = fold(
        Checkpoint::ORIGIN,
        4,
        &[(1, [1; 32]), (2, [7; 32]), (4, [4; 32])],
    );
    let removed = fold(Checkpoint::ORIGIN, 4, &[(1, [1; 32]), (4, [4; 32])]);
    assert_ne!(whole.digest, altered.digest);
    assert_ne!(whole.digest, removed.digest);
    assert_eq!(whole, fold(Checkpoint::ORIGIN, 4, &entries));
}

#[test]
fn a_checkpoint_commits_to_the_one_before_it() {
    let first = fold(Checkpoint::ORIGIN, 2, &[(1, [1; 32]), (2, [2; 32])]);
    let forged_first = fold(Checkpoint::ORIGIN, 2, &[(1, [1; 32]), (2, [3; 32])]);
    assert_ne!(
        fold(first, 3, &[(3, [3; 32])]).digest,
        fold(forged_first, 3, &[(3, [3; 32])]).digest
    );
}

#[test]
fn a_checkpoint_refuses_entries_outside_its_range_or_order() {
    let prev = Checkpoint {
        seq: 10,
        digest: [0; 32],
    };
    let mut fold = CheckpointFold::new(prev, 20);
    assert_eq!(
        fold.push(10, &[0; 32]).map_err(|e| e.code()),
        Err("E_LEDGER_CHECKPOINT_ORDER")
    );
    assert!(fold.push(12, &[0; 32]).is_ok());
    assert!(fold.push(12, &[0; 32]).is_err());
    assert!(fold.push(21, &[0; 32]).is_err());
    assert_eq!(fold.entries(), 1);
}
