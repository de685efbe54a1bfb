//! Four `fleet_node` OS processes against one real `redis-server`: the fleet's bounds, end to
//! end. Each test starts its own server; they run one at a time (the machine has 2 cores).

use crate::common;

use std::sync::Mutex;
use std::time::{Duration, Instant};

use common::{node, redis, Node};

static SERIAL: Mutex<()> = Mutex::new(());

const RATE: u64 = 10_000;
const BURST: u64 = 1_000;
/// The steady-load test's burst: 200 ms of the rate, so a background thread that a loaded
/// machine schedules late does not let the fleet's bucket overflow.
const STEADY_BURST: u64 = 2_000;

fn rate_limit(name: &str, burst: u64) -> Vec<String> {
    [
        "--name",
        name,
        "--rate",
        "10000/1",
        "--burst",
        &burst.to_string(),
    ]
    .map(String::from)
    .to_vec()
}

/// The holders hash field of a process, `<tag>:<pid hex>-...`.
fn holder_field<'a>(
    holders: &'a std::collections::HashMap<String, String>,
    tag: &str,
    pid: u32,
) -> Option<&'a String> {
    let prefix = format!("{tag}:{pid:x}-");
    holders
        .iter()
        .find(|(k, _)| k.starts_with(&prefix))
        .map(|(_, v)| v)
}

#[test]
fn stock_is_exact_through_a_kill_9_mid_sale() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let Some(r) = redis() else { return };
    let stock: u64 = 300_000;
    let stock_arg = stock.to_string();
    let args = ["--name", "sale", "--stock", &stock_arg];
    // Eight seconds to sell 300,000 units: on a quiet machine three survivors sell out in well
    // under one, but on a loaded two-core runner three seconds were sometimes a few thousand
    // short (the assertion that they sold out is about the protocol, not the machine's speed).
    let mut nodes: Vec<Node> = (0..4).map(|_| node(&r.url(), &args, "8", 1)).collect();
    let deadline = Instant::now() + Duration::from_secs(20);
    while nodes[0].last == 0 {
        assert!(
            nodes[0].poll(Duration::from_millis(20)),
            "node 0 ended early"
        );
        assert!(Instant::now() < deadline, "node 0 never sold anything");
    }
    let mut victim = nodes.remove(0);
    let victim_pid = victim.child.id();
    victim.child.kill().unwrap(); // SIGKILL: no chance to give anything back
    victim.child.wait().unwrap();
    while victim.poll(Duration::from_millis(10)) {}
    let printed = victim.last;
    let pids: Vec<u32> = nodes.iter().map(|n| n.child.id()).collect();
    let sold: Vec<u64> = nodes
        .into_iter()
        .map(|n| n.finish(Duration::from_secs(30)))
        .collect();

    let state = r.hgetall("cellgate:{sale}:state");
    let holders = r.hgetall("cellgate:{sale}:holders");
    let num = |s: Option<&String>| s.map_or(0, |v| v.parse::<u64>().unwrap());
    let remaining = num(state.get("rem"));
    // What the victim still held is counted lost once the server reconciles it.
    let victim_held = num(holder_field(&holders, "n", victim_pid)) + num(state.get("lost"));
    for (pid, sold) in pids.iter().zip(&sold) {
        assert_eq!(
            num(holder_field(&holders, "n", *pid)),
            *sold,
            "a survivor's net lease is exactly what it sold (it gave the rest back)"
        );
    }
    let survivors: u64 = sold.iter().sum();
    assert_eq!(
        survivors + victim_held + remaining,
        stock,
        "every unit is accounted for"
    );
    assert!(
        printed <= victim_held,
        "the victim sold {printed} of {victim_held} leased"
    );
    assert_eq!(remaining, 0, "the survivors sold out");
    // The undersell of a crash is bounded by the stock lease cap (default stock / 1000): what
    // is left of one lease plus the next one asked for, 1.5 × cap. The victim's printed total
    // lags its true sales by the moments between its last print and the kill, so this only
    // checks the loss is of that order (10 × cap, 1% of the stock; before the cap a run lost
    // 42k of 300k); `a_crash_loses_at_most_one_and_a_half_leases` checks the exact bound.
    let cap = stock / 1000;
    assert!(
        victim_held - printed <= 10 * cap,
        "the killed holder held {victim_held} units and printed {printed} sold"
    );
    eprintln!(
        "stock {stock}: survivors sold {survivors}, victim printed {printed} of {victim_held} it held (lost at most {})",
        victim_held - printed
    );
}

