//! Reproducible keys for the measuring programs and the benchmarks (included with `#[path]`:
//! `benches/keyed.rs`, `benches/gcra.rs`, `benches/algorithms.rs`, `probe`, `throughput`), so
//! that every figure is taken over the same keys in the same order.

// Each program uses what it needs.
#![allow(dead_code)]

/// The one key of the single-key (`hot`) benchmarks of `benches/gcra.rs` and
/// `benches/algorithms.rs`.
pub const HOT: u64 = 0xDEAD_BEEF;
/// The keys of their `1k` benchmarks: `0..KEYS_1K`, each checked in turn.
pub const KEYS_1K: u64 = 1_000;

/// splitmix64: a bijection on `u64`, so distinct inputs give distinct keys.
pub fn splitmix64(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// A fixed-seed Fisher-Yates shuffle (reproducible from run to run).
pub fn shuffle<T>(v: &mut [T], seed: u64) {
    let mut state = seed;
    for i in (1..v.len()).rev() {
        state = state.wrapping_add(1);
        let j = (splitmix64(state) % (i as u64 + 1)) as usize;
        v.swap(i, j);
    }
}

/// `n` distinct `u64` keys (`splitmix64(i)`), in a shuffled order.
pub fn u64_keys(n: usize, seed: u64) -> Vec<u64> {
    let mut keys: Vec<u64> = (0..n as u64).map(splitmix64).collect();
    shuffle(&mut keys, seed);
    keys
}
