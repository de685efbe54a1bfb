//! Exact sliding log: the window family's tests (`family_tests!`: both stores against
//! `cellgate_models::SlidingLogModel`, eviction, many threads on a frozen clock), the
//! exact-window guarantee checked on whole histories, configuration errors and hand-worked
//! edges.

use std::time::Duration;

use cellgate::clock::ManualClock;
use cellgate::{ConfigError, KeyedLimiter, SlidingLog, MAX_SLIDING_LOG_LIMIT};
use cellgate_models::SlidingLogModel;
use proptest::prelude::*;

use crate::common::windows::*;

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

struct Log;

impl Family for Log {
    type Model = SlidingLogModel;

    fn configs() -> BoxedStrategy<(u64, u32)> {
        (
            prop_oneof![1 => Just(1u64), 9 => windows()],
            prop_oneof![
                4 => 1u32..=6,
                1 => Just(MAX_SLIDING_LOG_LIMIT),
                1 => 1..=MAX_SLIDING_LOG_LIMIT,
            ],
        )
            .boxed()
    }

    fn model(window: u64, limit: u32) -> SlidingLogModel {
        SlidingLogModel { limit, window }
    }

    fn stores(w: u64, limit: u32, clock: &ManualClock) -> [Box<dyn Subject>; 2] {
        [
            Box::new(log(limit, w, clock)),
            Box::new(capped(limit, w, clock)),
        ]
    }

    /// A sliding log is keyed only.
    fn direct(_w: u64, _limit: u32, _clock: &ManualClock) -> Option<Box<dyn Subject>> {
        None
    }

    fn racer(max_keys: Option<usize>, clock: ManualClock) -> Box<dyn Racer> {
        let b = KeyedLimiter::<u32>::sliding_log(1, Duration::from_secs(1)).clock(clock);
        Box::new(match max_keys {
            Some(m) => b.max_keys(m).build().unwrap(),
            None => b.build().unwrap(),
        })
    }

    const THREAD_LIMIT: u32 = MAX_SLIDING_LOG_LIMIT;
}

family_tests!(Log);

proptest! {
    #![proptest_config(config(384))]

    /// The model comparison with time that never goes backwards (where the log never meets an
    /// expiry it has forgotten), so that long histories build up.
    #[test]
    fn matches_the_model_forward_time(
        (w, limit) in Log::configs(),
        steps in steps_of(actions(), 1..=60),
    ) {
        let clock = ManualClock::new();
        let l = log(limit, w, &clock);
        drive(&Log::model(w, limit), w, limit, &clock, &[&l], &steps, true)?;
    }

    /// The guarantee itself, checked on the limiter's answers alone (no model): over a whole
    /// history with time that never goes backwards, every window `(s - W, s]` ending at an
    /// admission holds at most `limit` units; every denial of `n <= limit` was necessary; and
    /// `retry_after` is exactly when enough of the history has expired.
    #[test]
    fn every_window_holds_at_most_the_limit(
        (w, limit) in Log::configs(),
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
    assert!(KeyedLimiter::<u8>::sliding_log(MAX_SLIDING_LOG_LIMIT, s)
        .build()
        .is_ok());
    assert_eq!(
        err(MAX_SLIDING_LOG_LIMIT + 1, s),
        ConfigError::LogLimitTooLarge {
            limit: MAX_SLIDING_LOG_LIMIT + 1,
            max: MAX_SLIDING_LOG_LIMIT
        }
    );
    assert_eq!(
        err(u32::MAX, s),
        ConfigError::LogLimitTooLarge {
            limit: u32::MAX,
            max: MAX_SLIDING_LOG_LIMIT
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
