//! Multi-threaded throughput and memory per key: cellgate's two keyed stores beside governor.
//!
//! ```sh
//! cargo run --release --example throughput                      # N = all CPUs, 2 s per cell
//! cargo run --release --example throughput -- --threads 2 --seconds 1 --keys 1000000
//! cargo run --release --example throughput -- --memory          # bytes per tracked key
//! ```
//!
//! # Throughput
//!
//! Three limiters are built and filled with the same `--keys` distinct `u64` keys before any
//! timing: `cellgate_table` (`KeyedLimiter::<u64>::gcra(q).max_keys(keys)`, the bounded
//! fingerprint table), `cellgate_map` (`KeyedLimiter::<u64>::gcra(q).exact_keys()`, the exact
//! store, the growing table with the keys beside its slots) and `governor`
//! (`RateLimiter::keyed(q)`, dashmap). Each library uses its default clock (quanta) and hasher.
//! The quota is 10^9 per second with a burst of 10^7: every check is allowed (the column
//! `allowed` shows it), so every check takes the writing path.
//!
//! Scenarios (one *cell* = one scenario on one limiter):
//!
//! * `1 thread, random keys`: one thread walks all the keys in a precomputed random order.
//! * `N threads, disjoint random keys`: thread `t` owns keys `[t*K/N, (t+1)*K/N)` and walks
//!   them in a precomputed random order; no two threads share a key.
//! * `1 thread, one hot key` and `N threads, one hot key`: every check is on the same key.
//!   These two scenarios also run `cellgate_striped`: the hot-key mode, a `StripedLimiter` with
//!   the same quota split over N stripes (`StripedLimiter::gcra(q).stripes(N)`), standing for
//!   the hot key (it has no keys; each thread starts at its own stripe), and `striped_relaxed`,
//!   the same with `.relaxed_clock()` (admissions do not share their time).
//!
//! In a cell, the threads start together at a barrier; each runs for `--seconds` of wall time
//! (reading the clock once every 1024 checks) and counts its checks. The cell's rate is the
//! sum over threads of checks / elapsed; `ns/check/thread` is threads / rate. Each cell is run
//! `--reps` times (default 3) after one untimed warm-up of a tenth of `--seconds` (at most
//! 0.2 s), and the median rate is printed with the spread (max - min) / median. Repetitions of
//! the limiters are interleaved (table, map, [striped,] governor, table, ...) so that drift in a
//! shared machine's load hits them all alike.
//!
//! Ratios: `vs governor` is this limiter's rate over governor's in the same scenario (above 1:
//! faster than governor); `scaling` is the N-thread rate over the same limiter's 1-thread rate
//! in the matching 1-thread scenario.
//!
//! # Memory
//!
//! `--memory` measures, for each limiter and three times, in a fresh process (this program
//! re-run with `--memory-one NAME`): `VmRSS` from `/proc/self/status` before building the
//! limiter, after building it, and after inserting `--keys` distinct `u64` keys (generated on
//! the fly, not held in a vector). Bytes per key = (RSS after inserting - RSS before building)
//! / keys, so the table's up-front allocation is counted; `peak` uses `VmHWM` instead (it
//! includes a map's old table while it grows). Medians of the three runs are printed. Linux only.

mod admit_all;
mod keys;

use std::fmt::Write as _;
use std::process::{Command, ExitCode};
use std::sync::Barrier;
use std::time::{Duration, Instant};

use admit_all::{
    cellgate_quota, check_seconds, governor_quota, options_or_usage, parse, print_machine,
    read_options, BURST, RATE,
};
use cellgate::clock::Clock;
use cellgate::{KeyedLimiter, StripedLimiter};
use keys::{shuffle, splitmix64};

/// Checks between two clock reads in a worker.
const STRIDE: u64 = 1024;

const USAGE: &str = "\
usage: throughput [--threads N] [--seconds S] [--keys K] [--reps R]
       throughput --memory [--keys K] [--reps R]

  --threads N   threads for the N-thread scenarios (default: available parallelism)
  --seconds S   wall time per cell and repetition, may be fractional (default 2)
  --keys K      distinct u64 keys (default 1000000)
  --reps R      repetitions per cell; the median is printed (default 3)
  --memory      print bytes per tracked key instead, each measured in a fresh process";

/// Key number `i`: distinct, scattered `u64`s.
fn key(i: usize) -> u64 {
    splitmix64(i as u64)
}

/// What the harness needs from a keyed limiter.
trait Check: Sync {
    fn allow(&self, key: &u64) -> bool;
    fn held(&self) -> usize;
}

