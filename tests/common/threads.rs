//! Many threads on one limiter: the thread harness, and the checks that no unit is spent twice
//! or lost, shared by the algorithm test files.

use std::sync::Barrier;

use cellgate::Decision;

/// Threads released together by [`hammer`].
pub const THREADS: usize = 8;

/// Checks per thread: enough to contend, small enough for a debug build on two cores.
pub const ATTEMPTS: usize = if cfg!(debug_assertions) {
    50_000
} else {
    125_000
};

/// Runs `f(thread_index)` on [`THREADS`] threads released together; returns their results.
pub fn hammer<R: Send>(f: impl Fn(usize) -> R + Sync) -> Vec<R> {
    let barrier = Barrier::new(THREADS);
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..THREADS)
            .map(|i| {
                let (f, barrier) = (&f, &barrier);
                s.spawn(move || {
                    barrier.wait();
                    f(i)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    })
}

/// Runs [`ATTEMPTS`] unit checks on every thread, `check(thread)` choosing the key; returns the
/// `remaining` of every admission, per key (`key(thread)`), sorted.
pub fn admitted_remainings(
    keys: usize,
    key: impl Fn(usize) -> usize + Sync,
    check: impl Fn(usize) -> Decision + Sync,
) -> Vec<Vec<u32>> {
    let mut per_key = vec![Vec::new(); keys];
    for (k, r) in hammer(|i| {
        let r: Vec<u32> = (0..ATTEMPTS)
            .map(|_| check(i))
            .filter(Decision::is_allowed)
            .map(|d| d.remaining())
            .collect();
        (key(i), r)
    }) {
        per_key[k].extend(r);
    }
    for r in &mut per_key {
        r.sort_unstable();
    }
    per_key
}

/// The k-th admission (in the cell's order) leaves `limit - k`: the admissions' `remaining`
/// values are exactly `0..limit`, each once.
pub fn assert_exactly_the_limit(remainings: &[u32], limit: u32, what: &str) {
    assert_eq!(remainings.len(), limit as usize, "admitted units: {what}");
    assert!(remainings.iter().copied().eq(0..limit), "{what}");
}

/// Checks of mixed sizes `n = (thread + j) % sizes` (so `n = 0` too) from every thread, on one
/// cell; returns the units admitted.
pub fn admitted_units(
    sizes: usize,
    attempts: usize,
    check_n: impl Fn(u32) -> Decision + Sync,
) -> u64 {
    hammer(|i| {
        (0..attempts)
            .map(|j| {
                let n = ((i + j) % sizes) as u32;
                u64::from(n) * u64::from(check_n(n).is_allowed())
            })
            .sum::<u64>()
    })
    .into_iter()
    .sum()
}

/// Threads racing to create the same new keys: in each of `rounds` rounds, every thread waits
/// at a spinning barrier and then all check the same `batch` new keys in the same order, so
/// that they miss the same key at nearly the same instant and race to insert it. One thread
/// per core (at least 2), since spinning threads must not wait for a core. Returns the number
/// of admissions.
pub fn race_on_new_keys(rounds: u32, batch: u32, check: impl Fn(u32) -> bool + Sync) -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    let threads = std::thread::available_parallelism().map_or(2, |n| n.get().clamp(2, 8));
    let arrived = AtomicU64::new(0);
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|i| {
                let (check, arrived) = (&check, &arrived);
                s.spawn(move || {
                    let mut admitted = 0u64;
                    let mut jitter = 0x9E37_79B9_7F4A_7C15u64.wrapping_mul(i as u64 + 1);
                    for r in 0..rounds {
                        // A monotonic counter barrier: round r starts once every thread has
                        // arrived at it.
                        arrived.fetch_add(1, Ordering::AcqRel);
                        let target = (u64::from(r) + 1) * threads as u64;
                        let mut spins = 0u32;
                        while arrived.load(Ordering::Acquire) < target {
                            spins += 1;
                            if spins % 1024 == 0 {
                                std::thread::yield_now();
                            } else {
                                std::hint::spin_loop();
                            }
                        }
                        // The last thread to arrive would always start first: a small random
                        // delay (xorshift) lets every thread be first, and often tie.
                        jitter ^= jitter << 13;
                        jitter ^= jitter >> 7;
                        jitter ^= jitter << 17;
                        for _ in 0..jitter % 48 {
                            std::hint::spin_loop();
                        }
                        for key in r * batch..(r + 1) * batch {
                            admitted += u64::from(check(key));
                        }
                    }
                    admitted
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).sum()
    })
}
