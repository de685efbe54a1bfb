//! Reservations: admissions that hold a place in a key's schedule and can be given back.

use std::time::Duration;

use crate::decision::Decision;

/// The outcome of a `reserve`: a [`Decision`] that may carry a delay, plus what is needed to
/// give its units back with `cancel`.
///
/// An admitted reservation has taken its place in the key's schedule (first come, first
/// served): the caller must wait [`delay`](Self::delay) before acting. If the work will not
/// happen after all, pass the reservation to the limiter's `cancel` (for example
/// [`KeyedLimiter::cancel`](crate::KeyedLimiter::cancel)): it gives back what is provably
/// still unspent and never more, so cancelling can never let a key exceed its quota.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use cellgate::{Limiter, Quota};
/// use cellgate::clock::ManualClock;
///
/// let l = Limiter::gcra(Quota::with_interval(Duration::from_secs(1)))
///     .clock(ManualClock::new())
///     .build()?;
/// let first = l.reserve(1, Duration::ZERO);
/// let second = l.reserve(1, Duration::from_secs(5));
/// assert_eq!((first.is_allowed(), first.delay()), (true, Duration::ZERO));
/// assert_eq!((second.is_allowed(), second.delay()), (true, Duration::from_secs(1)));
/// // Too long a wait: denied, nothing consumed.
/// assert!(!l.reserve(1, Duration::from_millis(1500)).is_allowed());
/// // The second caller gives up: its place is free again.
/// assert!(l.cancel(second));
/// assert_eq!(l.reserve(1, Duration::from_secs(5)).delay(), Duration::from_secs(1));
/// # Ok::<(), cellgate::ConfigError>(())
/// ```
///
/// A `Reservation` is not `Copy`: `cancel` takes it by value, so it cannot be given back twice
/// by accident. (It is `Clone`, for bookkeeping; cancelling a clone as well as the original
/// gives counters' units back twice.)
#[derive(Debug, Clone, PartialEq, Eq)]
#[must_use = "an admitted reservation holds capacity: act after its delay, or cancel it"]
pub struct Reservation {
    decision: Decision,
    pub(crate) n: u32,
    /// The word before and after the admission (equal when nothing was admitted).
    pub(crate) before: u64,
    pub(crate) after: u64,
    /// The stripe of a [`StripedLimiter`](crate::StripedLimiter) whose cell took the units (0
    /// for every other limiter).
    pub(crate) stripe: usize,
}

impl Reservation {
    pub(crate) fn new(decision: Decision, n: u32, before: u64, after: Option<u64>) -> Self {
        Self {
            decision,
            n,
            before,
            after: after.unwrap_or(before),
            stripe: 0,
        }
    }

    /// A reservation that holds nothing to give back: `decision` as it is, and a
    /// [`cancel`](crate::AnyLimiter::cancel) of it returns `false`. For
    /// [`AnyLimiter`](crate::AnyLimiter) implementations outside this crate whose admissions
    /// cannot be taken back (a fleet limiter's check decided in Redis), or that refuse a
    /// request without a check.
    ///
    /// ```
    /// use cellgate::{Decision, Limiter, Reservation};
    ///
    /// let r = Reservation::unheld(Decision::NONE);
    /// assert!(!r.is_allowed());
    /// assert_eq!(r.units(), 0);
    /// let l = Limiter::stock(1).build()?;
    /// assert!(!l.cancel(r)); // nothing to give back
    /// # Ok::<(), cellgate::ConfigError>(())
    /// ```
    pub fn unheld(decision: Decision) -> Self {
        Self::new(decision, 0, 0, None)
    }

    /// The same reservation, taken from stripe `stripe`.
    pub(crate) fn on_stripe(self, stripe: usize) -> Self {
        Self { stripe, ..self }
    }

    /// The decision: allowed (with a delay) or denied, limit, remaining, retry_after,
    /// reset_after.
    #[must_use]
    pub fn decision(&self) -> Decision {
        self.decision
    }

    /// Whether the units were reserved.
    #[must_use]
    pub fn is_allowed(&self) -> bool {
        self.decision.is_allowed()
    }

    /// How long to wait before acting on an admitted reservation (zero for a denied one).
    #[must_use]
    pub fn delay(&self) -> Duration {
        self.decision.delay()
    }

    /// Units reserved (0 if denied).
    #[must_use]
    pub fn units(&self) -> u32 {
        if self.holds() {
            self.n
        } else {
            0
        }
    }

    /// The clock reading the admission was made at, for GCRA (whose decision's `reset_after`
    /// is the new TAT minus that reading); meaningless for other algorithms.
    pub(crate) fn admitted_at(&self) -> u64 {
        self.after.saturating_sub(self.decision.reset_after_ns())
    }

    /// Whether cancelling could give anything back.
    pub(crate) fn holds(&self) -> bool {
        self.decision.is_allowed() && self.n > 0 && self.before != self.after
    }
}
