//! The direct limiter: one cell for the whole process (or whatever it guards).

use crossbeam_utils::CachePadded;

use crate::algorithm::{Algorithm, Gcra};
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
        LimiterBuilder {
            algorithm: quota.gcra_params().map(|p| Algorithm::Gcra(Gcra::new(p))),
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
        let now = self.clock.now();
        self.cell.update(|word| self.algorithm.step(word, now, n))
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
        self.algorithm.peek(self.cell.load(), self.clock.now())
    }

    /// The clock this limiter reads.
    pub fn clock(&self) -> &C {
        &self.clock
    }
}