impl<C: Clock> Check for KeyedLimiter<u64, C> {
    #[inline]
    fn allow(&self, key: &u64) -> bool {
        self.check(key).is_allowed()
    }
    fn held(&self) -> usize {
        self.len()
    }
}

/// The hot-key mode stands for one key: it ignores the key it is given.
impl<C: Clock> Check for StripedLimiter<C> {
    #[inline]
    fn allow(&self, _key: &u64) -> bool {
        self.check().is_allowed()
    }
    fn held(&self) -> usize {
        1
    }
}

impl Check for governor::DefaultKeyedRateLimiter<u64> {
    #[inline]
    fn allow(&self, key: &u64) -> bool {
        self.check_key(key).is_ok()
    }
    fn held(&self) -> usize {
        self.len()
    }
}

const IMPLS: [&str; 5] = [
    "cellgate_table",
    "cellgate_map",
    "cellgate_striped",
    "striped_relaxed",
    "governor",
];
/// The index of `cellgate_striped` in [`IMPLS`], and `striped_relaxed` after it: run in the
/// one-hot-key scenarios only.
const STRIPED: usize = 2;
const RELAXED: usize = 3;

fn table(keys: usize) -> KeyedLimiter<u64> {
    KeyedLimiter::<u64>::gcra(cellgate_quota())
        .max_keys(keys)
        .build()
        .expect("valid quota and max_keys")
}

fn map() -> KeyedLimiter<u64> {
    KeyedLimiter::<u64>::gcra(cellgate_quota())
        .exact_keys()
        .build()
        .expect("valid quota")
}

fn striped(threads: usize, relaxed: bool) -> StripedLimiter {
    let b = StripedLimiter::gcra(cellgate_quota()).stripes(threads);
    if relaxed { b.relaxed_clock() } else { b }
        .build()
        .expect("valid quota and stripes")
}

fn gov() -> governor::DefaultKeyedRateLimiter<u64> {
    governor::RateLimiter::keyed(governor_quota())
}

/// Checks keys `0..keys` once each; returns how many were allowed.
fn fill(l: &impl Check, keys: usize) -> usize {
    (0..keys).filter(|&i| l.allow(&key(i))).count()
}

struct Options {
    threads: usize,
    seconds: f64,
    keys: usize,
    reps: usize,
    memory: bool,
    memory_one: Option<String>,
}

fn parse_args() -> Result<Options, String> {
    let mut o = Options {
        threads: std::thread::available_parallelism().map_or(1, |n| n.get()),
        seconds: 2.0,
        keys: 1_000_000,
        reps: 3,
        memory: false,
        memory_one: None,
    };
    read_options(|name, value| {
        match name {
            "--threads" => o.threads = parse(&value()?)?,
            "--seconds" => o.seconds = parse(&value()?)?,
            "--keys" => o.keys = parse(&value()?)?,
            "--reps" => o.reps = parse(&value()?)?,
            "--memory" => o.memory = true,
            "--memory-one" => o.memory_one = Some(value()?),
            _ => return Ok(false),
        }
        Ok(true)
    })?;
    if o.threads == 0 || o.keys == 0 || o.reps == 0 {
        return Err("--threads, --keys and --reps must be at least 1".into());
    }
    if o.keys < o.threads {
        return Err("--keys must be at least --threads (each thread owns some keys)".into());
    }
    check_seconds(o.seconds)?;
    Ok(o)
}

fn main() -> ExitCode {
    let o = match options_or_usage(parse_args(), USAGE) {
        Ok(o) => o,
        Err(code) => return code,
    };
    if let Some(name) = &o.memory_one {
        return memory_one(name, o.keys);
    }
    print_machine();
    if o.memory {
        memory(&o)
    } else {
        throughput(&o);
        ExitCode::SUCCESS
    }
}

// ---------------------------------------------------------------------------------------------
// Throughput

#[derive(Clone, Copy, PartialEq)]
enum Scenario {
    OneRandom,
    ManyRandom,
    OneHot,
    ManyHot,
}

impl Scenario {
    const ALL: [Scenario; 4] = [
        Scenario::OneRandom,
        Scenario::ManyRandom,
        Scenario::OneHot,
        Scenario::ManyHot,
    ];

    fn label(self, threads: usize) -> String {
        match self {
            Scenario::OneRandom => "1 thread, random keys".into(),
            Scenario::ManyRandom => format!("{threads} threads, disjoint random keys"),
            Scenario::OneHot => "1 thread, one hot key".into(),
            Scenario::ManyHot => format!("{threads} threads, one hot key"),
        }
    }

    /// Whether every check is on the one hot key (the scenarios `cellgate_striped` runs).
    fn is_hot(self) -> bool {
        matches!(self, Scenario::OneHot | Scenario::ManyHot)
    }

