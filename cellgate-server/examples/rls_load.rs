//! Load generator for Envoy's RLS v3: drives a running cellgate-server over gRPC and reports
//! requests per second and latency percentiles.
//!
//! ```text
//! cargo run --release -p cellgate-server -- --config cellgate-server/config &
//! cargo run --release -p cellgate-server --example rls_load -- --addr 127.0.0.1:8081 \
//!     --connections 4 --in-flight 64 --descriptors 3 --keys 1000000 --seconds 10
//! ```
//!
//! Requests are in the sample config's `edge` domain: `remote_address` (one key per client
//! address, `--keys` of them), and with `--descriptors 3` also `destination_cluster=payments`
//! and `path=/api/N`. Two comparisons:
//! - `--baseline redis --redis redis://127.0.0.1:6379`: each request answered by one Redis
//!   pipeline of `INCRBY` + `EXPIRE` per descriptor (envoyproxy/ratelimit's design), no gRPC;
//! - `--baseline empty`: the same gRPC load against an in-process RLS server whose handler
//!   answers OK at once (the transport's own cost).

use std::time::{Duration, Instant};

use envoy_types::pb::envoy::extensions::common::ratelimit::v3::{
    rate_limit_descriptor::Entry, RateLimitDescriptor,
};
use envoy_types::pb::envoy::service::ratelimit::v3::{
    rate_limit_response::Code,
    rate_limit_service_client::RateLimitServiceClient,
    rate_limit_service_server::{RateLimitService, RateLimitServiceServer},
    RateLimitRequest, RateLimitResponse,
};
use tonic::transport::Channel;

struct Args {
    addr: String,
    connections: usize,
    in_flight: usize,
    descriptors: usize,
    keys: u64,
    seconds: u64,
    baseline: Option<String>,
    redis: String,
}

fn parse() -> Result<Args, String> {
    let mut a = Args {
        addr: "127.0.0.1:8081".into(),
        connections: 4,
        in_flight: 64,
        descriptors: 1,
        keys: 1_000,
        seconds: 10,
        baseline: None,
        redis: "redis://127.0.0.1:6379".into(),
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().ok_or(format!("{flag} needs a value"));
        let num = |v: String| v.parse::<u64>().map_err(|e| format!("{v}: {e}"));
        match flag.as_str() {
            "--addr" => a.addr = value()?,
            "--connections" => a.connections = num(value()?)?.max(1) as usize,
            "--in-flight" => a.in_flight = num(value()?)?.max(1) as usize,
            "--descriptors" => a.descriptors = num(value()?)?.clamp(1, 3) as usize,
            "--keys" => a.keys = num(value()?)?.max(1),
            "--seconds" => a.seconds = num(value()?)?.max(1),
            "--baseline" => a.baseline = Some(value()?),
            "--redis" => a.redis = value()?,
            other => return Err(format!("unknown flag {other}")),
        }
    }
    Ok(a)
}

/// A deterministic key sequence per worker (splitmix64), so runs ask for the same keys and
/// workers do not repeat each other's.
struct Keys(u64);

impl Keys {
    fn next(&mut self, n: u64) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        (z ^ (z >> 31)) % n
    }
}

fn entries(k: u64, descriptors: usize) -> Vec<Vec<(&'static str, String)>> {
    let mut d = vec![vec![(
        "remote_address",
        format!("10.{}.{}.{}", k >> 16, (k >> 8) & 255, k & 255),
    )]];
    if descriptors == 3 {
        d.push(vec![("destination_cluster", "payments".into())]);
        d.push(vec![("path", format!("/api/{}", k % 1000))]);
    }
    d
}

fn request(k: u64, descriptors: usize) -> RateLimitRequest {
    RateLimitRequest {
        domain: "edge".into(),
        descriptors: entries(k, descriptors)
            .into_iter()
            .map(|e| RateLimitDescriptor {
                entries: e
                    .into_iter()
                    .map(|(key, value)| Entry {
                        key: key.into(),
                        value,
                    })
                    .collect(),
                ..RateLimitDescriptor::default()
            })
            .collect(),
        hits_addend: 1,
    }
}

/// Per worker: latencies in microseconds, answers over the limit, errors.
#[derive(Default)]
struct Tally {
    micros: Vec<u32>,
    over: u64,
    errors: u64,
}

async fn grpc_worker(
    mut c: RateLimitServiceClient<Channel>,
    seed: u64,
    a: (usize, u64),
    end: Instant,
) -> Tally {
    let (descriptors, keys) = a;
    let mut t = Tally::default();
    let mut g = Keys(seed.wrapping_mul(0x2545_F491_4F6C_DD1D));
    while Instant::now() < end {
        let req = request(g.next(keys), descriptors);
        let start = Instant::now();
        match c.should_rate_limit(req).await {
            Ok(r) => {
                if r.into_inner().overall_code == Code::OverLimit as i32 {
                    t.over += 1;
                }
            }
            Err(_) => t.errors += 1,
        }
        t.micros
            .push(start.elapsed().as_micros().min(u32::MAX as u128) as u32);
    }
    t
}

