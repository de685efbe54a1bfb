//! Reference models and drivers for cellgate's fuzz targets.
//!
//! Each `*_model` module holds one target's structured input (derived with `arbitrary`), a
//! reference model written from the README and the crate's docs (not from the
//! implementation), and a `run` function that replays an input against the real limiters and
//! the model and panics on the first difference. `extreme_config` checks invariants instead
//! of a model. The targets in `fuzz_targets/` are one-line wrappers, so a crash input can also
//! be replayed from a plain test or debugger.

#![forbid(unsafe_code)]

pub mod ceiling_model;
pub mod common;
pub mod extreme_config;
pub mod fixed_window_model;
pub mod gcra_model;
pub mod grow_model;
pub mod keyed_model;
pub mod server_engine;
pub mod sliding_log_model;
pub mod sliding_window_model;
pub mod stock_model;
pub mod striped_model;
pub mod warm_up_model;
