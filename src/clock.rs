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
//!
//! # One reading per request
//!
//! A read of the time-stamp counter costs about as much as the rest of a check of a key
//! (BENCHMARKS.md, "The clock's share of a check"). [`check_all`](crate::check_all) (and
//! `check_all_in`, `check_all_reserving`, the HTTP layer's several limits) therefore charges
//! its limiters at one instant: the first [`QuantaClock`] read during the charges reads the
//! counter, and every other charge of the call uses that reading. By the paragraph above this
//! is safe: the later limiters see a `now` a few nanoseconds early. A rollback after a denial
//! reads the clock afresh: a GCRA rollback gives back only the part of its charge that the
//! clock has not eaten since, which needs a `now` no earlier than that of any check made in
//! between (by another thread). The report of a denial (a peek of every other limiter, after
//! the rollback) then takes one reading for all its peeks. Other clocks read as always, and
//! checks made one by one read the clock once each.

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
    ///
    /// ```
    /// use std::time::Duration;
    /// use cellgate::clock::{Clock, ManualClock};
    ///
    /// let clock = ManualClock::new();
    /// clock.advance(Duration::from_micros(3));
    /// assert_eq!(clock.now(), 3_000);
    /// ```
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
    ///
    /// ```
    /// use cellgate::clock::{Clock, QuantaClock};
    ///
    /// let clock = QuantaClock::new();
    /// assert!(clock.now() < 60_000_000_000); // nanoseconds since `new`
    /// ```
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
        let raw = shared_reading(|| {
            #[cfg(all(test, not(loom)))]
            crate::sync::counts::bump(crate::sync::counts::Event::CounterRead);
            self.clock.raw()
        });
        self.clock.delta_as_nanos(self.origin, raw)
    }
}

/// What [`one_reading`] holds on this thread.
#[derive(Clone, Copy)]
enum Reading {
    /// No scope is open: every clock reads its counter.
    Closed,
    /// A scope is open and no [`QuantaClock`] has read the counter in it yet.
    Open,
    /// A scope is open and this is the counter's reading every [`QuantaClock`] uses in it.
    Taken(u64),
}

thread_local! {
    // Const-initialised and without a destructor: an access is one thread-local load.
    static READING: std::cell::Cell<Reading> = const { std::cell::Cell::new(Reading::Closed) };
}

/// The counter reading to use now: the scope's if one is open (taking it with `read` if
/// nobody has yet), else a fresh one.
#[inline]
fn shared_reading(read: impl FnOnce() -> u64) -> u64 {
    match READING.try_with(std::cell::Cell::get) {
        Ok(Reading::Taken(raw)) => raw,
        Ok(Reading::Open) => {
            let raw = read();
            let _ = READING.try_with(|reading| reading.set(Reading::Taken(raw)));
            raw
        }
        Ok(Reading::Closed) | Err(_) => read(),
    }
}

