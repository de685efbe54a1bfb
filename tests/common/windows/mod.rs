//! The window family (fixed window, sliding window, stock, sliding log): the limiters under
//! test behind one interface, random operations, the drivers that compare every decision with
//! the models of `cellgate-models`, and [`family_tests!`], the property tests every member of
//! the family runs.

use std::collections::HashMap;
use std::time::Duration;

use cellgate::clock::{DefaultClock, ManualClock};
use cellgate::{
    ConfigError, Decision, KeyedLimiter, KeyedLimiterBuilder, Limiter, LimiterBuilder, SlidingLog,
};
pub use cellgate_models::{fixed_window, sliding_window, Expect, Model, U64};
use proptest::prelude::*;
use proptest::test_runner::TestCaseError;

/// Checks every field of `d` against `want`, through the representation a `Decision` has
/// (`Expect::seen`), and that the `Duration` accessors agree with the nanosecond ones.
pub fn check(want: &Expect, d: &Decision) -> Result<(), String> {
    let want = want.seen();
    let got = (
        d.is_allowed(),
        d.limit(),
        d.remaining(),
        d.retry_after_ns(),
        d.reset_after_ns(),
    );
    let want_fields = (
        want.allowed,
        want.limit,
        want.remaining,
        want.retry_after_ns,
        want.reset_after_ns,
    );
    if got != want_fields {
        return Err(format!(
            "decision (allowed, limit, remaining, retry_ns, reset_ns): got {got:?}, want {want_fields:?}"
        ));
    }
    if d.retry_after() != want.retry_after_ns.map(Duration::from_nanos) {
        return Err(format!(
            "retry_after {:?} != {:?} ns",
            d.retry_after(),
            want.retry_after_ns
        ));
    }
    if d.reset_after() != Duration::from_nanos(want.reset_after_ns) {
        return Err(format!(
            "reset_after {:?} != {} ns",
            d.reset_after(),
            want.reset_after_ns
        ));
    }
    Ok(())
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

// ---------------------------------------------------------------------------------------------
// The limiters under test, behind one interface
// ---------------------------------------------------------------------------------------------

/// A limiter under test; keys are `u8` (a direct limiter ignores them).
pub trait Subject: Sync {
    fn keyed(&self) -> bool;
    fn decide(&self, key: u8, n: u32) -> Decision;
    fn look(&self, key: u8) -> Decision;
    fn held(&self) -> usize;
    fn sweep(&self) -> usize;
    fn add_stock(&self, key: u8, units: u64) -> Result<u64, ConfigError>;
    fn put_stock(&self, key: u8, units: u64) -> Result<(), ConfigError>;
}

/// `Subject` for a keyed limiter type (`KeyedLimiter`, `SlidingLog`): the same calls on `&key`;
/// the two stock methods as given.
macro_rules! keyed_subject {
    ($limiter:ident, $($stock:item)*) => {
        impl Subject for $limiter<u8, ManualClock> {
            fn keyed(&self) -> bool {
                true
            }
            fn decide(&self, key: u8, n: u32) -> Decision {
                $limiter::check_n(self, &key, n)
            }
            fn look(&self, key: u8) -> Decision {
                $limiter::peek(self, &key)
            }
            fn held(&self) -> usize {
                $limiter::len(self)
            }
            fn sweep(&self) -> usize {
                $limiter::evict_idle(self)
            }
            $($stock)*
        }
    };
}

keyed_subject! {
    KeyedLimiter,
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

keyed_subject! {
    SlidingLog,
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

impl Action {
    pub fn key(self) -> u8 {
        match self {
            Action::Check { key, .. }
            | Action::Peek { key }
            | Action::Restock { key, .. }
            | Action::SetStock { key, .. } => key,
        }
    }
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

/// `steps` after a first jump to `start` (a peek there), or `steps` alone from 0.
pub fn starting_at(start: u64, steps: &[Step]) -> Vec<Step> {
    let first = Step {
        time: TimeOp::Jump(start),
        action: Action::Peek { key: 0 },
    };
    (start > 0)
        .then_some(first)
        .into_iter()
        .chain(steps.iter().copied())
        .collect()
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

mod drivers;
#[macro_use]
mod family;

pub use drivers::*;
pub use family::*;
