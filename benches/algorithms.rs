//! Every algorithm, one check at a time: what a decision costs on each of cellgate's limiters,
//! with a manual clock so that every run makes the same mix of allows and denies.
//!
//! ```sh
//! cargo bench --bench algorithms                      # everything, about 2 minutes
//! cargo bench --bench algorithms -- keyed_hot/stock   # one algorithm
//! cargo bench --bench algorithms -- --quick           # criterion's quick mode
//! ```
//!
//! One group per algorithm, `keyed_hot/<algorithm>`, each with the same three workloads (and
//! `governor` beside cellgate where it has the same algorithm: GCRA only):
//!
//! | function | what | cellgate | governor (gcra only) |
//! |---|---|---|---|
//! | `hot` | one `u64` key, pre-inserted, every check on it | `KeyedLimiter<u64>` / `SlidingLog<u64>` | `RateLimiter::dashmap_with_clock` |
//! | `1k` | 1000 pre-inserted `u64` keys in turn | the same, one key per check | the same |
//! | `direct` | one state, no key | `Limiter` (not for the sliding log) | `RateLimiter::direct_with_clock` |
//!
//! | group | quota, hot and direct | quota, each of the 1k keys |
//! |---|---|---|
//! | `keyed_hot/gcra` | 1 per µs, burst 16 | 1 per ms, burst 16 |
//! | `keyed_hot/fixed_window` | 500 per 500 µs window | 500 per 500 ms window |
//! | `keyed_hot/sliding_window` | 500 per 500 µs window | 500 per 500 ms window |
//! | `keyed_hot/sliding_log` | 64 per 64 µs | 64 per 64 ms |
//! | `keyed_hot/stock` | 15 units restocked every 16 checks | 15 units restocked every 16 checks on the key |
//!
//! The manual clock moves by 15 µs every 16 checks (937.5 ns a check, on average), so in steady
//! state every quota above has room for about 15 of every 16 checks: both the allow and the deny
//! paths are measured, in about the same proportion for every algorithm. Time plays no part in
//! the stock; a restock every 16 checks (on the hot key, or on each key every 16th visit) plays
//! the clock's part. (A stock limiter still reads its clock on every check, so it gets a manual
//! clock too, and every group pays the same clock cost.) The clock step or restock is inside the
//! measured loop, amortised over 16 checks.
//!
//! Before measuring, each function runs its workload into steady state and prints the share of
//! checks allowed there, e.g. `keyed_hot/gcra/hot: 93.8% of checks allowed in steady state`
//! (93.8% for GCRA, the fixed window and the stock, about 92% for the sliding window's estimate,
//! and 80% for the hot sliding log, whose exact 64 µs window always spans five 15 µs clock steps
//! of 16 checks).
//!
//! Keyed limiters use their default store (exact keys in a dashmap, no `max_keys`), as
//! governor's keyed limiter does; each library uses its own default hasher. Single-threaded:
//! these measure the cost of one check, not contention. For the stores and the real clocks see
//! `benches/keyed.rs` and `benches/gcra.rs`.

use std::hint::black_box;
use std::num::NonZeroU32;
use std::time::Duration;

use criterion::measurement::WallTime;
use criterion::{criterion_group, criterion_main, BenchmarkGroup, Criterion, Throughput};

use cellgate::clock::ManualClock;
use cellgate::{Decision, KeyedLimiter, Limiter, Quota};
use governor::clock::FakeRelativeClock;
use governor::RateLimiter;

// The hot key, and `KEYS` for the `1k` workloads: each key sees one check in `KEYS`.
#[path = "../examples/measure/keys.rs"]
mod keys;
use keys::{HOT, KEYS_1K as KEYS};

/// The clock moves (or the stock is refilled) once every `EVERY` checks.
const EVERY: u64 = 16;
/// How far the clock moves each time: 15/16 µs a check on average.
const STEP_NS: u64 = 15_000;
/// Units a stock gets back each time: 15 of every 16 checks can be allowed.
const RESTOCK: u64 = 15;
/// GCRA burst, small so that the steady state comes within a few hundred checks per key.
const BURST: u32 = 16;
/// Window limits: `WINDOW_LIMIT` per `WINDOW_LIMIT` µs (hot) or ms (per key of 1k).
const WINDOW_LIMIT: u32 = 500;
/// Sliding log: `LOG_LIMIT` per `LOG_LIMIT` µs (hot) or ms (per key of 1k).
const LOG_LIMIT: u32 = 64;

/// Per-key capacity: one unit per µs on the hot key and the direct limiter, one per ms on each
/// of the 1000 keys, so that both see the same offered load against their capacity.
#[derive(Clone, Copy)]
enum Load {
    Hot,
    Spread,
}

impl Load {
    /// The capacity's time unit.
    fn unit(self) -> Duration {
        match self {
            Load::Hot => Duration::from_micros(1),
            Load::Spread => Duration::from_millis(1),
        }
    }

    fn gcra(self) -> Quota {
        Quota::with_interval(self.unit()).with_burst(BURST)
    }

