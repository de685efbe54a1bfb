//! The model seckill: a flash sale on every core, where a purchase is admitted all or nothing by
//! one [`check_all`] over every limit that applies, and the run ends by proving that nothing
//! was oversold and that no limiter paid for a purchase that did not happen.
//!
//! ```sh
//! cargo run --release --example flash_sale                  # ~15 s on every core
//! cargo run --release --example flash_sale -- --duration 2  # a quick run
//! cargo run --release --example flash_sale -- --rush        # sold out within a second
//! ```
//!
//! # What it simulates
//!
//! A flash sale: a shop puts `--skus` products (SKUs) on sale at the same instant, `--stock`
//! units of each, and a crowd of `--users` buyers rushes in. The shop's rules: never sell a
//! unit that is not in stock, sell each SKU at a steady pace (`--sku-rate` a second, so the
//! sale lasts and is fair to late arrivals), let no buyer hammer the shop (`--user-rate`),
//! sell at most one unit to each buyer, and stay within the shop's hourly order budget.
//!
//! By default each SKU is paced to sell its stock over about 14 s, so a 15 s run measures a
//! sale that is still selling for nearly all of it, and prints its progress every second.
//! `--rush` paces the SKUs fast enough that everything sells out within the first second:
//! the rest of the run measures the sold-out rush (buyers still pounding on empty shelves).
//!
//! Every worker thread loops as fast as it can, each iteration one *buyer attempt*: pick a user
//! uniformly among `--users` (a flash-sale crowd is mostly bots retrying), pick a SKU (with
//! probability `--hot-fraction` one of the hottest `--hot-set` of the catalogue, otherwise one
//! of the others), and ask, all or nothing:
//!
//! | gate | limiter | what it stops |
//! |---|---|---|
//! | 0 | the SKU's stock, in hot-key mode: `StripedLimiter::stock(--stock)` (one per SKU, a stripe per thread) | overselling |
//! | 1 | the SKU's rate: `KeyedLimiter<u32>::gcra(--sku-rate, --sku-burst)` | a SKU selling out in one instant |
//! | 2 | the user's rate: `KeyedLimiter<u64>::gcra(--user-rate, --user-burst)` | bots hammering |
//! | 3 | the per-user cap: `KeyedLimiter<u64>::stock(1)`: one purchase per user | one buyer taking many |
//! | 4 | the global budget: `Limiter::gcra(Quota::per_hour(--global-budget))` | the whole server's orders |
//!
//! The stock goes first: once a SKU sells out, its attempts stop at a read of the stripes and
//! charge nothing else. When a later gate says no, `check_all` gives back what the earlier ones
//! took, exactly (a sold-out stock never burns a user's cap or the global budget). The global
//! limiter reads a `ManualClock` frozen at the start: the sale lasts seconds of an hour's
//! budget, and a frozen clock lets the run check to the unit that it was charged exactly the
//! purchases made. The other limiters use the default clock.
//!
//! # What it checks
//!
//! Each purchase bumps the SKU's sales tally; the purchase that takes the last unit records
//! when the SKU **sold out**. At the end, for every SKU and user (exit status 1 if any fails):
//!
//! ```text
//! sold(sku) <= stock; admitted after sold out = sold(sku) - stock beyond it = 0  (oversold 0)
//! sku_stock.remaining() == stock - sold(sku)          (the striped stock agrees with the tally)
//! bought(user) <= 1 and cap.peek(user).remaining() == 1 - bought(user)
//! global budget left == budget - purchases            (rollbacks charged it nothing)
//! ```
//!
//! and it tells the story: when the first and last SKUs sold out, what the rest of the run
//! measured (the sold-out rush), why attempts were refused ([`Decision::denial`]: sold out, rate
//! limited, ...), and the budget left in every limiter.
//!
//! # Flags
//!
//! | flag | default | meaning |
//! |---|---|---|
//! | `--users N` | 1000000 | distinct buyers (also the user limiters' `max_keys`) |
//! | `--skus N` | 1000 | distinct SKUs on sale |
//! | `--stock N` | 500 | units in stock per SKU at the start (0 = nothing on sale) |
//! | `--threads N` | every core | worker threads (and stripes per SKU) |
//! | `--duration S` | 15 | seconds to run (fractions allowed) |
//! | `--user-rate R` | 5 | requests per user per second (fractions allowed) |
//! | `--user-burst B` | 5 | requests a fresh user may make at once |
//! | `--sku-rate R` | 35 | purchases per SKU per second (fractions allowed) |
//! | `--sku-burst B` | 20 | purchases a fresh SKU may take at once |
//! | `--rush` | | the sold-out rush: `--sku-rate 2000 --sku-burst 200` unless given |
//! | `--hot-fraction F` | 0.5 | share of attempts aimed at the hot SKUs, in `[0, 1]` |
//! | `--hot-set F` | 0.01 | share of the catalogue that is hot, in `(0, 1]` |
//! | `--global-budget N` | 1000000 | purchases the whole server admits per hour |
//! | `--seed N` | 1 | seed of the per-thread PRNGs |
//! | `--help` | | this table, in short |
//!
//! Numbers may contain `_` separators; `--flag=value` works too.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
use std::sync::Barrier;
use std::time::{Duration, Instant};

