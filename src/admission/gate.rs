//! All-or-nothing admission across several limiters: a per-user limit AND a per-SKU stock AND a
//! global rate, where a "no" from any of them must not burn the others' capacity.
//!
//! [`check_all`] charges each `(gate, n)` in order with the same atomic check-and-charge a
//! plain check does. If one denies, the charges already made are cancelled in reverse order
//! (see [`Reservation`]): nothing admitted since on that key means the key goes back exactly to
//! where it was, so on a quiet key a denied multi-check leaves no trace. Each limiter is only ever
//! charged by its own compare-and-swap and only ever given back what was provably not spent, so
//! **no limiter in the set ever admits beyond its own quota**, under any concurrency. The cost of
//! a race is the other way round: if another request charged the same GCRA key between our
//! charge and our rollback, our units stay spent (they fail closed, and come back with time like
//! any other); window and stock limiters get theirs back exactly.
//!
//! nginx with several `limit_req` zones works differently, as we read its documentation and
//! source: it first checks the zones without charging them (the last one excepted), then charges
//! the others once all have passed. Two requests that pass the checks at the same time are then
//! both charged, so a zone can go past its burst under concurrency; and the charges made for a
//! request that a later zone rejects are not given back. Here a check is the charge, and a
//! rejection gives back what it took.

use crate::decision::Decision;
use crate::reservation::Reservation;
use std::time::Duration;

/// A limiter and key that [`check_all`] can charge and roll back: a [`Limiter`](crate::Limiter),
/// or a [`KeyedLimiter`](crate::KeyedLimiter) with a key ([`KeyedLimiter::gate`](crate::KeyedLimiter::gate)).
///
/// The trait is object safe so that one call can mix limiters of any key and clock type.
pub trait Gate {
    /// Checks `n` units, admitting them as `check_n` would, and returns what is needed to
    /// cancel the admission.
    fn charge(&self, n: u32) -> Reservation;
    /// Gives back what is provably unspent of `reservation` (from [`charge`](Self::charge)).
    fn cancel(&self, reservation: Reservation) -> bool;
    /// The decision `n` units would get now, consuming nothing.
    fn peek_n(&self, n: u32) -> Decision;
    /// Reserves `n` units if their turn comes within `max_wait` (see
    /// [`KeyedLimiter::reserve`](crate::KeyedLimiter::reserve)).
    fn reserve(&self, n: u32, max_wait: Duration) -> Reservation;
}

impl<G: Gate + ?Sized> Gate for &G {
    fn charge(&self, n: u32) -> Reservation {
        (**self).charge(n)
    }

    fn cancel(&self, reservation: Reservation) -> bool {
        (**self).cancel(reservation)
    }

    fn peek_n(&self, n: u32) -> Decision {
        (**self).peek_n(n)
    }

    fn reserve(&self, n: u32, max_wait: Duration) -> Reservation {
        (**self).reserve(n, max_wait)
    }
}

/// The outcome of [`check_all`]: admitted by every limiter, or by none (then which one said
/// no, and how long until all would say yes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MultiDecision<const N: usize> {
    decisions: [Decision; N],
    denied_by: Option<usize>,
}

impl<const N: usize> MultiDecision<N> {
    /// Whether every limiter admitted its units (and they stay charged).
    #[must_use]
    pub fn is_allowed(&self) -> bool {
        self.denied_by.is_none()
    }

    /// The index (in the array given to [`check_all`]) of the limiter that denied; `None` when
    /// admitted.
    #[must_use]
    pub fn denied_by(&self) -> Option<usize> {
        self.denied_by
    }

    /// What each limiter said: the admission (since rolled back, if a later one denied), the
    /// denial, and for the limiters after the one that denied, a peek (nothing was charged).
    #[must_use]
    pub fn decisions(&self) -> &[Decision; N] {
        &self.decisions
    }

    /// When denied: the longest wait among the limiters that would deny now, that is the
    /// shortest wait after which every one of them would admit if nothing else happened;
    /// `None` if one of them can never admit the request (or when admitted).
    #[must_use]
    pub fn retry_after(&self) -> Option<Duration> {
        self.denied_by?;
        let mut longest = Duration::ZERO;
        for d in self.decisions.iter().filter(|d| !d.is_allowed()) {
            longest = longest.max(d.retry_after()?);
        }
        Some(longest)
    }

    /// When admitted: the longest delay among the limiters (queueing limiters may delay); the
    /// caller acts after it. Zero when denied.
    #[must_use]
    pub fn delay(&self) -> Duration {
        if self.denied_by.is_some() {
            return Duration::ZERO;
        }
        self.decisions
            .iter()
            .map(Decision::delay)
            .max()
            .unwrap_or_default()
    }
}

