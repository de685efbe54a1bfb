//! Fleet mode on a Redis Cluster of three masters and three replicas (`--redis` given the seed
//! nodes): two `cellgate-server` processes share a rate and sell a stock exactly, the limits'
//! keys live on several masters, and a master killed with `kill -9` mid-run neither stops the
//! answers nor oversells. With the `tls` feature, a stock sold exactly over `rediss://`;
//! without it, `--redis rediss://` is refused at startup, naming the feature. Requests go
//! through curl; bounded in requests, no timing assertions.

use crate::common;

use std::collections::BTreeMap;
use std::process::Command;
use std::time::{Duration, Instant};

use common::redis_cluster::Cluster;
use common::Server;

/// A per-key rate (in fleet mode a GCRA of 20 a minute, burst 20) and a per-key stock of 30.
const FLEET: &str = r#"domain: fleet
descriptors:
  - key: rate
    rate_limit: {unit: minute, requests_per_unit: 20}
  - key: item
    rate_limit: {algorithm: stock, requests_per_unit: 30}
"#;

const STOCK: u64 = 30;
/// The largest lease of the stock between two servers: a quarter of what is left.
const LEASE: u64 = STOCK / 4;

/// The `/json` request for the descriptor `key: value`.
fn body(key: &str, value: &str) -> String {
    format!(
        r#"{{"domain":"fleet","descriptors":[{{"entries":[{{"key":"{key}","value":"{value}"}}]}}]}}"#
    )
}

/// Sends `body` to `/json` `n` times on one connection; returns how many were answered 200.
/// Any answer other than 200 or 429 fails the test.
fn send(s: &Server, body: &str, n: usize) -> u64 {
    common::send(s, body, n).0
}

/// Sells item `value` on every server, in rounds of 8 requests each, until `want` are sold in
/// all or `rounds` passed; returns what each server sold.
fn sell(servers: &[&Server], value: &str, want: u64, rounds: usize) -> Vec<u64> {
    let b = body("item", value);
    let mut sold = vec![0; servers.len()];
    for _ in 0..rounds {
        for (s, n) in servers.iter().zip(sold.iter_mut()) {
            *n += send(s, &b, 8);
        }
        if sold.iter().sum::<u64>() >= want {
            break;
        }
        std::thread::sleep(Duration::from_millis(150));
    }
    sold
}

/// A server in fleet mode on `redis`, with `env` set.
fn server(redis: &str, env: &[(&str, &str)]) -> Server {
    Server::start(FLEET, &["--redis", redis], env)
}

/// Waits (bounded) until every limit of `s` is connected to Redis.
fn connected(s: &Server) {
    common::eventually("the server's limits connected", || {
        common::curl(&[&s.url("/healthcheck")]).body.trim() == "OK"
    });
}

/// The shared rate admits within the fleet's bound: R·(T + L) + B, with the lease lifetime
/// L = 1 s, R = 1/3 per second, B = 20.
fn check_shared_rate(a: &Server, b: &Server) {
    let started = Instant::now();
    let rate = body("rate", "k");
    let mut admitted = 0;
    for _ in 0..6 {
        admitted += send(a, &rate, 10) + send(b, &rate, 10);
    }
    let bound = 20 + (started.elapsed().as_secs() + 1).div_ceil(3) + 1;
    eprintln!("admitted {admitted} across two servers on the cluster, fleet bound {bound}");
    assert!(
        admitted <= bound,
        "{admitted} admitted > fleet bound {bound}"
    );
    assert!(admitted >= 10, "{admitted} admitted: most of the burst");
}

/// What Redis records of the per-key stock, over every live master: per item (the
/// descriptor's value), the units taken and the units stranded (taken by a server that will
/// never sell them: no replica acknowledged their batch, or its answer could not be vouched
/// for), and how many holding fields (units some server holds leased unsold) remain.
#[derive(Debug, Default)]
struct Ledger {
    taken: BTreeMap<String, u64>,
    stranded: BTreeMap<String, u64>,
    holdings: usize,
}

/// The descriptor value of a limit key's suffix `len:value`.
fn value_of(suffix: &str) -> String {
    suffix.split_once(':').map_or(suffix, |(_, v)| v).to_owned()
}

