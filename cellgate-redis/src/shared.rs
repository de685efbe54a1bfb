//! What the checking threads and the background task share (its atomics and locks are the
//! types of [`crate::sync`]).

use cellgate::{Decision, KeyedLimiter, Limiter, StripedLimiter};

use crate::error::FleetError;
pub(crate) use crate::local::{CONNECTED, FALLBACK, FORGOTTEN, PARTITIONED};
use crate::report::KeyedStats;
use crate::report::LastError;
use crate::sync::{Counter, Dry, Link, Lock, Stop};
use tokio::sync::Notify;

/// State shared by the checking threads and the background task.
pub(crate) struct Shared {
    /// Leased units: the only thing a check touches while Redis answers.
    /// A striped stock (a stripe per CPU): checks on many threads take units from their own
    /// cache line, where one cell would put every check of the process on one line.
    pub(crate) pool: StripedLimiter,
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

/// Records `error` as a limiter's last failure, with the time.
pub(crate) fn record(last_error: &Lock<Option<LastError>>, error: FleetError) {
    *last_error.lock() = Some(LastError {
        at: std::time::SystemTime::now(),
        error,
    });
}

/// Moves the limiter `name` to `state` (recording `error` when there is one), logging the
/// change. A forgotten limit stays so: its units are gone from Redis's books.
pub(crate) fn transition(
    name: &str,
    link: &Link,
    last_error: &Lock<Option<LastError>>,
    state: u8,
    error: Option<FleetError>,
) {
    let from = link.get();
    if let Some(e) = &error {
        if from != state || from == CONNECTED {
            tracing::warn!(limit = %name, error = %e, "{}", describe(state));
        } else {
            tracing::debug!(limit = %name, error = %e, "redis still not answering");
        }
    } else if from != state {
        tracing::info!(limit = %name, "{}", describe(state));
    }
    if let Some(e) = error {
        record(last_error, e);
    }
    if from != FORGOTTEN {
        link.set(state);
    }
}

/// What a state means, for the log.
fn describe(state: u8) -> &'static str {
    match state {
        CONNECTED => "redis answers: admitting from leases",
        FALLBACK => "redis not answering: admitting at the local share, to be charged back",
        PARTITIONED => "redis not answering: admitting only leased units",
        _ => "redis lost this limit: selling only leased units; an operator must reset it",
    }
}

/// What a limiter waits on to know its background task, on one of the fleet limiters' shared
/// runtimes, has finished (its last commands included): the task drops the sender when its future
/// completes (or is dropped).
pub(crate) type Ended = std::sync::mpsc::Receiver<()>;

/// Stops a limiter's background task: sets `stop`, wakes it, and waits for it to finish,
/// blocking the calling thread (never one of the runtime's: the task is not waited on there).
/// Later calls find nothing to wait for and return at once.
pub(crate) fn stop_task(stop: &Stop, wake: &Notify, ended: &Lock<Option<Ended>>) {
    stop.raise();
    wake.notify_one();
    let ended = ended.lock().take();
    if let Some(ended) = ended {
        // Err once the sender is gone: the task ended.
        let _ = ended.recv();
    }
}

/// A hot key's mark while its lease may be refilled without a signal (see
/// [`KeyedShared::marks`]).
pub(crate) const ARMED: u64 = 3;
/// What the check that finds an armed key's lease spent takes from its mark.
pub(crate) const DISARM: u32 = 2;

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

/// The most shards a keyed limit can have (a cluster's `CLUSTER_SHARDS`, which the keyed client
/// asserts at compile time to be at most this; one on a single node).
pub(crate) const MAX_SHARDS: usize = 16;

