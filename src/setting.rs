//! A limiter's algorithm, changeable at runtime without slowing the checks of limiters whose
//! quota never changes.
//!
//! The algorithm a limiter was built with stays in a plain field. The first
//! `set_quota` raises a flag; from then on checks read the current configuration from a
//! [`crossbeam_utils::atomic::AtomicCell`] (an optimistic, write-free read of a seqlock-guarded
//! copy). Until then a check costs one load of a read-only flag more than it would with no
//! runtime change at all.

use crate::algorithm::Algorithm;

#[cfg(not(loom))]
use crossbeam_utils::atomic::AtomicCell;
#[cfg(not(loom))]
use std::sync::atomic::{AtomicBool, Ordering};

#[cfg(loom)]
use loom::sync::atomic::{AtomicBool, Ordering};

/// loom cannot see inside crossbeam's `AtomicCell`; this lock-based stand-in gives it an
/// atomic copy with the same interface.
#[cfg(loom)]
#[derive(Debug)]
struct AtomicCell<T>(loom::sync::Mutex<T>);

#[cfg(loom)]
impl<T: Copy> AtomicCell<T> {
    fn new(v: T) -> Self {
        Self(loom::sync::Mutex::new(v))
    }
    fn load(&self) -> T {
        *self.0.lock().unwrap()
    }
    fn store(&self, v: T) {
        *self.0.lock().unwrap() = v;
    }
}

/// The algorithm of one limiter.
pub(crate) struct Setting {
    built: Algorithm,
    changed: AtomicBool,
    current: AtomicCell<Algorithm>,
}

impl Setting {
    pub(crate) fn new(algorithm: Algorithm) -> Self {
        Self {
            built: algorithm,
            changed: AtomicBool::new(false),
            current: AtomicCell::new(algorithm),
        }
    }

    /// The algorithm as built, while no runtime change has been made; `None` after one (read
    /// [`load`](Self::load) then).
    #[inline(always)]
    pub(crate) fn unchanged(&self) -> Option<&Algorithm> {
        // Acquire pairs with the Release in `store`: a reader that sees the flag raised also
        // sees the configuration stored before it, so it never reads the built algorithm
        // after having been told it is stale. (A reader that has not seen the flag yet uses
        // the built one: the change is not visible to it yet, as with any concurrent update.)
        if self.changed.load(Ordering::Acquire) {
            None
        } else {
            Some(&self.built)
        }
    }

    /// The current algorithm.
    #[inline]
    pub(crate) fn load(&self) -> Algorithm {
        match self.unchanged() {
            Some(a) => *a,
            None => self.current.load(),
        }
    }

    /// [`load`](Self::load), kept out of line: the path of checks after a runtime change.
    #[cold]
    #[inline(never)]
    pub(crate) fn load_cold(&self) -> Algorithm {
        self.load()
    }

    /// The algorithm as built: its kind (and, for every kind but GCRA, its parameters) never
    /// change, so what depends only on the kind may read this without a load.
    #[inline(always)]
    pub(crate) fn kind(&self) -> &Algorithm {
        &self.built
    }

    /// Replaces the current algorithm (which must be of the built kind).
    pub(crate) fn store(&self, algorithm: Algorithm) {
        debug_assert_eq!(
            std::mem::discriminant(&algorithm),
            std::mem::discriminant(&self.built)
        );
        self.current.store(algorithm);
        // Release: see `unchanged`.
        self.changed.store(true, Ordering::Release);
    }
}

impl std::fmt::Debug for Setting {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Debug::fmt(&self.load(), f)
    }
}
