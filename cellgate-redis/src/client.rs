//! The wire side of the lease protocol: one Lua script, two keys under one hash tag, and an
//! idempotent `(process id, sequence)` on every command.

use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::Script;

use crate::error::FleetError;
use crate::replica::{Replicated, Replication, Watch, WatchSlot, DEFAULT_REPLICA_WAIT};

/// The script every command runs (see `lease.lua` for the protocol).
const LEASE_LUA: &str = include_str!("lease.lua");

/// What a limit is on the server: a stock of units, or a GCRA rate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A stock of `units` that only goes down.
    Stock {
        /// The initial stock (the first process to touch the limit sets it).
        units: u64,
    },
    /// A rate of one unit per `interval_us` microseconds, at most `burst` at once.
    Rate {
        /// The emission interval in microseconds (rounded up, so the fleet is never faster
        /// than asked).
        interval_us: u64,
        /// The burst.
        burst: u64,
    },
}

impl Kind {
    fn wire(self) -> (&'static str, u64, u64) {
        match self {
            Kind::Stock { units } => ("stock", units, 0),
            Kind::Rate { interval_us, burst } => ("rate", interval_us, burst),
        }
    }
}

/// A lease command.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    /// Take up to `n` units (fewer when fewer are available; `n = 0` is a heartbeat).
    Grant,
    /// Give back `n` unadmitted units.
    Give,
    /// Debit `n` units admitted without a lease (during an outage), whatever the room.
    Charge,
}

impl Op {
    fn name(self) -> &'static str {
        match self {
            Op::Grant => "grant",
            Op::Give => "give",
            Op::Charge => "charge",
        }
    }
}

/// The server's answer to one command.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reply {
    /// Units granted, given back or charged.
    pub value: u64,
    /// Live holders of this limit (this process included).
    pub live: u64,
    /// `true` when the sequence was already executed: `value` is the first execution's.
    pub repeated: bool,
    /// `true` when a newer sequence of this process was executed first: nothing changed.
    pub stale: bool,
    /// This process's fallback burst (rate limits; reserved out of the global burst).
    pub fallback_burst: u64,
    /// Stock: units left on the server; rate: units grantable right now.
    pub info: i64,
    /// Rate: the burst leases may use (the global burst less the fallback reservations);
    /// stock: 0.
    pub leasable_burst: u64,
    /// The limit's epoch: a random id written when it was created (this client sends it with
    /// every later command, so a limit Redis forgot is never taken as fresh).
    pub epoch: u64,
    /// `true` when this command found that Redis had forgotten the limit (a rate: its bucket
    /// was set empty; a stock fails with [`FleetError::Forgotten`] instead).
    pub forgotten: bool,
    /// Rate, a grant short of what was asked: when to ask again, in microseconds (the
    /// holder's slot: the fleet's short requests are spaced the larger of a minimum lease and
    /// the short spacing, 100 ms by default, of accrual apart); otherwise 0.
    pub retry_us: u64,
    /// `true` when this grant had to reach a replica ([`Replication`]) and no replica
    /// acknowledged it within the replica wait (or it was a repeated answer, whose writes
    /// this call cannot vouch for): its units must not be sold, since a failover could lose
    /// the debit while they are.
    pub unreplicated: bool,
}

