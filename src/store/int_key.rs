//! The store of integer keys, default and exact alike: a key of 64 bits or fewer is its own
//! fingerprint, once mixed by a bijection, so the growing table of fingerprints is exact for it
//! and needs no key column beside its slots (which the exact store keeps for other keys: 16
//! more bytes a slot to write, copy at every growing rebuild and miss on), and two integer keys
//! never share a budget in the default store either.
//!
//! The mix is keyed per instance (a random xor and random odd multipliers), as the other
//! stores' hasher is, so that clients who do not know it cannot aim keys at one home slot.
//! Every step is invertible (an xor with a constant, a multiplication by an odd number, an xor
//! with the value's own high bits shifted down by at least half its width), so two keys never
//! share a mixed value. The tables reserve the fingerprints 0 and 1: the at most two keys whose
//! mixed value is one of them are kept in a small exact table of their own, keys compared.

use std::any::TypeId;
use std::hash::{BuildHasher, Hash};

use super::grow_table::GrowTable;
use super::Hasher;
use crate::sync::grow::{Keys, NewColumn};

/// For a key type whose `Hash` writes one integer of at most 64 bits and nothing else (so
/// that [`Mix`] sees the whole key), the maker of its key column (for the side table); `None`
/// for any other type. By type identity, so that callers need no `Clone` bound on `K`.
fn column<K: 'static>() -> Option<NewColumn> {
    let id = TypeId::of::<K>();
    let columns: [(TypeId, NewColumn); 10] = [
        (TypeId::of::<u64>(), Keys::<u64>::column),
        (TypeId::of::<i64>(), Keys::<i64>::column),
        (TypeId::of::<u32>(), Keys::<u32>::column),
        (TypeId::of::<i32>(), Keys::<i32>::column),
        (TypeId::of::<u16>(), Keys::<u16>::column),
        (TypeId::of::<i16>(), Keys::<i16>::column),
        (TypeId::of::<u8>(), Keys::<u8>::column),
        (TypeId::of::<i8>(), Keys::<i8>::column),
        (TypeId::of::<usize>(), Keys::<usize>::column),
        (TypeId::of::<isize>(), Keys::<isize>::column),
    ];
    columns.into_iter().find(|(t, _)| *t == id).map(|(_, c)| c)
}

/// The keyed bijection on 64-bit values (a `BuildHasher` whose hashers take one integer).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Mix {
    xor: u64,
    /// Odd, so that multiplying by them is invertible modulo 2^64.
    mul: [u64; 2],
}

/// The two shifts of the mix: each at least 32, so that `x ^ (x >> s)` undoes itself.
const SHIFTS: [u32; 2] = [32, 33];

impl Mix {
    /// A mix keyed from the operating system's random source (through aHash's keys).
    pub(crate) fn new() -> Self {
        let random = Hasher::new();
        let draw = |i: u64| random.hash_one(i);
        Mix {
            xor: draw(0),
            mul: [draw(1) | 1, draw(2) | 1],
        }
    }

    /// The mixed value of `x`.
    #[inline(always)]
    pub(crate) fn mix(&self, x: u64) -> u64 {
        let mut h = (x ^ self.xor).wrapping_mul(self.mul[0]);
        h ^= h >> SHIFTS[0];
        h = h.wrapping_mul(self.mul[1]);
        h ^ (h >> SHIFTS[1])
    }

    /// The value whose mix is `h` (the tests find the keys that the reserved fingerprints
    /// send to the side table with it).
    #[cfg(test)]
    pub(crate) fn unmix(&self, h: u64) -> u64 {
        // x ^ (x >> s) with s >= 32 is its own inverse: the high bits it reads are unchanged.
        let mut x = h ^ (h >> SHIFTS[1]);
        x = x.wrapping_mul(inverse(self.mul[1]));
        x ^= x >> SHIFTS[0];
        x.wrapping_mul(inverse(self.mul[0])) ^ self.xor
    }
}

/// The inverse of odd `a` modulo 2^64 (Newton's iteration: each step doubles the bits right).
#[cfg(test)]
fn inverse(a: u64) -> u64 {
    let mut x = a;
    for _ in 0..6 {
        x = x.wrapping_mul(2u64.wrapping_sub(a.wrapping_mul(x)));
    }
    x
}

impl BuildHasher for Mix {
    type Hasher = MixHasher;

    #[inline(always)]
    fn build_hasher(&self) -> MixHasher {
        MixHasher { mix: *self, x: 0 }
    }
}

/// Takes one integer ([`column()`]'s types write exactly one) and finishes with its mix.
pub(crate) struct MixHasher {
    mix: Mix,
    x: u64,
}

