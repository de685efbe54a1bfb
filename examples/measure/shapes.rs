//! The shapes users run, by threads, cellgate's defaults beside governor in the same run:
//! several keyed limiters per request, one hot key, disjoint random keys.
//!
//! ```sh
//! cargo run --release --example shapes                          # threads 1, 2, 4, ... all CPUs
//! cargo run --release --example shapes -- --threads 1,2 --seconds 0.5 --reps 5
//! cargo run --release --example shapes -- --shapes hot --threads 1,16
//! cargo run --release --example shapes -- --tsv rows.tsv        # also the rows for the chart
//! cargo run --release --example shapes -- --clock coarse          # both on their coarse clocks
//! python3 examples/measure/chart.py rows.tsv > shapes.svg         # checks/s by threads
//! ```
//!
//! # Shapes
//!
//! * `limiters` (`--limiters 1,3,9`, `--keys 1000,100000`): a *request* checks `N` keyed
//!   limiters in turn (as a service checks one per IP, per user and per SKU), each over its own
//!   `K` keys: request `r` (uniform in `[0, K)`, a fixed random walk per thread) checks key `r`
//!   of every limiter. cellgate: `N` × `KeyedLimiter::<u64>::gcra(q).build()` (the default
//!   store, nothing sized); governor: `N` × `RateLimiter::keyed(q)`. Every limiter is filled
//!   with its keys before timing. Rates are counted in checks (`N` per request). For `N` = 3
//!   and 9 also `cellgate_all`: the same limiters checked all or nothing, as the README's quick
//!   start does, with one `check_all` per request over the pairs `(&limiter, &key)` (a denial
//!   would give back what the others took; governor has no such call, so its row is the
//!   sequential checks).
//! * `hot`: every check on one key. cellgate: the default keyed store, the hot-key mode as
//!   built by default (`StripedLimiter::gcra(q).build()`: a stripe per CPU, the default time
//!   sharing) and `.strict_clock()`; governor's keyed limiter on that key.
//! * `disjoint` (`--keys`, the largest): one keyed limiter; thread `t` owns keys
//!   `[t*K/T, (t+1)*K/T)` and walks them in a random order.
//!
//! The quota is 10^9 per second with a burst of 10^7: every check is admitted, so every check
//! takes the writing path (`allowed` shows it). Each library uses its default clock and hasher;
//! with `--clock coarse`, each one's coarse clock instead (cellgate's `CoarseClock`, governor's
//! `QuantaUpkeepClock`, both one relaxed load of a timestamp an upkeep thread refreshes every
//! millisecond), which shows what a check costs without reading the time-stamp counter.
//!
//! # Method
//!
//! A *cell* is one shape, one parameter set, one thread count and one limiter. The threads
//! start together at a barrier and run for `--seconds` of wall time (reading the clock once per
//! 1024 requests); the cell's rate is the sum over threads of checks / elapsed. Each cell is
//! run `--reps` times (default 3), the limiters of a row interleaved (cellgate, governor,
//! cellgate, ...) so that drift in a shared machine's load hits them alike, after one untimed
//! warm-up of a tenth of `--seconds`. Printed: the median rate, the spread (max - min) /
//! median, `vs gov` (the median of the per-repetition ratios to governor's rate in the same
//! repetition), `scaling` (the median rate over the same limiter's 1-thread median) and, for
//! `limiters`, `per limiter` (ns per check with `N` limiters over ns per check with 1, same
//! keys and threads).
//!
//! `--tsv FILE` also writes one line per cell: `shape`, `params`, `limiter`, `threads`,
//! `checks/s` (median) and the per-repetition rates, for `chart.py`.

mod admit_all;
mod keys;

use std::fmt::Write as _;
use std::sync::Barrier;
use std::time::{Duration, Instant};

use admit_all::{
    cellgate_quota, check_seconds, governor_quota, options_or_usage, parse, print_machine,
    read_options, BURST, RATE,
};
use cellgate::clock::{Clock, CoarseClock, DefaultClock};
use cellgate::{check_all, AnyLimiter, KeyedLimiter, StripedLimiter};
use governor::clock::QuantaUpkeepClock;
use keys::{shuffle, splitmix64};

