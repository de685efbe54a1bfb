//! A small, deterministic workload runner for instruction-count A/B comparisons under
//! callgrind (wall-clock timing on a shared machine is too noisy for a few-percent change).
//!
//! ```sh
//! cargo build --release --example probe
//! valgrind --tool=callgrind --toggle-collect='probe::run*' \
//!     target/release/examples/probe table1k 1000000
//! ```
//!
//! Only the timed loop (`run_*`) is counted, so `Ir / checks` is the cost of one check,
//! including its clock read. The workload names (first argument):
//!
//! | name | what |
//! |---|---|
//! | `table1k`, `fixed1k`, `map1k` | 1000 pre-inserted `u64` keys cycled in a shuffled order: the default (growing) table with `max_keys`, the same with `fixed_capacity()`, the exact map |
//! | `table1k_changed` | `table1k` after a `set_quota` (the same quota again) |
//! | `table1k_manual` | `table1k` with a `ManualClock` (no clock cost) |
//! | `table1m`, `fixed1m`, `map1m` | 1M pre-inserted keys in a random order |
//! | `batch1m_16`, `batch1m_64` | `table1m` through `check_many` in batches of 16 / 64 keys |
//! | `batch1k_16` | `table1k` through `check_many` in batches of 16 |
//! | `insert1m`, `insert1m_fixed`, `insert1m_map` | first checks of up to 1M new keys: growing table (ceiling 1M), fixed table sized for 1M, exact map |
//! | `insert1m_map_str`, `gov_insert1m_str` | `insert1m_map`, `gov_insert1m` with `String` keys (`user:<n>`, made before the clock starts): the exact store's key column, which integer keys do without |
//! | `three1k`, `gov_three1k` | three keyed limiters per request (the default store with no bound, as `build()` gives; governor's), 1000 pre-inserted keys each, a request checking one key of each in turn: `checks` counts checks (three per request) |
//! | `three1k_coarse`, `all3_1k_coarse` | `three1k`, `all3_1k` on a `CoarseClock` (no counter read to share: `check_all`'s own cost) |
//! | `all3_1k` | `three1k` through `check_all`: one request admits its key on all three limiters at once (`checks` counts checks, three per request) |
//! | `denied4_1k` | a `check_all` of four limiters on the default clock denied by the first, a sold-out stock: the report of a denial, which peeks the three others (two keyed limiters with 1000 pre-inserted keys each, and a direct one); `checks` counts requests |
//! | `dyn1k` | `table1k` through `&dyn AnyLimiter<u64>` (the trait the HTTP layer and `check_all` use) |
//! | `gov1k`, `gov1m`, `gov_insert1m` | governor's keyed limiter (dashmap store) on the same keys as `table1k`, `table1m`, `insert1m`: the same-process peer |
//! | `direct_manual`, `gov_direct_manual` | the direct limiter, cellgate's / governor's, on a manual clock advanced 60 intervals every 64 checks (`benches/gcra.rs` `direct/manual_clock`) |
//! | `direct` | the direct `Limiter` with a `CoarseClock` |
//! | `striped_manual` | a `StripedLimiter` (GCRA, 1 unit per µs, burst 1000, 4 stripes) on a manual clock advanced 60 µs every 64 checks, as `direct_manual`: about one check in sixteen refused by its first stripe and going on through the others |
//! | `striped_manual_relaxed` | the same with `.relaxed_clock()` (admissions do not raise the shared high-water mark) |
//! | `sliding_manual` | a direct sliding-window `Limiter` (2000 per 10 ms) on a manual clock advanced 4 µs per check: about a fifth denied, windows rolling |
//! | `sliding1k_manual` | 1000 keys of a sliding-window table (200 per 1 ms), manual clock advanced 4 µs every 1000 checks: about a fifth denied |
//! | `fixed1k_manual` | `sliding1k_manual` with a fixed window (200 per 1 ms) |
//! | `window_fixed1k`, `window_sliding1k` | `table1k`'s shape (default store with `max_keys`, quanta clock, the same 1000 keys, every check admitted) with a fixed / sliding window of 10^6 per 10^4 s instead of GCRA: the three algorithms on one shape |
//! | `floor` | the bare work under a keyed check, no limiter: a raw counter read (quanta's `raw`, no conversion to ns), a load and a compare-and-swap on one of 1000 cells of an array, in the same shuffled order as `table1k`'s keys, no hashing |
//! | `insert1m_unbounded` | `insert1m` without a ceiling (no `max_keys`): the default table with no shared count of keys to update and no room to ask for per insert, 64 shards |
//!
//! Several names, comma-separated (`probe floor,table1k,gov1k 30000000`), run one after the
//! other in one process, and each row after a `floor` row also prints its ratio to that floor:
//! the floor and the ratio in one run. Under callgrind, run one name at a time (the collected
//! `run*` functions of every name are summed).
//!
//! The quota (interval 1000 s, burst 10^7) admits every check and keeps every key live. Without
//! valgrind, the program also prints its wall time per check (noisy; only a sanity check).

