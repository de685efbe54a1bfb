//! The connection both modes talk through: one Redis node or a Redis Cluster, reconnecting
//! in the background, every command bounded by a timeout; and what both protocols share (a
//! limit's name rules, epochs, process ids, a script call's arguments).

use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::Script;

use crate::error::FleetError;
use crate::replica::{Replicated, Replication, Watch, WatchSlot};

/// A limit name must be non-empty and free of braces (they would change the hash tag).
pub(crate) fn check_name(name: &str) -> Result<(), FleetError> {
    if name.is_empty() || name.contains(['{', '}']) {
        return Err(FleetError::Config(format!(
            "limit name {name:?} must be non-empty and contain no braces"
        )));
    }
    Ok(())
}

/// A connection to Redis (one node, or a Redis Cluster through its seed nodes) that
/// reconnects in the background, every command bounded by a timeout.
///
/// redis-rs's connection manager reconnects after an I/O error only: a connection whose
/// handshake failed otherwise (a password changed while the process ran) would fail forever.
/// So after such a failure the next command starts from a new manager (or cluster connection).
#[derive(Clone)]
pub(crate) struct Conn {
    link: Link,
    timeout: Duration,
}

/// The connection proper.
#[derive(Clone)]
enum Link {
    Single {
        manager: ConnectionManager,
        client: redis::Client,
        config: ConnectionManagerConfig,
    },
    /// Connected on the first command (and again after a failed handshake); it follows the
    /// cluster's slots (MOVED, ASK, failovers) itself.
    Cluster {
        client: redis::cluster::ClusterClient,
        conn: Option<redis::cluster_async::ClusterConnection>,
    },
}

impl Conn {
    /// Connects to `url`, or with comma-separated URLs to the Redis Cluster they are seed
    /// nodes of; with `lazy`, nothing is sent until the first command (a start during an
    /// outage), else the first connection is made now.
    pub(crate) async fn open(url: &str, timeout: Duration, lazy: bool) -> Result<Self, FleetError> {
        let bad = |e: redis::RedisError| FleetError::Config(format!("redis url {url:?}: {e}"));
        if !cfg!(feature = "tls") && url.split(',').any(|u| u.trim().starts_with("rediss://")) {
            // redis-rs's own message does not say which switch of this crate turns TLS on.
            return Err(FleetError::Config(format!(
                "redis url {url:?}: rediss:// (TLS) needs cellgate-redis's `tls` feature \
                 (cellgate-redis = {{ version = \"0.1\", features = [\"tls\"] }})"
            )));
        }
        // Connecting may take longer than a command (a loaded machine, a TLS handshake); the
        // reconnects run in the background, and each command stays bounded by `timeout`.
        let connect_timeout = timeout.max(Duration::from_secs(1));
        let link = if url.contains(',') {
            let seeds: Vec<&str> = url.split(',').map(str::trim).collect();
            let client = redis::cluster::ClusterClient::builder(seeds)
                .connection_timeout(connect_timeout)
                .response_timeout(timeout)
                .retries(2)
                .build()
                .map_err(bad)?;
            Link::Cluster { client, conn: None }
        } else {
            let client = redis::Client::open(url).map_err(bad)?;
            let config = ConnectionManagerConfig::new()
                .set_connection_timeout(Some(connect_timeout))
                .set_response_timeout(Some(timeout))
                .set_min_delay(Duration::from_millis(10))
                .set_max_delay(Duration::from_millis(200))
                .set_number_of_retries(2);
            let manager = if lazy {
                ConnectionManager::new_lazy_with_config(client.clone(), config.clone())?
            } else {
                tokio::time::timeout(
                    connect_timeout.saturating_mul(2),
                    ConnectionManager::new_with_config(client.clone(), config.clone()),
                )
                .await
                .map_err(|_| FleetError::Timeout)??
            };
            Link::Single {
                manager,
                client,
                config,
            }
        };
        let mut conn = Self { link, timeout };
        if !lazy {
            conn.cluster().await?;
        }
        Ok(conn)
    }

    /// Whether this is a Redis Cluster connection (seed URLs), not one node.
    pub(crate) fn is_cluster(&self) -> bool {
        matches!(self.link, Link::Cluster { .. })
    }

    /// The cluster connection, made now if there is none (`None`: a single node).
    async fn cluster(
        &mut self,
    ) -> Result<Option<&mut redis::cluster_async::ClusterConnection>, FleetError> {
        let Link::Cluster { client, conn } = &mut self.link else {
            return Ok(None);
        };
        if conn.is_none() {
            let wait = self.timeout.max(Duration::from_secs(1)).saturating_mul(2);
            let made = tokio::time::timeout(wait, client.get_async_connection())
                .await
                .map_err(|_| FleetError::Timeout)??;
            *conn = Some(made);
        }
        Ok(conn.as_mut())
    }

