//! The `seckill_server` example binary, driven through its command-line interface over real
//! HTTP on 127.0.0.1.

mod common;

use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use common::{get, send};
use http::{Method, StatusCode};

/// Kills the server when the test ends, however it ends.
struct Server(Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Builds the example (a no-op when `cargo test --workspace --all-features` already did) and
/// returns its path.
fn example_binary() -> PathBuf {
    let release = !cfg!(debug_assertions);
    let mut cmd = Command::new(env!("CARGO"));
    // The whole workspace with every feature: the feature set the README's test command builds
    // the example with, so that this nested build finds its artifacts there instead of
    // rebuilding the example's dependencies with another feature set.
    cmd.args([
        "build",
        "--quiet",
        "--workspace",
        "--all-features",
        "--example",
        "seckill_server",
        "--manifest-path",
    ])
    .arg(concat!(env!("CARGO_MANIFEST_DIR"), "/Cargo.toml"));
    if release {
        cmd.arg("--release");
    }
    assert!(
        cmd.status().expect("cargo runs").success(),
        "the example builds"
    );
    // This test runs from <target>/<profile>/deps/; examples live in <target>/<profile>/examples/.
    let exe = std::env::current_exe().unwrap();
    let profile_dir = exe.parent().and_then(|p| p.parent()).unwrap();
    profile_dir
        .join("examples")
        .join(format!("seckill_server{}", std::env::consts::EXE_SUFFIX))
}

/// Starts the server with `args` and waits (at most 60 s) for its `listening on` line.
fn start(args: &[&str]) -> (Server, SocketAddr) {
    let mut child = Command::new(example_binary())
        .args(args)
        .stdout(Stdio::piped())
        .spawn()
        .expect("the example starts");
    let stdout = child.stdout.take().unwrap();
    let server = Server(child);
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { return };
            if let Some(addr) = line.split("listening on ").nth(1) {
                let _ = tx.send(addr.trim().to_owned());
            }
        }
    });
    let addr = rx
        .recv_timeout(Duration::from_secs(60))
        .expect("the server says where it listens");
    (
        server,
        addr.parse().expect("an address after `listening on`"),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_seckill_sells_exactly_its_stock_to_distinct_users() {
    // Every buyer comes from 127.0.0.1: a per-IP rate that lets them all through.
    let (_server, addr) = start(&[
        "--addr",
        "127.0.0.1:0",
        "--stock",
        "50",
        "--per-user",
        "1",
        "--ip-rate",
        "100000",
    ]);
    assert_eq!(addr.ip().to_string(), "127.0.0.1");
    // 300 buyers, each trying twice, all at once.
    let mut tasks = tokio::task::JoinSet::new();
    for attempt in 0..2 {
        for user in 0..300 {
            tasks.spawn(async move {
                let id = format!("user-{user}");
                let r = send(addr, Method::POST, "/seckill/sku-1", &[("x-user-id", &id)]).await;
                (user, attempt, r)
            });
        }
    }
    let mut sold_to: HashMap<u32, u32> = HashMap::new();
    let mut denied = 0;
    while let Some(done) = tasks.join_next().await {
        let (user, _, r) = done.unwrap();
        assert!(r.header("ratelimit-policy").is_some());
        assert!(r.header("ratelimit").is_some());
        match r.status {
            StatusCode::OK => *sold_to.entry(user).or_default() += 1,
            StatusCode::TOO_MANY_REQUESTS => {
                denied += 1;
                // Neither a sold-out stock nor a used-up buyer gets better by waiting.
                assert_eq!(r.header("retry-after"), None);
                assert_eq!(r.header("cache-control"), Some("no-store"));
            }
            s => panic!("unexpected status {s}: {}", r.body),
        }
    }
    assert_eq!(
        sold_to.values().sum::<u32>(),
        50,
        "exactly the stock is sold"
    );
    assert!(
        sold_to.values().all(|&n| n == 1),
        "at most one unit per buyer"
    );
    assert_eq!(denied, 550);

    // Sold out for everyone now, new buyers included.
    let r = send(
        addr,
        Method::POST,
        "/seckill/sku-1",
        &[("x-user-id", "late")],
    )
    .await;
    assert_eq!(r.status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(
        r.header("ratelimit"),
        Some("\"per-user\";r=1, \"stock\";r=0")
    );
    // No buyer id once sold out: the stock's answer (the limits the request has keys for
    // still apply to it).
    let r = send(addr, Method::POST, "/seckill/sku-1", &[]).await;
    assert_eq!(r.status, StatusCode::TOO_MANY_REQUESTS);
    assert!(r.body.contains("\"stock\""), "{}", r.body);
}

/// One client buying under made-up ids: the per-IP limit on the buy path holds it to its burst
/// plus the rate over the time it took, far from the whole stock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_client_with_made_up_ids_buys_at_most_its_per_ip_rate() {
    let (_server, addr) = start(&[
        "--addr",
        "127.0.0.1:0",
        "--stock",
        "100",
        "--per-user",
        "1",
        "--ip-rate",
        "1",
    ]);
    let started = std::time::Instant::now();
    let mut sold = 0u64;
    for user in 0..100 {
        let id = format!("made-up-{user}");
        let r = send(addr, Method::POST, "/seckill/sku-1", &[("x-user-id", &id)]).await;
        match r.status {
            StatusCode::OK => sold += 1,
            StatusCode::TOO_MANY_REQUESTS => {
                assert!(r.body.contains("per-ip"), "{}", r.body);
            }
            s => panic!("unexpected status {s}: {}", r.body),
        }
    }
    // Burst 1 at 1/s: at most one sale, plus one per whole second the loop took.
    let bound = 1 + started.elapsed().as_secs() + 1;
    assert!(
        sold <= bound,
        "one client bought {sold} units in {:?}",
        started.elapsed()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ping_answers_pong_under_the_per_ip_rate() {
    let (_server, addr) = start(&[
        "--addr",
        "127.0.0.1:0",
        "--stock",
        "1",
        "--per-user",
        "1",
        "--ip-rate",
        "2",
    ]);
    // No buyer id while in stock: a 400 that says why, and the stock keeps its unit (the
    // one buyer below gets it).
    let r = send(addr, Method::POST, "/seckill/sku-1", &[]).await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
    assert_eq!(r.body, "missing header x-user-id\n");
    let r = send(addr, Method::POST, "/seckill/sku-1", &[("x-user-id", "u1")]).await;
    assert_eq!(r.status, StatusCode::OK, "{r:?}");
    // The per-IP burst of 2 is spent (the 400 counted): wait for it to refill.
    tokio::time::sleep(std::time::Duration::from_millis(1100)).await;
    let first = get(addr, "/ping", &[]).await;
    assert_eq!(
        (first.status, first.body.as_str()),
        (StatusCode::OK, "pong")
    );
    assert_eq!(first.header("ratelimit-policy"), Some("\"per-ip\";q=2;w=1"));
    // Burst 2 at 2/s: of 20 requests sent at once, most must be turned away.
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..20 {
        tasks.spawn(async move { get(addr, "/ping", &[]).await });
    }
    let mut limited = 0;
    while let Some(r) = tasks.join_next().await {
        let r = r.unwrap();
        assert!(r.header("ratelimit").is_some());
        if r.status == StatusCode::TOO_MANY_REQUESTS {
            limited += 1;
            assert_eq!(r.header("retry-after"), Some("1"));
        } else {
            assert_eq!((r.status, r.body.as_str()), (StatusCode::OK, "pong"));
        }
    }
    assert!(limited >= 1, "the per-IP limit turned some away");
}

#[test]
fn bad_flags_are_refused_with_the_usage() {
    let out = Command::new(example_binary())
        .args(["--stock", "many"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("--stock: \"many\" is not a whole number"),
        "{err}"
    );
    assert!(err.contains("usage: seckill_server"), "{err}");
    let out = Command::new(example_binary())
        .args(["--addr", "127.0.0.1:0", "--ip-rate", "0"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("invalid configuration"));
}
