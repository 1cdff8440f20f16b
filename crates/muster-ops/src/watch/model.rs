//! What `muster watch` knows: the feed's events folded into depths, rates, health and the
//! stream's age. Time comes in as an argument, so the tests drive it.

use std::collections::{BTreeMap, VecDeque};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::sse::SseEvent;

/// Transitions per second are counted over this much of the recent past.
pub const RATE_WINDOW_S: u64 = 10;
/// A stream with no event for this long is stalled (the server sends a heartbeat every 5 s;
/// Conn's alarm uses the same 15 s).
pub const STALL: Duration = Duration::from_secs(15);

/// A kind's health, from its newest `health` event.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Health {
    pub ready: Option<bool>,
    pub phase: String,
    pub restarts: u64,
    /// The newest report's last event, as `reason: message`.
    pub event: Option<String>,
}

/// The connection to the feed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Link {
    Connecting,
    Live,
    /// Lost; reconnecting (why).
    Down(String),
}

/// What the view shows.
#[derive(Debug, Clone)]
pub struct Model {
    /// The replica the stream comes from.
    pub base: String,
    pub link: Link,
    /// Items per kind and state (priorities added up), from the newest `queues` event.
    pub depths: BTreeMap<String, BTreeMap<String, u64>>,
    /// The server time of that snapshot.
    pub depths_at: Option<String>,
    pub health: BTreeMap<String, Health>,
    /// Transitions seen since the watch started.
    pub transitions: u64,
    /// The newest ledger sequence seen (transitions and heartbeats).
    pub seq: u64,
    /// The id to resume after (`Last-Event-ID`).
    pub last_event_id: Option<String>,
    /// When the current stream was opened, and when it last delivered an event.
    pub connected_at: Option<Instant>,
    pub last_event_at: Option<Instant>,
    pub reconnects: u64,
    /// `reset` events: the resume point was older than the server keeps.
    pub resets: u64,
    /// The delay the server's `shutdown` event asked for before reconnecting, ms.
    pub retry_ms: Option<u64>,
    /// How long the oldest lease out of each kind has run, and its maximum run time, in
    /// seconds, from the newest `/metrics` read (the feed does not carry them).
    pub oldest_lease: BTreeMap<String, f64>,
    pub max_run: BTreeMap<String, f64>,
    /// Transitions per whole second since `origin`, per kind (at most a window's worth).
    buckets: VecDeque<(u64, BTreeMap<String, u64>)>,
    origin: Instant,
}

impl Model {
    pub fn new(base: impl Into<String>, now: Instant) -> Model {
        Model {
            base: base.into(),
            link: Link::Connecting,
            depths: BTreeMap::new(),
            depths_at: None,
            health: BTreeMap::new(),
            transitions: 0,
            seq: 0,
            last_event_id: None,
            connected_at: None,
            last_event_at: None,
            reconnects: 0,
            resets: 0,
            oldest_lease: BTreeMap::new(),
            max_run: BTreeMap::new(),
            retry_ms: None,
            buckets: VecDeque::new(),
            origin: now,
        }
    }

    /// A stream to `base` was opened.
    pub fn connected(&mut self, base: &str, now: Instant) {
        base.clone_into(&mut self.base);
        self.link = Link::Live;
        self.connected_at = Some(now);
        self.retry_ms = None;
    }

    /// The stream ended or could not be opened.
    pub fn disconnected(&mut self, why: impl Into<String>) {
        if self.link == Link::Live {
            self.reconnects += 1;
        }
        self.link = Link::Down(why.into());
        self.connected_at = None;
    }

