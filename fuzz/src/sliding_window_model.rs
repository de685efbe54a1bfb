//! Sliding window counter: the real `Limiter` and `KeyedLimiter<u8>` (both stores) against a
//! `u128` model of DESIGN.md's "Window semantics".
//!
//! ```text
//! e = now - start of now's window k; state (k_s, prev, curr) as it applies at now:
//!   k_s == k: (prev, curr); k_s == k - 1: (curr, 0); older: (0, 0);
//!   k_s > k (the clock went backwards): window k_s at its start (e = 0), counts as stored
//! allowed iff prev * (W - e) + (curr + n) * W <= limit * W        (exact, u128)
//! remaining = floor((limit*W - prev*(W - e)) / W) - counted
//! reset_after = until neither window holds a count (0 if none does)
//! retry_after (denied) = the shortest wait after which the same request is admitted if
//!                        nothing else happens; None if n > limit or if it ends past u64::MAX
//!                        or at or past the horizon
//! from the horizon on: denied, remaining 0, no retry_after, reset_after 0, nothing stored
//! ```
//!
//! The model finds `retry_after` by a binary search over the monotone predicate "admitted at
//! time t" (not in closed form as the crate does), so it checks the crate's closed form.
//!
//! Layout and horizon (`src/algorithm/sliding_window.rs`): each count field has `C` = bits of
//! the limit (1 to 31), the index `64 - 2C`; the horizon is `2^(64 - 2C) * W` when that is at
//! most `u64::MAX`, else there is none. Configuration: a zero limit, a zero window or one
//! longer than `u64::MAX` ns, and a limit whose horizon would be under 180 days are
//! `ConfigError`s (`LimitTooLarge` names `2^C - 1` for the widest `C` that is long enough).
//!
//! Swept state (`Algorithm::swept_word`): an idle key dropped at `s` has no count in `s`'s
//! window or the one before, but may have used the whole limit in the window before that, so
//! it comes back as "window `s/W - 1` with `prev = limit`, `curr = 0`" (fresh in window 0).
//! Past the horizon every key is idle whatever it holds, so one swept there comes back as the
//! strictest state: both counts full in the last window before the horizon.
//!
//! `Input::start` puts the clock a few windows before the horizon (or before `u64::MAX` when
//! there is none) before the operations run, so that they cross it.

use std::time::Duration;

use arbitrary::Arbitrary;
use cellgate::{ConfigError, KeyedLimiter, Limiter};

use crate::common::{
    first_true, index_bits, layout_max, wait_until, Expect, LimitSel, Op, Stats, WindowSel, U64,
};
use crate::keyed_model::{run_window, CellModel, Stores};

/// One fuzz input: where the clock starts, a configuration (possibly invalid), the stores'
/// bounds, and operations.
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

/// The validated configuration.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SlidingModel {
    pub limit: u32,
    pub window: u64,
    /// The first instant from which everything is denied; `None` if past `u64::MAX`.
    pub horizon: Option<u128>,
}

/// State: `(window of the latest admission, previous window's count, that window's count)`.
pub type State = Option<(u128, u128, u128)>;

/// 180 days in nanoseconds: the shortest horizon a configuration may have.
pub const MIN_HORIZON_NS: u128 = 180 * 86_400 * 1_000_000_000;

/// The width of each count field for `limit`: its bits, 1 to 31.
pub fn count_bits(limit: u32) -> u32 {
    (1..=31)
        .find(|&c| u64::from(limit) < (1u64 << c))
        .unwrap_or(31)
}

/// The horizon with count fields of `count_bits`: `2^(64 - 2C) * W` if at most `u64::MAX`.
pub fn horizon(count_bits: u32, window_ns: u64) -> Option<u128> {
    let end = (1u128 << (64 - 2 * count_bits)) * u128::from(window_ns);
    (end <= U64).then_some(end)
}

