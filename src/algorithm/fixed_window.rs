//! Fixed window counter: at most `limit` units per window `[k*W, (k+1)*W)`.
//!
//! # State
//!
//! ```text
//!  63                      count_bits   count_bits-1        0
//! +----------------------------+---------------------------+
//! |  window index k (I bits)   |  count (64 - I bits)      |
//! +----------------------------+---------------------------+
//! ```
//!
//! `I = index_bits(W)` holds every index a `u64` time can have (see [`super::window`]), so the
//! index never wraps. The count field is the rest: a window of `W` ns holds limits up to
//! `2^(64 - I) - 1` (for example 2^29 - 1 for a 1 s window, 2^19 - 1 for 1 ms); a larger limit is a
//! [`ConfigError::LimitTooLarge`]. The fresh word `0` is "window 0, count 0".
//!
//! # Step
//!
//! With `k = now / W` and the stored `(ks, c)`: the count that applies is `c` if `ks >= k`
//! (`ks > k` means the clock went backwards: the later window's count is kept, so no credit is
//! regained) and 0 if `ks < k`. Allowed iff `count + n <= limit`; denied requests are not
//! counted. `retry_after` is the wait until the next window starts (`None` if `n > limit`);
//! `reset_after` the wait until the counted window ends (0 if nothing is counted).

use std::num::NonZeroU64;

use super::window::{clamp_ns, Reciprocal};
use super::Step;
use crate::decision::Decision;
use crate::error::ConfigError;
use crate::policy::{Policy, PolicyKind};

/// The packed layout of one configuration.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Layout {
    /// Width of the count field; the index sits above it.
    pub(crate) count_bits: u32,
    /// Mask of the count field, kept rather than derived from `count_bits` on every check.
    mask: u64,
}

impl Layout {
    pub(crate) fn for_window(window: NonZeroU64) -> Self {
        let count_bits = u64::BITS - super::window::index_bits(window);
        Self {
            count_bits,
            mask: super::window::count_mask(count_bits),
        }
    }

    /// Mask of the count field: also the largest count it holds.
    #[inline]
    pub(crate) const fn count_mask(self) -> u64 {
        self.mask
    }

    #[inline]
    pub(crate) const fn pack(self, index: u64, count: u64) -> u64 {
        (index << self.count_bits) | count
    }

    #[inline]
    pub(crate) const fn unpack(self, word: u64) -> (u64, u64) {
        (word >> self.count_bits, word & self.count_mask())
    }
}

/// A validated fixed-window configuration.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct FixedWindow {
    window: NonZeroU64,
    /// Divides by `window`: a time's window index (see [`Reciprocal`]).
    index: Reciprocal,
    limit: u32,
    layout: Layout,
    /// The last window index a `u64` time has, `u64::MAX / W`: `k * W` fits for every `k`
    /// up to it.
    last: u64,
}

impl FixedWindow {
    pub(crate) fn new(limit: u32, window: std::time::Duration) -> Result<Self, ConfigError> {
        let (limit, w) =
            super::window::validate(limit, window, |w| Layout::for_window(w).count_mask())?;
        Ok(Self {
            window: w,
            index: Reciprocal::new(w),
            limit,
            layout: Layout::for_window(w),
            last: u64::MAX / w.get(),
        })
    }

    /// The policy this configuration enforces (see [`crate::Policy`]).
    pub(crate) fn policy(&self) -> Policy {
        super::window::policy(PolicyKind::FixedWindow, self.limit, self.window)
    }

    /// The stored `(index, count)` as it applies at window `k`.
    #[inline]
    fn current(&self, word: u64, k: u64) -> (u64, u64) {
        let (ks, c) = self.layout.unpack(word);
        if ks >= k {
            (ks, c)
        } else {
            (k, 0)
        }
    }

