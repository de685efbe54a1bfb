//! Keyed GCRA checks at scale: cellgate's two stores and governor side by side, same run.
//!
//! ```sh
//! cargo bench --bench keyed                    # everything, about 3-4 minutes on 2 cores
//! cargo bench --bench keyed -- keyed_1m        # only groups whose name contains "keyed_1m"
//! cargo bench --bench keyed -- --quick         # criterion's quick mode
//! ```
//!
//! Every group but `keyed_1m_random_batch` (see its row) has the same entries, doing the same
//! work, one check per iteration, each result passed to `black_box`. All single-threaded (see
//! `examples/measure/throughput.rs` for threads):
//!
//! | entry | what |
//! |---|---|
//! | `cellgate_table` | `KeyedLimiter::<K>::gcra(q).max_keys(n)`: the default store (the growing lock-free fingerprint table) with a ceiling of `n` = the keys the group uses |
//! | `cellgate_fixed` | (`insert_new_key` only) the same with `fixed_capacity()`: the fixed-capacity table, allocated for `n` at build |
//! | `cellgate_map` | `KeyedLimiter::<K>::gcra(q).exact_keys()`: the exact store (the growing table with each key kept beside its slot) |
//! | `governor` | `RateLimiter::keyed(q)` (dashmap, std `RandomState`), or `dashmap_with_clock` for the manual clock |
//!
//! | group | keys | clock |
//! |---|---|---|
//! | `keyed_1k_hot` | 1000 pre-inserted `u64` keys, cycled in a fixed shuffled order | each library's default (quanta) |
//! | `keyed_1k_hot_manual_clock` | the same | `ManualClock` / `FakeRelativeClock`, advanced 1 µs every 1024 checks: the clock read is one atomic load, so this separates clock cost |
//! | `keyed_1k_hot_coarse_clock` | the same; `cellgate_table` (the table) and `governor_upkeep` (governor's dashmap) | `CoarseClock` / `QuantaUpkeepClock`, both refreshed every 1 ms |
//! | `keyed_1m_random` | 1M pre-inserted `u64` keys, in a precomputed random permutation (no PRNG in the loop) | default |
//! | `keyed_1m_random_batch` | the same keys, 64 checks per iteration: `cellgate_table_check_many_16` / `_64` (`check_many` in batches of 16 / 64), `cellgate_table` (`check` on each key) and `governor` (`check_key` on each key) | default |
//! | `insert_new_key` | every check is the first for its key: 1M distinct keys per limiter, a fresh limiter (built and dropped outside the timing) whenever one is used up; the figure is the mean over fill levels 0 to 1M keys | default |
//! | `string_keys_1m` | 1M pre-inserted `String` keys of 16 to 32 bytes, random permutation; cellgate looks up by `&str`, governor by `&String` (its API) | default |
//! | `hardware_floor` | no limiter: the least work any keyed check must do, as lower bounds for the rows above (see below) | quanta where said |
//! | `direct_coarse` | no key: `Limiter` + `CoarseClock` (`cellgate_coarse`) against governor's direct limiter + `QuantaUpkeepClock` at 1 ms (`governor_upkeep`) | coarse |
//!
//! `hardware_floor` entries, each one iteration per access, indices precomputed (no hash, no
//! probe, no decision): `clock_cas8_1k` / `clock_cas16_1k`: a quanta clock read, then a load and
//! a compare-and-swap of one of 1000 8-byte (`AtomicU64`) / 16-byte (portable-atomic's
//! `AtomicU128`, as in the table) cells, in a shuffled order; `cas8_21mb` / `cas16_21mb`: a load
//! and a compare-and-swap at a random index of a 21 MB array of such cells (the size of the
//! table's slots for 1M keys), no clock. A keyed check of a hot key does at least the first; a
//! check of one of 1M keys, or the insert of a new one, at least the second.
//!
//! Quota, everywhere: one unit per 1000 s with a burst of 10 million, so that practically every
//! check is allowed (the path that writes), also with a coarse clock that stands still for a
//! millisecond, and every key stays live for the whole run (no store may reclaim it). Keys are `splitmix64(i)`: distinct, scattered `u64`s. Each
//! library uses its own default hasher (cellgate: aHash keyed randomly per process; governor: std's
//! SipHash `RandomState`): what a user of either gets. The 1M-key limiters are built once per
//! entry, outside the timing, and dropped before the next is built.

