//! Starts N `fleet_node` processes sharing one limit and prints each one's total, the sum, and
//! the Redis script calls they made (from `INFO commandstats`).
//!
//! ```text
//! cargo build --release -p cellgate-redis --example fleet_node --example fleet_run
//! target/release/examples/fleet_run --redis redis://127.0.0.1:6379 --nodes 4 -- \
//!     --name api --rate 10000/1 --burst 1000 --seconds 3 --threads 1
//! ```
//!
//! Everything after `--` goes to each `fleet_node` (`--redis` is added). The node program is
//! looked for next to this one (`--node PATH` overrides).

use std::path::PathBuf;
use std::process::{Command, ExitCode, Stdio};
use std::time::Instant;

fn script_calls(url: &str) -> Result<u64, redis::RedisError> {
    let mut c = redis::Client::open(url)?.get_connection()?;
    let info: String = redis::cmd("INFO").arg("commandstats").query(&mut c)?;
    Ok(cellgate_redis::wire::script_calls(&info))
}

fn main() -> ExitCode {
    let mut args = std::env::args().skip(1);
    let (mut url, mut nodes, mut node_path) = (None, 4usize, None);
    let mut rest = Vec::new();
    while let Some(a) = args.next() {
        match a.as_str() {
            "--redis" => url = args.next(),
            "--nodes" => nodes = args.next().and_then(|n| n.parse().ok()).unwrap_or(0),
            "--node" => node_path = args.next().map(PathBuf::from),
            "--" => rest.extend(args.by_ref()),
            other => {
                eprintln!("fleet_run: unknown flag {other}");
                return ExitCode::from(2);
            }
        }
    }
    let (Some(url), true) = (url, nodes > 0) else {
        eprintln!("fleet_run: --redis URL and --nodes N (N > 0) are required");
        return ExitCode::from(2);
    };
    let node = node_path.unwrap_or_else(|| {
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
    let before = script_calls(&url).unwrap_or(0);
    let start = Instant::now();
    let children: Vec<_> = (0..nodes)
        .map(|_| {
            Command::new(&node)
                .args(["--redis", &url])
                .args(&rest)
                .stdout(Stdio::piped())
                .spawn()
        })
        .collect();
    let mut total = 0u64;
    let mut ok = true;
    for (i, child) in children.into_iter().enumerate() {
        let out = match child.and_then(|c| c.wait_with_output()) {
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
    let calls = script_calls(&url).unwrap_or(0).saturating_sub(before);
    println!("total admitted {total} in {elapsed:.3} s; {calls} script calls to Redis");
    if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
