//! The per-request pattern against the fleet mode, in one run against one redis-server:
//! decisions per second of one process, and Redis script calls per decision.
//!
//! - `lua bucket`: every decision is an EVALSHA of a token-bucket script (the pattern the
//!   reference articles show), `--concurrency` requests in flight per thread, pipelined on one
//!   multiplexed connection.
//! - `fleet rate`: `Fleet::rate` at 1,000,000/s (the fastest the µs protocol expresses),
//!   hammered by `--threads` threads; decisions include local denials.
//! - `fleet stock`: `Fleet::stock` of 10^12 units: every decision is an admission.
//!
//! ```text
//! cargo run --release -p cellgate-redis --example bench_vs_lua -- \
//!     --redis redis://127.0.0.1:6379 --seconds 3 --threads 1 --runs 3
//! ```

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use cellgate_redis::{Fleet, FleetBuilder};

/// A token bucket per request: tokens refill at `rate`/s up to `burst`; integer µs time.
const BUCKET_LUA: &str = r"
local rate, burst = tonumber(ARGV[1]), tonumber(ARGV[2])
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local b = redis.call('HMGET', KEYS[1], 'tokens', 'ts')
local tokens = tonumber(b[1]) or burst
local ts = tonumber(b[2]) or now
tokens = math.min(burst, tokens + (now - ts) * rate / 1000000)
local ok = 0
if tokens >= 1 then
  tokens = tokens - 1
  ok = 1
end
redis.call('HSET', KEYS[1], 'tokens', tostring(tokens), 'ts', string.format('%d', now))
return ok
";

struct Opts {
    url: String,
    seconds: f64,
    threads: usize,
    concurrency: usize,
    runs: usize,
}

#[derive(Clone, Copy, Debug)]
struct Sample {
    decisions: u64,
    allowed: u64,
    calls: u64,
    secs: f64,
}

impl Sample {
    fn per_sec(&self) -> f64 {
        self.decisions as f64 / self.secs
    }
    fn calls_per_decision(&self) -> f64 {
        self.calls as f64 / self.decisions.max(1) as f64
    }
}

fn script_calls(url: &str) -> u64 {
    let mut c = redis::Client::open(url)
        .and_then(|c| c.get_connection())
        .expect("redis connection");
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query(&mut c)
        .expect("INFO");
    cellgate_redis::script_calls(&info)
}

fn lua_bucket(o: &Opts, key: &str) -> Sample {
    let before = script_calls(&o.url);
    let stop = Arc::new(AtomicBool::new(false));
    let (decisions, allowed) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let start = Instant::now();
    let threads: Vec<_> = (0..o.threads)
        .map(|_| {
            let (url, key, conc) = (o.url.clone(), key.to_owned(), o.concurrency);
            let (stop, decisions, allowed) = (stop.clone(), decisions.clone(), allowed.clone());
            std::thread::spawn(move || {
                let rt = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .unwrap();
                rt.block_on(async move {
                    let client = redis::Client::open(url).unwrap();
                    let conn = client.get_multiplexed_async_connection().await.unwrap();
                    let script = redis::Script::new(BUCKET_LUA);
                    let tasks: Vec<_> = (0..conc)
                        .map(|_| {
                            let (mut conn, script, key) =
                                (conn.clone(), script.clone(), key.clone());
                            let (stop, decisions, allowed) =
                                (stop.clone(), decisions.clone(), allowed.clone());
                            tokio::spawn(async move {
                                while !stop.load(Ordering::Relaxed) {
                                    let ok: i64 = script
                                        .key(&key)
                                        .arg(1_000_000)
                                        .arg(1_000_000)
                                        .invoke_async(&mut conn)
                                        .await
                                        .unwrap();
                                    decisions.fetch_add(1, Ordering::Relaxed);
                                    allowed.fetch_add(ok as u64, Ordering::Relaxed);
                                }
                            })
                        })
                        .collect();
                    for t in tasks {
                        t.await.unwrap();
                    }
                });
            })
        })
        .collect();
    std::thread::sleep(Duration::from_secs_f64(o.seconds));
    stop.store(true, Ordering::Relaxed);
    for t in threads {
        t.join().unwrap();
    }
    let secs = start.elapsed().as_secs_f64();
    Sample {
        decisions: decisions.load(Ordering::Relaxed),
        allowed: allowed.load(Ordering::Relaxed),
        calls: script_calls(&o.url) - before,
        secs,
    }
}

