//! The direct limiter: one cell for the whole process (or whatever it guards).

use crossbeam_utils::CachePadded;

use std::time::Duration;

use crate::algorithm::{Algorithm, FixedWindow, Gcra, SlidingWindow, Stock, WarmUp};
use crate::clock::{Clock, DefaultClock};
use crate::decision::Decision;
use crate::error::ConfigError;
use crate::limiter::engine::{Engine, Held};
use crate::limiter::setting::Setting;
use crate::quota::Quota;
use crate::reservation::Reservation;
use crate::sync::cell::Cell;

/// A limiter with a single state: a global rate, one upstream, one tenant.
///
/// Its state is one cache-padded `AtomicU64`, so checks from many threads contend only on that
/// line and never on a neighbour's. Build one with [`Limiter::gcra`].
///
/// # Examples
///
/// ```
/// use cellgate::{Limiter, Quota};
///
/// let global = Limiter::gcra(Quota::per_second(10_000)).build()?;
/// if global.check().is_allowed() {
///     // serve the request
/// }
/// # Ok::<(), cellgate::ConfigError>(())
/// ```
#[derive(Debug)]
pub struct Limiter<C = DefaultClock> {
    cell: CachePadded<Cell>,
    setting: Setting,
    clock: C,
}

/// Configures a [`Limiter`]; finish with [`build`](LimiterBuilder::build).
#[derive(Debug, Clone)]
#[must_use = "a builder does nothing until build() is called"]
pub struct LimiterBuilder<C> {
    algorithm: Result<Algorithm, ConfigError>,
    clock: C,
}

impl Limiter<DefaultClock> {
    /// A GCRA limiter (token bucket / leaky bucket as a meter) for `quota`.
    ///
    /// ```
    /// use cellgate::{Limiter, Quota};
    /// let limiter = Limiter::gcra(Quota::per_second(5).with_burst(2)).build()?;
    /// assert_eq!(limiter.check().limit(), 2);
    /// # Ok::<(), cellgate::ConfigError>(())
    /// ```
    pub fn gcra(quota: Quota) -> LimiterBuilder<DefaultClock> {
        LimiterBuilder::new(quota.gcra_params().map(|p| Algorithm::Gcra(Gcra::new(p))))
    }

    /// A fixed window counter: at most `limit` units in each window `[k*window, (k+1)*window)`.
    /// See [`KeyedLimiter::fixed_window`](crate::KeyedLimiter::fixed_window) for the limits.
    ///
    /// ```
    /// use std::time::Duration;
    /// use cellgate::Limiter;
    /// let l = Limiter::fixed_window(1_000, Duration::from_secs(1)).build()?;
    /// assert_eq!(l.check().remaining(), 999);
    /// # Ok::<(), cellgate::ConfigError>(())
    /// ```
    pub fn fixed_window(limit: u32, window: Duration) -> LimiterBuilder<DefaultClock> {
        LimiterBuilder::new(FixedWindow::new(limit, window).map(Algorithm::FixedWindow))
    }

    /// A sliding window counter (two-window estimate, exact integer arithmetic).
    /// See [`KeyedLimiter::sliding_window`](crate::KeyedLimiter::sliding_window).
    ///
    /// ```
    /// use std::time::Duration;
    /// use cellgate::Limiter;
    /// let l = Limiter::sliding_window(100, Duration::from_secs(60)).build()?;
    /// assert!(l.check_n(100).is_allowed());
    /// assert!(!l.check().is_allowed());
    /// # Ok::<(), cellgate::ConfigError>(())
    /// ```
    pub fn sliding_window(limit: u32, window: Duration) -> LimiterBuilder<DefaultClock> {
        LimiterBuilder::new(SlidingWindow::new(limit, window).map(Algorithm::SlidingWindow))
    }
}

