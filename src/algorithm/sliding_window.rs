//! Sliding window counter: Cloudflare's two-window estimate, in exact integer arithmetic.
//!
//! The count in the sliding window ending at `now` is estimated as the current window's count
//! plus the previous window's count weighted by how much of the previous window the sliding
//! window still covers. With `e = now - k*W` (time into the current window `k`):
//!
//! ```text
//! allowed  iff  prev * (W - e) + (curr + n) * W  <=  limit * W        (u128, no floats)
//! ```
//!
//! # State
//!
//! ```text
//!  63                 2C   2C-1            C   C-1             0
//! +---------------------+-------------------+-------------------+
//! | window index (I bits)| prev count (C bits)| curr count (C bits)|
//! +---------------------+-------------------+-------------------+
//! ```
//!
//! `I = index_bits(W)` holds every index a `u64` time can have, so the index never wraps (see
//! [`super::window`]); `C = (64 - I) / 2`. Limits up to `2^C - 1` fit: for example 16 383 for a
//! 1 s window, 131 071 for a minute, 1 048 575 for an hour. A larger limit is a
//! [`ConfigError::LimitTooLarge`].
//!
//! # Rolling and time going backwards
//!
//! Stored `(ks, p, c)` seen at window `k`: `ks == k` applies as is; `ks == k - 1` rolls to
//! `(p, c) = (c, 0)`; older is empty. `ks > k` means the clock went backwards: the stored
//! window is kept and `now` is taken as the *start* of it (`e = 0`, the previous window weighing
//! fully), which is stricter than any time the stored state could have been written at, so no
//! credit is regained.
//!
//! # Waits
//!
//! `retry_after` is the shortest wait after which the same request is admitted if nothing else
//! happens: the estimate only falls as time passes, so it is found in closed form within the
//! current window, else the next (where `curr` has become `prev`), else the one after (empty).
//! `reset_after` is the wait until neither window holds a count.

use std::num::NonZeroU64;

use super::window::clamp_ns;
use crate::decision::Decision;
use crate::error::ConfigError;

/// The packed layout of one configuration.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Layout {
    /// Width of each count field.
    pub(crate) count_bits: u32,
}

impl Layout {
    pub(crate) fn for_window(window: NonZeroU64) -> Self {
        Self {
            count_bits: (u64::BITS - super::window::index_bits(window)) / 2,
        }
    }

    /// Mask of one count field.
    #[inline]
    pub(crate) const fn count_mask(self) -> u64 {
        (1u64 << self.count_bits) - 1
    }

    /// The largest count a field holds.
    #[inline]
    pub(crate) const fn max_count(self) -> u64 {
        self.count_mask()
    }

    /// Shift of the window index: above both counts.
    #[inline]
    const fn index_shift(self) -> u32 {
        2 * self.count_bits
    }

    #[inline]
    pub(crate) const fn pack(self, index: u64, prev: u64, curr: u64) -> u64 {
        // `index_shift` is at most 62 (I >= 1), so the shift is defined; `checked_shl` keeps
        // it so even for a hypothetical 64.
        let hi = match index.checked_shl(self.index_shift()) {
            Some(v) => v,
            None => 0,
        };
        hi | (prev << self.count_bits) | curr
    }

    #[inline]
    pub(crate) const fn unpack(self, word: u64) -> (u64, u64, u64) {
        let index = match word.checked_shr(self.index_shift()) {
            Some(v) => v,
            None => 0,
        };
        (
            index,
            (word >> self.count_bits) & self.count_mask(),
            word & self.count_mask(),
        )
    }
}

/// A validated sliding-window configuration.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct SlidingWindow {
    window: NonZeroU64,
    limit: u32,
    layout: Layout,
}

/// The state as it applies at one instant.
struct View {
    /// Effective window index.
    k: u64,
    /// Effective time into window `k`.
    e: u64,
    prev: u64,
    curr: u64,
}

impl SlidingWindow {
    /// The policy this configuration enforces (see [`crate::Policy`]).
    pub(crate) fn policy(&self) -> crate::policy::Policy {
        crate::policy::Policy::new(
            crate::policy::PolicyKind::SlidingWindow,
            self.limit,
            Some(std::time::Duration::from_nanos(self.window.get())),
            None,
        )
    }

