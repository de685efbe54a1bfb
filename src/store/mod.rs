//! Where the keyed limiters keep their per-key words: the bounded fingerprint [`table`] or the
//! exact map ([`exact_map`]), the sweep that drops idle keys ([`sweep`]) and the background
//! thread that runs it ([`sweeper`]).

pub(crate) mod exact_map;
pub(crate) mod sweep;
pub(crate) mod sweeper;
pub(crate) mod table;