/// Requests between two clock reads in a worker.
const STRIDE: usize = 1024;
/// Requests in each thread's precomputed walk (it wraps around).
const WALK: usize = 1 << 16;

const USAGE: &str = "\
usage: shapes [--threads 1,2,...] [--seconds S] [--reps R] [--shapes limiters,hot,disjoint]
              [--limiters 1,3,9] [--keys 1000,100000] [--clock precise|coarse] [--tsv FILE]

  --threads LIST   thread counts (default: 1, 2, 4, ... up to every available CPU, and it)
  --seconds S      wall time per cell and repetition (default 1)
  --reps R         repetitions per cell; the median is printed (default 3)
  --shapes LIST    which shapes to run (default: all three)
  --limiters LIST  limiters per request of the `limiters` shape (default 1,3,9)
  --keys LIST      keys per limiter (default 1000,100000; `disjoint` uses the largest)
  --clock C        precise (default: each library's default clock) or coarse (each one's
                   clock refreshed every millisecond by an upkeep thread)
  --tsv FILE       also write the rows for examples/measure/chart.py";

/// One limiter of a cell: checks a key (the hot-key mode ignores it).
trait Check: Sync {
    fn allow(&self, key: u64) -> bool;
}

impl<C: Clock> Check for KeyedLimiter<u64, C> {
    #[inline]
    fn allow(&self, key: u64) -> bool {
        self.check(&key).is_allowed()
    }
}

impl<C: Clock> Check for StripedLimiter<C> {
    #[inline]
    fn allow(&self, _key: u64) -> bool {
        self.check().is_allowed()
    }
}

impl Check for governor::DefaultKeyedRateLimiter<u64> {
    #[inline]
    fn allow(&self, key: u64) -> bool {
        self.check_key(&key).is_ok()
    }
}

/// governor's keyed limiter on its coarse clock.
type GovernorCoarse = governor::RateLimiter<
    u64,
    governor::state::keyed::DefaultKeyedStateStore<u64>,
    QuantaUpkeepClock,
    governor::middleware::NoOpMiddleware<governor::clock::QuantaInstant>,
>;

impl Check for GovernorCoarse {
    #[inline]
    fn allow(&self, key: u64) -> bool {
        self.check_key(&key).is_ok()
    }
}

/// The clocks both libraries' limiters read (`--clock`): each library's default precise clock,
/// or each one's coarse clock (a timestamp an upkeep thread refreshes every millisecond).
enum Clocks {
    Precise,
    Coarse {
        cellgate: CoarseClock,
        governor: QuantaUpkeepClock,
    },
}

impl Clocks {
    fn new(coarse: bool) -> Result<Self, String> {
        if !coarse {
            return Ok(Clocks::Precise);
        }
        let governor = QuantaUpkeepClock::from_interval(Duration::from_millis(1))
            .map_err(|e| format!("governor's upkeep clock: {e}"))?;
        Ok(Clocks::Coarse {
            cellgate: CoarseClock::new(),
            governor,
        })
    }

    fn keyed(&self) -> Box<dyn Check> {
        let b = KeyedLimiter::<u64>::gcra(cellgate_quota());
        match self {
            Clocks::Precise => Box::new(b.build().expect("valid quota")),
            Clocks::Coarse { cellgate, .. } => {
                Box::new(b.clock(cellgate.clone()).build().expect("valid quota"))
            }
        }
    }

    fn gov(&self) -> Box<dyn Check> {
        match self {
            Clocks::Precise => {
                Box::new(governor::RateLimiter::<u64, _, _>::keyed(governor_quota()))
            }
            Clocks::Coarse { governor, .. } => Box::new(GovernorCoarse::dashmap_with_clock(
                governor_quota(),
                governor.clone(),
            )),
        }
    }

