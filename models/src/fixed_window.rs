//! Fixed window counter, from the module docs of `src/algorithm/fixed_window.rs` and the
//! `fixed_window` constructors' docs:
//!
//! ```text
//! window k covers [k*W, (k+1)*W); the count that applies at now is the stored count if the
//! stored window is now's window or later (a clock that went backwards keeps the later
//! window's count), else 0
//! allowed iff count + n <= limit; denied requests are not counted
//! remaining = limit - count (after the admission, if any)
//! retry_after (denied) = the start of the next window - now, None if n > limit or if that
//!                        start is past u64::MAX ns
//! reset_after = the end of the counted window - now, 0 if nothing is counted
//! ```
//!
//! Largest limit: `2^(64 - I) - 1`, `I` = bits of `u64::MAX / W`.
//!
//! Swept state: an idle key dropped by a sweep at `s` may have used the whole limit in the
//! window before `s`'s, so it comes back as "window `s/W - 1` holds `limit`" (fresh when `s` is
//! in window 0).

use crate::expect::{index_bits, wait_until, Expect};
use crate::model::{CellModel, Model};

/// The configuration: a limit per window of `window` ns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FixedWindowModel {
    pub limit: u32,
    pub window: u64,
}

/// State: the latest window that admitted something and its count (`None`: nothing yet).
pub type State = Option<(u128, u128)>;

/// The largest limit a fixed window of `window_ns` holds: `2^(64 - I) - 1`.
pub fn max_limit(window_ns: u64) -> u128 {
    (1u128 << (64 - index_bits(window_ns))) - 1
}

impl FixedWindowModel {
    /// The window that applies at `now` and its count.
    fn applies(&self, st: &State, now: u64) -> (u128, u128) {
        let k_now = u128::from(now) / u128::from(self.window);
        match *st {
            Some((k, count)) if k >= k_now => (k, count),
            _ => (k_now, 0),
        }
    }
}

impl Model for FixedWindowModel {
    type State = State;

    fn fresh(&self) -> State {
        None
    }

    fn step(&self, st: &mut State, now: u64, n: u32) -> Expect {
        let (k, count) = self.applies(st, now);
        let limit = u128::from(self.limit);
        let n = u128::from(n);
        let end = (k + 1) * u128::from(self.window);
        let to_end = end - u128::from(now);
        if count + n <= limit {
            if n > 0 {
                *st = Some((k, count + n));
            }
            return Expect {
                allowed: true,
                limit: self.limit,
                remaining: limit - count - n,
                retry_ns: None,
                reset_ns: if count + n > 0 { to_end } else { 0 },
            };
        }
        Expect {
            allowed: false,
            limit: self.limit,
            remaining: limit - count,
            retry_ns: if n > limit {
                None
            } else {
                wait_until(end, now)
            },
            reset_ns: if count > 0 { to_end } else { 0 },
        }
    }

    /// Nothing counts at `now`, and the stored window is not later than now's (an emptied
    /// window ahead of the clock still takes the checks made at `now`).
    fn is_idle(&self, st: &State, now: u64) -> bool {
        let ahead = st.is_some_and(|(k, _)| k > u128::from(now) / u128::from(self.window));
        !ahead && self.applies(st, now).1 == 0
    }
}

impl CellModel for FixedWindowModel {
    const NAME: &'static str = "fixed_window";

    fn limit(&self) -> u32 {
        self.limit
    }

    fn window(&self) -> u64 {
        self.window
    }

    fn swept(&self, swept: u64) -> State {
        let k = u128::from(swept / self.window);
        (k > 0).then(|| (k - 1, u128::from(self.limit)))
    }

    fn word(&self, st: &State) -> State {
        Some(st.unwrap_or((0, 0)))
    }

    /// The count that applies at `now` (the stored one, if its window is now's or later) minus
    /// `n`, never below zero; nothing once the stored window is over.
    fn refund(&self, st: &mut State, now: u64, n: u32) -> bool {
        let k_now = u128::from(now) / u128::from(self.window);
        match *st {
            Some((k, count)) if k >= k_now && count > 0 && n > 0 => {
                *st = Some((k, count - count.min(u128::from(n))));
                true
            }
            _ => false,
        }
    }

    fn zero_count_ahead(&self, st: &State, now: u64) -> bool {
        matches!(*st, Some((k, 0)) if k > u128::from(now) / u128::from(self.window))
    }

    /// The units off the count of the window they were counted in, if that is still the
    /// stored window and it still counts at `now` (not over).
    fn uncount(&self, st: &mut State, now: u64, n: u32, after: &State) -> bool {
        let (k, count) = self.word(st).unwrap();
        let (k_after, _) = self.word(after).unwrap();
        let over = k < u128::from(now) / u128::from(self.window);
        if over || k != k_after || count == 0 || n == 0 {
            return false;
        }
        *st = Some((k, count - count.min(u128::from(n))));
        true
    }
}

#[cfg(test)]
mod tests {
    //! The model against hand-computed vectors (the crate's unit tests and the README), so a
    //! model bug is not mistaken for an implementation bug.
    use super::*;
    use crate::expect::U64;
    use crate::model::cancel;

    fn m(limit: u32, window: u64) -> FixedWindowModel {
        FixedWindowModel { limit, window }
    }