fn ledger(cluster: &Cluster) -> Ledger {
    let mut l = Ledger::default();
    for m in cluster.masters() {
        let node = &cluster.nodes[m];
        for key in node.cli(&["KEYS", "cellgate:*:stock:*"]).lines() {
            if let Some((_, suffix)) = key.split_once("}:k:") {
                let n = node.cli(&["GET", key]).trim().parse().unwrap_or(0);
                *l.taken.entry(value_of(suffix)).or_default() += n;
            } else if key.ends_with("}:kleases") {
                let all = node.cli(&["HGETALL", key]);
                let lines: Vec<&str> = all.lines().collect();
                for pair in lines.chunks(2) {
                    let [field, n] = pair else { continue };
                    if let Some(item) = field.strip_prefix("s:") {
                        let n: u64 = n.trim().parse().unwrap_or(0);
                        *l.stranded.entry(value_of(item)).or_default() += n;
                    } else if field.starts_with("h:") {
                        l.holdings += 1;
                    }
                }
            }
        }
    }
    l
}

/// Sells items `values` on both servers while the master holding the most limit keys is
/// killed with SIGKILL and its replica takes over, and after; every request is answered, and
/// once the servers hand their idle leases back, Redis accounts for every unit of every item:
/// taken = sold + stranded (+ at most a lease the crash cost), never more sold than the stock. Items first sold after the
/// failover sell.
fn check_master_killed(
    cluster: &mut Cluster,
    (a, b): (&Server, &Server),
    values: &[String],
    mut sold: BTreeMap<String, u64>,
) {
    let sell_all = |sold: &mut BTreeMap<String, u64>, want: u64| {
        for v in values {
            *sold.entry(v.clone()).or_default() += sell(&[a, b], v, want, 1).iter().sum::<u64>();
        }
    };
    sell_all(&mut sold, 8);
    let victim = (cluster.masters().into_iter())
        .max_by_key(|&i| cluster.keys(i, "cellgate:*"))
        .expect("a master");
    cluster.nodes[victim].kill();
    // While the cluster notices and fails over, answers keep coming.
    sell_all(&mut sold, 8);
    common::eventually("the replica to take over", || cluster.ready(2));
    for _ in 0..3 {
        sell_all(&mut sold, STOCK);
    }
    let mut fresh = 0;
    for i in 0..8 {
        let v = format!("fresh{i}");
        let n: u64 = sell(&[a, b], &v, STOCK, 3).iter().sum();
        fresh += n;
        sold.insert(v, n);
    }
    // Idle keys' leases go back within about a second of their last sale.
    common::eventually("every lease handed back", || ledger(cluster).holdings == 0);
    let l = ledger(cluster);
    eprintln!("sold per item: {sold:?}; Redis: {l:?}");
    for (v, &n) in &sold {
        assert!(n <= STOCK, "item {v} oversold: {n} > {STOCK}");
        let taken = l.taken.get(v).copied().unwrap_or(0);
        let stranded = l.stranded.get(v).copied().unwrap_or(0);
        // Redis never counts fewer units taken than were sold or stranded (it would sell them
        // again); more only by what the crash cost: a give-back the dead master executed
        // without a replica's acknowledgement, taken for done (never sold: at most one lease,
        // the fleet's bound on a crash's undersell). In the runs so far, none: equal.
        let unaccounted = taken.checked_sub(n + stranded).unwrap_or_else(|| {
            panic!(
                "item {v}: Redis counts {taken} taken, fewer than {n} sold + {stranded} stranded"
            )
        });
        assert!(
            unaccounted <= LEASE,
            "item {v}: Redis counts {taken} taken, the servers sold {n} and {stranded} are stranded"
        );
    }
    assert!(fresh > 0, "no fresh item sold after the failover");
}

#[test]
fn two_servers_share_limits_on_a_cluster_and_survive_a_master_killed() {
    let Some(mut cluster) = Cluster::start() else {
        return;
    };
    if !common::need(common::has("curl"), "curl") {
        return;
    }
    let seeds = cluster.seeds();
    // Both servers start at once on the fresh cluster, as a deployment's replicas do: each
    // registers every limit while the other may still be creating its shards.
    let a = server(&seeds, &[]);
    let b = server(&seeds, &[]);
    connected(&a);
    connected(&b);
    check_shared_rate(&a, &b);
    // A stock, demand over it on both servers: sold exactly, by both.
    let sold = sell(&[&a, &b], "sku", STOCK, 40);
    let health = common::curl(&[&a.url("/healthcheck")]).body;
    let metrics = common::curl(&[&a.url("/metrics")]).body;
    let fleet: Vec<&str> = metrics
        .lines()
        .filter(|l| l.starts_with("cellgate_fleet"))
        .collect();
    assert_eq!(
        sold.iter().sum::<u64>(),
        STOCK,
        "sold {sold:?}; {health}; {fleet:?}"
    );
    assert!(sold[0] > 0 && sold[1] > 0, "both servers sold: {sold:?}");
    assert_eq!(
        send(&a, &body("item", "sku"), 4) + send(&b, &body("item", "sku"), 4),
        0
    );
    // The limits' keys are spread over the masters, not on one.
    let values: Vec<String> = (0..6).map(|i| format!("sku{i}")).collect();
    let mut sold = BTreeMap::new();
    for v in &values {
        sold.insert(v.clone(), sell(&[&a, &b], v, 2, 1).iter().sum::<u64>());
    }
    let holding: Vec<(u16, usize)> = (cluster.masters().into_iter())
        .map(|i| (cluster.nodes[i].port, cluster.keys(i, "cellgate:*")))
        .collect();
    eprintln!("limit keys per master (port, keys): {holding:?}");
    assert_eq!(holding.len(), 3, "three masters: {holding:?}");
    let used = holding.iter().filter(|(_, k)| *k > 0).count();
    assert!(used >= 2, "keys on {used} master(s) only: {holding:?}");
    check_master_killed(&mut cluster, (&a, &b), &values, sold);
}

