//! What can go wrong, and the exit code each is answered with.

/// Exit codes of the operator commands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    /// 0: done.
    Ok = 0,
    /// 1: the server answered with an error (`{"error": {"code": "E_…"}}`: refused, not found,
    /// bad request) or an answer the contract does not allow.
    Api = 1,
    /// 2: the command line is wrong (clap's own usage errors exit 2 too).
    Usage = 2,
    /// 3: no answer: the server cannot be reached, timed out, or answered 503 `E_UNAVAILABLE`
    /// (Logbook down, the replica draining); trying again later may work.
    Unavailable = 3,
}

impl Exit {
    pub fn code(self) -> i32 {
        self as i32
    }
}

/// Why an operator command failed. No variant ever holds the token.
#[derive(Debug, thiserror::Error)]
pub enum OpsError {
    #[error("{0}")]
    Usage(String),
    /// A non-2xx answer with the contract's error body (or its status alone).
    #[error("the server answered {status} {code}: {message}")]
    Api {
        status: u16,
        code: String,
        message: String,
    },
    #[error("cannot reach {base}: {reason}")]
    Unreachable { base: String, reason: String },
    #[error("unexpected answer from the server: {0}")]
    Protocol(String),
    #[error("terminal: {0}")]
    Terminal(#[from] std::io::Error),
}

impl OpsError {
    /// The exit code this error is answered with.
    pub fn exit(&self) -> Exit {
        match self {
            OpsError::Usage(_) => Exit::Usage,
            OpsError::Api { status: 503, .. } | OpsError::Unreachable { .. } => Exit::Unavailable,
            OpsError::Api { .. } | OpsError::Protocol(_) | OpsError::Terminal(_) => Exit::Api,
        }
    }

    /// Whether trying the same call again later may succeed (the feed reconnects on these).
    pub fn is_transient(&self) -> bool {
        self.exit() == Exit::Unavailable
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn api(status: u16) -> OpsError {
        OpsError::Api {
            status,
            code: "E_X".into(),
            message: "m".into(),
        }
    }

    #[test]
    fn a_refusal_exits_1_and_an_unavailable_server_exits_3() {
        assert_eq!(api(403).exit().code(), 1);
        assert_eq!(api(404).exit().code(), 1);
        assert_eq!(api(503).exit().code(), 3);
        let down = OpsError::Unreachable {
            base: "http://127.0.0.1:1".into(),
            reason: "connection refused".into(),
        };
        assert_eq!(down.exit().code(), 3);
        assert_eq!(OpsError::Usage("x".into()).exit().code(), 2);
    }
}