    #[inline]
    pub(crate) fn step(&self, word: u64, now: u64, n: u32) -> Step {
        let w = self.window.get();
        let (k, count) = self.current(word, self.index.div(now));
        let limit = u64::from(self.limit);
        // The end of window k, in u128: (k + 1) * W can be 2^64 or more for the last window.
        let end = (u128::from(k) + 1) * u128::from(w);
        let to_end = clamp_ns(end - u128::from(now));
        let after = count + u64::from(n);
        if after <= limit {
            let write = (n > 0).then(|| self.layout.pack(k, after));
            let reset = if after > 0 { to_end } else { 0 };
            return (
                Decision::allow(self.limit, limit - after, NonZeroU64::MIN, reset),
                write,
            );
        }
        // The next window starts at `end`; it must still be a time the clock can show.
        let retry = (n <= self.limit && end <= u128::from(u64::MAX)).then_some(to_end);
        let reset = if count > 0 { to_end } else { 0 };
        (
            Decision::deny(self.limit, limit - count, NonZeroU64::MIN, retry, reset),
            None,
        )
    }

    /// The word [`step`](Self::step) writes, without its decision: the count in now's window
    /// (or a later one the word holds, if the clock went back) plus `n`, if within the limit.
    ///
    /// A word of now's window (or of a later one the clock went back from), the common case,
    /// takes no division and no repacking: `now` is before the stored window's end
    /// `(ks + 1) * W`, and the count then sits in the word's low bits, so an admission writes
    /// `word + n`. Other words take [`next_word_moved`](Self::next_word_moved), out of line so
    /// that this path needs no saved registers.
    #[inline(never)]
    pub(crate) fn next_word(&self, word: u64, now: u64, n: u32) -> Option<u64> {
        self.next_word_inline(word, now, n)
    }

    /// [`next_word`](Self::next_word), inlined into a check laid out for this counter alone
    /// (see [`super::steps`]).
    #[inline(always)]
    pub(crate) fn next_word_inline(&self, word: u64, now: u64, n: u32) -> Option<u64> {
        let w = self.window.get();
        let (ks, c) = self.layout.unpack(word);
        // Every word this configuration writes holds the index of a `u64` time (`ks <= last`,
        // so `ks * W` fits); any other word goes the general way. `now` before the end of the
        // stored window: now's window, or a later one the clock went back from, whose count
        // applies as it is (see `current`). An end past `u64::MAX` saturates, and a `now` of
        // exactly `u64::MAX` then goes the general way too.
        if ks <= self.last && now < (ks * w).saturating_add(w) {
            let after = c + u64::from(n);
            // `after <= limit <= count_mask`: no carry into the index.
            return (n > 0 && after <= u64::from(self.limit)).then(|| word + u64::from(n));
        }
        self.next_word_moved(word, now, n)
    }

    /// [`next_word`](Self::next_word) of a word from another window than now's (or a clock
    /// that went back).
    #[inline(never)]
    fn next_word_moved(&self, word: u64, now: u64, n: u32) -> Option<u64> {
        let (k, count) = self.current(word, self.index.div(now));
        let after = count + u64::from(n);
        (n > 0 && after <= u64::from(self.limit)).then(|| self.layout.pack(k, after))
    }

    /// The decision of an admission that [`step`](Self::step) made at `now` by writing
    /// `written`: the same decision `step` returned with that write (the window and the count
    /// after it are in the word), without a second run of the step.
    #[inline(never)]
    pub(crate) fn admitted(&self, written: u64, now: u64) -> Decision {
        self.admitted_inline(written, now)
    }

