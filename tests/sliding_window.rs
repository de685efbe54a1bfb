//! Sliding window counter: the window family's tests (`family_tests!`: the keyed and direct
//! limiters against `cellgate_models::SlidingWindowModel`, whose `retry_after` is a binary
//! search, not the crate's closed form; eviction; many threads on a frozen clock), the shortest
//! wait, layout bounds, configuration errors and hand-worked edges.

#[macro_use]
mod common;

use std::time::Duration;

use cellgate::clock::{DefaultClock, ManualClock};
use cellgate::{ConfigError, KeyedBuilder, KeyedLimiter, Limiter, LimiterBuilder};
use proptest::prelude::*;

use common::threads::admitted_remainings;
use common::windows::sliding_window::{max_limit, SlidingWindowModel};
use common::windows::*;

struct Sliding;

impl Counter for Sliding {
    type Model = SlidingWindowModel;
    const KEYED: fn(u32, Duration) -> KeyedBuilder<u8, DefaultClock> = KeyedLimiter::sliding_window;
    const KEYED_U32: fn(u32, Duration) -> KeyedBuilder<u32, DefaultClock> =
        KeyedLimiter::sliding_window;
    const DIRECT: fn(u32, Duration) -> LimiterBuilder<DefaultClock> = Limiter::sliding_window;
    const MAX_LIMIT: fn(u64) -> u128 = max_limit;
    /// An hour: its layout holds limits up to 2^20 - 1.
    const THREADS_WINDOW: u64 = 3_600_000_000_000;

    fn new_model(window: u64, limit: u32) -> SlidingWindowModel {
        SlidingWindowModel { limit, window }
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

family_tests!(Sliding);

proptest! {
    #![proptest_config(config(384))]

    /// `retry_after` is the shortest wait: the same request is denied one nanosecond earlier
    /// and admitted at that time (checked on the limiter itself, not the model).
    #[test]
    fn retry_after_is_the_shortest_wait(
        (w, limit) in Sliding::configs(),
        steps in steps_of(actions(), 1..=30),
        n in n_sels(),
    ) {
        let clock = ManualClock::new();
        let l = keyed(limit, w, &clock);
        let model = Sliding::model(w, limit);
        drive(&model, w, limit, &clock, &[&l], &steps, false)?;
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
            // No wait helps within the clock's range: still denied at its last instant.
            clock.set_ns(u64::MAX);
            prop_assert!(!l.check_n(&0, n).is_allowed(), "no retry_after, but admitted at u64::MAX");
        }
    }

    /// The largest limit of the layout builds; one more is `LimitTooLarge`.
    #[test]
    fn layout_bounds(w in windows()) {
        counter_layout_bounds::<Sliding>(w)?;
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
    for (secs, max) in [(1u64, 16_383u32), (60, 131_071), (3600, 1_048_575)] {
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
        common::threads::assert_exactly_the_limit(&r[0], capacity, &format!("subject {s}"));
    }
    assert!(!k.check(&0).is_allowed() && !t.check(&0).is_allowed() && !d.check().is_allowed());
}