    fn striped(&self, strict: bool) -> Box<dyn Check> {
        let b = StripedLimiter::gcra(cellgate_quota());
        let b = if strict { b.strict_clock() } else { b };
        match self {
            Clocks::Precise => Box::new(b.build().expect("valid quota")),
            Clocks::Coarse { cellgate, .. } => {
                Box::new(b.clock(cellgate.clone()).build().expect("valid quota"))
            }
        }
    }

    /// `n` (3 or 9) default keyed limiters checked all or nothing.
    fn all_of(&self, n: usize) -> Option<Box<dyn AllOf>> {
        match self {
            Clocks::Precise => all_of(n, &DefaultClock::new()),
            Clocks::Coarse { cellgate, .. } => all_of(n, cellgate),
        }
    }

    fn name(&self) -> &'static str {
        match self {
            Clocks::Precise => "each library's default precise clock",
            Clocks::Coarse { .. } => {
                "coarse clocks (cellgate's CoarseClock, governor's QuantaUpkeepClock, 1 ms)"
            }
        }
    }
}

/// Key `i` of limiter `l`: distinct, scattered, different for every limiter.
fn key(l: usize, i: usize) -> u64 {
    splitmix64(((l as u64) << 40) | i as u64)
}

/// A set of limiters one cell runs: each request checks every one of them, in turn or (with
/// `all`) all or nothing through it.
struct Set {
    name: &'static str,
    limiters: Vec<Box<dyn Check>>,
    all: Option<Box<dyn AllOf>>,
}

/// A request's checks of several keyed limiters at once, all or nothing.
trait AllOf: Sync {
    /// Checks request `r`'s key of every limiter; returns the checks admitted.
    fn admit(&self, r: usize) -> u64;
    /// Fills every limiter with its first `keys` keys.
    fn fill(&self, keys: usize);
    /// The limiters checked per request.
    fn len(&self) -> usize;
}

/// `N` keyed limiters checked with one [`check_all`] per request.
struct CheckAll<const N: usize, C>(Vec<KeyedLimiter<u64, C>>);

impl<const N: usize, C: Clock> AllOf for CheckAll<N, C> {
    #[inline]
    fn admit(&self, r: usize) -> u64 {
        let keys: [u64; N] = std::array::from_fn(|l| key(l, r));
        let pairs: [(&KeyedLimiter<u64, C>, &u64); N] =
            std::array::from_fn(|l| (&self.0[l], &keys[l]));
        let gates: [(&dyn AnyLimiter, u32); N] =
            std::array::from_fn(|l| (&pairs[l] as &dyn AnyLimiter, 1));
        let d = check_all(gates);
        if d.is_allowed() {
            N as u64
        } else {
            0
        }
    }

    fn fill(&self, keys: usize) {
        for i in 0..keys {
            self.admit(i);
        }
    }

    fn len(&self) -> usize {
        N
    }
}

impl Set {
    /// A set checking `limiters` in turn.
    fn each(name: &'static str, limiters: Vec<Box<dyn Check>>) -> Self {
        Set {
            name,
            limiters,
            all: None,
        }
    }

    /// The checks per request.
    fn size(&self) -> usize {
        self.all.as_ref().map_or(self.limiters.len(), |a| a.len())
    }
}

/// `n` (3 or 9) default keyed limiters on `clock` checked all or nothing.
fn all_of<C: Clock + Clone + 'static>(n: usize, clock: &C) -> Option<Box<dyn AllOf>> {
    let limiters = || {
        (0..n)
            .map(|_| {
                KeyedLimiter::<u64>::gcra(cellgate_quota())
                    .clock(clock.clone())
                    .build()
                    .expect("valid quota")
            })
            .collect()
    };
    match n {
        3 => Some(Box::new(CheckAll::<3, C>(limiters()))),
        9 => Some(Box::new(CheckAll::<9, C>(limiters()))),
        _ => None,
    }
}

/// One thread's walk: request numbers (a key index per request).
fn walk(keys: usize, seed: u64) -> Vec<u32> {
    (0..WALK as u64)
        .map(|i| (splitmix64(seed.wrapping_mul(0x9E37) ^ i) % keys as u64) as u32)
        .collect()
}