    /// Folds one event in.
    pub fn apply(&mut self, ev: &SseEvent, now: Instant) {
        self.last_event_at = Some(now);
        if ev.event == "reset" {
            self.last_event_id = None;
            self.resets += 1;
            return;
        }
        if ev.id.is_some() {
            self.last_event_id.clone_from(&ev.id);
        }
        let data: Value = serde_json::from_str(&ev.data).unwrap_or(Value::Null);
        match ev.event.as_str() {
            "queues" => {
                self.depths.clear();
                for d in data["depths"].as_array().into_iter().flatten() {
                    let (Some(kind), Some(state)) = (d["kind"].as_str(), d["state"].as_str())
                    else {
                        continue;
                    };
                    *self
                        .depths
                        .entry(kind.to_owned())
                        .or_default()
                        .entry(state.to_owned())
                        .or_default() += d["count"].as_u64().unwrap_or(0);
                }
                self.depths_at = data["at"].as_str().map(str::to_owned);
            }
            "transition" => {
                self.transitions += 1;
                self.see_seq(&data);
                let kind = data["kind"].as_str().unwrap_or("").to_owned();
                let second = self.second(now);
                match self.buckets.back_mut() {
                    Some((s, counts)) if *s == second => *counts.entry(kind).or_default() += 1,
                    _ => self
                        .buckets
                        .push_back((second, BTreeMap::from([(kind, 1)]))),
                }
                while self
                    .buckets
                    .front()
                    .is_some_and(|(s, _)| *s + RATE_WINDOW_S <= second)
                {
                    self.buckets.pop_front();
                }
            }
            "heartbeat" => self.see_seq(&data),
            "health" => {
                let Some(kind) = data["kind"].as_str() else {
                    return;
                };
                let event = data["events"].as_array().and_then(|e| e.last()).map(|e| {
                    format!(
                        "{}: {}",
                        e["reason"].as_str().unwrap_or(""),
                        e["message"].as_str().unwrap_or("")
                    )
                });
                self.health.insert(
                    kind.to_owned(),
                    Health {
                        ready: data["ready"].as_bool(),
                        phase: data["phase"].as_str().unwrap_or("").to_owned(),
                        restarts: data["restarts"].as_u64().unwrap_or(0),
                        event,
                    },
                );
            }
            "shutdown" => {
                self.retry_ms = data["retry_ms"].as_u64();
                let reason = data["reason"].as_str().unwrap_or("shutdown");
                self.disconnected(format!("the server is {reason}"));
            }
            _ => {}
        }
    }

    fn see_seq(&mut self, data: &Value) {
        if let Some(seq) = data["seq"].as_u64() {
            self.seq = self.seq.max(seq);
        }
    }

    fn second(&self, now: Instant) -> u64 {
        now.saturating_duration_since(self.origin).as_secs()
    }

    /// Transitions per second over the window (or since the watch started, if sooner), of
    /// one kind or of all.
    pub fn rate(&self, kind: Option<&str>, now: Instant) -> f64 {
        let elapsed = now.saturating_duration_since(self.origin);
        let second = elapsed.as_secs();
        let first = second.saturating_sub(RATE_WINDOW_S - 1);
        let count: u64 = self
            .buckets
            .iter()
            .filter(|(s, _)| *s >= first && *s <= second)
            .map(|(_, counts)| match kind {
                Some(k) => counts.get(k).copied().unwrap_or(0),
                None => counts.values().sum(),
            })
            .sum();
        let span = elapsed.saturating_sub(Duration::from_secs(first));
        count as f64 / span.as_secs_f64().max(1.0)
    }

    /// Items of `kind` in `state` (0 when the snapshot has none).
    /// Folds in a `/metrics` text: the oldest lease's age and the maximum run time per kind
    /// (a kind with no lease out has no age).
    pub fn apply_metrics(&mut self, text: &str) {
        self.oldest_lease = gauge_per_kind(text, "muster_oldest_lease_age_seconds");
        self.max_run = gauge_per_kind(text, "muster_lease_max_run_seconds");
    }

    /// Whether `kind`'s oldest lease has run most (80 %) of its maximum run time.
    pub fn lease_runs_long(&self, kind: &str) -> bool {
        match (self.oldest_lease.get(kind), self.max_run.get(kind)) {
            (Some(age), Some(max)) => *age > 0.8 * max,
            _ => false,
        }
    }