    fn window(self) -> Duration {
        self.unit() * WINDOW_LIMIT
    }

    fn log_window(self) -> Duration {
        self.unit() * LOG_LIMIT
    }

    fn governor(self) -> governor::Quota {
        governor::Quota::with_period(self.unit())
            .expect("non-zero period")
            .allow_burst(NonZeroU32::new(BURST).expect("non-zero burst"))
    }
}

/// A benchmark group that knows its name, for the steady-state line each function prints.
struct Group<'a> {
    g: BenchmarkGroup<'a, WallTime>,
    name: &'static str,
}

fn configure<'a>(c: &'a mut Criterion, name: &'static str) -> Group<'a> {
    let mut g = c.benchmark_group(name);
    g.throughput(Throughput::Elements(1));
    g.warm_up_time(Duration::from_millis(500));
    g.measurement_time(Duration::from_secs(2));
    Group { g, name }
}

/// Whatever a check returns: cellgate's `Decision`, governor's `Result`.
trait Outcome {
    fn allowed(&self) -> bool;
}

impl Outcome for Decision {
    fn allowed(&self) -> bool {
        self.is_allowed()
    }
}

impl<T, E> Outcome for Result<T, E> {
    fn allowed(&self) -> bool {
        self.is_ok()
    }
}

/// Checks run before measuring, to leave bursts behind (256 visits per key drain a burst of 16
/// at 1/16 a visit), then checks counted for the steady-state line: three of the 1k keys'
/// 500 ms windows (533 333 checks each), so that their denials are counted too.
const SETTLE: u64 = 400_000;
const COUNT: u64 = 1_600_000;

impl Group<'_> {
    /// Benchmarks `step` (one check, plus its share of clock steps or restocks), after running it
    /// into its steady state and printing the share of checks it allows there. Nothing runs for
    /// a function that criterion's filter leaves out.
    fn bench<R: Outcome>(&mut self, id: &str, mut step: impl FnMut() -> R) {
        let mut settled = false;
        let group = self.name;
        self.g.bench_function(id, |b| {
            if !settled {
                settled = true;
                for _ in 0..SETTLE {
                    black_box(step());
                }
                let allowed = (0..COUNT).filter(|_| step().allowed()).count();
                eprintln!(
                    "{group}/{id}: {:.1}% of checks allowed in steady state",
                    allowed as f64 * 100.0 / COUNT as f64
                );
            }
            b.iter(|| black_box(step()))
        });
    }

    fn finish(self) {
        self.g.finish();
    }
}

/// The next of the `KEYS` keys in turn.
#[inline]
fn next_key(k: &mut u64) -> u64 {
    *k = if *k + 1 == KEYS { 0 } else { *k + 1 };
    *k
}

/// Every `EVERY`-th call moves `clock` by `STEP_NS`.
#[inline]
fn tick(i: &mut u64, clock: &ManualClock) {
    *i += 1;
    if *i % EVERY == 0 {
        clock.advance_ns(STEP_NS);
    }
}

/// The time-driven workloads: `hot` and `1k` on a keyed limiter, `direct` on a `Limiter` where
/// the algorithm has one. Each builder gets the clock to use and the load it serves.
fn time_driven<K, D>(
    g: &mut Group<'_>,
    keyed: impl Fn(ManualClock, Load) -> K,
    check: impl Fn(&K, &u64) -> Decision,
    direct: Option<D>,
) where
    D: Fn(ManualClock) -> Limiter<ManualClock>,
{
    let clock = ManualClock::new();
    let limiter = keyed(clock.clone(), Load::Hot);
    check(&limiter, &HOT);
    let mut i = 0u64;
    g.bench("hot", || {
        tick(&mut i, &clock);
        check(&limiter, black_box(&HOT))
    });

    let clock = ManualClock::new();
    let limiter = keyed(clock.clone(), Load::Spread);
    for k in 0..KEYS {
        check(&limiter, &k);
    }
    let (mut i, mut k) = (0u64, 0u64);
    g.bench("1k", || {
        tick(&mut i, &clock);
        check(&limiter, black_box(&next_key(&mut k)))
    });

    if let Some(direct) = direct {
        let clock = ManualClock::new();
        let limiter = direct(clock.clone());
        let mut i = 0u64;
        g.bench("direct", || {
            tick(&mut i, &clock);
            limiter.check()
        });
    }
}