impl Limiter<DefaultClock> {
    /// A stock of `units` that only goes down (flash-sale inventory): exactly `units` are ever
    /// admitted, under any concurrency, until [`restock`](Limiter::restock) or
    /// [`set_stock`](Limiter::set_stock).
    ///
    /// ```
    /// use cellgate::Limiter;
    /// let tickets = Limiter::stock(100).build()?;
    /// assert!(tickets.check_n(100).is_allowed());
    /// assert!(!tickets.check().is_allowed());
    /// # Ok::<(), cellgate::ConfigError>(())
    /// ```
    pub fn stock(units: u32) -> LimiterBuilder<DefaultClock> {
        LimiterBuilder::new(Ok(Algorithm::Stock(Stock::new(units))))
    }
}

impl Limiter<DefaultClock> {
    /// A warm-up limiter (Guava's `SmoothWarmingUp`, cold factor 3): after idling it admits
    /// requests three times slower than `stable`, and speeds up linearly (in permits spent) to
    /// the stable rate over `warm_up` of continuous demand. With the same permit spacing as
    /// Guava's under continuous demand (to 1 µs, Guava's own resolution).
    ///
    /// Like Guava, it admits one request at a time, of any size, whenever the previous ones'
    /// time is paid ("pay later"): `limit()` is 1, and a large request makes the *next* one
    /// wait. [`reserve`](Self::reserve) and [`acquire`](Self::acquire) wait for the turn.
    ///
    /// State: one `u64` per key, the time the next request may go (µs since the clock's
    /// origin, 48 bits: a horizon of about 8.9 years, past which requests are denied) and the
    /// stored permits in 16-bit fixed point; `warm_up / stable interval` may be at most
    /// [`MAX_WARM_UP_PERMITS`](crate::MAX_WARM_UP_PERMITS) (65 535). Rounding only ever makes
    /// a key colder (slower), never faster. Refunds do not apply (Guava has none); cancelling
    /// the most recent reservation is exact.
    ///
    /// ```
    /// use std::time::Duration;
    /// use cellgate::{Limiter, Quota};
    /// use cellgate::clock::ManualClock;
    ///
    /// // Stable: one per 1 ms; cold: one per 3 ms; warm after 10 ms of demand.
    /// let clock = ManualClock::new();
    /// let l = Limiter::warm_up(Quota::with_interval(Duration::from_millis(1)), Duration::from_millis(10))
    ///     .clock(clock.clone())
    ///     .build()?;
    /// let mut gaps = vec![];
    /// for _ in 0..7 {
    ///     let r = l.reserve(1, Duration::MAX);
    ///     clock.advance(r.delay());
    ///     gaps.push(r.delay().as_micros());
    /// }
    /// // Each permit waits for the previous one's cost: 2.8, 2.4, 2.0, 1.6, 1.2, then 1 ms.
    /// assert_eq!(gaps, [0, 2800, 2400, 2000, 1600, 1200, 1000]);
    /// # Ok::<(), cellgate::ConfigError>(())
    /// ```
    pub fn warm_up(stable: Quota, warm_up: Duration) -> LimiterBuilder<DefaultClock> {
        LimiterBuilder::new(WarmUp::new(stable, warm_up).map(Algorithm::WarmUp))
    }
}

impl LimiterBuilder<DefaultClock> {
    fn new(algorithm: Result<Algorithm, ConfigError>) -> Self {
        LimiterBuilder {
            algorithm,
            clock: DefaultClock::new(),
        }
    }
}

impl<C: Clock> LimiterBuilder<C> {
    /// Uses `clock` instead of the default clock.
    ///
    /// ```
    /// use cellgate::{Limiter, Quota};
    /// use cellgate::clock::ManualClock;
    /// let limiter = Limiter::gcra(Quota::per_second(1)).clock(ManualClock::new()).build()?;
    /// assert!(limiter.check().is_allowed());
    /// assert!(!limiter.check().is_allowed());
    /// # Ok::<(), cellgate::ConfigError>(())
    /// ```
    pub fn clock<C2: Clock>(self, clock: C2) -> LimiterBuilder<C2> {
        LimiterBuilder {
            algorithm: self.algorithm,
            clock,
        }
    }

