//! Building a keyed limiter: the constructors per algorithm, [`KeyedLimiterBuilder`] and what to do
//! when the store is full ([`WhenFull`]).

use super::*;
use crate::sync::grow::{Keys, NewColumn};

/// What a keyed limiter with [`max_keys`](KeyedLimiterBuilder::max_keys) does with a request for a
/// new key when the store is full of *live* keys (keys whose state still matters), after it
/// has dropped every idle key it could. Set with [`KeyedLimiterBuilder::when_full`].
///
/// # Which to choose
///
/// A flood of new keys (random source addresses, made-up user ids) fills any bounded store
/// with keys that each made one request and stay live until their budget refills. Then two
/// things matter: that **busy keys keep their budgets** (a flood that could push a key with a
/// backlog out of the store would reset it, and that key could then send its whole burst
/// again), and that **returning users are served** (a client whose key went idle and was
/// dropped comes back as a new key; refusing it because flood keys hold the room turns a flood
/// into an outage for them).
///
/// The default, [`EvictLight`](WhenFull::EvictLight), gives both: at the ceiling a new key may
/// take the place of a *light* key, one holding at most one unit more than a fresh key would
/// (a flood key after its single request is light; a key with a backlog is not), so a busy
/// key is never dropped, and each key dropped this way can gain at most one unit of budget, per
/// time it is dropped. nginx's `limit_req` instead frees the least recently used node when its
/// zone is full, whatever its state: a flood faster than the zone turns over resets keys with
/// backlogs. Stock keys are never dropped (their state is configuration): a flash sale's
/// per-user cap (a stock of one per user) holds under any flood, and its per-user rate limits
/// lose at most one unit per eviction of that user's key.
///
/// [`DenyNew`](WhenFull::DenyNew) is the strict choice: the limiter never admits more than its
/// quota for any key, whatever an attacker sends, but while flood keys hold the store a
/// returning user whose key went idle is refused as new. Choose it where one unit more for a
/// light key is worse than refusing new keys during a flood, and size `max_keys` above the
/// keys live at once in normal traffic (new keys per second × how long a key stays live,
/// `burst × interval` for GCRA).
///
/// The lossy policies trade more for availability to new keys:
/// [`EvictNearestFresh`](WhenFull::EvictNearestFresh) keeps serving new keys by forgetting the
/// live key closest to fresh, however far that is (an attacker who can create keys can then make
/// a victim key forget up to its whole burst), and [`AdmitUntracked`](WhenFull::AdmitUntracked)
/// decides for new keys as for fresh ones without remembering them (no per-key limit for them
/// at all while the store is full). Put a global limiter in front when using either.
///
/// `examples/measure/key_flood.rs` measures both sides: busy keys' decisions against a
/// flood-free limiter, and returning users refused.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use cellgate::{KeyedLimiter, Quota, WhenFull};
/// use cellgate::clock::ManualClock;
///
/// let clock = ManualClock::new();
/// let l = KeyedLimiter::<u64>::gcra(Quota::per_second(1).with_burst(5))
///     .clock(clock.clone())
///     .max_keys(2)
///     .build()?;
/// assert_eq!(l.when_full(), WhenFull::EvictLight);
/// for _ in 0..5 {
///     l.check(&1); // key 1: busy (its whole burst spent)
/// }
/// assert!(l.check(&2).is_allowed()); // key 2: one request, light
/// // Full: key 3 takes key 2's place; busy key 1 keeps its state.
/// assert!(l.check(&3).is_allowed());
/// assert!(!l.check(&1).is_allowed());
/// assert_eq!(l.stats().evicted_live, 1);
///
/// let strict = KeyedLimiter::<u64>::gcra(Quota::per_hour(1))
///     .clock(ManualClock::new())
///     .max_keys(1)
///     .when_full(WhenFull::DenyNew)
///     .build()?;
/// assert!(strict.check(&1).is_allowed());
/// assert!(!strict.check(&2).is_allowed()); // refused: the store is full of live keys
/// # Ok::<(), cellgate::ConfigError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum WhenFull {
    /// Make room for a new key by dropping *light* keys: live keys one unit away from idle
    /// that still have a unit left (one unit given back would make them as good as a fresh
    /// key, judged at the later of the clock and the last sweep, and `remaining` is at least
    /// one). Keys with a backlog or out of budget are never dropped (so a flood never turns a
    /// key's denial into an admission), nor are stock keys, nor keys whose state is later than
    /// the clock (it went back), nor, in a sliding window, keys counted in the current window
    /// (they become light in the next one). Each dropped key can gain at most one unit of
    /// budget, whatever the clock does afterwards, counted in
    /// [`Stats::evicted_live`](crate::Stats). If no light key can go, the new key is refused
    /// as under [`DenyNew`](WhenFull::DenyNew). The default.
    ///
    /// On the default (growing) table, the new key's shard drops its light keys when at least
    /// a sixteenth of its keys can go (scans of a shard that had too few are backed off for a
    /// millisecond); on every store, a throttled sweep (at most one per 10 ms) drops idle and
    /// then light keys across the store.
    #[default]
    EvictLight,
    /// Deny requests for new keys (no `retry_after`, [`Denial::StoreFull`](crate::Denial)),
    /// counted in [`stats().refused`](KeyedLimiter::stats). Fails closed: the strict choice.
    DenyNew,
    /// Evict the live key nearest to fresh (the least `reset_after`, among a sample of 64
    /// slots around the new key's place in the table; this policy selects the fixed-capacity
    /// table, whose slots can be freed one at a time), counted in
    /// [`stats().evicted_live`](KeyedLimiter::stats). Lossy: the evicted key starts over with a
    /// fresh budget, gaining up to its `reset_after` worth of credit. Stock keys are never
    /// evicted (stock is configuration, not state). The bounded table only: with
    /// [`exact_keys`](KeyedLimiterBuilder::exact_keys), `build()` reports
    /// [`ConfigError::Unsupported`].
    EvictNearestFresh,
    /// Decide requests for new keys as for a fresh key, without storing them, counted in
    /// [`stats().untracked`](KeyedLimiter::stats). Lossy: such keys are not limited at all while the
    /// store stays full.
    AdmitUntracked,
}