/// One process's connection to one fleet limit: the lease protocol, without any policy.
///
/// Every command carries this client's process id and a sequence number chosen by the
/// caller; the server keeps the answer to each process's newest sequence, so sending the
/// same `(op, seq, n)` again (after a timeout, on a new connection) gets the same answer and
/// changes nothing, and a sequence older than the newest executed one changes nothing.
/// [`Fleet`](crate::Fleet) drives this; it is public for tests and tools.
///
/// # Examples
///
/// ```no_run
/// # async fn run() -> Result<(), cellgate_redis::FleetError> {
/// use std::time::Duration;
/// use cellgate_redis::{Kind, LeaseClient, Op};
///
/// let mut c = LeaseClient::connect(
///     "redis://127.0.0.1:6379", "sale", Kind::Stock { units: 100 }, "me", Duration::from_millis(200),
/// ).await?;
/// let got = c.call(Op::Grant, 1, 10).await?;
/// assert_eq!(c.call(Op::Grant, 1, 10).await?.value, got.value); // same sequence, same answer
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct LeaseClient {
    conn: Conn,
    script: Script,
    keys: [String; 2],
    pid: String,
    kind: Kind,
    holder_ttl: Duration,
    /// The units a request should carry when the fleet is short (see [`Reply::retry_us`]).
    min_lease: u64,
    /// The least time between two short requests of the fleet (see [`Reply::retry_us`]).
    short_spacing: Duration,
    /// The epoch of the limit as this client last saw it (0: not yet).
    epoch: u64,
    /// Whether grants wait for a replica, and for how long at most.
    replication: Replication,
    replica_wait: Duration,
    /// The replicas of the master of the limit's keys, as last read.
    watch: Watch,
}

impl std::fmt::Debug for LeaseClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LeaseClient")
            .field("keys", &self.keys)
            .field("pid", &self.pid)
            .field("kind", &self.kind)
            .finish_non_exhaustive()
    }
}

/// The keys of limit `name`: its state (with each process's last reply) and its holders,
/// under one hash tag, so a cluster keeps them on one slot.
///
/// Versions before the replies moved into the state hash also wrote
/// `cellgate:{name}:replies`; an operator resetting a limit deletes that key too if it exists.
///
/// # Examples
///
/// ```
/// assert_eq!(
///     cellgate_redis::keys("api"),
///     ["cellgate:{api}:state", "cellgate:{api}:holders"],
/// );
/// ```
pub fn keys(name: &str) -> [String; 2] {
    [
        format!("cellgate:{{{name}}}:state"),
        format!("cellgate:{{{name}}}:holders"),
    ]
}

/// A limit name must be non-empty and free of braces (they would change the hash tag).
pub(crate) fn check_name(name: &str) -> Result<(), FleetError> {
    if name.is_empty() || name.contains(['{', '}']) {
        return Err(FleetError::Config(format!(
            "limit name {name:?} must be non-empty and contain no braces"
        )));
    }
    Ok(())
}

/// A connection to Redis (one node, or a Redis Cluster through its seed nodes) that
/// reconnects in the background, every command bounded by a timeout.
///
/// redis-rs's connection manager reconnects after an I/O error only: a connection whose
/// handshake failed otherwise (a password changed while the process ran) would fail forever.
/// So after such a failure the next command starts from a new manager (or cluster connection).
#[derive(Clone)]
pub(crate) struct Conn {
    link: Link,
    timeout: Duration,
}

/// The connection proper.
#[derive(Clone)]
enum Link {
    Single {
        manager: ConnectionManager,
        client: redis::Client,
        config: ConnectionManagerConfig,
    },
    /// Connected on the first command (and again after a failed handshake); it follows the
    /// cluster's slots (MOVED, ASK, failovers) itself.
    Cluster {
        client: redis::cluster::ClusterClient,
        conn: Option<redis::cluster_async::ClusterConnection>,
    },
}

