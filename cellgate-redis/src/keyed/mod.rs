//! Per-key global limits: a GCRA rate per key (per user, per API token, per IP) shared by a
//! fleet, hot keys leased, cold keys passed through in batches.
//!
//! # Design
//!
//! A fleet may see millions of keys, most of them a few times a minute: leasing each of them
//! would cost a Redis command per key and strand units in every process; passing each check
//! through costs a round trip per check. So a key is treated by how hot it is *in this
//! process*:
//!
//! - **Cold keys** go through a batching task: every check waiting when a round trip starts
//!   rides in the same script call (up to [`MAX_BATCH`](crate::wire::MAX_BATCH) keys per call, any number of calls
//!   in a second), which checks it exactly against the key's GCRA in Redis. One call carries
//!   at least one check, so it is never worse than one Redis call per check, and under load
//!   it is many checks per call.
//! - **Hot keys** (more than [`hot_rate`](KeyedFleetBuilder::hot_rate) checks a second here)
//!   get a lease as a whole-limit [`Fleet`](crate::Fleet) does: units pre-debited in Redis
//!   and held in a local keyed stock (cellgate's [`KeyedLimiter`](cellgate::KeyedLimiter)), so their checks are a
//!   local compare-and-swap and never wait. Leases ride in the same batches, sized by the
//!   key's observed rate, at most `B / (2·live)`; a lease's unused units are given back at 3/4
//!   of the lease lifetime and a key idle for [`idle_return`](KeyedFleetBuilder::idle_return)
//!   gives back what it holds and goes cold again. At most
//!   [`max_hot`](KeyedFleetBuilder::max_hot) keys are hot at once, so the local state is
//!   bounded (cold keys keep nothing in the process but a count within the current 100 ms).
//!   A check of a hot key whose lease is spent is denied here at once while Redis answers
//!   ([`Via::Lease`]; a check larger than a lease can hold still goes to Redis): the first
//!   such denial after each lease answer tells the task, once, which then asks for the next
//!   lease as soon as the key's rules allow (a key whose fleet came back short waits for
//!   about a short lease of accrual per holder: the larger of the minimum lease and 100 ms of
//!   the key's rate). So a saturated hot key costs a few lease operations a second, never a
//!   round trip per check.
//!
//! On a Redis Cluster (comma-separated seed URLs) the keys of one limit are spread over
//! [`CLUSTER_SHARDS`](crate::wire::CLUSTER_SHARDS) hash tags, so over the masters: each shard has its own configuration,
//! holders and replies on its keys' slot, carries the limit's epoch (written into every shard
//! when a process registers), has its own batch in flight, and its own state: a master that
//! does not answer (or whose replicas do not acknowledge a stock's batch, or that lost a
//! shard) puts only its shards' keys in the fallback, while the keys of the other masters are
//! still checked and leased in Redis ([`KeyedFleet::state_of`], [`KeyedFleet::shard_states`];
//! [`KeyedFleet::state`] is the worst shard's). On one node a limit is one shard.
//!
//! A cold check cannot be both exact and never wait: exactness needs Redis's answer. It
//! waits, **at most [`max_wait`](KeyedFleetBuilder::max_wait)** (default 20 ms): an `async`
//! [`check`](KeyedFleet::check) (or [`check_blocking`](KeyedFleet::check_blocking) for a
//! thread), answered from Redis when it answers in time, otherwise by the outage fallback. A
//! hot key's check is decided locally and at once, or tried synchronously alone with
//! [`try_check`](KeyedFleet::try_check).
//!
//! # Guarantees, per key
//!
//! With `R` the rate per key and `B` its burst, across all processes connected with the same
//! name: while Redis answers, Σ admitted for one key over any `[0, T]` ≤ `R·T + B` (a check
//! and a lease both debit the key's GCRA in Redis before the units are admitted), and over
//! any window of length `w` ≤ `R·(w + L) + B` (`L` the lease lifetime, as for
//! [`Fleet::rate`](crate::Fleet::rate)). Batches are executed at most once (a process id and
//! a sequence per batch, the answer kept for retries), so a lost reply never grants twice.
//!
//! When Redis does not answer, or answers later than `max_wait`, a check is decided by a local
//! per-key GCRA at the process's share `R/N` with a burst of one (`N` the live processes at the
//! last answer), and what it admits is charged to the key in Redis once Redis answers again
//! (units a late answer granted to a check already decided are given back). Over an outage of
//! length `t` a process so admits at most `R·t/N + 1` per key, so once every process has
//! charged back, Σ admitted for one key over `[0, T]` ≤ `R·T + B + N`; while a process falls
//! back and others still reach Redis, the fleet may be ahead on a key by that process's
//! not-yet-charged admissions. With [`fallback(false)`](KeyedFleetBuilder::fallback) an
//! unanswered check is denied instead (fail closed): then the per-key bound holds at every
//! moment. Leased units of hot keys are admitted through an outage (they are paid for).
//!
//! # Per-key stocks
//!
//! [`KeyedFleet::stock`] keeps `S` units per key (per-SKU inventory in a flash sale) with the
//! same machinery: the script's per-key value is then the units taken (sold or leased), and
//! a check or a lease takes units only while `taken + n ≤ S`, so Σ sold for one key ≤ `S`
//! under any interleaving, retry, timeout or `kill -9` (grants are executed once per batch
//! sequence, as for a rate). A hot key's lease is at most
//! [`max_lease`](KeyedFleetBuilder::max_lease) and at most `left / (2·live)` (at least one), so
//! the last units are spread over the holders; a crashed holder takes at most `1.5 ×
//! max_lease` of a key with it (undersold, never oversold). A stock **never falls back**:
//! during an outage a cold check is denied once `max_wait` has passed (fail closed) and a hot
//! key sells only what it holds leased. There is no per-key restock, and a key's count of
//! units taken stays in Redis (no expiry) for as long as Redis keeps its data.
//!
//! ```no_run
//! # async fn run() -> Result<(), cellgate_redis::FleetError> {
//! use cellgate_redis::KeyedFleet;
//!
//! // 100 of every SKU across the fleet.
//! let skus = KeyedFleet::stock("flash-sale", 100)
//!     .max_lease(5)
//!     .connect("redis://127.0.0.1:6379")?;
//! let d = skus.check_n("sku-42", 2).await;
//! if !d.is_allowed() {
//!     println!("sold out (or Redis did not answer within max_wait): {:?}", d.via());
//! }
//! # Ok(()) }
//! ```
//!
//! Studied for this design (not copied): Gubernator's GLOBAL behaviour (hits are applied
//! locally and sent asynchronously in batches to the key's owner, so it over-admits between
//! syncs), Envoy's global rate limit service (one gRPC call per request, descriptors batched
//! only within one request) and its local token buckets, and Bucket4j's Redis proxy with its
//! batching and "delaying" optimisations (requests to one key coalesced into one command;
//! delayed synchronisation admits ahead). Here a cold check is exact and batched across keys
//! and requests; only a hot key admits ahead, from units it already took.

