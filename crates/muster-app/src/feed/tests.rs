//! The feed's subscriber rules, against mockall ports (no database).

use super::*;
use crate::ports::{MockClock, MockFeedSource, MockHealthLog, MockJitter};
use time::macros::datetime;

const NOW: OffsetDateTime = datetime!(2026-12-02 12:00:00 UTC);

fn event(seq: i64) -> LedgerEvent {
    LedgerEvent {
        seq,
        subject_type: "item".into(),
        subject_id: format!("item-{seq}"),
        kind: Some(Kind::Trawl),
        priority: Some(Priority::Normal),
        from_state: None,
        to_state: Some("queued".into()),
        actor: "operator".into(),
        at: NOW,
        counted: false,
        target: None,
        reason: None,
    }
}

fn feed_with(source: MockFeedSource, settings: FeedSettings) -> (Feed, WorkSignal) {
    let mut clock = MockClock::new();
    clock.expect_now().return_const(NOW);
    let signal = WorkSignal::new();
    let mut jitter = MockJitter::new();
    jitter.expect_sample().return_const(0.5);
    let mut health = MockHealthLog::new();
    health.expect_latest_health().returning(|| Ok(Vec::new()));
    let feed = Feed::new(FeedParts {
        source: Arc::new(source),
        health: Arc::new(health),
        clock: Arc::new(clock),
        jitter: Arc::new(jitter),
        signal: signal.clone(),
        settings,
    });
    feed.state().started = true;
    (feed, signal)
}

fn seq_of(e: &FeedEvent) -> i64 {
    match e {
        FeedEvent::Transition(t) => t.seq,
        other => panic!("expected a transition, got {other:?}"),
    }
}

/// A feed without a backlog, its work signal, and a subscriber to it that has read its first
/// event (the queue depths).
async fn live_subscriber(settings: FeedSettings) -> (Feed, WorkSignal, Subscription) {
    let (feed, signal) = feed_with(MockFeedSource::new(), settings);
    let mut sub = feed.subscribe(None).await.unwrap();
    sub.next().await.unwrap();
    (feed, signal, sub)
}

/// Delivers the transitions numbered `seqs`, in order.
fn deliver(feed: &Feed, seqs: std::ops::RangeInclusive<i64>) {
    for s in seqs {
        feed.deliver(event(s));
    }
}

/// A feed reading its backlog from `source` that delivered the transitions `delivered`, and a
/// subscriber resuming after `last_event_id` that has read its first event (the queue depths).
async fn resuming(
    source: MockFeedSource,
    settings: FeedSettings,
    delivered: std::ops::RangeInclusive<i64>,
    last_event_id: i64,
) -> (Feed, Subscription) {
    let (feed, _) = feed_with(source, settings);
    deliver(&feed, delivered);
    let mut sub = feed.subscribe(Some(last_event_id)).await.unwrap();
    sub.next().await.unwrap();
    (feed, sub)
}