/// Runs `set` on `walks.len()` threads for `seconds`; returns (checks/s, share admitted).
fn run(set: &Set, walks: &[Vec<u32>], seconds: f64) -> (f64, f64) {
    let threads = walks.len();
    let barrier = Barrier::new(threads);
    let limit = Duration::from_secs_f64(seconds);
    let per: Vec<(u64, u64, Duration)> = std::thread::scope(|s| {
        let handles: Vec<_> = walks
            .iter()
            .map(|walk| {
                let (barrier, set) = (&barrier, &set);
                s.spawn(move || {
                    barrier.wait();
                    let start = Instant::now();
                    let (mut checks, mut allowed, mut at) = (0u64, 0u64, 0usize);
                    loop {
                        for _ in 0..STRIDE {
                            let r = walk[at] as usize;
                            at = if at + 1 == walk.len() { 0 } else { at + 1 };
                            match &set.all {
                                Some(all) => allowed += all.admit(r),
                                None => {
                                    for (l, limiter) in set.limiters.iter().enumerate() {
                                        allowed += u64::from(limiter.allow(key(l, r)));
                                    }
                                }
                            }
                        }
                        checks += (STRIDE * set.size()) as u64;
                        let elapsed = start.elapsed();
                        if elapsed >= limit {
                            return (checks, allowed, elapsed);
                        }
                    }
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let rate = per
        .iter()
        .map(|&(c, _, e)| c as f64 / e.as_secs_f64())
        .sum();
    let (checks, allowed) = per
        .iter()
        .fold((0, 0), |(c, a), &(pc, pa, _)| (c + pc, a + pa));
    (rate, allowed as f64 / checks.max(1) as f64)
}

struct Options {
    threads: Vec<usize>,
    seconds: f64,
    reps: usize,
    shapes: Vec<String>,
    limiters: Vec<usize>,
    keys: Vec<usize>,
    tsv: Option<String>,
    coarse: bool,
}

fn list(s: &str) -> Result<Vec<usize>, String> {
    s.split(',').map(|x| parse(x.trim())).collect()
}

fn parse_args() -> Result<Options, String> {
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let mut threads: Vec<usize> = std::iter::successors(Some(1usize), |t| Some(t * 2))
        .take_while(|&t| t < cpus)
        .collect();
    threads.push(cpus);
    let mut o = Options {
        threads,
        seconds: 1.0,
        reps: 3,
        shapes: vec!["limiters".into(), "hot".into(), "disjoint".into()],
        limiters: vec![1, 3, 9],
        keys: vec![1_000, 100_000],
        tsv: None,
        coarse: false,
    };
    read_options(|name, value| {
        match name {
            "--threads" => o.threads = list(&value()?)?,
            "--seconds" => o.seconds = parse(&value()?)?,
            "--reps" => o.reps = parse(&value()?)?,
            "--shapes" => {
                o.shapes = value()?.split(',').map(str::to_owned).collect();
                if let Some(bad) = o
                    .shapes
                    .iter()
                    .find(|s| !["limiters", "hot", "disjoint"].contains(&s.as_str()))
                {
                    return Err(format!("unknown shape {bad:?}"));
                }
            }
            "--limiters" => o.limiters = list(&value()?)?,
            "--keys" => o.keys = list(&value()?)?,
            "--tsv" => o.tsv = Some(value()?),
            "--clock" => {
                o.coarse = match value()?.as_str() {
                    "precise" => false,
                    "coarse" => true,
                    other => return Err(format!("unknown clock {other:?}: precise or coarse")),
                }
            }
            _ => return Ok(false),
        }
        Ok(true)
    })?;
    let zero = |v: &[usize]| v.is_empty() || v.contains(&0);
    if zero(&o.threads) || zero(&o.limiters) || zero(&o.keys) || o.reps == 0 {
        return Err("thread counts, limiters, keys and --reps must be at least 1".into());
    }
    if o.keys.iter().any(|&k| k > u32::MAX as usize) {
        return Err("--keys must fit in 32 bits".into());
    }
    check_seconds(o.seconds)?;
    Ok(o)
}

/// The results of one row: a limiter's median rate per thread count, and its repetitions.
struct Cell {
    limiter: &'static str,
    threads: usize,
    rates: Vec<f64>,
    ratios: Vec<f64>,
    allowed: f64,
}

fn median(v: &[f64]) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// Runs one row (a shape and parameter set) at every thread count: the sets `make` builds,
/// interleaved per repetition, the last set being governor's. Prints the table and returns the
/// cells.
fn row(
    o: &Options,
    shape: &str,
    params: &str,
    make: &dyn Fn(usize) -> Vec<Set>,
    walks: &dyn Fn(usize) -> Vec<Vec<u32>>,
    tsv: &mut String,
) -> Vec<Cell> {
    let mut cells: Vec<Cell> = Vec::new();
    for &threads in &o.threads {
        let sets = make(threads);
        let walks = walks(threads);
        for set in &sets {
            run(set, &walks, (o.seconds / 10.0).min(0.2));
        }
        let mut rates = vec![Vec::new(); sets.len()];
        let mut allowed = vec![0.0; sets.len()];
        for _ in 0..o.reps {
            for (i, set) in sets.iter().enumerate() {
                let (rate, share) = run(set, &walks, o.seconds);
                rates[i].push(rate);
                allowed[i] = share;
            }
        }
        let gov = rates.last().cloned().unwrap_or_default();
        for (i, set) in sets.iter().enumerate() {
            let ratios = rates[i].iter().zip(&gov).map(|(a, g)| a / g).collect();
            cells.push(Cell {
                limiter: set.name,
                threads,
                rates: rates[i].clone(),
                ratios,
                allowed: allowed[i],
            });
        }
    }
    for c in &cells {
        let base = cells
            .iter()
            .find(|b| b.limiter == c.limiter && b.threads == 1)
            .map(|b| median(&b.rates));
        let m = median(&c.rates);
        let spread = (c.rates.iter().copied().fold(f64::MIN, f64::max)
            - c.rates.iter().copied().fold(f64::MAX, f64::min))
            / m;
        println!(
            "{shape:<9} {params:<22} {:<17} {:>3} {:>9.2} M {:>6.1}% {:>9.1} {:>7.1}% {:>8} {:>8}",
            c.limiter,
            c.threads,
            m / 1e6,
            spread * 100.0,
            c.threads as f64 / m * 1e9,
            c.allowed * 100.0,
            if c.limiter == "governor" {
                "-".to_string()
            } else {
                format!("{:.2}x", median(&c.ratios))
            },
            base.map_or("-".to_string(), |b| format!("{:.2}x", m / b)),
        );
        let reps: Vec<String> = c.rates.iter().map(|r| format!("{r:.0}")).collect();
        let _ = writeln!(
            tsv,
            "{shape}\t{params}\t{}\t{}\t{m:.0}\t{}",
            c.limiter,
            c.threads,
            reps.join(",")
        );
    }
    cells
}

fn main() -> std::process::ExitCode {
    let o = match options_or_usage(parse_args(), USAGE) {
        Ok(o) => o,
        Err(code) => return code,
    };
    let clocks = match Clocks::new(o.coarse) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("{e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    print_machine();
    println!(
        "{} s per cell and repetition, median of {}; GCRA {RATE}/s, burst {BURST}: every check admitted; {}\n",
        o.seconds,
        o.reps,
        clocks.name()
    );
    println!(
        "{:<9} {:<22} {:<17} {:>3} {:>11} {:>7} {:>9} {:>8} {:>8} {:>8}",
        "shape",
        "params",
        "limiter",
        "thr",
        "checks/s",
        "spread",
        "ns/check",
        "allowed",
        "vs gov",
        "scaling"
    );
    let mut tsv = String::from("shape\tparams\tlimiter\tthreads\tchecks_per_s\treps\n");
    let hot_walk = |threads: usize| vec![vec![0u32; WALK]; threads];
    for shape in &o.shapes {
        match shape.as_str() {
            "limiters" => {
                for &k in &o.keys {
                    let mut per_one: Option<Vec<Cell>> = None;
                    for &n in &o.limiters {
                        let fill = |set: &Set| {
                            if let Some(all) = &set.all {
                                all.fill(k);
                            }
                            for (l, limiter) in set.limiters.iter().enumerate() {
                                for i in 0..k {
                                    limiter.allow(key(l, i));
                                }
                            }
                        };
                        let make = |_threads: usize| {
                            let mut sets = vec![
                                Set::each("cellgate", (0..n).map(|_| clocks.keyed()).collect()),
                                Set::each("governor", (0..n).map(|_| clocks.gov()).collect()),
                            ];
                            if let Some(all) = clocks.all_of(n) {
                                let set = Set {
                                    name: "cellgate_all",
                                    limiters: Vec::new(),
                                    all: Some(all),
                                };
                                sets.insert(1, set);
                            }
                            sets.iter().for_each(fill);
                            sets
                        };
                        let walks =
                            |threads: usize| (0..threads).map(|t| walk(k, 7 + t as u64)).collect();
                        let params = format!("{n} limiters, {k} keys");
                        let cells = row(&o, "limiters", &params, &make, &walks, &mut tsv);
                        if n == 1 {
                            per_one = Some(cells);
                        } else if let Some(one) = &per_one {
                            for c in cells.iter().filter(|c| c.limiter.starts_with("cellgate")) {
                                if let Some(b) = one
                                    .iter()
                                    .find(|b| b.limiter == "cellgate" && b.threads == c.threads)
                                {
                                    println!(
                                        "          per limiter, {n} vs 1, {} threads, {}: {:.2}x the ns per check",
                                        c.threads,
                                        c.limiter,
                                        median(&b.rates) / median(&c.rates)
                                    );
                                }
                            }
                        }
                    }
                }
            }
            "hot" => {
                let make = |_threads: usize| {
                    vec![
                        Set::each("cellgate_keyed", vec![clocks.keyed()]),
                        Set::each("cellgate_striped", vec![clocks.striped(false)]),
                        Set::each("striped_strict", vec![clocks.striped(true)]),
                        Set::each("governor", vec![clocks.gov()]),
                    ]
                };
                row(&o, "hot", "one key", &make, &hot_walk, &mut tsv);
            }
            "disjoint" => {
                let k = o.keys.iter().copied().max().unwrap_or(100_000);
                let make = |_threads: usize| {
                    let sets = vec![
                        Set::each("cellgate", vec![clocks.keyed()]),
                        Set::each("governor", vec![clocks.gov()]),
                    ];
                    for set in &sets {
                        for i in 0..k {
                            set.limiters[0].allow(key(0, i));
                        }
                    }
                    sets
                };
                let walks = |threads: usize| {
                    (0..threads)
                        .map(|t| {
                            let (lo, hi) = (t * k / threads, (t + 1) * k / threads);
                            let mut own: Vec<u32> = (lo as u32..hi as u32).collect();
                            shuffle(&mut own, 100 + t as u64);
                            own.iter().cycle().take(WALK).copied().collect()
                        })
                        .collect()
                };
                row(
                    &o,
                    "disjoint",
                    &format!("{k} keys"),
                    &make,
                    &walks,
                    &mut tsv,
                );
            }
            _ => unreachable!("checked by parse_args"),
        }
    }
    println!(
        "\nchecks/s: median over repetitions of the sum over threads of checks / elapsed; spread: \
         (max - min) / median;\nvs gov: median of the per-repetition ratios to governor's rate in \
         the same repetition (above 1 = faster);\nscaling: the median rate over the same limiter's \
         1-thread median."
    );
    if let Some(path) = &o.tsv {
        if let Err(e) = std::fs::write(path, tsv) {
            eprintln!("error: cannot write {path}: {e}");
            return std::process::ExitCode::FAILURE;
        }
    }
    std::process::ExitCode::SUCCESS
}
