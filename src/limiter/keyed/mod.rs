//! The keyed limiter: one cell per key in a sharded map.

use std::borrow::Borrow;
use std::fmt;
use std::hash::Hash;
use std::time::Duration;

use crate::algorithm::{Algorithm, FixedWindow, Gcra, SlidingWindow, Stock, WarmUp};
use crate::clock::{Clock, DefaultClock};
use crate::decision::Decision;
use crate::error::ConfigError;
use crate::limiter::engine::{Engine, Held};
use crate::limiter::setting::Setting;
use crate::limiter::sliding_log::SlidingLogBuilder;
use crate::quota::Quota;
use crate::reservation::Reservation;
use crate::store::grow_table::{
    ByFingerprint, Decided, Exact, GrowPolicy, GrowTable, Probe, SlotKey,
};
use crate::store::keys::Store;
use crate::store::stats::StoreCounters;
use crate::store::table::{InsertPolicy, Table};
use crate::sync::sweep_gate::SweepGate;
use crate::sync::Counter;

mod builder;
mod check;
#[cfg(all(test, not(loom)))]
mod exact_int_tests;
mod lifecycle;
mod tables;

pub use builder::{KeyedLimiterBuilder, WhenFull, MAX_TABLE_KEYS};

/// A rate limiter with independent state per key (user id, IP, API token, SKU, ...).
///
/// Each key's whole state is one `u64` word updated by compare-and-swap. Lookups take any
/// borrowed form of the key (`&str` for `String` keys), so a hit never allocates; requests that
/// would be denied on a fresh key, and [`peek`](KeyedLimiter::peek)s, never create a key.
///
/// # Stores
///
/// | | growing table (the default) | fixed table (`max_keys(n).fixed_capacity()`) | exact table (`exact_keys()`) |
/// |---|---|---|---|
/// | structure | sharded open-addressing table of 16-byte slots (two 64-bit words); each shard's array is rebuilt to fit its live keys | the same slots in one 16-byte word, allocated for `n` keys at build | the growing table, with a copy of each key beside its slot; integer keys (64 bits or fewer) as their fingerprints, a keyed bijection of the key |
/// | a hit | lock-free: hash, the table's arrays from a per-thread cache (no shared write), probe, one 64-bit CAS | lock-free: hash, probe, one 16-byte CAS | lock-free, as the growing table, plus a comparison of the key kept in the slot |
/// | a new key | one insert under its shard's lock; now and then a rebuild of that shard (amortised) | one insert under its shard's lock | as the growing table; the key is copied into its slot, and a rebuild clones the keys it keeps (integer keys: as the growing table) |
/// | memory | about 21–32 bytes per live key, whatever the key type; follows the live keys (measured figures in BENCHMARKS.md) | about 23 bytes per key of capacity, from the start | the growing table's, plus the key's size and 8 bytes per slot, plus what the keys own on the heap (integer keys: the growing table's) |
/// | idle keys | reclaimed by inserts (see Memory) and sweeps | dropped by sweeps, and at the bound | dropped by sweeps, and at the bound (an insert grows the table, never reclaims) |
/// | key identity | 64-bit fingerprint (see below); integer keys: exact | 64-bit fingerprint | exact (`Eq`): keys with one fingerprint take a slot each |
/// | bound | none, or the `max_keys` ceiling | `max_keys` | none, or `max_keys` |
///
/// The growing table is what a builder gives without further choice: it needs no size, holds
/// only the keys whose state matters (plus recently idle ones), and its hits are plain 64-bit
/// atomics. While one of its shards is rebuilt (when an insert finds the shard's array full, or
/// a sweep finds idle keys in it), the checks of that shard's keys wait for the rebuild: one
/// pass over the shard (a sixty-fourth of the keys, without a ceiling); the rebuild itself
/// never waits for checks (it freezes the old array). Checks of the other shards never wait.
/// Each thread that checks keeps a reference to the arrays it last used (its cache), renewed
/// after a rebuild at its next check: a replaced array is freed when the last such thread moves
/// on or exits, so a thread that stops checking keeps the arrays it last saw. Choose
/// [`fixed_capacity`](KeyedLimiterBuilder::fixed_capacity) if no check may ever wait for a rebuild and
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
/// [`exact_keys`](KeyedLimiterBuilder::exact_keys) if even that is unacceptable. Integer keys
/// (`u64`, `i32`, `usize`, ... of 64 bits or fewer) never collide in the growing table: their
/// fingerprint is a keyed bijection of the key (`src/store/int_key.rs`), so the default store is
/// already exact for them.
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
///   the live keys (four million distinct keys with at most 100 000 live at any instant:
///   `cargo run --release --example grow_memory -- churn`). A shard that gets no new keys keeps
///   its array until a sweep ([`evict_idle`](KeyedLimiter::evict_idle), or
///   [`spawn_sweeper`](KeyedLimiter::spawn_sweeper)) rebuilds it without its idle keys.
/// * [`evict_idle`](KeyedLimiter::evict_idle) drops every idle key of any store.
/// * With [`max_keys`](KeyedLimiterBuilder::max_keys) set, a new key that arrives while the store is
///   at the bound first triggers such a sweep (at most one every 10 ms of the limiter's clock,
///   one sweeper at a time; the tables also sweep a single full shard on their own); if the
///   store is still full of live keys, the [`WhenFull`] policy decides (by default the new key
///   is denied, with no `retry_after`, and counted in [`stats().refused`](KeyedLimiter::stats)). Keys
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
    counters: StoreCounters,
    sweeps: SweepGate,
    /// The latest `now` at which a sweep dropped keys; new keys start from
    /// `Algorithm::swept_word(swept)` so that a clock behind it gains nothing from eviction.
    /// Through the loom shim, so that loom checks the ordering argument in `fresh_word`.
    swept: Counter,
}

