//! Server-sent events: a byte stream into events, frames cut anywhere.

/// One server-sent event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SseEvent {
    pub id: Option<String>,
    pub event: String,
    pub data: String,
}

/// Splits a byte stream into events; also keeps the stream's `retry:` advice.
#[derive(Debug, Default)]
pub struct SseParser {
    buf: String,
    /// The reconnection delay the server asked for, in milliseconds.
    pub retry_ms: Option<u64>,
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
                    "retry" => {
                        if let Ok(ms) = value.parse() {
                            self.retry_ms = Some(ms);
                        }
                    }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_cut_anywhere_come_out_whole_and_comments_are_skipped() {
        let mut p = SseParser::default();
        assert_eq!(
            p.push(b": keep-alive\n\nretry: 1234\n\nid: 7\nevent: transi"),
            vec![]
        );
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
        assert_eq!(p.retry_ms, Some(1234));
    }
}
