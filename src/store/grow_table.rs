//! The default keyed store: a sharded, lock-free fingerprint table that grows with the keys that
//! are live and gives memory back as they go idle.
//!
//! # Layout
//!
//! ```text
//! table:  shards (a power of two, fixed at build)  +  the published set of their arrays
//! shard:  a lock for writers, guarding its live count and its current slot array
//! array:  a frozen flag  +  slots
//! slot:   | fingerprint: AtomicU64 | state: AtomicU64 |     fingerprint 0 = EMPTY
//! ```
//!
//! A key is its 64-bit fingerprint, as in the fixed table ([`crate::store::table`], same hasher and
//! the same collision argument). The top bits of the hash pick the shard, the low 32 bits the
//! home slot; collisions probe linearly. Each shard has its own slot array of any length
//! (multiply-shift range reduction), at least 15% EMPTY.
//!
//! # The protocol
//!
//! **Slots never change owner within an array.** A slot's fingerprint goes from EMPTY to a key
//! once, under the shard's lock, and stays. Keys never leave an array in place: removing idle
//! keys, growing and shrinking all *rebuild* the shard into a new array. That is what lets the
//! hot path use plain 64-bit atomics: a reader that saw key `k`'s fingerprint in a slot knows
//! that every state the slot will ever hold in this array is `k`'s, so a 64-bit CAS of the state
//! alone is exact. (The fixed table must CAS fingerprint and state together in 16 bytes because
//! it reuses slots in place, where a state CAS alone could land on another key: ABA.)
//!
//! * **A check** takes the table's arrays from its thread's cache (a thread-local reference to
//!   the set the thread last saw, renewed only when a rebuild has published a newer one: a
//!   load of the table's generation, no shared write), probes from the home slot (fingerprint
//!   loads with Acquire) to its fingerprint (hit) or an EMPTY slot (miss), and on a hit runs the
//!   step function in a CAS loop on the state word, checking after every load of the word that
//!   the array is not frozen. Lock-free: no lock, no wait, no shared write but its own CAS.
//! * **A miss, or a frozen array,** takes the shard's lock and probes the shard's current array
//!   (a miss can be an insert in flight; a frozen array, a rebuild). Found: update it. Absent:
//!   run the step on the fresh word; if it writes, and the ceiling admits one more key, and the
//!   array has room, publish `(fingerprint, state)` in the first EMPTY slot of the probe run
//!   (state, then fingerprint with Release). Readers never write fingerprints and writers hold
//!   the lock, so that EMPTY slot is still EMPTY.
//! * **A rebuild** (under the shard's lock) happens when an insert finds the array at its load
//!   limit (75%), or a sweep finds idle keys in the shard:
//!   1. **freeze** the current array: set its frozen flag, then flip every key's state word
//!      with one atomic read-modify-write each, which returns the word's final value. A check's
//!      CAS that landed before the flip is in that value; one after it fails (the word
//!      changed), and the check, having loaded the flipped word, sees the flag (the flip
//!      releases, the check's load acquires) and goes to the lock, where it waits for the
//!      rebuild. No admission is lost and none lands on the old array later;
//!   2. drop the idle keys among the final states (reclaiming on the insert path, as nginx
//!      frees idle nodes when an allocation fails), and place the others in a new array sized
//!      for them (load 0.5 after a rebuild: it grows or shrinks to fit the live keys);
//!   3. make the new array the shard's current one and publish a new set of arrays (the
//!      generation goes up, so each thread takes the new set at its next check). Unlocking
//!      lets the waiting checks go on, on the new array.
//!
//!   Idle keys are judged on their final states, so a key that a racing check made live again
//!   is kept. A rebuild never waits for checks, and checks of other shards never wait for it.
//!
//! A thread whose cache is out of date uses a frozen array for at most one check (it then takes
//! the new set), so correctness never rests on the caches being fresh: only on the freeze.
//!
//! Memory: 16 bytes a slot, load between 0.5 (after a rebuild) and 0.75, so about 21–32 bytes
//! per live key, plus a few hundred bytes per shard. A shard's memory follows its live keys at
//! each rebuild; a shard that gets no new keys keeps its array until a sweep
//! ([`evict_idle`](crate::KeyedLimiter::evict_idle)) or the next insert rebuilds it. An array a
//! rebuild replaced is freed when the last thread that cached it takes the new set (its next
//! check of the table), renews its cache for any growing table after this one was dropped (the
//! entries of dropped tables go then), or exits: a thread that stopped checking keeps the
//! arrays it last saw (at most the table's size at that time, per thread).

use crossbeam_utils::CachePadded;

use crate::store::table::fingerprint;
use std::borrow::Borrow;
use std::marker::PhantomData;

use crate::sync::grow::{Array, NewColumn, Published, Shared};
use crate::sync::{Counter, Lock};

const EMPTY: u64 = 0;

