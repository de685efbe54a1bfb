//! The kinds of key a growing table's probe compares: a fingerprint alone (the default store),
//! or the key itself kept beside the slots (the exact store).

use std::borrow::Borrow;
use std::marker::PhantomData;

use crate::sync::grow::Array;

/// How a probe tells its key from another key with the same fingerprint, and how an insert
/// records it: not at all in a table of fingerprints ([`ByFingerprint`]), by comparing the keys
/// kept beside the slots in the exact store ([`Exact`]).
pub(crate) trait SlotKey {
    /// Whether slot `i` of `array`, whose fingerprint is the key's, holds the key.
    fn is_in(&self, array: &Array, i: usize) -> bool;
    /// Records the key in EMPTY slot `i` of `array`, under the shard's lock, before the slot's
    /// fingerprint is published.
    fn put(&self, array: &Array, i: usize);
}

/// A key is its fingerprint (the default store: see [`crate::store::table`] for the collision
/// argument).
pub(crate) struct ByFingerprint;

impl SlotKey for ByFingerprint {
    #[inline(always)]
    fn is_in(&self, _: &Array, _: usize) -> bool {
        true
    }

    #[inline(always)]
    fn put(&self, _: &Array, _: usize) {}
}

/// A key compared with `Eq` against the key kept in the slot (the exact store, `exact_keys()`):
/// two keys with the same fingerprint take two slots of one probe run.
pub(crate) struct Exact<'q, K, Q: ?Sized> {
    key: &'q Q,
    /// Makes the owned key an insert keeps; `None` for a key that is only looked up.
    owned: Option<fn(&Q) -> K>,
    _key: PhantomData<fn() -> K>,
}

impl<'q, K, Q: ToOwned<Owned = K> + ?Sized> Exact<'q, K, Q> {
    /// `key`, looked up or inserted in a table of `K` keys.
    #[inline(always)]
    pub(crate) fn new(key: &'q Q) -> Self {
        Self {
            key,
            owned: Some(<Q as ToOwned>::to_owned),
            _key: PhantomData,
        }
    }
}

impl<'q, K, Q: ?Sized> Exact<'q, K, Q> {
    /// `key`, only looked up (a read, an update of a held key): never passed to an insert.
    #[inline(always)]
    pub(crate) fn lookup(key: &'q Q) -> Self {
        Self {
            key,
            owned: None,
            _key: PhantomData,
        }
    }
}

impl<K, Q> SlotKey for Exact<'_, K, Q>
where
    K: Borrow<Q> + 'static,
    Q: Eq + ?Sized,
{
    #[inline(always)]
    fn is_in(&self, array: &Array, i: usize) -> bool {
        // A slot whose fingerprint a reader saw has its key set (see `Keys`); `None` (never)
        // would only send the probe on past the slot.
        array
            .keys::<K>()
            .and_then(|keys| keys.get(i))
            .is_some_and(|k| k.borrow() == self.key)
    }

    fn put(&self, array: &Array, i: usize) {
        // Inserts are given keys made with `new`: the key is always owned and kept.
        debug_assert!(self.owned.is_some(), "an insert of a looked-up key");
        if let (Some(keys), Some(owned)) = (array.keys::<K>(), self.owned) {
            keys.set(i, owned(self.key));
        }
    }
}
