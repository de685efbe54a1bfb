//! The bounded table's 16-byte slot: a fingerprint and a state word that change together.

use super::{AtomicU128, Ordering};

/// One slot of the fingerprint table, `fingerprint << 64 | state`.
///
/// Every access is relaxed, and that suffices: a slot is self-contained (the key's identity
/// and its whole state are one value, replaced as a whole), so no other memory is published
/// through it. Admissions are ordered by the atomicity of the 16-byte compare-and-swap alone,
/// as in [`Cell`](super::cell::Cell); structural changes (insert, removal, a compaction's
/// move) happen under the shard's writer [`Lock`](super::Lock), whose release/acquire orders
/// them for any thread that re-probes under that lock.
#[derive(Debug)]
pub(crate) struct Slot(AtomicU128);

impl Slot {
    pub(crate) fn new(value: u128) -> Self {
        Self(AtomicU128::new(value))
    }

    /// The slot's value.
    #[inline(always)]
    pub(crate) fn load(&self) -> u128 {
        self.0.load(Ordering::Relaxed)
    }

    /// Overwrites the slot (writers only, under the shard's lock).
    #[inline(always)]
    pub(crate) fn store(&self, value: u128) {
        self.0.store(value, Ordering::Relaxed)
    }

    /// Replaces `current` by `new` if the slot still holds exactly `current`; otherwise the
    /// value that is there. May fail spuriously (callers loop).
    #[inline(always)]
    pub(crate) fn compare_exchange_weak(&self, current: u128, new: u128) -> Result<u128, u128> {
        self.0
            .compare_exchange_weak(current, new, Ordering::Relaxed, Ordering::Relaxed)
    }
}
