//! The one file of this crate that names an atomic, a memory ordering or a lock: what the
//! checking threads and the background task share, as small types whose methods say what each
//! access is for, each with the ordering it needs and why that suffices.
//!
//! It uses nothing but `std` (under `cfg(loom)`, loom's atomics and mutex), so that
//! `loom-tests/tests/fleet_local.rs` can include this very file with `#[path]` (that crate
//! cannot depend on this one: tokio does not build under `--cfg loom`) and model-check the
//! local side of the lease protocol with it, together with `local.rs` and the core's
//! limiters.
//!
//! Why so little ordering: every word here is either a value that alone matters (a counter, a
//! hint), or the stop flag. The units themselves never travel through these words: they live in
//! cellgate limiters (the pool, the fallback), whose own compare-and-swap loops make every
//! admission and every withdrawal exact.

#[cfg(loom)]
use loom::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicU8, Ordering};
#[cfg(loom)]
use loom::sync::{Mutex, MutexGuard};
#[cfg(not(loom))]
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicU8, Ordering};
#[cfg(not(loom))]
use std::sync::{Mutex, MutexGuard};

/// A count whose value alone matters: statistics, units admitted by the fallback.
#[derive(Debug)]
pub(crate) struct Counter(AtomicU64);

impl Default for Counter {
    fn default() -> Self {
        Self::new(0)
    }
}

impl Counter {
    pub(crate) fn new(value: u64) -> Self {
        Self(AtomicU64::new(value))
    }

    /// Adds `n`. Relaxed: a read-modify-write loses no addition whatever its ordering, and no
    /// other memory is published through the count.
    pub(crate) fn add(&self, n: u64) {
        self.0.fetch_add(n, Ordering::Relaxed);
    }

    /// The count. Relaxed: a reader wants the value, nothing it would publish.
    pub(crate) fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }

    /// Sets the count (gauges one writer keeps: keys held, units leased). Relaxed: as `get`.
    pub(crate) fn set(&self, value: u64) {
        self.0.store(value, Ordering::Relaxed);
    }
}

/// Whether Redis is answering (`CONNECTED`, `FALLBACK`, `PARTITIONED` in `shared.rs`): written
/// by the task, read by checks as a hint.
#[derive(Debug)]
pub(crate) struct Link(AtomicU8);

impl Link {
    pub(crate) fn new(state: u8) -> Self {
        Self(AtomicU8::new(state))
    }

    /// Relaxed: a stale state sends one more check to the path the task is leaving, whose
    /// admissions are counted either way (the fallback's by [`Counter`], the pool's in the pool).
    pub(crate) fn get(&self) -> u8 {
        self.0.load(Ordering::Relaxed)
    }

    /// Relaxed: see `get`.
    pub(crate) fn set(&self, state: u8) {
        self.0.store(state, Ordering::Relaxed);
    }
}

/// Tells the background task to finish.
#[derive(Debug)]
pub(crate) struct Stop(AtomicBool);

impl Stop {
    pub(crate) fn new() -> Self {
        Self(AtomicBool::new(false))
    }

    /// Release: what the owner did before asking the task to stop is visible to the task once
    /// it sees the flag (the join that follows orders it too).
    pub(crate) fn raise(&self) {
        self.0.store(true, Ordering::Release);
    }

    /// Acquire: pairs with `raise`.
    pub(crate) fn raised(&self) -> bool {
        self.0.load(Ordering::Acquire)
    }
}

/// The largest request the pool refused since the task last looked (0: none): the task then
/// leases more, and refills at once if the pool holds less than it.
#[derive(Debug)]
pub(crate) struct Dry(AtomicU32);

impl Dry {
    pub(crate) fn new() -> Self {
        Self(AtomicU32::new(0))
    }

    /// Records a refused request for `n` units; whether this call raised the signal (the caller
    /// then wakes the task; a signal already as large needs no second wake-up).
    ///
    /// A load first: a pool that stays dry is checked by every thread, and a plain load keeps
    /// the line shared. `fetch_max`, not a store: two refusals racing must leave the larger,
    /// and a `take` between them must not be undone by a smaller one. Relaxed: the signal is a
    /// value, and the task reads it again on every step (a wake-up lost to a race costs one
    /// step's delay, never the signal itself, which stays in the word until taken).
    pub(crate) fn signal(&self, n: u32) -> bool {
        self.0.load(Ordering::Relaxed) < n && self.0.fetch_max(n, Ordering::Relaxed) < n
    }

    /// Takes the signal, leaving 0. One read-modify-write (`swap`), so that a refusal that
    /// signals between a load and a store of the task is never erased. Relaxed: as `signal`.
    pub(crate) fn take(&self) -> u32 {
        self.0.swap(0, Ordering::Relaxed)
    }
}

/// A mutex that a panic elsewhere does not poison (what it guards stays consistent: a handle
/// to join, taken whole).
#[derive(Debug)]
pub(crate) struct Lock<T>(Mutex<T>);

impl<T> Lock<T> {
    pub(crate) fn new(value: T) -> Self {
        Self(Mutex::new(value))
    }

    pub(crate) fn lock(&self) -> MutexGuard<'_, T> {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// A value made at its first use and kept for the process's life (the runtime the keyed fleet
/// limits' tasks share). `std`'s `OnceLock`: one caller runs the initializer, every other waits
/// for it, and all then see the value it made (its completion synchronises with their reads).
#[cfg(not(loom))]
pub(crate) struct Once<T>(std::sync::OnceLock<T>);

#[cfg(not(loom))]
impl<T> Once<T> {
    pub(crate) const fn new() -> Self {
        Self(std::sync::OnceLock::new())
    }

    pub(crate) fn get_or_init(&self, make: impl FnOnce() -> T) -> &T {
        self.0.get_or_init(make)
    }
}

/// A number no earlier call in this process returned.
#[cfg(not(loom))]
pub(crate) fn next_sequence() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    // Relaxed: only distinctness matters, which the atomic increment gives.
    NEXT.fetch_add(1, Ordering::Relaxed)
}
