//! Exact sliding log: the keyed limiter against the reference model in `window_models`, the
//! exact-window guarantee checked on whole histories, eviction, configuration errors and many
//! threads on a frozen clock.

#[path = "window_models/mod.rs"]
mod window_models;

use std::sync::Barrier;
use std::time::Duration;

use cellgate::clock::ManualClock;
use cellgate::{ConfigError, Decision, KeyedLimiter, SlidingLog, MAX_LOG_LIMIT};
use proptest::prelude::*;

use window_models::*;

fn log(limit: u32, w: u64, clock: &ManualClock) -> SlidingLog<u8, ManualClock> {
    KeyedLimiter::<u8>::sliding_log(limit, Duration::from_nanos(w))
        .clock(clock.clone())
        .build()
        .unwrap()
}

/// With a (never reached) bound on the number of keys.
fn capped(limit: u32, w: u64, clock: &ManualClock) -> SlidingLog<u8, ManualClock> {
    KeyedLimiter::<u8>::sliding_log(limit, Duration::from_nanos(w))
        .clock(clock.clone())
        .max_keys(1_024)
        .build()
        .unwrap()
}

fn configs() -> impl Strategy<Value = (u64, u32)> {
    (
        prop_oneof![1 => Just(1u64), 9 => windows()],
        prop_oneof![
            4 => 1u32..=6,
            1 => Just(MAX_LOG_LIMIT),
            1 => 1..=MAX_LOG_LIMIT,
        ],
    )
}

proptest! {
    #![proptest_config(config(384))]

    /// Every field of every decision for random sequences of checks and peeks with time moving
    /// forwards, backwards, across window edges and over huge gaps.
    ///
    /// A key stops being compared once it reaches the case of
    /// [`backwards_time_after_an_expiry_regains_no_credit`], where the crate is deliberately
    /// stricter than the model (see `LogModel`).
    #[test]
    fn matches_the_model((w, limit) in configs(), steps in steps_of(actions(), 1..=60)) {
        let clock = ManualClock::new();
        let (l, c) = (log(limit, w, &clock), capped(limit, w, &clock));
        let model = LogModel { limit, window: w };
        drive(&model, w, limit, &clock, &[&l, &c], &steps, false)?;
    }

    /// With time that never goes backwards the model never diverges: every key is compared at
    /// every step.
    #[test]
    fn matches_the_model_forward_time((w, limit) in configs(), steps in steps_of(actions(), 1..=60)) {
        let clock = ManualClock::new();
        let l = log(limit, w, &clock);
        let model = LogModel { limit, window: w };
        let dropped = drive(&model, w, limit, &clock, &[&l], &steps, true)?;
        prop_assert_eq!(dropped, 0);
    }

    /// The guarantee itself, checked on the limiter's answers alone (no model): over a whole
    /// history with time that never goes backwards, every window `(s - W, s]` ending at an
    /// admission holds at most `limit` units; every denial of `n <= limit` was necessary; and
    /// `retry_after` is exactly when enough of the history has expired.
    #[test]
    fn every_window_holds_at_most_the_limit(
        (w, limit) in configs(),
        steps in steps_of(actions(), 1..=80),
    ) {
        let clock = ManualClock::new();
        let l = log(limit, w, &clock);
        let mut admitted: [Vec<(u64, u32)>; 3] = Default::default();
        let in_window = |hist: &[(u64, u32)], s: u64| -> u64 {
            hist.iter()
                .filter(|&&(t, _)| t <= s && u128::from(t) + u128::from(w) > u128::from(s))
                .map(|&(_, n)| u64::from(n))
                .sum()
        };
        let mut t = 0u64;
        for step in &steps {
            t = step.time.apply(t, w, true);
            clock.set_ns(t);
            let (key, n) = match step.action {
                Action::Check { key, n } => (key, n.resolve(limit)),
                Action::Peek { key } => (key, 0),
                _ => unreachable!(),
            };
            let hist = &mut admitted[usize::from(key)];
            let before = in_window(hist, t);
            let d = if matches!(step.action, Action::Peek { .. }) {
                l.peek(&key)
            } else {
                l.check_n(&key, n)
            };
            let fits = before + u64::from(n) <= u64::from(limit);
            prop_assert_eq!(d.is_allowed(), fits, "t={} key={} n={} before={}", t, key, n, before);
            if d.is_allowed() {
                if n > 0 {
                    hist.push((t, n));
                }
                prop_assert_eq!(u64::from(d.remaining()), u64::from(limit) - before - u64::from(n));
            } else if let Some(wait) = d.retry_after_ns() {
                // Nothing else happens in between: the same history, seen later.
                let at = t.checked_add(wait).expect("retry_after ends within the clock's range");
                let then = |s: u64| hist.iter()
                    .filter(|&&(a, _)| u128::from(a) + u128::from(w) > u128::from(s))
                    .map(|&(_, n)| u64::from(n))
                    .sum::<u64>();
                prop_assert!(then(at) + u64::from(n) <= u64::from(limit), "fits at retry_after");
                prop_assert!(then(at - 1) + u64::from(n) > u64::from(limit), "shortest wait");
            } else {
                prop_assert!(
                    n > limit || hist.iter().any(|&(a, _)| a.checked_add(w).is_none()),
                    "no retry_after though waiting would help"
                );
            }
        }
        for hist in &admitted {
            for &(s, _) in hist {
                let units = in_window(hist, s);
                prop_assert!(units <= u64::from(limit), "{} units in ({} - W, {}]", units, s, s);
            }
        }
    }

    /// A log that evicts idle keys after every step decides exactly like one that never does,
    /// and keeps exactly the keys with live entries.
    #[test]
    fn evict_idle_is_lossless((w, limit) in configs(), steps in steps_of(actions(), 1..=60)) {
        let clock = ManualClock::new();
        let (a, b) = (log(limit, w, &clock), capped(limit, w, &clock));
        let model = LogModel { limit, window: w };
        drive_evicting(&model, w, limit, &clock, &a, &b, &steps, true)?;
    }

    /// Eviction gives no credit back to a clock behind the sweep.
    #[test]
    fn evict_then_earlier_clock_is_never_more_lenient(
        (w, limit) in configs(),
        history in steps_of(actions(), 1..=40),
        back in 0u16..1000,
        n in n_sels(),
    ) {
        let clock = ManualClock::new();
        let n = n.resolve(limit);
        let (a, b) = (log(limit, w, &clock), log(limit, w, &clock));
        evict_then_earlier_clock(w, limit, &clock, &a, &b, &history, back, n)?;
    }
}

