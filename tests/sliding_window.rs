//! Sliding window counter: the window family's tests (`family_tests!`: the keyed and direct
//! limiters against `cellgate_models::SlidingWindowModel`, whose `retry_after` is a binary
//! search, not the crate's closed form; eviction; many threads on a frozen clock), with windows
//! of 1 s to 1 day, limits up to the maximum and clocks starting a few windows before the
//! horizon; the shortest wait, a sweep past the horizon, layout bounds, configuration errors
//! and hand-worked edges.

use std::time::Duration;

use cellgate::clock::{DefaultClock, ManualClock};
use cellgate::{ConfigError, Decision, KeyedLimiter, KeyedLimiterBuilder, Limiter, LimiterBuilder};
use proptest::prelude::*;

use crate::common::threads::admitted_remainings;
use crate::common::windows::sliding_window::{max_limit, SlidingWindowModel};
use crate::common::windows::*;
use cellgate_models::index_bits;

struct Sliding;

impl Counter for Sliding {
    type Model = SlidingWindowModel;
    const KEYED: fn(u32, Duration) -> KeyedLimiterBuilder<u8, DefaultClock> =
        KeyedLimiter::sliding_window;
    const KEYED_U32: fn(u32, Duration) -> KeyedLimiterBuilder<u32, DefaultClock> =
        KeyedLimiter::sliding_window;
    const DIRECT: fn(u32, Duration) -> LimiterBuilder<DefaultClock> = Limiter::sliding_window;
    const MAX_LIMIT: fn(u64) -> u128 = max_limit;
    /// An hour: 50 000 (16-bit counts) leaves a 32-bit index, which covers every `u64` time
    /// (no horizon).
    const THREADS_WINDOW: u64 = 3_600_000_000_000;

    fn new_model(window: u64, limit: u32) -> SlidingWindowModel {
        SlidingWindowModel::new(limit, window)
    }

    /// The shared lengths (every layout regime) and 1 s to 1 day, with the round ones, where
    /// the largest limits have a horizon.
    fn config_windows() -> BoxedStrategy<u64> {
        const S: u64 = 1_000_000_000;
        prop_oneof![
            3 => windows(),
            1 => prop::sample::select(vec![S, 10 * S, 60 * S, 3_600 * S, 86_400 * S]),
            1 => S..=86_400 * S,
        ]
        .boxed()
    }

    /// At 0, or a few windows before the horizon, so that the steps cross it.
    fn starts(w: u64, limit: u32) -> BoxedStrategy<u64> {
        prop_oneof![
            Just(0),
            (any::<u8>(), 0u16..1000)
                .prop_map(move |(before, frac)| start_near_horizon(w, limit, before, frac)),
        ]
        .boxed()
    }
}

fn keyed(limit: u32, w: u64, clock: &ManualClock) -> KeyedLimiter<u8, ManualClock> {
    Sliding::keyed(limit, w, clock)
}

fn table(limit: u32, w: u64, clock: &ManualClock) -> KeyedLimiter<u8, ManualClock> {
    Sliding::table(limit, w, clock)
}

fn direct(limit: u32, w: u64, clock: &ManualClock) -> Limiter<ManualClock> {
    <Sliding as Counter>::direct(limit, w, clock)
}

/// The horizon of `limit` per `w` ns (the model's, from the module docs' layout).
fn horizon_of(limit: u32, w: u64) -> Option<u128> {
    SlidingWindowModel::new(limit, w).horizon
}

/// A point a few windows (`windows_before % 4` plus `frac / 1000` of one) before the horizon,
/// or before the end of the clock's range when there is none.
fn start_near_horizon(w: u64, limit: u32, windows_before: u8, frac: u16) -> u64 {
    let end = horizon_of(limit, w).unwrap_or(U64 + 1);
    let back =
        u128::from(w) * u128::from(windows_before % 4) + u128::from(w) * u128::from(frac) / 1000;
    u64::try_from(end.saturating_sub(back + 1).min(U64)).unwrap()
}