mod builder;
pub(crate) mod client;
mod task;

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::{mpsc, oneshot};

pub use builder::KeyedFleetBuilder;
use client::shard_of;

use crate::error::FleetError;
use crate::report::FleetState;
pub use crate::report::KeyedStats;
use crate::shared::{KeyedShared, CONNECTED, DISARM};
use crate::sync::Lock;

/// How a keyed check was decided.
///
/// # Examples
///
/// ```no_run
/// # fn run(users: cellgate_redis::KeyedFleet) {
/// use cellgate_redis::Via;
/// let d = users.check_blocking("alice", 1);
/// if d.via() == Via::Fallback {
///     eprintln!("redis did not answer in time: decided by this process's share");
/// }
/// # }
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Via {
    /// From units this process had leased for a hot key: local, at once.
    Lease,
    /// By Redis, in a batched script call.
    Redis,
    /// By the outage fallback (Redis did not answer within `max_wait`, or is known down).
    Fallback,
    /// Denied without asking: the limiter is shut down, or too many checks wait already.
    Refused,
}

/// The decision on one keyed check.
///
/// # Examples
///
/// ```no_run
/// # async fn run(users: cellgate_redis::KeyedFleet) {
/// let d = users.check("alice").await;
/// if !d.is_allowed() {
///     println!("429, retry after {:?}", d.retry_after());
/// }
/// # }
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KeyDecision {
    allowed: bool,
    via: Via,
    retry_after: Option<Duration>,
}

impl KeyDecision {
    pub(crate) fn new(allowed: bool, via: Via, retry_after: Option<Duration>) -> Self {
        Self {
            allowed,
            via,
            retry_after: if allowed { None } else { retry_after },
        }
    }