    /// Builds the limiter.
    ///
    /// # Errors
    ///
    /// A [`ConfigError`] naming the field when the quota is invalid or cannot be represented
    /// exactly.
    pub fn build(self) -> Result<Limiter<C>, ConfigError> {
        Ok(Limiter {
            cell: CachePadded::new(Cell::new(Algorithm::FRESH)),
            setting: Setting::new(self.algorithm?),
            clock: self.clock,
        })
    }
}

impl<C: Clock> Limiter<C> {
    /// Checks one request.
    #[inline]
    pub fn check(&self) -> Decision {
        self.check_n(1)
    }

    /// Checks a request for `n` units at once: all are admitted or none.
    ///
    /// `n = 0` admits nothing and consumes nothing. `n` larger than the limit is denied with
    /// no `retry_after`.
    ///
    /// ```
    /// use cellgate::{Limiter, Quota};
    /// use cellgate::clock::ManualClock;
    /// let limiter = Limiter::gcra(Quota::per_second(10)).clock(ManualClock::new()).build()?;
    /// assert!(limiter.check_n(10).is_allowed());
    /// assert!(!limiter.check_n(11).is_allowed());
    /// assert_eq!(limiter.check_n(11).retry_after(), None);
    /// # Ok::<(), cellgate::ConfigError>(())
    /// ```
    #[inline]
    pub fn check_n(&self, n: u32) -> Decision {
        // One inlined copy of the check, on the built algorithm or (after `set_quota`) on a
        // copy of the current one.
        let current;
        let algorithm = match self.setting.unchanged() {
            Some(algorithm) => algorithm,
            None => {
                current = self.setting.load_cold();
                &current
            }
        };
        self.check_on(algorithm, n)
    }

    #[inline(always)]
    fn check_on(&self, algorithm: &Algorithm, n: u32) -> Decision {
        // The CAS loop carries only the word (and the step's write); the decision is built
        // once, from them, straight into the return value (see `Cell::check`). GCRA is tested
        // first: it reads the clock whatever happens, so the clock read needs no second test
        // of the kind (`now` tests for stock).
        if let Algorithm::Gcra(g) = algorithm {
            return self.cell.check_gcra(g, self.clock.now(), n);
        }
        self.cell.check(algorithm, self.now(), n)
    }

    /// The decision a request would get now, consuming nothing.
    ///
    /// ```
    /// use cellgate::{Limiter, Quota};
    /// use cellgate::clock::ManualClock;
    /// let limiter = Limiter::gcra(Quota::per_second(3)).clock(ManualClock::new()).build()?;
    /// assert_eq!(limiter.peek().remaining(), 3);
    /// limiter.check();
    /// assert_eq!(limiter.peek().remaining(), 2);
    /// # Ok::<(), cellgate::ConfigError>(())
    /// ```
    #[inline]
    pub fn peek(&self) -> Decision {
        Held::peek(self)
    }

    /// The decision a request for `n` units would get now, consuming nothing.
    ///
    /// ```
    /// use cellgate::{Limiter, Quota};
    /// use cellgate::clock::ManualClock;
    /// let limiter = Limiter::gcra(Quota::per_second(3)).clock(ManualClock::new()).build()?;
    /// assert!(limiter.peek_n(3).is_allowed());
    /// assert!(!limiter.peek_n(4).is_allowed());
    /// assert_eq!(limiter.peek().remaining(), 3);
    /// # Ok::<(), cellgate::ConfigError>(())
    /// ```
    pub fn peek_n(&self, n: u32) -> Decision {
        Held::peek_n(self, n)
    }

