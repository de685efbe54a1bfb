//! A striped GCRA limiter's record of time (see `limiter::striped`, "A clock that steps
//! back"): the latest instant any check decided at, and when each stripe last admitted.
//!
//! - [`HighWater`], one per limiter, on its own line. Every check decides at the later of its
//!   clock reading and the mark. By default an admitted check [`lift_lagged`](HighWater::lift_lagged)s
//!   the mark to the time it was admitted at when that is more than a lag ahead of it, so the
//!   mark stays within the lag of every admission that has ended, at the price of one write of
//!   this shared line per lag of clock time. With `strict_clock()` every admitted check
//!   [`lift`](HighWater::lift)s it (one cell's ceiling exactly under any clock; a write per
//!   admission on a precise clock).
//! - [`Stamp`]s, one per stripe, on the stripe's own cache line: the latest time the stripe
//!   admitted at (by default and with `relaxed_clock()`). Written after an admission, to the
//!   line the admission's compare-and-swap has just written, so it costs no coherence traffic
//!   of its own; read by the checks that fall back from a refusing stripe (they read every
//!   stripe's line anyway), which raise the mark to a stamp later than their reading. With
//!   `relaxed_clock()` only they raise the mark.
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
//!
//! The default mode's ceiling needs no more: its proof (in `limiter::striped`) uses that a
//! check whose load of the mark comes after an admission's `fetch_max` in the mark's
//! modification order reads that value or a later one (coherence, whatever the ordering), and
//! each stripe's own modification order; nothing is inferred across two words.

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

    /// Raises the mark to `to` if it is earlier: a load, and a `fetch_max` only when `to` is
    /// ahead of the mark.
    #[inline(always)]
    pub(crate) fn lift(&self, to: u64) {
        // Relaxed load: a stale (smaller) mark only sends this call to the `fetch_max`.
        if to > self.0.load(Ordering::Relaxed) {
            self.raise(to);
        }
    }

    /// Raises the mark to `to` if `to` is more than `lag` ahead of it: afterwards the mark is
    /// at least `to - lag`. A load, and a `fetch_max` about once per `lag` of clock time.
    #[inline(always)]
    pub(crate) fn lift_lagged(&self, to: u64, lag: u64) {
        // Relaxed load: the mark only grows, so the value read (or a later one) stays at least
        // `to - lag` when this skips the write; a stale (smaller) value only sends this call to
        // the `fetch_max`.
        if to > self.0.load(Ordering::Relaxed).saturating_add(lag) {
            self.raise(to);
        }
    }

    /// Raises the mark to `to` (keeps it if already later); returns the mark then.
    #[inline]
    pub(crate) fn raise(&self, to: u64) -> u64 {
        #[cfg(all(test, not(loom)))]
        crate::sync::counts::bump(crate::sync::counts::Event::Raise);
        // Relaxed: the mark publishes nothing but itself; fetch_max keeps racing raises'
        // largest value.
        self.0.fetch_max(to, Ordering::Relaxed).max(to)
    }
}