    /// Whether the units were admitted.
    ///
    /// ```
    /// use std::time::Duration;
    /// use cellgate_redis::KeyedFleet;
    ///
    /// // No Redis on port 1: this process's outage share decides, one check at a time.
    /// let users = KeyedFleet::rate("users", 1, Duration::from_secs(60))
    ///     .start("redis://127.0.0.1:1")?;
    /// assert!(users.check_blocking("alice", 1).is_allowed());
    /// assert!(!users.check_blocking("alice", 1).is_allowed()); // the next one in a minute
    /// # Ok::<(), cellgate_redis::FleetError>(())
    /// ```
    pub fn is_allowed(&self) -> bool {
        self.allowed
    }

    /// How the check was decided.
    ///
    /// ```
    /// use std::time::Duration;
    /// use cellgate_redis::{KeyedFleet, Via};
    ///
    /// // Nothing listens on port 1, so the outage fallback decides.
    /// let users = KeyedFleet::rate("users", 10, Duration::from_secs(1))
    ///     .start("redis://127.0.0.1:1")?;
    /// assert_eq!(users.check_blocking("alice", 1).via(), Via::Fallback);
    /// # Ok::<(), cellgate_redis::FleetError>(())
    /// ```
    pub fn via(&self) -> Via {
        self.via
    }

    /// For a denial: how long until the same check could pass (`None` when admitted, when it
    /// never can, or when it is not known).
    ///
    /// ```
    /// use std::time::Duration;
    /// use cellgate_redis::KeyedFleet;
    ///
    /// // Redis is down: one a minute per key, one check at a time, from this process's share.
    /// let users = KeyedFleet::rate("users", 1, Duration::from_secs(60))
    ///     .start("redis://127.0.0.1:1")?;
    /// assert_eq!(users.check_blocking("alice", 1).retry_after(), None);
    /// let denied = users.check_blocking("alice", 1);
    /// assert!(denied.retry_after().is_some_and(|d| d <= Duration::from_secs(60)));
    /// # Ok::<(), cellgate_redis::FleetError>(())
    /// ```
    pub fn retry_after(&self) -> Option<Duration> {
        self.retry_after
    }
}

/// A cold check waiting for the batching task.
pub(crate) struct Request {
    pub(crate) key: String,
    pub(crate) n: u32,
    pub(crate) deadline: Instant,
    /// Whether the check was given the whole `max_wait`: only such a check's expiry says
    /// that Redis is slow (one its caller cut short says nothing about Redis).
    pub(crate) patient: bool,
    pub(crate) reply: oneshot::Sender<KeyDecision>,
}

/// A key to forget on purpose, and its caller.
pub(crate) struct Forget {
    pub(crate) key: String,
    pub(crate) reply: oneshot::Sender<Result<bool, FleetError>>,
}

/// A rate limit ([`rate`](Self::rate)) or a stock ([`stock`](Self::stock)) per key shared by
/// every process that connects with the same name to the same Redis: hot keys admitted
/// locally from leases, cold keys checked in Redis in batches. See the [module docs](self)
/// for the design and the guarantees per key.
///
/// # Examples
///
/// ```no_run
/// # async fn run() -> Result<(), cellgate_redis::FleetError> {
/// use std::time::Duration;
/// use cellgate_redis::KeyedFleet;
///
/// // 100 requests a second per user across the fleet, burst 20.
/// let users = KeyedFleet::rate("per-user", 100, Duration::from_secs(1))
///     .burst(20)
///     .connect("redis://127.0.0.1:6379")?;
/// if users.check("alice").await.is_allowed() {
///     // serve
/// }
/// # Ok(()) }
/// ```
pub struct KeyedFleet {
    pub(crate) shared: Arc<KeyedShared>,
    /// What [`cellgate::AnyLimiter::policy`] reports (`limiter.rs`).
    pub(crate) policy: cellgate::Policy,
    tx: mpsc::Sender<Request>,
    /// Hot keys whose lease a check found spent (one signal per lease answer).
    dry_tx: mpsc::Sender<String>,
    forget_tx: mpsc::Sender<Forget>,
    /// The end of the batching task, which runs on one of the fleet limiters' shared runtimes.
    task: Lock<Option<crate::shared::Ended>>,
    name: String,
    pub(crate) max_wait: Duration,
    /// The limit's shards: 1 on one node, `CLUSTER_SHARDS` on a cluster.
    shards: usize,
}

impl std::fmt::Debug for KeyedFleet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KeyedFleet")
            .field("name", &self.name)
            .field("state", &self.state())
            .finish_non_exhaustive()
    }
}

