//! A background thread that sweeps a store periodically.
//!
//! [`KeyedLimiter::evict_idle`](crate::KeyedLimiter::evict_idle) is lossless but has to be
//! called by someone. Stores with [`max_keys`](crate::KeyedLimiterBuilder::max_keys) sweep by
//! themselves when they are full; an unbounded map, or a table that should stay well below its
//! bound (shorter probe runs, fewer refusals under a burst of new keys), needs periodic sweeps:
//! [`KeyedLimiter::spawn_sweeper`](crate::KeyedLimiter::spawn_sweeper) runs them on a thread of
//! its own, through [`Sweeper::spawn`].
//!
//! The thread's sweep holds only a weak reference, so it never keeps the limiter alive: it stops
//! at its next tick after the last `Arc` is dropped, or at once when its [`Sweeper`] handle is
//! stopped or dropped (which waits for it to finish: no thread outlives its handle).

use std::fmt;
use std::sync::mpsc::{self, RecvTimeoutError};
use std::thread::JoinHandle;
use std::time::Duration;

use crate::error::ConfigError;

/// The handle of a background sweeper started by
/// [`KeyedLimiter::spawn_sweeper`](crate::KeyedLimiter::spawn_sweeper). Dropping it (or calling
/// [`stop`](Sweeper::stop)) stops the thread and waits for it.
#[must_use = "dropping the handle stops the sweeper at once"]
pub struct Sweeper {
    /// Dropped to stop the thread: its wait then ends with "disconnected".
    stop: Option<mpsc::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl fmt::Debug for Sweeper {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Sweeper")
            .field("finished", &self.is_finished())
            .finish()
    }
}

impl Sweeper {
    /// Starts a thread that calls `sweep` every `every` (real time) until the handle is stopped
    /// or dropped, or `sweep` returns `false` (what it sweeps is gone).
    ///
    /// # Errors
    ///
    /// [`std::io::ErrorKind::InvalidInput`] (wrapping [`ConfigError::Zero`]) if `every` is zero;
    /// the operating system's error if it cannot start a thread.
    pub(crate) fn spawn(
        every: Duration,
        sweep: impl Fn() -> bool + Send + 'static,
    ) -> std::io::Result<Self> {
        if every.is_zero() {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                ConfigError::Zero { field: "every" },
            ));
        }
        let (stop, stopped) = mpsc::channel::<()>();
        let thread = std::thread::Builder::new()
            .name("cellgate-sweeper".into())
            .spawn(move || loop {
                // Nothing is ever sent: the wait ends by timing out (sweep) or by the handle's
                // sender being dropped (stop). A timeout too far to represent waits forever.
                match stopped.recv_timeout(every) {
                    Err(RecvTimeoutError::Timeout) => {}
                    Ok(()) | Err(RecvTimeoutError::Disconnected) => return,
                }
                if !sweep() {
                    return;
                }
            })?;
        Ok(Self {
            stop: Some(stop),
            thread: Some(thread),
        })
    }

    /// Whether the thread has ended: it was stopped, or the limiter was dropped.
    pub fn is_finished(&self) -> bool {
        self.thread.as_ref().is_none_or(JoinHandle::is_finished)
    }

    /// Stops the thread and waits for it to end (a sweep in progress finishes first).
    pub fn stop(mut self) {
        self.shut_down();
    }

    fn shut_down(&mut self) {
        drop(self.stop.take());
        if let Some(thread) = self.thread.take() {
            // A sweep never panics; if it ever did, the thread is over either way and the
            // panic has been reported by the default hook: nothing to propagate from a drop.
            let _ = thread.join();
        }
    }
}

impl Drop for Sweeper {
    fn drop(&mut self) {
        self.shut_down();
    }
}
