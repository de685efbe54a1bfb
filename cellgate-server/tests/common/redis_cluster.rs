//! A Redis Cluster of three masters and three replicas on loopback (`redis-server
//! --cluster-enabled yes`, each node also binding its port + 10000 for the cluster bus, joined
//! by `redis-cli --cluster create --cluster-replicas 1`); every node killed on drop.

use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::{has, need};

/// One node: its port, its data directory, its process (`None` once killed).
pub struct Node {
    pub port: u16,
    _dir: tempfile::TempDir,
    child: Option<Child>,
}

impl Node {
    fn start(port: u16) -> Node {
        let dir = tempfile::tempdir().expect("temp dir");
        let child = Command::new("redis-server")
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no"])
            .args(["--cluster-enabled", "yes"])
            .args(["--cluster-config-file", "nodes.conf"])
            // A dead master is failed over in a few seconds.
            .args(["--cluster-node-timeout", "2000"])
            // A replica's first sync starts at once (Redis waits 5 s for more replicas).
            .args(["--repl-diskless-sync-delay", "0"])
            .arg("--dir")
            .arg(dir.path())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start redis-server");
        Node {
            port,
            _dir: dir,
            child: Some(child),
        }
    }

    /// `redis-cli -p PORT args...`'s standard output (empty when it fails).
    pub fn cli(&self, args: &[&str]) -> String {
        Command::new("redis-cli")
            .args(["-p", &self.port.to_string()])
            .args(args)
            .stdin(Stdio::null())
            .stderr(Stdio::null())
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
            .unwrap_or_default()
    }

    /// Whether the process still runs.
    pub fn alive(&self) -> bool {
        self.child.is_some()
    }

    /// SIGKILL (`kill -9`), and reap.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        self.kill();
    }
}

/// The six nodes.
pub struct Cluster {
    pub nodes: Vec<Node>,
}

/// A loopback port whose bus port (+ 10000) is free too.
fn cluster_port() -> u16 {
    loop {
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        if port < 55_000 && TcpListener::bind(("127.0.0.1", port + 10_000)).is_ok() {
            return port;
        }
    }
}

/// Polls `f` (bounded: 30 s) until it holds; panics with `what` otherwise.
fn wait(what: &str, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !f() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

impl Cluster {
    /// Starts and joins the cluster, and waits until its state is ok and every replica has
    /// synced. `None` when redis-server or redis-cli is missing (skipped; a failure under
    /// `CI=true`).
    pub fn start() -> Option<Cluster> {
        if !need(has("redis-server"), "redis-server") || !need(has("redis-cli"), "redis-cli") {
            return None;
        }
        let nodes: Vec<Node> = (0..6).map(|_| Node::start(cluster_port())).collect();
        let c = Cluster { nodes };
        for n in &c.nodes {
            wait("a node to answer", || n.cli(&["PING"]).trim() == "PONG");
        }
        let mut create = Command::new("redis-cli");
        create.args(["--cluster", "create"]);
        for n in &c.nodes {
            create.arg(format!("127.0.0.1:{}", n.port));
        }
        let out = create
            .args(["--cluster-replicas", "1", "--cluster-yes"])
            .stdin(Stdio::null())
            .output()
            .expect("run redis-cli --cluster create");
        assert!(
            out.status.success(),
            "redis-cli --cluster create: {}",
            String::from_utf8_lossy(&out.stdout)
        );
        wait("the cluster to be ready", || c.ready(3));
        Some(c)
    }

    /// Every live node says the state is ok, knows `replicas` synced replicas' roles.
    pub fn ready(&self, replicas: usize) -> bool {
        self.nodes.iter().filter(|n| n.alive()).all(|n| {
            let ok = n.cli(&["CLUSTER", "INFO"]).contains("cluster_state:ok");
            let known = n
                .cli(&["CLUSTER", "NODES"])
                .lines()
                .filter(|l| l.contains("slave") && !l.contains("fail"))
                .count();
            let info = n.cli(&["INFO", "replication"]);
            let synced = info.contains("role:master") || info.contains("master_link_status:up");
            ok && known == replicas && synced
        })
    }

    /// The seed URLs, comma-separated, as `--redis` takes them.
    pub fn seeds(&self) -> String {
        let urls: Vec<String> = (self.nodes.iter().take(3))
            .map(|n| format!("redis://127.0.0.1:{}", n.port))
            .collect();
        urls.join(",")
    }

    /// The indexes of the live nodes that are masters now.
    pub fn masters(&self) -> Vec<usize> {
        (0..self.nodes.len())
            .filter(|&i| self.nodes[i].alive())
            .filter(|&i| self.nodes[i].cli(&["ROLE"]).starts_with("master"))
            .collect()
    }

    /// The number of keys named `pattern` on node `i` (`KEYS`: the test's data set is small).
    pub fn keys(&self, i: usize, pattern: &str) -> usize {
        (self.nodes[i].cli(&["KEYS", pattern]).lines())
            .filter(|l| !l.trim().is_empty())
            .count()
    }
}