/// The smallest array a shard has. Under loom, two slots, so that the models' second key grows
/// the shard and a sweep of one of three keys shrinks it.
#[cfg(not(loom))]
const MIN_SLOTS: usize = 8;
#[cfg(loom)]
const MIN_SLOTS: usize = 2;

/// Shards of a table without a ceiling (under loom, one, so the models' keys share it). Fewer,
/// larger shards mean longer rebuilds of one shard but allocations large enough for the
/// allocator to map and unmap them whole, where many small ones leave holes in its heap (see
/// `examples/measure/grow_memory.rs` and BENCHMARKS.md).
#[cfg(not(loom))]
const DEFAULT_SHARDS: usize = 64;
#[cfg(loom)]
const DEFAULT_SHARDS: usize = 1;

/// With a ceiling, about this many keys per shard at the ceiling (fewer shards for small
/// ceilings: a shard's minimum array is the per-shard overhead).
const KEYS_PER_SHARD: usize = 4096;

/// Keys an array of `cap` slots may hold: 75% of it, so that at least one slot is EMPTY
/// (probes of absent keys end) and probe runs stay short: a probe for an absent key (every
/// new key's) reads about 8.5 slots at this load in linear probing, 22.7 at 85%.
#[inline]
fn max_live(cap: usize) -> usize {
    cap * 3 / 4
}

/// The array length a rebuild gives `keys` keys: load 0.5, so that growing by inserts rebuilds
/// after another 50% of keys (amortised: two slot copies per insert), and memory stays between
/// 16 / 0.75 and 16 / 0.5 bytes per live key (21.3 to 32). Chosen over 0.55 / 0.85 because it
/// took fewer instructions and cache misses per new key (BENCHMARKS.md, "The first check of a
/// new key").
#[inline]
fn capacity_for(keys: usize) -> usize {
    (keys * 2).max(MIN_SLOTS)
}

/// What a shard's lock guards.
struct ShardState {
    /// Keys in `array`.
    live: usize,
    /// The current array (also in the published set); never frozen while the lock is free.
    array: Shared<Array>,
    /// At the ceiling, no scan of this shard for light keys before this time (policy ns): the
    /// last scan found too few to be worth a rebuild.
    light_scan_after: u64,
}

/// A scan for light keys at the ceiling rebuilds the shard only if at least this fraction
/// (1 / `LIGHT_YIELD`) of its keys can go, so that the copying stays amortised (at most
/// `LIGHT_YIELD` slot copies per new key admitted this way).
const LIGHT_YIELD: usize = 16;

/// After a scan that found too few light keys, the shard is not scanned again for this long
/// (ns): a flood against a store full of busy keys costs one lock and one comparison per new
/// key, not a scan.
const LIGHT_SCAN_BACKOFF_NS: u64 = 1_000_000;

/// What the store's owner decides during an insert or a rebuild.
pub(crate) trait GrowPolicy {
    /// The word a key that is not in the table starts from. Called under the shard's lock.
    fn fresh(&self) -> u64;
    /// Whether a word holds no information (the key may be dropped).
    fn is_idle(&self, word: u64) -> bool;
    /// Called before a rebuild drops the first idle key, under the shard's lock.
    fn before_sweep(&self);
    /// Whether one more key may be held, with `held` keys held (the ceiling).
    fn has_room(&self, held: usize) -> bool;
    /// At the ceiling: possibly sweep (throttled); whether there is room now. No lock held.
    fn make_room(&self) -> bool;
    /// An insert's rebuild dropped `n` idle keys.
    fn dropped(&self, n: usize);
    /// At the ceiling: whether a live key whose state is `word` may give its place to a new
    /// key (it holds at most one unit more than a fresh key would). `false` for every word
    /// unless the policy evicts light keys.
    fn is_light(&self, word: u64) -> bool;
    /// Whether the policy evicts light keys at all (a shortcut for [`is_light`](Self::is_light)
    /// being `false` everywhere).
    fn evicts_light(&self) -> bool;
    /// The policy's time (ns), for the light-key scans' back-off.
    fn now(&self) -> u64;
    /// A ceiling's rebuild dropped `n` live (light) keys.
    fn dropped_live(&self, n: usize);
}

/// How a probe tells its key from another key with the same fingerprint, and how an insert
/// records it: not at all in a table of fingerprints ([`ByFingerprint`]), by comparing the keys
/// kept beside the slots in the exact store ([`Exact`]).
pub(crate) trait SlotKey {
    /// Whether slot `i` of `array`, whose fingerprint is the key's, holds the key.
    fn is_in(&self, array: &Array, i: usize) -> bool;
    /// Records the key in EMPTY slot `i` of `array`, under the shard's lock, before the slot's
    /// fingerprint is published.
    fn put(&self, array: &Array, i: usize);
}

/// A key is its fingerprint (the default store: see [`crate::store::table`] for the collision
/// argument).
pub(crate) struct ByFingerprint;

impl SlotKey for ByFingerprint {
    #[inline(always)]
    fn is_in(&self, _: &Array, _: usize) -> bool {
        true
    }

