//! What a check tells the caller.

use std::num::NonZeroU64;
use std::time::Duration;

/// The outcome of one check: whether it was admitted, and everything a caller needs to tell
/// its client (the five fields of redis-cell's `CL.THROTTLE`, with nanosecond durations).
///
/// `Decision` is `Copy` and computes `remaining` lazily, so a caller that only looks at
/// [`is_allowed`](Decision::is_allowed) pays for nothing else.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use cellgate::{Limiter, Quota};
/// use cellgate::clock::ManualClock;
///
/// let clock = ManualClock::new();
/// let limiter = Limiter::gcra(Quota::per_second(2)).clock(clock.clone()).build()?;
/// let d = limiter.check();
/// assert!(d.is_allowed());
/// assert_eq!((d.limit(), d.remaining()), (2, 1));
/// assert_eq!(d.reset_after(), Duration::from_millis(500));
///
/// limiter.check();
/// let d = limiter.check();
/// assert!(!d.is_allowed());
/// assert_eq!(d.retry_after(), Some(Duration::from_millis(500)));
/// # Ok::<(), cellgate::ConfigError>(())
/// ```
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Decision {
    /// `limit | (allowed as u64) << 32 | denial code << 33`. One 8-byte field rather than a `u32` and a `bool`:
    /// every field of a decision is then written and copied as one 8-byte word, which keeps
    /// the CPU's store-to-load forwarding working when a decision is moved (a `bool` beside a
    /// `u32` made the direct check about twice as slow).
    verdict: u64,
    /// `remaining = min(slack / unit, u32::MAX)`: GCRA keeps its headroom in nanoseconds
    /// (`unit` = the emission interval), counters keep it in requests (`unit` = 1).
    slack: u64,
    unit: NonZeroU64,
    /// Denied: the wait until a retry would be admitted, in nanoseconds (`NO_RETRY` stands for
    /// `None`). Allowed: the delay the caller must honour before acting (0 for an immediate
    /// admission; only queueing limiters and reservations delay).
    retry_ns: u64,
    reset_ns: u64,
}

const NO_RETRY: u64 = u64::MAX;

/// `d` in nanoseconds, `u64::MAX` beyond.
const fn saturating_ns(d: Duration) -> u64 {
    let ns = d.as_nanos();
    if ns > u64::MAX as u128 {
        u64::MAX
    } else {
        ns as u64
    }
}

const ALLOWED: u64 = 1 << 32;

/// Where a denial's reason sits in `verdict` (0: none, i.e. admitted; otherwise
/// `Denial as u64 + 1`).
const DENIAL_SHIFT: u32 = 33;
const DENIAL_MASK: u64 = 0b111 << DENIAL_SHIFT;

/// `reset_ns` of a state that never returns to fresh by itself (a stock once sold from).
pub(crate) const NEVER_NS: u64 = u64::MAX;

/// Why a request was denied: what would make it pass.
///
/// # Examples
///
/// ```
/// use cellgate::{Denial, KeyedLimiter, Limiter, Quota, WhenFull};
///
/// let rate = Limiter::gcra(Quota::per_minute(1)).build()?;
/// rate.check();
/// assert_eq!(rate.check().denial(), Some(Denial::RateLimited)); // retry_after() is Some
/// assert_eq!(rate.check_n(2).denial(), Some(Denial::NeverFits)); // 2 > the burst of 1
///
/// let stock = Limiter::stock(1).build()?;
/// stock.check();
/// let d = stock.check();
/// assert_eq!(d.denial(), Some(Denial::SoldOut)); // only a restock helps
/// assert_eq!(d.resets_after(), None); // never by itself
///
/// let users = KeyedLimiter::<u32>::gcra(Quota::per_minute(5))
///     .max_keys(1)
///     .when_full(WhenFull::DenyNew)
///     .build()?;
/// users.check(&1);
/// assert_eq!(users.check(&2).denial(), Some(Denial::StoreFull));
/// assert_eq!(users.check(&1).denial(), None); // admitted
/// # Ok::<(), cellgate::ConfigError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Denial {
    /// Over the rate or window limit for now: waiting helps, and
    /// [`Decision::retry_after`] says how long.
    RateLimited,
    /// The request can never be admitted as it is: more units than the limit (or than one
    /// stripe of a [`StripedLimiter`](crate::StripedLimiter) holds, or past the clock's
    /// representable range). Ask for fewer.
    NeverFits,
    /// A stock that holds fewer units than asked for: time brings nothing back; only a restock
    /// (or a refund) does.
    SoldOut,
    /// A new key that a full store refused ([`WhenFull::DenyNew`](crate::WhenFull), or a
    /// sliding log at its `max_keys`): it is admitted once keys go idle and are reclaimed.
    StoreFull,
}

