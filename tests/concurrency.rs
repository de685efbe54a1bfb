//! Many threads on one limiter, with a frozen `ManualClock`: no unit of capacity is ever spent
//! twice, and none is lost.
//!
//! With the clock frozen, a key admits exactly its burst, whatever the interleaving. Beyond the
//! totals, the tests check the linearisation itself: the k-th admission on a key (in the cell's
//! modification order) reports `remaining = burst - k`, so the `remaining` values of all
//! admitted unit requests must be exactly `{0, 1, ..., burst - 1}`, each once.
//!
//! Sizes are chosen for `cargo test` in debug on two cores (each test well under 5 s).

use std::sync::Barrier;
use std::time::Duration;

use crate::common::threads::{hammer, THREADS};
use cellgate::clock::ManualClock;
use cellgate::{Decision, KeyedLimiter, Limiter, Quota};

const FROZEN_AT: u64 = 1_000_000_007;

fn frozen_clock() -> ManualClock {
    let clock = ManualClock::new();
    clock.set_ns(FROZEN_AT);
    clock
}

/// What one thread saw: `remaining` of each admission, and the number of denials.
#[derive(Default)]
struct Seen {
    remaining: Vec<u32>,
    denied: u64,
}

impl Seen {
    fn record(&mut self, d: Decision, interval_ns: u64) {
        if d.is_allowed() {
            self.remaining.push(d.remaining());
        } else {
            // Frozen clock, exhausted key: the next unit is exactly one interval away.
            assert_eq!(d.retry_after_ns(), Some(interval_ns), "{d:?}");
            assert_eq!(d.remaining(), 0, "{d:?}");
            self.denied += 1;
        }
    }
}

/// Checks that the admissions are exactly one per unit of the burst.
fn assert_exactly_burst(seen: Vec<Seen>, burst: u32, attempts: u64) {
    let denied: u64 = seen.iter().map(|s| s.denied).sum();
    let mut remaining: Vec<u32> = seen.into_iter().flat_map(|s| s.remaining).collect();
    assert_eq!(
        remaining.len() as u64,
        u64::from(burst),
        "admitted total != burst"
    );
    assert_eq!(remaining.len() as u64 + denied, attempts);
    remaining.sort_unstable();
    let expected: Vec<u32> = (0..burst).collect();
    assert_eq!(
        remaining, expected,
        "each unit of the burst is spent exactly once"
    );
}

#[test]
fn keyed_one_key_admits_exactly_the_burst() {
    const ATTEMPTS: u64 = 250_000;
    const BURST: u32 = 5_000;
    // T = 1 ms.
    let quota = Quota::new(1, Duration::from_millis(1)).with_burst(BURST);
    let limiter = KeyedLimiter::<u64>::gcra(quota)
        .clock(frozen_clock())
        .build()
        .unwrap();
    let seen = hammer(|_| {
        let mut seen = Seen::default();
        for _ in 0..ATTEMPTS {
            seen.record(limiter.check(&42), 1_000_000);
        }
        seen
    });
    assert_exactly_burst(seen, BURST, ATTEMPTS * THREADS as u64);
    assert_eq!(limiter.len(), 1);
    assert!(!limiter.check(&42).is_allowed());
    assert_eq!(
        limiter.peek(&42).reset_after_ns(),
        1_000_000 * u64::from(BURST)
    );
}

#[test]
fn direct_admits_exactly_the_burst() {
    const ATTEMPTS: u64 = 250_000;
    const BURST: u32 = 5_000;
    let quota = Quota::new(1, Duration::from_millis(1)).with_burst(BURST);
    let limiter = Limiter::gcra(quota).clock(frozen_clock()).build().unwrap();
    let seen = hammer(|_| {
        let mut seen = Seen::default();
        for _ in 0..ATTEMPTS {
            seen.record(limiter.check(), 1_000_000);
        }
        seen
    });
    assert_exactly_burst(seen, BURST, ATTEMPTS * THREADS as u64);
    assert!(!limiter.check().is_allowed());
}

/// Every thread sweeps all keys (each from its own starting point, so threads meet on new keys
/// and on hot ones); each key admits exactly its burst, and every key is created exactly once.
#[test]
fn keyed_many_keys_admit_exactly_the_burst_each() {
    many_keys_admit_exactly_the_burst_each(false);
}

/// The same on the bounded lock-free fingerprint table (`max_keys`), where inserts race
/// lock-free lookups.
#[test]
fn table_many_keys_admit_exactly_the_burst_each() {
    many_keys_admit_exactly_the_burst_each(true);
}

