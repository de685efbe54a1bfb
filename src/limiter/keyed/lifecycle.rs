//! How keys come and go in a keyed limiter: reading and updating a held key, inserting a new one
//! (growing table, fixed table or map), the sweep of idle keys and making room at the cap.

use super::*;
use crate::limiter::engine::{Engine, Held};
use crate::store::sweeper::Sweeper;
use crate::store::Hasher;
use crate::store::Located;
use std::sync::{Arc, Weak};
use std::time::Duration;

/// One key of a keyed limiter: what the operations written once in
/// [`engine`](crate::limiter::engine) work on.
pub(super) struct At<'a, K, C, Q: ?Sized> {
    limiter: &'a KeyedLimiter<K, C>,
    key: &'a Q,
}

impl<K: Hash + Eq + 'static, C: Clock> KeyedLimiter<K, C> {
    /// `key` of this limiter, for the operations of [`engine`](crate::limiter::engine).
    #[inline(always)]
    pub(super) fn at<'a, Q: ?Sized>(&'a self, key: &'a Q) -> At<'a, K, C, Q> {
        At { limiter: self, key }
    }
}

impl<K, C, Q> Held for At<'_, K, C, Q>
where
    K: Hash + Eq + Borrow<Q> + 'static,
    C: Clock,
    Q: Hash + Eq + ?Sized,
{
    #[inline(always)]
    fn setting(&self) -> &Setting {
        &self.limiter.setting
    }

    #[inline(always)]
    fn now(&self) -> u64 {
        self.limiter.now()
    }

    /// The word the key holds, or the one it would start from.
    fn word(&self) -> u64 {
        let word = self.limiter.store.get(self.key);
        word.unwrap_or_else(|| self.limiter.fresh_word())
    }

    fn update_existing<R>(&self, step: impl Fn(u64) -> (R, Option<u64>)) -> Option<R> {
        self.limiter.store.update_existing(self.key, step)
    }
}

impl<K, C, Q> Engine for At<'_, K, C, Q>
where
    K: Hash + Eq + Borrow<Q> + 'static,
    C: Clock,
    Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
{
    /// Applies `step` to the key's cell, creating the cell if `step` writes on a fresh state.
    /// `None` when the key is new, the store is at `max_keys` and `capped` is set.
    #[inline(always)]
    fn apply<R>(
        &self,
        now: u64,
        step: impl Fn(u64) -> (R, Option<u64>),
        capped: bool,
    ) -> Option<R> {
        let (limiter, key) = (self.limiter, self.key);
        match limiter.store.locate(key) {
            Located::Table(table, h) => {
                if let Some(found) = table.find(h) {
                    if let Ok(r) = Table::update(found, h, &step) {
                        return Some(r);
                    }
                }
                limiter.insert_hashed(table, h, &ByFingerprint, now, step, capped, None)
            }
            Located::Fingerprint(table, h) => {
                limiter.apply_grow(table, h, &ByFingerprint, now, step, capped)
            }
            Located::Exact(table, h) => {
                limiter.apply_grow(table, h, &Exact::<K, Q>::new(key), now, step, capped)
            }
        }
    }

    fn full(&self, decide: impl Fn(u64) -> Decision) -> Decision {
        self.limiter.full(decide)
    }

    fn store_full(&self) -> ConfigError {
        ConfigError::StoreFull {
            max_keys: self.limiter.max_keys,
        }
    }

    #[inline(always)]
    fn check_on(&self, algorithm: &Algorithm, n: u32) -> Decision {
        self.limiter.check_on(algorithm, self.key, n)
    }
}

