//! Reference models of the window-family limiters (fixed window, sliding window, stock, sliding
//! log), shared by `tests/{fixed_window,sliding_window,stock,sliding_log}.rs`.
//!
//! The models are written from DESIGN.md's "Window semantics" and the module docs, in `u128`
//! with no packing and no saturation tricks. They are meant to be obviously correct, not fast:
//! `retry_after` is found by a binary search over the (monotone) predicate "the same request,
//! with no other request in between, would be admitted at time `t`" rather than in closed form,
//! so it is an independent check of the crate's closed forms.
//!
//! The module also holds the operation strategies and a driver that applies one sequence of
//! operations to a `ManualClock`, the limiters under test and the models, comparing every field
//! of every [`Decision`].
#![allow(dead_code)]

use std::collections::{HashMap, HashSet};
use std::fmt::Debug;
use std::time::Duration;

use cellgate::clock::ManualClock;
use cellgate::{ConfigError, Decision, KeyedLimiter, Limiter, SlidingLog};
use proptest::prelude::*;
use proptest::test_runner::TestCaseError;

/// `u64::MAX` as a `u128`.
pub const U64: u128 = u64::MAX as u128;

// ---------------------------------------------------------------------------------------------
// Expected decisions
// ---------------------------------------------------------------------------------------------

/// What a decision must say, in unbounded arithmetic.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Expect {
    pub allowed: bool,
    pub limit: u32,
    pub remaining: u128,
    /// The wait, when denied and waiting helps. Models give `None` for a wait that ends past
    /// `u64::MAX` ns (a time the clock cannot show).
    pub retry_ns: Option<u128>,
    pub reset_ns: u128,
}

impl Expect {
    /// Checks every field of `d` against `self`, through the representation a `Decision` has:
    /// `remaining` saturates at `u32::MAX`, `reset_after` at `u64::MAX` ns, and a wait of exactly
    /// `u64::MAX` ns reads `u64::MAX - 1` (the decision reserves `u64::MAX` for "no wait";
    /// documented in `Decision::deny`).
    pub fn check(&self, d: &Decision) -> Result<(), String> {
        let remaining = u32::try_from(self.remaining).unwrap_or(u32::MAX);
        let retry = self.retry_ns.map(|r| {
            assert!(r <= U64, "model bug: a wait past the horizon must be None");
            u64::try_from(r.min(U64 - 1)).unwrap()
        });
        let reset = u64::try_from(self.reset_ns.min(U64)).unwrap();
        let got = (
            d.is_allowed(),
            d.limit(),
            d.remaining(),
            d.retry_after_ns(),
            d.reset_after_ns(),
        );
        let want = (self.allowed, self.limit, remaining, retry, reset);
        if got != want {
            return Err(format!(
                "decision (allowed, limit, remaining, retry_ns, reset_ns): got {got:?}, want {want:?}"
            ));
        }
        if d.retry_after() != retry.map(Duration::from_nanos) {
            return Err(format!("retry_after {:?} != {retry:?} ns", d.retry_after()));
        }
        if d.reset_after() != Duration::from_nanos(reset) {
            return Err(format!("reset_after {:?} != {reset} ns", d.reset_after()));
        }
        Ok(())
    }
}

/// Every observable field of a decision, for comparing two limiters with each other.
pub fn fields(d: &Decision) -> (bool, u32, u32, Option<Duration>, Duration, Option<u64>, u64) {
    (
        d.is_allowed(),
        d.limit(),
        d.remaining(),
        d.retry_after(),
        d.reset_after(),
        d.retry_after_ns(),
        d.reset_after_ns(),
    )
}

/// The smallest `t` in `[lo, hi]` with `fits(t)`, for a predicate that is false below some
/// point and true from it on; `fits(hi)` must hold.
pub fn first_true(mut lo: u128, mut hi: u128, fits: impl Fn(u128) -> bool) -> u128 {
    assert!(
        fits(hi),
        "model bug: the predicate must hold at the upper bound"
    );
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        if fits(mid) {
            hi = mid;
        } else {
            lo = mid + 1;
        }
    }
    lo
}

/// The wait from `now` until absolute time `at`, or `None` when `at` is past what the clock can
/// show.
fn wait_until(at: u128, now: u64) -> Option<u128> {
    (at <= U64).then(|| at - u128::from(now))
}

// ---------------------------------------------------------------------------------------------
// Layout bounds (from the module docs), computed without the crate's helpers
// ---------------------------------------------------------------------------------------------

/// `I`: the number of bits of the largest window index a `u64` time can have, `u64::MAX / W`.
pub fn index_bits(window_ns: u64) -> u32 {
    let max_index = u128::from(u64::MAX / window_ns);
    let mut bits = 0;
    while (1u128 << bits) <= max_index {
        bits += 1;
    }
    bits
}

