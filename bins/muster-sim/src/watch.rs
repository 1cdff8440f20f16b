//! `muster-sim watch`: the live feed (`GET /v1/events`) as one progress bar per stage, with the
//! retries, parks, replays and re-leases counted as their transitions arrive.
//!
//! The bars come from the `queues` events (depths per kind and state, sent on connect and at
//! most every 2 s); the counters and the recent-events lines from `transition` events. A stream
//! that ends (a restart, a replica going away) is resumed on the next replica with
//! `Last-Event-ID`, so nothing is counted twice or missed.

use std::collections::{BTreeMap, VecDeque};
use std::fmt::Write as _;
use std::io::{IsTerminal, Write as _};
use std::time::Duration;

use http_body_util::BodyExt;
use muster_domain::Kind;
use serde_json::Value;
use tokio::sync::watch;

use crate::api::Api;

/// Recent notable transitions shown under the bars.
const RECENT: usize = 6;
/// Width of a progress bar in characters.
const BAR: usize = 20;

/// One server-sent event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SseEvent {
    pub id: Option<String>,
    pub event: String,
    pub data: String,
}

/// Splits a byte stream into events; frames may arrive cut anywhere.
#[derive(Debug, Default)]
pub struct SseParser {
    buf: String,
}

impl SseParser {
    /// Feeds a chunk; the events it completed.
    pub fn push(&mut self, chunk: &[u8]) -> Vec<SseEvent> {
        self.buf.push_str(&String::from_utf8_lossy(chunk));
        if self.buf.contains('\r') {
            self.buf = self.buf.replace("\r\n", "\n");
        }
        let mut events = Vec::new();
        while let Some(end) = self.buf.find("\n\n") {
            let block: String = self.buf.drain(..end + 2).collect();
            let mut ev = SseEvent {
                id: None,
                event: "message".into(),
                data: String::new(),
            };
            let mut any = false;
            for line in block.lines() {
                if line.starts_with(':') {
                    continue;
                }
                let (field, value) = line.split_once(':').unwrap_or((line, ""));
                let value = value.strip_prefix(' ').unwrap_or(value);
                match field {
                    "id" => ev.id = Some(value.to_owned()),
                    "event" => ev.event = value.to_owned(),
                    "data" => {
                        if any {
                            ev.data.push('\n');
                        }
                        ev.data.push_str(value);
                        any = true;
                    }
                    _ => {}
                }
            }
            if any || ev.id.is_some() {
                events.push(ev);
            }
        }
        events
    }
}

/// Counters of one stage.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Stage {
    /// Items per state, from the last `queues` event.
    pub states: BTreeMap<String, u64>,
    pub retries: u64,
    pub parks: u64,
    pub replays: u64,
    pub re_leases: u64,
    pub failures: u64,
}

impl Stage {
    fn count(&self, state: &str) -> u64 {
        self.states.get(state).copied().unwrap_or(0)
    }

    /// `(finished, all)` items of the stage.
    pub fn progress(&self) -> (u64, u64) {
        let all = self.states.values().sum();
        (self.count("done") + self.count("failed"), all)
    }
}

/// What the watcher knows.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Board {
    pub stages: BTreeMap<Kind, Stage>,
    pub seq: u64,
    pub transitions: u64,
    pub reconnects: u64,
    pub recent: VecDeque<String>,
}

impl Board {
    /// Applies one event; returns the id to resume after, if it carried one.
    pub fn apply(&mut self, ev: &SseEvent) {
        let data: Value = serde_json::from_str(&ev.data).unwrap_or(Value::Null);
        match ev.event.as_str() {
            "queues" => {
                for stage in self.stages.values_mut() {
                    stage.states.clear();
                }
                for d in data["depths"].as_array().into_iter().flatten() {
                    let (Some(kind), Some(state)) = (
                        d["kind"].as_str().and_then(|k| k.parse::<Kind>().ok()),
                        d["state"].as_str(),
                    ) else {
                        continue;
                    };
                    *self
                        .stages
                        .entry(kind)
                        .or_default()
                        .states
                        .entry(state.to_owned())
                        .or_default() += d["count"].as_u64().unwrap_or(0);
                }
            }
            "transition" => {
                self.transitions += 1;
                if let Some(seq) = data["seq"].as_u64() {
                    self.seq = self.seq.max(seq);
                }
                let Some(kind) = data["kind"].as_str().and_then(|k| k.parse::<Kind>().ok()) else {
                    return;
                };
                let (from, to) = (
                    data["from"].as_str().unwrap_or(""),
                    data["to"].as_str().unwrap_or(""),
                );
                let stage = self.stages.entry(kind).or_default();
                let what = match (from, to) {
                    ("leased", "queued") => {
                        stage.retries += 1;
                        "failed, will retry"
                    }
                    ("leased", "needs_subtool") => {
                        stage.parks += 1;
                        "parked: needs a sub-tool"
                    }
                    ("needs_subtool", "queued") => {
                        stage.replays += 1;
                        "replayed for a new worker image"
                    }
                    ("leased", "leased") => {
                        stage.re_leases += 1;
                        "re-leased after its lease expired"
                    }
                    (_, "failed") => {
                        stage.failures += 1;
                        "failed for good"
                    }
                    _ => return,
                };
                let id = data["id"].as_str().unwrap_or("?");
                let short = &id[id.len().saturating_sub(8)..];
                self.recent
                    .push_back(format!("{:<11} …{short} {what}", kind.as_str()));
                while self.recent.len() > RECENT {
                    self.recent.pop_front();
                }
            }
            "heartbeat" => {
                if let Some(seq) = data["seq"].as_u64() {
                    self.seq = self.seq.max(seq);
                }
            }
            _ => {}
        }
    }