/// The largest limit a sliding window of `window_ns` accepts: `2^C - 1` for the widest `C` whose
/// horizon is at least 180 days or absent. A window with no horizon at that width is in the
/// old, full-range regime: `C <= (64 - I) / 2` (`I` = bits of `u64::MAX / W`).
pub fn max_limit(window_ns: u64) -> u128 {
    let c = (1..=31u32)
        .rev()
        .find(|&c| horizon(c, window_ns).map_or(true, |h| h >= MIN_HORIZON_NS))
        .unwrap_or(1);
    debug_assert!(horizon(c, window_ns).is_some() || 2 * c <= 64 - index_bits(window_ns));
    (1u128 << c) - 1
}

/// Which configurations are valid, and the exact error of an invalid one.
pub fn validate(limit: u32, window: Duration) -> Result<SlidingModel, ConfigError> {
    if limit == 0 {
        return Err(ConfigError::Zero { field: "limit" });
    }
    if window.as_nanos() > U64 {
        return Err(ConfigError::WindowTooLong { window });
    }
    if window.is_zero() {
        return Err(ConfigError::Zero { field: "window" });
    }
    let w = u64::try_from(window.as_nanos()).unwrap();
    let max = max_limit(w);
    if u128::from(limit) > max {
        return Err(ConfigError::LimitTooLarge {
            limit,
            max: u64::try_from(max).unwrap(),
            window,
        });
    }
    Ok(SlidingModel {
        limit,
        window: w,
        horizon: horizon(count_bits(limit), w),
    })
}

/// The state as it applies at one instant.
#[derive(Debug, Clone, Copy)]
struct View {
    k: u128,
    e: u128,
    prev: u128,
    curr: u128,
}

impl SlidingModel {
    /// The state at time `t` (any `u128`).
    fn view(&self, st: &State, t: u128) -> View {
        let w = u128::from(self.window);
        let (k_t, e_t) = (t / w, t % w);
        match *st {
            Some((k, p, c)) if k > k_t => View {
                k,
                e: 0,
                prev: p,
                curr: c,
            },
            Some((k, p, c)) => {
                let (prev, curr) = if k_t == k {
                    (p, c)
                } else if k_t == k + 1 {
                    (c, 0)
                } else {
                    (0, 0)
                };
                View {
                    k: k_t,
                    e: e_t,
                    prev,
                    curr,
                }
            }
            None => View {
                k: k_t,
                e: e_t,
                prev: 0,
                curr: 0,
            },
        }
    }

    fn fits(&self, v: View, n: u128) -> bool {
        let w = u128::from(self.window);
        v.prev * (w - v.e) + (v.curr + n) * w <= u128::from(self.limit) * w
    }

    /// Whether `t` is at or past the horizon.
    fn past(&self, t: u128) -> bool {
        self.horizon.is_some_and(|h| t >= h)
    }

