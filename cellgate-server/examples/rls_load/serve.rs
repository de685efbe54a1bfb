//! The servers cellgate-server is compared with, on the same gRPC stack and settings as its
//! listener (tonic; 128 streams per connection, a 5 s request timeout, 30 s keepalive pings,
//! `TCP_NODELAY`, 64 KiB messages).
//!
//! `redis-pipeline` answers as envoyproxy/ratelimit does: each limited descriptor is one
//! fixed-window counter in Redis, key `domain_key_value_..._windowstart` (the window aligned to
//! Unix time), and a request is one pipeline of `INCRBY key hits` + `EXPIRE key unit` per
//! limited descriptor; a descriptor is over its limit when its count passes the limit. Its
//! limits are the sample config's (`config/edge.yaml`) for the descriptors the load sends:
//! `remote_address` 100 a minute, `destination_cluster=payments` 50 a second, `path` 10 a
//! second per path; any other descriptor is answered OK with no limit.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::service::ratelimit::v3::{
    rate_limit_response::{rate_limit::Unit, Code, DescriptorStatus, RateLimit},
    rate_limit_service_server::{RateLimitService, RateLimitServiceServer},
    RateLimitRequest, RateLimitResponse,
};
use envoy_types::pb::google::protobuf::Duration as PbDuration;
use tokio::net::{TcpListener, TcpStream};
use tonic::{Request, Response, Status};

use crate::{number, value};

pub(crate) struct Args {
    handler: String,
    listen: String,
    redis: String,
    redis_connections: usize,
    pub(crate) threads: usize,
}

impl Args {
    pub(crate) fn parse(mut it: impl Iterator<Item = String>) -> Result<Args, String> {
        let mut a = Args {
            handler: String::new(),
            listen: "127.0.0.1:0".into(),
            redis: "redis://127.0.0.1:6379".into(),
            redis_connections: 4,
            threads: 0,
        };
        while let Some(flag) = it.next() {
            let it = &mut it;
            match flag.as_str() {
                "--handler" => a.handler = value(&flag, it)?,
                "--listen" => a.listen = value(&flag, it)?,
                "--redis" => a.redis = value(&flag, it)?,
                "--redis-connections" => a.redis_connections = number(&flag, it)?.max(1) as usize,
                "--threads" => a.threads = number(&flag, it)? as usize,
                other => return Err(format!("unknown flag {other}")),
            }
        }
        match a.handler.as_str() {
            "empty" | "redis-pipeline" => Ok(a),
            other => Err(format!("--handler {other:?}: empty or redis-pipeline")),
        }
    }
}

/// Answers OK at once, deciding nothing.
struct Empty;

#[tonic::async_trait]
impl RateLimitService for Empty {
    async fn should_rate_limit(
        &self,
        _: Request<RateLimitRequest>,
    ) -> Result<Response<RateLimitResponse>, Status> {
        Ok(Response::new(RateLimitResponse {
            overall_code: Code::Ok as i32,
            ..RateLimitResponse::default()
        }))
    }
}

/// ratelimit's design: counters in Redis, one pipeline per request.
struct Pipeline {
    /// Multiplexed connections (each pipelines the commands of concurrent requests), one
    /// picked per request by its first key's hash.
    conns: Vec<redis::aio::MultiplexedConnection>,
}

/// A descriptor's limit: requests per unit, the unit, its length in seconds.
fn limit_of(d: &RateLimitDescriptor) -> Option<(u32, Unit, u64)> {
    let [e] = d.entries.as_slice() else {
        return None;
    };
    match (e.key.as_str(), e.value.as_str()) {
        ("remote_address", _) => Some((100, Unit::Minute, 60)),
        ("destination_cluster", "payments") => Some((50, Unit::Second, 1)),
        ("path", v) if v.starts_with("/api/") => Some((10, Unit::Second, 1)),
        _ => None,
    }
}

/// ratelimit's cache key: the domain, each entry's key and value, the window's start.
fn cache_key(domain: &str, d: &RateLimitDescriptor, window_start: u64) -> String {
    let mut key = format!("{domain}_");
    for e in &d.entries {
        key.push_str(&e.key);
        key.push('_');
        key.push_str(&e.value);
        key.push('_');
    }
    key.push_str(&window_start.to_string());
    key
}

