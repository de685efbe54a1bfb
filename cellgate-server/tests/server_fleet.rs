//! Fleet mode (`--redis`): two `cellgate-server` processes on one real `redis-server` share a
//! rate limit and a stock; Redis killed and restarted mid-run; one server killed with
//! `kill -9`; a `--redis` where nothing listens; a reload; `CL.THROTTLE` keys shared through
//! redis-cli. Requests go through curl (one curl process
//! per batch, on one kept-alive connection); bounded in requests, no timing assertions.

use crate::common;
use crate::resp_common;

use std::net::TcpListener;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::redis_server::{free_port, Redis};
use common::{curl, has, metric, need, post_json, send, Server};

/// A per-key rate (a fixed window: in fleet mode a GCRA of 20 a minute, burst 20) and a
/// per-key stock of 30.
const FLEET: &str = r#"domain: fleet
descriptors:
  - key: rate
    rate_limit: {unit: minute, requests_per_unit: 20}
  - key: item
    rate_limit: {algorithm: stock, requests_per_unit: 30}
"#;

const RATE: &str = r#"{"domain":"fleet","descriptors":[{"entries":[{"key":"rate","value":"k"}]}]}"#;
const ITEM: &str =
    r#"{"domain":"fleet","descriptors":[{"entries":[{"key":"item","value":"sku"}]}]}"#;
const STOCK: u64 = 30;

/// A server in fleet mode on `redis`.
fn server(redis: &str, extra: &[&str]) -> Server {
    let mut args = vec!["--redis", redis];
    args.extend_from_slice(extra);
    Server::start(FLEET, &args, &[])
}

/// Sells `sku` on both servers, in rounds, until the fleet has sold `want` in all (or a
/// bounded number of rounds passed); returns what each sold.
fn sell_until(servers: &[&Server], sold: &mut [u64], want: u64, rounds: usize) {
    sell_key_until(servers, ITEM, sold, want, rounds);
}

/// As [`sell_until`], with the request `body`.
fn sell_key_until(servers: &[&Server], body: &str, sold: &mut [u64], want: u64, rounds: usize) {
    for _ in 0..rounds {
        for (s, n) in servers.iter().zip(sold.iter_mut()) {
            *n += send(s, body, 8).0;
        }
        if sold.iter().sum::<u64>() >= want {
            return;
        }
        std::thread::sleep(Duration::from_millis(150));
    }
}