/// `rediss://` needs the `tls` feature: without it the server refuses to start and says so.
#[cfg(not(feature = "tls"))]
#[test]
fn rediss_without_the_tls_feature_is_refused_naming_it() {
    let dir = tempfile::tempdir().expect("temp dir");
    let cfg = dir.path().join("config.yaml");
    std::fs::write(&cfg, FLEET).expect("write config");
    let mut child = Command::new(env!("CARGO_BIN_EXE_cellgate-server"))
        .arg("--config")
        .arg(&cfg)
        .args([
            "--grpc",
            "127.0.0.1:0",
            "--http",
            "127.0.0.1:0",
            "--resp",
            "off",
        ])
        .args(["--redis", "rediss://127.0.0.1:1"])
        .env_remove("REDIS_URL")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("start cellgate-server");
    let deadline = Instant::now() + Duration::from_secs(20);
    let status = loop {
        if let Some(st) = child.try_wait().expect("wait") {
            break st;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("the server started on rediss:// without the tls feature");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let mut err = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().expect("stderr"), &mut err)
        .expect("read stderr");
    assert!(!status.success(), "exit status {status:?}");
    assert!(
        err.contains("`tls` feature"),
        "the error names the feature: {err}"
    );
}

#[cfg(feature = "tls")]
mod tls {
    use super::*;
    use std::path::Path;
    use std::process::{Child, Stdio};

    use common::certs::openssl_found;

    /// A test authority (`ca.pem`) and a certificate for 127.0.0.1 (`server.pem`,
    /// `server.key`) it signed, in `dir`.
    fn certificates(dir: &Path) {
        common::certs::authority(dir);
        common::certs::signed(dir, "server", "subjectAltName=IP:127.0.0.1\n");
    }

    /// A redis-server that listens on TLS only; killed on drop.
    struct TlsRedis(Child);

    impl Drop for TlsRedis {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }

    #[test]
    fn two_servers_sell_a_stock_exactly_over_rediss() {
        let tools = ["redis-server", "curl"]
            .iter()
            .all(|t| common::need(common::has(t), t));
        if !tools || !common::need(openssl_found(), "openssl") {
            return;
        }
        let dir = tempfile::tempdir().expect("temp dir");
        certificates(dir.path());
        let file = |f: &str| dir.path().join(f).to_str().expect("utf-8 path").to_owned();
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        let child = Command::new("redis-server")
            .args(["--port", "0", "--bind", "127.0.0.1", "--save", ""])
            .args(["--tls-port", &port.to_string()])
            .args(["--tls-cert-file", &file("server.pem")])
            .args(["--tls-key-file", &file("server.key")])
            .args(["--tls-ca-cert-file", &file("ca.pem")])
            .args(["--tls-auth-clients", "no"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start redis-server");
        let _redis = TlsRedis(child);
        common::eventually("redis-server's TLS port", || {
            std::net::TcpStream::connect(("127.0.0.1", port)).is_ok()
        });
        let url = format!("rediss://127.0.0.1:{port}");
        let ca = file("ca.pem");
        let a = server(&url, &[("SSL_CERT_FILE", &ca)]);
        let b = server(&url, &[("SSL_CERT_FILE", &ca)]);
        let sold = sell(&[&a, &b], "sku", STOCK, 40);
        assert_eq!(
            sold.iter().sum::<u64>(),
            STOCK,
            "sold over rediss://: {sold:?}"
        );
        assert!(sold[0] > 0 && sold[1] > 0, "both servers sold: {sold:?}");
        assert_eq!(
            send(&a, &body("item", "sku"), 4) + send(&b, &body("item", "sku"), 4),
            0
        );
    }
}