    /// Where [`Start`] puts the clock.
    pub fn start(&self, start: Start) -> u64 {
        match start {
            Start::Zero => 0,
            Start::NearHorizon { windows, frac, ns } => {
                let w = u128::from(self.window);
                let end = self.horizon.unwrap_or(U64 + 1);
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

impl CellModel for SlidingModel {
    type State = State;
    const NAME: &'static str = "sliding_window";

    fn limit(&self) -> u32 {
        self.limit
    }

    fn window(&self) -> u64 {
        self.window
    }

    fn fresh(&self) -> State {
        None
    }

    fn swept(&self, swept: u64) -> State {
        let limit = u128::from(self.limit);
        if let Some(h) = self.horizon.filter(|&h| u128::from(swept) >= h) {
            return Some((h / u128::from(self.window) - 1, limit, limit));
        }
        let k = u128::from(swept / self.window);
        (k > 0).then(|| (k - 1, limit, 0))
    }

    fn step(&self, st: &mut State, now: u64, n: u32) -> Expect {
        if self.past(u128::from(now)) {
            return Expect {
                allowed: false,
                limit: self.limit,
                remaining: 0,
                retry_ns: None,
                reset_ns: 0,
            };
        }
        let w = u128::from(self.window);
        let limit = u128::from(self.limit);
        let n = u128::from(n);
        let v = self.view(st, u128::from(now));
        assert!(v.prev <= limit && v.curr <= limit, "model invariant");
        let allowed = self.fits(v, n);
        let counted = if allowed { v.curr + n } else { v.curr };
        let remaining = ((limit * w - v.prev * (w - v.e)) / w).saturating_sub(counted);
        let reset_at = if counted > 0 {
            (v.k + 2) * w
        } else if v.prev > 0 {
            (v.k + 1) * w
        } else {
            u128::from(now)
        };
        let reset_ns = reset_at - u128::from(now);
        if allowed {
            if n > 0 {
                *st = Some((v.k, v.prev, counted));
            }
            return Expect {
                allowed,
                limit: self.limit,
                remaining,
                retry_ns: None,
                reset_ns,
            };
        }
        let retry_ns = if n > limit {
            None
        } else {
            // At the start of the window after next neither window holds a count.
            let at = first_true(u128::from(now) + 1, (v.k + 2) * w, |t| {
                self.fits(self.view(st, t), n)
            });
            wait_until(at, now).filter(|_| !self.past(at))
        };
        Expect {
            allowed,
            limit: self.limit,
            remaining,
            retry_ns,
            reset_ns,
        }
    }

    /// Nothing counts at `now`, and the stored window is not later than now's (an emptied
    /// window ahead of the clock still takes the checks made at `now`).
    fn is_idle(&self, st: &State, now: u64) -> bool {
        if self.past(u128::from(now)) {
            return true;
        }
        let ahead = st.is_some_and(|(k, _, _)| k > u128::from(now) / u128::from(self.window));
        let v = self.view(st, u128::from(now));
        !ahead && v.prev == 0 && v.curr == 0
    }

    fn word(&self, st: &State) -> State {
        Some(st.unwrap_or((0, 0, 0)))
    }

    /// Up to `n` units off the counts that apply at `now`: the current window's first, then the
    /// previous one's; nothing once both are over. The stored window stays the stored one (in
    /// the window after it, its count is the previous window's).
    fn refund(&self, st: &mut State, now: u64, n: u32) -> bool {
        if self.past(u128::from(now)) {
            return false;
        }
        let (k, p, c) = self.word(st).unwrap();
        let k_now = u128::from(now) / u128::from(self.window);
        let n = u128::from(n);
        let (from_c, from_p) = if k >= k_now {
            let from_c = c.min(n);
            (from_c, p.min(n - from_c))
        } else if k + 1 == k_now {
            // Now's current window holds nothing; the stored current one is now's previous.
            (c.min(n), 0)
        } else {
            (0, 0)
        };
        if from_c + from_p == 0 {
            return false;
        }
        *st = Some((k, p - from_p, c - from_c));
        true
    }

    fn zero_count_ahead(&self, st: &State, now: u64) -> bool {
        matches!(*st, Some((k, 0, 0)) if k > u128::from(now) / u128::from(self.window))
    }

    /// The units off the count of the window they were counted in (the stored current one, or
    /// the stored previous one if the window moved on by one), unless both stored windows are
    /// over at `now` or it is past the horizon.
    fn uncount(&self, st: &mut State, now: u64, n: u32, after: &State) -> bool {
        let (k, p, c) = self.word(st).unwrap();
        let (k_after, _, _) = self.word(after).unwrap();
        let n = u128::from(n);
        if self.past(u128::from(now)) || k + 1 < u128::from(now) / u128::from(self.window) {
            false
        } else if k == k_after && c > 0 {
            *st = Some((k, p, c - c.min(n)));
            true
        } else if k == k_after + 1 && p > 0 {
            *st = Some((k, p - p.min(n), c));
            true
        } else {
            false
        }
    }
}

/// Replays `input` against the real limiters and the model; panics on any difference.
pub fn run(input: &Input) -> Stats {
    // The start is one more operation, first: setting the clock, which the keyed model
    // applies to every subject and the model alike.
    let start = validate(
        input.limit.get(layout_max(input.window.get(), max_limit)),
        input.window.get(),
    )
    .map_or(0, |m| m.start(input.start));
    let ops: Vec<Op> = (start > 0)
        .then_some(Op::SetNs(start))
        .into_iter()
        .chain(input.ops.iter().cloned())
        .collect();
    run_window(
        input.window,
        input.limit,
        &input.stores,
        &ops,
        max_limit,
        validate,
        Limiter::sliding_window,
        KeyedLimiter::<u8>::sliding_window,
    )
}

#[cfg(test)]
mod tests {
    //! The model against hand-computed vectors (the crate's unit tests), so a model bug is not
    //! mistaken for an implementation bug.
    use super::*;
    use cellgate::clock::ManualClock;

    fn m(limit: u32, w: u64) -> SlidingModel {
        validate(limit, Duration::from_nanos(w)).unwrap()
    }

    #[test]
    fn previous_window_weighs_in() {
        let s = m(10, 1000);
        let mut st = None;
        assert!(s.step(&mut st, 500, 10).allowed);
        assert!(!s.step(&mut st, 990, 1).allowed);
        let d = s.step(&mut st, 1250, 3);
        assert_eq!((d.allowed, d.remaining, d.retry_ns), (false, 2, Some(50)));
        let d = s.step(&mut st, 1300, 3);
        assert_eq!((d.allowed, d.remaining, d.reset_ns), (true, 0, 1700));
    }

    #[test]
    fn retry_in_later_windows_and_backwards() {
        let s = m(4, 100);
        let mut st = None;
        assert!(s.step(&mut st, 10, 4).allowed);
        assert_eq!(s.step(&mut st, 20, 1).retry_ns, Some(105));
        assert_eq!(s.step(&mut st, 20, 4).retry_ns, Some(180));
        assert_eq!(s.step(&mut st, 20, 5).retry_ns, None);
        let s = m(2, 100);
        let mut st = None;
        s.step(&mut st, 150, 2);
        let d = s.step(&mut st, 50, 1);
        assert_eq!((d.allowed, d.retry_ns), (false, Some(200)));
    }

    #[test]
    fn swept_state() {
        let s = m(3, 1000);
        assert_eq!(s.swept(999), None);
        let sw = s.swept(3000);
        for now in [3000, 3500, 10_000] {
            assert_eq!(s.step(&mut sw.clone(), now, 3), s.step(&mut None, now, 3));
        }
        assert!(!s.step(&mut sw.clone(), 2500, 2).allowed);
    }

    #[test]
    fn refund_and_cancel() {
        use crate::keyed_model::cancel;
        let s = m(10, 1000);
        // Stored window 2 with prev 4, curr 3.
        let mut st = Some((2, 4, 3));
        assert!(s.refund(&mut st, 2500, 5), "current first, then previous");
        assert_eq!(st, Some((2, 2, 0)));
        // In window 3 the stored current window is the previous one: only it gives back.
        let mut st = Some((2, 4, 3));
        assert!(s.refund(&mut st, 3500, 5));
        assert_eq!(st, Some((2, 4, 0)));
        assert!(
            !s.refund(&mut st, 3500, 5),
            "the older count no longer counts"
        );
        assert!(
            !s.refund(&mut Some((2, 4, 3)), 4500, 1),
            "both windows over"
        );
        assert!(
            !s.refund(&mut Some((2, 4, 3)), 3500, 0),
            "nothing asked, nothing back"
        );
        // Clock behind the stored window: the stored counts are the ones that apply.
        let mut st = Some((2, 4, 3));
        assert!(s.refund(&mut st, 1500, 4));
        assert_eq!(st, Some((2, 3, 0)));
        // Cancel: the exact word back, else the same window's current count, or the previous
        // count once the stored window moved on by one.
        let (before, after) = (Some((1, 0, 5)), Some((2, 5, 2)));
        let mut now_st = after;
        assert!(cancel(&s, &mut now_st, 999, 2, true, &before, &after));
        assert_eq!(now_st, before);
        let mut now_st = Some((2, 5, 4));
        assert!(cancel(&s, &mut now_st, 999, 2, true, &before, &after));
        assert_eq!(now_st, Some((2, 5, 2)));
        let mut now_st = Some((3, 4, 1));
        assert!(cancel(&s, &mut now_st, 999, 2, true, &before, &after));
        assert_eq!(now_st, Some((3, 2, 1)));
        assert!(!cancel(
            &s,
            &mut Some((4, 1, 1)),
            999,
            2,
            true,
            &before,
            &after
        ));
    }

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
        // 2^22 s = 48 days.
        assert_eq!(max_limit(1_000_000_000), 1_048_575);
        // 1 min: 2^18 min = 182 days.
        assert_eq!(max_limit(60_000_000_000), 8_388_607);
        assert_eq!(max_limit(86_400_000_000_000), 268_435_455);
        let s = Duration::from_secs(1);
        assert!(validate(1_048_575, s).is_ok());
        assert_eq!(
            validate(1_048_576, s),
            Err(ConfigError::LimitTooLarge {
                limit: 1_048_576,
                max: 1_048_575,
                window: s
            })
        );
        // The old full-range bound keeps no horizon; one above it has one.
        assert_eq!(m(16_383, 1_000_000_000).horizon, None);
        assert_eq!(
            m(16_384, 1_000_000_000).horizon,
            Some((1u128 << 34) * 1_000_000_000)
        );
        // Tiny windows: 2^54 ns is 208 days, 2^52 ns 52 days.
        assert_eq!(max_limit(1), 31);
        assert_eq!(max_limit(3), 31);
        assert_eq!(max_limit(4), 63);
        assert_eq!(max_limit(u64::MAX), (1 << 31) - 1);
    }

    #[test]
    fn horizon() {
        let (w, limit) = (1_000_000_000u64, 1_000_000u32);
        let s = m(limit, w);
        let h = (1u64 << 24) * w;
        assert_eq!(s.horizon, Some(u128::from(h)));
        let mut st = None;
        assert!(s.step(&mut st, h - w - 1, limit).allowed);
        // One ns before the horizon the previous count weighs ceil(10^6 * 1 / W) = 1.
        let d = s.step(&mut st, h - 1, 0);
        assert_eq!((d.allowed, d.remaining), (true, limit as u128 - 1));
        assert!(s.step(&mut st, h - 1, limit - 1).allowed);
        // Full: the next window is past the horizon, so no wait helps.
        let d = s.step(&mut st, h - 1, 1);
        assert_eq!((d.allowed, d.retry_ns), (false, None));
        for t in [h, h + 1, u64::MAX] {
            let d = s.step(&mut None, t, 0);
            assert_eq!(
                (d.allowed, d.remaining, d.retry_ns, d.reset_ns),
                (false, 0, None, 0)
            );
            assert!(s.is_idle(&st, t));
            assert!(!s.refund(&mut st.clone(), t, 1));
        }
        assert_eq!(
            s.swept(h),
            Some((u128::from(h / w) - 1, u128::from(limit), u128::from(limit)))
        );
        // Start positions.
        let near = |windows, frac, ns| s.start(Start::NearHorizon { windows, frac, ns });
        assert_eq!(near(0, 0, 0), h);
        assert_eq!(near(1, 128, 1), h - w - w / 2 - 1);
        assert_eq!(near(4, 0, -3), h + 3);
        assert_eq!(
            m(3, w).start(Start::NearHorizon {
                windows: 0,
                frac: 0,
                ns: 0
            }),
            u64::MAX
        );
        assert_eq!(s.start(Start::Zero), 0);
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
            stores: crate::keyed_model::Stores {
                table: crate::keyed_model::Cap::Big,
                map: None,
            },
            ops,
        };
        let stats = run(&input);
        assert_eq!(stats.invalid_config, 0);
        assert!(stats.allowed > 0 && stats.denied_no_retry > 0, "{stats:?}");
    }

    #[test]
    fn seeds_replay() {
        crate::common::replay_dir(
            concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/corpus/seed_sliding_window_model"
            ),
            run,
        );
    }

    #[test]
    #[ignore = "reporting tool, not a check"]
    fn corpus_stats() {
        let dir = std::env::var("CORPUS").unwrap_or_else(|_| {
            concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/corpus/seed_sliding_window_model"
            )
            .to_string()
        });
        println!("{dir}: {:#?}", crate::common::replay_dir(&dir, run));
    }

    /// Replaces the seeds with picks from a grown corpus: `CORPUS=corpus/sliding_window_model cargo test
    /// --release sliding_window_model::tests::pick_seeds -- --ignored --nocapture`.
    #[test]
    #[ignore = "maintenance tool, not a check"]
    fn pick_seeds() {
        crate::common::refresh_seeds("sliding_window_model", run);
    }
}