    #[inline(always)]
    fn put(&self, _: &Array, _: usize) {}
}

/// A key compared with `Eq` against the key kept in the slot (the exact store, `exact_keys()`):
/// two keys with the same fingerprint take two slots of one probe run.
pub(crate) struct Exact<'q, K, Q: ?Sized> {
    key: &'q Q,
    /// Makes the owned key an insert keeps; `None` for a key that is only looked up.
    owned: Option<fn(&Q) -> K>,
    _key: PhantomData<fn() -> K>,
}

impl<'q, K, Q: ToOwned<Owned = K> + ?Sized> Exact<'q, K, Q> {
    /// `key`, looked up or inserted in a table of `K` keys.
    #[inline(always)]
    pub(crate) fn new(key: &'q Q) -> Self {
        Self {
            key,
            owned: Some(<Q as ToOwned>::to_owned),
            _key: PhantomData,
        }
    }
}

impl<'q, K, Q: ?Sized> Exact<'q, K, Q> {
    /// `key`, only looked up (a read, an update of a held key): never passed to an insert.
    #[inline(always)]
    pub(crate) fn lookup(key: &'q Q) -> Self {
        Self {
            key,
            owned: None,
            _key: PhantomData,
        }
    }
}

impl<K, Q> SlotKey for Exact<'_, K, Q>
where
    K: Borrow<Q> + 'static,
    Q: Eq + ?Sized,
{
    #[inline(always)]
    fn is_in(&self, array: &Array, i: usize) -> bool {
        // A slot whose fingerprint a reader saw has its key set (see `Keys`); `None` (never)
        // would only send the probe on past the slot.
        array
            .keys::<K>()
            .and_then(|keys| keys.get(i))
            .is_some_and(|k| k.borrow() == self.key)
    }

    fn put(&self, array: &Array, i: usize) {
        // Inserts are given keys made with `new`: the key is always owned and kept.
        debug_assert!(self.owned.is_some(), "an insert of a looked-up key");
        if let (Some(keys), Some(owned)) = (array.keys::<K>(), self.owned) {
            keys.set(i, owned(self.key));
        }
    }
}

/// What a lock-free probe of the growing table found (see [`GrowTable::try_update`]).
#[derive(Debug)]
pub(crate) enum Probe<R> {
    /// The key is held; what acting on it gave.
    Hit(R),
    /// The key is not held.
    Absent,
    /// The probe cannot tell: ask under the shard's lock.
    Unsure,
}

/// A step already run on a fresh word by a lock-free probe that found its key absent: what the
/// insert under the lock takes instead of running the step again, if the fresh word it would
/// start from is still `fresh`.
#[derive(Debug)]
pub(crate) struct Decided<R> {
    pub(crate) fresh: u64,
    pub(crate) result: R,
    /// The word the step wrote (not `fresh`).
    pub(crate) word: u64,
}

/// One shard: its lock and, beside it on the same cache line, its count of keys, which the
/// lock's holder writes (so an insert writes no line but its shard's) and [`GrowTable::len`]
/// reads without the lock.
struct Shard {
    state: Lock<ShardState>,
    /// `state.live`, mirrored, in a table without a ceiling (one with a ceiling counts all its
    /// keys in one counter instead, which it reads at every insert).
    live: Counter,
}

/// The growing table. See the module docs.
pub(crate) struct GrowTable {
    shards: Box<[CachePadded<Shard>]>,
    /// `log2(shards.len())`.
    shard_bits: u32,
    /// Keys held, counted for the ceiling (`Some` when the table was built with one): one
    /// shared counter that every insert and rebuild updates. A table without a ceiling keeps
    /// none, so its inserts write nothing shared but their shard, and never ask the policy's
    /// [`has_room`](GrowPolicy::has_room).
    held: Option<Counter>,
    /// The shards' current arrays, for the checks' lock-free probes.
    published: Published,
    /// Whether an insert that finds its shard full drops the shard's idle keys as it rebuilds
    /// it (the default store). The exact store does not: there keys leave only by sweeps and
    /// at the ceiling, as they did from the map it replaced, so that a held key is never
    /// dropped and re-created from the sweep floor between two sweeps.
    reclaims: bool,
}

impl std::fmt::Debug for GrowTable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GrowTable")
            .field("shards", &self.shards.len())
            .field("held", &self.len())
            .finish_non_exhaustive()
    }
}