    /// [`admitted`](Self::admitted), inlined into a check laid out for this counter alone.
    #[inline(always)]
    pub(crate) fn admitted_inline(&self, written: u64, now: u64) -> Decision {
        let (k, after) = self.layout.unpack(written);
        // The time to the end of window k, `(k + 1) * W - now`, in u64: `k * W` fits (k is a
        // window index of a u64 time), and k is now's window or a later one (a clock that went
        // back), so `now - k * W < W` when `k * W <= now`. Past u64, clamped as in `step`.
        let w = self.window.get();
        let start = k * w;
        let to_end = match start.checked_sub(now) {
            Some(ahead) => ahead.saturating_add(w),
            None => w - (now - start),
        };
        let remaining = u64::from(self.limit).saturating_sub(after);
        Decision::allow(self.limit, remaining, NonZeroU64::MIN, to_end)
    }

    /// The decision of a step that wrote nothing (a denial, or `n = 0`): out of line, off a
    /// check's common path.
    #[inline(never)]
    pub(crate) fn decide_cold(&self, word: u64, now: u64, n: u32) -> Decision {
        self.step(word, now, n).0
    }

    /// See [`Algorithm::swept_word`](super::Algorithm::swept_word): an idle key may have used
    /// the whole limit in the window before the sweep's.
    pub(crate) fn swept_word(&self, swept: u64) -> u64 {
        match self.index.div(swept).checked_sub(1) {
            Some(k) => self.layout.pack(k, u64::from(self.limit)),
            None => 0,
        }
    }

    #[inline]
    pub(crate) fn is_idle(&self, word: u64, now: u64) -> bool {
        // A stored window later than now's (the clock went back) is never idle, even with a
        // zero count (a refund can empty it): checks at `now` would still count in that later
        // window, which a fresh key would not.
        let k = self.index.div(now);
        let (ks, c) = self.layout.unpack(word);
        ks < k || (ks == k && c == 0)
    }

    /// Takes up to `n` units off the count that applies at `now` (none once its window is
    /// over: a new window starts full anyway). Never below zero.
    pub(crate) fn refund(&self, word: u64, now: u64, n: u32) -> Option<u64> {
        let (ks, c) = self.layout.unpack(word);
        (ks >= self.index.div(now)).then(|| self.uncount(ks, c, n))?
    }

    /// Undoes an admission of `n` that wrote `after`: its units are taken off the count if
    /// that window is still the stored one and still counts at `now`.
    pub(crate) fn cancel(&self, word: u64, now: u64, n: u32, after: u64) -> Option<u64> {
        let (ks, c) = self.layout.unpack(word);
        let current = ks >= self.index.div(now);
        (current && ks == self.layout.unpack(after).0).then(|| self.uncount(ks, c, n))?
    }

