//! What the window algorithms share: window arithmetic and the width of the window index.
//!
//! Windows are aligned to the clock's origin: window `k` covers `[k*W, (k+1)*W)`.
//!
//! # Why the index never wraps
//!
//! A window counter must know whether its count belongs to the current window. cellgate stores
//! the *whole* window index, never a truncated one, so no idle gap, however long, can make an
//! old count look current. The fixed window's index field is exactly as wide as the largest
//! index any `u64` time can have, `u64::MAX / W`: short windows leave fewer bits for the count,
//! and a larger limit than the rest holds is a [`ConfigError`] at build. The sliding window
//! sizes its counts by the limit instead and, when the index field left is narrower than the
//! `u64` time range needs, has a *horizon*: the first window its index cannot hold, checked on
//! every step, from which every request is denied (see `sliding_window`'s module docs).
//!
//! # Why the window index is a multiplication
//!
//! Every window check needs the index of `now`'s window, `now / W`. A 64-bit hardware division
//! costs tens of cycles on common x86-64 cores, more than the rest of a check's arithmetic, so
//! each window counter divides by its `W` through a [`Reciprocal`] computed once, at build: a
//! multiply-high, a subtraction, an addition and two shifts, exact for every `u64` `now`.
//! Hand-written rather than taken from a crate: it is a dozen lines of one published method,
//! with one multiply and no branch per division, and its exactness over the whole `u64` range
//! is tested here against the hardware division.
//!
//! # Why the common check divides nothing at all
//!
//! Most checks of a key land in the window its word already holds. Both counters' `next_word`
//! test that first, by one multiplication and a compare: `now` is in stored window `ks` when
//! `ks * W <= now < (ks + 1) * W`. Then the count is the word's low field, and an admission
//! writes `word + n` (the count never exceeds the limit, so nothing carries into the fields
//! above it). Only a word from another window takes the division and repacks. A keyed check
//! runs a copy of its loop laid out for the counter alone, into which this common path and the
//! admission's decision inline (see `steps`); elsewhere each of these steps is its own small
//! function reached by a tail call from one dispatch (see `Algorithm::next_word`), so that the
//! common path saves no registers. The rare path is a second function in both, for the same
//! reason.

use std::num::NonZeroU64;
use std::time::Duration;

use crate::error::ConfigError;

/// Bits needed for the largest window index a `u64` time can have: `u64::MAX / W`.
///
/// Between 1 (for `W > u64::MAX / 2`) and 64 (for `W = 1 ns`).
#[inline]
pub(crate) const fn index_bits(window: NonZeroU64) -> u32 {
    u64::BITS - (u64::MAX / window.get()).leading_zeros()
}

/// Division of any `u64` by a divisor fixed at build, by a multiplication: Granlund and
/// Montgomery's method for unsigned division by an invariant integer ("Division by Invariant
/// Integers using Multiplication", PLDI 1994, figure 4.1), whose theorem 4.2 proves that
/// [`div`](Self::div) equals `n / d` for **every** `n` in `[0, 2^64)` and every `d` in
/// `[1, 2^64)`. With `l = ceil(log2 d)` and `m = floor(2^64 * (2^l - d) / d) + 1` (which fits in
/// 64 bits), `n / d = (t + ((n - t) >> min(l, 1))) >> max(l - 1, 0)` where `t` is the high word
/// of `m * n`. The tests below check it against the hardware division over the whole range of
/// `n` and many `d`, and at the edges of every window.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Reciprocal {
    /// `m` above.
    multiplier: u64,
    /// `min(l, 1)`.
    shift1: u32,
    /// `max(l - 1, 0)`.
    shift2: u32,
}

impl Reciprocal {
    /// The reciprocal of `d`.
    pub(crate) const fn new(d: NonZeroU64) -> Self {
        let d = d.get();
        // `l = ceil(log2 d)`: 0 for d = 1, else the bits of `d - 1`.
        let l = u64::BITS - (d - 1).leading_zeros();
        // `2^l - d < d`, so `2^64 * (2^l - d) < 2^128` and the quotient is below `2^64`.
        let m = (((1u128 << l) - d as u128) << 64) / d as u128 + 1;
        Self {
            multiplier: m as u64,
            shift1: if l < 1 { l } else { 1 },
            shift2: l.saturating_sub(1),
        }
    }

