//! The only atomics of the RESP listener.

use std::sync::atomic::{AtomicU64, Ordering};

/// Hands out connection ids (`CLIENT ID`, `HELLO`'s `id`): unique, increasing from 1.
#[derive(Debug)]
pub(crate) struct ClientIds(AtomicU64);

impl ClientIds {
    pub(crate) const fn new() -> Self {
        Self(AtomicU64::new(1))
    }

    pub(crate) fn next(&self) -> u64 {
        // Relaxed: an id only has to be unique, which the read-modify-write guarantees under
        // any ordering; no other memory is published with it.
        self.0.fetch_add(1, Ordering::Relaxed)
    }
}