/// Admits `n` units on every gate, or on none.
///
/// Gates are charged in the order given, so put the one most likely to deny first (a sold-out
/// stock before a per-user rate) to spare the others a charge and rollback.
///
/// Under any concurrency no limiter in the set admits beyond its own quota: each is charged by
/// its own compare-and-swap and only given back what was provably not spent. A rollback on a
/// key that nobody else touched in between is exact; if another request was admitted on the
/// same GCRA key in between, the rolled-back units stay spent (fail closed) and return with
/// time. nginx with several `limit_req` zones checks the zones first and charges them after,
/// so two concurrent requests can both pass and push a zone past its burst, and a request
/// rejected by a later zone keeps the charges of the earlier ones; here the check is the
/// charge, and a rejection gives back what it took.
///
/// # Examples
///
/// ```
/// use cellgate::{check_all, KeyedLimiter, Limiter, Quota};
/// use cellgate::clock::ManualClock;
///
/// let clock = ManualClock::new();
/// let per_user = KeyedLimiter::<u64>::gcra(Quota::per_minute(5)).clock(clock.clone()).build()?;
/// let stock = KeyedLimiter::<u32>::stock(1).build()?;
/// let global = Limiter::gcra(Quota::per_second(1_000)).clock(clock.clone()).build()?;
///
/// // User 7 buys the last unit of SKU 42.
/// let d = check_all([(&stock.gate(&42), 1), (&per_user.gate(&7), 1), (&global, 1)]);
/// assert!(d.is_allowed());
/// // User 8 is too late: the stock says no, and neither user 8's budget nor the global one pays.
/// let d = check_all([(&stock.gate(&42), 1), (&per_user.gate(&8), 1), (&global, 1)]);
/// assert_eq!(d.denied_by(), Some(0));
/// assert_eq!(per_user.peek(&8).remaining(), 5);
/// assert_eq!(global.peek().remaining(), 999);
/// # Ok::<(), cellgate::ConfigError>(())
/// ```
pub fn check_all<const N: usize>(gates: [(&dyn Gate, u32); N]) -> MultiDecision<N> {
    let mut decisions = [Decision::NONE; N];
    let denied_by = check_all_in(&gates, &mut decisions);
    MultiDecision {
        decisions,
        denied_by,
    }
}

/// [`check_all`] for a number of gates known only at run time (an HTTP layer's policies):
/// admits `n` units on every gate or on none, writes what each said into `decisions` (as
/// [`MultiDecision::decisions`]) and returns the index of the gate that denied, `None` when
/// all admitted.
///
/// `decisions` must be at least as long as `gates` (extra entries are left as they are); with
/// fewer, the gates beyond it are still charged and rolled back alike, only their decisions
/// are not written.
///
/// # Examples
///
/// ```
/// use cellgate::{check_all_in, Decision, Gate, Limiter, Quota};
///
/// let a = Limiter::gcra(Quota::per_second(5)).build()?;
/// let b = Limiter::stock(0).build()?;
/// let gates: Vec<(&dyn Gate, u32)> = vec![(&a, 1), (&b, 1)];
/// let mut decisions = vec![Decision::NONE; gates.len()];
/// assert_eq!(check_all_in(&gates, &mut decisions), Some(1));
/// assert_eq!(a.peek().remaining(), 5); // rolled back
/// # Ok::<(), cellgate::ConfigError>(())
/// ```
pub fn check_all_in(gates: &[(&dyn Gate, u32)], decisions: &mut [Decision]) -> Option<usize> {
    let mut taken: Vec<Reservation> = Vec::with_capacity(gates.len());
    let mut denied_by = None;
    for (i, (gate, n)) in gates.iter().enumerate() {
        let r = gate.charge(*n);
        let allowed = r.is_allowed();
        taken.push(r);
        if !allowed {
            denied_by = Some(i);
            break;
        }
    }
    // The gates after a denial are only looked at, so that the caller learns the longest wait.
    for (i, (gate, n)) in gates.iter().enumerate() {
        if let Some(slot) = decisions.get_mut(i) {
            *slot = match taken.get(i) {
                Some(r) => r.decision(),
                None => gate.peek_n(*n),
            };
        }
    }
    if denied_by.is_some() {
        for (i, r) in taken.into_iter().enumerate().rev() {
            gates[i].0.cancel(r);
        }
    }
    denied_by
}
