//! The traits every per-key reference model implements, and `cancel`, which is written once
//! for all of them from the `cancel` docs.

use std::fmt::Debug;

use crate::expect::Expect;

/// A reference model of one algorithm: a decision per request, a state per key.
pub trait Model {
    type State: Clone + PartialEq + Debug;

    /// The state of a key never seen.
    fn fresh(&self) -> Self::State;

    /// The decision on `n` units at `now`; updates `st` when it admits `n > 0` (`n = 0` is a
    /// peek: it records nothing).
    fn step(&self, st: &mut Self::State, now: u64, n: u32) -> Expect;

    /// Whether `st` is equivalent to a fresh key at `now` and later (a sweep drops it).
    fn is_idle(&self, st: &Self::State, now: u64) -> bool;

    /// Stock: adds `units`, saturating at `u64::MAX` remaining; returns the new remaining.
    /// `None` for algorithms that have no stock.
    fn restock(&self, _st: &mut Self::State, _units: u64) -> Option<u64> {
        None
    }

    /// Stock: sets the remaining units; `None` for algorithms that have no stock.
    fn set_stock(&self, _st: &mut Self::State, _units: u64) -> Option<()> {
        None
    }
}

/// A model of an algorithm whose whole state is one cell (fixed window, sliding window, stock):
/// what the keyed store model (`keyed::KeyedModel`) and the refund and cancel
/// operations need on top of [`Model`].
pub trait CellModel: Model {
    /// The algorithm's name in `ConfigError::Unsupported`.
    const NAME: &'static str;

    /// The limit every decision reports.
    fn limit(&self) -> u32;

    /// A window-like length for the clock moves that are relative to it.
    fn window(&self) -> u64;

    /// The state a key not held starts from once a sweep at `swept > 0` has run.
    fn swept(&self, swept: u64) -> Self::State;

    /// Whether decisions depend on the time. A limiter that does not (stock) decides at time 0;
    /// the back-off between its automatic sweeps still runs on the clock.
    fn uses_time(&self) -> bool {
        true
    }

    /// The state as the cell stores it: two states are the same word iff their `word`s are
    /// equal (the models keep "never written" apart from an all-zero state; the cell does not).
    fn word(&self, st: &Self::State) -> Self::State;

    /// `refund(n)` at `now`: gives back up to `n` units, never beyond a fresh key's budget
    /// (stock: adds them). Returns whether anything was given back.
    fn refund(&self, st: &mut Self::State, now: u64, n: u32) -> bool;

    /// Whether `st` counts nothing at `now` only because its count is zero in a window later
    /// than now's (a refund or cancel emptied it after the clock went back).
    fn zero_count_ahead(&self, _st: &Self::State, _now: u64) -> bool {
        false
    }

    /// The part of `cancel` for a state that no longer holds the word the admission wrote
    /// (`after`): gives back what is provably unspent of its `n` units. Returns whether
    /// anything was given back.
    fn uncount(&self, st: &mut Self::State, now: u64, n: u32, after: &Self::State) -> bool;
}

/// `cancel` on `st` (the current state of the reservation's key) at `now` (from the `cancel`
/// docs): nothing unless the reservation holds units and the state is not already idle (for
/// the time-based algorithms); if the cell still holds the word the admission wrote, it goes
/// back to the word before the admission, exactly; otherwise the algorithm gives back what it
/// can prove unspent. Returns whether anything was given back.
pub fn cancel<M: CellModel>(
    m: &M,
    st: &mut M::State,
    now: u64,
    n: u32,
    holds: bool,
    before: &M::State,
    after: &M::State,
) -> bool {
    if !holds {
        return false;
    }
    // A time-based state already as good as fresh has nothing left to give back (a key that
    // a sweep dropped is exactly such a state, and answers the same).
    if m.uses_time() && m.is_idle(st, now) {
        return false;
    }
    if m.word(st) == m.word(after) {
        *st = before.clone();
        return true;
    }
    m.uncount(st, now, n, after)
}
