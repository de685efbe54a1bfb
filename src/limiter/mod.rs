//! The public limiters, facades over the cells and stores: [`direct`] (one cell), [`keyed`] (a
//! cell per key in a store), [`striped`] (one quota split over several cells), [`sliding_log`]
//! (an exact log per key), with the trait they share ([`any_limiter`](crate::any_limiter)) and the
//! runtime-replaceable algorithm they read ([`setting`]). The
//! operations of the direct and the keyed limiter are written once, in [`engine`].

pub(crate) mod direct;
mod engine;
pub(crate) mod keyed;
#[cfg(all(test, not(loom)))]
mod locks_per_check;
pub(crate) mod setting;
pub(crate) mod sliding_log;
pub(crate) mod striped;
