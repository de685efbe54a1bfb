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

mod key;
mod read;
#[cfg(all(test, not(loom)))]
mod tests;
mod write;

pub(crate) use key::{ByFingerprint, Exact, SlotKey};
pub(crate) use write::GrowPolicy;

use crossbeam_utils::CachePadded;

use crate::sync::grow::{Array, NewColumn, Shared};
use crate::sync::published::Published;
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

    /// The same table, keeping idle keys when an insert finds its shard full (as the exact
    /// store does: see `reclaims`), whether or not it keeps a key column.
    pub(crate) fn keeping_idle_keys(mut self) -> Self {
        self.reclaims = false;
        self
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

    /// Slots allocated in all shards (for tests and the memory example's arithmetic).
    #[cfg(test)]
    fn slots(&self) -> usize {
        self.shards
            .iter()
            .map(|s| s.state.lock().array.slots().len())
            .sum()
    }
}