impl std::hash::Hasher for MixHasher {
    #[inline(always)]
    fn finish(&self) -> u64 {
        self.mix.mix(self.x)
    }

    /// Never called for [`column()`]'s types (they write through the sized methods below); folds
    /// the bytes in so that the hash still depends on them.
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.x = self.x.rotate_left(8) ^ u64::from(b);
        }
    }

    #[inline(always)]
    fn write_u8(&mut self, i: u8) {
        self.x = u64::from(i);
    }

    #[inline(always)]
    fn write_u16(&mut self, i: u16) {
        self.x = u64::from(i);
    }

    #[inline(always)]
    fn write_u32(&mut self, i: u32) {
        self.x = u64::from(i);
    }

    #[inline(always)]
    fn write_u64(&mut self, i: u64) {
        self.x = i;
    }

    #[inline(always)]
    fn write_usize(&mut self, i: usize) {
        self.x = i as u64;
    }
}

/// The store of integer keys (see the module docs).
pub(crate) struct IntTables {
    /// Every key whose mix is 2 or more, by that mix as its fingerprint.
    pub(crate) ints: GrowTable,
    pub(crate) mix: Mix,
    /// The at most two keys whose mix is 0 or 1: the exact store with its key column, and its
    /// hasher (boxed: never on a check's path but for those keys, it stays off the limiter's
    /// lines).
    pub(crate) rest: Box<Rest>,
}

/// See [`IntTables::rest`].
pub(crate) struct Rest {
    pub(crate) table: GrowTable,
    pub(crate) hasher: Hasher,
}

impl IntTables {
    /// Empty tables for keys of type `K` with an optional ceiling (each table's: the side
    /// table holds at most two keys); `None` unless `K` is one of [`column()`]'s types. With
    /// `reclaims`, an insert that finds its shard full drops the shard's idle keys as it
    /// rebuilds it (the default store); without, keys leave only by sweeps (the exact store).
    pub(crate) fn new<K: 'static>(max_keys: Option<usize>, reclaims: bool) -> Option<Self> {
        let ints = GrowTable::new(max_keys, None);
        Some(IntTables {
            ints: if reclaims {
                ints
            } else {
                ints.keeping_idle_keys()
            },
            mix: Mix::new(),
            rest: Box::new(Rest {
                table: GrowTable::new(Some(2), Some(column::<K>()?)),
                hasher: Hasher::new(),
            }),
        })
    }

    /// `key`'s fingerprint in [`Self::ints`]; `None` for a key kept in [`Self::rest`].
    #[inline(always)]
    pub(crate) fn fingerprint<Q: Hash + ?Sized>(&self, key: &Q) -> Option<u64> {
        let h = self.mix.hash_one(key);
        (h >= 2).then_some(h)
    }

    /// Keys held.
    pub(crate) fn len(&self) -> usize {
        self.ints.len() + self.rest.table.len()
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn the_mix_is_undone_and_keyed() {
        let (a, b) = (Mix::new(), Mix::new());
        for x in [0, 1, 2, 42, u64::MAX, 1 << 63, 0x0123_4567_89ab_cdef] {
            assert_eq!(a.unmix(a.mix(x)), x);
            assert_eq!(a.mix(a.unmix(x)), x);
        }
        assert_ne!(
            (a.mix(1), a.mix(2)),
            (b.mix(1), b.mix(2)),
            "two instances, one key"
        );
    }

    #[test]
    fn only_whole_integer_keys_take_the_mix() {
        let is_int = |c: Option<NewColumn>| c.is_some();
        assert!(is_int(column::<u64>()) && is_int(column::<i32>()) && is_int(column::<usize>()));
        assert!(!is_int(column::<u128>()) && !is_int(column::<String>()));
        assert!(!is_int(column::<(u32, u32)>()) && !is_int(column::<std::net::Ipv4Addr>()));
    }

    #[test]
    fn an_integer_hashes_as_its_mix() {
        let tables = IntTables::new::<u64>(None, false).expect("an integer type");
        for x in [5u64, 1 << 40] {
            let h = tables.mix.mix(x);
            assert_eq!(tables.fingerprint(&x), (h >= 2).then_some(h));
            assert_eq!(tables.fingerprint(&(x as i64)), (h >= 2).then_some(h));
        }
        let zero = tables.mix.unmix(0);
        assert_eq!(tables.fingerprint(&zero), None);
        assert_eq!(tables.fingerprint(&tables.mix.unmix(1)), None);
        assert_eq!(tables.fingerprint(&tables.mix.unmix(2)), Some(2));
        // u32's Hash writes one u32: the mix of its value.
        assert_eq!(
            tables.fingerprint(&7u32),
            Some(tables.mix.mix(7)).filter(|h| *h >= 2)
        );
    }
}