impl Denial {
    const ALL: [Denial; 4] = [
        Denial::RateLimited,
        Denial::NeverFits,
        Denial::SoldOut,
        Denial::StoreFull,
    ];

    #[inline(always)]
    const fn code(self) -> u64 {
        (self as u64 + 1) << DENIAL_SHIFT
    }
}

#[inline(always)]
const fn verdict(allowed: bool, limit: u32) -> u64 {
    (if allowed { ALLOWED } else { 0 }) | limit as u64
}

impl std::fmt::Debug for Decision {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Decision")
            .field("allowed", &self.is_allowed())
            .field("limit", &self.limit())
            .field("remaining", &self.remaining())
            .field("denial", &self.denial())
            .field("retry_after", &self.retry_after())
            .field("delay", &self.delay())
            .field("reset_after", &self.reset_after())
            .finish()
    }
}

impl Decision {
    /// A placeholder: denied, limit 0, no retry. Fills arrays before a check writes them
    /// (see [`check_all_in`](crate::check_all_in)); no limiter returns it.
    pub const NONE: Decision = Decision::deny(0, 0, NonZeroU64::MIN, None, 0);

    /// An admission decided outside this crate, for a [`AnyLimiter`](crate::AnyLimiter)
    /// implemented elsewhere (a fleet limiter's check answered by Redis): `limit`,
    /// `remaining` units left, and `reset_after` until the key is back to a fresh state.
    ///
    /// ```
    /// use std::time::Duration;
    /// use cellgate::Decision;
    ///
    /// let d = Decision::admitted(10, 7, Duration::from_secs(3));
    /// assert!(d.is_allowed());
    /// assert_eq!((d.limit(), d.remaining(), d.reset_after()), (10, 7, Duration::from_secs(3)));
    /// ```
    #[must_use]
    pub const fn admitted(limit: u32, remaining: u32, reset_after: Duration) -> Self {
        Self::allow(
            limit,
            remaining as u64,
            NonZeroU64::MIN,
            saturating_ns(reset_after),
        )
    }

    /// A denial decided outside this crate (see [`admitted`](Self::admitted)): `retry_after`
    /// is the wait after which the same request would be admitted, `None` when waiting
    /// cannot help.
    ///
    /// ```
    /// use std::time::Duration;
    /// use cellgate::Decision;
    ///
    /// let d = Decision::denied(10, Some(Duration::from_millis(250)), Duration::from_secs(1));
    /// assert!(!d.is_allowed());
    /// assert_eq!((d.remaining(), d.retry_after()), (0, Some(Duration::from_millis(250))));
    /// assert_eq!(Decision::denied(10, None, Duration::ZERO).retry_after(), None);
    /// ```
    #[must_use]
    pub const fn denied(limit: u32, retry_after: Option<Duration>, reset_after: Duration) -> Self {
        let retry_ns = match retry_after {
            Some(d) => Some(saturating_ns(d)),
            None => None,
        };
        Self::deny(
            limit,
            0,
            NonZeroU64::MIN,
            retry_ns,
            saturating_ns(reset_after),
        )
    }

    /// An admitted request, to act on at once.
    #[inline]
    pub(crate) const fn allow(limit: u32, slack: u64, unit: NonZeroU64, reset_ns: u64) -> Self {
        Self::allow_after(limit, slack, unit, 0, reset_ns)
    }

    /// An admitted request whose caller must wait `delay_ns` before acting (a place in a queue).
    #[inline]
    pub(crate) const fn allow_after(
        limit: u32,
        slack: u64,
        unit: NonZeroU64,
        delay_ns: u64,
        reset_ns: u64,
    ) -> Self {
        Self {
            verdict: verdict(true, limit),
            slack,
            unit,
            retry_ns: delay_ns,
            reset_ns,
        }
    }

