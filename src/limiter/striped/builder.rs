//! Building a [`StripedLimiter`]: the constructors, the builder's settings, and how the whole
//! limit is split into the stripes' shares.

use std::num::NonZeroU64;

use crossbeam_utils::CachePadded;

use super::{mod_magic, Stripe, StripedLimiter, TimeShare, MARK_LAG_NS};
use crate::algorithm::{Algorithm, Gcra, Stock};
use crate::clock::{Clock, DefaultClock};
use crate::error::ConfigError;
use crate::quota::{GcraParams, Quota};
use crate::sync::cell::Cell;
use crate::sync::high_water::{HighWater, Stamp};

/// What to split, before the stripe count is known.
#[derive(Debug, Clone, Copy)]
enum Whole {
    Gcra(GcraParams),
    Stock(u32),
}

/// Builds a [`StripedLimiter`]: pick the algorithm with [`StripedLimiter::gcra`] or
/// [`StripedLimiter::stock`], then optionally the stripes and the clock.
#[derive(Debug, Clone)]
#[must_use = "a builder does nothing until build() is called"]
pub struct StripedLimiterBuilder<C> {
    whole: Result<Whole, ConfigError>,
    stripes: Option<usize>,
    time: TimeShare,
    clock: C,
}

impl StripedLimiter<DefaultClock> {
    /// A GCRA limiter for `quota`, split over stripes (see [`StripedLimiter`] for the ceiling
    /// it keeps).
    ///
    /// ```
    /// use cellgate::{Quota, StripedLimiter};
    /// use cellgate::clock::ManualClock;
    /// let l = StripedLimiter::gcra(Quota::per_second(100).with_burst(8))
    ///     .stripes(4)
    ///     .clock(ManualClock::new())
    ///     .build()?;
    /// // The whole burst, whichever stripes the checks land on, and not one more.
    /// assert_eq!((0..20).filter(|_| l.check().is_allowed()).count(), 8);
    /// # Ok::<(), cellgate::ConfigError>(())
    /// ```
    pub fn gcra(quota: Quota) -> StripedLimiterBuilder<DefaultClock> {
        StripedLimiterBuilder {
            whole: quota.gcra_params().map(Whole::Gcra),
            stripes: None,
            time: TimeShare::Lagged,
            clock: DefaultClock::new(),
        }
    }

    /// A stock of `units` (flash-sale inventory), split over stripes: exactly `units`
    /// admissions in all.
    ///
    /// ```
    /// use cellgate::StripedLimiter;
    /// let sku = StripedLimiter::stock(3).stripes(2).build()?;
    /// assert!(sku.check_n(2).is_allowed()); // 2 units: more than one stripe holds, gathered
    /// assert!(sku.check().is_allowed());
    /// assert!(!sku.check().is_allowed());
    /// # Ok::<(), cellgate::ConfigError>(())
    /// ```
    pub fn stock(units: u32) -> StripedLimiterBuilder<DefaultClock> {
        StripedLimiterBuilder {
            whole: Ok(Whole::Stock(units)),
            stripes: None,
            time: TimeShare::Lagged,
            clock: DefaultClock::new(),
        }
    }
}

impl<C> StripedLimiterBuilder<C> {
    /// How many stripes (default: the machine's available parallelism, at most the GCRA
    /// burst). More stripes spread the writes over more cache lines; each costs 128 bytes.
    ///
    /// ```
    /// use cellgate::{ConfigError, Quota, StripedLimiter};
    /// assert_eq!(StripedLimiter::stock(10).stripes(3).build()?.stripes(), 3);
    /// // Every GCRA stripe needs a burst of at least one.
    /// assert_eq!(
    ///     StripedLimiter::gcra(Quota::per_second(10).with_burst(2)).stripes(3).build().unwrap_err(),
    ///     ConfigError::TooManyStripes { stripes: 3, max: 2 }
    /// );
    /// # Ok::<(), ConfigError>(())
    /// ```
    pub fn stripes(mut self, stripes: usize) -> Self {
        self.stripes = Some(stripes);
        self
    }

    /// Uses `clock` instead of the default clock.
    ///
    /// ```
    /// use cellgate::{Quota, StripedLimiter};
    /// use cellgate::clock::ManualClock;
    /// let l = StripedLimiter::gcra(Quota::per_second(1)).clock(ManualClock::new()).build()?;
    /// assert!(l.check().is_allowed());
    /// # Ok::<(), cellgate::ConfigError>(())
    /// ```
    pub fn clock<C2: Clock>(self, clock: C2) -> StripedLimiterBuilder<C2> {
        StripedLimiterBuilder {
            whole: self.whole,
            stripes: self.stripes,
            time: self.time,
            clock,
        }
    }

