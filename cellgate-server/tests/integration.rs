//! Every integration test of cellgate-server in one test binary: each file of `tests/` is a module
//! (documented at its top), and the crate and its test dependencies are linked once.
//! One file's tests: `cargo test -p cellgate-server --test integration server_fleet::`.

mod common;
mod resp_common;

mod engine_config;
mod engine_decide;
mod engine_fixtures;
mod resp_bad_input;
mod resp_limits;
mod resp_python;
mod resp_redis_benchmark;
mod resp_redis_cli;
mod resp_vs_redis_cell;
mod server_cli;
mod server_fleet;
mod server_fleet_cluster;
mod server_fleet_env;
mod server_grpc;
mod server_http;
mod server_python;
mod server_reload;
mod server_statsd;
mod server_tls;
