//! What the checking threads and the background task share (its atomics and locks are the
//! types of [`crate::sync`]).

use std::thread::JoinHandle;

use cellgate::{Decision, KeyedLimiter, Limiter};

use crate::fleet::LastError;
use crate::keyed::KeyedStats;
pub(crate) use crate::local::{CONNECTED, FALLBACK, FORGOTTEN, PARTITIONED};
use crate::sync::{Counter, Dry, Link, Lock, Stop};
use tokio::sync::Notify;

/// State shared by the checking threads and the background task.
pub(crate) struct Shared {
    /// Leased units: the only thing a check touches while Redis answers.
    pub(crate) pool: Limiter,
    /// The outage share (rate limits with a reserved burst only).
    pub(crate) fallback: Option<Limiter>,
    pub(crate) state: Link,
    /// The largest check denied since the task last looked (0: none): lease more, and refill
    /// at once if the pool holds less than it.
    pub(crate) dry: Dry,
    pub(crate) stop: Stop,
    pub(crate) wake: Notify,
    /// Units admitted by the fallback, to charge to Redis.
    pub(crate) fallback_admitted: Counter,
    pub(crate) lease_requests: Counter,
    pub(crate) backend_errors: Counter,
    pub(crate) charged_back: Counter,
    pub(crate) commands: Counter,
    pub(crate) live: Counter,
    /// The last failure and when it happened (written by the task, read by the application).
    pub(crate) last_error: Lock<Option<LastError>>,
}

impl Shared {
    pub(crate) fn state(&self) -> u8 {
        self.state.get()
    }

    /// A check the pool refused: the fallback in an outage, else the dry signal (see
    /// [`crate::local::refused`]), waking the task when the signal rose.
    #[cold]
    pub(crate) fn denied(&self, n: u32, pool: Decision) -> Decision {
        let (d, wake) = crate::local::refused(
            n,
            pool,
            &self.state,
            self.fallback.as_ref(),
            &self.fallback_admitted,
            &self.dry,
        );
        if wake {
            self.wake.notify_one();
        }
        d
    }
}

/// Stops a limiter's background thread: sets `stop`, wakes it, and waits for it to finish
/// (its last commands included). Later calls find no thread and return at once.
pub(crate) fn stop_thread(stop: &Stop, wake: &Notify, thread: &Lock<Option<JoinHandle<()>>>) {
    stop.raise();
    wake.notify_one();
    let handle = thread.lock().take();
    if let Some(h) = handle {
        let _ = h.join();
    }
}

/// A keyed limiter's counters (see [`KeyedStats`]).
#[derive(Default)]
pub(crate) struct Counters {
    pub(crate) hot_keys: Counter,
    pub(crate) leased: Counter,
    pub(crate) batches: Counter,
    pub(crate) passed_through: Counter,
    pub(crate) lease_requests: Counter,
    pub(crate) backend_errors: Counter,
    pub(crate) fallback_admitted: Counter,
    pub(crate) charged_back: Counter,
    pub(crate) live: Counter,
}

/// What a keyed limiter's checking threads and its batching task share.
pub(crate) struct KeyedShared {
    /// Leased units of hot keys.
    pub(crate) pool: KeyedLimiter<String>,
    pub(crate) state: Link,
    pub(crate) stop: Stop,
    pub(crate) wake: Notify,
    pub(crate) counters: Counters,
}

impl KeyedShared {
    pub(crate) fn new(pool: KeyedLimiter<String>) -> Self {
        Self {
            pool,
            state: Link::new(CONNECTED),
            stop: Stop::new(),
            wake: Notify::new(),
            counters: Counters::default(),
        }
    }

    pub(crate) fn stats(&self) -> KeyedStats {
        let c = &self.counters;
        let get = Counter::get;
        KeyedStats {
            hot_keys: get(&c.hot_keys),
            leased: get(&c.leased),
            batches: get(&c.batches),
            passed_through: get(&c.passed_through),
            lease_requests: get(&c.lease_requests),
            backend_errors: get(&c.backend_errors),
            fallback_admitted: get(&c.fallback_admitted),
            charged_back: get(&c.charged_back),
            live: get(&c.live),
        }
    }
}