#[path = "../examples/measure/keys.rs"]
mod keys;

use std::hint::black_box;
use std::num::NonZeroU32;
use std::time::{Duration, Instant};

use criterion::measurement::WallTime;
use criterion::{criterion_group, criterion_main, BenchmarkGroup, Criterion, Throughput};

use cellgate::clock::{CoarseClock, ManualClock};
use cellgate::{KeyedLimiter, Limiter, Quota};
use governor::clock::{FakeRelativeClock, QuantaUpkeepClock};
use governor::RateLimiter;
use keys::{shuffle, splitmix64, u64_keys};

/// One unit per 1000 s: a key stays live (its state not equivalent to a fresh one) for at least
/// that long after a check, so that no store may reclaim it during a run, and every group
/// measures hits or inserts, never re-inserts of reclaimed keys.
const INTERVAL: Duration = Duration::from_secs(1_000);
/// Large enough that a clock standing still for 1 ms (coarse) still allows every check.
const BURST: u32 = 10_000_000;
const HOT_KEYS: usize = 1_000;
const MANY_KEYS: usize = 1_000_000;
/// The manual clock moves by `MANUAL_STEP` every `MANUAL_EVERY` checks.
const MANUAL_EVERY: usize = 1024;
const MANUAL_STEP: Duration = Duration::from_micros(1);

fn cellgate_quota() -> Quota {
    Quota::new(BURST, INTERVAL * BURST).with_burst(BURST)
}

fn governor_quota() -> governor::Quota {
    let nz = |v| NonZeroU32::new(v).expect("non-zero constant");
    governor::Quota::with_period(INTERVAL)
        .expect("non-zero interval")
        .allow_burst(nz(BURST))
}

/// `n` distinct `String` keys of 16 to 32 hex digits.
fn string_keys(n: usize) -> Vec<String> {
    (0..n as u64)
        .map(|i| {
            let (a, b) = (splitmix64(i), splitmix64(i ^ 0xA5A5_A5A5_0000_0000));
            let len = 16 + (b % 17) as usize;
            // The first 16 digits are a bijection of `i`: distinct keys whatever the length.
            let mut s = format!("{a:016x}{b:016x}");
            s.truncate(len);
            s
        })
        .collect()
}

fn configure<'a>(c: &'a mut Criterion, name: &str) -> BenchmarkGroup<'a, WallTime> {
    let mut g = c.benchmark_group(name);
    g.throughput(Throughput::Elements(1));
    g.warm_up_time(Duration::from_secs(1));
    g.measurement_time(Duration::from_secs(3));
    g
}

/// Benches `check` over `keys`, cycling through them in order.
fn cycle<K, R>(
    g: &mut BenchmarkGroup<'_, WallTime>,
    name: &str,
    keys: &[K],
    check: impl Fn(&K) -> R,
) {
    let mut i = 0;
    g.bench_function(name, |b| {
        b.iter(|| {
            let k = &keys[i];
            i += 1;
            if i == keys.len() {
                i = 0;
            }
            black_box(check(black_box(k)))
        })
    });
}

fn keyed_1k_hot(c: &mut Criterion) {
    let mut g = configure(c, "keyed_1k_hot");
    let keys = u64_keys(HOT_KEYS, 1);

    let table = KeyedLimiter::<u64>::gcra(cellgate_quota())
        .max_keys(HOT_KEYS)
        .build()
        .expect("valid quota");
    let map = KeyedLimiter::<u64>::gcra(cellgate_quota())
        .exact_keys()
        .build()
        .expect("valid quota");
    let gov = RateLimiter::keyed(governor_quota());
    for k in &keys {
        assert!(table.check(k).is_allowed() && map.check(k).is_allowed());
        assert!(gov.check_key(k).is_ok());
    }
    assert_eq!(
        (table.len(), map.len(), gov.len()),
        (HOT_KEYS, HOT_KEYS, HOT_KEYS)
    );

    cycle(&mut g, "cellgate_table", &keys, |k| table.check(k));
    cycle(&mut g, "cellgate_map", &keys, |k| map.check(k));
    cycle(&mut g, "governor", &keys, |k| gov.check_key(k));
    g.finish();
}

