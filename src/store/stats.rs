//! What a keyed store has done with its keys: the live counters and their snapshot.

use crate::sync::Counter;

/// A snapshot of a keyed store's counters, from [`KeyedLimiter::stats`](crate::KeyedLimiter::stats)
/// or [`SlidingLog::stats`](crate::SlidingLog::stats).
///
/// Each field is read on its own (relaxed), so a snapshot taken while other threads check is
/// not one instant's: each value was true at some moment during the call.
///
/// ```
/// use cellgate::{KeyedLimiter, Quota, WhenFull};
/// let l = KeyedLimiter::<u64>::gcra(Quota::per_second(1))
///     .max_keys(1)
///     .when_full(WhenFull::AdmitUntracked)
///     .build()?;
/// l.check(&1);
/// l.check(&2); // the store is full: decided, not stored
/// let s = l.stats();
/// assert_eq!((s.keys, s.untracked, s.refused), (1, 1, 0));
/// # Ok::<(), cellgate::ConfigError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct Stats {
    /// Keys held now.
    pub keys: usize,
    /// Requests for new keys denied because the store was full of live keys
    /// ([`WhenFull::DenyNew`](crate::WhenFull::DenyNew), [`WhenFull::EvictLight`](crate::WhenFull::EvictLight)
    /// with no light key to drop, and the sliding log).
    pub refused: u64,
    /// Keys dropped because their state was equivalent to a fresh key (lossless).
    pub evicted: u64,
    /// Live keys evicted to make room, under [`WhenFull::EvictLight`](crate::WhenFull::EvictLight)
    /// and [`WhenFull::EvictNearestFresh`](crate::WhenFull::EvictNearestFresh) (not counted in
    /// `evicted`).
    pub evicted_live: u64,
    /// Requests for new keys decided without storing the key, under
    /// [`WhenFull::AdmitUntracked`](crate::WhenFull::AdmitUntracked).
    pub untracked: u64,
}

/// The counters behind [`Stats`], kept by both keyed stores (the sliding log never evicts a
/// live key nor decides untracked: those stay 0 there).
#[derive(Debug)]
pub(crate) struct StoreCounters {
    pub(crate) refused: Counter,
    pub(crate) evicted: Counter,
    pub(crate) evicted_live: Counter,
    pub(crate) untracked: Counter,
}

impl StoreCounters {
    pub(crate) fn new() -> Self {
        Self {
            refused: Counter::new(0),
            evicted: Counter::new(0),
            evicted_live: Counter::new(0),
            untracked: Counter::new(0),
        }
    }

    /// The snapshot, with `keys` held.
    pub(crate) fn snapshot(&self, keys: usize) -> Stats {
        Stats {
            keys,
            refused: self.refused.get(),
            evicted: self.evicted.get(),
            evicted_live: self.evicted_live.get(),
            untracked: self.untracked.get(),
        }
    }
}
