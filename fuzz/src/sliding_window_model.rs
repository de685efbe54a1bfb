//! Sliding window counter: the real `Limiter` and `KeyedLimiter<u8>` (both stores) against
//! `cellgate_models::SlidingWindowModel` (whose docs give the semantics, the closed form it
//! checks by search, and the swept state).
//!
//! Configuration: a zero limit, a zero window or one longer than `u64::MAX` ns, and a limit
//! above `2^C - 1` with `C = (64 - I) / 2` (`I` = bits of `u64::MAX / W`) are `ConfigError`s.

use std::time::Duration;

use cellgate::{ConfigError, KeyedLimiter, Limiter};

pub use cellgate_models::sliding_window::{max_limit, SlidingWindowModel, State};

use crate::common::{validate_window, Stats};
use crate::keyed_model::{run_window, WindowInput};

/// One fuzz input: a configuration (possibly invalid), the stores' bounds, and operations.
pub type Input = WindowInput;

/// Which configurations are valid, and the exact error of an invalid one.
pub fn validate(limit: u32, window: Duration) -> Result<SlidingWindowModel, ConfigError> {
    validate_window(limit, window, max_limit)
        .map(|(limit, window)| SlidingWindowModel { limit, window })
}

/// Replays `input` against the real limiters and the model; panics on any difference.
pub fn run(input: &Input) -> Stats {
    let keyed = KeyedLimiter::<u8>::sliding_window;
    run_window(input, max_limit, validate, Limiter::sliding_window, keyed)
}

#[cfg(test)]
mod tests {
    //! The validation against the documented errors, and regressions the target found (the
    //! model's own vectors are in `cellgate-models`).
    use super::*;
    use cellgate::clock::ManualClock;

    /// A fixed bug: a refund of nothing, on a state whose stored current window is now's
    /// previous one, said something was given back.
    #[test]
    fn a_refund_of_nothing_gives_nothing_back() {
        let clock = ManualClock::new();
        let l = Limiter::sliding_window(10, Duration::from_nanos(1000))
            .clock(clock.clone())
            .build()
            .unwrap();
        clock.set_ns(2500);
        assert!(l.check_n(3).is_allowed());
        clock.set_ns(3500); // the stored current window is now's previous one
        let before = l.peek();
        assert!(!l.refund(0));
        assert_eq!(l.peek(), before);
        assert!(l.refund(1));
    }

    #[test]
    fn validation() {
        assert_eq!(max_limit(1_000_000_000), 16_383);
        assert_eq!(max_limit(60_000_000_000), 131_071);
        let s = Duration::from_secs(1);
        assert!(validate(16_383, s).is_ok());
        assert_eq!(
            validate(16_384, s),
            Err(ConfigError::LimitTooLarge {
                limit: 16_384,
                max: 16_383,
                window: s
            })
        );
        assert_eq!(max_limit(1), 0);
        assert_eq!(max_limit(3), 0);
        assert_eq!(max_limit(4), 1);
    }

    crate::corpus_tests!("sliding_window_model", run);
}
