//! Fixed window counter: the keyed and direct limiters against the reference model in
//! `window_models`, eviction, layout bounds, configuration errors and many threads on a frozen
//! clock.

#[path = "window_models/mod.rs"]
mod window_models;

use std::sync::Barrier;
use std::time::Duration;

use cellgate::clock::ManualClock;
use cellgate::{ConfigError, Decision, KeyedLimiter, Limiter};
use proptest::prelude::*;

use window_models::*;

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

/// A window whose layout holds at least a limit of 1, and a limit for it.
fn configs() -> impl Strategy<Value = (u64, u32)> {
    windows()
        .prop_filter("the layout must hold a count", |&w| fixed_max_limit(w) >= 1)
        .prop_flat_map(|w| (Just(w), limits(fixed_max_limit(w))))
}

proptest! {
    #![proptest_config(config(384))]

    /// Every field of every decision, keyed and direct, for random sequences of checks and
    /// peeks with time moving forwards, backwards, across boundaries and over huge gaps.
    #[test]
    fn matches_the_model((w, limit) in configs(), steps in steps_of(actions(), 1..=60)) {
        let clock = ManualClock::new();
        let (k, t, d) = (keyed(limit, w, &clock), table(limit, w, &clock), direct(limit, w, &clock));
        let model = FixedWindowModel { limit, window: w };
        drive(&model, w, limit, &clock, &[&k, &t, &d], &steps, false)?;
    }

    /// A limiter that evicts idle keys after every step decides exactly like one that never
    /// does, and keeps exactly the live keys.
    #[test]
    fn evict_idle_is_lossless((w, limit) in configs(), steps in steps_of(actions(), 1..=60)) {
        let clock = ManualClock::new();
        let model = FixedWindowModel { limit, window: w };
        let (a, b) = (keyed(limit, w, &clock), table(limit, w, &clock));
        drive_evicting(&model, w, limit, &clock, &a, &b, &steps, true)?;
        let (a, b) = (table(limit, w, &clock), keyed(limit, w, &clock));
        drive_evicting(&model, w, limit, &clock, &a, &b, &steps, true)?;
    }

    /// Eviction gives no credit back to a clock behind the sweep (both stores).
    #[test]
    fn evict_then_earlier_clock_is_never_more_lenient(
        (w, limit) in configs(),
        history in steps_of(actions(), 1..=40),
        back in 0u16..1000,
        n in n_sels(),
    ) {
        let clock = ManualClock::new();
        let n = n.resolve(limit);
        let (a, b) = (keyed(limit, w, &clock), keyed(limit, w, &clock));
        evict_then_earlier_clock(w, limit, &clock, &a, &b, &history, back, n)?;
        let (a, b) = (table(limit, w, &clock), table(limit, w, &clock));
        evict_then_earlier_clock(w, limit, &clock, &a, &b, &history, back, n)?;
    }

    /// The largest limit of the layout builds; one more is `LimitTooLarge`.
    #[test]
    fn layout_bounds(w in windows()) {
        let max = fixed_max_limit(w);
        let window = Duration::from_nanos(w);
        if max >= u128::from(u32::MAX) {
            prop_assert!(KeyedLimiter::<u8>::fixed_window(u32::MAX, window).build().is_ok());
            prop_assert!(Limiter::fixed_window(u32::MAX, window).build().is_ok());
        } else {
            let max = u32::try_from(max).unwrap();
            if max >= 1 {
                prop_assert!(KeyedLimiter::<u8>::fixed_window(max, window).build().is_ok());
                prop_assert!(Limiter::fixed_window(max, window).build().is_ok());
            }
            let want = ConfigError::LimitTooLarge { limit: max + 1, max: u64::from(max), window };
            prop_assert_eq!(
                KeyedLimiter::<u8>::fixed_window(max + 1, window).build().unwrap_err(),
                want.clone()
            );
            prop_assert_eq!(Limiter::fixed_window(max + 1, window).build().unwrap_err(), want);
        }
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

/// The model itself, on hand-worked cases (so a wrong model cannot pass unnoticed).
#[test]
fn model_hand_worked() {
    let m = FixedWindowModel {
        limit: 3,
        window: 100,
    };
    let mut s = FixedState::default();
    let e = m.step(&mut s, 250, 2);
    assert!(e.allowed && e.remaining == 1 && e.reset_ns == 50);
    let e = m.step(&mut s, 299, 2);
    assert_eq!(
        (e.allowed, e.retry_ns, e.reset_ns, e.remaining),
        (false, Some(1), 1, 1)
    );
    assert_eq!(m.step(&mut s, 299, 4).retry_ns, None);
    // Backwards: window 2's count still applies in window 0.
    let e = m.step(&mut s, 10, 2);
    assert_eq!((e.allowed, e.retry_ns, e.reset_ns), (false, Some(290), 290));
    let e = m.step(&mut s, 300, 3);
    assert!(e.allowed && e.remaining == 0 && e.reset_ns == 100);
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

// ---------------------------------------------------------------------------------------------
// Many threads, frozen clock
// ---------------------------------------------------------------------------------------------

const THREADS: usize = 8;
const ATTEMPTS: usize = if cfg!(debug_assertions) {
    50_000
} else {
    125_000
};
const LIMIT: u32 = 100_000;

fn hammer<R: Send>(f: impl Fn(usize) -> R + Sync) -> Vec<R> {
    let barrier = Barrier::new(THREADS);
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..THREADS)
            .map(|i| {
                let (f, barrier) = (&f, &barrier);
                s.spawn(move || {
                    barrier.wait();
                    f(i)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    })
}

/// Runs unit checks from every thread; returns the `remaining` of every admission.
fn admitted_remainings(check: impl Fn(usize) -> Decision + Sync) -> Vec<u32> {
    let mut all: Vec<u32> = hammer(|i| {
        (0..ATTEMPTS)
            .map(|_| check(i))
            .filter(Decision::is_allowed)
            .map(|d| d.remaining())
            .collect::<Vec<_>>()
    })
    .into_iter()
    .flatten()
    .collect();
    all.sort_unstable();
    all
}

/// The k-th admission (in the cell's order) leaves `LIMIT - k`: the admissions' `remaining`
/// values are exactly `0..LIMIT`, each once.
fn assert_exactly_the_limit(remainings: &[u32], limit: u32) {
    assert_eq!(remainings.len(), limit as usize, "admitted units");
    assert!(remainings.iter().copied().eq(0..limit));
}

#[test]
fn threads_on_a_frozen_clock_admit_exactly_the_limit_keyed() {
    let clock = ManualClock::new();
    clock.set_ns(1_000_000_007);
    let w = 1_000_000_000;
    frozen_keyed(&keyed(LIMIT / 2, w, &clock));
    frozen_keyed(&table(LIMIT / 2, w, &clock));
}

fn frozen_keyed(l: &KeyedLimiter<u8, ManualClock>) {
    // Two keys, four threads each.
    let mut per_key: [Vec<u32>; 2] = [Vec::new(), Vec::new()];
    let results = hammer(|i| {
        let key = (i % 2) as u8;
        let r: Vec<u32> = (0..ATTEMPTS)
            .map(|_| l.check(&key))
            .filter(Decision::is_allowed)
            .map(|d| d.remaining())
            .collect();
        (key, r)
    });
    for (key, r) in results {
        per_key[key as usize].extend(r);
    }
    for (key, r) in per_key.iter_mut().enumerate() {
        r.sort_unstable();
        assert_exactly_the_limit(r, LIMIT / 2);
        assert_eq!(l.peek(&(key as u8)).remaining(), 0);
    }
}

#[test]
fn threads_on_a_frozen_clock_admit_exactly_the_limit_direct() {
    let clock = ManualClock::new();
    clock.set_ns(1_000_000_007);
    let l = Limiter::fixed_window(LIMIT, Duration::from_secs(1))
        .clock(clock)
        .build()
        .unwrap();
    let r = admitted_remainings(|_| l.check());
    assert_exactly_the_limit(&r, LIMIT);
    assert!(!l.check().is_allowed());
}

#[test]
fn threads_with_mixed_sizes_never_overspend() {
    let clock = ManualClock::new();
    clock.set_ns(5);
    let l = Limiter::fixed_window(LIMIT, Duration::from_secs(1))
        .clock(clock)
        .build()
        .unwrap();
    let units: u64 = hammer(|i| {
        (0..ATTEMPTS)
            .map(|j| {
                let n = ((i + j) % 4) as u32; // 0..=3, including n = 0
                let d = l.check_n(n);
                if d.is_allowed() {
                    u64::from(n)
                } else {
                    0
                }
            })
            .sum::<u64>()
    })
    .into_iter()
    .sum();
    let left = l.peek().remaining();
    assert_eq!(units + u64::from(left), u64::from(LIMIT));
    // Whatever is left can still be taken, and nothing more.
    assert!(l.check_n(left).is_allowed());
    assert!(!l.check().is_allowed());
}

/// Threads racing to create the same new keys: each key admits exactly its limit, whichever
/// thread's insertion wins.
#[test]
fn threads_racing_on_new_keys_admit_exactly_the_limit() {
    const ROUNDS: u32 = if cfg!(debug_assertions) {
        20_000
    } else {
        100_000
    };
    const BATCH: u32 = 1;
    const KEYS: u32 = ROUNDS * BATCH;
    for bounded in [false, true] {
        let clock = ManualClock::new();
        clock.set_ns(42);
        let builder = KeyedLimiter::<u32>::fixed_window(1, Duration::from_secs(1)).clock(clock);
        // Bounded: the fingerprint table store; unbounded: the exact map.
        let l = if bounded {
            builder.max_keys(2 * KEYS as usize)
        } else {
            builder
        }
        .build()
        .unwrap();
        let admitted = race_on_new_keys(ROUNDS, BATCH, |k| l.check(&k).is_allowed());
        assert_eq!(admitted, u64::from(KEYS), "bounded: {bounded}");
        assert_eq!(l.len(), KEYS as usize, "bounded: {bounded}");
    }
}