    /// The 1-thread scenario that an N-thread one is scaled against.
    fn base(self) -> Option<Scenario> {
        match self {
            Scenario::ManyRandom => Some(Scenario::OneRandom),
            Scenario::ManyHot => Some(Scenario::OneHot),
            _ => None,
        }
    }
}

/// Each thread's walk: keys in a random order, the same for every limiter.
struct Walks {
    one_random: Vec<Vec<u64>>,
    many_random: Vec<Vec<u64>>,
    one_hot: Vec<Vec<u64>>,
    many_hot: Vec<Vec<u64>>,
}

impl Walks {
    fn new(keys: usize, threads: usize) -> Self {
        let range = |lo: usize, hi: usize, seed: u64| {
            let mut v: Vec<u64> = (lo..hi).map(key).collect();
            shuffle(&mut v, seed);
            v
        };
        let hot = key(0);
        Walks {
            one_random: vec![range(0, keys, 1)],
            many_random: (0..threads)
                .map(|t| range(t * keys / threads, (t + 1) * keys / threads, 100 + t as u64))
                .collect(),
            one_hot: vec![vec![hot]],
            many_hot: vec![vec![hot]; threads],
        }
    }

    fn get(&self, s: Scenario) -> &[Vec<u64>] {
        match s {
            Scenario::OneRandom => &self.one_random,
            Scenario::ManyRandom => &self.many_random,
            Scenario::OneHot => &self.one_hot,
            Scenario::ManyHot => &self.many_hot,
        }
    }
}

/// One timed run of one cell.
#[derive(Clone, Copy)]
struct Run {
    /// Aggregate checks per second.
    rate: f64,
    checks: u64,
    allowed: u64,
}

