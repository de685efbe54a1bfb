//! Configuring a keyed fleet limiter and starting it.

use std::sync::Arc;
use std::time::Duration;

use cellgate::KeyedLimiter;
use tokio::sync::mpsc;

use super::client::CLUSTER_SHARDS;
use super::{task, KeyedFleet};
use crate::error::FleetError;
use crate::shared::KeyedShared;
use crate::sync::Lock;

/// Configures a [`KeyedFleet`]; see [`KeyedFleet::rate`].
///
/// # Examples
///
/// ```no_run
/// use std::time::Duration;
/// use cellgate_redis::KeyedFleet;
///
/// let per_token = KeyedFleet::rate("per-token", 1_000, Duration::from_secs(60))
///     .burst(100)
///     .max_wait(Duration::from_millis(10))
///     .hot_rate(20)
///     .connect("redis://127.0.0.1:6379")?;
/// # Ok::<(), cellgate_redis::FleetError>(())
/// ```
#[derive(Debug, Clone)]
#[must_use]
pub struct KeyedFleetBuilder {
    pub(crate) name: String,
    pub(crate) rate: Result<(u64, u64), String>,
    pub(crate) command_timeout: Duration,
    pub(crate) max_wait: Duration,
    pub(crate) lease_lifetime: Duration,
    pub(crate) idle: Duration,
    pub(crate) hot_rate: u32,
    pub(crate) max_hot: usize,
    pub(crate) min_lease: u64,
    pub(crate) fallback: bool,
    pub(crate) queue: usize,
    /// A stock of this many units per key (the rate is then `Ok((0, units))`).
    pub(crate) stock: bool,
    pub(crate) max_lease: Option<u64>,
    pub(crate) outage_processes: u64,
    pub(crate) replication: crate::replica::Replication,
    pub(crate) replica_wait: Option<Duration>,
}

impl KeyedFleet {
    /// A rate of `count` units per `period` for every key, named `name` (the first process
    /// to use the name sets it); burst `count` unless [`burst`](KeyedFleetBuilder::burst)
    /// says otherwise. The interval `period / count` is kept in whole microseconds, rounded
    /// up.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use cellgate_redis::{FleetError, KeyedFleet};
    ///
    /// // 600 requests a minute per IP, at most 30 at once.
    /// let per_ip = KeyedFleet::rate("per-ip", 600, Duration::from_secs(60)).burst(30);
    /// // A zero count is refused when the limiter starts, before any connection.
    /// let none = KeyedFleet::rate("never", 0, Duration::from_secs(60))
    ///     .start("redis://127.0.0.1:1");
    /// assert!(matches!(none, Err(FleetError::Config(_))));
    /// ```
    pub fn rate(name: &str, count: u32, period: Duration) -> KeyedFleetBuilder {
        let period_us = u64::try_from(period.as_micros()).unwrap_or(u64::MAX);
        let rate = if count == 0 || period_us == 0 {
            Err("a rate needs a positive count and a period of at least 1 µs".to_owned())
        } else {
            Ok((period_us.div_ceil(u64::from(count)), u64::from(count)))
        };
        KeyedFleetBuilder {
            name: name.to_owned(),
            rate,
            command_timeout: Duration::from_millis(200),
            max_wait: Duration::from_millis(20),
            lease_lifetime: Duration::from_secs(1),
            idle: Duration::from_secs(1),
            hot_rate: 50,
            max_hot: 10_000,
            min_lease: 4,
            fallback: true,
            queue: 65_536,
            outage_processes: 1,
            stock: false,
            max_lease: None,
            replication: crate::replica::Replication::Auto,
            replica_wait: None,
        }
    }

