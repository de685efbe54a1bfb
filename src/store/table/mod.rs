//! The bounded, lock-free keyed store: a sharded open-addressing table of 16-byte slots.
//!
//! # Layout
//!
//! ```text
//! slot (one Slot):   | fingerprint (64 bits) | state word (64 bits) |
//! fingerprint 0 = EMPTY (never used), 1 = TOMB (a removed key), >= 2 = a key
//! ```
//!
//! A key is identified by a 64-bit **fingerprint**: its hash under a hasher seeded randomly
//! per process (hashes 0 and 1 are moved to 2 and 3). The key itself is not stored, so a slot is
//! 16 bytes whatever the key type, and a hit never compares, clones or allocates a key. Two
//! distinct keys share a slot only if their fingerprints are equal; see the crate docs for the
//! probability and the consequence (the two keys share one budget: stricter, never looser).
//!
//! The table is split into shards (a power of two, chosen from the capacity); a key's shard
//! comes from the top bits of its hash and its home slot from the low 32 bits, by a
//! multiply-shift. Collisions are resolved by linear probing within the shard.
//!
//! # Concurrency
//!
//! * **Hits take no lock and write nothing but the CAS.** A check probes from the home slot with
//!   relaxed 16-byte loads until it finds its fingerprint (hit) or an EMPTY slot (miss), then
//!   runs the shared step function and commits with a 16-byte compare-and-swap of the *whole
//!   slot*. Because the expected value contains the fingerprint, the CAS can only succeed on
//!   the key's own live slot: if a sweep removed the key (or the slot was reused for another
//!   key) in between, the CAS fails, the check sees a different fingerprint and starts over.
//!   This is what makes removal safe without epochs or reference counts, and why a 64-bit CAS
//!   on the state alone would not do (a reused slot could hold the same state value: ABA).
//! * **Inserts and removals are serialised per shard** by the shard's mutex. An insert probes
//!   again under the lock (another thread may have inserted the key meanwhile), then fills the
//!   first TOMB or EMPTY slot of the key's probe run; readers never write EMPTY or TOMB slots,
//!   so a plain store suffices.
//! * Removal turns a slot into a TOMB by CAS from the exact idle value it judged, so a check
//!   that got in first makes the removal fail instead of being lost. TOMBs are then turned back
//!   into EMPTY wherever the following slot is EMPTY (no probe run passes through them), which
//!   keeps probe runs as short as in a table without deletions.
//!
//! Readers rely on one invariant that writers keep under the lock: between a key's home slot and
//! its slot there is no EMPTY slot. A reader that races an insert may miss the new key; it then
//! takes the insert path, whose probe under the lock finds it.
//!
//! # Compaction
//!
//! Evicting live keys at the bound ([`InsertPolicy::eviction_cost`]) leaves a TOMB per eviction,
//! while the new key fills the first free slot of *its* probe run, often an EMPTY one. Clearing
//! only the TOMBs that an EMPTY follows cannot keep up: EMPTY slots turn into TOMBs until a shard
//! has none left, and then every miss probes the whole shard. So when a shard's TOMBs pass
//! `slots / 16` (after an eviction or a sweep), the writer that made them **compacts** the shard
//! in place, under its lock (amortised: one pass over the shard per `slots / 16` tombstones):
//!
//! 1. Starting just after an EMPTY slot, every key is taken in probe order and moved to the
//!    first TOMB on its path (from its home slot, computed from the fingerprint, to its slot),
//!    if there is one. The TOMBs before a key's slot only ever get fewer as later keys are
//!    processed (a move fills a TOMB; the TOMB it leaves is after the key's new slot), so
//!    afterwards no TOMB lies on any key's path.
//! 2. Every TOMB then becomes EMPTY.
//!
//! A move must not lose an update from a lock-free check, nor let a check see two copies:
//!
//! * It first turns the key's slot into a TOMB by compare-and-swap **from the exact value it
//!   saw** (a check that changed the slot first makes the CAS fail; the mover looks again), and
//!   so captures the key's final state: any later CAS of a check on the old slot fails on the
//!   fingerprint.
//! * Then it plain-stores (fingerprint, state) into the free slot, a TOMB, which no reader ever
//!   CASes.
//!
//! Between the two steps a lock-free probe may miss the key. Every lock-free path treats a miss
//! (or a CAS that failed on the fingerprint) only as "look again under the lock": a check takes
//! the insert path, whose probe runs under the shard's lock; [`Table::get`] (peeks) and
//! [`Table::update_existing`] (refunds, cancels) re-probe under the lock on a miss. The lock is
//! held for the whole compaction and its release publishes the moved key, so that re-probe
//! finds it. Misses of a key that is held are therefore never reported as "absent", and a miss
//! of an absent key costs one uncontended lock (misses are the rare path). Moves, removals and
//! inserts all run under the lock, so a probe under the lock sees a settled layout (lock-free
//! checks only change states, never fingerprints).

