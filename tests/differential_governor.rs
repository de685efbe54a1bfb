//! Differential tests against `governor` 0.10, the best peer: with the same emission interval
//! and burst, and both libraries on manual clocks moved in lockstep, every request gets the
//! same allow/deny decision, and every denial the same wait.
//!
//! Correspondence checked, for `n >= 1` (governor has no `n = 0`):
//!
//! | governor | cellgate |
//! |---|---|
//! | `Ok(())` | `is_allowed()` |
//! | `Err(NotUntil)` (`check`) / `Ok(Err(NotUntil))` (`check_n`) | denied, `retry_after == wait_time_from(clock.now())` |
//! | `Err(InsufficientCapacity(b))` (`check_n`, `n > b`) | denied, `retry_after == None`, `limit == b` |
//!
//! governor's `FakeRelativeClock` cannot move backwards, so neither clock does here.

use std::num::NonZeroU32;
use std::time::Duration;

use crate::common::gcra::{ops, quotas, Op, Q};
use cellgate::clock::{Clock as _, ManualClock};
use cellgate::{Decision, KeyedLimiter, Limiter};
use governor::clock::{Clock as _, FakeRelativeClock};
use governor::{InsufficientCapacity, NotUntil};
use proptest::prelude::*;

/// governor's quota with our interval `T = period / count` and burst.
fn governor_quota(q: Q) -> governor::Quota {
    governor::Quota::with_period(Duration::from_nanos(q.interval()))
        .unwrap()
        .allow_burst(NonZeroU32::new(q.burst).unwrap())
}

/// What governor said, normalised: `None` = admitted, `Some(wait)` = denied with that wait,
/// `Err(capacity)` = can never fit.
type Peer = Result<Option<Duration>, u32>;

fn from_single<P: governor::clock::Reference>(r: Result<(), NotUntil<P>>, now: P) -> Peer {
    Ok(r.err().map(|nu| nu.wait_time_from(now)))
}

fn from_multi<P: governor::clock::Reference>(
    r: Result<Result<(), NotUntil<P>>, InsufficientCapacity>,
    now: P,
) -> Peer {
    match r {
        Ok(inner) => from_single(inner, now),
        Err(InsufficientCapacity(cap)) => Err(cap),
    }
}

/// Asserts that `ours` and `theirs` correspond (see the module docs).
fn same(q: Q, step: usize, op: Op, ours: &Decision, theirs: Peer) -> Result<(), TestCaseError> {
    match theirs {
        Ok(None) => prop_assert!(
            ours.is_allowed(),
            "step {} {:?}: governor admits, cellgate denies: {:?}",
            step,
            op,
            ours
        ),
        Ok(Some(wait)) => {
            prop_assert!(
                !ours.is_allowed(),
                "step {} {:?}: governor denies (wait {:?}), cellgate admits: {:?}",
                step,
                op,
                wait,
                ours
            );
            prop_assert_eq!(ours.retry_after(), Some(wait), "step {} {:?}", step, op);
        }
        Err(cap) => {
            prop_assert_eq!(cap, q.burst, "governor's capacity is the burst");
            prop_assert!(!ours.is_allowed(), "step {} {:?}", step, op);
            prop_assert_eq!(ours.retry_after(), None, "step {} {:?}", step, op);
            prop_assert_eq!(ours.limit(), q.burst);
            if let Op::Check { n, .. } = op {
                prop_assert!(n > q.burst);
            }
        }
    }
    Ok(())
}

/// Steps both clocks through `ops` together, calling `check(i, op, key, n)` at every check.
fn drive(
    ops: &[Op],
    clock: &ManualClock,
    gclock: &FakeRelativeClock,
    mut check: impl FnMut(usize, Op, u64, u32) -> Result<(), TestCaseError>,
) -> Result<(), TestCaseError> {
    for (i, &op) in ops.iter().enumerate() {
        match op {
            Op::Advance(d) => {
                clock.advance_ns(d);
                gclock.advance(Duration::from_nanos(d));
            }
            Op::Check { key, n } => {
                prop_assert_eq!(
                    Duration::from(gclock.now()),
                    Duration::from_nanos(clock.now())
                );
                check(i, op, key, n)?;
            }
            Op::Back(_) | Op::Peek { .. } => unreachable!("not generated"),
        }
    }
    Ok(())
}

