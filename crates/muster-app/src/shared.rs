//! `Shared<T>`: a value that one task replaces whole and other tasks read now and then — the
//! node names in force (`nodes.rs`), a dependency's last answer (`dependency.rs`), the Logbook
//! schema's verdict (muster-pg).
//!
//! Invariant: a reader gets a clone of one whole value, never part of an old and part of a new
//! one, and holds the lock only for the clone or the swap; a writer that panicked leaves the last
//! value readable (a poisoned lock is read through), so one failed refresh does not take the
//! readers with it.
//!
//! Why it exists: each of those places would otherwise pick its own lock and its own answer to
//! poisoning; here it is decided once.

use std::sync::RwLock;

#[derive(Debug, Default)]
pub struct Shared<T>(RwLock<T>);

impl<T: Clone> Shared<T> {
    pub fn new(value: T) -> Self {
        Shared(RwLock::new(value))
    }

    pub fn get(&self) -> T {
        self.0.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Puts `value` in; answers the value it replaced.
    pub fn replace(&self, value: T) -> T {
        std::mem::replace(
            &mut *self.0.write().unwrap_or_else(|e| e.into_inner()),
            value,
        )
    }
}
