//! Time sources.
//!
//! A limiter reads time through the [`Clock`] trait: nanoseconds since the clock's own origin,
//! as a `u64`. Four clocks ship:
//!
//! | clock | cost of `now()` | resolution | use it for |
//! |---|---|---|---|
//! | [`QuantaClock`] (the default, [`DefaultClock`]) | a TSC read and a multiply | ~ns | almost everything |
//! | [`CoarseClock`] | one relaxed load | 1 ms (its upkeep thread's interval) | the hottest paths |
//! | [`StdClock`] | `std::time::Instant::now()` | ~ns | platforms where the TSC is unreliable |
//! | [`ManualClock`] | one relaxed load | exact | tests and simulations |
//!
//! # Time going backwards
//!
//! A clock may go backwards (TSCs are not always synchronised across cores, and
//! [`ManualClock::set`] may move it anywhere). Every algorithm treats an earlier `now` as
//! "less time has passed": it never gives extra credit and never panics.
//!
//! A *stale* `now` — an earlier instant than the true time, which is what the coarse clock
//! returns — is therefore always safe: it can only make a decision stricter.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use crate::quota::saturating_ns;
use crate::sync::time::{self, ManualTime, StopFlag};

/// A source of time: nanoseconds since an origin fixed when the clock was created.
///
/// Implement it to drive a limiter from your own time source.
///
/// # Examples
///
/// ```
/// use cellgate::clock::Clock;
///
/// /// A clock that is always at 42 ns.
/// struct Frozen;
/// impl Clock for Frozen {
///     fn now(&self) -> u64 {
///         42
///     }
/// }
/// assert_eq!(Frozen.now(), 42);
/// ```
pub trait Clock: Send + Sync {
    /// Nanoseconds since this clock's origin. May go backwards.
    fn now(&self) -> u64;
}

impl<C: Clock + ?Sized> Clock for &C {
    #[inline]
    fn now(&self) -> u64 {
        (**self).now()
    }
}

impl<C: Clock + ?Sized> Clock for Arc<C> {
    #[inline]
    fn now(&self) -> u64 {
        (**self).now()
    }
}

impl<C: Clock + ?Sized> Clock for Box<C> {
    #[inline]
    fn now(&self) -> u64 {
        (**self).now()
    }
}

/// The clock a limiter uses unless told otherwise.
pub type DefaultClock = QuantaClock;

/// A precise clock on the CPU's time-stamp counter, through the `quanta` crate.
///
/// If the counter appears to run backwards (a read on another core that is behind the origin),
/// `now()` returns 0 rather than a huge value.
///
/// # Examples
///
/// ```
/// use cellgate::clock::{Clock, QuantaClock};
///
/// let clock = QuantaClock::new();
/// let a = clock.now();
/// let b = clock.now();
/// assert!(b >= a || a - b < 1_000_000); // precise, but not promised monotonic across cores
/// ```
#[derive(Debug, Clone)]
pub struct QuantaClock {
    clock: quanta::Clock,
    origin: u64,
}

impl QuantaClock {
    /// A clock whose origin is now.
    #[must_use]
    pub fn new() -> Self {
        let clock = quanta::Clock::new();
        let origin = clock.raw();
        Self { clock, origin }
    }
}

impl Default for QuantaClock {
    fn default() -> Self {
        Self::new()
    }
}

impl Clock for QuantaClock {
    #[inline]
    fn now(&self) -> u64 {
        // `delta_as_nanos` returns 0 when the raw reading is at or before the origin.
        self.clock.delta_as_nanos(self.origin, self.clock.raw())
    }
}

/// A clock built on `std::time::Instant`.
///
/// # Examples
///
/// ```
/// use cellgate::clock::{Clock, StdClock};
/// let clock = StdClock::new();
/// assert!(clock.now() < 60_000_000_000);
/// ```
#[derive(Debug, Clone, Copy)]
pub struct StdClock {
    origin: std::time::Instant,
}

impl StdClock {
    /// A clock whose origin is now.
    #[must_use]
    pub fn new() -> Self {
        Self {
            origin: std::time::Instant::now(),
        }
    }
}

impl Default for StdClock {
    fn default() -> Self {
        Self::new()
    }
}

impl Clock for StdClock {
    #[inline]
    fn now(&self) -> u64 {
        saturating_ns(std::time::Instant::now().saturating_duration_since(self.origin))
    }
}

/// The precise clock the upkeep thread samples; its origin is the coarse time's origin.
static COARSE_BASE: OnceLock<QuantaClock> = OnceLock::new();

/// How often the upkeep thread refreshes the coarse time.
const COARSE_INTERVAL: Duration = Duration::from_millis(1);

/// Stores a fresh reading of the precise clock as the coarse time.
fn refresh_coarse(base: &QuantaClock) {
    time::raise_coarse_ns(base.now());
}