#[tokio::test]
async fn a_subscriber_first_gets_the_queue_depths() {
    let (feed, _) = feed_with(MockFeedSource::new(), FeedSettings::default());
    feed.deliver(event(1));
    let mut sub = feed.subscribe(None).await.unwrap();
    match sub.next().await.unwrap() {
        FeedEvent::Queues(q) => assert_eq!(
            q.depths,
            [Depth {
                kind: Kind::Trawl,
                priority: Priority::Normal,
                state: ItemState::Queued,
                count: 1
            }]
        ),
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn transitions_after_subscribing_arrive_in_order() {
    let (feed, _, mut sub) = live_subscriber(FeedSettings::default()).await;
    deliver(&feed, 1..=3);
    let got = [
        seq_of(&sub.next().await.unwrap()),
        seq_of(&sub.next().await.unwrap()),
        seq_of(&sub.next().await.unwrap()),
    ];
    assert_eq!(got, [1, 2, 3]);
}

#[tokio::test]
async fn a_subscriber_that_falls_behind_the_buffer_is_cut_loose() {
    let settings = FeedSettings {
        buffer: 4,
        ..FeedSettings::default()
    };
    let (feed, _, mut sub) = live_subscriber(settings).await;
    deliver(&feed, 1..=10);
    assert_eq!(sub.next().await, Err(End::TooSlow));
}

#[tokio::test]
async fn resuming_replays_the_transitions_after_the_last_event_id_then_goes_live() {
    let mut source = MockFeedSource::new();
    source.expect_newest_seq().returning(|| Ok(5));
    source.expect_archived_through().returning(|| Ok(0));
    source
        .expect_backlog()
        .withf(|after, through| (*after, *through) == (2, 5))
        .returning(|_, _| Ok((3..=5).map(event).collect()));
    let (feed, mut sub) = resuming(source, FeedSettings::default(), 1..=5, 2).await;
    feed.deliver(event(6));
    let mut seqs = Vec::new();
    for _ in 0..4 {
        seqs.push(seq_of(&sub.next().await.unwrap()));
    }
    assert_eq!(seqs, [3, 4, 5, 6]);
}

#[tokio::test]
async fn an_unknown_event_id_gets_a_reset() {
    let mut source = MockFeedSource::new();
    source.expect_newest_seq().returning(|| Ok(5));
    source.expect_archived_through().returning(|| Ok(0));
    let (feed, _) = feed_with(source, FeedSettings::default());
    let mut sub = feed.subscribe(Some(99)).await.unwrap();
    sub.next().await.unwrap();
    assert!(matches!(sub.next().await, Ok(FeedEvent::Reset { .. })));
}

#[tokio::test]
async fn an_event_id_older_than_the_window_gets_a_reset() {
    let mut source = MockFeedSource::new();
    source.expect_newest_seq().returning(|| Ok(50));
    source.expect_archived_through().returning(|| Ok(0));
    let settings = FeedSettings {
        resume_window: 10,
        ..FeedSettings::default()
    };
    let (_feed, mut sub) = resuming(source, settings, 1..=50, 3).await;
    assert!(matches!(sub.next().await, Ok(FeedEvent::Reset { .. })));
}

#[tokio::test(start_paused = true)]
async fn a_quiet_stream_gets_a_heartbeat_with_the_newest_sequence() {
    let (feed, _) = feed_with(MockFeedSource::new(), FeedSettings::default());
    feed.deliver(event(1));
    let mut sub = feed.subscribe(None).await.unwrap();
    sub.next().await.unwrap();
    let started = tokio::time::Instant::now();
    assert_eq!(
        sub.next().await,
        Ok(FeedEvent::Heartbeat { at: NOW, seq: 1 })
    );
    assert!(tokio::time::Instant::now() - started <= Duration::from_secs(5));
}

#[tokio::test]
async fn shutdown_sends_a_final_event_and_ends_the_stream() {
    let (_feed, signal, mut sub) = live_subscriber(FeedSettings::default()).await;
    signal.shut_down();
    assert_eq!(sub.next().await, Ok(FeedEvent::Shutdown { retry_ms: 2000 }));
    assert_eq!(sub.next().await, Err(End::Shutdown));
}

#[tokio::test]
async fn the_shutdown_event_is_the_contracts_json_with_the_subscribers_retry() {
    let (_feed, signal, mut sub) = live_subscriber(FeedSettings::default()).await;
    signal.shut_down();
    assert_eq!(
        sub.next_chunk().await.unwrap(),
        &b"event: shutdown\ndata: {\"reason\":\"draining\",\"retry_ms\":2000}\n\n"[..]
    );
}

#[tokio::test]
async fn a_transition_is_framed_with_its_sequence_as_id_and_the_contracts_json() {
    let (feed, _, mut sub) = live_subscriber(FeedSettings::default()).await;
    feed.deliver(event(7));
    assert_eq!(
        sub.next_frame().await.unwrap().bytes(),
        &b"id: 7\nevent: transition\ndata: {\"seq\":7,\"subject\":\"item\",\"id\":\"item-7\",\"kind\":\"trawl\",\"from\":null,\"to\":\"queued\",\"actor\":\"operator\",\"at\":\"2026-12-02T12:00:00Z\"}\n\n"[..]
    );
}

#[tokio::test]
async fn every_subscriber_writes_the_one_encoding_of_an_event() {
    let (feed, _) = feed_with(MockFeedSource::new(), FeedSettings::default());
    let mut subs = Vec::new();
    for _ in 0..3 {
        let mut sub = feed.subscribe(None).await.unwrap();
        sub.next().await.unwrap();
        subs.push(sub);
    }
    feed.deliver(event(1));
    let mut buffers = Vec::new();
    for sub in &mut subs {
        buffers.push(sub.next_chunk().await.unwrap());
    }
    // The same bytes at the same address: encoded once, shared, never copied per subscriber.
    let addresses: Vec<*const u8> = buffers.iter().map(|b| b.as_ptr()).collect();
    assert_eq!(addresses, [buffers[0].as_ptr(); 3]);
}

#[tokio::test]
async fn events_ready_together_leave_in_one_write() {
    let (feed, _, mut sub) = live_subscriber(FeedSettings::default()).await;
    let mut expected = Vec::new();
    for s in 1..=3 {
        feed.deliver(event(s));
        expected
            .extend_from_slice(Frame::encode(FeedEvent::Transition(transition(event(s)))).bytes());
    }
    assert_eq!(sub.next_chunk().await.unwrap(), expected);
}

/// Transitions in one write, per write, for `writes` writes.
async fn transitions_per_write(sub: &mut Subscription, writes: usize) -> Vec<usize> {
    let mut out = Vec::new();
    for _ in 0..writes {
        let chunk = sub.next_chunk().await.unwrap();
        out.push(
            String::from_utf8(chunk.to_vec())
                .unwrap()
                .matches("event: transition")
                .count(),
        );
    }
    out
}

#[tokio::test(start_paused = true)]
async fn while_events_keep_coming_those_within_the_wait_after_a_write_join_the_next_one() {
    let (feed, _) = feed_with(MockFeedSource::new(), FeedSettings::default());
    let mut sub = feed.subscribe(None).await.unwrap();
    sub.next_chunk().await.unwrap(); // queues
    feed.deliver(event(1));
    let later = {
        let feed = feed.clone();
        tokio::spawn(async move {
            for s in 2..=3 {
                tokio::time::sleep(Duration::from_millis(2)).await;
                feed.deliver(event(s));
            }
        })
    };
    // Event 1 comes within the 20 ms after the snapshot's write: it waits, and 2 and 3 (2 and
    // 4 ms later) join it.
    assert_eq!(transitions_per_write(&mut sub, 1).await, [3]);
    later.await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn an_event_after_a_quiet_spell_leaves_at_once() {
    let (feed, _) = feed_with(MockFeedSource::new(), FeedSettings::default());
    let mut sub = feed.subscribe(None).await.unwrap();
    sub.next_chunk().await.unwrap(); // queues
    tokio::time::sleep(Duration::from_secs(1)).await;
    feed.deliver(event(1));
    let started = tokio::time::Instant::now();
    assert_eq!(transitions_per_write(&mut sub, 1).await, [1]);
    assert_eq!(tokio::time::Instant::now(), started);
}

#[tokio::test]
async fn a_write_stops_gathering_at_the_size_limit() {
    let settings = FeedSettings {
        coalesce_bytes: 1,
        ..FeedSettings::default()
    };
    let (feed, _, mut sub) = live_subscriber(settings).await;
    deliver(&feed, 1..=3);
    assert_eq!(transitions_per_write(&mut sub, 3).await, [1, 1, 1]);
}

#[tokio::test(start_paused = true)]
async fn after_a_write_that_stopped_at_the_size_limit_the_next_does_not_wait() {
    let settings = FeedSettings {
        coalesce_bytes: 1,
        ..FeedSettings::default()
    };
    let (feed, _) = feed_with(MockFeedSource::new(), settings);
    let mut sub = feed.subscribe(None).await.unwrap();
    sub.next_chunk().await.unwrap(); // queues, cut at the limit
    deliver(&feed, 1..=3);
    let started = tokio::time::Instant::now();
    assert_eq!(transitions_per_write(&mut sub, 3).await, [1, 1, 1]);
    assert_eq!(tokio::time::Instant::now(), started);
}

#[tokio::test(start_paused = true)]
async fn a_subscriber_reading_a_feed_faster_than_the_size_limit_per_wait_keeps_up() {
    // 64 events of ~250 bytes each 10 ms: ~1.6 MB/s, twice 4 KiB per 5 ms.
    let settings = FeedSettings {
        coalesce_bytes: 4096,
        coalesce_wait: Duration::from_millis(5),
        buffer: 128,
        ..FeedSettings::default()
    };
    let (feed, _) = feed_with(MockFeedSource::new(), settings);
    let mut sub = feed.subscribe(None).await.unwrap();
    sub.next_chunk().await.unwrap(); // queues
    let publisher = {
        let feed = feed.clone();
        tokio::spawn(async move {
            for round in 0..100 {
                for s in 1..=64 {
                    feed.deliver(event(round * 64 + s));
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        })
    };
    let mut seen = 0;
    while seen < 6400 {
        let chunk = sub.next_chunk().await.expect("still subscribed");
        seen += std::str::from_utf8(&chunk)
            .unwrap()
            .matches("event: transition")
            .count();
    }
    assert_eq!(seen, 6400);
    publisher.await.unwrap();
}

#[tokio::test]
async fn nothing_follows_the_shutdown_event() {
    let (feed, signal, mut sub) = live_subscriber(FeedSettings::default()).await;
    feed.deliver(event(1));
    signal.shut_down();
    let mut text = String::new();
    while let Ok(chunk) = sub.next_chunk().await {
        text.push_str(std::str::from_utf8(&chunk).unwrap());
    }
    let names: Vec<&str> = text
        .lines()
        .filter_map(|l| l.strip_prefix("event: "))
        .collect();
    assert_eq!(names.last(), Some(&"shutdown"));
}

#[test]
fn the_retry_hint_is_jittered_between_one_and_three_seconds() {
    let (feed, _) = feed_with(MockFeedSource::new(), FeedSettings::default());
    assert_eq!(feed.retry_ms(), 2000);
}

#[test]
fn a_failing_read_waits_the_poll_then_twice_as_long_each_time_up_to_five_seconds() {
    let poll = Duration::from_millis(100);
    let waits: Vec<u128> = (1..=8)
        .map(|failures| super::read_backoff(poll, failures).as_millis())
        .collect();
    assert_eq!(waits, [100, 200, 400, 800, 1600, 3200, 5000, 5000]);
}

#[test]
fn the_backoff_stays_at_five_seconds_however_long_reads_fail() {
    assert_eq!(
        super::read_backoff(Duration::from_millis(100), u32::MAX),
        Duration::from_secs(5)
    );
}

fn kind_row(seq: i64, paused: bool, counted: bool) -> LedgerEvent {
    LedgerEvent {
        seq,
        subject_type: "kind".into(),
        subject_id: "sextant".into(),
        kind: Some(Kind::Sextant),
        priority: None,
        from_state: Some(if paused { "active" } else { "paused" }.into()),
        to_state: Some(if paused { "paused" } else { "active" }.into()),
        actor: "operator".into(),
        at: NOW,
        counted,
        target: None,
        reason: paused.then(|| "a bad image".into()),
    }
}

#[tokio::test]
async fn a_kind_row_is_a_kind_event_and_moves_the_paused_kinds_unless_the_start_counted_it() {
    let (feed, _) = feed_with(MockFeedSource::new(), FeedSettings::default());
    let mut sub = feed.subscribe(None).await.unwrap();
    match sub.next().await.unwrap() {
        FeedEvent::Queues(q) => assert_eq!(q.paused, []),
        other => panic!("expected the depths, got {other:?}"),
    }
    feed.deliver(kind_row(1, true, false));
    assert_eq!(
        sub.next().await.unwrap(),
        FeedEvent::Kind(KindEvent {
            seq: 1,
            kind: Kind::Sextant,
            paused: true,
            reason: Some("a bad image".into()),
            at: NOW,
        })
    );
    assert_eq!(feed.current_queues().paused, [Kind::Sextant]);
    // Already seen by the snapshot the feed started from: not applied twice.
    feed.deliver(kind_row(2, false, true));
    assert_eq!(feed.current_queues().paused, [Kind::Sextant]);
    feed.deliver(kind_row(3, false, false));
    assert_eq!(feed.current_queues().paused, []);
    assert_eq!(feed.position(), 3);
}

#[tokio::test]
async fn a_resume_is_read_one_page_at_a_time_in_order() {
    let mut source = MockFeedSource::new();
    source.expect_newest_seq().returning(|| Ok(7));
    source.expect_archived_through().returning(|| Ok(0));
    let mut pages = mockall::Sequence::new();
    for (after, through) in [(2, 4), (4, 6), (6, 7)] {
        source
            .expect_backlog()
            .withf(move |a, t| (*a, *t) == (after, through))
            .times(1)
            .in_sequence(&mut pages)
            .returning(|a, t| Ok((a + 1..=t).map(event).collect()));
    }
    let settings = FeedSettings {
        replay_page: 2,
        ..FeedSettings::default()
    };
    let (feed, mut sub) = resuming(source, settings, 1..=7, 2).await;
    feed.deliver(event(8));
    let mut seqs = Vec::new();
    for _ in 0..6 {
        seqs.push(seq_of(&sub.next().await.unwrap()));
    }
    assert_eq!(seqs, [3, 4, 5, 6, 7, 8]);
}

#[tokio::test]
async fn a_replay_page_read_after_a_prune_passed_its_start_begins_with_a_reset() {
    let mut source = MockFeedSource::new();
    source.expect_newest_seq().returning(|| Ok(7));
    let mut reads = mockall::Sequence::new();
    source
        .expect_archived_through()
        .times(1)
        .in_sequence(&mut reads)
        .returning(|| Ok(0));
    // The prune recorded its boundary at 5 and deleted 3 to 5 before the page was read.
    source
        .expect_backlog()
        .withf(|after, through| (*after, *through) == (2, 7))
        .returning(|_, _| Ok((6..=7).map(event).collect()));
    source
        .expect_archived_through()
        .times(1)
        .in_sequence(&mut reads)
        .returning(|| Ok(5));
    let (_feed, mut sub) = resuming(source, FeedSettings::default(), 1..=7, 2).await;
    assert_eq!(
        sub.next().await,
        Ok(FeedEvent::Reset {
            reason: "event id 2 is older than the retained window; reload /v1/queues".into()
        })
    );
    assert_eq!(seq_of(&sub.next().await.unwrap()), 6);
}

#[tokio::test]
async fn a_prune_past_several_replay_pages_is_reset_once_and_the_replay_goes_on_from_its_boundary()
{
    let mut source = MockFeedSource::new();
    source.expect_newest_seq().returning(|| Ok(1100));
    let mut reads = mockall::Sequence::new();
    source
        .expect_archived_through()
        .times(1)
        .in_sequence(&mut reads)
        .returning(|| Ok(0));
    // The prune recorded its boundary at 1000 and deleted 11 to 1000 before the first page
    // (11 to 266) was read.
    source
        .expect_backlog()
        .withf(|after, through| (*after, *through) == (10, 266))
        .times(1)
        .in_sequence(&mut reads)
        .returning(|_, _| Ok(Vec::new()));
    source
        .expect_archived_through()
        .times(1)
        .in_sequence(&mut reads)
        .returning(|| Ok(1000));
    source
        .expect_backlog()
        .withf(|after, through| (*after, *through) == (1000, 1100))
        .times(1)
        .in_sequence(&mut reads)
        .returning(|a, t| Ok((a + 1..=t).map(event).collect()));
    source
        .expect_archived_through()
        .times(1)
        .in_sequence(&mut reads)
        .returning(|| Ok(1000));
    let (feed, mut sub) = resuming(source, FeedSettings::default(), 1..=1100, 10).await;
    feed.deliver(event(1101));
    assert_eq!(
        sub.next().await,
        Ok(FeedEvent::Reset {
            reason: "event id 10 is older than the retained window; reload /v1/queues".into()
        })
    );
    let mut seqs = Vec::new();
    for _ in 1001..=1101 {
        seqs.push(seq_of(&sub.next().await.unwrap()));
    }
    assert_eq!(seqs, (1001..=1101).collect::<Vec<_>>());
}

#[tokio::test]
async fn a_subscriber_over_the_subscriber_cap_is_refused_unavailable() {
    let settings = FeedSettings {
        max_subscribers: 2,
        ..FeedSettings::default()
    };
    let (feed, _) = feed_with(MockFeedSource::new(), settings);
    let _one = feed.subscribe(None).await.unwrap();
    let _two = feed.subscribe(None).await.unwrap();
    assert_eq!(
        feed.subscribe(None).await.unwrap_err(),
        AppError::Unavailable
    );
}

#[tokio::test]
async fn a_subscriber_gone_gives_its_place_under_the_cap_to_the_next() {
    let settings = FeedSettings {
        max_subscribers: 1,
        ..FeedSettings::default()
    };
    let (feed, _) = feed_with(MockFeedSource::new(), settings);
    drop(feed.subscribe(None).await.unwrap());
    assert!(feed.subscribe(None).await.is_ok());
}

#[tokio::test]
async fn a_resume_over_the_replay_cap_is_refused_and_a_finished_replay_frees_its_place() {
    let mut source = MockFeedSource::new();
    source.expect_newest_seq().returning(|| Ok(3));
    source.expect_archived_through().returning(|| Ok(0));
    source
        .expect_backlog()
        .returning(|a, t| Ok((a + 1..=t).map(event).collect()));
    let settings = FeedSettings {
        max_replays: 1,
        ..FeedSettings::default()
    };
    let (feed, _) = feed_with(source, settings);
    deliver(&feed, 1..=3);
    let mut replaying = feed.subscribe(Some(1)).await.unwrap();
    let refused = feed.subscribe(Some(1)).await.unwrap_err();
    for _ in 0..3 {
        replaying.next().await.unwrap(); // queues, 2, 3: the replay's only page is read
    }
    let admitted = feed.subscribe(Some(1)).await.map(|_| ());
    assert_eq!((refused, admitted), (AppError::Unavailable, Ok(())));
}
