//! The wire side of the keyed protocol: one script call carries many keys' operations.

use std::time::Duration;

use redis::Script;

use std::sync::Arc;

use crate::conn::{check_name, Args, Conn, DEFAULT_HOLDER_TTL};
use crate::error::FleetError;
use crate::replica::{Replication, ShardWatch, Watch, DEFAULT_REPLICA_WAIT};
use crate::sync::Lock;

/// The script every batch runs (see `keyed.lua` for the protocol).
const KEYED_LUA: &str = include_str!("../keyed.lua");

/// The most operations one batch carries.
pub const MAX_BATCH: usize = 256;

/// The shards of a keyed limit on a Redis Cluster: its keys are spread over this many hash
/// tags (`{name#0}` … `{name#15}`), so over the masters, while each shard's keys, and the
/// configuration, holders and replies they are checked with, share one slot. On one Redis
/// node a keyed limit is one shard, `{name}`. Every process of a limit must agree on it:
/// all of them use the cluster's seed URLs.
pub const CLUSTER_SHARDS: usize = 16;
// The shared state keeps a slot per shard.
const _: () = assert!(CLUSTER_SHARDS <= crate::shared::MAX_SHARDS);

/// One operation on one key of a keyed limit (see [`KeyedClient::batch`]).
///
/// ```
/// use cellgate_redis::wire::KeyOp;
/// let ops = [("alice".to_owned(), KeyOp::Check, 1), ("bob".to_owned(), KeyOp::Lease, 8)];
/// assert_eq!(ops.len(), 2);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyOp {
    /// Check `n` units now, all or nothing (a cold check passed through).
    Check,
    /// Lease up to `n` units (at most `max(1, B / (2·live))`; a stock: `max(1, left /
    /// (2·live))`) into a local pool.
    Lease,
    /// Give `n` leased, unadmitted units back.
    Give,
    /// Debit `n` units admitted during an outage, whatever the room.
    Charge,
    /// Forget the key on purpose (`n` is ignored): its state is deleted, a fresh budget.
    /// The reply's value is 1 when the key held state, 0 when it was already fresh.
    Forget,
    /// A stock: this process holds `n` units of the key's leases unsold now (its field
    /// `h:<pid>:<key>` of the limit's leases hash is set, deleted at 0). The key's units
    /// taken do not change. A rate ignores it.
    Hold,
    /// A stock: `n` units of the key this process took will never be sold (no replica
    /// acknowledged their batch): added to the key's field `s:<key>` of the limit's leases
    /// hash, where an operator reconciles them. A rate ignores it.
    Strand,
}

impl KeyOp {
    fn wire(self) -> &'static str {
        match self {
            KeyOp::Check => "g",
            KeyOp::Lease => "l",
            KeyOp::Give => "r",
            KeyOp::Charge => "c",
            KeyOp::Forget => "f",
            KeyOp::Hold => "h",
            KeyOp::Strand => "s",
        }
    }
}

/// The server's answer to one operation of a batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KeyReply {
    /// Units checked (0: denied), leased, given back or charged.
    pub value: u64,
    /// For a check or a lease: the units still available after it (`> 0`), or when none is
    /// the negated microseconds until one is (a check: until its `n` are; `-1`: never, `n`
    /// is above the burst).
    pub info: i64,
}

/// The server's answer to one batch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BatchReply {
    /// `true` when this sequence had already been executed: the results are the first
    /// execution's.
    pub repeated: bool,
    /// `true` when a newer sequence of this process was executed first: nothing changed and
    /// `results` is empty.
    pub stale: bool,
    /// Live holders of this limit (this process included); 0 when the batch did not touch.
    pub live: u64,
    /// The epoch of the batch's shard (the limit's epoch, unless Redis lost a part of it).
    pub epoch: u64,
    /// Whether the shard's config is marked complete: on shard 0, that every shard of the
    /// limit has been created (a shard found missing since was lost).
    pub complete: bool,
    /// One per operation, in order.
    pub results: Vec<KeyReply>,
    /// A stock's batch that had to reach a replica ([`Replication`]) and that no replica
    /// acknowledged within the replica wait (or a repeated answer, whose writes this call
    /// cannot vouch for): the units its checks and leases took must not be sold.
    pub unreplicated: bool,
}

