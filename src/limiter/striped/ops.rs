//! A striped limiter's operations beside the hot check: peeks, charges and reservations with
//! their cancels, restocking, and what it reports (policy, remaining, stripes, clock).

use std::num::NonZeroU64;
use std::time::Duration;

use super::{sooner, StripedLimiter};
use crate::algorithm::Algorithm;
use crate::clock::Clock;
use crate::decision::Decision;
use crate::error::ConfigError;
use crate::policy::Policy;
use crate::reservation::Reservation;

impl<C: Clock> StripedLimiter<C> {
    /// The decision `n` units would get now, consuming nothing: for GCRA, the first stripe
    /// from this thread's on that would admit them (its `remaining` is that stripe's), or the
    /// denial with the soonest retry; for a stock, the decision of one stock holding the sum of
    /// all stripes (gathering included).
    ///
    /// ```
    /// use cellgate::StripedLimiter;
    /// let sku = StripedLimiter::stock(5).stripes(2).build()?;
    /// assert!(sku.peek_n(5).is_allowed()); // 3 + 2: gathered
    /// assert!(!sku.peek_n(6).is_allowed());
    /// assert_eq!(sku.peek_n(0).remaining(), 5);
    /// # Ok::<(), cellgate::ConfigError>(())
    /// ```
    pub fn peek_n(&self, n: u32) -> Decision {
        if !self.uses_time {
            return self.stock_peek(n);
        }
        let mut walk = self.walk();
        while let Some(i) = walk.next() {
            let stripe = &self.stripes[i];
            let d = stripe.algorithm.decide(stripe.cell.load(), walk.now, n);
            if d.is_allowed() {
                return d.with_limit(self.limit);
            }
            // As a check would go on (without raising the mark: a peek writes nothing).
            walk.refused(self, d, false);
        }
        walk.denied().with_limit(self.limit)
    }

    /// A walk over the stripes in a check's order, from this thread's stripe on.
    #[inline(always)]
    fn walk(&self) -> Walk {
        Walk {
            now: self.now(),
            start: self.start(),
            len: self.stripes.len(),
            k: 0,
            denied: None,
        }
    }

    /// A stock's peek: one stock holding what all stripes hold.
    pub(super) fn stock_peek(&self, n: u32) -> Decision {
        let mut total = 0u64;
        let mut untouched = true;
        for stripe in self.stripes.iter() {
            let w = stripe.cell.load();
            untouched &= w == Algorithm::FRESH;
            if let Algorithm::Stock(stock) = stripe.algorithm {
                total = total.saturating_add(stock.remaining(w));
            }
        }
        let reset = if untouched {
            0
        } else {
            crate::algorithm::stock::NEVER
        };
        match total.checked_sub(u64::from(n)) {
            Some(left) => Decision::allow(self.limit, left, NonZeroU64::MIN, reset),
            None => Decision::deny(self.limit, total, NonZeroU64::MIN, None, reset)
                .because(crate::decision::Denial::SoldOut),
        }
    }

    /// A check of `n` units that keeps what [`cancel`](Self::cancel) needs: the stripe that
    /// took them (or, for a gathered stock request, that the units came from several).
    pub(super) fn charge(&self, n: u32) -> Reservation {
        self.take(n, None)
    }

    /// Reserves `n` units if their turn comes within `max_wait` on some stripe (GCRA; a
    /// stock decides as a check), as [`Limiter::reserve`](crate::Limiter::reserve) does on one
    /// cell: the first stripe from this thread's on that can schedule them in time takes them.
    ///
    /// ```
    /// use std::time::Duration;
    /// use cellgate::{Quota, StripedLimiter};
    /// use cellgate::clock::ManualClock;
    ///
    /// // 10 per second, burst 2, over 2 stripes: each stripe 1 per 200 ms, burst 1.
    /// let l = StripedLimiter::gcra(Quota::per_second(10).with_burst(2))
    ///     .stripes(2)
    ///     .clock(ManualClock::new())
    ///     .build()?;
    /// assert!(l.check_n(1).is_allowed() && l.check_n(1).is_allowed());
    /// let r = l.reserve(1, Duration::from_millis(250));
    /// assert_eq!(r.delay(), Duration::from_millis(200));
    /// assert!(l.cancel(r));
    /// # Ok::<(), cellgate::ConfigError>(())
    /// ```
    pub fn reserve(&self, n: u32, max_wait: Duration) -> Reservation {
        self.take(n, Some(crate::quota::saturating_ns(max_wait)))
    }

