//! A striped GCRA limiter's shared time (see `limiter::striped`, "A clock that steps back"):
//! two words that every stripe's checks may read and that only rare paths write.
//!
//! - `floor`: the latest instant some stripe's state proves a check had reached. Every check
//!   reads it (one load of a line that nobody writes while the clock runs forward); a check that
//!   falls back from a refusing stripe raises it when a stripe proves a later time than the
//!   check's clock reading.
//! - `reserved`: the furthest instant a reservation may have scheduled a stripe to (`now` plus
//!   the reservation's ceiling, when that exceeds the stripe's own ceiling). A stripe state at
//!   or before it may come from such a reservation and proves no time; a later one does.
//!   Written by reservations only, before their compare-and-swap.
//!
//! # Orderings
//!
//! `floor` is a self-contained value: no other memory is published through it, and a reader
//! that sees a stale (smaller) value only decides at an earlier instant, which the striped
//! limiter allows (it is what a racing check with an older clock reading does anyway).
//! Relaxed suffices; `fetch_max` keeps the largest of racing raises.
//!
//! `reserved` must be seen by any fallback that reads a stripe word the reservation wrote (or
//! one written after it on the same stripe): otherwise the fallback would take the reservation's
//! far-ahead schedule for proof that the clock had reached it. The reservation raises
//! `reserved`, then a **release fence**, then its (relaxed) compare-and-swap on the stripe; the
//! fallback loads the stripe words (relaxed), then an **acquire fence**, then loads `reserved`.
//! If a loaded stripe word is the reservation's, or any later value in that word's modification
//! order (every later write to a stripe is a read-modify-write, so it continues the
//! reservation's release sequence), the fences synchronise and the load of `reserved` sees the
//! raise or a larger value (C++20 \[atomics.fences\]/2 and \[intro.races\] write-read coherence).

use crossbeam_utils::CachePadded;

use crate::sync::{fence, AtomicU64, Ordering};

/// The two shared words of a striped limiter, each on its own cache line.
#[derive(Debug)]
pub(crate) struct HighWater {
    floor: CachePadded<AtomicU64>,
    reserved: CachePadded<AtomicU64>,
}

impl HighWater {
    /// A limiter's shared time before any check: no floor, no reservation.
    pub(crate) fn new() -> Self {
        Self {
            floor: CachePadded::new(AtomicU64::new(0)),
            reserved: CachePadded::new(AtomicU64::new(0)),
        }
    }

    /// The latest instant proven so far (0 before any).
    #[inline(always)]
    pub(crate) fn floor(&self) -> u64 {
        // Relaxed: see the module docs (a stale floor only makes a decision earlier).
        self.floor.load(Ordering::Relaxed)
    }

    /// Raises the floor to `to` (keeps it if already later).
    #[inline]
    pub(crate) fn raise_floor(&self, to: u64) {
        // Relaxed: the floor publishes nothing but itself; fetch_max keeps racing raises'
        // largest value.
        self.floor.fetch_max(to, Ordering::Relaxed);
    }

    /// Announces that a reservation may schedule a stripe up to `until`; call it before the
    /// reservation's compare-and-swap.
    #[inline]
    pub(crate) fn announce_reservation(&self, until: u64) {
        // Relaxed RMW, ordered before the caller's later stripe write by the release fence.
        if self.reserved.load(Ordering::Relaxed) < until {
            self.reserved.fetch_max(until, Ordering::Relaxed);
        }
        // Release fence: pairs with the acquire fence in `reserved_after_loads` (module docs).
        fence(Ordering::Release);
    }

    /// The furthest instant announced by any reservation whose stripe write (or a later write
    /// to that stripe) the caller has already loaded; call it after loading the stripe words.
    #[inline]
    pub(crate) fn reserved_after_loads(&self) -> u64 {
        // Acquire fence: pairs with the release fence in `announce_reservation`.
        fence(Ordering::Acquire);
        self.reserved.load(Ordering::Relaxed)
    }
}
