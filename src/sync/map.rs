//! The map behind the sliding log's store ([`SlidingLog`](crate::SlidingLog)): dashmap, or under
//! `cfg(loom)` a loom-visible stand-in with the part of dashmap's interface those stores call.
//!
//! The stores name the map `DashMap` and its entry `Entry` under both configurations, so the
//! code that looks keys up, inserts, updates and sweeps is the same source in the shipped
//! crate and in `loom-tests/`; only the type behind the name differs.

#[cfg(not(loom))]
pub(crate) use dashmap::mapref::entry::Entry;
#[cfg(not(loom))]
pub(crate) use dashmap::DashMap;

#[cfg(loom)]
pub(crate) use self::model::{Entry, ShardMap as DashMap};

/// The loom stand-in for dashmap.
///
/// # What it models
///
/// dashmap guards each shard (a `HashMap`) with a reader-writer lock, and the stores rely on
/// exactly that: a check holds the shard's *read* lock from its lookup until its cell's
/// compare-and-swap (or its log's mutex) is done, so a sweep, which removes keys under the
/// shard's *write* lock, can never remove a cell between a check's lookup and its update. The
/// stand-in is one such shard: a `HashMap` behind a `loom::sync::RwLock`, so loom schedules
/// and checks its lock acquisitions against the cells' atomics and the logs' mutexes:
///
/// - [`get`](ShardMap::get) takes the read lock and returns a guard that keeps it until it is
///   dropped (dashmap's `Ref`); the caller updates the cell (CAS) or locks the log through
///   that guard, as with dashmap;
/// - [`entry`](ShardMap::entry) takes the write lock and holds it in the returned entry: an
///   occupied entry is decided on under it (`Entry::Occupied(e) => e.get().update(..)`), a
///   vacant one inserted under it (`VacantEntry::insert`), the lock released when the entry
///   (or what `insert` returns) is dropped, as with dashmap. (A store's miss path decides on a
///   fresh state with no lock held, before `entry`; that is the stores' code, not the map's,
///   and runs unchanged here.)
/// - [`retain`](ShardMap::retain) takes the write lock and judges and removes every entry under
///   it, as dashmap's `retain` does shard by shard.
///
/// # What it does not model
///
/// - dashmap's own table and lock implementation (its raw RwLock, the `hashbrown` table inside
///   each shard): they are assumed to be a correct map behind a correct reader-writer lock;
/// - shard choice by hash: there is **one** shard, so every key of a model shares it (the case
///   where checks, inserts and sweeps on different keys contend; keys on different dashmap
///   shards meet only through the store's counters and sweep floor). A sweep moving from shard
///   to shard while checks run on the others is not explored, and the requested shard count is
///   ignored.
#[cfg(loom)]
mod model {
    use std::borrow::Borrow;
    use std::collections::HashMap;
    use std::hash::{BuildHasher, Hash};
    use std::ops::Deref;
    use std::sync::PoisonError;

    use loom::sync::{RwLock, RwLockReadGuard, RwLockWriteGuard};

    /// One dashmap shard under loom: see the module docs.
    #[derive(Debug)]
    pub(crate) struct ShardMap<K, V, S> {
        shard: RwLock<HashMap<K, V, S>>,
    }

    impl<K: Hash + Eq, V, S: BuildHasher> ShardMap<K, V, S> {
        /// An empty map hashing with `hasher`.
        pub(crate) fn with_hasher(hasher: S) -> Self {
            Self {
                shard: RwLock::new(HashMap::with_hasher(hasher)),
            }
        }

        /// The value of `key` behind the shard's read lock, held until the guard is dropped.
        pub(crate) fn get<'a, 'k, Q>(&'a self, key: &'k Q) -> Option<Ref<'a, 'k, K, V, S, Q>>
        where
            K: Borrow<Q>,
            Q: Hash + Eq + ?Sized,
        {
            // loom's lock never poisons; a panic in a model fails the model anyway.
            let guard = self.shard.read().unwrap_or_else(PoisonError::into_inner);
            guard.contains_key(key).then_some(Ref { guard, key })
        }

        /// `key`'s entry behind the shard's write lock, held until the entry is dropped.
        pub(crate) fn entry(&self, key: K) -> Entry<'_, K, V, S> {
            let guard = self.shard.write().unwrap_or_else(PoisonError::into_inner);
            if guard.contains_key(&key) {
                Entry::Occupied(OccupiedEntry { guard, key })
            } else {
                Entry::Vacant(VacantEntry { guard, key })
            }
        }

        /// Keeps the entries for which `keep` returns true, judging and removing them all under
        /// the shard's write lock.
        pub(crate) fn retain(&self, mut keep: impl FnMut(&K, &mut V) -> bool) {
            let mut guard = self.shard.write().unwrap_or_else(PoisonError::into_inner);
            guard.retain(|k, v| keep(k, v));
        }
    }

    /// A value found by [`ShardMap::get`], with the shard's read lock.
    pub(crate) struct Ref<'a, 'k, K, V, S, Q: ?Sized> {
        guard: RwLockReadGuard<'a, HashMap<K, V, S>>,
        key: &'k Q,
    }

    impl<K, V, S, Q> Deref for Ref<'_, '_, K, V, S, Q>
    where
        K: Hash + Eq + Borrow<Q>,
        S: BuildHasher,
        Q: Hash + Eq + ?Sized,
    {
        type Target = V;

        fn deref(&self) -> &V {
            // Found when the guard was taken, and nobody can remove it while it is held.
            self.guard
                .get(self.key)
                .expect("a key found under the read lock is still there")
        }
    }

    /// dashmap's `Entry`, under the shard's write lock.
    pub(crate) enum Entry<'a, K, V, S> {
        /// The key is in the map.
        Occupied(OccupiedEntry<'a, K, V, S>),
        /// It is not.
        Vacant(VacantEntry<'a, K, V, S>),
    }

    /// A key in the map, with the shard's write lock.
    pub(crate) struct OccupiedEntry<'a, K, V, S> {
        guard: RwLockWriteGuard<'a, HashMap<K, V, S>>,
        key: K,
    }

    impl<K: Hash + Eq, V, S: BuildHasher> OccupiedEntry<'_, K, V, S> {
        /// Its value.
        pub(crate) fn get(&self) -> &V {
            self.guard
                .get(&self.key)
                .expect("an occupied entry's key is in the map")
        }
    }

    /// A key not in the map, with the shard's write lock.
    pub(crate) struct VacantEntry<'a, K, V, S> {
        guard: RwLockWriteGuard<'a, HashMap<K, V, S>>,
        key: K,
    }

    impl<K: Hash + Eq, V, S: BuildHasher> VacantEntry<'_, K, V, S> {
        /// Inserts `value` and releases the lock (dashmap returns a guard that the stores drop
        /// at once).
        pub(crate) fn insert(self, value: V) {
            let Self { mut guard, key } = self;
            guard.insert(key, value);
        }
    }
}
