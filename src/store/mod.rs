//! Where the keyed limiters keep their per-key words: [`keys::Store`], one of the growing
//! fingerprint table ([`grow_table`], the default), the fixed fingerprint [`table`] or the
//! [`exact`] map (which the sliding log uses too), swept of idle keys now and then (the
//! [`crate::sync::sweep_gate`] picks the one caller that sweeps) or by a background thread
//! ([`sweeper`]); and what the stores count ([`stats`]).

pub(crate) mod exact;
pub(crate) mod grow_table;
pub(crate) mod keys;
pub(crate) mod stats;
pub(crate) mod sweeper;
pub(crate) mod table;

/// The hasher of every store: aHash, keyed from the operating system's random source once per
/// process (and varied per instance), so clients who do not know the key cannot aim hash
/// collisions (HashDoS) or, in the tables, fingerprint collisions at another key. Not SipHash,
/// the standard library's cryptographic default: it costs several times aHash's on a `u64`
/// key, most of a check's budget (BENCHMARKS.md, "Figures moved out of the code").
pub(crate) type Hasher = ahash::RandomState;