#[test]
fn rate_bound_holds_under_uneven_load() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let Some(r) = redis() else { return };
    let args = rate_limit("uneven", BURST);
    let start = Instant::now();
    let mut nodes = Vec::new();
    for (threads, seconds) in [(1, "1"), (2, "2.5"), (1, "2"), (1, "3")] {
        nodes.push(node(&r.url(), &args, seconds, threads));
        std::thread::sleep(Duration::from_millis(150));
    }
    let total: u64 = nodes
        .into_iter()
        .map(|n| n.finish(Duration::from_secs(30)))
        .sum();
    let elapsed = start.elapsed().as_secs_f64();
    let bound = RATE as f64 * elapsed + BURST as f64;
    eprintln!("uneven: admitted {total} in {elapsed:.3} s, bound {bound:.0}");
    assert!(
        total as f64 <= bound,
        "admitted {total} > R·T + B = {bound:.0}"
    );
    assert!(
        total as f64 >= 0.5 * RATE as f64 * 3.0,
        "the limit was barely used: {total}"
    );
}

#[test]
fn steady_load_uses_the_rate_with_one_command_per_hundred_units() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let Some(r) = redis() else { return };
    let args = rate_limit("steady", STEADY_BURST);
    let seconds = 3.0;
    let start = Instant::now();
    let nodes: Vec<Node> = (0..4).map(|_| node(&r.url(), &args, "3", 1)).collect();
    let total: u64 = nodes
        .into_iter()
        .map(|n| n.finish(Duration::from_secs(30)))
        .sum();
    let elapsed = start.elapsed().as_secs_f64();
    let calls = r.script_calls();
    eprintln!("steady: admitted {total} in {elapsed:.3} s with {calls} script calls");
    let bound = RATE as f64 * elapsed + STEADY_BURST as f64;
    assert!(
        total as f64 <= bound,
        "admitted {total} > R·T + B = {bound:.0}"
    );
    assert!(
        total as f64 >= 0.97 * RATE as f64 * seconds,
        "admitted {total} < 97% of R·T = {}",
        0.97 * RATE as f64 * seconds
    );
    assert!(
        calls * 100 <= total,
        "{calls} Redis calls for {total} units"
    );
}

#[test]
fn redis_restart_mid_run_causes_no_overshoot() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let Some(mut r) = redis() else { return };
    let args = rate_limit("restart", BURST);
    let start = Instant::now();
    let mut nodes: Vec<Node> = (0..4).map(|_| node(&r.url(), &args, "4", 1)).collect();
    let run_until = |nodes: &mut Vec<Node>, t: Duration| {
        while start.elapsed() < t {
            for n in nodes.iter_mut() {
                n.poll(Duration::from_millis(5));
            }
        }
        nodes.iter().map(|n| n.last).sum::<u64>()
    };
    let before = run_until(&mut nodes, Duration::from_millis(1200));
    r.stop();
    let during = run_until(&mut nodes, Duration::from_millis(2200));
    r.start();
    let mut total = 0;
    for n in nodes {
        let (admitted, counters) = n.finish_with_counters(Duration::from_secs(30));
        total += admitted;
        let charged: u64 = counters
            .get("charged_back")
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        assert!(
            charged > 0,
            "a node admitted in fallback but charged nothing back: {counters:?}"
        );
    }
    let elapsed = start.elapsed().as_secs_f64();
    let bound = RATE as f64 * elapsed + BURST as f64;
    eprintln!("restart: {before} before the outage, {during} at its end, {total} in {elapsed:.3} s, bound {bound:.0}");
    assert!(
        during > before,
        "nothing admitted during the outage (no fallback)"
    );
    assert!(
        total as f64 <= bound,
        "admitted {total} > R·T + B = {bound:.0}"
    );
    assert!(total > during, "nothing admitted after Redis came back");
}