impl Conn {
    /// Connects to `url`, or with comma-separated URLs to the Redis Cluster they are seed
    /// nodes of; with `lazy`, nothing is sent until the first command (a start during an
    /// outage), else the first connection is made now.
    pub(crate) async fn open(url: &str, timeout: Duration, lazy: bool) -> Result<Self, FleetError> {
        let bad = |e: redis::RedisError| FleetError::Config(format!("redis url {url:?}: {e}"));
        // Connecting may take longer than a command (a loaded machine, a TLS handshake); the
        // reconnects run in the background, and each command stays bounded by `timeout`.
        let connect_timeout = timeout.max(Duration::from_secs(1));
        let link = if url.contains(',') {
            let seeds: Vec<&str> = url.split(',').map(str::trim).collect();
            let client = redis::cluster::ClusterClient::builder(seeds)
                .connection_timeout(connect_timeout)
                .response_timeout(timeout)
                .retries(2)
                .build()
                .map_err(bad)?;
            Link::Cluster { client, conn: None }
        } else {
            let client = redis::Client::open(url).map_err(bad)?;
            let config = ConnectionManagerConfig::new()
                .set_connection_timeout(Some(connect_timeout))
                .set_response_timeout(Some(timeout))
                .set_min_delay(Duration::from_millis(10))
                .set_max_delay(Duration::from_millis(200))
                .set_number_of_retries(2);
            let manager = if lazy {
                ConnectionManager::new_lazy_with_config(client.clone(), config.clone())?
            } else {
                tokio::time::timeout(
                    connect_timeout.saturating_mul(2),
                    ConnectionManager::new_with_config(client.clone(), config.clone()),
                )
                .await
                .map_err(|_| FleetError::Timeout)??
            };
            Link::Single {
                manager,
                client,
                config,
            }
        };
        let mut conn = Self { link, timeout };
        if !lazy {
            conn.cluster().await?;
        }
        Ok(conn)
    }

    /// Whether this is a Redis Cluster connection (seed URLs), not one node.
    pub(crate) fn is_cluster(&self) -> bool {
        matches!(self.link, Link::Cluster { .. })
    }

    /// The cluster connection, made now if there is none (`None`: a single node).
    async fn cluster(
        &mut self,
    ) -> Result<Option<&mut redis::cluster_async::ClusterConnection>, FleetError> {
        let Link::Cluster { client, conn } = &mut self.link else {
            return Ok(None);
        };
        if conn.is_none() {
            let wait = self.timeout.max(Duration::from_secs(1)).saturating_mul(2);
            let made = tokio::time::timeout(wait, client.get_async_connection())
                .await
                .map_err(|_| FleetError::Timeout)??;
            *conn = Some(made);
        }
        Ok(conn.as_mut())
    }

    /// Runs a prepared script call (EVALSHA, loading the script on NOSCRIPT) for a list of
    /// integers.
    pub(crate) async fn invoke(
        &mut self,
        inv: &redis::ScriptInvocation<'_>,
    ) -> Result<Vec<i64>, FleetError> {
        // The connection has its own response timeout; this outer one also bounds a NOSCRIPT
        // reload (two round trips) and a reconnect in progress.
        let limit = self.timeout.saturating_mul(2);
        let r = match self.cluster().await? {
            Some(c) => tokio::time::timeout(limit, inv.invoke_async(c)).await,
            None => match &mut self.link {
                Link::Single { manager, .. } => {
                    tokio::time::timeout(limit, inv.invoke_async(manager)).await
                }
                Link::Cluster { .. } => return Err(FleetError::Timeout),
            },
        };
        let r = r.map_err(|_| FleetError::Timeout)?;
        self.renew_after(r).map_err(FleetError::from)
    }

