//! Sliding window counter (the two-window estimate), from the module docs of
//! `src/algorithm/sliding_window.rs` and the `sliding_window` constructors' docs:
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
//! Layout and horizon (the module docs' "The horizon"): each count field has `C` = bits of the
//! limit (1 to 31), the index the other `64 - 2C` bits; the horizon is `2^(64 - 2C) * W` when
//! that is at most `u64::MAX`, else there is none. The largest limit is `2^C - 1` for the
//! widest `C` whose horizon is at least 180 days or absent ([`max_limit`]).
//!
//! Swept state: an idle key dropped at `s` has no count in `s`'s window or the one before, but
//! may have used the whole limit in the window before that, so it comes back as "window
//! `s/W - 1` with `prev = limit`, `curr = 0`" (fresh in window 0). Past the horizon every key
//! is idle whatever it holds, so one swept there comes back as the strictest state: both counts
//! full in the last window before the horizon.

use crate::expect::{first_true, index_bits, wait_until, Expect, U64};
use crate::model::{CellModel, Model};

/// The configuration: a limit per sliding window of `window` ns, and the horizon its layout
/// gives ([`SlidingWindowModel::new`] computes it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SlidingWindowModel {
    pub limit: u32,
    pub window: u64,
    /// The first instant from which every request is denied; `None` if past `u64::MAX`.
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
/// full-range regime: `C <= (64 - I) / 2` (`I` = bits of `u64::MAX / W`).
pub fn max_limit(window_ns: u64) -> u128 {
    let c = (1..=31u32)
        .rev()
        .find(|&c| match horizon(c, window_ns) {
            Some(h) => h >= MIN_HORIZON_NS,
            None => true,
        })
        .unwrap_or(1);
    debug_assert!(horizon(c, window_ns).is_some() || 2 * c <= 64 - index_bits(window_ns));
    (1u128 << c) - 1
}

/// The state as it applies at one instant.
#[derive(Debug, Clone, Copy)]
struct View {
    k: u128,
    e: u128,
    prev: u128,
    curr: u128,
}

impl SlidingWindowModel {
    /// `limit` per sliding window of `window` ns, with the horizon of its layout.
    pub fn new(limit: u32, window: u64) -> Self {
        Self {
            limit,
            window,
            horizon: horizon(count_bits(limit), window),
        }
    }

    /// Whether `t` is at or past the horizon.
    pub fn past(&self, t: u128) -> bool {
        self.horizon.is_some_and(|h| t >= h)
    }

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
}

impl Model for SlidingWindowModel {
    type State = State;

    fn fresh(&self) -> State {
        None
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

    /// Nothing counts at `now`, and the stored window is earlier than now's (an emptied window
    /// as late as now's still takes the checks made before its start, at full weight, where
    /// the swept state would count them in the window before it).
    fn is_idle(&self, st: &State, now: u64) -> bool {
        if self.past(u128::from(now)) {
            return true;
        }
        // Window 0 emptied is the fresh state: nothing is checked before it starts.
        let current =
            st.is_some_and(|(k, _, _)| k > 0 && k >= u128::from(now) / u128::from(self.window));
        let v = self.view(st, u128::from(now));
        !current && v.prev == 0 && v.curr == 0
    }
}

impl CellModel for SlidingWindowModel {
    const NAME: &'static str = "sliding_window";

    fn window(&self) -> u64 {
        self.window
    }

    fn limit(&self) -> u32 {
        self.limit
    }

    fn swept(&self, swept: u64) -> State {
        let limit = u128::from(self.limit);
        if let Some(h) = self.horizon.filter(|&h| u128::from(swept) >= h) {
            return Some((h / u128::from(self.window) - 1, limit, limit));
        }
        let k = u128::from(swept / self.window);
        (k > 0).then(|| (k - 1, limit, 0))
    }

    fn word(&self, st: &State) -> State {
        Some(st.unwrap_or((0, 0, 0)))
    }

    /// Up to `n` units off the counts that apply at `now`: the current window's first, then the
    /// previous one's; nothing once both are over, or past the horizon. The stored window stays
    /// the stored one (in the window after it, its count is the previous window's).
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

#[cfg(test)]
mod tests {
    //! The model against hand-computed vectors (the crate's unit tests), so a model bug is not
    //! mistaken for an implementation bug.
    use super::*;
    use crate::model::cancel;

    #[test]
    fn previous_window_weighs_in() {
        let s = SlidingWindowModel::new(10, 1000);
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
        let s = SlidingWindowModel::new(4, 100);
        let mut st = None;
        assert!(s.step(&mut st, 10, 4).allowed);
        assert_eq!(s.step(&mut st, 20, 1).retry_ns, Some(105));
        assert_eq!(s.step(&mut st, 20, 4).retry_ns, Some(180));
        assert_eq!(s.step(&mut st, 20, 5).retry_ns, None);
        let s = SlidingWindowModel::new(2, 100);
        let mut st = None;
        s.step(&mut st, 150, 2);
        let d = s.step(&mut st, 50, 1);
        assert_eq!((d.allowed, d.retry_ns), (false, Some(200)));
    }

    #[test]
    fn swept_state() {
        let s = SlidingWindowModel::new(3, 1000);
        assert_eq!(s.swept(999), None);
        let sw = s.swept(3000);
        for now in [3000, 3500, 10_000] {
            assert_eq!(s.step(&mut sw.clone(), now, 3), s.step(&mut None, now, 3));
        }
        assert!(!s.step(&mut sw.clone(), 2500, 2).allowed);
    }

