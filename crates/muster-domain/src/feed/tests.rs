use super::*;
use proptest::prelude::*;

fn rows(seqs: &[i64]) -> Vec<FeedRow<()>> {
    seqs.iter().map(|&seq| FeedRow { seq, row: () }).collect()
}

fn seqs(rows: &[FeedRow<()>]) -> Vec<i64> {
    rows.iter().map(|r| r.seq).collect()
}

const H: ReadHorizon = ReadHorizon { xmin: 10, xmax: 12 };

/// The rows `c` delivers of `read`, read under the horizon `xmin`..`xmax`.
fn delivered(c: &mut Cursor, read: &[i64], xmin: u64, xmax: u64) -> Vec<i64> {
    seqs(&c.advance(rows(read), ReadHorizon { xmin, xmax }))
}

/// A cursor that read 1 and 3 under `H`: it delivered 1 and waits on the gap at 2.
fn waiting_on_2() -> Cursor {
    let mut c = Cursor::after(0);
    c.advance(rows(&[1, 3]), H);
    c
}

#[test]
fn contiguous_rows_are_delivered_in_order() {
    let mut c = Cursor::after(0);
    assert_eq!(seqs(&c.advance(rows(&[1, 2, 3]), H)), [1, 2, 3]);
    assert_eq!(c.position(), 3);
}

#[test]
fn a_row_after_a_gap_is_held_back_while_the_gap_may_still_commit() {
    let mut c = Cursor::after(0);
    assert_eq!(seqs(&c.advance(rows(&[1, 3]), H)), [1]);
    assert!(c.is_waiting());
    // Transactions that were running are still running (xmin did not pass 12).
    assert_eq!(delivered(&mut c, &[3], 11, 13), Vec::<i64>::new());
}

#[test]
fn a_late_commit_fills_the_gap_and_is_delivered_before_what_follows() {
    let mut c = waiting_on_2();
    assert_eq!(delivered(&mut c, &[2, 3], 11, 13), [2, 3]);
    assert!(!c.is_waiting());
}

#[test]
fn a_gap_left_by_an_aborted_transaction_is_passed_once_its_era_has_ended() {
    let mut c = waiting_on_2();
    assert_eq!(delivered(&mut c, &[3, 4], 12, 14), [3, 4]);
    assert_eq!(c.position(), 4);
}

#[test]
fn a_new_gap_beyond_the_first_one_waits_for_its_own_era() {
    let mut c = waiting_on_2();
    // Era of the first gap over; 5 is missing too, seen only now.
    assert_eq!(delivered(&mut c, &[3, 6], 12, 20), [3]);
    assert_eq!(delivered(&mut c, &[6], 19, 21), Vec::<i64>::new());
    assert_eq!(delivered(&mut c, &[6], 20, 21), [6]);
}

#[test]
fn depths_move_one_item_from_state_to_state() {
    let mut d = Depths::default();
    d.apply(Kind::Trawl, Priority::Normal, None, Some(ItemState::Queued));
    d.apply(Kind::Trawl, Priority::Normal, None, Some(ItemState::Queued));
    d.apply(
        Kind::Trawl,
        Priority::Normal,
        Some(ItemState::Queued),
        Some(ItemState::Leased),
    );
    assert_eq!(
        d.snapshot(),
        [
            (Kind::Trawl, Priority::Normal, ItemState::Queued, 1),
            (Kind::Trawl, Priority::Normal, ItemState::Leased, 1)
        ]
    );
}

/// A model of PostgreSQL for the cursor: transactions take an xid when they start, a sequence
/// number when they insert their ledger row, and commit or abort later, in any interleaving.
/// A read's fence is the next xid to assign (what `pg_current_xact_id()` after the read gives:
/// above every xid assigned before it); its xmin is the oldest running xid.
#[derive(Debug, Clone)]
enum Step {
    Start,
    Insert(usize),
    End(usize, bool),
    Read(usize),
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        2 => Just(Step::Start),
        3 => any::<usize>().prop_map(Step::Insert),
        3 => (any::<usize>(), prop::bool::weighted(0.85)).prop_map(|(i, c)| Step::End(i, c)),
        3 => (1usize..6).prop_map(Step::Read),
    ]
}

#[derive(Debug, Clone)]
struct Tx {
    xid: u64,
    seq: Option<i64>,
    state: u8, // 0 running, 1 committed, 2 aborted
}