    /// A stock of `units_per_key` units for every key (per-SKU inventory, per-account
    /// quotas that never refill), named `name` (the first process to use the name sets it;
    /// a rate and a stock cannot share a name). Σ admitted for one key across the fleet never
    /// exceeds `units_per_key`: cold keys are checked in Redis in batches, hot keys sell from
    /// leases of at most [`max_lease`](KeyedFleetBuilder::max_lease) units taken from the
    /// key's stock in Redis beforehand.
    ///
    /// A stock never falls back: a cold check Redis does not answer within `max_wait` is
    /// denied (fail closed, [`Via::Fallback`](super::Via::Fallback)), while a hot key goes on
    /// selling what it holds leased. A process killed with `kill -9` takes its leases with it: each key then sells
    /// at most `1.5 × max_lease` units short (the rest of one lease and the next one it was
    /// asking for), never more than its stock; once its holder expires (10 s) those units
    /// are recorded in Redis as each key's stranded units (field `s:<key>` of the hash
    /// `cellgate:{name}:kleases`, where each live process's holding per key is too, and where
    /// units taken in a batch no replica acknowledged are added; the crate's README says how
    /// an operator reads and reconciles them). Unused leased units go back to Redis within
    /// 3/4 of [`lease_lifetime`](KeyedFleetBuilder::lease_lifetime), when the key is idle for
    /// [`idle_return`](KeyedFleetBuilder::idle_return), and on shutdown. A key's count of
    /// units taken is kept in Redis for as long as Redis keeps its data (no expiry); there
    /// is no restock.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn run() -> Result<(), cellgate_redis::FleetError> {
    /// use cellgate_redis::KeyedFleet;
    ///
    /// // 500 units of every SKU across the fleet, at most 10 leased per SKU per process.
    /// let skus = KeyedFleet::stock("flash-sale", 500)
    ///     .max_lease(10)
    ///     .connect("redis://127.0.0.1:6379")?;
    /// if skus.check_blocking("sku-4711", 1).is_allowed() {
    ///     // sold: ship it
    /// }
    /// # Ok(()) }
    /// ```
    pub fn stock(name: &str, units_per_key: u64) -> KeyedFleetBuilder {
        let mut b = Self::rate(name, 1, Duration::from_secs(1));
        b.rate = if units_per_key == 0 {
            Err("a stock needs at least one unit per key".to_owned())
        } else {
            Ok((0, units_per_key))
        };
        b.stock = true;
        b.fallback = false;
        b
    }
}

/// The policy of a keyed fleet limit: a stock of `units` per key, or a GCRA of one unit per
/// `interval_us` µs with burst `burst`.
pub(crate) fn keyed_policy(
    stock: bool,
    interval_us: u64,
    burst: u64,
) -> Result<cellgate::Policy, FleetError> {
    let limit = u32::try_from(burst).unwrap_or(u32::MAX);
    let descriptor = if stock {
        cellgate::Limiter::stock(limit).build()
    } else {
        cellgate::Limiter::gcra(
            cellgate::Quota::with_interval(Duration::from_micros(interval_us)).with_burst(limit),
        )
        .build()
    };
    descriptor
        .map(|l| cellgate::AnyLimiter::policy(&l))
        .map_err(|e| FleetError::Config(e.to_string()))
}

/// Dry signals waiting for the task at most (one per hot key and lease answer).
const DRY_SIGNALS: usize = 4_096;
/// Forgets waiting for the task (a caller beyond them waits for room).
const FORGETS: usize = 1_024;

impl KeyedFleetBuilder {
    /// The burst of every key (default: its count) in Redis; ignored for a stock. The outage
    /// fallback keeps a burst of one whatever this says (a key's share `R/N`, one check at a
    /// time: see the module docs).
    ///
    /// ```
    /// use std::time::Duration;
    /// use cellgate_redis::KeyedFleet;
    /// // 100 a second per user on average, never more than 10 back to back.
    /// let users = KeyedFleet::rate("per-user", 100, Duration::from_secs(1)).burst(10);
    /// ```
    pub fn burst(mut self, burst: u64) -> Self {
        if self.stock {
            return self;
        }
        if let Ok((_, b)) = &mut self.rate {
            *b = burst;
        }
        self
    }