    /// Runs a script call (EVALSHA of `keys` and `args`, loading the script on NOSCRIPT) and,
    /// with `wait`, `WAIT 1 <wait>` right after it in one pipeline: on one connection (the
    /// node of the keys, on a cluster), so the wait covers the script's writes. Returns the
    /// script's integers and, with `wait`, how many replicas acknowledged them.
    pub(crate) async fn invoke_acked(
        &mut self,
        script: &Script,
        keys: &[String],
        args: &[Vec<u8>],
        wait: Option<Duration>,
    ) -> Result<(Vec<i64>, Option<u64>), FleetError> {
        let Some(wait) = wait else {
            let mut inv = script.prepare_invoke();
            for k in keys {
                inv.key(k);
            }
            for a in args {
                inv.arg(a.as_slice());
            }
            return Ok((self.invoke(&inv).await?, None));
        };
        let ms = u64::try_from(wait.as_millis()).unwrap_or(u64::MAX).max(1);
        let mut evalsha = redis::cmd("EVALSHA");
        evalsha.arg(script.get_hash()).arg(keys.len()).arg(keys);
        for a in args {
            evalsha.arg(a.as_slice());
        }
        let mut pipe = redis::pipe();
        pipe.add_command(evalsha).cmd("WAIT").arg(1).arg(ms);
        let limit = self.timeout.saturating_mul(2) + wait;
        let mut loaded = false;
        loop {
            let r = match self.cluster().await? {
                Some(c) => tokio::time::timeout(limit, pipe.query_async(c)).await,
                None => match &mut self.link {
                    Link::Single { manager, .. } => {
                        tokio::time::timeout(limit, pipe.query_async(manager)).await
                    }
                    Link::Cluster { .. } => return Err(FleetError::Timeout),
                },
            };
            let r: redis::RedisResult<(Vec<i64>, u64)> = r.map_err(|_| FleetError::Timeout)?;
            // The script's error as if it had run alone (its code says what went wrong: a
            // forgotten limit, NOSCRIPT, a refused configuration).
            let r = r.map_err(|e| match e.clone().into_server_errors() {
                Some(items) if !items.is_empty() => redis::RedisError::from(items[0].1.clone()),
                _ => e,
            });
            match r {
                Err(e)
                    if e.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::NoScript)
                        && !loaded =>
                {
                    loaded = true;
                    let inv = script.prepare_invoke();
                    let load = match self.cluster().await? {
                        Some(c) => tokio::time::timeout(limit, inv.load_async(c)).await,
                        None => match &mut self.link {
                            Link::Single { manager, .. } => {
                                tokio::time::timeout(limit, inv.load_async(manager)).await
                            }
                            Link::Cluster { .. } => return Err(FleetError::Timeout),
                        },
                    };
                    load.map_err(|_| FleetError::Timeout)??;
                }
                Err(e) => {
                    if matches!(
                        e.kind(),
                        redis::ErrorKind::Server(
                            redis::ServerErrorKind::Moved | redis::ServerErrorKind::Ask
                        )
                    ) {
                        // A pipeline's redirection is not followed: start from a new cluster
                        // connection (a new slot map) for the next command.
                        if let Link::Cluster { conn, .. } = &mut self.link {
                            *conn = None;
                        }
                    }
                    return Err(self.renew_after(Err::<(), _>(e)).unwrap_err().into());
                }
                Ok((reply, acks)) => return Ok((reply, Some(acks))),
            }
        }
    }

    /// Runs a script call as [`invoke_acked`](Self::invoke_acked), waiting for a replica when
    /// `replicas` (a policy and the longest wait; `None`: this call's writes need none) asks
    /// for it on the master of `keys[0]` (for [`Replication::Auto`]: whether it has replicas,
    /// `INFO replication` read when `watch` is due), and keeping `watch` up to date: read
    /// again after an error or a wait no replica answered (maybe another master now).
    pub(crate) async fn invoke_replicated(
        &mut self,
        script: &Script,
        keys: &[String],
        args: &[Vec<u8>],
        replicas: Option<(Replication, Duration)>,
        watch: &mut impl WatchSlot,
    ) -> Result<(Vec<i64>, Replicated), FleetError> {
        let mut wait = None;
        if let Some((policy, longest)) = replicas {
            let now = std::time::Instant::now();
            let must = match watch.with(|w| w.wait(policy, now)) {
                Some(must) => must,
                None => {
                    let info = self.info_replication(&keys[0]).await;
                    watch.with(|w| {
                        w.learn(info.as_deref(), now);
                        w.wait(policy, now).unwrap_or(false)
                    })
                }
            };
            wait = must.then_some(longest);
        }
        let (reply, acks) = match self.invoke_acked(script, keys, args, wait).await {
            Ok(r) => r,
            Err(e) => {
                watch.with(Watch::stale);
                return Err(e);
            }
        };
        let replicated = match acks {
            None => Replicated::NotAsked,
            Some(0) => {
                watch.with(Watch::stale);
                Replicated::Unacked
            }
            Some(_) => Replicated::Acked,
        };
        Ok((reply, replicated))
    }

    /// The text of `INFO replication` on the node holding `key` (on a cluster: the master of
    /// its slot; a lone `INFO` would go to every master). `None` when it fails (no `+info`
    /// permission, a timeout).
    pub(crate) async fn info_replication(&mut self, key: &str) -> Option<String> {
        use redis::cluster_routing::{Route, RoutingInfo, SingleNodeRoutingInfo, SlotAddr};
        let mut cmd = redis::cmd("INFO");
        cmd.arg("replication");
        let limit = self.timeout;
        let r = match self.cluster().await.ok()? {
            Some(c) => {
                let route =
                    SingleNodeRoutingInfo::SpecificNode(Route::with_key(key, SlotAddr::Master));
                let v = tokio::time::timeout(
                    limit,
                    c.route_command(cmd, RoutingInfo::SingleNode(route)),
                )
                .await
                .ok()?
                .ok()?;
                redis::from_redis_value::<String>(v).ok()
            }
            None => match &mut self.link {
                Link::Single { manager, .. } => {
                    tokio::time::timeout(limit, cmd.query_async(manager))
                        .await
                        .ok()?
                        .ok()
                }
                Link::Cluster { .. } => None,
            },
        };
        r
    }

    /// Runs one command (on a cluster: on whichever node redis-rs routes it to).
    pub(crate) async fn query<T: redis::FromRedisValue>(
        &mut self,
        cmd: &redis::Cmd,
    ) -> Result<T, FleetError> {
        let limit = self.timeout;
        let r = match self.cluster().await? {
            Some(c) => tokio::time::timeout(limit, cmd.query_async(c)).await,
            None => match &mut self.link {
                Link::Single { manager, .. } => {
                    tokio::time::timeout(limit, cmd.query_async(manager)).await
                }
                Link::Cluster { .. } => return Err(FleetError::Timeout),
            },
        };
        let r = r.map_err(|_| FleetError::Timeout)?;
        self.renew_after(r).map_err(FleetError::from)
    }

    /// Starts from a new connection after a failed handshake.
    fn renew_after<T>(&mut self, r: redis::RedisResult<T>) -> redis::RedisResult<T> {
        if let Err(e) = &r {
            let handshake = e.kind() == redis::ErrorKind::AuthenticationFailed
                || matches!(e.code(), Some("NOAUTH" | "WRONGPASS"));
            if handshake {
                match &mut self.link {
                    Link::Single {
                        manager,
                        client,
                        config,
                    } => {
                        if let Ok(m) =
                            ConnectionManager::new_lazy_with_config(client.clone(), config.clone())
                        {
                            *manager = m;
                        }
                    }
                    Link::Cluster { conn, .. } => *conn = None,
                }
            }
        }
        r
    }
}

