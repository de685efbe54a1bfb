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
//! Each count field is exactly as wide as the limit needs (`C` = bits of `limit`, so a count
//! never overflows: no admission takes a count past the limit), and the index gets the rest,
//! `I = 64 - 2C` bits. The layout depends on the limit, not the window.
//!
//! # The horizon
//!
//! The index field holds windows `0 ..= last`, `last = min(2^I - 1, u64::MAX / W)`. When
//! `2^I - 1 >= u64::MAX / W` that is every window a `u64` time can be in, and there is no
//! horizon (every limit up to `2^((64 - bits(u64::MAX / W)) / 2) - 1`: 16 383 for a 1 s window,
//! 131 071 for a minute, 1 048 575 for an hour). A larger limit takes index bits the `u64`
//! time range would need, so the limiter has a *horizon*: the start of window `2^I`, that is
//! `2^I * W` after the clock's origin. Before it, every decision is exactly the formula above
//! (the stored index is the true index, never truncated, so no idle gap can make an old count
//! look current). From it on, every request is denied with no `retry_after` (fail closed, as
//! GCRA and warm-up do at theirs), and a denied request whose admission would need a time past
//! it gets no `retry_after` either. Nothing wraps: the check is `now / W > last`, made before
//! anything else, and the word is never written past the horizon.
//!
//! A limit is accepted if its horizon is at least [`MIN_HORIZON_NS`] (180 days) or there is
//! none; a larger one is a [`ConfigError::LimitTooLarge`] naming the largest that is. For
//! example: 1 048 575 per second (horizon 2^24 s, 194 days), 2 097 151 per 10 s (2^22 windows,
//! 485 days), 8 388 607 per minute (2^18 min, 182 days), 33 554 431 per hour (2^14 h, 683
//! days), 268 435 455 per day (256 days). Building a limiter starts its default clock, so the
//! horizon counts from the limiter's creation; rebuild it (or use a longer window, or GCRA,
//! whose horizon is 584 years) if it must run longer.
//!
//! ## Why one 64-bit word cannot do better by much
//!
//! An exact word must tell apart every state a key can be in. Take the states "`p` units
//! admitted at the start of window `j - 1`, `c` at the start of window `j`" for an even `j` and
//! `p + c <= limit`, not both zero: reading at the start of window `j` gives
//! `remaining = limit - p - c`, at the start of `j + 1` gives `limit - c`, so `(p, c)` is
//! recovered; and two such states of even windows `j < j'` differ at the start of `j'`, where
//! the older one is fresh (`remaining = limit`) and the newer is not. So a horizon of `N`
//! windows needs at least `N/2 * ((limit + 1)(limit + 2)/2 - 1)` distinct words, which must be
//! at most `2^64`: for 10^6 per window, `N < 7.4 * 10^7` windows (854 days of 1 s windows),
//! whatever the encoding. The layout here (2^24 windows at 10^6) is within a factor of 4.4 of
//! that bound; an index that wraps instead (storing `k mod 2^I`) is not exact at all, since a
//! key untouched for `2^I` windows would read as current. For more range, the state must be
//! wider than 64 bits.
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

use super::window::{clamp_ns, Reciprocal};
use super::Step;
use crate::decision::Decision;
use crate::error::ConfigError;
use crate::policy::{Policy, PolicyKind};

/// The shortest horizon a configuration may have: 180 days, in nanoseconds. It admits a
/// million per second (horizon 194 days) and 8 million per minute (182 days); anything
/// shorter would be a limiter that stops admitting within months of its creation.
pub(crate) const MIN_HORIZON_NS: u64 = 180 * 86_400 * 1_000_000_000;

/// The packed layout of one configuration.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Layout {
    /// Width of each count field, 1 to 31: the index keeps at least 2 bits.
    pub(crate) count_bits: u32,
    /// Mask of one count field, kept rather than derived from `count_bits` on every check.
    mask: u64,
    /// Shift of the window index, `2 * count_bits`, kept for the same reason.
    index_shift: u32,
}

impl Layout {
    /// Count fields `bits` wide (1 to 31).
    const fn with_bits(bits: u32) -> Self {
        Self {
            count_bits: bits,
            mask: super::window::count_mask(bits),
            index_shift: 2 * bits,
        }
    }

