//! Muster's domain: the rules, with no I/O, no async runtime and no clock reads.
//!
//! * [`kind`], [`priority`], [`principal`]: the vocabulary of the wire contract.
//! * [`item`]: the item state machine — which transitions are legal, from which state, by whom —
//!   and the fencing rules of leases. Every transition yields the ledger entry that records it.
//! * [`backoff`]: retry policy with exponential backoff and jitter (randomness passed in).
//! * [`routes`]: which kind may enqueue `next` items of which kinds.
//! * [`pause`]: a kind's pause state and the ledger entries of its changes.
//! * [`trace`]: W3C trace context, kept by an item so that its work is one trace.
//!
//! Time is always an argument. Randomness is always an argument.

/// `FromStr` and `Display` for a closed set of values each named by its `as_str`: parsing finds
/// the value of `$all` with that name, and answers `$unknown(text)` for any other text.
macro_rules! named_values {
    ($ty:ty, all: $all:expr, error: $err:ty = $unknown:expr) => {
        impl std::str::FromStr for $ty {
            type Err = $err;
            fn from_str(s: &str) -> Result<Self, Self::Err> {
                $all.into_iter()
                    .find(|value| value.as_str() == s)
                    .ok_or_else(|| $unknown(s))
            }
        }

        impl std::fmt::Display for $ty {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.as_str())
            }
        }
    };
}

pub mod backoff;
pub mod edit;
pub mod feed;
pub mod health;
pub mod item;
pub mod kind;
pub mod listing;
pub mod pause;
pub mod principal;
pub mod priority;
pub mod redact;
pub mod routes;
pub mod trace;

pub use backoff::RetryPolicy;
pub use item::{
    FailOutcome, Fence, Item, ItemId, ItemState, LeaseGrant, LeaseId, LeaseOutcome, LeaseRecord,
    LeaseResult, LeaseUse, OutcomeKind, TransitionError, is_image_digest, request_digest,
};
pub use kind::{Kind, UnknownKind};
pub use principal::Principal;
pub use priority::Priority;
pub use routes::Routes;
pub use trace::{SpanId, TraceContext, TraceId};
