//! # cellgate-redis: one limit across a fleet, with every check local
//!
//! The usual way to share a rate limit or a stock across processes is a Redis round trip and
//! a Lua script per request; the usual way to avoid that round trip ("admit locally, report
//! later") over-admits by about one local allowance per process per sync, without bound while
//! the backend is down. This crate takes capacity from Redis **before** admitting it: each
//! process holds a *lease* of pre-debited units in a local `cellgate` stock, so a check is one
//! compare-and-swap, and the global bound holds by construction.
//!
//! | item | what |
//! |---|---|
//! | [`Fleet::stock`] | a global stock (flash-sale inventory): Σ sold ≤ stock |
//! | [`Fleet::rate`] | a global GCRA rate `R`, burst `B`: Σ admitted over `[0, T]` ≤ `R·T + B` |
//! | [`Fleet`] | the limiter: [`check_n`](Fleet::check_n), [`state`](Fleet::state), [`stats`](Fleet::stats), [`shutdown`](Fleet::shutdown); a [`cellgate::AnyLimiter`] (`AnyLimiter<()>`) |
//! | [`KeyedFleet`] | a rate per key (per user, token, IP) or a stock per key (per SKU): hot keys leased, cold keys checked in Redis in batches ([`keyed`] has the design and the guarantees per key); a [`cellgate::AnyLimiter<str>`](cellgate::AnyLimiter) |
//! | [`FleetState`] | connected, fallback (outage share), partitioned (leases only), forgotten (Redis lost the stock) |
//! | [`LastError`], [`FleetError`] | the last failure and when; every known Redis error says what to fix |
//! | [`wire`] | the wire protocols alone, and helpers that count Redis round trips (for tests and tools) |
//!
//! ## The protocol
//!
//! One Lua script (run with EVALSHA, loaded again on NOSCRIPT) over two keys that share the
//! hash tag `{name}`, so a cluster keeps a limit on one slot. A URL is one Redis (`redis://`,
//! `rediss://` with the feature `tls`, `redis+unix://`) or the comma-separated seed nodes of a
//! Redis Cluster. Time is the server's `TIME` in
//! integer microseconds, every number stays below 2^53, so Lua's doubles are exact. Every
//! command carries the process id and a sequence number; the server keeps the answer to each
//! process's newest sequence, so a retried or duplicated command never grants twice.
//!
//! - **grant** `n`: up to `n` units (a stock: at most `remaining / (2·live)` near the end, so
//!   the last units spread; a rate: what the fleet's GCRA has room for).
//! - **give** `n`: unadmitted units back (when idle about 1 s, when a rate lease's lifetime
//!   ends, at shutdown).
//! - **charge** `n`: units admitted during an outage, debited whatever the room.
//!
//! A stock lease is at most `max_lease` (default 1/1000 of the stock): a holder killed with
//! `kill -9` takes its lease with it, so a crash undersells at most 1.5 × `max_lease`.
//!
//! [`KeyedFleet`] runs a second script (`keyed.lua`): one call carries many keys' checks,
//! leases, give-backs and charges, executed at most once per process id and batch sequence.
//!
//! ## Examples
//!
//! ```no_run
//! use std::time::Duration;
//! use cellgate_redis::Fleet;
//!
//! let api = Fleet::rate("api", 10_000, Duration::from_secs(1))
//!     .burst(1_000)
//!     .connect("redis://127.0.0.1:6379")?;
//! if api.check().is_allowed() {
//!     // serve
//! }
//! # Ok::<(), cellgate_redis::FleetError>(())
//! ```
#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod book;
mod conn;
mod error;
pub mod keyed;
mod limiter;
mod local;
#[cfg(feature = "metrics")]
mod metrics;
mod replica;
mod report;
mod runtime;
mod setters;
mod shared;
mod sync;
mod whole;
pub mod wire;

pub use error::{FleetError, ACL_COMMANDS};
pub use keyed::{KeyDecision, KeyedFleet, KeyedFleetBuilder, Via};
pub use replica::Replication;
pub use report::{FleetState, FleetStats, KeyedStats, LastError, ShardState};
pub use whole::builder::FleetBuilder;
pub use whole::Fleet;
