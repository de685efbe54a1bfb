//! Warm-up: a limiter that starts slow after idling and speeds up to its stable rate.
//!
//! This is the behaviour of Guava's `SmoothWarmingUp` with cold factor 3, written as exact
//! integer math over one packed `u64` word.
//!
//! # Model
//!
//! Stable interval `I` (ns), warm-up period `W` (ns), cold interval `C = 3I`. The limiter stores
//! up to `M = W / I` permits (real, not necessarily whole); `h = M / 2` is the threshold. Stored
//! permits accrue while the key is idle, one per `I`. Spending the permit at position `x`
//! (`x` permits stored) costs
//!
//! ```text
//! f(x) = I                                  for x <= h
//! f(x) = I + (x - h) * (C - I) / (M - h)    for h < x <= M      (linear from I up to 3I)
//! ```
//!
//! so a key with many stored permits (a *cold* key) is slow, and it gets faster as it spends
//! them. The state is `(s, next_free)`; a fresh key is cold: `s = M`, `next_free` = the origin.
//! A request for `n >= 1` at `now`:
//!
//! 1. resync: if `now > next_free`, `s = min(M, s + (now - next_free) / I)`, `next_free = now`;
//! 2. admitted iff `next_free - now <= max_wait` (0 for a check). The request waits only for the
//!    requests before it ("pay later"), whatever its size; a denial stores nothing;
//! 3. admitted: `spend = min(n, s)`, `cost = ∫[s - spend, s] f + (n - spend) * I`,
//!    `next_free += cost`, `s -= spend`; the decision's delay is the old `next_free - now`.
//!
//! # Missing permits
//!
//! The state stores `m = M - s`, the permits *missing* from a full store, so that a fresh
//! (cold) key is `m = 0` and the word `0`. With `C = 3I` the cost above has a closed form in
//! `m`: with `P(m) = max(0, W - 2·I·m)² / (2W)` (the part of the area above `I` still stored),
//!
//! ```text
//! cost(m, n) = n * I + P(m) - P(m + n)
//! ```
//!
//! which holds also when `n` exceeds the stored permits (`P` is zero from `m = M / 2` on, so
//! permits past the empty store cost exactly `I`). After the request, `m = min(M, m + n)`.
//! Spending is therefore exact in the fixed-point field below; only idle accrual and the
//! time field round.
//!
//! # State
//!
//! ```text
//!  63                                          16 15                   0
//! +----------------------------------------------+----------------------+
//! |  next_free: whole µs since the origin (48)   |  missing permits (16) |
//! +----------------------------------------------+----------------------+
//! ```
//!
//! - `next_free` counts whole microseconds (Guava's own resolution): the last representable
//!   instant is `2^48 - 1` µs, about 8.9 years after the clock's origin.
//! - The missing permits `m` are unsigned fixed point with `F` fractional bits, chosen per
//!   configuration: `F = 16 - bits(ceil(M))`, so every value in `[0, M]` fits. `M` may be at
//!   most [`MAX_PERMITS`] (65 535).
//!
//! # Rounding
//!
//! Stored permits are *not* credit here: every permit costs at least `I`, stored or not, and
//! the more are stored the more the next one costs (a cold key is the slowest, and the fresh
//! word is the coldest state). So each rounding goes the way that makes the *next* admission
//! no earlier than the exact model's from the same state:
//!
//! | quantity | rounded | why |
//! |---|---|---|
//! | `next_free` after an admission | up, to the next whole µs | the next request waits at least as long as in the exact model |
//! | idle accrual `(now - next_free) / I` | up, to the next `2^-F` permit (missing rounds down) | a colder key pays more for its next permit |
//! | `m` when the store empties (`M * 2^F`) | down | the same: the empty store keeps under `2^-F` permit |
//! | `cost(m, n)` | up, by less than 5 ns, before the µs rounding | `P(m)` rounded up, `P(m + n)` down |
//! | `now` | not converted | the word's µs widen exactly to ns, and `now` is compared in ns |
//! | `reset_after` | up | the key is fresh again at `now + reset_after`, never later |
//!
//! Per step, then: the resync leaves the key less than `2^-F` permit colder than the exact
//! model (which makes its next cost at most `2I / 2^F` higher); from the resynced state the
//! written `next_free` is less than 1 µs + 5 ns after the exact model's, never before; and
//! the stored permits after spending are less than `2^-F` above the exact model's. Guava
//! truncates each cost to µs; cellgate rounds up, and does not give the rounded-up part
//! back as accrual, so under continuous demand each spacing is the exact cost rounded up to
//! a whole µs. `F` is 12 for `M = 10` (a 4096th of a permit), 6 for `M = 1000`, 0 for
//! `M = 65 535`.
//!
//! "No earlier than the exact model" holds step by step. Over several steps the exact model
//! is not monotone (a colder key pays more now, so its next `next_free` is later and it
//! accrues less before a later request; after a request of more than about `M / 4` permits
//! that can leave it the warmer of the two), so over a sequence cellgate and the exact model
//! may differ either way, by an amount bounded by the per-step roundings above.
//!
//! # Time going backwards and the horizon
//!
//! A `now` before `next_free` accrues nothing and a check there is denied: a clock that moved
//! back only waits longer. A request whose `next_free` would pass the last representable
//! microsecond is denied with no `retry_after` (fail closed, nothing wraps); so is a denied
//! request whose later admission would need one.
//!
//! # Decisions
//!
//! `limit = 1`: a warm-up limiter admits one request (of any size) at a time, when
//! `next_free <= now`. `remaining` is 1 when a further one-unit check at `now` would be admitted
//! after this decision, else 0. `retry_after` (denied) is `next_free - now - max_wait`.
//! `reset_after` is the wait until the key is fresh again: `(next_free - now) + m * I`.

