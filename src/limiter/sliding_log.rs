//! The exact sliding log limiter: a log of admission times per key.

use std::borrow::Borrow;
use std::fmt;
use std::hash::Hash;
use std::time::Duration;

use crate::algorithm::sliding_log::{Log, LogConfig};
use crate::clock::{Clock, DefaultClock};
use crate::decision::Decision;
use crate::error::ConfigError;
use crate::reservation::Reservation;
use crate::store::exact::ExactMap;
use crate::store::stats::StoreCounters;
use crate::sync::sweep_gate::SweepGate;
// std's mutex, or loom's under `cfg(loom)`.
use crate::sync::{Counter, Lock};

/// Never more than `limit` units for a key in *any* window of length `W`: the exact guarantee
/// of the Redis `ZSET` sliding-log scripts, which no counter gives.
///
/// Unlike every other limiter in the crate this is **not one cell per key**: each key keeps a
/// log of its admission times, O(limit) memory per key (at most `limit` entries of 16 bytes), so
/// limits are capped at [`MAX_SLIDING_LOG_LIMIT`](crate::MAX_SLIDING_LOG_LIMIT). Use it for small limits where
/// exactness matters (logins, password resets, payouts); use
/// [`KeyedLimiter::sliding_window`](crate::KeyedLimiter::sliding_window) otherwise.
///
/// # Concurrency
///
/// Each key's log sits behind its own mutex inside the sharded map. A check holds that mutex
/// for the few instructions that drop expired entries, compare and append (a denial also scans
/// the log for its `retry_after`). Checks on different keys never share a lock beyond the
/// shard's read lock, and the lock makes every check on one key atomic: the admitted units in
/// any window can never exceed the limit, whatever the interleaving.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use cellgate::KeyedLimiter;
/// use cellgate::clock::ManualClock;
///
/// let clock = ManualClock::new();
/// let logins = KeyedLimiter::<String>::sliding_log(3, Duration::from_secs(60))
///     .clock(clock.clone())
///     .build()?;
/// for _ in 0..3 {
///     assert!(logins.check("alice").is_allowed());
/// }
/// clock.advance(Duration::from_secs(59));
/// let d = logins.check("alice");
/// assert!(!d.is_allowed());
/// assert_eq!(d.retry_after(), Some(Duration::from_secs(1)));
/// # Ok::<(), cellgate::ConfigError>(())
/// ```
pub struct SlidingLog<K, C = DefaultClock> {
    map: ExactMap<K, Lock<Log>>,
    config: LogConfig,
    clock: C,
    max_keys: usize,
    counters: StoreCounters,
    sweeps: SweepGate,
    /// The latest `now` at which a sweep dropped keys (see `Log::swept`). Through the loom
    /// shim, as `KeyedLimiter::swept`.
    swept: Counter,
}

/// Configures a [`SlidingLog`]; finish with [`build`](SlidingLogBuilder::build).
#[must_use = "a builder does nothing until build() is called"]
pub struct SlidingLogBuilder<K, C> {
    config: Result<LogConfig, ConfigError>,
    clock: C,
    max_keys: Option<usize>,
    _key: std::marker::PhantomData<fn(K)>,
}

// By hand: a derive would ask `K: Clone`, which the builder does not hold.
impl<K, C: Clone> Clone for SlidingLogBuilder<K, C> {
    fn clone(&self) -> Self {
        SlidingLogBuilder {
            config: self.config.clone(),
            clock: self.clock.clone(),
            max_keys: self.max_keys,
            _key: std::marker::PhantomData,
        }
    }
}

impl<K, C: fmt::Debug> fmt::Debug for SlidingLogBuilder<K, C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SlidingLogBuilder")
            .field("config", &self.config)
            .field("clock", &self.clock)
            .field("max_keys", &self.max_keys)
            .finish()
    }
}

