//! The GCRA limiters against the `u128` reference model of `cellgate-models`: every
//! field of every decision, for random quotas and random operation sequences on a
//! `ManualClock` (including zero steps, large gaps and the clock moving backwards).

use crate::common::gcra::{apply_clock, observe, ops, quotas, Expected, Model, Op, Q};
use cellgate::clock::{Clock, ManualClock};
use cellgate::{Decision, KeyedLimiter, Limiter};
use proptest::prelude::*;

/// A limiter under test: a check or a peek on a key (a direct limiter ignores it), and the
/// keys it holds (`None` for a direct limiter).
trait Subject {
    fn decide(&self, key: u64, n: Option<u32>) -> Decision;
    fn keys(&self) -> Option<usize>;
}

impl Subject for KeyedLimiter<u64, ManualClock> {
    fn decide(&self, key: u64, n: Option<u32>) -> Decision {
        n.map_or_else(|| self.peek(&key), |n| self.check_n(&key, n))
    }
    fn keys(&self) -> Option<usize> {
        Some(self.len())
    }
}

impl Subject for Limiter<ManualClock> {
    fn decide(&self, _key: u64, n: Option<u32>) -> Decision {
        n.map_or_else(|| self.peek(), |n| self.check_n(n))
    }
    fn keys(&self) -> Option<usize> {
        None
    }
}

/// Runs `ops` on `limiter` (reading `clock`, set to `start` first) and the model side by side.
fn run(
    limiter: &dyn Subject,
    clock: &ManualClock,
    q: Q,
    start: u64,
    ops: &[Op],
) -> Result<(), TestCaseError> {
    clock.set_ns(start);
    let keyed = limiter.keys().is_some();
    let mut model = Model::new(q);
    for (i, &op) in ops.iter().enumerate() {
        if apply_clock(clock, op) {
            continue;
        }
        let now = clock.now();
        let (got, want) = match op {
            Op::Check { key, n } => {
                let key = if keyed { key } else { 0 };
                (limiter.decide(key, Some(n)), model.check_n(key, now, n))
            }
            Op::Peek { key } => {
                let key = if keyed { key } else { 0 };
                (limiter.decide(key, None), model.peek(key, now))
            }
            Op::Advance(_) | Op::Back(_) => unreachable!(),
        };
        prop_assert_eq!(
            observe(&got),
            want,
            "step {} ({:?}) at now = {}",
            i,
            op,
            now
        );
        // Only admitted units create a key: peeks, n = 0 and denials never do.
        if let Some(held) = limiter.keys() {
            prop_assert_eq!(held, model.keys(), "step {} ({:?})", i, op);
        }
    }
    Ok(())
}

/// Runs `ops` on a keyed limiter (the exact-key map, or with `table` the bounded fingerprint
/// table) and the model.
fn run_keyed(q: Q, start: u64, ops: &[Op], table: bool) -> Result<(), TestCaseError> {
    let clock = ManualClock::new();
    let builder = KeyedLimiter::<u64>::gcra(q.quota()).clock(clock.clone());
    let builder = if table { builder.max_keys(64) } else { builder };
    run(&builder.build().unwrap(), &clock, q, start, ops)
}

/// Runs `ops` on a direct limiter (every key maps to the one cell) and the model.
fn run_direct(q: Q, start: u64, ops: &[Op]) -> Result<(), TestCaseError> {
    let clock = ManualClock::new();
    let limiter = Limiter::gcra(q.quota())
        .clock(clock.clone())
        .build()
        .unwrap();
    run(&limiter, &clock, q, start, ops)
}

