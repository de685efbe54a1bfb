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

// ---------------------------------------------------------------------------------------------
// Drivers
// ---------------------------------------------------------------------------------------------

fn fail(step: usize, now: u64, what: &str, detail: String) -> TestCaseError {
    TestCaseError::fail(format!("step {step} at t={now}: {what}: {detail}"))
}

/// Applies `steps` to every subject (all reading `clock`) and to a model state per subject and
/// key, comparing every field of every decision (and every restock's result).
pub fn drive<M: Model>(
    model: &M,
    window: u64,
    config: u32,
    clock: &ManualClock,
    subjects: &[&dyn Subject],
    steps: &[Step],
    monotone: bool,
) -> Result<(), TestCaseError> {
    let mut states: Vec<HashMap<u8, M::State>> = vec![HashMap::new(); subjects.len()];
    let mut t = 0u64;
    clock.set_ns(t);
    for (i, step) in steps.iter().enumerate() {
        t = step.time.apply(t, window, monotone);
        clock.set_ns(t);
        for (s, subject) in subjects.iter().enumerate() {
            let key = if subject.keyed() {
                step.action.key()
            } else {
                0
            };
            let label = if subject.keyed() { "keyed" } else { "direct" };
            let st = states[s].entry(key).or_insert_with(|| model.fresh());
            let what = format!("{label} {:?} key {key}", step.action);
            match step.action {
                Action::Check { n, .. } => {
                    let n = n.resolve(config);
                    let d = subject.decide(key, n);
                    let e = model.step(st, t, n);
                    check(&e, &d).map_err(|m| fail(i, t, &format!("{what} n={n}"), m))?;
                }
                Action::Peek { .. } => {
                    let d = subject.look(key);
                    let e = model.step(st, t, 0);
                    check(&e, &d).map_err(|m| fail(i, t, &what, m))?;
                }
                Action::Restock { units, .. } => {
                    let units = units.resolve(config);
                    let got = subject.add_stock(key, units);
                    let want = model.restock(st, units).expect("a stock model");
                    if got != Ok(want) {
                        return Err(fail(i, t, &what, format!("got {got:?}, want {want}")));
                    }
                }
                Action::SetStock { units, .. } => {
                    let units = units.resolve(config);
                    let got = subject.put_stock(key, units);
                    model.set_stock(st, units).expect("a stock model");
                    if got != Ok(()) {
                        return Err(fail(i, t, &what, format!("got {got:?}")));
                    }
                }
            }
        }
    }
    Ok(())
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
                let e = model.step(states.entry(key).or_insert_with(|| model.fresh()), t, n);
                prop_assert_eq!(fields(&da), fields(&db), "step {} at t={}: {}", i, t, what);
                check(&e, &db).map_err(|m| fail(i, t, &what, m))?;
            }
            Action::Peek { key } => {
                let (da, db) = (a.look(key), b.look(key));
                let e = model.step(states.entry(key).or_insert_with(|| model.fresh()), t, 0);
                prop_assert_eq!(fields(&da), fields(&db), "step {} at t={}: {}", i, t, what);
                check(&e, &db).map_err(|m| fail(i, t, &what, m))?;
            }
            Action::Restock { key, units } => {
                let units = units.resolve(config);
                let (ra, rb) = (a.add_stock(key, units), b.add_stock(key, units));
                let want = model
                    .restock(states.entry(key).or_insert_with(|| model.fresh()), units)
                    .expect("a stock model");
                prop_assert_eq!(&ra, &rb, "step {}: {}", i, what);
                prop_assert_eq!(ra, Ok(want), "step {}: {}", i, what);
            }
            Action::SetStock { key, units } => {
                let units = units.resolve(config);
                prop_assert_eq!(a.put_stock(key, units), Ok(()));
                prop_assert_eq!(b.put_stock(key, units), Ok(()));
                model
                    .set_stock(states.entry(key).or_insert_with(|| model.fresh()), units)
                    .expect("a stock model");
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
// The family's shared tests
// ---------------------------------------------------------------------------------------------

/// A limiter under test with `u32` keys, for the race on new keys.
pub trait Racer: Sync {
    fn admits(&self, key: u32) -> bool;
    fn held(&self) -> usize;
}

impl Racer for KeyedLimiter<u32, ManualClock> {
    fn admits(&self, key: u32) -> bool {
        self.check(&key).is_allowed()
    }
    fn held(&self) -> usize {
        self.len()
    }
}

impl Racer for SlidingLog<u32, ManualClock> {
    fn admits(&self, key: u32) -> bool {
        self.check(&key).is_allowed()
    }
    fn held(&self) -> usize {
        self.len()
    }
}

/// One member of the window family, as [`family_tests!`] needs it: its model, its configurations
/// and its limiters, each built on the given clock.
pub trait Family {
    type Model: Model;

    /// Random `(window ns, limit)` configurations that build.
    fn configs() -> BoxedStrategy<(u64, u32)>;

    /// Where the clock starts before a test's steps, for a configuration: at 0 unless the
    /// algorithm has an edge late in the clock's range for the steps to cross (the sliding
    /// window's horizon).
    fn starts(_window: u64, _limit: u32) -> BoxedStrategy<u64> {
        Just(0).boxed()
    }

    /// The operations the model comparison draws from (checks and peeks; a stock adds its
    /// operator actions).
    fn actions() -> BoxedStrategy<Action> {
        actions().boxed()
    }

    fn model(window: u64, limit: u32) -> Self::Model;

    /// The keyed stores, each a fresh limiter that never fills: the exact map, then the
    /// fingerprint table (`max_keys`).
    fn stores(window: u64, limit: u32, clock: &ManualClock) -> [Box<dyn Subject>; 2];

    /// The direct limiter, where the algorithm has one.
    fn direct(window: u64, limit: u32, clock: &ManualClock) -> Option<Box<dyn Subject>>;

    /// A keyed limiter with a limit of 1 and `u32` keys: the exact map, or the table bounded
    /// to `max_keys` keys.
    fn racer(max_keys: Option<usize>, clock: ManualClock) -> Box<dyn Racer>;

    /// Whether decisions depend on the clock (a stock's do not: its eviction is lossless even
    /// when the clock goes back).
    const TIMED: bool = true;

    /// The limit of the many-threads tests: each key admits exactly this many units.
    const THREAD_LIMIT: u32;

    /// The window of the many-threads tests (long enough for [`Family::THREAD_LIMIT`]).
    const THREAD_WINDOW: u64 = 1_000_000_000;
}

/// A window counter (fixed or sliding window): its constructors and its layout, from which the
/// blanket [`Family`] impl builds everything the family's tests need.
pub trait Counter {
    type Model: Model;

    /// The keyed constructor (`KeyedLimiter::<u8>::fixed_window`, ...).
    const KEYED: fn(u32, Duration) -> KeyedLimiterBuilder<u8, DefaultClock>;
    /// The same with `u32` keys, for the race on new keys.
    const KEYED_U32: fn(u32, Duration) -> KeyedLimiterBuilder<u32, DefaultClock>;
    /// The direct constructor (`Limiter::fixed_window`, ...).
    const DIRECT: fn(u32, Duration) -> LimiterBuilder<DefaultClock>;
    /// The largest limit the layout of a window of `w` ns holds (from the model).
    const MAX_LIMIT: fn(u64) -> u128;
    /// The window of the many-threads tests: long enough for 50 000 units.
    const THREADS_WINDOW: u64;

    fn new_model(window: u64, limit: u32) -> Self::Model;

    /// The window lengths of the random configurations: every layout regime ([`windows`]).
    fn config_windows() -> BoxedStrategy<u64> {
        windows().boxed()
    }

    /// See [`Family::starts`].
    fn starts(_window: u64, _limit: u32) -> BoxedStrategy<u64> {
        Just(0).boxed()
    }

    /// The exact map store on `clock`.
    fn keyed(limit: u32, w: u64, clock: &ManualClock) -> KeyedLimiter<u8, ManualClock> {
        let window = Duration::from_nanos(w);
        Self::KEYED(limit, window)
            .clock(clock.clone())
            .build()
            .unwrap()
    }

    /// The bounded fingerprint table store (`max_keys` selects it); never full here.
    fn table(limit: u32, w: u64, clock: &ManualClock) -> KeyedLimiter<u8, ManualClock> {
        let window = Duration::from_nanos(w);
        let builder = Self::KEYED(limit, window).clock(clock.clone());
        builder.max_keys(1_024).build().unwrap()
    }

    fn direct(limit: u32, w: u64, clock: &ManualClock) -> Limiter<ManualClock> {
        let window = Duration::from_nanos(w);
        Self::DIRECT(limit, window)
            .clock(clock.clone())
            .build()
            .unwrap()
    }
}

impl<C: Counter> Family for C {
    type Model = C::Model;

    /// A window whose layout holds at least a limit of 1, and a limit for it.
    fn configs() -> BoxedStrategy<(u64, u32)> {
        C::config_windows()
            .prop_filter("the layout must hold a count", |&w| C::MAX_LIMIT(w) >= 1)
            .prop_flat_map(|w| (Just(w), limits(C::MAX_LIMIT(w))))
            .boxed()
    }

    fn starts(window: u64, limit: u32) -> BoxedStrategy<u64> {
        C::starts(window, limit)
    }

    fn model(window: u64, limit: u32) -> C::Model {
        C::new_model(window, limit)
    }

    fn stores(w: u64, limit: u32, clock: &ManualClock) -> [Box<dyn Subject>; 2] {
        [
            Box::new(C::keyed(limit, w, clock)),
            Box::new(C::table(limit, w, clock)),
        ]
    }

    fn direct(w: u64, limit: u32, clock: &ManualClock) -> Option<Box<dyn Subject>> {
        Some(Box::new(C::direct(limit, w, clock)))
    }

    fn racer(max_keys: Option<usize>, clock: ManualClock) -> Box<dyn Racer> {
        keyed_racer(C::KEYED_U32(1, Duration::from_secs(1)), max_keys, clock)
    }

    const THREAD_LIMIT: u32 = 50_000;
    const THREAD_WINDOW: u64 = C::THREADS_WINDOW;
}

/// A keyed limiter with `u32` keys from `builder`: the exact map, or the table bounded to
/// `max_keys`.
pub fn keyed_racer(
    builder: KeyedLimiterBuilder<u32, DefaultClock>,
    max_keys: Option<usize>,
    clock: ManualClock,
) -> Box<dyn Racer> {
    let builder = builder.clock(clock);
    Box::new(match max_keys {
        Some(m) => builder.max_keys(m).build().unwrap(),
        None => builder.build().unwrap(),
    })
}

/// The largest limit of the layout builds; one more is `LimitTooLarge` (keyed and direct).
pub fn counter_layout_bounds<C: Counter>(w: u64) -> Result<(), TestCaseError> {
    layout_bounds(w, C::MAX_LIMIT, |limit, window| {
        [
            C::KEYED(limit, window).build().map(drop),
            C::DIRECT(limit, window).build().map(drop),
        ]
    })
}

/// The configuration errors every window counter shares, from the keyed and the direct
/// builder: a zero limit, a zero window, a window past `u64::MAX` ns, `max_keys(0)`; a window
/// of exactly `u64::MAX` ns builds.
pub fn counter_config_errors<C: Counter>() {
    let s = Duration::from_secs(1);
    let both = |limit, window| -> [Result<(), ConfigError>; 2] {
        [
            C::KEYED(limit, window).build().map(drop),
            C::DIRECT(limit, window).build().map(drop),
        ]
    };
    let zero = |field| Err(ConfigError::Zero { field });
    assert_eq!(both(0, s), [zero("limit"), zero("limit")]);
    assert_eq!(both(1, Duration::ZERO), [zero("window"), zero("window")]);
    for window in [
        Duration::MAX,
        Duration::from_nanos(u64::MAX) + Duration::from_nanos(1),
    ] {
        let too_long = Err(ConfigError::WindowTooLong { window });
        assert_eq!(both(1, window), [too_long.clone(), too_long]);
    }
    assert!(C::DIRECT(1, Duration::from_nanos(u64::MAX)).build().is_ok());
    let capped = C::KEYED(1, s).max_keys(0).build().map(drop);
    assert_eq!(capped, zero("max_keys"));
}

/// `restock` and `set_stock` on a window counter are `Unsupported` (naming the algorithm), on
/// the keyed and the direct limiter, and change nothing.
pub fn counter_has_no_stock<C: Counter>(algorithm: &'static str) {
    let k = C::keyed(1, 1_000, &ManualClock::new());
    let d = C::direct(1, 1_000, &ManualClock::new());
    let unsupported = |operation| {
        Err(ConfigError::Unsupported {
            operation,
            algorithm,
        })
    };
    assert_eq!(k.restock(&1, 5), unsupported("restock"));
    assert_eq!(k.set_stock(&1, 5), unsupported("set_stock").map(drop));
    assert_eq!(d.restock(5), unsupported("restock"));
    assert_eq!(d.set_stock(5), unsupported("set_stock").map(drop));
    assert!(k.is_empty(), "a refused operation creates no key");
    assert_eq!(d.peek().remaining(), 1);
}

/// A configuration of `F` and where its clock starts ([`Family::starts`]): `(window, limit,
/// start)`.
pub fn started_configs<F: Family>() -> impl Strategy<Value = (u64, u32, u64)> {
    F::configs().prop_flat_map(|(w, limit)| F::starts(w, limit).prop_map(move |s| (w, limit, s)))
}

/// A family member's window and limit with a fresh clock, and its steps from `start` on (see
/// [`starting_at`]): what the family's property tests start from.
pub struct Started {
    pub w: u64,
    pub limit: u32,
    pub clock: ManualClock,
    pub steps: Vec<Step>,
}

impl Started {
    /// `(w, limit, start)` as [`started_configs`] draws it, and the steps after the start.
    pub fn new((w, limit, start): (u64, u32, u64), steps: &[Step]) -> Self {
        Started {
            w,
            limit,
            clock: ManualClock::new(),
            steps: starting_at(start, steps),
        }
    }
}

/// Every field of every decision, keyed (both stores) and direct, against the model.
pub fn matches_the_model<F: Family>(s: &Started) -> Result<(), TestCaseError> {
    let (w, limit, clock) = (s.w, s.limit, &s.clock);
    let [map, table] = F::stores(w, limit, clock);
    let direct = F::direct(w, limit, clock);
    let mut subjects: Vec<&dyn Subject> = vec![&*map, &*table];
    subjects.extend(direct.as_deref());
    drive(
        &F::model(w, limit),
        w,
        limit,
        clock,
        &subjects,
        &s.steps,
        false,
    )
}

/// Each store evicting after every step decides like the other store never evicting, and keeps
/// exactly the keys the model calls live.
pub fn evict_idle_is_lossless<F: Family>(s: &Started) -> Result<(), TestCaseError> {
    let (w, limit, clock) = (s.w, s.limit, &s.clock);
    let model = F::model(w, limit);
    for evicting in 0..2 {
        let subjects = F::stores(w, limit, clock);
        let (a, b) = (&subjects[evicting], &subjects[1 - evicting]);
        drive_evicting(&model, w, limit, clock, &**a, &**b, &s.steps, F::TIMED)?;
    }
    Ok(())
}

/// Eviction gives no credit back to a clock behind the sweep, in either store (the history:
/// the started steps).
pub fn evict_then_earlier_clock_is_never_more_lenient<F: Family>(
    s: &Started,
    back: u16,
    n: NSel,
) -> Result<(), TestCaseError> {
    let (w, limit, clock) = (s.w, s.limit, &s.clock);
    let n = n.resolve(limit);
    for store in 0..2 {
        let (a, b) = (F::stores(w, limit, clock), F::stores(w, limit, clock));
        evict_then_earlier_clock(w, limit, clock, &*a[store], &*b[store], &s.steps, back, n)?;
    }
    Ok(())
}

/// Many threads on a frozen clock: each key of each store (two keys, four threads each) and
/// the direct limiter admit exactly [`Family::THREAD_LIMIT`] unit requests, the k-th leaving
/// `limit - k`.
pub fn threads_admit_exactly_the_limit<F: Family>() {
    use crate::common::threads::{admitted_remainings, assert_exactly_the_limit, THREADS};
    let clock = ManualClock::new();
    clock.set_ns(1_000_000_007);
    let limit = F::THREAD_LIMIT;
    let [map, table] = F::stores(F::THREAD_WINDOW, limit, &clock);
    let direct = F::direct(F::THREAD_WINDOW, limit, &clock);
    let subjects = [Some(map), Some(table), direct];
    for (s, subject) in subjects.iter().flatten().enumerate() {
        let keys = if subject.keyed() { 2 } else { 1 };
        let per_key =
            admitted_remainings(keys, |i| i % keys, |i| subject.decide((i % keys) as u8, 1));
        for (key, r) in per_key.iter().enumerate() {
            assert_exactly_the_limit(
                r,
                limit,
                &format!("subject {s} key {key} of {THREADS} threads"),
            );
            assert_eq!(subject.look(key as u8).remaining(), 0);
        }
    }
}

/// Many threads checking mixed sizes (`n = 0..=3`) on one key of a frozen clock: what was
/// admitted plus what is left is exactly the limit; the rest can still be taken, nothing more.
pub fn threads_with_mixed_sizes_never_overspend<F: Family>() {
    use crate::common::threads::{admitted_units, ATTEMPTS};
    let clock = ManualClock::new();
    clock.set_ns(5);
    let limit = F::THREAD_LIMIT;
    let [map, table] = F::stores(F::THREAD_WINDOW, limit, &clock);
    let direct = F::direct(F::THREAD_WINDOW, limit, &clock);
    for subject in [Some(map), Some(table), direct].iter().flatten() {
        let units = admitted_units(4, ATTEMPTS / 4, |n| subject.decide(7, n));
        let left = subject.look(7).remaining();
        assert_eq!(units + u64::from(left), u64::from(limit));
        assert!(subject.decide(7, left).is_allowed());
        assert!(!subject.decide(7, 1).is_allowed());
    }
}

/// Threads racing to create the same new keys (see
/// [`race_on_new_keys`](crate::common::threads::race_on_new_keys)): each key admits exactly its
/// limit of 1, whichever thread's insertion wins, in the exact map and in the table.
pub fn threads_racing_on_new_keys_admit_exactly_the_limit<F: Family>() {
    use crate::common::threads::race_on_new_keys;
    const ROUNDS: u32 = if cfg!(debug_assertions) {
        20_000
    } else {
        100_000
    };
    for max_keys in [None, Some(2 * ROUNDS as usize)] {
        let clock = ManualClock::new();
        clock.set_ns(42);
        let l = F::racer(max_keys, clock);
        let admitted = race_on_new_keys(ROUNDS, 1, |k| l.admits(k));
        assert_eq!(admitted, u64::from(ROUNDS), "max_keys {max_keys:?}");
        assert_eq!(l.held(), ROUNDS as usize, "max_keys {max_keys:?}");
    }
}

/// The tests every member of the window family runs, for `$family: Family`: the model
/// comparison, lossless eviction, no credit to a clock behind a sweep, and many threads.
#[macro_export]
macro_rules! family_tests {
    ($family:ty) => {
        proptest! {
            #![proptest_config(config(384))]

            /// Every field of every decision, keyed and direct, for random sequences of
            /// operations with time moving forwards, backwards, across boundaries and over huge
            /// gaps.
            #[test]
            fn matches_the_model(
                config in started_configs::<$family>(),
                steps in steps_of(<$family as Family>::actions(), 1..=60),
            ) {
                let started = $crate::common::windows::Started::new(config, &steps);
                $crate::common::windows::matches_the_model::<$family>(&started)?;
            }

            /// A limiter that evicts idle keys after every step decides exactly like one that
            /// never does, and keeps exactly the live keys.
            #[test]
            fn evict_idle_is_lossless(
                config in started_configs::<$family>(),
                steps in steps_of(<$family as Family>::actions(), 1..=60),
            ) {
                let started = $crate::common::windows::Started::new(config, &steps);
                $crate::common::windows::evict_idle_is_lossless::<$family>(&started)?;
            }

            /// Eviction gives no credit back to a clock behind the sweep (both stores).
            #[test]
            fn evict_then_earlier_clock_is_never_more_lenient(
                config in started_configs::<$family>(),
                history in steps_of(actions(), 1..=40),
                back in 0u16..1000,
                n in n_sels(),
            ) {
                let started = $crate::common::windows::Started::new(config, &history);
                $crate::common::windows::evict_then_earlier_clock_is_never_more_lenient::<$family>(&started, back, n)?;
            }
        }

        #[test]
        fn threads_on_a_frozen_clock_admit_exactly_the_limit() {
            $crate::common::windows::threads_admit_exactly_the_limit::<$family>();
        }

        #[test]
        fn threads_with_mixed_sizes_never_overspend() {
            $crate::common::windows::threads_with_mixed_sizes_never_overspend::<$family>();
        }

        #[test]
        fn threads_racing_on_new_keys_admit_exactly_the_limit() {
            $crate::common::windows::threads_racing_on_new_keys_admit_exactly_the_limit::<$family>();
        }
    };
}

/// The largest limit of the layout (`max_limit(w)`, from the model) builds; one more is
/// `LimitTooLarge`. `build(limit, window)` builds the keyed and the direct limiter.
pub fn layout_bounds(
    w: u64,
    max_limit: fn(u64) -> u128,
    build: impl Fn(u32, Duration) -> [Result<(), ConfigError>; 2],
) -> Result<(), TestCaseError> {
    let window = Duration::from_nanos(w);
    let max = match u32::try_from(max_limit(w)) {
        Ok(max) if max < u32::MAX => max,
        _ => {
            prop_assert_eq!(build(u32::MAX, window), [Ok(()), Ok(())]);
            return Ok(());
        }
    };
    if max >= 1 {
        prop_assert_eq!(build(max, window), [Ok(()), Ok(())]);
    }
    let want = Err(ConfigError::LimitTooLarge {
        limit: max + 1,
        max: u64::from(max),
        window,
    });
    prop_assert_eq!(build(max + 1, window), [want.clone(), want]);
    Ok(())
}
