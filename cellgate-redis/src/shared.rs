//! What the checking threads and the background task share, and the one place this crate
//! names atomics.

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicU8, Ordering};
use std::sync::Mutex;
use std::thread::JoinHandle;

use cellgate::{Decision, Limiter};
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