proptest! {
    /// Whatever the interleaving, the cursor delivers every committed row exactly once, in
    /// sequence order, and never a row of an aborted transaction.
    #[test]
    fn every_committed_row_is_delivered_once_in_order(steps in proptest::collection::vec(step(), 1..120)) {
        let mut txs: Vec<Tx> = Vec::new();
        let mut next_xid = 1u64;
        let mut next_seq = 1i64;
        let mut cursor = Cursor::after(0);
        let mut delivered: Vec<i64> = Vec::new();
        let read = |txs: &[Tx], cursor: &mut Cursor, delivered: &mut Vec<i64>, next_xid: u64, limit: usize| {
            let mut visible: Vec<i64> = txs
                .iter()
                .filter(|t| t.state == 1)
                .filter_map(|t| t.seq)
                .filter(|s| *s > cursor.position())
                .collect();
            visible.sort();
            visible.truncate(limit);
            let xmin = txs.iter().filter(|t| t.state == 0).map(|t| t.xid).min().unwrap_or(next_xid);
            let out = cursor.advance(rows(&visible), ReadHorizon { xmin, xmax: next_xid });
            delivered.extend(seqs(&out));
        };
        for s in steps {
            match s {
                Step::Start => { txs.push(Tx { xid: next_xid, seq: None, state: 0 }); next_xid += 1; }
                Step::Insert(i) => {
                    let open: Vec<usize> = (0..txs.len()).filter(|&j| txs[j].state == 0 && txs[j].seq.is_none()).collect();
                    if !open.is_empty() { let j = open[i % open.len()]; txs[j].seq = Some(next_seq); next_seq += 1; }
                }
                Step::End(i, commit) => {
                    let open: Vec<usize> = (0..txs.len()).filter(|&j| txs[j].state == 0).collect();
                    if !open.is_empty() { let j = open[i % open.len()]; txs[j].state = if commit { 1 } else { 2 }; }
                }
                Step::Read(limit) => read(&txs, &mut cursor, &mut delivered, next_xid, limit),
            }
        }
        // Everything ends; two more reads drain the cursor.
        for t in &mut txs { if t.state == 0 { t.state = 1; } }
        for _ in 0..200 { read(&txs, &mut cursor, &mut delivered, next_xid, 5); }
        let mut committed: Vec<i64> = txs.iter().filter(|t| t.state == 1).filter_map(|t| t.seq).collect();
        committed.sort();
        prop_assert_eq!(delivered, committed);
    }
}

#[test]
fn an_sse_frame_carries_id_event_and_data_and_ends_with_a_blank_line() {
    assert_eq!(
        sse_frame("transition", Some(17), r#"{"seq":17}"#),
        b"id: 17\nevent: transition\ndata: {\"seq\":17}\n\n"
    );
}

#[test]
fn an_sse_frame_without_an_id_has_no_id_line() {
    assert_eq!(
        sse_frame("heartbeat", None, "{}"),
        b"event: heartbeat\ndata: {}\n\n"
    );
}

#[test]
fn a_line_break_in_the_data_cannot_end_the_frame_early() {
    assert_eq!(
        sse_frame("reset", None, "a\n\nb"),
        b"event: reset\ndata: a\ndata: \ndata: b\n\n"
    );
}

#[test]
fn the_retry_field_stands_alone() {
    assert_eq!(sse_retry(1500), b"retry: 1500\n\n");
}

#[test]
fn blocks_cut_anywhere_come_out_whole_and_comments_are_skipped() {
    let mut r = SseReader::default();
    assert_eq!(
        r.push(b": keep-alive\n\nretry: 1234\n\nid: 7\nevent: transi"),
        vec![
            SseBlock::default(),
            SseBlock {
                retry: Some("1234".into()),
                ..SseBlock::default()
            },
        ]
    );
    let blocks = r.push(b"tion\ndata: {\"seq\": 7}\n\nevent: heartbeat\r\ndata: {}\r\n\r\n");
    let events: Vec<SseEvent> = blocks.iter().filter_map(SseBlock::event).collect();
    assert_eq!(
        events,
        vec![
            SseEvent {
                id: Some("7".into()),
                event: "transition".into(),
                data: "{\"seq\": 7}".into()
            },
            SseEvent {
                id: None,
                event: "heartbeat".into(),
                data: "{}".into()
            },
        ]
    );
}

#[test]
fn a_block_of_retry_or_comments_alone_dispatches_no_event_and_an_unnamed_one_is_a_message() {
    let mut r = SseReader::default();
    let blocks = r.push(b"retry: 1500\n\n: hello\n\ndata: x\ndata:y\n\nretry: soon\n\n");
    assert_eq!(blocks[0].retry_ms(), Some(1500));
    assert_eq!(blocks[0].event(), None);
    assert_eq!(blocks[1].event(), None);
    let message = blocks[2].event().expect("data dispatches an event");
    assert_eq!(
        (message.event.as_str(), message.data.as_str()),
        ("message", "x\ny")
    );
    assert_eq!(blocks[3].retry.as_deref(), Some("soon"));
    assert_eq!(blocks[3].retry_ms(), None);
}

proptest! {
    /// What `sse_frame` and `sse_retry` write, `SseReader` reads back, however the bytes are cut
    /// (through a line, a field name or a UTF-8 character).
    #[test]
    fn the_reader_reads_back_every_frame_written_whatever_the_cuts(
        frames in proptest::collection::vec(
            ("[a-z]{1,10}", proptest::option::of(0i64..1_000_000), "[a-zé€{}\":, \n]{0,24}"),
            0..12,
        ),
        retry in 0u64..100_000,
        cuts in proptest::collection::vec(0usize..1_000, 0..8),
    ) {
        let mut wire = sse_retry(retry);
        for (name, id, data) in &frames {
            wire.extend(sse_frame(name, *id, data));
        }
        let mut cuts: Vec<usize> = cuts.into_iter().map(|c| c % (wire.len() + 1)).collect();
        cuts.sort();
        let mut reader = SseReader::default();
        let (mut blocks, mut from) = (Vec::new(), 0);
        for cut in cuts.into_iter().chain([wire.len()]) {
            blocks.extend(reader.push(&wire[from..cut]));
            from = cut;
        }
        prop_assert_eq!(blocks.len(), frames.len() + 1);
        prop_assert_eq!(blocks[0].retry_ms(), Some(retry));
        for (block, (name, id, data)) in blocks[1..].iter().zip(&frames) {
            let expected = SseEvent {
                id: id.map(|id| id.to_string()),
                event: name.clone(),
                data: data.clone(),
            };
            prop_assert_eq!(block.event(), Some(expected));
        }
    }
}