mod keys;

use std::hint::black_box;
// The floor's cells: the bare atomics a check is measured against, not the library's.
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use cellgate::clock::{Clock, CoarseClock, ManualClock};
use cellgate::{Decision, KeyedLimiter, Limiter, Quota, StripedLimiter};
use keys::u64_keys;

/// Every check is allowed (a burst of 10^7), and a key stays live for at least 1000 s after a
/// check (interval 1000 s), so that no store may drop it during a run, however slow (callgrind):
/// the workloads measure hits and inserts, not reclaims.
fn quota() -> Quota {
    Quota::new(10_000_000, Duration::from_secs(10_000_000 * 1_000))
}

/// Checks `keys` in turn, `checks` times in all; `lap` runs each time the keys start over.
#[inline(never)]
fn run_single<C: Clock>(
    l: &KeyedLimiter<u64, C>,
    keys: &[u64],
    checks: usize,
    lap: impl Fn(),
) -> usize {
    let mut allowed = 0;
    let mut i = 0;
    for _ in 0..checks {
        let d = l.check(black_box(&keys[i]));
        allowed += usize::from(black_box(d).is_allowed());
        i += 1;
        if i == keys.len() {
            i = 0;
            lap();
        }
    }
    allowed
}

/// governor's keyed limiter over `keys` in turn, `checks` checks.
#[inline(never)]
fn run_gov(l: &governor::DefaultKeyedRateLimiter<u64>, keys: &[u64], checks: usize) -> usize {
    let mut allowed = 0;
    for i in 0..checks {
        allowed += usize::from(l.check_key(black_box(&keys[i % keys.len()])).is_ok());
    }
    allowed
}

/// One check of each of `keys` by `check` on `l`: how many were admitted.
#[inline(never)]
fn run_str<L>(l: &L, keys: &[String], check: impl Fn(&L, &String) -> bool) -> usize {
    keys.iter()
        .map(|k| usize::from(check(black_box(l), black_box(k))))
        .sum()
}

/// governor's keyed limiter (its default dashmap store and clock) with the probe's quota.
fn gov_keyed<K: std::hash::Hash + Eq + Clone>() -> governor::DefaultKeyedRateLimiter<K> {
    let nz = |v| std::num::NonZeroU32::new(v).expect("non-zero");
    let q = governor::Quota::with_period(Duration::from_secs(1_000))
        .expect("non-zero period")
        .allow_burst(nz(10_000_000));
    governor::RateLimiter::keyed(q)
}

/// Requests over `keys` in turn, each checking its key in three limiters (`check(limiter,
/// key)`), `checks` checks in all.
#[inline(never)]
fn run_three(keys: &[u64], checks: usize, check: impl Fn(usize, &u64) -> bool) -> usize {
    let mut allowed = 0;
    let mut i = 0;
    for _ in 0..checks / 3 {
        for l in 0..3 {
            allowed += usize::from(check(l, black_box(&keys[i])));
        }
        i += 1;
        if i == keys.len() {
            i = 0;
        }
    }
    allowed
}

/// Requests over `keys` in turn, each admitting its key on all three limiters with one
/// `check_all`, `checks` checks in all (three per request).
#[inline(never)]
fn run_all3<C: Clock>(ls: &[KeyedLimiter<u64, C>], keys: &[u64], checks: usize) -> usize {
    let mut allowed = 0;
    let mut i = 0;
    for _ in 0..checks / 3 {
        let k = black_box(&keys[i]);
        let d = cellgate::check_all([
            (&ls[0].gate(k), 1),
            (&ls[1].gate(k), 1),
            (&ls[2].gate(k), 1),
        ]);
        allowed += 3 * usize::from(black_box(d).is_allowed());
        i += 1;
        if i == keys.len() {
            i = 0;
        }
    }
    allowed
}

