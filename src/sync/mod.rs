//! Everything concurrent: the only module that names an atomic, a memory ordering or a lock.
//!
//! Under `cfg(loom)` the atomics and locks below are loom's, so that `loom-tests/` model-checks
//! the very code that ships rather than a copy. What is built on them:
//!
//! - [`cell::Cell`]: one key's packed word and the compare-and-swap loop that updates it;
//! - [`Slot`]: the fixed table's 16-byte slot (fingerprint and word);
//! - [`grow`]: the growing table's slot of two 64-bit words, its swappable slot arrays and
//!   freeze;
//! - [`published`]: the per-thread cache through which checks reach a growing table's current
//!   arrays, and the rebuilds' publication of new ones;
//! - [`map`]: the exact stores' sharded map (dashmap, or a loom-visible stand-in);
//! - [`SeqLock`] and [`Flag`]: a runtime-changed quota, read without a lock;
//! - [`Lock`]: a mutex that ignores poisoning (table shards, sliding logs);
//! - [`high_water`]: a striped limiter's record of time (each stripe's latest admission, and
//!   the latest instant a check found proven);
//! - [`contended`]: a per-thread hint that this thread's keyed checks lately lost a
//!   compare-and-swap (no atomic: when to read the clock);
//! - [`Counter`]: key counts (the key cap), statistics and the sweep floor;
//! - [`sweep_gate::SweepGate`]: which caller runs a due sweep;
//! - [`time`]: the clocks' own words (the coarse clock's shared timestamp and upkeep thread, a
//!   manual clock's time), std atomics outside the loom shim.
//!
//! Every ordering used is written at its one place here, with why it suffices.

pub(crate) mod cell;
pub(crate) mod contended;
mod counter;
#[cfg(all(test, not(loom)))]
pub(crate) mod counts;
pub(crate) mod grow;
pub(crate) mod high_water;
mod lock;
pub(crate) mod map;
pub(crate) mod published;
mod seqlock;
mod slot;
pub(crate) mod sweep_gate;
pub(crate) mod time;

pub(crate) use counter::{next_ticket, Counter};
pub(crate) use lock::Lock;
pub(crate) use seqlock::{Flag, SeqLock};
pub(crate) use slot::Slot;

#[cfg(loom)]
pub(crate) use loom::sync::atomic::{fence, AtomicBool, AtomicU64, Ordering};
#[cfg(loom)]
pub(crate) use loom::sync::{Mutex, MutexGuard};

#[cfg(not(loom))]
pub(crate) use portable_atomic::AtomicU128;
#[cfg(not(loom))]
pub(crate) use std::sync::atomic::{fence, AtomicBool, AtomicU64, Ordering};
#[cfg(not(loom))]
pub(crate) use std::sync::{Mutex, MutexGuard};

/// Waits a moment in a retry loop (under loom: lets the other threads run).
#[inline]
pub(crate) fn back_off() {
    #[cfg(not(loom))]
    std::hint::spin_loop();
    #[cfg(loom)]
    loom::thread::yield_now();
}

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
