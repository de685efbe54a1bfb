//! Rates: how many requests per period, and how many at once.

use std::num::NonZeroU64;
use std::time::Duration;

use crate::error::ConfigError;

/// A rate of `count` requests per `period`, with a burst (default: `count`).
///
/// A quota is plain data; it is checked when a limiter is built, so invalid values surface as a
/// [`ConfigError`] from `build()`, never as a panic.
///
/// Under GCRA the quota becomes an *emission interval* `T = period / count` (integer
/// nanoseconds, rounded down) and a *tolerance* `T * burst`: a fresh key may spend `burst`
/// requests at once, and one more every `T` after that.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use cellgate::Quota;
///
/// // 30 requests a minute, at most 16 at once.
/// let q = Quota::new(30, Duration::from_secs(60)).with_burst(16);
/// assert_eq!(q.burst(), 16);
/// assert_eq!(Quota::per_second(100).burst(), 100);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Quota {
    count: u32,
    period: Duration,
    burst: Option<u32>,
    queue: u32,
}

impl Quota {
    /// `count` requests per `period`; burst defaults to `count`.
    #[must_use]
    pub const fn new(count: u32, period: Duration) -> Self {
        Self {
            count,
            period,
            burst: None,
            queue: 0,
        }
    }

    /// `count` requests per second.
    #[must_use]
    pub const fn per_second(count: u32) -> Self {
        Self::new(count, Duration::from_secs(1))
    }

    /// `count` requests per minute.
    #[must_use]
    pub const fn per_minute(count: u32) -> Self {
        Self::new(count, Duration::from_secs(60))
    }

    /// `count` requests per hour.
    #[must_use]
    pub const fn per_hour(count: u32) -> Self {
        Self::new(count, Duration::from_secs(3600))
    }

    /// One request every `interval`, burst 1.
    ///
    /// ```
    /// use std::time::Duration;
    /// let q = cellgate::Quota::with_interval(Duration::from_millis(250));
    /// assert_eq!(q.burst(), 1);
    /// ```
    #[must_use]
    pub const fn with_interval(interval: Duration) -> Self {
        Self::new(1, interval)
    }

    /// Sets how many requests a fresh key may make at once.
    #[must_use]
    pub const fn with_burst(mut self, burst: u32) -> Self {
        self.burst = Some(burst);
        self
    }

    /// Lets up to `queue` requests beyond the burst wait for their turn instead of being
    /// denied: the leaky bucket as a queue, nginx's `burst` without `nodelay`.
    ///
    /// A GCRA request that does not fit in the burst but fits within `burst + queue` is
    /// admitted with a [`delay`](crate::Decision::delay): the time until its turn, which the
    /// caller must wait out before acting. Requests beyond that are denied. The queue is a
    /// place in the key's schedule, not a list: it costs no memory. `limit()` and
    /// `remaining()` then count queued places too. A queue delays requests but does not widen
    /// the burst: a single request for more units than the burst never fits. Default 0 (no
    /// queue). Only GCRA limiters queue.
    ///
    /// ```
    /// use std::time::Duration;
    /// use cellgate::{Limiter, Quota};
    /// use cellgate::clock::ManualClock;
    ///
    /// // 10 a second, 2 at once, 3 more queued.
    /// let l = Limiter::gcra(Quota::per_second(10).with_burst(2).with_queue(3))
    ///     .clock(ManualClock::new())
    ///     .build()?;
    /// let delays: Vec<_> = (0..6).map(|_| l.check()).map(|d| (d.is_allowed(), d.delay())).collect();
    /// let ms = Duration::from_millis;
    /// assert_eq!(delays, [(true, ms(0)), (true, ms(0)), (true, ms(100)), (true, ms(200)),
    ///                     (true, ms(300)), (false, ms(0))]);
    /// # Ok::<(), cellgate::ConfigError>(())
    /// ```
    #[must_use]
    pub const fn with_queue(mut self, queue: u32) -> Self {
        self.queue = queue;
        self
    }

    /// Requests that may queue beyond the burst (see [`with_queue`](Self::with_queue)).
    #[must_use]
    pub const fn queue(&self) -> u32 {
        self.queue
    }

    /// Requests per period.
    #[must_use]
    pub const fn count(&self) -> u32 {
        self.count
    }

    /// The period.
    #[must_use]
    pub const fn period(&self) -> Duration {
        self.period
    }

    /// The burst: requests a fresh key may make at once.
    #[must_use]
    pub const fn burst(&self) -> u32 {
        match self.burst {
            Some(b) => b,
            None => self.count,
        }
    }

