//! The public API (README, "Quick start" and "The decision"): configuration errors, what
//! creates a key and what does not, borrowed lookups, lossless eviction, the `max_keys` cap,
//! and the `Decision` fields on hand-worked cases.

use std::time::Duration;

use crate::common::gcra::{apply_clock, observe, ops, quotas, Op};
use cellgate::clock::{Clock, ManualClock};
use cellgate::{ConfigError, KeyedLimiter, Limiter, Quota};
use proptest::prelude::*;

const SEC: Duration = Duration::from_secs(1);

/// Builds `quota` through both builders (with and without the optional settings) and checks
/// that each reports `want`, with a `Display` text containing every one of `mentions`.
fn assert_rejected(quota: Quota, want: &ConfigError, mentions: &[&str]) {
    let errors = [
        Limiter::gcra(quota).build().unwrap_err(),
        Limiter::gcra(quota)
            .clock(ManualClock::new())
            .build()
            .unwrap_err(),
        KeyedLimiter::<u64>::gcra(quota).build().unwrap_err(),
        KeyedLimiter::<String>::gcra(quota)
            .clock(ManualClock::new())
            .max_keys(10)
            .build()
            .unwrap_err(),
    ];
    for err in errors {
        assert_eq!(&err, want, "{quota:?}");
        let text = err.to_string();
        for m in mentions {
            assert!(text.contains(m), "{text:?} does not mention {m:?}");
        }
        let _: &dyn std::error::Error = &err;
    }
}

/// Builds `quota` through both builders and checks that it is accepted.
fn assert_accepted(quota: Quota) {
    assert!(Limiter::gcra(quota).build().is_ok(), "{quota:?}");
    assert!(
        KeyedLimiter::<u64>::gcra(quota).build().is_ok(),
        "{quota:?}"
    );
}

#[test]
fn zero_fields_are_config_errors() {
    assert_rejected(
        Quota::new(0, SEC),
        &ConfigError::Zero { field: "count" },
        &["count", "0"],
    );
    assert_rejected(
        Quota::per_second(0).with_burst(5),
        &ConfigError::Zero { field: "count" },
        &["count", "0"],
    );
    assert_rejected(
        Quota::new(1, Duration::ZERO),
        &ConfigError::Zero { field: "period" },
        &["period", "0"],
    );
    assert_rejected(
        Quota::new(1, SEC).with_burst(0),
        &ConfigError::Zero { field: "burst" },
        &["burst", "0"],
    );
    assert_eq!(
        ConfigError::Zero { field: "count" }.to_string(),
        "count must be at least 1, got 0"
    );
}

#[test]
fn max_keys_zero_is_a_config_error() {
    let err = KeyedLimiter::<u64>::gcra(Quota::per_second(1))
        .max_keys(0)
        .build()
        .unwrap_err();
    assert_eq!(err, ConfigError::Zero { field: "max_keys" });
    assert!(err.to_string().contains("max_keys"), "{err}");
    assert!(err.to_string().contains('0'), "{err}");
    assert!(KeyedLimiter::<u64>::gcra(Quota::per_second(1))
        .max_keys(1)
        .build()
        .is_ok());
}

#[test]
fn period_beyond_u64_nanoseconds_is_a_config_error() {
    let longest = Duration::from_nanos(u64::MAX);
    for period in [longest + Duration::from_nanos(1), Duration::MAX] {
        assert_rejected(
            Quota::new(1, period),
            &ConfigError::PeriodTooLong { period },
            &["period", &format!("{period:?}")],
        );
    }
    // The longest representable period, burst 1: T = DVT = u64::MAX ns.
    assert_accepted(Quota::new(1, longest));
}

#[test]
fn rate_faster_than_one_per_nanosecond_is_a_config_error() {
    for (count, period_ns) in [(2u32, 1u64), (1000, 999), (u32::MAX, 1)] {
        let period = Duration::from_nanos(period_ns);
        assert_rejected(
            Quota::new(count, period),
            &ConfigError::RateTooFast { count, period },
            &[&format!("count {count}"), &format!("{period:?}")],
        );
    }
    // Exactly one per nanosecond is fine.
    assert_accepted(Quota::new(1000, Duration::from_nanos(1000)));
    assert_accepted(Quota::new(1, Duration::from_nanos(1)));
}

