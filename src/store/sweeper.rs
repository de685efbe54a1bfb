//! A background thread that drops a keyed limiter's idle keys periodically.
//!
//! [`KeyedLimiter::evict_idle`] is lossless but has to be called by someone. Stores with
//! [`max_keys`](crate::KeyedBuilder::max_keys) sweep by themselves when they are full; an
//! unbounded map, or a table that should stay well below its bound (shorter probe runs, fewer
//! refusals under a burst of new keys), needs periodic sweeps: [`KeyedLimiter::spawn_sweeper`]
//! runs them on a thread of its own.
//!
//! The thread holds only a [`Weak`] reference, so it never keeps the limiter alive: it stops at
//! its next tick after the last [`Arc`] is dropped, or at once when its [`Sweeper`] handle is
//! stopped or dropped (which waits for it to finish: no thread outlives its handle).

use std::fmt;
use std::hash::Hash;
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::{Arc, Weak};
use std::thread::JoinHandle;
use std::time::Duration;

use crate::clock::Clock;
use crate::error::ConfigError;
use crate::limiter::keyed::KeyedLimiter;

/// The handle of a background sweeper started by [`KeyedLimiter::spawn_sweeper`]. Dropping it
/// (or calling [`stop`](Sweeper::stop)) stops the thread and waits for it.
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
    /// Whether the thread has ended: it was stopped, or the limiter was dropped.
    pub fn is_finished(&self) -> bool {
        self.thread.as_ref().map_or(true, JoinHandle::is_finished)
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

impl<K, C> KeyedLimiter<K, C>
where
    K: Hash + Eq + Send + Sync + 'static,
    C: Clock + Send + Sync + 'static,
{
    /// Starts a thread that calls [`evict_idle`](KeyedLimiter::evict_idle) every `every` (real
    /// time, whatever the limiter's clock), until the returned [`Sweeper`] is stopped or
    /// dropped, or the limiter is dropped (the thread holds only a [`Weak`] reference; it
    /// notices at its next tick).
    ///
    /// Each sweep locks one shard at a time (see [`evict_idle`](KeyedLimiter::evict_idle)):
    /// choose `every` so that sweeps are rare next to checks, for example a fraction of the
    /// time a key takes to go idle (a GCRA key: `burst × interval`).
    ///
    /// # Errors
    ///
    /// [`std::io::ErrorKind::InvalidInput`] (wrapping [`ConfigError::Zero`]) if `every` is zero;
    /// the operating system's error if it cannot start a thread.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::sync::Arc;
    /// use std::time::Duration;
    /// use cellgate::{KeyedLimiter, Quota};
    ///
    /// let users = Arc::new(KeyedLimiter::<u64>::gcra(Quota::per_second(10)).build()?);
    /// let sweeper = users.spawn_sweeper(Duration::from_secs(30))?;
    /// assert!(users.check(&42).is_allowed());
    /// // ... serve; idle keys are dropped every 30 s ...
    /// sweeper.stop(); // or drop it, or drop the last `Arc` of the limiter
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn spawn_sweeper(self: &Arc<Self>, every: Duration) -> std::io::Result<Sweeper> {
        if every.is_zero() {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                ConfigError::Zero { field: "every" },
            ));
        }
        let limiter: Weak<Self> = Arc::downgrade(self);
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
                let Some(limiter) = limiter.upgrade() else {
                    return;
                };
                limiter.evict_idle();
            })?;
        Ok(Sweeper {
            stop: Some(stop),
            thread: Some(thread),
        })
    }
}
