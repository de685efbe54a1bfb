//! Where the keyed limiters keep their per-key words: the growing fingerprint table
//! ([`grow_table`], the default), the fixed fingerprint [`table`] or the exact map
//! ([`crate::sync::map`]), swept of idle keys now and then (the [`crate::sync::sweep_gate`]
//! picks the one caller that sweeps) or by a background thread ([`sweeper`]).

pub(crate) mod grow_table;
pub(crate) mod stats;
pub(crate) mod sweeper;
pub(crate) mod table;