    /// A denied request; `retry_ns` is `None` when waiting cannot help.
    #[inline]
    pub(crate) const fn deny(
        limit: u32,
        slack: u64,
        unit: NonZeroU64,
        retry_ns: Option<u64>,
        reset_ns: u64,
    ) -> Self {
        let why = match retry_ns {
            Some(_) => Denial::RateLimited,
            None => Denial::NeverFits,
        };
        Self {
            verdict: verdict(false, limit) | why.code(),
            slack,
            unit,
            retry_ns: match retry_ns {
                // `NO_RETRY` stands for None: a wait of exactly u64::MAX ns (only possible at the
                // very edge of the clock's range) is reported 1 ns shorter.
                Some(NO_RETRY) => NO_RETRY - 1,
                Some(ns) => ns,
                None => NO_RETRY,
            },
            reset_ns,
        }
    }

    /// The same decision with `limit` as its [`limit`](Self::limit) (a striped limiter reports
    /// its whole limit, not the deciding stripe's share).
    #[inline(always)]
    pub(crate) const fn with_limit(self, limit: u32) -> Self {
        Self {
            verdict: (self.verdict & (ALLOWED | DENIAL_MASK)) | limit as u64,
            ..self
        }
    }

    /// The same denial with `why` as its reason (a denial's default reason follows its
    /// `retry_after`: a wait means [`Denial::RateLimited`], none [`Denial::NeverFits`]). No
    /// effect on an admission.
    #[inline(always)]
    pub(crate) const fn because(self, why: Denial) -> Self {
        if self.is_allowed() {
            return self;
        }
        Self {
            verdict: (self.verdict & !DENIAL_MASK) | why.code(),
            ..self
        }
    }

    /// Why the request was denied; `None` when it was admitted.
    ///
    /// [`Denial::RateLimited`] exactly when [`retry_after`](Self::retry_after) is `Some`; every
    /// other reason means no wait alone helps. See [`Denial`] for an example.
    #[inline]
    #[must_use]
    pub const fn denial(&self) -> Option<Denial> {
        let code = (self.verdict & DENIAL_MASK) >> DENIAL_SHIFT;
        if self.is_allowed() || code == 0 {
            return None;
        }
        // Codes are only ever written from a `Denial`, so `code - 1` indexes `ALL`.
        let i = (code - 1) as usize;
        if i < Denial::ALL.len() {
            Some(Denial::ALL[i])
        } else {
            None
        }
    }

    /// Whether the request was admitted (and its units consumed).
    #[inline]
    #[must_use]
    pub const fn is_allowed(&self) -> bool {
        self.verdict & ALLOWED != 0
    }

    /// The most unit requests the key can ever hold at once: the burst (GCRA) or the window
    /// limit.
    #[inline]
    #[must_use]
    pub const fn limit(&self) -> u32 {
        self.verdict as u32
    }

    /// How many more unit requests would be admitted right now, after this decision.
    ///
    /// At most [`limit`](Self::limit), except for a stock that an operator restocked above its
    /// configured level (then at most `u32::MAX`).
    #[inline]
    #[must_use]
    pub const fn remaining(&self) -> u32 {
        let r = self.slack / self.unit.get();
        if r > u32::MAX as u64 {
            u32::MAX
        } else {
            r as u32
        }
    }

    /// When denied and waiting helps: how long until the same request would be admitted if no
    /// other request came. `None` when allowed, or when the request can never fit (`n` larger
    /// than the limit).
    #[inline]
    #[must_use]
    pub const fn retry_after(&self) -> Option<Duration> {
        match self.retry_after_ns() {
            Some(ns) => Some(Duration::from_nanos(ns)),
            None => None,
        }
    }

    /// [`retry_after`](Self::retry_after) in nanoseconds.
    #[inline]
    #[must_use]
    pub const fn retry_after_ns(&self) -> Option<u64> {
        if self.is_allowed() || self.retry_ns == NO_RETRY {
            None
        } else {
            Some(self.retry_ns)
        }
    }