impl GrowTable {
    /// An empty table; `ceiling` (the most keys it will be asked to hold, if bounded) only
    /// sizes the number of shards. `column`: keep the keys themselves beside the slots (the
    /// exact store), its probes then taking an [`Exact`] key; `None`, a [`ByFingerprint`] one.
    pub(crate) fn new(ceiling: Option<usize>, column: Option<NewColumn>) -> Self {
        let shards = match ceiling {
            Some(n) => (n / KEYS_PER_SHARD)
                .max(1)
                .next_power_of_two()
                .min(DEFAULT_SHARDS),
            None => DEFAULT_SHARDS,
        };
        let arrays: Vec<_> = (0..shards)
            .map(|_| Shared::new(Array::empty(MIN_SLOTS, column)))
            .collect();
        let shards_vec: Vec<_> = arrays
            .iter()
            .map(|array| {
                CachePadded::new(Shard {
                    state: Lock::new(ShardState {
                        live: 0,
                        array: Shared::clone(array),
                        light_scan_after: 0,
                    }),
                    live: Counter::new(0),
                })
            })
            .collect();
        Self {
            shards: shards_vec.into_boxed_slice(),
            shard_bits: shards.trailing_zeros(),
            held: ceiling.map(|_| Counter::new(0)),
            reclaims: column.is_none(),
            published: Published::new(arrays.into_boxed_slice()),
        }
    }

    /// Keys held: the ceiling's counter, or without a ceiling the sum of the shards' counts
    /// (each exact when its shard's lock is free; a racing insert or rebuild may be counted or
    /// not).
    #[inline]
    pub(crate) fn len(&self) -> usize {
        match &self.held {
            Some(held) => held.get_usize(),
            None => self.shards.iter().map(|s| s.live.get_usize()).sum(),
        }
    }

    /// Shard `index` (whose lock the caller holds, `state`) now holds `live` keys: its count and
    /// the ceiling's follow.
    fn count(&self, index: usize, state: &mut ShardState, live: usize) {
        match &self.held {
            Some(held) if live >= state.live => held.add((live - state.live) as u64),
            Some(held) => held.sub((state.live - live) as u64),
            None => self.shards[index].live.set(live as u64),
        }
        state.live = live;
    }

    #[inline]
    fn shard_index(&self, h: u64) -> usize {
        crate::store::shard_of(h, self.shard_bits)
    }

    #[inline]
    fn home(len: usize, h: u64) -> usize {
        crate::store::home_of(len, h)
    }

    /// Where `key`, with fingerprint `fp`, is in `array`, or (`Err`) the EMPTY slot that ends
    /// its probe run; `Err(None)` if the array has no EMPTY slot on the way (never: at least
    /// one slot is EMPTY).
    #[inline(always)]
    fn probe(array: &Array, fp: u64, key: &impl SlotKey) -> Result<usize, Option<usize>> {
        let slots = array.slots();
        let home = Self::home(slots.len(), fp);
        // From the home slot to the end, then from the start back to the home slot: two
        // slice walks, with no index bounds check and no wrap test per slot.
        let (head, tail) = slots.split_at(home);
        match Self::scan(array, tail, home, fp, key) {
            Err(None) => Self::scan(array, head, 0, fp, key),
            found => found,
        }
    }

    /// [`probe`](Self::probe)'s walk over `run`, the slots of `array` from `base` on.
    #[inline(always)]
    fn scan(
        array: &Array,
        run: &[crate::sync::grow::Slot],
        base: usize,
        fp: u64,
        key: &impl SlotKey,
    ) -> Result<usize, Option<usize>> {
        for (j, slot) in run.iter().enumerate() {
            match slot.fingerprint() {
                f if f == fp && key.is_in(array, base + j) => return Ok(base + j),
                EMPTY => return Err(Some(base + j)),
                _ => {}
            }
        }
        Err(None)
    }

    /// The lock-free path: applies `step` to the key with hash `h` if this thread's view of
    /// its shard's array holds it and is not frozen ([`Probe::Hit`]). [`Probe::Absent`] if the
    /// view is of an array that is not frozen and the key is not in it: the key is not held,
    /// unless an insert of it is racing this probe. [`Probe::Unsure`] otherwise (a frozen
    /// array, or no cache to use): the caller goes to the shard's lock.
    #[inline(always)]
    pub(crate) fn try_update<R>(
        &self,
        h: u64,
        key: &impl SlotKey,
        step: impl FnMut(u64) -> (R, Option<u64>),
    ) -> Probe<R> {
        // `inline(always)`: with a keyed check's step reading the clock (its `Now`), LLVM left
        // this closure out of line, a call per check (`probe table1k`: 313 instructions a check
        // against 295).
        self.probe_view(
            h,
            key,
            #[inline(always)]
            |array, i| array.update(i, step),
        )
    }

    /// Probes this thread's view of the shard of the key with hash `h`; `on_hit` acts on the
    /// slot found (`None`: the array is frozen).
    #[inline(always)]
    fn probe_view<R>(
        &self,
        h: u64,
        key: &impl SlotKey,
        on_hit: impl FnOnce(&Array, usize) -> Option<R>,
    ) -> Probe<R> {
        let shard = self.shard_index(h);
        let fp = fingerprint(h);
        // `move`: the closure holds the shard and the fingerprint themselves, not their
        // addresses (one load fewer each, and no stores to make them addressable).
        self.published
            .with(
                #[inline(always)]
                move |arrays| {
                    let array = &arrays[shard];
                    Some(match Self::probe(array, fp, key) {
                        Ok(i) => on_hit(array, i).map_or(Probe::Unsure, Probe::Hit),
                        // Fingerprints leave an array only with the whole array, after its freeze:
                        // a key absent from an array that is not frozen is absent from the table
                        // (a key inserted since is an insert this probe raced).
                        Err(Some(_)) if !array.is_frozen() => Probe::Absent,
                        Err(_) => Probe::Unsure,
                    })
                },
            )
            .unwrap_or(Probe::Unsure)
    }