/// Runs `f` with every [`QuantaClock`] read on this thread inside it (the default clock of
/// every limiter) reading the time-stamp counter once, at the first read, and using that one
/// reading after it: [`check_all`](crate::check_all) charges its limiters at one instant, for
/// one counter read rather than one per limiter (a read of the counter costs about as much as
/// a whole check of a key).
///
/// Sound for checks and charges because a reading taken earlier than a limiter's own would be
/// is always safe: an earlier `now` is less time passed, so a decision can only be stricter
/// (see the module's docs), and the scope lasts only as long as `f`; for peeks, which write
/// nothing, any reading is (`check_all` reports a denial's limiters at one). **Not for a GCRA
/// rollback** (`Gcra::cancel` needs a `now` no earlier than any check made since the charge):
/// cancels run outside. A scope opened inside another uses the outer one's reading. Other
/// clocks read as always.
#[inline]
pub(crate) fn one_reading<R>(f: impl FnOnce() -> R) -> R {
    /// Closes the scope it opened, also when `f` unwinds.
    struct Scope(bool);
    impl Drop for Scope {
        fn drop(&mut self) {
            if self.0 {
                let _ = READING.try_with(|reading| reading.set(Reading::Closed));
            }
        }
    }
    // Under loom a model's threads may share one OS thread, and so its thread-locals: no scope
    // (the models drive manual clocks anyway).
    if cfg!(loom) {
        return f();
    }
    let opened = READING
        .try_with(|reading| {
            let closed = matches!(reading.get(), Reading::Closed);
            if closed {
                reading.set(Reading::Open);
            }
            closed
        })
        .unwrap_or(false);
    let _scope = Scope(opened);
    f()
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
    ///
    /// ```
    /// use cellgate::clock::StdClock;
    /// use cellgate::{KeyedLimiter, Quota};
    ///
    /// let limiter = KeyedLimiter::<u64>::gcra(Quota::per_second(10))
    ///     .clock(StdClock::new())
    ///     .build()?;
    /// assert!(limiter.check(&7).is_allowed());
    /// # Ok::<(), cellgate::ConfigError>(())
    /// ```
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
    ///
    /// ```
    /// use cellgate::clock::{Clock, CoarseClock};
    ///
    /// let clock = CoarseClock::new();
    /// assert!(clock.now() < 60_000_000_000); // lags the true time by up to a millisecond
    /// ```
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
    ///
    /// ```
    /// use cellgate::clock::{Clock, ManualClock};
    ///
    /// assert_eq!(ManualClock::new().now(), 0);
    /// ```
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// Moves the clock forward by `d`, saturating at `u64::MAX` ns.
    ///
    /// ```
    /// use std::time::Duration;
    /// use cellgate::clock::{Clock, ManualClock};
    ///
    /// let clock = ManualClock::new();
    /// clock.advance(Duration::from_millis(2));
    /// clock.advance(Duration::MAX);
    /// assert_eq!(clock.now(), u64::MAX);
    /// ```
    pub fn advance(&self, d: Duration) {
        self.advance_ns(saturating_ns(d));
    }

    /// Moves the clock forward by `ns` nanoseconds, saturating at `u64::MAX`.
    ///
    /// ```
    /// use cellgate::clock::{Clock, ManualClock};
    ///
    /// let clock = ManualClock::new();
    /// clock.advance_ns(1_500);
    /// assert_eq!(clock.now(), 1_500);
    /// ```
    pub fn advance_ns(&self, ns: u64) {
        self.ns.advance(ns);
    }

    /// Sets the clock to `d` since the origin (saturating at `u64::MAX` ns); may go backwards.
    ///
    /// ```
    /// use std::time::Duration;
    /// use cellgate::clock::{Clock, ManualClock};
    ///
    /// let clock = ManualClock::new();
    /// clock.set(Duration::from_secs(2));
    /// clock.set(Duration::from_secs(1)); // a step back
    /// assert_eq!(clock.now(), 1_000_000_000);
    /// ```
    pub fn set(&self, d: Duration) {
        self.set_ns(saturating_ns(d));
    }

    /// Sets the clock to `ns` nanoseconds since the origin; may go backwards.
    ///
    /// ```
    /// use cellgate::clock::{Clock, ManualClock};
    ///
    /// let clock = ManualClock::new();
    /// clock.set_ns(42);
    /// assert_eq!(clock.now(), 42);
    /// ```
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

    #[cfg(not(loom))]
    fn counter_reads() -> u64 {
        crate::sync::counts::count(crate::sync::counts::Event::CounterRead)
    }

    /// Inside a scope every default clock uses the first counter reading; the scope closes when
    /// it ends, also by a panic, and a scope inside another keeps the outer one's reading.
    #[cfg(not(loom))]
    #[test]
    fn one_reading_reads_the_counter_once_per_scope() {
        let (a, b) = (QuantaClock::new(), QuantaClock::new());
        let before = counter_reads();
        let (first, again, inner) = one_reading(|| {
            let first = (a.now(), b.now());
            let inner = one_reading(|| a.now());
            (first, a.now(), inner)
        });
        assert_eq!(counter_reads() - before, 1);
        assert_eq!((again, inner), (first.0, first.0));
        // Closed: each read is a fresh one.
        a.now();
        b.now();
        assert_eq!(counter_reads() - before, 3);
        let unwound = std::panic::catch_unwind(|| {
            one_reading(|| {
                a.now();
                panic!("a check that panics");
            })
        });
        assert!(unwound.is_err());
        let after_panic = counter_reads();
        a.now();
        assert_eq!(
            counter_reads() - after_panic,
            1,
            "the scope stayed open after a panic"
        );
    }

    /// `check_all` reads the counter once for all its charges, afresh for a rollback, and once
    /// for the report of a denial; the same limiters checked in turn read it once each.
    #[cfg(not(loom))]
    #[test]
    fn check_all_reads_the_counter_once() {
        use crate::{check_all, KeyedLimiter, Limiter, Quota, StripedLimiter};
        let quota = Quota::per_hour(1).with_burst(5); // no refill during the test
        let per_ip = KeyedLimiter::<u64>::gcra(quota).build().expect("valid");
        let per_user = KeyedLimiter::<u64>::sliding_window(5, Duration::from_secs(1))
            .build()
            .expect("valid");
        let global = Limiter::gcra(quota).build().expect("valid");
        let hot = StripedLimiter::gcra(quota)
            .stripes(2)
            .build()
            .expect("valid");
        let sold_out = Limiter::stock(0).build().expect("valid");
        // Three limiters, then `last`.
        let with = |last: &dyn crate::AnyLimiter| {
            check_all([
                (&per_ip.gate(&1), 1),
                (&per_user.gate(&2), 1),
                (&global, 1),
                (last, 1),
            ])
        };
        let before = counter_reads();
        let d = with(&hot);
        assert!(d.is_allowed());
        assert_eq!(counter_reads() - before, 1);
        // Denied by the last: the charges at one reading; the rollbacks (two of them GCRA
        // cancels) and the report on fresh ones, as a GCRA cancel needs a `now` no earlier than
        // any check made since its charge.
        let before = counter_reads();
        let d = with(&sold_out);
        assert_eq!(d.denied_by(), Some(3));
        assert!(
            counter_reads() - before >= 3,
            "a GCRA rollback reused the charges' reading"
        );
        assert_eq!(
            per_ip.peek(&1).remaining(),
            4,
            "the rollback gave back the whole charge"
        );
        // Denied by the first (a stock, which reads no clock), as in a sold-out rush: nothing
        // to roll back, and the report's peeks of the three others share one reading.
        let before = counter_reads();
        let d = check_all([
            (&sold_out as &dyn crate::AnyLimiter, 1),
            (&per_ip.gate(&1), 1),
            (&per_user.gate(&2), 1),
            (&global, 1),
        ]);
        assert_eq!(d.denied_by(), Some(0));
        // A peek of its unit: 4 held, 3 left after it.
        assert_eq!(d.decisions()[1].remaining(), 3, "the report peeked per_ip");
        assert_eq!(
            counter_reads() - before,
            1,
            "each of the report's peeks read the counter"
        );
        let before = counter_reads();
        assert!(per_ip.check(&1).is_allowed());
        assert!(per_user.check(&2).is_allowed());
        assert!(global.check().is_allowed());
        assert_eq!(counter_reads() - before, 3);
        // A keyed check reads the clock after its probe, once, also for a new key (the step
        // on a fresh word, then the insert) and in an exact-keys store.
        let exact = KeyedLimiter::<String>::gcra(quota)
            .exact_keys()
            .build()
            .expect("valid");
        let before = counter_reads();
        assert!(per_ip.check(&99).is_allowed());
        assert!(exact.check("new").is_allowed());
        assert!(exact.check("new").is_allowed());
        assert_eq!(counter_reads() - before, 3);
    }

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