/// Runs one thread per walk, all started at a barrier, each for `dur` of wall time.
fn run_cell(l: &impl Check, walks: &[Vec<u64>], dur: Duration) -> Run {
    let barrier = Barrier::new(walks.len());
    let results: Vec<(u64, u64, Duration)> = std::thread::scope(|s| {
        let handles: Vec<_> = walks
            .iter()
            .map(|walk| {
                let barrier = &barrier;
                s.spawn(move || worker(l, walk, barrier, dur))
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("worker panicked"))
            .collect()
    });
    Run {
        rate: results
            .iter()
            .map(|&(n, _, e)| n as f64 / e.as_secs_f64())
            .sum(),
        checks: results.iter().map(|r| r.0).sum(),
        allowed: results.iter().map(|r| r.1).sum(),
    }
}

fn worker(l: &impl Check, walk: &[u64], barrier: &Barrier, dur: Duration) -> (u64, u64, Duration) {
    barrier.wait();
    let start = Instant::now();
    let (mut checks, mut allowed, mut i) = (0u64, 0u64, 0usize);
    loop {
        for _ in 0..STRIDE {
            allowed += u64::from(l.allow(&walk[i]));
            i += 1;
            if i == walk.len() {
                i = 0;
            }
        }
        checks += STRIDE;
        let elapsed = start.elapsed();
        if elapsed >= dur {
            return (checks, allowed, elapsed);
        }
    }
}

struct Cell {
    runs: Vec<Run>,
}

impl Cell {
    fn median(&self) -> f64 {
        let mut r: Vec<f64> = self.runs.iter().map(|r| r.rate).collect();
        r.sort_by(f64::total_cmp);
        let n = r.len();
        if n % 2 == 1 {
            r[n / 2]
        } else {
            (r[n / 2 - 1] + r[n / 2]) / 2.0
        }
    }

    fn spread(&self) -> f64 {
        let r = self.runs.iter().map(|r| r.rate);
        let (lo, hi) = r.fold((f64::MAX, 0f64), |(lo, hi), x| (lo.min(x), hi.max(x)));
        (hi - lo) / self.median()
    }

    fn allowed(&self) -> f64 {
        let checks: u64 = self.runs.iter().map(|r| r.checks).sum();
        let allowed: u64 = self.runs.iter().map(|r| r.allowed).sum();
        allowed as f64 / checks.max(1) as f64
    }
}

fn throughput(o: &Options) {
    let dur = Duration::from_secs_f64(o.seconds);
    let warmup = Duration::from_secs_f64((o.seconds / 10.0).min(0.2));
    let cells = Scenario::ALL.len() * IMPLS.len();
    let estimate = cells as f64 * (o.reps as f64 * o.seconds + warmup.as_secs_f64());
    println!(
        "threads N = {}; {} s per cell and repetition, median of {} (after {:.2} s untimed \
         warm-up per cell); {} u64 keys; GCRA {RATE}/s, burst {BURST}",
        o.threads,
        o.seconds,
        o.reps,
        warmup.as_secs_f64(),
        o.keys
    );
    println!("timed part takes about {estimate:.0} s, plus filling the limiters\n");

    let t0 = Instant::now();
    let walks = Walks::new(o.keys, o.threads);
    let (table, map, gov) = (table(o.keys), map(), gov());
    let (striped, relaxed) = (striped(o.threads, false), striped(o.threads, true));
    for (name, allowed, held) in [
        ("cellgate_table", fill(&table, o.keys), table.held()),
        ("cellgate_map", fill(&map, o.keys), map.held()),
        ("governor", fill(&gov, o.keys), gov.held()),
    ] {
        assert_eq!(
            (allowed, held),
            (o.keys, o.keys),
            "{name}: every key allowed and held"
        );
    }
    eprintln!(
        "filled 3 limiters with {} keys each in {:.1} s",
        o.keys,
        t0.elapsed().as_secs_f64()
    );

    let run = |which: usize, s: Scenario, d: Duration| -> Run {
        let w = walks.get(s);
        match which {
            0 => run_cell(&table, w, d),
            1 => run_cell(&map, w, d),
            STRIPED => run_cell(&striped, w, d),
            RELAXED => run_cell(&relaxed, w, d),
            _ => run_cell(&gov, w, d),
        }
    };
    // results[scenario][impl]
    let mut results: Vec<Vec<Cell>> = Vec::new();
    for s in Scenario::ALL {
        eprint!("{} ...", s.label(o.threads));
        let runs = |which: &usize| s.is_hot() || (*which != STRIPED && *which != RELAXED);
        for which in (0..IMPLS.len()).filter(runs) {
            run(which, s, warmup);
        }
        let mut row: Vec<Cell> = (0..IMPLS.len())
            .map(|_| Cell { runs: Vec::new() })
            .collect();
        for _ in 0..o.reps {
            for (which, cell) in row.iter_mut().enumerate().filter(|(w, _)| runs(w)) {
                cell.runs.push(run(which, s, dur));
            }
        }
        eprintln!(" done");
        results.push(row);
    }

    let mut out = String::new();
    let _ = writeln!(
        out,
        "\n{:<34} {:<15} {:>11} {:>8} {:>10} {:>8} {:>8} {:>8}",
        "scenario", "limiter", "checks/s", "spread", "ns/check", "allowed", "vs gov", "scaling"
    );
    let _ = writeln!(
        out,
        "{:<34} {:<15} {:>11} {:>8} {:>10} {:>8} {:>8} {:>8}",
        "", "", "(all thr.)", "", "(per thr.)", "", "", "vs 1 thr."
    );
    for (si, s) in Scenario::ALL.into_iter().enumerate() {
        let threads = walks.get(s).len();
        let gov_rate = results[si][IMPLS.len() - 1].median();
        for (which, name) in IMPLS.iter().enumerate() {
            let cell = &results[si][which];
            if cell.runs.is_empty() {
                continue; // the striped rows outside the hot-key scenarios
            }
            let rate = cell.median();
            let vs_gov = if which == IMPLS.len() - 1 {
                "-".to_string()
            } else {
                format!("{:.2}x", rate / gov_rate)
            };
            let scaling = match s.base() {
                Some(b) => {
                    let bi = Scenario::ALL.iter().position(|&x| x == b).expect("listed");
                    format!("{:.2}x", rate / results[bi][which].median())
                }
                None => "-".to_string(),
            };
            let label = if which == 0 {
                s.label(threads)
            } else {
                String::new()
            };
            let _ = writeln!(
                out,
                "{:<34} {:<15} {:>9.2} M {:>7.1}% {:>10.1} {:>7.1}% {:>8} {:>8}",
                label,
                name,
                rate / 1e6,
                cell.spread() * 100.0,
                threads as f64 * 1e9 / rate,
                cell.allowed() * 100.0,
                vs_gov,
                scaling
            );
        }
    }
    print!("{out}");
    println!(
        "\nchecks/s: median over repetitions of the sum over threads of checks / elapsed; \
         spread: (max - min) / median.\nvs gov: rate / governor's rate in the same scenario \
         (above 1 = faster). scaling: N-thread rate / the same limiter's 1-thread rate."
    );
}

// ---------------------------------------------------------------------------------------------
// Memory

/// The line a `--memory-one` child prints, read back by the parent.
const MEMORY_TAG: &str = "cellgate-throughput-memory";

/// (VmRSS, VmHWM) of this process, in bytes.
fn rss() -> Option<(u64, u64)> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let field = |name: &str| -> Option<u64> {
        let line = status.lines().find(|l| l.starts_with(name))?;
        let kb: u64 = line[name.len()..]
            .trim()
            .trim_end_matches("kB")
            .trim()
            .parse()
            .ok()?;
        Some(kb * 1024)
    };
    Some((field("VmRSS:")?, field("VmHWM:")?))
}

