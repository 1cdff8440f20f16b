//! Server-sent events as `muster watch` reads them: muster-domain's reader, the reading side of
//! the framing the server writes.

pub use muster_domain::feed::{SseBlock, SseEvent, SseReader};
