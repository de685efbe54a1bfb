//! Fixed window counter: the window family's tests (`family_tests!`: the keyed and direct
//! limiters against `cellgate_models::FixedWindowModel`, eviction, many threads on a frozen
//! clock), layout bounds, configuration errors and hand-worked edges.

#[macro_use]
mod common;

use std::time::Duration;

use cellgate::clock::ManualClock;
use cellgate::{ConfigError, KeyedLimiter, Limiter};
use proptest::prelude::*;

use common::windows::fixed_window::{max_limit, FixedWindowModel};
use common::windows::*;

fn keyed(limit: u32, w: u64, clock: &ManualClock) -> KeyedLimiter<u8, ManualClock> {
    KeyedLimiter::<u8>::fixed_window(limit, Duration::from_nanos(w))
        .clock(clock.clone())
        .build()
        .unwrap()
}

/// The bounded fingerprint table store (`max_keys` selects it); never full here.
fn table(limit: u32, w: u64, clock: &ManualClock) -> KeyedLimiter<u8, ManualClock> {
    KeyedLimiter::<u8>::fixed_window(limit, Duration::from_nanos(w))
        .clock(clock.clone())
        .max_keys(1_024)
        .build()
        .unwrap()
}

fn direct(limit: u32, w: u64, clock: &ManualClock) -> Limiter<ManualClock> {
    Limiter::fixed_window(limit, Duration::from_nanos(w))
        .clock(clock.clone())
        .build()
        .unwrap()
}

struct Fixed;

impl Family for Fixed {
    type Model = FixedWindowModel;

    /// A window whose layout holds at least a limit of 1, and a limit for it.
    fn configs() -> BoxedStrategy<(u64, u32)> {
        windows()
            .prop_filter("the layout must hold a count", |&w| max_limit(w) >= 1)
            .prop_flat_map(|w| (Just(w), limits(max_limit(w))))
            .boxed()
    }

    fn model(window: u64, limit: u32) -> FixedWindowModel {
        FixedWindowModel { limit, window }
    }

    fn stores(w: u64, limit: u32, clock: &ManualClock) -> [Box<dyn Subject>; 2] {
        [
            Box::new(keyed(limit, w, clock)),
            Box::new(table(limit, w, clock)),
        ]
    }

    fn direct(w: u64, limit: u32, clock: &ManualClock) -> Option<Box<dyn Subject>> {
        Some(Box::new(direct(limit, w, clock)))
    }

    fn racer(max_keys: Option<usize>, clock: ManualClock) -> Box<dyn Racer> {
        let b = KeyedLimiter::<u32>::fixed_window(1, Duration::from_secs(1)).clock(clock);
        Box::new(match max_keys {
            Some(m) => b.max_keys(m).build().unwrap(),
            None => b.build().unwrap(),
        })
    }

    const THREAD_LIMIT: u32 = 50_000;
}

family_tests!(Fixed);

proptest! {
    #![proptest_config(config(384))]

    /// The largest limit of the layout builds; one more is `LimitTooLarge`.
    #[test]
    fn layout_bounds(w in windows()) {
        common::windows::layout_bounds(w, max_limit, |limit, window| [
            KeyedLimiter::<u8>::fixed_window(limit, window).build().map(drop),
            Limiter::fixed_window(limit, window).build().map(drop),
        ])?;
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
    let s = Duration::from_secs(1);
    assert_eq!(
        KeyedLimiter::<u8>::fixed_window(0, s).build().unwrap_err(),
        ConfigError::Zero { field: "limit" }
    );
    assert_eq!(
        Limiter::fixed_window(0, s).build().unwrap_err(),
        ConfigError::Zero { field: "limit" }
    );
    assert_eq!(
        KeyedLimiter::<u8>::fixed_window(1, Duration::ZERO)
            .build()
            .unwrap_err(),
        ConfigError::Zero { field: "window" }
    );
    assert_eq!(
        Limiter::fixed_window(1, Duration::ZERO)
            .build()
            .unwrap_err(),
        ConfigError::Zero { field: "window" }
    );
    for window in [
        Duration::MAX,
        Duration::from_nanos(u64::MAX) + Duration::from_nanos(1),
    ] {
        assert_eq!(
            KeyedLimiter::<u8>::fixed_window(1, window)
                .build()
                .unwrap_err(),
            ConfigError::WindowTooLong { window }
        );
        assert_eq!(
            Limiter::fixed_window(1, window).build().unwrap_err(),
            ConfigError::WindowTooLong { window }
        );
    }
    assert!(Limiter::fixed_window(1, Duration::from_nanos(u64::MAX))
        .build()
        .is_ok());
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
    assert_eq!(
        KeyedLimiter::<u8>::fixed_window(1, s)
            .max_keys(0)
            .build()
            .unwrap_err(),
        ConfigError::Zero { field: "max_keys" }
    );
}

#[test]
fn stock_operations_are_unsupported() {
    let k = KeyedLimiter::<u8>::fixed_window(1, Duration::from_secs(1))
        .clock(ManualClock::new())
        .build()
        .unwrap();
    let d = Limiter::fixed_window(1, Duration::from_secs(1))
        .clock(ManualClock::new())
        .build()
        .unwrap();
    let unsupported = |operation| ConfigError::Unsupported {
        operation,
        algorithm: "fixed_window",
    };
    assert_eq!(k.restock(&1, 5), Err(unsupported("restock")));
    assert_eq!(k.set_stock(&1, 5), Err(unsupported("set_stock")));
    assert_eq!(d.restock(5), Err(unsupported("restock")));
    assert_eq!(d.set_stock(5), Err(unsupported("set_stock")));
    assert!(k.is_empty(), "a refused operation creates no key");
    assert_eq!(d.peek().remaining(), 1);
}
