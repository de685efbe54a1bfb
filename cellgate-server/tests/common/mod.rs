//! Starts the built `cellgate-server` with a config in a temporary directory, finds its
//! ephemeral ports from its `listening` lines, and kills it on drop. Also the skip-or-fail rule
//! for external tools: missing tools skip the test with a reason, unless `CI=true`.

#![allow(dead_code)]

#[cfg(feature = "tls")]
pub mod certs;
pub mod redis_cluster;
pub mod redis_server;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// The fixture config the scenarios are written against (ratelimit's format and extensions).
/// Yearly windows: a test does not cross a window boundary in practice.
pub const SHOP: &str = r#"domain: shop
descriptors:
  - key: remote_address
    rate_limit: {unit: year, requests_per_unit: 3}
  - key: path
    value: "/api/*"
    rate_limit: {unit: year, requests_per_unit: 2, name: api}
    detailed_metric: true
    descriptors:
      - key: user
        rate_limit: {unlimited: true}
  - key: path
    value: /shadow
    shadow_mode: true
    rate_limit: {unit: year, requests_per_unit: 1}
  - key: tier
    value: gold
    rate_limit: {unit: year, requests_per_unit: 1, name: gold, replaces: [{name: api}]}
  - key: item
    value: iphone
    rate_limit: {algorithm: stock, requests_per_unit: 5}
  - key: ip
    value: banned
    rate_limit: {unit: minute, requests_per_unit: 0}
  - key: quota
    value: free
    quota_mode: true
    rate_limit: {unit: year, requests_per_unit: 1}
  - key: quota
    value: paid
    quota_mode: true
    rate_limit: {unit: year, requests_per_unit: 2}
"#;

/// Whether the external tool is usable; if not: fail under `CI=true`, else print why and skip.
pub fn need(ok: bool, what: &str) -> bool {
    if ok {
        return true;
    }
    if std::env::var("CI").as_deref() == Ok("true") {
        panic!("required tool missing under CI: {what}");
    }
    eprintln!("SKIPPED: {what} is not available");
    false
}

