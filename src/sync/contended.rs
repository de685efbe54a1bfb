//! A per-thread hint that this thread's keyed checks lately lost a compare-and-swap to another
//! thread (one hot key checked from several threads at once).
//!
//! A keyed check reads the clock once it has loaded its key's slot, so that the clock read's
//! latency overlaps the probe's loads (reading it first cost `probe table1k` about 17%). Under
//! contention that order is what hurts: the slot's line arrives to be read, and while the check
//! reads the clock and computes, another thread takes the line away, so the compare-and-swap
//! fails and the line comes again. A thread that met such a failure reads the clock before the
//! probe for its next [`HOLD`] checks: the line then stays for the few instructions between the
//! load and the compare-and-swap. Only when the clock is read changes (a few nanoseconds
//! earlier, within the same check), never how the check decides.

use std::cell::Cell;

/// How many checks after a lost compare-and-swap read the clock first.
pub(crate) const HOLD: u8 = 64;

std::thread_local! {
    /// Checks left to read the clock first (0: read it after the probe).
    static LEFT: Cell<u8> = const { Cell::new(0) };
}

/// Records that this thread's check lost a compare-and-swap of a keyed slot.
#[cold]
pub(crate) fn lost() {
    // A thread being torn down has no hint to keep.
    let _ = LEFT.try_with(|left| left.set(HOLD));
}

/// Whether this thread's next check should read the clock before its probe; counts the check.
#[inline(always)]
pub(crate) fn read_clock_first() -> bool {
    LEFT.try_with(|left| {
        let n = left.get();
        if n == 0 {
            return false;
        }
        left.set(n - 1);
        true
    })
    .unwrap_or(false)
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn a_lost_swap_makes_the_next_checks_read_the_clock_first() {
        assert!(!read_clock_first(), "a new thread starts without the hint");
        lost();
        for i in 0..HOLD {
            assert!(read_clock_first(), "check {i} after the loss");
        }
        assert!(!read_clock_first(), "the hint lasts {HOLD} checks");
    }
}
