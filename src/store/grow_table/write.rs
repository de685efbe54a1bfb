//! The growing table's writes, all under the shard's lock: inserts, the rebuilds that grow,
//! shrink and reclaim a shard (see the module docs of [`super`]), sweeps, and the policy that
//! decides what an insert or a rebuild keeps.

use super::{Decided, GrowTable, ShardState, SlotKey, EMPTY, MIN_SLOTS};
use crate::store::fingerprint;
use crate::sync::grow::Array;
use crate::sync::grow::Shared;

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

impl GrowTable {
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
}