    crate::setters::setters! {
        /// A stock's largest lease per key (default: 1/1000 of the stock, at least
        /// [`min_lease`](Self::min_lease)): what a crashed process can strand of one key is at
        /// most 1.5 times this. Ignored for a rate, whose leases are capped by its burst.
        ///
        /// ```
        /// use cellgate_redis::KeyedFleet;
        /// // A crash strands at most 15 units of a SKU.
        /// let skus = KeyedFleet::stock("flash-sale", 500).max_lease(10);
        /// ```
        max_lease(units: u64) => max_lease = Some(units.max(1));

        /// The longest Redis may take to answer one batch before it is counted unreachable
        /// (default 200 ms); the batch is retried in the background.
        ///
        /// ```
        /// use std::time::Duration;
        /// use cellgate_redis::KeyedFleet;
        /// // A Redis across a slower link: give each batch half a second.
        /// let users = KeyedFleet::rate("per-user", 100, Duration::from_secs(1))
        ///     .command_timeout(Duration::from_millis(500));
        /// ```
        command_timeout(timeout: Duration) => command_timeout = timeout;

        /// A per-key stock: whether the units a batch takes (cold checks, hot keys' leases)
        /// are sold only once a replica acknowledged it (Redis `WAIT`), as for
        /// [`FleetBuilder::replication`](crate::FleetBuilder::replication); default
        /// [`Replication::Auto`](crate::replica::Replication::Auto). A batch no replica acknowledged
        /// in time sells nothing it took (its checks are denied, its leases not used) and the
        /// limiter is `Partitioned` with [`FleetError::NotReplicated`] until a batch is
        /// acknowledged again. A rate never waits.
        ///
        /// ```
        /// use cellgate_redis::{KeyedFleet, Replication};
        /// let skus = KeyedFleet::stock("flash-sale", 500).replication(Replication::Required);
        /// ```
        replication(policy: crate::replica::Replication) => replication = policy;

        /// The longest a stock's batch waits for a replica's acknowledgement (default 100 ms,
        /// or half the command timeout when that is less; it must be less than the command
        /// timeout). A cold check still waits at most [`max_wait`](Self::max_wait).
        ///
        /// ```
        /// use std::time::Duration;
        /// use cellgate_redis::{FleetError, KeyedFleet};
        /// let skus = KeyedFleet::stock("flash-sale", 500).replica_wait(Duration::from_millis(50));
        /// // A wait as long as the command timeout is refused before any connection.
        /// let bad = KeyedFleet::stock("flash-sale", 500)
        ///     .command_timeout(Duration::from_millis(100))
        ///     .replica_wait(Duration::from_millis(100))
        ///     .start("redis://127.0.0.1:1");
        /// assert!(matches!(bad, Err(FleetError::Config(_))));
        /// ```
        replica_wait(wait: Duration) => replica_wait = Some(wait);

        /// The longest a cold check waits for Redis before the fallback decides it (default
        /// 20 ms).
        ///
        /// ```
        /// use std::time::Duration;
        /// use cellgate_redis::KeyedFleet;
        /// // A latency budget of 5 ms for the limiter's part of a request.
        /// let users = KeyedFleet::rate("per-user", 100, Duration::from_secs(1))
        ///     .max_wait(Duration::from_millis(5));
        /// ```
        max_wait(wait: Duration) => max_wait = wait;

        /// How long a hot key's lease may be used after it was requested (default 1 s): the `L`
        /// of the window bound `R·(w + L) + B`.
        ///
        /// ```
        /// use std::time::Duration;
        /// use cellgate_redis::KeyedFleet;
        /// // Any window admits at most R·(w + 0.25 s) + B per key.
        /// let users = KeyedFleet::rate("per-user", 100, Duration::from_secs(1))
        ///     .lease_lifetime(Duration::from_millis(250));
        /// ```
        lease_lifetime(lifetime: Duration) => lease_lifetime = lifetime;

        /// After this long without an admission a hot key gives its units back and goes cold
        /// (default 1 s).
        ///
        /// ```
        /// use std::time::Duration;
        /// use cellgate_redis::KeyedFleet;
        /// // Bursty keys keep their lease through pauses of up to 5 s.
        /// let users = KeyedFleet::rate("per-user", 100, Duration::from_secs(1))
        ///     .idle_return(Duration::from_secs(5));
        /// ```
        idle_return(idle: Duration) => idle = idle;

        /// Checks per second of one key in this process above which it is leased (default 50).
        ///
        /// ```
        /// use std::time::Duration;
        /// use cellgate_redis::KeyedFleet;
        /// // Lease a key once it is checked more than 10 times a second here.
        /// let users = KeyedFleet::rate("per-user", 100, Duration::from_secs(1)).hot_rate(10);
        /// ```
        hot_rate(per_second: u32) => hot_rate = per_second;

        /// The most keys leased at once by this process (default 10,000): the bound on its
        /// local state.
        ///
        /// ```
        /// use std::time::Duration;
        /// use cellgate_redis::KeyedFleet;
        /// // A small process: at most 1,000 keys leased at once.
        /// let users = KeyedFleet::rate("per-user", 100, Duration::from_secs(1)).max_hot(1_000);
        /// ```
        max_hot(keys: usize) => max_hot = keys;

        /// The smallest lease asked for a hot key (default 4).
        ///
        /// ```
        /// use std::time::Duration;
        /// use cellgate_redis::KeyedFleet;
        /// // Fewer, larger leases for keys checked in bursts.
        /// let users = KeyedFleet::rate("per-user", 1_000, Duration::from_secs(1)).min_lease(16);
        /// ```
        min_lease(units: u64) => min_lease = units.max(1);

        /// How many processes a rate assumes share it when it [`start`](Self::start)s while
        /// Redis is down (default 1): until Redis first answers, each key's outage share is
        /// `R / processes`.
        ///
        /// ```
        /// use std::time::Duration;
        /// use cellgate_redis::KeyedFleet;
        /// // One a second per user across 10 processes; Redis is down (port 1), so each
        /// // process admits one check every 10 s per user.
        /// let users = KeyedFleet::rate("per-user", 60, Duration::from_secs(60))
        ///     .outage_processes(10)
        ///     .start("redis://127.0.0.1:1")?;
        /// assert!(users.check_blocking("alice", 1).is_allowed());
        /// let d = users.check_blocking("alice", 1);
        /// assert!(d.retry_after().is_some_and(|d| d > Duration::from_secs(1)));
        /// # Ok::<(), cellgate_redis::FleetError>(())
        /// ```
        outage_processes(processes: u64) => outage_processes = processes.max(1);
    }

