//! What the checking threads and the background task share, and the one place this crate
//! names atomics.

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicU8, Ordering};
use std::sync::Mutex;
use std::thread::JoinHandle;

use cellgate::{Decision, KeyedLimiter, Limiter};

use crate::keyed::KeyedStats;
use tokio::sync::Notify;

pub(crate) const CONNECTED: u8 = 0;
pub(crate) const FALLBACK: u8 = 1;
pub(crate) const PARTITIONED: u8 = 2;

/// State shared by the checking threads and the background task.
pub(crate) struct Shared {
    /// Leased units: the only thing a check touches while Redis answers.
    pub(crate) pool: Limiter,
    /// The outage share (rate limits with a reserved burst only).
    pub(crate) fallback: Option<Limiter>,
    pub(crate) state: AtomicU8,
    /// The largest check denied since the task last looked (0: none): lease more, and refill
    /// at once if the pool holds less than it.
    pub(crate) dry: AtomicU32,
    pub(crate) stop: AtomicBool,
    pub(crate) wake: Notify,
    /// Units admitted by the fallback, to charge to Redis.
    pub(crate) fallback_admitted: AtomicU64,
    pub(crate) lease_requests: AtomicU64,
    pub(crate) backend_errors: AtomicU64,
    pub(crate) charged_back: AtomicU64,
    pub(crate) commands: AtomicU64,
    pub(crate) live: AtomicU64,
}

// Orderings: every atomic here is either a flag read as a hint (`dry`, `state`: a stale read
// only delays a refill or sends one more check to the path the task is leaving, whose
// admissions are counted either way) or a counter whose value alone matters (`Relaxed`
// read-modify-writes never lose an increment). The one hand-over that needs ordering is
// `stop`, which the task reads after the owner sets it: Release/Acquire, though the join that
// follows would order it anyway. The pool and the fallback are cellgate limiters, whose own
// compare-and-swap loops make admissions exact.

impl Shared {
    pub(crate) fn state(&self) -> u8 {
        self.state.load(Ordering::Relaxed)
    }

    #[cold]
    pub(crate) fn denied(&self, n: u32, pool: Decision) -> Decision {
        if self.state() == FALLBACK {
            if let Some(f) = &self.fallback {
                let d = f.check_n(n);
                if d.is_allowed() {
                    self.fallback_admitted
                        .fetch_add(u64::from(n), Ordering::Relaxed);
                    return d;
                }
            }
        }
        // Load first: a pool that stays dry is checked by every thread, and a plain load keeps
        // the flag's cache line shared.
        if self.dry.load(Ordering::Relaxed) < n && self.dry.fetch_max(n, Ordering::Relaxed) < n {
            self.wake.notify_one();
        }
        pool
    }
}

/// Stops a limiter's background thread: sets `stop`, wakes it, and waits for it to finish
/// (its last commands included). Later calls find no thread and return at once.
pub(crate) fn stop_thread(
    stop: &AtomicBool,
    wake: &Notify,
    thread: &Mutex<Option<JoinHandle<()>>>,
) {
    stop.store(true, Ordering::Release);
    wake.notify_one();
    let handle = thread
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .take();
    if let Some(h) = handle {
        let _ = h.join();
    }
}

/// A keyed limiter's counters (see [`KeyedStats`]).
#[derive(Default)]
pub(crate) struct Counters {
    pub(crate) hot_keys: AtomicU64,
    pub(crate) leased: AtomicU64,
    pub(crate) batches: AtomicU64,
    pub(crate) passed_through: AtomicU64,
    pub(crate) lease_requests: AtomicU64,
    pub(crate) backend_errors: AtomicU64,
    pub(crate) fallback_admitted: AtomicU64,
    pub(crate) charged_back: AtomicU64,
    pub(crate) live: AtomicU64,
}

/// What a keyed limiter's checking threads and its batching task share.
pub(crate) struct KeyedShared {
    /// Leased units of hot keys.
    pub(crate) pool: KeyedLimiter<String>,
    pub(crate) state: AtomicU8,
    pub(crate) stop: AtomicBool,
    pub(crate) wake: Notify,
    pub(crate) counters: Counters,
}

// Orderings: `state` is a hint (a stale read sends one more check through the batching task,
// which decides it either way), the counters only matter by value (Relaxed read-modify-writes
// lose no increment), and `stop` is set before the task is woken and joined (Release/Acquire,
// though the join orders it anyway). The pool is a cellgate limiter: its own CAS loops make
// admissions exact.

impl KeyedShared {
    pub(crate) fn new(pool: KeyedLimiter<String>) -> Self {
        Self {
            pool,
            state: AtomicU8::new(CONNECTED),
            stop: AtomicBool::new(false),
            wake: Notify::new(),
            counters: Counters::default(),
        }
    }

    pub(crate) fn stats(&self) -> KeyedStats {
        let c = &self.counters;
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
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
