//! The keyed limiter: one cell per key in a sharded map.

use std::borrow::Borrow;
use std::fmt;
use std::hash::Hash;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use crate::algorithm::gcra::decision_after;
use crate::algorithm::{Algorithm, FixedWindow, Gcra, SlidingWindow, Stock, WarmUp};
use crate::cell::Cell;
use crate::clock::{Clock, DefaultClock};
use crate::decision::Decision;
use crate::error::ConfigError;
// dashmap, or its loom stand-in under `cfg(loom)`: the same calls either way.
use crate::exact_map::{DashMap, Entry};
use crate::grow_table::{GrowPolicy, GrowTable};
use crate::quota::Quota;
use crate::reservation::Reservation;
use crate::setting::Setting;
use crate::sliding_log::SlidingLogBuilder;
use crate::sweep::SweepGate;
use crate::table::{InsertPolicy, Table};

/// The hasher of both stores: aHash, keyed from the operating system's random source once per
/// process (and varied per instance), so clients who do not know the key cannot aim hash
/// collisions (HashDoS) or, in the table, fingerprint collisions at another key. About 2–3 ns
/// for a `u64` key; SipHash, the standard library's cryptographic default, costs about 13 ns
/// here, which is most of a check's budget.
pub(crate) type Hasher = ahash::RandomState;

/// A rate limiter with independent state per key (user id, IP, API token, SKU, ...).
///
/// Each key's whole state is one `u64` word updated by compare-and-swap. Lookups take any
/// borrowed form of the key (`&str` for `String` keys), so a hit never allocates; requests that
/// would be denied on a fresh key, and [`peek`](KeyedLimiter::peek)s, never create a key.
///
/// # Stores
///
/// | | growing table (the default) | fixed table (`max_keys(n).fixed_capacity()`) | exact map (`exact_keys()`) |
/// |---|---|---|---|
/// | structure | sharded open-addressing table of 16-byte slots (two 64-bit words); each shard's array is rebuilt to fit its live keys | the same slots in one 16-byte word, allocated for `n` keys at build | dashmap of `K -> AtomicU64` |
/// | a hit | lock-free: hash, a thread-local guard on the shard's array, probe, one 64-bit CAS | lock-free: hash, probe, one 16-byte CAS | a shard read lock (an atomic write on a line shared by all threads), lookup, CAS |
/// | a new key | one insert under its shard's lock; now and then a rebuild of that shard (amortised) | one insert under its shard's lock | one insert under its shard's write lock; the key is cloned into the map |
/// | memory | about 19–21 bytes per live key (22 measured at a million `u64` keys), whatever the key type; follows the live keys | about 23 bytes per key of capacity, from the start | the key, the word and the map's overhead, per key held (about 40 bytes for `u64`) |
/// | idle keys | reclaimed by inserts (see Memory) and sweeps | dropped by sweeps, and at the bound | dropped by sweeps, and at the bound |
/// | key identity | 64-bit fingerprint (see below) | 64-bit fingerprint | exact (`Eq`) |
/// | bound | none, or the `max_keys` ceiling | `max_keys` | none, or `max_keys` |
///
/// The growing table is what a builder gives without further choice: it needs no size, holds
/// only the keys whose state matters (plus recently idle ones), and its hits are plain 64-bit
/// atomics. While one of its shards is rebuilt (when an insert finds the shard's array full, or
/// a sweep finds idle keys in it), the checks of that shard's keys wait for the rebuild: one
/// pass over the shard (a sixty-fourth of the keys, without a ceiling) plus the time for checks
/// already on the old array to finish. Checks of the other shards never wait. Choose
/// [`fixed_capacity`](KeyedBuilder::fixed_capacity) if no check may ever wait for a rebuild and
/// the memory of the bound is acceptable up front; [`WhenFull::EvictNearestFresh`] uses the
/// fixed table.
///
/// **Fingerprints.** The table does not store keys: a key is its 64-bit hash under aHash keyed
/// randomly per process. Two keys collide only if their fingerprints are equal: with `m` keys
/// held, a given new key collides with one of them with probability about `m / 2^64` (1 in 18
/// trillion at a million keys), and the chance that *any* two of a million keys collide is
/// about 2^-25. The consequence of a collision is that the two keys share one budget: each is
/// limited at least as strictly as alone, so a collision can never admit more than the quota.
/// Aiming a collision at somebody else's key needs the per-process hash key, which never leaves
/// the process; a client who does not know it can only guess, at 2^-64 per try. Use
/// [`exact_keys`](KeyedBuilder::exact_keys) if even that is unacceptable.
///
/// # Memory
///
/// A key whose state is equivalent to a fresh key (GCRA: TAT at or before now; windows: window
/// over; stock: never sold) carries no information, and dropping it changes no decision.
///
/// * The **growing table** (the default) drops such keys by itself, on the insert path, as
///   nginx frees idle nodes when it needs memory: when an insert finds its shard's array full,
///   the shard is rebuilt without the keys that have been idle for at least a second, into an
///   array sized for the keys left (and at least half the old size, so that churn costs
///   amortised O(1) per insert). No background thread and no call are needed: memory follows
///   the live keys. Four million distinct keys with at most 100 000 live at any instant peak at
///   about 5 MiB (`examples/grow_memory.rs`). A shard that gets no new keys keeps its array
///   until a sweep ([`evict_idle`](KeyedLimiter::evict_idle), or
///   [`spawn_sweeper`](KeyedLimiter::spawn_sweeper)) rebuilds it without its idle keys.
/// * [`evict_idle`](KeyedLimiter::evict_idle) drops every idle key of any store.
/// * With [`max_keys`](KeyedBuilder::max_keys) set, a new key that arrives while the store is
///   at the bound first triggers such a sweep (at most one every 10 ms of the limiter's clock,
///   one sweeper at a time; the tables also sweep a single full shard on their own); if the
///   store is still full of live keys, the [`WhenFull`] policy decides (by default the new key
///   is denied, with no `retry_after`, and counted in [`refused`](KeyedLimiter::refused)). Keys
///   already held are never affected by the bound.
///
/// A key dropped by a sweep at time `s` comes back as the most conservative state it could have
/// had, so a clock that is behind the sweeper's (or goes backwards) gains nothing from
/// eviction; from `s` on that state decides exactly like a fresh key.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use cellgate::{KeyedLimiter, Quota};
/// use cellgate::clock::ManualClock;
///
/// let clock = ManualClock::new();
/// let users = KeyedLimiter::<u64>::gcra(Quota::per_second(2))
///     .clock(clock.clone())
///     .max_keys(1_000_000)
///     .build()?;
/// assert!(users.check(&42).is_allowed());
/// assert!(users.check(&42).is_allowed());
/// assert!(!users.check(&42).is_allowed());
/// assert!(users.check(&7).is_allowed()); // another key, its own budget
/// assert_eq!(users.len(), 2);
///
/// let names = KeyedLimiter::<String>::gcra(Quota::per_minute(60)).build()?;
/// assert!(names.check("alice").is_allowed()); // &str lookup, no allocation on a hit
/// # Ok::<(), cellgate::ConfigError>(())
/// ```
pub struct KeyedLimiter<K, C = DefaultClock> {
    store: Store<K>,
    setting: Setting,
    clock: C,
    max_keys: usize,
    when_full: WhenFull,
    /// Map store: keys inserted minus keys removed; the cap reads this instead of locking every
    /// shard. (The table keeps its own count.)
    held: AtomicUsize,
    refused: AtomicU64,
    evicted: AtomicU64,
    evicted_live: AtomicU64,
    untracked: AtomicU64,
    sweeps: SweepGate,
    /// The latest `now` at which a sweep dropped keys; new keys start from
    /// `Algorithm::swept_word(swept)` so that a clock behind it gains nothing from eviction.
    /// Through the loom shim, so that loom checks the ordering argument in `fresh_word`.
    swept: crate::sync::AtomicU64,
}

/// Where a keyed limiter keeps its cells.
enum Store<K> {
    /// Exact keys in a dashmap: unbounded unless `max_keys` is set.
    Map(DashMap<K, Cell, Hasher>),
    /// Keys by fingerprint in a fixed-capacity lock-free table (see [`crate::table`]): kept for
    /// `max_keys` with [`WhenFull::EvictNearestFresh`], whose one-key evictions need in-place
    /// removal.
    Table(Table, Hasher),
    /// Keys by fingerprint in the growing lock-free table (see [`crate::grow_table`]): the
    /// default.
    Grow(GrowTable, Hasher),
}

