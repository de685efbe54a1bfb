//! The recording protocol of the metrics: one row of counters per thread, the columns each
//! layer owns, their recycling, and the sums read at publish time.
//!
//! With the layer registry beside it (`sync::registry`), this is the only code of the crate
//! that names an atomic, a memory ordering or a lock. It uses neither tokio nor the `metrics`
//! crate nor a thread-local (a row is an explicit handle here; the parent module keeps each
//! thread's handle in a thread-local), so that under
//! `cfg(loom)` it compiles against loom's atomics and mutex and `loom-tests/tests/http_rows.rs`
//! model-checks this very file (it includes it with `#[path]`).
//!
//! # The protocol
//!
//! - A [`Row`] is written by one thread at a time, its holder: a thread [`Table::take`]s a row
//!   (a free one, else a new one) on its first record, adds to it with [`Row::bump`] (a load and
//!   a store, no locked instruction) and [`Table::give_back`]s it when it exits. Rows are never
//!   freed, and a given-back row keeps its counts: the next holder adds to them.
//! - A layer [`Columns::claim`]s a range of columns, the same in every row, when it is built,
//!   and on drop zeroes that range in every row and frees it, in one critical section.
//! - [`Columns::totals`] sums the layer's range over every row ever made, under the lock.
//!
//! Every hand-over goes through the one lock: a row given back and taken again, and columns
//! zeroed and freed then claimed again. The lock's happens-before is what makes the next
//! writer's first load see the previous writer's last store, so that no count is lost or
//! overwritten. What this guarantees, provided every record for a layer happens before the
//! layer's drop (recording borrows the layer, which is dropped at its last `Arc` release) and a
//! thread records for a layer only after receiving it by some means that synchronises (any safe
//! way of handing a value to another thread does):
//!
//! 1. the sums a publisher reads never go back, whichever threads exit and whichever take their
//!    rows meanwhile;
//! 2. once the records happen before the publish (the recording threads joined, say), the sums
//!    are exact: each record counted once;
//! 3. a layer that claims columns a dropped layer used starts from zero in every row (also in
//!    rows whose holders are still running): nothing of the old layer is counted for the new.
//!
//! Not guaranteed: a publish concurrent with records may or may not include them.

use std::sync::PoisonError;

#[cfg(loom)]
use loom::sync::atomic::{AtomicU64, Ordering};
#[cfg(loom)]
use loom::sync::{Mutex, MutexGuard};
#[cfg(not(loom))]
use std::sync::atomic::{AtomicU64, Ordering};
#[cfg(not(loom))]
use std::sync::{Mutex, MutexGuard};

/// Counters in every row (8 KiB a row). A power of two, so that an index can be masked into
/// range instead of bounds-checked.
#[cfg(not(loom))]
pub(crate) const COLUMNS: usize = 1024;
/// Counters in every row: under loom a few, so that a model's rows stay small.
#[cfg(loom)]
pub(crate) const COLUMNS: usize = 8;

/// One thread's counters. Aligned to two cache lines so that no line holds counters of two
/// threads (the adjacent-line prefetcher pairs lines).
#[repr(align(128))]
pub(crate) struct Row([AtomicU64; COLUMNS]);

impl Row {
    /// Adds one to counter `i` (taken modulo [`COLUMNS`]) of a row this thread holds: a load
    /// and a store, not a locked read-modify-write. Relaxed suffices: no other memory is
    /// published through the counter; the holder is its only writer, so no increment is lost;
    /// and the lock orders this holder's stores after the previous writer's (the previous
    /// holder's, or the zeroing of a dropped layer's columns).
    #[inline]
    pub(crate) fn bump(&self, i: usize) {
        let c = &self.0[i & (COLUMNS - 1)];
        c.store(c.load(Ordering::Relaxed).wrapping_add(1), Ordering::Relaxed);
    }
}

/// Every row made so far, the rows of exited threads, and which columns live layers own.
struct Inner {
    all: Vec<&'static Row>,
    free: Vec<&'static Row>,
    used: [bool; COLUMNS],
}

/// The rows and columns of the process (one `static` in the crate; one per execution in the
/// loom models).
pub(crate) struct Table {
    inner: Mutex<Inner>,
}

const EMPTY: Inner = Inner {
    all: Vec::new(),
    free: Vec::new(),
    used: [false; COLUMNS],
};