impl<K: Hash + Eq + 'static, C: Clock> KeyedLimiter<K, C> {
    /// The decision for a new key that the full store cannot take.
    #[cold]
    pub(super) fn refuse(&self) -> Decision {
        // Relaxed: a statistic; nothing is ordered by it.
        self.counters.refused.add(1);
        let limit = self.setting.load().peek(Algorithm::FRESH, 0).limit();
        Decision::deny(limit, 0, one(), None, 0).because(crate::decision::Denial::StoreFull)
    }

    /// A key that is not held: `Ok` with `step`'s result on the fresh word if that writes
    /// nothing (a peek, a denial, a write that leaves the state fresh), `Err` with the result
    /// and the word to insert otherwise. Takes no lock, so a sold-out rush of peeks and denials for keys never seen
    /// never meets a writer.
    ///
    /// The fresh word reads the sweep floor without the shard lock that orders it after a
    /// sweep (see [`fresh_word`](Self::fresh_word)); a floor read stale is lower, so the word is
    /// at most as charged as it should be, and a step that writes nothing on it writes nothing
    /// on the right one either (a denial on a less charged state is a denial). Only what is
    /// reported (a peek's `remaining`, a denial's wait) can then be that of a key swept at a
    /// later clock reading than this check's.
    #[inline(always)]
    pub(super) fn decide_absent<R>(
        &self,
        step: &impl Fn(u64) -> (R, Option<u64>),
    ) -> Result<R, Decided<R>> {
        let fresh = self.fresh_word();
        match step(fresh) {
            (result, Some(word)) if word != fresh => Err(Decided {
                fresh,
                result,
                word,
            }),
            (result, _) => Ok(result),
        }
    }

    /// [`Engine::apply`] on a growing table (fingerprints or exact keys): the lock-free probe,
    /// then, on a miss that writes, the insert.
    #[inline(always)]
    fn apply_grow<R>(
        &self,
        table: &GrowTable,
        h: u64,
        key: &impl SlotKey,
        now: u64,
        step: impl Fn(u64) -> (R, Option<u64>),
        capped: bool,
    ) -> Option<R> {
        let decided = match table.try_update(h, key, &step) {
            Probe::Hit(r) => return Some(r),
            Probe::Absent => match self.decide_absent(&step) {
                Ok(r) => return Some(r),
                Err(decided) => Some(decided),
            },
            Probe::Unsure => None,
        };
        self.insert_hashed(table, h, key, now, step, capped, decided)
    }

    /// A fingerprint table's miss path: the key was not found (or vanished under a sweep, or
    /// its shard of the growing table was being rebuilt). Out of line: the hit path stays
    /// short.
    #[inline(never)]
    #[allow(clippy::too_many_arguments)]
    pub(super) fn insert_hashed<T: Fingerprints, R>(
        &self,
        table: &T,
        h: u64,
        key: &impl SlotKey,
        now: u64,
        step: impl Fn(u64) -> (R, Option<u64>),
        capped: bool,
        decided: Option<Decided<R>>,
    ) -> Option<R> {
        let policy = TablePolicy {
            limiter: self,
            now,
            capped,
            light: std::cell::OnceCell::new(),
        };
        table.insert_with(h, key, step, &policy, decided)
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

    /// Starts a thread that calls [`evict_idle`](KeyedLimiter::evict_idle) every `every` (real
    /// time, whatever the limiter's clock), until the returned [`Sweeper`] is stopped or
    /// dropped, or the limiter is dropped (the thread holds only a [`Weak`] reference; it
    /// notices at its next tick).
    ///
    /// Each sweep locks one shard at a time (see [`evict_idle`](KeyedLimiter::evict_idle)):
    /// choose `every` so that sweeps are rare next to checks, for example a fraction of the
    /// time a key takes to go idle (a GCRA key: `burst × interval`).
    ///
    /// # Errors
    ///
    /// [`std::io::ErrorKind::InvalidInput`] (wrapping [`ConfigError::Zero`]) if `every` is zero;
    /// the operating system's error if it cannot start a thread.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::sync::Arc;
    /// use std::time::Duration;
    /// use cellgate::{KeyedLimiter, Quota};
    ///
    /// let users = Arc::new(KeyedLimiter::<u64>::gcra(Quota::per_second(10)).build()?);
    /// let sweeper = users.spawn_sweeper(Duration::from_secs(30))?;
    /// assert!(users.check(&42).is_allowed());
    /// // ... serve; idle keys are dropped every 30 s ...
    /// sweeper.stop(); // or drop it, or drop the last `Arc` of the limiter
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn spawn_sweeper(self: &Arc<Self>, every: Duration) -> std::io::Result<Sweeper>
    where
        K: Send + Sync + 'static,
        C: Send + Sync + 'static,
    {
        let limiter: Weak<Self> = Arc::downgrade(self);
        Sweeper::spawn(every, move || {
            limiter.upgrade().map(|l| l.evict_idle()).is_some()
        })
    }

    /// The time for a decision: the clock, unless the algorithm ignores time (stock).
    #[inline(always)]
    pub(super) fn now(&self) -> u64 {
        self.setting.now(&self.clock)
    }

    /// The word a key that is not in the map starts from.
    #[inline]
    pub(super) fn fresh_word(&self) -> u64 {
        // Relaxed suffices: a sweep raises `swept` *before* it takes the shard lock to remove
        // keys, and a checker that inserts only gets here after its lookup missed under that
        // shard's lock, so the lock's release/acquire orders the raise before this load
        // whenever the miss was caused by that sweep. A lock-free miss reads it too, but acts
        // on what it read only when its step writes nothing (see `decide_absent`).
        match self.swept.get() {
            0 => Algorithm::FRESH,
            swept => self.setting.kind().swept_word(swept),
        }
    }

    pub(super) fn evict_idle_at(&self, now: u64) -> usize {
        let removed = self.evict_where_at(now, &|word| self.setting.kind().is_idle(word, now));
        // Relaxed: a statistic.
        self.counters.evicted.add(removed as u64);
        removed
    }

    /// Drops every key whose word `is_idle` (idle, or at the ceiling under
    /// [`WhenFull::EvictLight`], light) at `now`; returns how many.
    fn evict_where_at(&self, now: u64, is_idle: &dyn Fn(u64) -> bool) -> usize {
        // Relaxed: see `fresh_word`; ordered by the shard locks `retain` takes below.
        self.swept.raise_to(now);
        self.store.sweep(&is_idle)
    }

    /// The test of whether a live key whose state is a word may give its place to a new key at the
    /// ceiling under [`WhenFull::EvictLight`] (see [`Algorithm::is_light`]). A dropped key is
    /// re-created from the sweep floor, which every drop first raises to `now`: the test judges
    /// the key against that floor, the later of `now` and every earlier sweep. Judging it
    /// against `now` alone dropped keys whose own state was later than a clock that had gone
    /// back (a later window, a theoretical arrival time past a sweep's), and re-created them
    /// behind it, with a whole budget once the clock came back.
    pub(super) fn light_at(&self, now: u64) -> Light {
        Light {
            algorithm: self.setting.load(),
            // Relaxed (see `fresh_word`): a floor read before a racing raise is earlier, which
            // only makes the test stricter (refunds at an earlier time give back less, and a
            // later floor's word is at least as strict as an earlier one's).
            floor: self.swept.get().max(now),
            now,
        }
    }

    /// At the cap: sweeps idle keys if no sweep ran recently and nobody else is sweeping.
    /// Returns whether there is room now.
    #[cold]
    pub(super) fn make_room(&self, now: u64) -> bool {
        // The back-off runs on the clock even when decisions ignore time (stock decides at 0):
        // otherwise a stock store would sweep once and never again.
        self.sweeps.maybe_sweep(self.clock.now(), || {
            self.evict_idle_at(now);
            if self.when_full == WhenFull::EvictLight && self.len() >= self.max_keys {
                let light = self.light_at(now);
                let light = self.evict_where_at(now, &|word| light.is(word));
                // Relaxed: a statistic.
                self.counters.evicted_live.add(light as u64);
            }
        });
        self.len() < self.max_keys
    }
}