/// The largest `max_keys` the fingerprint tables accept (the fixed one allocates about 23 bytes
/// per key up front); larger bounds need [`KeyedLimiterBuilder::exact_keys`].
pub const MAX_TABLE_KEYS: usize = 1 << 30;

/// Configures a [`KeyedLimiter`]; finish with [`build`](KeyedLimiterBuilder::build).
#[must_use = "a builder does nothing until build() is called"]
pub struct KeyedLimiterBuilder<K, C> {
    algorithm: Result<Algorithm, ConfigError>,
    clock: C,
    max_keys: Option<usize>,
    /// Set by [`exact_keys`](Self::exact_keys): makes the exact table's key columns.
    exact_keys: Option<NewColumn>,
    fixed_capacity: bool,
    when_full: WhenFull,
    _key: std::marker::PhantomData<fn(K)>,
}

// By hand: a derive would ask `K: Clone`, which the builder does not hold.
impl<K, C: Clone> Clone for KeyedLimiterBuilder<K, C> {
    fn clone(&self) -> Self {
        KeyedLimiterBuilder {
            algorithm: self.algorithm.clone(),
            clock: self.clock.clone(),
            max_keys: self.max_keys,
            exact_keys: self.exact_keys,
            fixed_capacity: self.fixed_capacity,
            when_full: self.when_full,
            _key: std::marker::PhantomData,
        }
    }
}

impl<K, C: fmt::Debug> fmt::Debug for KeyedLimiterBuilder<K, C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KeyedLimiterBuilder")
            .field("algorithm", &self.algorithm)
            .field("clock", &self.clock)
            .field("max_keys", &self.max_keys)
            .field("exact_keys", &self.exact_keys.is_some())
            .field("fixed_capacity", &self.fixed_capacity)
            .field("when_full", &self.when_full)
            .finish()
    }
}