    /// `(finished, all)` over every stage.
    pub fn totals(&self) -> (u64, u64) {
        self.stages.values().fold((0, 0), |(f, a), s| {
            let (sf, sa) = s.progress();
            (f + sf, a + sa)
        })
    }

    /// The screen: a header, one line per stage, the recent events.
    pub fn render(&self, header: &str) -> Vec<String> {
        let mut lines = vec![header.to_owned()];
        lines.push(format!(
            "{:<11} {:<w$} {:>9} {:>6} {:>6} {:>6} {:>6} │ {:>5} {:>4} {:>6} {:>8}",
            "stage",
            "progress",
            "finished",
            "failed",
            "queued",
            "leased",
            "parked",
            "retry",
            "park",
            "replay",
            "re-lease",
            w = BAR + 2
        ));
        for kind in Kind::ALL {
            let s = self.stages.get(&kind).cloned().unwrap_or_default();
            let (finished, all) = s.progress();
            let filled = (BAR as u64 * finished).checked_div(all).unwrap_or(0) as usize;
            let mut bar = String::with_capacity(BAR + 2);
            bar.push('[');
            bar.push_str(&"█".repeat(filled));
            bar.push_str(&"·".repeat(BAR - filled));
            bar.push(']');
            let mut line = String::new();
            let _ = write!(
                line,
                "{:<11} {bar} {:>9} {:>6} {:>6} {:>6} {:>6} │ {:>5} {:>4} {:>6} {:>8}",
                kind.as_str(),
                format!("{finished}/{all}"),
                s.count("failed"),
                s.count("queued"),
                s.count("leased"),
                s.count("needs_subtool"),
                s.retries,
                s.parks,
                s.replays,
                s.re_leases
            );
            lines.push(line);
        }
        lines.push(String::new());
        for i in 0..RECENT {
            lines.push(self.recent.get(i).cloned().unwrap_or_default());
        }
        lines
    }
}

/// Follows the feed until `stop` turns true or (with `until_items`) that many items exist and
/// all are finished; the board at the end.
pub async fn watch(api: Api, until_items: Option<u64>, mut stop: watch::Receiver<bool>) -> Board {
    let mut board = Board::default();
    let mut last_id: Option<String> = None;
    let tty = std::io::stdout().is_terminal();
    let mut drawn = 0usize;
    let mut redraw = tokio::time::interval(Duration::from_millis(if tty { 200 } else { 2_000 }));
    'connect: loop {
        let response = tokio::select! {
            r = api.open_stream("/v1/events", last_id.as_deref()) => r,
            _ = stop.wait_for(|s| *s) => break 'connect,
        };
        let mut body = match response {
            Ok(res) if res.status() == 200 => res.into_body(),
            Ok(res) => {
                board
                    .recent
                    .push_back(format!("feed answered {}; retrying", res.status()));
                api.failover();
                board.reconnects += 1;
                tokio::time::sleep(Duration::from_millis(500)).await;
                continue;
            }
            Err(_) => {
                api.failover();
                board.reconnects += 1;
                tokio::time::sleep(Duration::from_millis(500)).await;
                continue;
            }
        };
        let mut parser = SseParser::default();
        loop {
            tokio::select! {
                frame = body.frame() => {
                    let Some(Ok(frame)) = frame else {
                        // The stream ended: resume where we were, on the next replica.
                        api.failover();
                        board.reconnects += 1;
                        continue 'connect;
                    };
                    let Ok(data) = frame.into_data() else { continue };
                    for ev in parser.push(&data) {
                        if ev.event == "reset" {
                            last_id = None;
                        } else if ev.id.is_some() {
                            last_id.clone_from(&ev.id);
                        }
                        board.apply(&ev);
                    }
                }
                _ = redraw.tick() => {
                    drawn = draw(&board, api.base(), tty, drawn);
                    if let Some(n) = until_items {
                        let (finished, all) = board.totals();
                        if all >= n && finished == all {
                            break 'connect;
                        }
                    }
                }
                _ = stop.wait_for(|s| *s) => break 'connect,
            }
        }
    }
    draw(&board, api.base(), tty, drawn);
    board
}