/// The largest limit a fixed window of `window_ns` holds: `2^(64 - I) - 1`.
pub fn fixed_max_limit(window_ns: u64) -> u128 {
    (1u128 << (64 - index_bits(window_ns))) - 1
}

/// The largest limit a sliding window of `window_ns` holds: `2^((64 - I) / 2) - 1`.
pub fn sliding_max_limit(window_ns: u64) -> u128 {
    (1u128 << ((64 - index_bits(window_ns)) / 2)) - 1
}

// ---------------------------------------------------------------------------------------------
// Models
// ---------------------------------------------------------------------------------------------

/// A reference model of one algorithm; a state per key.
pub trait Model {
    type State: Default + Clone + Debug;

    /// The decision on a request for `n` units at `now`; records the units in `st` when it
    /// admits them. `n = 0` is a peek: it records nothing.
    fn step(&self, st: &mut Self::State, now: u64, n: u32) -> Expect;

    /// Whether `st` is equivalent to a fresh key at `now` and later.
    fn is_idle(&self, st: &Self::State, now: u64) -> bool;

    /// Stock only: adds `units` (saturating at `u64::MAX`), returns the new remaining.
    fn restock(&self, _st: &mut Self::State, _units: u64) -> u64 {
        unreachable!("only a stock restocks")
    }

    /// Stock only: sets the remaining units.
    fn set_stock(&self, _st: &mut Self::State, _units: u64) {
        unreachable!("only a stock is set")
    }

    /// Whether the crate is known to decide differently from this model for this key from now
    /// on (see [`LogModel`]); such keys are no longer compared.
    fn diverged(&self, _st: &Self::State, _now: u64) -> bool {
        false
    }
}

/// Fixed window counter: state = (latest window index that admitted something, its count).
#[derive(Debug, Clone, Copy)]
pub struct FixedWindowModel {
    pub limit: u32,
    pub window: u64,
}

#[derive(Debug, Clone, Default)]
pub struct FixedState {
    latest: Option<(u128, u128)>,
}

impl FixedWindowModel {
    /// The window that applies at `now` and its count: a stored later window (the clock went
    /// backwards) keeps applying.
    fn applies(&self, st: &FixedState, now: u64) -> (u128, u128) {
        let k_now = u128::from(now) / u128::from(self.window);
        match st.latest {
            Some((k, count)) if k >= k_now => (k, count),
            _ => (k_now, 0),
        }
    }
}

impl Model for FixedWindowModel {
    type State = FixedState;

    fn step(&self, st: &mut FixedState, now: u64, n: u32) -> Expect {
        let (k, count) = self.applies(st, now);
        let limit = u128::from(self.limit);
        let n = u128::from(n);
        let end = (k + 1) * u128::from(self.window);
        let to_end = end - u128::from(now);
        if count + n <= limit {
            if n > 0 {
                st.latest = Some((k, count + n));
            }
            Expect {
                allowed: true,
                limit: self.limit,
                remaining: limit - count - n,
                retry_ns: None,
                reset_ns: if count + n > 0 { to_end } else { 0 },
            }
        } else {
            Expect {
                allowed: false,
                limit: self.limit,
                remaining: limit - count,
                // The next window starts at `end`.
                retry_ns: if n > limit {
                    None
                } else {
                    wait_until(end, now)
                },
                reset_ns: if count > 0 { to_end } else { 0 },
            }
        }
    }

    fn is_idle(&self, st: &FixedState, now: u64) -> bool {
        self.applies(st, now).1 == 0
    }
}

/// Sliding window counter: state = (window index of the latest admission, previous window's
/// count, that window's count).
#[derive(Debug, Clone, Copy)]
pub struct SlidingWindowModel {
    pub limit: u32,
    pub window: u64,
}

#[derive(Debug, Clone, Default)]
pub struct SlidingState {
    latest: Option<(u128, u128, u128)>,
}

/// The state as it applies at one instant.
#[derive(Debug, Clone, Copy)]
struct SwView {
    k: u128,
    e: u128,
    prev: u128,
    curr: u128,
}

impl SlidingWindowModel {
    /// The state at time `t` (any `u128`): rolled forward to `t`'s window, or, when the stored
    /// window is later than `t`'s (the clock went backwards), the stored window at its start.
    fn view(&self, st: &SlidingState, t: u128) -> SwView {
        let w = u128::from(self.window);
        let (k_t, e_t) = (t / w, t % w);
        match st.latest {
            None => SwView {
                k: k_t,
                e: e_t,
                prev: 0,
                curr: 0,
            },
            Some((k, p, c)) if k > k_t => SwView {
                k,
                e: 0,
                prev: p,
                curr: c,
            },
            Some((k, p, c)) => {
                let (prev, curr) = if k_t == k {
                    (p, c)
                } else if k_t == k + 1 {
                    (c, 0)
                } else {
                    (0, 0)
                };
                SwView {
                    k: k_t,
                    e: e_t,
                    prev,
                    curr,
                }
            }
        }
    }