/// The two fingerprint tables, as [`KeyedLimiter::insert_hashed`] inserts into them: each with
/// the limiter's view of itself as its insert policy.
pub(super) trait Fingerprints {
    /// Inserts (see the tables' `insert`); `decided`: the step's outcome on a fresh word, from
    /// the growing table's lock-free miss (the fixed table never has one).
    fn insert_with<K: Hash + Eq + 'static, C: Clock, R>(
        &self,
        h: u64,
        key: &impl SlotKey,
        step: impl Fn(u64) -> (R, Option<u64>),
        policy: &TablePolicy<'_, K, C>,
        decided: Option<Decided<R>>,
    ) -> Option<R>;

    /// Loads the home slot of the key with hash `h` (see `check_many`).
    fn touch_home(&self, h: u64);

    /// Hashes `key` and loads its home slot (see `check_many`); returns the hash.
    #[inline(always)]
    fn hash_and_touch<Q: Hash + ?Sized>(&self, hasher: &Hasher, key: &Q) -> u64 {
        let h = crate::store::hash(hasher, key);
        self.touch_home(h);
        h
    }
}

/// [`Fingerprints`] for a table: `insert_with` is `$insert`, a call of the table's own `insert`
/// (given the table and the arguments by the names the closure-like head gives them), and
/// `touch_home` is its `touch`.
macro_rules! fingerprints {
    ($table:ty, |$t:ident, $h:ident, $key:tt, $step:ident, $policy:ident, $decided:tt| $insert:expr) => {
        impl Fingerprints for $table {
            fn insert_with<K: Hash + Eq + 'static, C: Clock, R>(
                &self,
                $h: u64,
                $key: &impl SlotKey,
                $step: impl Fn(u64) -> (R, Option<u64>),
                $policy: &TablePolicy<'_, K, C>,
                $decided: Option<Decided<R>>,
            ) -> Option<R> {
                let $t = self;
                $insert
            }

            #[inline(always)]
            fn touch_home(&self, h: u64) {
                self.touch(h);
            }
        }
    };
}