    fn uncount(&self, index: u64, count: u64, n: u32) -> Option<u64> {
        let left = count.saturating_sub(u64::from(n));
        (left < count).then(|| self.layout.pack(index, left))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::algorithm::run;

    #[test]
    fn an_emptied_window_ahead_of_the_clock_is_not_idle() {
        let f = FixedWindow::new(5, std::time::Duration::from_nanos(100)).unwrap();
        let l = f.layout;
        // Window 5 stored with a zero count (a refund emptied it), clock back in window 3.
        assert!(!f.is_idle(l.pack(5, 0), 350));
        assert!(f.is_idle(l.pack(3, 0), 350));
        assert!(f.is_idle(l.pack(2, 4), 350));
        assert!(!f.is_idle(l.pack(3, 1), 350));
        // A refund that empties it at the earlier clock: still not idle.
        let emptied = f.refund(l.pack(5, 2), 350, 2).unwrap();
        assert!(!f.is_idle(emptied, 350));
        assert!(f.is_idle(emptied, 500));
    }
    use std::time::Duration;

    fn fw(limit: u32, w: u64) -> FixedWindow {
        FixedWindow::new(limit, Duration::from_nanos(w)).unwrap()
    }

    #[test]
    fn counts_within_a_window_and_resets_at_the_boundary() {
        let f = fw(3, 100);
        let mut s = 0;
        for rem in [2, 1, 0] {
            let d = run(&f, &mut s, 250, 1);
            assert!(d.is_allowed());
            assert_eq!(d.remaining(), rem);
            assert_eq!(d.reset_after_ns(), 50);
        }
        let d = run(&f, &mut s, 299, 1);
        assert!(!d.is_allowed());
        assert_eq!(d.retry_after_ns(), Some(1));
        assert_eq!(d.reset_after_ns(), 1);
        assert_eq!(d.limit(), 3);
        let d = run(&f, &mut s, 300, 3);
        assert!(d.is_allowed());
        assert_eq!(d.remaining(), 0);
        assert_eq!(d.reset_after_ns(), 100);
        // Denied requests are not counted; n > limit never fits.
        let d = run(&f, &mut s, 310, 4);
        assert!(!d.is_allowed());
        assert_eq!(d.retry_after(), None);
        assert!(f.is_idle(s, 400));
        assert!(!f.is_idle(s, 399));
    }

    #[test]
    fn long_idle_gaps_never_revive_an_old_count() {
        let f = fw(2, 1000);
        let mut s = 0;
        run(&f, &mut s, 5, 2);
        // Any later window starts empty, however far (no truncated index to wrap).
        for gap in [1000u64, 1 << 40, u64::MAX - 1000] {
            let mut t = s;
            assert!(run(&f, &mut t, 5 + gap, 2).is_allowed(), "gap {gap}");
        }
    }

    #[test]
    fn backwards_time_keeps_the_later_window() {
        let f = fw(2, 100);
        let mut s = 0;
        run(&f, &mut s, 550, 2);
        // Back to window 3: the count of window 5 still applies.
        let d = run(&f, &mut s, 350, 1);
        assert!(!d.is_allowed());
        assert_eq!(d.retry_after_ns(), Some(250));
        assert!(run(&f, &mut s, 600, 1).is_allowed());
    }

    #[test]
    fn swept_word_is_fresh_from_the_sweep_on_and_strict_before() {
        let f = fw(3, 100);
        let mut s = 0;
        run(&f, &mut s, 150, 3); // window 1 full; idle from 200 on
        assert!(f.is_idle(s, 250));
        let swept = f.swept_word(250);
        for now in [200, 250, 999] {
            let (a, b) = (f.step(swept, now, 3).0, f.step(0, now, 3).0);
            assert_eq!(a, b, "at {now}");
        }
        // Behind the sweep: at least as strict as the dropped state.
        assert!(!f.step(swept, 150, 1).0.is_allowed());
        assert_eq!(f.swept_word(99), 0);
    }

    #[test]
    fn last_window_and_limits() {
        let f = fw(1, u64::MAX / 2 + 1);
        let mut s = 0;
        assert!(run(&f, &mut s, u64::MAX, 1).is_allowed());
        let d = run(&f, &mut s, u64::MAX, 1);
        assert!(!d.is_allowed());
        assert_eq!(d.retry_after(), None, "no later window is representable");
        // Layout bounds are ConfigErrors naming the limit.
        let max = Layout::for_window(NonZeroU64::new(1_000_000_000).unwrap()).count_mask();
        assert_eq!(max, (1 << 29) - 1);
        let err = FixedWindow::new(1 << 29, Duration::from_secs(1)).unwrap_err();
        assert!(matches!(err, ConfigError::LimitTooLarge { limit, .. } if limit == 1 << 29));
        assert!(FixedWindow::new((1 << 29) - 1, Duration::from_secs(1)).is_ok());
        assert!(
            FixedWindow::new(1, Duration::from_nanos(1)).is_err(),
            "1 ns: no count bits"
        );
        assert_eq!(
            FixedWindow::new(0, Duration::from_secs(1)),
            Err(ConfigError::Zero { field: "limit" })
        );
        assert_eq!(
            FixedWindow::new(1, Duration::ZERO),
            Err(ConfigError::Zero { field: "window" })
        );
        assert!(matches!(
            FixedWindow::new(1, Duration::MAX),
            Err(ConfigError::WindowTooLong { .. })
        ));
    }
}
