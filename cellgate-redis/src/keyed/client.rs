//! The wire side of the keyed protocol: one script call carries many keys' operations.

use std::time::Duration;

use redis::Script;

use crate::client::{check_name, Conn, DEFAULT_HOLDER_TTL};
use crate::error::FleetError;

/// The script every batch runs (see `keyed.lua` for the protocol).
const KEYED_LUA: &str = include_str!("../keyed.lua");

/// The most operations one batch carries.
pub const MAX_BATCH: usize = 256;

/// One operation on one key of a keyed limit (see [`KeyedClient::batch`]).
///
/// ```
/// use cellgate_redis::keyed::KeyOp;
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
}

impl KeyOp {
    fn wire(self) -> &'static str {
        match self {
            KeyOp::Check => "g",
            KeyOp::Lease => "l",
            KeyOp::Give => "r",
            KeyOp::Charge => "c",
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
    /// One per operation, in order.
    pub results: Vec<KeyReply>,
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
/// use cellgate_redis::keyed::{KeyOp, KeyedClient};
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
    base: [String; 3],
    pid: String,
    interval_us: u64,
    burst: u64,
    /// The limit's epoch as this client last saw it (0: not yet).
    epoch: u64,
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

/// The Redis key holding `key`'s state in keyed limit `name`: under the limit's hash tag, so
/// one batch stays on one cluster slot.
///
/// ```
/// assert_eq!(cellgate_redis::keyed::key_of("users", "alice"), "cellgate:{users}:k:alice");
/// ```
pub fn key_of(name: &str, key: &str) -> String {
    format!("cellgate:{{{name}}}:k:{key}")
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
        Ok(Self {
            conn: Conn::open(url, timeout, lazy).await?,
            script: Script::new(KEYED_LUA),
            name: name.to_owned(),
            base: [
                format!("cellgate:{{{name}}}:kconf"),
                format!("cellgate:{{{name}}}:kholders"),
                format!("cellgate:{{{name}}}:kreplies"),
            ],
            pid: pid.to_owned(),
            interval_us,
            burst,
            epoch: 0,
        })
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
    pub async fn batch(
        &mut self,
        seq: u64,
        ops: &[(String, KeyOp, u64)],
        touch: bool,
    ) -> Result<BatchReply, FleetError> {
        if ops.len() > MAX_BATCH {
            return Err(FleetError::Config(format!(
                "{} operations in one batch (at most {MAX_BATCH})",
                ops.len()
            )));
        }
        let ttl_us = u64::try_from(DEFAULT_HOLDER_TTL.as_micros()).unwrap_or(u64::MAX);
        let mut inv = self.script.prepare_invoke();
        for k in &self.base {
            inv.key(k);
        }
        for (key, _, _) in ops {
            inv.key(key_of(&self.name, key));
        }
        inv.arg(&self.pid)
            .arg(seq)
            .arg(self.interval_us)
            .arg(self.burst)
            .arg(ttl_us)
            .arg(u8::from(touch))
            .arg(self.epoch)
            .arg(crate::client::fresh_epoch());
        for (_, op, n) in ops {
            inv.arg(op.wire()).arg(*n);
        }
        let reply = self.conn.invoke(&inv).await?;
        let bad = || FleetError::Protocol(format!("batch reply {reply:?}"));
        let (&flag, &live, &epoch) = match &reply[..] {
            [flag, live, epoch, ..] => (flag, live, epoch),
            _ => return Err(bad()),
        };
        let live = u64::try_from(live).map_err(|_| bad())?;
        self.epoch = u64::try_from(epoch).map_err(|_| bad())?;
        if flag == 2 {
            return Ok(BatchReply {
                repeated: false,
                stale: true,
                live,
                results: Vec::new(),
            });
        }
        let rest = &reply[3..];
        if rest.len() != 2 * ops.len() {
            return Err(bad());
        }
        let results = rest
            .chunks(2)
            .map(|c| {
                Ok(KeyReply {
                    value: u64::try_from(c[0]).map_err(|_| bad())?,
                    info: c[1],
                })
            })
            .collect::<Result<Vec<_>, FleetError>>()?;
        Ok(BatchReply {
            repeated: flag == 1,
            stale: false,
            live,
            results,
        })
    }
}