/// Four processes that want far more than the fleet's rate, at two rates (10,000/s and
/// 50,000/s, default burst) and two levels of demand (one and three checking threads each),
/// for 4 s each: in the steady part of the run (from 1 s to 3.5 s) Redis executes at most one
/// command per 100 admitted units (every command counted, the ones the script runs inside
/// Redis too); over the whole run ≥ 95% of `R·T` is used, and each process sends at most 20
/// script calls a second, whatever its demand and the rate. Counts only: `INFO commandstats`
/// on the real server, the nodes' printed running totals, and each node's own command
/// counter. (Before the short fleet's requests were spaced 100 ms apart and the replies moved
/// into the state hash: 0.055 commands per unit at 10,000/s, about 80 script calls a node.)
#[test]
fn saturated_demand_sends_at_most_one_command_per_hundred_units() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let Some(r) = redis() else { return };
    let seconds = 4.0;
    for (rate, threads) in [(10_000_u64, 1), (10_000, 3), (50_000, 1)] {
        let name = format!("storm{rate}-{threads}");
        let rate_arg = format!("{rate}/1");
        let args = ["--name", &name, "--rate", &rate_arg];
        let start = Instant::now();
        let mut nodes: Vec<Node> = (0..4)
            .map(|_| node(&r.url(), &args, "4", threads))
            .collect();
        // The running totals and Redis's command count at a moment of the run.
        let snapshot = |nodes: &mut [Node], at: Duration| {
            while start.elapsed() < at {
                for n in nodes.iter_mut() {
                    n.poll(Duration::from_millis(2));
                }
            }
            (nodes.iter().map(|n| n.last).sum::<u64>(), r.all_commands())
        };
        let (units_a, all_a) = snapshot(&mut nodes, Duration::from_millis(1000));
        let (units_b, all_b) = snapshot(&mut nodes, Duration::from_millis(3500));
        let (steady_units, steady_all) = (units_b - units_a, all_b - all_a);
        let mut total = 0;
        let mut per_node = Vec::new();
        for n in nodes {
            let (admitted, counters) = n.finish_with_counters(Duration::from_secs(30));
            total += admitted;
            let commands: u64 = counters["commands"].parse().unwrap();
            per_node.push(commands);
        }
        eprintln!(
            "{rate}/s, {threads} thread(s) per node: admitted {total}; steady part: {steady_units} units, {steady_all} commands in all ({:.4} per unit); script calls per node {per_node:?}",
            steady_all as f64 / steady_units.max(1) as f64
        );
        // Every command, the script's inner ones included (what Redis works through): about
        // five per call (EVALSHA, TIME, one read of the state with the reply, one of the
        // holders, one write of the state), a call per 100 ms of the fleet's accrual.
        assert!(
            steady_all * 100 <= steady_units,
            "{steady_all} Redis commands for {steady_units} units in the steady part, {rate}/s, {threads} thread(s) per node"
        );
        assert!(
            total as f64 >= 0.95 * rate as f64 * seconds,
            "admitted {total} < 95% of R·T at {rate}/s"
        );
        // The short fleet's requests are spaced 100 ms of the rate apart fleet-wide: about 10
        // a second here, whoever asks and whatever the rate; with full grants, give-backs and
        // heartbeats each process stays far below 20 a second.
        for c in &per_node {
            assert!(
                (*c as f64) <= 20.0 * seconds,
                "a node sent {c} commands in {seconds} s at {rate}/s"
            );
        }
    }
}