use crossbeam_utils::CachePadded;

use crate::store::fingerprint;
use crate::sync::cell::{drive, Swap};
use crate::sync::{Counter, Lock, Slot};

const EMPTY: u64 = 0;
const TOMB: u64 = 1;

/// Most keys a shard is sized for before the table gets more shards. Larger shards waste less
/// on the per-shard slack (below); a shard is swept in one go, so this also bounds that pause
/// (about 5 500 slots).
const KEYS_PER_SHARD: usize = 4096;

/// Slots per key a shard allocates for its key budget: load factor at most 0.75.
const SLOTS_PER_KEY_NUM: usize = 4;
const SLOTS_PER_KEY_DEN: usize = 3;

#[inline]
fn pack(fp: u64, state: u64) -> u128 {
    (u128::from(fp) << 64) | u128::from(state)
}

#[inline]
fn fp_of(slot: u128) -> u64 {
    (slot >> 64) as u64
}

#[inline]
fn state_of(slot: u128) -> u64 {
    slot as u64
}

/// What the store's owner decides during an insert: the algorithm's view of fresh and idle
/// words, and the global bound.
pub(crate) trait InsertPolicy {
    /// The word a key that is not in the table starts from. Called under the shard's lock, so
    /// after any sweep that removed the key has finished with the shard.
    fn fresh(&self) -> u64;
    /// Whether a word holds no information (the key may be removed).
    fn is_idle(&self, word: u64) -> bool;
    /// Called before a sweep starts removing keys.
    fn before_sweep(&self);
    /// Whether one more key may be held (the global bound), without doing any work.
    fn has_room(&self, table: &Table) -> bool;
    /// At the global bound: possibly sweep (throttled) and say whether there is room now.
    /// Called with no shard lock held.
    fn make_room(&self, table: &Table) -> bool;
    /// When full of live keys, how far `word` is from fresh (its `reset_after`): the live key
    /// with the least is evicted to make room. `None`: never evict live keys (the default
    /// policy), or never this one (a stock key).
    fn eviction_cost(&self, word: u64) -> Option<u64>;
    /// Called after [`eviction_cost`](Self::eviction_cost) chose a key that was evicted:
    /// `live` unless it was idle (a lossless drop).
    fn evicted(&self, live: bool);
}

/// A shard is compacted (see the module docs) once more than `slots / COMPACT_TOMBS_DIVISOR` of
/// its slots are TOMBs. With at most 3/4 of the slots live, this leaves at least 3/16 of them
/// EMPTY, so probe runs stay short, and it makes compaction amortised O(16) slot visits per
/// tombstone.
const COMPACT_TOMBS_DIVISOR: usize = 16;

/// How many slots an eviction of a live key looks at, from the new key's home slot on: a
/// random sample (the home slot is a hash), as Redis samples keys for its approximate LRU.
const EVICTION_SAMPLE: usize = 64;

/// One shard: its slots and the lock that serialises its inserts and removals.
struct Shard {
    slots: Box<[Slot]>,
    writer: CachePadded<Lock<Counts>>,
}

/// Per-shard bookkeeping, guarded by the shard's mutex.
#[derive(Debug, Default)]
struct Counts {
    live: usize,
    tombs: usize,
}

/// The fingerprint table. See the module docs.
pub(crate) struct Table {
    shards: Box<[CachePadded<Shard>]>,
    /// `log2(shards.len())`.
    shard_bits: u32,
    /// Keys one shard may hold (the global bound is enforced by the caller).
    per_shard: usize,
    /// Keys held in all shards; the caller's global bound reads it.
    held: Counter,
}

impl std::fmt::Debug for Table {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Table")
            .field("shards", &self.shards.len())
            .field("slots_per_shard", &self.shards[0].slots.len())
            .field("per_shard", &self.per_shard)
            .finish_non_exhaustive()
    }
}

