//! The wire protocols on their own, and helpers for tests and tools: not needed to use the
//! limiters ([`Fleet`](crate::Fleet) and [`KeyedFleet`](crate::KeyedFleet) drive these).
//!
//! - [`LeaseClient`] speaks the whole-limit lease protocol (`lease.lua`): one limit's
//!   [`Kind`], an [`Op`] per command, a [`Reply`]; [`keys`] names the limit's Redis keys.
//! - [`KeyedClient`] speaks the keyed protocol (`keyed.lua`): a batch of [`KeyOp`]s, a
//!   [`BatchReply`] of [`KeyReply`]s; [`key_of`] names a key's Redis key and [`shard_of`]
//!   its shard among [`CLUSTER_SHARDS`] on a cluster; a batch carries at most
//!   [`MAX_BATCH`] operations.
//! - [`script_calls`] and [`command_calls`] read `INFO commandstats`: how many round trips a
//!   fleet made to Redis.
//!
//! # Examples
//!
//! ```no_run
//! # async fn run() -> Result<(), cellgate_redis::FleetError> {
//! use std::time::Duration;
//! use cellgate_redis::wire::{Kind, LeaseClient, Op};
//!
//! let mut c = LeaseClient::connect(
//!     "redis://127.0.0.1:6379", "sale", Kind::Stock { units: 100 }, "me", Duration::from_millis(200),
//! ).await?;
//! let got = c.call(Op::Grant, 1, 10).await?;
//! println!("granted {} units", got.value);
//! # Ok(()) }
//! ```

pub use crate::keyed::client::{
    key_of, shard_of, BatchReply, KeyOp, KeyReply, KeyedClient, CLUSTER_SHARDS, MAX_BATCH,
};
pub use crate::whole::client::{keys, Kind, LeaseClient, Op, Reply};

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
/// assert_eq!(cellgate_redis::wire::script_calls(info), 42);
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
/// assert_eq!(cellgate_redis::wire::command_calls(info, "cmdstat_"), 47);
/// assert_eq!(cellgate_redis::wire::command_calls(info, "cmdstat_get"), 7);
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
