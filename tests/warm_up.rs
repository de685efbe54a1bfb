//! Warm-up limiters through the public API: eviction is lossless, both stores and the direct
//! limiter agree, a clock that goes backwards gains nothing, and cancelling the last
//! reservation is exact. (The algorithm's own model tests are in `src/algorithm/warm_up/mod.rs`.)

use std::time::Duration;

use cellgate::clock::{Clock, ManualClock};
use cellgate::{KeyedLimiter, Limiter, Quota};
use proptest::prelude::*;

#[derive(Debug, Clone, Copy)]
enum Op {
    /// Move the clock by this many µs (may be negative: the clock goes back).
    Advance(i32),
    Check(u8, u32),
    Reserve(u8, u32, u32),
}

fn ops() -> impl Strategy<Value = Vec<Op>> {
    let op = prop_oneof![
        4 => (-2_000i32..20_000).prop_map(Op::Advance),
        3 => (0u8..4, 0u32..4).prop_map(|(k, n)| Op::Check(k, n)),
        2 => (0u8..4, 1u32..4, 0u32..10_000).prop_map(|(k, n, w)| Op::Reserve(k, n, w)),
    ];
    prop::collection::vec(op, 1..120)
}

fn configs() -> impl Strategy<Value = (u64, u64)> {
    // Stable interval 100 µs .. 2 ms; warm-up 0.5 .. 40 intervals.
    (100u64..2_000).prop_flat_map(|i| (Just(i), (i / 2)..(i * 40)))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Evicting idle keys after every step changes no decision, in either store, while the
    /// clock does not go back (a clock behind a sweep only ever sees evicted keys as stricter:
    /// see the sweep floor); and a keyed limiter decides like one direct limiter per key
    /// whatever the clock does.
    #[test]
    fn eviction_is_lossless_and_stores_agree((i_us, w_us) in configs(), ops in ops()) {
        let clock = ManualClock::new();
        clock.set(Duration::from_secs(1));
        let stable = Quota::with_interval(Duration::from_micros(i_us));
        let warm = Duration::from_micros(w_us);
        let build = |max: Option<usize>, exact: bool| {
            let mut b = KeyedLimiter::<u8>::warm_up(stable, warm).clock(clock.clone());
            if let Some(m) = max {
                b = b.max_keys(m);
            }
            if exact {
                b = b.exact_keys();
            }
            b.build().unwrap()
        };
        let never = build(None, false);
        let table = build(Some(64), false);
        let map = build(Some(64), true);
        let direct: Vec<_> = (0..4)
            .map(|_| Limiter::warm_up(stable, warm).clock(clock.clone()).build().unwrap())
            .collect();
        let mut monotone = true;
        for op in ops {
            match op {
                Op::Advance(us) => {
                    let now = clock.now();
                    let d = u64::from(us.unsigned_abs()) * 1_000;
                    monotone &= us >= 0;
                    clock.set_ns(if us < 0 { now.saturating_sub(d) } else { now + d });
                }
                Op::Check(k, n) => {
                    let want = never.check_n(&k, n);
                    let (t, m) = (table.check_n(&k, n), map.check_n(&k, n));
                    if monotone {
                        prop_assert_eq!(t, want);
                        prop_assert_eq!(m, want);
                    }
                    prop_assert_eq!(direct[k as usize].check_n(n), want);
                    prop_assert!(want.limit() == 1 && want.remaining() <= 1);
                }
                Op::Reserve(k, n, w) => {
                    let wait = Duration::from_micros(w.into());
                    let want = never.reserve(&k, n, wait).decision();
                    let t = table.reserve(&k, n, wait).decision();
                    let m = map.reserve(&k, n, wait).decision();
                    if monotone {
                        prop_assert_eq!(t, want);
                        prop_assert_eq!(m, want);
                    }
                    prop_assert_eq!(direct[k as usize].reserve(n, wait).decision(), want);
                    if want.is_allowed() {
                        prop_assert!(want.delay() <= wait);
                    }
                }
            }
            table.evict_idle();
            map.evict_idle();
        }
    }
}

#[test]
fn a_clock_that_goes_back_gains_nothing() {
    let clock = ManualClock::new();
    clock.set(Duration::from_secs(10));
    let l = Limiter::warm_up(Quota::per_second(100), Duration::from_secs(1))
        .clock(clock.clone())
        .build()
        .unwrap();
    assert!(l.check().is_allowed());
    let wait = l.check().retry_after().unwrap();
    clock.set(Duration::from_secs(5));
    let d = l.check();
    assert!(!d.is_allowed());
    assert!(d.retry_after().unwrap() >= wait + Duration::from_secs(5) - Duration::from_micros(1));
}

#[test]
fn cancelling_the_last_reservation_is_exact() {
    let clock = ManualClock::new();
    let l = KeyedLimiter::<u8>::warm_up(Quota::per_second(100), Duration::from_secs(1))
        .clock(clock.clone())
        .build()
        .unwrap();
    l.check(&1);
    let before = l.peek(&1);
    let r = l.reserve(&1, 3, Duration::from_secs(1));
    assert!(r.is_allowed());
    assert!(r.delay() > Duration::ZERO);
    assert_ne!(l.peek(&1), before);
    assert!(l.cancel(&1, r));
    assert_eq!(l.peek(&1), before);
    // An older one, with a later one behind it, stays spent; refunds do not apply.
    let a = l.reserve(&1, 1, Duration::from_secs(1));
    let _b = l.reserve(&1, 1, Duration::from_secs(1));
    assert!(!l.cancel(&1, a));
    assert!(!l.refund(&1, 1));
    // Runtime and per-call quotas are GCRA's.
    assert!(l.set_quota(Quota::per_second(1)).is_err());
    assert!(l.check_with(&1, &Quota::per_second(1), 1).is_err());
}