/// What a keyed limiter with [`max_keys`](KeyedBuilder::max_keys) does with a request for a
/// new key when the store is full of *live* keys (keys whose state still matters), after it
/// has dropped every idle key it could. Set with [`KeyedBuilder::when_full`].
///
/// # Which to choose
///
/// The default, [`DenyNew`](WhenFull::DenyNew), is the only policy under which the limiter
/// never admits more than its quota for any key, whatever an attacker sends: a flood of new
/// keys can fill the store and get *new* keys refused until keys go idle, but it can neither
/// reset a tracked key's budget nor get anything admitted unaccounted. Keys already held are
/// never affected. Size `max_keys` above the number of keys live at once in normal traffic
/// (new keys per second × how long a key stays live, `burst × interval` for GCRA) and a flood
/// costs only new visitors, for as long as it lasts. A returning client whose key went idle
/// and was dropped counts as a new visitor: a busy key (one with a backlog) is never dropped,
/// a light user's may be, and while the store is full of live keys it is then refused.
///
/// The lossy policies trade that guarantee for availability to new keys:
/// [`EvictNearestFresh`](WhenFull::EvictNearestFresh) keeps serving new keys by forgetting the
/// live key closest to fresh (an attacker who can create keys can then make a victim key forget
/// up to its whole burst), and [`AdmitUntracked`](WhenFull::AdmitUntracked) decides for new keys
/// as for fresh ones without remembering them (no per-key limit for them at all while the
/// store is full). Put a global limiter in front when using either.
///
/// # Examples
///
/// ```
/// use cellgate::{KeyedLimiter, Quota, WhenFull};
/// use cellgate::clock::ManualClock;
///
/// let l = KeyedLimiter::<u64>::gcra(Quota::per_hour(1))
///     .clock(ManualClock::new())
///     .max_keys(1)
///     .when_full(WhenFull::AdmitUntracked)
///     .build()?;
/// assert!(l.check(&1).is_allowed());
/// assert!(l.check(&2).is_allowed()); // no room: decided as fresh, not remembered
/// assert!(l.check(&2).is_allowed());
/// assert_eq!((l.len(), l.untracked()), (1, 2));
/// # Ok::<(), cellgate::ConfigError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum WhenFull {
    /// Deny requests for new keys (no `retry_after`), counted in
    /// [`refused`](KeyedLimiter::refused). Fails closed: the default.
    #[default]
    DenyNew,
    /// Evict the live key nearest to fresh (the least `reset_after`, among a sample of 64
    /// slots around the new key's place in the table; this policy selects the fixed-capacity
    /// table, whose slots can be freed one at a time), counted in
    /// [`evicted_live`](KeyedLimiter::evicted_live). Lossy: the evicted key starts over with a
    /// fresh budget, gaining up to its `reset_after` worth of credit. Stock keys are never
    /// evicted (stock is configuration, not state). The bounded table only: with
    /// [`exact_keys`](KeyedBuilder::exact_keys), `build()` reports
    /// [`ConfigError::Unsupported`].
    EvictNearestFresh,
    /// Decide requests for new keys as for a fresh key, without storing them, counted in
    /// [`untracked`](KeyedLimiter::untracked). Lossy: such keys are not limited at all while the
    /// store stays full.
    AdmitUntracked,
}

/// Shards of the exact map. A sweep write-locks one shard at a time, so more shards mean shorter
/// pauses for the checks that land on the shard being swept: at a million keys, 256 shards hold
/// about 4 000 keys each, a few tens of microseconds of sweeping (dashmap's default, four per
/// core, would hold 125 000 each on two cores: over a millisecond). Costs a few tens of KiB.
const MAP_SHARDS: usize = 256;

/// Keys [`KeyedLimiter::check_many`] hashes and touches before checking them: enough
/// independent loads in flight to cover a miss's latency, few enough that the group's slots are
/// still in the L1 cache when their checks run.
const BATCH: usize = 16;

/// The largest `max_keys` the fingerprint tables accept (the fixed one allocates about 23 bytes
/// per key up front); larger bounds need [`KeyedBuilder::exact_keys`].
pub const MAX_TABLE_KEYS: usize = 1 << 30;

/// Configures a [`KeyedLimiter`]; finish with [`build`](KeyedBuilder::build).
#[must_use = "a builder does nothing until build() is called"]
pub struct KeyedBuilder<K, C> {
    algorithm: Result<Algorithm, ConfigError>,
    clock: C,
    max_keys: Option<usize>,
    exact_keys: bool,
    fixed_capacity: bool,
    when_full: WhenFull,
    _key: std::marker::PhantomData<fn(K)>,
}

impl<K, C: fmt::Debug> fmt::Debug for KeyedBuilder<K, C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KeyedBuilder")
            .field("algorithm", &self.algorithm)
            .field("clock", &self.clock)
            .field("max_keys", &self.max_keys)
            .field("exact_keys", &self.exact_keys)
            .field("fixed_capacity", &self.fixed_capacity)
            .field("when_full", &self.when_full)
            .finish()
    }
}

impl<K: Hash + Eq> KeyedLimiter<K, DefaultClock> {
    /// A GCRA limiter (token bucket / leaky bucket as a meter) applying `quota` to each key.
    ///
    /// ```
    /// use cellgate::{KeyedLimiter, Quota};
    /// let per_ip = KeyedLimiter::<std::net::IpAddr>::gcra(Quota::per_second(50)).build()?;
    /// assert!(per_ip.check(&"10.0.0.1".parse().unwrap()).is_allowed());
    /// # Ok::<(), cellgate::ConfigError>(())
    /// ```
    pub fn gcra(quota: Quota) -> KeyedBuilder<K, DefaultClock> {
        KeyedBuilder::new(quota.gcra_params().map(|p| Algorithm::Gcra(Gcra::new(p))))
    }

    /// A fixed window counter: at most `limit` units per key in each window
    /// `[k*window, (k+1)*window)` of the clock (the Redis `INCR` + `EXPIRE` pattern).
    ///
    /// Windows are aligned to the clock's origin; denied requests are not counted. The packed
    /// state holds limits up to `2^(64 - I) - 1`, where `I` is the bits of `u64::MAX / window_ns`
    /// (536 870 911 for a 1 s window); more is a [`ConfigError::LimitTooLarge`].
    ///
    /// ```
    /// use std::time::Duration;
    /// use cellgate::KeyedLimiter;
    /// use cellgate::clock::ManualClock;
    ///
    /// let clock = ManualClock::new();
    /// let l = KeyedLimiter::<String>::fixed_window(2, Duration::from_secs(1))
    ///     .clock(clock.clone())
    ///     .build()?;
    /// assert!(l.check("alice").is_allowed());
    /// assert!(l.check("alice").is_allowed());
    /// let d = l.check("alice");
    /// assert!(!d.is_allowed());
    /// assert_eq!(d.retry_after(), Some(Duration::from_secs(1))); // the next window
    /// # Ok::<(), cellgate::ConfigError>(())
    /// ```
    pub fn fixed_window(limit: u32, window: Duration) -> KeyedBuilder<K, DefaultClock> {
        KeyedBuilder::new(FixedWindow::new(limit, window).map(Algorithm::FixedWindow))
    }

    /// A sliding window counter (Cloudflare's two-window estimate, in exact integer
    /// arithmetic): admits `n` iff `prev * (W - e) + (curr + n) * W <= limit * W`, where `e` is
    /// the time into the current window.
    ///
    /// The packed state holds limits up to `2^C - 1` with `C = (64 - I) / 2` (16 383 for a 1 s
    /// window, 131 071 for a minute, 1 048 575 for an hour); more is a
    /// [`ConfigError::LimitTooLarge`].
    ///
    /// ```
    /// use std::time::Duration;
    /// use cellgate::KeyedLimiter;
    /// use cellgate::clock::ManualClock;
    ///
    /// let clock = ManualClock::new();
    /// let l = KeyedLimiter::<u64>::sliding_window(100, Duration::from_secs(60))
    ///     .clock(clock.clone())
    ///     .build()?;
    /// assert!(l.check_n(&1, 100).is_allowed());
    /// clock.advance(Duration::from_secs(90)); // half-way into the next window
    /// // The previous window's 100 still weigh 50: 50 more fit.
    /// assert_eq!(l.peek(&1).remaining(), 50);
    /// # Ok::<(), cellgate::ConfigError>(())
    /// ```
    pub fn sliding_window(limit: u32, window: Duration) -> KeyedBuilder<K, DefaultClock> {
        KeyedBuilder::new(SlidingWindow::new(limit, window).map(Algorithm::SlidingWindow))
    }

