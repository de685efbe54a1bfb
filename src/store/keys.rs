//! The keyed limiter's store: one of the two fingerprint tables or the exact map, and the
//! operations that are the same whatever the algorithm (count, read, update a held key,
//! sweep). Inserting a new key involves the limiter's policy (the fresh word, the cap, what to
//! do when full) and stays with the limiter (`limiter/keyed/lifecycle.rs`).

use std::borrow::Borrow;
use std::hash::Hash;

use crate::sync::cell::Cell;

use super::exact::ExactMap;
use super::grow_table::GrowTable;
use super::table::Table;
use super::Hasher;

/// Where a keyed limiter keeps its cells.
pub(crate) enum Store<K> {
    /// Exact keys in a sharded map: unbounded unless `max_keys` is set.
    Map(ExactMap<K, Cell>),
    /// Keys by fingerprint in a fixed-capacity lock-free table (see [`super::table`]): kept for
    /// `max_keys` with `fixed_capacity()` or `WhenFull::EvictNearestFresh`, whose one-key
    /// evictions need in-place removal.
    Table(Table, Hasher),
    /// Keys by fingerprint in the growing lock-free table (see [`super::grow_table`]): the
    /// default.
    Grow(GrowTable, Hasher),
}

/// Shards of the exact map. A sweep write-locks one shard at a time, so more shards mean shorter
/// pauses for the checks that land on the shard being swept: at a million keys, 256 shards hold
/// about 4 000 keys each (dashmap's default, four per core, would hold 125 000 each on two
/// cores; pause lengths in BENCHMARKS.md, "Figures moved out of the code"). Costs a few tens of
/// KiB.
const MAP_SHARDS: usize = 256;

impl<K: Hash + Eq> Store<K> {
    /// The exact map.
    pub(crate) fn map() -> Self {
        Store::Map(ExactMap::with_shards(MAP_SHARDS))
    }

    /// The fixed table, for `max_keys` keys.
    pub(crate) fn table(max_keys: usize) -> Self {
        Store::Table(Table::with_capacity(max_keys), Hasher::new())
    }

    /// The growing table, with an optional ceiling.
    pub(crate) fn grow(max_keys: Option<usize>) -> Self {
        Store::Grow(GrowTable::new(max_keys), Hasher::new())
    }

    /// Keys held.
    pub(crate) fn len(&self) -> usize {
        match self {
            Store::Table(table, _) => table.len(),
            Store::Grow(table, _) => table.len(),
            Store::Map(map) => map.len(),
        }
    }

    /// The word `key` holds; `None` if it is not held.
    pub(crate) fn get<Q>(&self, key: &Q) -> Option<u64>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        match self {
            // A miss is confirmed under the shard's lock: see `Table::get`.
            Store::Table(table, hasher) => table.get(crate::store::hash(hasher, key)),
            Store::Grow(table, hasher) => table.get(crate::store::hash(hasher, key)),
            Store::Map(map) => map.with(key, Cell::load),
        }
    }

    /// Applies `step` to `key`'s word if the key is held; `None` if it is not.
    pub(crate) fn update_existing<Q, R>(
        &self,
        key: &Q,
        step: impl Fn(u64) -> (R, Option<u64>),
    ) -> Option<R>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        match self {
            // A miss is confirmed under the shard's lock: see `Table::update_existing`.
            Store::Table(table, hasher) => {
                table.update_existing(crate::store::hash(hasher, key), step)
            }
            Store::Grow(table, hasher) => {
                table.update_existing(crate::store::hash(hasher, key), step)
            }
            Store::Map(map) => map.with(key, |cell| cell.update(step)),
        }
    }

    /// Drops every key whose word `is_idle`; returns how many.
    pub(crate) fn sweep(&self, is_idle: &impl Fn(u64) -> bool) -> usize {
        match self {
            Store::Table(table, _) => table.sweep(is_idle),
            Store::Grow(table, _) => table.sweep(is_idle),
            // The shard's write lock excludes every check on that shard, so no admission can
            // be in flight on a cell while it is judged idle and removed.
            Store::Map(map) => map.retain(|cell| !is_idle(cell.load())),
        }
    }
}