    /// Count fields just wide enough for `limit` (a count never exceeds the limit).
    pub(crate) const fn for_limit(limit: u32) -> Self {
        let bits = u32::BITS - limit.leading_zeros();
        Self::with_bits(if bits < 1 {
            1
        } else if bits > 31 {
            31
        } else {
            bits
        })
    }

    /// Mask of one count field: also the largest count it holds.
    #[inline]
    pub(crate) const fn count_mask(self) -> u64 {
        self.mask
    }

    /// Shift of the window index: above both counts (at most 62).
    #[inline]
    const fn index_shift(self) -> u32 {
        self.index_shift
    }

    /// The last window index the layout holds for windows of `w` ns: all the index field
    /// holds, or every index a `u64` time can have if that is fewer.
    pub(crate) const fn last_index(self, w: NonZeroU64) -> u64 {
        let field = u64::MAX >> self.index_shift();
        let times = u64::MAX / w.get();
        if field < times {
            field
        } else {
            times
        }
    }

    /// The first instant (ns since the clock's origin) in a window the layout cannot hold, or
    /// `None` if every `u64` time is in a window it holds.
    pub(crate) fn horizon(self, w: NonZeroU64) -> Option<u64> {
        let end = (u128::from(self.last_index(w)) + 1) * u128::from(w.get());
        u64::try_from(end).ok()
    }

    /// Whether this layout's horizon for windows of `w` is acceptable: none, or at least
    /// [`MIN_HORIZON_NS`].
    fn horizon_is_long_enough(self, w: NonZeroU64) -> bool {
        match self.horizon(w) {
            None => true,
            Some(h) => h >= MIN_HORIZON_NS,
        }
    }

    /// The largest limit a sliding window of `w` ns accepts: the widest count fields whose
    /// horizon is long enough (a narrower field only lengthens the horizon).
    pub(crate) fn max_limit(w: NonZeroU64) -> u64 {
        let mut bits = 31;
        while bits > 1 && !Layout::with_bits(bits).horizon_is_long_enough(w) {
            bits -= 1;
        }
        Layout::with_bits(bits).count_mask()
    }

    #[inline]
    pub(crate) const fn pack(self, index: u64, prev: u64, curr: u64) -> u64 {
        // `index_shift` is at most 62 (`count_bits <= 31`), so the shift is defined.
        (index << self.index_shift()) | (prev << self.count_bits) | curr
    }

    #[inline]
    pub(crate) const fn unpack(self, word: u64) -> (u64, u64, u64) {
        // `index_shift` is at most 62 (`count_bits <= 31`), so the shift is defined.
        (
            word >> self.index_shift(),
            (word >> self.count_bits) & self.count_mask(),
            word & self.count_mask(),
        )
    }
}