/// Keys [`KeyedLimiter::check_many`] hashes and touches before checking them: enough
/// independent loads in flight to cover a miss's latency, few enough that the group's slots are
/// still in the L1 cache when their checks run.
const BATCH: usize = 16;

impl<K: Hash + Eq + 'static, C: Clock> KeyedLimiter<K, C> {
    /// The decision for a new key that the full store cannot take: refused, or (under
    /// [`WhenFull::AdmitUntracked`]) `decide` on a fresh word, not stored.
    #[cold]
    pub(super) fn full(&self, decide: impl Fn(u64) -> Decision) -> Decision {
        if self.when_full == WhenFull::AdmitUntracked {
            // Relaxed: a statistic.
            self.counters.untracked.add(1);
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
        Held::peek_n(&self.at(key), n)
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
        Engine::reserve(&self.at(key), n, max_wait)
    }

    /// `key` of this limiter as a limiter of its own: the pair `(self, key)`, a
    /// [`AnyLimiter`](crate::AnyLimiter) of no key, as [`check_all`](crate::check_all) takes
    /// it. Writing `(&limiter, &key)` is the same.
    ///
    /// ```
    /// use cellgate::{check_all, KeyedLimiter, Quota};
    ///
    /// let per_user = KeyedLimiter::<String>::gcra(Quota::per_minute(1)).build()?;
    /// assert!(check_all([(&per_user.gate("alice"), 1)]).is_allowed());
    /// assert!(!check_all([(&(&per_user, "alice"), 1)]).is_allowed());
    /// # Ok::<(), cellgate::ConfigError>(())
    /// ```
    pub fn gate<'a, Q>(&'a self, key: &'a Q) -> (&'a Self, &'a Q)
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        (self, key)
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
        crate::admission::wait::acquire(&self.gate(key), n, timeout)
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
    ) -> crate::admission::wait::UntilReady<(&'a Self, &'a Q)>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        crate::admission::wait::UntilReady::new(self.gate(key), n)
    }

    /// Like [`reserve`](Self::reserve) with the limiter's own queue: a
    /// [`check_n`](Self::check_n) that keeps what [`cancel`](Self::cancel) needs.
    #[inline]
    fn charge<Q>(&self, key: &Q, n: u32) -> Reservation
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        Engine::charge(&self.at(key), n)
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
        Held::cancel(&self.at(key), reservation)
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
        Held::refund(&self.at(key), n)
    }

    /// Forgets `key`: it decides from now on as a key this limiter has never seen, with a
    /// fresh budget (a stock key: its configured stock; a warm-up key: cold). The one call that
    /// hands a key a fresh budget on purpose, for an operator's unblock or a client that passed
    /// a CAPTCHA, as Redis users `DEL` a redis-cell key. Returns whether the key was held (its
    /// state is forgotten); `false` when it was not, and then nothing changes: such a key is
    /// already fresh. Creates no key. Every other operation gives a key at most what its
    /// documentation says (a refund at most the units back, eviction at most one unit).
    ///
    /// A key not seen since a sweep at time `s` starts from the most conservative state a key
    /// dropped then could have had (see [`evict_idle`](Self::evict_idle)), and so does a
    /// forgotten one: a fresh budget from `s` on, nothing extra for a clock behind it.
    ///
    /// ```
    /// use cellgate::{KeyedLimiter, Quota};
    /// use cellgate::clock::ManualClock;
    /// let l = KeyedLimiter::<&str>::gcra(Quota::per_hour(3)).clock(ManualClock::new()).build()?;
    /// l.check_n(&"alice", 3);
    /// assert!(!l.check(&"alice").is_allowed());
    /// assert!(l.forget(&"alice")); // she solved the CAPTCHA
    /// assert_eq!(l.peek(&"alice").remaining(), 3);
    /// assert!(!l.forget(&"bob")); // never seen: nothing to forget
    /// # Ok::<(), cellgate::ConfigError>(())
    /// ```
    pub fn forget<Q>(&self, key: &Q) -> bool
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        // The key keeps its place in the store with the state a new key starts from (read in
        // the step: a sweep may raise the floor meanwhile); as that state is idle, the next
        // sweep drops it.
        self.store
            .update_existing(key, |_| ((), Some(self.fresh_word())))
            .is_some()
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
        Engine::check_with(&self.at(key), quota, n)
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
        self.setting.set_quota(quota)
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
        Engine::restock(&self.at(key), units)
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
        Engine::set_stock(&self.at(key), units)
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
        Held::peek(&self.at(key))
    }

    /// Keys currently held.
    pub fn len(&self) -> usize {
        self.store.len()
    }

    /// Whether no key is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// What the store has done with its keys: keys held, new keys refused, keys evicted
    /// (idle, and live under [`WhenFull::EvictLight`] and [`WhenFull::EvictNearestFresh`]), new
    /// keys decided untracked.
    ///
    /// ```
    /// use cellgate::{KeyedLimiter, Quota};
    /// let l = KeyedLimiter::<u64>::gcra(Quota::per_second(1).with_burst(2)).max_keys(1).build()?;
    /// l.check_n(&1, 2);
    /// l.check(&2); // no room, and key 1 is neither idle nor light: refused
    /// assert_eq!((l.stats().keys, l.stats().refused), (1, 1));
    /// # Ok::<(), cellgate::ConfigError>(())
    /// ```
    pub fn stats(&self) -> crate::store::stats::Stats {
        self.counters.snapshot(self.len())
    }

    /// The policy for a new key when the store is full of live keys (set by
    /// [`KeyedLimiterBuilder::when_full`]).
    ///
    /// ```
    /// use cellgate::{KeyedLimiter, Quota, WhenFull};
    /// let l = KeyedLimiter::<u64>::gcra(Quota::per_second(1)).max_keys(10).build()?;
    /// assert_eq!(l.when_full(), WhenFull::EvictLight);
    /// # Ok::<(), cellgate::ConfigError>(())
    /// ```
    pub fn when_full(&self) -> WhenFull {
        self.when_full
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
    pub fn policy(&self) -> crate::policy::Policy {
        self.setting.load().policy()
    }

    /// The clock this limiter reads.
    pub fn clock(&self) -> &C {
        &self.clock
    }
}

crate::any_limiter::keyed_limiter_traits!(KeyedLimiter);

impl<K, C: fmt::Debug> fmt::Debug for KeyedLimiter<K, C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KeyedLimiter")
            .field("algorithm", &self.setting)
            .field("clock", &self.clock)
            .field("max_keys", &self.max_keys)
            .finish_non_exhaustive()
    }
}