    pub(crate) fn new(limit: u32, window: std::time::Duration) -> Result<Self, ConfigError> {
        let (limit, w) =
            super::window::validate(limit, window, |w| Layout::for_window(w).max_count())?;
        Ok(Self {
            window: w,
            limit,
            layout: Layout::for_window(w),
        })
    }

    #[inline]
    fn view(&self, word: u64, now: u64) -> View {
        let w = self.window.get();
        let k = now / w;
        let (ks, p, c) = self.layout.unpack(word);
        if ks > k {
            View {
                k: ks,
                e: 0,
                prev: p,
                curr: c,
            }
        } else {
            let e = now - k * w;
            let (prev, curr) = match k - ks {
                0 => (p, c),
                1 => (c, 0),
                _ => (0, 0),
            };
            View { k, e, prev, curr }
        }
    }

    #[inline]
    pub(crate) fn step(&self, word: u64, now: u64, n: u32) -> (Decision, Option<u64>) {
        let v = self.view(word, now);
        let w = u128::from(self.window.get());
        let limit = u64::from(self.limit);
        let prev_weight = u128::from(v.prev) * (w - u128::from(v.e));
        let curr = v.curr + u64::from(n);
        let allowed = prev_weight + u128::from(curr) * w <= u128::from(limit) * w;
        let counted = if allowed { curr } else { v.curr };
        // remaining = floor((limit*W - prev_weight) / W) - counted
        //           = limit - ceil(prev_weight / W) - counted
        let prev_units = u64::try_from(prev_weight.div_ceil(w)).unwrap_or(u64::MAX);
        let remaining = limit.saturating_sub(prev_units).saturating_sub(counted);
        let start = u128::from(v.k) * w;
        let reset = if counted > 0 {
            start + 2 * w
        } else if v.prev > 0 {
            start + w
        } else {
            u128::from(now)
        };
        let reset = clamp_ns(reset - u128::from(now));
        if allowed {
            let write = (n > 0).then(|| self.layout.pack(v.k, v.prev, curr));
            return (
                Decision::allow(self.limit, remaining, NonZeroU64::MIN, reset),
                write,
            );
        }
        let retry = if n <= self.limit {
            self.earliest(&v, n)
                .filter(|&t| t <= u128::from(u64::MAX))
                .map(|t| clamp_ns(t - u128::from(now)))
        } else {
            None
        };
        (
            Decision::deny(self.limit, remaining, NonZeroU64::MIN, retry, reset),
            None,
        )
    }

    /// Takes up to `n` units off the counts that apply at `now`: the current window's first,
    /// then the previous window's. Nothing once both are over. Never below zero.
    pub(crate) fn refund(&self, word: u64, now: u64, n: u32) -> Option<u64> {
        let (ks, p, c) = self.layout.unpack(word);
        let k = now / self.window.get();
        let n = u64::from(n);
        if ks >= k {
            let from_c = c.min(n);
            let from_p = p.min(n - from_c);
            (from_c + from_p > 0).then(|| self.layout.pack(ks, p - from_p, c - from_c))
        } else if ks + 1 == k {
            // The stored current window is the previous one at `now`.
            (c > 0).then(|| self.layout.pack(ks, p, c.saturating_sub(n)))
        } else {
            None
        }
    }

    /// Undoes an admission of `n` that wrote `after`: its units are taken off the count of
    /// the window they were counted in, as long as the stored state still holds it and it
    /// still weighs at `now`.
    pub(crate) fn cancel(&self, word: u64, now: u64, n: u32, after: u64) -> Option<u64> {
        let (ks, p, c) = self.layout.unpack(word);
        let ka = self.layout.unpack(after).0;
        let n = u64::from(n);
        if ks.saturating_add(1) < now / self.window.get() {
            // Both stored windows are over: nothing counts any more.
            None
        } else if ks == ka && c > 0 {
            Some(self.layout.pack(ks, p, c.saturating_sub(n)))
        } else if ks == ka.wrapping_add(1) && p > 0 {
            Some(self.layout.pack(ks, p.saturating_sub(n), c))
        } else {
            None
        }
    }