/// Whether `cmd --version` runs.
pub fn has(cmd: &str) -> bool {
    Command::new(cmd)
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// A running server; killed (and waited for) on drop.
pub struct Server {
    pub child: Child,
    pub grpc: Option<String>,
    pub http: Option<String>,
    pub dir: tempfile::TempDir,
    lines: mpsc::Receiver<String>,
    /// The standard output lines read so far.
    seen: Vec<String>,
}

impl Server {
    /// The config directory (its `config.yaml` is the config file).
    pub fn config_file(&self) -> PathBuf {
        self.dir.path().join("config.yaml")
    }

    /// Starts the server on ephemeral ports with `config` written to `config.yaml` in a fresh
    /// directory, passed as `--config` (the file) plus `args`, with `env` set.
    pub fn start(config: &str, args: &[&str], env: &[(&str, &str)]) -> Server {
        let dir = tempfile::tempdir().expect("temp dir");
        std::fs::write(dir.path().join("config.yaml"), config).expect("write config");
        let cfg = dir.path().join("config.yaml");
        Self::start_in(dir, &cfg, args, env)
    }

    /// Starts the server with `--config path` (already written under `dir`).
    pub fn start_in(
        dir: tempfile::TempDir,
        path: &Path,
        args: &[&str],
        env: &[(&str, &str)],
    ) -> Server {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_cellgate-server"));
        cmd.arg("--config")
            .arg(path)
            .args([
                "--grpc",
                "127.0.0.1:0",
                "--http",
                "127.0.0.1:0",
                "--resp",
                "off",
            ])
            .args(args)
            .env_remove("REDIS_URL")
            .env_remove("SHADOW_MODE")
            .env_remove("LIMIT_RESPONSE_HEADERS_ENABLED")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        for (k, v) in env {
            cmd.env(k, v);
        }
        let mut child = cmd.spawn().expect("start cellgate-server");
        let stdout = child.stdout.take().expect("stdout");
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let mut s = Server {
            child,
            grpc: None,
            http: None,
            dir,
            lines,
            seen: Vec::new(),
        };
        let deadline = Instant::now() + Duration::from_secs(30);
        while s.grpc.is_none() || s.http.is_none() {
            let left = deadline.saturating_duration_since(Instant::now());
            let line = s.lines.recv_timeout(left).unwrap_or_else(|_| {
                let status = s.child.try_wait();
                panic!("no `listening` lines from the server (exit: {status:?})")
            });
            s.seen.push(line.clone());
            if let Some(a) = line.strip_prefix("listening grpc ") {
                s.grpc = Some(a.to_owned());
            } else if let Some(a) = line.strip_prefix("listening http ") {
                s.http = Some(a.to_owned());
            }
        }
        s
    }

    /// The address of the listener its `listening WHAT ADDR` line names (waiting for the line,
    /// bounded).
    pub fn listening(&mut self, what: &str) -> String {
        let prefix = format!("listening {what} ");
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(a) = self.seen.iter().find_map(|l| l.strip_prefix(&prefix)) {
                return a.to_owned();
            }
            let left = deadline.saturating_duration_since(Instant::now());
            let line = self
                .lines
                .recv_timeout(left)
                .unwrap_or_else(|_| panic!("no `{prefix}` line from the server"));
            self.seen.push(line);
        }
    }

    /// The server's process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.http.as_deref().unwrap_or_default())
    }

    /// Sends SIGTERM and waits (bounded) for the exit status.
    pub fn terminate(&mut self) -> std::process::ExitStatus {
        let pid = self.child.id().to_string();
        let sent = Command::new("kill").args(["-TERM", &pid]).status();
        assert!(sent.is_ok_and(|s| s.success()), "kill -TERM failed");
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Some(st) = self.child.try_wait().expect("wait") {
                return st;
            }
            assert!(
                Instant::now() < deadline,
                "server did not exit after SIGTERM"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// curl's answer: the HTTP status and the body.
pub struct Reply {
    pub status: u16,
    pub body: String,
}

/// Runs curl with `args` (a URL among them), bounded in time.
pub fn curl(args: &[&str]) -> Reply {
    let out = Command::new("curl")
        .args(["-s", "--max-time", "10", "-w", "\n%{http_code}"])
        .args(args)
        .output()
        .expect("run curl");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (body, code) = text.rsplit_once('\n').unwrap_or(("", &text));
    Reply {
        status: code.trim().parse().unwrap_or(0),
        body: body.to_owned(),
    }
}

/// Sends `body` to `/json` `n` times on one connection; returns (answered 200, answered 429).
/// Any other answer fails the test.
pub fn send(s: &Server, body: &str, n: usize) -> (u64, u64) {
    send_to(&s.url("/json"), body, n)
}

/// As [`send`], to the `/json` endpoint at `url` (for a thread that does not hold the server).
pub fn send_to(url: &str, body: &str, n: usize) -> (u64, u64) {
    let mut args: Vec<&str> = vec![
        "-s",
        "--max-time",
        "20",
        "-w",
        "%{http_code}\n",
        "-X",
        "POST",
        "-H",
        "content-type: application/json",
        "--data-binary",
        body,
    ];
    for _ in 0..n {
        args.extend(["-o", "/dev/null", url]);
    }
    let out = Command::new("curl").args(&args).output().expect("run curl");
    let text = String::from_utf8_lossy(&out.stdout);
    let codes: Vec<&str> = text.lines().collect();
    assert_eq!(codes.len(), n, "every request answered: {text}");
    let ok = codes.iter().filter(|c| **c == "200").count() as u64;
    let over = codes.iter().filter(|c| **c == "429").count() as u64;
    assert_eq!(ok + over, n as u64, "only 200 and 429: {text}");
    (ok, over)
}

/// POSTs `body` to `/json`.
pub fn post_json(s: &Server, body: &str) -> Reply {
    curl(&[
        "-X",
        "POST",
        "-H",
        "content-type: application/json",
        "--data-binary",
        body,
        &s.url("/json"),
    ])
}

/// envoy-types' `proto` directory, found through `cargo metadata`.
pub fn envoy_proto_dir() -> Option<PathBuf> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = Command::new(cargo)
        .args(["metadata", "--format-version", "1"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .stderr(Stdio::null())
        .output()
        .ok()?;
    let meta: serde_json::Value = serde_json::from_slice(&out.stdout).ok()?;
    let manifest = meta["packages"]
        .as_array()?
        .iter()
        .find(|p| p["name"] == "envoy-types")?["manifest_path"]
        .as_str()?
        .to_owned();
    let dir = Path::new(&manifest).parent()?.join("proto");
    dir.is_dir().then_some(dir)
}

/// The Python interpreter (`CELLGATE_PYTHON`, else `python3`) if it imports `modules`.
pub fn python_with(modules: &str) -> Option<String> {
    let py = std::env::var("CELLGATE_PYTHON").unwrap_or_else(|_| "python3".into());
    let ok = Command::new(&py)
        .args(["-c", &format!("import {modules}")])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    ok.then_some(py)
}

/// The value of `s`'s metric line starting with `series` (0 when absent).
pub fn metric(s: &Server, series: &str) -> i64 {
    let text = curl(&[&s.url("/metrics")]).body;
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.trim().parse().ok())
        .unwrap_or(0)
}

/// Waits (bounded) until `f` holds, polling; panics with `what` otherwise.
pub fn eventually(what: &str, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !f() {
        assert!(Instant::now() < deadline, "timed out waiting for: {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// What grpc.health.v1's `Check` answers for `service` on the gRPC listener at `addr` (tonic
/// health's client): the status number (1 SERVING, 2 NOT_SERVING), or the gRPC error's code.
pub fn grpc_health(addr: &str, service: &str) -> Result<i32, tonic::Code> {
    use tonic_health::pb::{health_client::HealthClient, HealthCheckRequest};
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async {
        let channel = tonic::transport::Channel::from_shared(format!("http://{addr}"))
            .map_err(|_| tonic::Code::InvalidArgument)?
            .connect()
            .await
            .map_err(|_| tonic::Code::Unavailable)?;
        let mut c = HealthClient::new(channel);
        let r = c
            .check(HealthCheckRequest {
                service: service.into(),
            })
            .await
            .map_err(|s| s.code())?;
        Ok(r.into_inner().status)
    })
}