    /// Loads the home slot of the key with hash `h` (see [`crate::store::table::Table::touch`]).
    #[inline]
    pub(crate) fn touch(&self, h: u64) -> u64 {
        let shard = self.shard_index(h);
        self.published
            .with(|arrays| {
                let slots = arrays[shard].slots();
                Some(slots[Self::home(slots.len(), fingerprint(h))].fingerprint())
            })
            .unwrap_or(EMPTY)
    }

    /// The state of the key with hash `h`, `None` if it is not held. Lock-free unless this
    /// thread's view of the shard is out of date (a rebuild is under way or just happened).
    #[inline]
    pub(crate) fn get(&self, h: u64, key: &impl SlotKey) -> Option<u64> {
        match self.probe_view(h, key, |array, i| array.state(i)) {
            Probe::Hit(word) => Some(word),
            Probe::Absent => None,
            Probe::Unsure => self.get_locked(h, key),
        }
    }

    #[cold]
    #[inline(never)]
    fn get_locked(&self, h: u64, key: &impl SlotKey) -> Option<u64> {
        let state = self.shards[self.shard_index(h)].state.lock();
        let i = Self::probe(&state.array, fingerprint(h), key).ok()?;
        Some(state.array.state_locked(i))
    }

    /// Applies `step` to the key with hash `h` if it is held; `None` if it is not.
    #[inline]
    pub(crate) fn update_existing<R>(
        &self,
        h: u64,
        key: &impl SlotKey,
        mut step: impl FnMut(u64) -> (R, Option<u64>),
    ) -> Option<R> {
        match self.try_update(h, key, &mut step) {
            Probe::Hit(r) => Some(r),
            Probe::Absent => None,
            Probe::Unsure => self.update_existing_locked(h, key, step),
        }
    }

    #[cold]
    #[inline(never)]
    fn update_existing_locked<R>(
        &self,
        h: u64,
        key: &impl SlotKey,
        step: impl FnMut(u64) -> (R, Option<u64>),
    ) -> Option<R> {
        let state = self.shards[self.shard_index(h)].state.lock();
        let i = Self::probe(&state.array, fingerprint(h), key).ok()?;
        // Under the lock the current array is not frozen: `update` gives `Some`.
        state.array.update(i, step)
    }

    /// The slow path of a key that a lock-free probe did not find (or found frozen): under the
    /// shard's lock, probe the current array; update the key if it is there, otherwise run
    /// `step` on the fresh word and insert the result if it writes and the policy admits one
    /// more key (rebuilding the shard first if its array is full). `None` when refused at the
    /// ceiling. `decided`: the step's outcome on a fresh word, if the caller has it.
    pub(crate) fn insert<R>(
        &self,
        h: u64,
        key: &impl SlotKey,
        step: impl Fn(u64) -> (R, Option<u64>),
        policy: &impl GrowPolicy,
        mut decided: Option<Decided<R>>,
    ) -> Option<R> {
        let fp = fingerprint(h);
        let index = self.shard_index(h);
        loop {
            let mut state = self.shards[index].state.lock();
            let free = match Self::probe(&state.array, fp, key) {
                Ok(i) => match state.array.update(i, &step) {
                    Some(r) => return Some(r),
                    // Unreachable: the current array is never frozen under the lock.
                    None => continue,
                },
                Err(free) => free,
            };
            let fresh = policy.fresh();
            let (result, word) = match decided.take() {
                Some(d) if d.fresh == fresh => (d.result, d.word),
                _ => match step(fresh) {
                    (result, Some(w)) if w != fresh => (result, w),
                    (result, _) => return Some(result),
                },
            };
            if self
                .held
                .as_ref()
                .is_some_and(|held| !policy.has_room(held.get_usize()))
            {
                if policy.evicts_light() && self.drop_light(index, &mut state, policy) {
                    continue;
                }
                drop(state);
                if policy.make_room() {
                    continue;
                }
                return None;
            }
            let Some(free) = free.filter(|_| state.live < max_live(state.array.slots().len()))
            else {
                // Full (or, impossibly, no EMPTY slot): rebuild without idle keys (if this
                // table reclaims) and with room for this one, then probe again.
                // Keep at least half the old size: under churn (keys going idle and others
                // arriving) a rebuild that dropped nearly everything would otherwise size the
                // array for the few keys left and rebuild again a few inserts later; with the
                // floor, the inserts between two rebuilds are proportional to the array, so the
                // copying stays amortised O(1) per insert. Sweeps shrink all the way.
                let floor = state.live / 2;
                let reclaim = |w| policy.is_idle(w);
                let keep_all = |_| false;
                let dropped = self.rebuild(
                    index,
                    &mut state,
                    if self.reclaims { &reclaim } else { &keep_all },
                    &|| policy.before_sweep(),
                    1,
                    floor,
                );
                if dropped > 0 {
                    policy.dropped(dropped);
                }
                continue;
            };
            key.put(&state.array, free);
            state.array.slots()[free].publish(fp, word);
            let live = state.live + 1;
            self.count(index, &mut state, live);
            return Some(result);
        }
    }