fn starts() -> impl Strategy<Value = u64> {
    prop_oneof![Just(0u64), 0u64..=1_000_000, 0u64..=1 << 60]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn keyed_matches_model(
        start in starts(),
        (q, ops) in quotas().prop_flat_map(|q| (Just(q), ops(q, 4, 64, true, 0))),
    ) {
        run_keyed(q, start, &ops, false)?;
        run_keyed(q, start, &ops, true)?;
    }

    #[test]
    fn direct_matches_model(
        start in starts(),
        (q, ops) in quotas().prop_flat_map(|q| (Just(q), ops(q, 1, 64, true, 0))),
    ) {
        run_direct(q, start, &ops)?;
    }

    /// Tiny quotas (T of a few ns, burst of a few units) make every boundary (exactly `DVT`,
    /// one ns either side, `n = burst`, `n = burst + 1`) frequent.
    #[test]
    fn keyed_matches_model_on_tiny_quotas(
        (q, ops) in (1u32..=3, 1u64..=4, 1u32..=4)
            .prop_map(|(count, t, burst)| Q { count, period_ns: t * u64::from(count) + u64::from(count) - 1, burst })
            .prop_flat_map(|q| (Just(q), ops(q, 2, 96, true, 0))),
    ) {
        run_keyed(q, 0, &ops, false)?;
        run_keyed(q, 0, &ops, true)?;
    }
}

/// A decision of the hand-worked quota below (burst 2, no queue, so never a delay).
fn e(allowed: bool, remaining: u32, retry_after_ns: Option<u64>, reset_after_ns: u64) -> Expected {
    Expected {
        allowed,
        limit: 2,
        remaining,
        retry_after_ns,
        reset_after_ns,
        delay_ns: 0,
    }
}

/// The model itself, on hand-worked numbers (so a shared misreading of the spec by the model
/// and the crate would have to match these too).
#[test]
fn model_hand_worked() {
    // 3 per 10 ns: T = 3 (rounded down), burst 2, DVT = 6.
    let q = Q {
        count: 3,
        period_ns: 10,
        burst: 2,
    };
    assert_eq!((q.interval(), q.tolerance()), (3, 6));
    let mut m = Model::new(q);
    assert_eq!(m.peek(7, 100), e(true, 2, None, 0));
    assert_eq!(m.keys(), 0);
    assert_eq!(m.check_n(7, 100, 1), e(true, 1, None, 3)); // TAT 103
    assert_eq!(m.check_n(7, 101, 1), e(true, 0, None, 5)); // TAT 106
    assert_eq!(m.check_n(7, 101, 1), e(false, 0, Some(2), 5)); // needs 109 - 6 = 103
    assert_eq!(m.check_n(7, 102, 3), e(false, 0, None, 4)); // 3 > burst
    assert_eq!(m.check_n(7, 103, 1), e(true, 0, None, 6)); // TAT 109
    assert_eq!(m.peek(7, 104), e(true, 0, None, 5));
    assert_eq!(m.peek(7, 106), e(true, 1, None, 3));
    assert_eq!(m.peek(7, 109), e(true, 2, None, 0));
    // Backwards: TAT 109 at now 50 is 59 ns of backlog, far beyond DVT: even a peek is denied.
    assert_eq!(m.peek(7, 50), e(false, 0, Some(53), 59));
    assert_eq!(m.check_n(7, 50, 2), e(false, 0, Some(59), 59));
    assert_eq!(m.keys(), 1);
}

/// The same hand-worked scenario through both limiters, spelled out (no model involved).
#[test]
fn limiters_hand_worked() {
    let q = Q {
        count: 3,
        period_ns: 10,
        burst: 2,
    };
    let clock = ManualClock::new();
    let keyed = KeyedLimiter::<u64>::gcra(q.quota())
        .clock(clock.clone())
        .build()
        .unwrap();
    let direct = Limiter::gcra(q.quota())
        .clock(clock.clone())
        .build()
        .unwrap();
    let steps: [(u64, u32, Expected); 6] = [
        (100, 1, e(true, 1, None, 3)),
        (101, 1, e(true, 0, None, 5)),
        (101, 1, e(false, 0, Some(2), 5)),
        (102, 3, e(false, 0, None, 4)),
        (103, 1, e(true, 0, None, 6)),
        (50, 2, e(false, 0, Some(59), 59)),
    ];
    for (now, n, want) in steps {
        clock.set_ns(now);
        assert_eq!(observe(&keyed.check_n(&7, n)), want, "keyed at {now}");
        assert_eq!(observe(&direct.check_n(n)), want, "direct at {now}");
    }
    clock.set_ns(50);
    assert_eq!(observe(&keyed.peek(&7)), e(false, 0, Some(53), 59));
    assert_eq!(observe(&direct.peek()), e(false, 0, Some(53), 59));
}
