//! Fixed window counter: the window family's tests (`family_tests!`: the keyed and direct
//! limiters against `cellgate_models::FixedWindowModel`, eviction, many threads on a frozen
//! clock), layout bounds, configuration errors and hand-worked edges.

use std::time::Duration;

use cellgate::clock::{DefaultClock, ManualClock};
use cellgate::{ConfigError, KeyedLimiter, KeyedLimiterBuilder, Limiter, LimiterBuilder};
use proptest::prelude::*;

use crate::common::windows::fixed_window::{max_limit, FixedWindowModel};
use crate::common::windows::*;

struct Fixed;

impl Counter for Fixed {
    type Model = FixedWindowModel;
    const KEYED: fn(u32, Duration) -> KeyedLimiterBuilder<u8, DefaultClock> =
        KeyedLimiter::fixed_window;
    const KEYED_U32: fn(u32, Duration) -> KeyedLimiterBuilder<u32, DefaultClock> =
        KeyedLimiter::fixed_window;
    const DIRECT: fn(u32, Duration) -> LimiterBuilder<DefaultClock> = Limiter::fixed_window;
    const MAX_LIMIT: fn(u64) -> u128 = max_limit;
    /// A second: its layout holds limits up to 2^29 - 1.
    const THREADS_WINDOW: u64 = 1_000_000_000;

    fn new_model(window: u64, limit: u32) -> FixedWindowModel {
        FixedWindowModel { limit, window }
    }
}

fn keyed(limit: u32, w: u64, clock: &ManualClock) -> KeyedLimiter<u8, ManualClock> {
    Fixed::keyed(limit, w, clock)
}

fn direct(limit: u32, w: u64, clock: &ManualClock) -> Limiter<ManualClock> {
    <Fixed as Counter>::direct(limit, w, clock)
}

family_tests!(Fixed);

proptest! {
    #![proptest_config(config(384))]

    /// The largest limit of the layout builds; one more is `LimitTooLarge`.
    #[test]
    fn layout_bounds(w in windows()) {
        counter_layout_bounds::<Fixed>(w)?;
    }
}

/// With the clock moved back to 0 while a later window holds a count, the next window starts
/// at `(k + 1) * W > u64::MAX`: no time the clock can show, so `retry_after` must be `None`
/// (as it is at every `now > 0`). A regression test: `step` once judged this by
/// `now.checked_add(to_end)`, which only overflows when `now > 0`.
#[test]
fn retry_past_the_horizon_at_time_zero_is_none() {
    let clock = ManualClock::new();
    let l = direct(1, 1 << 63, &clock);
    at(&clock, 1 << 63); // window 1 = [2^63, 2^64)
    assert!(l.check().is_allowed());
    at(&clock, 1); // back into window 0: window 1's count applies
    let d = l.check();
    assert_eq!(d.retry_after(), None, "at now = 1");
    at(&clock, 0);
    let d = l.check();
    assert!(!d.is_allowed());
    assert_eq!(d.retry_after(), None, "at now = 0");
}

fn at(clock: &ManualClock, ns: u64) -> &ManualClock {
    clock.set_ns(ns);
    clock
}

#[test]
fn boundaries_are_exact() {
    let clock = ManualClock::new();
    let l = keyed(2, 1_000, &clock);
    at(&clock, 999);
    assert!(l.check_n(&0, 2).is_allowed());
    let d = l.check(&0);
    assert_eq!(
        (d.is_allowed(), d.retry_after_ns(), d.reset_after_ns()),
        (false, Some(1), 1)
    );
    at(&clock, 1_000);
    let d = l.check_n(&0, 2);
    assert!(d.is_allowed());
    assert_eq!(d.reset_after_ns(), 1_000);
    at(&clock, 1_999);
    assert!(!l.check(&0).is_allowed());
    at(&clock, 2_000);
    assert!(l.check(&0).is_allowed());
}

#[test]
fn idle_gaps_beyond_2_pow_32_windows_never_revive_a_count() {
    let clock = ManualClock::new();
    let w = 1_000u64;
    let l = keyed(1, w, &clock);
    for k in [0u64, 1 << 32, (1 << 33) + 5, u64::MAX / w - 1] {
        at(&clock, k * w);
        assert!(l.check(&0).is_allowed(), "window {k}");
        assert!(!l.check(&0).is_allowed(), "window {k}");
        // Exactly 2^32 windows later (where a 32-bit index would wrap onto this one).
        if let Some(later) = k.checked_add(1 << 32).filter(|&k2| k2 <= u64::MAX / w) {
            at(&clock, later * w + 3);
            assert!(l.peek(&0).remaining() == 1, "window {later}");
        }
    }
}

#[test]
fn backwards_time_keeps_the_later_window() {
    let clock = ManualClock::new();
    let l = direct(2, 100, &clock);
    at(&clock, 550);
    assert!(l.check_n(2).is_allowed());
    at(&clock, 350);
    let d = l.check();
    assert!(!d.is_allowed());
    assert_eq!(d.retry_after_ns(), Some(250));
    assert_eq!(d.reset_after_ns(), 250);
    at(&clock, 600);
    assert!(l.check_n(2).is_allowed());
}

#[test]
fn last_window_has_no_retry() {
    // W = 2^63: window 1 = [2^63, 2^64) ends past the clock's range.
    let clock = ManualClock::new();
    let l = direct(1, 1 << 63, &clock);
    at(&clock, u64::MAX);
    assert!(l.check().is_allowed());
    let d = l.check();
    assert!(!d.is_allowed());
    assert_eq!(d.retry_after(), None);
    assert_eq!(d.reset_after_ns(), 1);
}

#[test]
fn config_errors() {
    counter_config_errors::<Fixed>();
    let s = Duration::from_secs(1);
    // 1 ns windows leave no bits for the count.
    assert_eq!(
        Limiter::fixed_window(1, Duration::from_nanos(1))
            .build()
            .unwrap_err(),
        ConfigError::LimitTooLarge {
            limit: 1,
            max: 0,
            window: Duration::from_nanos(1)
        }
    );
    // W = 2^32 ns: 32 index bits, so the count field holds exactly u32::MAX; one ns less
    // needs 33 index bits and holds 2^31 - 1.
    assert!(
        Limiter::fixed_window(u32::MAX, Duration::from_nanos(1 << 32))
            .build()
            .is_ok()
    );
    let w = Duration::from_nanos((1 << 32) - 1);
    assert!(Limiter::fixed_window((1 << 31) - 1, w).build().is_ok());
    assert_eq!(
        Limiter::fixed_window(1 << 31, w).build().unwrap_err(),
        ConfigError::LimitTooLarge {
            limit: 1 << 31,
            max: (1 << 31) - 1,
            window: w
        }
    );
    // The documented example: 2^29 - 1 for a 1 s window.
    assert!(Limiter::fixed_window((1 << 29) - 1, s).build().is_ok());
    assert!(matches!(
        Limiter::fixed_window(1 << 29, s).build(),
        Err(ConfigError::LimitTooLarge { max, .. }) if max == (1 << 29) - 1
    ));
}

#[test]
fn stock_operations_are_unsupported() {
    counter_has_no_stock::<Fixed>("fixed_window");
}