#[tonic::async_trait]
impl RateLimitService for Pipeline {
    async fn should_rate_limit(
        &self,
        request: Request<RateLimitRequest>,
    ) -> Result<Response<RateLimitResponse>, Status> {
        let req = request.into_inner();
        let hits = u64::from(req.hits_addend.max(1));
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default();
        let limits: Vec<_> = req.descriptors.iter().map(limit_of).collect();
        let mut pipe = redis::pipe();
        // Which connection: the first limited key's byte sum.
        let mut first = None;
        for (d, l) in req.descriptors.iter().zip(&limits) {
            if let Some((_, _, secs)) = l {
                let key = cache_key(&req.domain, d, now.as_secs() / secs * secs);
                first.get_or_insert_with(|| key.bytes().map(usize::from).sum::<usize>());
                pipe.cmd("INCRBY").arg(&key).arg(hits);
                pipe.cmd("EXPIRE").arg(&key).arg(*secs).ignore();
            }
        }
        let counts: Vec<u64> = match first {
            None => Vec::new(),
            Some(h) => {
                let mut c = self.conns[h % self.conns.len()].clone();
                pipe.query_async(&mut c)
                    .await
                    .map_err(|e| Status::unavailable(e.to_string()))?
            }
        };
        let mut counts = counts.into_iter();
        let statuses: Vec<DescriptorStatus> = limits
            .iter()
            .map(|l| match l {
                None => DescriptorStatus {
                    code: Code::Ok as i32,
                    ..DescriptorStatus::default()
                },
                Some((rpu, unit, secs)) => {
                    let count = counts.next().unwrap_or(0);
                    let reset = secs - now.as_secs() % secs;
                    DescriptorStatus {
                        code: if count > u64::from(*rpu) {
                            Code::OverLimit
                        } else {
                            Code::Ok
                        } as i32,
                        current_limit: Some(RateLimit {
                            name: String::new(),
                            requests_per_unit: *rpu,
                            unit: *unit as i32,
                        }),
                        limit_remaining: u64::from(*rpu).saturating_sub(count) as u32,
                        duration_until_reset: Some(PbDuration {
                            seconds: reset as i64,
                            nanos: 0,
                        }),
                        quota: None,
                    }
                }
            })
            .collect();
        let over = statuses.iter().any(|s| s.code == Code::OverLimit as i32);
        Ok(Response::new(RateLimitResponse {
            overall_code: if over { Code::OverLimit } else { Code::Ok } as i32,
            statuses,
            ..RateLimitResponse::default()
        }))
    }
}

fn incoming(l: TcpListener) -> impl futures_util::Stream<Item = std::io::Result<TcpStream>> {
    futures_util::stream::unfold(l, |l| async move {
        let r = l.accept().await.map(|(s, _)| {
            let _ = s.set_nodelay(true);
            s
        });
        Some((r, l))
    })
}

pub(crate) async fn run(a: Args) -> Result<(), Box<dyn std::error::Error>> {
    let l = TcpListener::bind(&a.listen).await?;
    let addr = l.local_addr()?;
    let router = tonic::transport::Server::builder()
        .concurrency_limit_per_connection(128)
        .max_concurrent_streams(128)
        .timeout(Duration::from_secs(5))
        .http2_keepalive_interval(Some(Duration::from_secs(30)));
    const MAX_MESSAGE: usize = 64 * 1024;
    let router = if a.handler == "empty" {
        let mut r = router;
        r.add_service(RateLimitServiceServer::new(Empty).max_decoding_message_size(MAX_MESSAGE))
    } else {
        let client = redis::Client::open(a.redis.as_str())?;
        let mut conns = Vec::new();
        for _ in 0..a.redis_connections {
            conns.push(client.get_multiplexed_async_connection().await?);
        }
        let mut r = router;
        r.add_service(
            RateLimitServiceServer::new(Pipeline { conns }).max_decoding_message_size(MAX_MESSAGE),
        )
    };
    println!("listening grpc {addr}");
    router.serve_with_incoming(incoming(l)).await?;
    Ok(())
}