impl Table {
    /// An empty table, for a `static`.
    #[cfg(not(loom))]
    pub(crate) const fn new() -> Self {
        Self {
            inner: Mutex::new(EMPTY),
        }
    }

    /// An empty table (loom's mutex has no `const` constructor).
    #[cfg(loom)]
    pub(crate) fn new() -> Self {
        Self {
            inner: Mutex::new(EMPTY),
        }
    }

    /// The table, locked. Only a thread's first record and its exit, building and dropping a
    /// layer, and publishing take the lock. A panic cannot leave `Inner` half-updated in a way
    /// that matters (each field is a list or a flag array), so a poisoned lock is used as is.
    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A row for a thread that has none: a given-back one (with its counts), else a new one.
    /// The caller holds it until it gives it back.
    pub(crate) fn take(&self) -> &'static Row {
        let mut t = self.lock();
        match t.free.pop() {
            Some(row) => row,
            None => {
                let row: &'static Row =
                    Box::leak(Box::new(Row(std::array::from_fn(|_| AtomicU64::new(0)))));
                t.all.push(row);
                row
            }
        }
    }

    /// Gives back a row its holder will not write again (the holder is exiting).
    pub(crate) fn give_back(&self, row: &'static Row) {
        self.lock().free.push(row);
    }

    /// Rows made so far.
    #[cfg(any(test, loom))]
    pub(crate) fn rows_made(&self) -> usize {
        self.lock().all.len()
    }
}

/// A layer's range of columns, the same in every row; zeroed and freed on drop.
pub(crate) struct Columns {
    table: &'static Table,
    base: usize,
    width: usize,
}

impl Columns {
    /// The first free run of `width` columns, marked used; `None` when there is none.
    pub(crate) fn claim(table: &'static Table, width: usize) -> Option<Self> {
        let mut t = table.lock();
        let mut run = 0;
        for i in 0..COLUMNS {
            run = if t.used[i] { 0 } else { run + 1 };
            if run == width {
                let base = i + 1 - width;
                t.used[base..=i].fill(true);
                return Some(Self { table, base, width });
            }
        }
        None
    }

    /// The first column: the layer's column `c` is `base + c` in every row.
    pub(crate) fn base(&self) -> usize {
        self.base
    }

    /// Column sums over every row made.
    pub(crate) fn totals(&self) -> Vec<u64> {
        let mut sums = vec![0u64; self.width];
        for row in &self.table.lock().all {
            for (s, c) in sums
                .iter_mut()
                .zip(&row.0[self.base..self.base + self.width])
            {
                // Relaxed: a statistic, nothing else is read through it. Each counter's
                // values are read in their order of modification (coherence), and two
                // publishes are ordered by the lock, so a later sum never sees an older value.
                *s = s.wrapping_add(c.load(Ordering::Relaxed));
            }
        }
        sums
    }
}

impl Drop for Columns {
    fn drop(&mut self) {
        // Zeroed and freed in one critical section: a layer that claims these columns next
        // does so under the lock, after the zeroing, and a thread records for it only after
        // receiving it, so every holder's first load of these columns sees the zero.
        let mut t = self.table.lock();
        for row in &t.all {
            for c in &row.0[self.base..self.base + self.width] {
                // Relaxed: ordered before the next owner's loads by the lock (see above), and
                // after this layer's records because they all happen before its drop.
                c.store(0, Ordering::Relaxed);
            }
        }
        t.used[self.base..self.base + self.width].fill(false);
    }
}

/// A layer's own counters, shared by all threads, for when the rows have no free columns.
pub(crate) struct Shared(Box<[AtomicU64]>);

impl Shared {
    /// `width` counters at zero.
    pub(crate) fn new(width: usize) -> Self {
        Self((0..width).map(|_| AtomicU64::new(0)).collect())
    }

    /// Adds one to counter `c`.
    #[inline]
    pub(crate) fn add(&self, c: usize) {
        // Relaxed: a statistic; no other memory is published through it, and the atomic add
        // loses no increment.
        self.0[c].fetch_add(1, Ordering::Relaxed);
    }

    /// The counters' values.
    pub(crate) fn totals(&self) -> Vec<u64> {
        // Relaxed: as above; each counter's own values are read in order (coherence).
        self.0.iter().map(|c| c.load(Ordering::Relaxed)).collect()
    }
}