impl<K: Hash + Eq> SlidingLog<K, DefaultClock> {
    /// Starts building an exact sliding log: never more than `limit` units per key in *any*
    /// window of length `window` (the same as [`KeyedLimiter::sliding_log`](crate::KeyedLimiter::sliding_log)).
    ///
    /// ```
    /// use std::time::Duration;
    /// use cellgate::SlidingLog;
    /// let resets = SlidingLog::<u64>::builder(5, Duration::from_secs(3600)).build()?;
    /// assert_eq!(resets.check(&1).remaining(), 4);
    /// # Ok::<(), cellgate::ConfigError>(())
    /// ```
    pub fn builder(limit: u32, window: Duration) -> SlidingLogBuilder<K, DefaultClock> {
        SlidingLogBuilder::new(limit, window)
    }
}

impl<K: Hash + Eq> SlidingLogBuilder<K, DefaultClock> {
    pub(crate) fn new(limit: u32, window: Duration) -> Self {
        Self {
            config: LogConfig::new(limit, window),
            clock: DefaultClock::new(),
            max_keys: None,
            _key: std::marker::PhantomData,
        }
    }
}

impl<K: Hash + Eq, C: Clock> SlidingLogBuilder<K, C> {
    /// Uses `clock` instead of the default clock.
    pub fn clock<C2: Clock>(self, clock: C2) -> SlidingLogBuilder<K, C2> {
        SlidingLogBuilder {
            config: self.config,
            clock,
            max_keys: self.max_keys,
            _key: std::marker::PhantomData,
        }
    }

    /// Bounds the number of keys held: a new key arriving when the map is full after dropping
    /// idle keys is denied. May be exceeded by the number of threads inserting at once.
    pub fn max_keys(mut self, max_keys: usize) -> Self {
        self.max_keys = Some(max_keys);
        self
    }

    /// Builds the limiter.
    ///
    /// # Errors
    ///
    /// A [`ConfigError`] for a zero limit or window, a window longer than `u64` nanoseconds, a
    /// limit above [`MAX_SLIDING_LOG_LIMIT`](crate::MAX_SLIDING_LOG_LIMIT), or `max_keys(0)`.
    pub fn build(self) -> Result<SlidingLog<K, C>, ConfigError> {
        let config = self.config?;
        let max_keys = match self.max_keys {
            Some(0) => return Err(ConfigError::Zero { field: "max_keys" }),
            Some(n) => n,
            None => usize::MAX,
        };
        Ok(SlidingLog {
            map: ExactMap::new(),
            config,
            clock: self.clock,
            max_keys,
            counters: StoreCounters::new(),
            sweeps: SweepGate::new(),
            swept: Counter::new(0),
        })
    }
}

