//! redis-cell's `CL.THROTTLE` over the Redis protocol (RESP2 and RESP3): point any Redis client
//! at this listener and change nothing else.
//!
//! # Commands
//!
//! - `CL.THROTTLE key max_burst count_per_period period [quantity]`: redis-cell 0.2.2's reply,
//!   integer for integer: `[limited 0|1, limit, remaining, retry_after, reset_after]` (seconds,
//!   `retry_after` `-1` when allowed). Parameters travel with each call. Inputs on which
//!   redis-cell crashes or wraps (zero or negative values, overflowing periods, huge bursts) are
//!   error replies. Keys are bounded by [`RespConfig::max_keys`]: a key whose backlog drained
//!   frees its slot; when every slot holds a backlog, a call for a new key gets an error reply
//!   until some drain (fail closed).
//! - What clients send around it, answered as Redis 7.0 does: `HELLO [2|3] [AUTH ..] [SETNAME
//!   ..]` (switches the connection's protocol), `AUTH`, `CLIENT SETNAME|GETNAME|SETINFO|ID`,
//!   `CONFIG GET`, `PING [msg]`, `ECHO`, `SELECT 0` (the only database), `QUIT`, `RESET`,
//!   `COMMAND [COUNT|INFO|DOCS]`, `INFO`. Anything else: Redis's `ERR unknown command` reply.
//!
//! # Input limits
//!
//! Every bound is a [`RespConfig`] field: argument count, bulk length, inline line length, bytes
//! buffered per connection, connections (Redis's `ERR max number of clients reached`, then
//! close), the time a started command may take to arrive, and an optional idle timeout. A
//! header is checked before any byte it announces is awaited or kept. Protocol errors get
//! Redis's `ERR Protocol error: ...` reply, then the connection closes.
//!
//! # Pipelining
//!
//! Each read is followed by decoding every complete command in the buffer, and their replies go
//! out in order in one write. Connections run as tasks on tokio's multi-thread runtime.

use std::future::Future;
use std::io;
use std::sync::Arc;
use std::time::Duration;

use cellgate::{KeyedLimiter, Quota, WhenFull};
use tokio::net::TcpListener;
use tokio::sync::{watch, Semaphore};

mod conn;
mod decode;
#[doc(hidden)]
pub mod fuzzing;
mod inline;
mod introspect;
mod reply;
mod session;
mod table;
pub(crate) mod throttle;

/// The RESP listener's limits. Every field has a documented default ([`Default`]).
///
/// ```
/// use cellgate_server::resp::RespConfig;
/// let config = RespConfig { max_connections: 100, ..RespConfig::default() };
/// assert_eq!(config.max_args, 1024);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RespConfig {
    /// Most connections served at once; the next one gets `ERR max number of clients reached`
    /// and is closed. Default 10 000.
    pub max_connections: usize,
    /// Most arguments in one command, its name included. Default 1024.
    pub max_args: usize,
    /// Longest argument (bulk string), bytes. Default 64 KiB.
    pub max_bulk_len: usize,
    /// Longest inline command line, and longest `*N`/`$N` header line, bytes. Default 64 KiB.
    pub max_inline_len: usize,
    /// Most bytes of unanswered input held per connection (a partly received command and what
    /// follows it); beyond it the connection gets an error and is closed. Default 1 MiB.
    pub max_query_bytes: usize,
    /// How long a command may take to arrive once its first byte did, and how long a reply may
    /// take to be written; past it the connection is closed (other clients are never held up
    /// by it meanwhile). Default 30 s.
    pub command_timeout: Duration,
    /// Closes a connection idle (between commands) this long; `None`, Redis's default, never.
    pub idle_timeout: Option<Duration>,
    /// Most `CL.THROTTLE` keys held (see the module docs for what happens at the cap). Default
    /// 1 000 000.
    pub max_keys: usize,
}

impl Default for RespConfig {
    fn default() -> Self {
        Self {
            max_connections: 10_000,
            max_args: 1024,
            max_bulk_len: 64 * 1024,
            max_inline_len: 64 * 1024,
            max_query_bytes: 1024 * 1024,
            command_timeout: Duration::from_secs(30),
            idle_timeout: None,
            max_keys: 1_000_000,
        }
    }
}

impl RespConfig {
    fn limits(&self) -> decode::Limits {
        decode::Limits {
            max_args: self.max_args,
            max_bulk_len: self.max_bulk_len,
            max_inline_len: self.max_inline_len,
        }
    }
}

/// What every connection shares.
pub(crate) struct Shared {
    pub(crate) config: RespConfig,
    pub(crate) limiter: KeyedLimiter<Vec<u8>>,
    pub(crate) ids: crate::sync::ClientIds,
    connections: Arc<Semaphore>,
    /// Fleet mode: `CL.THROTTLE` keys shared through Redis instead of `limiter`.
    #[cfg(feature = "server")]
    pub(crate) fleet: Option<crate::fleet::Throttles>,
}

