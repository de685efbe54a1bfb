//! A process-wide list of values under numbers: the live layers a stacked layer's give-back
//! finds by number (see `stack`).
//!
//! # Locks
//!
//! One mutex holds the list and the next number, taken to add an entry, to remove one and to
//! look one up; a lookup happens only on a give-back (a request that a layer inside this one
//! denied), never on an admitted request. A poisoned lock is used as it is: every critical
//! section leaves the list whole (a `push`, a `retain`, a search).

use std::sync::{Mutex, MutexGuard, PoisonError};

/// Values of type `T` under numbers unique for the process's life (never reused).
pub(crate) struct Registry<T> {
    inner: Mutex<Entries<T>>,
}

/// The list, and the number the next entry gets.
struct Entries<T> {
    next: u64,
    list: Vec<(u64, T)>,
}

impl<T: Clone> Registry<T> {
    /// An empty list, for a `static`.
    pub(crate) const fn new() -> Self {
        Self {
            inner: Mutex::new(Entries {
                next: 1,
                list: Vec::new(),
            }),
        }
    }

    /// Adds `value` under a new number, and returns the number.
    pub(crate) fn insert(&self, value: T) -> u64 {
        let mut e = self.lock();
        let id = e.next;
        e.next += 1;
        e.list.push((id, value));
        id
    }

    /// Removes the value under `id` (nothing if there is none).
    pub(crate) fn remove(&self, id: u64) {
        self.lock().list.retain(|(i, _)| *i != id);
    }

    /// A copy of the value under `id`, if there is one.
    pub(crate) fn get(&self, id: u64) -> Option<T> {
        self.lock()
            .list
            .iter()
            .find(|(i, _)| *i == id)
            .map(|(_, v)| v.clone())
    }

    fn lock(&self) -> MutexGuard<'_, Entries<T>> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
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