// The limiters reach this module once `Algorithm` gains a warm-up variant; until then only the
// tests use it.

use std::num::NonZeroU64;
use std::time::Duration;

use super::Step;
use crate::decision::Decision;
use crate::error::ConfigError;
use crate::quota::Quota;

/// Width of the missing-permits field, the word's low bits.
pub(crate) const MISSING_BITS: u32 = 16;
/// Mask of the missing-permits field.
pub(crate) const MISSING_MASK: u64 = (1 << MISSING_BITS) - 1;
/// Shift of the next-free field: just above the missing permits.
pub(crate) const NEXT_FREE_SHIFT: u32 = MISSING_BITS;
/// Width of the next-free field.
pub(crate) const NEXT_FREE_BITS: u32 = u64::BITS - NEXT_FREE_SHIFT;
/// The last representable next-free instant, in µs since the clock's origin (about 8.9 years).
pub(crate) const MAX_NEXT_FREE_US: u64 = (1 << NEXT_FREE_BITS) - 1;
/// The unit of the next-free field, in ns.
pub(crate) const NS_PER_US: u64 = 1_000;
/// The most stored permits (warm-up period / stable interval) a configuration may ask for.
/// (Re-exported as `cellgate::MAX_WARM_UP_PERMITS`.)
pub const MAX_PERMITS: u64 = MISSING_MASK;

/// A validated warm-up configuration.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct WarmUp {
    /// Stable interval `I`, ns.
    interval: NonZeroU64,
    /// Warm-up period `W`, ns.
    warm_up: NonZeroU64,
    /// `F`: fractional bits of the missing-permits field (0..=15).
    frac_bits: u32,
    /// `floor(M * 2^F)`: the field's value when no permit is stored.
    max_missing: u64,
}

impl WarmUp {
    /// The policy this configuration enforces (see [`crate::Policy`]): one request per stable
    /// interval once warm.
    pub(crate) fn policy(&self) -> crate::policy::Policy {
        let i = Some(std::time::Duration::from_nanos(self.interval.get()));
        crate::policy::Policy::new(crate::policy::PolicyKind::WarmUp, 1, i, i)
    }

    /// A warm-up limiter whose stable rate is `stable` (interval `period / count`, integer ns;
    /// the quota's burst and queue are ignored) and whose warm-up period is `warm_up`.
    ///
    /// # Errors
    ///
    /// - [`ConfigError::Zero`] for a zero `count`, `period` or `warm_up`;
    /// - [`ConfigError::PeriodTooLong`] for a period or warm-up period beyond `u64` ns;
    /// - [`ConfigError::RateTooFast`] for an interval under 1 ns;
    /// - [`ConfigError::WarmUpTooLong`] when `warm_up / interval` exceeds [`MAX_PERMITS`].
    pub(crate) fn new(stable: Quota, warm_up: Duration) -> Result<Self, ConfigError> {
        let interval = stable_interval(stable)?;
        if warm_up.is_zero() {
            return Err(ConfigError::Zero { field: "warm_up" });
        }
        let w = u64::try_from(warm_up.as_nanos())
            .map_err(|_| ConfigError::PeriodTooLong { period: warm_up })?;
        // `ceil(M)`, at least 1 since `W >= 1`.
        let permits = w.div_ceil(interval.get());
        if permits > MAX_PERMITS {
            return Err(ConfigError::WarmUpTooLong {
                permits,
                max: MAX_PERMITS,
            });
        }
        let frac_bits = MISSING_BITS - (u64::BITS - permits.leading_zeros());
        // `M * 2^F <= ceil(M) * 2^F <= (2^b - 1) * 2^(16 - b) < 2^16`: fits the field.
        let max_missing = (u128::from(w) << frac_bits) / u128::from(interval.get());
        let max_missing = u64::try_from(max_missing)
            .ok()
            .filter(|&m| m <= MISSING_MASK)
            .ok_or(ConfigError::WarmUpTooLong {
                permits,
                max: MAX_PERMITS,
            })?;
        let warm_up = NonZeroU64::new(w).ok_or(ConfigError::Zero { field: "warm_up" })?;
        Ok(Self {
            interval,
            warm_up,
            frac_bits,
            max_missing,
        })
    }