fn run_direct(q: Q, ops: &[Op]) -> Result<(), TestCaseError> {
    let clock = ManualClock::new();
    let ours = Limiter::gcra(q.quota())
        .clock(clock.clone())
        .build()
        .unwrap();
    let gclock = FakeRelativeClock::default();
    let theirs = governor::RateLimiter::direct_with_clock(governor_quota(q), gclock.clone());
    drive(ops, &clock, &gclock, |i, op, key, n| {
        // Odd keys use the single-cell entry points when n = 1, to cover both.
        let (d, peer) = if n == 1 && key % 2 == 1 {
            (ours.check(), from_single(theirs.check(), gclock.now()))
        } else {
            let nz = NonZeroU32::new(n).expect("n >= 1 here");
            (
                ours.check_n(n),
                from_multi(theirs.check_n(nz), gclock.now()),
            )
        };
        same(q, i, op, &d, peer)
    })
}

/// `table`: the bounded fingerprint table (`max_keys`) instead of the exact-key map.
fn run_keyed(q: Q, ops: &[Op], table: bool) -> Result<(), TestCaseError> {
    let clock = ManualClock::new();
    let builder = KeyedLimiter::<u64>::gcra(q.quota()).clock(clock.clone());
    let ours = if table { builder.max_keys(64) } else { builder }
        .build()
        .unwrap();
    let gclock = FakeRelativeClock::default();
    let dashmap = governor::RateLimiter::<u64, _, _, _>::dashmap_with_clock(
        governor_quota(q),
        gclock.clone(),
    );
    let hashmap = governor::RateLimiter::<u64, _, _, _>::hashmap_with_clock(
        governor_quota(q),
        gclock.clone(),
    );
    drive(ops, &clock, &gclock, |i, op, key, n| {
        let now = gclock.now();
        let (d, a, b) = if n == 1 && i % 2 == 1 {
            (
                ours.check(&key),
                from_single(dashmap.check_key(&key), now),
                from_single(hashmap.check_key(&key), now),
            )
        } else {
            let nz = NonZeroU32::new(n).expect("n >= 1 here");
            (
                ours.check_n(&key, n),
                from_multi(dashmap.check_key_n(&key, nz), now),
                from_multi(hashmap.check_key_n(&key, nz), now),
            )
        };
        prop_assert_eq!(a, b, "governor's two stores disagree");
        same(q, i, op, &d, a)
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn direct_agrees_with_governor(
        (q, ops) in quotas().prop_flat_map(|q| (Just(q), ops(q, 2, 96, false, 1))),
    ) {
        run_direct(q, &ops)?;
    }

    #[test]
    fn keyed_agrees_with_governor(
        (q, ops) in quotas().prop_flat_map(|q| (Just(q), ops(q, 4, 96, false, 1))),
    ) {
        run_keyed(q, &ops, false)?;
        run_keyed(q, &ops, true)?;
    }

    /// Tiny intervals and bursts, where every boundary is hit often.
    #[test]
    fn keyed_agrees_with_governor_on_tiny_quotas(
        (q, ops) in (1u32..=3, 1u64..=4, 1u32..=4)
            .prop_map(|(count, t, burst)| Q { count, period_ns: t * u64::from(count), burst })
            .prop_flat_map(|q| (Just(q), ops(q, 2, 128, false, 1))),
    ) {
        run_keyed(q, &ops, false)?;
        run_keyed(q, &ops, true)?;
    }
}

/// One hand-checked scenario, so the harness itself is known to compare something.
#[test]
fn governor_harness_sanity() {
    let q = Q {
        count: 1,
        period_ns: 100,
        burst: 2,
    };
    let gclock = FakeRelativeClock::default();
    let g = governor::RateLimiter::direct_with_clock(governor_quota(q), gclock.clone());
    assert_eq!(from_single(g.check(), gclock.now()), Ok(None));
    assert_eq!(from_single(g.check(), gclock.now()), Ok(None));
    assert_eq!(
        from_single(g.check(), gclock.now()),
        Ok(Some(Duration::from_nanos(100)))
    );
    assert_eq!(
        from_multi(g.check_n(NonZeroU32::new(3).unwrap()), gclock.now()),
        Err(2)
    );
    gclock.advance(Duration::from_nanos(40));
    assert_eq!(
        from_multi(g.check_n(NonZeroU32::new(2).unwrap()), gclock.now()),
        Ok(Some(Duration::from_nanos(160)))
    );
    // cellgate, same numbers.
    let clock = ManualClock::new();
    let ours = Limiter::gcra(q.quota())
        .clock(clock.clone())
        .build()
        .unwrap();
    assert!(ours.check().is_allowed());
    assert!(ours.check().is_allowed());
    assert_eq!(ours.check().retry_after_ns(), Some(100));
    assert_eq!(ours.check_n(3).retry_after(), None);
    clock.advance_ns(40);
    assert_eq!(ours.check_n(2).retry_after_ns(), Some(160));
}