/// The model itself, on hand-worked cases.
#[test]
fn model_hand_worked() {
    let m = LogModel {
        limit: 3,
        window: 100,
    };
    let mut s = LogState::default();
    assert!(m.step(&mut s, 10, 1).allowed);
    assert!(m.step(&mut s, 50, 2).allowed);
    let e = m.step(&mut s, 60, 1);
    assert_eq!(
        (e.allowed, e.retry_ns, e.reset_ns, e.remaining),
        (false, Some(50), 90, 0)
    );
    assert!(m.step(&mut s, 110, 1).allowed);
    assert_eq!(m.step(&mut s, 120, 3).retry_ns, Some(210 - 120));
    assert_eq!(m.step(&mut s, 120, 4).retry_ns, None);
    // Backwards: all four units (at 10, 50, 50, 110) are live at 20, one more than the limit,
    // so even a peek is denied until the unit at 10 expires at 110.
    let e = m.step(&mut s, 20, 0);
    assert_eq!(
        (e.allowed, e.remaining, e.reset_ns, e.retry_ns),
        (false, 0, 190, Some(90))
    );
}

fn at(clock: &ManualClock, ns: u64) -> &ManualClock {
    clock.set_ns(ns);
    clock
}

#[test]
fn exact_at_the_window_edge() {
    let clock = ManualClock::new();
    let l = log(2, 1_000, &clock);
    at(&clock, 5);
    assert!(l.check(&0).is_allowed());
    at(&clock, 700);
    assert!(l.check(&0).is_allowed());
    // The unit at 5 is live in (4, 1004]: gone at 1005, not at 1004.
    at(&clock, 1_004);
    let d = l.check(&0);
    assert_eq!(
        (d.is_allowed(), d.retry_after_ns(), d.reset_after_ns()),
        (false, Some(1), 696)
    );
    at(&clock, 1_005);
    assert!(l.check(&0).is_allowed());
    assert!(!l.check(&0).is_allowed());
}

#[test]
fn idle_gaps_beyond_2_pow_32_windows() {
    let clock = ManualClock::new();
    let w = 1_000u64;
    let l = log(1, w, &clock);
    for k in [0u64, 1 << 32, (1 << 33) + 5, u64::MAX / w - 2] {
        at(&clock, k * w);
        assert!(l.check(&0).is_allowed(), "window {k}");
        assert!(!l.check(&0).is_allowed(), "window {k}");
    }
}

#[test]
fn backwards_time_keeps_units_alive() {
    let clock = ManualClock::new();
    let l = log(2, 100, &clock);
    at(&clock, 500);
    assert!(l.check_n(&0, 2).is_allowed());
    at(&clock, 100);
    let d = l.check(&0);
    assert!(!d.is_allowed());
    assert_eq!(d.retry_after_ns(), Some(500));
    at(&clock, 599);
    assert!(!l.check(&0).is_allowed());
    at(&clock, 600);
    assert!(l.check_n(&0, 2).is_allowed());
}