/// A cheap, coarse clock: one relaxed load of a timestamp that a background thread refreshes
/// every millisecond.
///
/// `now()` lags the true time by up to the refresh interval (more if the upkeep thread is
/// descheduled). A lagging clock is safe for every algorithm in this crate: an earlier `now`
/// only makes decisions stricter, never looser. The cost is precision: a key may be denied for
/// up to about a millisecond longer than a precise clock would say.
///
/// The upkeep thread is shared by all coarse clocks in the process; it starts with the first and
/// stops when the last is dropped (dropping that one waits up to one interval for the thread to
/// finish).
///
/// # Examples
///
/// ```
/// use cellgate::{Limiter, Quota};
/// use cellgate::clock::CoarseClock;
///
/// let limiter = Limiter::gcra(Quota::per_second(1_000)).clock(CoarseClock::new()).build()?;
/// assert!(limiter.check().is_allowed());
/// # Ok::<(), cellgate::ConfigError>(())
/// ```
#[derive(Debug)]
pub struct CoarseClock {
    origin: u64,
}

impl CoarseClock {
    /// A coarse clock whose origin is now; starts the shared upkeep thread if needed.
    #[must_use]
    pub fn new() -> Self {
        Self::acquire_upkeep();
        Self {
            origin: time::coarse_ns(),
        }
    }

    fn acquire_upkeep() {
        let base = COARSE_BASE.get_or_init(QuantaClock::new);
        let mut upkeep = time::upkeep();
        upkeep.users += 1;
        if upkeep.running.is_none() {
            refresh_coarse(base);
            let stop = StopFlag::default();
            let their_stop = stop.clone();
            let spawned = std::thread::Builder::new()
                .name("cellgate-coarse-clock".into())
                .spawn(move || {
                    while !their_stop.is_raised() {
                        refresh_coarse(base);
                        std::thread::sleep(COARSE_INTERVAL);
                    }
                });
            // If no thread can be spawned the clock still works; it just stands still at the
            // last refresh, which only ever makes decisions stricter.
            upkeep.running = spawned.ok().map(|thread| (stop, thread));
        }
    }
}

impl Default for CoarseClock {
    fn default() -> Self {
        Self::new()
    }
}

impl Clone for CoarseClock {
    fn clone(&self) -> Self {
        Self::acquire_upkeep();
        Self {
            origin: self.origin,
        }
    }
}

impl Drop for CoarseClock {
    fn drop(&mut self) {
        let mut upkeep = time::upkeep();
        upkeep.users = upkeep.users.saturating_sub(1);
        if upkeep.users == 0 {
            if let Some((stop, thread)) = upkeep.running.take() {
                stop.raise();
                // A panicked upkeep thread has nothing left to clean up.
                let _ = thread.join();
            }
        }
    }
}

impl Clock for CoarseClock {
    #[inline]
    fn now(&self) -> u64 {
        time::coarse_ns().saturating_sub(self.origin)
    }
}

/// A clock that moves only when told to: for tests and simulations.
///
/// Clones share one time. It starts at 0 and may be moved backwards with [`set`](Self::set).
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use cellgate::clock::{Clock, ManualClock};
///
/// let clock = ManualClock::new();
/// let other = clock.clone();
/// clock.advance(Duration::from_millis(5));
/// assert_eq!(other.now(), 5_000_000);
/// other.set(Duration::from_secs(3));
/// assert_eq!(clock.now(), 3_000_000_000);
/// clock.set(Duration::ZERO); // backwards is allowed
/// assert_eq!(clock.now(), 0);
/// ```
#[derive(Debug, Clone, Default)]
pub struct ManualClock {
    ns: ManualTime,
}

impl ManualClock {
    /// A clock at 0.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// Moves the clock forward by `d`, saturating at `u64::MAX` ns.
    pub fn advance(&self, d: Duration) {
        self.advance_ns(saturating_ns(d));
    }

    /// Moves the clock forward by `ns` nanoseconds, saturating at `u64::MAX`.
    pub fn advance_ns(&self, ns: u64) {
        self.ns.advance(ns);
    }

    /// Sets the clock to `d` since the origin (saturating at `u64::MAX` ns); may go backwards.
    pub fn set(&self, d: Duration) {
        self.set_ns(saturating_ns(d));
    }

    /// Sets the clock to `ns` nanoseconds since the origin; may go backwards.
    pub fn set_ns(&self, ns: u64) {
        self.ns.set(ns);
    }
}

impl Clock for ManualClock {
    #[inline]
    fn now(&self) -> u64 {
        self.ns.get()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn manual_clock_saturates() {
        let c = ManualClock::new();
        c.set_ns(u64::MAX - 1);
        c.advance(Duration::from_secs(1));
        assert_eq!(c.now(), u64::MAX);
        c.set(Duration::MAX);
        assert_eq!(c.now(), u64::MAX);
    }

    #[test]
    fn real_clocks_move_forward() {
        /// Waits (up to 5 s, so a loaded machine cannot make this flaky) until `f` is true.
        fn eventually(f: impl Fn() -> bool) -> bool {
            let start = std::time::Instant::now();
            while start.elapsed() < Duration::from_secs(5) {
                if f() {
                    return true;
                }
                std::thread::sleep(Duration::from_millis(5));
            }
            false
        }
        let q = QuantaClock::new();
        let s = StdClock::new();
        let c = CoarseClock::new();
        let (q0, s0) = (q.now(), s.now());
        assert!(eventually(|| q.now() > q0));
        assert!(eventually(|| s.now() > s0));
        // The coarse clock is refreshed every millisecond by the upkeep thread.
        assert!(eventually(|| c.now() > 0));
        let c2 = c.clone();
        drop(c);
        let before = c2.now();
        assert!(
            eventually(|| c2.now() > before),
            "upkeep survives while one coarse clock lives"
        );
    }
}
