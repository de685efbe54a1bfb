//! A key flood: millions of distinct random keys, as fast as the machine can send them, against
//! a keyed limiter capped at 100 000 keys, while a set of legitimate busy keys keeps making
//! requests and legitimate light users come back now and then.
//!
//! ```sh
//! cargo run --release --example key_flood                  # 10 million flood keys
//! cargo run --release --example key_flood -- --keys 1000000 --policy deny
//! ```
//!
//! Time is a `ManualClock` advanced 1 ms per round by the main thread, rounds paced to real
//! time, so that every legitimate check can be compared with an unbounded, flood-free limiter
//! at exactly the same instant. Flood threads send their keys as fast as they can meanwhile.
//! Every key may make one request a second, ten at once: a flood key stays live for a second,
//! so the flood keeps the store full of live keys. The run checks, and exits with
//! status 1 unless:
//! - the store never holds more than the cap (plus one key per flood thread, the documented
//!   slack under concurrency);
//! - peak memory growth stays within the bound (the default table grows with the keys held, at
//!   about 21 bytes per key; `evict` uses the fixed table, allocated up front at about 23 bytes
//!   per key of capacity; the bound allows 64 bytes per key plus 16 MiB);
//! - under the default `light` policy and under `deny`, every decision of a busy key equals the
//!   flood-free limiter's (a flood cannot reset a busy key's budget).
//!
//! It also reports the returning users refused: `--returning N` light users, each making one
//! request a second (spread over the rounds), so that a user's key is idle by its next visit
//! and may have been dropped: a user comes back as a new key, as does any visitor not seen
//! before. Under `deny` the flood keeps the store full of live keys and refuses many of them;
//! under `light` they take the places of flood keys (each of which made one request), and the
//! run fails if more than 1% of their checks are refused.
//!
//! Flags: `--keys N` (flood keys, default 10 000 000), `--cap N` (default 100 000),
//! `--threads N` (flood threads, default: cores - 1, at least 1), `--legit N` (busy keys,
//! default 1 000), `--returning N` (default 1 000), `--policy light|deny|evict|untracked`
//! (default light).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use cellgate::clock::ManualClock;
use cellgate::{KeyedLimiter, Quota, WhenFull};

struct Args {
    keys: u64,
    cap: usize,
    threads: usize,
    legit: u64,
    returning: u64,
    policy: WhenFull,
}

fn parse() -> Result<Args, String> {
    let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
    let mut a = Args {
        keys: 10_000_000,
        cap: 100_000,
        threads: cores.saturating_sub(1).max(1),
        legit: 1_000,
        returning: 1_000,
        policy: WhenFull::EvictLight,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().ok_or(format!("{flag} needs a value"));
        let num = |v: String| v.parse::<u64>().map_err(|e| format!("{flag}: {e}"));
        match flag.as_str() {
            "--keys" => a.keys = num(value()?)?,
            "--cap" => a.cap = num(value()?)?.max(1) as usize,
            "--threads" => a.threads = num(value()?)?.max(1) as usize,
            "--legit" => a.legit = num(value()?)?.max(1),
            "--returning" => a.returning = num(value()?)?,
            "--policy" => {
                a.policy = match value()?.as_str() {
                    "light" => WhenFull::EvictLight,
                    "deny" => WhenFull::DenyNew,
                    "evict" => WhenFull::EvictNearestFresh,
                    "untracked" => WhenFull::AdmitUntracked,
                    other => return Err(format!("unknown policy {other:?}")),
                }
            }
            "--help" | "-h" => {
                return Err(
                    "see the doc comment at the top of examples/measure/key_flood.rs".into(),
                )
            }
            other => return Err(format!("unknown flag {other:?}")),
        }
    }
    Ok(a)
}

/// (VmRSS, VmHWM) in bytes.
fn memory() -> Option<(u64, u64)> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let field = |name: &str| -> Option<u64> {
        let line = status.lines().find(|l| l.starts_with(name))?;
        Some(line.split_whitespace().nth(1)?.parse::<u64>().ok()? * 1024)
    };
    Some((field("VmRSS:")?, field("VmHWM:")?))
}

fn mib(b: u64) -> String {
    format!("{:.1} MiB", b as f64 / (1024.0 * 1024.0))
}