/// A new random epoch, below 2^53 (Lua numbers) and never 0 (0 means "none known").
pub(crate) fn fresh_epoch() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(crate::sync::next_sequence());
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos()),
    );
    (h.finish() & ((1 << 53) - 1)).max(1)
}

/// The smallest lease a process asks for, by default.
pub(crate) const DEFAULT_MIN_LEASE: u64 = 128;

/// The least time between two short requests of a rate's fleet, by default.
pub(crate) const DEFAULT_SHORT_SPACING: Duration = Duration::from_millis(100);

/// How long a holder may stay silent before the server reconciles it.
pub(crate) const DEFAULT_HOLDER_TTL: Duration = Duration::from_secs(10);

impl LeaseClient {
    /// Connects to `url` (a `redis://` URL) for limit `name` as process `pid`, with every
    /// command bounded by `timeout`; the connection reconnects in the background.
    ///
    /// # Errors
    ///
    /// [`FleetError::Config`] for a bad name or URL, [`FleetError::Redis`] or
    /// [`FleetError::Timeout`] when the first connection fails.
    pub async fn connect(
        url: &str,
        name: &str,
        kind: Kind,
        pid: &str,
        timeout: Duration,
    ) -> Result<Self, FleetError> {
        Self::open(url, name, kind, pid, timeout, false).await
    }