/// One process's connection to one keyed fleet limit (a GCRA or a stock per key): batches of
/// operations on many keys, one script call each, executed at most once per
/// `(process id, sequence)`. [`KeyedFleet`](crate::KeyedFleet) drives this; it is public for
/// tests and tools.
///
/// # Examples
///
/// ```no_run
/// # async fn run() -> Result<(), cellgate_redis::FleetError> {
/// use std::time::Duration;
/// use cellgate_redis::wire::{KeyOp, KeyedClient};
///
/// // 10 per second per key, burst 5.
/// let mut c = KeyedClient::connect(
///     "redis://127.0.0.1:6379", "users", 100_000, 5, "me", Duration::from_millis(200),
/// ).await?;
/// let r = c
///     .batch(1, &[("alice".into(), KeyOp::Check, 1), ("bob".into(), KeyOp::Lease, 3)], true)
///     .await?;
/// assert_eq!(r.results.len(), 2);
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct KeyedClient {
    conn: Conn,
    script: Script,
    name: String,
    /// 1 on one node; [`CLUSTER_SHARDS`] on a cluster.
    shards: usize,
    pid: String,
    interval_us: u64,
    burst: u64,
    /// Each shard's epoch as this client last saw it (0: not yet).
    epochs: Vec<u64>,
    /// Each shard's epoch as an acknowledged answer carried it (0: none yet): the epoch a
    /// batch sends as known. An answer no replica acknowledged may have created the shard, and
    /// a failover can lose that creation; had it taught the known epoch, the shard would then
    /// be taken for one Redis lost after selling (forgotten, never sold again), where nothing
    /// was sold from it and it can be created again.
    known: Vec<u64>,
    /// The epoch this client creates shard 0 with if the limit does not exist yet.
    fresh: u64,
    /// Shard 0 answered that every shard has been created (see [`adopt`](Self::adopt)).
    complete: bool,
    /// Whether a stock's batches wait for a replica, and for how long at most.
    replication: Replication,
    replica_wait: Duration,
    /// Per shard, the replicas of its master as last read (shared by the clones the
    /// batches run on).
    watches: Arc<Lock<Vec<Watch>>>,
}

impl std::fmt::Debug for KeyedClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KeyedClient")
            .field("name", &self.name)
            .field("pid", &self.pid)
            .field("interval_us", &self.interval_us)
            .field("burst", &self.burst)
            .finish_non_exhaustive()
    }
}

/// The Redis key holding `key`'s state in keyed limit `name` on one Redis node: under the
/// limit's hash tag. On a cluster the key is under its shard's tag instead
/// ([`KeyedClient::redis_key`]).
///
/// ```
/// assert_eq!(cellgate_redis::wire::key_of("users", "alice"), "cellgate:{users}:k:alice");
/// ```
pub fn key_of(name: &str, key: &str) -> String {
    format!("cellgate:{{{name}}}:k:{key}")
}

/// The shard of `key` among `shards`: FNV-1a of its bytes (the same in every process and
/// version), modulo the count.
///
/// ```
/// use cellgate_redis::wire::shard_of;
/// assert_eq!(shard_of("alice", 1), 0);
/// assert!(shard_of("alice", 16) < 16);
/// assert_eq!(shard_of("alice", 16), shard_of("alice", 16));
/// ```
pub fn shard_of(key: &str, shards: usize) -> usize {
    if shards <= 1 {
        return 0;
    }
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in key.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    // The remainder is below `shards`, a usize.
    (h % shards as u64) as usize
}

/// The hash tag of shard `shard` of limit `name` with `shards` shards: `name` alone for one
/// shard (one Redis node), `name#shard` on a cluster.
pub(crate) fn tag(name: &str, shard: usize, shards: usize) -> String {
    if shards <= 1 {
        name.to_owned()
    } else {
        format!("{name}#{shard}")
    }
}

impl KeyedClient {
    /// Connects to `url` for keyed limit `name` (one unit per `interval_us` µs per key, burst
    /// `burst`; with `interval_us == 0`, a stock of `burst` units per key) as process `pid`,
    /// every batch bounded by `timeout`.
    ///
    /// # Errors
    ///
    /// [`FleetError::Config`] for a bad name or URL, [`FleetError::Redis`] or
    /// [`FleetError::Timeout`] when the first connection fails.
    pub async fn connect(
        url: &str,
        name: &str,
        interval_us: u64,
        burst: u64,
        pid: &str,
        timeout: Duration,
    ) -> Result<Self, FleetError> {
        Self::open(url, name, interval_us, burst, pid, timeout, false).await
    }

    /// As [`connect`](Self::connect), `lazy`: connecting on the first batch.
    pub(crate) async fn open(
        url: &str,
        name: &str,
        interval_us: u64,
        burst: u64,
        pid: &str,
        timeout: Duration,
        lazy: bool,
    ) -> Result<Self, FleetError> {
        check_name(name)?;
        let conn = Conn::open(url, timeout, lazy).await?;
        let shards = if conn.is_cluster() { CLUSTER_SHARDS } else { 1 };
        Ok(Self {
            conn,
            script: Script::new(KEYED_LUA),
            name: name.to_owned(),
            shards,
            pid: pid.to_owned(),
            interval_us,
            burst,
            epochs: vec![0; shards],
            known: vec![0; shards],
            fresh: crate::conn::fresh_epoch(),
            complete: false,
            replication: Replication::Auto,
            replica_wait: DEFAULT_REPLICA_WAIT,
            watches: Arc::new(Lock::new(vec![Watch::default(); shards])),
        })
    }

