//! The atomics the crate uses, swapped for loom's under `cfg(loom)`.
//!
//! Only [`crate::cell`] (and the loom-visible parts of the keyed store) go through this
//! shim, so that `loom-tests/` model-checks the very code that ships rather than a copy.

#[cfg(loom)]
pub(crate) use loom::sync::atomic::{AtomicU64, Ordering};

#[cfg(not(loom))]
pub(crate) use std::sync::atomic::{AtomicU64, Ordering};