use cellgate::clock::ManualClock;
use cellgate::{
    check_all, AnyLimiter, Decision, Denial, KeyedLimiter, Limiter, Quota, StripedLimiter,
};

const USAGE: &str = "\
flash_sale: a simulated flash sale. A shop puts SKUs on sale at once, a few hundred units each,
and a crowd of buyers (mostly bots retrying) rushes in on every core. Each buyer attempt is
admitted all or nothing by one check_all over five limits: the SKU's stock (never oversell), the
SKU's pace, the buyer's request rate, one purchase per buyer, and the shop's hourly budget.
By default the SKUs are paced to sell out after about 14 s, so a 15 s run is a sale that is
still selling; --rush sells everything within a second and measures the sold-out rush.

USAGE: cargo run --release --example flash_sale -- [FLAGS]

FLAGS:
  --users N          distinct buyers, uniform                      [default: 1000000]
  --skus N           distinct SKUs                                 [default: 1000]
  --stock N          units in stock per SKU (0 = nothing on sale)  [default: 500]
  --threads N        worker threads (and stripes per SKU)          [default: every core]
  --duration S       seconds to run, fractions allowed             [default: 15]
  --user-rate R      requests per user per second                  [default: 5]
  --user-burst B     requests a fresh user may make at once        [default: 5]
  --sku-rate R       purchases per SKU per second                  [default: 35]
  --sku-burst B      purchases a fresh SKU may take at once        [default: 20]
  --rush             the sold-out rush: --sku-rate 2000 --sku-burst 200 unless given
  --hot-fraction F   share of attempts aimed at the hot SKUs       [default: 0.5]
  --hot-set F        share of the catalogue that is hot (min 1)    [default: 0.01]
  --global-budget N  purchases the whole server admits per hour    [default: 1000000]
  --seed N           PRNG seed                                     [default: 1]
  --help             print this and exit