    /// As [`connect`](Self::connect), `lazy`: connecting on the first command.
    pub(crate) async fn open(
        url: &str,
        name: &str,
        kind: Kind,
        pid: &str,
        timeout: Duration,
        lazy: bool,
    ) -> Result<Self, FleetError> {
        check_name(name)?;
        Ok(Self {
            conn: Conn::open(url, timeout, lazy).await?,
            script: Script::new(LEASE_LUA),
            keys: keys(name),
            pid: pid.to_owned(),
            kind,
            holder_ttl: DEFAULT_HOLDER_TTL,
            min_lease: DEFAULT_MIN_LEASE,
            short_spacing: DEFAULT_SHORT_SPACING,
            epoch: 0,
            replication: Replication::Auto,
            replica_wait: DEFAULT_REPLICA_WAIT,
            watch: Watch::default(),
        })
    }

    /// This client's process id.
    pub fn pid(&self) -> &str {
        &self.pid
    }

    /// Whether Redis says it keeps no append-only file (`INFO persistence`): a restart then
    /// loses the writes since the last snapshot, and with them what the limit sold. `None`
    /// when Redis does not say (no permission for `INFO`, a timeout).
    pub async fn volatile(&mut self) -> Option<bool> {
        let info: String = self
            .conn
            .query(redis::cmd("INFO").arg("persistence"))
            .await
            .ok()?;
        info.lines()
            .find_map(|l| l.strip_prefix("aof_enabled:"))
            .map(|v| v.trim() == "0")
    }

    /// Sets the units a request should carry when the fleet is short (default 128): a rate's
    /// short grants tell each holder to come back one such accrual (or the short spacing's,
    /// when more) after the last holder told so ([`Reply::retry_us`]).
    pub fn set_min_lease(&mut self, units: u64) {
        self.min_lease = units.max(1);
    }

    /// Sets the least time between two requests of a short fleet (default 100 ms): a rate's
    /// short grants are spaced the larger of this and [`set_min_lease`](Self::set_min_lease)'s
    /// units of accrual apart, so however many processes want however much, the fleet sends
    /// at most one short request per spacing, each carrying about a spacing of the rate
    /// (within a quarter of the leasable burst: a larger spacing would let the bucket fill
    /// while a holder is late).
    pub fn set_short_spacing(&mut self, spacing: Duration) {
        self.short_spacing = spacing;
    }

    /// Sets whether a grant waits for a replica's acknowledgement before its units may be
    /// sold (default [`Replication::Auto`]), and how long at most (default 100 ms; keep it
    /// below the command timeout): see [`Reply::unreplicated`].
    pub fn set_replication(&mut self, policy: Replication, wait: Duration) {
        self.replication = policy;
        self.replica_wait = wait;
    }

    /// The units of accrual between two short requests: the minimum lease, or the spacing's
    /// worth of the rate when that is more.
    fn short_lease(&self) -> u64 {
        match self.kind {
            Kind::Rate { interval_us, .. } => {
                let spacing = u64::try_from(self.short_spacing.as_micros()).unwrap_or(u64::MAX);
                self.min_lease.max(spacing.div_ceil(interval_us.max(1)))
            }
            Kind::Stock { .. } => self.min_lease,
        }
    }

    /// The limit's epoch as this client last saw it (0 before its first answered command).
    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    /// How long the server keeps a silent holder before reconciling it.
    pub fn holder_ttl(&self) -> Duration {
        self.holder_ttl
    }

