//! Where the keyed limiters keep their per-key words: [`keys::Store`], one of the growing
//! fingerprint table ([`grow_table`], the default), the fixed fingerprint [`table`] or the
//! [`exact`] map (which the sliding log uses too), swept of idle keys now and then (the
//! [`crate::sync::sweep_gate`] picks the one caller that sweeps) or by a background thread
//! ([`sweeper`]); and what the stores count ([`stats`]).

pub(crate) mod exact;
pub(crate) mod grow_table;
pub(crate) mod int_key;
pub(crate) mod keys;
pub(crate) mod stats;
pub(crate) mod sweeper;
pub(crate) mod table;

use std::hash::Hash;

use grow_table::GrowTable;
use keys::Store;
use table::Table;

/// The hasher of every store: aHash, keyed from the operating system's random source once per
/// process (and varied per instance), so clients who do not know the key cannot aim hash
/// collisions (HashDoS) or, in the tables, fingerprint collisions at another key. Not SipHash,
/// the standard library's cryptographic default: it costs several times aHash's on a `u64`
/// key, most of a check's budget.
pub(crate) type Hasher = ahash::RandomState;

/// Where a key lives (see [`Store::locate`]): its table, its hash there, and how that table
/// tells keys apart.
pub(crate) enum Located<'s> {
    /// The fixed table, by fingerprint.
    Table(&'s Table, u64),
    /// A growing table by fingerprint: the default store, and the exact store's integer keys.
    Fingerprint(&'s GrowTable, u64),
    /// A growing table with its key column: the exact store.
    Exact(&'s GrowTable, u64),
}

/// The store's table for a key: see [`Store::locate`].
impl<K> Store<K> {
    /// The table `key` lives in and its hash there. One place decides it for every operation,
    /// and the callers then have one call site per kind of table: the integer keys of the
    /// exact store share the default store's (a second inlined copy of the growing table's
    /// check made LLVM stop inlining `check_all`'s steps: `probe all3_1k` 296 -> 336
    /// instructions a check).
    #[inline(always)]
    pub(crate) fn locate<Q: Hash + ?Sized>(&self, key: &Q) -> Located<'_> {
        match self {
            Store::Table(table, hasher) => Located::Table(table, crate::store::hash(hasher, key)),
            Store::Grow(table, hasher) => {
                Located::Fingerprint(table, crate::store::hash(hasher, key))
            }
            Store::Exact(table, hasher, _) => {
                Located::Exact(table, crate::store::hash(hasher, key))
            }
            Store::Int(t) => match t.fingerprint(key) {
                Some(fp) => Located::Fingerprint(&t.ints, fp),
                None => Located::Exact(&t.rest.table, crate::store::hash(&t.rest.hasher, key)),
            },
        }
    }
}

/// Hashes `key` with `hasher`: the 64-bit hash both fingerprint tables take a key as.
#[inline]
pub(crate) fn hash<Q: std::hash::Hash + ?Sized, S: std::hash::BuildHasher>(
    hasher: &S,
    key: &Q,
) -> u64 {
    hasher.hash_one(key)
}

/// The fingerprint of a key with hash `h`, as both fingerprint tables keep it: never 0 or 1
/// (the fixed table's EMPTY and TOMB; the growing table's EMPTY is 0).
#[inline]
pub(crate) fn fingerprint(h: u64) -> u64 {
    if h < 2 {
        h + 2
    } else {
        h
    }
}

/// The shard of hash `h` in a table of `1 << bits` shards (`bits` at most 16): the top `bits`
/// bits, that is, of the top 16 bits, drop the low `16 - bits` (all 16 when there is one
/// shard: index 0). Two plain shifts, never by 64 or more.
#[inline]
pub(crate) fn shard_of(h: u64, bits: u32) -> usize {
    ((h >> 48) >> (16 - bits)) as usize
}

/// Multiply-shift range reduction of the low 32 bits of `h` onto `[0, len)`: a key's home slot
/// in an array of `len` slots.
#[inline]
pub(crate) fn home_of(len: usize, h: u64) -> usize {
    ((u64::from(h as u32) * len as u64) >> 32) as usize
}
