//! GCRA checks, cellgate and governor side by side: one run, one report, same groups.
//!
//! ```sh
//! cargo bench --bench gcra                 # everything, about 1-2 minutes
//! cargo bench --bench gcra -- direct       # only groups whose name contains "direct"
//! cargo bench --bench gcra -- --quick      # criterion's quick mode
//! ```
//!
//! Every group runs the same work on both libraries: the same quota (interval and burst), the
//! same clock discipline, the same keys, one check per iteration, the whole result passed to
//! `black_box`. Single-threaded: these measure the cost of one check, not contention.
//!
//! | group | what | cellgate | governor |
//! |---|---|---|---|
//! | `direct/manual_clock` | one state, a manual clock advanced by 60 intervals every 64 checks (so ~94% allowed once the burst is spent) | `Limiter` + `ManualClock` | direct + `FakeRelativeClock` |
//! | `direct/real_clock` | one state, real time, interval 10 ns (most checks allowed) | `QuantaClock` (default), `CoarseClock` | `DefaultClock` (quanta), `QuantaUpkeepClock` |
//! | `keyed_hot/manual_clock` | one hot `u64` key, pre-inserted, manual clock as above | `KeyedLimiter<u64>` | `RateLimiter::dashmap_with_clock` |
//! | `keyed_hot/real_clock` | one hot `u64` key, real time, interval 10 ns | `KeyedLimiter<u64>` | `RateLimiter::keyed` (dashmap) |
//! | `keyed_1k/real_clock` | 1000 pre-inserted `u64` keys in turn, 1 µs interval each (all allowed) | `KeyedLimiter<u64>` | `RateLimiter::keyed` (dashmap) |
//!
//! Each library uses its default map hasher (cellgate: aHash, keyed randomly per process; governor:
//! std's SipHash `RandomState`): that is what a user of either gets.

use std::hint::black_box;
use std::num::NonZeroU32;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, BenchmarkGroup, Criterion, Throughput};

use cellgate::clock::{CoarseClock, ManualClock, QuantaClock};
use cellgate::{KeyedLimiter, Limiter, Quota};
use governor::clock::{DefaultClock, FakeRelativeClock, QuantaUpkeepClock};
use governor::RateLimiter;

#[path = "../examples/measure/keys.rs"]
mod keys;
use keys::{HOT, KEYS_1K as KEYS};

/// Manual-clock quota: one unit per microsecond, burst 1000.
const MANUAL_RATE: u32 = 1_000_000;
const MANUAL_INTERVAL_NS: u64 = 1_000_000_000 / MANUAL_RATE as u64;
const BURST: u32 = 1_000;
/// The manual clock moves by `ADVANCE_INTERVALS` intervals every `ADVANCE_EVERY` checks, so in
/// steady state `ADVANCE_INTERVALS / ADVANCE_EVERY` of the checks are allowed and the rest
/// denied: both paths are exercised, the same way for both libraries.
const ADVANCE_EVERY: u64 = 64;
const ADVANCE_INTERVALS: u64 = 60;
/// Real-clock quota: one unit per 10 ns, burst 1000: faster than a check, so most are allowed.
const REAL_RATE: u32 = 100_000_000;
/// Per-key quota over 1000 keys: one unit per microsecond each.
const KEYED_1K_RATE: u32 = 1_000_000;

fn nz(v: u32) -> NonZeroU32 {
    NonZeroU32::new(v).expect("non-zero constant")
}

fn cellgate_quota(rate: u32) -> Quota {
    Quota::per_second(rate).with_burst(BURST)
}

fn governor_quota(rate: u32) -> governor::Quota {
    governor::Quota::per_second(nz(rate)).allow_burst(nz(BURST))
}

fn configure<'a>(
    c: &'a mut Criterion,
    name: &str,
) -> BenchmarkGroup<'a, criterion::measurement::WallTime> {
    let mut g = c.benchmark_group(name);
    g.throughput(Throughput::Elements(1));
    g.warm_up_time(Duration::from_secs(1));
    g.measurement_time(Duration::from_secs(3));
    g
}

/// Benchmarks `check`, with the clock advanced by `advance` every `ADVANCE_EVERY` checks.
fn bench_advancing<R>(
    g: &mut BenchmarkGroup<'_, criterion::measurement::WallTime>,
    name: &str,
    advance: impl Fn(),
    check: impl Fn() -> R,
) {
    let mut i = 0u64;
    g.bench_function(name, |b| {
        b.iter(|| {
            i += 1;
            if i % ADVANCE_EVERY == 0 {
                advance();
            }
            black_box(check())
        })
    });
}

fn direct_manual_clock(c: &mut Criterion) {
    let mut g = configure(c, "direct/manual_clock");
    let advance = Duration::from_nanos(ADVANCE_INTERVALS * MANUAL_INTERVAL_NS);

    let clock = ManualClock::new();
    let limiter = Limiter::gcra(cellgate_quota(MANUAL_RATE))
        .clock(clock.clone())
        .build()
        .expect("valid quota");
    bench_advancing(
        &mut g,
        "cellgate",
        || clock.advance(advance),
        || limiter.check(),
    );

    let clock = FakeRelativeClock::default();
    let limiter = RateLimiter::direct_with_clock(governor_quota(MANUAL_RATE), clock.clone());
    bench_advancing(
        &mut g,
        "governor",
        || clock.advance(advance),
        || limiter.check(),
    );
    g.finish();
}

