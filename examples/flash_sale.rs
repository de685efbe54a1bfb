//! A flash sale (seckill) on every core: a crowd of buyers hammering a catalogue of SKUs, each
//! with a fixed inventory. A purchase goes through only if the buyer's own limiter, the SKU's
//! rate limiter and the SKU's stock all allow it.
//!
//! ```sh
//! cargo run --release --example flash_sale                  # ~15 s on every core
//! cargo run --release --example flash_sale -- --duration 2  # a quick run
//! ```
//!
//! # What it simulates
//!
//! Every worker thread loops as fast as it can, each iteration one *buyer attempt*:
//!
//! 1. pick a user uniformly among `--users` (a flash-sale crowd is mostly bots retrying, so every
//!    user is far above its quota and the per-user limiter does most of the rejecting);
//! 2. pick a SKU: with probability `--hot-fraction` one of the hottest SKUs (the first
//!    `--hot-set` fraction of the catalogue, at least one SKU), uniformly among them; otherwise
//!    uniformly among the other SKUs. The default puts 50% of all traffic on the top 1% of SKUs;
//! 3. check the user's GCRA limiter (`KeyedLimiter<u64>`); only if it allows, the SKU's GCRA
//!    limiter (`KeyedLimiter<u32>`); only if that allows too, take one unit from the SKU's stock
//!    (`KeyedLimiter::<u32>::stock(--stock)`, the Redis `DECR` pattern in one CAS). The attempt
//!    is a *sale* when all three allow. The stock never refills: once a SKU sells out, every
//!    later attempt on it is turned away by the stock. With the defaults the hot SKUs sell out
//!    first, as fast as their rate limit lets them (burst 200 + 2000/s reaches 500 units at
//!    0.15 s), the others within a few seconds at most; the rest of the run is the sold-out
//!    rush that a seckill backend must absorb cheaply.
//!
//! The limiters use the default (quanta) clock; time plays no part in the stock. One attempt
//! in 64 is timed into a per-thread log-linear histogram. About once a second a progress line
//! goes to stderr.
//!
//! At the end it prints throughput (total and per thread), allowed/denied per limiter, keys held,
//! check latency percentiles, resident memory, and checks every limiter's promise for every key.
//! The rate limiters:
//!
//! ```text
//! admitted(key) <= burst + elapsed_ns / T        T = period_ns / count (integer ns)
//! ```
//!
//! where `elapsed` runs from just before the limiters (and so their clocks' origins) were built
//! to after the last worker stopped. The stock, per SKU, counted by the example itself (one
//! `AtomicU64` per SKU, bumped on every sale):
//!
//! ```text
//! sold(sku) <= stock                                  (oversold = sold - stock must be 0)
//! stock_limiter.peek(sku).remaining() == stock - sold (the limiter agrees with the tally)
//! ```
//!
//! It lists the best-selling SKUs (`sold N of S, oversold 0`, and when each sold out) and an
//! inventory summary. Any violation prints the offending keys and exits with status 1.
//!
//! # Flags
//!
//! | flag | default | meaning |
//! |---|---|---|
//! | `--users N` | 1000000 | distinct buyers (also the user limiter's `max_keys`) |
//! | `--skus N` | 1000 | distinct SKUs (also the SKU limiters' `max_keys`) |
//! | `--stock N` | 500 | units in stock per SKU at the start (0 = nothing on sale) |
//! | `--threads N` | every core | worker threads |
//! | `--duration S` | 15 | seconds to run (fractions allowed) |
//! | `--user-rate R` | 5 | requests per user per second (fractions allowed) |
//! | `--user-burst B` | 5 | requests a fresh user may make at once |
//! | `--sku-rate R` | 2000 | admissions per SKU per second (fractions allowed) |
//! | `--sku-burst B` | 200 | admissions a fresh SKU may take at once |
//! | `--hot-fraction F` | 0.5 | share of attempts aimed at the hot SKUs, in `[0, 1]` |
//! | `--hot-set F` | 0.01 | share of the catalogue that is hot, in `(0, 1]` |
//! | `--seed N` | 1 | seed of the per-thread PRNGs |
//! | `--help` | | this table, in short |
//!
//! Numbers may contain `_` separators; `--flag=value` works too.

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use cellgate::clock::Clock;
use cellgate::{KeyedLimiter, Quota};
use crossbeam_utils::CachePadded;

const USAGE: &str = "\
flash_sale: a flash sale on every core, admitted by cellgate's per-user and per-SKU GCRA limiters
and sold from a per-SKU stock

USAGE: cargo run --release --example flash_sale -- [FLAGS]

FLAGS:
  --users N          distinct buyers, uniform                      [default: 1000000]
  --skus N           distinct SKUs                                 [default: 1000]
  --stock N          units in stock per SKU (0 = nothing on sale)  [default: 500]
  --threads N        worker threads                                [default: every core]
  --duration S       seconds to run, fractions allowed             [default: 15]
  --user-rate R      requests per user per second                  [default: 5]
  --user-burst B     requests a fresh user may make at once        [default: 5]
  --sku-rate R       admissions per SKU per second                 [default: 2000]
  --sku-burst B      admissions a fresh SKU may take at once       [default: 200]
  --hot-fraction F   share of attempts aimed at the hot SKUs       [default: 0.5]
  --hot-set F        share of the catalogue that is hot (min 1)    [default: 0.01]
  --seed N           PRNG seed                                     [default: 1]
  --help             print this and exit