#[test]
fn tolerance_overflow_is_a_config_error() {
    let interval_ns = u64::MAX / 2;
    let q = Quota::new(1, Duration::from_nanos(interval_ns));
    assert_rejected(
        q.with_burst(3),
        &ConfigError::BurstTooLarge {
            burst: 3,
            interval_ns,
        },
        &["burst 3", &interval_ns.to_string()],
    );
    // 2 * (u64::MAX / 2) = u64::MAX - 1 still fits.
    assert_accepted(q.with_burst(2));
    // T = 1 s, burst u32::MAX: 4.3e18 ns fits; T = 5 s does not.
    assert_accepted(Quota::per_second(1).with_burst(u32::MAX));
    assert_rejected(
        Quota::new(1, Duration::from_secs(5)).with_burst(u32::MAX),
        &ConfigError::BurstTooLarge {
            burst: u32::MAX,
            interval_ns: 5_000_000_000,
        },
        &[&format!("burst {}", u32::MAX), "5000000000"],
    );
}

fn keyed(quota: Quota) -> (ManualClock, KeyedLimiter<u64, ManualClock>) {
    let clock = ManualClock::new();
    let limiter = KeyedLimiter::<u64>::gcra(quota)
        .clock(clock.clone())
        .build()
        .unwrap();
    (clock, limiter)
}

#[test]
fn peek_creates_no_key_and_consumes_nothing() {
    let (_clock, l) = keyed(Quota::per_second(3));
    let d = l.peek(&1);
    assert!(d.is_allowed());
    assert_eq!((d.limit(), d.remaining(), d.reset_after_ns()), (3, 3, 0));
    assert!(l.is_empty());
    assert_eq!(l.len(), 0);
    assert!(l.check(&1).is_allowed());
    assert_eq!(l.len(), 1);
    // Peeking a held key repeatedly changes nothing.
    for _ in 0..10 {
        assert_eq!(l.peek(&1).remaining(), 2);
    }
    assert!(l.check_n(&1, 2).is_allowed());
    assert!(!l.check(&1).is_allowed());
    assert_eq!(l.len(), 1);
}

#[test]
fn requests_that_admit_nothing_create_no_key() {
    let (_clock, l) = keyed(Quota::per_second(3));
    for n in [4, 5, u32::MAX] {
        let d = l.check_n(&9, n);
        assert!(!d.is_allowed());
        assert_eq!(d.retry_after(), None, "n = {n} > burst can never fit");
        assert_eq!((d.limit(), d.remaining(), d.reset_after_ns()), (3, 3, 0));
    }
    // n = 0 is admitted but consumes nothing.
    let d = l.check_n(&9, 0);
    assert!(d.is_allowed());
    assert_eq!(d.remaining(), 3);
    assert!(l.is_empty(), "{} keys", l.len());
    // The key's budget is untouched.
    assert!(l.check_n(&9, 3).is_allowed());
    assert_eq!(l.len(), 1);
}

#[test]
fn string_keys_are_looked_up_by_str() {
    let clock = ManualClock::new();
    let l = KeyedLimiter::<String>::gcra(Quota::per_second(2))
        .clock(clock.clone())
        .build()
        .unwrap();
    assert!(l.check("alice").is_allowed());
    assert!(l.check(&String::from("alice")).is_allowed());
    assert!(
        !l.check("alice").is_allowed(),
        "&str and String share a key"
    );
    assert_eq!(l.peek("alice").remaining(), 0);
    assert!(l.check("bob").is_allowed());
    assert_eq!(l.peek("bob").remaining(), 1);
    assert_eq!(l.len(), 2);
    clock.advance(Duration::from_millis(500));
    assert!(l.check_n("alice", 1).is_allowed());
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Two limiters on clocks moved in lockstep; one evicts idle keys after every step. Every
    /// decision is identical. (Time moves forward only: eviction is lossless for decisions
    /// made at the eviction time or later, which is what its docs promise.)
    #[test]
    fn evict_idle_is_lossless(
        (q, ops) in quotas().prop_flat_map(|q| (Just(q), ops(q, 4, 64, false, 0))),
    ) {
        let (clock_a, keep) = keyed(q.quota());
        let (clock_b, evict) = keyed(q.quota());
        let mut evicted = 0u64;
        for (i, &op) in ops.iter().enumerate() {
            if apply_clock(&clock_a, op) {
                apply_clock(&clock_b, op);
            } else {
                let (a, b) = match op {
                    Op::Check { key, n } => (keep.check_n(&key, n), evict.check_n(&key, n)),
                    Op::Peek { key } => (keep.peek(&key), evict.peek(&key)),
                    Op::Advance(_) | Op::Back(_) => unreachable!(),
                };
                prop_assert_eq!(observe(&a), observe(&b), "step {} {:?}", i, op);
            }
            let before = evict.len();
            let n = evict.evict_idle();
            evicted += n as u64;
            prop_assert_eq!(evict.len(), before - n);
            prop_assert!(evict.len() <= keep.len());
        }
        prop_assert_eq!(evict.stats().evicted, evicted);
        prop_assert_eq!(keep.stats().evicted, 0);
        // Long after everything, every key is idle.
        clock_b.advance_ns(u64::from(q.burst) * q.interval() + 1);
        evict.evict_idle();
        prop_assert!(evict.is_empty());
    }
}