fn main() {
    let args = match parse() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("key_flood: {e}");
            std::process::exit(2);
        }
    };
    // Each key: one a second, 10 at once. A flood key stays live for a second after its
    // request, so the flood keeps the store full of live keys.
    let quota = Quota::per_second(1).with_burst(10);
    let clock = ManualClock::new();
    let before = memory();
    let flooded = KeyedLimiter::<u64>::gcra(quota)
        .clock(clock.clone())
        .max_keys(args.cap)
        .when_full(args.policy)
        .build()
        .expect("valid configuration");
    let quiet = KeyedLimiter::<u64>::gcra(quota)
        .clock(clock.clone())
        .build()
        .expect("valid configuration");
    println!(
        "flood: {} keys from {} threads against max_keys {} ({:?}); {} legitimate busy keys, \
         {} returning users",
        args.keys, args.threads, args.cap, args.policy, args.legit, args.returning
    );

    let sent = AtomicU64::new(0);
    let done = AtomicBool::new(false);
    let mut most_held = 0usize;
    let mut mismatches = 0u64;
    let mut legit_checks = 0u64;
    let (mut returning_checks, mut returning_refused) = (0u64, 0u64);
    let mut rounds = 0u64;
    let start = Instant::now();
    std::thread::scope(|s| {
        for t in 0..args.threads as u64 {
            let (flooded, sent, done) = (&flooded, &sent, &done);
            let per_thread =
                args.keys / args.threads as u64 + u64::from(t < args.keys % args.threads as u64);
            s.spawn(move || {
                // xorshift64*: distinct streams per thread; legitimate keys are below 2^32.
                let mut x = 0x9E37_79B9_7F4A_7C15u64 ^ (t + 1).wrapping_mul(0xD1B5_4A32_D192_ED03);
                for i in 0..per_thread {
                    x ^= x >> 12;
                    x ^= x << 25;
                    x ^= x >> 27;
                    let key = x.wrapping_mul(0x2545_F491_4F6C_DD1D) | (1 << 63);
                    std::hint::black_box(flooded.check(&key));
                    if i % 4096 == 4095 {
                        // Relaxed: a progress counter.
                        sent.fetch_add(4096, Ordering::Relaxed);
                    }
                }
                sent.fetch_add(per_thread % 4096, Ordering::Relaxed);
                // Relaxed: the main thread only polls it; the scope's join orders the rest.
                done.store(true, Ordering::Relaxed);
            });
        }
        // The legitimate traffic: every key once per 1 ms round (a thousand times its rate), so
        // each stays busy and held; both limiters see the same instant.
        loop {
            clock.advance(Duration::from_millis(1));
            rounds += 1;
            // Pace manual time to real time.
            let due = Duration::from_millis(rounds);
            if let Some(wait) = due.checked_sub(start.elapsed()) {
                std::thread::sleep(wait);
            }
            for k in 0..args.legit {
                let (a, b) = (flooded.check(&k), quiet.check(&k));
                legit_checks += 1;
                if a != b {
                    mismatches += 1;
                    if mismatches <= 5 {
                        eprintln!("legitimate key {k}: flooded {a:?} vs quiet {b:?}");
                    }
                }
            }
            // Returning users: user `u` comes at rounds `u (mod 1000)`, one request a second, so
            // its key is idle by its next visit. Keys above the busy ones, below 2^63.
            for u in (rounds % 1_000..args.returning).step_by(1_000) {
                let key = (1 << 40) + u;
                let d = flooded.check(&key);
                returning_checks += 1;
                if !d.is_allowed() {
                    returning_refused += 1;
                }
            }
            most_held = most_held.max(flooded.len());
            let all_done =
                done.load(Ordering::Relaxed) && sent.load(Ordering::Relaxed) >= args.keys;
            if all_done {
                break;
            }
        }
    });
    let elapsed = start.elapsed();
    most_held = most_held.max(flooded.len());
    let after = memory();

    let rate = args.keys as f64 / elapsed.as_secs_f64();
    println!(
        "sent {} flood keys in {:.2} s ({:.2} M keys/s) over {rounds} rounds of 1 ms",
        args.keys,
        elapsed.as_secs_f64(),
        rate / 1e6
    );
    println!(
        "held at most {most_held} keys (cap {}); refused {}, evicted idle {}, evicted live {}, untracked {}",
        args.cap,
        flooded.stats().refused,
        flooded.stats().evicted,
        flooded.stats().evicted_live,
        flooded.stats().untracked
    );
    println!(
        "busy legitimate checks: {legit_checks}, differing from the flood-free limiter: {mismatches}"
    );
    println!(
        "returning users' checks: {returning_checks}, refused: {returning_refused} ({:.2}%)",
        100.0 * returning_refused as f64 / returning_checks.max(1) as f64
    );
    let mut ok = true;
    let slack = args.threads;
    if most_held > args.cap + slack {
        println!("FAIL: held {most_held} > cap {} + {slack}", args.cap);
        ok = false;
    }
    if let (Some((rss0, _)), Some((_, peak))) = (before, after) {
        let grew = peak.saturating_sub(rss0);
        let bound = 64 * args.cap as u64 + 16 * 1024 * 1024;
        println!(
            "memory: peak RSS {} ({} above the start); bound {} (64 B x cap + 16 MiB)",
            mib(peak),
            mib(grew),
            mib(bound)
        );
        if grew > bound {
            println!("FAIL: memory grew past the bound");
            ok = false;
        }
    } else {
        println!("memory: /proc/self/status not readable here; not checked");
    }
    let lossless_for_busy = matches!(args.policy, WhenFull::DenyNew | WhenFull::EvictLight);
    if lossless_for_busy && mismatches > 0 {
        println!(
            "FAIL: {:?} changed {mismatches} busy keys' decisions",
            args.policy
        );
        ok = false;
    }
    if args.policy == WhenFull::EvictLight && returning_refused * 100 > returning_checks {
        println!("FAIL: more than 1% of the returning users refused");
        ok = false;
    }
    if !ok {
        std::process::exit(1);
    }
    println!("ok");
}
