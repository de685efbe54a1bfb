//! GCRA: random quotas and operation sequences, and the reference model of `cellgate-models`
//! (written from the README's "GCRA, exactly") keyed by `u64`.

use std::collections::HashMap;
use std::time::Duration;

use cellgate::clock::{Clock, ManualClock};
use cellgate::{Decision, Quota};
pub use cellgate_models::gcra::Expected;
use cellgate_models::gcra::{step, Params};
use proptest::prelude::*;

/// A quota as raw numbers, so the tests can derive `T` and `DVT` themselves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Q {
    pub count: u32,
    pub period_ns: u64,
    pub burst: u32,
}

impl Q {
    pub fn quota(&self) -> Quota {
        Quota::new(self.count, Duration::from_nanos(self.period_ns)).with_burst(self.burst)
    }

    /// The emission interval `T = period_ns / count`.
    pub fn interval(&self) -> u64 {
        self.period_ns / u64::from(self.count)
    }

    /// The tolerance `DVT = T * burst`.
    pub fn tolerance(&self) -> u64 {
        self.interval() * u64::from(self.burst)
    }
}

/// Random valid quotas: count 1..=1000, period from `count` ns (so `T >= 1`) to 10 s, burst
/// 1..=200. Half the periods are small multiples of the count, so intervals of a few ns (and
/// the rounding of `period / count`) are common.
pub fn quotas() -> impl Strategy<Value = Q> {
    (1u32..=1000)
        .prop_flat_map(|count| {
            let c = u64::from(count);
            (
                Just(count),
                prop_oneof![c..=c * 20, c..=10_000_000_000u64],
                1u32..=200,
            )
        })
        .prop_map(|(count, period_ns, burst)| Q {
            count,
            period_ns,
            burst,
        })
}

/// Reads every field of a decision, checking that the `Duration` and nanosecond accessors
/// agree.
pub fn observe(d: &Decision) -> Expected {
    assert_eq!(
        d.retry_after(),
        d.retry_after_ns().map(Duration::from_nanos),
        "retry_after and retry_after_ns disagree: {d:?}"
    );
    assert_eq!(
        d.reset_after(),
        Duration::from_nanos(d.reset_after_ns()),
        "reset_after and reset_after_ns disagree: {d:?}"
    );
    assert_eq!(
        d.delay(),
        Duration::from_nanos(d.delay_ns()),
        "delay: {d:?}"
    );
    let (allowed, limit, remaining) = (d.is_allowed(), d.limit(), d.remaining());
    let (retry_after_ns, reset_after_ns) = (d.retry_after_ns(), d.reset_after_ns());
    Expected {
        allowed,
        limit,
        remaining,
        retry_after_ns,
        reset_after_ns,
        delay_ns: d.delay_ns(),
    }
}

/// The reference model per key: a TAT per key (`None`: never seen).
#[derive(Debug, Clone)]
pub struct Model {
    params: Params,
    tats: HashMap<u64, u64>,
}

impl Model {
    pub fn new(q: Q) -> Self {
        Self {
            params: Params::of(u128::from(q.interval()), q.burst, 0),
            tats: HashMap::new(),
        }
    }

    /// A request for `n` units on `key` at `now`; stores the new TAT when it admits units.
    pub fn check_n(&mut self, key: u64, now: u64, n: u32) -> Expected {
        let (d, tat) = step(&self.params, self.tats.get(&key).copied(), now, n);
        if let Some(tat) = tat {
            self.tats.insert(key, tat);
        }
        d
    }

    /// The decision a request for 0 units would get; never stores.
    pub fn peek(&self, key: u64, now: u64) -> Expected {
        step(&self.params, self.tats.get(&key).copied(), now, 0).0
    }

    /// Keys the model holds a TAT for.
    pub fn keys(&self) -> usize {
        self.tats.len()
    }
}

/// One step of a scenario.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    /// Moves the clock forward.
    Advance(u64),
    /// Moves the clock backward (saturating at 0).
    Back(u64),
    /// `check_n(key, n)`.
    Check { key: u64, n: u32 },
    /// `peek(key)`.
    Peek { key: u64 },
}

/// Clock steps scaled to the quota: zero, sub-interval, exact multiples of `T`, around the
/// tolerance, and large gaps.
fn steps(q: Q) -> impl Strategy<Value = u64> {
    let t = q.interval();
    let dvt = q.tolerance();
    let b = u64::from(q.burst);
    prop_oneof![
        Just(0u64),
        Just(1u64),
        0..=t,
        (0..=2 * b).prop_map(move |k| k * t),
        (0..=2 * b).prop_map(move |k| (k * t).saturating_sub(1)),
        0..=dvt.saturating_mul(2),
        0u64..=1 << 40,
    ]
}

/// Request sizes: mostly 1, otherwise anything in `0..=burst + 2` (so `n > burst` occurs).
fn sizes(q: Q) -> impl Strategy<Value = u32> {
    prop_oneof![
        3 => Just(1u32),
        1 => Just(q.burst),
        1 => Just(q.burst + 1),
        3 => 0..=q.burst + 2,
    ]
}

/// Scenarios of up to `len` operations over keys `0..keys`.
///
/// `backwards`: whether the clock may move backwards. `peeks`: whether `Peek` occurs.
/// `min_n`: the smallest request size (1 for peers without `n = 0`).
pub fn ops(
    q: Q,
    keys: u64,
    len: usize,
    backwards: bool,
    min_n: u32,
) -> impl Strategy<Value = Vec<Op>> {
    let mut options: Vec<(u32, BoxedStrategy<Op>)> = vec![
        (4, steps(q).prop_map(Op::Advance).boxed()),
        (
            6,
            (0..keys, sizes(q))
                .prop_map(move |(key, n)| Op::Check {
                    key,
                    n: n.max(min_n),
                })
                .boxed(),
        ),
    ];
    if backwards {
        options.push((1, steps(q).prop_map(Op::Back).boxed()));
    }
    if min_n == 0 {
        options.push((1, (0..keys).prop_map(|key| Op::Peek { key }).boxed()));
    }
    let op = prop::strategy::Union::new_weighted(options);
    prop::collection::vec(op, 1..=len)
}

/// Applies a clock operation; returns whether `op` was one.
pub fn apply_clock(clock: &ManualClock, op: Op) -> bool {
    match op {
        Op::Advance(d) => {
            clock.advance_ns(d);
            true
        }
        Op::Back(d) => {
            clock.set_ns(clock.now().saturating_sub(d));
            true
        }
        Op::Check { .. } | Op::Peek { .. } => false,
    }
}
