//! The per-request pattern against the fleet mode, in one run against one redis-server:
//! decisions per second of one process, and Redis script calls per decision.
//!
//! - `lua bucket`: every decision is an EVALSHA of a token-bucket script (the pattern the
//!   reference articles show), `--concurrency` requests in flight per thread, pipelined on one
//!   multiplexed connection.
//! - `fleet rate`: `Fleet::rate` at 1,000,000/s (the fastest the µs protocol expresses),
//!   hammered by `--threads` threads; decisions include local denials.
//! - `fleet stock`: `Fleet::stock` of 10^12 units: every decision is an admission.
//! - `lua keys`: the Lua bucket again, each request on one of 1,000,000 keys, 1,000/s per key,
//!   each key expiring once its bucket is full (the per-key limit of the keyed rows).
//! - `keyed cold`: `KeyedFleet::rate` (1,000/s per key) with each check on one of 1,000,000
//!   keys, so every key stays cold and every check goes to Redis, batched: `--concurrency`
//!   checks in flight per thread, as the Lua rows.
//! - `keyed hot`: the same limit on 16 keys checked as fast as `--threads` threads can
//!   (100,000/s per key): leased, local; most decisions are local denials of a spent lease
//!   (the keys' rate is the bound).
//! - `keyed leased`: as `keyed hot` at 1,000,000/s per key (the fastest the µs protocol
//!   expresses), so most decisions are admissions from a lease: the like-for-like row of
//!   `fleet stock` for a hot key.
//!
//! Each run's line ends with `not-in-redis/s`: decisions a second that Redis did not make (a
//! cold keyed check decided by the limiter's outage fallback because Redis did not answer
//! within `max_wait`, or refused because too many checks waited; 0 for the Lua rows, and for
//! the hot rows, which decide locally by design).
//!
//! Each row's summary is one whole run: the run whose decisions/s is the row's median, every
//! column from that run. Ratios are like for like and same-run: the single-limit rows against
//! `lua bucket`, the keyed rows against `lua keys`, each run's ratio computed within that run,
//! the median of those ratios reported (with each run's).
//!
//! ```text
//! cargo run --release -p cellgate-redis --example bench_vs_lua -- \
//!     --redis redis://127.0.0.1:6379 --seconds 3 --threads 1 --runs 3
//! ```
//!
//! `--only LABEL` runs one row alone (`--runs` times, no ratios): to profile it, or to run the
//! keyed rows against a Redis Cluster (`--redis` then takes the comma-separated URLs of every
//! node, whose counters are summed; `bench_cluster` does this for one and three masters).
//! `--only` also takes `keyed stock`: `KeyedFleet::stock` (10^12 units per key) with each
//! check on one of 1,000,000 keys, as `keyed cold` (every check a batched call in Redis, which
//! waits for a replica on a master with replicas). With `--commands 1`, each `--only` run is
//! followed by a line `commands run N LABEL: A all W wait U admitted`: every command Redis
//! executed (`INFO commandstats`, every node summed: script calls, the commands the scripts
//! run, `WAIT`, `INFO`), the `WAIT`s among them, and the units admitted. `--replication auto`
//! (the default) or `off` sets the fleet limiters' [`Replication`](cellgate_redis::Replication).
//! `--fleets N` (default 1) gives the cold keyed rows (`keyed cold`, `keyed stock`) N limiters
//! of the one limit, as N processes would have (each its own batching thread and connections),
//! thread `t` checking through limiter `t % N`: with one, a many-core machine measures that
//! limiter's batching thread rather than Redis. `--max-wait MS` and `--command-timeout MS` set
//! those of the cold keyed rows' limiters (defaults: the library's, 20 and 200 ms): raised
//! (say 1000 and 2000), checks that a saturated Redis is slow to answer wait for it instead of
//! going to the outage fallback, so that their decisions/s measure Redis's capacity.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use cellgate_redis::{Fleet, FleetBuilder, KeyedFleet, Replication, Via};

/// What `--help` prints.
const USAGE: &str = "\
bench_vs_lua: the per-request Lua pattern against the fleet mode, against one redis-server:
decisions a second of one process, and Redis script calls per decision, row by row.

