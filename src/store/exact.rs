//! The sliding log's store: keys compared with `Eq`, in a sharded map (a locked log per key),
//! with the count of keys held that a cap reads. (The keyed limiter's `exact_keys()` store is
//! the growing table with its keys beside the slots: [`super::grow_table`].)

use std::borrow::Borrow;
use std::hash::Hash;

// dashmap, or its loom stand-in under `cfg(loom)`: the same calls either way.
use crate::sync::map::{DashMap, Entry};
use crate::sync::Counter;

use super::Hasher;

/// Keys and their values in a sharded map, and how many are held.
pub(crate) struct ExactMap<K, V> {
    map: DashMap<K, V, Hasher>,
    /// Keys inserted minus keys removed: the cap reads this instead of locking every shard.
    held: Counter,
}

impl<K: Hash + Eq, V> ExactMap<K, V> {
    /// An empty map with dashmap's default number of shards.
    pub(crate) fn new() -> Self {
        Self {
            map: DashMap::with_hasher(Hasher::new()),
            held: Counter::new(0),
        }
    }

    /// Keys held: a snapshot, exceeded for a moment by inserts in flight.
    #[inline]
    pub(crate) fn len(&self) -> usize {
        // Relaxed: a snapshot count; no memory is published through it.
        self.held.get_usize()
    }

    /// `f` on `key`'s value, under its shard's read lock; `None` if the key is not held.
    #[inline(always)]
    pub(crate) fn with<Q, R>(&self, key: &Q, f: impl FnOnce(&V) -> R) -> Option<R>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        // A `match`, not `Option::map`: `f` is then called right here, in the caller's inlined
        // copy, where LLVM inlines it (through `map`'s closure it stayed a call: the exact
        // map's check grew by a sixth, see BENCHMARKS.md "Instruction counts").
        #[allow(clippy::manual_map)]
        match self.map.get(key) {
            Some(value) => Some(f(&value)),
            None => None,
        }
    }

    /// Inserts `value` for `key` and returns `inserted`, unless another thread inserted the key
    /// since the caller's lookup (then `present` decides on its value), or the map holds `cap`
    /// keys and `make_room` (run with no lock held) finds no room (then `None`). The cap is soft:
    /// threads inserting at the same moment may each pass it once.
    pub(crate) fn insert<Q, R>(
        &self,
        key: &Q,
        value: V,
        cap: usize,
        make_room: impl FnOnce() -> bool,
        present: impl FnOnce(&V) -> R,
        inserted: R,
    ) -> Option<R>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        if self.len() >= cap && !make_room() {
            return None;
        }
        Some(match self.map.entry(key.to_owned()) {
            Entry::Occupied(e) => present(e.get()),
            Entry::Vacant(e) => {
                e.insert(value);
                // Relaxed: `held` is a soft count for the cap and `len`.
                self.held.add(1);
                inserted
            }
        })
    }

    /// Drops every key whose value `keep` rejects; returns how many. Each shard is
    /// write-locked while it is swept, so no reader of a value is in flight while it is judged
    /// and removed.
    pub(crate) fn retain(&self, mut keep: impl FnMut(&V) -> bool) -> usize {
        let mut removed = 0usize;
        self.map.retain(|_, value| {
            let kept = keep(value);
            removed += usize::from(!kept);
            kept
        });
        // Relaxed: a count (see `held`).
        self.held.sub(removed as u64);
        removed
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::ExactMap;

    #[test]
    fn insert_respects_the_cap_and_a_present_key() {
        let map = ExactMap::<String, u32>::new();
        // Room: inserted, counted.
        assert_eq!(
            map.insert("a", 1, 1, || unreachable!(), |_| "present", "new"),
            Some("new")
        );
        assert_eq!(map.len(), 1);
        // At the cap, and no room made: nothing inserted.
        assert_eq!(map.insert("b", 2, 1, || false, |_| "present", "new"), None);
        assert_eq!((map.len(), map.with("b", |v| *v)), (1, None));
        // At the cap, room made: inserted.
        assert_eq!(
            map.insert("b", 2, 1, || true, |_| "present", "new"),
            Some("new")
        );
        // Present: decided on the value held, which is kept, and not counted again.
        assert_eq!(map.insert("a", 9, usize::MAX, || true, |v| *v, 0), Some(1));
        assert_eq!((map.len(), map.with("a", |v| *v)), (2, Some(1)));
    }

    #[test]
    fn retain_removes_and_counts() {
        let map = ExactMap::<u32, u32>::new();
        for k in 0..10 {
            map.insert(&k, k, usize::MAX, || true, |_| (), ());
        }
        assert_eq!(map.retain(|v| v % 2 == 0), 5);
        assert_eq!(map.len(), 5);
        assert_eq!(
            (map.with(&3, |v| *v), map.with(&4, |v| *v)),
            (None, Some(4))
        );
    }
}