/// Child process: build one limiter, insert `keys` keys, print RSS at each step.
fn memory_one(name: &str, keys: usize) -> ExitCode {
    let Some((before, _)) = rss() else {
        eprintln!("cannot read /proc/self/status (Linux only)");
        return ExitCode::FAILURE;
    };
    fn measure<L: Check>(before: u64, keys: usize, build: impl FnOnce() -> L) -> ExitCode {
        let l = build();
        let built = rss().map_or(0, |r| r.0);
        let allowed = fill(&l, keys);
        let (after, peak) = rss().unwrap_or_default();
        println!(
            "{MEMORY_TAG} {before} {built} {after} {peak} {} {allowed}",
            l.held()
        );
        drop(l);
        ExitCode::SUCCESS
    }
    match name {
        "cellgate_table" => measure(before, keys, || table(keys)),
        "cellgate_map" => measure(before, keys, map),
        "governor" => measure(before, keys, gov),
        other => {
            eprintln!("unknown limiter {other:?}; one of {IMPLS:?}");
            ExitCode::FAILURE
        }
    }
}

fn memory(o: &Options) -> ExitCode {
    let exe = match std::env::current_exe() {
        Ok(exe) => exe,
        Err(e) => {
            eprintln!("cannot find this program to re-run it: {e}");
            return ExitCode::FAILURE;
        }
    };
    println!(
        "memory per tracked u64 key: {} keys inserted into one limiter in a fresh process, \
         median of {} processes per limiter\n",
        o.keys, o.reps
    );
    println!(
        "{:<15} {:>12} {:>14} {:>12} {:>14} {:>10}",
        "limiter", "bytes/key", "(at build)", "peak b/key", "RSS delta", "keys held"
    );
    let keys = o.keys as f64;
    // The hot-key mode has no keys to count.
    for name in IMPLS.iter().filter(|&&n| n != IMPLS[STRIPED]) {
        let mut samples = Vec::new();
        for _ in 0..o.reps {
            let out = Command::new(&exe)
                .args(["--memory-one", name, "--keys", &o.keys.to_string()])
                .output();
            let out = match out {
                Ok(out) if out.status.success() => out,
                Ok(out) => {
                    eprintln!(
                        "{name}: child failed: {}",
                        String::from_utf8_lossy(&out.stderr)
                    );
                    return ExitCode::FAILURE;
                }
                Err(e) => {
                    eprintln!("{name}: cannot run child: {e}");
                    return ExitCode::FAILURE;
                }
            };
            let stdout = String::from_utf8_lossy(&out.stdout);
            let fields: Option<Vec<u64>> = stdout
                .lines()
                .find_map(|l| l.strip_prefix(MEMORY_TAG))
                .map(|rest| {
                    rest.split_whitespace()
                        .filter_map(|f| f.parse().ok())
                        .collect()
                });
            match fields.as_deref() {
                Some(&[before, built, after, peak, held, allowed]) => {
                    if held != o.keys as u64 || allowed != o.keys as u64 {
                        eprintln!("{name}: held {held}, allowed {allowed} of {} keys", o.keys);
                        return ExitCode::FAILURE;
                    }
                    samples.push((before, built, after, peak));
                }
                _ => {
                    eprintln!("{name}: unexpected child output {stdout:?}");
                    return ExitCode::FAILURE;
                }
            }
        }
        samples.sort_by_key(|&(before, _, after, _)| after.saturating_sub(before));
        let (before, built, after, peak) = samples[samples.len() / 2];
        let per_key = |x: u64| x.saturating_sub(before) as f64 / keys;
        println!(
            "{:<15} {:>12.1} {:>14.1} {:>12.1} {:>11.1} MiB {:>10}",
            name,
            per_key(after),
            per_key(built),
            per_key(peak),
            after.saturating_sub(before) as f64 / (1 << 20) as f64,
            o.keys
        );
    }
    println!(
        "\nbytes/key: (VmRSS after inserting - VmRSS before building) / keys, allocator \
         overhead included.\n(at build): the part already resident after build(), before any \
         key (the table allocates up front).\npeak b/key: (VmHWM - VmRSS before building) / \
         keys: includes a map's old and new tables while it grows."
    );
    ExitCode::SUCCESS
}