async fn redis_worker(
    mut c: redis::aio::MultiplexedConnection,
    seed: u64,
    a: (usize, u64),
    end: Instant,
) -> Tally {
    let (descriptors, keys) = a;
    let mut t = Tally::default();
    let mut g = Keys(seed.wrapping_mul(0x2545_F491_4F6C_DD1D));
    while Instant::now() < end {
        let k = g.next(keys);
        let mut p = redis::pipe();
        for e in entries(k, descriptors) {
            let key: String = e.iter().map(|(k, v)| format!("{k}_{v}_")).collect();
            let key = format!("edge_{key}{}", 60);
            p.cmd("INCRBY")
                .arg(&key)
                .arg(1)
                .cmd("EXPIRE")
                .arg(&key)
                .arg(60)
                .ignore();
        }
        let start = Instant::now();
        let r: redis::RedisResult<Vec<i64>> = p.query_async(&mut c).await;
        match r {
            Ok(counts) => {
                if counts.iter().any(|&n| n > 100) {
                    t.over += 1;
                }
            }
            Err(_) => t.errors += 1,
        }
        t.micros
            .push(start.elapsed().as_micros().min(u32::MAX as u128) as u32);
    }
    t
}

/// The empty handler of `--baseline empty`.
struct Empty;

#[tonic::async_trait]
impl RateLimitService for Empty {
    async fn should_rate_limit(
        &self,
        _: tonic::Request<RateLimitRequest>,
    ) -> Result<tonic::Response<RateLimitResponse>, tonic::Status> {
        Ok(tonic::Response::new(RateLimitResponse {
            overall_code: Code::Ok as i32,
            ..RateLimitResponse::default()
        }))
    }
}

async fn start_empty() -> Result<String, Box<dyn std::error::Error>> {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = l.local_addr()?.to_string();
    let incoming = tokio_stream_of(l);
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(RateLimitServiceServer::new(Empty))
            .serve_with_incoming(incoming),
    );
    Ok(addr)
}

fn tokio_stream_of(
    l: tokio::net::TcpListener,
) -> impl futures_util::Stream<Item = std::io::Result<tokio::net::TcpStream>> {
    futures_util::stream::unfold(l, |l| async move {
        let r = l.accept().await.map(|(s, _)| s);
        Some((r, l))
    })
}

fn report(label: &str, a: &Args, elapsed: Duration, tallies: Vec<Tally>) {
    let mut micros: Vec<u32> = Vec::new();
    let (mut over, mut errors) = (0, 0);
    for t in tallies {
        micros.extend(t.micros);
        over += t.over;
        errors += t.errors;
    }
    micros.sort_unstable();
    let pct = |p: f64| -> u32 {
        if micros.is_empty() {
            return 0;
        }
        micros[((micros.len() as f64 * p) as usize).min(micros.len() - 1)]
    };
    let n = micros.len();
    println!(
        "{label}: {} connections, {} in flight, {} descriptor(s), {} keys: {:.0} req/s ({n} in {:.1}s), p50 {} us, p99 {} us, p99.9 {} us, over limit {over}, errors {errors}",
        a.connections,
        a.in_flight,
        a.descriptors,
        a.keys,
        n as f64 / elapsed.as_secs_f64(),
        elapsed.as_secs_f64(),
        pct(0.50),
        pct(0.99),
        pct(0.999),
    );
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut a = parse()?;
    let shape = (a.descriptors, a.keys);
    let end = Instant::now() + Duration::from_secs(a.seconds);
    let started = Instant::now();
    let mut handles = Vec::new();
    let label = match a.baseline.as_deref() {
        Some("redis") => {
            let client = redis::Client::open(a.redis.as_str())?;
            let mut conns = Vec::new();
            for _ in 0..a.connections {
                conns.push(client.get_multiplexed_async_connection().await?);
            }
            for i in 0..a.in_flight {
                let c = conns[i % conns.len()].clone();
                handles.push(tokio::spawn(redis_worker(c, i as u64 + 1, shape, end)));
            }
            "redis INCRBY+EXPIRE pipeline"
        }
        other => {
            let label = if other == Some("empty") {
                a.addr = start_empty().await?;
                "gRPC, empty handler"
            } else if other.is_none() {
                "gRPC, cellgate-server"
            } else {
                return Err(format!("unknown baseline {other:?} (redis or empty)").into());
            };
            let mut chans = Vec::new();
            for _ in 0..a.connections {
                chans.push(RateLimitServiceClient::connect(format!("http://{}", a.addr)).await?);
            }
            for i in 0..a.in_flight {
                let c = chans[i % chans.len()].clone();
                handles.push(tokio::spawn(grpc_worker(c, i as u64 + 1, shape, end)));
            }
            label
        }
    };
    let mut tallies = Vec::new();
    for h in handles {
        tallies.push(h.await?);
    }
    report(label, &a, started.elapsed(), tallies);
    Ok(())
}
