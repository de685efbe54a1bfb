//! Admission across limiters and over time: all-or-nothing checks over several limiters
//! ([`gate`]) and waiting for a delayed admission ([`wait`]; the reservation it hands back is
//! `crate::reservation`, below the algorithms that write it). Nothing here touches a cell directly: it goes through the limiters' public
//! operations.

pub(crate) mod gate;
pub(crate) mod wait;