#[test]
fn evict_idle_drops_only_idle_keys() {
    // T = 1 s, burst 2.
    let (clock, l) = keyed(Quota::per_second(1).with_burst(2));
    assert!(l.check(&1).is_allowed()); // TAT 1 s
    assert!(l.check_n(&2, 2).is_allowed()); // TAT 2 s
    assert_eq!(l.evict_idle(), 0);
    clock.advance(SEC - Duration::from_nanos(1));
    assert_eq!(l.evict_idle(), 0, "key 1 is one ns short of fresh");
    clock.advance_ns(1);
    assert_eq!(l.evict_idle(), 1);
    assert_eq!((l.len(), l.stats().evicted), (1, 1));
    assert_eq!(l.peek(&2).remaining(), 1);
    clock.advance(SEC);
    assert_eq!(l.evict_idle(), 1);
    assert!(l.is_empty());
    assert_eq!(l.stats().evicted, 2);
}

#[test]
fn max_keys_refuses_new_keys_and_sweeps_idle_ones() {
    let clock = ManualClock::new();
    let l = KeyedLimiter::<u64>::gcra(Quota::per_second(1).with_burst(2))
        .clock(clock.clone())
        .max_keys(2)
        .when_full(cellgate::WhenFull::DenyNew)
        .build()
        .unwrap();
    assert!(l.check(&1).is_allowed());
    assert!(l.check(&2).is_allowed());
    assert_eq!(l.stats().refused, 0);
    // Full of live keys: a new key is denied with nothing to wait for, and counted.
    let d = l.check(&3);
    assert!(!d.is_allowed());
    assert_eq!((d.retry_after(), d.remaining()), (None, 0));
    assert_eq!(l.stats().refused, 1);
    assert!(!l.check(&4).is_allowed());
    assert_eq!(l.stats().refused, 2);
    // Requests that would create no key are not refusals.
    assert!(l.peek(&5).is_allowed());
    assert!(!l.check_n(&5, 3).is_allowed());
    assert_eq!(l.stats().refused, 2);
    // Held keys are unaffected by the cap.
    assert!(l.check(&1).is_allowed());
    assert_eq!(l.len(), 2);
    // Once the held keys are idle, a new key makes room by sweeping them.
    clock.advance(Duration::from_secs(10));
    assert!(l.check(&3).is_allowed());
    assert_eq!(l.stats().refused, 2);
    assert!(l.stats().evicted >= 1);
    assert!(l.len() <= 2, "{} keys", l.len());
}

