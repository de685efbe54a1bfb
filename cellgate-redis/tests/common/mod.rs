//! A real `redis-server` for the tests: started on a free loopback port in a temp dir, with
//! an append-only file fsynced on every write so a restart keeps the limits' state.
#![allow(dead_code)]

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Waits (up to 10 s) until `f` holds, failing the test naming `what` otherwise.
pub fn wait_for(what: &str, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !f() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// What becomes of one command in the protocol models (`lease_model`, `keyed_model`).
#[derive(Debug, Clone, Copy)]
pub enum Fate {
    /// Sent once, answered.
    Delivered,
    /// Executed, the reply lost; sent again with the same sequence.
    LostThenRetried,
    /// Executed, the reply lost, never retried (the process moves on).
    LostAbandoned,
    /// Timed out before reaching Redis: never executed.
    NeverArrived,
    /// Sent twice (two connections), both answered.
    Duplicated,
}

/// Fates, mostly delivered.
pub fn fate() -> impl proptest::strategy::Strategy<Value = Fate> {
    use proptest::prelude::*;
    prop_oneof![
        4 => Just(Fate::Delivered),
        1 => Just(Fate::LostThenRetried),
        1 => Just(Fate::LostAbandoned),
        1 => Just(Fate::NeverArrived),
        1 => Just(Fate::Duplicated),
    ]
}

/// Runs 24 random sequences of 1 to 40 `step`s through `run` against one server started for
/// the test (nothing when `redis-server` is missing outside CI), failing with the minimal
/// sequence proptest finds.
pub fn model_cases<S: proptest::strategy::Strategy>(
    step: S,
    run: impl Fn(&mut RedisServer, &[S::Value]) -> Result<(), proptest::test_runner::TestCaseError>,
) where
    S::Value: std::fmt::Debug,
{
    let Some(server) = redis() else {
        return;
    };
    let server = std::cell::RefCell::new(server);
    let config = proptest::test_runner::Config {
        cases: 24,
        ..Default::default()
    };
    let mut runner = proptest::test_runner::TestRunner::new(config);
    let result = runner.run(&proptest::collection::vec(step, 1..40), |steps| {
        run(&mut server.borrow_mut(), &steps)
    });
    if let Err(e) = result {
        panic!("{e}");
    }
}

/// A loopback port nothing listens on now.
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port()
}

/// Six nodes of a Redis Cluster on loopback, three masters with a replica each, created with
/// `redis-cli --cluster create` and ready (`cluster_state:ok` on every node). Each node's
/// port leaves its port + 10000 free for the cluster bus. `None` as for [`redis`], also when
/// `redis-cli` (which creates the cluster) is missing: then too `CI=true` fails the test.
pub fn cluster() -> Option<Vec<RedisServer>> {
    let cli = Command::new("redis-cli")
        .arg("--version")
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !cli {
        if std::env::var("CI").is_ok_and(|v| v == "true") {
            panic!("redis-cli is not installed, and CI=true requires the cluster tests to run");
        }
        eprintln!("!!!!! SKIPPED: redis-cli not found; install redis-server (it ships redis-cli) to run the cluster tests !!!!!");
        return None;
    }
    let mut nodes = Vec::new();
    while nodes.len() < 6 {
        let port = free_port();
        let bus_free = port < 55_000 && TcpListener::bind(("127.0.0.1", port + 10_000)).is_ok();
        if !bus_free {
            continue;
        }
        let extra = [
            "--cluster-enabled",
            "yes",
            "--cluster-config-file",
            "nodes.conf",
            "--cluster-node-timeout",
            "2000",
            // A replica's first full sync starts at once (Redis waits 5 s by default for more
            // replicas to share it).
            "--repl-diskless-sync-delay",
            "0",
        ];
        nodes.push(redis_on(port, &extra)?);
    }
    let mut create = Command::new("redis-cli");
    create.arg("--cluster").arg("create");
    for n in &nodes {
        create.arg(format!("127.0.0.1:{}", n.port));
    }
    let out = create
        .args(["--cluster-replicas", "1", "--cluster-yes"])
        .stdin(Stdio::null())
        .output()
        .expect("running redis-cli --cluster create");
    assert!(
        out.status.success(),
        "redis-cli --cluster create: {}",
        String::from_utf8_lossy(&out.stdout)
    );
    // Ready: every node says the state is ok and knows the three replicas.
    wait_for("the cluster to be ready", || {
        nodes.iter().all(|n| {
            let Ok(mut c) = n.connection() else {
                return false;
            };
            let ok = redis::cmd("CLUSTER")
                .arg("INFO")
                .query::<String>(&mut c)
                .is_ok_and(|i| i.contains("cluster_state:ok"));
            let replicas = redis::cmd("CLUSTER")
                .arg("NODES")
                .query::<String>(&mut c)
                .map_or(0, |t| t.lines().filter(|l| l.contains("slave")).count());
            ok && replicas == 3
        })
    });
    // And every replica holds its master's data: its first sync is done.
    wait_for("the replicas to sync", || {
        nodes.iter().all(|n| {
            let Ok(mut c) = n.connection() else {
                return false;
            };
            let info = redis::cmd("INFO")
                .arg("replication")
                .query::<String>(&mut c)
                .unwrap_or_default();
            info.contains("role:master") || info.contains("master_link_status:up")
        })
    });
    Some(nodes)
}