/// A unit recorded at 0 is live in every window `(s - W, s]` with `s < W`. Once a step at a
/// later time has seen it expire, the log drops it; when the clock then goes back before its
/// expiry, the log has forgotten it and admits again, recording the new unit at `now` (its
/// `latest recorded time` went with the dropped entry). The recorded times then hold 2 units
/// in `(-50, 50]` with a limit of 1, against the module doc ("a clock that goes backwards keeps
/// more units alive, never fewer").
#[test]
fn backwards_time_after_an_expiry_regains_no_credit() {
    let clock = ManualClock::new();
    let l = log(1, 100, &clock);
    at(&clock, 0);
    assert!(l.check(&0).is_allowed());
    at(&clock, 100);
    assert_eq!(
        l.peek(&0).remaining(),
        1,
        "the unit at 0 has expired at 100"
    );
    at(&clock, 50);
    let d = l.check(&0);
    assert!(
        !d.is_allowed(),
        "the unit recorded at 0 is live at 50: a second unit in (-50, 50]"
    );
}

#[test]
fn config_errors() {
    let s = Duration::from_secs(1);
    let err = |limit, window| {
        KeyedLimiter::<u8>::sliding_log(limit, window)
            .build()
            .unwrap_err()
    };
    assert_eq!(err(0, s), ConfigError::Zero { field: "limit" });
    assert_eq!(
        err(1, Duration::ZERO),
        ConfigError::Zero { field: "window" }
    );
    assert_eq!(
        err(1, Duration::MAX),
        ConfigError::WindowTooLong {
            window: Duration::MAX
        }
    );
    let just_over = Duration::from_nanos(u64::MAX) + Duration::from_nanos(1);
    assert_eq!(
        err(1, just_over),
        ConfigError::WindowTooLong { window: just_over }
    );
    assert!(
        KeyedLimiter::<u8>::sliding_log(1, Duration::from_nanos(u64::MAX))
            .build()
            .is_ok()
    );
    assert!(KeyedLimiter::<u8>::sliding_log(MAX_LOG_LIMIT, s)
        .build()
        .is_ok());
    assert_eq!(
        err(MAX_LOG_LIMIT + 1, s),
        ConfigError::LogLimitTooLarge {
            limit: MAX_LOG_LIMIT + 1,
            max: MAX_LOG_LIMIT
        }
    );
    assert_eq!(
        err(u32::MAX, s),
        ConfigError::LogLimitTooLarge {
            limit: u32::MAX,
            max: MAX_LOG_LIMIT
        }
    );
    assert_eq!(
        KeyedLimiter::<u8>::sliding_log(1, s)
            .max_keys(0)
            .build()
            .unwrap_err(),
        ConfigError::Zero { field: "max_keys" }
    );
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

#[test]
fn threads_on_a_frozen_clock_admit_exactly_the_limit() {
    let clock = ManualClock::new();
    clock.set_ns(1_000_000_007);
    let l = log(MAX_LOG_LIMIT, 1_000_000_000, &clock);
    let results = hammer(|i| {
        let key = (i % 2) as u8;
        let r: Vec<u32> = (0..ATTEMPTS)
            .map(|_| l.check(&key))
            .filter(Decision::is_allowed)
            .map(|d| d.remaining())
            .collect();
        (key, r)
    });
    for key in 0..2u8 {
        let mut r: Vec<u32> = results
            .iter()
            .filter(|(k, _)| *k == key)
            .flat_map(|(_, r)| r.iter().copied())
            .collect();
        r.sort_unstable();
        // The k-th admission leaves limit - k: each remaining value exactly once.
        assert_eq!(r.len(), MAX_LOG_LIMIT as usize, "key {key}");
        assert!(r.into_iter().eq(0..MAX_LOG_LIMIT), "key {key}");
        assert_eq!(l.peek(&key).remaining(), 0);
    }
    assert_eq!(l.len(), 2);
}

/// Mixed sizes on a frozen clock: what was admitted plus what is left is exactly the limit.
#[test]
fn threads_with_mixed_sizes_never_overspend() {
    let clock = ManualClock::new();
    clock.set_ns(3);
    let l = log(MAX_LOG_LIMIT, 1_000, &clock);
    let units: u64 = hammer(|i| {
        (0..ATTEMPTS / 4)
            .map(|j| {
                let n = ((i + j) % 5) as u32;
                u64::from(n) * u64::from(l.check_n(&7, n).is_allowed())
            })
            .sum::<u64>()
    })
    .into_iter()
    .sum();
    let left = l.peek(&7).remaining();
    assert_eq!(units + u64::from(left), u64::from(MAX_LOG_LIMIT));
    assert!(l.check_n(&7, left).is_allowed());
    assert!(!l.check(&7).is_allowed());
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
    let clock = ManualClock::new();
    clock.set_ns(42);
    let l = KeyedLimiter::<u32>::sliding_log(1, Duration::from_secs(1))
        .clock(clock)
        .build()
        .unwrap();
    let admitted = race_on_new_keys(ROUNDS, BATCH, |k| l.check(&k).is_allowed());
    assert_eq!(admitted, u64::from(KEYS));
    assert_eq!(l.len(), KEYS as usize);
}