/// A validated sliding-window configuration.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct SlidingWindow {
    window: NonZeroU64,
    /// Divides by `window`: a time's window index (see [`Reciprocal`]).
    index: Reciprocal,
    limit: u32,
    layout: Layout,
    /// The last window index the layout holds (see [`Layout::last_index`]): a `now` in a later
    /// window is past the horizon.
    last: u64,
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
    pub(crate) fn new(limit: u32, window: std::time::Duration) -> Result<Self, ConfigError> {
        let (limit, w) = super::window::validate(limit, window, Layout::max_limit)?;
        let layout = Layout::for_limit(limit);
        Ok(Self {
            window: w,
            index: Reciprocal::new(w),
            limit,
            layout,
            last: layout.last_index(w),
        })
    }

    /// The policy this configuration enforces (see [`crate::Policy`]).
    pub(crate) fn policy(&self) -> Policy {
        super::window::policy(PolicyKind::SlidingWindow, self.limit, self.window)
    }

    /// The first instant (ns since the clock's origin) from which every request is denied, or
    /// `None` if the configuration has no horizon (see the module docs).
    #[allow(dead_code)] // For `Policy` and the docs' figures; the tests check it.
    pub(crate) fn horizon(&self) -> Option<u64> {
        self.layout.horizon(self.window)
    }

    /// Whether `now` is past the horizon: in a window the layout cannot hold.
    #[inline]
    fn past_horizon(&self, now: u64) -> bool {
        self.index.div(now) > self.last
    }

    #[inline]
    fn view(&self, word: u64, now: u64) -> View {
        self.view_in(word, now, self.index.div(now))
    }

    /// [`view`](Self::view) with `now`'s window index `k` already computed.
    #[inline]
    fn view_in(&self, word: u64, now: u64, k: u64) -> View {
        let w = self.window.get();
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
    pub(crate) fn step(&self, word: u64, now: u64, n: u32) -> Step {
        if self.past_horizon(now) {
            return self.beyond_horizon();
        }
        let v = self.view(word, now);
        let w = u128::from(self.window.get());
        let limit = u64::from(self.limit);
        let prev_weight = u128::from(v.prev) * (w - u128::from(v.e));
        let curr = v.curr + u64::from(n);
        let allowed = prev_weight + u128::from(curr) * w <= u128::from(limit) * w;
        let counted = if allowed { curr } else { v.curr };
        // remaining = floor((limit*W - prev_weight) / W) - counted
        //           = limit - ceil(prev_weight / W) - counted
        let prev_units = self.div_ceil(prev_weight);
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
            // `counted <= limit < 2^count_bits` and `v.k <= last`: the fields hold them.
            let write = (n > 0).then(|| self.layout.pack(v.k, v.prev, curr));
            return (
                Decision::allow(self.limit, remaining, NonZeroU64::MIN, reset),
                write,
            );
        }
        let retry = if n <= self.limit {
            self.earliest(&v, n)
                .filter(|&t| t <= u128::from(u64::MAX) && t / w <= u128::from(self.last))
                .map(|t| clamp_ns(t - u128::from(now)))
        } else {
            None
        };
        (
            Decision::deny(self.limit, remaining, NonZeroU64::MIN, retry, reset),
            None,
        )
    }

    /// The word [`step`](Self::step) writes, without its decision: the view's current count
    /// plus `n`, if the weighted estimate admits it (nothing past the horizon).
    ///
    /// A word of now's window, the common case, takes no division and no repacking: `now` is
    /// in the stored window `ks` iff `now - ks * W < W`, and the current count then sits in the
    /// word's low bits, so an admission writes `word + n`. Other words take
    /// [`next_word_moved`](Self::next_word_moved), out of line so that this path needs no
    /// saved registers.
    #[inline(never)]
    pub(crate) fn next_word(&self, word: u64, now: u64, n: u32) -> Option<u64> {
        self.next_word_inline(word, now, n)
    }

    /// [`next_word`](Self::next_word), inlined into a check laid out for this counter alone
    /// (see [`super::steps`]).
    #[inline(always)]
    pub(crate) fn next_word_inline(&self, word: u64, now: u64, n: u32) -> Option<u64> {
        let w = self.window.get();
        let (ks, p, c) = self.layout.unpack(word);
        // `checked_mul`: every word this configuration writes holds a window index up to
        // `last`, so `ks * W` fits; and where it fits, `ks <= u64::MAX / W` and the field
        // holds `ks`, so `ks <= last`: now's window is before the horizon. Any other word, and
        // a clock that went back before the stored window, go the general way.
        let e = match ks.checked_mul(w).and_then(|start| now.checked_sub(start)) {
            Some(e) if e < w => e,
            _ => return self.next_word_moved(word, now, n),
        };
        let curr = c + u64::from(n);
        let limit = u64::from(self.limit);
        if n == 0 || curr > limit {
            return None;
        }
        // prev * (W - e) + curr * W <= limit * W, as prev * (W - e) <= (limit - curr) * W: two
        // 64-bit products in 128 bits. `curr <= limit <= count_mask`: no carry into the
        // previous count.
        let fits =
            p == 0 || u128::from(p) * u128::from(w - e) <= u128::from(limit - curr) * u128::from(w);
        fits.then(|| word + u64::from(n))
    }

    /// [`next_word`](Self::next_word) of a word from another window than now's (or a clock
    /// that went back).
    #[inline(never)]
    fn next_word_moved(&self, word: u64, now: u64, n: u32) -> Option<u64> {
        let k = self.index.div(now);
        // `k > last`: past the horizon (see `past_horizon`).
        if n == 0 || k > self.last {
            return None;
        }
        let v = self.view_in(word, now, k);
        let curr = v.curr + u64::from(n);
        if v.prev == 0 {
            // No previous count to weigh: the estimate is the current count.
            return (curr <= u64::from(self.limit)).then(|| self.layout.pack(v.k, 0, curr));
        }
        let w = u128::from(self.window.get());
        let weighted = u128::from(v.prev) * (w - u128::from(v.e)) + u128::from(curr) * w;
        (weighted <= u128::from(self.limit) * w).then(|| self.layout.pack(v.k, v.prev, curr))
    }

    /// The decision of an admission that [`step`](Self::step) made at `now` by writing
    /// `written`: the same decision `step` returned with that write, without a second run of
    /// the step. The written word seen at `now` is the step's view with the admitted units
    /// counted (its window is the view's), so the remaining units and the reset follow from it
    /// as in `step`.
    ///
    /// A word with no previous count, in now's window, decides in a few instructions here;
    /// any other takes [`admitted_weighed`](Self::admitted_weighed), out of line so that this
    /// path needs no saved registers.
    #[inline(never)]
    pub(crate) fn admitted(&self, written: u64, now: u64) -> Decision {
        self.admitted_inline(written, now)
    }

    /// [`admitted`](Self::admitted), inlined into a check laid out for this counter alone.
    #[inline(always)]
    pub(crate) fn admitted_inline(&self, written: u64, now: u64) -> Decision {
        let (ks, prev, curr) = self.layout.unpack(written);
        let w = self.window.get();
        // `ks <= last`: no overflow (see `admitted_weighed`).
        let start = ks * w;
        match now.checked_sub(start) {
            // Nothing weighs from the previous window, and the units counted in window `ks`
            // weigh until two windows on (`e < W`: the written window is now's).
            Some(e) if prev == 0 => Decision::allow(
                self.limit,
                u64::from(self.limit).saturating_sub(curr),
                NonZeroU64::MIN,
                (w - e).saturating_add(w),
            ),
            _ => self.admitted_weighed(written, now),
        }
    }

    /// [`admitted`](Self::admitted) in general.
    #[inline(never)]
    fn admitted_weighed(&self, written: u64, now: u64) -> Decision {
        // The written window `ks` is the step's view's: now's window, or a later one (a clock
        // that went back), so the view of the written word needs no division: the time into
        // it is `now - ks * W`, or 0 when `ks * W` is past `now` (`ks <= last`: no overflow).
        let (ks, prev, curr) = self.layout.unpack(written);
        let w = self.window.get();
        let start = ks * w;
        // An admission counted units in window `ks`: they weigh until two windows on, so the
        // reset is `start + 2W - now`, clamped to `u64` (`W - e` and each term are in range;
        // the sums saturate exactly where the true value passes `u64::MAX`).
        let (e, reset) = match now.checked_sub(start) {
            Some(e) => (e, (w - e).saturating_add(w)),
            None => (0, (start - now).saturating_add(w).saturating_add(w)),
        };
        let prev_units = if prev == 0 {
            0
        } else {
            self.div_ceil(u128::from(prev) * u128::from(w - e))
        };
        let remaining = u64::from(self.limit)
            .saturating_sub(prev_units)
            .saturating_sub(curr);
        Decision::allow(self.limit, remaining, NonZeroU64::MIN, reset)
    }

    /// The decision of a step that wrote nothing (a denial, or `n = 0`): out of line, off a
    /// check's common path.
    #[inline(never)]
    pub(crate) fn decide_cold(&self, word: u64, now: u64, n: u32) -> Decision {
        self.step(word, now, n).0
    }

    /// `ceil(x / W)`, clamped to `u64`: by the reciprocal when `x` fits in 64 bits (a
    /// previous count times at most `W`, as a rule), by a 128-bit division otherwise.
    #[inline]
    fn div_ceil(&self, x: u128) -> u64 {
        let w = self.window.get();
        match u64::try_from(x) {
            Ok(x) => {
                let q = self.index.div(x);
                // `q * W <= x`: no overflow.
                q + u64::from(q * w != x)
            }
            Err(_) => u64::try_from(x.div_ceil(u128::from(w))).unwrap_or(u64::MAX),
        }
    }

    /// The decision past the horizon: denied, nothing remaining, no wait helps, and no state
    /// (every word decides the same from here on).
    #[cold]
    fn beyond_horizon(&self) -> Step {
        (
            Decision::deny(self.limit, 0, NonZeroU64::MIN, None, 0),
            None,
        )
    }

    /// Takes up to `n` units off the counts that apply at `now`: the current window's first,
    /// then the previous window's. Nothing once both are over, or past the horizon. Never below
    /// zero.
    pub(crate) fn refund(&self, word: u64, now: u64, n: u32) -> Option<u64> {
        if self.past_horizon(now) {
            return None;
        }
        let (ks, p, c) = self.layout.unpack(word);
        let k = self.index.div(now);
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
    /// still weighs at `now` (never past the horizon).
    pub(crate) fn cancel(&self, word: u64, now: u64, n: u32, after: u64) -> Option<u64> {
        let (ks, p, c) = self.layout.unpack(word);
        let ka = self.layout.unpack(after).0;
        let n = u64::from(n);
        if self.past_horizon(now) || ks.saturating_add(1) < self.index.div(now) {
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

    /// The earliest absolute time (ns, possibly past `u64::MAX` or the horizon) at which
    /// `n <= limit` units fit, given the state `v` and no other requests.
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
    /// before that, which is the previous count of the window before the sweep's. Past the
    /// horizon every key is idle, whatever it holds, so the strictest word there is stands in
    /// for it: both counts full in the last window.
    pub(crate) fn swept_word(&self, swept: u64) -> u64 {
        let limit = u64::from(self.limit);
        if self.past_horizon(swept) {
            return self.layout.pack(self.last, limit, limit);
        }
        match self.index.div(swept).checked_sub(1) {
            Some(k) => self.layout.pack(k, limit, 0),
            None => 0,
        }
    }

    #[inline]
    pub(crate) fn is_idle(&self, word: u64, now: u64) -> bool {
        if self.past_horizon(now) {
            // Every request is denied from here on, whatever the word holds.
            return true;
        }
        // A stored window as late as now's is never idle, even with no counts (a refund can
        // empty it): checks before its start (the clock going back) count in that window,
        // where they weigh fully until it ends, while the swept word a dropped key comes back
        // from counts them in the window before it, whose weight decays: a key dropped so
        // gained budget in the stored window. Checks at `now` or later count in now's window
        // either way, so such a key is dropped one window later. Window 0 excepted: no check
        // is made before it starts, and its emptied word is the fresh word (a key charged and
        // rolled back in window 0 holds exactly what a new key starts from).
        let k = self.layout.unpack(word).0;
        let current = k > 0 && k >= self.index.div(now);
        let v = self.view(word, now);
        !current && v.prev == 0 && v.curr == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::algorithm::run;
    use std::time::Duration;

    fn sw(limit: u32, w: u64) -> SlidingWindow {
        SlidingWindow::new(limit, Duration::from_nanos(w)).unwrap()
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

    /// A refund can empty the stored window; while that window is now's (or later), the word
    /// is not idle: checks made before its start would count in it, where the swept word
    /// counts them in the window before.
    #[test]
    fn an_emptied_current_window_is_idle_only_once_it_is_over() {
        let s = sw(3, 100);
        let emptied = s.layout.pack(3, 0, 0);
        assert!(!s.is_idle(emptied, 350));
        assert!(!s.is_idle(emptied, 250));
        assert!(s.is_idle(emptied, 400));
        assert!(s.is_idle(s.layout.pack(2, 3, 0), 350));
        assert!(!s.is_idle(s.layout.pack(2, 0, 1), 350));
        // Window 0 emptied is the fresh word: idle (found by the sliding_window_model fuzz
        // target: a key charged and rolled back in window 0 was never swept).
        assert!(s.is_idle(s.layout.pack(0, 0, 0), 50));
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
        let secs = |s: u64| NonZeroU64::new(s * 1_000_000_000).unwrap();
        // The documented maxima, and their horizons.
        let day = 86_400;
        for (window, max, horizon_windows) in [
            (1, 1_048_575, 1u64 << 24),
            (10, 2_097_151, 1 << 22),
            (60, 8_388_607, 1 << 18),
            (3_600, 33_554_431, 1 << 14),
            (day, 268_435_455, 1 << 8),
        ] {
            assert_eq!(Layout::max_limit(secs(window)), max, "{window} s");
            let l = Layout::for_limit(u32::try_from(max).unwrap());
            let h = l.horizon(secs(window));
            assert_eq!(h, Some(horizon_windows * secs(window).get()), "{window} s");
            assert!(h.unwrap() >= MIN_HORIZON_NS);
            // One more bit of count would put the horizon under the minimum.
            let wider = Layout::with_bits(l.count_bits + 1);
            assert!(wider.horizon(secs(window)).unwrap() < MIN_HORIZON_NS);
        }
        // Limits the full-range layout held before have no horizon at all.
        for (window, full) in [(1, 16_383u32), (60, 131_071), (3_600, 1_048_575)] {
            assert_eq!(Layout::for_limit(full).horizon(secs(window)), None);
            assert!(Layout::for_limit(full + 1).horizon(secs(window)).is_some());
        }
        assert!(SlidingWindow::new(1_048_575, Duration::from_secs(1)).is_ok());
        assert!(matches!(
            SlidingWindow::new(1_048_576, Duration::from_secs(1)),
            Err(ConfigError::LimitTooLarge { max: 1_048_575, .. })
        ));
        // Tiny windows: the horizon is what bounds them, never a zero-width count.
        let one = NonZeroU64::new(1).unwrap();
        assert_eq!(Layout::max_limit(one), 31);
        assert_eq!(Layout::for_limit(31).horizon(one), Some(1 << 54));
        // Huge windows: every limit below 2^31 fits with no horizon.
        let huge = NonZeroU64::new(u64::MAX).unwrap();
        assert_eq!(Layout::max_limit(huge), (1 << 31) - 1);
        assert_eq!(Layout::for_limit((1 << 31) - 1).horizon(huge), None);
        assert_eq!(Layout::for_limit(u32::MAX).count_bits, 31);
        assert_eq!(Layout::for_limit(1).count_bits, 1);
        // Round trip at the extremes of every field.
        let l = Layout::for_limit(1_000_000);
        let last = l.last_index(secs(1));
        assert_eq!(last, (1 << 24) - 1);
        let m = l.count_mask();
        for (i, p, c) in [(0, 0, 0), (last, m, m), (last, 0, m), (1, m, 0)] {
            assert_eq!(l.unpack(l.pack(i, p, c)), (i, p, c));
        }
    }

    /// A million per second, exact up to the horizon (2^24 s) and closed from it on.
    #[test]
    fn a_million_per_second_up_to_the_horizon() {
        let (limit, w) = (1_000_000u32, 1_000_000_000u64);
        let s = SlidingWindow::new(limit, Duration::from_nanos(w)).unwrap();
        let h = (1u64 << 24) * w;
        assert_eq!(s.horizon(), Some(h));
        // The whole limit in the window before the last; a quarter into the last window the
        // previous count weighs 750 000.
        let mut st = 0;
        let last = h - w;
        assert!(run(&s, &mut st, last - w + 10, limit).is_allowed());
        let d = run(&s, &mut st, last + w / 4, 250_001);
        assert!(!d.is_allowed());
        assert_eq!(d.remaining(), 250_000);
        // 250 001 fit once 10^6 * (W - e) <= 749 999 * W: e >= W/4 + 1000 ns.
        assert_eq!(d.retry_after_ns(), Some(1_000));
        assert!(!run(&s, &mut st.clone(), last + w / 4 + 999, 250_001).is_allowed());
        assert!(run(&s, &mut st.clone(), last + w / 4 + 1_000, 250_001).is_allowed());
        assert!(run(&s, &mut st, h - 1, limit - 1).is_allowed());
        // Past the horizon: closed, with no wait and no write, whatever the word.
        for word in [0, st, u64::MAX] {
            for now in [h, h + 1, u64::MAX] {
                let (d, write) = s.step(word, now, 1);
                assert!(!d.is_allowed() && d.retry_after().is_none() && write.is_none());
                assert_eq!((d.remaining(), d.reset_after_ns()), (0, 0));
                assert!(!s.step(word, now, 0).0.is_allowed(), "even a peek");
                assert!(s.is_idle(word, now));
                assert_eq!(s.refund(word, now, 5), None);
                assert_eq!(s.cancel(word, now, 5, word), None);
            }
        }
        // A wait that would end past the horizon is no wait: the last window is full.
        let d = run(&s, &mut st, h - 1, 1);
        assert!(!d.is_allowed());
        assert_eq!(d.retry_after(), None);
        // Back before the horizon, the stored state is as it was.
        assert_eq!(s.step(st, h - 1, 0).0.remaining(), 0);
        assert!(!s.is_idle(st, h - 1));
        // A sweep past the horizon leaves the strictest word: nothing fits before it.
        let swept = s.swept_word(h + 5);
        for now in [0, w, last, h - 1] {
            assert_eq!(s.step(swept, now, 0).0.remaining(), 0, "at {now}");
            assert!(!s.step(swept, now, 1).0.is_allowed(), "at {now}");
        }
        assert_eq!(
            s.swept_word(h - 1),
            s.layout.pack((1 << 24) - 2, 1_000_000, 0)
        );
    }
}