    #[test]
    fn refund_and_cancel() {
        let s = SlidingWindowModel::new(10, 1000);
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

    #[test]
    fn hand_worked() {
        let m = SlidingWindowModel::new(10, 1000);
        let mut s = None;
        assert!(m.step(&mut s, 500, 10).allowed);
        // At 1250: prev 10 weighs 10 * 750 = 7500; 3 more would be 10500 > 10000.
        let e = m.step(&mut s, 1250, 3);
        assert!(!e.allowed);
        assert_eq!(e.remaining, 2);
        // 10 * (1000 - e) <= 7000 from e = 300.
        assert_eq!(e.retry_ns, Some(50));
        assert_eq!(
            e.reset_ns, 750,
            "only prev holds a count: the end of window 1"
        );
        let e = m.step(&mut s, 1300, 3);
        assert!(e.allowed && e.remaining == 0 && e.reset_ns == 1700);
        // 10 units: in window 2, prev = 3 weighs 3 * (1000 - e) <= 0 only at e = 1000, so the
        // start of window 3.
        let e = m.step(&mut s, 1300, 10);
        assert_eq!(e.retry_ns, Some(3000 - 1300));
        assert_eq!(m.step(&mut s, 1300, 11).retry_ns, None);
        // Backwards: evaluated at the start of window 1 (e = 0): 10 * 1000 + 3 * 1000 > 10 * 1000,
        // so even a peek is denied, until 10 * (1000 - e) <= 7000 at 1300.
        let e = m.step(&mut s, 10, 0);
        assert_eq!(
            (e.allowed, e.remaining, e.reset_ns, e.retry_ns),
            (false, 0, 2990, Some(1290))
        );
    }

    #[test]
    fn layout_maximum() {
        // 1 s: 20-bit counts leave a 24-bit index, 2^24 s = 194 days; 21 bits would leave
        // 2^22 s = 48 days.
        assert_eq!(max_limit(1_000_000_000), 1_048_575);
        assert_eq!(max_limit(10_000_000_000), 2_097_151);
        // 1 min: 2^18 min = 182 days.
        assert_eq!(max_limit(60_000_000_000), 8_388_607);
        assert_eq!(max_limit(3_600_000_000_000), 33_554_431);
        assert_eq!(max_limit(86_400_000_000_000), 268_435_455);
        // The full-range bound keeps no horizon; one above it has one.
        assert_eq!(SlidingWindowModel::new(16_383, 1_000_000_000).horizon, None);
        assert_eq!(
            SlidingWindowModel::new(16_384, 1_000_000_000).horizon,
            Some((1u128 << 34) * 1_000_000_000)
        );
        // Tiny windows: 2^54 ns is 208 days, 2^52 ns 52 days.
        assert_eq!(max_limit(1), 31);
        assert_eq!(max_limit(3), 31);
        assert_eq!(max_limit(4), 63);
        // Huge windows: every limit below 2^31 fits with no horizon.
        assert_eq!(max_limit(u64::MAX), (1 << 31) - 1);
        assert_eq!(
            SlidingWindowModel::new((1 << 31) - 1, u64::MAX).horizon,
            None
        );
        assert_eq!(
            (count_bits(1), count_bits(2), count_bits(u32::MAX)),
            (1, 2, 31)
        );
    }

    /// A million per second: the formula up to the horizon (2^24 s), closed from it on.
    #[test]
    fn horizon_of_a_million_per_second() {
        let (w, limit) = (1_000_000_000u64, 1_000_000u32);
        let s = SlidingWindowModel::new(limit, w);
        let h = (1u64 << 24) * w;
        assert_eq!(s.horizon, Some(u128::from(h)));
        let mut st = None;
        assert!(s.step(&mut st, h - w - 1, limit).allowed);
        // One ns before the horizon the previous count weighs ceil(10^6 * 1 / W) = 1.
        let d = s.step(&mut st, h - 1, 0);
        assert_eq!((d.allowed, d.remaining), (true, u128::from(limit) - 1));
        assert!(s.step(&mut st, h - 1, limit - 1).allowed);
        // Full: the next window is past the horizon, so no wait helps.
        let d = s.step(&mut st, h - 1, 1);
        assert_eq!((d.allowed, d.retry_ns), (false, None));
        // A wait that ends before the horizon is still a wait: a full window two before it
        // weighs one unit less 1000 ns into the next (10^6 * (W - e) <= (10^6 - 1) * W).
        let mut early = None;
        assert!(s.step(&mut early, h - 2 * w, limit).allowed);
        assert_eq!(
            s.step(&mut early, h - 2 * w, 1).retry_ns,
            Some(u128::from(w) + 1000)
        );
        for t in [h, h + 1, u64::MAX] {
            let d = s.step(&mut None, t, 0);
            assert_eq!(
                (d.allowed, d.remaining, d.retry_ns, d.reset_ns),
                (false, 0, None, 0)
            );
            let mut held = st;
            assert!(!s.step(&mut held, t, 1).allowed);
            assert_eq!(held, st, "nothing stored past the horizon");
            assert!(s.is_idle(&st, t));
            assert!(!s.refund(&mut st.clone(), t, 1));
            assert!(!s.uncount(&mut st.clone(), t, 1, &st));
        }
        assert!(!s.is_idle(&st, h - 1));
        // Swept past the horizon: the strictest state, nothing fits before it.
        let swept = s.swept(h);
        assert_eq!(
            swept,
            Some((u128::from(h / w) - 1, u128::from(limit), u128::from(limit)))
        );
        for now in [0, w, h - 1] {
            assert!(!s.step(&mut swept.clone(), now, 1).allowed, "at {now}");
        }
        assert_eq!(
            s.swept(h - 1),
            Some((u128::from(h / w) - 2, u128::from(limit), 0))
        );
    }
}
