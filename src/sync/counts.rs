//! What the tests count on the calling thread: locks taken, per-thread cache renewals of a
//! growing table, writes of a striped limiter's high-water mark, reads of the time-stamp
//! counter by the default clock. Compiled for the crate's own tests only (not under loom); per
//! thread, so that tests running at once do not see each other's counts.

use std::cell::Cell;

/// A counted event.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Event {
    /// A [`Lock`](super::Lock) taken.
    Lock,
    /// A growing table's entry in a thread's cache renewed (`published::Published::refresh`).
    Refresh,
    /// A high-water mark written (`high_water::HighWater::raise`).
    Raise,
    /// The default clock read the time-stamp counter (`clock::QuantaClock::now` outside a
    /// reading it could share).
    CounterRead,
}

thread_local! {
    static COUNTS: [Cell<u64>; 4] = const { [Cell::new(0), Cell::new(0), Cell::new(0), Cell::new(0)] };
}

/// Counts one `event` on this thread.
pub(crate) fn bump(event: Event) {
    COUNTS.with(|c| c[event as usize].set(c[event as usize].get() + 1));
}

/// How many times `event` happened on this thread so far.
pub(crate) fn count(event: Event) -> u64 {
    COUNTS.with(|c| c[event as usize].get())
}
