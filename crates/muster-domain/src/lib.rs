//! Muster's domain: the rules, with no I/O, no async runtime and no clock reads.
//!
//! * [`kind`], [`priority`], [`principal`]: the vocabulary of the wire contract.
//! * [`item`]: the item state machine — which transitions are legal, from which state, by whom —
//!   and the fencing rules of leases. Every transition yields the ledger entry that records it.
//! * [`backoff`]: retry policy with exponential backoff and jitter (randomness passed in).
//! * [`routes`]: which kind may enqueue `next` items of which kinds.
//!
//! Time is always an argument. Randomness is always an argument.

pub mod backoff;
pub mod edit;
pub mod feed;
pub mod health;
pub mod item;
pub mod kind;
pub mod principal;
pub mod priority;
pub mod redact;
pub mod routes;

pub use backoff::RetryPolicy;
pub use item::{
    FailOutcome, Fence, Item, ItemId, ItemState, LeaseGrant, LeaseId, LeaseOutcome, LeaseRecord,
    LeaseResult, LeaseUse, OutcomeKind, TransitionError, is_image_digest, request_digest,
};
pub use kind::{Kind, UnknownKind};
pub use principal::Principal;
pub use priority::Priority;
pub use routes::Routes;
