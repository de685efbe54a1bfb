//! Every integration test of the core crate in one test binary: each file of `tests/` is a
//! module (documented at its top), and the crate and its test dependencies are linked once.
//! One file's tests: `cargo test --test integration stock::`.

#[macro_use]
mod common;

mod admission;
mod api;
mod ceiling_clock;
mod check_many;
mod concurrency;
mod denial;
mod differential_governor;
mod exact_keys;
mod fixed_window;
mod forget;
mod gcra_model;
mod gcra_properties;
mod nginx;
mod queue_and_refund;
mod rollback;
mod sliding_log;
mod sliding_window;
mod stock;
mod striped_clock;
mod striped_gate;
mod sweeper;
mod waiting;
mod warm_up;
mod when_full;
