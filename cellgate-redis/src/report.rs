//! What a fleet limiter reports: its state, its last error and its counters. Below the
//! limiters and their background tasks, which all fill or read them.

use std::time::SystemTime;

use crate::error::FleetError;
use crate::local::{CONNECTED, FALLBACK, PARTITIONED};

/// Whether Redis is answering, as this process sees it.
///
/// # Examples
///
/// ```no_run
/// use cellgate_redis::{Fleet, FleetState};
/// let fleet = Fleet::stock("sale", 1000).connect("redis://127.0.0.1:6379")?;
/// if fleet.state() != FleetState::Connected {
///     eprintln!("redis unreachable: selling only what this process holds");
/// }
/// # Ok::<(), cellgate_redis::FleetError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FleetState {
    /// The last command was answered.
    Connected,
    /// Redis is not answering; a rate limit admits at its local share, charged back later.
    Fallback,
    /// Redis is not answering, or the replicas of the limit's master do not acknowledge its
    /// debits ([`FleetError::NotReplicated`]); only leased
    /// units are admitted.
    Partitioned,
    /// Redis lost this stock (a [`KeyedFleet::stock`](crate::KeyedFleet::stock) included)
    /// after it was created (a restart without persistence, a failover to a replica that
    /// lagged): only units still leased are sold, and [`Fleet::last_error`](crate::Fleet::last_error) says
    /// [`FleetError::Forgotten`]. It lasts until the
    /// process builds a new limiter after an operator reset the limit (see the README's
    /// "Production" section). A rate never enters it: Redis's forgotten bucket is re-created
    /// empty, and the limiter goes on.
    Forgotten,
}

impl FleetState {
    /// The state a [`Link`](crate::sync::Link) word holds.
    pub(crate) fn of(link: u8) -> Self {
        match link {
            CONNECTED => FleetState::Connected,
            FALLBACK => FleetState::Fallback,
            PARTITIONED => FleetState::Partitioned,
            _ => FleetState::Forgotten,
        }
    }
}

/// The last failure a fleet limiter met, and when (see [`Fleet::last_error`](crate::Fleet::last_error)).
///
/// # Examples
///
/// ```no_run
/// use cellgate_redis::Fleet;
/// let fleet = Fleet::stock("sale", 1000).connect("redis://127.0.0.1:6379")?;
/// if let Some(e) = fleet.last_error() {
///     eprintln!("{:?} ago: {}", e.at.elapsed(), e.error);
/// }
/// # Ok::<(), cellgate_redis::FleetError>(())
/// ```
#[derive(Debug, Clone)]
pub struct LastError {
    /// When it happened.
    pub at: SystemTime,
    /// What happened; its `Display` says what to fix when the cause is known.
    pub error: FleetError,
}

/// One shard of a keyed limit as this process sees it (see
/// [`KeyedFleet::shard_states`](crate::KeyedFleet::shard_states)): on a Redis Cluster a keyed
/// limit's keys are spread over shards, each on the master of its hash tag's slot, and a
/// master that does not answer puts only its shards out.
///
/// # Examples
///
/// ```no_run
/// # fn run(users: cellgate_redis::KeyedFleet) {
/// use cellgate_redis::FleetState;
/// for s in users.shard_states().iter().filter(|s| s.state != FleetState::Connected) {
///     eprintln!("keys under {{{}}} are out: {:?}", s.tag, s.last_error);
/// }
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct ShardState {
    /// The shard's hash tag: its Redis keys are `cellgate:{TAG}:...` (`CLUSTER KEYSLOT`
    /// names the slot, and `CLUSTER NODES` its master).
    pub tag: String,
    /// Whether the shard's master answers for its keys.
    pub state: FleetState,
    /// The shard's last failure (`None`: none yet).
    pub last_error: Option<LastError>,
}

/// Counters of one fleet limiter (see [`Fleet::stats`](crate::Fleet::stats)).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FleetStats {
    /// Leased units held in the local pool, not yet admitted.
    pub leased: u64,
    /// Grant commands answered.
    pub lease_requests: u64,
    /// Commands that failed or timed out.
    pub backend_errors: u64,
    /// Units admitted during outages and charged to Redis afterwards.
    pub charged_back: u64,
    /// Redis commands sent (retries included).
    pub commands: u64,
    /// Live processes sharing the limit, as the server last said (before Redis first
    /// answers: the number [`outage_processes`](crate::FleetBuilder::outage_processes)
    /// assumes).
    pub live: u64,
}

/// Counters of one keyed fleet limiter (see [`KeyedFleet::stats`](crate::KeyedFleet::stats)).
///
/// # Examples
///
/// ```no_run
/// # fn run(users: cellgate_redis::KeyedFleet) {
/// let s = users.stats();
/// println!("{} hot keys, {} checks in {} script calls", s.hot_keys, s.passed_through, s.batches);
/// # }
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KeyedStats {
    /// Keys hot in this process now (leased).
    pub hot_keys: u64,
    /// Leased units held by this process's hot keys, not yet admitted.
    pub leased: u64,
    /// Script calls sent (retries included).
    pub batches: u64,
    /// Checks passed through to Redis.
    pub passed_through: u64,
    /// Lease operations answered.
    pub lease_requests: u64,
    /// Calls that failed or timed out.
    pub backend_errors: u64,
    /// Units admitted by the fallback.
    pub fallback_admitted: u64,
    /// Fallback units charged to Redis afterwards.
    pub charged_back: u64,
    /// Live processes sharing the limit, as the server last said (before Redis first
    /// answers: the number [`outage_processes`](crate::KeyedFleetBuilder::outage_processes)
    /// assumes).
    pub live: u64,
}