An attempt is a sale when the user's limiter, then the SKU's rate limiter, then the SKU's stock
all allow it. At the end every rate-limited key is checked against admitted <= burst + elapsed / T,
and every SKU against sold <= stock (oversold 0) and the stock limiter's own remaining count;
exit status 1 if any check fails.";

/// One attempt in `SAMPLE_EVERY` is timed (a power of two).
const SAMPLE_EVERY: u64 = 64;
/// Attempts between two looks at the stop flag and two progress publications.
const BATCH: u64 = 4096;

// ---------------------------------------------------------------------------------------------
// Configuration
// ---------------------------------------------------------------------------------------------

#[derive(Debug, Clone)]
struct Config {
    users: u64,
    skus: u32,
    stock: u32,
    threads: usize,
    duration: Duration,
    user_rate: f64,
    user_burst: u32,
    sku_rate: f64,
    sku_burst: u32,
    hot_fraction: f64,
    hot_set: f64,
    seed: u64,
}

impl Config {
    fn parse() -> Result<Self, String> {
        let mut cfg = Config {
            users: 1_000_000,
            skus: 1000,
            stock: 500,
            threads: std::thread::available_parallelism().map_or(1, |n| n.get()),
            duration: Duration::from_secs(15),
            user_rate: 5.0,
            user_burst: 5,
            sku_rate: 2000.0,
            sku_burst: 200,
            hot_fraction: 0.5,
            hot_set: 0.01,
            seed: 1,
        };
        let mut args = std::env::args().skip(1);
        while let Some(arg) = args.next() {
            if arg == "--help" || arg == "-h" {
                println!("{USAGE}");
                std::process::exit(0);
            }
            let (flag, inline) = match arg.split_once('=') {
                Some((f, v)) => (f.to_string(), Some(v.to_string())),
                None => (arg.clone(), None),
            };
            const KNOWN: [&str; 12] = [
                "--users",
                "--skus",
                "--stock",
                "--threads",
                "--duration",
                "--user-rate",
                "--user-burst",
                "--sku-rate",
                "--sku-burst",
                "--hot-fraction",
                "--hot-set",
                "--seed",
            ];
            if !KNOWN.contains(&flag.as_str()) {
                return Err(format!("unknown flag {arg}"));
            }
            let value = match inline {
                Some(v) => v,
                None => args.next().ok_or_else(|| format!("{flag} needs a value"))?,
            };
            match flag.as_str() {
                "--users" => cfg.users = parse_int(&flag, &value, 1, u64::from(u32::MAX))?,
                "--skus" => cfg.skus = parse_int(&flag, &value, 1, u64::from(u32::MAX))? as u32,
                "--stock" => cfg.stock = parse_int(&flag, &value, 0, u64::from(u32::MAX))? as u32,
                "--threads" => cfg.threads = parse_int(&flag, &value, 1, 4096)? as usize,
                "--duration" => {
                    let s = parse_float(&flag, &value)?;
                    if !(s > 0.0 && s <= 86_400.0) {
                        return Err(format!(
                            "{flag}: expected seconds in (0, 86400], got {value}"
                        ));
                    }
                    cfg.duration = Duration::from_secs_f64(s);
                }
                "--user-rate" => cfg.user_rate = parse_rate(&flag, &value)?,
                "--user-burst" => {
                    cfg.user_burst = parse_int(&flag, &value, 1, u64::from(u32::MAX))? as u32;
                }
                "--sku-rate" => cfg.sku_rate = parse_rate(&flag, &value)?,
                "--sku-burst" => {
                    cfg.sku_burst = parse_int(&flag, &value, 1, u64::from(u32::MAX))? as u32;
                }
                "--hot-fraction" => {
                    let f = parse_float(&flag, &value)?;
                    if !(0.0..=1.0).contains(&f) {
                        return Err(format!(
                            "{flag}: expected a fraction in [0, 1], got {value}"
                        ));
                    }
                    cfg.hot_fraction = f;
                }
                "--hot-set" => {
                    let f = parse_float(&flag, &value)?;
                    if !(f > 0.0 && f <= 1.0) {
                        return Err(format!(
                            "{flag}: expected a fraction in (0, 1], got {value}"
                        ));
                    }
                    cfg.hot_set = f;
                }
                "--seed" => cfg.seed = parse_int(&flag, &value, 0, u64::MAX)?,
                _ => return Err(format!("unknown flag {arg}")),
            }
        }
        Ok(cfg)
    }

    /// How many SKUs are hot: `hot_set` of the catalogue, at least one, at most all.
    fn hot_skus(&self) -> u32 {
        let n = (f64::from(self.skus) * self.hot_set).round() as u64;
        n.clamp(1, u64::from(self.skus)) as u32
    }
}

fn parse_int(flag: &str, value: &str, min: u64, max: u64) -> Result<u64, String> {
    let v: u64 = value
        .replace('_', "")
        .parse()
        .map_err(|_| format!("{flag}: expected an integer, got {value:?}"))?;
    if v < min || v > max {
        return Err(format!("{flag}: expected {min}..={max}, got {v}"));
    }
    Ok(v)
}

