//! Every lock and atomic of this crate, in one place.
//!
//! The rest of the crate uses these types instead of `std::sync` primitives directly, so that
//! each ordering and each lock is chosen (and justified) once.

#[cfg(feature = "server")]
use std::collections::HashSet;
#[cfg(feature = "server")]
use std::hash::Hash;
use std::sync::atomic::{AtomicU64, Ordering};
#[cfg(feature = "server")]
use std::sync::RwLock;

/// A set that admits at most `cap` distinct members, then refuses new ones.
///
/// Used to bound the number of metric series a client can create through `detailed_metric`
/// descriptors, whose values come from requests.
#[cfg(feature = "server")]
pub(crate) struct BoundedSet<T> {
    cap: usize,
    members: RwLock<HashSet<T>>,
}

#[cfg(feature = "server")]
impl<T: Eq + Hash + Clone> BoundedSet<T> {
    /// An empty set admitting at most `cap` members.
    pub(crate) fn new(cap: usize) -> Self {
        BoundedSet {
            cap,
            members: RwLock::new(HashSet::new()),
        }
    }

    /// Whether `value` is (now) a member: true if it already was or there was room for it.
    pub(crate) fn admit(&self, value: &T) -> bool {
        // A poisoned lock only means a panic elsewhere while holding it; the set itself is
        // always consistent (insert is the only mutation), so its contents are still usable.
        {
            let members = self.members.read().unwrap_or_else(|e| e.into_inner());
            if members.contains(value) {
                return true;
            }
        }
        let mut members = self.members.write().unwrap_or_else(|e| e.into_inner());
        if members.contains(value) {
            return true;
        }
        if members.len() >= self.cap {
            return false;
        }
        members.insert(value.clone());
        true
    }
}

/// A running total that only grows (a fleet limit's backend errors, added when the limit is
/// retired so that the exported counter never goes down).
#[cfg(feature = "server")]
#[derive(Debug, Default)]
pub(crate) struct Total(AtomicU64);

#[cfg(feature = "server")]
impl Total {
    /// Adds `n`.
    pub(crate) fn add(&self, n: u64) {
        // Relaxed: a statistic read on its own; no other memory is published through it.
        self.0.fetch_add(n, Ordering::Relaxed);
    }

    /// The total so far.
    pub(crate) fn get(&self) -> u64 {
        // Relaxed: a scrape may miss an addition racing with it; the next one sees it.
        self.0.load(Ordering::Relaxed)
    }
}

/// Hands out connection ids (`CLIENT ID`, `HELLO`'s `id`): unique, increasing from 1.
#[derive(Debug)]
pub(crate) struct ClientIds(AtomicU64);

impl ClientIds {
    pub(crate) const fn new() -> Self {
        Self(AtomicU64::new(1))
    }

    pub(crate) fn next(&self) -> u64 {
        // Relaxed: an id only has to be unique, which the read-modify-write guarantees under
        // any ordering; no other memory is published with it.
        self.0.fetch_add(1, Ordering::Relaxed)
    }
}

#[cfg(all(test, feature = "server"))]
mod tests {
    use super::BoundedSet;

    #[test]
    fn bounded_set_refuses_past_its_cap_but_keeps_members() {
        let s: BoundedSet<&str> = BoundedSet::new(2);
        assert!(s.admit(&"a"));
        assert!(s.admit(&"b"));
        assert!(!s.admit(&"c"));
        assert!(s.admit(&"a"));
    }
}
