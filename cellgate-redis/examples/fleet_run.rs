//! Starts N `fleet_node` processes sharing one limit, prints each one's total, the sum, the
//! bound the fleet promises with a verdict (PASS when the sum is within it), and the Redis
//! script calls the fleet made (from `INFO commandstats` on every node of a cluster).
//!
//! ```text
//! cargo build --release -p cellgate-redis --example fleet_node --example fleet_run
//! target/release/examples/fleet_run --redis redis://127.0.0.1:6379 --nodes 4 -- \
//!     --name api --rate 10000/1 --burst 1000 --seconds 3 --threads 1
//! ```
//!
//! Everything after `--` goes to each `fleet_node` (`--redis` is added). The node program is
//! looked for next to this one (`--node PATH` overrides). Each node's stderr lines are
//! printed as they come, prefixed with the node's number.

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Command, ExitCode, Stdio};
use std::time::Instant;

const USAGE: &str = "\
fleet_run: starts N fleet_node processes sharing one limit through Redis, then prints each
node's total, the sum, the bound the fleet promises (a stock: its units; a rate R with burst
B over the run's T seconds: R*T + B) with a verdict, PASS when the sum is within it, and the
Redis script calls the fleet made (on a cluster, summed over every node). Exit status 1 on
FAIL or when a node failed.

USAGE: fleet_run --redis URL --nodes N [--node PATH] -- FLEET_NODE_FLAGS...

  --redis URL   redis://host:port, or the comma-separated seed URLs of a Redis Cluster
  --nodes N     how many fleet_node processes to start
  --node PATH   the fleet_node program          [default: next to this one]
  --help        print this and exit

  FLEET_NODE_FLAGS: --name NAME (--stock UNITS | --rate COUNT/SECONDS [--burst B])
                    --seconds S [--threads T]   (fleet_node --help says more)";

/// The bound a fleet's limit promises, from the node flags.
enum Limit {
    Stock(u64),
    /// Units per second, burst.
    Rate(f64, f64),
}

impl Limit {
    fn of(node_flags: &[String]) -> Option<Limit> {
        let flag = |name: &str| {
            let at = node_flags.iter().position(|f| f == name)?;
            node_flags.get(at + 1).map(String::as_str)
        };
        if let Some(units) = flag("--stock") {
            return units.parse().ok().map(Limit::Stock);
        }
        let (count, secs) = flag("--rate")?.split_once('/')?;
        let (count, secs): (f64, f64) = (count.parse().ok()?, secs.parse().ok()?);
        let burst = flag("--burst").map_or(Some(count), |b| b.parse().ok())?;
        (secs > 0.0).then(|| Limit::Rate(count / secs, burst))
    }

    /// The most the fleet may admit over a run of `secs` seconds, and how that is reckoned.
    fn bound(&self, secs: f64) -> (f64, String) {
        match *self {
            Limit::Stock(units) => (units as f64, format!("the stock, {units}")),
            Limit::Rate(r, b) => {
                let bound = (r * secs + b).floor();
                (
                    bound,
                    format!("R*T + B = {r}/s * {secs:.3} s + {b} = {bound}"),
                )
            }
        }
    }
}

/// The URLs of every node of the cluster `seeds` (comma-separated) belongs to, from
/// `CLUSTER NODES` on the first seed that answers, written as that seed is (scheme and
/// credentials kept); a single URL is its own list.
fn every_node(seeds: &str) -> Vec<String> {
    let seeds: Vec<&str> = seeds.split(',').map(str::trim).collect();
    if seeds.len() == 1 {
        return vec![seeds[0].to_owned()];
    }
    for seed in &seeds {
        let nodes = redis::Client::open(*seed)
            .and_then(|c| c.get_connection())
            .and_then(|mut c| redis::cmd("CLUSTER").arg("NODES").query::<String>(&mut c));
        let Ok(nodes) = nodes else { continue };
        let Some((scheme, rest)) = seed.split_once("://") else {
            continue;
        };
        let authority = rest.split(['/', '?']).next().unwrap_or(rest);
        let credentials = authority.rsplit_once('@').map(|(c, _)| format!("{c}@"));
        return nodes
            .lines()
            .filter_map(|l| l.split_whitespace().nth(1)?.split('@').next())
            .map(|addr| format!("{scheme}://{}{addr}", credentials.as_deref().unwrap_or("")))
            .collect();
    }
    seeds.iter().map(|s| (*s).to_owned()).collect()
}