/// A quota of 30 a minute with a burst of 16, worked by hand: T = 2 s, DVT = 32 s.
#[test]
fn decision_fields_hand_worked() {
    let (clock, l) = keyed(Quota::new(30, Duration::from_secs(60)).with_burst(16));
    let s = Duration::from_secs;
    let check = |n: u32| l.check_n(&42, n);

    let d = check(1);
    assert!(d.is_allowed());
    assert_eq!(d.limit(), 16);
    assert_eq!(d.remaining(), 15);
    assert_eq!(d.reset_after(), s(2));
    assert_eq!(d.retry_after(), None, "no retry_after when allowed");

    let d = check(15);
    assert!(d.is_allowed());
    assert_eq!((d.remaining(), d.reset_after()), (0, s(32)));

    let d = check(1);
    assert!(!d.is_allowed());
    assert_eq!(d.limit(), 16);
    assert_eq!(d.remaining(), 0);
    assert_eq!(d.retry_after(), Some(s(2)));
    assert_eq!(d.reset_after(), s(32), "a denial consumes nothing");

    clock.advance(s(1));
    let d = check(1);
    assert!(!d.is_allowed());
    assert_eq!((d.retry_after(), d.reset_after()), (Some(s(1)), s(31)));

    clock.advance(s(1));
    let d = l.peek(&42);
    assert!(d.is_allowed());
    assert_eq!((d.remaining(), d.reset_after()), (1, s(30)));
    // More than the limit: never fits, so no retry_after; the fields still describe the key.
    let d = check(17);
    assert!(!d.is_allowed());
    assert_eq!(d.retry_after(), None);
    assert_eq!((d.remaining(), d.reset_after()), (1, s(30)));
    // Two units with one available: wait for one more interval.
    let d = check(2);
    assert!(!d.is_allowed());
    assert_eq!(d.retry_after(), Some(s(2)));
    // Exactly the remaining one fits.
    let d = check(1);
    assert!(d.is_allowed());
    assert_eq!((d.remaining(), d.reset_after()), (0, s(32)));

    // reset_after later, the key is fresh again.
    clock.advance(s(32));
    let d = l.peek(&42);
    assert_eq!((d.remaining(), d.reset_after()), (16, Duration::ZERO));
    assert!(check(16).is_allowed());
}

/// The `Decision` docs example, through the direct limiter.
#[test]
fn decision_doc_example_direct() {
    let clock = ManualClock::new();
    let limiter = Limiter::gcra(Quota::per_second(2))
        .clock(clock.clone())
        .build()
        .unwrap();
    let d = limiter.check();
    assert!(d.is_allowed());
    assert_eq!((d.limit(), d.remaining()), (2, 1));
    assert_eq!(d.reset_after(), Duration::from_millis(500));
    assert!(limiter.check().is_allowed());
    let d = limiter.check();
    assert!(!d.is_allowed());
    assert_eq!(d.retry_after(), Some(Duration::from_millis(500)));
    assert_eq!(d.reset_after(), SEC);
    clock.advance(Duration::from_millis(499));
    assert_eq!(limiter.check().retry_after_ns(), Some(1_000_000));
    clock.advance(Duration::from_millis(1));
    assert!(limiter.check().is_allowed());
    assert_eq!(clock.now(), 500_000_000);
}

/// Past the `u64` nanosecond horizon nothing wraps and nothing panics: requests are denied with
/// no `retry_after`.
#[test]
fn the_horizon_fails_closed() {
    let q = Quota::per_second(1);
    let clock = ManualClock::new();
    let direct = Limiter::gcra(q).clock(clock.clone()).build().unwrap();
    let (kclock, keyed) = keyed(q);
    for now in [u64::MAX - 999_999_999, u64::MAX - 1, u64::MAX] {
        clock.set_ns(now);
        kclock.set_ns(now);
        for d in [direct.check(), keyed.check(&1)] {
            assert!(!d.is_allowed(), "at {now}: {d:?}");
            assert_eq!(d.retry_after(), None, "at {now}");
        }
    }
    assert!(keyed.is_empty());
    // Exactly at the edge, one interval still fits.
    clock.set_ns(u64::MAX - 1_000_000_000);
    assert!(direct.check().is_allowed());
    assert!(!direct.check().is_allowed());
}