fn gcra(c: &mut Criterion) {
    let mut g = configure(c, "keyed_hot/gcra");
    time_driven(
        &mut g,
        |clock, load| {
            KeyedLimiter::<u64>::gcra(load.gcra())
                .clock(clock)
                .build()
                .expect("valid quota")
        },
        |l, k| l.check(k),
        Some(|clock| {
            Limiter::gcra(Load::Hot.gcra())
                .clock(clock)
                .build()
                .expect("valid quota")
        }),
    );

    // governor: the same interval, burst, keys and clock discipline.
    let step = Duration::from_nanos(STEP_NS);
    let governor_tick = |i: &mut u64, clock: &FakeRelativeClock| {
        *i += 1;
        if *i % EVERY == 0 {
            clock.advance(step);
        }
    };

    let clock = FakeRelativeClock::default();
    let limiter = RateLimiter::dashmap_with_clock(Load::Hot.governor(), clock.clone());
    let _ = limiter.check_key(&HOT);
    let mut i = 0u64;
    g.bench("governor_hot", || {
        governor_tick(&mut i, &clock);
        limiter.check_key(black_box(&HOT))
    });

    let clock = FakeRelativeClock::default();
    let limiter = RateLimiter::dashmap_with_clock(Load::Spread.governor(), clock.clone());
    for k in 0..KEYS {
        let _ = limiter.check_key(&k);
    }
    let (mut i, mut k) = (0u64, 0u64);
    g.bench("governor_1k", || {
        governor_tick(&mut i, &clock);
        limiter.check_key(black_box(&next_key(&mut k)))
    });

    let clock = FakeRelativeClock::default();
    let limiter = RateLimiter::direct_with_clock(Load::Hot.governor(), clock.clone());
    let mut i = 0u64;
    g.bench("governor_direct", || {
        governor_tick(&mut i, &clock);
        limiter.check()
    });
    g.finish();
}

fn fixed_window(c: &mut Criterion) {
    let mut g = configure(c, "keyed_hot/fixed_window");
    time_driven(
        &mut g,
        |clock, load| {
            KeyedLimiter::<u64>::fixed_window(WINDOW_LIMIT, load.window())
                .clock(clock)
                .build()
                .expect("valid window")
        },
        |l, k| l.check(k),
        Some(|clock| {
            Limiter::fixed_window(WINDOW_LIMIT, Load::Hot.window())
                .clock(clock)
                .build()
                .expect("valid window")
        }),
    );
    g.finish();
}

fn sliding_window(c: &mut Criterion) {
    let mut g = configure(c, "keyed_hot/sliding_window");
    time_driven(
        &mut g,
        |clock, load| {
            KeyedLimiter::<u64>::sliding_window(WINDOW_LIMIT, load.window())
                .clock(clock)
                .build()
                .expect("valid window")
        },
        |l, k| l.check(k),
        Some(|clock| {
            Limiter::sliding_window(WINDOW_LIMIT, Load::Hot.window())
                .clock(clock)
                .build()
                .expect("valid window")
        }),
    );
    g.finish();
}

fn sliding_log(c: &mut Criterion) {
    let mut g = configure(c, "keyed_hot/sliding_log");
    // No direct form: the sliding log exists only keyed.
    time_driven::<_, fn(ManualClock) -> Limiter<ManualClock>>(
        &mut g,
        |clock, load| {
            KeyedLimiter::<u64>::sliding_log(LOG_LIMIT, load.log_window())
                .clock(clock)
                .build()
                .expect("valid log")
        },
        |l, k| l.check(k),
        None,
    );
    g.finish();
}

fn stock(c: &mut Criterion) {
    let mut g = configure(c, "keyed_hot/stock");
    // Time plays no part: a restock of `RESTOCK` units every `EVERY` checks keeps 15 of 16
    // checks allowed. The limiters start empty (stock 0); the restocks create the keys. They
    // still read a clock on every check, so they get a manual one like the other groups.
    let limiter = KeyedLimiter::<u64>::stock(0)
        .clock(ManualClock::new())
        .build()
        .expect("valid stock");
    limiter.restock(&HOT, RESTOCK).expect("a stock limiter");
    let mut i = 0u64;
    g.bench("hot", || {
        i += 1;
        if i % EVERY == 0 {
            let _ = limiter.restock(&HOT, RESTOCK);
        }
        limiter.check(black_box(&HOT))
    });

    let limiter = KeyedLimiter::<u64>::stock(0)
        .clock(ManualClock::new())
        .build()
        .expect("valid stock");
    for k in 0..KEYS {
        limiter.restock(&k, RESTOCK).expect("a stock limiter");
    }
    let (mut i, mut k) = (0u64, 0u64);
    g.bench("1k", || {
        i += 1;
        let key = next_key(&mut k);
        // Each key is restocked on every `EVERY`-th visit to it.
        if (i / KEYS) % EVERY == 0 {
            let _ = limiter.restock(&key, RESTOCK);
        }
        limiter.check(black_box(&key))
    });

    let limiter = Limiter::stock(0)
        .clock(ManualClock::new())
        .build()
        .expect("valid stock");
    limiter.restock(RESTOCK).expect("a stock limiter");
    let mut i = 0u64;
    g.bench("direct", || {
        i += 1;
        if i % EVERY == 0 {
            let _ = limiter.restock(RESTOCK);
        }
        limiter.check()
    });
    g.finish();
}

criterion_group!(
    benches,
    gcra,
    fixed_window,
    sliding_window,
    stock,
    sliding_log
);
criterion_main!(benches);
