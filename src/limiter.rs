//! The direct limiter: one cell for the whole process (or whatever it guards).

use crossbeam_utils::CachePadded;

use std::time::Duration;

use crate::algorithm::{Algorithm, FixedWindow, Gcra, SlidingWindow, Stock};
use crate::cell::Cell;
use crate::clock::{Clock, DefaultClock};
use crate::decision::Decision;
use crate::error::ConfigError;
use crate::quota::Quota;

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
    algorithm: Algorithm,
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
            algorithm: self.algorithm?,
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
        let now = self.now();
        // The CAS loop carries only the word; the decision is built once, from the word it was
        // taken on, straight into the return value (see `Algorithm::decide`).
        let word = self.cell.update(|w| (w, self.algorithm.step(w, now, n).1));
        self.algorithm.decide(word, now, n)
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
        self.algorithm.peek(self.cell.load(), self.now())
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
        let stock = self.algorithm.stock("restock")?;
        Ok(self.cell.update(|word| stock.restock(word, units)))
    }

    /// Sets the remaining stock to `units`.
    ///
    /// # Errors
    ///
    /// [`ConfigError::Unsupported`] if this is not a [`stock`](Limiter::stock) limiter.
    pub fn set_stock(&self, units: u64) -> Result<(), ConfigError> {
        let word = self.algorithm.stock("set_stock")?.word(units);
        self.cell.update(|_| ((), Some(word)));
        Ok(())
    }

    /// The time for a decision: the clock, unless the algorithm ignores time (stock).
    #[inline(always)]
    fn now(&self) -> u64 {
        if self.algorithm.uses_time() {
            self.clock.now()
        } else {
            0
        }
    }

    /// The clock this limiter reads.
    pub fn clock(&self) -> &C {
        &self.clock
    }
}
