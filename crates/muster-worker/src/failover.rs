//! Several base URLs (replicas) with failover, and a hook that sees every answer.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use crate::ClientError;

/// One answer to one request, as [`WorkerClient::with_answer_hook`](crate::WorkerClient::with_answer_hook)
/// reports it: `op` is `lease`, `heartbeat`, `complete`, `fail`, `needs_subtool` or
/// `completions`; `answer` the status and body of a 2xx, or the error any other answer (or none)
/// is.
pub type AnswerHook = Arc<dyn Fn(&str, Result<(u16, &[u8]), &ClientError>) + Send + Sync>;

/// The base URLs a client sends to, the current one first; shared by the client's clones.
#[derive(Clone)]
pub(crate) struct Bases {
    urls: Arc<[String]>,
    current: Arc<AtomicUsize>,
    pub(crate) hook: Option<AnswerHook>,
}

impl std::fmt::Debug for Bases {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Bases")
            .field("urls", &self.urls)
            .field("current", &self.current)
            .field("hook", &self.hook.is_some())
            .finish()
    }
}

impl Bases {
    pub(crate) fn one(url: String) -> Bases {
        Bases {
            urls: Arc::from(vec![url]),
            current: Arc::default(),
            hook: None,
        }
    }

    pub(crate) fn many(urls: Vec<String>) -> Bases {
        Bases {
            urls: Arc::from(urls),
            current: Arc::default(),
            hook: None,
        }
    }

    /// The URL requests go to now.
    pub(crate) fn current(&self) -> &str {
        self.pick().1
    }

    /// The URL requests go to now and its turn, to hand back to [`answered`](Self::answered).
    pub(crate) fn pick(&self) -> (usize, &str) {
        let used = self.current.load(Ordering::Relaxed);
        (used, &self.urls[used % self.urls.len()])
    }

    /// Reports an answer to a request sent in turn `used` (from [`pick`](Self::pick)) to the
    /// hook, and moves to the next URL when it says that URL is gone (no answer, or `503`).
    /// Only the first of several requests failing on one URL moves on: the others find the
    /// turn already advanced and leave it. Whether it moved.
    pub(crate) fn answered(
        &self,
        path: &str,
        used: usize,
        answer: Result<(u16, &[u8]), &ClientError>,
    ) -> bool {
        if let Some(hook) = &self.hook {
            hook(op_of(path), answer);
        }
        let gone = match answer {
            Ok(_) => false,
            Err(e) => is_gone(e),
        };
        gone && self.urls.len() > 1
            && self
                .current
                .compare_exchange(
                    used,
                    used.wrapping_add(1),
                    Ordering::Relaxed,
                    Ordering::Relaxed,
                )
                .is_ok()
    }
}

/// No answer, or `503`: try another replica.
pub fn is_gone(e: &ClientError) -> bool {
    match e {
        ClientError::Transport(_) | ClientError::Timeout => true,
        ClientError::Unavailable { status, .. } => *status == 503,
        _ => false,
    }
}

/// The operation a request path is.
fn op_of(path: &str) -> &'static str {
    if path == "/v1/leases" {
        "lease"
    } else if path == "/v1/completions" {
        "completions"
    } else if path.ends_with("/heartbeat") {
        "heartbeat"
    } else if path.ends_with("/complete") {
        "complete"
    } else if path.ends_with("/fail") {
        "fail"
    } else if path.ends_with("/needs_subtool") {
        "needs_subtool"
    } else {
        "other"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_paths_name_their_operation() {
        let ops = [
            "/v1/leases",
            "/v1/completions",
            "/v1/leases/x/heartbeat",
            "/v1/leases/x/complete",
            "/v1/leases/x/fail",
            "/v1/leases/x/needs_subtool",
        ]
        .map(op_of);
        assert_eq!(
            ops,
            [
                "lease",
                "completions",
                "heartbeat",
                "complete",
                "fail",
                "needs_subtool"
            ]
        );
    }

    #[test]
    fn no_answer_or_a_503_moves_to_the_next_url_and_other_answers_do_not() {
        let bases = Bases::many(vec!["http://a".into(), "http://b".into()]);
        let busy = ClientError::from_answer(503, b"", None);
        let refused = ClientError::from_answer(500, b"", None);
        assert!(!bases.answered("/v1/leases", bases.pick().0, Ok((200, b""))));
        assert!(!bases.answered("/v1/leases", bases.pick().0, Err(&refused)));
        assert_eq!(bases.current(), "http://a");
        assert!(bases.answered("/v1/leases", bases.pick().0, Err(&busy)));
        assert_eq!(bases.current(), "http://b");
        assert!(bases.answered("/v1/leases", bases.pick().0, Err(&ClientError::Timeout)));
        assert_eq!(bases.current(), "http://a");
    }

    #[test]
    fn simultaneous_failures_on_one_url_move_to_the_next_url_once() {
        let bases = Bases::many(vec!["http://dead".into(), "http://live".into()]);
        let sent: Vec<usize> = (0..4).map(|_| bases.pick().0).collect();
        let moved: Vec<bool> = sent
            .iter()
            .map(|&used| bases.answered("/v1/leases", used, Err(&ClientError::Timeout)))
            .collect();
        assert_eq!(moved, [true, false, false, false]);
        assert_eq!(bases.current(), "http://live");
    }

    #[test]
    fn a_late_failure_from_the_previous_url_does_not_move_off_the_new_one() {
        let bases = Bases::many(vec!["http://dead".into(), "http://live".into()]);
        let (old, _) = bases.pick();
        assert!(bases.answered("/v1/leases", old, Err(&ClientError::Timeout)));
        let (new, url) = bases.pick();
        assert_eq!(url, "http://live");
        assert!(!bases.answered("/v1/leases", new, Ok((200, b""))));
        assert!(!bases.answered("/v1/leases", old, Err(&ClientError::Timeout)));
        assert_eq!(bases.current(), "http://live");
    }
}
