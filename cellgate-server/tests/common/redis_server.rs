//! A real `redis-server` for the fleet tests: on a free loopback port (or only a Unix socket),
//! optionally with a password, its append-only file synced on every write (so a SIGKILL loses
//! nothing it acknowledged); killed on drop.

use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::{has, need};

/// A loopback port nothing listens on now.
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port()
}

/// How a [`Redis`] is reached.
#[derive(Default)]
pub struct Reach {
    /// `requirepass`: clients must authenticate with it.
    pub password: Option<&'static str>,
    /// A Unix socket only (no TCP port).
    pub unix_socket: bool,
}

/// A `redis-server` of this test's own.
pub struct Redis {
    pub port: u16,
    pub dir: tempfile::TempDir,
    reach: Reach,
    child: Option<Child>,
}

impl Redis {
    /// On a TCP port, no password. `None` when redis-server or curl is missing (skipped, or
    /// failed under `CI=true`).
    pub fn start() -> Option<Redis> {
        Self::start_reached(Reach::default())
    }

    /// As [`Redis::start`], reached as `reach` says.
    pub fn start_reached(reach: Reach) -> Option<Redis> {
        if !need(has("redis-server"), "redis-server") || !need(has("curl"), "curl") {
            return None;
        }
        let mut r = Redis {
            port: if reach.unix_socket { 0 } else { free_port() },
            dir: tempfile::tempdir().expect("temp dir"),
            reach,
            child: None,
        };
        r.run();
        Some(r)
    }

    /// The socket's path, when it listens on one.
    pub fn socket(&self) -> std::path::PathBuf {
        self.dir.path().join("redis.sock")
    }

    /// A URL that reaches it (the password, if any, is sent by [`Redis::connection`]).
    pub fn url(&self) -> String {
        if self.reach.unix_socket {
            format!("redis+unix://{}", self.socket().display())
        } else {
            format!("redis://127.0.0.1:{}", self.port)
        }
    }

    /// A connection, authenticated when it has a password.
    pub fn connection(&self) -> redis::RedisResult<redis::Connection> {
        let mut c = redis::Client::open(self.url())?.get_connection()?;
        if let Some(p) = self.reach.password {
            redis::cmd("AUTH").arg(p).query::<()>(&mut c)?;
        }
        Ok(c)
    }

    /// Starts (again) on the same port and data, and waits until it answers PING.
    pub fn run(&mut self) {
        let mut cmd = Command::new("redis-server");
        cmd.args(["--port", &self.port.to_string(), "--bind", "127.0.0.1"])
            .args([
                "--save",
                "",
                "--appendonly",
                "yes",
                "--appendfsync",
                "always",
            ])
            .arg("--dir")
            .arg(self.dir.path());
        if let Some(p) = self.reach.password {
            cmd.args(["--requirepass", p]);
        }
        if self.reach.unix_socket {
            cmd.arg("--unixsocket").arg(self.socket());
        }
        let child = cmd
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start redis-server");
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(10);
        while !self.answers() {
            assert!(Instant::now() < deadline, "redis-server did not start");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn answers(&self) -> bool {
        self.connection()
            .and_then(|mut c| redis::cmd("PING").query::<String>(&mut c))
            .is_ok()
    }

    /// The number of keys it holds.
    pub fn dbsize(&self) -> u64 {
        self.connection()
            .and_then(|mut c| redis::cmd("DBSIZE").query(&mut c))
            .expect("DBSIZE")
    }

    /// Sends signal `sig` (`STOP`, `CONT`) to redis-server.
    pub fn signal(&self, sig: &str) {
        let pid = self.child.as_ref().expect("running").id().to_string();
        let ok = Command::new("kill")
            .args([&format!("-{sig}"), &pid])
            .status();
        assert!(ok.is_ok_and(|s| s.success()), "kill -{sig} redis-server");
    }

    /// SIGKILL, and reap.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for Redis {
    fn drop(&mut self) {
        self.kill();
    }
}