While it runs: a line a second (attempts a second, units sold, SKUs sold out).
At the end: oversold 0 and nothing admitted after a SKU sold out, every striped stock agreeing
with the sales tally, no user buying twice, and the global budget charged exactly the purchases
made; exit status 1 if any check fails.";

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
    global_budget: u32,
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
            sku_rate: 35.0,
            sku_burst: 20,
            hot_fraction: 0.5,
            hot_set: 0.01,
            seed: 1,
            global_budget: 1_000_000,
        };
        let mut args = std::env::args().skip(1);
        // `--rush` sets the SKUs' pace unless a flag sets it.
        let (mut rush, mut paced) = (false, false);
        while let Some(arg) = args.next() {
            if arg == "--help" || arg == "-h" {
                println!("{USAGE}");
                std::process::exit(0);
            }
            if arg == "--rush" {
                rush = true;
                continue;
            }
            let (flag, inline) = match arg.split_once('=') {
                Some((f, v)) => (f.to_string(), Some(v.to_string())),
                None => (arg.clone(), None),
            };
            const KNOWN: [&str; 13] = [
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
                "--global-budget",
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
                "--sku-rate" => {
                    cfg.sku_rate = parse_rate(&flag, &value)?;
                    paced = true;
                }
                "--sku-burst" => {
                    cfg.sku_burst = parse_int(&flag, &value, 1, u64::from(u32::MAX))? as u32;
                    paced = true;
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
                "--global-budget" => {
                    cfg.global_budget = parse_int(&flag, &value, 1, u64::from(u32::MAX))? as u32;
                }
                _ => return Err(format!("unknown flag {arg}")),
            }
        }
        if rush && !paced {
            cfg.sku_rate = 2000.0;
            cfg.sku_burst = 200;
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

// ---------------------------------------------------------------------------------------------
// PRNG
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

// ---------------------------------------------------------------------------------------------
// The sale
// ---------------------------------------------------------------------------------------------

/// The limiters of the sale.
struct Shop {
    stock: Vec<StripedLimiter>,
    sku_rate: KeyedLimiter<u32>,
    user_rate: KeyedLimiter<u64>,
    cap: KeyedLimiter<u64>,
    global: Limiter<ManualClock>,
}

/// What each limit's refusal means to a buyer, in `check_all` order.
const GATES: [&str; 5] = [
    "sold out (the SKU's stock)",
    "the SKU's pace (its rate)",
    "buyer too fast (the user's rate)",
    "buyer already bought one (the user's cap)",
    "the shop's hourly budget",
];

/// What one thread saw.
#[derive(Default)]
struct Tally {
    attempts: u64,
    purchases: u64,
    /// Denials by the gate that said no.
    denied_by: [u64; 5],
    /// Denials by reason: rate limited, never fits, sold out, store full, other.
    why: [u64; 5],
}

fn reason_index(d: &Decision) -> usize {
    match d.denial() {
        Some(Denial::RateLimited) => 0,
        Some(Denial::NeverFits) => 1,
        Some(Denial::SoldOut) => 2,
        Some(Denial::StoreFull) => 3,
        _ => 4,
    }
}

/// Per SKU: the sales tally, and when the last unit was sold (ns since the start, 0 = not
/// sold out).
struct Sales {
    sold: Vec<AtomicU64>,
    sold_out_at: Vec<AtomicU64>,
    bought: Vec<AtomicU8>,
}

fn main() {
    let cfg = match Config::parse() {
        Ok(cfg) => cfg,
        Err(e) => {
            eprintln!("error: {e}\n\n{USAGE}");
            std::process::exit(2);
        }
    };
    let users = usize::try_from(cfg.users).expect("users fit in memory");
    let skus = cfg.skus as usize;
    let build = |e: cellgate::ConfigError| -> ! {
        eprintln!("error: {e}");
        std::process::exit(2);
    };
    let shop = Shop {
        stock: (0..skus)
            .map(|_| {
                StripedLimiter::stock(cfg.stock)
                    .stripes(cfg.threads)
                    .build()
                    .unwrap_or_else(|e| build(e))
            })
            .collect(),
        sku_rate: KeyedLimiter::<u32>::gcra(quota(cfg.sku_rate, cfg.sku_burst))
            .max_keys(skus)
            .build()
            .unwrap_or_else(|e| build(e)),
        user_rate: KeyedLimiter::<u64>::gcra(quota(cfg.user_rate, cfg.user_burst))
            .max_keys(users)
            .build()
            .unwrap_or_else(|e| build(e)),
        cap: KeyedLimiter::<u64>::stock(1)
            .max_keys(users)
            .build()
            .unwrap_or_else(|e| build(e)),
        global: Limiter::gcra(Quota::per_hour(cfg.global_budget))
            .clock(ManualClock::new())
            .build()
            .unwrap_or_else(|e| build(e)),
    };
    let sales = Sales {
        sold: (0..skus).map(|_| AtomicU64::new(0)).collect(),
        sold_out_at: (0..skus).map(|_| AtomicU64::new(0)).collect(),
        bought: (0..users).map(|_| AtomicU8::new(0)).collect(),
    };
    let hot = cfg.hot_skus();
    println!(
        "flash sale: {} SKUs x {} units ({} hot, {:.0}% of attempts), {} users, {} threads, {:.1} s",
        cfg.skus,
        cfg.stock,
        hot,
        cfg.hot_fraction * 100.0,
        cfg.users,
        cfg.threads,
        cfg.duration.as_secs_f64()
    );
    let pace = (f64::from(cfg.stock) - f64::from(cfg.sku_burst)).max(0.0) / cfg.sku_rate;
    println!(
        "  {} threads play a crowd of {} buyers; each attempt picks a buyer and a SKU and is admitted\n  \
         only if all five limits agree: the SKU's stock, its pace ({} a second after {} at once:\n  \
         a SKU sells out after about {pace:.1} s), the buyer's rate ({} a second), one purchase\n  \
         per buyer, and the shop's budget ({} an hour).",
        cfg.threads, cfg.users, cfg.sku_rate, cfg.sku_burst, cfg.user_rate, cfg.global_budget
    );
    println!("  every second: time, attempts a second, units sold so far, SKUs sold out");

    let stop = AtomicBool::new(false);
    let barrier = Barrier::new(cfg.threads + 1);
    // Each thread's attempts so far, published every batch for the progress lines.
    let progress: Vec<AtomicU64> = (0..cfg.threads).map(|_| AtomicU64::new(0)).collect();
    let mut start = Instant::now();
    let tallies: Vec<Tally> = std::thread::scope(|s| {
        let workers: Vec<_> = (0..cfg.threads)
            .map(|t| {
                let (shop, sales, stop, barrier, cfg) = (&shop, &sales, &stop, &barrier, &cfg);
                let done = &progress[t];
                s.spawn(move || {
                    let mut rng = SplitMix64(cfg.seed ^ (t as u64).wrapping_mul(0x9E37_79B9));
                    let mut tally = Tally::default();
                    barrier.wait();
                    // Sold-out instants are measured from here: the moment every thread starts.
                    let t0 = Instant::now();
                    while !stop.load(Ordering::Relaxed) {
                        for _ in 0..BATCH {
                            attempt(cfg, shop, sales, &mut rng, hot, t0, &mut tally);
                        }
                        done.store(tally.attempts, Ordering::Relaxed);
                    }
                    tally
                })
            })
            .collect();
        start = Instant::now();
        barrier.wait();
        show_progress(&cfg, &sales, &progress, start);
        stop.store(true, Ordering::Relaxed);
        workers
            .into_iter()
            .map(|w| w.join().expect("worker"))
            .collect()
    });
    let elapsed = start.elapsed();
    std::process::exit(report(&cfg, &shop, &sales, &tallies, elapsed));
}

/// Until the run's end, a line a second: the time, the attempts a second since the last
/// line, the units sold so far (and what share of the whole stock), the SKUs sold out.
fn show_progress(cfg: &Config, sales: &Sales, progress: &[AtomicU64], start: Instant) {
    let end = start + cfg.duration;
    let total_stock = u64::from(cfg.stock) * u64::from(cfg.skus);
    let (mut last_at, mut last_attempts) = (start, 0u64);
    loop {
        let now = Instant::now();
        if now >= end {
            return;
        }
        std::thread::sleep((end - now).min(Duration::from_secs(1)));
        let now = Instant::now();
        if now >= end {
            // The final report follows at once: no partial line.
            return;
        }
        let attempts: u64 = progress.iter().map(|a| a.load(Ordering::Relaxed)).sum();
        let sold: u64 = sales.sold.iter().map(|s| s.load(Ordering::Relaxed)).sum();
        let sold_out = sales
            .sold_out_at
            .iter()
            .filter(|a| a.load(Ordering::Relaxed) > 0)
            .count();
        let rate = (attempts - last_attempts) as f64 / (now - last_at).as_secs_f64();
        let share = if total_stock == 0 {
            0.0
        } else {
            sold as f64 * 100.0 / total_stock as f64
        };
        println!(
            "  {:>5.1} s  {:>6.2} M attempts/s  {sold:>9} sold ({share:>5.1}% of the stock)  {sold_out:>5} of {} SKUs sold out",
            (now - start).as_secs_f64(),
            rate / 1e6,
            cfg.skus
        );
        (last_at, last_attempts) = (now, attempts);
    }
}

/// One buyer attempt.
#[inline]
fn attempt(
    cfg: &Config,
    shop: &Shop,
    sales: &Sales,
    rng: &mut SplitMix64,
    hot: u32,
    t0: Instant,
    tally: &mut Tally,
) {
    let user = rng.below(cfg.users);
    let sku =
        if cfg.skus == hot || rng.below(1 << 20) < (cfg.hot_fraction * f64::from(1 << 20)) as u64 {
            rng.below(u64::from(hot)) as u32
        } else {
            hot + rng.below(u64::from(cfg.skus - hot)) as u32
        };
    tally.attempts += 1;
    let sku_rate = shop.sku_rate.gate(&sku);
    let user_rate = shop.user_rate.gate(&user);
    let cap = shop.cap.gate(&user);
    let d = check_all([
        (&shop.stock[sku as usize] as &dyn AnyLimiter, 1),
        (&sku_rate, 1),
        (&user_rate, 1),
        (&cap, 1),
        (&shop.global, 1),
    ]);
    match d.denied_by() {
        None => {
            tally.purchases += 1;
            let before = sales.sold[sku as usize].fetch_add(1, Ordering::Relaxed);
            if before + 1 == u64::from(cfg.stock) {
                let at = t0.elapsed().as_nanos().max(1) as u64;
                sales.sold_out_at[sku as usize].store(at, Ordering::Relaxed);
            }
            sales.bought[user as usize].fetch_add(1, Ordering::Relaxed);
        }
        Some(i) => {
            tally.denied_by[i] += 1;
            tally.why[reason_index(&d.decisions()[i])] += 1;
        }
    }
}

/// Prints the story and checks every invariant; returns the exit status.
fn report(cfg: &Config, shop: &Shop, sales: &Sales, tallies: &[Tally], elapsed: Duration) -> i32 {
    let mut failures = Vec::new();
    let attempts: u64 = tallies.iter().map(|t| t.attempts).sum();
    let purchases: u64 = tallies.iter().map(|t| t.purchases).sum();
    let secs = elapsed.as_secs_f64();
    println!();
    println!(
        "attempts {attempts} in {secs:.2} s ({:.2} M/s), purchases {purchases}",
        attempts as f64 / secs / 1e6
    );
    println!(
        "  an attempt is one buyer asking for one unit (one check_all over the five limits);\n  \
         a purchase is an attempt that every limit admitted. Refused attempts, by the first\n  \
         limit that said no (the limits before it gave back what they had taken):"
    );
    for (g, name) in GATES.iter().enumerate() {
        let n: u64 = tallies.iter().map(|t| t.denied_by[g]).sum();
        println!("  {n:>12}  {name}");
    }
    let reasons = [
        "rate limited",
        "never fits",
        "sold out",
        "store full",
        "other",
    ];
    let mut line = String::from("the same refusals by the reason the limiter gave:");
    for (r, name) in reasons.iter().enumerate() {
        let n: u64 = tallies.iter().map(|t| t.why[r]).sum();
        if n > 0 {
            line += &format!(" {name} {n},");
        }
    }
    println!("{}", line.trim_end_matches(','));
    println!(
        "  (\"sold out\" is a stock's answer: a SKU's, or a buyer's cap of one, already bought;\n  \
         \"rate limited\" a rate's: the SKU's pace or the buyer's rate)"
    );

    // The stock.
    let stock = u64::from(cfg.stock);
    let mut sold_out = Vec::new();
    let (mut oversold, mut after_sold_out) = (0u64, 0u64);
    for sku in 0..cfg.skus as usize {
        let sold = sales.sold[sku].load(Ordering::Relaxed);
        let at = sales.sold_out_at[sku].load(Ordering::Relaxed);
        if at > 0 {
            sold_out.push((at, sku));
        }
        if sold > stock {
            oversold += sold - stock;
            // Every purchase past the one that took the last unit was admitted after sold out.
            after_sold_out += sold - stock;
        }
        let left = shop.stock[sku].remaining();
        if left != stock.saturating_sub(sold) {
            failures.push(format!(
                "sku {sku}: the striped stock holds {left}, the tally says {}",
                stock.saturating_sub(sold)
            ));
        }
    }
    sold_out.sort_unstable();
    match (sold_out.first(), sold_out.last()) {
        (Some(first), Some(last)) => {
            println!(
                "sold out: {} of {} SKUs, the first (sku {}) at {:.3} s, the last (sku {}) at {:.3} s",
                sold_out.len(),
                cfg.skus,
                first.1,
                first.0 as f64 / 1e9,
                last.1,
                last.0 as f64 / 1e9,
            );
            if sold_out.len() == cfg.skus as usize {
                let selling = (last.0 as f64 / 1e9).min(secs);
                println!(
                    "  everything sold out: the sale was selling for {selling:.2} s ({:.0}% of the run), \
                     the last {:.2} s measured the sold-out rush",
                    selling * 100.0 / secs,
                    secs - selling
                );
            } else {
                println!(
                    "  {} SKUs still on sale at the end: the sale was selling for the whole run",
                    cfg.skus as usize - sold_out.len()
                );
            }
        }
        _ if cfg.stock == 0 => {
            println!("nothing on sale (--stock 0): the whole run measured the sold-out rush");
        }
        _ => println!(
            "sold out: none of {} SKUs: the sale was selling for the whole run",
            cfg.skus
        ),
    }
    println!(
        "admitted after sold out: {after_sold_out} (must be 0); oversold: {oversold} (must be 0)"
    );
    if oversold > 0 {
        failures.push(format!("oversold {oversold} units"));
    }
    for &(at, sku) in sold_out.iter().take(3) {
        println!(
            "  sku {sku}: sold {} of {stock}, sold out at {:.3} s, stock left {}",
            sales.sold[sku].load(Ordering::Relaxed),
            at as f64 / 1e9,
            shop.stock[sku].remaining()
        );
    }

    // Users: one purchase each, and the cap agrees.
    let (mut buyers, mut twice) = (0u64, 0u64);
    for (user, b) in sales.bought.iter().enumerate() {
        let b = b.load(Ordering::Relaxed);
        if b == 0 {
            continue;
        }
        buyers += 1;
        if b > 1 {
            twice += 1;
        }
        let left = shop.cap.peek(&(user as u64)).remaining();
        if u32::from(b) + left != 1 {
            failures.push(format!("user {user}: bought {b}, cap left {left}"));
        }
    }
    println!("per-user cap: {buyers} users bought one, {twice} bought more (must be 0)");
    if twice > 0 {
        failures.push(format!("{twice} users bought more than one"));
    }

    // The global budget: charged exactly the purchases (frozen clock: no refill).
    let budget = u64::from(cfg.global_budget);
    let left = u64::from(shop.global.peek().remaining());
    println!(
        "global budget: {budget}, left {left}, charged {} = purchases {purchases} \
         (refused attempts charged it nothing)",
        budget - left
    );
    if budget - left != purchases {
        failures.push(format!(
            "the global budget was charged {} for {purchases} purchases",
            budget - left
        ));
    }
    println!(
        "keys held: user rate {}, user cap {}, sku rate {}",
        shop.user_rate.len(),
        shop.cap.len(),
        shop.sku_rate.len()
    );
    if failures.is_empty() {
        println!("all invariants hold");
        0
    } else {
        for f in failures.iter().take(20) {
            println!("FAILED: {f}");
        }
        1
    }
}