    pub fn depth(&self, kind: &str, state: &str) -> u64 {
        self.depths
            .get(kind)
            .and_then(|s| s.get(state))
            .copied()
            .unwrap_or(0)
    }

    /// `(finished, all)` items: finished is done or failed.
    pub fn totals(&self) -> (u64, u64) {
        self.depths.values().fold((0, 0), |(f, a), states| {
            let finished = states.get("done").copied().unwrap_or(0)
                + states.get("failed").copied().unwrap_or(0);
            (f + finished, a + states.values().sum::<u64>())
        })
    }

    /// How long since the stream last delivered an event (none yet: since it was opened).
    pub fn quiet_for(&self, now: Instant) -> Option<Duration> {
        self.last_event_at
            .or(self.connected_at)
            .map(|t| now.saturating_duration_since(t))
    }

    /// Whether the live stream has been quiet for longer than a heartbeat allows.
    pub fn stalled(&self, now: Instant) -> bool {
        self.link == Link::Live && self.quiet_for(now).is_some_and(|q| q > STALL)
    }
}

/// The values of a gauge with one `kind` label: `name{kind="K"} V` lines.
fn gauge_per_kind(text: &str, name: &str) -> BTreeMap<String, f64> {
    let prefix = format!("{name}{{kind=\"");
    text.lines()
        .filter_map(|line| {
            let rest = line.strip_prefix(&prefix)?;
            let (kind, value) = rest.split_once("\"} ")?;
            Some((kind.to_owned(), value.trim().parse().ok()?))
        })
        .collect()
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;

    pub(crate) fn ev(event: &str, id: Option<&str>, data: &str) -> SseEvent {
        SseEvent {
            id: id.map(str::to_owned),
            event: event.into(),
            data: data.into(),
        }
    }

    /// A model of the feed at `url`, connected at `t0`.
    pub(crate) fn connected(url: &str, t0: Instant) -> Model {
        let mut m = Model::new(url, t0);
        m.connected(url, t0);
        m
    }

    fn transition(kind: &str, seq: u64) -> SseEvent {
        let data = format!(
            r#"{{"seq": {seq}, "subject": "item", "id": "x", "kind": "{kind}", "from": "queued", "to": "leased"}}"#
        );
        ev("transition", Some(&seq.to_string()), &data)
    }

    #[test]
    fn a_queues_event_replaces_the_depths_adding_up_the_priorities() {
        let t0 = Instant::now();
        let mut m = Model::new("http://m", t0);
        m.apply(
            &ev(
                "queues",
                None,
                r#"{"at": "T1", "depths": [
            {"kind": "trawl", "priority": "normal", "state": "done", "count": 3},
            {"kind": "trawl", "priority": "urgent", "state": "done", "count": 1},
            {"kind": "assay", "priority": "normal", "state": "failed", "count": 2}]}"#,
            ),
            t0,
        );
        assert_eq!(
            (m.depth("trawl", "done"), m.depth("assay", "failed")),
            (4, 2)
        );
        m.apply(
            &ev(
                "queues",
                None,
                r#"{"at": "T2", "depths": [
            {"kind": "trawl", "priority": "normal", "state": "queued", "count": 5}]}"#,
            ),
            t0,
        );
        assert_eq!(
            (m.depth("trawl", "done"), m.depth("trawl", "queued")),
            (0, 5)
        );
        assert_eq!((m.depths_at.as_deref(), m.totals()), (Some("T2"), (0, 5)));
    }

    #[test]
    fn transitions_per_second_are_counted_over_the_last_ten_seconds() {
        let t0 = Instant::now();
        let mut m = Model::new("http://m", t0);
        for i in 0..30 {
            m.apply(&transition("trawl", i), t0 + Duration::from_millis(100 * i));
        }
        // 30 trawl transitions in the first 3 s: 10 a second.
        assert_eq!(m.rate(None, t0 + Duration::from_secs(3)), 10.0);
        assert_eq!(m.rate(Some("sextant"), t0 + Duration::from_secs(3)), 0.0);
        // Twenty seconds later they are out of the window.
        m.apply(&transition("sextant", 31), t0 + Duration::from_secs(23));
        assert_eq!(m.rate(Some("trawl"), t0 + Duration::from_secs(23)), 0.0);
        // One in the window from second 14 to 23.5.
        assert_eq!(m.rate(None, t0 + Duration::from_millis(23_500)), 1.0 / 9.5);
        assert_eq!((m.transitions, m.seq), (31, 31));
    }

    #[test]
    fn the_resume_point_is_the_newest_event_id_and_a_reset_forgets_it() {
        let t0 = Instant::now();
        let mut m = Model::new("http://m", t0);
        m.apply(&transition("trawl", 41), t0);
        m.apply(&ev("heartbeat", None, r#"{"at": "x", "seq": 44}"#), t0);
        assert_eq!((m.last_event_id.as_deref(), m.seq), (Some("41"), 44));
        m.apply(&ev("reset", None, r#"{"reason": "too old"}"#), t0);
        assert_eq!((m.last_event_id, m.resets), (None, 1));
    }

    #[test]
    fn a_health_event_is_the_kinds_state_with_its_newest_event() {
        let t0 = Instant::now();
        let mut m = Model::new("http://m", t0);
        m.apply(&ev("health", None, r#"{"kind": "assay", "digest": null, "ready": false, "restarts": 3,
            "phase": "CrashLoopBackOff", "events": [{"kind": "assay", "reason": "Pulled", "message": "ok"},
            {"kind": "assay", "reason": "BackOff", "message": "restarting"}], "at": "x"}"#), t0);
        assert_eq!(
            m.health["assay"],
            Health {
                ready: Some(false),
                phase: "CrashLoopBackOff".into(),
                restarts: 3,
                event: Some("BackOff: restarting".into()),
            }
        );
    }

    #[test]
    fn a_shutdown_event_drops_the_link_with_the_servers_retry_delay() {
        let t0 = Instant::now();
        let mut m = connected("http://m", t0);
        m.apply(
            &ev(
                "shutdown",
                None,
                r#"{"reason": "draining", "retry_ms": 750}"#,
            ),
            t0,
        );
        assert_eq!(
            (m.link.clone(), m.retry_ms, m.reconnects),
            (Link::Down("the server is draining".into()), Some(750), 1)
        );
    }

    const METRICS: &str = "# HELP muster_oldest_lease_age_seconds x\n\
        muster_oldest_lease_age_seconds{kind=\"trawl\"} 3000.5\n\
        muster_lease_max_run_seconds{kind=\"trawl\"} 3600.0\n\
        muster_lease_max_run_seconds{kind=\"sextant\"} 3600.0\n";

    #[test]
    fn the_oldest_lease_and_the_maximum_run_time_are_read_from_metrics() {
        let mut m = Model::new("http://m", Instant::now());
        m.apply_metrics(METRICS);
        assert_eq!(m.oldest_lease.get("trawl"), Some(&3000.5));
        assert_eq!(m.oldest_lease.get("sextant"), None);
        assert_eq!(m.max_run.get("sextant"), Some(&3600.0));
    }

    #[test]
    fn a_lease_past_most_of_its_maximum_run_time_runs_long() {
        let mut m = Model::new("http://m", Instant::now());
        m.apply_metrics(METRICS);
        assert!(m.lease_runs_long("trawl"));
        assert!(!m.lease_runs_long("sextant"));
    }

    #[test]
    fn a_live_stream_quiet_for_more_than_fifteen_seconds_is_stalled() {
        let t0 = Instant::now();
        let mut m = connected("http://m", t0);
        m.apply(&ev("heartbeat", None, r#"{"seq": 1}"#), t0);
        assert!(!m.stalled(t0 + Duration::from_secs(15)));
        assert!(m.stalled(t0 + Duration::from_millis(15_001)));
    }
}
