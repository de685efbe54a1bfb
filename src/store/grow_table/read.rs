//! The growing table's reads: the lock-free probe of a thread's view of a shard's array (the
//! path of every check of a held key), and the look-ups and updates of held keys that fall back
//! to the shard's lock when the view cannot tell.

use super::{GrowTable, Probe, SlotKey, EMPTY};
use crate::store::fingerprint;
use crate::sync::grow::{Array, Slot};

impl GrowTable {
    /// Where `key`, with fingerprint `fp`, is in `array`, or (`Err`) the EMPTY slot that ends
    /// its probe run; `Err(None)` if the array has no EMPTY slot on the way (never: at least
    /// one slot is EMPTY).
    #[inline(always)]
    pub(super) fn probe(
        array: &Array,
        fp: u64,
        key: &impl SlotKey,
    ) -> Result<usize, Option<usize>> {
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
        run: &[Slot],
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
        self.try_update_noting(h, key, step, || {})
    }

    /// [`try_update`](Self::try_update), calling `lost` each time the state's compare-and-swap
    /// loses to another thread's (see [`Array::update_noting`]).
    #[inline(always)]
    pub(crate) fn try_update_noting<R>(
        &self,
        h: u64,
        key: &impl SlotKey,
        step: impl FnMut(u64) -> (R, Option<u64>),
        lost: impl FnMut(),
    ) -> Probe<R> {
        // `inline(always)`: with a keyed check's step reading the clock (its `Now`), LLVM left
        // this closure out of line, a call per check (`probe table1k`: 313 instructions a check
        // against 295).
        self.probe_view(
            h,
            key,
            #[inline(always)]
            |array, i| array.update_noting(i, step, lost),
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
}