    /// Reserves `n` units, admitting them now with a delay if their turn comes within
    /// `max_wait`: the leaky bucket as a queue (nginx's `burst` without `nodelay`,
    /// x/time/rate's `Reserve`). Denied, with nothing consumed, if the wait would be longer, or
    /// if the quota has a queue ([`Quota::with_queue`]) and the request would go beyond it:
    /// `max_wait` only narrows the configured queue. A quota without a queue lets `max_wait`
    /// alone bound the wait (Guava's `acquire`); `check` never waits then.
    ///
    /// An admitted reservation holds its place in the schedule, first come first served: the
    /// caller must wait [`Reservation::delay`] before acting, or give the units back with
    /// [`cancel`](Self::cancel). Only GCRA limiters schedule ahead; the others admit exactly as
    /// [`check_n`](Self::check_n) does, always with no delay. See [`Reservation`] for an
    /// example.
    pub fn reserve(&self, n: u32, max_wait: Duration) -> Reservation {
        Engine::reserve(self, n, max_wait)
    }

    /// Waits until `n` units are admitted, for at most `timeout` (Guava's
    /// `tryAcquire(n, timeout)`; pass [`Duration::MAX`] for `acquire(n)`), blocking the thread.
    /// Returns the admission, or the denial (nothing consumed) when the wait would exceed
    /// `timeout` or can never end (`n` above the limit).
    ///
    /// A GCRA limiter reserves the caller's place at once (first come, first served; see
    /// [`reserve`](Self::reserve)), so the call returns a denial right away when the place is
    /// too far, instead of sleeping first. Other algorithms sleep until the reported
    /// `retry_after` and ask again. The sleep is real time.
    ///
    /// ```
    /// use std::time::Duration;
    /// use cellgate::{Limiter, Quota};
    ///
    /// let l = Limiter::gcra(Quota::with_interval(Duration::from_millis(20))).build()?;
    /// for _ in 0..3 {
    ///     // The second and third calls sleep about 20 ms each.
    ///     assert!(l.acquire(1, Duration::from_secs(1)).is_allowed());
    /// }
    /// assert!(!l.acquire(2, Duration::from_secs(1)).is_allowed()); // 2 > burst 1: never
    /// # Ok::<(), cellgate::ConfigError>(())
    /// ```
    pub fn acquire(&self, n: u32, timeout: Duration) -> Decision {
        crate::admission::wait::acquire(self, n, timeout)
    }

    /// A future that resolves once `n` units are admitted: the async
    /// [`acquire`](Self::acquire) with no timeout. Dropping it before it resolves gives its
    /// reserved place back. See [`UntilReady`](crate::UntilReady).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), cellgate::ConfigError> {
    /// use std::time::Duration;
    /// use cellgate::{Limiter, Quota};
    ///
    /// let l = Limiter::gcra(Quota::with_interval(Duration::from_millis(10))).build()?;
    /// for _ in 0..3 {
    ///     let d = l.until_ready(1).with_jitter(Duration::from_millis(1)).await;
    ///     assert!(d.is_allowed());
    /// }
    /// # Ok(())
    /// # }
    /// ```
    #[cfg(feature = "async")]
    pub fn until_ready(&self, n: u32) -> crate::admission::wait::UntilReady<&Self> {
        crate::admission::wait::UntilReady::new(self, n)
    }

    /// A check that keeps what [`cancel`](Self::cancel) needs: [`check_n`](Self::check_n) with
    /// the limiter's own queue.
    fn charge(&self, n: u32) -> Reservation {
        Engine::charge(self, n)
    }