fn keyed_1k_hot_manual_clock(c: &mut Criterion) {
    let mut g = configure(c, "keyed_1k_hot_manual_clock");
    let keys = u64_keys(HOT_KEYS, 1);

    // Cycling with a clock step: same loop as `cycle`, plus one clock advance per 1024 checks.
    macro_rules! bench {
        ($name:expr, $clock:expr, $check:expr) => {{
            let clock = $clock;
            let check = $check;
            let (mut i, mut n) = (0, 0);
            g.bench_function($name, |b| {
                b.iter(|| {
                    let k = &keys[i];
                    i += 1;
                    if i == keys.len() {
                        i = 0;
                    }
                    n += 1;
                    if n == MANUAL_EVERY {
                        n = 0;
                        clock.advance(MANUAL_STEP);
                    }
                    black_box(check(black_box(k)))
                })
            });
        }};
    }

    let clock = ManualClock::new();
    let table = KeyedLimiter::<u64>::gcra(cellgate_quota())
        .clock(clock.clone())
        .max_keys(HOT_KEYS)
        .build()
        .expect("valid quota");
    keys.iter()
        .for_each(|k| assert!(table.check(k).is_allowed()));
    bench!("cellgate_table", &clock, |k: &u64| table.check(k));

    let clock = ManualClock::new();
    let map = KeyedLimiter::<u64>::gcra(cellgate_quota())
        .clock(clock.clone())
        .exact_keys()
        .build()
        .expect("valid quota");
    keys.iter().for_each(|k| assert!(map.check(k).is_allowed()));
    bench!("cellgate_map", &clock, |k: &u64| map.check(k));

    let clock = FakeRelativeClock::default();
    let gov = RateLimiter::dashmap_with_clock(governor_quota(), clock.clone());
    keys.iter().for_each(|k| assert!(gov.check_key(k).is_ok()));
    bench!("governor", &clock, |k: &u64| gov.check_key(k));
    g.finish();
}

/// A bounded table holding every key of `inserted` (each admitted once).
fn filled_table(inserted: &[u64]) -> KeyedLimiter<u64> {
    let table = KeyedLimiter::<u64>::gcra(cellgate_quota())
        .max_keys(inserted.len())
        .build()
        .expect("valid quota");
    inserted
        .iter()
        .for_each(|k| assert!(table.check(k).is_allowed()));
    assert_eq!(table.len(), inserted.len());
    table
}

fn keyed_1m_random(c: &mut Criterion) {
    let mut g = configure(c, "keyed_1m_random");
    g.measurement_time(Duration::from_secs(4));
    // Insertion order and probe order differ, so probes do not follow the insertion order.
    let inserted = u64_keys(MANY_KEYS, 2);
    let probes = u64_keys(MANY_KEYS, 3);

    {
        let table = filled_table(&inserted);
        cycle(&mut g, "cellgate_table", &probes, |k| table.check(k));
    }
    {
        let map = KeyedLimiter::<u64>::gcra(cellgate_quota())
            .exact_keys()
            .build()
            .expect("valid quota");
        inserted
            .iter()
            .for_each(|k| assert!(map.check(k).is_allowed()));
        assert_eq!(map.len(), MANY_KEYS);
        cycle(&mut g, "cellgate_map", &probes, |k| map.check(k));
    }
    {
        let gov = RateLimiter::keyed(governor_quota());
        inserted
            .iter()
            .for_each(|k| assert!(gov.check_key(k).is_ok()));
        assert_eq!(gov.len(), MANY_KEYS);
        cycle(&mut g, "governor", &probes, |k| gov.check_key(k));
    }
    g.finish();
}

/// Checks per iteration in `keyed_1m_random_batch`, for every entry.
const BATCH_ITER: usize = 64;