    /// When admitted with a delay (a queueing limiter, a reservation, a warm-up limiter): how
    /// long the caller must wait before acting on it, as nginx delays a request within `burst`.
    /// Zero for an immediate admission and for every denial.
    ///
    /// ```
    /// use std::time::Duration;
    /// use cellgate::{Limiter, Quota};
    /// use cellgate::clock::ManualClock;
    ///
    /// // One request every 100 ms, and up to two more queued behind it.
    /// let q = Quota::with_interval(Duration::from_millis(100)).with_queue(2);
    /// let l = Limiter::gcra(q).clock(ManualClock::new()).build()?;
    /// assert_eq!(l.check().delay(), Duration::ZERO);
    /// assert_eq!(l.check().delay(), Duration::from_millis(100));
    /// assert_eq!(l.check().delay(), Duration::from_millis(200));
    /// assert!(!l.check().is_allowed()); // the queue is full
    /// # Ok::<(), cellgate::ConfigError>(())
    /// ```
    #[inline]
    #[must_use]
    pub const fn delay(&self) -> Duration {
        Duration::from_nanos(self.delay_ns())
    }

    /// [`delay`](Self::delay) in nanoseconds.
    #[inline]
    #[must_use]
    pub const fn delay_ns(&self) -> u64 {
        if self.is_allowed() {
            self.retry_ns
        } else {
            0
        }
    }

    /// How long until the key is back to a fresh state (full burst available) if no other
    /// request came.
    ///
    /// A state that never returns to fresh by itself (a stock once anything was taken from it)
    /// reports `u64::MAX` ns here (about 584 years), kept for compatibility; prefer
    /// [`resets_after`](Self::resets_after), which says `None` then.
    #[inline]
    #[must_use]
    pub const fn reset_after(&self) -> Duration {
        Duration::from_nanos(self.reset_ns)
    }

    /// How long until the key is back to a fresh state if no other request came; `None` when
    /// it never is by itself (a stock that was sold from: only a restock or refund brings it
    /// back).
    ///
    /// ```
    /// use std::time::Duration;
    /// use cellgate::{Limiter, Quota};
    /// use cellgate::clock::ManualClock;
    /// let rate = Limiter::gcra(Quota::per_second(2)).clock(ManualClock::new()).build()?;
    /// assert_eq!(rate.check().resets_after(), Some(Duration::from_millis(500)));
    /// let stock = Limiter::stock(3).build()?;
    /// assert_eq!(stock.peek().resets_after(), Some(Duration::ZERO)); // untouched
    /// assert_eq!(stock.check().resets_after(), None);
    /// # Ok::<(), cellgate::ConfigError>(())
    /// ```
    #[inline]
    #[must_use]
    pub const fn resets_after(&self) -> Option<Duration> {
        if self.reset_ns == NEVER_NS {
            None
        } else {
            Some(Duration::from_nanos(self.reset_ns))
        }
    }

    /// [`reset_after`](Self::reset_after) in nanoseconds.
    #[inline]
    #[must_use]
    pub const fn reset_after_ns(&self) -> u64 {
        self.reset_ns
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ONE: NonZeroU64 = match NonZeroU64::new(1) {
        Some(v) => v,
        None => unreachable!(),
    };

    #[test]
    fn remaining_divides_and_saturates() {
        let d = Decision::allow(3, 2, ONE, 0);
        assert_eq!(d.remaining(), 2);
        let d = Decision::allow(3, 29, NonZeroU64::new(10).unwrap(), 0);
        assert_eq!(d.remaining(), 2);
        let d = Decision::allow(1, u64::MAX, ONE, 0);
        assert_eq!(d.remaining(), u32::MAX);
    }

    #[test]
    fn delay_only_when_admitted() {
        assert_eq!(Decision::allow(1, 0, ONE, 5).delay_ns(), 0);
        let d = Decision::allow_after(1, 0, ONE, 9, 5);
        assert_eq!(d.delay_ns(), 9);
        assert_eq!(d.retry_after(), None);
        assert_eq!(Decision::deny(1, 0, ONE, Some(7), 5).delay_ns(), 0);
    }

    #[test]
    fn retry_after_none_when_allowed_or_hopeless() {
        assert_eq!(Decision::allow(1, 0, ONE, 5).retry_after(), None);
        assert_eq!(Decision::deny(1, 0, ONE, None, 5).retry_after(), None);
        assert_eq!(
            Decision::deny(1, 0, ONE, Some(7), 5).retry_after(),
            Some(Duration::from_nanos(7))
        );
        assert_eq!(
            Decision::deny(1, 0, ONE, Some(u64::MAX), 5).retry_after_ns(),
            Some(u64::MAX - 1)
        );
    }
}