impl KeyedFleet {
    /// Checks one unit of `key`.
    ///
    /// ```no_run
    /// # async fn run(users: cellgate_redis::KeyedFleet) {
    /// let d = users.check("alice").await;
    /// if !d.is_allowed() {
    ///     println!("429 via {:?}", d.via());
    /// }
    /// # }
    /// ```
    pub async fn check(&self, key: &str) -> KeyDecision {
        self.check_n(key, 1).await
    }

    /// Checks `n` units of `key`: at once from a hot key's lease, otherwise in Redis (batched
    /// with other checks), waiting at most [`max_wait`](KeyedFleetBuilder::max_wait) before
    /// the outage fallback decides. Runs on any executor.
    ///
    /// ```no_run
    /// # async fn run(tokens: cellgate_redis::KeyedFleet) {
    /// // A bulk request of 25 items costs 25 units of the token's budget.
    /// let d = tokens.check_n("token-7f3a", 25).await;
    /// if d.is_allowed() {
    ///     // serve the 25 items
    /// }
    /// # }
    /// ```
    pub async fn check_n(&self, key: &str, n: u32) -> KeyDecision {
        self.check_within(key, n, None).await
    }

    /// As [`check_n`](Self::check_n), waiting at most until `deadline` (and at most
    /// `max_wait`): for a caller that checks several limits within one bound, giving each what
    /// is left of it. A check whose deadline passes is decided by the outage fallback as one
    /// past `max_wait` is; one cut short this way does not count Redis as slow.
    ///
    /// ```no_run
    /// # async fn run(users: cellgate_redis::KeyedFleet, ips: cellgate_redis::KeyedFleet) {
    /// use std::time::{Duration, Instant};
    /// // Two limits, 5 ms for both together.
    /// let by = Instant::now() + Duration::from_millis(5);
    /// let user = users.check_n_by("alice", 1, by).await;
    /// let ip = ips.check_n_by("10.0.0.7", 1, by).await;
    /// # }
    /// ```
    pub async fn check_n_by(&self, key: &str, n: u32, deadline: Instant) -> KeyDecision {
        self.check_within(key, n, Some(deadline)).await
    }

    /// A check waiting at most until `deadline`, or the whole `max_wait` (`None`).
    pub(crate) async fn check_within(
        &self,
        key: &str,
        n: u32,
        deadline: Option<Instant>,
    ) -> KeyDecision {
        match self.send(key, n, deadline) {
            Ok(d) => d,
            Err(rx) => rx.await.unwrap_or(REFUSED),
        }
    }

    /// As [`check_n`](Self::check_n), blocking the calling thread (at most about `max_wait`).
    /// Do not call it from inside an async runtime's worker (use `check_n`).
    ///
    /// ```no_run
    /// # fn run(users: cellgate_redis::KeyedFleet) {
    /// // From a plain thread: waits at most about `max_wait`.
    /// if users.check_blocking("alice", 1).is_allowed() {
    ///     // serve
    /// }
    /// # }
    /// ```
    pub fn check_blocking(&self, key: &str, n: u32) -> KeyDecision {
        match self.send(key, n, None) {
            Ok(d) => d,
            Err(rx) => rx.blocking_recv().unwrap_or(REFUSED),
        }
    }

    /// Checks `n` units of `key` against this process's lease alone, never waiting: `None`
    /// when the key holds no lease with `n` units (it is cold here, or its lease is spent).
    ///
    /// One look-up and one compare-and-swap in the local pool (a stock keyed by the key): a
    /// refused check writes nothing, so a key the pool does not hold is never inserted.
    ///
    /// ```no_run
    /// # async fn run(users: cellgate_redis::KeyedFleet) {
    /// // A hot key's lease answers at once; otherwise ask Redis.
    /// let d = match users.try_check("alice", 1) {
    ///     Some(d) => d,
    ///     None => users.check("alice").await,
    /// };
    /// # }
    /// ```
    pub fn try_check(&self, key: &str, n: u32) -> Option<KeyDecision> {
        if n > 0 && self.shared.pool.check_n(key, n).is_allowed() {
            return Some(KeyDecision::new(true, Via::Lease, None));
        }
        None
    }

    /// The decision when this process can make it without Redis: from the key's lease, a
    /// spent lease refused here, or a shut-down limiter. `None`: only Redis can answer, and
    /// nothing was charged or sent.
    pub(crate) fn answer_now(&self, key: &str, n: u32) -> Option<KeyDecision> {
        if let Some(d) = self.try_check(key, n) {
            return Some(d);
        }
        if self.shared.stop.raised() {
            return Some(REFUSED);
        }
        self.spent_lease(key, n)
    }