    /// `n / d`, exactly.
    #[inline(always)]
    pub(crate) const fn div(self, n: u64) -> u64 {
        let t = ((self.multiplier as u128 * n as u128) >> 64) as u64;
        (t + ((n - t) >> self.shift1)) >> self.shift2
    }
}

/// `window` in nanoseconds, validated: non-zero and representable.
pub(crate) fn window_ns(window: Duration) -> Result<NonZeroU64, ConfigError> {
    let ns = u64::try_from(window.as_nanos()).map_err(|_| ConfigError::WindowTooLong { window })?;
    NonZeroU64::new(ns).ok_or(ConfigError::Zero { field: "window" })
}

/// The mask of a count field `bits` wide (below 64), which is also the largest count it holds:
/// the field both window counters' layouts are made of.
#[inline]
pub(crate) const fn count_mask(bits: u32) -> u64 {
    (1u64 << bits) - 1
}

/// The policy of a window counter: `limit` per `window` ns (see [`crate::Policy`]).
pub(crate) fn policy(
    kind: crate::policy::PolicyKind,
    limit: u32,
    window: NonZeroU64,
) -> crate::policy::Policy {
    let window = Duration::from_nanos(window.get());
    crate::policy::Policy::new(kind, limit, Some(window), None)
}

/// A validated non-zero limit.
pub(crate) fn limit(limit: u32) -> Result<u32, ConfigError> {
    if limit == 0 {
        Err(ConfigError::Zero { field: "limit" })
    } else {
        Ok(limit)
    }
}

/// Validates a window counter's configuration: a non-zero `limit` and `window`, and a limit
/// that the algorithm's packed layout for this window holds (`max_count`, its count field's mask).
pub(crate) fn validate(
    lim: u32,
    window: Duration,
    max_count: impl Fn(NonZeroU64) -> u64,
) -> Result<(u32, NonZeroU64), ConfigError> {
    let lim = limit(lim)?;
    let w = window_ns(window)?;
    let max = max_count(w);
    if u64::from(lim) > max {
        return Err(ConfigError::LimitTooLarge {
            limit: lim,
            max,
            window,
        });
    }
    Ok((lim, w))
}

/// `ns` clamped to `u64`: waits longer than the clock can count are reported as `u64::MAX` ns.
#[inline]
pub(crate) fn clamp_ns(ns: u128) -> u64 {
    u64::try_from(ns).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `Reciprocal::div` against the hardware division at the values where an inexact
    /// reciprocal fails first: the ends of windows (`k*d - 1`, `k*d`) near 0 and near
    /// `u64::MAX`, and `u64::MAX` itself.
    fn check_edges(d: u64) {
        let r = Reciprocal::new(NonZeroU64::new(d).unwrap());
        let top = u64::MAX / d;
        for k in [0, 1, 2, 3, top / 2, top.saturating_sub(2), top - 1, top] {
            let Some(start) = k.checked_mul(d) else {
                continue; // k is past the last window (d > u64::MAX / 2)
            };
            for n in [start, start.saturating_sub(1), start.saturating_add(1)] {
                assert_eq!(r.div(n), n / d, "n = {n}, d = {d}");
            }
            let last = start.saturating_add(d - 1);
            assert_eq!(r.div(last), last / d, "n = {last}, d = {d}");
        }
        for n in [u64::MAX, u64::MAX - 1, u64::MAX - d + 1, d - 1, d] {
            assert_eq!(r.div(n), n / d, "n = {n}, d = {d}");
        }
    }

    #[test]
    fn the_reciprocal_divides_exactly_at_the_edges() {
        let mut ds = vec![1, 2, 3, 5, 7, 10, 1000, 1_000_000, 1_000_000_007, u64::MAX];
        for b in 1..64 {
            let p = 1u64 << b;
            ds.extend([p - 1, p, p + 1]);
        }
        // Window lengths as configured: whole ms, s, min, h, days.
        for unit in [
            1_000_000u64,
            1_000_000_000,
            60_000_000_000,
            3_600_000_000_000,
        ] {
            ds.extend([unit, 7 * unit, 24 * unit, 1000 * unit]);
        }
        ds.extend([u64::MAX / 2, u64::MAX / 2 + 1, u64::MAX / 3, u64::MAX - 1]);
        for d in ds {
            check_edges(d);
        }
    }

    #[test]
    fn index_bits_holds_the_largest_index() {
        for w in [
            1u64,
            2,
            3,
            1000,
            1 << 20,
            1_000_000_007,
            u64::MAX / 2,
            u64::MAX / 2 + 1,
            u64::MAX,
        ] {
            let w = NonZeroU64::new(w).unwrap();
            let bits = index_bits(w);
            let max_index = u64::MAX / w.get();
            assert!(bits == 64 || max_index < (1u64 << bits), "w={w}");
            assert!(
                bits >= 1 && max_index >= (1u64 << (bits - 1)),
                "w={w}: no bit wasted"
            );
        }
        assert_eq!(index_bits(NonZeroU64::new(1).unwrap()), 64);
        assert_eq!(index_bits(NonZeroU64::new(u64::MAX).unwrap()), 1);
    }
}

