//! What the striped GCRA limiter's shared time costs: one hot key (a `StripedLimiter`, one
//! stripe per thread, a quota so large that every check is admitted), checked by every thread
//! for `--seconds`, in four builds: the precise default clock or `CoarseClock`, each with the
//! default shared time (every admission raises the limiter's high-water mark) and with
//! `.relaxed_clock()`. The four run in turn, `--rounds` times; the median per build is printed.
//!
//! ```text
//! cargo run --release --example striped_clocks -- [--threads N] [--seconds S] [--rounds R]
//! ```

use std::time::{Duration, Instant};

use cellgate::clock::{Clock, CoarseClock, QuantaClock};
use cellgate::{Quota, StripedLimiter};

/// Checks per second of `threads` threads on `l` for `d`.
fn rate<C: Clock>(l: &StripedLimiter<C>, threads: usize, d: Duration) -> f64 {
    let start = Instant::now();
    let checks: u64 = std::thread::scope(|s| {
        let workers: Vec<_> = (0..threads)
            .map(|_| {
                s.spawn(|| {
                    let mut n = 0u64;
                    while start.elapsed() < d {
                        for _ in 0..1024 {
                            n += u64::from(l.check().is_allowed());
                        }
                    }
                    n
                })
            })
            .collect();
        workers.into_iter().map(|w| w.join().expect("worker")).sum()
    });
    checks as f64 / start.elapsed().as_secs_f64()
}

fn arg(args: &[String], name: &str, default: f64) -> f64 {
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .map_or(default, |v| {
            v.parse().unwrap_or_else(|_| panic!("{name}: a number"))
        })
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
    let threads = arg(&args, "--threads", cores as f64) as usize;
    let d = Duration::from_secs_f64(arg(&args, "--seconds", 1.0));
    let rounds = arg(&args, "--rounds", 5.0) as usize;
    // Every check admitted: a billion per second, a burst of a million.
    let q = Quota::per_second(1_000_000_000).with_burst(1_000_000);
    let precise = |relaxed: bool| {
        let b = StripedLimiter::gcra(q)
            .stripes(threads)
            .clock(QuantaClock::new());
        if relaxed { b.relaxed_clock() } else { b }
            .build()
            .expect("valid quota")
    };
    let coarse = |relaxed: bool| {
        let b = StripedLimiter::gcra(q)
            .stripes(threads)
            .clock(CoarseClock::new());
        if relaxed { b.relaxed_clock() } else { b }
            .build()
            .expect("valid quota")
    };
    let names = [
        "precise clock, shared time (default)",
        "precise clock, relaxed_clock()",
        "CoarseClock, shared time",
        "CoarseClock, relaxed_clock()",
    ];
    let mut runs: Vec<Vec<f64>> = vec![Vec::new(); names.len()];
    for _ in 0..rounds {
        runs[0].push(rate(&precise(false), threads, d));
        runs[1].push(rate(&precise(true), threads, d));
        runs[2].push(rate(&coarse(false), threads, d));
        runs[3].push(rate(&coarse(true), threads, d));
    }
    println!("{threads} threads, one striped GCRA key, {rounds} rounds of {d:?}: median checks/s");
    for (name, mut r) in names.iter().zip(runs) {
        r.sort_by(f64::total_cmp);
        let runs: Vec<String> = r.iter().map(|x| format!("{:.1}", x / 1e6)).collect();
        println!(
            "{name:<38} {:>8.1} M   (runs: {})",
            r[r.len() / 2] / 1e6,
            runs.join(", ")
        );
    }
}