USAGE: bench_vs_lua [FLAGS]

  --redis URL             the Redis to measure against [default: redis://127.0.0.1:6379]
  --seconds S             seconds per run                        [default: 3]
  --runs N                runs of each row                       [default: 3]
  --threads N             checking threads                       [default: 1]
  --concurrency N         requests in flight per thread          [default: 32]
  --only LABEL            one row only (e.g. \"keyed cold\")
  --replication MODE      auto | off | required (stock rows)     [default: auto]
  --commands 1            count every command Redis ran, not only script calls
  --fleets N              limiter instances per process          [default: 1]
  --max-wait MS           a cold keyed check's longest wait
  --command-timeout MS    the limiters' command timeout
  --help                  print this and exit

The module docs of examples/bench_vs_lua.rs describe each row.";

/// A token bucket per request: tokens refill at `rate`/s up to `burst`; integer µs time. With
/// `ARGV[3]` = 1 the key expires when its bucket is full again, as a limiter with many keys
/// needs to bound its memory.
const BUCKET_LUA: &str = r"
local rate, burst, expire = tonumber(ARGV[1]), tonumber(ARGV[2]), ARGV[3] == '1'
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
if expire then
  redis.call('PEXPIRE', KEYS[1], math.ceil((burst - tokens) * 1000 / rate) + 1)
end
return ok
";

struct Opts {
    url: String,
    seconds: f64,
    threads: usize,
    concurrency: usize,
    runs: usize,
    /// `--only LABEL`: run that row alone (no ratios), to profile it.
    only: Option<String>,
    /// `--replication auto|off`: the fleet limiters' replica waits.
    replication: Replication,
    /// `--commands 1`: after each `--only` run, every command Redis ran and the `WAIT`s.
    commands: bool,
    /// `--fleets N`: the cold keyed rows use N limiters of the one limit (as N processes
    /// would, each with its own batching thread and connections), thread `t` checking through
    /// limiter `t % N`.
    fleets: usize,
    /// `--max-wait MS`: the cold keyed rows' `max_wait` (the library's default when absent);
    /// `--command-timeout MS` likewise. Raised, a saturated Redis makes checks wait rather
    /// than go to the outage fallback, so that decisions/s measures Redis.
    max_wait: Option<Duration>,
    command_timeout: Option<Duration>,
}

#[derive(Clone, Copy, Debug)]
struct Sample {
    decisions: u64,
    allowed: u64,
    /// See [`Load::elsewhere`].
    elsewhere: u64,
    calls: u64,
    /// CPU microseconds the Redis server used (user + system), all its work included.
    usec: u64,
    secs: f64,
}

impl Sample {
    fn per_sec(&self) -> f64 {
        self.decisions as f64 / self.secs
    }
    fn calls_per_decision(&self) -> f64 {
        self.calls as f64 / self.decisions.max(1) as f64
    }
    fn usec_per_decision(&self) -> f64 {
        self.usec as f64 / self.decisions.max(1) as f64
    }
    /// Decisions a second that Redis did not make (see [`Load::elsewhere`]).
    fn elsewhere_per_sec(&self) -> f64 {
        self.elsewhere as f64 / self.secs
    }
}

/// Calls `each` with a connection to every node of `urls` (comma-separated, each once) and
/// the node's `INFO commandstats`.
fn each_node(urls: &str, mut each: impl FnMut(&mut redis::Connection, &str)) {
    let mut seen = std::collections::HashSet::new();
    for url in urls.split(',').map(str::trim).filter(|u| seen.insert(*u)) {
        let mut c = redis::Client::open(url)
            .and_then(|c| c.get_connection())
            .expect("redis connection");
        let info: String = redis::cmd("INFO")
            .arg("commandstats")
            .query(&mut c)
            .expect("INFO");
        each(&mut c, &info);
    }
}

/// Script calls (`INFO commandstats`) and the CPU microseconds the server has used
/// (`INFO cpu`: `used_cpu_user` + `used_cpu_sys`, every command and the network included);
/// with comma-separated URLs (a cluster's nodes), the sums over every node.
fn redis_counters(urls: &str) -> (u64, u64) {
    let mut total = (0, 0);
    each_node(urls, |c, info| {
        let cpu: String = redis::cmd("INFO").arg("cpu").query(c).expect("INFO");
        let secs: f64 = cpu
            .lines()
            .filter(|l| l.starts_with("used_cpu_user:") || l.starts_with("used_cpu_sys:"))
            .filter_map(|l| l.split(':').nth(1)?.trim().parse::<f64>().ok())
            .sum();
        total.0 += cellgate_redis::wire::script_calls(info);
        total.1 += (secs * 1e6) as u64;
    });
    total
}

/// Every command the nodes of `urls` executed, and the `WAIT`s among them (`INFO
/// commandstats`, summed over the nodes).
fn all_commands(urls: &str) -> (u64, u64) {
    let mut total = (0, 0);
    each_node(urls, |_, info| {
        total.0 += cellgate_redis::wire::command_calls(info, "cmdstat_");
        total.1 += cellgate_redis::wire::command_calls(info, "cmdstat_wait:");
    });
    total
}

/// Redis's counters since `before`.
fn since(url: &str, before: (u64, u64)) -> (u64, u64) {
    let now = redis_counters(url);
    (now.0 - before.0, now.1 - before.1)
}

/// What one row's load did: decisions, admissions, and for how long.
struct Load {
    decisions: u64,
    allowed: u64,
    /// Decisions Redis did not make (a keyed fleet's fallback or refusal; 0 for the rows
    /// that decide locally by design or in Redis always).
    elsewhere: u64,
    secs: f64,
}

impl Load {
    /// The row's sample: the load and what Redis did since `before`.
    fn sample(self, o: &Opts, before: (u64, u64)) -> Sample {
        let (calls, usec) = since(&o.url, before);
        Sample {
            decisions: self.decisions,
            allowed: self.allowed,
            elsewhere: self.elsewhere,
            calls,
            usec,
            secs: self.secs,
        }
    }
}

/// `--threads` threads calling `check` as fast as they can for `--seconds`.
fn spin(o: &Opts, check: Arc<dyn Fn() -> bool + Send + Sync>) -> Load {
    let stop = Arc::new(AtomicBool::new(false));
    let start = Instant::now();
    let threads: Vec<_> = (0..o.threads)
        .map(|_| {
            let (check, stop) = (check.clone(), stop.clone());
            std::thread::spawn(move || {
                let (mut decisions, mut allowed) = (0u64, 0u64);
                while !stop.load(Ordering::Relaxed) {
                    for _ in 0..256 {
                        allowed += u64::from(check());
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
    Load {
        decisions,
        allowed,
        elsewhere: 0,
        secs: start.elapsed().as_secs_f64(),
    }
}

/// What one pipelined check said: admitted or not, and whether Redis decided it (every Lua
/// call does; a keyed fleet's cold check may instead be decided by its outage fallback, when
/// Redis does not answer within `max_wait`, or refused, when too many checks wait already).
#[derive(Clone, Copy)]
struct Said {
    allowed: bool,
    in_redis: bool,
}

type AsyncCheck = Arc<dyn Fn(u64) -> Pin<Box<dyn Future<Output = Said> + Send>> + Send + Sync>;

/// `--threads` threads, each with its own current-thread runtime, where `setup` makes the
/// thread's check (connecting, say) and `--concurrency` tasks call it in a loop for
/// `--seconds`, each with its own sequence of key numbers (below 1,000,000, in a scattered
/// order).
fn pipelined<S, F>(o: &Opts, setup: S) -> Load
where
    S: Fn() -> F + Send + Sync + 'static,
    F: Future<Output = AsyncCheck>,
{
    let setup = Arc::new(setup);
    let stop = Arc::new(AtomicBool::new(false));
    let (decisions, allowed) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let elsewhere = Arc::new(AtomicU64::new(0));
    let start = Instant::now();
    let threads: Vec<_> = (0..o.threads)
        .map(|t| {
            let (setup, stop, conc) = (setup.clone(), stop.clone(), o.concurrency);
            let (decisions, allowed) = (decisions.clone(), allowed.clone());
            let elsewhere = elsewhere.clone();
            std::thread::spawn(move || {
                let rt = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .unwrap();
                rt.block_on(async move {
                    let check = setup().await;
                    let tasks: Vec<_> = (0..conc)
                        .map(|c| {
                            let (check, stop) = (check.clone(), stop.clone());
                            let (decisions, allowed) = (decisions.clone(), allowed.clone());
                            let elsewhere = elsewhere.clone();
                            let mut i = (t * conc + c) as u64 * 31_337;
                            tokio::spawn(async move {
                                while !stop.load(Ordering::Relaxed) {
                                    i = (i + 7_919) % 1_000_000;
                                    let said = check(i).await;
                                    decisions.fetch_add(1, Ordering::Relaxed);
                                    allowed.fetch_add(u64::from(said.allowed), Ordering::Relaxed);
                                    elsewhere
                                        .fetch_add(u64::from(!said.in_redis), Ordering::Relaxed);
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
    Load {
        decisions: decisions.load(Ordering::Relaxed),
        allowed: allowed.load(Ordering::Relaxed),
        elsewhere: elsewhere.load(Ordering::Relaxed),
        secs: start.elapsed().as_secs_f64(),
    }
}

/// The Lua bucket on `key`, or with `spread` on one of 1,000,000 keys `{key}-{i}`.
fn lua_bucket(o: &Opts, key: &str, spread: bool) -> Sample {
    let before = redis_counters(&o.url);
    let (url, key) = (o.url.clone(), key.to_owned());
    let load = pipelined(o, move || {
        let (url, key) = (url.clone(), key.clone());
        async move {
            let client = redis::Client::open(url).unwrap();
            let conn = client.get_multiplexed_async_connection().await.unwrap();
            let script = redis::Script::new(BUCKET_LUA);
            Arc::new(move |i| {
                let (mut conn, script) = (conn.clone(), script.clone());
                // One key: 1,000,000/s; many: 1,000/s each, expiring when full.
                let (key, rate, expire) = if spread {
                    (format!("{key}-{i}"), 1_000, 1)
                } else {
                    (key.clone(), 1_000_000, 0)
                };
                Box::pin(async move {
                    let ok: i64 = script
                        .key(key)
                        .arg(rate)
                        .arg(rate)
                        .arg(expire)
                        .invoke_async(&mut conn)
                        .await
                        .unwrap();
                    Said {
                        allowed: ok == 1,
                        in_redis: true,
                    }
                }) as Pin<Box<dyn Future<Output = Said> + Send>>
            }) as AsyncCheck
        }
    });
    load.sample(o, before)
}

fn fleet(o: &Opts, builder: FleetBuilder) -> Sample {
    let before = redis_counters(&o.url);
    let fleet = Arc::new(
        builder
            .replication(o.replication)
            .connect(&o.url)
            .expect("connect"),
    );
    let f = fleet.clone();
    let load = spin(o, Arc::new(move || f.check().is_allowed()));
    fleet.shutdown();
    load.sample(o, before)
}

/// Cold keys: `--concurrency` async checks in flight per thread, each on one of 1,000,000
/// keys.
fn keyed_cold(o: &Opts, name: &str) -> Sample {
    keyed_spread(o, KeyedFleet::rate(name, 1_000, Duration::from_secs(1)))
}

/// As [`keyed_cold`], for the keyed limit `builder` makes (`--fleets` limiters of it).
fn keyed_spread(o: &Opts, mut builder: cellgate_redis::KeyedFleetBuilder) -> Sample {
    let before = redis_counters(&o.url);
    if let Some(t) = o.command_timeout {
        builder = builder.command_timeout(t);
    }
    if let Some(w) = o.max_wait {
        builder = builder.max_wait(w);
    }
    let fleets: Arc<Vec<Arc<KeyedFleet>>> = Arc::new(
        (0..o.fleets)
            .map(|_| {
                Arc::new(
                    builder
                        .clone()
                        .replication(o.replication)
                        .connect(&o.url)
                        .expect("connect"),
                )
            })
            .collect(),
    );
    let (all, next) = (fleets.clone(), Arc::new(AtomicU64::new(0)));
    let load = pipelined(o, move || {
        // Each thread sets up once: the next limiter in turn.
        let n = next.fetch_add(1, Ordering::Relaxed) as usize;
        let f = all[n % all.len()].clone();
        async move {
            Arc::new(move |i| {
                let f = f.clone();
                Box::pin(async move {
                    let d = f.check(&format!("k-{i}")).await;
                    Said {
                        allowed: d.is_allowed(),
                        in_redis: d.via() == Via::Redis,
                    }
                }) as Pin<Box<dyn Future<Output = Said> + Send>>
            }) as AsyncCheck
        }
    });
    for f in fleets.iter() {
        f.shutdown();
    }
    load.sample(o, before)
}

/// Hot keys: 16 keys at `per_key`/s each, checked by `--threads` threads as fast as they can.
fn keyed_hot(o: &Opts, name: &str, per_key: u32) -> Sample {
    let before = redis_counters(&o.url);
    let fleet = Arc::new(
        KeyedFleet::rate(name, per_key, Duration::from_secs(1))
            .connect(&o.url)
            .expect("connect"),
    );
    let keys: Vec<String> = (0..16).map(|k| format!("hot{k}")).collect();
    thread_local! {
        static NEXT: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
    }
    let f = fleet.clone();
    let load = spin(
        o,
        Arc::new(move || {
            // Sixteen checks in a row on each key, in turn (a counter of this thread's own).
            let n = NEXT.with(|c| c.replace(c.get() + 1));
            f.check_blocking(&keys[n / 16 % keys.len()], 1).is_allowed()
        }),
    );
    fleet.shutdown();
    load.sample(o, before)
}

/// `--only LABEL`: one row's runs, each on its own line.
fn only(o: &Opts, label: &str, tag: u32) {
    for run in 0..o.runs {
        let commands = o.commands.then(|| all_commands(&o.url));
        let s = match label {
            "lua bucket" => lua_bucket(o, &format!("bench-lua-{tag}-{run}"), false),
            "fleet rate" => fleet(
                o,
                Fleet::rate(
                    &format!("bench-rate-{tag}-{run}"),
                    1_000_000,
                    Duration::from_secs(1),
                ),
            ),
            "fleet stock" => fleet(
                o,
                Fleet::stock(&format!("bench-stock-{tag}-{run}"), 1_000_000_000_000),
            ),
            "lua keys" => lua_bucket(o, &format!("bench-luak-{tag}-{run}"), true),
            "keyed cold" => keyed_cold(o, &format!("bench-cold-{tag}-{run}")),
            "keyed stock" => keyed_spread(
                o,
                KeyedFleet::stock(&format!("bench-kstock-{tag}-{run}"), 1_000_000_000_000),
            ),
            "keyed hot" => keyed_hot(o, &format!("bench-hot-{tag}-{run}"), 100_000),
            "keyed leased" => keyed_hot(o, &format!("bench-leased-{tag}-{run}"), 1_000_000),
            _ => panic!("--only: no row {label:?}"),
        };
        println!(
            "run {run} {label:12} {:>14.0} decisions/s {:>14.0} admitted/s {:>10.2e} calls/decision {:>12.0} not-in-redis/s",
            s.per_sec(),
            s.allowed as f64 / s.secs,
            s.calls_per_decision(),
            s.elsewhere_per_sec(),
        );
        if let Some((all, wait)) = commands {
            let (all_now, wait_now) = all_commands(&o.url);
            println!(
                "commands run {run} {label}: {} all {} wait {} admitted",
                all_now - all,
                wait_now - wait,
                s.allowed
            );
        }
    }
}

/// The index of the median of `v` (the upper one for an even count).
fn median_index(v: &[f64]) -> usize {
    let mut order: Vec<usize> = (0..v.len()).collect();
    order.sort_by(|a, b| v[*a].total_cmp(&v[*b]));
    order[v.len() / 2]
}

/// The like-for-like baseline of row `row`: `lua keys` (row 3) for the keyed rows, `lua
/// bucket` (row 0) for the single-limit ones.
fn baseline(row: usize) -> usize {
    if row >= 3 {
        3
    } else {
        0
    }
}

fn main() {
    let mut o = Opts {
        url: "redis://127.0.0.1:6379".into(),
        seconds: 3.0,
        threads: 1,
        concurrency: 32,
        runs: 3,
        only: None,
        replication: Replication::Auto,
        commands: false,
        fleets: 1,
        max_wait: None,
        command_timeout: None,
    };
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        if a == "--help" || a == "-h" {
            println!("{USAGE}");
            std::process::exit(0);
        }
        let v = args.next().unwrap_or_default();
        match a.as_str() {
            "--redis" => o.url = v,
            "--seconds" => o.seconds = v.parse().expect("--seconds"),
            "--threads" => o.threads = v.parse().expect("--threads"),
            "--concurrency" => o.concurrency = v.parse().expect("--concurrency"),
            "--runs" => o.runs = v.parse().expect("--runs"),
            "--only" => o.only = Some(v),
            "--replication" => {
                o.replication = match v.as_str() {
                    "auto" => Replication::Auto,
                    "off" => Replication::Off,
                    "required" => Replication::Required,
                    _ => panic!("--replication auto|off|required"),
                }
            }
            "--commands" => o.commands = v == "1",
            "--fleets" => o.fleets = v.parse::<usize>().expect("--fleets").max(1),
            "--max-wait" => {
                o.max_wait = Some(Duration::from_millis(v.parse().expect("--max-wait")))
            }
            "--command-timeout" => {
                o.command_timeout =
                    Some(Duration::from_millis(v.parse().expect("--command-timeout")))
            }
            _ => panic!("unknown flag {a}"),
        }
    }
    let tag = std::process::id();
    if let Some(label) = &o.only {
        only(&o, label, tag);
        return;
    }
    let mut rows: Vec<(&str, Vec<Sample>)> = vec![
        ("lua bucket", vec![]),
        ("fleet rate", vec![]),
        ("fleet stock", vec![]),
        ("lua keys", vec![]),
        ("keyed cold", vec![]),
        ("keyed hot", vec![]),
        ("keyed leased", vec![]),
    ];
    for run in 0..o.runs {
        let s = lua_bucket(&o, &format!("bench-lua-{tag}-{run}"), false);
        rows[0].1.push(s);
        let name = format!("bench-rate-{tag}-{run}");
        let s = fleet(&o, Fleet::rate(&name, 1_000_000, Duration::from_secs(1)));
        rows[1].1.push(s);
        let name = format!("bench-stock-{tag}-{run}");
        let s = fleet(&o, Fleet::stock(&name, 1_000_000_000_000));
        rows[2].1.push(s);
        let s = lua_bucket(&o, &format!("bench-luak-{tag}-{run}"), true);
        rows[3].1.push(s);
        let s = keyed_cold(&o, &format!("bench-cold-{tag}-{run}"));
        rows[4].1.push(s);
        let s = keyed_hot(&o, &format!("bench-hot-{tag}-{run}"), 100_000);
        rows[5].1.push(s);
        let s = keyed_hot(&o, &format!("bench-leased-{tag}-{run}"), 1_000_000);
        rows[6].1.push(s);
        for (i, (label, samples)) in rows.iter().enumerate() {
            let s = samples[run];
            let base = &rows[baseline(i)];
            println!(
                "run {run} {label:12} {:>14.0} decisions/s {:>14.0} admitted/s {:>10.2e} calls/decision {:>8.3} redis us/decision {:>8.1}x {} {:>12.0} not-in-redis/s",
                s.per_sec(),
                s.allowed as f64 / s.secs,
                s.calls_per_decision(),
                s.usec_per_decision(),
                s.per_sec() / base.1[run].per_sec(),
                base.0,
                s.elsewhere_per_sec(),
            );
        }
    }
    println!(
        "median run of {} ({} s each, {} threads); ratios: median of the same-run ratios:",
        o.runs, o.seconds, o.threads
    );
    for (i, (label, samples)) in rows.iter().enumerate() {
        let per_sec: Vec<f64> = samples.iter().map(Sample::per_sec).collect();
        let k = median_index(&per_sec);
        let s = samples[k];
        let (base_label, base) = &rows[baseline(i)];
        let ratios: Vec<f64> = samples
            .iter()
            .zip(base)
            .map(|(s, b)| s.per_sec() / b.per_sec())
            .collect();
        let ratio = ratios[median_index(&ratios)];
        let each: Vec<String> = ratios.iter().map(|r| format!("{r:.2}")).collect();
        println!(
            "{label:12} {:>14.0} decisions/s {:>14.0} admitted/s {:>10.2e} calls/decision {:>8.3} redis us/decision {ratio:>8.1}x {base_label} (run {k}; per run {}) {:>12.0} not-in-redis/s",
            s.per_sec(),
            s.allowed as f64 / s.secs,
            s.calls_per_decision(),
            s.usec_per_decision(),
            each.join(" / "),
            s.elsewhere_per_sec(),
        );
    }
}
