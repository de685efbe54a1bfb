//! The wire side of the lease protocol: one Lua script, two keys under one hash tag, and an
//! idempotent `(process id, sequence)` on every command.

use std::time::Duration;

use redis::Script;

use crate::conn::{check_name, fresh_epoch, Args, Conn, DEFAULT_HOLDER_TTL};
use crate::error::FleetError;
use crate::replica::{Replication, Watch, DEFAULT_REPLICA_WAIT};

/// The script every command runs (see `lease.lua` for the protocol).
const LEASE_LUA: &str = include_str!("../lease.lua");

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
    /// A stock: record `n` units this holder took and will never sell (their grant was not
    /// acknowledged by a replica) in the limit's `stranded` field, out of what it holds. A
    /// rate ignores it.
    Strand,
}

impl Op {
    fn name(self) -> &'static str {
        match self {
            Op::Grant => "grant",
            Op::Give => "give",
            Op::Charge => "charge",
            Op::Strand => "strand",
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
/// use cellgate_redis::wire::{Kind, LeaseClient, Op};
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
    /// The epoch of the limit as an acknowledged answer carried it (0: not yet), sent as known.
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
///     cellgate_redis::wire::keys("api"),
///     ["cellgate:{api}:state", "cellgate:{api}:holders"],
/// );
/// ```
pub fn keys(name: &str) -> [String; 2] {
    [
        format!("cellgate:{{{name}}}:state"),
        format!("cellgate:{{{name}}}:holders"),
    ]
}

/// The smallest lease a process asks for, by default.
pub(crate) const DEFAULT_MIN_LEASE: u64 = 128;

/// The least time between two short requests of a rate's fleet, by default.
pub(crate) const DEFAULT_SHORT_SPACING: Duration = Duration::from_millis(100);

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

    /// The limit's epoch as this client last saw it in an answer a replica acknowledged (or
    /// that needed none); 0 before the first.
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
        let (reply, replicated): (Vec<i64>, _) = self
            .conn
            .invoke_replicated(&self.script, &self.keys, &args.0, replicas, &mut self.watch)
            .await?;
        let [value, live, flag, fb, info, leasable, epoch, forgotten, retry] = reply[..] else {
            return Err(FleetError::Protocol(format!("reply {reply:?}")));
        };
        let non_negative =
            |x: i64| u64::try_from(x).map_err(|_| FleetError::Protocol(format!("reply {reply:?}")));
        let epoch = non_negative(epoch)?;
        let unreplicated = replicated.unsold(flag == 1);
        // An answer no replica acknowledged may have created the limit, and a failover can
        // lose that creation: sent as known, its epoch would then mark the limit forgotten
        // (never sold again) where nothing was sold and it can be created again.
        if !unreplicated {
            self.epoch = epoch;
        }
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
            unreplicated,
        })
    }
}
