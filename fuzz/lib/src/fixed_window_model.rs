//! Fixed window counter: the real `Limiter` and `KeyedLimiter<u8>` (both stores) against
//! `cellgate_models::FixedWindowModel` (whose docs give the semantics and the swept state).
//!
//! Configuration (module docs of `src/algorithm/fixed_window.rs`): a zero limit, a zero window
//! or one longer than `u64::MAX` ns, and a limit above the layout's `2^(64 - I) - 1` (`I` =
//! bits of `u64::MAX / W`) are `ConfigError`s, checked in that order.

use std::time::Duration;

use cellgate::{ConfigError, KeyedLimiter, Limiter};

pub use cellgate_models::fixed_window::{max_limit, FixedWindowModel, State};

use crate::common::{validate_window, Stats};
use crate::keyed_model::{run_window, WindowInput};

/// One fuzz input: a configuration (possibly invalid), the stores' bounds, and operations.
pub type Input = WindowInput;

/// Which configurations are valid, and the exact error of an invalid one.
pub fn validate(limit: u32, window: Duration) -> Result<FixedWindowModel, ConfigError> {
    validate_window(limit, window, max_limit)
        .map(|(limit, window)| FixedWindowModel { limit, window })
}

/// Replays `input` against the real limiters and the model; panics on any difference.
pub fn run(input: &Input) -> Stats {
    let keyed = KeyedLimiter::<u8>::fixed_window;
    run_window(input, max_limit, validate, Limiter::fixed_window, keyed)
}

#[cfg(test)]
mod tests {
    //! The validation against the documented errors, and regressions the target found (the
    //! model's own vectors are in `cellgate-models`).
    use super::*;
    use cellgate::clock::ManualClock;

    #[test]
    fn validation() {
        let s = Duration::from_secs(1);
        assert_eq!(validate(0, s), Err(ConfigError::Zero { field: "limit" }));
        assert_eq!(
            validate(1, Duration::ZERO),
            Err(ConfigError::Zero { field: "window" })
        );
        assert!(matches!(
            validate(1, Duration::MAX),
            Err(ConfigError::WindowTooLong { .. })
        ));
        assert_eq!(max_limit(1_000_000_000), (1 << 29) - 1);
        assert!(validate((1 << 29) - 1, s).is_ok());
        assert_eq!(
            validate(1 << 29, s),
            Err(ConfigError::LimitTooLarge {
                limit: 1 << 29,
                max: (1 << 29) - 1,
                window: s
            })
        );
        assert_eq!(max_limit(1), 0);
        assert_eq!(max_limit(u64::MAX), (1 << 63) - 1);
    }

    /// A fixed bug (the fuzzer's minimal input, cleaned up): a refund leaves a zero count in
    /// window 10 while the clock goes back to window 9. That state is not idle (a check at the
    /// clock's time still counts in window 10), so a sweep there must not drop it, and the key
    /// keeps deciding exactly as in a limiter that never evicts.
    #[test]
    fn an_emptied_window_ahead_of_the_clock_survives_a_sweep() {
        const W: u64 = 16_384;
        let clock = ManualClock::new();
        let build = || {
            KeyedLimiter::<u8>::fixed_window(6, Duration::from_nanos(W))
                .clock(clock.clone())
                .build()
                .unwrap()
        };
        let (evicting, kept) = (build(), build());
        clock.set_ns(10 * W + 5);
        for l in [&evicting, &kept] {
            assert!(l.check_n(&5, 3).is_allowed());
            assert!(l.refund(&5, 8));
        }
        clock.set_ns(10 * W - 1);
        assert_eq!(
            evicting.evict_idle(),
            0,
            "a zero count in a later window is not idle"
        );
        let (e, k) = (evicting.check_n(&5, 3), kept.check_n(&5, 3));
        assert_eq!(e, k);
        assert_eq!(k.reset_after_ns(), W + 1);
        clock.set_ns(10 * W);
        assert_eq!(evicting.check_n(&5, 6), kept.check_n(&5, 6));
        assert!(!kept.check_n(&5, 6).is_allowed());
    }

    crate::corpus_tests!("fixed_window_model", run);
}