fn many_keys_admit_exactly_the_burst_each(table: bool) {
    const KEYS: usize = 1_000;
    const ROUNDS: usize = 8;
    const BURST: u32 = 3;
    let quota = Quota::new(1, Duration::from_secs(1)).with_burst(BURST);
    let builder = KeyedLimiter::<u64>::gcra(quota).clock(frozen_clock());
    let limiter = if table {
        builder.max_keys(KEYS)
    } else {
        builder
    }
    .build()
    .unwrap();
    let per_thread = hammer(|i| {
        let mut seen: Vec<Seen> = (0..KEYS).map(|_| Seen::default()).collect();
        for round in 0..ROUNDS {
            for j in 0..KEYS {
                let key = (j + i * KEYS / THREADS + round) % KEYS;
                seen[key].record(limiter.check(&(key as u64)), 1_000_000_000);
            }
        }
        seen
    });
    // Regroup by key.
    let mut by_key: Vec<Vec<Seen>> = (0..KEYS).map(|_| Vec::new()).collect();
    for thread in per_thread {
        for (key, seen) in thread.into_iter().enumerate() {
            by_key[key].push(seen);
        }
    }
    for seen in by_key {
        assert_exactly_burst(seen, BURST, (ROUNDS * THREADS) as u64);
    }
    assert_eq!(limiter.len(), KEYS, "each key is inserted once");
}

/// A tiny deterministic generator, so each thread asks for its own mix of sizes.
fn sizes(seed: usize) -> impl Iterator<Item = u32> {
    let mut x = (seed as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    std::iter::from_fn(move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        Some(1 + (x % 7) as u32)
    })
}

/// Mixed `check_n`: the units admitted never exceed the burst, each admitted request spends a
/// disjoint range of the burst, and draining with `n = 1` afterwards spends exactly the rest.
fn mixed_sizes_then_drain(check_n: impl Fn(u32) -> Decision + Sync, burst: u32) {
    const ATTEMPTS: usize = 20_000;
    // Phase 1: mixed sizes. An admission of n with remaining r spent units [r, r + n) counted
    // from the end of the burst.
    let spans: Vec<Vec<(u32, u32)>> = hammer(|i| {
        let mut spans = Vec::new();
        for n in sizes(i).take(ATTEMPTS) {
            let d = check_n(n);
            if d.is_allowed() {
                spans.push((d.remaining(), n));
            } else {
                assert!(d.retry_after().is_some(), "n <= burst: waiting helps");
            }
        }
        spans
    });
    let mut spans: Vec<(u32, u32)> = spans.into_iter().flatten().collect();
    let mixed: u64 = spans.iter().map(|&(_, n)| u64::from(n)).sum();
    assert!(
        mixed <= u64::from(burst),
        "{mixed} units admitted > burst {burst}"
    );
    // Phase 2: everyone drains with n = 1 until denied (the clock is frozen: denied stays denied).
    let drained: Vec<Vec<(u32, u32)>> = hammer(|_| {
        let mut spans = Vec::new();
        loop {
            let d = check_n(1);
            if !d.is_allowed() {
                break spans;
            }
            spans.push((d.remaining(), 1));
        }
    });
    spans.extend(drained.into_iter().flatten());
    let total: u64 = spans.iter().map(|&(_, n)| u64::from(n)).sum();
    assert_eq!(total, u64::from(burst), "mixed {mixed} + drained != burst");
    // The spans tile [0, burst) exactly: sorted by `remaining`, each starts where the last ended.
    spans.sort_unstable();
    let mut next = 0u32;
    for (r, n) in spans {
        assert_eq!(r, next, "overlapping or missing units");
        next = r + n;
    }
    assert_eq!(next, burst);
}

#[test]
fn keyed_mixed_check_n_never_exceeds_the_burst() {
    const BURST: u32 = 20_000;
    let quota = Quota::new(1, Duration::from_millis(1)).with_burst(BURST);
    let limiter = KeyedLimiter::<u64>::gcra(quota)
        .clock(frozen_clock())
        .build()
        .unwrap();
    mixed_sizes_then_drain(|n| limiter.check_n(&7, n), BURST);
    assert_eq!(limiter.len(), 1);
}

#[test]
fn direct_mixed_check_n_never_exceeds_the_burst() {
    const BURST: u32 = 20_000;
    let quota = Quota::new(1, Duration::from_millis(1)).with_burst(BURST);
    let limiter = Limiter::gcra(quota).clock(frozen_clock()).build().unwrap();
    mixed_sizes_then_drain(|n| limiter.check_n(n), BURST);
}

