//! A striped GCRA limiter's record of time (see `limiter::striped`, "A clock that steps
//! back"): when each stripe last admitted, and the latest instant a check has found proven.
//!
//! - [`Stamp`], one per stripe, on the stripe's own cache line: the latest time the stripe
//!   admitted at. Written after an admission, to the line the admission's compare-and-swap has
//!   just written, so it costs no coherence traffic of its own; read by the checks that fall
//!   back from a refusing stripe (they read every stripe's line anyway).
//! - [`HighWater`], one per limiter, on its own line: the latest stamp a falling-back check
//!   found later than its own clock reading. Every check reads it; only such a check writes it,
//!   so while the clock runs forward nobody writes it and it stays in every core's cache.
//!
//! # Orderings
//!
//! Both words are self-contained values: no other memory is published through them, and a
//! reader that sees an older (smaller) value only decides at an earlier instant, which is what
//! a racing check with an older clock reading does anyway. Relaxed suffices.
//!
//! A stamp is raised by a load and a store, not a read-modify-write: two admissions on one
//! stripe racing to stamp may leave the earlier of their times. A stamp is therefore some
//! admission's time, at most the stripe's latest; never later than any time a check decided
//! at, which is all that "the limiter never runs ahead of its clock" needs. One thread's own
//! stamps are never lost (its store follows its load in program order). The high-water mark
//! keeps the largest of racing raises (`fetch_max`).

use crossbeam_utils::CachePadded;

use crate::sync::{AtomicU64, Ordering};

/// When a stripe last admitted (nanoseconds of the limiter's clock; 0 before any admission).
#[derive(Debug)]
pub(crate) struct Stamp(AtomicU64);

impl Stamp {
    /// No admission yet.
    pub(crate) fn new() -> Self {
        Self(AtomicU64::new(0))
    }

    /// The time recorded.
    #[inline(always)]
    pub(crate) fn get(&self) -> u64 {
        // Relaxed: see the module docs.
        self.0.load(Ordering::Relaxed)
    }

    /// Records an admission at `at`, unless a later one is recorded.
    #[inline(always)]
    pub(crate) fn raise(&self, at: u64) {
        // Relaxed load and store: see the module docs (a racing stamp may be lost, never one
        // of this thread's).
        if at > self.0.load(Ordering::Relaxed) {
            self.0.store(at, Ordering::Relaxed);
        }
    }
}

/// The latest instant a check of the limiter has found proven by a stripe's stamp.
#[derive(Debug)]
pub(crate) struct HighWater(CachePadded<AtomicU64>);

impl HighWater {
    /// Nothing proven yet.
    pub(crate) fn new() -> Self {
        Self(CachePadded::new(AtomicU64::new(0)))
    }

    /// The latest instant proven so far (0 before any).
    #[inline(always)]
    pub(crate) fn get(&self) -> u64 {
        // Relaxed: see the module docs (an older value only makes a decision earlier).
        self.0.load(Ordering::Relaxed)
    }

    /// Raises the mark to `to` (keeps it if already later); returns the mark then.
    #[inline]
    pub(crate) fn raise(&self, to: u64) -> u64 {
        // Relaxed: the mark publishes nothing but itself; fetch_max keeps racing raises'
        // largest value.
        self.0.fetch_max(to, Ordering::Relaxed).max(to)
    }
}