fn direct_real_clock(c: &mut Criterion) {
    let mut g = configure(c, "direct/real_clock");

    let limiter = Limiter::gcra(cellgate_quota(REAL_RATE))
        .build()
        .expect("valid quota");
    g.bench_function("cellgate", |b| b.iter(|| black_box(limiter.check())));

    let limiter =
        RateLimiter::direct_with_clock(governor_quota(REAL_RATE), DefaultClock::default());
    g.bench_function("governor", |b| b.iter(|| black_box(limiter.check())));

    // The coarse clocks: a timestamp refreshed by an upkeep thread (quanta's `recent()`).
    let limiter = Limiter::gcra(cellgate_quota(REAL_RATE))
        .clock(CoarseClock::new())
        .build()
        .expect("valid quota");
    g.bench_function("cellgate_coarse", |b| b.iter(|| black_box(limiter.check())));
    drop(limiter);

    // governor's coarse clock starts its own upkeep thread; fine once the one above is gone.
    match QuantaUpkeepClock::from_interval(Duration::from_millis(1)) {
        Ok(clock) => {
            let limiter = RateLimiter::direct_with_clock(governor_quota(REAL_RATE), clock);
            g.bench_function("governor_upkeep", |b| b.iter(|| black_box(limiter.check())));
        }
        Err(e) => eprintln!("skipping governor_upkeep: {e}"),
    }
    g.finish();
}

fn keyed_hot_manual_clock(c: &mut Criterion) {
    let mut g = configure(c, "keyed_hot/manual_clock");
    let advance = Duration::from_nanos(ADVANCE_INTERVALS * MANUAL_INTERVAL_NS);

    let clock = ManualClock::new();
    let limiter = KeyedLimiter::<u64>::gcra(cellgate_quota(MANUAL_RATE))
        .clock(clock.clone())
        .build()
        .expect("valid quota");
    limiter.check(&HOT);
    let mut i = 0u64;
    g.bench_function("cellgate", |b| {
        b.iter(|| {
            i += 1;
            if i % ADVANCE_EVERY == 0 {
                clock.advance(advance);
            }
            black_box(limiter.check(black_box(&HOT)))
        })
    });

    let clock = FakeRelativeClock::default();
    let limiter = RateLimiter::dashmap_with_clock(governor_quota(MANUAL_RATE), clock.clone());
    let _ = limiter.check_key(&HOT);
    let mut i = 0u64;
    g.bench_function("governor", |b| {
        b.iter(|| {
            i += 1;
            if i % ADVANCE_EVERY == 0 {
                clock.advance(advance);
            }
            black_box(limiter.check_key(black_box(&HOT)))
        })
    });
    g.finish();
}

fn keyed_hot_real_clock(c: &mut Criterion) {
    let mut g = configure(c, "keyed_hot/real_clock");

    let limiter = KeyedLimiter::<u64>::gcra(cellgate_quota(REAL_RATE))
        .clock(QuantaClock::new())
        .build()
        .expect("valid quota");
    limiter.check(&HOT);
    g.bench_function("cellgate", |b| {
        b.iter(|| black_box(limiter.check(black_box(&HOT))))
    });

    let limiter = RateLimiter::keyed(governor_quota(REAL_RATE));
    let _ = limiter.check_key(&HOT);
    g.bench_function("governor", |b| {
        b.iter(|| black_box(limiter.check_key(black_box(&HOT))))
    });
    g.finish();
}

fn keyed_1k_real_clock(c: &mut Criterion) {
    let mut g = configure(c, "keyed_1k/real_clock");

    let limiter = KeyedLimiter::<u64>::gcra(cellgate_quota(KEYED_1K_RATE))
        .build()
        .expect("valid quota");
    for k in 0..KEYS {
        limiter.check(&k);
    }
    let mut k = 0u64;
    g.bench_function("cellgate", |b| {
        b.iter(|| {
            k = if k + 1 == KEYS { 0 } else { k + 1 };
            black_box(limiter.check(black_box(&k)))
        })
    });

    let limiter = RateLimiter::keyed(governor_quota(KEYED_1K_RATE));
    for k in 0..KEYS {
        let _ = limiter.check_key(&k);
    }
    let mut k = 0u64;
    g.bench_function("governor", |b| {
        b.iter(|| {
            k = if k + 1 == KEYS { 0 } else { k + 1 };
            black_box(limiter.check_key(black_box(&k)))
        })
    });
    g.finish();
}

criterion_group!(
    benches,
    direct_manual_clock,
    direct_real_clock,
    keyed_hot_manual_clock,
    keyed_hot_real_clock,
    keyed_1k_real_clock
);
criterion_main!(benches);