/// Draws the board over the previous drawing (a terminal) or prints a one-line status.
fn draw(board: &Board, base: &str, tty: bool, drawn: usize) -> usize {
    let (finished, all) = board.totals();
    let mut out = std::io::stdout().lock();
    if !tty {
        let _ = writeln!(
            out,
            "feed seq {}: {finished}/{all} items finished, {} transitions",
            board.seq, board.transitions
        );
        return 0;
    }
    let header = format!(
        "Muster live feed from {base}: ledger seq {}, {} transitions, {finished}/{all} items finished{}",
        board.seq,
        board.transitions,
        if board.reconnects > 0 {
            format!(", {} reconnects", board.reconnects)
        } else {
            String::new()
        }
    );
    let lines = board.render(&header);
    if drawn > 0 {
        let _ = write!(out, "\x1b[{drawn}A");
    }
    for line in &lines {
        let _ = writeln!(out, "\x1b[2K{line}");
    }
    let _ = out.flush();
    lines.len()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_cut_anywhere_come_out_whole_and_comments_are_skipped() {
        let mut p = SseParser::default();
        assert_eq!(p.push(b": keep-alive\n\nid: 7\nevent: transi"), vec![]);
        let events = p.push(b"tion\ndata: {\"seq\": 7}\n\nevent: heartbeat\r\ndata: {}\r\n\r\n");
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

    fn ev(event: &str, data: &str) -> SseEvent {
        SseEvent {
            id: None,
            event: event.into(),
            data: data.into(),
        }
    }

    #[test]
    fn queues_set_the_bars_and_transitions_count_retries_parks_and_replays() {
        let mut b = Board::default();
        b.apply(&ev(
            "queues",
            r#"{"at": "x", "depths": [
                {"kind": "trawl", "priority": "normal", "state": "done", "count": 3},
                {"kind": "trawl", "priority": "urgent", "state": "done", "count": 1},
                {"kind": "trawl", "priority": "normal", "state": "queued", "count": 4},
                {"kind": "assay", "priority": "normal", "state": "failed", "count": 2}]}"#,
        ));
        assert_eq!(b.stages[&Kind::Trawl].progress(), (4, 8));
        assert_eq!(b.stages[&Kind::Assay].progress(), (2, 2));
        assert_eq!(b.totals(), (6, 10));
        for (from, to) in [
            ("leased", "queued"),
            ("leased", "needs_subtool"),
            ("needs_subtool", "queued"),
            ("leased", "leased"),
            ("queued", "leased"),
        ] {
            b.apply(&ev(
                "transition",
                &format!(r#"{{"seq": 41, "subject": "item", "id": "0192-abcdef12", "kind": "sextant", "from": "{from}", "to": "{to}"}}"#),
            ));
        }
        let s = &b.stages[&Kind::Sextant];
        assert_eq!((s.retries, s.parks, s.replays, s.re_leases), (1, 1, 1, 1));
        assert_eq!((b.seq, b.transitions), (41, 5));
        assert_eq!(b.recent.len(), 4);
        assert_eq!(
            b.recent[1],
            "sextant     …abcdef12 parked: needs a sub-tool"
        );
        // A new snapshot replaces the old one.
        b.apply(&ev(
            "queues",
            r#"{"depths": [{"kind": "trawl", "priority": "normal", "state": "done", "count": 9}]}"#,
        ));
        assert_eq!(b.totals(), (9, 9));
    }

    #[test]
    fn the_screen_has_a_line_per_stage_with_a_proportional_bar() {
        let mut b = Board::default();
        b.apply(&ev(
            "queues",
            r#"{"depths": [{"kind": "trawl", "priority": "normal", "state": "done", "count": 1},
                           {"kind": "trawl", "priority": "normal", "state": "leased", "count": 1}]}"#,
        ));
        let lines = b.render("head");
        assert_eq!(lines.len(), 2 + 10 + 1 + RECENT);
        assert_eq!(lines[0], "head");
        let trawl = &lines[2];
        assert!(trawl.starts_with("trawl       ["), "{trawl}");
        assert_eq!(trawl.matches('█').count(), BAR / 2);
        assert!(trawl.contains("1/2"), "{trawl}");
        assert_eq!(lines[11].matches('█').count(), 0, "{}", lines[11]);
    }
}