    #[test]
    fn counts_within_a_window() {
        let f = m(3, 100);
        let mut st = None;
        for rem in [2, 1, 0] {
            let d = f.step(&mut st, 250, 1);
            assert!(d.allowed);
            assert_eq!((d.remaining, d.reset_ns), (rem, 50));
        }
        let d = f.step(&mut st, 299, 1);
        assert_eq!((d.allowed, d.retry_ns, d.reset_ns), (false, Some(1), 1));
        assert!(f.step(&mut st, 300, 3).allowed);
        assert_eq!(f.step(&mut st, 310, 4).retry_ns, None);
        assert!(f.is_idle(&st, 400) && !f.is_idle(&st, 399));
        // Backwards: window 3's count still applies in window 2.
        let d = f.step(&mut st, 250, 1);
        assert_eq!((d.allowed, d.retry_ns), (false, Some(150)));
    }

    #[test]
    fn hand_worked() {
        let f = m(3, 100);
        let mut s = None;
        let e = f.step(&mut s, 250, 2);
        assert!(e.allowed && e.remaining == 1 && e.reset_ns == 50);
        let e = f.step(&mut s, 299, 2);
        assert_eq!(
            (e.allowed, e.retry_ns, e.reset_ns, e.remaining),
            (false, Some(1), 1, 1)
        );
        assert_eq!(f.step(&mut s, 299, 4).retry_ns, None);
        // Backwards: window 2's count still applies in window 0.
        let e = f.step(&mut s, 10, 2);
        assert_eq!((e.allowed, e.retry_ns, e.reset_ns), (false, Some(290), 290));
        let e = f.step(&mut s, 300, 3);
        assert!(e.allowed && e.remaining == 0 && e.reset_ns == 100);
    }

    #[test]
    fn swept_state() {
        let f = m(3, 100);
        assert_eq!(f.swept(99), None);
        let s = f.swept(250);
        assert_eq!(s, Some((1, 3)));
        assert!(!f.step(&mut s.clone(), 150, 1).allowed);
        assert!(f.step(&mut s.clone(), 200, 3).allowed);
    }

    #[test]
    fn layout_maximum() {
        assert_eq!(max_limit(1_000_000_000), (1 << 29) - 1);
        assert_eq!(max_limit(1), 0);
        assert_eq!(max_limit(u64::MAX), (1 << 63) - 1);
    }

    #[test]
    fn last_window() {
        let f = m(1, u64::MAX / 2 + 1);
        let mut st = None;
        assert!(f.step(&mut st, u64::MAX, 1).allowed);
        let d = f.step(&mut st, u64::MAX, 1);
        assert_eq!((d.allowed, d.retry_ns), (false, None));
        // The window of u64::MAX ns: its end is the last time the clock can show.
        let f = m(1, u64::MAX);
        let mut st = None;
        assert!(f.step(&mut st, 0, 1).allowed);
        let d = f.step(&mut st, 0, 1);
        assert_eq!(d.retry_ns, Some(U64));
        assert_eq!(d.seen().retry_after_ns, Some(u64::MAX - 1));
    }

    /// A refund can leave a zero count in a window later than the clock's; that state is not
    /// idle (a check at the clock's time still counts in the later window).
    #[test]
    fn an_emptied_window_ahead_of_the_clock_is_not_idle() {
        let f = m(6, 100);
        let mut st = None;
        f.step(&mut st, 1005, 3);
        assert!(f.refund(&mut st, 1005, 8));
        assert!(f.zero_count_ahead(&st, 999));
        assert!(!f.is_idle(&st, 999));
        assert!(f.is_idle(&st, 1100));
    }

    #[test]
    fn refund_and_cancel() {
        let f = m(3, 100);
        let mut st = None;
        f.step(&mut st, 250, 2);
        assert!(f.refund(&mut st, 260, 1));
        assert_eq!(st, Some((2, 1)));
        assert!(f.refund(&mut st, 299, 5), "never below zero");
        assert_eq!(st, Some((2, 0)));
        assert!(!f.refund(&mut st, 299, 1), "nothing left to give back");
        f.step(&mut st, 299, 3);
        assert!(
            !f.refund(&mut st, 300, 1),
            "a window that is over gives nothing back"
        );
        assert!(
            !f.refund(&mut None, 50, 1),
            "a fresh key has nothing to give back"
        );
        // Clock behind the stored window: its count is the one that applies.
        assert!(f.refund(&mut st, 150, 1));
        assert_eq!(st, Some((2, 2)));
        // Cancel: the exact word back while the cell holds the admission's word...
        let (before, after) = (Some((1, 3)), Some((2, 1)));
        let mut now_st = after;
        assert!(cancel(&f, &mut now_st, 260, 1, true, &before, &after));
        assert_eq!(now_st, before);
        // ... else the units off the same window's count while it still counts ...
        let mut now_st = Some((2, 3));
        assert!(cancel(&f, &mut now_st, 260, 1, true, &before, &after));
        assert_eq!(now_st, Some((2, 2)));
        // ... (not once it is over) ...
        assert!(!cancel(&f, &mut now_st, 999, 1, true, &before, &after));
        assert_eq!(now_st, Some((2, 2)));
        // ... and nothing once another window is stored, or for a reservation holding nothing.
        let mut now_st = Some((3, 1));
        assert!(!cancel(&f, &mut now_st, 350, 1, true, &before, &after));
        assert!(!cancel(
            &f,
            &mut after.clone(),
            260,
            1,
            false,
            &before,
            &after
        ));
        assert_eq!(f.word(&None), Some((0, 0)));
    }
}
