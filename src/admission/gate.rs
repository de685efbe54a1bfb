//! All-or-nothing admission across several limiters: a per-user limit AND a per-SKU stock AND a
//! global rate, where a "no" from any of them must not burn the others' capacity.
//!
//! [`check_all`] charges each `(gate, n)` in order with the same atomic check-and-charge a
//! plain check does. If one denies, the charges already made are cancelled in reverse order
//! (see [`Reservation`]), and every limiter ends up holding exactly what was admitted, under
//! any concurrency: a rolled-back charge consumes nothing.
//!
//! * Window counters and stocks take the units off again (the count or stock they were taken
//!   from, whatever was admitted since).
//! * GCRA gives back the part of the charge's `n·T` that the clock has not eaten since the
//!   charge, whatever was admitted in between (on a frozen clock all of it): an admission that
//!   did not happen leaves the ceiling `burst + elapsed/T` over what was really admitted (the
//!   argument is on the GCRA cancel, in the crate's `algorithm::gcra` module). One exception
//!   fails closed: while a queued admission is waiting to act (a quota with a queue, or a
//!   reservation ahead in time), only the last place in the schedule can be freed, so a
//!   rolled-back charge behind others keeps its units until they come back with time.
//! * Each limiter is only ever charged by its own compare-and-swap, so **no limiter in the
//!   set ever admits beyond its own quota**, not even for an instant.
//!
//! nginx with several `limit_req` zones works differently (`ngx_http_limit_req_handler`): it
//! looks the zones up without charging them (the last one excepted: its lookup charges when it
//! passes), and once every zone has passed it charges the earlier ones, without checking them
//! again. A request that any zone rejects charges nothing anywhere; but two requests that pass
//! the lookups at the same time are both charged, so a zone can go past its burst under
//! concurrency. Here the check is the charge, and a rejection gives back what it took.

use crate::admission::reservation::Reservation;
use crate::decision::Decision;
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

    /// What each limiter said. Admitted: each limiter's admission. Denied (nothing of this
    /// request is charged anywhere): the denial of the limiter that denied; for the limiters
    /// before it, a peek of zero units taken after the rollback (`remaining` is what each holds
    /// now); for the limiters after it, a peek of their units (they were never charged; a
    /// denial there tells [`retry_after`](Self::retry_after) its wait).
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
/// Under any concurrency no limiter in the set admits beyond its own quota (each is charged by
/// its own compare-and-swap), and a denied request consumes nothing: every limiter ends up
/// holding exactly what was admitted, whatever was admitted on the same keys in between. The
/// one exception fails closed: a GCRA key with admissions still waiting in its queue frees
/// only its last place (see [`Reservation`]). nginx with several `limit_req` zones charges nothing for a request that
/// a zone rejects too, but it checks the zones first and charges them after, so two
/// concurrent requests can both pass and push a zone past its burst; here the check is the
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
/// assert_eq!(decisions[0].remaining(), 5); // and reported after the rollback
/// # Ok::<(), cellgate::ConfigError>(())
/// ```
pub fn check_all_in(gates: &[(&dyn Gate, u32)], decisions: &mut [Decision]) -> Option<usize> {
    // The reservations live on the stack for the usual handful of gates: a heap allocation
    // per call would cost more than the charges themselves.
    const INLINE: usize = 8;
    if gates.len() <= INLINE {
        let mut taken: [Option<Reservation>; INLINE] = [const { None }; INLINE];
        admit(gates, decisions, &mut taken[..gates.len()])
    } else {
        let mut taken = vec![None; gates.len()];
        admit(gates, decisions, &mut taken)
    }
}

/// [`check_all_in`] that also hands back what was admitted: when every gate admits, `taken[i]`
/// holds gate `i`'s reservation, so that the caller can give the units back later with
/// [`Gate::cancel`], exactly as a rollback would (a later check of the same request that
/// denies: an HTTP layer nested in another). When one denies, the others are rolled back as
/// in `check_all_in` and `taken` holds nothing to cancel.
///
/// `taken` must be at least as long as `gates`; with fewer, nothing is charged and the first
/// gate is reported as denying (a caller's mistake, never a panic).
///
/// # Examples
///
/// ```
/// use cellgate::{check_all_reserving, Decision, Gate, Limiter, Quota};
///
/// let a = Limiter::gcra(Quota::per_second(5)).build()?;
/// let b = Limiter::gcra(Quota::per_second(5)).build()?;
/// let gates: Vec<(&dyn Gate, u32)> = vec![(&a, 2), (&b, 1)];
/// let mut decisions = vec![Decision::NONE; 2];
/// let mut taken = vec![None; 2];
/// assert_eq!(check_all_reserving(&gates, &mut decisions, &mut taken), None);
/// // Later, something else refused the request: give both charges back.
/// for ((gate, _), r) in gates.iter().zip(&mut taken) {
///     if let Some(r) = r.take() {
///         gate.cancel(r);
///     }
/// }
/// assert_eq!((a.peek().remaining(), b.peek().remaining()), (5, 5));
/// # Ok::<(), cellgate::ConfigError>(())
/// ```
pub fn check_all_reserving(
    gates: &[(&dyn Gate, u32)],
    decisions: &mut [Decision],
    taken: &mut [Option<Reservation>],
) -> Option<usize> {
    let Some(taken) = taken.get_mut(..gates.len()) else {
        return Some(0);
    };
    taken.fill(None);
    admit(gates, decisions, taken)
}

/// [`check_all_in`] with room for one reservation per gate in `taken`.
fn admit(
    gates: &[(&dyn Gate, u32)],
    decisions: &mut [Decision],
    taken: &mut [Option<Reservation>],
) -> Option<usize> {
    let mut denied_by = None;
    for (i, (gate, n)) in gates.iter().enumerate() {
        let r = gate.charge(*n);
        let allowed = r.is_allowed();
        if let Some(slot) = decisions.get_mut(i) {
            *slot = r.decision();
        }
        taken[i] = Some(r);
        if !allowed {
            denied_by = Some(i);
            break;
        }
    }
    let denied = denied_by?;
    for i in (0..denied).rev() {
        if let Some(r) = taken[i].take() {
            gates[i].0.cancel(r);
        }
    }
    // Every other gate is looked at after the rollback: the rolled-back ones (before the
    // denial) with zero units, so that their `remaining` is what they hold now; the ones after
    // it with their units, so that the caller learns the longest wait.
    for (i, (gate, n)) in gates.iter().enumerate() {
        let Some(slot) = decisions.get_mut(i) else {
            break;
        };
        if i < denied {
            *slot = gate.peek_n(0);
        } else if i > denied {
            *slot = gate.peek_n(*n);
        }
    }
    denied_by
}