/// Benches `run` on consecutive runs of `BATCH_ITER` keys from `keys`, cycling.
fn cycle_chunks<K>(
    g: &mut BenchmarkGroup<'_, WallTime>,
    name: &str,
    keys: &[K],
    mut run: impl FnMut(&[K]),
) {
    assert_eq!(keys.len() % BATCH_ITER, 0);
    let mut i = 0;
    g.bench_function(name, |b| {
        b.iter(|| {
            run(black_box(&keys[i..i + BATCH_ITER]));
            i += BATCH_ITER;
            if i == keys.len() {
                i = 0;
            }
        })
    });
}

/// `keyed_1m_random` in groups of 64 checks: `check_many` in batches of 16 and 64 beside the
/// same keys checked one by one (cellgate's `check`, governor's `check_key`). Every entry does
/// 64 checks per iteration; the throughput is in checks.
fn keyed_1m_random_batch(c: &mut Criterion) {
    let mut g = configure(c, "keyed_1m_random_batch");
    g.throughput(Throughput::Elements(BATCH_ITER as u64));
    g.measurement_time(Duration::from_secs(4));
    let inserted = u64_keys(MANY_KEYS, 2);
    let probes = u64_keys(MANY_KEYS, 3);

    {
        let table = filled_table(&inserted);
        let mut out = Vec::with_capacity(BATCH_ITER);
        for batch in [16, 64] {
            cycle_chunks(
                &mut g,
                &format!("cellgate_table_check_many_{batch}"),
                &probes,
                |keys| {
                    for part in keys.chunks(batch) {
                        out.clear();
                        table.check_many(part, &mut out);
                        black_box(&out);
                    }
                },
            );
        }
        cycle_chunks(&mut g, "cellgate_table", &probes, |keys| {
            for k in keys {
                black_box(table.check(black_box(k)));
            }
        });
    }
    {
        let gov = RateLimiter::keyed(governor_quota());
        inserted
            .iter()
            .for_each(|k| assert!(gov.check_key(k).is_ok()));
        assert_eq!(gov.len(), MANY_KEYS);
        cycle_chunks(&mut g, "governor", &probes, |keys| {
            for k in keys {
                let _ = black_box(gov.check_key(black_box(k)));
            }
        });
    }
    g.finish();
}

/// Times `check` on never-seen keys: walks `keys` through a limiter from `build`, and builds a
/// fresh one (untimed; the old one is dropped untimed too) each time all keys have been used.
fn inserts<L, R>(
    g: &mut BenchmarkGroup<'_, WallTime>,
    name: &str,
    keys: &[u64],
    build: impl Fn() -> L,
    check: impl Fn(&L, &u64) -> R,
    len: impl Fn(&L) -> usize,
) {
    let mut limiter: Option<L> = None;
    let mut next = 0usize;
    g.bench_function(name, |b| {
        b.iter_custom(|iters| {
            let mut timed = Duration::ZERO;
            let mut left = iters;
            while left > 0 {
                if next == keys.len() || limiter.is_none() {
                    if let Some(old) = limiter.take() {
                        assert_eq!(len(&old), keys.len(), "every new key was stored");
                    }
                    limiter = Some(build());
                    next = 0;
                }
                let l = limiter.as_ref().expect("built above");
                let take = left.min((keys.len() - next) as u64) as usize;
                let start = Instant::now();
                for k in &keys[next..next + take] {
                    black_box(check(l, black_box(k)));
                }
                timed += start.elapsed();
                next += take;
                left -= take as u64;
            }
            timed
        })
    });
}