/// The script calls run so far, summed over `nodes` (one that does not answer counts 0).
fn script_calls(nodes: &[String]) -> u64 {
    let one = |url: &str| -> Result<u64, redis::RedisError> {
        let mut c = redis::Client::open(url)?.get_connection()?;
        let info: String = redis::cmd("INFO").arg("commandstats").query(&mut c)?;
        Ok(cellgate_redis::wire::script_calls(&info))
    };
    nodes.iter().map(|n| one(n).unwrap_or(0)).sum()
}

struct Args {
    url: String,
    nodes: usize,
    node: Option<PathBuf>,
    rest: Vec<String>,
}

fn parse() -> Result<Args, String> {
    let mut args = std::env::args().skip(1);
    let (mut url, mut nodes, mut node) = (None, 4usize, None);
    let mut rest = Vec::new();
    while let Some(a) = args.next() {
        match a.as_str() {
            "--help" | "-h" => {
                println!("{USAGE}");
                std::process::exit(0);
            }
            "--redis" => url = args.next(),
            "--nodes" => nodes = args.next().and_then(|n| n.parse().ok()).unwrap_or(0),
            "--node" => node = args.next().map(PathBuf::from),
            "--" => rest.extend(args.by_ref()),
            other => return Err(format!("unknown flag {other}")),
        }
    }
    match (url, nodes > 0) {
        (Some(url), true) => Ok(Args {
            url,
            nodes,
            node,
            rest,
        }),
        _ => Err("--redis URL and --nodes N (N > 0) are required".to_owned()),
    }
}

fn main() -> ExitCode {
    let args = match parse() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("fleet_run: {e}\n\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    let node = args.node.unwrap_or_else(|| {
        let me = std::env::current_exe().unwrap_or_default();
        let dir = me.parent().map(PathBuf::from).unwrap_or_default();
        [dir.join("fleet_node"), dir.join("../fleet_node")]
            .into_iter()
            .find(|p| p.exists())
            .unwrap_or_else(|| dir.join("fleet_node"))
    });
    if !node.exists() {
        eprintln!(
            "fleet_run: {} not found; build it with cargo build --release -p cellgate-redis --example fleet_node",
            node.display()
        );
        return ExitCode::FAILURE;
    }
    let redis_nodes = every_node(&args.url);
    let before = script_calls(&redis_nodes);
    let start = Instant::now();
    let children: Vec<_> = (0..args.nodes)
        .map(|i| {
            let mut child = Command::new(&node)
                .args(["--redis", &args.url])
                .args(&args.rest)
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()?;
            // Whole lines, each with its node's number, as they come.
            let err = child.stderr.take().map(BufReader::new);
            let forward = std::thread::spawn(move || {
                for line in err
                    .into_iter()
                    .flat_map(BufRead::lines)
                    .map_while(Result::ok)
                {
                    eprintln!("node {i}: {line}");
                }
            });
            Ok::<_, std::io::Error>((child, forward))
        })
        .collect();
    let mut total = 0u64;
    let mut ok = true;
    for (i, child) in children.into_iter().enumerate() {
        let out = match child.and_then(|(c, forward)| {
            let out = c.wait_with_output();
            let _ = forward.join();
            out
        }) {
            Ok(o) => o,
            Err(e) => {
                eprintln!("fleet_run: node {i}: {e}");
                ok = false;
                continue;
            }
        };
        let text = String::from_utf8_lossy(&out.stdout);
        let last = text
            .lines()
            .rev()
            .find_map(|l| l.strip_prefix("admitted ")?.parse::<u64>().ok())
            .unwrap_or(0);
        ok &= out.status.success();
        println!("node {i}: admitted {last} ({})", out.status);
        total += last;
    }
    let elapsed = start.elapsed().as_secs_f64();
    let calls = script_calls(&redis_nodes).saturating_sub(before);
    println!(
        "total admitted {total} in {elapsed:.3} s; {calls} script calls to Redis ({} node{})",
        redis_nodes.len(),
        if redis_nodes.len() == 1 { "" } else { "s" }
    );
    match Limit::of(&args.rest) {
        Some(limit) => {
            let (bound, how) = limit.bound(elapsed);
            let pass = total as f64 <= bound;
            println!(
                "bound: at most {how}; {}: admitted {total} {} {bound}",
                if pass { "PASS" } else { "FAIL" },
                if pass { "<=" } else { ">" }
            );
            ok &= pass;
        }
        None => println!("bound: unknown (no --stock or --rate among the node flags)"),
    }
    if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