    fn fits(&self, v: SwView, n: u128) -> bool {
        let w = u128::from(self.window);
        v.prev * (w - v.e) + (v.curr + n) * w <= u128::from(self.limit) * w
    }
}

impl Model for SlidingWindowModel {
    type State = SlidingState;

    fn step(&self, st: &mut SlidingState, now: u64, n: u32) -> Expect {
        let w = u128::from(self.window);
        let limit = u128::from(self.limit);
        let n = u128::from(n);
        let v = self.view(st, u128::from(now));
        assert!(v.prev <= limit && v.curr <= limit, "model invariant");
        let allowed = self.fits(v, n);
        let counted = if allowed { v.curr + n } else { v.curr };
        let remaining = ((limit * w - v.prev * (w - v.e)) / w).saturating_sub(counted);
        let reset_at = if counted > 0 {
            (v.k + 2) * w
        } else if v.prev > 0 {
            (v.k + 1) * w
        } else {
            u128::from(now)
        };
        let reset_ns = reset_at - u128::from(now);
        if allowed {
            if n > 0 {
                st.latest = Some((v.k, v.prev, counted));
            }
            return Expect {
                allowed,
                limit: self.limit,
                remaining,
                retry_ns: None,
                reset_ns,
            };
        }
        let retry_ns = if n > limit {
            None
        } else {
            // At the start of the window after next, neither window holds a count.
            let at = first_true(u128::from(now) + 1, (v.k + 2) * w, |t| {
                self.fits(self.view(st, t), n)
            });
            wait_until(at, now)
        };
        Expect {
            allowed,
            limit: self.limit,
            remaining,
            retry_ns,
            reset_ns,
        }
    }

    fn is_idle(&self, st: &SlidingState, now: u64) -> bool {
        let v = self.view(st, u128::from(now));
        v.prev == 0 && v.curr == 0
    }
}

/// Stock: remaining units, `None` while untouched (the configured stock).
#[derive(Debug, Clone, Copy)]
pub struct StockModel {
    pub stock: u32,
}

#[derive(Debug, Clone, Default)]
pub struct StockState {
    remaining: Option<u128>,
}

impl StockModel {
    fn remaining(&self, st: &StockState) -> u128 {
        st.remaining.unwrap_or(u128::from(self.stock))
    }

    /// 0 while the key holds exactly its configured stock, "never by itself" otherwise.
    fn reset(&self, remaining: u128) -> u128 {
        if remaining == u128::from(self.stock) {
            0
        } else {
            U64
        }
    }
}

impl Model for StockModel {
    type State = StockState;

    fn step(&self, st: &mut StockState, _now: u64, n: u32) -> Expect {
        let r = self.remaining(st);
        let n = u128::from(n);
        if n <= r {
            if n > 0 {
                st.remaining = Some(r - n);
            }
            Expect {
                allowed: true,
                limit: self.stock,
                remaining: r - n,
                retry_ns: None,
                reset_ns: self.reset(r - n),
            }
        } else {
            Expect {
                allowed: false,
                limit: self.stock,
                remaining: r,
                retry_ns: None,
                reset_ns: self.reset(r),
            }
        }
    }

    fn is_idle(&self, st: &StockState, _now: u64) -> bool {
        self.remaining(st) == u128::from(self.stock)
    }

    fn restock(&self, st: &mut StockState, units: u64) -> u64 {
        let r = (self.remaining(st) + u128::from(units)).min(U64);
        st.remaining = Some(r);
        u64::try_from(r).unwrap()
    }

    fn set_stock(&self, st: &mut StockState, units: u64) {
        st.remaining = Some(u128::from(units));
    }
}

/// Exact sliding log: every admission `(recorded time, units)`, never forgotten.
///
/// A unit recorded at `t` is live at `now` iff `t + W > now`; `n` is admitted iff live + `n` <=
/// limit, and recorded at `max(now, latest recorded time)`.
///
/// The crate drops entries once a step sees them expired. If the clock then goes back to before
/// their expiry, the crate no longer knows how many units were live then and counts the log as
/// full (stricter than this model, which still knows them). The model tracks which entries the
/// crate has dropped so that [`Model::diverged`] can tell the driver when a key has reached that
/// case (`backwards_time_after_an_expiry_regains_no_credit` in `tests/sliding_log.rs` shows it).
#[derive(Debug, Clone, Copy)]
pub struct LogModel {
    pub limit: u32,
    pub window: u64,
}