    /// Gives back the units of `reservation` (obtained from this limiter) that are provably
    /// still unspent, and returns whether anything was given back.
    ///
    /// GCRA, while nobody waits in the schedule (every place admitted so far acts at once, as
    /// with any quota without a queue): the part of the reservation's `n` units the clock has
    /// not yet eaten since it was admitted comes back, whatever was admitted since; on a
    /// frozen clock that is all of it. While places are queued to act later, only the last
    /// place can be freed: the most recent reservation comes back exactly, and an older one
    /// stays spent (fails closed), because a later request keeps its place and handing the
    /// older one to a newcomer would put two requests in one place. Window counters take the
    /// units off the window they were counted in, if it still counts; stock takes them back.
    /// A cancelled reservation can therefore never let the limiter exceed its quota, not even
    /// for an instant.
    ///
    /// ```
    /// use std::time::Duration;
    /// use cellgate::{Limiter, Quota};
    /// use cellgate::clock::ManualClock;
    ///
    /// // Nobody waits: an older reservation comes back, though another was admitted since.
    /// let l = Limiter::gcra(Quota::per_second(10)).clock(ManualClock::new()).build()?;
    /// let older = l.reserve(1, Duration::ZERO);
    /// let _newer = l.reserve(1, Duration::ZERO);
    /// assert!(l.cancel(older));
    /// assert_eq!(l.peek().remaining(), 9);
    ///
    /// // Places queued to act later: only the last one can be given back.
    /// let l = Limiter::gcra(Quota::per_second(1)).clock(ManualClock::new()).build()?;
    /// let _now = l.reserve(1, Duration::ZERO);
    /// let second = l.reserve(1, Duration::from_secs(10)); // acts in 1 s
    /// let third = l.reserve(1, Duration::from_secs(10)); // acts in 2 s
    /// assert!(!l.cancel(second)); // the third keeps its place: fails closed
    /// assert!(l.cancel(third));
    /// # Ok::<(), cellgate::ConfigError>(())
    /// ```
    pub fn cancel(&self, reservation: Reservation) -> bool {
        Held::cancel(self, reservation)
    }

    /// Gives back `n` units of admitted work that did not happen (a failed order), and returns
    /// whether anything was given back. It never creates more capacity than the quota allows: a
    /// GCRA limiter goes back at most to a fresh state (full burst), a window counter at most to
    /// zero in the current window, a stock at most to its configured stock (`restock` adds
    /// stock beyond it).
    ///
    /// ```
    /// use cellgate::{Limiter, Quota};
    /// use cellgate::clock::ManualClock;
    /// let l = Limiter::gcra(Quota::per_second(2)).clock(ManualClock::new()).build()?;
    /// l.check_n(2);
    /// assert!(l.refund(1));
    /// assert_eq!(l.peek().remaining(), 1);
    /// assert!(l.refund(5));
    /// assert_eq!(l.peek().remaining(), 2); // never above the burst
    /// assert!(!l.refund(1));
    /// # Ok::<(), cellgate::ConfigError>(())
    /// ```
    pub fn refund(&self, n: u32) -> bool {
        Held::refund(self, n)
    }

    /// Checks `n` units against `quota` instead of the limiter's own (GCRA only): the quota
    /// travels with the call, as in redis-cell's `CL.THROTTLE`. The state is a point in time
    /// (the TAT), so any quota can be applied to it: a key's backlog, in nanoseconds, is judged
    /// against the given quota's interval and burst.
    ///
    /// # Errors
    ///
    /// [`ConfigError`] if `quota` is invalid, or [`ConfigError::Unsupported`] if this is not a
    /// GCRA limiter.
    pub fn check_with(&self, quota: &Quota, n: u32) -> Result<Decision, ConfigError> {
        Engine::check_with(self, quota, n)
    }

    /// Replaces the limiter's quota at runtime (GCRA only; Guava's `setRate`).
    ///
    /// The state is kept as it is: the TAT, a point in time. A key `b` nanoseconds behind
    /// "fresh" stays `b` nanoseconds behind, and is judged against the new interval and burst
    /// from the next check on. So a faster rate lets an emptied bucket refill sooner, and a
    /// smaller burst takes effect at once. Checks racing with the change see either quota.
    ///
    /// ```
    /// use cellgate::{Limiter, Quota};
    /// use cellgate::clock::ManualClock;
    /// let l = Limiter::gcra(Quota::per_second(2)).clock(ManualClock::new()).build()?;
    /// assert!(l.check_n(2).is_allowed());
    /// assert!(!l.check().is_allowed());
    /// l.set_quota(Quota::per_second(2).with_burst(4))?;
    /// assert_eq!(l.check().remaining(), 1);
    /// # Ok::<(), cellgate::ConfigError>(())
    /// ```
    ///
    /// # Errors
    ///
    /// [`ConfigError`] if `quota` is invalid (nothing changes), or
    /// [`ConfigError::Unsupported`] if this is not a GCRA limiter.
    pub fn set_quota(&self, quota: Quota) -> Result<(), ConfigError> {
        self.setting.set_quota(quota)
    }