/// Polls `/healthcheck` (bounded) until its body satisfies `done`; returns the last reply.
fn health_until(s: &Server, done: impl Fn(&str) -> bool) -> common::Reply {
    let mut last = curl(&[&s.url("/healthcheck")]);
    for _ in 0..200 {
        if done(&last.body) {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
        last = curl(&[&s.url("/healthcheck")]);
    }
    last
}

#[test]
fn two_servers_share_one_rate_and_one_stock() {
    let Some(redis) = Redis::start() else { return };
    let a = server(&redis.url(), &[]);
    let b = server(&redis.url(), &[]);
    let started = Instant::now();
    // The rate: 20 a minute, burst 20. Each server alone would admit 20 of its 60 requests;
    // shared, both together admit the burst and what accrues meanwhile.
    let mut admitted = 0;
    for _ in 0..6 {
        admitted += send(&a, RATE, 10).0;
        admitted += send(&b, RATE, 10).0;
    }
    let secs = started.elapsed().as_secs();
    // R·(T + L) + B, with the lease lifetime L = 1 s, R = 1/3 per second.
    let bound = 20 + (secs + 1).div_ceil(3) + 1;
    eprintln!("admitted {admitted} across two servers, fleet bound {bound}");
    assert!(
        admitted <= bound,
        "{admitted} admitted > fleet bound {bound}"
    );
    assert!(
        admitted >= 10,
        "{admitted} admitted: the fleet should admit most of its burst"
    );
    // The stock: demand (both servers, in rounds) exceeds it; sold exactly once each.
    let mut sold = [0, 0];
    sell_until(&[&a, &b], &mut sold, STOCK, 40);
    assert_eq!(sold.iter().sum::<u64>(), STOCK, "sold {sold:?}");
    assert!(sold[0] > 0 && sold[1] > 0, "both servers sold: {sold:?}");
    // Sold out everywhere now.
    assert_eq!(send(&a, ITEM, 4).0 + send(&b, ITEM, 4).0, 0);
    assert_eq!(curl(&[&a.url("/healthcheck")]).body.trim(), "OK");
    assert_eq!(metric(&a, "cellgate_fleet_limits{state=\"connected\"}"), 2);
}

#[test]
fn a_redis_outage_keeps_answers_coming_and_never_oversells() {
    let Some(mut redis) = Redis::start() else {
        return;
    };
    let a = server(&redis.url(), &[]);
    let b = server(&redis.url(), &["--redis-health-strict", "true"]);
    let mut sold = [0, 0];
    sell_until(&[&a, &b], &mut sold, 10, 20);
    redis.kill();
    // Every request is answered (200 or 429) while Redis is down.
    let mut during = 0;
    for _ in 0..5 {
        for s in [&a, &b] {
            let (ok, over) = send(s, RATE, 5);
            assert_eq!(ok + over, 5);
            let (ok, _) = send(s, ITEM, 5);
            during += ok;
        }
    }
    let ha = health_until(&a, |b| b.contains("redis"));
    assert_eq!(ha.status, 200, "{}", ha.body);
    assert!(ha.body.starts_with("OK (redis "), "{}", ha.body);
    let hb = health_until(&b, |b| b.contains("redis"));
    assert_eq!(hb.status, 503, "strict health: {}", hb.body);
    // grpc.health.v1 follows: NOT_SERVING on the strict server, SERVING on the other.
    let grpc_health = |s: &Server| common::grpc_health(s.grpc.as_deref().expect("grpc"), "");
    common::eventually("gRPC health NOT_SERVING", || grpc_health(&b) == Ok(2));
    assert_eq!(grpc_health(&a), Ok(1));
    assert!(metric(&a, "cellgate_fleet_limits{state=\"connected\"}") < 2);
    assert!(metric(&a, "cellgate_fleet_backend_errors") > 0);
    redis.run();
    let back = health_until(&a, |b| b.trim() == "OK");
    assert_eq!(back.body.trim(), "OK", "connected again");
    common::eventually("gRPC health SERVING again", || grpc_health(&b) == Ok(1));
    let mut after = [0, 0];
    sell_until(&[&a, &b], &mut after, STOCK, 30);
    let total = sold.iter().sum::<u64>() + during + after.iter().sum::<u64>();
    assert!(total <= STOCK, "oversold: {total} > {STOCK}");
    assert!(
        after.iter().sum::<u64>() > 0,
        "selling resumed after the outage"
    );
}

#[test]
fn a_killed_server_leaves_the_others_selling() {
    let Some(redis) = Redis::start() else { return };
    let mut a = server(&redis.url(), &[]);
    let mut b = server(&redis.url(), &[]);
    let c = server(&redis.url(), &[]);
    let mut sold = [0, 0, 0];
    sell_until(&[&a, &b, &c], &mut sold, 12, 20);
    // kill -9: whatever `a` held leased is lost (undersold, never oversold).
    let pid = a.child.id().to_string();
    let killed = Command::new("kill").args(["-KILL", &pid]).status();
    assert!(killed.is_ok_and(|s| s.success()));
    let _ = a.child.wait();
    // SIGTERM: `b` hands its leases back before it exits.
    assert!(b.terminate().success());
    let before = sold[2];
    let mut rest = [0];
    sell_until(&[&c], &mut rest, STOCK, 30);
    let total = sold.iter().sum::<u64>() + rest[0];
    assert!(total <= STOCK, "oversold: {total} > {STOCK}");
    assert!(
        rest[0] > 0,
        "the survivor kept selling (it had sold {before})"
    );
}

#[test]
fn a_redis_where_nothing_listens_still_starts_and_answers() {
    if !need(has("curl"), "curl") {
        return;
    }
    let url = format!("redis://127.0.0.1:{}", free_port());
    let s = server(&url, &[]);
    // The rate falls back to this server's share; the stock never sells without Redis.
    let (ok, over) = send(&s, RATE, 5);
    assert_eq!(ok + over, 5);
    assert!(ok >= 1, "the outage share admits");
    assert_eq!(send(&s, ITEM, 3).0, 0, "a stock fails closed");
    let h = health_until(&s, |b| b.contains("redis"));
    assert_eq!(h.status, 200);
    assert!(h.body.contains("limits not connected"), "{}", h.body);
}

#[test]
fn many_fleet_limits_share_a_few_threads() {
    if !std::path::Path::new("/proc/self/task").exists() {
        return resp_common::skip("no /proc to count threads in");
    }
    // 24 fleet limits (one per descriptor key), against a Redis where nothing listens: each
    // runs its batching task, retrying, from the start.
    let mut config = String::from("domain: many\ndescriptors:\n");
    for i in 0..24 {
        config +=
            &format!("  - key: k{i}\n    rate_limit: {{unit: minute, requests_per_unit: 100}}\n");
    }
    let url = format!("redis://127.0.0.1:{}", free_port());
    let s = Server::start(&config, &["--redis", &url], &[]);
    let fleet = |state: &str| metric(&s, &format!("cellgate_fleet_limits{{state=\"{state}\"}}"));
    assert_eq!(
        fleet("connected") + fleet("fallback") + fleet("partitioned"),
        24
    );
    // The tasks share the fleet limiters' runtimes (at most four threads) with the server's own
    // few: a thread per limit would make this more than 24.
    let threads = threads(s.pid());
    eprintln!("{threads} threads for 24 fleet limits");
    assert!(threads < 16, "{threads} threads for 24 fleet limits");
}

#[test]
fn a_server_stopped_with_sigterm_hands_its_leases_back() {
    let Some(redis) = Redis::start() else { return };
    // A stock of 400 per key: leases of 4 (a key is leased once a server sees it often).
    let config = format!(
        "{FLEET}  - key: bulk\n    rate_limit: {{algorithm: stock, requests_per_unit: 400}}\n"
    );
    let bulk = ITEM.replace("item", "bulk");
    let a = Server::start(&config, &["--redis", &redis.url()], &[]);
    let mut b = Server::start(&config, &["--redis", &redis.url()], &[]);
    let mut sold = [0, 0];
    for _ in 0..3 {
        sold[0] += send(&a, &bulk, 60).0;
        sold[1] += send(&b, &bulk, 60).0;
    }
    // (With `kill -9` instead, the lease `b` held is lost and the assertion below fails.)
    assert!(b.terminate().success());
    // What `b` held leased went back to Redis: `a` sells the rest, to the unit.
    let mut rest = 0;
    for _ in 0..20 {
        rest += send(&a, &bulk, 60).0;
        if sold.iter().sum::<u64>() + rest >= 400 {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(
        sold.iter().sum::<u64>() + rest,
        400,
        "sold {sold:?} then {rest}"
    );
}

/// Rewrites the server's config and waits (bounded) until it reports one more load.
fn reload(s: &Server, config: &str) {
    let before = metric(s, "ratelimit_service_config_load_success");
    std::fs::write(s.config_file(), config).expect("write config");
    for _ in 0..200 {
        if metric(s, "ratelimit_service_config_load_success") > before {
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    panic!("the server did not reload its config");
}

#[test]
fn a_reload_keeps_an_unchanged_limits_state_and_a_changed_limit_starts_afresh() {
    let Some(redis) = Redis::start() else { return };
    let s = server(&redis.url(), &[]);
    let mut sold = [0];
    sell_until(&[&s], &mut sold, 10, 10);
    // Another limit added; the stock's definition is unchanged: its count goes on.
    let grown =
        format!("{FLEET}  - key: other\n    rate_limit: {{unit: hour, requests_per_unit: 1}}\n");
    reload(&s, &grown);
    sell_until(&[&s], &mut sold, STOCK + 1, 8);
    assert_eq!(sold[0], STOCK, "the kept stock sold exactly once");
    // The stock changed (40 per key): a new name in Redis, a fresh stock.
    reload(
        &s,
        &FLEET.replace("requests_per_unit: 30", "requests_per_unit: 40"),
    );
    let mut fresh = [0];
    sell_until(&[&s], &mut fresh, 40, 20);
    assert_eq!(fresh[0], 40, "a changed limit starts afresh");
    assert_eq!(send(&s, ITEM, 4).0, 0);
}

/// Sends `commands` (one a line) to the RESP listener at `port` through one redis-cli;
/// returns its output lines.
fn cli_lines(cli: &std::path::Path, port: &str, commands: &str) -> Vec<String> {
    use std::io::Write;
    let mut child = Command::new(cli)
        .args(["-h", "127.0.0.1", "-p", port])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("run redis-cli");
    let mut stdin = child.stdin.take().expect("stdin");
    stdin.write_all(commands.as_bytes()).expect("write");
    drop(stdin);
    let out = child.wait_with_output().expect("redis-cli output");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_owned)
        .collect()
}

/// Calls `CL.THROTTLE key 9 10 60` (limit 10, one more every 6 s) `n` times; returns how many
/// were admitted (the first of each reply's five integers is 0).
fn throttled(cli: &std::path::Path, port: &str, n: usize) -> u64 {
    let lines = cli_lines(cli, port, &"CL.THROTTLE shared 9 10 60\n".repeat(n));
    assert_eq!(lines.len(), 5 * n, "five integers a reply: {lines:?}");
    lines.chunks(5).filter(|r| r[0] == "0").count() as u64
}

#[test]
fn cl_throttle_keys_are_shared_by_the_fleet() {
    let Some(redis) = Redis::start() else { return };
    let Some(cli) = resp_common::tool("redis-cli") else {
        return;
    };
    let url = redis.url();
    let a = resp_common::Server::start(&["--redis", &url, "--resp-max-fleet-limits", "1"]);
    let b = resp_common::Server::start(&["--redis", &url]);
    let started = Instant::now();
    let mut admitted = 0;
    // Rounds on both servers, so that a lease one holds is used or handed back meanwhile.
    for _ in 0..12 {
        admitted += throttled(&cli, &a.port(), 5);
        admitted += throttled(&cli, &b.port(), 5);
        std::thread::sleep(Duration::from_millis(150));
    }
    // Limit 10 plus one per 6 s over the run and a lease lifetime (1 s); alone, each server
    // would admit 10 of its 60.
    let bound = 10 + (started.elapsed().as_secs() + 1).div_ceil(6) + 1;
    eprintln!("admitted {admitted} across two servers, fleet bound {bound}");
    assert!(
        admitted <= bound,
        "{admitted} admitted > fleet bound {bound}"
    );
    assert!(admitted >= 5, "{admitted} admitted");
    // One parameter set is all `a` may share: another gets an error reply.
    let other = cli_lines(&cli, &a.port(), "CL.THROTTLE other 1 1 1\n").join(" ");
    assert!(other.contains("distinct parameter sets"), "{other}");
}

/// Sends one `CL.THROTTLE` call on a new connection.
fn throttle_call(port: &str, key: &str) -> std::net::TcpStream {
    let mut c = std::net::TcpStream::connect(format!("127.0.0.1:{port}")).expect("connect");
    let cmd = format!(
        "*5\r\n$11\r\nCL.THROTTLE\r\n${}\r\n{key}\r\n$1\r\n9\r\n$2\r\n10\r\n$2\r\n60\r\n",
        key.len()
    );
    std::io::Write::write_all(&mut c, cmd.as_bytes()).expect("send");
    c
}

/// Reads a call's reply: five integers, or an error line.
fn throttle_reply(c: &mut std::net::TcpStream) -> String {
    c.set_read_timeout(Some(Duration::from_secs(20)))
        .expect("timeout");
    let mut got = Vec::new();
    let mut byte = [0u8; 1];
    loop {
        let text = String::from_utf8_lossy(&got).into_owned();
        if text.starts_with('-') && text.ends_with("\r\n") || text.matches("\r\n").count() == 6 {
            return text;
        }
        let n = std::io::Read::read(c, &mut byte).expect("a reply within 20 s");
        assert_eq!(n, 1, "the server closed the connection after {text:?}");
        got.push(byte[0]);
    }
}

/// Threads of process `pid`.
fn threads(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/task")).map_or(0, Iterator::count)
}

#[test]
fn cl_throttle_calls_waiting_on_redis_hold_no_thread_each() {
    if !std::path::Path::new("/proc/self/task").exists() {
        return resp_common::skip("no /proc to count threads in");
    }
    let Some(redis) = Redis::start() else { return };
    let url = redis.url();
    let s = resp_common::Server::start(&["--redis", &url, "--redis-max-wait-ms", "3000"]);
    // The parameter set's fleet limit starts with a first call; once Redis answers it, a call
    // on a new key is checked there before its reply (its state is in Redis when it comes).
    let mut c = redis::Client::open(url.as_str())
        .and_then(|c| c.get_connection())
        .expect("a connection to redis-server");
    let checked_in_redis = (0..100).any(|i| {
        let key = format!("probe{i}");
        let r = throttle_reply(&mut throttle_call(&s.port(), &key));
        assert!(r.starts_with("*5"), "{r}");
        let state = format!("cellgate:{{cgs-throttle:10:6000000000ns}}:k:s:{key}");
        let held: bool = redis::cmd("EXISTS")
            .arg(&state)
            .query(&mut c)
            .expect("EXISTS");
        held || {
            std::thread::sleep(Duration::from_millis(100));
            false
        }
    });
    assert!(checked_in_redis, "no call was checked in Redis");
    let base = threads(s.pid());
    // Redis stops answering: calls on keys this server holds no lease for wait for it (at most
    // the bound), all at once.
    redis.signal("STOP");
    let calls: Vec<_> = (0..24)
        .map(|i| throttle_call(&s.port(), &format!("cold{i}")))
        .collect();
    for mut c in calls {
        let r = throttle_reply(&mut c);
        assert!(r.starts_with("*5"), "every waiting call is answered: {r}");
    }
    let grown = threads(s.pid()).saturating_sub(base);
    eprintln!("threads: {base} before, {grown} more after 24 calls waited");
    redis.signal("CONT");
    // A call that blocked a thread while it waited would have left one thread per call.
    assert!(
        grown < 12,
        "{grown} threads more for 24 calls waiting on Redis"
    );
}

/// A shadow-mode rate: counted, never enforced.
const SHADOW: &str = r#"domain: fleet
descriptors:
  - key: watch
    shadow_mode: true
    rate_limit: {unit: minute, requests_per_unit: 2}
"#;

#[test]
fn shadow_charges_waiting_on_redis_hold_no_thread_each() {
    if !std::path::Path::new("/proc/self/task").exists() {
        return resp_common::skip("no /proc to count threads in");
    }
    let Some(redis) = Redis::start() else { return };
    let s = Server::start(
        SHADOW,
        // Keys stay cold: each charge is decided by Redis.
        &[
            "--redis",
            &redis.url(),
            "--redis-max-wait-ms",
            "3000",
            "--redis-hot-rate",
            "1000000",
        ],
        &[],
    );
    let body = |v: &str| {
        format!(
            r#"{{"domain":"fleet","descriptors":[{{"entries":[{{"key":"watch","value":"{v}"}}]}}]}}"#
        )
    };
    // Once a charge was checked in Redis, the limit is connected: a new key's charge waits
    // for Redis (a limit not connected would decide it at once by the outage rules).
    common::eventually("a shadow charge checked in Redis", || {
        send(&s, &body("probe"), 1);
        curl(&[&s.url("/healthcheck")]).body.trim() == "OK"
            && metric(&s, "cellgate_fleet_requests_waited") > 0
    });
    // A shadow descriptor's charge awaited, then made: 2 of 4 fit, all are admitted, the 2
    // others are counted over the limit.
    let over = r#"ratelimit_service_rate_limit_shadow_mode{domain="fleet",key1="watch"}"#;
    let before = metric(&s, over);
    assert_eq!(send(&s, &body("over"), 4), (4, 0));
    assert_eq!(
        metric(&s, over) - before,
        2,
        "shadow charges over the limit"
    );
    let base = threads(s.pid());
    let waited = metric(&s, "cellgate_fleet_requests_waited");
    // Redis stops answering: 24 requests on new keys, at once, each charging its shadow
    // descriptor after the (empty) rest of the request is decided, wait for it.
    redis.signal("STOP");
    let url = s.url("/json");
    let requests: Vec<_> = (0..24)
        .map(|i| {
            let (url, body) = (url.clone(), body(&format!("cold{i}")));
            std::thread::spawn(move || common::send_to(&url, &body, 1))
        })
        .collect();
    for r in requests {
        assert_eq!(
            r.join().expect("a request thread"),
            (1, 0),
            "a shadow request is admitted"
        );
    }
    let grown = threads(s.pid()).saturating_sub(base);
    let waits = metric(&s, "cellgate_fleet_requests_waited") - waited;
    eprintln!("threads: {base} before, {grown} more after 24 shadow charges waited ({waits})");
    redis.signal("CONT");
    assert_eq!(waits, 24, "every request waited for Redis");
    // A charge that blocked a thread while it waited would have left one thread per request.
    assert!(
        grown < 12,
        "{grown} threads more for 24 shadow charges waiting on Redis"
    );
}

/// Five rate limits, one per descriptor key: a request naming all five checks five fleet
/// limits.
const FIVE: &str = r#"domain: five
descriptors:
  - key: a
    rate_limit: {unit: minute, requests_per_unit: 100}
  - key: b
    rate_limit: {unit: minute, requests_per_unit: 100}
  - key: c
    rate_limit: {unit: minute, requests_per_unit: 100}
  - key: d
    rate_limit: {unit: minute, requests_per_unit: 100}
  - key: e
    rate_limit: {unit: minute, requests_per_unit: 100}
"#;

/// A "Redis" on 127.0.0.1 that accepts connections, reads what it is sent and never answers;
/// its thread stops when the value is dropped.
struct Silent {
    port: u16,
    _stop: std::sync::mpsc::Sender<()>,
}

impl Silent {
    fn start() -> Silent {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind a loopback port");
        let port = listener.local_addr().expect("its address").port();
        listener.set_nonblocking(true).expect("non-blocking accept");
        let (stop, stopped) = std::sync::mpsc::channel::<()>();
        std::thread::spawn(move || {
            let mut held = Vec::new();
            while let Err(std::sync::mpsc::TryRecvError::Empty) = stopped.try_recv() {
                if let Ok((conn, _)) = listener.accept() {
                    let _ = conn.set_nonblocking(true);
                    held.push(conn);
                }
                for conn in &mut held {
                    let mut sink = [0u8; 4096];
                    let _ = std::io::Read::read(conn, &mut sink);
                }
                std::thread::sleep(Duration::from_millis(5));
            }
        });
        Silent { port, _stop: stop }
    }
}

#[test]
fn a_request_of_five_fleet_limits_against_a_silent_redis_is_answered_by_the_outage_rules() {
    if !need(has("curl"), "curl") {
        return;
    }
    let silent = Silent::start();
    let url = format!("redis://127.0.0.1:{}", silent.port);
    let s = Server::start(FIVE, &["--redis", &url, "--redis-max-wait-ms", "150"], &[]);
    let body = r#"{"domain":"five","descriptors":[
        {"entries":[{"key":"a","value":"k"}]},{"entries":[{"key":"b","value":"k"}]},
        {"entries":[{"key":"c","value":"k"}]},{"entries":[{"key":"d","value":"k"}]},
        {"entries":[{"key":"e","value":"k"}]}]}"#;
    // Every answer comes (each request waits on Redis at most one bound in all, whatever
    // its number of fleet limits), decided for every limit by the outage rules: the first
    // request is admitted by each limit's outage share.
    let (ok, over) = send(&s, body, 3);
    assert_eq!(ok + over, 3);
    assert!(ok >= 1, "the outage shares admit the first request");
    let h = health_until(&s, |b| b.contains("redis"));
    assert_eq!(h.status, 200);
    assert_eq!(metric(&s, "cellgate_fleet_limits{state=\"fallback\"}"), 5);
    assert_eq!(metric(&s, "cellgate_fleet_limits{state=\"connected\"}"), 0);
}

/// A stock leased once hot, and a rate checked per user (every user new: always cold).
const LEASED: &str = r#"domain: fleet
descriptors:
  - key: item
    rate_limit: {algorithm: stock, requests_per_unit: 60}
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 100000}
  - key: hot
    rate_limit: {unit: minute, requests_per_unit: 100000}
"#;

/// One request of `descriptors` (`(key, value)` each) to `/json`: whether it was admitted.
fn admitted(s: &Server, descriptors: &[(&str, &str)]) -> bool {
    let list: Vec<String> = (descriptors.iter())
        .map(|(k, v)| format!(r#"{{"entries":[{{"key":"{k}","value":"{v}"}}]}}"#))
        .collect();
    let body = format!(r#"{{"domain":"fleet","descriptors":[{}]}}"#, list.join(","));
    let r = curl(&["-X", "POST", "--data-binary", &body, &s.url("/json")]);
    assert!(r.status == 200 || r.status == 429, "answered {}", r.status);
    r.status == 200
}

#[test]
fn a_leased_key_is_decided_without_waiting_and_a_request_that_waits_is_charged_once() {
    let Some(redis) = Redis::start() else { return };
    let s = Server::start(
        LEASED,
        &["--redis", &redis.url(), "--redis-hot-rate", "1"],
        &[],
    );
    let waited = || metric(&s, "cellgate_fleet_requests_waited");
    // A key checked often enough is leased: then its requests stop waiting for Redis. A
    // round of 20 that adds no wait shows it (bounded: 40 rounds).
    let mut quiet_round = false;
    for _ in 0..40 {
        let before = waited();
        assert_eq!(
            send(
                &s,
                r#"{"domain":"fleet","descriptors":[{"entries":[{"key":"hot","value":"h"}]}]}"#,
                20
            ),
            (20, 0)
        );
        if waited() == before {
            quiet_round = true;
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(
        quiet_round,
        "every round of a hot key waited for Redis: {} waits",
        waited()
    );
    // Every request also carries a user never seen (cold: it waits), so a request that found
    // the stock's lease gave up first, and then was decided again waiting: the stock is
    // sold exactly, each sale charged once. Demand exceeds it.
    let waited_before = waited();
    let mut sold = 0;
    for i in 0..100 {
        if admitted(&s, &[("item", "sku"), ("user", &format!("u{i}"))]) {
            sold += 1;
        }
    }
    assert_eq!(sold, 60, "sold {sold} of a stock of 60 to 100 buyers");
    let sales_waited = waited() - waited_before;
    assert!(
        sales_waited >= 60,
        "each sale waited for its new user: {sales_waited}"
    );
}

#[test]
fn quota_mode_decides_in_the_fleet_as_in_process() {
    let Some(redis) = Redis::start() else { return };
    let config = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/quota/config.yaml"),
    )
    .expect("the quota fixture");
    let s = Server::start(&config, &["--redis", &redis.url()], &[]);
    let body = r#"{"domain":"rl","descriptors":[{"entries":[{"key":"service","value":"service_1"}]},{"entries":[{"key":"service","value":"service_2"}]},{"entries":[{"key":"user","value":"u"}]}]}"#;
    let codes = || {
        let r = post_json(&s, body);
        let v: serde_json::Value = serde_json::from_str(&r.body).expect("JSON");
        let statuses: Vec<String> = (v["statuses"].as_array().expect("statuses").iter())
            .map(|s| s["code"].as_str().unwrap_or("").to_owned())
            .collect();
        (r.status, statuses.join(","))
    };
    // Every key is cold (checked in Redis): service_1 (a burst of 1 a minute) admits once,
    // service_2 (2) twice; the request goes on while one of them has room.
    assert_eq!(codes(), (200, "OK,OK,OK".to_owned()));
    assert_eq!(codes(), (200, "OVER_LIMIT,OK,OK".to_owned()));
    assert_eq!(codes(), (429, "OVER_LIMIT,OVER_LIMIT,OK".to_owned()));
}