    /// A stock of `units` per key that only goes down (flash-sale inventory): exactly `units`
    /// are ever admitted per key, under any concurrency, until an operator calls
    /// [`restock`](KeyedLimiter::restock) or [`set_stock`](KeyedLimiter::set_stock). Time plays
    /// no part (the clock is not read).
    ///
    /// For inventory, consider [`exact_keys`](KeyedBuilder::exact_keys) when you also set
    /// `max_keys`: in the fingerprint table two SKUs whose fingerprints collided (probability
    /// about 2^-64 per pair) would share one stock. That can only undersell, never oversell,
    /// but exact keys rule it out.
    ///
    /// ```
    /// use cellgate::KeyedLimiter;
    ///
    /// let skus = KeyedLimiter::<u32>::stock(2).build()?;
    /// assert!(skus.check(&42).is_allowed());
    /// assert!(skus.check(&42).is_allowed());
    /// let d = skus.check(&42);
    /// assert!(!d.is_allowed());
    /// assert_eq!(d.retry_after(), None); // waiting brings no stock back
    /// assert_eq!(skus.restock(&42, 5)?, 5);
    /// assert_eq!(skus.peek(&42).remaining(), 5);
    /// # Ok::<(), cellgate::ConfigError>(())
    /// ```
    pub fn stock(units: u32) -> KeyedBuilder<K, DefaultClock> {
        KeyedBuilder::new(Ok(Algorithm::Stock(Stock::new(units))))
    }
}

impl<K: Hash + Eq> KeyedLimiter<K, DefaultClock> {
    /// A warm-up limiter per key (Guava's `SmoothWarmingUp`): each key starts cold, three
    /// times slower than `stable`, and ramps up to it over `warm_up` of continuous demand;
    /// after idling it cools down again. See [`Limiter::warm_up`](crate::Limiter::warm_up) for
    /// the semantics, state layout and limits. An idle key (cold again, nothing pending) is
    /// equivalent to an unseen one and is evicted like any other.
    ///
    /// ```
    /// use std::time::Duration;
    /// use cellgate::{KeyedLimiter, Quota};
    /// use cellgate::clock::ManualClock;
    ///
    /// let clock = ManualClock::new();
    /// let l = KeyedLimiter::<u64>::warm_up(Quota::per_second(100), Duration::from_secs(1))
    ///     .clock(clock.clone())
    ///     .build()?;
    /// assert!(l.check(&1).is_allowed());
    /// let d = l.check(&1);
    /// assert!(!d.is_allowed());
    /// // Cold: the next one waits almost 3 stable intervals (30 ms), not 10 ms.
    /// assert!(d.retry_after().unwrap() > Duration::from_millis(29));
    /// # Ok::<(), cellgate::ConfigError>(())
    /// ```
    pub fn warm_up(stable: Quota, warm_up: Duration) -> KeyedBuilder<K, DefaultClock> {
        KeyedBuilder::new(WarmUp::new(stable, warm_up).map(Algorithm::WarmUp))
    }

    /// An exact sliding log: never more than `limit` units per key in *any* window of length
    /// `window`. Not one cell per key: O(limit) memory per key, so `limit` is capped at
    /// [`MAX_LOG_LIMIT`](crate::MAX_LOG_LIMIT). Builds a [`SlidingLog`](crate::SlidingLog).
    ///
    /// ```
    /// use std::time::Duration;
    /// use cellgate::KeyedLimiter;
    /// let resets = KeyedLimiter::<u64>::sliding_log(5, Duration::from_secs(3600)).build()?;
    /// assert_eq!(resets.check(&1).remaining(), 4);
    /// # Ok::<(), cellgate::ConfigError>(())
    /// ```
    pub fn sliding_log(limit: u32, window: Duration) -> SlidingLogBuilder<K, DefaultClock> {
        SlidingLogBuilder::new(limit, window)
    }
}

impl<K> KeyedBuilder<K, DefaultClock> {
    fn new(algorithm: Result<Algorithm, ConfigError>) -> Self {
        KeyedBuilder {
            algorithm,
            clock: DefaultClock::new(),
            max_keys: None,
            exact_keys: false,
            fixed_capacity: false,
            when_full: WhenFull::DenyNew,
            _key: std::marker::PhantomData,
        }
    }
}

impl<K: Hash + Eq, C: Clock> KeyedBuilder<K, C> {
    /// Uses `clock` instead of the default clock.
    pub fn clock<C2: Clock>(self, clock: C2) -> KeyedBuilder<K, C2> {
        KeyedBuilder {
            algorithm: self.algorithm,
            clock,
            max_keys: self.max_keys,
            exact_keys: self.exact_keys,
            fixed_capacity: self.fixed_capacity,
            when_full: self.when_full,
            _key: std::marker::PhantomData,
        }
    }

    /// A ceiling on the number of keys held: at it, new keys are handled by the
    /// [`when_full`](Self::when_full) policy. Nothing is allocated for it (the default table
    /// grows with the live keys) unless [`fixed_capacity`](Self::fixed_capacity) is set. See
    /// [`KeyedLimiter`]'s "Stores" and "Memory" sections. Zero, or more than
    /// [`MAX_TABLE_KEYS`] without [`exact_keys`](Self::exact_keys), is a [`ConfigError`].
    ///
    /// Under concurrency the bound may be exceeded by at most the number of threads inserting
    /// new keys at the same moment.
    pub fn max_keys(mut self, max_keys: usize) -> Self {
        self.max_keys = Some(max_keys);
        self
    }

    /// What to do with a new key when the store is full of live keys (see [`WhenFull`];
    /// default [`WhenFull::DenyNew`]). Only matters with [`max_keys`](Self::max_keys).
    pub fn when_full(mut self, policy: WhenFull) -> Self {
        self.when_full = policy;
        self
    }

    /// Identifies keys exactly (each key is stored in a dashmap, compared with `Eq`) instead of
    /// by 64-bit fingerprint in the lock-free table. Use it when keys must never share a
    /// budget, even with probability 2^-64.
    pub fn exact_keys(mut self) -> Self {
        self.exact_keys = true;
        self
    }

    /// Allocates the fingerprint table for [`max_keys`](Self::max_keys) keys at build (about
    /// 23 bytes per key of the bound) instead of growing it with the live keys. The table then
    /// never rebuilds a shard (no check ever waits for one), at the cost of its memory up front;
    /// it is also the table [`WhenFull::EvictNearestFresh`] needs (and selects by itself).
    ///
    /// ```
    /// use cellgate::{KeyedLimiter, Quota};
    /// let l = KeyedLimiter::<u64>::gcra(Quota::per_second(5))
    ///     .max_keys(10_000)
    ///     .fixed_capacity()
    ///     .build()?;
    /// assert!(l.check(&1).is_allowed());
    /// // Without a bound there is nothing to allocate for:
    /// assert!(KeyedLimiter::<u64>::gcra(Quota::per_second(5)).fixed_capacity().build().is_err());
    /// # Ok::<(), cellgate::ConfigError>(())
    /// ```
    pub fn fixed_capacity(mut self) -> Self {
        self.fixed_capacity = true;
        self
    }