fn parse_float(flag: &str, value: &str) -> Result<f64, String> {
    let v: f64 = value
        .replace('_', "")
        .parse()
        .map_err(|_| format!("{flag}: expected a number, got {value:?}"))?;
    if !v.is_finite() {
        return Err(format!("{flag}: expected a finite number, got {value}"));
    }
    Ok(v)
}

fn parse_rate(flag: &str, value: &str) -> Result<f64, String> {
    let r = parse_float(flag, value)?;
    if !(r > 0.0 && r <= 1e9) {
        return Err(format!(
            "{flag}: expected a rate in (0, 1e9] per second, got {value}"
        ));
    }
    Ok(r)
}

/// `rate` per second with `burst`: a whole rate is `rate` per second exactly; a fractional one
/// becomes one request per `1 / rate` seconds.
fn quota(rate: f64, burst: u32) -> Quota {
    if rate.fract() == 0.0 {
        Quota::per_second(rate as u32).with_burst(burst)
    } else {
        Quota::new(1, Duration::from_secs_f64(1.0 / rate)).with_burst(burst)
    }
}

/// The emission interval `T` exactly as the limiter computes it: `period_ns / count`.
fn interval_ns(q: &Quota) -> u64 {
    (q.period().as_nanos() / u128::from(q.count())) as u64
}

// ---------------------------------------------------------------------------------------------
// PRNG, histogram
// ---------------------------------------------------------------------------------------------

/// SplitMix64: tiny, fast, good enough to pick users and SKUs.
struct SplitMix64(u64);

impl SplitMix64 {
    #[inline]
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (Lemire's multiply-high; the bias is below 2^-32 for our `n`).
    #[inline]
    fn below(&mut self, n: u64) -> u64 {
        ((u128::from(self.next()) * u128::from(n)) >> 64) as u64
    }
}

/// Log-linear histogram of nanoseconds: values below 16 exactly, then 16 sub-buckets per power
/// of two (about 6% relative precision), like HdrHistogram with 4 significant bits.
#[derive(Clone)]
struct Histogram {
    counts: Vec<u64>,
    total: u64,
    sum: u128,
    max: u64,
}

const SUB_BITS: u32 = 4;
const SUB: u64 = 1 << SUB_BITS;

impl Histogram {
    fn new() -> Self {
        Self {
            counts: vec![0; (64 - SUB_BITS as usize + 1) * SUB as usize],
            total: 0,
            sum: 0,
            max: 0,
        }
    }

    #[inline]
    fn index(v: u64) -> usize {
        if v < SUB {
            v as usize
        } else {
            let msb = 63 - v.leading_zeros();
            let group = (msb - SUB_BITS + 1) as u64;
            let sub = (v >> (msb - SUB_BITS)) & (SUB - 1);
            (group * SUB + sub) as usize
        }
    }

    /// The largest value that lands in bucket `i`.
    fn bucket_high(i: usize) -> u64 {
        let (group, sub) = (i as u64 / SUB, i as u64 % SUB);
        if group == 0 {
            sub
        } else {
            let shift = group - 1;
            let low = (SUB + sub) << shift;
            low + ((1u64 << shift) - 1)
        }
    }

    #[inline]
    fn record(&mut self, v: u64) {
        self.counts[Self::index(v)] += 1;
        self.total += 1;
        self.sum += u128::from(v);
        self.max = self.max.max(v);
    }

    fn merge(&mut self, other: &Histogram) {
        for (a, b) in self.counts.iter_mut().zip(&other.counts) {
            *a += b;
        }
        self.total += other.total;
        self.sum += other.sum;
        self.max = self.max.max(other.max);
    }