/// A slot found for a key by a lock-free probe, with the value seen there.
pub(crate) struct Found<'a> {
    slot: &'a Slot,
    seen: u128,
}

impl Found<'_> {
    /// The state word seen by the probe.
    #[inline]
    pub(crate) fn state(&self) -> u64 {
        state_of(self.seen)
    }
}

impl Table {
    /// A table for up to `max_keys` keys (at least 1).
    pub(crate) fn with_capacity(max_keys: usize) -> Self {
        let max_keys = max_keys.max(1);
        let shards = (max_keys / KEYS_PER_SHARD)
            .max(1)
            .next_power_of_two()
            .min(1 << 16);
        let mean = max_keys.div_ceil(shards);
        // Hashing spreads keys binomially over shards (standard deviation about sqrt(mean)):
        // leave room for six, so that a shard fills before the table does with probability
        // about 1e-9 per shard (with four, a million keys over 256 shards overflowed one shard
        // in about 0.5% of fills).
        let per_shard = mean + 6 * isqrt(mean) + 8;
        let slots = (per_shard * SLOTS_PER_KEY_NUM).div_ceil(SLOTS_PER_KEY_DEN) + 1;
        let shards_vec: Vec<_> = (0..shards)
            .map(|_| {
                CachePadded::new(Shard {
                    slots: (0..slots).map(|_| Slot::new(0)).collect(),
                    writer: CachePadded::new(Lock::new(Counts::default())),
                })
            })
            .collect();
        Self {
            shards: shards_vec.into_boxed_slice(),
            shard_bits: shards.trailing_zeros(),
            per_shard,
            held: Counter::new(0),
        }
    }

    /// Keys held.
    #[inline]
    pub(crate) fn len(&self) -> usize {
        // Relaxed: a snapshot count; writers update it under their shard locks.
        self.held.get_usize()
    }

    #[inline]
    fn shard(&self, h: u64) -> &Shard {
        &self.shards[crate::store::shard_of(h, self.shard_bits)]
    }

    #[inline]
    fn home(shard: &Shard, h: u64) -> usize {
        crate::store::home_of(shard.slots.len(), h)
    }