fn insert_new_key(c: &mut Criterion) {
    let mut g = configure(c, "insert_new_key");
    g.sample_size(30);
    let keys = u64_keys(MANY_KEYS, 4);

    // The three stores: the growing table (with a ceiling), the fixed table, the exact map.
    type Builder = cellgate::KeyedLimiterBuilder<u64, cellgate::clock::DefaultClock>;
    type Store = fn(Builder) -> Builder;
    let stores: [(&str, Store); 3] = [
        ("cellgate_table", |b| b.max_keys(MANY_KEYS)),
        ("cellgate_fixed", |b| b.max_keys(MANY_KEYS).fixed_capacity()),
        ("cellgate_map", |b| b.exact_keys()),
    ];
    for (name, store) in stores {
        inserts(
            &mut g,
            name,
            &keys,
            || {
                store(KeyedLimiter::<u64>::gcra(cellgate_quota()))
                    .build()
                    .expect("valid quota")
            },
            |l, k| l.check(k),
            |l| l.len(),
        );
    }
    inserts(
        &mut g,
        "governor",
        &keys,
        || RateLimiter::keyed(governor_quota()),
        |l, k| l.check_key(k),
        |l| l.len(),
    );
    g.finish();
}

fn string_keys_1m(c: &mut Criterion) {
    let mut g = configure(c, "string_keys_1m");
    g.measurement_time(Duration::from_secs(4));
    let keys = string_keys(MANY_KEYS);
    // The probes are copies allocated in probe order, as request buffers would be: the key's
    // bytes are cheap to reach, the limiter's lookup is what is measured.
    let mut order: Vec<usize> = (0..MANY_KEYS).collect();
    shuffle(&mut order, 5);
    let probes: Vec<String> = order.iter().map(|&i| keys[i].clone()).collect();

    {
        let table = KeyedLimiter::<String>::gcra(cellgate_quota())
            .max_keys(MANY_KEYS)
            .build()
            .expect("valid quota");
        keys.iter()
            .for_each(|k| assert!(table.check(k.as_str()).is_allowed()));
        assert_eq!(table.len(), MANY_KEYS);
        cycle(&mut g, "cellgate_table", &probes, |k| {
            table.check(k.as_str())
        });
    }
    {
        let map = KeyedLimiter::<String>::gcra(cellgate_quota())
            .exact_keys()
            .build()
            .expect("valid quota");
        keys.iter()
            .for_each(|k| assert!(map.check(k.as_str()).is_allowed()));
        assert_eq!(map.len(), MANY_KEYS);
        cycle(&mut g, "cellgate_map", &probes, |k| map.check(k.as_str()));
    }
    {
        let gov = RateLimiter::keyed(governor_quota());
        keys.iter().for_each(|k| assert!(gov.check_key(k).is_ok()));
        assert_eq!(gov.len(), MANY_KEYS);
        cycle(&mut g, "governor", &probes, |k: &String| gov.check_key(k));
    }
    g.finish();
}

fn direct_coarse(c: &mut Criterion) {
    let mut g = configure(c, "direct_coarse");

    {
        let limiter = Limiter::gcra(cellgate_quota())
            .clock(CoarseClock::new())
            .build()
            .expect("valid quota");
        g.bench_function("cellgate_coarse", |b| b.iter(|| black_box(limiter.check())));
    }
    // governor's coarse clock runs quanta's upkeep thread (one per process at a time); it is
    // independent of cellgate's, which is stopped above anyway.
    match QuantaUpkeepClock::from_interval(Duration::from_millis(1)) {
        Ok(clock) => {
            let limiter = RateLimiter::direct_with_clock(governor_quota(), clock);
            g.bench_function("governor_upkeep", |b| b.iter(|| black_box(limiter.check())));
        }
        Err(e) => eprintln!("skipping direct_coarse/governor_upkeep: {e}"),
    }
    g.finish();
}