impl<K: Hash + Eq, C: Clock> SlidingLog<K, C> {
    /// Checks one request for `key`.
    #[inline]
    pub fn check<Q>(&self, key: &Q) -> Decision
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        self.check_n(key, 1)
    }

    /// Checks a request for `n` units on `key`: all admitted or none.
    pub fn check_n<Q>(&self, key: &Q, n: u32) -> Decision
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        let now = self.clock.now();
        let step = |log: &Lock<Log>| log.lock().step(&self.config, now, n);
        if let Some(decision) = self.map.with(key, step) {
            return decision;
        }
        let mut fresh = self.fresh_log();
        let decision = fresh.step(&self.config, now, n);
        if !decision.is_allowed() || n == 0 {
            return decision;
        }
        self.insert(key, fresh, now, step, decision)
            .unwrap_or_else(|| self.refuse())
    }

    /// Inserts `fresh` for `key` (a new key's log after its first admission) and returns
    /// `inserted`; `present` decides instead if another thread inserted the key first; `None`
    /// if the map is at `max_keys` and no sweep makes room.
    fn insert<Q, R>(
        &self,
        key: &Q,
        fresh: Log,
        now: u64,
        present: impl FnOnce(&Lock<Log>) -> R,
        inserted: R,
    ) -> Option<R>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        let make_room = || self.make_room(now);
        self.map.insert(
            key,
            Lock::new(fresh),
            self.max_keys,
            make_room,
            present,
            inserted,
        )
    }

    /// The decision for a new key when the map is full of live keys.
    #[cold]
    fn refuse(&self) -> Decision {
        // Relaxed: a statistic.
        self.counters.refused.add(1);
        Decision::deny(self.config.limit, 0, std::num::NonZeroU64::MIN, None, 0)
            .because(crate::decision::Denial::StoreFull)
    }

    /// The decision a request for `key` would get now, consuming nothing and creating no key.
    pub fn peek<Q>(&self, key: &Q) -> Decision
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let now = self.clock.now();
        self.map
            .with(key, |log| log.lock().peek(&self.config, now))
            .unwrap_or_else(|| self.fresh_log().peek(&self.config, now))
    }

    /// Forgets `key`: its log is emptied, and it decides from now on as a key this limiter has
    /// never seen, with a fresh budget. The one call that hands a key a fresh budget on
    /// purpose (an operator's unblock, a passed CAPTCHA; see
    /// [`KeyedLimiter::forget`](crate::KeyedLimiter::forget)). Returns whether the key was
    /// held; `false` when it was not (it is already fresh). Creates no key.
    ///
    /// ```
    /// use std::time::Duration;
    /// use cellgate::KeyedLimiter;
    /// use cellgate::clock::ManualClock;
    /// let l = KeyedLimiter::<u64>::sliding_log(2, Duration::from_secs(60))
    ///     .clock(ManualClock::new())
    ///     .build()?;
    /// l.check_n(&7, 2);
    /// assert!(!l.check(&7).is_allowed());
    /// assert!(l.forget(&7));
    /// assert_eq!(l.peek(&7).remaining(), 2);
    /// assert!(!l.forget(&8));
    /// # Ok::<(), cellgate::ConfigError>(())
    /// ```
    pub fn forget<Q>(&self, key: &Q) -> bool
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        // The key keeps its place with the log a new key starts from (idle: the next sweep
        // drops it). Built under the key's lock: a sweep may raise the floor meanwhile.
        self.map
            .with(key, |log| *log.lock() = self.fresh_log())
            .is_some()
    }

    /// Keys currently held.
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// Whether no key is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// What the store has done with its keys: keys held, new keys refused, idle keys evicted
    /// (a sliding log never evicts a live key nor decides untracked: those stay 0).
    ///
    /// ```
    /// use std::time::Duration;
    /// use cellgate::KeyedLimiter;
    /// let l = KeyedLimiter::<u64>::sliding_log(2, Duration::from_secs(1)).max_keys(1).build()?;
    /// l.check(&1);
    /// l.check(&2); // no room: refused
    /// assert_eq!((l.stats().keys, l.stats().refused), (1, 1));
    /// # Ok::<(), cellgate::ConfigError>(())
    /// ```
    pub fn stats(&self) -> crate::store::stats::Stats {
        self.counters.snapshot(self.len())
    }

    /// Drops every key whose log has fully expired; returns how many. Lossless.
    pub fn evict_idle(&self) -> usize {
        self.evict_idle_at(self.clock.now())
    }

    /// The log a key that is not in the map starts from.
    fn fresh_log(&self) -> Log {
        // Relaxed: ordered by the shard locks, as in `KeyedLimiter::fresh_word`.
        match self.swept.get() {
            0 => Log::default(),
            swept => Log::swept(swept),
        }
    }

    fn evict_idle_at(&self, now: u64) -> usize {
        // Relaxed: see `fresh_log`; ordered by the shard locks `retain` takes below.
        self.swept.raise_to(now);
        // The shard's write lock excludes every check on the shard while it is swept.
        let removed = self
            .map
            .retain(|log| !log.lock().is_idle(&self.config, now));
        // Relaxed: a statistic.
        self.counters.evicted.add(removed as u64);
        removed
    }

    /// At the cap: sweeps idle keys if a sweep is due; returns whether there is room now.
    #[cold]
    fn make_room(&self, now: u64) -> bool {
        self.sweeps.maybe_sweep(now, || {
            self.evict_idle_at(now);
        });
        self.map.len() < self.max_keys
    }

    /// The clock this limiter reads.
    pub fn clock(&self) -> &C {
        &self.clock
    }
}

