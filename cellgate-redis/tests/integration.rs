//! Every integration test of cellgate-redis in one test binary: each file of `tests/` is a module
//! (documented at its top), and the crate and its test dependencies are linked once.
//! One file's tests: `cargo test -p cellgate-redis --test integration stranded::`.

mod common;

mod cluster;
mod cluster_failover;
mod compose;
mod failures;
mod fleet_api;
mod fleet_processes;
mod forgotten;
mod keyed;
mod keyed_deadline;
mod keyed_forget;
mod keyed_model;
mod keyed_processes;
mod keyed_stock;
mod lease_model;
mod metrics;
mod stranded;
mod tls;
