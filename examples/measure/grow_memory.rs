//! Memory of the keyed stores, measured as the process's resident set (Linux `/proc/self/status`).
//!
//! ```sh
//! cargo run --release --example grow_memory -- live      # 1M live u64 keys, default store
//! cargo run --release --example grow_memory -- churn     # 4M keys, at most 100k live at once
//! cargo run --release --example grow_memory -- live --store fixed   # or: exact
//! ```
//!
//! - `live`: one million distinct `u64` keys, each checked once and still live (a quota of one
//!   a minute); prints the growth of VmRSS from before `build()` to after the last insert, per
//!   key.
//! - `churn`: four million distinct keys in turn, one check each, the clock advancing so that a
//!   key is live for as long as 100 000 later keys take to arrive (so at most 100 000 are live
//!   at any instant). No ceiling and no sweep call: the store must reclaim idle keys by itself.
//!   Prints the peak (VmHWM) growth over the RSS before `build()`, the final growth, and checks
//!   that every check was admitted (each is a key's first request, within its budget).
//!
//! `--store default|fixed|exact` picks the store (`fixed`: `max_keys` at the key count with
//! `fixed_capacity()`; `exact`: `exact_keys()`). Exits with status 1 if a check that must be
//! admitted was not, or, for the default store, if memory is past its bounds: 32 bytes per live
//! key (`live`; a load of 0.5 after a rebuild buys faster inserts), a 32 MiB peak (`churn`).

use std::time::Duration;

use cellgate::clock::ManualClock;
use cellgate::{KeyedLimiter, Quota};

/// (VmRSS, VmHWM) in bytes.
fn memory() -> (u64, u64) {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let field = |name: &str| -> u64 {
        status
            .lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse::<u64>().ok())
            .map_or(0, |kib| kib * 1024)
    };
    (field("VmRSS:"), field("VmHWM:"))
}

fn mib(b: u64) -> f64 {
    b as f64 / (1024.0 * 1024.0)
}

fn build(
    store: &str,
    keys: usize,
    quota: Quota,
    clock: &ManualClock,
) -> KeyedLimiter<u64, ManualClock> {
    let b = KeyedLimiter::<u64>::gcra(quota).clock(clock.clone());
    let b = match store {
        "fixed" => b.max_keys(keys).fixed_capacity(),
        "exact" => b.exact_keys(),
        _ => b,
    };
    b.build().expect("valid configuration")
}

/// Spreads consecutive integers over the key space, as distinct ids would be.
fn key(i: u64) -> u64 {
    i.wrapping_mul(0x9E37_79B9_7F4A_7C15)
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mode = args.first().map_or("live", String::as_str).to_string();
    let store = args
        .iter()
        .position(|a| a == "--store")
        .and_then(|i| args.get(i + 1))
        .map_or("default", String::as_str)
        .to_string();
    let clock = ManualClock::new();
    let mut denied = 0u64;
    let mut over = None;
    match mode.as_str() {
        "live" => {
            const N: u64 = 1_000_000;
            let (before, _) = memory();
            let l = build(&store, N as usize, Quota::per_minute(1), &clock);
            for i in 0..N {
                denied += u64::from(!l.check(&key(i)).is_allowed());
            }
            let (after, _) = memory();
            let grown = after.saturating_sub(before);
            if grown > 32 * N {
                over = Some(format!("{} B per live key > 32", grown / N));
            }
            println!(
                "live store={store}: {} keys held, RSS +{:.1} MiB = {:.1} B/key",
                l.len(),
                mib(grown),
                grown as f64 / N as f64
            );
        }
        "churn" => {
            const N: u64 = 4_000_000;
            const LIVE: u64 = 100_000;
            // One request per second per key: a key is live for 1 s after its check, and keys
            // arrive every 1 s / LIVE, so at most LIVE are live at once.
            let step = 1_000_000_000 / LIVE;
            let (before, _) = memory();
            let l = build(&store, N as usize, Quota::per_second(1), &clock);
            let mut most = 0;
            for i in 0..N {
                clock.advance(Duration::from_nanos(step));
                denied += u64::from(!l.check(&key(i)).is_allowed());
                if i % 1024 == 0 {
                    most = most.max(l.len());
                }
            }
            let (after, peak) = memory();
            if peak.saturating_sub(before) > 32 << 20 {
                over = Some(format!(
                    "peak +{:.1} MiB > 32 MiB",
                    mib(peak.saturating_sub(before))
                ));
            }
            println!(
                "churn store={store}: {N} keys, at most {LIVE} live; held at most {most}, {} at the end; \
                 RSS peak +{:.1} MiB, end +{:.1} MiB",
                l.len(),
                mib(peak.saturating_sub(before)),
                mib(after.saturating_sub(before)),
            );
        }
        other => {
            eprintln!("unknown mode {other:?} (live or churn)");
            std::process::exit(2);
        }
    }
    if denied > 0 {
        println!("FAIL: {denied} first checks of a key were denied");
        std::process::exit(1);
    }
    if let (Some(why), "default") = (over, store.as_str()) {
        println!("FAIL: {why}");
        std::process::exit(1);
    }
}
