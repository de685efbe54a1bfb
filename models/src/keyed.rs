//! The keyed store, modelled once for every one-cell algorithm: which keys are held, the sweep
//! floor, the key cap with its throttled automatic sweep, and the counters.
//!
//! From the `KeyedLimiter` docs ("Memory"):
//!
//! - a key is held once a write leaves it different from the state a new key starts from; peeks,
//!   denials and `n = 0` never create one;
//! - `evict_idle()` drops every key equivalent to a fresh key at the clock's time and raises the
//!   *sweep floor* to that time; a key not held starts from the algorithm's *swept state* for
//!   the floor: the most conservative state a key dropped then could have had, which decides
//!   exactly like a fresh key from the floor on;
//! - at `max_keys`, a new key that would be written triggers a sweep at most once every 10 ms of
//!   the limiter's clock (the time its decisions use); if the store is still full it is
//!   refused: denied, `remaining = 0`, no `retry_after`, `reset_after = 0`, counted in
//!   `refused()`; keys dropped by sweeps are counted in `evicted()`;
//! - `restock` / `set_stock` are operator actions: they create the key if needed, even at
//!   `max_keys`.

use std::collections::BTreeMap;
use std::fmt::Debug;

use crate::expect::Expect;
use crate::model::CellModel;

/// The keyed stores' minimum time between two automatic sweeps (limiter clock, ns). From the
/// `KeyedLimiter` docs: "at most one every 10 ms of the limiter's clock".
pub const SWEEP_BACKOFF_NS: u64 = 10_000_000;

/// Whether an automatic sweep is due at `now` after the last one at `last` (`u64::MAX`: never;
/// a clock that went back behind it does not block sweeps). Also says whether `now` is exactly
/// on the back-off's boundary, which the models count: the explicit branch gives libFuzzer a
/// coverage edge (and a comparison to solve) for that boundary.
pub fn sweep_due(last: u64, now: u64) -> (bool, bool) {
    if last == u64::MAX || now < last {
        return (true, false);
    }
    let since = now - last;
    (since >= SWEEP_BACKOFF_NS, since == SWEEP_BACKOFF_NS)
}

/// The keyed store, modelled: the held keys' states and the cap's bookkeeping.
#[derive(Debug)]
pub struct KeyedModel<S> {
    pub held: BTreeMap<u8, S>,
    pub max_keys: Option<usize>,
    pub refused: u64,
    pub evicted: u64,
    /// The sweep floor: the latest time of any sweep (0: none yet).
    pub swept: u64,
    /// Time of the last automatic sweep; `u64::MAX` for never (as the implementation encodes
    /// it, so a sweep at `u64::MAX` reads as "never" again).
    pub last_sweep: u64,
    /// Automatic sweeps exactly at the back-off boundary that dropped a key.
    pub sweeps_at_backoff: u64,
    /// Whether a new key that made room with an automatic sweep is decided again afterwards,
    /// on the state a key starts from after that sweep (the fingerprint tables and the exact
    /// store, which retry their insert from the top), or stays decided on the state from before
    /// it (a store that decides before it inserts, as the dashmap store once did). The decisions
    /// are the same (the swept state decides like the old one at the sweep's time and later);
    /// what a reservation records as the word before it, which a cancel may restore exactly,
    /// is not.
    pub decide_after_sweep: bool,
}

impl<S: Clone + PartialEq + Debug> KeyedModel<S> {
    pub fn new(max_keys: Option<usize>) -> Self {
        Self {
            held: BTreeMap::new(),
            max_keys,
            refused: 0,
            evicted: 0,
            swept: 0,
            last_sweep: u64::MAX,
            sweeps_at_backoff: 0,
            decide_after_sweep: false,
        }
    }

    /// The state a key that is not held starts from.
    pub fn start<M: CellModel<State = S>>(&self, m: &M) -> S {
        if self.swept == 0 {
            m.fresh()
        } else {
            m.swept(self.swept)
        }
    }

    pub fn evict_idle<M: CellModel<State = S>>(&mut self, m: &M, now: u64) -> usize {
        self.swept = self.swept.max(now);
        let before = self.held.len();
        self.held.retain(|_, st| !m.is_idle(st, now));
        let removed = before - self.held.len();
        self.evicted += removed as u64;
        removed
    }

    /// A check at the limiter's decision time `now` (0 for algorithms that ignore time), with
    /// the clock at `clock` (the sweep back-off runs on the clock even when decisions do not).
    /// Returns the decision, how many keys an automatic sweep dropped, and the key's state
    /// before and after the decision (what a reservation records).
    pub fn check_full<M: CellModel<State = S>>(
        &mut self,
        m: &M,
        k: u8,
        now: u64,
        clock: u64,
        n: u32,
    ) -> (Expect, usize, S, S) {
        if let Some(st) = self.held.get_mut(&k) {
            let before = st.clone();
            let d = m.step(st, now, n);
            return (d, 0, before, st.clone());
        }
        // The decision on the state a key not held starts from, and that state; `None` when the
        // decision leaves it unchanged (nothing to insert).
        let decide_fresh = |store: &Self| {
            let fresh = store.start(m);
            let mut st = fresh.clone();
            let d = m.step(&mut st, now, n);
            (d, (st != fresh).then_some(st), fresh)
        };
        let (mut d, written, mut fresh) = decide_fresh(self);
        let Some(mut st) = written else {
            return (d, 0, fresh.clone(), fresh);
        };
        let mut swept = 0;
        if let Some(max) = self.max_keys {
            if self.held.len() >= max {
                let (due, boundary) = sweep_due(self.last_sweep, clock);
                if due {
                    swept = self.evict_idle(m, now);
                    self.last_sweep = clock;
                    if boundary && swept > 0 {
                        self.sweeps_at_backoff += 1;
                    }
                }
                if self.held.len() >= max {
                    self.refused += 1;
                    return (Expect::refused(m.limit()), swept, fresh.clone(), fresh);
                }
                if due && self.decide_after_sweep {
                    let written;
                    (d, written, fresh) = decide_fresh(self);
                    match written {
                        Some(w) => st = w,
                        None => return (d, swept, fresh.clone(), fresh),
                    }
                }
            }
        }
        self.held.insert(k, st.clone());
        (d, swept, fresh, st)
    }

    /// `refund` / `cancel` on `k`: they create no key (a key not held is at its full budget, or
    /// lost what a reservation on it held), so nothing happens unless `k` is held.
    pub fn on_held(&mut self, k: u8, f: impl FnOnce(&mut S) -> bool) -> bool {
        self.held.get_mut(&k).is_some_and(f)
    }

    pub fn peek<M: CellModel<State = S>>(&self, m: &M, k: u8, now: u64) -> Expect {
        let mut st = self.held.get(&k).cloned().unwrap_or_else(|| self.start(m));
        m.step(&mut st, now, 0)
    }

    /// An operator action (`restock`, `set_stock`): creates the key whatever the bound, unless
    /// it leaves the state equal to the starting one.
    pub fn operator<M: CellModel<State = S>, R>(
        &mut self,
        m: &M,
        k: u8,
        f: impl FnOnce(&mut S) -> R,
    ) -> R {
        if let Some(st) = self.held.get_mut(&k) {
            return f(st);
        }
        let fresh = self.start(m);
        let mut st = fresh.clone();
        let r = f(&mut st);
        if st != fresh {
            self.held.insert(k, st);
        }
        r
    }
}