    /// Sets whether a stock's batches wait for a replica's acknowledgement before the units
    /// they take may be sold (default [`Replication::Auto`]), and how long at most (default
    /// 100 ms; keep it below the command timeout): see [`BatchReply::unreplicated`]. A rate
    /// never waits.
    pub fn set_replication(&mut self, policy: Replication, wait: Duration) {
        self.replication = policy;
        self.replica_wait = wait;
    }

    /// How many shards the limit's keys are spread over: 1 on one Redis node,
    /// [`CLUSTER_SHARDS`] on a cluster.
    pub fn shards(&self) -> usize {
        self.shards
    }

    /// The shard of `key` (see [`shard_of`]).
    pub fn shard(&self, key: &str) -> usize {
        shard_of(key, self.shards)
    }

    /// The hash tag of shard `shard`'s keys: the limit's name on one node, `name#shard` on
    /// a cluster.
    pub fn tag(&self, shard: usize) -> String {
        tag(&self.name, shard, self.shards)
    }

    /// The Redis key holding `key`'s state ([`key_of`] on one node; on a cluster, under its
    /// shard's hash tag).
    pub fn redis_key(&self, key: &str) -> String {
        let t = tag(&self.name, self.shard(key), self.shards);
        format!("cellgate:{{{t}}}:k:{key}")
    }

    /// The epoch of shard `shard` as this client last saw it (0: not yet).
    pub fn epoch(&self, shard: usize) -> u64 {
        self.epochs.get(shard).copied().unwrap_or(0)
    }

    /// Records the epoch a batch on `shard` answered, as known when the answer was
    /// `acknowledged` (a replica has it, or it needed none), and on shard 0 whether the limit
    /// is complete (a clone of this client may have sent it).
    pub(crate) fn learn(&mut self, shard: usize, epoch: u64, complete: bool, acknowledged: bool) {
        if let Some(e) = self.epochs.get_mut(shard) {
            *e = epoch;
        }
        if let Some(k) = self.known.get_mut(shard).filter(|_| acknowledged) {
            *k = epoch;
        }
        if shard == 0 {
            self.complete = complete;
            self.adopt();
        }
    }

    /// Whether this client's next batch on shard 0 marks the limit complete: acknowledged
    /// answers showed it every shard with shard 0's epoch, and shard 0 did not say complete yet.
    pub(crate) fn marks_complete(&self) -> bool {
        let limit = self.known[0];
        !self.complete && limit != 0 && self.known.iter().all(|&e| e == limit)
    }

    /// Once shard 0 says the limit is complete (some process saw every shard created with
    /// its epoch, and marked it), every shard this client has not seen must exist with that
    /// epoch, so it is sent as known: a shard Redis lost is then found forgotten rather than
    /// created afresh. Before that, a shard not seen is sent as unknown: it may not be
    /// created yet (another process is registering, or its creator died after shard 0), and
    /// whoever reaches it first creates it with shard 0's epoch. What this leaves open: a shard
    /// lost before the mark (within about a heartbeat of the limit's creation) is created
    /// again, with the same epoch, by a process that had not seen it.
    fn adopt(&mut self) {
        let limit = self.known[0];
        if limit == 0 || !self.complete {
            return;
        }
        for (seen, known) in self.epochs.iter_mut().zip(&mut self.known).skip(1) {
            if *known == 0 {
                *known = limit;
            }
            if *seen == 0 {
                *seen = limit;
            }
        }
    }

    /// Sends `ops` (at most [`MAX_BATCH`]) as batch `seq`. Sending the same `(seq, ops)`
    /// again gets the first execution's answer and changes nothing. With `touch` (and in any
    /// batch with a lease) the server refreshes this process's liveness and counts the live
    /// holders; a process must touch within the holder ttl (10 s) to count as live, and
    /// [`BatchReply::live`] is 0 when the batch did not touch.
    ///
    /// # Errors
    ///
    /// [`FleetError::Timeout`], [`FleetError::Redis`] (a refused configuration included),
    /// [`FleetError::Protocol`] for a reply of the wrong shape, [`FleetError::Config`] for
    /// too many operations. After an error the batch may or may not have been executed: send
    /// it again to find out.
    ///
    /// On a cluster every key of one batch must be in one shard (the batch goes to the
    /// shard of its first key; an empty batch to shard 0): see [`batch_on`](Self::batch_on).
    pub async fn batch(
        &mut self,
        seq: u64,
        ops: &[(String, KeyOp, u64)],
        touch: bool,
    ) -> Result<BatchReply, FleetError> {
        let shard = ops.first().map_or(0, |(k, _, _)| self.shard(k));
        self.batch_on(shard, seq, ops, touch).await
    }