/// With `max_keys`, concurrent insertion of distinct keys may overshoot the cap by at most
/// `THREADS - 1`: a thread checks the count before inserting, so at most one insertion per
/// thread can be in flight past a check that saw room (the builder documents "at most the
/// number of threads inserting at the same moment"). Under `DenyNew` every new key that is not
/// admitted is counted in `refused()`, and keys already held are not affected by the cap.
#[test]
fn max_keys_bounds_concurrent_insertion() {
    const MAX_KEYS: usize = 100;
    const PER_THREAD: u64 = 2_000;
    let quota = Quota::new(1, Duration::from_secs(1)).with_burst(2);
    let limiter = KeyedLimiter::<u64>::gcra(quota)
        .clock(frozen_clock())
        .max_keys(MAX_KEYS)
        .when_full(cellgate::WhenFull::DenyNew)
        .build()
        .unwrap();
    let admitted_keys: Vec<Vec<u64>> = hammer(|i| {
        let mut admitted = Vec::new();
        for j in 0..PER_THREAD {
            let key = i as u64 * PER_THREAD + j;
            let d = limiter.check(&key);
            if d.is_allowed() {
                admitted.push(key);
            } else {
                // Refused for lack of room: nothing to wait for, nothing left.
                assert_eq!(d.retry_after(), None, "{d:?}");
                assert_eq!(d.remaining(), 0, "{d:?}");
            }
        }
        admitted
    });
    let admitted: Vec<u64> = admitted_keys.into_iter().flatten().collect();
    let attempts = PER_THREAD * THREADS as u64;
    assert_eq!(
        limiter.len(),
        admitted.len(),
        "every admission inserted one key"
    );
    assert!(
        limiter.len() >= MAX_KEYS,
        "the map fills up before refusing"
    );
    assert!(
        limiter.len() < MAX_KEYS + THREADS,
        "{} keys held with max_keys {MAX_KEYS} and {THREADS} threads",
        limiter.len()
    );
    assert_eq!(limiter.stats().refused, attempts - admitted.len() as u64);
    // Keys already held keep their own budget (burst 2: one more each).
    for key in &admitted {
        assert!(limiter.check(key).is_allowed(), "held key {key} refused");
    }
    // A new key is still refused, and counted.
    let before = limiter.stats().refused;
    assert!(!limiter.check(&u64::MAX).is_allowed());
    assert_eq!(limiter.stats().refused, before + 1);
}

/// Eviction racing checks: keys are idle (equivalent to fresh) when the race starts, a sweeper
/// evicts idle keys in a loop while the checkers spend them. An admission written into a cell
/// that a sweep had already removed would be lost, and the key would then admit more than its
/// burst; every key must admit exactly its burst.
fn eviction_racing_checks_loses_no_admission(table: bool) {
    const KEYS: u64 = 64;
    const BURST: u32 = 4;
    const WORKERS: u64 = 2;
    let clock = ManualClock::new();
    let quota = Quota::new(1, Duration::from_secs(1)).with_burst(BURST);
    let builder = KeyedLimiter::<u64>::gcra(quota).clock(clock.clone());
    let limiter = if table {
        builder.max_keys(KEYS as usize * 2)
    } else {
        builder
    }
    .build()
    .unwrap();
    for round in 0..300u64 {
        // Every key was used once a second ago, so it is idle now and may be evicted at any
        // moment; each key has exactly BURST units available at this instant.
        clock.set_ns(round * 10_000_000_000);
        for key in 0..KEYS {
            limiter.check(&key);
        }
        clock.set_ns(round * 10_000_000_000 + 1_000_000_000);
        let done = std::sync::atomic::AtomicBool::new(false);
        let start = Barrier::new(WORKERS as usize + 1);
        let admitted: Vec<u64> = std::thread::scope(|s| {
            s.spawn(|| {
                start.wait();
                while !done.load(std::sync::atomic::Ordering::Relaxed) {
                    limiter.evict_idle();
                }
            });
            let workers: Vec<_> = (0..WORKERS)
                .map(|t| {
                    let (limiter, start) = (&limiter, &start);
                    s.spawn(move || {
                        start.wait();
                        let mut counts = vec![0u64; KEYS as usize];
                        for i in 0..(KEYS * 8) {
                            let key = (i * 7 + t * 13) % KEYS;
                            if limiter.check(&key).is_allowed() {
                                counts[key as usize] += 1;
                            }
                        }
                        counts
                    })
                })
                .collect();
            let per: Vec<Vec<u64>> = workers.into_iter().map(|w| w.join().unwrap()).collect();
            done.store(true, std::sync::atomic::Ordering::Relaxed);
            (0..KEYS as usize)
                .map(|k| per.iter().map(|c| c[k]).sum())
                .collect()
        });
        for (key, &n) in admitted.iter().enumerate() {
            assert_eq!(
                n,
                u64::from(BURST),
                "round {round}: key {key} (table: {table})"
            );
        }
    }
}

#[test]
fn map_eviction_racing_checks_loses_no_admission() {
    eviction_racing_checks_loses_no_admission(false);
}

#[test]
fn table_eviction_racing_checks_loses_no_admission() {
    eviction_racing_checks_loses_no_admission(true);
}
