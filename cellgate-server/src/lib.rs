//! cellgate-server: a rate-limit service for every language, backed by cellgate.
//!
//! One binary, `cellgate-server`, answers Envoy's rate-limit service API (RLS v3 over gRPC),
//! ratelimit's JSON endpoint over HTTP, and redis-cell's `CL.THROTTLE` over RESP.
//!
//! - [`api`]: the request and answer types, independent of the wire.
//! - [`config`]: ratelimit's YAML configuration, plus cellgate's extensions.
//! - [`engine`]: the decisions.
//! - [`fleet`]: fleet mode, every limit shared by a fleet of servers through Redis.
//! - [`server`]: the listeners (gRPC, HTTP), their bounds, reload on change, graceful shutdown.
#![forbid(unsafe_code)]

pub mod api;
pub mod clock;
pub mod config;
pub mod engine;
#[cfg(feature = "server")]
pub mod fleet;
#[cfg(feature = "server")]
mod grpc;
#[cfg(feature = "server")]
mod http;
#[cfg(feature = "server")]
mod metrics;
#[cfg(feature = "server")]
mod reload;
pub mod resp;
#[cfg(feature = "server")]
pub mod server;
mod sync;