    /// GCRA: admissions no longer share their times, so that while the clock runs
    /// forward no check writes anything another core reads (the fastest hot path, scaling
    /// with stripes on a precise clock), at the price of a weaker promise when the clock steps
    /// back: up to `d / T` units beyond one cell's ceiling for a step back by `d`, except for
    /// checks that all start at one stripe (see "A clock that steps back" on
    /// [`StripedLimiter`]). No effect on a stock, which reads no clock.
    ///
    /// ```
    /// use std::time::Duration;
    /// use cellgate::{Quota, StripedLimiter};
    /// use cellgate::clock::ManualClock;
    /// let q = Quota::per_second(10).with_burst(4);
    /// let clock = ManualClock::new();
    /// let l = StripedLimiter::gcra(q).stripes(2).clock(clock.clone()).relaxed_clock().build()?;
    /// // At 10 s stripe 0 gives its 2 units; at 9 s stripe 1, idle, its 2; back at 10 s, stripe
    /// // 1 has refilled 1 s of its 5-per-second share: 2 more, where one cell admits 4 in all.
    /// clock.set(Duration::from_secs(10));
    /// let mut admitted = (0..2).filter(|_| l.check_n_from(0, 1).is_allowed()).count();
    /// clock.set(Duration::from_secs(9));
    /// admitted += (0..2).filter(|_| l.check_n_from(1, 1).is_allowed()).count();
    /// clock.set(Duration::from_secs(10));
    /// admitted += (0..4).filter(|_| l.check_n_from(1, 1).is_allowed()).count();
    /// assert_eq!(admitted, 6);
    /// // By default the admissions at 10 s lift the shared mark (they are more than the lag,
    /// // T = 100 ms, past it), and the checks at 9 s decide at 10 s: 4, as one cell.
    /// let l = StripedLimiter::gcra(q).stripes(2).clock(clock.clone()).build()?;
    /// clock.set(Duration::from_secs(10));
    /// let mut admitted = (0..2).filter(|_| l.check_n_from(0, 1).is_allowed()).count();
    /// clock.set(Duration::from_secs(9));
    /// admitted += (0..2).filter(|_| l.check_n_from(1, 1).is_allowed()).count();
    /// clock.set(Duration::from_secs(10));
    /// admitted += (0..4).filter(|_| l.check_n_from(1, 1).is_allowed()).count();
    /// assert_eq!(admitted, 4);
    /// # Ok::<(), cellgate::ConfigError>(())
    /// ```
    pub fn relaxed_clock(mut self) -> Self {
        self.time = TimeShare::Relaxed;
        self
    }

    /// GCRA: every admission shares its time exactly, so that the stripes keep **one cell's
    /// ceiling under any clock**, to the unit, from any stripes; the price is a write of one
    /// line that every core shares by every admission later than the last one (each admission,
    /// on a precise clock), which stops a hot limiter from scaling with cores. The default
    /// lifts that line only when an admission is more than a lag ahead of it (see "A clock
    /// that steps back" on [`StripedLimiter`]). No effect on a stock, which reads no clock.
    ///
    /// ```
    /// use std::time::Duration;
    /// use cellgate::{Quota, StripedLimiter};
    /// use cellgate::clock::ManualClock;
    /// let clock = ManualClock::new();
    /// let l = StripedLimiter::gcra(Quota::per_second(10).with_burst(4))
    ///     .stripes(2)
    ///     .clock(clock.clone())
    ///     .strict_clock()
    ///     .build()?;
    /// // At 10 s stripe 0 gives its 2 units; at 9 s stripe 1 decides at 10 s (the mark), and
    /// // back at 10 s nothing is left: 4, as one cell.
    /// clock.set(Duration::from_secs(10));
    /// let mut admitted = (0..2).filter(|_| l.check_n_from(0, 1).is_allowed()).count();
    /// clock.set(Duration::from_secs(9));
    /// admitted += (0..2).filter(|_| l.check_n_from(1, 1).is_allowed()).count();
    /// clock.set(Duration::from_secs(10));
    /// admitted += (0..4).filter(|_| l.check_n_from(1, 1).is_allowed()).count();
    /// assert_eq!(admitted, 4);
    /// # Ok::<(), cellgate::ConfigError>(())
    /// ```
    pub fn strict_clock(mut self) -> Self {
        self.time = TimeShare::Strict;
        self
    }

