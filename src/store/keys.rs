//! The keyed limiter's store: one of the two fingerprint tables or the exact table, and the
//! operations that are the same whatever the algorithm (count, read, update a held key,
//! sweep). Inserting a new key involves the limiter's policy (the fresh word, the cap, what to
//! do when full) and stays with the limiter (`limiter/keyed/lifecycle.rs`).

use std::borrow::Borrow;
use std::hash::Hash;

use crate::sync::grow::NewColumn;

use super::grow_table::{ByFingerprint, Exact, GrowTable};
use super::int_key::IntTables;
use super::table::Table;
use super::{Hasher, Located};

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
    /// Integer keys (`u64`, `i32`, ...), in the default store and with `exact_keys()`: the
    /// growing table by fingerprint, each key's fingerprint a bijection of it, so exact in
    /// both (see [`super::int_key`]).
    Int(IntTables),
}

impl<K: Hash + Eq + 'static> Store<K> {
    /// The exact table, with an optional ceiling; `column` makes its arrays' key columns.
    pub(crate) fn exact(max_keys: Option<usize>, column: NewColumn) -> Self {
        if let Some(tables) = IntTables::new::<K>(max_keys, false) {
            return Store::Int(tables);
        }
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
        match IntTables::new::<K>(max_keys, true) {
            Some(tables) => Store::Int(tables),
            None => Store::Grow(GrowTable::new(max_keys, None), Hasher::new()),
        }
    }

    /// Keys held.
    pub(crate) fn len(&self) -> usize {
        match self {
            Store::Table(table, _) => table.len(),
            Store::Grow(table, _) | Store::Exact(table, _, _) => table.len(),
            Store::Int(tables) => tables.len(),
        }
    }

    /// The word `key` holds; `None` if it is not held.
    pub(crate) fn get<Q>(&self, key: &Q) -> Option<u64>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        match self.locate(key) {
            // A miss is confirmed under the shard's lock: see `Table::get`.
            Located::Table(table, h) => table.get(h),
            Located::Fingerprint(table, h) => table.get(h, &ByFingerprint),
            Located::Exact(table, h) => table.get(h, &Exact::<K, Q>::lookup(key)),
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
        match self.locate(key) {
            // A miss is confirmed under the shard's lock: see `Table::update_existing`.
            Located::Table(table, h) => table.update_existing(h, step),
            Located::Fingerprint(table, h) => table.update_existing(h, &ByFingerprint, step),
            Located::Exact(table, h) => table.update_existing(h, &Exact::<K, Q>::lookup(key), step),
        }
    }

    /// Drops every key whose word `is_idle`; returns how many.
    pub(crate) fn sweep(&self, is_idle: &impl Fn(u64) -> bool) -> usize {
        match self {
            Store::Table(table, _) => table.sweep(is_idle),
            Store::Grow(table, _) | Store::Exact(table, _, _) => table.sweep(is_idle),
            Store::Int(t) => t.ints.sweep(is_idle) + t.rest.table.sweep(is_idle),
        }
    }
}