/// The seed URLs of a cluster, comma-separated (what `Fleet::connect` takes).
pub fn seeds(nodes: &[RedisServer]) -> String {
    nodes
        .iter()
        .map(RedisServer::url)
        .collect::<Vec<_>>()
        .join(",")
}

/// A directory for one test's files (certificates), removed when dropped.
pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new(tag: &str) -> Self {
        let dir = std::env::temp_dir().join(format!(
            "cellgate-redis-{tag}-{}-{}",
            std::process::id(),
            free_port()
        ));
        std::fs::create_dir_all(&dir).expect("temp dir");
        Self(dir)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

pub struct RedisServer {
    pub port: u16,
    dir: PathBuf,
    child: Option<Child>,
    /// Arguments after the defaults (a later directive overrides an earlier one).
    extra: Vec<String>,
    /// The default user's password (from `--requirepass`), for the tests' own connections.
    pub password: Option<String>,
}

/// `None` (after one loud line) when `redis-server` is not installed, unless `CI=true`, where
/// a missing server fails the test.
pub fn redis() -> Option<RedisServer> {
    redis_with(&[])
}

/// As [`redis`], with `extra` arguments after the defaults (`--appendonly no` for a server
/// that forgets everything when it restarts, `--requirepass`, TLS...).
pub fn redis_with(extra: &[&str]) -> Option<RedisServer> {
    redis_on(free_port(), extra)
}

/// As [`redis_with`], on `port`.
pub fn redis_on(port: u16, extra: &[&str]) -> Option<RedisServer> {
    let found = Command::new("redis-server")
        .arg("--version")
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !found {
        if std::env::var("CI").is_ok_and(|v| v == "true") {
            panic!("redis-server is not installed, and CI=true requires the Redis tests to run");
        }
        eprintln!("!!!!! SKIPPED: redis-server not found; install it (apt-get install -y redis-server) to run the fleet tests !!!!!");
        return None;
    }
    let dir = std::env::temp_dir().join(format!("cellgate-redis-{}-{port}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let mut s = RedisServer {
        port,
        dir,
        child: None,
        extra: extra.iter().map(|a| (*a).to_owned()).collect(),
        password: extra
            .iter()
            .position(|a| *a == "--requirepass")
            .and_then(|i| extra.get(i + 1))
            .map(|p| (*p).to_owned()),
    };
    s.start();
    Some(s)
}

impl RedisServer {
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// Starts the server (again) on the same port and directory, and waits until it answers.
    pub fn start(&mut self) {
        let child = Command::new("redis-server")
            .args(["--port", &self.port.to_string(), "--bind", "127.0.0.1"])
            .args([
                "--save",
                "",
                "--appendonly",
                "yes",
                "--appendfsync",
                "always",
            ])
            .arg("--dir")
            .arg(&self.dir)
            .args(&self.extra)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("starting redis-server");
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Ok(mut c) = self.connection()
                && redis::cmd("PING").query::<String>(&mut c).is_ok()
            {
                return;
            }
            assert!(Instant::now() < deadline, "redis-server did not start");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Stops the server the way an operator would (SHUTDOWN: the AOF is flushed) and waits.
    pub fn stop(&mut self) {
        if let Ok(mut c) = self.connection() {
            let _ = redis::cmd("SHUTDOWN").query::<()>(&mut c);
        }
        if let Some(mut child) = self.child.take() {
            let _ = child.wait();
        }
    }

    /// Freezes the server (SIGSTOP): connections stay open and nothing is answered, the way a
    /// sick Redis looks. [`resume`](Self::resume) thaws it.
    pub fn pause(&self) {
        self.signal("-STOP");
    }

    /// Thaws a [`pause`](Self::pause)d server (SIGCONT).
    pub fn resume(&self) {
        self.signal("-CONT");
    }

    /// Kills the server with SIGKILL (a crash: whatever it had not yet sent its replicas is
    /// lost) and reaps it.
    pub fn kill(&mut self) {
        self.signal("-KILL");
        if let Some(mut child) = self.child.take() {
            let _ = child.wait();
        }
    }

    fn signal(&self, sig: &str) {
        let pid = self.child.as_ref().expect("running").id();
        let ok = Command::new("kill")
            .args([sig, &pid.to_string()])
            .status()
            .is_ok_and(|s| s.success());
        assert!(ok, "kill {sig} {pid}");
    }

    /// The URL with the default user's password, if the server has one.
    pub fn admin_url(&self) -> String {
        match &self.password {
            Some(p) => format!("redis://:{p}@127.0.0.1:{}", self.port),
            None => self.url(),
        }
    }

    pub fn connection(&self) -> redis::RedisResult<redis::Connection> {
        redis::Client::open(self.admin_url())?.get_connection_with_timeout(Duration::from_secs(1))
    }

    /// Runs one command as the default user (panics on an error: the test's own setup).
    pub fn cmd<T: redis::FromRedisValue>(&self, args: &[&str]) -> T {
        let mut c = redis::cmd(args[0]);
        for a in &args[1..] {
            c.arg(*a);
        }
        c.query(&mut self.connection().unwrap())
            .unwrap_or_else(|e| panic!("{args:?}: {e}"))
    }

    /// Calls made by clients to run scripts (EVAL/EVALSHA/SCRIPT), from `INFO commandstats`:
    /// the round trips; the commands a script runs inside Redis are not round trips.
    pub fn script_calls(&self) -> u64 {
        let info: String = redis::cmd("INFO")
            .arg("commandstats")
            .query(&mut self.connection().unwrap())
            .unwrap();
        cellgate_redis::wire::script_calls(&info)
    }

    /// Every command Redis has executed, from `INFO commandstats`: round trips and the
    /// commands scripts run inside Redis alike (Redis's work, not only its round trips).
    pub fn all_commands(&self) -> u64 {
        let info: String = redis::cmd("INFO")
            .arg("commandstats")
            .query(&mut self.connection().unwrap())
            .unwrap();
        cellgate_redis::wire::command_calls(&info, "cmdstat_")
    }

    /// What the keyed limit `name` has taken of `key` (a stock's units sold or leased).
    pub fn taken(&self, name: &str, key: &str) -> u64 {
        let v: Option<u64> = redis::cmd("GET")
            .arg(cellgate_redis::wire::key_of(name, key))
            .query(&mut self.connection().unwrap())
            .unwrap();
        v.unwrap_or(0)
    }

    pub fn hgetall(&self, key: &str) -> std::collections::HashMap<String, String> {
        redis::cmd("HGETALL")
            .arg(key)
            .query(&mut self.connection().unwrap())
            .unwrap()
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// One `fleet_node` process, its stdout read line by line on a thread.
pub struct Node {
    pub child: Child,
    pub lines: std::sync::mpsc::Receiver<String>,
    pub last: u64,
    pub ready: bool,
    /// What the node wrote to stderr (its closing counters), once it has exited.
    pub stderr: std::sync::Arc<std::sync::Mutex<String>>,
}

pub fn node<S: AsRef<std::ffi::OsStr>>(
    url: &str,
    limit: &[S],
    seconds: &str,
    threads: usize,
) -> Node {
    node_env(url, limit, seconds, threads, &[])
}

/// As [`node`], with environment variables set for the process (`SSL_CERT_FILE`).
pub fn node_env<S: AsRef<std::ffi::OsStr>>(
    url: &str,
    limit: &[S],
    seconds: &str,
    threads: usize,
    env: &[(&str, &std::path::Path)],
) -> Node {
    let mut child = Command::new(env!("CARGO_BIN_EXE_fleet_node"))
        .envs(env.iter().copied())
        .args(["--redis", url])
        .args(limit)
        .args(["--seconds", seconds, "--threads", &threads.to_string()])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("starting fleet_node");
    let out = child.stdout.take().unwrap();
    let err = child.stderr.take().unwrap();
    let stderr = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
    let sink = stderr.clone();
    std::thread::spawn(move || {
        use std::io::Read;
        let mut text = String::new();
        let _ = std::io::BufReader::new(err).read_to_string(&mut text);
        *sink.lock().unwrap() = text;
    });
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        use std::io::BufRead;
        for line in std::io::BufReader::new(out).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    Node {
        child,
        lines: rx,
        last: 0,
        ready: false,
        stderr,
    }
}

impl Node {
    /// Reads the lines printed so far (waiting up to `wait` for one); returns whether the
    /// output is still open.
    pub fn poll(&mut self, wait: Duration) -> bool {
        let mut first = true;
        loop {
            let line = if first {
                first = false;
                self.lines.recv_timeout(wait)
            } else {
                self.lines.try_recv().map_err(|e| match e {
                    std::sync::mpsc::TryRecvError::Empty => {
                        std::sync::mpsc::RecvTimeoutError::Timeout
                    }
                    std::sync::mpsc::TryRecvError::Disconnected => {
                        std::sync::mpsc::RecvTimeoutError::Disconnected
                    }
                })
            };
            match line {
                Ok(l) if l == "ready" => self.ready = true,
                Ok(l) => {
                    let n = l.strip_prefix("admitted ").and_then(|n| n.parse().ok());
                    let n = n.unwrap_or_else(|| panic!("unexpected line {l:?}"));
                    assert!(n >= self.last, "the running total went down");
                    self.last = n;
                }
                Err(std::sync::mpsc::RecvTimeoutError::Timeout) => return true,
                Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => return false,
            }
        }
    }

    /// Waits for the process to exit 0 (within `limit`); returns its final total.
    pub fn finish(self, limit: Duration) -> u64 {
        self.finish_with_counters(limit).0
    }

    /// As [`finish`](Self::finish), with the counters the node printed on stderr at exit
    /// (`name value` pairs of its `fleet_node: ...` line).
    pub fn finish_with_counters(
        mut self,
        limit: Duration,
    ) -> (u64, std::collections::HashMap<String, String>) {
        let deadline = Instant::now() + limit;
        while self.poll(Duration::from_millis(50)) {
            assert!(
                Instant::now() < deadline,
                "fleet_node did not finish in time"
            );
        }
        let status = self.child.wait().unwrap();
        assert!(status.success(), "fleet_node exited with {status}");
        assert!(self.ready, "fleet_node never printed ready");
        // The stderr reader ends when the process does.
        let deadline = Instant::now() + Duration::from_secs(5);
        let text = loop {
            let t = self.stderr.lock().unwrap().clone();
            // State changes come first: wait for the closing counters.
            let closed = t.lines().any(|l| l.starts_with("fleet_node: state"));
            if closed || Instant::now() > deadline {
                break t;
            }
            std::thread::sleep(Duration::from_millis(10));
        };
        let line = text
            .lines()
            .find(|l| l.starts_with("fleet_node: state"))
            .unwrap_or("");
        let words: Vec<&str> = line
            .trim_start_matches("fleet_node: ")
            .split_whitespace()
            .collect();
        let counters = words
            .chunks(2)
            .filter(|c| c.len() == 2)
            .map(|c| (c[0].to_owned(), c[1].to_owned()))
            .collect();
        (self.last, counters)
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Per-thread counts of keyed checks: `"key/Via"` → (units admitted, checks).
pub type Counts = std::collections::HashMap<String, (u64, u64)>;

/// Counts one keyed check of `units` units of `key`.
pub fn record(counts: &mut Counts, key: &str, d: &cellgate_redis::KeyDecision, units: u64) {
    let e = counts.entry(format!("{key}/{:?}", d.via())).or_default();
    e.0 += units * u64::from(d.is_allowed());
    e.1 += 1;
}

/// Joins the counting threads: units admitted per key, checks per path (`Via`).
pub fn tally(
    threads: Vec<std::thread::JoinHandle<Counts>>,
) -> (
    std::collections::HashMap<String, u64>,
    std::collections::HashMap<String, u64>,
) {
    let mut per_key = std::collections::HashMap::new();
    let mut per_via = std::collections::HashMap::new();
    for t in threads {
        for (k, (admitted, checks)) in t.join().unwrap() {
            let (key, via) = k.split_once('/').unwrap();
            *per_key.entry(key.to_owned()).or_default() += admitted;
            *per_via.entry(via.to_owned()).or_default() += checks;
        }
    }
    (per_key, per_via)
}

/// A thread checking keys `cold0` to `cold{keys - 1}`, `times` checks of `units` units each,
/// once every `period` until `run` has passed since `start`; returns its counts.
pub fn cold_rounds(
    fleet: std::sync::Arc<cellgate_redis::KeyedFleet>,
    (start, run): (Instant, Duration),
    (keys, times, units): (usize, usize, u32),
    period: Duration,
) -> std::thread::JoinHandle<Counts> {
    std::thread::spawn(move || {
        let mut counts = Counts::new();
        while start.elapsed() < run {
            let round = Instant::now();
            for k in 0..keys {
                let key = format!("cold{k}");
                for _ in 0..times {
                    let d = fleet.check_blocking(&key, units);
                    record(&mut counts, &key, &d, u64::from(units));
                }
            }
            if let Some(rest) = period.checked_sub(round.elapsed()) {
                std::thread::sleep(rest);
            }
        }
        counts
    })
}

/// One thread per fleet, each checking a unit about once a millisecond until [`stop`]ped,
/// counting what was sold in all: a sale that runs while a test does something to Redis.
///
/// [`stop`]: Sellers::stop
pub struct Sellers {
    sold: std::sync::Arc<std::sync::atomic::AtomicU64>,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    threads: Vec<std::thread::JoinHandle<()>>,
}

impl Sellers {
    pub fn start(fleets: &[std::sync::Arc<cellgate_redis::Fleet>]) -> Self {
        Self::selling(
            fleets
                .iter()
                .map(|f| {
                    let f = f.clone();
                    move || f.check().is_allowed()
                })
                .collect(),
        )
    }

    /// One thread per `sell`, each calling it about once a millisecond (it says whether it
    /// sold a unit): [`start`](Self::start) for any limiter (one key of a keyed fleet).
    pub fn selling<F: Fn() -> bool + Send + 'static>(sells: Vec<F>) -> Self {
        use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
        let sold = std::sync::Arc::new(AtomicU64::new(0));
        let stop = std::sync::Arc::new(AtomicBool::new(false));
        let threads = sells
            .into_iter()
            .map(|sell| {
                let (sold, stop) = (sold.clone(), stop.clone());
                std::thread::spawn(move || {
                    while !stop.load(Ordering::Relaxed) {
                        if sell() {
                            sold.fetch_add(1, Ordering::Relaxed);
                        }
                        std::thread::sleep(Duration::from_millis(1));
                    }
                })
            })
            .collect();
        Self {
            sold,
            stop,
            threads,
        }
    }

    /// Units sold so far.
    pub fn sold(&self) -> u64 {
        self.sold.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Stops and joins the sellers; returns what they sold.
    pub fn stop(self) -> u64 {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        let sold = self.sold;
        for t in self.threads {
            t.join().unwrap();
        }
        sold.load(std::sync::atomic::Ordering::Relaxed)
    }
}

/// Runs one ignored test of this binary (`test`, its full name in tests/integration.rs) as a
/// child process, with `env` set, stdout read line by line into the receiver (quiet: the
/// harness prints no `test ...` prefix before the child's first line), stderr dropped.
pub fn rerun_test(test: &str, env: (&str, String)) -> (Child, std::sync::mpsc::Receiver<String>) {
    use std::io::{BufRead, BufReader};
    let mut child = Command::new(std::env::current_exe().expect("this test binary"))
        .args([test, "--exact", "--ignored", "--nocapture", "-q"])
        .args(["--test-threads", "1"])
        .env(env.0, env.1)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("starting a node");
    let out = child.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(out).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    (child, rx)
}
