//! Stock: a number of units per key that only goes down, unless an operator restocks.
//!
//! Flash-sale inventory: "100 units of SKU 42". There is no refill over time; exactly as many
//! units as were stocked are ever admitted, under any concurrency (each admission is one
//! compare-and-swap from the exact remaining count it was decided on).
//!
//! # State
//!
//! ```text
//! word = remaining XOR stock          (64 bits, no other fields)
//! ```
//!
//! so the fresh word `0` means "the configured stock remains", and every remaining count from
//! 0 to `u64::MAX` is representable (an operator may restock above the configured stock).
//!
//! # Decisions
//!
//! Allowed iff `n <= remaining`. `limit` is the configured stock; `remaining` may exceed it after
//! a restock (reported up to `u32::MAX`). Waiting never brings stock back, so a denial has no
//! `retry_after`. `reset_after` is 0 while the key holds its configured stock and `u64::MAX` ns
//! ("never by itself") once anything has been taken or restocked.

use std::num::NonZeroU64;

use super::Step;
use crate::decision::Decision;

/// `reset_after` of a key that will not return to its configured stock by itself.
pub(crate) const NEVER: u64 = crate::decision::NEVER_NS;

/// The configured stock per key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Stock {
    stock: u32,
}

impl Stock {
    /// The policy this configuration enforces (see [`crate::Policy`]).
    pub(crate) fn policy(&self) -> crate::policy::Policy {
        crate::policy::Policy::new(crate::policy::PolicyKind::Stock, self.stock, None, None)
    }

    pub(crate) const fn new(stock: u32) -> Self {
        Self { stock }
    }

    /// Remaining units held in `word`.
    #[inline]
    pub(crate) const fn remaining(&self, word: u64) -> u64 {
        word ^ self.stock as u64
    }

    /// The word holding `remaining` units.
    #[inline]
    pub(crate) const fn word(&self, remaining: u64) -> u64 {
        remaining ^ self.stock as u64
    }

    #[inline]
    fn reset(word: u64) -> u64 {
        if word == 0 {
            0
        } else {
            NEVER
        }
    }

    #[inline]
    pub(crate) fn step(&self, word: u64, _now: u64, n: u32) -> Step {
        let remaining = self.remaining(word);
        match remaining.checked_sub(u64::from(n)) {
            Some(left) => {
                let new = self.word(left);
                let write = (n > 0).then_some(new);
                (
                    Decision::allow(self.stock, left, NonZeroU64::MIN, Self::reset(new)),
                    write,
                )
            }
            None => (
                Decision::deny(
                    self.stock,
                    remaining,
                    NonZeroU64::MIN,
                    None,
                    Self::reset(word),
                )
                .because(crate::decision::Denial::SoldOut),
                None,
            ),
        }
    }

    /// The step of a restock by `n` units (saturating at `u64::MAX` remaining).
    #[inline]
    pub(crate) fn restock(&self, word: u64, n: u64) -> (u64, Option<u64>) {
        let left = self.remaining(word).saturating_add(n);
        (left, Some(self.word(left)))
    }

    /// The step of a refund of `n` units: back up to the configured stock and never beyond it
    /// (a refund returns what was sold; only a restock adds stock). A key already at or above
    /// its configured stock (restocked) gets nothing.
    #[inline]
    pub(crate) fn refund(&self, word: u64, n: u32) -> Option<u64> {
        let have = self.remaining(word);
        let left = have
            .saturating_add(u64::from(n))
            .min(u64::from(self.stock).max(have));
        (left > have).then(|| self.word(left))
    }

    /// A key holding its configured stock is indistinguishable from an unseen key.
    #[inline]
    pub(crate) fn is_idle(&self, word: u64) -> bool {
        word == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A check of `n` units (a stock decides at time 0).
    fn run(s: &Stock, word: &mut u64, n: u32) -> Decision {
        crate::algorithm::run(s, word, 0, n)
    }

    #[test]
    fn sells_exactly_the_stock() {
        let s = Stock::new(3);
        let mut w = 0;
        assert_eq!(s.remaining(w), 3);
        assert!(s.is_idle(w));
        let d = run(&s, &mut w, 2);
        assert!(d.is_allowed());
        assert_eq!((d.limit(), d.remaining()), (3, 1));
        assert_eq!(d.reset_after_ns(), NEVER);
        let d = run(&s, &mut w, 2);
        assert!(!d.is_allowed());
        assert_eq!(d.retry_after(), None);
        assert_eq!(d.remaining(), 1);
        assert!(run(&s, &mut w, 1).is_allowed());
        assert!(!run(&s, &mut w, 1).is_allowed());
        assert_eq!(s.remaining(w), 0);
        assert!(!s.is_idle(w));
    }

    #[test]
    fn restock_round_trips_and_saturates() {
        let s = Stock::new(5);
        let mut w = 0;
        run(&s, &mut w, 5);
        let (left, nw) = s.restock(w, 5);
        assert_eq!(left, 5);
        assert_eq!(
            nw,
            Some(0),
            "back to the configured stock is the fresh word"
        );
        let (left, nw) = s.restock(0, 10);
        assert_eq!(left, 15);
        let d = run(&s, &mut nw.unwrap(), 0);
        assert_eq!(
            d.remaining(),
            15,
            "remaining may exceed the configured stock"
        );
        let (left, _) = s.restock(s.word(u64::MAX - 1), 10);
        assert_eq!(left, u64::MAX);
        for r in [0, 1, 5, 6, u64::from(u32::MAX), u64::MAX] {
            assert_eq!(s.remaining(s.word(r)), r);
        }
    }
}
