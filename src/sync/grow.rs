//! The atomics of the growing table ([`crate::store::grow_table`]): a slot of two 64-bit words
//! and a slot array that a rebuild can *freeze* (the per-thread view of a table's current
//! arrays is [`super::published`]). Swapped for loom's under `cfg(loom)`, so that
//! `loom-tests/tests/grow_table.rs` model-checks this very code.
//!
//! The protocol these primitives serve is written down in [`crate::store::grow_table`]'s module
//! docs; each ordering below says why it suffices for its part of it.

use std::any::Any;

use once_cell::sync::OnceCell;

use super::cell::{drive, Swap};
use super::{AtomicBool, AtomicU64, Ordering};

/// The reference-counted pointer the arrays live behind (loom's under `cfg(loom)`).
#[cfg(not(loom))]
pub(crate) type Shared<T> = std::sync::Arc<T>;
#[cfg(loom)]
pub(crate) type Shared<T> = loom::sync::Arc<T>;

/// What a rebuild xors into every state word it freezes. Any nonzero value works: the point is
/// that the word changes, so that no compare-and-swap that expects an earlier value succeeds
/// after the freeze (see [`Array::freeze`]).
const FLIP: u64 = 1 << 63;

/// One slot of the growing table: a key's fingerprint and its state word, 16 bytes.
///
/// Within one array a slot's fingerprint is written once (EMPTY to a key, under the shard's
/// lock) and never again: keys leave an array only when the whole array is replaced. So a state
/// compare-and-swap on a slot whose fingerprint was seen to be a key's can only ever act on that
/// key's state, and a 64-bit CAS of the state alone is exact (no ABA across keys).
#[derive(Debug)]
pub(crate) struct Slot {
    fp: AtomicU64,
    state: AtomicU64,
}

impl Slot {
    /// A slot holding `(fp, state)`; `(0, 0)` is EMPTY. For arrays not yet shared.
    fn new(fp: u64, state: u64) -> Self {
        Self {
            fp: AtomicU64::new(fp),
            state: AtomicU64::new(state),
        }
    }

    /// The slot's fingerprint.
    #[inline(always)]
    pub(crate) fn fingerprint(&self) -> u64 {
        // Acquire: pairs with the Release of `publish`, so a reader that sees a key's
        // fingerprint also sees the state stored with it (or a later one).
        self.fp.load(Ordering::Acquire)
    }

    /// Fills an EMPTY slot of a shared array with a key. Under the shard's lock (which excludes
    /// every other writer of fingerprints); readers may be probing the slot.
    pub(crate) fn publish(&self, fp: u64, state: u64) {
        // Relaxed: no reader looks at the state before it has seen the fingerprint, stored next
        // with Release.
        self.state.store(state, Ordering::Relaxed);
        // Release: a reader that sees the fingerprint (Acquire) sees the state above.
        self.fp.store(fp, Ordering::Release);
    }

    /// Whether a slot of an array that is not shared yet is EMPTY.
    fn is_empty_unshared(&self) -> bool {
        // Relaxed: nobody else has the array yet (see `set_unshared`).
        self.fp.load(Ordering::Relaxed) == 0
    }

    /// Sets a slot of an array that is not shared yet. Relaxed: whoever gets the array gets it
    /// through the lock or the snapshot that publishes it (a mutex: release and acquire).
    fn set_unshared(&self, fp: u64, state: u64) {
        self.state.store(state, Ordering::Relaxed);
        self.fp.store(fp, Ordering::Relaxed);
    }
}

/// A shard's slot array. Shared by the shard (its current array), the table's published
/// snapshot and the per-thread views of it; replaced whole by a rebuild, which first
/// [`freeze`](Self::freeze)s it.
///
/// `repr(C)`, the fields in this order: a check reads the slice's pointer and length and the
/// flag, so they sit next to each other (the default layout put the flag after the key
/// column, 40 bytes away, often on the next cache line).
#[repr(C)]
pub(crate) struct Array {
    slots: Box<[Slot]>,
    frozen: AtomicBool,
    /// The keys themselves, slot by slot, in a table that compares keys (the exact store);
    /// `None` in a table of fingerprints alone.
    keys: Option<Column>,
}

