//! A value one task writes and others read now and then (the node names in force, a
//! dependency's state): cloned out on read, replaced whole on write; a panicked writer leaves
//! the last value readable.

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