    /// The value at quantile `q` (bucket upper bound, capped by the exact max).
    fn quantile(&self, q: f64) -> Option<u64> {
        if self.total == 0 {
            return None;
        }
        let rank = ((q * self.total as f64).ceil() as u64).clamp(1, self.total);
        let mut seen = 0;
        for (i, &c) in self.counts.iter().enumerate() {
            seen += c;
            if seen >= rank {
                return Some(Self::bucket_high(i).min(self.max));
            }
        }
        Some(self.max)
    }
}

// ---------------------------------------------------------------------------------------------
// Workers
// ---------------------------------------------------------------------------------------------

/// What a worker publishes while running, for the progress line.
#[derive(Default)]
struct Progress {
    attempts: AtomicU64,
    admitted: AtomicU64,
}

/// What a worker hands back when it stops.
struct WorkerReport {
    attempts: u64,
    user_allowed: u64,
    sku_allowed: u64,
    /// Sales: attempts that all three checks allowed.
    admitted: u64,
    run_time: Duration,
    user_lat: Histogram,
    sku_lat: Histogram,
    stock_lat: Histogram,
    all_lat: Histogram,
}

/// `sold_out_at` of a SKU that still has stock.
const NOT_SOLD_OUT: u64 = u64::MAX;

/// Everything the workers share.
struct Shared {
    cfg: Config,
    users: KeyedLimiter<u64>,
    skus: KeyedLimiter<u32>,
    stock: KeyedLimiter<u32>,
    /// Units admitted by the user limiter, per user (the SKU may still have denied).
    user_admits: Vec<AtomicU32>,
    /// Units admitted by the SKU rate limiter, per SKU (the stock may still have denied).
    sku_admits: Vec<AtomicU64>,
    /// Units sold (admitted by the stock), per SKU: the example's own count, checked against
    /// the stock and against the stock limiter at the end.
    sold: Vec<AtomicU64>,
    /// When each SKU sold its last unit, in ns since `epoch`; `NOT_SOLD_OUT` until then.
    sold_out_at: Vec<AtomicU64>,
    /// SKUs sold out so far (for the progress line).
    sold_out: AtomicU64,
    /// Just before the limiters were built.
    epoch: Instant,
    stop: AtomicBool,
    progress: Vec<CachePadded<Progress>>,
    start: Barrier,
}

fn worker(shared: &Shared, id: usize) -> WorkerReport {
    let cfg = &shared.cfg;
    let mut rng = SplitMix64(
        cfg.seed
            .wrapping_mul(0x2545_F491_4F6C_DD1D)
            .wrapping_add(id as u64 + 1),
    );
    let hot = u64::from(cfg.hot_skus());
    let skus = u64::from(cfg.skus);
    let cold = skus - hot;
    // P(hot) = hot_fraction, compared on the raw 64-bit draw; 1.0 saturates to u64::MAX, which
    // leaves a 2^-64 chance of a cold pick: harmless (and impossible when there is no cold SKU).
    let hot_threshold = (cfg.hot_fraction * 18_446_744_073_709_551_616.0) as u64;
    let timer = quanta::Clock::new();
    let mut user_lat = Histogram::new();
    let mut sku_lat = Histogram::new();
    let mut stock_lat = Histogram::new();
    let mut all_lat = Histogram::new();
    let (mut attempts, mut user_allowed, mut sku_allowed, mut admitted) = (0u64, 0u64, 0u64, 0u64);
    let progress = &shared.progress[id];

    shared.start.wait();
    let began = Instant::now();
    while !shared.stop.load(Ordering::Relaxed) {
        for _ in 0..BATCH {
            let user = rng.below(cfg.users);
            let sku = (if cold == 0 || rng.next() < hot_threshold {
                rng.below(hot)
            } else {
                hot + rng.below(cold)
            }) as u32;
            let sample = attempts % SAMPLE_EVERY == 0;
            attempts += 1;
            let t0 = if sample { timer.raw() } else { 0 };

            // User first: most of a flash-sale crowd is over its own quota, and this keeps a
            // single abusive user from consuming SKU capacity. Then the SKU's rate, then its
            // stock. Note that the user's unit is spent even when the SKU then denies, and the
            // SKU's rate unit even when the stock is gone: the checks are not one transaction
            // (all-or-nothing admission across several keys is future work in cellgate).
            let user_ok = shared.users.check(&user).is_allowed();
            let t1 = if sample { timer.raw() } else { 0 };
            if sample {
                user_lat.record(timer.delta_as_nanos(t0, t1));
            }
            if !user_ok {
                if sample {
                    all_lat.record(timer.delta_as_nanos(t0, t1));
                }
                continue;
            }
            user_allowed += 1;
            shared.user_admits[user as usize].fetch_add(1, Ordering::Relaxed);

            let sku_ok = shared.skus.check(&sku).is_allowed();
            let t2 = if sample { timer.raw() } else { 0 };
            if sample {
                sku_lat.record(timer.delta_as_nanos(t1, t2));
            }
            if !sku_ok {
                if sample {
                    all_lat.record(timer.delta_as_nanos(t0, t2));
                }
                continue;
            }
            sku_allowed += 1;
            shared.sku_admits[sku as usize].fetch_add(1, Ordering::Relaxed);

            // The stock admits exactly `--stock` units per SKU, whatever the interleaving: each
            // sale is one CAS from the exact remaining count it was decided on.
            let sale = shared.stock.check(&sku);
            if sample {
                let t3 = timer.raw();
                stock_lat.record(timer.delta_as_nanos(t2, t3));
                all_lat.record(timer.delta_as_nanos(t0, t3));
            }
            if sale.is_allowed() {
                admitted += 1;
                shared.sold[sku as usize].fetch_add(1, Ordering::Relaxed);
                if sale.remaining() == 0 {
                    // This sale took the last unit: exactly one per SKU does.
                    let at = u64::try_from(shared.epoch.elapsed().as_nanos()).unwrap_or(u64::MAX);
                    shared.sold_out_at[sku as usize].store(at, Ordering::Relaxed);
                    shared.sold_out.fetch_add(1, Ordering::Relaxed);
                }
            }
        }
        // Relaxed: progress figures only; the final totals come back through `join`.
        progress.attempts.store(attempts, Ordering::Relaxed);
        progress.admitted.store(admitted, Ordering::Relaxed);
    }
    WorkerReport {
        attempts,
        user_allowed,
        sku_allowed,
        admitted,
        run_time: began.elapsed(),
        user_lat,
        sku_lat,
        stock_lat,
        all_lat,
    }
}

// ---------------------------------------------------------------------------------------------
// Reporting helpers
// ---------------------------------------------------------------------------------------------

/// `1234567` -> `"1,234,567"`.
fn int(v: u64) -> String {
    let s = v.to_string();
    let mut out = String::with_capacity(s.len() + s.len() / 3);
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// A per-second rate with an SI suffix: `"12.34 M/s"`.
fn rate(per_s: f64) -> String {
    if per_s >= 1e9 {
        format!("{:.2} G/s", per_s / 1e9)
    } else if per_s >= 1e6 {
        format!("{:.2} M/s", per_s / 1e6)
    } else if per_s >= 1e3 {
        format!("{:.2} k/s", per_s / 1e3)
    } else {
        format!("{per_s:.2} /s")
    }
}

/// Nanoseconds with a readable unit.
fn nanos(ns: u64) -> String {
    if ns < 1_000 {
        format!("{ns} ns")
    } else if ns < 1_000_000 {
        format!("{:.1} µs", ns as f64 / 1e3)
    } else if ns < 1_000_000_000 {
        format!("{:.1} ms", ns as f64 / 1e6)
    } else {
        format!("{:.2} s", ns as f64 / 1e9)
    }
}

fn percent(part: u64, whole: u64) -> String {
    if whole == 0 {
        "-".to_string()
    } else {
        format!("{:.1}%", part as f64 * 100.0 / whole as f64)
    }
}

/// Resident set size in bytes, from `/proc/self/status` (Linux); `None` elsewhere.
fn rss_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

fn mib(bytes: u64) -> String {
    format!("{:.1} MiB", bytes as f64 / (1024.0 * 1024.0))
}

fn quota_text(rate: f64, burst: u32, t_ns: u64) -> String {
    format!("{rate}/s, burst {burst}  (T = {} ns)", int(t_ns))
}

/// The invariant for one limiter: every key's admitted units within `burst + elapsed / T`.
/// Prints a summary line, returns how many keys broke it.
fn check_invariant(
    name: &str,
    admits: impl Iterator<Item = (u64, u64)>,
    burst: u32,
    t_ns: u64,
    elapsed_ns: u64,
) -> u64 {
    let bound = u64::from(burst) + elapsed_ns / t_ns;
    let (mut broken, mut tightest) = (0u64, (0u64, 0u64));
    for (key, n) in admits {
        if n > tightest.1 {
            tightest = (key, n);
        }
        if n > bound {
            if broken < 10 {
                println!(
                    "  VIOLATION: {name} {key} admitted {} > bound {}",
                    int(n),
                    int(bound)
                );
            }
            broken += 1;
        }
    }
    println!(
        "  {name:<5} bound {:>12} per key; busiest {name} #{:<10} admitted {:>12} ({} of bound)",
        int(bound),
        tightest.0,
        int(tightest.1),
        percent(tightest.1, bound),
    );
    broken
}

/// How many of the best-selling SKUs get a line of their own.
const TOP_SKUS: usize = 10;

/// The inventory report: the best-selling SKUs, a summary, and the stock's promises per SKU
/// (`sold <= stock`, and the stock limiter's own `remaining` equal to `stock - sold`). Returns
/// how many SKUs broke a promise.
fn check_inventory(shared: &Shared, run_offset_ns: u64) -> u64 {
    let stock = u64::from(shared.cfg.stock);
    let skus = shared.sold.len();
    let sold: Vec<u64> = shared
        .sold
        .iter()
        .map(|n| n.load(Ordering::Relaxed))
        .collect();
    let sold_out_at: Vec<u64> = shared
        .sold_out_at
        .iter()
        .map(|t| t.load(Ordering::Relaxed))
        .collect();
    // Seconds into the run (the workers started at `run_offset_ns` after the epoch).
    let secs = |at: u64| at.saturating_sub(run_offset_ns) as f64 / 1e9;

    // Best sellers first; among SKUs that sold the same, the one that sold out first.
    let mut order: Vec<usize> = (0..skus).collect();
    order.sort_by_key(|&i| (std::cmp::Reverse(sold[i]), sold_out_at[i], i));
    println!(
        "  inventory: best sellers ({} of {}), stock {} units per SKU",
        TOP_SKUS.min(skus),
        int(skus as u64),
        int(stock)
    );
    for &i in order.iter().take(TOP_SKUS) {
        let status = if stock == 0 {
            "nothing on sale".to_string()
        } else if sold_out_at[i] != NOT_SOLD_OUT {
            format!("sold out {:.3} s into the run", secs(sold_out_at[i]))
        } else {
            format!("{} left", int(stock.saturating_sub(sold[i])))
        };
        println!(
            "    sku #{i}: sold {} of {}, oversold {}; {status}",
            int(sold[i]),
            int(stock),
            int(sold[i].saturating_sub(stock)),
        );
    }

    let mut broken = 0u64;
    let mut report = |msg: String| {
        if broken < 10 {
            println!("    VIOLATION: {msg}");
        }
        broken += 1;
    };
    let (mut total_sold, mut oversold, mut sold_out) = (0u64, 0u64, 0u64);
    let mut sold_out_times = Vec::new();
    for sku in 0..skus {
        let n = sold[sku];
        total_sold += n;
        let over = n.saturating_sub(stock);
        oversold += over;
        if over > 0 {
            report(format!(
                "sku #{sku} sold {} of {}: oversold {}",
                int(n),
                int(stock),
                int(over)
            ));
        }
        if n >= stock {
            sold_out += 1;
        }
        // The stock limiter's own count must agree with ours, unit for unit.
        let remaining = u64::from(shared.stock.peek(&(sku as u32)).remaining());
        if remaining != stock.saturating_sub(n) {
            report(format!(
                "sku #{sku}: stock limiter has {} remaining, but {} of {} were sold",
                int(remaining),
                int(n),
                int(stock)
            ));
        }
        // Exactly the sale that took the last unit saw `remaining() == 0`.
        let marked = sold_out_at[sku] != NOT_SOLD_OUT;
        if marked != (stock > 0 && n >= stock) {
            report(format!(
                "sku #{sku}: sold {} of {}, but {} sale reported the last unit",
                int(n),
                int(stock),
                if marked { "a" } else { "no" }
            ));
        }
        if marked {
            sold_out_times.push(sold_out_at[sku]);
        }
    }
    println!(
        "  inventory: {} SKUs, sold {} of {} units, sold out {} SKUs, oversold {}",
        int(skus as u64),
        int(total_sold),
        int(stock * skus as u64),
        int(sold_out),
        int(oversold)
    );
    if !sold_out_times.is_empty() {
        sold_out_times.sort_unstable();
        let at = |q: f64| {
            let i = ((q * sold_out_times.len() as f64) as usize).min(sold_out_times.len() - 1);
            secs(sold_out_times[i])
        };
        println!(
            "  sold out: first {:.3} s, median {:.3} s, last {:.3} s into the run",
            at(0.0),
            at(0.5),
            at(1.0)
        );
    }
    println!();
    broken
}

// ---------------------------------------------------------------------------------------------
// Main
// ---------------------------------------------------------------------------------------------

fn main() {
    let cfg = match Config::parse() {
        Ok(cfg) => cfg,
        Err(e) => {
            eprintln!("error: {e}\n\n{USAGE}");
            std::process::exit(2);
        }
    };
    let user_quota = quota(cfg.user_rate, cfg.user_burst);
    let sku_quota = quota(cfg.sku_rate, cfg.sku_burst);
    let user_t = interval_ns(&user_quota);
    let sku_t = interval_ns(&sku_quota);
    let hot = cfg.hot_skus();

    // Per-key tallies of admitted units, touched now so the RSS delta below is the limiters'.
    let user_admits: Vec<AtomicU32> = (0..cfg.users).map(|_| AtomicU32::new(0)).collect();
    let sku_admits: Vec<AtomicU64> = (0..cfg.skus).map(|_| AtomicU64::new(0)).collect();
    let sold: Vec<AtomicU64> = (0..cfg.skus).map(|_| AtomicU64::new(0)).collect();
    let sold_out_at: Vec<AtomicU64> = (0..cfg.skus)
        .map(|_| AtomicU64::new(NOT_SOLD_OUT))
        .collect();
    let rss_start = rss_bytes();

    // The limiters' clocks take their origin when the builders are made: measure the invariant's
    // elapsed time from just before, so it can only over-estimate what the limiters saw.
    let built_at = Instant::now();
    let users = KeyedLimiter::<u64>::gcra(user_quota)
        .max_keys(cfg.users as usize)
        .build();
    let skus = KeyedLimiter::<u32>::gcra(sku_quota)
        .max_keys(cfg.skus as usize)
        .build();
    // Inventory: `--stock` units per SKU, no refill. A SKU's key appears with its first sale.
    let stock = KeyedLimiter::<u32>::stock(cfg.stock)
        .max_keys(cfg.skus as usize)
        .build();
    let (users, skus, stock) = match (users, skus, stock) {
        (Ok(u), Ok(s), Ok(st)) => (u, s, st),
        (Err(e), _, _) => {
            eprintln!("error: user quota: {e}");
            std::process::exit(2);
        }
        (_, Err(e), _) => {
            eprintln!("error: sku quota: {e}");
            std::process::exit(2);
        }
        (_, _, Err(e)) => {
            eprintln!("error: stock: {e}");
            std::process::exit(2);
        }
    };

    println!(
        "cellgate flash sale: {} threads, {:.2} s",
        cfg.threads,
        cfg.duration.as_secs_f64()
    );
    println!(
        "  users  {:>11}   {}",
        int(cfg.users),
        quota_text(cfg.user_rate, cfg.user_burst, user_t)
    );
    println!(
        "  skus   {:>11}   {}",
        int(u64::from(cfg.skus)),
        quota_text(cfg.sku_rate, cfg.sku_burst, sku_t)
    );
    println!(
        "  stock  {:>11}   units per SKU, {} in all, no refill",
        int(u64::from(cfg.stock)),
        int(u64::from(cfg.stock) * u64::from(cfg.skus))
    );
    if hot == cfg.skus {
        println!("  traffic: users uniform, SKUs uniform");
    } else {
        println!(
            "  traffic: users uniform; {}% of attempts uniform over the hot SKUs #0..#{} ({}), the rest over the other {}",
            cfg.hot_fraction * 100.0,
            hot - 1,
            int(u64::from(hot)),
            int(u64::from(cfg.skus - hot)),
        );
    }
    println!();

    let shared = Arc::new(Shared {
        progress: (0..cfg.threads).map(|_| CachePadded::default()).collect(),
        start: Barrier::new(cfg.threads + 1),
        cfg: cfg.clone(),
        users,
        skus,
        stock,
        user_admits,
        sku_admits,
        sold,
        sold_out_at,
        sold_out: AtomicU64::new(0),
        epoch: built_at,
        stop: AtomicBool::new(false),
    });
    let handles: Vec<_> = (0..cfg.threads)
        .map(|id| {
            let shared = Arc::clone(&shared);
            std::thread::Builder::new()
                .name(format!("buyer-{id}"))
                .spawn(move || worker(&shared, id))
                .expect("spawn worker thread")
        })
        .collect();

    shared.start.wait();
    let run_start = Instant::now();
    let deadline = run_start + cfg.duration;
    let mut next_tick = run_start + Duration::from_secs(1);
    loop {
        let now = Instant::now();
        if now >= deadline {
            break;
        }
        std::thread::sleep(next_tick.min(deadline) - now);
        if Instant::now() >= next_tick {
            let elapsed = run_start.elapsed().as_secs_f64();
            let (mut attempts, mut admitted) = (0u64, 0u64);
            for p in &shared.progress {
                attempts += p.attempts.load(Ordering::Relaxed);
                admitted += p.admitted.load(Ordering::Relaxed);
            }
            eprintln!(
                "[{elapsed:6.1} s] {:>11} admission checks so far, {:>14} sold, {:>7} SKUs sold out",
                rate(attempts as f64 / elapsed),
                int(admitted),
                int(shared.sold_out.load(Ordering::Relaxed))
            );
            next_tick += Duration::from_secs(1);
        }
    }
    shared.stop.store(true, Ordering::Relaxed);
    let reports: Vec<WorkerReport> = handles
        .into_iter()
        .map(|h| h.join().expect("worker thread panicked"))
        .collect();
    let wall = run_start.elapsed();
    // Elapsed for the invariant: from before the limiters' clock origins to now, after every
    // check. The limiter's own clock is read too, in case quanta and Instant disagree slightly;
    // both are upper bounds on any `now` a check saw, so their max is one as well.
    let elapsed_ns = u64::try_from(built_at.elapsed().as_nanos())
        .unwrap_or(u64::MAX)
        .max(shared.users.clock().now())
        .max(shared.skus.clock().now());
    let rss_end = rss_bytes();

    // ---- totals ------------------------------------------------------------------------------
    let attempts: u64 = reports.iter().map(|r| r.attempts).sum();
    let user_allowed: u64 = reports.iter().map(|r| r.user_allowed).sum();
    let sku_allowed: u64 = reports.iter().map(|r| r.sku_allowed).sum();
    let admitted: u64 = reports.iter().map(|r| r.admitted).sum();
    let secs = wall.as_secs_f64();
    let calls = attempts + user_allowed + sku_allowed;
    let per_thread: Vec<f64> = reports
        .iter()
        .map(|r| r.attempts as f64 / r.run_time.as_secs_f64())
        .collect();
    let (min_t, max_t) = per_thread
        .iter()
        .fold((f64::MAX, 0.0f64), |(lo, hi), &r| (lo.min(r), hi.max(r)));
    let mean_t = per_thread.iter().sum::<f64>() / per_thread.len() as f64;

    println!("throughput ({:.2} s)", secs);
    println!(
        "  admission checks  {:>15}   {:>11}   one per buyer attempt",
        int(attempts),
        rate(attempts as f64 / secs)
    );
    println!(
        "  limiter calls     {:>15}   {:>11}   user always, sku rate if the user allows, stock if both do",
        int(calls),
        rate(calls as f64 / secs)
    );
    println!(
        "  per thread        {:>15}   {:>11}   mean (min {}, max {})",
        "",
        rate(mean_t),
        rate(min_t),
        rate(max_t)
    );
    if per_thread.len() <= 16 {
        let list: Vec<String> = per_thread.iter().map(|&r| rate(r)).collect();
        println!("  {:<17} {:>15}   {}", "", "each", list.join(", "));
    }
    println!();

    // ---- per limiter -------------------------------------------------------------------------
    println!(
        "  {:<8} {:>15} {:>15} {:>15} {:>11} {:>10} {:>10}",
        "limiter", "checks", "allowed", "denied", "keys held", "refused", "evicted"
    );
    for (name, checks, allowed, len, refused, evicted) in [
        (
            "user",
            attempts,
            user_allowed,
            shared.users.len(),
            shared.users.refused(),
            shared.users.evicted(),
        ),
        (
            "sku",
            user_allowed,
            sku_allowed,
            shared.skus.len(),
            shared.skus.refused(),
            shared.skus.evicted(),
        ),
        (
            "stock",
            sku_allowed,
            admitted,
            shared.stock.len(),
            shared.stock.refused(),
            shared.stock.evicted(),
        ),
    ] {
        println!(
            "  {:<8} {:>15} {:>15} {:>15} {:>11} {:>10} {:>10}",
            name,
            int(checks),
            int(allowed),
            int(checks - allowed),
            int(len as u64),
            int(refused),
            int(evicted)
        );
    }
    println!();
    println!(
        "  outcome: {} sold ({} of attempts); denied by user limiter {}; by sku limiter {} (user unit spent); by stock {} (sold out; user and sku units spent)",
        int(admitted),
        percent(admitted, attempts),
        int(attempts - user_allowed),
        int(user_allowed - sku_allowed),
        int(sku_allowed - admitted)
    );
    println!();

    // ---- latency -----------------------------------------------------------------------------
    let mut user_lat = Histogram::new();
    let mut sku_lat = Histogram::new();
    let mut stock_lat = Histogram::new();
    let mut all_lat = Histogram::new();
    for r in &reports {
        user_lat.merge(&r.user_lat);
        sku_lat.merge(&r.sku_lat);
        stock_lat.merge(&r.stock_lat);
        all_lat.merge(&r.all_lat);
    }
    println!(
        "  {:<22} {:>12} {:>9} {:>9} {:>9} {:>9} {:>9}",
        format!("latency (1 in {SAMPLE_EVERY})"),
        "samples",
        "mean",
        "p50",
        "p99",
        "p99.9",
        "max"
    );
    for (name, h) in [
        ("user check", &user_lat),
        ("sku check", &sku_lat),
        ("stock check", &stock_lat),
        ("admission (all checks)", &all_lat),
    ] {
        let q = |q: f64| h.quantile(q).map_or("-".to_string(), nanos);
        let mean = if h.total == 0 {
            "-".to_string()
        } else {
            nanos((h.sum / u128::from(h.total)) as u64)
        };
        println!(
            "  {:<22} {:>12} {:>9} {:>9} {:>9} {:>9} {:>9}",
            name,
            int(h.total),
            mean,
            q(0.50),
            q(0.99),
            q(0.999),
            if h.total == 0 {
                "-".to_string()
            } else {
                nanos(h.max)
            }
        );
    }
    println!();

    // ---- memory ------------------------------------------------------------------------------
    let keys = (shared.users.len() + shared.skus.len() + shared.stock.len()) as u64;
    match (rss_start, rss_end) {
        (Some(a), Some(b)) => {
            let delta = b.saturating_sub(a);
            let per_key = delta
                .checked_div(keys)
                .map_or("-".to_string(), |b| format!("{} B", int(b)));
            println!(
                "  memory: RSS {} at start, {} at end; delta {} (about {} per key held)",
                mib(a),
                mib(b),
                mib(delta),
                per_key
            );
        }
        _ => println!("  memory: n/a (no /proc/self/status)"),
    }
    println!();

    // ---- inventory ---------------------------------------------------------------------------
    let run_offset_ns =
        u64::try_from(run_start.saturating_duration_since(built_at).as_nanos()).unwrap_or(0);
    let mut broken = check_inventory(&shared, run_offset_ns);

    // ---- invariant ---------------------------------------------------------------------------
    println!(
        "  invariant: per key, admitted <= burst + elapsed / T, elapsed = {:.3} s since the limiters were built",
        elapsed_ns as f64 / 1e9
    );
    broken += check_invariant(
        "user",
        shared
            .user_admits
            .iter()
            .enumerate()
            .map(|(k, n)| (k as u64, u64::from(n.load(Ordering::Relaxed)))),
        cfg.user_burst,
        user_t,
        elapsed_ns,
    );
    broken += check_invariant(
        "sku",
        shared
            .sku_admits
            .iter()
            .enumerate()
            .map(|(k, n)| (k as u64, n.load(Ordering::Relaxed))),
        cfg.sku_burst,
        sku_t,
        elapsed_ns,
    );
    // The per-key tallies must also add up to the per-thread totals.
    let user_sum: u64 = shared
        .user_admits
        .iter()
        .map(|n| u64::from(n.load(Ordering::Relaxed)))
        .sum();
    let sku_sum: u64 = shared
        .sku_admits
        .iter()
        .map(|n| n.load(Ordering::Relaxed))
        .sum();
    let sold_sum: u64 = shared.sold.iter().map(|n| n.load(Ordering::Relaxed)).sum();
    if user_sum != user_allowed || sku_sum != sku_allowed || sold_sum != admitted {
        println!(
            "  VIOLATION: per-key tallies ({} user, {} sku, {} sold) disagree with totals ({}, {}, {})",
            int(user_sum),
            int(sku_sum),
            int(sold_sum),
            int(user_allowed),
            int(sku_allowed),
            int(admitted)
        );
        broken += 1;
    }
    println!(
        "  stock bound {:>12} per SKU: sold <= stock, and the limiter's remaining = stock - sold (checked above)",
        int(u64::from(cfg.stock))
    );
    if broken > 0 {
        println!("invariant: VIOLATED ({broken} keys admitted above their quota, oversold, or miscounted)");
        eprintln!("error: invariant violated: {broken} keys admitted above their quota, oversold, or miscounted");
        std::process::exit(1);
    }
    println!("invariant: OK (no key admitted above its quota, no SKU oversold, the stock limiter agrees)");
}