impl std::fmt::Debug for Array {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Array")
            .field("slots", &self.slots.len())
            .field("keys", &self.keys.is_some())
            .finish_non_exhaustive()
    }
}

/// The keys of a frozen array, as [`Array::freeze`] returned them: each key's fingerprint and
/// final state word, and, only for an array with a key column, the slot each key held there
/// (which a rebuild needs to copy its key; a table of fingerprints alone carries no slot
/// numbers, so its records stay 16 bytes).
#[derive(Debug)]
pub(crate) enum Frozen {
    /// `(fingerprint, state)`, from an array without a key column.
    Plain(Vec<(u64, u64)>),
    /// `(fingerprint, state, slot)`, from an array with a key column.
    Keyed(Vec<(u64, u64, usize)>),
}

impl Frozen {
    /// Keys left.
    pub(crate) fn len(&self) -> usize {
        match self {
            Frozen::Plain(keys) => keys.len(),
            Frozen::Keyed(keys) => keys.len(),
        }
    }

    /// Keeps the keys whose final state word `keep` accepts, in order.
    pub(crate) fn retain(&mut self, mut keep: impl FnMut(u64) -> bool) {
        match self {
            Frozen::Plain(keys) => keys.retain(|&(_, word)| keep(word)),
            Frozen::Keyed(keys) => keys.retain(|&(_, word, _)| keep(word)),
        }
    }
}

impl Array {
    /// An array of `len` EMPTY slots; `column` makes its key column (exact store).
    pub(crate) fn empty(len: usize, column: Option<NewColumn>) -> Self {
        Self {
            frozen: AtomicBool::new(false),
            slots: (0..len).map(|_| Slot::new(0, 0)).collect(),
            keys: column.map(|new| new(len)),
        }
    }

    /// An array of `len` slots holding `frozen`'s keys (as [`freeze`](Self::freeze) returned
    /// them from `old`: distinct nonzero fingerprints, or equal ones only with a key column;
    /// fewer than `len`), each placed by `home` and linear probing, with their keys copied from
    /// `old`'s column if it has one.
    pub(crate) fn with_keys(
        len: usize,
        frozen: &Frozen,
        old: &Array,
        home: impl Fn(usize, u64) -> usize,
    ) -> Self {
        let mut array = Self::empty(len, None);
        let place = |array: &Array, fp: u64, state: u64| {
            let mut i = home(len, fp);
            while !array.slots[i].is_empty_unshared() {
                i = if i + 1 == len { 0 } else { i + 1 };
            }
            array.slots[i].set_unshared(fp, state);
            i
        };
        match (frozen, &old.keys) {
            (Frozen::Plain(keys), _) => {
                for &(fp, state) in keys {
                    place(&array, fp, state);
                }
            }
            (Frozen::Keyed(keys), column) => {
                let moves: Vec<(usize, usize)> = keys
                    .iter()
                    .map(|&(fp, state, from)| (from, place(&array, fp, state)))
                    .collect();
                // Always `Some`: only an array with a key column gives `Keyed` records.
                if let Some(column) = column {
                    array.keys = Some((column.moved)(&*column.keys, len, &moves));
                }
            }
        }
        array
    }

