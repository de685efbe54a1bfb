//! Throttling of the automatic idle-key sweeps that a full keyed store runs.

// Through the loom shim, so that loom models of a full store explore the gate too.
use super::{AtomicBool, AtomicU64, Ordering};

/// After a sweep, no automatic sweep for this long (limiter clock, ns): a map full of live keys
/// must not be swept on every miss.
const SWEEP_BACKOFF_NS: u64 = 10_000_000;

/// Lets at most one thread sweep at a time, and at most once per [`SWEEP_BACKOFF_NS`].
#[derive(Debug)]
pub(crate) struct SweepGate {
    sweeping: AtomicBool,
    /// Limiter-clock time of the last sweep, `u64::MAX` for never.
    last: AtomicU64,
}

impl SweepGate {
    pub(crate) fn new() -> Self {
        Self {
            sweeping: AtomicBool::new(false),
            last: AtomicU64::new(u64::MAX),
        }
    }

    /// Runs `sweep` if one is due at `now` and no other thread is sweeping.
    pub(crate) fn maybe_sweep(&self, now: u64, sweep: impl FnOnce()) {
        // Relaxed: the timestamp is a back-off hint; a stale value only delays or repeats a
        // sweep, which is harmless.
        let last = self.last.load(Ordering::Relaxed);
        let due = last == u64::MAX || now < last || now - last >= SWEEP_BACKOFF_NS;
        // Acquire here pairs with the Release store below so that one sweeper's end happens
        // before the next one's start; the map itself is ordered by its own shard locks.
        if due
            && self
                .sweeping
                .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
                .is_ok()
        {
            sweep();
            // Relaxed: the back-off hint, as its load above.
            self.last.store(now, Ordering::Relaxed);
            // Release: pairs with the next sweeper's Acquire (above).
            self.sweeping.store(false, Ordering::Release);
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn backs_off_between_sweeps() {
        let gate = SweepGate::new();
        let mut runs = 0;
        gate.maybe_sweep(100, || runs += 1);
        gate.maybe_sweep(100 + SWEEP_BACKOFF_NS - 1, || runs += 1);
        assert_eq!(runs, 1);
        gate.maybe_sweep(100 + SWEEP_BACKOFF_NS, || runs += 1);
        assert_eq!(runs, 2);
        // A clock that went backwards does not block sweeps forever.
        gate.maybe_sweep(5, || runs += 1);
        assert_eq!(runs, 3);
    }
}