#[derive(Debug, Clone, Default)]
pub struct LogState {
    /// `(recorded at, units, dropped by the crate)`.
    entries: Vec<(u64, u32, bool)>,
}

impl LogModel {
    fn live(&self, st: &LogState, t: u128) -> u128 {
        st.entries
            .iter()
            .filter(|e| u128::from(e.0) + u128::from(self.window) > t)
            .map(|e| u128::from(e.1))
            .sum()
    }

    fn reset(&self, st: &LogState, now: u64) -> u128 {
        let newest = st.entries.iter().map(|e| e.0).max();
        newest.map_or(0, |t| {
            (u128::from(t) + u128::from(self.window)).saturating_sub(u128::from(now))
        })
    }

    /// What the crate does on every step: drop the entries expired at `now`.
    fn crate_drops(&self, st: &mut LogState, now: u64) {
        for e in &mut st.entries {
            if u128::from(e.0) + u128::from(self.window) <= u128::from(now) {
                e.2 = true;
            }
        }
    }
}

impl Model for LogModel {
    type State = LogState;

    fn step(&self, st: &mut LogState, now: u64, n: u32) -> Expect {
        let limit = u128::from(self.limit);
        let live = self.live(st, u128::from(now));
        let n128 = u128::from(n);
        self.crate_drops(st, now);
        if live + n128 <= limit {
            if n > 0 {
                let latest = st.entries.iter().map(|e| e.0).max().unwrap_or(0);
                st.entries.push((now.max(latest), n, false));
            }
            return Expect {
                allowed: true,
                limit: self.limit,
                remaining: limit - live - n128,
                retry_ns: None,
                reset_ns: self.reset(st, now),
            };
        }
        let retry_ns = if n128 > limit {
            None
        } else {
            // Once the newest entry has expired nothing is live.
            let hi = st
                .entries
                .iter()
                .map(|e| u128::from(e.0) + u128::from(self.window))
                .max()
                .unwrap();
            let at = first_true(u128::from(now) + 1, hi, |t| {
                self.live(st, t) + n128 <= limit
            });
            wait_until(at, now)
        };
        Expect {
            allowed: false,
            limit: self.limit,
            remaining: limit.saturating_sub(live),
            retry_ns,
            reset_ns: self.reset(st, now),
        }
    }

    fn is_idle(&self, st: &LogState, now: u64) -> bool {
        self.live(st, u128::from(now)) == 0 && self.reset(st, now) == 0
    }

    fn diverged(&self, st: &LogState, now: u64) -> bool {
        st.entries
            .iter()
            .any(|e| e.2 && u128::from(e.0) + u128::from(self.window) > u128::from(now))
    }
}

// ---------------------------------------------------------------------------------------------
// The limiters under test, behind one interface
// ---------------------------------------------------------------------------------------------

/// A limiter under test; keys are `u8` (a direct limiter ignores them).
pub trait Subject {
    fn keyed(&self) -> bool;
    fn decide(&self, key: u8, n: u32) -> Decision;
    fn look(&self, key: u8) -> Decision;
    fn held(&self) -> usize;
    fn sweep(&self) -> usize;
    fn add_stock(&self, key: u8, units: u64) -> Result<u64, ConfigError>;
    fn put_stock(&self, key: u8, units: u64) -> Result<(), ConfigError>;
}

impl Subject for KeyedLimiter<u8, ManualClock> {
    fn keyed(&self) -> bool {
        true
    }
    fn decide(&self, key: u8, n: u32) -> Decision {
        KeyedLimiter::check_n(self, &key, n)
    }
    fn look(&self, key: u8) -> Decision {
        KeyedLimiter::peek(self, &key)
    }
    fn held(&self) -> usize {
        KeyedLimiter::len(self)
    }
    fn sweep(&self) -> usize {
        KeyedLimiter::evict_idle(self)
    }
    fn add_stock(&self, key: u8, units: u64) -> Result<u64, ConfigError> {
        KeyedLimiter::restock(self, &key, units)
    }
    fn put_stock(&self, key: u8, units: u64) -> Result<(), ConfigError> {
        KeyedLimiter::set_stock(self, &key, units)
    }
}

impl Subject for Limiter<ManualClock> {
    fn keyed(&self) -> bool {
        false
    }
    fn decide(&self, _key: u8, n: u32) -> Decision {
        Limiter::check_n(self, n)
    }
    fn look(&self, _key: u8) -> Decision {
        Limiter::peek(self)
    }
    fn held(&self) -> usize {
        unreachable!("a direct limiter holds no keys")
    }
    fn sweep(&self) -> usize {
        unreachable!("a direct limiter holds no keys")
    }
    fn add_stock(&self, _key: u8, units: u64) -> Result<u64, ConfigError> {
        Limiter::restock(self, units)
    }
    fn put_stock(&self, _key: u8, units: u64) -> Result<(), ConfigError> {
        Limiter::set_stock(self, units)
    }
}