    /// Builds the limiter.
    ///
    /// # Errors
    ///
    /// A [`ConfigError`] naming the field when the quota or `max_keys` is invalid.
    pub fn build(self) -> Result<KeyedLimiter<K, C>, ConfigError> {
        let algorithm = self.algorithm?;
        let max_keys = match self.max_keys {
            Some(0) => return Err(ConfigError::Zero { field: "max_keys" }),
            Some(n) => n,
            None => usize::MAX,
        };
        if self.fixed_capacity && (self.max_keys.is_none() || self.exact_keys) {
            return Err(ConfigError::Unsupported {
                operation: "fixed_capacity",
                algorithm: "keyed limiter without max_keys or with exact_keys",
            });
        }
        if self.exact_keys && self.when_full == WhenFull::EvictNearestFresh {
            return Err(ConfigError::Unsupported {
                operation: "when_full(EvictNearestFresh)",
                algorithm: "exact_keys",
            });
        }
        let store = if self.exact_keys {
            Store::Map(DashMap::with_hasher_and_shard_amount(
                Hasher::new(),
                MAP_SHARDS,
            ))
        } else if max_keys > MAX_TABLE_KEYS && self.max_keys.is_some() {
            return Err(ConfigError::TooManyKeys {
                max_keys,
                max: MAX_TABLE_KEYS,
            });
        } else if self.max_keys.is_some()
            && (self.fixed_capacity || self.when_full == WhenFull::EvictNearestFresh)
        {
            Store::Table(Table::with_capacity(max_keys), Hasher::new())
        } else {
            Store::Grow(GrowTable::new(self.max_keys), Hasher::new())
        };
        Ok(KeyedLimiter {
            store,
            setting: Setting::new(algorithm),
            clock: self.clock,
            max_keys,
            when_full: self.when_full,
            held: AtomicUsize::new(0),
            refused: AtomicU64::new(0),
            evicted: AtomicU64::new(0),
            evicted_live: AtomicU64::new(0),
            untracked: AtomicU64::new(0),
            sweeps: SweepGate::new(),
            swept: crate::sync::AtomicU64::new(0),
        })
    }
}

