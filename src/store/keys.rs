//! The keyed limiter's store: one of the two fingerprint tables or the exact table, and the
//! operations that are the same whatever the algorithm (count, read, update a held key,
//! sweep). Inserting a new key involves the limiter's policy (the fresh word, the cap, what to
//! do when full) and stays with the limiter (`limiter/keyed/lifecycle.rs`).

use std::borrow::Borrow;
use std::hash::Hash;

use crate::sync::grow::NewColumn;

use super::grow_table::{ByFingerprint, Exact, GrowTable};
use super::table::Table;
use super::Hasher;

/// Where a keyed limiter keeps its cells.
pub(crate) enum Store<K> {
    /// Keys compared with `Eq` (`exact_keys()`): the growing table with each key kept beside
    /// its slot (see [`super::grow_table`]'s [`Exact`]), as lock-free on a hit as the default.
    Exact(GrowTable, Hasher, std::marker::PhantomData<fn() -> K>),
    /// Keys by fingerprint in a fixed-capacity lock-free table (see [`super::table`]): kept for
    /// `max_keys` with `fixed_capacity()` or `WhenFull::EvictNearestFresh`, whose one-key
    /// evictions need in-place removal.
    Table(Table, Hasher),
    /// Keys by fingerprint in the growing lock-free table (see [`super::grow_table`]): the
    /// default.
    Grow(GrowTable, Hasher),
}

impl<K: Hash + Eq + 'static> Store<K> {
    /// The exact table, with an optional ceiling; `column` makes its arrays' key columns.
    pub(crate) fn exact(max_keys: Option<usize>, column: NewColumn) -> Self {
        Store::Exact(
            GrowTable::new(max_keys, Some(column)),
            Hasher::new(),
            std::marker::PhantomData,
        )
    }

    /// The fixed table, for `max_keys` keys.
    pub(crate) fn table(max_keys: usize) -> Self {
        Store::Table(Table::with_capacity(max_keys), Hasher::new())
    }

    /// The growing table, with an optional ceiling.
    pub(crate) fn grow(max_keys: Option<usize>) -> Self {
        Store::Grow(GrowTable::new(max_keys, None), Hasher::new())
    }

    /// Keys held.
    pub(crate) fn len(&self) -> usize {
        match self {
            Store::Table(table, _) => table.len(),
            Store::Grow(table, _) | Store::Exact(table, _, _) => table.len(),
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
            Store::Grow(table, hasher) => {
                table.get(crate::store::hash(hasher, key), &ByFingerprint)
            }
            Store::Exact(table, hasher, _) => {
                table.get(crate::store::hash(hasher, key), &Exact::<K, Q>::lookup(key))
            }
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
                table.update_existing(crate::store::hash(hasher, key), &ByFingerprint, step)
            }
            Store::Exact(table, hasher, _) => table.update_existing(
                crate::store::hash(hasher, key),
                &Exact::<K, Q>::lookup(key),
                step,
            ),
        }
    }

    /// Drops every key whose word `is_idle`; returns how many.
    pub(crate) fn sweep(&self, is_idle: &impl Fn(u64) -> bool) -> usize {
        match self {
            Store::Table(table, _) => table.sweep(is_idle),
            Store::Grow(table, _) | Store::Exact(table, _, _) => table.sweep(is_idle),
        }
    }
}
