//! The clocks' shared words (`src/clock.rs`): the coarse clock's timestamp and its upkeep
//! thread's bookkeeping, and a [`ManualClock`](crate::clock::ManualClock)'s time.
//!
//! These are std atomics and a std mutex even under `cfg(loom)`: the coarse time lives in
//! statics (a static cannot hold a loom atomic), and no loom model drives a clock's own words
//! (the models hand the limiters their times). Every value here is self-contained: nothing else
//! is published through it, so every ordering is Relaxed, each with its reason below.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

/// The coarse time: nanoseconds since the coarse clock's base origin, refreshed by the upkeep
/// thread.
static COARSE_NS: AtomicU64 = AtomicU64::new(0);

/// The coarse time now.
#[inline]
pub(crate) fn coarse_ns() -> u64 {
    // Relaxed: the timestamp is self-contained; a slightly stale value is the whole point of
    // the coarse clock and is safe (an earlier time only makes decisions stricter).
    COARSE_NS.load(Ordering::Relaxed)
}

/// Raises the coarse time to `ns` (never lowers it).
pub(crate) fn raise_coarse_ns(ns: u64) {
    // Relaxed: readers need only the value; fetch_max keeps the coarse time from stepping back
    // if the upkeep thread migrates to a core whose counter is slightly behind.
    COARSE_NS.fetch_max(ns, Ordering::Relaxed);
}

/// The upkeep thread shared by every coarse clock: how many clocks need it, and its stop flag
/// and handle while it runs.
#[derive(Debug, Default)]
pub(crate) struct Upkeep {
    /// Coarse clocks alive.
    pub(crate) users: usize,
    /// The running thread, if any.
    pub(crate) running: Option<(StopFlag, std::thread::JoinHandle<()>)>,
}

static UPKEEP: Mutex<Upkeep> = Mutex::new(Upkeep {
    users: 0,
    running: None,
});

/// The upkeep bookkeeping, locked. A poisoned lock only means another thread panicked while
/// holding it; the count is still meaningful, so poisoning is ignored.
pub(crate) fn upkeep() -> MutexGuard<'static, Upkeep> {
    UPKEEP
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// A flag that tells a background thread to stop; clones share it.
#[derive(Debug, Clone, Default)]
pub(crate) struct StopFlag(Arc<AtomicBool>);

impl StopFlag {
    /// Tells the thread to stop.
    pub(crate) fn raise(&self) {
        // Relaxed: the flag carries no data; the join that follows orders the rest.
        self.0.store(true, Ordering::Relaxed);
    }

    /// Whether the thread was told to stop.
    pub(crate) fn is_raised(&self) -> bool {
        // Relaxed: as `raise`.
        self.0.load(Ordering::Relaxed)
    }
}

/// A manual clock's time, in nanoseconds; clones share it.
#[derive(Debug, Clone, Default)]
pub(crate) struct ManualTime(Arc<AtomicU64>);

impl ManualTime {
    /// The time now.
    #[inline]
    pub(crate) fn get(&self) -> u64 {
        // Relaxed: a reader needs the value only, not anything written before it.
        self.0.load(Ordering::Relaxed)
    }

    /// Sets the time (may go backwards).
    pub(crate) fn set(&self, ns: u64) {
        // Relaxed: see `get`.
        self.0.store(ns, Ordering::Relaxed);
    }

    /// Moves the time forward by `ns`, saturating.
    pub(crate) fn advance(&self, ns: u64) {
        // Relaxed: fetch_update keeps concurrent advances from losing each other; no other
        // memory is published through the time.
        let _ = self
            .0
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |v| {
                Some(v.saturating_add(ns))
            });
    }
}