    /// The earliest absolute time (ns, possibly past `u64::MAX`) at which `n <= limit` units
    /// fit, given the state `v` and no other requests.
    fn earliest(&self, v: &View, n: u32) -> Option<u128> {
        let w = u128::from(self.window.get());
        let limit = u128::from(self.limit);
        let n = u128::from(n);
        let start = u128::from(v.k) * w;
        // Smallest e' in [0, W) with prev * (W - e') <= room, if any.
        let first_fit = |prev: u128, room: u128| -> Option<u128> {
            if prev == 0 {
                return Some(0);
            }
            let slack = room / prev; // W - e' may be at most this
            (slack >= 1).then(|| w - slack.min(w))
        };
        let curr = u128::from(v.curr);
        if curr + n <= limit {
            if let Some(e) = first_fit(u128::from(v.prev), (limit - curr - n) * w) {
                return Some(start + e.max(u128::from(v.e)));
            }
        }
        if let Some(e) = first_fit(curr, (limit - n) * w) {
            return Some(start + w + e);
        }
        Some(start + 2 * w)
    }

    /// See [`Algorithm::swept_word`](super::Algorithm::swept_word): an idle key has no count in
    /// the sweep's window or the one before, but may have used the whole limit in the window
    /// before that, which is the previous count of the window before the sweep's.
    pub(crate) fn swept_word(&self, swept: u64) -> u64 {
        match (swept / self.window.get()).checked_sub(1) {
            Some(k) => self.layout.pack(k, u64::from(self.limit), 0),
            None => 0,
        }
    }

