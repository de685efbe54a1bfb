//! The library side of the server's memory per key: a core `KeyedLimiter<String>` as the
//! server builds one for `remote_address` (a fixed window of 100 a minute), holding N live
//! keys written as the server writes them, measured as the growth of the process's resident
//! set (Linux `/proc/self/status`).
//!
//! ```sh
//! cargo run --release -p cellgate-server --example key_memory -- 1000000
//! ```
//!
//! Prints `library: N keys held, RSS +X MiB = Y B/key`; `tests/tools/bench-rls.sh` measures
//! the server under a flood of the same keys beside it.

use std::time::Duration;

use cellgate::clock::ManualClock;
use cellgate::KeyedLimiter;

fn rss() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find(|l| l.starts_with("VmRSS:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse::<u64>().ok())
        .map_or(0, |kib| kib * 1024)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let n: u64 = match std::env::args().nth(1) {
        Some(v) => v.parse()?,
        None => 1_000_000,
    };
    let before = rss();
    let l = KeyedLimiter::<String>::fixed_window(100, Duration::from_secs(60))
        .clock(ManualClock::new())
        .max_keys(usize::try_from(n)?.max(1))
        .build()?;
    let mut denied = 0u64;
    for k in 0..n {
        // The load's client address for key k, as the server's key: its length, then itself.
        let addr = format!("10.{}.{}.{}", (k >> 16) & 255, (k >> 8) & 255, k & 255);
        let addr = if k >> 24 == 0 {
            addr
        } else {
            format!("{addr}.{}", k >> 24)
        };
        let key = format!("{}:{addr}", addr.len());
        denied += u64::from(!l.check(&key).is_allowed());
    }
    let grown = rss().saturating_sub(before);
    println!(
        "library: {} keys held, RSS +{:.1} MiB = {:.1} B/key",
        l.len(),
        grown as f64 / (1024.0 * 1024.0),
        grown as f64 / n as f64
    );
    if denied > 0 {
        return Err(format!("{denied} first checks of a key were denied").into());
    }
    Ok(())
}
