//! The use cases' inputs ([`requests`]) and outputs ([`answers`]): plain data, no HTTP. Both
//! are re-exported here, so `muster_app::views::X` names either.

pub mod answers;
pub mod requests;

pub use answers::*;
pub use requests::*;