    /// Takes `n` units from the first stripe (from this thread's on) that admits them, within
    /// `wait` ns for a reservation, gathering a stock's from several stripes if none alone can.
    pub(super) fn take(&self, n: u32, wait: Option<u64>) -> Reservation {
        let mut walk = self.walk();
        while let Some(i) = walk.next() {
            let (stripe, now) = (&self.stripes[i], walk.now);
            let step = |w| match wait {
                Some(wait) => stripe.algorithm.step_within(w, now, n, wait),
                None => stripe.algorithm.step(w, now, n),
            };
            let (before, after) = stripe.cell.update(|w| {
                let write = step(w).1;
                ((w, write), write)
            });
            let d = step(before).0;
            if d.is_allowed() {
                self.admitted(walk.start, now);
                return Reservation::new(d.with_limit(self.limit), n, before, after).on_stripe(i);
            }
            walk.refused(self, d, true);
        }
        let start = walk.start;
        if n > 1 && !self.uses_time {
            if let Some(d) = self.gather(start, n) {
                // Gathered from several stripes: the words say only "n units taken" (a cancel
                // puts them back on the start stripe; stock units are interchangeable).
                return Reservation::new(d, n, 0, Some(u64::from(n))).on_stripe(start);
            }
        }
        Reservation::new(walk.denied().with_limit(self.limit), n, 0, None)
    }

    /// Gives back the units of `reservation` (from this limiter's
    /// [`reserve`](Self::reserve), or a charge through [`AnyLimiter`](crate::AnyLimiter));
    /// returns whether anything came back. A stock gets
    /// every unit back (on the stripe the request started at: units are interchangeable); a
    /// GCRA stripe gives back what [`Limiter::cancel`](crate::Limiter::cancel) gives back on
    /// one cell, on the stripe that took the units.
    pub fn cancel(&self, reservation: Reservation) -> bool {
        if !reservation.holds() {
            return false;
        }
        let Some(stripe) = self.stripes.get(reservation.stripe) else {
            return false;
        };
        let now = self.now();
        stripe.cell.update(|w| {
            let write = match stripe.algorithm {
                Algorithm::Stock(stock) => stock.restock(w, u64::from(reservation.n)).1,
                ref other => other.cancel(w, now, &reservation),
            };
            (write.is_some(), write)
        })
    }

    /// The policy this limiter enforces: the whole quota or stock, not a stripe's share.
    ///
    /// ```
    /// use cellgate::{PolicyKind, Quota, StripedLimiter};
    /// let l = StripedLimiter::gcra(Quota::per_second(100)).stripes(4).build()?;
    /// assert_eq!((l.policy().kind(), l.policy().limit()), (PolicyKind::Gcra, 100));
    /// assert_eq!(StripedLimiter::stock(7).stripes(2).build()?.policy().limit(), 7);
    /// # Ok::<(), cellgate::ConfigError>(())
    /// ```
    pub fn policy(&self) -> Policy {
        self.policy
    }

    /// Adds `units` to a striped stock, split over the stripes as the stock was (`units / s`
    /// each, plus one for the first `units % s`), each stripe's share by one CAS (saturating);
    /// returns the units then remaining, summed over the stripes right after each one's
    /// restock (exact when nothing else runs meanwhile). Buyers see the units as each stripe
    /// gets its share.
    ///
    /// ```
    /// use cellgate::StripedLimiter;
    /// let sku = StripedLimiter::stock(2).stripes(4).build()?;
    /// assert!(sku.check_n(2).is_allowed());
    /// assert_eq!(sku.restock(5)?, 5); // 2 + 1 + 1 + 1
    /// assert!(sku.check_n(5).is_allowed()); // gathered from all four stripes
    /// # Ok::<(), cellgate::ConfigError>(())
    /// ```
    ///
    /// # Errors
    ///
    /// [`ConfigError::Unsupported`] if this is not a [`stock`](StripedLimiter::stock) limiter
    /// (nothing changes).
    pub fn restock(&self, units: u64) -> Result<u64, ConfigError> {
        let s = self.stripes.len() as u64;
        let mut left = 0u64;
        for (i, stripe) in self.stripes.iter().enumerate() {
            // Every stripe runs the same algorithm, so a limiter that is not a stock fails here
            // on stripe 0, before anything changed.
            let stock = *stripe.algorithm.stock("restock")?;
            let add = units / s + u64::from((i as u64) < units % s);
            left = left.saturating_add(stripe.cell.update(|w| stock.restock(w, add)));
        }
        Ok(left)
    }