family_tests!(Sliding);

proptest! {
    #![proptest_config(config(384))]

    /// `retry_after` is the shortest wait: the same request is denied one nanosecond earlier
    /// and admitted at that time (checked on the limiter itself, not the model).
    #[test]
    fn retry_after_is_the_shortest_wait(
        (w, limit, start) in started_configs::<Sliding>(),
        steps in steps_of(actions(), 1..=30),
        n in n_sels(),
    ) {
        let clock = ManualClock::new();
        let l = keyed(limit, w, &clock);
        let model = Sliding::model(w, limit);
        drive(&model, w, limit, &clock, &[&l], &starting_at(start, &steps), false)?;
        let n = n.resolve(limit);
        let now = clock_now(&clock);
        let asked = l.check_n(&0, n);
        if let Some(wait) = asked.retry_after_ns() {
            prop_assert!(!asked.is_allowed() && n <= limit);
            prop_assert_eq!(fields(&asked), fields(&l.check_n(&0, n)), "a denial changes nothing");
            clock.set_ns(now + wait - 1);
            prop_assert!(!l.check_n(&0, n).is_allowed(), "admitted 1 ns before retry_after");
            clock.set_ns(now + wait);
            let fits = l.peek(&0);
            prop_assert!(fits.remaining() >= n, "{:?} does not fit at retry_after: {:?}", n, fits);
            prop_assert!(l.check_n(&0, n).is_allowed());
        } else if !asked.is_allowed() && n <= limit {
            // No wait helps within the clock's range and before the horizon: still denied at
            // the last instant of both.
            let last = horizon_of(limit, w).map_or(U64, |h| h - 1);
            clock.set_ns(u64::try_from(last).unwrap().max(now));
            prop_assert!(!l.check_n(&0, n).is_allowed(), "no retry_after, but admitted at {}", last);
        }
    }

    /// A sweep at or past the horizon (where every key is idle, whatever it holds) gives no
    /// credit to a clock set back before it: the evicting limiter is at least as strict as one
    /// that never evicts, for every key, in the last windows before the horizon.
    #[test]
    fn a_sweep_past_the_horizon_gives_no_credit_before_it(
        (w, limit) in Sliding::configs().prop_filter("a horizon", |&(w, l)| horizon_of(l, w).is_some()),
        history in steps_of(actions(), 1..=30),
        (before, frac) in (any::<u8>(), 0u16..1000),
        (after, back) in (0u64..3, 0u64..3000),
        n in n_sels(),
    ) {
        let h = u64::try_from(horizon_of(limit, w).unwrap()).unwrap();
        let n = n.resolve(limit);
        let history = starting_at(start_near_horizon(w, limit, before, frac), &history);
        for store in [keyed, table] {
            let clock = ManualClock::new();
            let (a, b) = (store(limit, w, &clock), store(limit, w, &clock));
            let model = Sliding::model(w, limit);
            drive(&model, w, limit, &clock, &[&a, &b], &history, true)?;
            let swept = clock_now(&clock).max(h).saturating_add(after);
            clock.set_ns(swept);
            a.evict_idle();
            prop_assert!(a.is_empty(), "every key is idle past the horizon");
            // Back into the last three windows before the horizon.
            // `h >= 4 * w`: the index holds at least 2 bits.
            let back = u64::try_from(u128::from(back) * u128::from(w) / 1000).unwrap();
            clock.set_ns(h - 1 - back);
            for key in 0..3u8 {
                let (pa, pb) = (a.peek(&key), b.peek(&key));
                prop_assert!(pa.remaining() <= pb.remaining(), "key {}: {:?} vs {:?}", key, pa, pb);
                if n >= 1 && a.check_n(&key, n).is_allowed() {
                    prop_assert!(b.check_n(&key, n).is_allowed(), "key {}: admitted after the sweep only", key);
                }
            }
        }
    }

    /// The largest limit of the layout builds; one more is `LimitTooLarge`. The full-range
    /// bound (`2^((64 - I) / 2) - 1`, `I` = bits of `u64::MAX / W`, the largest count width
    /// whose index covers every `u64` time) is never more, and has no horizon.
    #[test]
    fn layout_bounds(w in Sliding::config_windows()) {
        counter_layout_bounds::<Sliding>(w)?;
        let full = (1u128 << ((64 - index_bits(w)) / 2)) - 1;
        prop_assert!(full <= max_limit(w));
        if full >= 1 {
            prop_assert_eq!(horizon_of(u32::try_from(full).unwrap(), w), None);
        }
    }
}