/// Requests over `keys` in turn, each a `check_all` of the sold-out `first`, then its key on
/// both of `ls`, then `global`: denied by `first`, so the report peeks the three others;
/// `checks` requests.
#[inline(never)]
fn run_denied(
    first: &Limiter,
    ls: &[KeyedLimiter<u64>],
    global: &Limiter,
    keys: &[u64],
    checks: usize,
) -> usize {
    let mut allowed = 0;
    let mut i = 0;
    for _ in 0..checks {
        let k = black_box(&keys[i]);
        let d = cellgate::check_all([
            (first as &dyn cellgate::AnyLimiter, 1),
            (&ls[0].gate(k), 1),
            (&ls[1].gate(k), 1),
            (global, 1),
        ]);
        allowed += usize::from(black_box(d).is_allowed());
        i += 1;
        if i == keys.len() {
            i = 0;
        }
    }
    allowed
}

/// The floor under a keyed check: per check, a raw counter read, a load of one of `cells`
/// (indices from `order`, in turn) and a compare-and-swap of it, as a check that admits does;
/// `checks` in all.
#[inline(never)]
fn run_floor(clock: &quanta::Clock, cells: &[AtomicU64], order: &[usize], checks: usize) -> usize {
    let mut allowed = 0;
    let mut i = 0;
    for _ in 0..checks {
        let now = clock.raw();
        let cell = &cells[black_box(order[i])];
        // Relaxed, as a keyed check's load and CAS: the word is self-contained.
        let old = cell.load(Ordering::Relaxed);
        let next = old.max(now).wrapping_add(1);
        allowed += usize::from(
            cell.compare_exchange_weak(old, next, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok(),
        );
        i += 1;
        if i == order.len() {
            i = 0;
        }
    }
    allowed
}

/// `keys` in turn through the object-safe trait, `checks` checks.
#[inline(never)]
fn run_dyn(l: &dyn cellgate::AnyLimiter<u64>, keys: &[u64], checks: usize) -> usize {
    let mut allowed = 0;
    let mut i = 0;
    for _ in 0..checks {
        allowed += usize::from(black_box(l.check_n(black_box(&keys[i]), 1)).is_allowed());
        i += 1;
        if i == keys.len() {
            i = 0;
        }
    }
    allowed
}

#[inline(never)]
fn run_batch<C: Clock>(
    l: &KeyedLimiter<u64, C>,
    keys: &[u64],
    checks: usize,
    batch: usize,
) -> usize {
    let mut out: Vec<Decision> = Vec::with_capacity(batch);
    let mut allowed = 0;
    let mut i = 0;
    let mut done = 0;
    while done < checks {
        let take = batch.min(keys.len() - i);
        out.clear();
        l.check_many(black_box(&keys[i..i + take]), &mut out);
        allowed += black_box(&out).iter().filter(|d| d.is_allowed()).count();
        done += take;
        i += take;
        if i == keys.len() {
            i = 0;
        }
    }
    allowed
}

#[inline(never)]
fn run_direct<C: Clock>(l: &Limiter<C>, checks: usize) -> usize {
    let mut allowed = 0;
    for _ in 0..checks {
        allowed += usize::from(black_box(l.check()).is_allowed());
    }
    allowed
}

#[inline(never)]
fn run_sliding_manual(l: &Limiter<ManualClock>, clock: &ManualClock, checks: usize) -> usize {
    let mut allowed = 0;
    for _ in 0..checks {
        clock.advance_ns(4_000);
        allowed += usize::from(black_box(l.check()).is_allowed());
    }
    allowed
}

#[inline(never)]
fn run_direct_manual(checks: usize, advance: impl Fn(), check: impl Fn() -> bool) -> usize {
    let mut allowed = 0;
    for i in 1..=checks {
        if i % 64 == 0 {
            advance();
        }
        allowed += usize::from(black_box(check()));
    }
    allowed
}

/// `bound`: `max_keys` (the default, growing table, or with `fixed` the fixed-capacity one);
/// `None`: the exact map.
fn keyed<C: Clock>(clock: C, bound: Option<usize>, fixed: bool) -> KeyedLimiter<u64, C> {
    let b = KeyedLimiter::<u64>::gcra(quota()).clock(clock);
    match bound {
        Some(n) if fixed => b.max_keys(n).fixed_capacity(),
        Some(n) => b.max_keys(n),
        None => b.exact_keys(),
    }
    .build()
    .expect("valid quota")
}

fn fill<C: Clock>(l: &KeyedLimiter<u64, C>, keys: &[u64]) {
    for k in keys {
        assert!(l.check(k).is_allowed());
    }
    assert_eq!(l.len(), keys.len());
}

/// `n` default keyed limiters (default clock and store), each filled with the same 1000 keys;
/// and the keys.
fn filled_1k(n: usize) -> (Vec<KeyedLimiter<u64>>, Vec<u64>) {
    filled_1k_on(n, cellgate::clock::DefaultClock::default())
}

/// [`filled_1k`] on `clock` (each limiter a clone of it).
fn filled_1k_on<C: Clock + Clone>(n: usize, clock: C) -> (Vec<KeyedLimiter<u64, C>>, Vec<u64>) {
    let ls: Vec<_> = (0..n)
        .map(|_| {
            KeyedLimiter::<u64>::gcra(quota())
                .clock(clock.clone())
                .build()
                .expect("valid quota")
        })
        .collect();
    let ks = u64_keys(1_000, 1);
    for l in &ls {
        fill(l, &ks);
    }
    (ls, ks)
}

/// `three1k`'s checks in turn, or with `all` `all3_1k`'s `check_all`, on limiters `ls`.
fn three_or_all<C: Clock>(
    ls: &[KeyedLimiter<u64, C>],
    keys: &[u64],
    checks: usize,
    all: bool,
) -> usize {
    if all {
        run_all3(ls, keys, checks)
    } else {
        run_three(keys, checks, |i, k| ls[i].check(k).is_allowed())
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let names = args.get(1).map_or("table1k", String::as_str);
    let checks: usize = args
        .get(2)
        .map_or(1_000_000, |s| s.parse().expect("a number of checks"));
    let mut floor = None;
    for name in names.split(',') {
        let ns = workload(name, checks);
        match floor {
            Some(f) => println!("  {name}: {:.2}x the floor", ns / f),
            None if name == "floor" => floor = Some(ns),
            None => {}
        }
    }
}

/// Runs the workload `name` for `checks` checks, prints its line and returns its wall time
/// per check, in ns.
fn workload(name: &str, checks: usize) -> f64 {
    let start;
    let allowed = match name {
        "table1k" | "fixed1k" | "map1k" | "table1k_changed" | "batch1k_16" => {
            let table = name != "map1k";
            let ks = u64_keys(1_000, 1);
            let l = keyed(
                cellgate::clock::QuantaClock::new(),
                table.then_some(1_000),
                name == "fixed1k",
            );
            fill(&l, &ks);
            if name == "table1k_changed" {
                l.set_quota(quota()).expect("a GCRA limiter");
            }
            start = Instant::now();
            if name == "batch1k_16" {
                run_batch(&l, &ks, checks, 16)
            } else {
                run_single(&l, &ks, checks, || {})
            }
        }
        "table1k_manual" => {
            let ks = u64_keys(1_000, 1);
            let l = keyed(ManualClock::new(), Some(1_000), false);
            fill(&l, &ks);
            start = Instant::now();
            run_single(&l, &ks, checks, || {})
        }
        "table1m" | "fixed1m" | "map1m" | "batch1m_16" | "batch1m_64" => {
            let table = name != "map1m";
            let l = keyed(
                cellgate::clock::QuantaClock::new(),
                table.then_some(1_000_000),
                name == "fixed1m",
            );
            fill(&l, &u64_keys(1_000_000, 2));
            let probes = u64_keys(1_000_000, 3);
            start = Instant::now();
            match name {
                "batch1m_16" => run_batch(&l, &probes, checks, 16),
                "batch1m_64" => run_batch(&l, &probes, checks, 64),
                _ => run_single(&l, &probes, checks, || {}),
            }
        }
        "insert1m" | "insert1m_fixed" | "insert1m_map" => {
            // Every check is the first for its key: `checks` new keys (at most 1M) into the
            // default table with a ceiling of 1M (growing as it goes), the fixed table sized for
            // 1M at build, or the exact map.
            let l = keyed(
                cellgate::clock::QuantaClock::new(),
                (name != "insert1m_map").then_some(1_000_000),
                name == "insert1m_fixed",
            );
            let ks = u64_keys(checks.min(1_000_000), 4);
            start = Instant::now();
            run_single(&l, &ks, ks.len(), || {})
        }
        "three1k" | "all3_1k" => {
            let (ls, ks) = filled_1k(3);
            start = Instant::now();
            three_or_all(&ls, &ks, checks, name == "all3_1k")
        }
        "three1k_coarse" | "all3_1k_coarse" => {
            let (ls, ks) = filled_1k_on(3, CoarseClock::new());
            start = Instant::now();
            three_or_all(&ls, &ks, checks, name == "all3_1k_coarse")
        }
        "denied4_1k" => {
            let sold_out = Limiter::stock(0).build().expect("valid stock");
            let global = Limiter::gcra(quota()).build().expect("valid quota");
            let (ls, ks) = filled_1k(2);
            start = Instant::now();
            run_denied(&sold_out, &ls, &global, &ks, checks)
        }
        "dyn1k" => {
            let l = KeyedLimiter::<u64>::gcra(quota())
                .build()
                .expect("valid quota");
            let ks = u64_keys(1_000, 1);
            fill(&l, &ks);
            start = Instant::now();
            run_dyn(&l, &ks, checks)
        }
        "gov_three1k" => {
            let ls: Vec<_> = (0..3).map(|_| gov_keyed::<u64>()).collect();
            let ks = u64_keys(1_000, 1);
            for l in &ls {
                for k in &ks {
                    assert!(l.check_key(k).is_ok());
                }
            }
            start = Instant::now();
            run_three(&ks, checks, |i, k| ls[i].check_key(k).is_ok())
        }
        "gov1k" | "gov1m" | "gov_insert1m" => {
            // governor's keyed limiter (its default dashmap store and clock), with the same
            // quota, on the same keys as `table1k`, `table1m` and `insert1m`: the peer for the
            // ratios, in the same process.
            let l = gov_keyed::<u64>();
            let run = |ks: &[u64], checks: usize| run_gov(&l, ks, checks);
            match name {
                "gov1k" => {
                    let ks = u64_keys(1_000, 1);
                    run(&ks, ks.len());
                    start = Instant::now();
                    run(&ks, checks)
                }
                "gov1m" => {
                    run(&u64_keys(1_000_000, 2), 1_000_000);
                    let probes = u64_keys(1_000_000, 3);
                    start = Instant::now();
                    run(&probes, checks)
                }
                _ => {
                    let ks = u64_keys(checks.min(1_000_000), 4);
                    start = Instant::now();
                    run(&ks, ks.len())
                }
            }
        }
        "insert1m_map_str" | "gov_insert1m_str" => {
            let ks: Vec<String> = u64_keys(checks.min(1_000_000), 4)
                .iter()
                .map(|k| format!("user:{k}"))
                .collect();
            start = Instant::now();
            if name == "gov_insert1m_str" {
                run_str(&gov_keyed::<String>(), &ks, |l, k| l.check_key(k).is_ok())
            } else {
                let l = KeyedLimiter::<String>::gcra(quota())
                    .clock(cellgate::clock::QuantaClock::new())
                    .exact_keys()
                    .build()
                    .expect("valid quota");
                run_str(&l, &ks, |l, k| l.check(k.as_str()).is_allowed())
            }
        }
        "direct_manual" | "gov_direct_manual" => {
            // As `direct/manual_clock` in benches/gcra.rs: 1 unit per µs, burst 1000.
            let advance = Duration::from_micros(60);
            start = Instant::now();
            if name == "direct_manual" {
                let clock = ManualClock::new();
                let l = Limiter::gcra(Quota::per_second(1_000_000).with_burst(1000))
                    .clock(clock.clone())
                    .build()
                    .expect("valid quota");
                run_direct_manual(checks, || clock.advance(advance), || l.check().is_allowed())
            } else {
                let nz = |v| std::num::NonZeroU32::new(v).expect("non-zero");
                let clock = governor::clock::FakeRelativeClock::default();
                let q = governor::Quota::per_second(nz(1_000_000)).allow_burst(nz(1000));
                let l = governor::RateLimiter::direct_with_clock(q, clock.clone());
                run_direct_manual(checks, || clock.advance(advance), || l.check().is_ok())
            }
        }
        "striped_manual" | "striped_manual_relaxed" => {
            let clock = ManualClock::new();
            let b = StripedLimiter::gcra(Quota::per_second(1_000_000).with_burst(1000))
                .stripes(4)
                .clock(clock.clone());
            let l = if name == "striped_manual" {
                b
            } else {
                b.relaxed_clock()
            }
            .build()
            .expect("valid quota");
            let advance = Duration::from_micros(60);
            start = Instant::now();
            run_direct_manual(checks, || clock.advance(advance), || l.check().is_allowed())
        }
        "direct" => {
            let l = Limiter::gcra(quota())
                .clock(CoarseClock::new())
                .build()
                .expect("valid quota");
            start = Instant::now();
            run_direct(&l, checks)
        }
        "sliding_manual" => {
            let clock = ManualClock::new();
            let l = Limiter::sliding_window(2_000, Duration::from_millis(10))
                .clock(clock.clone())
                .build()
                .expect("valid limit");
            start = Instant::now();
            run_sliding_manual(&l, &clock, checks)
        }
        "sliding1k_manual" | "fixed1k_manual" => {
            let clock = ManualClock::new();
            let window = Duration::from_millis(1);
            let b = if name == "fixed1k_manual" {
                KeyedLimiter::<u64>::fixed_window(200, window)
            } else {
                KeyedLimiter::<u64>::sliding_window(200, window)
            };
            let l = b
                .clock(clock.clone())
                .max_keys(1_000)
                .build()
                .expect("valid limit");
            let ks = u64_keys(1_000, 1);
            fill(&l, &ks);
            start = Instant::now();
            run_single(&l, &ks, checks, || clock.advance_ns(4_000))
        }
        "window_fixed1k" | "window_sliding1k" => {
            // A window long and a limit large enough that no key is ever denied or rolls over.
            let (limit, window) = (1_000_000, Duration::from_secs(10_000));
            let b = if name == "window_fixed1k" {
                KeyedLimiter::<u64>::fixed_window(limit, window)
            } else {
                KeyedLimiter::<u64>::sliding_window(limit, window)
            };
            let l = b
                .clock(cellgate::clock::QuantaClock::new())
                .max_keys(1_000)
                .build()
                .expect("valid limit");
            let ks = u64_keys(1_000, 1);
            fill(&l, &ks);
            start = Instant::now();
            run_single(&l, &ks, checks, || {})
        }
        "floor" => {
            // The indices of 1000 cells in the order `table1k` checks its keys.
            let ks = u64_keys(1_000, 1);
            let mut sorted = ks.clone();
            sorted.sort_unstable();
            let order: Vec<usize> = ks
                .iter()
                .map(|k| sorted.binary_search(k).expect("a key"))
                .collect();
            let cells: Vec<AtomicU64> = (0..order.len()).map(|_| AtomicU64::new(0)).collect();
            let clock = quanta::Clock::new();
            run_floor(&clock, &cells, &order, order.len());
            start = Instant::now();
            run_floor(&clock, &cells, &order, checks)
        }
        "insert1m_unbounded" => {
            // `insert1m`'s keys and order, into the default table built without a ceiling.
            let l = KeyedLimiter::<u64>::gcra(quota())
                .clock(cellgate::clock::QuantaClock::new())
                .build()
                .expect("valid quota");
            let ks = u64_keys(checks.min(1_000_000), 4);
            start = Instant::now();
            run_single(&l, &ks, ks.len(), || {})
        }
        other => {
            eprintln!("unknown workload {other}");
            std::process::exit(2);
        }
    };
    let ns = start.elapsed().as_nanos() as f64 / checks as f64;
    println!("{name}: {checks} checks, {allowed} allowed, {ns:.1} ns/check (wall, noisy)");
    ns
}
