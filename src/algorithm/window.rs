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