/// What a keyed limiter's checking threads and its batching task share.
pub(crate) struct KeyedShared {
    /// Leased units of hot keys.
    pub(crate) pool: KeyedLimiter<String>,
    /// A mark per key leased here whose lease was answered: [`ARMED`] until a check finds its
    /// lease spent and tells the task (taking [`DISARM`], leaving 1), then 1 until the task's
    /// next lease answer arms it again. A check of a spent lease reads it to deny at once, and
    /// the one that disarms it sends the task one dry signal per lease (see
    /// `KeyedFleet::spent_lease`). A stock of marks: every change is the core's own CAS.
    pub(crate) marks: KeyedLimiter<String>,
    /// The largest check a spent lease denies here (larger ones go to Redis, which may have
    /// room a lease never holds): a rate's lease cap `max(1, B / (2·live))`; 1 for a stock,
    /// whose leases shrink near the end.
    pub(crate) lease_max: Counter,
    /// The whole limit's state: the worst of its shards' (see [`KeyedShared::transition`]).
    pub(crate) state: Link,
    /// The limit's shards in use (1 on one node, set once the client is made).
    pub(crate) shards: Counter,
    /// Each shard's own state: a check of a key is decided by its shard's (a master down
    /// sends to the fallback only the keys it holds).
    pub(crate) shard_states: [Link; MAX_SHARDS],
    /// The last failure and when it happened (any shard's).
    pub(crate) last_error: Lock<Option<LastError>>,
    /// Each shard's last failure.
    pub(crate) shard_errors: Lock<[Option<LastError>; MAX_SHARDS]>,
    pub(crate) stop: Stop,
    pub(crate) wake: Notify,
    pub(crate) counters: Counters,
}

impl KeyedShared {
    pub(crate) fn new(pool: KeyedLimiter<String>, marks: KeyedLimiter<String>) -> Self {
        Self {
            pool,
            marks,
            lease_max: Counter::new(1),
            state: Link::new(CONNECTED),
            shards: Counter::new(1),
            shard_states: std::array::from_fn(|_| Link::new(CONNECTED)),
            last_error: Lock::new(None),
            shard_errors: Lock::new(std::array::from_fn(|_| None)),
            stop: Stop::new(),
            wake: Notify::new(),
            counters: Counters::default(),
        }
    }

    /// The shards in use.
    fn used(&self) -> &[Link] {
        let n = usize::try_from(self.shards.get()).unwrap_or(MAX_SHARDS);
        &self.shard_states[..n.clamp(1, MAX_SHARDS)]
    }

    /// How many shards in use are not connected (a keyed limit on a cluster: the masters
    /// out, by the shards they serve).
    #[cfg(feature = "metrics")]
    pub(crate) fn shards_out(&self) -> usize {
        self.used().iter().filter(|l| l.get() != CONNECTED).count()
    }

    /// The state of shard `shard`.
    pub(crate) fn shard_state(&self, shard: usize) -> u8 {
        self.shard_states.get(shard).map_or(CONNECTED, Link::get)
    }

    /// Moves shard `shard` of the keyed limit `name` to `state` (recording `error` as the
    /// shard's and the limit's last failure), logging the change under the shard's hash tag
    /// (`tag()`), and the whole limit to the worst state of its shards (the states' order:
    /// connected, fallback, partitioned, forgotten). A forgotten shard stays so.
    pub(crate) fn transition(
        &self,
        tag: impl FnOnce() -> String,
        shard: usize,
        state: u8,
        error: Option<FleetError>,
    ) {
        let Some(link) = self.shard_states.get(shard) else {
            return;
        };
        if error.is_none() && link.get() == state {
            // Nothing to log, record or recompute (every answered batch comes here).
            return;
        }
        if let Some(e) = &error {
            self.shard_errors.lock()[shard] = Some(LastError {
                at: std::time::SystemTime::now(),
                error: e.clone(),
            });
        }
        transition(&tag(), link, &self.last_error, state, error);
        let worst = self.used().iter().map(Link::get).max().unwrap_or(CONNECTED);
        self.state.set(worst);
    }

    /// Moves every shard in use to `state` (a start during an outage, a shutdown), but a
    /// forgotten one, without logging.
    pub(crate) fn set_all(&self, state: u8) {
        for link in self.used() {
            if link.get() != FORGOTTEN {
                link.set(state);
            }
        }
        let worst = self.used().iter().map(Link::get).max().unwrap_or(CONNECTED);
        self.state.set(worst);
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
