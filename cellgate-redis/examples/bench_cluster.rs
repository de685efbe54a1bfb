//! Cold keyed decisions/s on one Redis and on a Redis Cluster, in one run: starts the servers
//! itself on loopback (`redis-server`, `redis-cli` on the PATH; no persistence), then runs
//! `bench_vs_lua --only "keyed cold"` (found next to this program) against each:
//!
//! - `1 node`: one `redis-server`, not a cluster (a keyed limit is one shard there);
//! - `1 master`: a cluster of one node holding every slot (the limit's 16 shards on it);
//! - `3 masters`: three masters with a replica each (`redis-cli --cluster create
//!   --cluster-replicas 1`): the shards spread over the three.
//!
//! Each setup's runs, then the median run of each and the same-run ratios against `1 master`
//! and `1 node`, of the decisions Redis made: a run's decisions/s less its `not-in-redis/s`
//! (cold checks the limiters' outage fallback decided because Redis, or the machine running
//! it, did not answer within `max_wait`, and checks refused because too many waited: those
//! measure the overload, not the servers). The machine runs the servers and the benchmark
//! together: on a small machine the masters compete with the benchmark and with each other
//! for the same cores.
//!
//! ```text
//! cargo build --release -p cellgate-redis --example bench_vs_lua --example bench_cluster
//! target/release/examples/bench_cluster --seconds 3 --runs 3 --threads 1 --concurrency 256 \
//!     --max-wait 1000 --command-timeout 2000
//! ```
//!
//! A run in which more than 1% of the decisions were not made in Redis says so on its line.
//!
//! `--wait-cost 1` measures instead what waiting for a replica costs on the three masters with
//! a replica each: the stock rows (`fleet stock`, `keyed stock`: the limiters whose debits
//! wait, `Replication::Auto`) against the same rows with `--replication off`, interleaved run
//! by run (`bench_vs_lua --runs 1` each, so run `i` of both settings ran back to back), each
//! run's decisions/s and every command Redis executed (all nodes) per admitted unit, then the
//! medians and the same-run ratios auto/off.

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// One `redis-server` this program started (killed when dropped).
struct Server {
    port: u16,
    child: Child,
    dir: PathBuf,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

impl Server {
    /// A server on a free loopback port whose `+ 10000` (a cluster's bus port) is free too.
    fn start(cluster: bool) -> Server {
        let port = loop {
            let p = TcpListener::bind("127.0.0.1:0")
                .and_then(|l| l.local_addr())
                .expect("a free port")
                .port();
            if p < 55_000 && TcpListener::bind(("127.0.0.1", p + 10_000)).is_ok() {
                break p;
            }
        };
        let dir =
            std::env::temp_dir().join(format!("cellgate-bench-{}-{port}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let mut cmd = Command::new("redis-server");
        cmd.args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no"])
            .arg("--dir")
            .arg(&dir);
        if cluster {
            cmd.args([
                "--cluster-enabled",
                "yes",
                "--cluster-config-file",
                "nodes.conf",
                // A replica's first full sync starts at once (Redis waits 5 s by default).
                "--repl-diskless-sync-delay",
                "0",
            ]);
        }
        let child = cmd
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server (install it: apt-get install -y redis-server)");
        let s = Server { port, child, dir };
        wait_for("redis-server to answer", || {
            s.cli(&["PING"]).contains("PONG")
        });
        s
    }

    fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// `redis-cli -p PORT args...`, its output.
    fn cli(&self, args: &[&str]) -> String {
        Command::new("redis-cli")
            .args(["-p", &self.port.to_string()])
            .args(args)
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
            .unwrap_or_default()
    }
}

fn wait_for(what: &str, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !f() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A cluster of one master holding every slot.
fn one_master() -> Vec<Server> {
    let s = Server::start(true);
    s.cli(&["CLUSTER", "ADDSLOTSRANGE", "0", "16383"]);
    wait_for("the cluster to be ready", || {
        s.cli(&["CLUSTER", "INFO"]).contains("cluster_state:ok")
    });
    vec![s]
}

/// Three masters with a replica each.
fn three_masters() -> Vec<Server> {
    let nodes: Vec<Server> = (0..6).map(|_| Server::start(true)).collect();
    let out = Command::new("redis-cli")
        .args(["--cluster", "create"])
        .args(nodes.iter().map(|n| format!("127.0.0.1:{}", n.port)))
        .args(["--cluster-replicas", "1", "--cluster-yes"])
        .stdin(Stdio::null())
        .output()
        .expect("redis-cli --cluster create");
    assert!(
        out.status.success(),
        "redis-cli --cluster create: {}",
        String::from_utf8_lossy(&out.stdout)
    );
    wait_for("the cluster to be ready", || {
        nodes.iter().all(|n| {
            n.cli(&["CLUSTER", "INFO"]).contains("cluster_state:ok")
                && n.cli(&["CLUSTER", "NODES"]).matches("slave").count() == 3
        })
    });
    // And every replica holds its master's data (until then a replica acknowledges nothing,
    // and its full sync would load the machine mid-run).
    wait_for("the replicas to sync", || {
        nodes.iter().all(|n| {
            let info = n.cli(&["INFO", "replication"]);
            info.contains("role:master") || info.contains("master_link_status:up")
        })
    });
    nodes
}

/// Runs `bench_vs_lua --only "keyed cold"` against `urls`; each run's decisions/s made in
/// Redis (its decisions/s less those the limiters' outage fallback made or refused: a
/// fallback decision, taken when Redis does not answer within `max_wait`, measures the
/// machine's overload, not Redis) and its output line.
fn keyed_cold(bench: &PathBuf, urls: &str, pass: &[String]) -> Vec<(f64, String)> {
    run_bench(bench, urls, "keyed cold", pass, &[])
        .lines()
        .filter(|l| l.starts_with("run "))
        .filter_map(|l| {
            let words: Vec<&str> = l.split_whitespace().collect();
            let d: f64 = words.get(4)?.parse().ok()?;
            let at = words.iter().position(|w| *w == "not-in-redis/s")?;
            let elsewhere: f64 = words.get(at.checked_sub(1)?)?.parse().ok()?;
            let mut line = l.to_owned();
            if elsewhere > 0.01 * d {
                // Not a measure of the servers: say so on the run's own line.
                line.push_str(&format!(
                    "   ({:.0}% not decided in Redis: raise --max-wait and --command-timeout)",
                    100.0 * elsewhere / d
                ));
            }
            Some((d - elsewhere, line))
        })
        .collect()
}

/// One `--wait-cost` run: decisions/s, admitted/s, all commands, `WAIT`s, units admitted.
struct Cost {
    decisions: f64,
    admitted_per_sec: f64,
    commands: u64,
    waits: u64,
    admitted: u64,
}

impl Cost {
    fn per_unit(&self) -> f64 {
        self.commands as f64 / self.admitted.max(1) as f64
    }
}

/// `bench_vs_lua --redis urls --only row`, then `pass` and `more`: its output.
fn run_bench(bench: &PathBuf, urls: &str, row: &str, pass: &[String], more: &[&str]) -> String {
    let out = Command::new(bench)
        .args(["--redis", urls, "--only", row])
        .args(pass)
        .args(more)
        .output()
        .expect("running bench_vs_lua");
    assert!(
        out.status.success(),
        "bench_vs_lua: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// One run of `bench_vs_lua --only row --replication policy --commands 1` against `urls`.
fn cost(bench: &PathBuf, urls: &str, row: &str, policy: &str, pass: &[String]) -> Cost {
    let more = ["--runs", "1", "--replication", policy, "--commands", "1"];
    let text = run_bench(bench, urls, row, pass, &more);
    let word = |prefix: &str, n: usize| -> f64 {
        text.lines()
            .find(|l| l.starts_with(prefix))
            .and_then(|l| l.split_whitespace().nth(n)?.parse().ok())
            .unwrap_or_else(|| panic!("no {prefix:?} line in {text}"))
    };
    // `run 0 keyed stock  D decisions/s ...`, `commands run 0 keyed stock: A all W wait U admitted`.
    Cost {
        decisions: word("run ", 4),
        admitted_per_sec: word("run ", 6),
        commands: word("commands run ", 5) as u64,
        waits: word("commands run ", 7) as u64,
        admitted: word("commands run ", 9) as u64,
    }
}

/// The median of `v`.
fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// `--wait-cost 1`: the stock rows with and without replica waits on three masters.
fn wait_cost(bench: &PathBuf, pass: &[String]) {
    let runs: usize = pass
        .iter()
        .position(|a| a == "--runs")
        .and_then(|i| pass.get(i + 1)?.parse().ok())
        .unwrap_or(3);
    let nodes = three_masters();
    let urls: Vec<String> = nodes.iter().map(Server::url).collect();
    let urls = urls.join(",");
    for row in ["fleet stock", "keyed stock"] {
        let mut each: Vec<(Cost, Cost)> = Vec::new();
        for run in 0..runs {
            let auto = cost(bench, &urls, row, "auto", pass);
            let off = cost(bench, &urls, row, "off", pass);
            for (policy, c) in [("auto", &auto), ("off", &off)] {
                println!(
                    "wait-cost {row:12} {policy:4} run {run} {:>12.0} decisions/s {:>12.0} admitted/s {:>10.3e} commands/unit ({} commands, {} WAIT, {} admitted)",
                    c.decisions,
                    c.admitted_per_sec,
                    c.per_unit(),
                    c.commands,
                    c.waits,
                    c.admitted
                );
            }
            each.push((auto, off));
        }
        let list = |f: &dyn Fn(&(Cost, Cost)) -> f64| {
            let v: Vec<f64> = each.iter().map(f).collect();
            let shown: Vec<String> = v.iter().map(|x| format!("{x:.2}")).collect();
            format!("{:.2}x ({})", median(v), shown.join(" / "))
        };
        println!(
            "wait-cost {row:12} median of {runs}: auto {:.0} decisions/s {:.0} admitted/s {:.3e} commands/unit, off {:.0} decisions/s {:.0} admitted/s {:.3e} commands/unit; same-run auto/off: decisions/s {}, admitted/s {}, commands/unit {}",
            median(each.iter().map(|(a, _)| a.decisions).collect()),
            median(each.iter().map(|(a, _)| a.admitted_per_sec).collect()),
            median(each.iter().map(|(a, _)| a.per_unit()).collect()),
            median(each.iter().map(|(_, o)| o.decisions).collect()),
            median(each.iter().map(|(_, o)| o.admitted_per_sec).collect()),
            median(each.iter().map(|(_, o)| o.per_unit()).collect()),
            list(&|(a, o)| a.decisions / o.decisions),
            list(&|(a, o)| a.admitted_per_sec / o.admitted_per_sec),
            list(&|(a, o)| a.per_unit() / o.per_unit()),
        );
    }
}

const USAGE: &str = "\
bench_cluster: cold keyed decisions made in Redis a second on one node, a one-master cluster and
a cluster of three masters with a replica each, all started here on loopback (redis-server and
redis-cli on the PATH), each measured by bench_vs_lua (found next to this program).

USAGE: bench_cluster [--wait-cost 1] [BENCH_VS_LUA_FLAGS...]

  --wait-cost 1   measure instead what waiting for a replica costs (stock rows, with and
                  without --replication off, run by run)
  --help          print this and exit
  Every other flag goes to bench_vs_lua (--seconds, --runs, --threads, --concurrency, ...).";

fn main() {
    // Everything is passed on to bench_vs_lua (--seconds, --runs, --threads, --concurrency),
    // but `--wait-cost 1`, which selects the replica-wait measurement.
    let mut pass: Vec<String> = std::env::args().skip(1).collect();
    if pass.iter().any(|a| a == "--help" || a == "-h") {
        println!("{USAGE}");
        return;
    }
    let wait = pass.iter().position(|a| a == "--wait-cost");
    let wait = wait.map(|i| pass.drain(i..(i + 2).min(pass.len())).nth(1).as_deref() == Some("1"));
    let bench = std::env::current_exe()
        .expect("own path")
        .with_file_name("bench_vs_lua");
    assert!(
        bench.exists(),
        "{} not found: cargo build --release -p cellgate-redis --example bench_vs_lua",
        bench.display()
    );
    if wait == Some(true) {
        wait_cost(&bench, &pass);
        return;
    }
    let mut results: Vec<(&str, Vec<(f64, String)>)> = Vec::new();
    {
        let s = Server::start(false);
        results.push(("1 node", keyed_cold(&bench, &s.url(), &pass)));
    }
    {
        let nodes = one_master();
        // Two seeds (the same node twice): a comma-separated list is what makes the limiter
        // use the cluster client, and so the limit's 16 shards.
        let urls = format!("{0},{0}", nodes[0].url());
        results.push(("1 master", keyed_cold(&bench, &urls, &pass)));
    }
    {
        let nodes = three_masters();
        let urls: Vec<String> = nodes.iter().map(Server::url).collect();
        results.push(("3 masters", keyed_cold(&bench, &urls.join(","), &pass)));
    }
    for (label, runs) in &results {
        for (_, line) in runs {
            println!("{label:10} {line}");
        }
    }
    let runs = results.iter().map(|(_, r)| r.len()).min().unwrap_or(0);
    println!("median run of {runs}; same-run ratios (median; per run):");
    for (label, r) in &results {
        let mut d: Vec<f64> = r.iter().map(|(d, _)| *d).collect();
        d.sort_by(f64::total_cmp);
        let ratio = |base: usize| {
            let mut each: Vec<f64> = (0..runs).map(|i| r[i].0 / results[base].1[i].0).collect();
            let list: Vec<String> = each.iter().map(|x| format!("{x:.2}")).collect();
            each.sort_by(f64::total_cmp);
            format!("{:.2}x ({})", each[runs / 2], list.join(" / "))
        };
        println!(
            "{label:10} {:>10.0} keyed cold decisions in redis/s   {} 1 node   {} 1 master",
            d[d.len() / 2],
            ratio(0),
            ratio(1)
        );
    }
}