    /// Units (stock) or unit requests (GCRA) all stripes would admit now, summed (saturating): a snapshot
    /// that reads every stripe.
    ///
    /// ```
    /// use cellgate::StripedLimiter;
    /// let l = StripedLimiter::stock(10).stripes(3).build()?;
    /// l.check_n(4);
    /// assert_eq!(l.remaining(), 6);
    /// # Ok::<(), cellgate::ConfigError>(())
    /// ```
    pub fn remaining(&self) -> u64 {
        let now = self.now();
        self.stripes
            .iter()
            .map(|s| match s.algorithm {
                // A stock's count, which a restock may take past what a decision reports.
                Algorithm::Stock(stock) => stock.remaining(s.cell.load()),
                ref other => u64::from(other.peek(s.cell.load(), now).remaining()),
            })
            .fold(0, u64::saturating_add)
    }

    /// How many stripes the limit is split over.
    ///
    /// ```
    /// use cellgate::StripedLimiter;
    /// assert_eq!(StripedLimiter::stock(10).stripes(5).build()?.stripes(), 5);
    /// # Ok::<(), cellgate::ConfigError>(())
    /// ```
    #[must_use]
    pub fn stripes(&self) -> usize {
        self.stripes.len()
    }

    /// The limiter's clock.
    ///
    /// ```
    /// use std::time::Duration;
    /// use cellgate::{Quota, StripedLimiter};
    /// use cellgate::clock::ManualClock;
    /// let l = StripedLimiter::gcra(Quota::per_second(1).with_burst(2))
    ///     .stripes(2)
    ///     .clock(ManualClock::new())
    ///     .build()?;
    /// assert!(l.check().is_allowed() && l.check().is_allowed() && !l.check().is_allowed());
    /// // Each stripe refills at 1 per 2 s: after 1 s, half a unit in each, none to admit.
    /// l.clock().advance(Duration::from_secs(1));
    /// assert!(!l.check().is_allowed());
    /// l.clock().advance(Duration::from_secs(1));
    /// assert!(l.check().is_allowed() && l.check().is_allowed());
    /// # Ok::<(), cellgate::ConfigError>(())
    /// ```
    pub fn clock(&self) -> &C {
        &self.clock
    }
}

/// A walk over the stripes in a check's order (a peek's, a charge's or a reservation's): from
/// a start stripe on, at the time a check decides at; when the start stripe refuses and its
/// stamp is later than that time, over again from the start stripe at the later time (see
/// `catch_up`). It keeps the denial with the soonest retry.
struct Walk {
    /// The time the current stripe is tried at.
    now: u64,
    start: usize,
    len: usize,
    /// Stripes tried since the walk (re)started.
    k: usize,
    denied: Option<Decision>,
}

impl Walk {
    /// The stripe to try next, at `now`; `None` once every stripe refused.
    #[inline(always)]
    fn next(&self) -> Option<usize> {
        (self.k < self.len).then(|| (self.start + self.k) % self.len)
    }

    /// The stripe refused with `d`: on to the next, or over again at the start stripe's stamp
    /// (`publish`: raising the mark to it, as a check does).
    #[inline(always)]
    fn refused<C: Clock>(&mut self, limiter: &StripedLimiter<C>, d: Decision, publish: bool) {
        self.denied = Some(sooner(self.denied, d));
        self.k += 1;
        let start_refused = self.k == 1;
        if let Some(later) = start_refused
            .then(|| limiter.catch_up(self.start, self.now, publish))
            .flatten()
        {
            (self.now, self.k, self.denied) = (later, 0, None);
        }
    }

    /// The denial with the soonest retry ([`Decision::NONE`] if none was seen).
    fn denied(&self) -> Decision {
        self.denied.unwrap_or(Decision::NONE)
    }
}
