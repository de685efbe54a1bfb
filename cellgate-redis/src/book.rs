//! The ledger of leased units held in the local pool: which grant each unit came from, so a
//! rate lease can be withdrawn when its lifetime ends.
//!
//! Units in the pool are interchangeable, so the ledger assigns admissions to grants first in,
//! first out: whatever the pool lost since the last look was spent from the oldest grants. That
//! assignment is the one that keeps every admitted unit closest to its grant, which is what the
//! window bound `R·(w + L) + burst` needs.

use std::collections::VecDeque;
use std::time::Instant;

/// Grants still (partly) in the pool, oldest first, and the level the pool had at the last
/// look.
#[derive(Debug, Default)]
pub(crate) struct Book {
    grants: VecDeque<(Option<Instant>, u64)>,
    level: u64,
}

impl Book {
    /// Units the ledger believes are in the pool.
    pub(crate) fn level(&self) -> u64 {
        self.level
    }

    /// Records that the pool now holds `remaining` units; returns how many were admitted since
    /// the last look (the pool only goes down between the ledger's own changes).
    ///
    /// Units can also come back (a caller cancelled a charge): they are put first in line with
    /// `returned` as their deadline, so a rate limit withdraws them at once rather than let
    /// them outlive the grant they came from.
    pub(crate) fn observe(&mut self, remaining: u64, returned: Option<Instant>) -> u64 {
        if remaining > self.level {
            self.grants.push_front((returned, remaining - self.level));
            self.level = remaining;
            return 0;
        }
        let spent = self.level - remaining;
        self.take_front(spent);
        spent
    }

    /// A grant of `units` put in the pool, usable until `deadline` (`None`: forever).
    pub(crate) fn add(&mut self, deadline: Option<Instant>, units: u64) {
        if units > 0 {
            self.grants.push_back((deadline, units));
            self.level += units;
        }
    }

    /// Units of grants whose lifetime has ended at `now` (deadlines are in grant order).
    pub(crate) fn expired(&self, now: Instant) -> u64 {
        self.grants
            .iter()
            .take_while(|(d, _)| d.is_some_and(|d| d <= now))
            .map(|(_, u)| u)
            .sum()
    }

    /// Removes `units` from the oldest grants (spent, or withdrawn from the pool).
    pub(crate) fn take_front(&mut self, mut units: u64) {
        self.level = self.level.saturating_sub(units);
        while units > 0 {
            let Some(front) = self.grants.front_mut() else {
                return;
            };
            let t = front.1.min(units);
            front.1 -= t;
            units -= t;
            if front.1 == 0 {
                self.grants.pop_front();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::time::Duration;

    #[test]
    fn spending_comes_from_the_oldest_grant() {
        let t0 = Instant::now();
        let mut b = Book::default();
        b.add(Some(t0), 5);
        b.add(Some(t0 + Duration::from_secs(1)), 5);
        assert_eq!(b.observe(7, None), 3);
        assert_eq!(b.expired(t0), 2);
        assert_eq!(b.expired(t0 + Duration::from_secs(1)), 7);
        b.take_front(2);
        assert_eq!((b.level(), b.expired(t0)), (5, 0));
        // Two units cancelled back into the pool: first in line, due at once.
        assert_eq!(b.observe(7, Some(t0)), 0);
        assert_eq!((b.level(), b.expired(t0)), (7, 2));
    }

    proptest! {
        /// Against a model that tracks each unit: the level is the sum of grants, and what
        /// expires is exactly the units of expired grants not yet spent or withdrawn (units
        /// cancelled back are due at once).
        #[test]
        fn ledger_matches_a_unit_model(ops in proptest::collection::vec((0u8..4, 0u64..20), 0..60)) {
            let t0 = Instant::now();
            let mut b = Book::default();
            let mut units: VecDeque<u64> = VecDeque::new(); // deadline (s) of each unit, in order
            let mut clock = 0u64;
            for (op, x) in ops {
                match op {
                    0 => {
                        clock += 1;
                        b.add(Some(t0 + Duration::from_secs(clock)), x);
                        units.extend(std::iter::repeat_n(clock, x as usize));
                    }
                    1 => {
                        let spent = x.min(units.len() as u64);
                        let remaining = units.len() as u64 - spent;
                        prop_assert_eq!(b.observe(remaining, None), spent);
                        units.drain(..spent as usize);
                    }
                    2 => {
                        // `x` units cancelled back into the pool: due at once.
                        let remaining = units.len() as u64 + x;
                        prop_assert_eq!(b.observe(remaining, Some(t0)), 0);
                        for _ in 0..x {
                            units.push_front(0);
                        }
                    }
                    _ => {
                        let at = t0 + Duration::from_secs(x);
                        let model = units.iter().take_while(|d| **d <= x).count() as u64;
                        prop_assert_eq!(b.expired(at), model);
                        b.take_front(model);
                        units.drain(..model as usize);
                    }
                }
                prop_assert_eq!(b.level(), units.len() as u64);
            }
        }
    }
}