    /// A check: admitted only if it can act now (Guava's `tryAcquire(n)` with no timeout).
    #[inline]
    pub(crate) fn step(&self, word: u64, now: u64, n: u32) -> Step {
        self.step_within(word, now, n, 0)
    }

    /// A reservation: admitted if it can act within `max_wait_ns`, with the wait as the
    /// decision's delay (`tryAcquire(n, timeout)`; `acquire(n)` is `max_wait_ns = u64::MAX`).
    pub(crate) fn step_within(&self, word: u64, now: u64, n: u32, max_wait_ns: u64) -> Step {
        let (next_free_us, missing) = unpack(word);
        let (base, missing) = self.resync(next_free_us * NS_PER_US, missing, now);
        // `base >= now` after the resync.
        let wait = base - now;
        if wait > max_wait_ns {
            // At `now + retry` (<= base) nothing accrues, so the same request then costs what it
            // would cost now; it can only be admitted if that fits below the horizon.
            let retry = (n == 0 || self.next_free_us(base, missing, n).is_some())
                .then_some(wait - max_wait_ns);
            let reset = self.reset_ns(base, missing, now);
            return (Decision::deny(1, 0, NonZeroU64::MIN, retry, reset), None);
        }
        if n == 0 {
            let reset = self.reset_ns(base, missing, now);
            let slack = self.remaining(base, missing, now);
            return (
                Decision::allow_after(1, slack, NonZeroU64::MIN, wait, reset),
                None,
            );
        }
        match self.next_free_us(base, missing, n) {
            Some(next_us) => {
                let spent = (u128::from(missing) + (u128::from(n) << self.frac_bits))
                    .min(u128::from(self.max_missing));
                // `spent <= max_missing <= MISSING_MASK`.
                let spent = u64::try_from(spent).unwrap_or(self.max_missing);
                let reset = self.reset_ns(next_us * NS_PER_US, spent, now);
                // The next permit is due after `now`: no further check fits now.
                (
                    Decision::allow_after(1, 0, NonZeroU64::MIN, wait, reset),
                    Some(pack(next_us, spent)),
                )
            }
            None => {
                // Past the horizon: fail closed, and no wait helps.
                let reset = self.reset_ns(base, missing, now);
                let slack = self.remaining(base, missing, now);
                (Decision::deny(1, slack, NonZeroU64::MIN, None, reset), None)
            }
        }
    }

    /// Whether `word` decides exactly like the fresh word `0` at `now` and at any later time:
    /// its next permit is free by `now` and idling has refilled the whole store.
    #[inline]
    pub(crate) fn is_idle(&self, word: u64, now: u64) -> bool {
        let (next_free_us, missing) = unpack(word);
        let next_free = next_free_us * NS_PER_US;
        next_free <= now && self.resync(next_free, missing, now).1 == 0
    }

    /// The most conservative word a key idle at `swept` could hold: a full store and the
    /// latest `next_free` an idle key can have. Stored instants are whole µs, so an idle key's
    /// `next_free` is at most `swept` rounded *down* to a µs; that makes this word fresh from
    /// `swept` on, and at least as strict as the dropped key before it.
    #[inline]
    pub(crate) fn swept_word(&self, swept: u64) -> u64 {
        pack((swept / NS_PER_US).min(MAX_NEXT_FREE_US), 0)
    }

    /// `(base, missing)` after idling from `next_free` to `now`: accrual is rounded up to the
    /// next `2^-F` permit (missing rounds down), which leaves the key colder, never warmer.
    #[inline]
    fn resync(&self, next_free: u64, missing: u64, now: u64) -> (u64, u64) {
        if now <= next_free {
            return (next_free, missing);
        }
        // < 2^64 * 2^15: no overflow.
        let gained = (u128::from(now - next_free) << self.frac_bits)
            .div_ceil(u128::from(self.interval.get()));
        let left = u128::from(missing).saturating_sub(gained);
        (now, u64::try_from(left).unwrap_or(0))
    }

