//! A mutex that ignores poisoning.
//!
//! The data behind every lock in this crate is left consistent at each point a panic could
//! unwind from (a panic inside a user's clock or hasher happens before any write), so a
//! poisoned lock is still usable: refusing it would turn one panic into a limiter that panics
//! on every later call.

use super::{Mutex, MutexGuard};

/// A [`Mutex`] whose [`lock`](Lock::lock) never fails.
#[derive(Debug, Default)]
pub(crate) struct Lock<T>(Mutex<T>);

impl<T> Lock<T> {
    pub(crate) fn new(value: T) -> Self {
        Self(Mutex::new(value))
    }

    /// Locks, whether or not a holder panicked (see the module's note).
    #[inline]
    pub(crate) fn lock(&self) -> MutexGuard<'_, T> {
        #[cfg(all(test, not(loom)))]
        super::counts::bump(super::counts::Event::Lock);
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }
}
