//! `ClientError`: every way a call can go wrong, with a stable `code()`.

/// An error of the worker client. Server answers never panic: anything unexpected becomes
/// [`ClientError::BadResponse`] or [`ClientError::UnexpectedStatus`].
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The lease was superseded or its item finished by another lease (409 `E_LEASE_LOST`).
    /// Final: a spooled delivery is removed.
    #[error("lease lost: {message}")]
    LeaseLost { message: String },
    /// The lease already finished with a different body (409 `E_CONFLICT`). Final.
    #[error("conflict: {message}")]
    Conflict { message: String },
    /// Any other 4xx except 401, 408 and 429 (`E_BAD_REQUEST`, `E_FORBIDDEN`, `E_NOT_FOUND`,
    /// `E_ROUTE`, `E_TOO_LARGE`, …). Final: resending the same body cannot succeed.
    #[error("rejected with {status} {}: {message}", code.as_deref().unwrap_or("(no code)"))]
    Rejected {
        status: u16,
        code: Option<String>,
        message: String,
    },
    /// 401 `E_UNAUTHENTICATED`. Retried for deliveries (a token problem is fixed by
    /// deployment, the work itself is still good).
    #[error("unauthenticated: {message}")]
    Unauthenticated { message: String },
    /// 408, 429 or 5xx (e.g. 503 `E_UNAVAILABLE`). Retried, no sooner than `retry_after`
    /// (the answer's `Retry-After` in seconds) when the server sent one.
    #[error("server unavailable ({status} {}): {message}", code.as_deref().unwrap_or("(no code)"))]
    Unavailable {
        status: u16,
        code: Option<String>,
        message: String,
        retry_after: Option<std::time::Duration>,
    },
    /// The connection failed (refused, reset, closed before the answer). Retried.
    #[error("transport: {0}")]
    Transport(String),
    /// No answer within the request timeout. Retried.
    #[error("request timed out")]
    Timeout,
    /// A status the contract never answers (1xx, 3xx, 2xx other than the expected one).
    /// Not retried; a spooled delivery stays in the spool for `redeliver_spool`.
    #[error("unexpected status {status}")]
    UnexpectedStatus { status: u16 },
    /// The expected status with a body that is not the contract's JSON. Not retried; a spooled
    /// delivery stays in the spool.
    #[error("bad response ({status}): {detail}")]
    BadResponse { status: u16, detail: String },
    /// The retry budget ([`crate::RetryPolicy::max_attempts`]) ran out; the delivery is still
    /// in the spool and `redeliver_spool` sends it again.
    #[error("undelivered after {attempts} attempts; still spooled: {last}")]
    Undelivered {
        attempts: u32,
        last: Box<ClientError>,
    },
    /// Reading or writing the spool directory failed.
    #[error("spool {path}: {source}")]
    Spool {
        path: std::path::PathBuf,
        source: std::io::Error,
    },
    /// A spool file that is not a spooled delivery; it was renamed to `*.corrupt`.
    #[error("corrupt spool file {path}: {detail}")]
    SpoolCorrupt {
        path: std::path::PathBuf,
        detail: String,
    },
    /// A bad argument (base URL, token, lease id).
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
}