    /// The GCRA parameters of this quota, or why it has none.
    pub(crate) fn gcra_params(&self) -> Result<GcraParams, ConfigError> {
        if self.count == 0 {
            return Err(ConfigError::Zero { field: "count" });
        }
        if self.period.is_zero() {
            return Err(ConfigError::Zero { field: "period" });
        }
        let burst = self.burst();
        if burst == 0 {
            return Err(ConfigError::Zero { field: "burst" });
        }
        let period_ns =
            u64::try_from(self.period.as_nanos()).map_err(|_| ConfigError::PeriodTooLong {
                period: self.period,
            })?;
        let interval =
            NonZeroU64::new(period_ns / u64::from(self.count)).ok_or(ConfigError::RateTooFast {
                count: self.count,
                period: self.period,
            })?;
        let tolerance =
            interval
                .get()
                .checked_mul(u64::from(burst))
                .ok_or(ConfigError::BurstTooLarge {
                    burst,
                    interval_ns: interval.get(),
                })?;
        let ceiling = interval
            .get()
            .checked_mul(u64::from(self.queue))
            .and_then(|q| q.checked_add(tolerance))
            .ok_or(ConfigError::QueueTooLarge {
                burst,
                queue: self.queue,
                interval_ns: interval.get(),
            })?;
        Ok(GcraParams {
            interval,
            tolerance,
            ceiling,
            burst,
            limit: burst.saturating_add(self.queue),
        })
    }
}

/// A validated GCRA configuration: `interval * burst == tolerance` fits in `u64`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct GcraParams {
    /// Emission interval `T`, ns.
    pub(crate) interval: NonZeroU64,
    /// Tolerance `DVT = T * burst`, ns: how far ahead of now the TAT may be after an
    /// immediate admission.
    pub(crate) tolerance: u64,
    /// `T * (burst + queue)`, ns: how far ahead the TAT may be after any admission (delayed
    /// or not).
    pub(crate) ceiling: u64,
    /// The burst `b`.
    pub(crate) burst: u32,
    /// `burst + queue` (saturating): the decisions' `limit`.
    pub(crate) limit: u32,
}

/// Converts a `Duration` to nanoseconds, saturating at `u64::MAX`.
#[inline]
pub(crate) fn saturating_ns(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn invalid_quotas_name_the_field() {
        let s = Duration::from_secs(1);
        assert_eq!(
            Quota::new(0, s).gcra_params(),
            Err(ConfigError::Zero { field: "count" })
        );
        assert_eq!(
            Quota::new(1, Duration::ZERO).gcra_params(),
            Err(ConfigError::Zero { field: "period" })
        );
        assert_eq!(
            Quota::new(1, s).with_burst(0).gcra_params(),
            Err(ConfigError::Zero { field: "burst" })
        );
        assert!(matches!(
            Quota::new(1, Duration::MAX).gcra_params(),
            Err(ConfigError::PeriodTooLong { .. })
        ));
        assert!(matches!(
            Quota::new(2, Duration::from_nanos(1)).gcra_params(),
            Err(ConfigError::RateTooFast { count: 2, .. })
        ));
        let err = Quota::new(1, Duration::from_nanos(u64::MAX / 2))
            .with_burst(3)
            .gcra_params()
            .unwrap_err();
        assert_eq!(
            err,
            ConfigError::BurstTooLarge {
                burst: 3,
                interval_ns: u64::MAX / 2
            }
        );
        assert!(err.to_string().contains("burst 3"));
    }

    #[test]
    fn params_follow_the_formula() {
        let p = Quota::new(30, Duration::from_secs(60))
            .with_burst(16)
            .gcra_params()
            .unwrap();
        assert_eq!(p.interval.get(), 2_000_000_000);
        assert_eq!(p.tolerance, 32_000_000_000);
        assert_eq!(p.ceiling, 32_000_000_000);
        assert_eq!(p.burst, 16);
        let p = Quota::new(30, Duration::from_secs(60))
            .with_burst(16)
            .with_queue(4)
            .gcra_params()
            .unwrap();
        assert_eq!(p.ceiling, 40_000_000_000);
        assert_eq!(p.limit, 20);
        assert!(matches!(
            Quota::new(1, Duration::from_nanos(u64::MAX / 2))
                .with_burst(2)
                .with_queue(1)
                .gcra_params(),
            Err(ConfigError::QueueTooLarge { queue: 1, .. })
        ));
        // Integer division rounds the interval down.
        let p = Quota::new(3, Duration::from_nanos(10))
            .gcra_params()
            .unwrap();
        assert_eq!(p.interval.get(), 3);
        assert_eq!(p.tolerance, 9);
    }

    #[test]
    fn saturating_ns_saturates() {
        assert_eq!(saturating_ns(Duration::from_nanos(5)), 5);
        assert_eq!(saturating_ns(Duration::MAX), u64::MAX);
    }
}
