//! All-or-nothing admission across several limiters: a per-user limit AND a per-SKU stock AND a
//! global rate, where a "no" from any of them must not burn the others' capacity.
//!
//! [`check_all`] charges each `(limiter, n)` in order with the same atomic check-and-charge a
//! plain check does. It takes limiters of no key, `&dyn AnyLimiter` (a direct limiter, a
//! striped one, or one key of a keyed limiter written as the pair `(&limiter, &key)`, see
//! [`AnyLimiter`]), so that one call mixes any key and clock types: the array lives on the
//! caller's stack and nothing is boxed. If one denies, the charges already made are cancelled in reverse order
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

use crate::any_limiter::AnyLimiter;
use crate::decision::Decision;
use crate::reservation::Reservation;
use std::time::Duration;

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
    /// denial there tells [`retry_after`](Self::retry_after) its wait). The peeks are taken at
    /// one instant, after the rollback.
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

/// Admits `n` units on every limiter, or on none.
///
/// Each entry is a limiter of no key and its units: a [`Limiter`](crate::Limiter), a
/// [`StripedLimiter`](crate::StripedLimiter), or one key of a keyed limiter as the pair
/// `&(&limiter, &key)` ([`KeyedLimiter::gate`](crate::KeyedLimiter::gate) writes it), any
/// [`AnyLimiter`] in short. The array is the caller's, on its stack: nothing is allocated.
///
/// Limiters are charged in the order given, so put the one most likely to deny first (a sold-out
/// stock before a per-user rate) to spare the others a charge and rollback. They are charged at
/// one instant: the default clock is read once for all the charges (see
/// [the clock's docs](crate::clock#one-reading-per-request)), where checking them one by one
/// reads it once per limiter.
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
/// let d = check_all([(&(&stock, &42), 1), (&(&per_user, &7), 1), (&global, 1)]);
/// assert!(d.is_allowed());
/// // User 8 is too late: the stock says no, and neither user 8's budget nor the global one pays.
/// let d = check_all([(&stock.gate(&42), 1), (&per_user.gate(&8), 1), (&global, 1)]);
/// assert_eq!(d.denied_by(), Some(0));
/// assert_eq!(per_user.peek(&8).remaining(), 5);
/// assert_eq!(global.peek().remaining(), 999);
/// # Ok::<(), cellgate::ConfigError>(())
/// ```
pub fn check_all<const N: usize>(limiters: [(&dyn AnyLimiter, u32); N]) -> MultiDecision<N> {
    let mut decisions = [Decision::NONE; N];
    // As `check_all_in`, with room for exactly `N` reservations on the stack: nothing more to
    // clear than the request's own limiters.
    let mut taken: [Option<Reservation>; N] = [const { None }; N];
    let denied_by = admit(&limiters, &(), &mut decisions, &mut taken);
    MultiDecision {
        decisions,
        denied_by,
    }
}

/// [`check_all`] for a number of limiters known only at run time (an HTTP layer's policies):
/// admits `n` units on every limiter or on none, writes what each said into `decisions` (as
/// [`MultiDecision::decisions`]) and returns the index of the limiter that denied, `None` when
/// all admitted. Up to 8 limiters allocate nothing.
///
/// `decisions` must be at least as long as `limiters` (extra entries are left as they are);
/// with fewer, the limiters beyond it are still charged and rolled back alike, only their
/// decisions are not written.
///
/// # Examples
///
/// ```
/// use cellgate::{check_all_in, AnyLimiter, Decision, Limiter, Quota};
///
/// let a = Limiter::gcra(Quota::per_second(5)).build()?;
/// let b = Limiter::stock(0).build()?;
/// let limiters: Vec<(&dyn AnyLimiter, u32)> = vec![(&a, 1), (&b, 1)];
/// let mut decisions = vec![Decision::NONE; limiters.len()];
/// assert_eq!(check_all_in(&limiters, &mut decisions), Some(1));
/// assert_eq!(a.peek().remaining(), 5); // rolled back
/// assert_eq!(decisions[0].remaining(), 5); // and reported after the rollback
/// # Ok::<(), cellgate::ConfigError>(())
/// ```
pub fn check_all_in(
    limiters: &[(&dyn AnyLimiter, u32)],
    decisions: &mut [Decision],
) -> Option<usize> {
    // The reservations live on the stack for the usual handful of limiters: a heap
    // allocation per call would cost more than the charges themselves.
    const INLINE: usize = 8;
    if limiters.len() <= INLINE {
        let mut taken: [Option<Reservation>; INLINE] = [const { None }; INLINE];
        admit(limiters, &(), decisions, &mut taken[..limiters.len()])
    } else {
        let mut taken = vec![None; limiters.len()];
        admit(limiters, &(), decisions, &mut taken)
    }
}

