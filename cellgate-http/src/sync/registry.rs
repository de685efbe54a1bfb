//! A process-wide list of values under numbers: the live layers a stacked layer's give-back
//! finds by number (see `stack`).
//!
//! # Orderings and locks
//!
//! - The numbers come from one counter, added to with `Relaxed`: only their uniqueness matters
//!   (each `fetch_add` returns a different value whatever the ordering), and nothing is
//!   published through them.
//! - The list is behind one mutex, taken to add an entry, to remove one and to look one up; a
//!   lookup happens only on a give-back (a request that a layer inside this one denied), never
//!   on an admitted request. A poisoned lock is used as it is: every critical section leaves
//!   the list whole (a `push`, a `retain`, a search).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};

/// Values of type `T` under numbers unique for the process's life (never reused).
pub(crate) struct Registry<T> {
    next: AtomicU64,
    entries: Mutex<Vec<(u64, T)>>,
}

impl<T: Clone> Registry<T> {
    /// An empty list, for a `static`.
    pub(crate) const fn new() -> Self {
        Self {
            next: AtomicU64::new(1),
            entries: Mutex::new(Vec::new()),
        }
    }

    /// Adds `value` under a new number, and returns the number.
    pub(crate) fn insert(&self, value: T) -> u64 {
        // Relaxed: see the module docs (uniqueness only).
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        self.lock().push((id, value));
        id
    }

    /// Removes the value under `id` (nothing if there is none).
    pub(crate) fn remove(&self, id: u64) {
        self.lock().retain(|(i, _)| *i != id);
    }

    /// A copy of the value under `id`, if there is one.
    pub(crate) fn get(&self, id: u64) -> Option<T> {
        self.lock()
            .iter()
            .find(|(i, _)| *i == id)
            .map(|(_, v)| v.clone())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<(u64, T)>> {
        self.entries.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::Registry;

    #[test]
    fn numbers_are_unique_and_removal_forgets_only_its_own() {
        let r = Registry::new();
        let (a, b) = (r.insert("a"), r.insert("b"));
        assert_ne!(a, b);
        assert_eq!((r.get(a), r.get(b)), (Some("a"), Some("b")));
        r.remove(a);
        assert_eq!((r.get(a), r.get(b)), (None, Some("b")));
        // A removed number is not given out again.
        let c = r.insert("c");
        assert!(c != a && c != b);
    }
}