impl<K: Hash + Eq, C: Clock> KeyedLimiter<K, C> {
    /// Checks one request for `key`.
    #[inline(always)]
    pub fn check<Q>(&self, key: &Q) -> Decision
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        self.check_n(key, 1)
    }

    /// Checks a request for `n` units on `key`: all admitted or none.
    ///
    /// `n = 0` consumes nothing; `n` above the limit is denied with no `retry_after`. Neither
    /// creates a key.
    ///
    /// ```
    /// use cellgate::{KeyedLimiter, Quota};
    /// use cellgate::clock::ManualClock;
    /// let l = KeyedLimiter::<u64>::gcra(Quota::per_second(5)).clock(ManualClock::new()).build()?;
    /// assert!(l.check_n(&1, 5).is_allowed());
    /// assert!(!l.check_n(&2, 6).is_allowed());
    /// assert_eq!(l.len(), 1);
    /// # Ok::<(), cellgate::ConfigError>(())
    /// ```
    #[inline(always)]
    pub fn check_n<Q>(&self, key: &Q, n: u32) -> Decision
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        // The built algorithm, at a fixed place in `self`, until a `set_quota`; after one, the
        // current algorithm is read and checked by a second, out-of-line copy of the check.
        // `inline(always)` (here and on `check`): with the runtime-change path, LLVM stopped
        // inlining this function into its callers, and the call (the arguments, the 40-byte
        // decision returned through memory) cost 15-20 instructions per check, all of the
        // difference from a limiter with no runtime change at all (callgrind on
        // examples/probe.rs); inlined, the flag costs a load and a predicted branch.
        match self.setting.unchanged() {
            Some(algorithm) => self.check_on(algorithm, key, n),
            None => self.check_changed(key, n),
        }
    }

    /// [`check_n`](Self::check_n) after a runtime quota change.
    #[cold]
    #[inline(never)]
    fn check_changed<Q>(&self, key: &Q, n: u32) -> Decision
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        self.check_on(&self.setting.load(), key, n)
    }

    #[inline(always)]
    fn check_on<Q>(&self, algorithm: &Algorithm, key: &Q, n: u32) -> Decision
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        self.check_at(algorithm, key, self.now(), n)
    }

    /// [`check_on`](Self::check_on) at a given instant.
    #[inline(always)]
    fn check_at<Q>(&self, algorithm: &Algorithm, key: &Q, now: u64, n: u32) -> Decision
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        // Every path runs its compare-and-swap loop on the word alone and returns the word the
        // decision is taken on; the decision is built once, at the end (see
        // `Algorithm::decide`; a GCRA admission's decision comes from its write, see
        // `decision_after`). Each path gets its own closure, called from exactly one place,
        // so that LLVM inlines the step into the loop. The closures are `move`: they hold
        // copies of `now` and `n`, so no address of theirs escapes (to the out-of-line insert
        // paths) and LLVM keeps them in registers and folds a constant `n` (about 15
        // instructions per check; see examples/probe.rs).
        let word = match &self.store {
            Store::Table(table, hasher) => {
                return self.check_hashed(table, Table::hash(hasher, key), algorithm, now, n);
            }
            Store::Grow(table, hasher) => {
                return self.check_grow(table, GrowTable::hash(hasher, key), algorithm, now, n);
            }
            Store::Map(map) => {
                if let Some(cell) = map.get(key) {
                    let (word, next) = cell.update(move |w| {
                        let next = algorithm.step(w, now, n).1;
                        ((w, next), next)
                    });
                    return decision_after(algorithm, word, next, now, n);
                }
                let step = move |w| {
                    let next = algorithm.step(w, now, n).1;
                    ((w, next), next)
                };
                self.map_insert(map, key, step, now, true)
            }
        };
        match word {
            Some((word, next)) => decision_after(algorithm, word, next, now, n),
            None => self.full(move |w| algorithm.decide(w, now, n)),
        }
    }

    /// The table store's check of the key with hash `h`.
    #[inline(always)]
    fn check_hashed(
        &self,
        table: &Table,
        h: u64,
        algorithm: &Algorithm,
        now: u64,
        n: u32,
    ) -> Decision {
        if let Some(found) = table.find(h) {
            let hit = Table::update(found, h, move |w| {
                let next = algorithm.step(w, now, n).1;
                ((w, next), next)
            });
            if let Ok((word, next)) = hit {
                return decision_after(algorithm, word, next, now, n);
            }
        }
        let step = move |w| {
            let next = algorithm.step(w, now, n).1;
            ((w, next), next)
        };
        match self.table_insert(table, h, now, step, true) {
            Some((word, next)) => decision_after(algorithm, word, next, now, n),
            None => self.full(move |w| algorithm.decide(w, now, n)),
        }
    }

    /// The growing table's check of the key with hash `h`.
    #[inline(always)]
    fn check_grow(
        &self,
        table: &GrowTable,
        h: u64,
        algorithm: &Algorithm,
        now: u64,
        n: u32,
    ) -> Decision {
        if let Some(found) = table.find(h) {
            let (word, next) = GrowTable::update(found, move |w| {
                let next = algorithm.step(w, now, n).1;
                ((w, next), next)
            });
            return decision_after(algorithm, word, next, now, n);
        }
        let step = move |w| {
            let next = algorithm.step(w, now, n).1;
            ((w, next), next)
        };
        match self.grow_insert(table, h, now, step, true) {
            Some((word, next)) => decision_after(algorithm, word, next, now, n),
            None => self.full(move |w| algorithm.decide(w, now, n)),
        }
    }

    /// Checks one request for each key of `keys`, in order, and appends the decisions to `out`
    /// (one per key, in the same order). Each decision is the one [`check`](Self::check) would
    /// give for that key if called for the keys one after another, **all at one instant**: the
    /// clock is read once per call. A key that appears twice is charged twice; a new key is
    /// created (or refused at [`max_keys`](KeyedBuilder::max_keys)) exactly as by `check`.
    ///
    /// With the bounded table this is faster than a loop of `check` when the keys are spread
    /// over a store much larger than the CPU's caches: the keys are hashed and their slots
    /// loaded in groups, so the cache misses of a group overlap instead of being paid one
    /// after another. Allocation-free once `out` has room for the decisions (reuse it:
    /// `out.clear()` keeps its capacity). The exact map store checks the keys one by one.
    ///
    /// Checks of other threads may interleave with the batch's; each check is atomic on its
    /// own, as with `check`.
    ///
    /// ```
    /// use cellgate::{KeyedLimiter, Quota};
    /// use cellgate::clock::ManualClock;
    ///
    /// let l = KeyedLimiter::<u64>::gcra(Quota::per_second(2))
    ///     .clock(ManualClock::new())
    ///     .max_keys(1_000)
    ///     .build()?;
    /// let mut out = Vec::with_capacity(64);
    /// l.check_many(&[1, 2, 1, 1], &mut out);
    /// let allowed: Vec<bool> = out.iter().map(|d| d.is_allowed()).collect();
    /// assert_eq!(allowed, [true, true, true, false]); // key 1's burst of 2 is spent
    ///
    /// // Borrowed forms work as in `check`: `&str` for `String` keys.
    /// let names = KeyedLimiter::<String>::gcra(Quota::per_second(1)).build()?;
    /// out.clear();
    /// names.check_many(["alice", "bob", "alice"], &mut out);
    /// assert_eq!(out.iter().filter(|d| d.is_allowed()).count(), 2);
    /// # Ok::<(), cellgate::ConfigError>(())
    /// ```
    pub fn check_many<'q, Q, I>(&self, keys: I, out: &mut Vec<Decision>)
    where
        I: IntoIterator<Item = &'q Q>,
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized + 'q,
    {
        let changed;
        let algorithm = match self.setting.unchanged() {
            Some(algorithm) => algorithm,
            None => {
                changed = self.setting.load();
                &changed
            }
        };
        let now = self.now();
        let keys = keys.into_iter();
        match &self.store {
            Store::Table(table, hasher) => {
                let mut keys = keys.fuse();
                let mut hashes = [0u64; BATCH];
                loop {
                    // First pass: hash a group of keys and touch each one's home slot. The
                    // loads are independent of each other, so the CPU overlaps their misses.
                    let mut len = 0;
                    for (slot, key) in hashes.iter_mut().zip(&mut keys) {
                        let h = Table::hash(hasher, key);
                        table.touch(h);
                        *slot = h;
                        len += 1;
                    }
                    if len == 0 {
                        break;
                    }
                    // Second pass: the checks themselves, in order, each probing afresh (the
                    // slots are in cache now). Probing afresh, not from the first pass's
                    // values, keeps every decision exactly `check`'s: an earlier check of the
                    // batch may have changed a later key's slot (the same key twice, a new key
                    // inserted, or a key swept or evicted to make room).
                    out.reserve(len);
                    for &h in &hashes[..len] {
                        out.push(self.check_hashed(table, h, algorithm, now, 1));
                    }
                }
            }
            Store::Grow(table, hasher) => {
                let mut keys = keys.fuse();
                let mut hashes = [0u64; BATCH];
                loop {
                    // As for the fixed table above: touch a group's home slots, then check.
                    let mut len = 0;
                    for (slot, key) in hashes.iter_mut().zip(&mut keys) {
                        let h = GrowTable::hash(hasher, key);
                        table.touch(h);
                        *slot = h;
                        len += 1;
                    }
                    if len == 0 {
                        break;
                    }
                    out.reserve(len);
                    for &h in &hashes[..len] {
                        out.push(self.check_grow(table, h, algorithm, now, 1));
                    }
                }
            }
            Store::Map(_) => {
                out.reserve(keys.size_hint().0);
                for key in keys {
                    out.push(self.check_at(algorithm, key, now, 1));
                }
            }
        }
    }

    /// The decision for a new key that the full store cannot take: refused, or (under
    /// [`WhenFull::AdmitUntracked`]) `decide` on a fresh word, not stored.
    #[cold]
    fn full(&self, decide: impl Fn(u64) -> Decision) -> Decision {
        if self.when_full == WhenFull::AdmitUntracked {
            // Relaxed: a statistic.
            self.untracked.fetch_add(1, Ordering::Relaxed);
            return decide(self.fresh_word());
        }
        self.refuse()
    }

    /// The decision a request for `n` units on `key` would get now, consuming nothing and
    /// creating no key.
    ///
    /// ```
    /// use cellgate::{KeyedLimiter, Quota};
    /// let l = KeyedLimiter::<u64>::gcra(Quota::per_second(5)).build()?;
    /// assert!(l.peek_n(&9, 5).is_allowed());
    /// assert!(!l.peek_n(&9, 6).is_allowed());
    /// assert!(l.is_empty());
    /// # Ok::<(), cellgate::ConfigError>(())
    /// ```
    pub fn peek_n<Q>(&self, key: &Q, n: u32) -> Decision
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let now = self.now();
        self.setting.load().decide(self.word_of(key), now, n)
    }

    /// Reserves `n` units on `key`, admitting them now with a delay if their turn comes within
    /// `max_wait`, or denying them (nothing consumed) if it would come later. See
    /// [`Limiter::reserve`](crate::Limiter::reserve) for the semantics and [`Reservation`]; a
    /// denial on a fresh key creates no key.
    ///
    /// ```
    /// use std::time::Duration;
    /// use cellgate::{KeyedLimiter, Quota};
    /// use cellgate::clock::ManualClock;
    ///
    /// let l = KeyedLimiter::<u64>::gcra(Quota::per_second(10).with_burst(1))
    ///     .clock(ManualClock::new())
    ///     .build()?;
    /// let max_wait = Duration::from_millis(250);
    /// let delays: Vec<_> = (0..4).map(|_| l.reserve(&7, 1, max_wait))
    ///     .map(|r| r.is_allowed().then(|| r.delay().as_millis()))
    ///     .collect();
    /// assert_eq!(delays, [Some(0), Some(100), Some(200), None]);
    /// # Ok::<(), cellgate::ConfigError>(())
    /// ```
    pub fn reserve<Q>(&self, key: &Q, n: u32, max_wait: Duration) -> Reservation
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        let algorithm = self.setting.load();
        let now = self.now();
        let wait = crate::quota::saturating_ns(max_wait);
        let step = |w| {
            let write = algorithm.step_within(w, now, n, wait).1;
            ((w, write), write)
        };
        match self.apply(key, now, step, true) {
            Some((before, after)) => Reservation::new(
                algorithm.step_within(before, now, n, wait).0,
                n,
                before,
                after,
            ),
            None => {
                let decision = self.full(|w| algorithm.step_within(w, now, n, wait).0);
                Reservation::new(decision, n, 0, None)
            }
        }
    }

    /// `key` of this limiter as a [`Gate`](crate::Gate) for [`check_all`](crate::check_all).
    pub fn gate<'a, Q>(&'a self, key: &'a Q) -> KeyGate<'a, K, Q, C>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        KeyGate { limiter: self, key }
    }

    /// Waits until `n` units on `key` are admitted, for at most `timeout`, blocking the thread
    /// (Guava's `tryAcquire(n, timeout)`; [`Duration::MAX`] for `acquire(n)`). Returns the
    /// admission, or the denial when the wait would exceed `timeout` or can never end. See
    /// [`Limiter::acquire`](crate::Limiter::acquire).
    ///
    /// ```
    /// use std::time::Duration;
    /// use cellgate::{KeyedLimiter, Quota};
    /// use cellgate::clock::ManualClock;
    ///
    /// // A frozen clock, so that the example cannot depend on the machine's speed (the sleeps
    /// // are real: 5 ms here).
    /// let l = KeyedLimiter::<u64>::gcra(Quota::with_interval(Duration::from_millis(5)))
    ///     .clock(ManualClock::new())
    ///     .build()?;
    /// assert!(l.acquire(&1, 1, Duration::from_secs(1)).is_allowed());
    /// assert!(l.acquire(&1, 1, Duration::from_secs(1)).is_allowed()); // slept 5 ms
    /// let d = l.acquire(&1, 1, Duration::ZERO);
    /// assert!(!d.is_allowed());
    /// assert!(d.retry_after().is_some());
    /// # Ok::<(), cellgate::ConfigError>(())
    /// ```
    pub fn acquire<Q>(&self, key: &Q, n: u32, timeout: Duration) -> Decision
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        crate::wait::acquire(&self.gate(key), n, timeout)
    }

    /// A future that resolves once `n` units on `key` are admitted (no timeout: wrap it in
    /// your executor's). Dropping it before it resolves gives its reserved place back. See
    /// [`UntilReady`](crate::UntilReady).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), cellgate::ConfigError> {
    /// use std::time::Duration;
    /// use cellgate::{KeyedLimiter, Quota};
    ///
    /// let l = KeyedLimiter::<String>::gcra(Quota::with_interval(Duration::from_millis(10))).build()?;
    /// let d = l.until_ready("alice", 1).await;
    /// assert!(d.is_allowed());
    /// # Ok(())
    /// # }
    /// ```
    #[cfg(feature = "async")]
    pub fn until_ready<'a, Q>(
        &'a self,
        key: &'a Q,
        n: u32,
    ) -> crate::UntilReady<KeyGate<'a, K, Q, C>>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        crate::UntilReady::new(self.gate(key), n)
    }

    /// Like [`reserve`](Self::reserve) with the limiter's own queue: a
    /// [`check_n`](Self::check_n) that keeps what [`cancel`](Self::cancel) needs.
    fn charge<Q>(&self, key: &Q, n: u32) -> Reservation
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        let algorithm = self.setting.load();
        let now = self.now();
        let step = |w| {
            let write = algorithm.step(w, now, n).1;
            ((w, write), write)
        };
        match self.apply(key, now, step, true) {
            Some((before, after)) => {
                Reservation::new(algorithm.decide(before, now, n), n, before, after)
            }
            // Untracked or refused: nothing to cancel.
            None => Reservation::new(self.full(|w| algorithm.decide(w, now, n)), n, 0, None),
        }
    }

    /// Gives back the units of `reservation` (obtained from this limiter for `key`) that are
    /// provably still unspent; returns whether anything was given back. See
    /// [`Limiter::cancel`](crate::Limiter::cancel) for exactly what comes back. Creates no key.
    ///
    /// ```
    /// use std::time::Duration;
    /// use cellgate::{KeyedLimiter, Quota};
    /// use cellgate::clock::ManualClock;
    ///
    /// let l = KeyedLimiter::<u64>::gcra(Quota::per_second(1)).clock(ManualClock::new()).build()?;
    /// let r = l.reserve(&1, 1, Duration::from_secs(10));
    /// assert!(l.cancel(&1, r));
    /// assert!(l.is_empty() || l.peek(&1).remaining() == 1);
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
        let algorithm = self.setting.load();
        let now = self.now();
        let (n, before, after) = (reservation.n, reservation.before, reservation.after);
        self.update_existing(key, |w| {
            let write = algorithm.cancel(w, now, n, before, after);
            (write.is_some(), write)
        })
        .unwrap_or(false)
    }

    /// Gives back `n` units of admitted work on `key` that did not happen (a failed order);
    /// returns whether anything was given back. Never more capacity than the quota allows: see
    /// [`Limiter::refund`](crate::Limiter::refund). Creates no key (a key that is not held is
    /// already at its full budget).
    ///
    /// ```
    /// use cellgate::{KeyedLimiter, Quota};
    /// use cellgate::clock::ManualClock;
    /// let l = KeyedLimiter::<&str>::gcra(Quota::per_minute(3)).clock(ManualClock::new()).build()?;
    /// l.check_n(&"alice", 3);
    /// assert!(l.refund(&"alice", 1)); // the payment failed: one back
    /// assert_eq!(l.peek(&"alice").remaining(), 1);
    /// assert!(!l.refund(&"bob", 1)); // nothing to give back
    /// # Ok::<(), cellgate::ConfigError>(())
    /// ```
    pub fn refund<Q>(&self, key: &Q, n: u32) -> bool
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let algorithm = self.setting.load();
        let now = self.now();
        self.update_existing(key, |w| {
            let write = algorithm.refund(w, now, n);
            (write.is_some(), write)
        })
        .unwrap_or(false)
    }

    /// Checks `n` units on `key` against `quota` instead of the limiter's own (GCRA only): the
    /// quota travels with the call, as in redis-cell's `CL.THROTTLE`, for tiers such as free and
    /// premium users sharing one limiter. A key's state is a point in time (its TAT), so its
    /// backlog is judged against whatever quota the call brings; keys that alternate quotas are
    /// limited by each call's quota applied to the same history.
    ///
    /// ```
    /// use cellgate::{KeyedLimiter, Quota};
    /// use cellgate::clock::ManualClock;
    ///
    /// let free = Quota::per_minute(10);
    /// let premium = Quota::per_minute(1_000);
    /// let l = KeyedLimiter::<u64>::gcra(free).clock(ManualClock::new()).build()?;
    /// assert!(!l.check_n(&1, 11).is_allowed());
    /// assert!(l.check_with(&2, &premium, 500)?.is_allowed());
    /// # Ok::<(), cellgate::ConfigError>(())
    /// ```
    ///
    /// # Errors
    ///
    /// [`ConfigError`] if `quota` is invalid, or [`ConfigError::Unsupported`] if this is not a
    /// GCRA limiter.
    pub fn check_with<Q>(&self, key: &Q, quota: &Quota, n: u32) -> Result<Decision, ConfigError>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        self.setting.kind().gcra("check_with")?;
        let algorithm = Algorithm::Gcra(Gcra::new(quota.gcra_params()?));
        Ok(self.check_on(&algorithm, key, n))
    }

    /// Replaces the quota of every key at runtime (GCRA only; Guava's `setRate`, the Lua
    /// script's `init`). Existing keys keep their state, a point in time: a key `b` nanoseconds
    /// behind "fresh" stays `b` nanoseconds behind and is judged against the new interval and
    /// burst from its next check on. No key is rewritten, so the change costs the same for a
    /// million keys as for one. Checks racing with the change see either quota.
    ///
    /// ```
    /// use cellgate::{KeyedLimiter, Quota};
    /// use cellgate::clock::ManualClock;
    /// let l = KeyedLimiter::<u64>::gcra(Quota::per_second(2)).clock(ManualClock::new()).build()?;
    /// l.check_n(&1, 2);
    /// l.set_quota(Quota::per_second(2).with_burst(5))?;
    /// assert_eq!(l.peek(&1).remaining(), 3);
    /// assert_eq!(l.peek(&2).limit(), 5);
    /// # Ok::<(), cellgate::ConfigError>(())
    /// ```
    ///
    /// # Errors
    ///
    /// [`ConfigError`] if `quota` is invalid (nothing changes), or
    /// [`ConfigError::Unsupported`] if this is not a GCRA limiter.
    pub fn set_quota(&self, quota: Quota) -> Result<(), ConfigError> {
        self.setting.kind().gcra("set_quota")?;
        self.setting.store(Gcra::new(quota.gcra_params()?));
        Ok(())
    }

    /// The word `key` holds, or the one it would start from.
    fn word_of<Q>(&self, key: &Q) -> u64
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let word = match &self.store {
            // A miss is confirmed under the shard's lock: see `Table::get`.
            Store::Table(table, hasher) => table.get(Table::hash(hasher, key)),
            Store::Grow(table, hasher) => table.get(GrowTable::hash(hasher, key)),
            Store::Map(map) => map.get(key).map(|cell| cell.load()),
        };
        word.unwrap_or_else(|| self.fresh_word())
    }

    /// Applies `step` to `key`'s cell if the key is held; `None` if it is not.
    fn update_existing<Q, R>(&self, key: &Q, step: impl Fn(u64) -> (R, Option<u64>)) -> Option<R>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        match &self.store {
            // A miss is confirmed under the shard's lock: see `Table::update_existing`.
            Store::Table(table, hasher) => table.update_existing(Table::hash(hasher, key), step),
            Store::Grow(table, hasher) => table.update_existing(GrowTable::hash(hasher, key), step),
            Store::Map(map) => Some(map.get(key)?.update(step)),
        }
    }

    /// The decision for a new key that the full store cannot take.
    #[cold]
    fn refuse(&self) -> Decision {
        // Relaxed: a statistic; nothing is ordered by it.
        self.refused.fetch_add(1, Ordering::Relaxed);
        let limit = self.setting.load().peek(Algorithm::FRESH, 0).limit();
        Decision::deny(limit, 0, one(), None, 0)
    }

    /// Applies `step` to `key`'s cell, creating the cell if `step` writes on a fresh state.
    /// Returns `None` when the key is new, the store is at `max_keys` and `capped` is set.
    fn apply<Q, R>(
        &self,
        key: &Q,
        now: u64,
        step: impl Fn(u64) -> (R, Option<u64>),
        capped: bool,
    ) -> Option<R>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        match &self.store {
            Store::Table(table, hasher) => {
                let h = Table::hash(hasher, key);
                if let Some(found) = table.find(h) {
                    if let Ok(r) = Table::update(found, h, &step) {
                        return Some(r);
                    }
                }
                self.table_insert(table, h, now, step, capped)
            }
            Store::Grow(table, hasher) => {
                let h = GrowTable::hash(hasher, key);
                if let Some(found) = table.find(h) {
                    return Some(GrowTable::update(found, &step));
                }
                self.grow_insert(table, h, now, step, capped)
            }
            Store::Map(map) => {
                if let Some(cell) = map.get(key) {
                    return Some(cell.update(step));
                }
                self.map_insert(map, key, step, now, capped)
            }
        }
    }

    /// The table's miss path: the key was not found (or vanished under a sweep).
    #[inline(never)]
    fn table_insert<R>(
        &self,
        table: &Table,
        h: u64,
        now: u64,
        step: impl Fn(u64) -> (R, Option<u64>),
        capped: bool,
    ) -> Option<R> {
        let policy = TablePolicy {
            limiter: self,
            now,
            capped,
        };
        table.insert(h, step, &policy)
    }

    /// The growing table's miss path: the key was not found (or its shard was being rebuilt).
    #[inline(never)]
    fn grow_insert<R>(
        &self,
        table: &GrowTable,
        h: u64,
        now: u64,
        step: impl Fn(u64) -> (R, Option<u64>),
        capped: bool,
    ) -> Option<R> {
        let policy = TablePolicy {
            limiter: self,
            now,
            capped,
        };
        table.insert(h, step, &policy)
    }

    /// The map's miss path: the key is not held (or was not a moment ago).
    #[inline(never)]
    fn map_insert<Q, R>(
        &self,
        map: &DashMap<K, Cell, Hasher>,
        key: &Q,
        step: impl Fn(u64) -> (R, Option<u64>),
        now: u64,
        capped: bool,
    ) -> Option<R>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        let fresh = self.fresh_word();
        let (result, write) = step(fresh);
        let Some(word) = write.filter(|&w| w != fresh) else {
            // Nothing to remember: denied on a fresh state, n = 0, or a write that leaves the
            // state fresh.
            return Some(result);
        };
        if capped && self.held.load(Ordering::Relaxed) >= self.max_keys && !self.make_room(now) {
            return None;
        }
        Some(match map.entry(key.to_owned()) {
            // Another thread inserted it since our lookup: decide on its state.
            Entry::Occupied(e) => e.get().update(step),
            Entry::Vacant(e) => {
                e.insert(Cell::new(word));
                // Relaxed: `held` is a soft count for the cap and `len`; no memory is
                // published through it.
                self.held.fetch_add(1, Ordering::Relaxed);
                result
            }
        })
    }

    /// Adds `units` to `key`'s stock (saturating) and returns the units now remaining. An
    /// operator action: it creates the key if needed, even at `max_keys`.
    ///
    /// # Errors
    ///
    /// [`ConfigError::Unsupported`] if this is not a [`stock`](KeyedLimiter::stock) limiter;
    /// [`ConfigError::StoreFull`] if the key is new and the bounded table has no slot left for
    /// it even after dropping idle keys (nothing was changed).
    pub fn restock<Q>(&self, key: &Q, units: u64) -> Result<u64, ConfigError>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        let stock = *self.setting.kind().stock("restock")?;
        self.apply(key, self.now(), |word| stock.restock(word, units), false)
            .ok_or(ConfigError::StoreFull {
                max_keys: self.max_keys,
            })
    }

    /// Sets `key`'s remaining stock to `units`, whatever it was. An operator action: it
    /// creates the key if needed, even at `max_keys`.
    ///
    /// ```
    /// use cellgate::KeyedLimiter;
    /// let skus = KeyedLimiter::<u32>::stock(0).build()?; // nothing on sale until set
    /// assert!(!skus.check(&7).is_allowed());
    /// skus.set_stock(&7, 100)?;
    /// assert_eq!(skus.check(&7).remaining(), 99);
    /// # Ok::<(), cellgate::ConfigError>(())
    /// ```
    ///
    /// # Errors
    ///
    /// [`ConfigError::Unsupported`] if this is not a [`stock`](KeyedLimiter::stock) limiter;
    /// [`ConfigError::StoreFull`] as for [`restock`](KeyedLimiter::restock).
    pub fn set_stock<Q>(&self, key: &Q, units: u64) -> Result<(), ConfigError>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        let word = self.setting.kind().stock("set_stock")?.word(units);
        self.apply(key, self.now(), |_| ((), Some(word)), false)
            .ok_or(ConfigError::StoreFull {
                max_keys: self.max_keys,
            })
    }

    /// The decision a request for `key` would get now, consuming nothing and creating no key.
    ///
    /// ```
    /// use cellgate::{KeyedLimiter, Quota};
    /// let l = KeyedLimiter::<u64>::gcra(Quota::per_second(5)).build()?;
    /// assert_eq!(l.peek(&9).remaining(), 5);
    /// assert!(l.is_empty());
    /// # Ok::<(), cellgate::ConfigError>(())
    /// ```
    #[inline]
    pub fn peek<Q>(&self, key: &Q) -> Decision
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let now = self.now();
        self.setting.load().peek(self.word_of(key), now)
    }

    /// Keys currently held.
    pub fn len(&self) -> usize {
        match &self.store {
            Store::Table(table, _) => table.len(),
            Store::Grow(table, _) => table.len(),
            // Relaxed: a snapshot count; see `held`.
            Store::Map(_) => self.held.load(Ordering::Relaxed),
        }
    }

    /// Whether no key is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Requests for new keys denied because the map was full of live keys.
    pub fn refused(&self) -> u64 {
        // Relaxed: a statistic.
        self.refused.load(Ordering::Relaxed)
    }

    /// Keys dropped because their state was equivalent to a fresh key.
    pub fn evicted(&self) -> u64 {
        // Relaxed: a statistic.
        self.evicted.load(Ordering::Relaxed)
    }

    /// Live keys evicted to make room under [`WhenFull::EvictNearestFresh`].
    pub fn evicted_live(&self) -> u64 {
        // Relaxed: a statistic.
        self.evicted_live.load(Ordering::Relaxed)
    }

    /// Requests for new keys decided without storing the key, under
    /// [`WhenFull::AdmitUntracked`].
    pub fn untracked(&self) -> u64 {
        // Relaxed: a statistic.
        self.untracked.load(Ordering::Relaxed)
    }

    /// The policy for a new key when the store is full of live keys.
    pub fn when_full_policy(&self) -> WhenFull {
        self.when_full
    }

    /// Drops every key whose state is equivalent to a fresh key at the current time, and returns
    /// how many it dropped. Lossless: no future decision changes.
    ///
    /// Each shard is locked for writing while it is swept; checks on other shards proceed.
    /// [`spawn_sweeper`](KeyedLimiter::spawn_sweeper) calls this periodically on a background
    /// thread.
    ///
    /// ```
    /// use std::time::Duration;
    /// use cellgate::{KeyedLimiter, Quota};
    /// use cellgate::clock::ManualClock;
    /// let clock = ManualClock::new();
    /// let l = KeyedLimiter::<u64>::gcra(Quota::per_second(1)).clock(clock.clone()).build()?;
    /// l.check(&1);
    /// assert_eq!(l.evict_idle(), 0); // key 1 is not back to full yet
    /// clock.advance(Duration::from_secs(1));
    /// assert_eq!(l.evict_idle(), 1);
    /// assert!(l.is_empty());
    /// # Ok::<(), cellgate::ConfigError>(())
    /// ```
    pub fn evict_idle(&self) -> usize {
        let now = self.clock.now();
        self.evict_idle_at(now)
    }

    /// The time for a decision: the clock, unless the algorithm ignores time (stock).
    #[inline(always)]
    fn now(&self) -> u64 {
        if self.setting.kind().uses_time() {
            self.clock.now()
        } else {
            0
        }
    }

    /// The word a key that is not in the map starts from.
    #[inline]
    fn fresh_word(&self) -> u64 {
        // Relaxed suffices: a sweep raises `swept` *before* it takes the shard lock to remove
        // keys, and a checker only gets here after its lookup missed under that shard's lock,
        // so the lock's release/acquire orders the raise before this load whenever the miss
        // was caused by that sweep.
        match self.swept.load(crate::sync::Ordering::Relaxed) {
            0 => Algorithm::FRESH,
            swept => self.setting.kind().swept_word(swept),
        }
    }

    fn evict_idle_at(&self, now: u64) -> usize {
        // Relaxed: see `fresh_word`; ordered by the shard locks `retain` takes below.
        self.swept.fetch_max(now, crate::sync::Ordering::Relaxed);
        let is_idle = |word| self.setting.kind().is_idle(word, now);
        let removed = match &self.store {
            Store::Table(table, _) => table.sweep(&is_idle),
            Store::Grow(table, _) => table.sweep(&is_idle),
            Store::Map(map) => {
                let mut removed = 0usize;
                // The shard's write lock excludes every check on that shard, so no admission
                // can be in flight on a cell while it is judged idle and removed.
                map.retain(|_, cell| {
                    let keep = !is_idle(cell.load());
                    removed += usize::from(!keep);
                    keep
                });
                // Relaxed: counters only (see `held`).
                self.held.fetch_sub(removed, Ordering::Relaxed);
                removed
            }
        };
        // Relaxed: a statistic.
        self.evicted.fetch_add(removed as u64, Ordering::Relaxed);
        removed
    }

    /// At the cap: sweeps idle keys if no sweep ran recently and nobody else is sweeping.
    /// Returns whether there is room now.
    #[cold]
    fn make_room(&self, now: u64) -> bool {
        // The back-off runs on the clock even when decisions ignore time (stock decides at 0):
        // otherwise a stock store would sweep once and never again.
        self.sweeps.maybe_sweep(self.clock.now(), || {
            self.evict_idle_at(now);
        });
        self.len() < self.max_keys
    }

    /// The policy this limiter enforces now (after any [`set_quota`](Self::set_quota)).
    ///
    /// ```
    /// use std::time::Duration;
    /// use cellgate::{KeyedLimiter, PolicyKind};
    /// let l = KeyedLimiter::<u64>::fixed_window(100, Duration::from_secs(60)).build()?;
    /// let p = l.policy();
    /// assert_eq!((p.kind(), p.limit(), p.window()), (PolicyKind::FixedWindow, 100, Some(Duration::from_secs(60))));
    /// # Ok::<(), cellgate::ConfigError>(())
    /// ```
    pub fn policy(&self) -> crate::Policy {
        self.setting.load().policy()
    }

    /// The clock this limiter reads.
    pub fn clock(&self) -> &C {
        &self.clock
    }
}