    /// Builds the limiter.
    ///
    /// # Errors
    ///
    /// The quota's [`ConfigError`]; [`ConfigError::Zero`] for zero stripes;
    /// [`ConfigError::TooManyStripes`] for more GCRA stripes than the burst, or more than
    /// [`MAX_STRIPES`] of any kind; the quota's
    /// overflow errors when a stripe's interval (`stripes * T`) or tolerance does not fit in
    /// `u64` nanoseconds.
    ///
    /// ```
    /// use cellgate::{ConfigError, StripedLimiter};
    /// assert_eq!(
    ///     StripedLimiter::stock(5).stripes(0).build().unwrap_err(),
    ///     ConfigError::Zero { field: "stripes" }
    /// );
    /// ```
    pub fn build(self) -> Result<StripedLimiter<C>, ConfigError> {
        let whole = self.whole?;
        let stripes = match self.stripes {
            Some(0) => return Err(ConfigError::Zero { field: "stripes" }),
            Some(s) => s,
            None => {
                let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
                match whole {
                    Whole::Gcra(p) => cores.min(p.burst as usize),
                    Whole::Stock(_) => cores,
                }
            }
        };
        if stripes > MAX_STRIPES {
            return Err(ConfigError::TooManyStripes {
                stripes,
                max: MAX_STRIPES,
            });
        }
        let (algorithms, limit, uses_time, policy, lag) = match whole {
            Whole::Gcra(p) => (
                split_gcra(p, stripes)?,
                p.limit,
                true,
                Gcra::new(p).policy(),
                p.interval.get().max(MARK_LAG_NS),
            ),
            Whole::Stock(units) => (
                (0..stripes)
                    .map(|i| Algorithm::Stock(Stock::new(share(units, stripes, i))))
                    .collect(),
                units,
                false,
                Stock::new(units).policy(),
                0,
            ),
        };
        let len = algorithms.len();
        Ok(StripedLimiter {
            mod_magic: mod_magic(len),
            stripes: algorithms
                .into_iter()
                .map(|algorithm| {
                    CachePadded::new(Stripe {
                        cell: Cell::new(Algorithm::FRESH),
                        algorithm,
                        stamp: Stamp::new(),
                    })
                })
                .collect(),
            limit,
            uses_time,
            policy,
            high: HighWater::new(),
            time: self.time,
            lag,
            clock: self.clock,
        })
    }
}

/// Stripe `i`'s share of `whole` split over `stripes`: the quotient, plus one for the first
/// `whole % stripes` stripes, so the shares add up to `whole` exactly.
pub(super) fn share(whole: u32, stripes: usize, i: usize) -> u32 {
    // A share is at most `whole`, and `stripes > whole` only leaves shares of 0 or 1.
    let stripes = u32::try_from(stripes).unwrap_or(u32::MAX);
    let i = u32::try_from(i).unwrap_or(u32::MAX);
    whole / stripes + u32::from(i < whole % stripes)
}

/// GCRA stripes: interval `stripes * T`, burst and queue split by [`share`].
fn split_gcra(p: GcraParams, stripes: usize) -> Result<Vec<Algorithm>, ConfigError> {
    if stripes > p.burst as usize {
        return Err(ConfigError::TooManyStripes {
            stripes,
            max: p.burst as usize,
        });
    }
    let queue = p.limit - p.burst;
    let too_large = ConfigError::BurstTooLarge {
        burst: p.burst,
        interval_ns: p.interval.get(),
    };
    let interval = u64::try_from(stripes)
        .ok()
        .and_then(|s| p.interval.get().checked_mul(s))
        .and_then(NonZeroU64::new)
        .ok_or_else(|| too_large.clone())?;
    (0..stripes)
        .map(|i| {
            let burst = share(p.burst, stripes, i);
            let queue = share(queue, stripes, i);
            let tolerance = interval.get().checked_mul(u64::from(burst));
            let ceiling = tolerance
                .zip(interval.get().checked_mul(u64::from(queue)))
                .and_then(|(t, q)| t.checked_add(q));
            match (tolerance, ceiling) {
                (Some(tolerance), Some(ceiling)) => Ok(Algorithm::Gcra(Gcra::new(GcraParams {
                    interval,
                    tolerance,
                    ceiling,
                    burst,
                    limit: burst + queue,
                }))),
                _ => Err(too_large.clone()),
            }
        })
        .collect()
}

/// The most stripes a limiter may have (8 MiB of cells; far more than cores on any machine).
///
/// ```
/// use cellgate::{StripedLimiter, MAX_STRIPES};
/// assert!(StripedLimiter::stock(1).stripes(MAX_STRIPES + 1).build().is_err());
/// ```
pub const MAX_STRIPES: usize = 1 << 16;