impl Subject for SlidingLog<u8, ManualClock> {
    fn keyed(&self) -> bool {
        true
    }
    fn decide(&self, key: u8, n: u32) -> Decision {
        SlidingLog::check_n(self, &key, n)
    }
    fn look(&self, key: u8) -> Decision {
        SlidingLog::peek(self, &key)
    }
    fn held(&self) -> usize {
        SlidingLog::len(self)
    }
    fn sweep(&self) -> usize {
        SlidingLog::evict_idle(self)
    }
    fn add_stock(&self, _key: u8, _units: u64) -> Result<u64, ConfigError> {
        unreachable!("a sliding log has no stock")
    }
    fn put_stock(&self, _key: u8, _units: u64) -> Result<(), ConfigError> {
        unreachable!("a sliding log has no stock")
    }
}

// ---------------------------------------------------------------------------------------------
// Operations
// ---------------------------------------------------------------------------------------------

/// How the clock moves before an action, relative to the window `W` and the current time `t`.
#[derive(Debug, Clone, Copy)]
pub enum TimeOp {
    Stay,
    /// Forward by `W * m / 1000`.
    Advance(u32),
    /// Forward by a few nanoseconds.
    Nudge(u8),
    /// To the start of the window `ahead` windows after `t`'s, or one ns before it (`ahead = 0`
    /// with `minus_one` is a step back).
    Boundary {
        ahead: u8,
        minus_one: bool,
    },
    /// Forward by more than 2^32 windows (saturating at `u64::MAX`).
    Leap(u32),
    /// Back by `W * m / 1000` (saturating at 0).
    Back(u32),
    /// Back to `t * m / 1000`.
    BackFar(u16),
    /// To any time, backwards or forwards.
    Jump(u64),
}

/// How many units a check asks for, relative to the limit.
#[derive(Debug, Clone, Copy)]
pub enum NSel {
    Small(u32),
    Limit,
    Half,
    LimitPlus(u32),
    Any(u32),
}

/// How many units a restock or `set_stock` names, relative to the configured stock.
#[derive(Debug, Clone, Copy)]
pub enum USel {
    Small(u64),
    Stock,
    StockPlus(u64),
    NearMax(u64),
    Any(u64),
}

#[derive(Debug, Clone, Copy)]
pub enum Action {
    Check { key: u8, n: NSel },
    Peek { key: u8 },
    Restock { key: u8, units: USel },
    SetStock { key: u8, units: USel },
}

#[derive(Debug, Clone, Copy)]
pub struct Step {
    pub time: TimeOp,
    pub action: Action,
}

impl TimeOp {
    /// The time after this op, from `t`, for a window of `w` ns.
    pub fn apply(self, t: u64, w: u64, monotone: bool) -> u64 {
        let (t128, w128) = (u128::from(t), u128::from(w));
        let clamp = |v: u128| u64::try_from(v.min(U64)).unwrap();
        let next = match self {
            TimeOp::Stay => t,
            TimeOp::Advance(m) => clamp(t128 + w128 * u128::from(m) / 1000),
            TimeOp::Nudge(d) => t.saturating_add(u64::from(d)),
            TimeOp::Boundary { ahead, minus_one } => {
                let start = (t128 / w128 + u128::from(ahead)) * w128;
                clamp(start.saturating_sub(u128::from(minus_one)))
            }
            TimeOp::Leap(x) => clamp(t128 + w128 * ((1u128 << 32) + u128::from(x)) + 7),
            TimeOp::Back(m) => clamp(t128.saturating_sub(w128 * u128::from(m) / 1000)),
            TimeOp::BackFar(m) => clamp(t128 * u128::from(m) / 1000),
            TimeOp::Jump(to) => to,
        };
        if monotone {
            next.max(t)
        } else {
            next
        }
    }
}

impl NSel {
    pub fn resolve(self, limit: u32) -> u32 {
        match self {
            NSel::Small(n) => n,
            NSel::Limit => limit,
            NSel::Half => limit / 2,
            NSel::LimitPlus(d) => limit.saturating_add(d),
            NSel::Any(n) => n,
        }
    }
}

impl USel {
    pub fn resolve(self, stock: u32) -> u64 {
        match self {
            USel::Small(u) => u,
            USel::Stock => u64::from(stock),
            USel::StockPlus(d) => u64::from(stock) + d,
            USel::NearMax(d) => u64::MAX - d,
            USel::Any(u) => u,
        }
    }
}