    /// Sends `ops`, every key in shard `shard`, as batch `seq` of that shard: as
    /// [`batch`](Self::batch). Sequences are per process and must grow within a shard (one
    /// counter for all shards does). A shard other than 0 is created with the epoch shard 0
    /// answered (the limit's epoch), so a part of the limit Redis lost is told from one
    /// never used: shard 0 must have answered first.
    ///
    /// # Errors
    ///
    /// As [`batch`](Self::batch); [`FleetError::Config`] for a key of another shard or a
    /// shard out of range, [`FleetError::Protocol`] for a shard other than 0 before shard 0
    /// answered.
    pub async fn batch_on(
        &mut self,
        shard: usize,
        seq: u64,
        ops: &[(String, KeyOp, u64)],
        touch: bool,
    ) -> Result<BatchReply, FleetError> {
        let (keys, args) = self.prepare(shard, seq, ops, touch)?;
        // A stock's batches wait for a replica; a rate's never do.
        let replicas = (self.interval_us == 0).then_some((self.replication, self.replica_wait));
        let (text, replicated): (String, _) = self
            .conn
            .invoke_replicated(
                &self.script,
                &keys,
                &args.0,
                replicas,
                &mut ShardWatch(&self.watches, shard),
            )
            .await?;
        let bad = || FleetError::Protocol(format!("batch reply {text:?}"));
        let mut numbers = text.split_ascii_whitespace().map(str::parse::<i64>);
        let mut next = || numbers.next().and_then(Result::ok).ok_or_else(bad);
        let (flag, live, epoch, complete) = (next()?, next()?, next()?, next()?);
        let live = u64::try_from(live).map_err(|_| bad())?;
        let epoch = u64::try_from(epoch).map_err(|_| bad())?;
        let complete = complete == 1;
        let acknowledged = !replicated.unsold(flag == 1);
        self.learn(shard, epoch, complete, acknowledged);
        if flag == 2 {
            return Ok(BatchReply {
                repeated: false,
                stale: true,
                live,
                epoch,
                complete,
                results: Vec::new(),
                unreplicated: false,
            });
        }
        let mut results = Vec::with_capacity(ops.len());
        for _ in ops {
            let value = u64::try_from(next()?).map_err(|_| bad())?;
            results.push(KeyReply {
                value,
                info: next()?,
            });
        }
        if numbers.next().is_some() {
            return Err(bad());
        }
        Ok(BatchReply {
            repeated: flag == 1,
            stale: false,
            live,
            epoch,
            complete,
            results,
            unreplicated: replicated.unsold(flag == 1),
        })
    }

    /// Checks a batch for shard `shard` and lays out its keys and arguments.
    fn prepare(
        &self,
        shard: usize,
        seq: u64,
        ops: &[(String, KeyOp, u64)],
        touch: bool,
    ) -> Result<(Vec<String>, Args), FleetError> {
        if ops.len() > MAX_BATCH {
            return Err(FleetError::Config(format!(
                "{} operations in one batch (at most {MAX_BATCH})",
                ops.len()
            )));
        }
        if shard >= self.shards || ops.iter().any(|(k, _, _)| self.shard(k) != shard) {
            return Err(FleetError::Config(format!(
                "a batch for shard {shard} of {} holds a key of another shard",
                self.shards
            )));
        }
        let fresh = if shard == 0 {
            self.fresh
        } else if self.epochs[0] != 0 {
            self.epochs[0]
        } else {
            return Err(FleetError::Protocol(format!(
                "shard {shard} before shard 0 answered"
            )));
        };
        let ttl_us = u64::try_from(DEFAULT_HOLDER_TTL.as_micros()).unwrap_or(u64::MAX);
        let t = tag(&self.name, shard, self.shards);
        let mut keys: Vec<String> = ["kconf", "kholders", "kreplies", "kleases"]
            .iter()
            .map(|base| format!("cellgate:{{{t}}}:{base}"))
            .collect();
        for (key, _, _) in ops {
            keys.push(format!("cellgate:{{{t}}}:k:{key}"));
        }
        let mut args = Args::default();
        args.arg(&self.pid)
            .arg(seq)
            .arg(self.interval_us)
            .arg(self.burst)
            .arg(ttl_us)
            .arg(u8::from(touch) | (u8::from(shard == 0 && self.marks_complete()) << 1))
            .arg(self.known[shard])
            .arg(fresh);
        for (_, op, n) in ops {
            args.arg(op.wire()).arg(*n);
        }
        Ok((keys, args))
    }
}