    /// Adds `units` to the stock (saturating) and returns the units now remaining.
    ///
    /// ```
    /// use cellgate::Limiter;
    /// let tickets = Limiter::stock(1).build()?;
    /// tickets.check();
    /// assert_eq!(tickets.restock(10)?, 10);
    /// # Ok::<(), cellgate::ConfigError>(())
    /// ```
    ///
    /// # Errors
    ///
    /// [`ConfigError::Unsupported`] if this is not a [`stock`](Limiter::stock) limiter.
    pub fn restock(&self, units: u64) -> Result<u64, ConfigError> {
        Engine::restock(self, units)
    }

    /// Sets the remaining stock to `units`.
    ///
    /// # Errors
    ///
    /// [`ConfigError::Unsupported`] if this is not a [`stock`](Limiter::stock) limiter.
    pub fn set_stock(&self, units: u64) -> Result<(), ConfigError> {
        Engine::set_stock(self, units)
    }

    /// The time for a decision: the clock, unless the algorithm ignores time (stock).
    #[inline(always)]
    fn now(&self) -> u64 {
        self.setting.now(&self.clock)
    }

    /// The policy this limiter enforces now (after any [`set_quota`](Self::set_quota)).
    ///
    /// ```
    /// use cellgate::{Limiter, PolicyKind, Quota};
    /// let l = Limiter::gcra(Quota::per_second(10)).build()?;
    /// assert_eq!((l.policy().kind(), l.policy().limit()), (PolicyKind::Gcra, 10));
    /// # Ok::<(), cellgate::ConfigError>(())
    /// ```
    pub fn policy(&self) -> crate::policy::Policy {
        self.setting.load().policy()
    }

    /// The clock this limiter reads.
    pub fn clock(&self) -> &C {
        &self.clock
    }
}

crate::any_limiter::direct_limiter_traits!(Limiter);

/// The direct limiter's one cell, for the operations written once in [`engine`](super::engine).
impl<C: Clock> Held for Limiter<C> {
    #[inline(always)]
    fn setting(&self) -> &Setting {
        &self.setting
    }

    #[inline(always)]
    fn now(&self) -> u64 {
        Limiter::now(self)
    }

    #[inline(always)]
    fn word(&self) -> u64 {
        self.cell.load()
    }

    #[inline(always)]
    fn update_existing<R>(&self, step: impl Fn(u64) -> (R, Option<u64>)) -> Option<R> {
        Some(self.cell.update(step))
    }
}

impl<C: Clock> Engine for Limiter<C> {
    #[inline(always)]
    fn apply<R>(&self, _: u64, step: impl Fn(u64) -> (R, Option<u64>), _: bool) -> Option<R> {
        Some(self.cell.update(step))
    }

    /// Never called: the one cell always exists ([`apply`](Engine::apply) never fails). The
    /// decision on the word, as if it had been asked.
    fn full(&self, decide: impl Fn(u64) -> Decision) -> Decision {
        decide(self.cell.load())
    }

    /// Never called (see [`full`](Engine::full)).
    fn store_full(&self) -> ConfigError {
        ConfigError::StoreFull { max_keys: 1 }
    }

    #[inline(always)]
    fn check_on(&self, algorithm: &Algorithm, n: u32) -> Decision {
        Limiter::check_on(self, algorithm, n)
    }
}