impl<K: Hash + Eq, C: Clock> SlidingLog<K, C> {
    /// The decision `n` units on `key` would get now, recording nothing and creating no key.
    ///
    /// ```
    /// use std::time::Duration;
    /// use cellgate::KeyedLimiter;
    /// let l = KeyedLimiter::<u8>::sliding_log(2, Duration::from_secs(1)).build()?;
    /// assert!(l.peek_n(&1, 2).is_allowed());
    /// assert!(!l.peek_n(&1, 3).is_allowed());
    /// assert!(l.is_empty());
    /// # Ok::<(), cellgate::ConfigError>(())
    /// ```
    pub fn peek_n<Q>(&self, key: &Q, n: u32) -> Decision
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let now = self.clock.now();
        self.map
            .with(key, |log| log.lock().peek_n(&self.config, now, n))
            .unwrap_or_else(|| self.fresh_log().peek_n(&self.config, now, n))
    }

    /// A check of `n` units on `key` that keeps what [`cancel`](Self::cancel) needs: the
    /// instant the units were logged at.
    fn charge<Q>(&self, key: &Q, n: u32) -> Reservation
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        let now = self.clock.now();
        // A log's reservation: `after` is the instant the units were logged at, and `before`
        // any other word (so that the reservation holds them).
        let reservation =
            |(d, at): (Decision, Option<u64>)| Reservation::new(d, n, at.map_or(0, |t| !t), at);
        let charge = |log: &Lock<Log>| reservation(log.lock().charge(&self.config, now, n));
        if let Some(r) = self.map.with(key, charge) {
            return r;
        }
        // A new key: the same path as `check_n`'s.
        let mut fresh = self.fresh_log();
        let (decision, at) = fresh.charge(&self.config, now, n);
        if at.is_none() {
            return reservation((decision, at));
        }
        self.insert(key, fresh, now, charge, reservation((decision, at)))
            .unwrap_or_else(|| reservation((self.refuse(), None)))
    }

    /// A log cannot schedule ahead: a reservation decides as a [`charge`](crate::AnyLimiter::charge)
    /// (no delay, whatever `max_wait`).
    fn reserve<Q>(&self, key: &Q, n: u32, _max_wait: Duration) -> Reservation
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        self.charge(key, n)
    }

    /// Gives back the units of `reservation` (a charge of `key` through
    /// [`AnyLimiter`](crate::AnyLimiter), as [`check_all`](crate::check_all) makes): the log forgets exactly
    /// those units, if they have not expired yet. Returns whether anything came back.
    ///
    /// ```
    /// use std::time::Duration;
    /// use cellgate::{AnyLimiter, KeyedLimiter};
    /// let l = KeyedLimiter::<u8>::sliding_log(2, Duration::from_secs(1)).build()?;
    /// let r = AnyLimiter::charge(&l, &1, 2);
    /// assert!(!l.check(&1).is_allowed());
    /// assert!(l.cancel(&1, r));
    /// assert_eq!(l.peek(&1).remaining(), 2);
    /// # Ok::<(), cellgate::ConfigError>(())
    /// ```
    pub fn cancel<Q>(&self, key: &Q, reservation: Reservation) -> bool
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        if !reservation.holds() {
            return false;
        }
        self.map
            .with(key, |log| {
                log.lock().unadmit(reservation.after, reservation.n)
            })
            .unwrap_or(false)
    }

    /// The policy this limiter enforces: [`PolicyKind::SlidingLog`](crate::PolicyKind),
    /// `limit` per `window`.
    ///
    /// ```
    /// use std::time::Duration;
    /// use cellgate::{KeyedLimiter, PolicyKind};
    /// let l = KeyedLimiter::<u8>::sliding_log(5, Duration::from_secs(60)).build()?;
    /// assert_eq!(l.policy().kind(), PolicyKind::SlidingLog);
    /// assert_eq!(l.policy().window(), Some(Duration::from_secs(60)));
    /// # Ok::<(), cellgate::ConfigError>(())
    /// ```
    pub fn policy(&self) -> crate::policy::Policy {
        self.config.policy()
    }
}

crate::any_limiter::keyed_limiter_traits!(SlidingLog);

impl<K, C: fmt::Debug> fmt::Debug for SlidingLog<K, C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SlidingLog")
            .field("config", &self.config)
            .field("clock", &self.clock)
            .field("max_keys", &self.max_keys)
            .finish_non_exhaustive()
    }
}