impl ClientError {
    /// A stable code for logs and metrics.
    pub fn code(&self) -> &'static str {
        match self {
            ClientError::LeaseLost { .. } => "E_LEASE_LOST",
            ClientError::Conflict { .. } => "E_CONFLICT",
            ClientError::Rejected { .. } => "E_REJECTED",
            ClientError::Unauthenticated { .. } => "E_UNAUTHENTICATED",
            ClientError::Unavailable { .. } => "E_UNAVAILABLE",
            ClientError::Transport(_) => "E_TRANSPORT",
            ClientError::Timeout => "E_TIMEOUT",
            ClientError::UnexpectedStatus { .. } => "E_UNEXPECTED_STATUS",
            ClientError::BadResponse { .. } => "E_BAD_RESPONSE",
            ClientError::Undelivered { .. } => "E_UNDELIVERED",
            ClientError::Spool { .. } => "E_SPOOL",
            ClientError::SpoolCorrupt { .. } => "E_SPOOL_CORRUPT",
            ClientError::InvalidArgument(_) => "E_INVALID_ARGUMENT",
        }
    }

    /// A final answer: the server decided, resending the same delivery cannot change it. The
    /// spool file is removed.
    pub fn is_final(&self) -> bool {
        matches!(
            self,
            ClientError::LeaseLost { .. }
                | ClientError::Conflict { .. }
                | ClientError::Rejected { .. }
        )
    }

    /// A transient failure: deliveries retry it with backoff.
    pub fn is_retryable(&self) -> bool {
        matches!(
            self,
            ClientError::Unauthenticated { .. }
                | ClientError::Unavailable { .. }
                | ClientError::Transport(_)
                | ClientError::Timeout
        )
    }

    /// How long the server asked to wait before trying again (`Retry-After`), if it did.
    pub fn retry_after(&self) -> Option<std::time::Duration> {
        match self {
            ClientError::Unavailable { retry_after, .. } => *retry_after,
            _ => None,
        }
    }

    /// Maps a non-success answer (status, raw body, `Retry-After`) to an error; never panics.
    pub(crate) fn from_answer(
        status: u16,
        body: &[u8],
        retry_after: Option<std::time::Duration>,
    ) -> ClientError {
        #[derive(serde::Deserialize)]
        struct Envelope {
            error: Inner,
        }
        #[derive(serde::Deserialize)]
        struct Inner {
            code: Option<String>,
            message: Option<String>,
        }
        let (code, message) = match serde_json::from_slice::<Envelope>(body) {
            Ok(e) => (e.error.code, e.error.message.unwrap_or_default()),
            Err(_) => (
                None,
                String::from_utf8_lossy(body).chars().take(200).collect(),
            ),
        };
        match (status, code.as_deref()) {
            (409, Some("E_LEASE_LOST")) => ClientError::LeaseLost { message },
            (409, Some("E_CONFLICT")) => ClientError::Conflict { message },
            (401, _) => ClientError::Unauthenticated { message },
            (408 | 429 | 500..=599, _) => ClientError::Unavailable {
                status,
                code,
                message,
                retry_after,
            },
            (400..=499, _) => ClientError::Rejected {
                status,
                code,
                message,
            },
            _ => ClientError::UnexpectedStatus { status },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lease_lost_and_conflict_are_final_and_keep_their_codes() {
        let lost = ClientError::from_answer(
            409,
            br#"{"error":{"code":"E_LEASE_LOST","message":"x"}}"#,
            None,
        );
        assert_eq!((lost.code(), lost.is_final()), ("E_LEASE_LOST", true));
        let conflict = ClientError::from_answer(
            409,
            br#"{"error":{"code":"E_CONFLICT","message":"x"}}"#,
            None,
        );
        assert_eq!((conflict.code(), conflict.is_final()), ("E_CONFLICT", true));
    }

    #[test]
    fn unavailable_timeouts_and_rate_limits_are_retried_not_final() {
        for status in [408, 429, 500, 502, 503] {
            let e = ClientError::from_answer(status, b"<html>oops</html>", None);
            assert_eq!(
                (e.code(), e.is_retryable(), e.is_final()),
                ("E_UNAVAILABLE", true, false)
            );
        }
        let e = ClientError::from_answer(401, b"", None);
        assert_eq!((e.code(), e.is_retryable()), ("E_UNAUTHENTICATED", true));
    }

    #[test]
    fn other_client_errors_are_final_rejections_even_with_garbage_bodies() {
        for status in [400, 403, 404, 413, 422] {
            let e = ClientError::from_answer(status, b"\xff\xfe not json", None);
            assert_eq!((e.code(), e.is_final()), ("E_REJECTED", true));
        }
    }

    #[test]
    fn statuses_outside_the_contract_are_unexpected_neither_final_nor_retried() {
        for status in [100, 201, 302, 304] {
            let e = ClientError::from_answer(status, b"", None);
            assert_eq!(
                (e.code(), e.is_final(), e.is_retryable()),
                ("E_UNEXPECTED_STATUS", false, false)
            );
        }
    }

    #[test]
    fn an_unavailable_answer_keeps_the_retry_after_it_came_with() {
        let e = ClientError::from_answer(
            503,
            br#"{"error":{"code":"E_UNAVAILABLE","message":"x"}}"#,
            Some(std::time::Duration::from_secs(1)),
        );
        assert_eq!(e.retry_after(), Some(std::time::Duration::from_secs(1)));
    }
}
