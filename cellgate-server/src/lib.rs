//! cellgate-server: a rate-limit service for every language, backed by cellgate.
//!
//! One binary, `cellgate-server`, answers Envoy's rate-limit service API (RLS v3 over gRPC),
//! ratelimit's JSON endpoint over HTTP, and redis-cell's `CL.THROTTLE` over RESP.
#![forbid(unsafe_code)]

pub mod api;
pub mod config;
pub mod engine;
pub mod resp;