    /// Runs a prepared script call (EVALSHA, loading the script on NOSCRIPT) for its reply
    /// (a list of integers, or one string of them).
    pub(crate) async fn invoke<T: redis::FromRedisValue>(
        &mut self,
        inv: &redis::ScriptInvocation<'_>,
    ) -> Result<T, FleetError> {
        // The connection has its own response timeout; this outer one also bounds a NOSCRIPT
        // reload (two round trips) and a reconnect in progress.
        let limit = self.timeout.saturating_mul(2);
        let r = match self.cluster().await? {
            Some(c) => tokio::time::timeout(limit, inv.invoke_async(c)).await,
            None => match &mut self.link {
                Link::Single { manager, .. } => {
                    tokio::time::timeout(limit, inv.invoke_async(manager)).await
                }
                Link::Cluster { .. } => return Err(FleetError::Timeout),
            },
        };
        let r = r.map_err(|_| FleetError::Timeout)?;
        self.renew_after(r).map_err(FleetError::from)
    }

    /// Runs a script call (EVALSHA of `keys` and `args`, loading the script on NOSCRIPT) and,
    /// with `wait`, `WAIT 1 <wait>` right after it in one pipeline: on one connection (the
    /// node of the keys, on a cluster), so the wait covers the script's writes. Returns the
    /// script's reply and, with `wait`, how many replicas acknowledged its writes.
    pub(crate) async fn invoke_acked<T: redis::FromRedisValue>(
        &mut self,
        script: &Script,
        keys: &[String],
        args: &[Vec<u8>],
        wait: Option<Duration>,
    ) -> Result<(T, Option<u64>), FleetError> {
        let Some(wait) = wait else {
            let mut inv = script.prepare_invoke();
            for k in keys {
                inv.key(k);
            }
            for a in args {
                inv.arg(a.as_slice());
            }
            return Ok((self.invoke(&inv).await?, None));
        };
        let ms = u64::try_from(wait.as_millis()).unwrap_or(u64::MAX).max(1);
        let mut evalsha = redis::cmd("EVALSHA");
        evalsha.arg(script.get_hash()).arg(keys.len()).arg(keys);
        for a in args {
            evalsha.arg(a.as_slice());
        }
        let mut pipe = redis::pipe();
        pipe.add_command(evalsha).cmd("WAIT").arg(1).arg(ms);
        let limit = self.timeout.saturating_mul(2) + wait;
        let mut loaded = false;
        loop {
            let r = match self.cluster().await? {
                Some(c) => tokio::time::timeout(limit, pipe.query_async(c)).await,
                None => match &mut self.link {
                    Link::Single { manager, .. } => {
                        tokio::time::timeout(limit, pipe.query_async(manager)).await
                    }
                    Link::Cluster { .. } => return Err(FleetError::Timeout),
                },
            };
            let r: redis::RedisResult<(T, u64)> = r.map_err(|_| FleetError::Timeout)?;
            // The script's error as if it had run alone (its code says what went wrong: a
            // forgotten limit, NOSCRIPT, a refused configuration).
            let r = r.map_err(|e| match e.clone().into_server_errors() {
                Some(items) if !items.is_empty() => redis::RedisError::from(items[0].1.clone()),
                _ => e,
            });
            match r {
                Err(e)
                    if e.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::NoScript)
                        && !loaded =>
                {
                    loaded = true;
                    let inv = script.prepare_invoke();
                    let load = match self.cluster().await? {
                        Some(c) => tokio::time::timeout(limit, inv.load_async(c)).await,
                        None => match &mut self.link {
                            Link::Single { manager, .. } => {
                                tokio::time::timeout(limit, inv.load_async(manager)).await
                            }
                            Link::Cluster { .. } => return Err(FleetError::Timeout),
                        },
                    };
                    load.map_err(|_| FleetError::Timeout)??;
                }
                Err(e) => {
                    if matches!(
                        e.kind(),
                        redis::ErrorKind::Server(
                            redis::ServerErrorKind::Moved | redis::ServerErrorKind::Ask
                        )
                    ) {
                        // A pipeline's redirection is not followed: start from a new cluster
                        // connection (a new slot map) for the next command.
                        if let Link::Cluster { conn, .. } = &mut self.link {
                            *conn = None;
                        }
                    }
                    return Err(self.renew_after(Err::<(), _>(e)).unwrap_err().into());
                }
                Ok((reply, acks)) => return Ok((reply, Some(acks))),
            }
        }
    }

    /// Runs a script call as [`invoke_acked`](Self::invoke_acked), waiting for a replica when
    /// `replicas` (a policy and the longest wait; `None`: this call's writes need none) asks
    /// for it on the master of `keys[0]` (for [`Replication::Auto`]: whether it has replicas,
    /// `INFO replication` read when `watch` is due), and keeping `watch` up to date: read
    /// again after an error or a wait no replica answered (maybe another master now).
    pub(crate) async fn invoke_replicated<T: redis::FromRedisValue>(
        &mut self,
        script: &Script,
        keys: &[String],
        args: &[Vec<u8>],
        replicas: Option<(Replication, Duration)>,
        watch: &mut impl WatchSlot,
    ) -> Result<(T, Replicated), FleetError> {
        let mut wait = None;
        if let Some((policy, longest)) = replicas {
            let now = std::time::Instant::now();
            let must = match watch.with(|w| w.wait(policy, now)) {
                Some(must) => must,
                None => {
                    let info = self.info_replication(&keys[0]).await;
                    watch.with(|w| {
                        w.learn(info.as_deref(), now);
                        w.wait(policy, now).unwrap_or(false)
                    })
                }
            };
            wait = must.then_some(longest);
        }
        let (reply, acks) = match self.invoke_acked(script, keys, args, wait).await {
            Ok(r) => r,
            Err(e) => {
                watch.with(Watch::stale);
                return Err(e);
            }
        };
        let replicated = match acks {
            None => Replicated::NotAsked,
            Some(0) => {
                watch.with(Watch::stale);
                Replicated::Unacked
            }
            Some(_) => Replicated::Acked,
        };
        Ok((reply, replicated))
    }

    /// The text of `INFO replication` on the node holding `key` (on a cluster: the master of
    /// its slot; a lone `INFO` would go to every master). `None` when it fails (no `+info`
    /// permission, a timeout).
    pub(crate) async fn info_replication(&mut self, key: &str) -> Option<String> {
        use redis::cluster_routing::{Route, RoutingInfo, SingleNodeRoutingInfo, SlotAddr};
        let mut cmd = redis::cmd("INFO");
        cmd.arg("replication");
        let limit = self.timeout;

        match self.cluster().await.ok()? {
            Some(c) => {
                let route =
                    SingleNodeRoutingInfo::SpecificNode(Route::with_key(key, SlotAddr::Master));
                let v = tokio::time::timeout(
                    limit,
                    c.route_command(cmd, RoutingInfo::SingleNode(route)),
                )
                .await
                .ok()?
                .ok()?;
                redis::from_redis_value::<String>(v).ok()
            }
            None => match &mut self.link {
                Link::Single { manager, .. } => {
                    tokio::time::timeout(limit, cmd.query_async(manager))
                        .await
                        .ok()?
                        .ok()
                }
                Link::Cluster { .. } => None,
            },
        }
    }

    /// Runs one command (on a cluster: on whichever node redis-rs routes it to).
    pub(crate) async fn query<T: redis::FromRedisValue>(
        &mut self,
        cmd: &redis::Cmd,
    ) -> Result<T, FleetError> {
        let limit = self.timeout;
        let r = match self.cluster().await? {
            Some(c) => tokio::time::timeout(limit, cmd.query_async(c)).await,
            None => match &mut self.link {
                Link::Single { manager, .. } => {
                    tokio::time::timeout(limit, cmd.query_async(manager)).await
                }
                Link::Cluster { .. } => return Err(FleetError::Timeout),
            },
        };
        let r = r.map_err(|_| FleetError::Timeout)?;
        self.renew_after(r).map_err(FleetError::from)
    }

    /// Starts from a new connection after a failed handshake.
    fn renew_after<T>(&mut self, r: redis::RedisResult<T>) -> redis::RedisResult<T> {
        if let Err(e) = &r {
            let handshake = e.kind() == redis::ErrorKind::AuthenticationFailed
                || matches!(e.code(), Some("NOAUTH" | "WRONGPASS"));
            if handshake {
                match &mut self.link {
                    Link::Single {
                        manager,
                        client,
                        config,
                    } => {
                        if let Ok(m) =
                            ConnectionManager::new_lazy_with_config(client.clone(), config.clone())
                        {
                            *manager = m;
                        }
                    }
                    Link::Cluster { conn, .. } => *conn = None,
                }
            }
        }
        r
    }
}