// The fixed table has no lock-free miss (no decided step to take over) and no exact keys.
fingerprints! { Table, |table, h, _, step, policy, _| table.insert(h, step, policy) }
fingerprints! { GrowTable, |table, h, key, step, policy, decided| table.insert(h, key, step, policy, decided) }

/// The table's view of this limiter during one insert.
pub(super) struct TablePolicy<'a, K, C> {
    limiter: &'a KeyedLimiter<K, C>,
    now: u64,
    capped: bool,
    /// The light-key test, read from the limiter on first use (at the ceiling only).
    light: std::cell::OnceCell<Light>,
}

/// [`KeyedLimiter::light_at`]'s test for one instant.
pub(super) struct Light {
    algorithm: Algorithm,
    /// The sweep floor a dropped key is re-created from (at least `now`).
    floor: u64,
    now: u64,
}

impl Light {
    /// Whether `word` is light (see [`Algorithm::is_light`]).
    fn is(&self, word: u64) -> bool {
        self.algorithm.is_light(word, self.now, self.floor)
    }
}

impl<K: Hash + Eq + 'static, C: Clock> InsertPolicy for TablePolicy<'_, K, C> {
    fn fresh(&self) -> u64 {
        self.limiter.fresh_word()
    }

    fn is_idle(&self, word: u64) -> bool {
        self.limiter.setting.kind().is_idle(word, self.now)
    }

    fn before_sweep(&self) {
        // Relaxed: ordered by the shard lock the sweep holds (see `fresh_word`).
        self.limiter.swept.raise_to(self.now);
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
            self.limiter.counters.evicted_live.add(1);
        } else {
            self.limiter.counters.evicted.add(1);
        }
    }
}

/// How long a key must have been idle before an insert's rebuild reclaims it, in nanoseconds
/// (sweeps and the ceiling take every idle key). Like nginx's `limit_req`, which frees a node
/// only after a minute without requests, but shorter, because a flood of new keys is held for
/// this long: keys idle for less are kept, so that a client that comes back soon after its
/// budget refilled hits its slot instead of being inserted again. Lossless either way.
const RECLAIM_AGE_NS: u64 = 1_000_000_000;

impl<K: Hash + Eq + 'static, C: Clock> GrowPolicy for TablePolicy<'_, K, C> {
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
        self.limiter.swept.raise_to(self.now);
    }

    fn has_room(&self, held: usize) -> bool {
        !self.capped || held < self.limiter.max_keys
    }

    fn make_room(&self) -> bool {
        self.limiter.make_room(self.now)
    }

    fn dropped(&self, n: usize) {
        // Relaxed: a statistic.
        self.limiter.counters.evicted.add(n as u64);
    }

    fn is_light(&self, word: u64) -> bool {
        self.evicts_light()
            && self
                .light
                .get_or_init(|| self.limiter.light_at(self.now))
                .is(word)
    }

    fn evicts_light(&self) -> bool {
        self.capped && self.limiter.when_full == WhenFull::EvictLight
    }

    fn now(&self) -> u64 {
        self.now
    }

    fn dropped_live(&self, n: usize) {
        // Relaxed: a statistic.
        self.limiter.counters.evicted_live.add(n as u64);
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