/// One key of a [`KeyedLimiter`], as a [`Gate`](crate::Gate) for [`check_all`](crate::check_all).
/// Made by [`KeyedLimiter::gate`].
pub struct KeyGate<'a, K, Q: ?Sized, C> {
    limiter: &'a KeyedLimiter<K, C>,
    key: &'a Q,
}

impl<K, Q: ?Sized + fmt::Debug, C> fmt::Debug for KeyGate<'_, K, Q, C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KeyGate").field("key", &self.key).finish()
    }
}

impl<K, Q, C> crate::multi::Gate for KeyGate<'_, K, Q, C>
where
    K: Hash + Eq + Borrow<Q>,
    Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    C: Clock,
{
    fn charge(&self, n: u32) -> Reservation {
        self.limiter.charge(self.key, n)
    }

    fn cancel(&self, reservation: Reservation) -> bool {
        self.limiter.cancel(self.key, reservation)
    }

    fn peek_n(&self, n: u32) -> Decision {
        self.limiter.peek_n(self.key, n)
    }

    fn reserve(&self, n: u32, max_wait: Duration) -> Reservation {
        self.limiter.reserve(self.key, n, max_wait)
    }
}

impl<K, Q, C> crate::RateLimiter<Q> for KeyedLimiter<K, C>
where
    K: Hash + Eq + Borrow<Q>,
    Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    C: Clock,
{
    fn check_n(&self, key: &Q, n: u32) -> Decision {
        KeyedLimiter::check_n(self, key, n)
    }

    fn peek_n(&self, key: &Q, n: u32) -> Decision {
        KeyedLimiter::peek_n(self, key, n)
    }

    fn charge(&self, key: &Q, n: u32) -> Reservation {
        KeyedLimiter::charge(self, key, n)
    }

    fn cancel(&self, key: &Q, reservation: Reservation) -> bool {
        KeyedLimiter::cancel(self, key, reservation)
    }

    fn reserve(&self, key: &Q, n: u32, max_wait: Duration) -> Reservation {
        KeyedLimiter::reserve(self, key, n, max_wait)
    }

    fn policy(&self) -> crate::Policy {
        KeyedLimiter::policy(self)
    }
}