    /// The cap on one lease of a key: a stock's `max_lease` (or its default), a rate's burst.
    pub(crate) fn lease_cap(&self, burst: u64) -> u64 {
        if self.stock {
            self.max_lease
                .unwrap_or_else(|| (burst / 1000).max(self.min_lease))
                .min(burst)
        } else {
            burst
        }
    }

    /// Whether a check Redis does not answer in time is decided by the local share `R/N`
    /// (default `true`, charged back later) or denied (`false`: fail closed). A stock always
    /// fails closed: this is ignored for it.
    ///
    /// ```
    /// use std::time::Duration;
    /// use cellgate_redis::KeyedFleet;
    ///
    /// // Fail closed: with Redis down (nothing on port 1) every cold check is denied.
    /// let users = KeyedFleet::rate("users", 10, Duration::from_secs(1))
    ///     .fallback(false)
    ///     .start("redis://127.0.0.1:1")?;
    /// assert!(!users.check_blocking("alice", 1).is_allowed());
    /// # Ok::<(), cellgate_redis::FleetError>(())
    /// ```
    pub fn fallback(mut self, enabled: bool) -> Self {
        self.fallback = enabled && !self.stock;
        self
    }

    /// Connects to the Redis at `url` and starts the batching task. Blocks for at most a few
    /// command timeouts.
    ///
    /// The task runs on one of a few runtimes that every fleet limiter of the process shares
    /// (a thread each, a thread per core, at most four), never on the caller's threads: a limit
    /// costs a task and its connections, not a thread. Call this (and [`start`](Self::start)) from a thread that
    /// does not drive an async runtime: the connection is made by blocking on that runtime.
    ///
    /// # Errors
    ///
    /// [`FleetError::Config`] for an invalid configuration or URL; [`FleetError::Redis`] or
    /// [`FleetError::Timeout`] when Redis cannot be reached or holds this name with another
    /// configuration.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use std::time::Duration;
    /// use cellgate_redis::KeyedFleet;
    ///
    /// // A Redis Cluster: the comma-separated seed nodes.
    /// let users = KeyedFleet::rate("per-user", 100, Duration::from_secs(1))
    ///     .connect("redis://10.0.0.1:6379,redis://10.0.0.2:6379,redis://10.0.0.3:6379")?;
    /// # Ok::<(), cellgate_redis::FleetError>(())
    /// ```
    pub fn connect(self, url: &str) -> Result<KeyedFleet, FleetError> {
        self.launch(url, false)
    }