/// The reciprocal against the hardware division, over the whole `u64` range.
#[cfg(test)]
mod reciprocal_props {
    use super::Reciprocal;
    use proptest::prelude::*;
    use std::num::NonZeroU64;

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(20_000))]
        /// `Reciprocal::div` equals the hardware division over the whole `u64` range of `n`,
        /// for divisors of every size (small ones, near powers of two, any at all).
        #[test]
        fn the_reciprocal_divides_exactly(
            n in prop_oneof![any::<u64>(), 0u64..1 << 32],
            d in prop_oneof![
                1u64..10_000,
                (1u32..64, -2i64..=2).prop_map(|(b, o)| (1u64 << b).wrapping_add_signed(o).max(1)),
                1u64..,
            ],
            near in any::<bool>(),
        ) {
            let r = Reciprocal::new(NonZeroU64::new(d).unwrap());
            prop_assert_eq!(r.div(n), n / d);
            // Also right at a multiple of `d` near `n` (the end of `n`'s window), where a
            // reciprocal that is too small shows first.
            let m = (n / d) * d;
            let at = if near { m } else { m.wrapping_sub(1) };
            prop_assert_eq!(r.div(at), at / d);
        }
    }
}

/// The two window counters' layouts: every field value they must hold round-trips.
#[cfg(test)]
mod layout_props {
    use super::super::{fixed_window, sliding_window};
    use proptest::prelude::*;
    use std::num::NonZeroU64;

    /// Window lengths, ns: short ones (many index bits) and any at all.
    fn window_lengths() -> impl Strategy<Value = NonZeroU64> {
        prop_oneof![1u64..4096, 1u64..].prop_map(|w| NonZeroU64::new(w).unwrap())
    }

    proptest! {
        /// Every (index, count) a fixed window's layout must hold packs and unpacks unchanged, and
        /// the fields never overlap: the largest index and count both survive.
        #[test]
        fn fixed_window_layout_round_trips(
            w in window_lengths(),
            i in any::<u64>(),
            c in any::<u64>(),
        ) {
            let l = fixed_window::Layout::for_window(w);
            let index = (u64::MAX / w.get()).checked_add(1).map_or(i, |m| i % m);
            let count = c & l.count_mask();
            prop_assert_eq!(l.unpack(l.pack(index, count)), (index, count));
            let top = u64::MAX / w.get();
            prop_assert_eq!(l.unpack(l.pack(top, l.count_mask())), (top, l.count_mask()));
        }

        /// Every (index, prev, curr) a sliding window's configuration can write packs and unpacks unchanged:
        /// indices up to the last one the layout holds for the window, counts up to the limit.
        #[test]
        fn sliding_window_layout_round_trips(
            w in window_lengths(),
            limit in prop_oneof![1u32..64, 1u32.., Just(u32::MAX)],
            i in any::<u64>(),
            p in any::<u64>(),
            c in any::<u64>(),
        ) {
            let l = sliding_window::Layout::for_limit(limit);
            let last = l.last_index(w);
            prop_assert!(last <= u64::MAX / w.get());
            let index = last.checked_add(1).map_or(i, |m| i % m);
            let m = l.count_mask().min(u64::from(limit));
            let (prev, curr) = (p % (m + 1), c % (m + 1));
            prop_assert_eq!(l.unpack(l.pack(index, prev, curr)), (index, prev, curr));
            prop_assert_eq!(l.unpack(l.pack(last, m, m)), (last, m, m));
            // The horizon is the start of the window after the last, when the clock shows it.
            match l.horizon(w) {
                Some(h) => {
                    let end = (u128::from(last) + 1) * u128::from(w.get());
                    prop_assert_eq!(u128::from(h), end);
                }
                None => prop_assert_eq!(last, u64::MAX / w.get()),
            }
        }
    }
}
