//! How long a sweep of idle keys blocks other keys' checks, with a million keys held.
//!
//! ```sh
//! cargo run --release --example sweep_pause
//! ```
//!
//! For each store (the bounded table and the exact map), 1 000 000 keys are inserted, half of
//! them then kept busy; the clock moves on so the other half is idle. One thread checks random
//! busy keys in a loop, timing every check, while another runs `evict_idle()` (which drops the
//! 500 000 idle keys). The report gives the checker's latency percentiles and its longest
//! single check during the sweep, beside the same loop with no sweep running.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use cellgate::clock::ManualClock;
use cellgate::{KeyedLimiter, Quota};

const KEYS: u64 = 1_000_000;

fn percentile(sorted: &[u64], p: f64) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    sorted[((sorted.len() - 1) as f64 * p) as usize]
}

/// Times checks of busy (even) keys until `stop`; returns the sorted latencies in ns.
fn checker(l: &KeyedLimiter<u64, ManualClock>, stop: &AtomicBool) -> Vec<u64> {
    let mut lat = Vec::with_capacity(1 << 20);
    let mut x = 0x2545_F491_4F6C_DD1Du64;
    // Relaxed: a stop flag; the scope's join orders everything else.
    while !stop.load(Ordering::Relaxed) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let key = (x % KEYS) & !1;
        let t = Instant::now();
        std::hint::black_box(l.check(&key));
        lat.push(t.elapsed().as_nanos() as u64);
    }
    lat.sort_unstable();
    lat
}

fn run(name: &str, exact: bool) {
    let clock = ManualClock::new();
    let mut b = KeyedLimiter::<u64>::gcra(Quota::per_second(1).with_burst(1000))
        .clock(clock.clone())
        .max_keys(KEYS as usize);
    if exact {
        b = b.exact_keys();
    }
    let l = b.build().expect("valid configuration");
    for k in 0..KEYS {
        l.check(&k);
    }
    // One second later the odd keys are idle; the even ones get a backlog that lasts.
    clock.advance(Duration::from_secs(1));
    for k in (0..KEYS).step_by(2) {
        l.check_n(&k, 500);
    }
    let stop = AtomicBool::new(false);
    // Baseline: the same loop for a while, no sweep.
    let base = std::thread::scope(|s| {
        let h = s.spawn(|| checker(&l, &stop));
        std::thread::sleep(Duration::from_millis(300));
        stop.store(true, Ordering::Relaxed);
        h.join().expect("checker")
    });
    stop.store(false, Ordering::Relaxed);
    let (lat, swept, took) = std::thread::scope(|s| {
        let h = s.spawn(|| checker(&l, &stop));
        std::thread::sleep(Duration::from_millis(20));
        let t = Instant::now();
        let swept = l.evict_idle();
        let took = t.elapsed();
        std::thread::sleep(Duration::from_millis(20));
        stop.store(true, Ordering::Relaxed);
        (h.join().expect("checker"), swept, took)
    });
    println!(
        "{name:6} sweep dropped {swept} idle keys of {KEYS} in {:.1} ms",
        took.as_secs_f64() * 1e3
    );
    for (what, v) in [("no sweep", &base), ("sweeping", &lat)] {
        println!(
            "       {what:9} checks {:>9}  p50 {:>6} ns  p99 {:>7} ns  p99.9 {:>8} ns  max {:>9} ns",
            v.len(),
            percentile(v, 0.5),
            percentile(v, 0.99),
            percentile(v, 0.999),
            v.last().copied().unwrap_or(0)
        );
    }
}

fn main() {
    run("table", false);
    run("map", true);
}