    /// At the ceiling: rebuilds shard `index` without its idle and light keys if enough of them
    /// can go (see [`LIGHT_YIELD`]); whether any did. Under the shard's lock. Scans are backed
    /// off per shard when they find too few.
    #[cold]
    fn drop_light(&self, index: usize, state: &mut ShardState, policy: &impl GrowPolicy) -> bool {
        let now = policy.now();
        if now < state.light_scan_after {
            return false;
        }
        let array = &state.array;
        let light = array
            .slots()
            .iter()
            .enumerate()
            .filter(|&(i, s)| {
                s.fingerprint() != EMPTY && {
                    let word = array.state_locked(i);
                    policy.is_idle(word) || policy.is_light(word)
                }
            })
            .count();
        if light == 0 || light * LIGHT_YIELD < state.live {
            state.light_scan_after = now.saturating_add(LIGHT_SCAN_BACKOFF_NS);
            return false;
        }
        // Judged again on the final states inside the rebuild: a key a racing check made
        // heavy meanwhile is kept.
        let live_dropped = std::cell::Cell::new(0usize);
        let dropped = self.rebuild(
            index,
            state,
            &|w| {
                let idle = policy.is_idle(w);
                let light = !idle && policy.is_light(w);
                live_dropped.set(live_dropped.get() + usize::from(light));
                idle || light
            },
            &|| policy.before_sweep(),
            1,
            0,
        );
        let live_dropped = live_dropped.get();
        if dropped > live_dropped {
            policy.dropped(dropped - live_dropped);
        }
        if live_dropped > 0 {
            policy.dropped_live(live_dropped);
        }
        dropped > 0
    }

    /// Drops every key whose state `is_idle` says holds no information; returns how many.
    /// Shards with no idle key are only read; the others are rebuilt (see the module docs), each
    /// under its own lock.
    pub(crate) fn sweep(&self, is_idle: &impl Fn(u64) -> bool) -> usize {
        let mut removed = 0;
        for (index, shard) in self.shards.iter().enumerate() {
            let mut state = shard.state.lock();
            let array = &state.array;
            let any_idle = array
                .slots()
                .iter()
                .enumerate()
                .any(|(i, s)| s.fingerprint() != EMPTY && is_idle(array.state_locked(i)));
            if any_idle {
                // The caller raised the sweep floor before the sweep.
                removed += self.rebuild(index, &mut state, is_idle, &|| {}, 0, 0);
            }
        }
        removed
    }

    /// Rebuilds shard `index` (under its lock, `state` being what it guards) into a new array
    /// holding its keys that are not idle, with room for `extra` more and for at least `floor`
    /// keys; `before_drop` runs once, before the first key is dropped (the limiter raises its
    /// sweep floor there). Returns how many keys were dropped.
    fn rebuild(
        &self,
        index: usize,
        state: &mut ShardState,
        is_idle: &dyn Fn(u64) -> bool,
        before_drop: &dyn Fn(),
        extra: usize,
        floor: usize,
    ) -> usize {
        // Step 1 of the module docs: freeze; the states it returns are final.
        let mut keys = state.array.freeze(state.live);
        // Step 2: judge each key once on its final state.
        let mut dropping = false;
        keys.retain(|word| {
            let idle = is_idle(word);
            if idle && !dropping {
                dropping = true;
                before_drop();
            }
            !idle
        });
        let kept = keys.len();
        let cap = capacity_for((kept + extra).max(floor));
        let array = Shared::new(Array::with_keys(cap, &keys, &state.array, Self::home));
        // Step 3: install and publish. The old array is freed when the last thread's cache
        // lets it go.
        self.published.replace(index, Shared::clone(&array));
        state.array = array;
        let removed = state.live - kept;
        self.count(index, state, kept);
        removed
    }

