//! Statistics and bookkeeping counters, through the loom shim.

use super::{AtomicU64, Ordering};

/// A counter read and written with relaxed atomics.
///
/// Relaxed suffices everywhere it is used: a counter publishes no other memory, and every
/// decision taken on one (the key cap's "is there room") tolerates a value a few updates
/// stale; the stores it guards re-check under their own lock or compare-and-swap. Each
/// read-modify-write is still atomic, so no increment is ever lost.
#[derive(Debug)]
pub(crate) struct Counter(AtomicU64);

impl Counter {
    pub(crate) fn new(value: u64) -> Self {
        Self(AtomicU64::new(value))
    }

    /// The current value.
    #[inline]
    pub(crate) fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }

    /// [`get`](Self::get) as a `usize` (the key counts; they never exceed a `usize`).
    #[inline]
    pub(crate) fn get_usize(&self) -> usize {
        usize::try_from(self.get()).unwrap_or(usize::MAX)
    }

    #[inline]
    pub(crate) fn add(&self, n: u64) {
        // Relaxed: see the type (it publishes nothing; the read-modify-write loses no update).
        self.0.fetch_add(n, Ordering::Relaxed);
    }

    #[inline]
    pub(crate) fn sub(&self, n: u64) {
        // Relaxed: see the type (it publishes nothing; the read-modify-write loses no update).
        self.0.fetch_sub(n, Ordering::Relaxed);
    }

    /// Sets the value, for a counter with one writer at a time (a shard's count, written under
    /// its lock): a plain store, not a read-modify-write.
    #[inline]
    pub(crate) fn set(&self, n: u64) {
        // Relaxed: as every use of a counter (see the type); the writers' lock orders the
        // stores, so no update is lost.
        self.0.store(n, Ordering::Relaxed);
    }

    /// Raises the value to `n` if it is below.
    #[inline]
    pub(crate) fn raise_to(&self, n: u64) {
        self.0.fetch_max(n, Ordering::Relaxed);
    }
}

/// A number for the calling thread, distinct from the last few billion threads' (it wraps):
/// the striped limiter's choice of a first stripe.
pub(crate) fn next_ticket() -> u32 {
    // A std atomic even under loom: a static cannot hold a loom atomic, and which ticket a
    // thread gets only spreads threads over stripes; no outcome depends on it.
    static NEXT_TICKET: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    // Relaxed: only distinctness matters, which the atomic increment gives.
    NEXT_TICKET.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}
