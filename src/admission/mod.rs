//! Admission across limiters and over time: all-or-nothing checks over several gates
//! ([`gate`]), the reservation a delayed admission hands back ([`reservation`]), and waiting for
//! one ([`wait`]). Nothing here touches a cell directly: it goes through the limiters' public
//! operations.

pub(crate) mod gate;
pub(crate) mod reservation;
pub(crate) mod wait;