    /// Slots allocated in all shards (for tests and the memory example's arithmetic).
    #[cfg(test)]
    fn slots(&self) -> usize {
        self.shards
            .iter()
            .map(|s| s.state.lock().array.slots().len())
            .sum()
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use std::cell::Cell;

    /// The tests' policy: no time, idle means state 0, a ceiling.
    struct Policy {
        ceiling: usize,
        sweeps: Cell<u32>,
    }

    impl Policy {
        fn new(ceiling: usize) -> Self {
            Self {
                ceiling,
                sweeps: Cell::new(0),
            }
        }
    }

    impl GrowPolicy for Policy {
        fn fresh(&self) -> u64 {
            0
        }
        fn is_idle(&self, word: u64) -> bool {
            word == 0
        }
        fn before_sweep(&self) {
            self.sweeps.set(self.sweeps.get() + 1);
        }
        fn has_room(&self, held: usize) -> bool {
            held < self.ceiling
        }
        fn make_room(&self) -> bool {
            false
        }
        fn dropped(&self, _: usize) {}
        fn is_light(&self, _: u64) -> bool {
            false
        }
        fn evicts_light(&self) -> bool {
            false
        }
        fn now(&self) -> u64 {
            0
        }
        fn dropped_live(&self, _: usize) {}
    }

    /// Spreads small integers over the hash space (an odd multiplier is a bijection).
    fn h(k: u64) -> u64 {
        k.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ (k >> 7)
    }

    fn set(t: &GrowTable, k: u64, v: u64) -> Option<u64> {
        t.insert(
            h(k),
            &ByFingerprint,
            |_| (v, Some(v)),
            &Policy::new(usize::MAX),
            None,
        )
    }

    #[test]
    fn grows_finds_and_shrinks() {
        let t = GrowTable::new(None, None);
        let start = t.slots();
        const N: u64 = 20_000;
        for k in 0..N {
            assert_eq!(set(&t, k, k + 1), Some(k + 1));
        }
        assert_eq!(t.len(), N as usize);
        for k in 0..N {
            assert_eq!(t.get(h(k), &ByFingerprint), Some(k + 1), "key {k}");
        }
        assert_eq!(t.get(h(N * 2), &ByFingerprint), None);
        let grown = t.slots();
        assert!(grown >= N as usize * 4 / 3, "{grown} slots for {N} keys");
        // Load 0.5 at least, right after a rebuild.
        assert!(
            grown <= N as usize * 2 + start,
            "{grown} slots for {N} keys"
        );
        // Make all but 100 idle, then sweep: the arrays shrink to the live keys.
        for k in 100..N {
            assert_eq!(
                t.update_existing(h(k), &ByFingerprint, |w| (w, Some(0))),
                Some(k + 1)
            );
        }
        assert_eq!(t.sweep(&|w| w == 0), N as usize - 100);
        assert_eq!(t.len(), 100);
        assert!(
            t.slots() <= start + 200,
            "{} slots after the sweep",
            t.slots()
        );
        for k in 0..N {
            let want = (k < 100).then_some(k + 1);
            assert_eq!(t.get(h(k), &ByFingerprint), want, "key {k}");
        }
    }

    #[test]
    fn inserts_reclaim_idle_keys_and_memory_follows_live_keys() {
        // A million distinct keys, each idle right after its insert except every 100th: the
        // arrays must stay sized for the live ones, with no sweep called.
        let t = GrowTable::new(None, None);
        let p = Policy::new(usize::MAX);
        for k in 0..1_000_000u64 {
            let v = u64::from(k % 100 == 0);
            // A step that writes 2 then (via update) the final value: inserts need a write that
            // differs from fresh.
            t.insert(h(k), &ByFingerprint, |_| ((), Some(2)), &p, None);
            t.update_existing(h(k), &ByFingerprint, |_| ((), Some(v)));
        }
        // A shard rebuilt for its live keys (load 0.5) takes idle ones again until its load
        // reaches 0.75: at most 0.75 / 0.5 of the live keys are held, plus each shard's least
        // array.
        assert!(
            t.len() <= 10_000 * 3 / 2 + DEFAULT_SHARDS * MIN_SLOTS,
            "held {}",
            t.len()
        );
        assert!(t.slots() < 40_000, "{} slots", t.slots());
        for k in (0..1_000_000u64).step_by(100) {
            assert_eq!(t.get(h(k), &ByFingerprint), Some(1), "live key {k} kept");
        }
    }

    #[test]
    fn ceiling_refuses_new_keys_but_not_old_ones() {
        let t = GrowTable::new(Some(10), None);
        let p = Policy::new(10);
        for k in 0..10 {
            assert!(t
                .insert(h(k), &ByFingerprint, |_| ((), Some(1)), &p, None)
                .is_some());
        }
        assert!(t
            .insert(h(99), &ByFingerprint, |_| ((), Some(1)), &p, None)
            .is_none());
        assert_eq!(
            t.insert(h(5), &ByFingerprint, |w| (w, Some(w + 1)), &p, None),
            Some(1)
        );
        // A step that writes nothing never inserts.
        assert_eq!(
            t.insert(h(98), &ByFingerprint, |_| (7, None), &p, None),
            Some(7)
        );
        assert_eq!(t.len(), 10);
    }

    #[test]
    fn concurrent_checks_and_rebuilds_lose_nothing() {
        // Threads add to their own counters while another thread's inserts grow the table and
        // sweeps rebuild it: every increment must be there at the end.
        let t = GrowTable::new(Some(64), None);
        let p = Policy::new(usize::MAX);
        for k in 0..4 {
            t.insert(h(k), &ByFingerprint, |_| ((), Some(1)), &p, None);
        }
        std::thread::scope(|s| {
            for k in 0..4u64 {
                let t = &t;
                s.spawn(move || {
                    for _ in 0..20_000 {
                        let step = |w: u64| ((), Some(w + 1));
                        if t.update_existing(h(k), &ByFingerprint, step).is_none() {
                            panic!("key {k} lost");
                        }
                    }
                });
            }
            let t = &t;
            s.spawn(move || {
                let p = Policy::new(usize::MAX);
                for round in 0..20u64 {
                    for k in 0..500 {
                        t.insert(
                            h(1000 + round * 1000 + k),
                            &ByFingerprint,
                            |_| ((), Some(0)),
                            &p,
                            None,
                        );
                        t.insert(
                            h(1000 + round * 1000 + k),
                            &ByFingerprint,
                            |_| ((), Some(7)),
                            &p,
                            None,
                        );
                    }
                    for k in 0..500 {
                        t.update_existing(h(1000 + round * 1000 + k), &ByFingerprint, |_| {
                            ((), Some(0))
                        });
                    }
                    t.sweep(&|w| w == 0);
                }
            });
        });
        for k in 0..4 {
            assert_eq!(t.get(h(k), &ByFingerprint), Some(20_001), "key {k}");
        }
    }

    /// A test's key: by fingerprint, or exact (compared with the key kept in the slot).
    enum TestKey<'q> {
        Fp,
        Exact(Exact<'q, u64, u64>),
    }

    impl<'q> TestKey<'q> {
        fn of(exact: bool, k: &'q u64) -> Self {
            if exact {
                TestKey::Exact(Exact::new(k))
            } else {
                TestKey::Fp
            }
        }
    }

    impl SlotKey for TestKey<'_> {
        fn is_in(&self, array: &Array, i: usize) -> bool {
            match self {
                TestKey::Fp => ByFingerprint.is_in(array, i),
                TestKey::Exact(e) => e.is_in(array, i),
            }
        }
        fn put(&self, array: &Array, i: usize) {
            match self {
                TestKey::Fp => ByFingerprint.put(array, i),
                TestKey::Exact(e) => e.put(array, i),
            }
        }
    }