pub fn time_ops() -> impl Strategy<Value = TimeOp> {
    prop_oneof![
        6 => Just(TimeOp::Stay),
        4 => (0u32..=2500).prop_map(TimeOp::Advance),
        2 => (0u8..=3).prop_map(TimeOp::Nudge),
        3 => (0u8..=2, any::<bool>())
            .prop_map(|(ahead, minus_one)| TimeOp::Boundary { ahead, minus_one }),
        1 => (0u32..=1 << 20).prop_map(TimeOp::Leap),
        2 => (0u32..=2500).prop_map(TimeOp::Back),
        1 => (0u16..1000).prop_map(TimeOp::BackFar),
        1 => any::<u64>().prop_map(TimeOp::Jump),
    ]
}

pub fn n_sels() -> impl Strategy<Value = NSel> {
    prop_oneof![
        6 => (0u32..=3).prop_map(NSel::Small),
        2 => Just(NSel::Limit),
        1 => Just(NSel::Half),
        2 => (1u32..=3).prop_map(NSel::LimitPlus),
        1 => any::<u32>().prop_map(NSel::Any),
    ]
}

pub fn u_sels() -> impl Strategy<Value = USel> {
    prop_oneof![
        3 => (0u64..=5).prop_map(USel::Small),
        2 => Just(USel::Stock),
        1 => (1u64..=5).prop_map(USel::StockPlus),
        1 => (0u64..=5).prop_map(USel::NearMax),
        1 => any::<u64>().prop_map(USel::Any),
    ]
}

/// Keys 0..3: few enough that keys interact with their own history.
pub fn keys() -> impl Strategy<Value = u8> {
    0u8..3
}

/// Checks and peeks.
pub fn actions() -> impl Strategy<Value = Action> {
    prop_oneof![
        5 => (keys(), n_sels()).prop_map(|(key, n)| Action::Check { key, n }),
        1 => keys().prop_map(|key| Action::Peek { key }),
    ]
}

/// Checks, peeks, restocks and `set_stock`s.
pub fn stock_actions() -> impl Strategy<Value = Action> {
    prop_oneof![
        6 => (keys(), n_sels()).prop_map(|(key, n)| Action::Check { key, n }),
        1 => keys().prop_map(|key| Action::Peek { key }),
        1 => (keys(), u_sels()).prop_map(|(key, units)| Action::Restock { key, units }),
        1 => (keys(), u_sels()).prop_map(|(key, units)| Action::SetStock { key, units }),
    ]
}

pub fn steps_of(
    action: impl Strategy<Value = Action>,
    len: std::ops::RangeInclusive<usize>,
) -> impl Strategy<Value = Vec<Step>> {
    prop::collection::vec(
        (time_ops(), action).prop_map(|(time, action)| Step { time, action }),
        len,
    )
}

/// Window lengths covering every layout regime: a few ns (few count bits), ordinary lengths,
/// powers of two, and windows so long that the index has one or two bits.
pub fn windows() -> impl Strategy<Value = u64> {
    prop_oneof![
        2 => 2u64..=64,
        3 => 65u64..=1_000_000,
        2 => 1_000_000u64..=100_000_000_000,
        2 => (1u32..64).prop_map(|s| 1u64 << s),
        1 => (u64::MAX / 4)..=u64::MAX,
        1 => (1u64..=1000).prop_map(|m| u64::MAX / m),
    ]
}

/// A limit for a layout holding at most `max` (which must be at least 1): small ones, the
/// maximum itself, one below, and anything in between.
pub fn limits(max: u128) -> impl Strategy<Value = u32> {
    let max = u32::try_from(max.min(u128::from(u32::MAX))).unwrap();
    assert!(max >= 1);
    prop_oneof![
        3 => 1..=max.min(6),
        2 => Just(max),
        1 => Just((max - 1).max(1)),
        1 => 1..=max,
    ]
}

/// The property tests' configuration: `cases` (or `$PROPTEST_CASES` when set, for a longer
/// run), and no persistence file (integration tests have no `lib.rs` for it to sit beside).
pub fn config(cases: u32) -> ProptestConfig {
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(cases);
    ProptestConfig {
        failure_persistence: None,
        ..ProptestConfig::with_cases(cases)
    }
}

// ---------------------------------------------------------------------------------------------
// Drivers
// ---------------------------------------------------------------------------------------------

fn fail(step: usize, now: u64, what: &str, detail: String) -> TestCaseError {
    TestCaseError::fail(format!("step {step} at t={now}: {what}: {detail}"))
}