    /// Starts without waiting for Redis (errors only for an invalid configuration or URL):
    /// until Redis answers, checks are decided by the outage fallback (a rate at its share,
    /// charged back when Redis answers; a stock, or `fallback(false)`, denies), so a replica
    /// can boot while Redis is down. A per-key stock on a cluster sells nothing until every
    /// shard has answered once with the limit's epoch, as `connect` checks before it returns:
    /// shards that disagree (a part of the limit Redis lost) make the whole limit
    /// [`FleetState::Forgotten`](crate::FleetState::Forgotten).
    ///
    /// # Errors
    ///
    /// [`FleetError::Config`] for an invalid configuration or URL.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use cellgate_redis::{FleetState, KeyedFleet};
    ///
    /// // Nothing listens on port 1: the limiter starts anyway, on its outage share.
    /// let users = KeyedFleet::rate("users", 10, Duration::from_secs(1)).start("redis://127.0.0.1:1")?;
    /// assert_eq!(users.state(), FleetState::Fallback);
    /// assert!(users.check_blocking("alice", 1).is_allowed());
    /// # Ok::<(), cellgate_redis::FleetError>(())
    /// ```
    pub fn start(self, url: &str) -> Result<KeyedFleet, FleetError> {
        self.launch(url, true)
    }

    /// The replica wait: as set, or by default 100 ms within half the command timeout.
    pub(crate) fn wait(&self) -> Duration {
        crate::replica::wait_or_default(self.replica_wait, self.command_timeout)
    }

    fn launch(self, url: &str, lazy: bool) -> Result<KeyedFleet, FleetError> {
        let (interval_us, burst) = self.rate.clone().map_err(FleetError::Config)?;
        if self.stock
            && self.replication != crate::replica::Replication::Off
            && self.wait() >= self.command_timeout
        {
            return Err(FleetError::Config(format!(
                "replica_wait {:?} must be shorter than command_timeout {:?}",
                self.wait(),
                self.command_timeout
            )));
        }
        if self.stock {
            if burst >= 1 << 50 {
                return Err(FleetError::Config(format!(
                    "a stock of {burst} units per key: at most 2^50"
                )));
            }
        } else if burst == 0
            || interval_us >= 1 << 40
            || burst.saturating_mul(interval_us) >= 1 << 50
        {
            return Err(FleetError::Config(format!(
                "burst {burst} must be positive and burst · interval ({interval_us} µs) below 2^50 µs"
            )));
        }
        let stock = || {
            KeyedLimiter::<String>::stock(0)
                .build()
                .map_err(|e| FleetError::Config(e.to_string()))
        };
        let shared = Arc::new(KeyedShared::new(stock()?, stock()?));
        let (tx, rx) = mpsc::channel(self.queue);
        let (dry_tx, dry_rx) = mpsc::channel(DRY_SIGNALS);
        let (forget_tx, forget_rx) = mpsc::channel(FORGETS);
        let runtime = crate::runtime::next()?;
        let task = task::Task::connect(
            &self,
            url,
            (interval_us, burst),
            shared.clone(),
            (rx, dry_rx, forget_rx),
            lazy,
            &runtime,
        )?;
        let shards = usize::try_from(shared.shards.get()).unwrap_or(CLUSTER_SHARDS);
        let (done, ended) = std::sync::mpsc::channel::<()>();
        runtime.spawn(async move {
            task.run().await;
            drop(done);
        });
        Ok(KeyedFleet {
            shared,
            policy: keyed_policy(self.stock, interval_us, burst)?,
            tx,
            dry_tx,
            forget_tx,
            task: Lock::new(Some(ended)),
            name: self.name,
            max_wait: self.max_wait,
            shards,
        })
    }
}