    #[inline]
    pub(crate) fn is_idle(&self, word: u64, now: u64) -> bool {
        // A stored window later than now's (the clock went back) is never idle, even with no
        // counts (a refund can empty it): checks at `now` would still count in that later
        // window, which a fresh key would not.
        let ahead = self.layout.unpack(word).0 > now / self.window.get();
        let v = self.view(word, now);
        !ahead && v.prev == 0 && v.curr == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn sw(limit: u32, w: u64) -> SlidingWindow {
        SlidingWindow::new(limit, Duration::from_nanos(w)).unwrap()
    }

    fn run(s: &SlidingWindow, word: &mut u64, now: u64, n: u32) -> Decision {
        super::super::apply_step(s.step(*word, now, n), word, n)
    }

    #[test]
    fn previous_window_weighs_in_proportionally() {
        // limit 10 per 1000 ns (the layout holds up to 15 for this window).
        let s = sw(10, 1000);
        let mut st = 0;
        assert!(run(&s, &mut st, 500, 10).is_allowed());
        assert!(!run(&s, &mut st, 990, 1).is_allowed());
        // At 1250 (e = 250): prev 10 weighs 10*750 = 7500; 7500 + 3*1000 > 10000.
        let d = run(&s, &mut st, 1250, 3);
        assert!(!d.is_allowed());
        // 2 fit: 7500 + 2000 <= 10000.
        assert_eq!(d.remaining(), 2);
        // Waiting for 3 units: need 10*(1000-e) <= 7000, e >= 300 -> 50 ns.
        assert_eq!(d.retry_after_ns(), Some(50));
        assert!(!run(&s, &mut st, 1299, 3).is_allowed());
        let d = run(&s, &mut st, 1300, 3);
        assert!(d.is_allowed());
        assert_eq!(d.remaining(), 0);
        // curr=3 in window 1: state is clear at the start of window 3.
        assert_eq!(d.reset_after_ns(), 3000 - 1300);
    }

    #[test]
    fn retry_may_need_the_next_windows() {
        let s = sw(4, 100);
        let mut st = 0;
        assert!(run(&s, &mut st, 10, 4).is_allowed());
        // Same window: curr 4 + 1 > 4; in window 1, prev 4 weighs 4*(100-e) <= 300 -> e >= 25.
        let d = run(&s, &mut st, 20, 1);
        assert_eq!(d.retry_after_ns(), Some(100 + 25 - 20));
        // 4 units: only once prev is fully gone, at window 2.
        let d = run(&s, &mut st, 20, 4);
        assert_eq!(d.retry_after_ns(), Some(200 - 20));
        assert_eq!(d.reset_after_ns(), 200 - 20);
        assert_eq!(run(&s, &mut st, 20, 5).retry_after(), None);
    }

    #[test]
    fn idle_gaps_of_any_length_start_fresh() {
        let s = sw(3, 1000);
        let mut st = 0;
        run(&s, &mut st, 0, 3);
        for gap in [2000u64, 1 << 33, u64::MAX - 10] {
            let mut t = st;
            let d = run(&s, &mut t, gap, 3);
            assert!(d.is_allowed(), "gap {gap}");
            assert!(s.is_idle(st, gap));
        }
        assert!(!s.is_idle(st, 1999));
    }

    #[test]
    fn backwards_time_gives_no_credit() {
        let s = sw(2, 100);
        let mut st = 0;
        run(&s, &mut st, 150, 2); // window 1 full
                                  // Back to window 0: treated as the start of window 1.
        let d = run(&s, &mut st, 50, 1);
        assert!(!d.is_allowed());
        assert_eq!(d.retry_after_ns(), Some(200 + 50 - 50));
        // At 199 (e=99 in window 1), still full.
        assert!(!run(&s, &mut st, 199, 1).is_allowed());
    }

    #[test]
    fn swept_word_is_fresh_from_the_sweep_on_and_strict_before() {
        let s = sw(3, 1000);
        let mut st = 0;
        run(&s, &mut st, 1500, 3);
        assert!(s.is_idle(st, 3000));
        let swept = s.swept_word(3000);
        for now in [3000, 3500, 10_000] {
            assert_eq!(s.step(swept, now, 3).0, s.step(0, now, 3).0, "at {now}");
        }
        // Behind the sweep: never more lenient than the dropped state.
        for now in [1500, 2000, 2500, 2999] {
            let (a, b) = (s.step(swept, now, 0).0, s.step(st, now, 0).0);
            assert!(a.remaining() <= b.remaining(), "at {now}");
        }
        assert!(!s.step(swept, 2500, 2).0.is_allowed());
        assert_eq!(s.swept_word(999), 0);
    }

    #[test]
    fn layout_bounds() {
        let l = Layout::for_window(NonZeroU64::new(1_000_000_000).unwrap());
        assert_eq!(l.max_count(), 16_383);
        let l = Layout::for_window(NonZeroU64::new(60_000_000_000).unwrap());
        assert_eq!(l.max_count(), 131_071);
        assert!(SlidingWindow::new(16_383, Duration::from_secs(1)).is_ok());
        assert!(matches!(
            SlidingWindow::new(16_384, Duration::from_secs(1)),
            Err(ConfigError::LimitTooLarge { max: 16_383, .. })
        ));
        // Round trip at the extremes of every field.
        let l = Layout::for_window(NonZeroU64::new(1_000).unwrap());
        let max_index = u64::MAX / 1_000;
        let m = l.max_count();
        for (i, p, c) in [(0, 0, 0), (max_index, m, m), (max_index, 0, m), (1, m, 0)] {
            assert_eq!(l.unpack(l.pack(i, p, c)), (i, p, c));
        }
    }
}

#[cfg(test)]
mod layout_props {
    use super::Layout;
    use proptest::prelude::*;
    use std::num::NonZeroU64;

    proptest! {
        /// Every (index, prev, curr) a window's layout must hold packs and unpacks unchanged.
        #[test]
        fn pack_unpack_round_trips(
            w in prop_oneof![1u64..4096, 1u64..],
            i in any::<u64>(),
            p in any::<u64>(),
            c in any::<u64>(),
        ) {
            let w = NonZeroU64::new(w).unwrap();
            let l = Layout::for_window(w);
            let index = (u64::MAX / w.get()).checked_add(1).map_or(i, |m| i % m);
            let (prev, curr) = (p & l.count_mask(), c & l.count_mask());
            prop_assert_eq!(l.unpack(l.pack(index, prev, curr)), (index, prev, curr));
            let (top, m) = (u64::MAX / w.get(), l.max_count());
            prop_assert_eq!(l.unpack(l.pack(top, m, m)), (top, m, m));
        }
    }
}