    /// The key column of a table of `K` keys (`None` in a table of fingerprints alone).
    #[inline(always)]
    pub(crate) fn keys<K: 'static>(&self) -> Option<&Keys<K>> {
        self.keys.as_ref()?.keys.downcast_ref()
    }

    /// The slots.
    #[inline(always)]
    pub(crate) fn slots(&self) -> &[Slot] {
        &self.slots
    }

    /// Applies `step` to the state of slot `i` (whose fingerprint the caller saw to be its
    /// key's) in a compare-and-swap loop, as [`crate::sync::cell::Cell::update`] does; `None`
    /// if the array is frozen (a rebuild took the key's state to a new array: the caller must
    /// look there, under the shard's lock). Lock-free.
    #[inline(always)]
    pub(crate) fn update<R>(
        &self,
        i: usize,
        step: impl FnMut(u64) -> (R, Option<u64>),
    ) -> Option<R> {
        self.update_noting(i, step, || {})
    }

    /// [`update`](Self::update), calling `lost` each time its compare-and-swap loses to
    /// another thread's write. A hook rather than a call written in the loop: a caller that
    /// does not listen gets the loop it had (a call on the losing branch kept LLVM from
    /// inlining `check_all`'s steps: `probe all3_1k` 296 -> 322 instructions a check).
    #[inline(always)]
    pub(crate) fn update_noting<R>(
        &self,
        i: usize,
        step: impl FnMut(u64) -> (R, Option<u64>),
        mut lost: impl FnMut(),
    ) -> Option<R> {
        let slot = &self.slots[i];
        // Acquire: if this reads a word a freeze flipped, it synchronises with the freeze's
        // Release, so the `frozen` load below sees the flag the freeze set first.
        let seen = slot.state.load(Ordering::Acquire);
        // After every load of the word (this one, and each failed CAS's below): a flipped word
        // is never a key's state.
        if self.is_frozen() {
            return None;
        }
        drive(seen, step, |current, next| {
            // Success Relaxed: the CAS's atomicity orders admissions on the key (its
            // modification order), and a freeze's read-modify-write reads the last value in
            // that order, so a CAS that succeeds is one the freeze carries over; nothing else
            // is published through the word. Failure Acquire: as the load above.
            match slot.state.compare_exchange_weak(
                current,
                next,
                Ordering::Relaxed,
                Ordering::Acquire,
            ) {
                Ok(_) => Swap::Done,
                Err(_) if self.is_frozen() => Swap::Abort(()),
                Err(actual) => {
                    lost();
                    Swap::Retry(actual)
                }
            }
        })
        .ok()
    }

    /// The state of slot `i` (whose fingerprint the caller saw), `None` if the array is frozen.
    #[inline]
    pub(crate) fn state(&self, i: usize) -> Option<u64> {
        // Acquire: as in `update`.
        let word = self.slots[i].state.load(Ordering::Acquire);
        (!self.is_frozen()).then_some(word)
    }

    /// The state of slot `i` of an array that is not frozen, under the shard's lock (which
    /// excludes freezes; checks may still be updating it: the value is one of them).
    pub(crate) fn state_locked(&self, i: usize) -> u64 {
        // Relaxed: the word is self-contained; under the lock no freeze can flip it.
        self.slots[i].state.load(Ordering::Relaxed)
    }

    /// Whether a rebuild has frozen the array. After a load of a state word, exact for that
    /// word (see below); after a probe that missed, a hint: a stale `false` sends a probe that
    /// raced a rebuild to decide on an array that was current a moment before.
    #[inline(always)]
    pub(crate) fn is_frozen(&self) -> bool {
        // Relaxed: read after a load of a state word, whose Acquire (when that load saw a
        // flipped word) already orders the flag's store before this load. After a missed probe
        // nothing is published through the flag: the miss decides only what writes nothing.
        self.frozen.load(Ordering::Relaxed)
    }

    /// Freezes the array and returns its keys with their final states. Under the shard's lock
    /// (so no insert adds a key meanwhile), once per array. Checks may be running on it.
    ///
    /// Sets the flag, then flips every key's state word with one read-modify-write each. A
    /// check's compare-and-swap that lands before the flip is in the word the flip returns;
    /// one after it fails (the word changed) and, having loaded the flipped word, sees the
    /// flag. So the returned states are final: no admission is lost, none lands later.
    /// `live`: the number of keys in the array (the result's length).
    pub(crate) fn freeze(&self, live: usize) -> Frozen {
        // Relaxed: published to checks by each flip's Release below.
        self.frozen.store(true, Ordering::Relaxed);
        // The key's fingerprint and final state, if slot `slot` holds a key.
        let flip = |slot: &Slot| {
            // Relaxed: fingerprints are written under the shard's lock, which we hold.
            let fp = slot.fp.load(Ordering::Relaxed);
            // Release: a check that reads the flipped word (Acquire) sees the flag.
            (fp != 0).then(|| (fp, slot.state.fetch_xor(FLIP, Ordering::Release)))
        };
        // One loop per kind of array, so that a table of fingerprints alone records no slots.
        if self.keys.is_none() {
            let mut keys = Vec::with_capacity(live);
            keys.extend(self.slots.iter().filter_map(flip));
            return Frozen::Plain(keys);
        }
        let mut keys = Vec::with_capacity(live);
        for (i, slot) in self.slots.iter().enumerate() {
            if let Some((fp, state)) = flip(slot) {
                keys.push((fp, state, i));
            }
        }
        Frozen::Keyed(keys)
    }
}

