//! The atomics and locks the crate's concurrent cores use, swapped for loom's under `cfg(loom)`.
//!
//! [`crate::sync::cell`], [`crate::store::table`], the sweep gate, the limiters' sweep floor and the sliding
//! log's per-key mutex go through this shim (and the exact maps through
//! [`crate::store::exact_map`]), so that `loom-tests/` model-checks the very code that ships rather
//! than a copy.

pub(crate) mod cell;

#[cfg(loom)]
pub(crate) use loom::sync::atomic::{AtomicBool, AtomicU64, Ordering};
#[cfg(loom)]
pub(crate) use loom::sync::{Mutex, MutexGuard};

#[cfg(not(loom))]
pub(crate) use portable_atomic::AtomicU128;
#[cfg(not(loom))]
pub(crate) use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
#[cfg(not(loom))]
pub(crate) use std::sync::{Mutex, MutexGuard};

/// loom has no 128-bit atomic; this stand-in gives loom a visible, atomic (lock-protected)
/// 128-bit word with the operations the table uses. It models a 16-byte compare-and-swap as one
/// indivisible step, which is what `cmpxchg16b` (or portable-atomic's fallback) provides.
#[cfg(loom)]
#[derive(Debug)]
pub(crate) struct AtomicU128(loom::sync::Mutex<u128>);

#[cfg(loom)]
impl AtomicU128 {
    pub(crate) fn new(v: u128) -> Self {
        Self(loom::sync::Mutex::new(v))
    }

    pub(crate) fn load(&self, _: Ordering) -> u128 {
        *self.0.lock().unwrap()
    }

    pub(crate) fn store(&self, v: u128, _: Ordering) {
        *self.0.lock().unwrap() = v;
    }

    pub(crate) fn compare_exchange_weak(
        &self,
        current: u128,
        new: u128,
        _: Ordering,
        _: Ordering,
    ) -> Result<u128, u128> {
        let mut guard = self.0.lock().unwrap();
        if *guard == current {
            *guard = new;
            Ok(current)
        } else {
            Err(*guard)
        }
    }
}