/// Eviction must not hand credit back to a clock that later goes backwards: a key dropped by a
/// sweep at `s` is recreated as strictly as the dropped state could have been.
#[test]
fn eviction_then_backwards_clock_gives_no_credit() {
    let clock = ManualClock::new();
    let evicting = KeyedLimiter::<u64>::gcra(Quota::new(1, Duration::from_nanos(100)))
        .clock(clock.clone())
        .build()
        .unwrap();
    let keeping = KeyedLimiter::<u64>::gcra(Quota::new(1, Duration::from_nanos(100)))
        .clock(clock.clone())
        .build()
        .unwrap();
    clock.set_ns(900);
    assert!(evicting.check(&1).is_allowed());
    assert!(keeping.check(&1).is_allowed());
    clock.set_ns(1000);
    assert_eq!(evicting.evict_idle(), 1);
    clock.set_ns(500);
    let (a, b) = (evicting.check(&1), keeping.check(&1));
    assert!(!b.is_allowed());
    assert!(!a.is_allowed(), "evicted key regained credit: {a:?}");
    assert_eq!(a.retry_after(), b.retry_after());
    // And from the sweep's time on, the recreated key is exactly a fresh one.
    clock.set_ns(1000);
    assert_eq!(evicting.check(&1), keeping.check(&1));
}

/// A full keyed stock store keeps sweeping idle keys on its own (its decisions ignore time,
/// but the sweep back-off must not).
#[test]
fn full_stock_store_keeps_sweeping() {
    let clock = ManualClock::new();
    let l = KeyedLimiter::<u32>::stock(1)
        .clock(clock.clone())
        .max_keys(1)
        .exact_keys()
        .build()
        .unwrap();
    assert!(l.check(&1).is_allowed());
    assert!(!l.check(&2).is_allowed(), "store full of a live key");
    l.set_stock(&1, 1).unwrap(); // key 1 is back to its configured stock: idle
    clock.advance(Duration::from_secs(1));
    assert!(l.check(&2).is_allowed(), "the automatic sweep made room");
    assert_eq!(l.stats().evicted, 1);
}

/// Operator actions on a new key that the fixed-capacity table (`max_keys` with
/// `EvictNearestFresh`, which never evicts stock keys) cannot hold fail loudly.
#[test]
fn restock_into_a_full_table_is_an_error() {
    let l = KeyedLimiter::<u32>::stock(1)
        .max_keys(1)
        .when_full(cellgate::WhenFull::EvictNearestFresh)
        .build()
        .unwrap();
    let mut full = None;
    for k in 0..10_000u32 {
        match l.restock(&k, 5) {
            Ok(left) => assert_eq!(left, 6),
            Err(e) => {
                full = Some((k, e));
                break;
            }
        }
    }
    let (k, e) = full.expect("a one-key table has only a few slots");
    assert!(matches!(e, ConfigError::StoreFull { max_keys: 1 }), "{e}");
    assert_eq!(l.peek(&k).remaining(), 1, "nothing was changed");
    assert!(matches!(
        l.set_stock(&k, 9),
        Err(ConfigError::StoreFull { .. })
    ));
}

/// The default (growing) table takes operator actions past `max_keys`: the ceiling bounds the
/// keys that traffic creates, and the table grows for the operator's.
#[test]
fn restock_past_the_ceiling_grows_the_default_table() {
    let l = KeyedLimiter::<u32>::stock(1).max_keys(1).build().unwrap();
    for k in 0..1_000u32 {
        assert_eq!(l.restock(&k, 5), Ok(6), "key {k}");
    }
    assert_eq!(l.len(), 1_000);
    assert_eq!(l.peek(&999).remaining(), 6);
    // Traffic still cannot add a key past the ceiling.
    assert!(!l.check(&5_000).is_allowed());
    assert_eq!(l.stats().refused, 1);
}

/// Every builder is `Clone`, and a clone builds a limiter of its own (no shared state).
#[test]
fn builders_clone_into_independent_limiters() {
    let keyed = KeyedLimiter::<u64>::gcra(Quota::per_second(1)).max_keys(10);
    let (a, b) = (keyed.clone().build().unwrap(), keyed.build().unwrap());
    assert!(a.check(&1).is_allowed());
    assert!(!a.check(&1).is_allowed());
    assert!(
        b.check(&1).is_allowed(),
        "a clone's limiter shares no state"
    );

    let log = cellgate::SlidingLog::<u64>::builder(1, Duration::from_secs(60));
    let (a, b) = (log.clone().build().unwrap(), log.build().unwrap());
    assert!(a.check(&1).is_allowed());
    assert!(!a.check(&1).is_allowed());
    assert!(b.check(&1).is_allowed(), "a clone's log shares no state");
}