/// [`check_all_in`] on limiters that all take the same `key`, which also hands back what was
/// admitted: when every limiter admits, `taken[i]` holds limiter `i`'s reservation, so that
/// the caller can give the units back later with [`AnyLimiter::cancel`], exactly as a
/// rollback would (a later check of the same request that denies: an HTTP layer nested in
/// another). When one denies, the others are rolled back as in `check_all_in` and `taken`
/// holds nothing to cancel.
///
/// The key is shared: `&()` for limiters of no key (as [`check_all`] takes them), a user id
/// for several limits on one user (per second and per day), a request head for an HTTP
/// layer whose limits each find their own key in it. Nothing is allocated: `decisions` and
/// `taken` are the caller's.
///
/// `taken` must be at least as long as `limiters`; with fewer, nothing is charged and the
/// first limiter is reported as denying (a caller's mistake, never a panic).
///
/// # Examples
///
/// ```
/// use cellgate::{check_all_reserving, AnyLimiter, Decision, KeyedLimiter, Quota};
///
/// let per_second = KeyedLimiter::<String>::gcra(Quota::per_second(5)).build()?;
/// let per_day = KeyedLimiter::<String>::gcra(Quota::per_hour(100).with_burst(100)).build()?;
/// let limiters: [(&dyn AnyLimiter<str>, u32); 2] = [(&per_second, 2), (&per_day, 1)];
/// let mut decisions = [Decision::NONE; 2];
/// let mut taken = [None, None];
/// assert_eq!(check_all_reserving(&limiters, "alice", &mut decisions, &mut taken), None);
/// // Later, something else refused the request: give both charges back.
/// for ((limiter, _), r) in limiters.iter().zip(&mut taken) {
///     if let Some(r) = r.take() {
///         limiter.cancel("alice", r);
///     }
/// }
/// assert_eq!((per_second.peek("alice").remaining(), per_day.peek("alice").remaining()), (5, 100));
/// # Ok::<(), cellgate::ConfigError>(())
/// ```
pub fn check_all_reserving<K: ?Sized>(
    limiters: &[(&dyn AnyLimiter<K>, u32)],
    key: &K,
    decisions: &mut [Decision],
    taken: &mut [Option<Reservation>],
) -> Option<usize> {
    let Some(taken) = taken.get_mut(..limiters.len()) else {
        return Some(0);
    };
    taken.fill(None);
    admit(limiters, key, decisions, taken)
}

/// [`check_all_in`] with room for one reservation per limiter in `taken`.
///
/// Inlined: at a [`check_all`] call site the limiters and their number are known, so the
/// charges are direct calls in an unrolled loop rather than dynamic calls in a loop over a
/// slice. The rollback and report of a denial stay out of line ([`roll_back`]). Always: with
/// a mere `#[inline]`, a program that calls `check_all` for two different numbers of limiters
/// (`examples/measure/probe.rs`; `shapes`, with its 3 and 9) got one shared out-of-line copy,
/// which cost instructions on every limiter it charged.
#[inline(always)]
fn admit<K: ?Sized>(
    limiters: &[(&dyn AnyLimiter<K>, u32)],
    key: &K,
    decisions: &mut [Decision],
    taken: &mut [Option<Reservation>],
) -> Option<usize> {
    // The charges at one clock reading (see `one_reading`); a rollback reads the clock
    // afresh: GCRA gives back only the part of a charge that the clock has not eaten, which
    // needs a `now` no earlier than any check another thread made since the charge.
    let denied = crate::clock::one_reading(|| charge_each(limiters, key, taken));
    match denied {
        Some(i) => roll_back(limiters, key, decisions, taken, i),
        // Every limiter admitted: the decisions are copied once all the charges are made.
        None => {
            for (slot, r) in decisions.iter_mut().zip(taken.iter()) {
                if let Some(r) = r {
                    *slot = r.decision();
                }
            }
        }
    }
    denied
}

/// [`admit`]'s charges, in order, up to the first denial (its index).
#[inline(always)]
fn charge_each<K: ?Sized>(
    limiters: &[(&dyn AnyLimiter<K>, u32)],
    key: &K,
    taken: &mut [Option<Reservation>],
) -> Option<usize> {
    for (i, (limiter, n)) in limiters.iter().enumerate() {
        // The reservation goes straight into its slot (the callee writes it there), and only
        // its verdict is read back now: copying the whole 72 bytes out of a stack slot the
        // callee has just written, with wide loads over its narrow stores, stalls on store
        // forwarding once per limiter.
        if !limiter.charge_into(key, *n, &mut taken[i]) {
            return Some(i);
        }
    }
    None
}

/// [`admit`]'s denial by limiter `denied`: cancels the charges before it, in reverse order,
/// and reports every limiter.
#[inline(never)]
fn roll_back<K: ?Sized>(
    limiters: &[(&dyn AnyLimiter<K>, u32)],
    key: &K,
    decisions: &mut [Decision],
    taken: &mut [Option<Reservation>],
    denied: usize,
) {
    if let (Some(slot), Some(r)) = (decisions.get_mut(denied), &taken[denied]) {
        *slot = r.decision();
    }
    for i in (0..denied).rev() {
        if let Some(r) = taken[i].take() {
            limiters[i].0.cancel(key, r);
        }
    }
    // Every other limiter is looked at after the rollback: the rolled-back ones (before the
    // denial) with zero units, so that their `remaining` is what they hold now; the ones after
    // it with their units, so that the caller learns the longest wait. All at one clock
    // reading, taken after the rollback (a peek writes nothing, so any reading is sound for
    // it; this one is the report's instant): a sold-out rush's denials, which peek every
    // limiter after the stock, pay one clock read rather than one per limiter.
    crate::clock::one_reading(|| {
        for (i, (limiter, n)) in limiters.iter().enumerate() {
            let Some(slot) = decisions.get_mut(i) else {
                break;
            };
            if i < denied {
                *slot = limiter.peek_n(key, 0);
            } else if i > denied {
                *slot = limiter.peek_n(key, *n);
            }
        }
    });
}