    /// `W * 2^F - 2 * I * missing`: the scaled stored area above the stable interval is
    /// `D² / (2W * 2^2F)`. Zero from `missing = M / 2` on.
    #[inline]
    fn excess(&self, missing: u128) -> u128 {
        let full = u128::from(self.warm_up.get()) << self.frac_bits;
        // missing < 2^16 + 2^32 * 2^15, so 2 * I * missing < 2^113.
        full.saturating_sub(2 * u128::from(self.interval.get()) * missing)
    }

    /// `P(missing / 2^F)` rounded up.
    #[inline]
    fn area_up(&self, missing: u128) -> u128 {
        let d = self.excess(missing);
        // ceil(d / 2^F) <= W < 2^64, so its square fits.
        let u = (d + (1 << self.frac_bits) - 1) >> self.frac_bits;
        (u * u).div_ceil(2 * u128::from(self.warm_up.get()))
    }

    /// `P(missing / 2^F)` rounded down.
    #[inline]
    fn area_down(&self, missing: u128) -> u128 {
        let u = self.excess(missing) >> self.frac_bits;
        (u * u) / (2 * u128::from(self.warm_up.get()))
    }

    /// `cost(m, n) = n * I + P(m) - P(m + n)`, ns, rounded up (by less than 5 ns).
    #[inline]
    fn cost(&self, missing: u64, n: u32) -> u128 {
        let after = u128::from(missing) + (u128::from(n) << self.frac_bits);
        // n * I < 2^96; the areas are at most W / 2 + 1.
        u128::from(n) * u128::from(self.interval.get())
            + self
                .area_up(u128::from(missing))
                .saturating_sub(self.area_down(after))
    }

    /// The `next_free` (µs, rounded up) after admitting `n` at `base`, or `None` past the
    /// horizon.
    #[inline]
    fn next_free_us(&self, base: u64, missing: u64, n: u32) -> Option<u64> {
        let end = u128::from(base) + self.cost(missing, n);
        let us = end.div_ceil(u128::from(NS_PER_US));
        u64::try_from(us).ok().filter(|&us| us <= MAX_NEXT_FREE_US)
    }

    /// The wait from `now` until a key with this state is fresh: `next_free - now` plus the
    /// time to accrue the missing permits, rounded up; saturating.
    #[inline]
    fn reset_ns(&self, next_free: u64, missing: u64, now: u64) -> u64 {
        let refill =
            (u128::from(missing) * u128::from(self.interval.get())).div_ceil(1 << self.frac_bits);
        let total = u128::from(next_free.saturating_sub(now)) + refill;
        u64::try_from(total).unwrap_or(u64::MAX)
    }

    /// 1 if a one-unit check at `now` on this (resynced) state would be admitted, else 0.
    #[inline]
    fn remaining(&self, base: u64, missing: u64, now: u64) -> u64 {
        u64::from(base <= now && self.next_free_us(base, missing, 1).is_some())
    }
}

/// The stable interval of `quota`, ns: `period / count`, checked as
/// [`Quota::gcra_params`](crate::quota::Quota) checks it (burst and queue play no part).
fn stable_interval(quota: Quota) -> Result<NonZeroU64, ConfigError> {
    if quota.count() == 0 {
        return Err(ConfigError::Zero { field: "count" });
    }
    if quota.period().is_zero() {
        return Err(ConfigError::Zero { field: "period" });
    }
    let period_ns =
        u64::try_from(quota.period().as_nanos()).map_err(|_| ConfigError::PeriodTooLong {
            period: quota.period(),
        })?;
    NonZeroU64::new(period_ns / u64::from(quota.count())).ok_or(ConfigError::RateTooFast {
        count: quota.count(),
        period: quota.period(),
    })
}

/// The word for `next_free_us` (at most [`MAX_NEXT_FREE_US`]) and `missing` (masked).
#[inline]
const fn pack(next_free_us: u64, missing: u64) -> u64 {
    (next_free_us << NEXT_FREE_SHIFT) | (missing & MISSING_MASK)
}

/// `(next_free_us, missing)` of a word.
#[inline]
const fn unpack(word: u64) -> (u64, u64) {
    (word >> NEXT_FREE_SHIFT, word & MISSING_MASK)
}

#[cfg(test)]
mod tests;