/// Applies `steps` to every subject (all reading `clock`) and to a model state per subject and
/// key, comparing every field of every decision (and every restock's result).
///
/// Returns how many `(subject, key)` pairs were dropped from the comparison because the model
/// reported [`Model::diverged`].
#[allow(clippy::too_many_arguments)]
pub fn drive<M: Model>(
    model: &M,
    window: u64,
    config: u32,
    clock: &ManualClock,
    subjects: &[&dyn Subject],
    steps: &[Step],
    monotone: bool,
) -> Result<usize, TestCaseError> {
    let mut states: Vec<HashMap<u8, M::State>> = vec![HashMap::new(); subjects.len()];
    let mut diverged: HashSet<(usize, u8)> = HashSet::new();
    let mut t = 0u64;
    clock.set_ns(t);
    for (i, step) in steps.iter().enumerate() {
        t = step.time.apply(t, window, monotone);
        clock.set_ns(t);
        for (s, subject) in subjects.iter().enumerate() {
            let (key, label) = match step.action {
                Action::Check { key, .. }
                | Action::Peek { key }
                | Action::Restock { key, .. }
                | Action::SetStock { key, .. } => {
                    let k = if subject.keyed() { key } else { 0 };
                    (k, if subject.keyed() { "keyed" } else { "direct" })
                }
            };
            let st = states[s].entry(key).or_default();
            if model.diverged(st, t) {
                diverged.insert((s, key));
            }
            let compare = !diverged.contains(&(s, key));
            let what = format!("{label} {:?} key {key}", step.action);
            match step.action {
                Action::Check { n, .. } => {
                    let n = n.resolve(config);
                    let d = subject.decide(key, n);
                    let e = model.step(st, t, n);
                    if compare {
                        e.check(&d)
                            .map_err(|m| fail(i, t, &format!("{what} n={n}"), m))?;
                    }
                }
                Action::Peek { .. } => {
                    let d = subject.look(key);
                    let e = model.step(st, t, 0);
                    if compare {
                        e.check(&d).map_err(|m| fail(i, t, &what, m))?;
                    }
                }
                Action::Restock { units, .. } => {
                    let units = units.resolve(config);
                    let got = subject.add_stock(key, units);
                    let want = model.restock(st, units);
                    if got != Ok(want) {
                        return Err(fail(i, t, &what, format!("got {got:?}, want {want}")));
                    }
                }
                Action::SetStock { units, .. } => {
                    let units = units.resolve(config);
                    let got = subject.put_stock(key, units);
                    model.set_stock(st, units);
                    if got != Ok(()) {
                        return Err(fail(i, t, &what, format!("got {got:?}")));
                    }
                }
            }
        }
    }
    Ok(diverged.len())
}

/// `evict_idle` is lossless: `a` evicts after every step, `b` never does; they must make the
/// same decisions (and both match the model). After each eviction `a` holds exactly the keys
/// the model says are not idle.
///
/// Lossless means "no decision at the sweep's time or later changes", so time only moves
/// forwards here unless `monotone` is false (for a stock, where time plays no part); see
/// [`evict_then_earlier_clock`] for a clock behind the sweep.
#[allow(clippy::too_many_arguments)]
pub fn drive_evicting<M: Model>(
    model: &M,
    window: u64,
    config: u32,
    clock: &ManualClock,
    a: &dyn Subject,
    b: &dyn Subject,
    steps: &[Step],
    monotone: bool,
) -> Result<usize, TestCaseError> {
    let mut states: HashMap<u8, M::State> = HashMap::new();
    let mut t = 0u64;
    let mut evicted = 0usize;
    clock.set_ns(t);
    for (i, step) in steps.iter().enumerate() {
        t = step.time.apply(t, window, monotone);
        clock.set_ns(t);
        let what = format!("{:?}", step.action);
        match step.action {
            Action::Check { key, n } => {
                let n = n.resolve(config);
                let (da, db) = (a.decide(key, n), b.decide(key, n));
                let e = model.step(states.entry(key).or_default(), t, n);
                prop_assert_eq!(fields(&da), fields(&db), "step {} at t={}: {}", i, t, what);
                e.check(&db).map_err(|m| fail(i, t, &what, m))?;
            }
            Action::Peek { key } => {
                let (da, db) = (a.look(key), b.look(key));
                let e = model.step(states.entry(key).or_default(), t, 0);
                prop_assert_eq!(fields(&da), fields(&db), "step {} at t={}: {}", i, t, what);
                e.check(&db).map_err(|m| fail(i, t, &what, m))?;
            }
            Action::Restock { key, units } => {
                let units = units.resolve(config);
                let (ra, rb) = (a.add_stock(key, units), b.add_stock(key, units));
                let want = model.restock(states.entry(key).or_default(), units);
                prop_assert_eq!(&ra, &rb, "step {}: {}", i, what);
                prop_assert_eq!(ra, Ok(want), "step {}: {}", i, what);
            }
            Action::SetStock { key, units } => {
                let units = units.resolve(config);
                prop_assert_eq!(a.put_stock(key, units), Ok(()));
                prop_assert_eq!(b.put_stock(key, units), Ok(()));
                model.set_stock(states.entry(key).or_default(), units);
            }
        }
        let before = a.held();
        let removed = a.sweep();
        evicted += removed;
        let live = states.values().filter(|s| !model.is_idle(s, t)).count();
        prop_assert_eq!(before - removed, a.held(), "step {}: evict_idle's count", i);
        prop_assert_eq!(
            a.held(),
            live,
            "step {} at t={}: keys held after evict_idle vs keys the model says are live",
            i,
            t
        );
    }
    Ok(evicted)
}