impl<K: Hash + Eq + 'static> KeyedLimiter<K, DefaultClock> {
    /// A GCRA limiter (token bucket / leaky bucket as a meter) applying `quota` to each key.
    ///
    /// ```
    /// use cellgate::{KeyedLimiter, Quota};
    /// let per_ip = KeyedLimiter::<std::net::IpAddr>::gcra(Quota::per_second(50)).build()?;
    /// assert!(per_ip.check(&"10.0.0.1".parse().unwrap()).is_allowed());
    /// # Ok::<(), cellgate::ConfigError>(())
    /// ```
    pub fn gcra(quota: Quota) -> KeyedLimiterBuilder<K, DefaultClock> {
        KeyedLimiterBuilder::new(quota.gcra_params().map(|p| Algorithm::Gcra(Gcra::new(p))))
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
    pub fn fixed_window(limit: u32, window: Duration) -> KeyedLimiterBuilder<K, DefaultClock> {
        KeyedLimiterBuilder::new(FixedWindow::new(limit, window).map(Algorithm::FixedWindow))
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
    pub fn sliding_window(limit: u32, window: Duration) -> KeyedLimiterBuilder<K, DefaultClock> {
        KeyedLimiterBuilder::new(SlidingWindow::new(limit, window).map(Algorithm::SlidingWindow))
    }

    /// A stock of `units` per key that only goes down (flash-sale inventory): exactly `units`
    /// are ever admitted per key, under any concurrency, until an operator calls
    /// [`restock`](KeyedLimiter::restock) or [`set_stock`](KeyedLimiter::set_stock). Time plays
    /// no part (the clock is not read).
    ///
    /// For inventory, consider [`exact_keys`](KeyedLimiterBuilder::exact_keys) when you also set
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
    pub fn stock(units: u32) -> KeyedLimiterBuilder<K, DefaultClock> {
        KeyedLimiterBuilder::new(Ok(Algorithm::Stock(Stock::new(units))))
    }
}

impl<K: Hash + Eq + 'static> KeyedLimiter<K, DefaultClock> {
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
    pub fn warm_up(stable: Quota, warm_up: Duration) -> KeyedLimiterBuilder<K, DefaultClock> {
        KeyedLimiterBuilder::new(WarmUp::new(stable, warm_up).map(Algorithm::WarmUp))
    }

    /// An exact sliding log: never more than `limit` units per key in *any* window of length
    /// `window`. Not one cell per key: O(limit) memory per key, so `limit` is capped at
    /// [`MAX_SLIDING_LOG_LIMIT`](crate::MAX_SLIDING_LOG_LIMIT). Builds a [`SlidingLog`](crate::SlidingLog).
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

impl<K> KeyedLimiterBuilder<K, DefaultClock> {
    fn new(algorithm: Result<Algorithm, ConfigError>) -> Self {
        KeyedLimiterBuilder {
            algorithm,
            clock: DefaultClock::new(),
            max_keys: None,
            exact_keys: None,
            fixed_capacity: false,
            when_full: WhenFull::EvictLight,
            _key: std::marker::PhantomData,
        }
    }
}

impl<K: Hash + Eq + Clone + Send + Sync + 'static, C: Clock> KeyedLimiterBuilder<K, C> {
    /// Identifies keys exactly, compared with `Eq`, instead of by their 64-bit fingerprints
    /// alone: use it when two keys must never share a budget, even with probability 2^-64.
    ///
    /// The store is the same lock-free growing table, with a copy of each key kept beside its
    /// slot and compared on every hit (no lock, no shared write on a check of a held key, as
    /// in the default store); two keys with the same fingerprint take two slots. It costs the
    /// key's size plus 8 bytes per slot (a `String` key: 32 bytes a slot more), plus whatever
    /// the key owns on the heap (a `String`'s bytes), and a rebuild clones the keys it keeps
    /// (hence `Clone`). **Integer keys** (`u64`, `i64`, `u32`, `i32`, `usize`, ... of 64 bits
    /// or fewer) need no copy: their fingerprint is a keyed bijection of the key, so the
    /// fingerprint alone tells keys apart exactly, at the default store's cost (21–32 bytes per
    /// live key). Unlike the default store,
    /// an insert never drops idle keys to make room: keys leave only by sweeps
    /// ([`evict_idle`](KeyedLimiter::evict_idle), a [`spawn_sweeper`](KeyedLimiter::spawn_sweeper))
    /// and at the bound. Larger `max_keys` than [`MAX_TABLE_KEYS`] are accepted.
    ///
    /// ```
    /// use cellgate::{KeyedLimiter, Quota};
    /// let l = KeyedLimiter::<String>::gcra(Quota::per_second(1)).exact_keys().build()?;
    /// assert!(l.check("alice").is_allowed());
    /// assert!(!l.check("alice").is_allowed());
    /// assert!(l.check("bob").is_allowed());
    /// # Ok::<(), cellgate::ConfigError>(())
    /// ```
    pub fn exact_keys(mut self) -> Self {
        self.exact_keys = Some(Keys::<K>::column);
        self
    }
}

impl<K: Hash + Eq + 'static, C: Clock> KeyedLimiterBuilder<K, C> {
    /// Uses `clock` instead of the default clock.
    pub fn clock<C2: Clock>(self, clock: C2) -> KeyedLimiterBuilder<K, C2> {
        KeyedLimiterBuilder {
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
        if self.fixed_capacity && (self.max_keys.is_none() || self.exact_keys.is_some()) {
            return Err(ConfigError::Unsupported {
                operation: "fixed_capacity",
                algorithm: "keyed limiter without max_keys or with exact_keys",
            });
        }
        if self.exact_keys.is_some() && self.when_full == WhenFull::EvictNearestFresh {
            return Err(ConfigError::Unsupported {
                operation: "when_full(EvictNearestFresh)",
                algorithm: "exact_keys",
            });
        }
        let store = if let Some(column) = self.exact_keys {
            Store::exact(self.max_keys, column)
        } else if max_keys > MAX_TABLE_KEYS && self.max_keys.is_some() {
            return Err(ConfigError::TooManyKeys {
                max_keys,
                max: MAX_TABLE_KEYS,
            });
        } else if self.max_keys.is_some()
            && (self.fixed_capacity || self.when_full == WhenFull::EvictNearestFresh)
        {
            Store::table(max_keys)
        } else {
            Store::grow(self.max_keys)
        };
        Ok(KeyedLimiter {
            store,
            setting: Setting::new(algorithm),
            clock: self.clock,
            max_keys,
            when_full: self.when_full,
            counters: StoreCounters::new(),
            sweeps: SweepGate::new(),
            swept: Counter::new(0),
        })
    }
}