/// Makes the key column of a new array of that many slots (see [`Keys::column`]).
pub(crate) type NewColumn = fn(usize) -> Column;

/// A [`Keys`] column with its key type erased.
type ErasedKeys = dyn Any + Send + Sync;

/// An array's key column: its keys, their type erased so that arrays of every key type share
/// the per-thread caches below (a check recovers them with [`Array::keys`]: one comparison of
/// type identifiers), and how a rebuild copies them, typed when the column was made.
pub(crate) struct Column {
    keys: Box<ErasedKeys>,
    /// A column of `len` slots holding copies of `keys`' keys, each moved from slot `from` to
    /// slot `to` (`(from, to)` pairs).
    moved: fn(&ErasedKeys, usize, &[(usize, usize)]) -> Column,
}

/// The keys of an array's slots, slot `i`'s key set once, by the insert that fills slot `i`,
/// before it publishes the slot's fingerprint (or, in an array a rebuild makes, before the
/// array is shared). So a reader that saw a key's fingerprint in a slot (an Acquire load paired
/// with the publishing Release, see [`Slot::publish`]) finds the key set there (`OnceCell::get`
/// reads it with Acquire of its own), and, like the slot's fingerprint, the key never changes
/// within the array: comparing it with the checked key tells once and for all whether the slot
/// is that key's.
///
/// once_cell's cell rather than std's `OnceLock`: a rebuild fills its new column before
/// sharing it, and only once_cell can make a cell that already holds its value
/// (`OnceCell::with_value`); std's `OnceLock` goes through its `Once` for every key a rebuild
/// copies, which made rebuilds measurably slower.
pub(crate) struct Keys<K> {
    keys: Box<[OnceCell<K>]>,
}

impl<K: Clone + Send + Sync + 'static> Keys<K> {
    /// The column of `len` unset keys (a [`NewColumn`]).
    pub(crate) fn column(len: usize) -> Column {
        Self::unset(len).erased()
    }

    fn erased(self) -> Column {
        Column {
            keys: Box::new(self),
            moved: Self::moved,
        }
    }

    /// See [`Column::moved`].
    fn moved(keys: &ErasedKeys, len: usize, moves: &[(usize, usize)]) -> Column {
        let mut column: Vec<OnceCell<K>> = (0..len).map(|_| OnceCell::new()).collect();
        // Always `Some`: a column's `moved` is given its own keys.
        if let Some(old) = keys.downcast_ref::<Self>() {
            for &(from, to) in moves {
                if let Some(key) = old.get(from) {
                    // Not shared yet: an assignment, no synchronisation.
                    column[to] = OnceCell::with_value(key.clone());
                }
            }
        }
        Self {
            keys: column.into_boxed_slice(),
        }
        .erased()
    }
}

impl<K> Keys<K> {
    fn unset(len: usize) -> Self {
        Self {
            keys: (0..len).map(|_| OnceCell::new()).collect(),
        }
    }

    /// The key of slot `i`; `None` if the slot holds no key yet.
    #[inline(always)]
    pub(crate) fn get(&self, i: usize) -> Option<&K> {
        self.keys[i].get()
    }

    /// Sets the key of EMPTY slot `i`, under the shard's lock and before the slot's
    /// fingerprint is published.
    pub(crate) fn set(&self, i: usize, key: K) {
        // An EMPTY slot's key is unset: only the insert that fills slot `i` sets it.
        let set = self.keys[i].set(key);
        debug_assert!(set.is_ok(), "slot {i}'s key was set twice");
    }
}