/// The table's view of this limiter during one insert.
struct TablePolicy<'a, K, C> {
    limiter: &'a KeyedLimiter<K, C>,
    now: u64,
    capped: bool,
}

impl<K: Hash + Eq, C: Clock> InsertPolicy for TablePolicy<'_, K, C> {
    fn fresh(&self) -> u64 {
        self.limiter.fresh_word()
    }

    fn is_idle(&self, word: u64) -> bool {
        self.limiter.setting.kind().is_idle(word, self.now)
    }

    fn before_sweep(&self) {
        // Relaxed: ordered by the shard lock the sweep holds (see `fresh_word`).
        self.limiter
            .swept
            .fetch_max(self.now, crate::sync::Ordering::Relaxed);
    }

    fn has_room(&self, table: &Table) -> bool {
        !self.capped || table.len() < self.limiter.max_keys
    }

    fn make_room(&self, _: &Table) -> bool {
        self.limiter.make_room(self.now)
    }

    fn eviction_cost(&self, word: u64) -> Option<u64> {
        if self.limiter.when_full != WhenFull::EvictNearestFresh {
            return None;
        }
        eviction_cost(&self.limiter.setting.load(), word, self.now)
    }

    fn evicted(&self, live: bool) {
        // Relaxed: statistics.
        if live {
            self.limiter.evicted_live.fetch_add(1, Ordering::Relaxed);
        } else {
            self.limiter.evicted.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// How long a key must have been idle before an insert's rebuild reclaims it, in nanoseconds
/// (sweeps and the ceiling take every idle key). Like nginx's `limit_req`, which frees a node
/// only after a minute without requests, but shorter, because a flood of new keys is held for
/// this long: keys idle for less are kept, so that a client that comes back soon after its
/// budget refilled hits its slot instead of being inserted again. Lossless either way.
const RECLAIM_AGE_NS: u64 = 1_000_000_000;

impl<K: Hash + Eq, C: Clock> GrowPolicy for TablePolicy<'_, K, C> {
    fn fresh(&self) -> u64 {
        self.limiter.fresh_word()
    }

    fn is_idle(&self, word: u64) -> bool {
        // Idle at an earlier instant implies idle now (no algorithm's state becomes live again
        // without a write), so this drops only keys that are idle now, and have been for
        // `RECLAIM_AGE_NS`.
        self.limiter
            .setting
            .kind()
            .is_idle(word, self.now.saturating_sub(RECLAIM_AGE_NS))
    }

    fn before_sweep(&self) {
        // Relaxed: ordered by the shard lock the rebuild holds (see `fresh_word`).
        self.limiter
            .swept
            .fetch_max(self.now, crate::sync::Ordering::Relaxed);
    }

    fn has_room(&self, held: usize) -> bool {
        !self.capped || held < self.limiter.max_keys
    }

    fn make_room(&self) -> bool {
        self.limiter.make_room(self.now)
    }

    fn dropped(&self, n: usize) {
        // Relaxed: a statistic.
        self.limiter.evicted.fetch_add(n as u64, Ordering::Relaxed);
    }
}

/// How far a live key is from fresh: its `reset_after`; `None` for keys that are never evicted
/// (stock keys, whose state is configuration).
fn eviction_cost(algorithm: &Algorithm, word: u64, now: u64) -> Option<u64> {
    if matches!(algorithm, Algorithm::Stock(_)) {
        return None;
    }
    Some(algorithm.peek(word, now).reset_after_ns())
}

fn one() -> std::num::NonZeroU64 {
    std::num::NonZeroU64::MIN
}

impl<K, C: fmt::Debug> fmt::Debug for KeyedLimiter<K, C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KeyedLimiter")
            .field("algorithm", &self.setting)
            .field("clock", &self.clock)
            .field("max_keys", &self.max_keys)
            .finish_non_exhaustive()
    }
}
