//! Reference models of cellgate's algorithms and keyed store, shared by the integration tests
//! (`tests/`), the fuzz targets (`fuzz/lib/src`) and the warm-up unit tests
//! (`src/algorithm/warm_up/tests.rs`), so that all of them check the crate against the same
//! reading of its documentation.
//!
//! Each model is written from the documented semantics (the README's "GCRA, exactly", the
//! algorithms' module docs and the public methods' docs), not from the implementation, in
//! unbounded-enough arithmetic (`u128`) with no packing and no saturation tricks: it is meant to
//! be obviously correct, not fast. Where the crate computes a wait in closed form, the models
//! search for it ([`first_true`]), so the closed form is checked rather than repeated.
//!
//! Plain integers in, plain structs out: this crate does not depend on `cellgate`, so the root
//! crate can dev-depend on it without a cycle. The callers read a real `Decision` into a
//! [`Seen`] (or a [`gcra::Expected`]) and compare.
//!
//! | module | what |
//! |---|---|
//! | [`gcra`] | GCRA with queue, reservations, cancel, refund and the `u64` horizon |
//! | [`fixed_window`], [`sliding_window`], [`stock`] | the one-cell algorithms ([`CellModel`]) |
//! | [`sliding_log`] | the exact log, including what it forgets when the clock goes back |
//! | [`keyed`] | the keyed store: held keys, sweep floor, key cap, throttled sweeps |
//! | [`warm_up`] | warm-up, exactly (one key and a store of keys); also the crate's own warm-up unit tests' model |
//! | [`striped`] | the striped (hot-key) limiter: stripes, time modes, gathers, and the docs' bounds |
//!
//! An invalid configuration is an [`Invalid`], variant for variant the `ConfigError` it
//! stands for.

#![forbid(unsafe_code)]

mod expect;
pub mod fixed_window;
pub mod gcra;
mod invalid;
pub mod keyed;
mod model;
pub mod sliding_log;
pub mod sliding_window;
pub mod stock;
pub mod striped;
pub mod warm_up;

pub use expect::{first_true, index_bits, wait_until, Expect, Seen, U64};
pub use fixed_window::FixedWindowModel;
pub use invalid::Invalid;
pub use model::{cancel, CellModel, Model};
pub use sliding_log::{LogState, SlidingLogModel};
pub use sliding_window::SlidingWindowModel;
pub use stock::StockModel;