/// The 1k-hot-keys workload with both libraries on their coarse clocks (cellgate's
/// `CoarseClock`, governor's `QuantaUpkeepClock`, both refreshed every millisecond): the cost of
/// a keyed check without a time-stamp-counter read. A stale (earlier) `now` only makes a
/// decision stricter; with this group's quota (burst 10^7) every check is still admitted.
fn keyed_1k_hot_coarse_clock(c: &mut Criterion) {
    let mut g = configure(c, "keyed_1k_hot_coarse_clock");
    let keys = u64_keys(HOT_KEYS, 1);
    {
        let table = KeyedLimiter::<u64>::gcra(cellgate_quota())
            .clock(CoarseClock::new())
            .max_keys(HOT_KEYS)
            .build()
            .expect("valid quota");
        keys.iter()
            .for_each(|k| assert!(table.check(k).is_allowed()));
        cycle(&mut g, "cellgate_table", &keys, |k| table.check(k));
    }
    match QuantaUpkeepClock::from_interval(Duration::from_millis(1)) {
        Ok(clock) => {
            let gov = RateLimiter::dashmap_with_clock(governor_quota(), clock);
            keys.iter().for_each(|k| assert!(gov.check_key(k).is_ok()));
            cycle(&mut g, "governor_upkeep", &keys, |k| gov.check_key(k));
        }
        Err(e) => eprintln!("skipping keyed_1k_hot_coarse_clock/governor_upkeep: {e}"),
    }
    g.finish();
}

/// Like [`cycle`] over indices, but each access waits for the one before: its index depends on
/// the value the previous access read (by adding `last >> 63`, zero here since the cells hold
/// small counters, which the compiler cannot know). This is the latency of one access, where
/// [`cycle`] lets the processor overlap the misses of many.
fn chained(
    g: &mut BenchmarkGroup<'_, WallTime>,
    name: &str,
    order: &[usize],
    access: impl Fn(usize) -> u64,
) {
    let (mut k, mut last) = (0usize, 0u64);
    g.bench_function(name, |b| {
        b.iter(|| {
            let i = order[k] + (last >> 63) as usize;
            k += 1;
            if k == order.len() {
                k = 0;
            }
            last = access(black_box(i));
            black_box(last)
        })
    });
}

/// The least work of a keyed check, without a limiter (see the module docs).
fn hardware_floor(c: &mut Criterion) {
    use cellgate::clock::{Clock, QuantaClock};
    use portable_atomic::AtomicU128;
    use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

    let mut g = configure(c, "hardware_floor");
    let clock = QuantaClock::new();
    let mut hot: Vec<usize> = (0..HOT_KEYS).collect();
    shuffle(&mut hot, 1);
    // As many 16-byte cells as the 1M-key table has slots (4/3 per key).
    let cells = MANY_KEYS * 4 / 3;
    let mut random: Vec<usize> = (0..cells).collect();
    shuffle(&mut random, 2);
    random.truncate(MANY_KEYS);

    let c8: Vec<AtomicU64> = (0..cells * 2).map(|_| AtomicU64::new(0)).collect();
    let c16: Vec<AtomicU128> = (0..cells).map(|_| AtomicU128::new(0)).collect();
    // Each access: read the cell and write a larger value, as an admitted check does; returns
    // the value read.
    let cas8 = |cell: &AtomicU64, now: u64| {
        let seen = cell.load(Relaxed);
        let _ = cell.compare_exchange(seen, seen.max(now) + 1, Relaxed, Relaxed);
        seen
    };
    let cas16 = |cell: &AtomicU128, now: u64| {
        let seen = cell.load(Relaxed);
        let _ = cell.compare_exchange(seen, seen.max(u128::from(now)) + 1, Relaxed, Relaxed);
        seen as u64
    };
    cycle(&mut g, "clock_cas8_1k", &hot, |&i| {
        cas8(&c8[2 * i], clock.now())
    });
    cycle(&mut g, "clock_cas16_1k", &hot, |&i| {
        cas16(&c16[i], clock.now())
    });
    cycle(&mut g, "cas8_21mb", &random, |&i| cas8(&c8[2 * i], 0));
    cycle(&mut g, "cas16_21mb", &random, |&i| cas16(&c16[i], 0));
    chained(&mut g, "cas8_21mb_chained", &random, |i| {
        cas8(&c8[2 * i], 0)
    });
    chained(&mut g, "cas16_21mb_chained", &random, |i| cas16(&c16[i], 0));
    g.finish();
}

criterion_group!(
    benches,
    keyed_1k_hot,
    keyed_1k_hot_manual_clock,
    keyed_1k_hot_coarse_clock,
    keyed_1m_random,
    keyed_1m_random_batch,
    insert_new_key,
    string_keys_1m,
    direct_coarse,
    hardware_floor
);
criterion_main!(benches);
