//! Sliding window counter: the real `Limiter` and `KeyedLimiter<u8>` (both stores) against
//! `cellgate_models::SlidingWindowModel` (whose docs give the semantics, the closed form it
//! checks by search, the horizon and the swept state).
//!
//! Configuration: a zero limit, a zero window or one longer than `u64::MAX` ns, and a limit
//! whose horizon would be under 180 days are `ConfigError`s (`LimitTooLarge` names `2^C - 1`
//! for the widest count width `C` that is long enough; `max_limit`).
//!
//! `Input::start` puts the clock a few windows before the horizon (or before `u64::MAX` when
//! there is none) before the operations run, so that they cross it.

use std::time::Duration;

use arbitrary::Arbitrary;
use cellgate::{ConfigError, KeyedLimiter, Limiter};

pub use cellgate_models::sliding_window::{max_limit, SlidingWindowModel, State};

use crate::common::{layout_max, validate_window, LimitSel, Op, Stats, WindowSel, U64};
use crate::keyed_model::{run_window, Stores, WindowInput};

/// One fuzz input: where the clock starts, then what every window target takes (a
/// configuration, possibly invalid, the stores' bounds, and operations). The fields are those
/// of [`WindowInput`] after a leading [`Start`], flat, in the order the committed seeds encode.
#[derive(Arbitrary, Debug, Clone)]
pub struct Input {
    pub start: Start,
    pub window: WindowSel,
    pub limit: LimitSel,
    pub stores: Stores,
    pub ops: Vec<Op>,
}

/// Where the clock is set before the operations run.
#[derive(Arbitrary, Debug, Clone, Copy)]
pub enum Start {
    /// At 0, as every other target.
    Zero,
    /// `windows % 4` windows plus `frac / 256` of one before the horizon (or `u64::MAX + 1`
    /// when there is none), minus `ns` (a few nanoseconds either side).
    NearHorizon { windows: u8, frac: u8, ns: i8 },
}

impl Start {
    /// The time this start puts the clock at, for the configuration `m`.
    pub fn at(self, m: &SlidingWindowModel) -> u64 {
        match self {
            Start::Zero => 0,
            Start::NearHorizon { windows, frac, ns } => {
                let w = u128::from(m.window);
                let end = m.horizon.unwrap_or(U64 + 1);
                let back = w * u128::from(windows % 4) + w * u128::from(frac) / 256;
                let t = end.saturating_sub(back);
                let t = if ns >= 0 {
                    t.saturating_sub(ns.unsigned_abs().into())
                } else {
                    t + u128::from(ns.unsigned_abs())
                };
                u64::try_from(t.min(U64)).unwrap()
            }
        }
    }
}

/// Which configurations are valid, and the exact error of an invalid one.
pub fn validate(limit: u32, window: Duration) -> Result<SlidingWindowModel, ConfigError> {
    validate_window(limit, window, max_limit)
        .map(|(limit, window)| SlidingWindowModel::new(limit, window))
}

/// Replays `input` against the real limiters and the model; panics on any difference.
pub fn run(input: &Input) -> Stats {
    // The start is one more operation, first: setting the clock, which the keyed model
    // applies to every subject and the model alike.
    let start = validate(
        input.limit.get(layout_max(input.window.get(), max_limit)),
        input.window.get(),
    )
    .map_or(0, |m| input.start.at(&m));
    let ops = (start > 0)
        .then_some(Op::SetNs(start))
        .into_iter()
        .chain(input.ops.iter().cloned())
        .collect();
    let input = WindowInput {
        window: input.window,
        limit: input.limit,
        stores: input.stores,
        ops,
    };
    let keyed = KeyedLimiter::<u8>::sliding_window;
    run_window(&input, max_limit, validate, Limiter::sliding_window, keyed)
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
        // 1 s: 20-bit counts leave a 24-bit index, 2^24 s = 194 days; 21 bits would leave
        // 2^22 s = 48 days (the model's bounds for other windows are in `cellgate-models`).
        let s = Duration::from_secs(1);
        assert_eq!(
            validate(1_048_575, s).unwrap().horizon,
            Some((1u128 << 24) * 1_000_000_000)
        );
        assert_eq!(
            validate(1_048_576, s),
            Err(ConfigError::LimitTooLarge {
                limit: 1_048_576,
                max: 1_048_575,
                window: s
            })
        );
        // The full-range bound keeps no horizon.
        assert_eq!(validate(16_383, s).unwrap().horizon, None);
        assert!(validate(31, Duration::from_nanos(1)).is_ok());
        assert!(validate(32, Duration::from_nanos(1)).is_err());
    }

    /// Where `Start` puts the clock (the model's own horizon vectors are in `cellgate-models`).
    #[test]
    fn start_positions() {
        let (w, limit) = (1_000_000_000u64, 1_000_000u32);
        let s = validate(limit, Duration::from_nanos(w)).unwrap();
        let h = (1u64 << 24) * w;
        assert_eq!(s.horizon, Some(u128::from(h)));
        let near = |windows, frac, ns| Start::NearHorizon { windows, frac, ns }.at(&s);
        assert_eq!(near(0, 0, 0), h);
        assert_eq!(near(1, 128, 1), h - w - w / 2 - 1);
        assert_eq!(near(4, 0, -3), h + 3);
        // No horizon: the end of the clock's range.
        let none = validate(3, Duration::from_nanos(w)).unwrap();
        assert_eq!(
            Start::NearHorizon {
                windows: 0,
                frac: 0,
                ns: 0
            }
            .at(&none),
            u64::MAX
        );
        assert_eq!(Start::Zero.at(&s), 0);
    }

    /// Operations across the horizon, against the real limiters.
    #[test]
    fn runs_across_the_horizon() {
        use crate::common::Units;
        let ops = vec![
            Op::Check {
                key: 1,
                n: Units::Limit,
            },
            Op::AdvanceWindows { k: 1, frac: 200 },
            Op::Check {
                key: 1,
                n: Units::Half,
            },
            Op::Peek { key: 1 },
            Op::AdvanceWindows { k: 1, frac: 10 },
            Op::Check {
                key: 2,
                n: Units::Small(1),
            },
            Op::EvictIdle,
            Op::RewindWindows { k: 1, frac: 0 },
            Op::Check {
                key: 1,
                n: Units::Small(1),
            },
            Op::Check {
                key: 2,
                n: Units::Small(1),
            },
        ];
        let input = Input {
            start: Start::NearHorizon {
                windows: 1,
                frac: 100,
                ns: 0,
            },
            window: WindowSel::Long { secs: 1, nanos: 0 },
            limit: LimitSel::AtMax(0),
            stores: Stores {
                table: crate::keyed_model::Cap::Big,
                map: None,
            },
            ops,
        };
        let stats = run(&input);
        assert_eq!(stats.invalid_config, 0);
        assert!(stats.allowed > 0 && stats.denied_no_retry > 0, "{stats:?}");
    }

    crate::corpus_tests!("sliding_window_model", run);
}