/// A new random epoch, below 2^53 (Lua numbers) and never 0 (0 means "none known").
pub(crate) fn fresh_epoch() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(crate::sync::next_sequence());
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos()),
    );
    (h.finish() & ((1 << 53) - 1)).max(1)
}

/// How long a holder may stay silent before the server reconciles it.
pub(crate) const DEFAULT_HOLDER_TTL: Duration = Duration::from_secs(10);

/// A script call's arguments, encoded.
#[derive(Default)]
pub(crate) struct Args(pub(crate) Vec<Vec<u8>>);

impl Args {
    pub(crate) fn arg<T: redis::ToRedisArgs>(&mut self, a: T) -> &mut Self {
        self.0.extend(a.to_redis_args());
        self
    }
}

/// A process id unique across the fleet and across restarts of one process.
pub(crate) fn process_id() -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let n = crate::sync::next_sequence();
    format!("{:x}-{:x}-{n}", std::process::id(), nanos)
}

#[cfg(all(test, not(feature = "tls")))]
mod tests {
    use std::time::Duration;

    #[test]
    fn rediss_without_the_tls_feature_names_the_feature() {
        let url = "rediss://127.0.0.1:1";
        let whole = crate::Fleet::stock("t", 1).start(url).unwrap_err();
        assert!(whole.to_string().contains("`tls` feature"), "{whole}");
        let seeds = "redis://127.0.0.1:1,rediss://127.0.0.1:2";
        let keyed = crate::KeyedFleet::rate("t", 1, Duration::from_secs(1))
            .start(seeds)
            .unwrap_err();
        assert!(keyed.to_string().contains("`tls` feature"), "{keyed}");
    }
}