    /// Lock-free probe for the key with hash `h`.
    #[inline]
    pub(crate) fn find(&self, h: u64) -> Option<Found<'_>> {
        let fp = fingerprint(h);
        let shard = self.shard(h);
        let slots = &shard.slots;
        let mut i = Self::home(shard, h);
        for _ in 0..slots.len() {
            let slot = &slots[i];
            // Relaxed: the slot is self-contained (fingerprint and state together); the CAS
            // that may follow re-validates the whole value.
            let seen = slot.load();
            let f = fp_of(seen);
            if f == fp {
                return Some(Found { slot, seen });
            }
            if f == EMPTY {
                return None;
            }
            i += 1;
            if i == slots.len() {
                i = 0;
            }
        }
        None
    }

    /// Loads the home slot of the key with hash `h` and returns it: a batch of these, issued
    /// before the batch's probes, brings the slots into the cache with their misses overlapped
    /// ([`KeyedLimiter::check_many`](crate::KeyedLimiter::check_many)). A plain atomic load, so
    /// it is never elided and needs no `unsafe` prefetch intrinsic.
    #[inline]
    pub(crate) fn touch(&self, h: u64) -> u128 {
        let shard = self.shard(h);
        // Relaxed: nothing is decided on this value (the probe that follows loads again).
        shard.slots[Self::home(shard, h)].load()
    }

    /// Applies `step` to a found slot. `Err(())` if the key was removed meanwhile (the caller
    /// starts over).
    #[inline(always)]
    pub(crate) fn update<R>(
        found: Found<'_>,
        h: u64,
        step: impl FnMut(u64) -> (R, Option<u64>),
    ) -> Result<R, ()> {
        let fp = fingerprint(h);
        // The expected value is the whole slot: the probe found `fp` there, and a retry happens
        // only while the fingerprint is still `fp`.
        drive(found.state(), step, |current, next| {
            // Relaxed: as in `Cell::update`, the CAS's atomicity (on the whole slot, so also
            // on the fingerprint) is what orders admissions; no other memory is published.
            match found
                .slot
                .compare_exchange_weak(pack(fp, current), pack(fp, next))
            {
                Ok(_) => Swap::Done,
                Err(actual) if fp_of(actual) == fp => Swap::Retry(state_of(actual)),
                Err(_) => Swap::Abort(()),
            }
        })
    }

    /// The state word of the key with hash `h`, `None` if it is not held. A lock-free probe; a
    /// miss is confirmed under the shard's lock (a compaction may be moving the key: see the
    /// module docs).
    #[inline]
    pub(crate) fn get(&self, h: u64) -> Option<u64> {
        match self.find(h) {
            Some(found) => Some(found.state()),
            None => self.get_locked(h),
        }
    }

    #[cold]
    #[inline(never)]
    fn get_locked(&self, h: u64) -> Option<u64> {
        let _counts = self.shard(h).writer.lock();
        // Under the lock no key is being moved, removed or inserted: the probe is exact.
        self.find(h).map(|found| found.state())
    }

    /// Applies `step` to the key with hash `h` if it is held; `None` if it is not. Lock-free on
    /// a hit; a miss, or a CAS that failed because the key left its slot, is retried under the
    /// shard's lock (see the module docs), so a held key is never taken for absent.
    #[inline]
    pub(crate) fn update_existing<R>(
        &self,
        h: u64,
        mut step: impl FnMut(u64) -> (R, Option<u64>),
    ) -> Option<R> {
        if let Some(found) = self.find(h) {
            if let Ok(r) = Self::update(found, h, &mut step) {
                return Some(r);
            }
        }
        self.update_existing_locked(h, step)
    }

    #[cold]
    #[inline(never)]
    fn update_existing_locked<R>(
        &self,
        h: u64,
        step: impl FnMut(u64) -> (R, Option<u64>),
    ) -> Option<R> {
        let _counts = self.shard(h).writer.lock();
        let found = self.find(h)?;
        // Under the lock the key cannot leave its slot (moves and removals hold the lock), so
        // the CAS can only fail on a racing check, which keeps the fingerprint: `update` retries
        // and never returns `Err` here.
        Self::update(found, h, step).ok()
    }

    /// The slow path for a key that a lock-free probe did not find: under the shard's lock,
    /// probe again; if the key appeared, update it; otherwise run `step` on the fresh word and
    /// insert the result if it writes and the policy admits one more key. `None` when refused.
    pub(crate) fn insert<R>(
        &self,
        h: u64,
        step: impl Fn(u64) -> (R, Option<u64>),
        policy: &impl InsertPolicy,
    ) -> Option<R> {
        let fp = fingerprint(h);
        let shard = self.shard(h);
        let slots = &shard.slots;
        loop {
            let mut counts = shard.writer.lock();
            let mut i = Self::home(shard, h);
            let mut free = None;
            let mut found = None;
            for _ in 0..slots.len() {
                // Relaxed: writers are serialised by the lock; readers only CAS live slots.
                let seen = slots[i].load();
                match fp_of(seen) {
                    f if f == fp => {
                        found = Some(Found {
                            slot: &slots[i],
                            seen,
                        });
                        break;
                    }
                    EMPTY => {
                        free.get_or_insert(i);
                        break;
                    }
                    TOMB => {
                        free.get_or_insert(i);
                    }
                    _ => {}
                }
                i += 1;
                if i == slots.len() {
                    i = 0;
                }
            }
            if let Some(found) = found {
                drop(counts);
                match Self::update(found, h, &step) {
                    Ok(r) => return Some(r),
                    // Removed between our probe and CAS: take the lock again.
                    Err(()) => continue,
                }
            }
            let fresh = policy.fresh();
            let (result, write) = step(fresh);
            let word = match write {
                Some(w) if w != fresh => w,
                _ => return Some(result),
            };
            if counts.live >= self.per_shard {
                // This shard is full. A policy that evicts takes the key nearest to fresh in a
                // sample (an idle key if the sample has one: its cost is 0), O(sample); the
                // others sweep the shard (cheap: one shard) and fail if it stays full.
                if !self.evict_live_locked(shard, &mut counts, h, policy) {
                    policy.before_sweep();
                    self.sweep_locked(shard, &mut counts, &|w| policy.is_idle(w));
                    if counts.live >= self.per_shard {
                        return None;
                    }
                }
                // A slot was freed, maybe before `free`: probe again.
                continue;
            }
            if !policy.has_room(self) {
                drop(counts);
                if policy.make_room(self) {
                    continue;
                }
                // Still full of live keys: the lossy policy evicts one of this shard's.
                let mut counts = shard.writer.lock();
                if self.evict_live_locked(shard, &mut counts, h, policy) {
                    continue;
                }
                return None;
            }
            let free = free?;
            if fp_of(slots[free].load()) == TOMB {
                counts.tombs -= 1;
            }
            // A plain store: the slot is EMPTY or TOMB, which no reader ever CASes, and other
            // writers are excluded by the lock.
            slots[free].store(pack(fp, word));
            counts.live += 1;
            // Relaxed: a count (see `len`).
            self.held.add(1);
            return Some(result);
        }
    }

    /// Removes every key whose state `is_idle` says holds no information; returns how many.
    /// Each shard is locked while it is swept; checks on it proceed (they take no lock) but
    /// inserts into it wait.
    pub(crate) fn sweep(&self, is_idle: &impl Fn(u64) -> bool) -> usize {
        let mut removed = 0;
        for shard in self.shards.iter() {
            let mut counts = shard.writer.lock();
            removed += self.sweep_locked(shard, &mut counts, is_idle);
        }
        removed
    }

    /// Evicts the live key nearest to fresh among [`EVICTION_SAMPLE`] slots from `h`'s home
    /// slot, if the policy evicts live keys. Returns whether one was evicted.
    fn evict_live_locked(
        &self,
        shard: &Shard,
        counts: &mut Counts,
        h: u64,
        policy: &impl InsertPolicy,
    ) -> bool {
        let slots = &shard.slots;
        // A few tries: a check may change the chosen slot between our look and our CAS.
        for _ in 0..4 {
            let mut best: Option<(u64, usize, u128)> = None;
            let mut i = Self::home(shard, h);
            for _ in 0..EVICTION_SAMPLE.min(slots.len()) {
                // Relaxed: see `find`; the CAS below re-validates the whole slot.
                let seen = slots[i].load();
                if fp_of(seen) >= 2 {
                    match policy.eviction_cost(state_of(seen)) {
                        None => {}
                        Some(cost) if best.is_some_and(|(b, _, _)| b <= cost) => {}
                        Some(cost) => best = Some((cost, i, seen)),
                    }
                }
                i += 1;
                if i == slots.len() {
                    i = 0;
                }
            }
            let Some((cost, i, seen)) = best else {
                return false;
            };
            // Raise the sweep floor first, as a sweep does: an idle key dropped here must come
            // back no less strict for a clock behind ours.
            policy.before_sweep();
            // From the exact value seen only, as in a sweep. Relaxed: the CAS's atomicity is
            // all that is needed (a check racing with it either lands first, and we look
            // again, or finds the key gone and inserts it anew).
            if slots[i].compare_exchange_weak(seen, pack(TOMB, 0)).is_ok() {
                counts.live -= 1;
                counts.tombs += 1;
                // Relaxed: a count.
                self.held.sub(1);
                // Evictions leave tombstones; without compaction, probes for absent keys would
                // grow to the whole shard (see the module docs).
                Self::compact_if_crowded_locked(shard, counts);
                policy.evicted(cost > 0 || !policy.is_idle(state_of(seen)));
                return true;
            }
        }
        false
    }

    fn sweep_locked(
        &self,
        shard: &Shard,
        counts: &mut Counts,
        is_idle: &impl Fn(u64) -> bool,
    ) -> usize {
        let slots = &shard.slots;
        let mut removed = 0;
        for slot in slots.iter() {
            // Relaxed: see `find`.
            let seen = slot.load();
            if fp_of(seen) >= 2 && is_idle(state_of(seen)) {
                // From the exact idle value only: a check that changed it first wins, and the
                // key stays. Relaxed: the CAS's atomicity is all that is needed.
                if slot.compare_exchange_weak(seen, pack(TOMB, 0)).is_ok() {
                    removed += 1;
                }
            }
        }
        counts.live -= removed;
        counts.tombs += removed;
        // Relaxed: a count.
        self.held.sub(removed as u64);
        // Only this sweep's TOMBs need a look (the others were cleared as far as they can be,
        // or are bounded by compaction): a sweep that removed nothing costs one pass, not two.
        if removed > 0 {
            Self::clear_tombs_locked(shard, counts);
            Self::compact_if_crowded_locked(shard, counts);
        }
        removed
    }

    /// Compacts the shard if its TOMBs are past the threshold. Under the shard's lock.
    fn compact_if_crowded_locked(shard: &Shard, counts: &mut Counts) {
        if counts.tombs > shard.slots.len() / COMPACT_TOMBS_DIVISOR {
            Self::compact_locked(shard, counts);
        }
    }

    /// Moves every key to the first TOMB on its probe path, then turns every TOMB into EMPTY
    /// (see "Compaction" in the module docs). Under the shard's lock.
    fn compact_locked(shard: &Shard, counts: &mut Counts) {
        let slots = &shard.slots;
        let n = slots.len();
        // Relaxed loads here and below: the lock excludes every other writer, and readers only
        // change the states of live slots (the move's CAS re-validates those).
        let Some(start) = slots.iter().position(|s| fp_of(s.load()) == EMPTY) else {
            // Cannot happen: an insert into an EMPTY slot needs fewer than `per_shard` (about
            // 3/4 of the slots) live keys, and TOMBs outnumber 1/16 of the slots only until the
            // eviction or sweep that made them compacts; removals turn live slots into TOMBs.
            // So live and TOMB slots together never pass 13/16, and at least 3/16 are EMPTY.
            // Leave the shard as it is rather than move keys without an EMPTY slot to start at.
            return;
        };
        // Each cluster (run of non-EMPTY slots) in probe order: a key's path never contains an
        // EMPTY slot, so it lies inside the key's cluster, before the key.
        for k in 1..n {
            let p = (start + k) % n;
            let seen = slots[p].load();
            let fp = fp_of(seen);
            if fp < 2 {
                continue;
            }
            // The fingerprint is the hash (hashes 0 and 1 became 2 and 3, which have the same
            // home: the low 32 bits times fewer than 2^31 slots, shifted right by 32, are 0).
            let mut j = Self::home(shard, fp);
            while j != p && fp_of(slots[j].load()) != TOMB {
                j = if j + 1 == n { 0 } else { j + 1 };
            }
            if j != p {
                Self::move_locked(&slots[p], &slots[j], seen);
            }
        }
        for slot in slots.iter() {
            if fp_of(slot.load()) == TOMB {
                // A plain store: no reader ever CASes a TOMB.
                slot.store(0);
            }
        }
        counts.tombs = 0;
    }

    /// Moves a key from `from` (where it was seen as `seen`) to `to`, a TOMB on its path. Under
    /// the shard's lock.
    fn move_locked(from: &Slot, to: &Slot, mut seen: u128) {
        // First take the key out, from the exact value seen: a check whose CAS lands first makes
        // ours fail and we look again (the fingerprint cannot change: only lock holders change
        // fingerprints); a check whose CAS comes later fails on the fingerprint and looks
        // again under the lock. So `seen` is the key's final state. Relaxed: the CAS's
        // atomicity is all that is needed (a read-modify-write always acts on the latest
        // value), and readers that must find the key take the lock, whose release publishes
        // the store below.
        loop {
            match from.compare_exchange_weak(seen, pack(TOMB, 0)) {
                Ok(_) => break,
                Err(actual) if fp_of(actual) == fp_of(seen) => seen = actual,
                // Not reachable (see above); never move a key we did not take out.
                Err(_) => return,
            }
        }
        // Then put it back, earlier on its path. A plain store: `to` is a TOMB, which no reader
        // ever CASes, and other writers are excluded by the lock.
        to.store(seen);
    }

    /// Turns back into EMPTY every tombstone that no probe run continues past (walking
    /// backwards from an EMPTY slot), so that lookups of absent keys stay short. Under the
    /// shard's lock.
    fn clear_tombs_locked(shard: &Shard, counts: &mut Counts) {
        let slots = &shard.slots;
        if let Some(start) = slots.iter().position(|s| fp_of(s.load()) == EMPTY) {
            let mut next_empty = true;
            let n = slots.len();
            for k in 1..n {
                let j = (start + n - k) % n;
                match fp_of(slots[j].load()) {
                    TOMB if next_empty => {
                        slots[j].store(0);
                        counts.tombs -= 1;
                    }
                    EMPTY => next_empty = true,
                    _ => next_empty = false,
                }
            }
        }
    }
}

/// Integer square root (floor).
fn isqrt(n: usize) -> usize {
    let mut x = (n as f64).sqrt() as usize;
    while x * x > n {
        x -= 1;
    }
    while (x + 1) * (x + 1) <= n {
        x += 1;
    }
    x
}

#[cfg(all(test, not(loom)))]
mod tests;