    proptest::proptest! {
        /// Random inserts, updates, idles and sweeps against a `HashMap`, with hashes clustered
        /// onto eight home slots (long probe runs that wrap around): every key the model holds
        /// is found with its state, no other key is found. `exact`: the exact store (keys kept
        /// beside the slots), with every key's hash one of three, so that forty keys share each
        /// full 64-bit fingerprint and only the keys tell them apart, through inserts, probes
        /// and the rebuilds that copy them.
        #[test]
        fn every_key_stays_findable(
            ops in proptest::collection::vec((0..3u8, 0..120u64, 1..50u64), 1..600),
            clustered in proptest::bool::ANY,
            exact in proptest::bool::ANY,
            ceiling in 8..200usize,
        ) {
            let hash = |k: u64| match (exact, clustered) {
                (true, _) => (k % 3 + 2) << 40 | 0x0F00,
                (false, true) => (k + 2) << 32 | ((k % 8) << 29 | 0x0F00),
                (false, false) => h(k),
            };
            let column = exact.then_some(crate::sync::grow::Keys::<u64>::column as NewColumn);
            let t = GrowTable::new(Some(ceiling), column);
            let p = Policy::new(ceiling);
            let mut model = std::collections::HashMap::new();
            for (op, k, v) in ops {
                let key = TestKey::of(exact, &k);
                match op {
                    0 => {
                        let done = t.insert(hash(k), &key, |_| ((), Some(v)), &p, None);
                        if done.is_none() {
                            proptest::prop_assert!(!model.contains_key(&k) && model.len() >= ceiling);
                        } else {
                            model.insert(k, v);
                        }
                    }
                    1 => {
                        let got = t.update_existing(hash(k), &key, |w| (w, Some(0)));
                        proptest::prop_assert_eq!(got, model.get(&k).copied());
                        if let Some(w) = model.get_mut(&k) {
                            *w = 0;
                        }
                    }
                    _ => {
                        let idle = model.values().filter(|&&w| w == 0).count();
                        proptest::prop_assert_eq!(t.sweep(&|w| w == 0), idle);
                        model.retain(|_, w| *w != 0);
                    }
                }
                // Inserts may also reclaim idle keys (rebuilds): the model forgets them too.
                if t.len() < model.len() {
                    model.retain(|_, w| *w != 0);
                }
                proptest::prop_assert_eq!(t.len(), model.len());
            }
            for k in 0..120u64 {
                let got = t.get(hash(k), &TestKey::of(exact, &k));
                proptest::prop_assert_eq!(got, model.get(&k).copied(), "key {}", k);
            }
        }
    }
}