impl Shared {
    fn new(config: RespConfig) -> io::Result<Self> {
        let invalid = |what: String| io::Error::new(io::ErrorKind::InvalidInput, what);
        let most = Semaphore::MAX_PERMITS.min(u32::MAX as usize);
        if config.max_connections == 0 || config.max_connections > most {
            return Err(invalid(format!(
                "max_connections must be between 1 and {most}"
            )));
        }
        if config.max_args == 0 || config.max_query_bytes == 0 {
            return Err(invalid(
                "max_args and max_query_bytes must be positive".into(),
            ));
        }
        // Each call brings its own quota; the limiter's own is only what judges keys for
        // eviction, so it is the shortest possible: a key is dropped only once drained, never
        // with a backlog, and a full store refuses new keys rather than forgetting live ones.
        let limiter = KeyedLimiter::gcra(Quota::with_interval(Duration::from_nanos(1)))
            .max_keys(config.max_keys)
            .when_full(WhenFull::DenyNew)
            .build()
            .map_err(|e| invalid(format!("max_keys: {e}")))?;
        Ok(Self {
            connections: Arc::new(Semaphore::new(config.max_connections)),
            config,
            limiter,
            ids: crate::sync::ClientIds::new(),
            #[cfg(feature = "server")]
            fleet: None,
        })
    }

    /// Connections being served.
    pub(crate) fn connected(&self) -> usize {
        self.config.max_connections - self.connections.available_permits()
    }
}

/// Serves RESP clients on `listener` until `shutdown` completes; then stops accepting, answers
/// the batches in progress, closes the connections and returns.
///
/// ```no_run
/// use cellgate_server::resp::{serve, RespConfig};
/// # async fn run() -> std::io::Result<()> {
/// let listener = tokio::net::TcpListener::bind("127.0.0.1:6380").await?;
/// serve(listener, RespConfig::default(), async {
///     let _ = tokio::signal::ctrl_c().await;
/// })
/// .await
/// # }
/// ```
///
/// # Errors
///
/// An [`io::ErrorKind::InvalidInput`] error when `config` is invalid (a zero bound, or
/// `max_keys` beyond what the key store holds).
pub async fn serve(
    listener: TcpListener,
    config: RespConfig,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> io::Result<()> {
    run(listener, Arc::new(Shared::new(config)?), shutdown).await
}

/// As [`serve`], with `CL.THROTTLE` keys shared through Redis by every server given the same
/// `fleet`: one fleet rate per parameter set (`max_burst`, `count`, `period`), at most
/// `max_fleet_limits` of them (a call bringing one more gets an error reply). `limited` is the
/// fleet's decision; `remaining` is what this server holds leased for the key (0 for a key it
/// checks in Redis), `retry_after` the wait Redis reports (`-1` when unknown), `reset_after` 0
/// when admitted and `retry_after` when limited. On shutdown the leases go back to Redis.
///
/// ```no_run
/// use cellgate_server::fleet::FleetOptions;
/// use cellgate_server::resp::{serve_fleet, RespConfig};
/// # async fn run() -> std::io::Result<()> {
/// let listener = tokio::net::TcpListener::bind("127.0.0.1:6380").await?;
/// let fleet = FleetOptions::new("redis://10.0.0.7:6379");
/// serve_fleet(listener, RespConfig::default(), fleet, 64, async {
///     let _ = tokio::signal::ctrl_c().await;
/// })
/// .await
/// # }
/// ```
///
/// # Errors
///
/// As [`serve`], and an [`io::ErrorKind::InvalidInput`] error for an invalid Redis URL.
#[cfg(feature = "server")]
pub async fn serve_fleet(
    listener: TcpListener,
    config: RespConfig,
    fleet: crate::fleet::FleetOptions,
    max_fleet_limits: usize,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> io::Result<()> {
    let max_hot = config.max_keys / max_fleet_limits.max(1);
    let throttles = crate::fleet::Throttles::new(fleet, max_fleet_limits, max_hot)
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
    let mut shared = Shared::new(config)?;
    shared.fleet = Some(throttles);
    let shared = Arc::new(shared);
    run(listener, Arc::clone(&shared), shutdown).await?;
    let done = Arc::clone(&shared);
    let _ = tokio::task::spawn_blocking(move || {
        if let Some(t) = &done.fleet {
            t.shutdown();
        }
    })
    .await;
    Ok(())
}

async fn run(
    listener: TcpListener,
    shared: Arc<Shared>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> io::Result<()> {
    let (stop_tx, stop_rx) = watch::channel(false);
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            () = &mut shutdown => break,
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => admit(stream, &shared, &stop_rx),
                Err(e) => {
                    // Out of file descriptors and the like: wait a little rather than spin.
                    tracing::warn!(error = %e, "resp: accept failed");
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
            },
        }
    }
    drop(listener);
    let _ = stop_tx.send(true);
    // Every connection holds a permit until it ends: all of them back means all ended.
    let all = u32::try_from(shared.config.max_connections).unwrap_or(u32::MAX);
    let _ = shared.connections.acquire_many(all).await;
    Ok(())
}

fn admit(stream: tokio::net::TcpStream, shared: &Arc<Shared>, stop: &watch::Receiver<bool>) {
    let Ok(permit) = shared.connections.clone().try_acquire_owned() else {
        // A fresh socket's send buffer is empty, so this non-blocking write goes out whole.
        let _ = stream.try_write(b"-ERR max number of clients reached\r\n");
        return;
    };
    let shared = Arc::clone(shared);
    let stop = stop.clone();
    tokio::spawn(async move {
        if let Err(e) = conn::run(stream, &shared, stop).await {
            tracing::debug!(error = %e, "resp: connection ended");
        }
        drop(permit);
    });
}