fn clock_now(clock: &ManualClock) -> u64 {
    use cellgate::clock::Clock;
    clock.now()
}

fn at(clock: &ManualClock, ns: u64) -> &ManualClock {
    clock.set_ns(ns);
    clock
}

#[test]
fn documented_example() {
    let clock = ManualClock::new();
    let l = KeyedLimiter::<u64>::sliding_window(100, Duration::from_secs(60))
        .clock(clock.clone())
        .build()
        .unwrap();
    assert!(l.check_n(&1, 100).is_allowed());
    clock.advance(Duration::from_secs(90));
    assert_eq!(l.peek(&1).remaining(), 50);
}

#[test]
fn boundaries_are_exact() {
    let clock = ManualClock::new();
    let l = direct(4, 100, &clock);
    at(&clock, 99);
    assert!(l.check_n(4).is_allowed());
    // At 100 (e = 0) prev weighs fully; at 124 4 * 76 = 304 > 300; at 125 exactly 300.
    at(&clock, 100);
    let d = l.check();
    assert_eq!(d.retry_after_ns(), Some(25));
    assert_eq!(d.reset_after_ns(), 100);
    at(&clock, 124);
    assert!(!l.check().is_allowed());
    at(&clock, 125);
    assert!(l.check().is_allowed());
    // curr = 1 in window 1: the key is clear at 300, not at 299.
    at(&clock, 299);
    assert_eq!(l.peek().reset_after_ns(), 1);
    at(&clock, 300);
    assert_eq!(l.peek().reset_after_ns(), 0);
    assert_eq!(l.peek().remaining(), 4);
}

/// A tenant of six million a minute: builds, is exact up to its horizon (2^18
/// minutes after the clock's origin, 182 days), and is closed from it on, for every store.
#[test]
fn six_million_a_minute_up_to_the_horizon() {
    let (limit, w) = (6_000_000u32, 60_000_000_000u64);
    let h = (1u64 << 18) * w;
    let clock = ManualClock::new();
    let (k, t, d) = (
        keyed(limit, w, &clock),
        table(limit, w, &clock),
        direct(limit, w, &clock),
    );
    let subjects: [&dyn Fn(u32) -> Decision; 3] =
        [&|n| k.check_n(&7, n), &|n| t.check_n(&7, n), &|n| {
            d.check_n(n)
        }];
    for check in subjects {
        // The whole limit in the window before the last; a third into the last window, the
        // previous count weighs 4 000 000 of the 6 000 000.
        at(&clock, h - 2 * w + 1);
        assert!(check(limit).is_allowed());
        at(&clock, h - w + w / 3);
        let denied = check(2_000_001);
        assert!(!denied.is_allowed());
        assert_eq!(denied.remaining(), 2_000_000);
        assert!(check(2_000_000).is_allowed());
        // At the last instant, the previous count weighs ceil(6 000 000 / W) = 1; once the
        // rest is taken, no wait helps before the horizon.
        at(&clock, h - 1);
        assert_eq!(check(0).remaining(), 3_999_999);
        assert!(check(3_999_999).is_allowed());
        let last = check(1);
        assert!(!last.is_allowed());
        assert_eq!(last.retry_after(), None);
        // From the horizon on: closed, even for a fresh key, and a peek too.
        for now in [h, h + w / 2, u64::MAX] {
            at(&clock, now);
            let past = check(1);
            assert!(!past.is_allowed() && past.retry_after().is_none());
            assert_eq!((past.remaining(), past.reset_after_ns()), (0, 0));
            assert!(!check(0).is_allowed());
        }
        at(&clock, h - 1);
        assert_eq!(
            check(0).remaining(),
            0,
            "the state before the horizon is kept"
        );
    }
    at(&clock, h);
    assert!(!k.check(&99).is_allowed(), "a new key past the horizon");
    let held = k.len();
    assert!(held >= 1);
    assert_eq!(k.evict_idle(), held, "every key is idle past the horizon");
    assert!(k.is_empty());
}

