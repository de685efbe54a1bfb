//! The crate's only module that names an atomic, a memory ordering or a lock.
//!
//! - `rows` (feature `metrics`): the metrics' recording protocol, one row of counters per
//!   thread, model-checked with loom (`loom-tests/tests/http_rows.rs` includes that file as it
//!   ships).
//! - [`registry`]: the process's list of live layers, which a stacked layer's give-back looks
//!   a layer up in (`stack`), with the numbers it gives them.

pub(crate) mod registry;
#[cfg(feature = "metrics")]
pub(crate) mod rows;