fn fleet(o: &Opts, builder: FleetBuilder) -> Sample {
    let before = script_calls(&o.url);
    let fleet = Arc::new(builder.connect(&o.url).expect("connect"));
    let stop = Arc::new(AtomicBool::new(false));
    let start = Instant::now();
    let threads: Vec<_> = (0..o.threads)
        .map(|_| {
            let (fleet, stop) = (fleet.clone(), stop.clone());
            std::thread::spawn(move || {
                let (mut decisions, mut allowed) = (0u64, 0u64);
                while !stop.load(Ordering::Relaxed) {
                    for _ in 0..256 {
                        allowed += u64::from(fleet.check().is_allowed());
                    }
                    decisions += 256;
                }
                (decisions, allowed)
            })
        })
        .collect();
    std::thread::sleep(Duration::from_secs_f64(o.seconds));
    stop.store(true, Ordering::Relaxed);
    let (mut decisions, mut allowed) = (0, 0);
    for t in threads {
        let (d, a) = t.join().unwrap();
        decisions += d;
        allowed += a;
    }
    let secs = start.elapsed().as_secs_f64();
    fleet.shutdown();
    Sample {
        decisions,
        allowed,
        calls: script_calls(&o.url) - before,
        secs,
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    let mut o = Opts {
        url: "redis://127.0.0.1:6379".into(),
        seconds: 3.0,
        threads: 1,
        concurrency: 32,
        runs: 3,
    };
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let v = args.next().unwrap_or_default();
        match a.as_str() {
            "--redis" => o.url = v,
            "--seconds" => o.seconds = v.parse().expect("--seconds"),
            "--threads" => o.threads = v.parse().expect("--threads"),
            "--concurrency" => o.concurrency = v.parse().expect("--concurrency"),
            "--runs" => o.runs = v.parse().expect("--runs"),
            _ => panic!("unknown flag {a}"),
        }
    }
    let tag = std::process::id();
    let mut rows: Vec<(&str, Vec<Sample>)> = vec![
        ("lua bucket", vec![]),
        ("fleet rate", vec![]),
        ("fleet stock", vec![]),
    ];
    for run in 0..o.runs {
        let s = lua_bucket(&o, &format!("bench-lua-{tag}-{run}"));
        rows[0].1.push(s);
        let name = format!("bench-rate-{tag}-{run}");
        let s = fleet(&o, Fleet::rate(&name, 1_000_000, Duration::from_secs(1)));
        rows[1].1.push(s);
        let name = format!("bench-stock-{tag}-{run}");
        let s = fleet(&o, Fleet::stock(&name, 1_000_000_000_000));
        rows[2].1.push(s);
        for (label, samples) in &rows {
            let s = samples[run];
            println!(
                "run {run} {label:12} {:>14.0} decisions/s {:>14.0} admitted/s {:>10.2e} calls/decision",
                s.per_sec(),
                s.allowed as f64 / s.secs,
                s.calls_per_decision()
            );
        }
    }
    let lua = median(rows[0].1.iter().map(Sample::per_sec).collect());
    println!(
        "median of {} runs ({} s each, {} threads):",
        o.runs, o.seconds, o.threads
    );
    for (label, samples) in &rows {
        let d = median(samples.iter().map(Sample::per_sec).collect());
        let a = median(samples.iter().map(|s| s.allowed as f64 / s.secs).collect());
        let c = median(samples.iter().map(Sample::calls_per_decision).collect());
        println!(
            "{label:12} {d:>14.0} decisions/s {a:>14.0} admitted/s {c:>10.2e} calls/decision {:>8.1}x lua",
            d / lua
        );
    }
}