#[test]
fn idle_gaps_beyond_2_pow_32_windows_start_fresh() {
    let clock = ManualClock::new();
    let w = 1_000u64;
    let l = keyed(3, w, &clock);
    for k in [
        0u64,
        1 << 32,
        (1 << 32) + 2,
        (1 << 33) + 5,
        u64::MAX / w - 2,
    ] {
        at(&clock, k * w + 999);
        assert_eq!(l.peek(&0).remaining(), 3, "window {k}");
        assert!(l.check_n(&0, 3).is_allowed(), "window {k}");
        assert!(!l.check(&0).is_allowed(), "window {k}");
    }
}

#[test]
fn backwards_time_gives_no_credit() {
    let clock = ManualClock::new();
    let l = keyed(2, 100, &clock);
    at(&clock, 150);
    assert!(l.check_n(&0, 2).is_allowed());
    at(&clock, 50);
    let d = l.check(&0);
    assert!(!d.is_allowed());
    // Treated as the start of window 1: one unit fits once prev (2) weighs <= 100, at 250.
    assert_eq!(d.retry_after_ns(), Some(200));
    assert_eq!(d.reset_after_ns(), 250);
    assert_eq!(d.remaining(), 0);
}

#[test]
fn config_errors() {
    counter_config_errors::<Sliding>();
    // The documented maxima.
    for (secs, max) in [
        (1u64, 1_048_575u32),
        (10, 2_097_151),
        (60, 8_388_607),
        (3_600, 33_554_431),
        (86_400, 268_435_455),
    ] {
        let window = Duration::from_secs(secs);
        assert!(Limiter::sliding_window(max, window).build().is_ok());
        assert_eq!(
            Limiter::sliding_window(max + 1, window)
                .build()
                .unwrap_err(),
            ConfigError::LimitTooLarge {
                limit: max + 1,
                max: u64::from(max),
                window
            }
        );
    }
}

#[test]
fn stock_operations_are_unsupported() {
    counter_has_no_stock::<Sliding>("sliding_window");
}

/// With the previous window holding `prev` and the clock frozen a quarter into the current
/// window, exactly `limit - ceil(prev * 3/4)` unit requests fit, and the k-th admission leaves
/// that minus k.
#[test]
fn threads_on_a_frozen_clock_admit_exactly_the_capacity() {
    let w: u64 = 3_600_000_000_000;
    let (limit, prev) = (100_000u32, 40_000u32);
    let capacity = limit - prev * 3 / 4;
    let clock = ManualClock::new();
    let k = keyed(limit, w, &clock);
    let t = table(limit, w, &clock);
    let d = direct(limit, w, &clock);
    clock.set_ns(7 * w + 123);
    assert!(k.check_n(&0, prev).is_allowed());
    assert!(t.check_n(&0, prev).is_allowed());
    assert!(d.check_n(prev).is_allowed());
    clock.set_ns(8 * w + w / 4);
    assert_eq!(k.peek(&0).remaining(), capacity);
    assert_eq!(t.peek(&0).remaining(), capacity);

    let subjects: [&dyn Subject; 3] = [&k, &t, &d];
    for (s, l) in subjects.iter().enumerate() {
        let r = admitted_remainings(1, |_| 0, |_| l.decide(0, 1));
        crate::common::threads::assert_exactly_the_limit(&r[0], capacity, &format!("subject {s}"));
    }
    assert!(!k.check(&0).is_allowed() && !t.check(&0).is_allowed() && !d.check().is_allowed());
}