    /// Sends `op` of `n` units as sequence `seq` (EVALSHA, loading the script on NOSCRIPT),
    /// waiting at most the client's timeout.
    ///
    /// # Errors
    ///
    /// [`FleetError::Timeout`], [`FleetError::Redis`] (a refused configuration included),
    /// [`FleetError::Forgotten`] when Redis lost the limit since this client last saw it (or
    /// an operator has not reset a limit it lost), or [`FleetError::Protocol`] for a reply of
    /// the wrong shape. After an error the command may or may not have been executed: send
    /// the same sequence again to find out.
    pub async fn call(&mut self, op: Op, seq: u64, n: u64) -> Result<Reply, FleetError> {
        let (mode, c1, c2) = self.kind.wire();
        let ttl_us = u64::try_from(self.holder_ttl.as_micros()).unwrap_or(u64::MAX);
        let mut args = Args::default();
        args.arg(op.name())
            .arg(&self.pid)
            .arg(seq)
            .arg(n)
            .arg(mode)
            .arg(c1)
            .arg(c2)
            .arg(ttl_us)
            .arg(self.epoch)
            .arg(fresh_epoch())
            .arg(self.short_lease());
        // Only a grant's units are sold: gives and charges need no replica.
        let replicas = (op == Op::Grant).then_some((self.replication, self.replica_wait));
        let (reply, replicated) = self
            .conn
            .invoke_replicated(&self.script, &self.keys, &args.0, replicas, &mut self.watch)
            .await?;
        let [value, live, flag, fb, info, leasable, epoch, forgotten, retry] = reply[..] else {
            return Err(FleetError::Protocol(format!("reply {reply:?}")));
        };
        let non_negative =
            |x: i64| u64::try_from(x).map_err(|_| FleetError::Protocol(format!("reply {reply:?}")));
        let epoch = non_negative(epoch)?;
        self.epoch = epoch;
        Ok(Reply {
            epoch,
            forgotten: forgotten == 1,
            retry_us: non_negative(retry)?,
            value: non_negative(value)?,
            live: non_negative(live)?,
            repeated: flag == 1,
            stale: flag == 2,
            fallback_burst: non_negative(fb)?,
            info,
            leasable_burst: non_negative(leasable)?,
            unreplicated: replicated.unsold(flag == 1),
        })
    }
}

/// A script call's arguments, encoded.
#[derive(Default)]
pub(crate) struct Args(pub(crate) Vec<Vec<u8>>);

impl Args {
    pub(crate) fn arg<T: redis::ToRedisArgs>(&mut self, a: T) -> &mut Self {
        self.0.extend(a.to_redis_args());
        self
    }
}

/// The client calls that ran scripts (`EVAL`, `EVALSHA`, `SCRIPT ...`) in the text of an
/// `INFO commandstats` reply: the round trips a limiter made to Redis (the commands a script
/// runs inside Redis are not round trips and are not counted). Lines it cannot read count 0.
///
/// # Examples
///
/// ```
/// let info = "# Commandstats\r\n\
///             cmdstat_evalsha:calls=40,usec=900,usec_per_call=22.50\r\n\
///             cmdstat_script|load:calls=2,usec=30,usec_per_call=15.00\r\n\
///             cmdstat_get:calls=7,usec=10,usec_per_call=1.43\r\n";
/// assert_eq!(cellgate_redis::script_calls(info), 42);
/// ```
pub fn script_calls(info: &str) -> u64 {
    command_calls(info, "cmdstat_eval") + command_calls(info, "cmdstat_script")
}

/// The calls of the commands whose `INFO commandstats` line starts with `prefix`, summed
/// (`"cmdstat_"`: every command Redis ran, the ones scripts run inside it included). Lines it
/// cannot read count 0.
///
/// # Examples
///
/// ```
/// let info = "cmdstat_evalsha:calls=40,usec=900\r\ncmdstat_get:calls=7,usec=10\r\n";
/// assert_eq!(cellgate_redis::command_calls(info, "cmdstat_"), 47);
/// assert_eq!(cellgate_redis::command_calls(info, "cmdstat_get"), 7);
/// ```
pub fn command_calls(info: &str, prefix: &str) -> u64 {
    info.lines()
        .filter(|l| l.starts_with(prefix))
        .filter_map(|l| {
            l.split("calls=")
                .nth(1)?
                .split(',')
                .next()?
                .parse::<u64>()
                .ok()
        })
        .sum()
}

/// A process id unique across the fleet and across restarts of one process.
pub(crate) fn process_id() -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let n = crate::sync::next_sequence();
    format!("{:x}-{:x}-{n}", std::process::id(), nanos)
}