/// Eviction gives no credit back to a clock behind the sweep: `a` and `b` see the same history
/// (time moving forwards), then `a` evicts its idle keys at the final time `s`, and the clock is
/// set back to `s * back_milli / 1000`. There, for every key (held, evicted or never seen),
/// `a` must be at least as strict as `b`: no more `remaining`, and a request for `n >= 1` units
/// that `a` admits is admitted by `b` too.
#[allow(clippy::too_many_arguments)]
pub fn evict_then_earlier_clock(
    window: u64,
    config: u32,
    clock: &ManualClock,
    a: &dyn Subject,
    b: &dyn Subject,
    history: &[Step],
    back_milli: u16,
    n: u32,
) -> Result<(), TestCaseError> {
    let mut t = 0u64;
    clock.set_ns(t);
    for step in history {
        t = step.time.apply(t, window, true);
        clock.set_ns(t);
        let (da, db) = match step.action {
            Action::Check { key, n } => {
                let n = n.resolve(config);
                (a.decide(key, n), b.decide(key, n))
            }
            Action::Peek { key } => (a.look(key), b.look(key)),
            _ => unreachable!("checks and peeks only"),
        };
        prop_assert_eq!(fields(&da), fields(&db));
    }
    a.sweep();
    let earlier = u64::try_from(u128::from(t) * u128::from(back_milli) / 1000).unwrap();
    clock.set_ns(earlier);
    for key in 0..4u8 {
        let (pa, pb) = (a.look(key), b.look(key));
        prop_assert!(
            pa.remaining() <= pb.remaining(),
            "key {}: swept at {} then peeked at {}: {:?} vs never swept {:?}",
            key,
            t,
            earlier,
            pa,
            pb
        );
        if n >= 1 {
            let (da, db) = (a.decide(key, n), b.decide(key, n));
            prop_assert!(
                !da.is_allowed() || db.is_allowed(),
                "key {}: swept at {} then n={} at {}: admitted, but denied without the sweep: {:?}",
                key,
                t,
                n,
                earlier,
                db
            );
        }
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Threads
// ---------------------------------------------------------------------------------------------

/// Threads racing to create the same new keys: in each of `rounds` rounds, every thread waits
/// at a spinning barrier and then all check the same `batch` new keys in the same order, so
/// that they miss the same key at nearly the same instant and race to insert it. One thread
/// per core (at least 2), since spinning threads must not wait for a core. Returns the number
/// of admissions.
pub fn race_on_new_keys(rounds: u32, batch: u32, check: impl Fn(u32) -> bool + Sync) -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    let threads = std::thread::available_parallelism().map_or(2, |n| n.get().clamp(2, 8));
    let arrived = AtomicU64::new(0);
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|i| {
                let (check, arrived) = (&check, &arrived);
                s.spawn(move || {
                    let mut admitted = 0u64;
                    let mut jitter = 0x9E37_79B9_7F4A_7C15u64.wrapping_mul(i as u64 + 1);
                    for r in 0..rounds {
                        // A monotonic counter barrier: round r starts once every thread has
                        // arrived at it.
                        arrived.fetch_add(1, Ordering::AcqRel);
                        let target = (u64::from(r) + 1) * threads as u64;
                        let mut spins = 0u32;
                        while arrived.load(Ordering::Acquire) < target {
                            spins += 1;
                            if spins % 1024 == 0 {
                                std::thread::yield_now();
                            } else {
                                std::hint::spin_loop();
                            }
                        }
                        // The last thread to arrive would always start first: a small random
                        // delay (xorshift) lets every thread be first, and often tie.
                        jitter ^= jitter << 13;
                        jitter ^= jitter >> 7;
                        jitter ^= jitter << 17;
                        for _ in 0..jitter % 48 {
                            std::hint::spin_loop();
                        }
                        for key in r * batch..(r + 1) * batch {
                            admitted += u64::from(check(key));
                        }
                    }
                    admitted
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).sum()
    })
}