    fn send(
        &self,
        key: &str,
        n: u32,
        deadline: Option<Instant>,
    ) -> Result<KeyDecision, oneshot::Receiver<KeyDecision>> {
        if let Some(d) = self.answer_now(key, n) {
            return Ok(d);
        }
        let (reply, rx) = oneshot::channel();
        let full = Instant::now() + self.max_wait;
        // Only a check given the whole `max_wait` says Redis is slow when it expires: one its
        // caller cut short (`Some` earlier deadline) says nothing about Redis.
        let (deadline, patient) = match deadline {
            None => (full, true),
            Some(d) => (d.min(full), d >= full),
        };
        let req = Request {
            key: key.to_owned(),
            n,
            deadline,
            patient,
            reply,
        };
        if self.tx.try_send(req).is_err() {
            return Ok(REFUSED);
        }
        Err(rx)
    }

    /// A check of a hot key whose lease is spent, while Redis answers: denied here at once
    /// (no round trip per check; the task refills the lease, and a key the fleet has no room
    /// for waits for its next unit anyway). The first such check since the key's last lease
    /// answer disarms its mark and tells the task, once. `None`: the key holds no lease here,
    /// the check is larger than a lease could hold, or Redis is not answering (the fallback
    /// decides): the check goes to the task.
    fn spent_lease(&self, key: &str, n: u32) -> Option<KeyDecision> {
        let s = &self.shared;
        if n == 0 || u64::from(n) > s.lease_max.get() {
            return None;
        }
        if s.shard_state(shard_of(key, self.shards)) != CONNECTED {
            return None;
        }
        // One look-up: a refused take of an armed mark still says what the mark holds.
        let mark = s.marks.check_n(key, DISARM);
        if mark.is_allowed() {
            // A full channel drops the signal: the task's next look at the key (every tick)
            // finds the lease spent anyway.
            let _ = self.dry_tx.try_send(key.to_owned());
        } else if mark.remaining() == 0 {
            return None;
        }
        Some(KeyDecision::new(false, Via::Lease, None))
    }

    /// Forgets `key` across the fleet: the one call that hands a key a fresh budget on
    /// purpose (an operator's unblock, a client that passed a CAPTCHA), as Redis users `DEL` a
    /// key. Its state in Redis is deleted (a rate: a full burst; a stock: its whole stock per
    /// key), ahead of any check of it that this process sends after the call; this process
    /// drops what it holds of the key (its lease, not given back, and its outage-fallback
    /// share). Returns whether Redis held state for the key (`false`: it was already fresh).
    ///
    /// Units another process had leased of the key before the forget stay its own: it may
    /// still admit them (or give them back) after the key's budget is fresh, so a forgotten
    /// key admits at most its fresh budget plus what the other processes held leased of it
    /// then (each lease is at most the lease cap). Every other operation gives a key at most
    /// what its documentation says.
    ///
    /// # Errors
    ///
    /// The error of the batch that carried the forget when Redis did not answer it
    /// ([`FleetError::Timeout`], [`FleetError::Redis`], ...): the forget stays in that batch,
    /// sent again until Redis answers and applied at most once. [`FleetError::Config`] once
    /// the limiter is shut down.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn run() -> Result<(), cellgate_redis::FleetError> {
    /// use std::time::Duration;
    /// use cellgate_redis::KeyedFleet;
    ///
    /// let logins = KeyedFleet::rate("logins", 5, Duration::from_secs(60))
    ///     .connect("redis://127.0.0.1:6379")?;
    /// // alice solved the CAPTCHA: her five attempts a minute start afresh, fleet-wide.
    /// logins.forget("alice").await?;
    /// # Ok(()) }
    /// ```
    pub async fn forget(&self, key: &str) -> Result<bool, FleetError> {
        let stopped = || FleetError::Config("the limiter is shut down".to_owned());
        if self.shared.stop.raised() {
            return Err(stopped());
        }
        let (reply, rx) = oneshot::channel();
        let f = Forget {
            key: key.to_owned(),
            reply,
        };
        self.forget_tx.send(f).await.map_err(|_| stopped())?;
        rx.await.map_err(|_| stopped())?
    }

