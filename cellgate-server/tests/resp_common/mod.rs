//! What the RESP tests share: the server binary on an ephemeral port, a `redis-server` with
//! redis-cell loaded, external tools found or skipped (failed under `CI=true`), and a raw
//! socket for bytes no client library would send. Every child process is killed on drop.
#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

/// A running `cellgate-server`, killed on drop.
pub struct Server {
    child: Child,
    pub addr: SocketAddr,
}

impl Server {
    /// Starts the binary with `--resp 127.0.0.1:0` and `extra` flags, and reads its port.
    pub fn start(extra: &[&str]) -> Server {
        let mut child = Command::new(env!("CARGO_BIN_EXE_cellgate-server"))
            .args(["--resp", "127.0.0.1:0", "--grpc", "off", "--http", "off"])
            .args(extra)
            .stdout(Stdio::piped())
            .spawn()
            .expect("spawn cellgate-server");
        let stdout = child.stdout.take().expect("stdout");
        let mut lines = BufReader::new(stdout).lines();
        let addr = loop {
            let line = lines
                .next()
                .expect("cellgate-server exited before listening")
                .expect("read stdout");
            if let Some(a) = line.strip_prefix("listening resp ") {
                break a.parse().expect("address");
            }
        };
        Server { child, addr }
    }

    /// The server's process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn port(&self) -> String {
        self.addr.port().to_string()
    }

    /// Sends SIGTERM and waits for the exit status.
    pub fn terminate(mut self) -> std::process::ExitStatus {
        let pid = self.child.id().to_string();
        Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .expect("kill");
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Some(status) = self.child.try_wait().expect("wait") {
                return status;
            }
            assert!(Instant::now() < deadline, "no exit within 10 s of SIGTERM");
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

/// `name` from `PATH`, or `None` after printing why the test skips (a panic under `CI=true`).
pub fn tool(name: &str) -> Option<PathBuf> {
    let found = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|p| p.join(name))
            .find(|p| p.is_file())
    });
    if found.is_none() {
        skip(&format!(
            "{name} not found in PATH (apt-get install redis-tools redis-server)"
        ));
    }
    found
}

/// Prints why a test skips; under `CI=true` a missing tool is a failure instead.
pub fn skip(why: &str) {
    if std::env::var("CI").as_deref() == Ok("true") {
        panic!("required under CI=true: {why}");
    }
    eprintln!("SKIPPED: {why}");
}

/// Runs `redis-cli -p PORT [--no-raw] args...` and returns its stdout.
pub fn cli(cli: &PathBuf, port: &str, args: &[&str]) -> String {
    let out: Output = Command::new(cli)
        .args(["-h", "127.0.0.1", "-p", port])
        .args(args)
        .output()
        .expect("run redis-cli");
    assert!(out.status.success(), "redis-cli {args:?}: {out:?}");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A port nobody listens on right now (and its cluster-bus neighbour is not needed).
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("bind")
        .port()
}

/// A `redis-server` on a free port with `modules` loaded, no persistence; killed on drop.
pub struct RedisServer {
    child: Child,
    pub port: u16,
}

impl RedisServer {
    pub fn start(server: &PathBuf, modules: &[&str]) -> RedisServer {
        let port = free_port();
        let mut cmd = Command::new(server);
        cmd.args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no"])
            .stdout(Stdio::null());
        for m in modules {
            cmd.args(["--loadmodule", m]);
        }
        let child = cmd.spawn().expect("spawn redis-server");
        let me = RedisServer { child, port };
        let deadline = Instant::now() + Duration::from_secs(10);
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(Instant::now() < deadline, "redis-server did not listen");
            std::thread::sleep(Duration::from_millis(20));
        }
        me
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A raw connection: bytes in, bytes out, with read timeouts so a test never hangs.
pub struct Raw(pub TcpStream);

impl Raw {
    pub fn connect(addr: SocketAddr) -> Raw {
        let s = TcpStream::connect(addr).expect("connect");
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        Raw(s)
    }

    pub fn send(&mut self, bytes: &[u8]) {
        self.0.write_all(bytes).expect("write");
    }

    /// Reads until `want` bytes arrived, the peer closed, or the timeout.
    pub fn read_exact_len(&mut self, want: usize) -> Vec<u8> {
        let mut got = Vec::new();
        let mut chunk = [0u8; 4096];
        while got.len() < want {
            match self.0.read(&mut chunk) {
                Ok(0) | Err(_) => break,
                Ok(n) => got.extend_from_slice(&chunk[..n]),
            }
        }
        got
    }

    /// Sends `request` and reads a reply of exactly `expected.len()` bytes.
    pub fn round_trip(&mut self, request: &[u8], expected: &[u8]) {
        self.send(request);
        let got = self.read_exact_len(expected.len());
        assert_eq!(
            String::from_utf8_lossy(&got),
            String::from_utf8_lossy(expected),
            "reply to {:?}",
            String::from_utf8_lossy(request)
        );
    }

    /// Whether the server closed the connection (reads end) within the read timeout.
    pub fn closed(&mut self) -> bool {
        let mut chunk = [0u8; 1024];
        loop {
            match self.0.read(&mut chunk) {
                Ok(0) => return true,
                Ok(_) => continue,
                Err(e) => return e.kind() == std::io::ErrorKind::ConnectionReset,
            }
        }
    }
}

/// A command as a RESP array of bulk strings.
pub fn resp(args: &[&[u8]]) -> Vec<u8> {
    let mut out = format!("*{}\r\n", args.len()).into_bytes();
    for a in args {
        out.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
        out.extend_from_slice(a);
        out.extend_from_slice(b"\r\n");
    }
    out
}
