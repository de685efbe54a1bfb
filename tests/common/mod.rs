//! Shared by the integration tests (each `tests/*.rs` is its own crate and includes this module
//! with `mod common;`, so not every item is used by every file). The reference models
//! themselves live in the `cellgate-models` crate, shared with the fuzz targets; this module
//! holds what connects them to the real limiters: strategies, drivers and thread harnesses.
//!
//! - [`gcra`]: random quotas and operations, the GCRA model keyed by `u64`;
//! - [`windows`]: the window family (fixed window, sliding window, stock, sliding log): the
//!   limiters behind one interface, drivers, and the shared property tests (`family_tests!`);
//! - [`threads`]: many threads on one limiter.
#![allow(dead_code, unused_imports, unused_macros)]

pub mod gcra;
pub mod threads;
#[macro_use]
pub mod windows;