    /// Whether Redis is answering: on a Redis Cluster, the worst state of the limit's shards
    /// (`Connected` only while every shard's master answers; see
    /// [`shard_states`](Self::shard_states) for which part is out, and
    /// [`state_of`](Self::state_of) for one key's).
    ///
    /// ```no_run
    /// # fn run(users: cellgate_redis::KeyedFleet) {
    /// use cellgate_redis::FleetState;
    /// if users.state() != FleetState::Connected {
    ///     eprintln!("redis is not answering (for some keys at least): {:?}", users.last_error());
    /// }
    /// # }
    /// ```
    pub fn state(&self) -> FleetState {
        FleetState::of(self.shared.state.get())
    }

    /// Whether Redis answers for `key`: the state of its shard, which decides its checks (a
    /// key on a master that answers is checked in Redis while another master is out).
    ///
    /// ```no_run
    /// # fn run(users: cellgate_redis::KeyedFleet) {
    /// use cellgate_redis::FleetState;
    /// if users.state_of("alice") == FleetState::Fallback {
    ///     eprintln!("alice's shard is out: her checks are decided by this process's share");
    /// }
    /// # }
    /// ```
    pub fn state_of(&self, key: &str) -> FleetState {
        FleetState::of(self.shared.shard_state(shard_of(key, self.shards)))
    }

    /// Each shard's hash tag, state and last failure (one shard on a single Redis node).
    ///
    /// ```no_run
    /// # fn run(users: cellgate_redis::KeyedFleet) {
    /// use cellgate_redis::FleetState;
    /// let shards = users.shard_states();
    /// let out = shards.iter().filter(|s| s.state != FleetState::Connected).count();
    /// println!("{out} of {} shards out", shards.len());
    /// # }
    /// ```
    pub fn shard_states(&self) -> Vec<crate::report::ShardState> {
        let errors = self.shared.shard_errors.lock().clone();
        (0..self.shards)
            .map(|shard| crate::report::ShardState {
                tag: client::tag(&self.name, shard, self.shards),
                state: FleetState::of(self.shared.shard_state(shard)),
                last_error: errors.get(shard).cloned().flatten(),
            })
            .collect()
    }

    /// The last failure this limiter met talking to Redis (on any shard), and when (`None`:
    /// none yet).
    ///
    /// ```no_run
    /// # fn run(users: cellgate_redis::KeyedFleet) {
    /// if let Some(e) = users.last_error() {
    ///     eprintln!("{:?} ago: {}", e.at.elapsed(), e.error);
    /// }
    /// # }
    /// ```
    pub fn last_error(&self) -> Option<crate::report::LastError> {
        self.shared.last_error.lock().clone()
    }

    /// The counters of this limiter.
    ///
    /// ```no_run
    /// # fn run(users: cellgate_redis::KeyedFleet) {
    /// let s = users.stats();
    /// if s.backend_errors > 0 {
    ///     let (failed, admitted) = (s.backend_errors, s.fallback_admitted);
    ///     eprintln!("{failed} failed script calls; {admitted} units admitted by the fallback");
    /// }
    /// # }
    /// ```
    pub fn stats(&self) -> KeyedStats {
        self.shared.stats()
    }
    /// The limit's name.
    ///
    /// ```
    /// use std::time::Duration;
    /// use cellgate_redis::KeyedFleet;
    ///
    /// let users = KeyedFleet::rate("per-user", 100, Duration::from_secs(1))
    ///     .start("redis://127.0.0.1:1")?;
    /// assert_eq!(users.name(), "per-user");
    /// # Ok::<(), cellgate_redis::FleetError>(())
    /// ```
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Stops the batching task after giving the hot keys' leased units back and charging
    /// the fallback's admissions, retried for at most eight command timeouts (1.6 s by
    /// default) while Redis does not answer: the time a shutdown during an outage takes when
    /// there is something to give back or charge. Checks afterwards are refused. Dropping the
    /// limiter does the same.
    ///
    /// ```
    /// use std::time::Duration;
    /// use cellgate_redis::{KeyedFleet, Via};
    ///
    /// let users = KeyedFleet::rate("users", 10, Duration::from_secs(1))
    ///     .start("redis://127.0.0.1:1")?;
    /// users.shutdown();
    /// assert_eq!(users.check_blocking("alice", 1).via(), Via::Refused);
    /// # Ok::<(), cellgate_redis::FleetError>(())
    /// ```
    pub fn shutdown(&self) {
        crate::shared::stop_task(&self.shared.stop, &self.shared.wake, &self.task);
    }
}

const REFUSED: KeyDecision = KeyDecision {
    allowed: false,
    via: Via::Refused,
    retry_after: None,
};

impl Drop for KeyedFleet {
    fn drop(&mut self) {
        self.shutdown();
    }
}
