//! The atomics of the growing table ([`crate::store::grow_table`]): a slot of two 64-bit words, a
//! shard's swappable slot array with its grace period, and the key count. Swapped for loom's
//! under `cfg(loom)`, so that `loom-tests/tests/grow_table.rs` model-checks this very code.
//!
//! The protocol these primitives serve is written down in [`crate::store::grow_table`]'s module
//! docs; each ordering below says why it suffices for its part of it.

use super::{AtomicU64, Ordering};

/// The reference-counted pointer the arrays live behind (loom's under `cfg(loom)`, so that loom
/// sees the readers' reference counts that the grace period waits on).
#[cfg(not(loom))]
pub(crate) type Shared<T> = std::sync::Arc<T>;
#[cfg(loom)]
pub(crate) type Shared<T> = loom::sync::Arc<T>;

/// What a reader holds while it uses an array: the array cannot be freed, nor its grace period
/// end, before the guard is dropped.
#[cfg(not(loom))]
pub(crate) type Guard<T> = arc_swap::Guard<std::sync::Arc<T>>;
#[cfg(loom)]
pub(crate) type Guard<T> = loom::sync::Arc<T>;

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
    pub(crate) fn new(fp: u64, state: u64) -> Self {
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

    /// The slot's state word. Only meaningful after [`fingerprint`](Self::fingerprint) showed
    /// a key (whose Acquire orders this load after the state's first store).
    #[inline(always)]
    pub(crate) fn state(&self) -> u64 {
        // Relaxed: the state is self-contained (the decision depends on this word alone) and
        // the CAS that may follow re-validates it; no other memory is published through it.
        self.state.load(Ordering::Relaxed)
    }

    /// Replaces the state `current` by `new`; `Err(actual)` if it was not `current`.
    #[inline(always)]
    pub(crate) fn compare_exchange_state(&self, current: u64, new: u64) -> Result<u64, u64> {
        // Relaxed: as in `Cell::update`, the CAS's atomicity orders admissions on the key (its
        // modification order); the fingerprint cannot change under it (see the type's docs),
        // and the grace period of a resize synchronises through the reader's guard, not
        // through this word.
        self.state
            .compare_exchange_weak(current, new, Ordering::Relaxed, Ordering::Relaxed)
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

    /// Sets a slot of an array that is not shared (yet, or any more). Relaxed: whoever gets
    /// the array later gets it through the swap's publication (or not at all).
    pub(crate) fn set_unshared(&self, fp: u64, state: u64) {
        self.state.store(state, Ordering::Relaxed);
        self.fp.store(fp, Ordering::Relaxed);
    }

    /// Empties a slot of an array nobody else uses any more (after its grace period).
    pub(crate) fn clear_unshared(&self) {
        self.set_unshared(0, 0);
    }

    /// The fingerprint and state of a slot of an array nobody else uses (after its grace
    /// period, or before it is shared). Relaxed: the grace period's acquisition of the array
    /// (`Shared::get_mut`, which synchronises with every reader's release of its guard) already
    /// orders every reader's writes before these loads.
    pub(crate) fn settled(&self) -> (u64, u64) {
        (
            self.fp.load(Ordering::Relaxed),
            self.state.load(Ordering::Relaxed),
        )
    }
}

/// A shard's current slot array, replaceable while readers use it.
///
/// Readers [`load`](Self::load) a guard (arc-swap: a thread-local debt slot, no shared write);
/// the writer, under the shard's lock, [`replace_quiesced`](Self::replace_quiesced)s the array
/// and gets the old one back only once no reader holds it any more.
pub(crate) struct Swap<T> {
    #[cfg(not(loom))]
    inner: arc_swap::ArcSwap<T>,
    #[cfg(loom)]
    inner: loom::sync::Mutex<Shared<T>>,
}

impl<T> std::fmt::Debug for Swap<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Swap").finish_non_exhaustive()
    }
}

impl<T> Swap<T> {
    pub(crate) fn new(value: Shared<T>) -> Self {
        Self {
            #[cfg(not(loom))]
            inner: arc_swap::ArcSwap::new(value),
            #[cfg(loom)]
            inner: loom::sync::Mutex::new(value),
        }
    }

    /// The current array. arc-swap's load has Acquire semantics towards the store that put the
    /// array there, so the slots written before that store are visible.
    #[inline(always)]
    pub(crate) fn load(&self) -> Guard<T> {
        #[cfg(not(loom))]
        {
            self.inner.load()
        }
        #[cfg(loom)]
        {
            Shared::clone(&self.inner.lock().unwrap())
        }
    }

    /// Installs `new` (seen by every later [`load`](Self::load)); the old value is dropped once
    /// its last reader lets go. Under the shard's lock.
    pub(crate) fn store(&self, new: Shared<T>) {
        #[cfg(not(loom))]
        self.inner.store(new);
        #[cfg(loom)]
        {
            *self.inner.lock().unwrap() = new;
        }
    }

    /// Installs `new` and returns the old array once no reader holds it (the grace period):
    /// every check that loaded the old array has finished with it, and its writes are visible.
    /// Under the shard's lock, and the caller must hold no guard of this swap (it would wait
    /// for itself).
    ///
    /// A reader holds a guard for one probe and compare-and-swap loop and never blocks while
    /// holding it, so the wait is short; a reader preempted inside that window makes it as
    /// long as the preemption (the writer yields its CPU meanwhile).
    pub(crate) fn replace_quiesced(&self, new: Shared<T>) -> Shared<T> {
        #[cfg(not(loom))]
        let mut old = self.inner.swap(new);
        #[cfg(loom)]
        let mut old = std::mem::replace(&mut *self.inner.lock().unwrap(), new);
        // arc-swap's `swap` turns every reader's outstanding debt on the old pointer into a real
        // reference count before it returns, so the count is exact from here on. `get_mut`
        // succeeds only when ours is the last reference, and it acquires: it synchronises with
        // each reader's release of its reference (Arc's drop is a Release decrement), so all
        // their state writes happen before the caller reads the slots.
        let mut spins = 0u32;
        while Shared::get_mut(&mut old).is_none() {
            spins += 1;
            pause(spins);
        }
        old
    }
}

/// One turn of the grace period's wait.
#[inline]
fn pause(spins: u32) {
    #[cfg(loom)]
    {
        let _ = spins;
        loom::thread::yield_now();
    }
    #[cfg(not(loom))]
    {
        if spins < 64 {
            std::hint::spin_loop();
        } else {
            std::thread::yield_now();
        }
    }
}
