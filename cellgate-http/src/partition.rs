//! The partition key's hash: SipHash-2-4 (Aumasson and Bernstein) under a 128-bit secret, so
//! that the `pk` parameter names a partition without giving its key away.

use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hash, Hasher};

/// The secret a limit's partition keys are hashed under.
#[derive(Clone, Copy)]
pub(crate) struct PartitionSecret {
    k0: u64,
    k1: u64,
}

impl PartitionSecret {
    /// A secret from the operating system's randomness (through std's `RandomState`, whose
    /// keys are drawn from it; two of its hashes give 128 unpredictable bits).
    pub(crate) fn random() -> Self {
        let s = RandomState::new();
        Self {
            k0: s.hash_one(0u64),
            k1: s.hash_one(1u64),
        }
    }

    /// The secret given as 16 bytes (little-endian halves, as SipHash's key).
    pub(crate) fn from_bytes(b: [u8; 16]) -> Self {
        let [k0, k1] = [0, 8].map(|i| {
            let mut half = [0u8; 8];
            half.copy_from_slice(&b[i..i + 8]);
            u64::from_le_bytes(half)
        });
        Self { k0, k1 }
    }

    /// `key` hashed under the secret: what `key.hash` writes, through SipHash-2-4.
    pub(crate) fn hash_one<K: Hash + ?Sized>(&self, key: &K) -> u64 {
        let mut h = SipHasher24::new(self.k0, self.k1);
        key.hash(&mut h);
        h.finish()
    }
}

/// SipHash-2-4 over a stream of bytes.
struct SipHasher24 {
    v: [u64; 4],
    /// Bytes of the current word not yet compressed, low byte first.
    tail: u64,
    tail_len: u32,
    len: u64,
}

impl SipHasher24 {
    fn new(k0: u64, k1: u64) -> Self {
        Self {
            v: [
                k0 ^ 0x736f_6d65_7073_6575,
                k1 ^ 0x646f_7261_6e64_6f6d,
                k0 ^ 0x6c79_6765_6e65_7261,
                k1 ^ 0x7465_6462_7974_6573,
            ],
            tail: 0,
            tail_len: 0,
            len: 0,
        }
    }

    fn round(v: &mut [u64; 4]) {
        v[0] = v[0].wrapping_add(v[1]);
        v[1] = v[1].rotate_left(13) ^ v[0];
        v[0] = v[0].rotate_left(32);
        v[2] = v[2].wrapping_add(v[3]);
        v[3] = v[3].rotate_left(16) ^ v[2];
        v[0] = v[0].wrapping_add(v[3]);
        v[3] = v[3].rotate_left(21) ^ v[0];
        v[2] = v[2].wrapping_add(v[1]);
        v[1] = v[1].rotate_left(17) ^ v[2];
        v[2] = v[2].rotate_left(32);
    }

    /// Two compression rounds of the word `m`.
    fn compress(&mut self, m: u64) {
        self.v[3] ^= m;
        Self::round(&mut self.v);
        Self::round(&mut self.v);
        self.v[0] ^= m;
    }
}

impl Hasher for SipHasher24 {
    fn write(&mut self, bytes: &[u8]) {
        self.len = self.len.wrapping_add(bytes.len() as u64);
        for &b in bytes {
            self.tail |= u64::from(b) << (8 * self.tail_len);
            self.tail_len += 1;
            if self.tail_len == 8 {
                let m = self.tail;
                self.compress(m);
                self.tail = 0;
                self.tail_len = 0;
            }
        }
    }

    fn finish(&self) -> u64 {
        let mut s = Self {
            v: self.v,
            tail: 0,
            tail_len: 0,
            len: 0,
        };
        s.compress(self.tail | (self.len << 56));
        s.v[2] ^= 0xff;
        for _ in 0..4 {
            Self::round(&mut s.v);
        }
        s.v[0] ^ s.v[1] ^ s.v[2] ^ s.v[3]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// The key of the paper's test vectors: bytes 0 to 15.
    fn paper_key() -> PartitionSecret {
        PartitionSecret::from_bytes(std::array::from_fn(|i| i as u8))
    }

    fn sip(secret: &PartitionSecret, bytes: &[u8]) -> u64 {
        let mut h = SipHasher24::new(secret.k0, secret.k1);
        h.write(bytes);
        h.finish()
    }

    #[test]
    fn the_papers_test_vectors() {
        // SipHash-2-4, key 00..0f, messages 00..(n-1): the first vectors of the reference
        // implementation's vectors.h, read as little-endian words.
        let k = paper_key();
        assert_eq!(sip(&k, &[]), 0x726f_db47_dd0e_0e31);
        assert_eq!(sip(&k, &[0]), 0x74f8_39c5_93dc_67fd);
        let fifteen: Vec<u8> = (0..15).collect();
        assert_eq!(sip(&k, &fifteen), 0xa129_ca61_49be_45e5);
    }

    proptest! {
        #[test]
        fn agrees_with_std_siphasher(k0: u64, k1: u64, chunks: Vec<Vec<u8>>, n: u64, s: String) {
            // std keeps SipHash-2-4 as the deprecated `SipHasher`: the same function, fed the
            // same writes in the same pieces.
            #[allow(deprecated)]
            let mut reference = std::hash::SipHasher::new_with_keys(k0, k1);
            let mut ours = SipHasher24::new(k0, k1);
            for c in &chunks {
                reference.write(c);
                ours.write(c);
            }
            n.hash(&mut reference);
            n.hash(&mut ours);
            s.hash(&mut reference);
            s.hash(&mut ours);
            prop_assert_eq!(ours.finish(), reference.finish());
        }
    }

    #[test]
    fn different_secrets_give_different_values() {
        let a = PartitionSecret::from_bytes([1; 16]);
        assert_eq!(a.hash_one("u1"), a.hash_one("u1"));
        assert_ne!(a.hash_one("u1"), a.hash_one("u2"));
        assert_ne!(
            a.hash_one("u1"),
            PartitionSecret::from_bytes([2; 16]).hash_one("u1")
        );
        let (r1, r2) = (PartitionSecret::random(), PartitionSecret::random());
        assert_ne!((r1.k0, r1.k1), (r2.k0, r2.k1));
    }
}
