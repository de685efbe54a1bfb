//! The client: HTTP/2 connections shared by tasks, each with one request outstanding.
//!
//! Closed loop (the default): every task sends its next request when the last one is
//! answered, so `--in-flight` requests are always outstanding. Open loop (`--rate R`): the
//! tasks share a schedule of R sends a second at evenly spaced times (`start + i / R`; task
//! `t` of `M` owns the sends `t, t + M, t + 2M, ...`), released by a pacer thread into each
//! task's queue when they come, so the arrivals are as smooth as the operating system's sleep
//! allows (tens of microseconds) rather than batched on tokio's millisecond timer, which would
//! send a whole millisecond's requests at once. Every latency counts from the send's scheduled
//! time: a send that waits in its queue because its task still waits for an answer counts that
//! wait (the server's doing, not omitted). `--in-flight` must be large enough that sends seldom
//! wait; the line printed gives the rate achieved and how many sends left their queue a
//! millisecond or more after their time (`late`).

use std::time::{Duration, Instant};

use envoy_types::pb::envoy::extensions::common::ratelimit::v3::{
    rate_limit_descriptor::Entry, RateLimitDescriptor,
};
use envoy_types::pb::envoy::service::ratelimit::v3 as pb;
use envoy_types::pb::envoy::service::ratelimit::v3::{
    rate_limit_response::Code, rate_limit_service_client::RateLimitServiceClient, RateLimitRequest,
};
use tokio::sync::mpsc;
use tonic::transport::Channel;

use crate::{number, value};

pub(crate) struct Args {
    addr: String,
    connections: usize,
    in_flight: usize,
    descriptors: usize,
    keys: u64,
    seconds: u64,
    rate: Option<u64>,
    tick: Duration,
    distinct: Option<u64>,
    label: String,
    csv: bool,
    pub(crate) threads: usize,
}

impl Args {
    pub(crate) fn parse(mut it: impl Iterator<Item = String>) -> Result<Args, String> {
        let mut a = Args {
            addr: "127.0.0.1:8081".into(),
            connections: 4,
            in_flight: 64,
            descriptors: 1,
            keys: 1_000,
            seconds: 5,
            rate: None,
            tick: Duration::from_micros(200),
            distinct: None,
            label: "gRPC".into(),
            csv: false,
            threads: 0,
        };
        while let Some(flag) = it.next() {
            let it = &mut it;
            match flag.as_str() {
                "--addr" => a.addr = value(&flag, it)?,
                "--connections" => a.connections = number(&flag, it)?.max(1) as usize,
                "--in-flight" => a.in_flight = number(&flag, it)?.max(1) as usize,
                "--descriptors" => a.descriptors = number(&flag, it)?.clamp(1, 3) as usize,
                "--keys" => a.keys = number(&flag, it)?.max(1),
                "--seconds" => a.seconds = number(&flag, it)?.max(1),
                "--rate" => a.rate = Some(number(&flag, it)?.max(1)),
                "--tick-us" => a.tick = Duration::from_micros(number(&flag, it)?),
                "--distinct" => a.distinct = Some(number(&flag, it)?.max(1)),
                "--label" => a.label = value(&flag, it)?,
                "--csv" => a.csv = true,
                "--threads" => a.threads = number(&flag, it)? as usize,
                other => return Err(format!("unknown flag {other}")),
            }
        }
        Ok(a)
    }
}

/// A deterministic key sequence per task (splitmix64), so runs ask for the same keys and
/// tasks do not repeat each other's.
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

fn descriptor(entries: Vec<(&str, String)>) -> RateLimitDescriptor {
    RateLimitDescriptor {
        entries: entries
            .into_iter()
            .map(|(key, value)| Entry {
                key: key.into(),
                value,
            })
            .collect(),
        ..RateLimitDescriptor::default()
    }
}

fn request(k: u64, descriptors: usize) -> RateLimitRequest {
    let address = format!("10.{}.{}.{}", (k >> 16) & 255, (k >> 8) & 255, k & 255);
    let address = if k >> 24 == 0 {
        address
    } else {
        format!("{address}.{}", k >> 24)
    };
    let mut d = vec![descriptor(vec![("remote_address", address)])];
    if descriptors == 3 {
        d.push(descriptor(vec![("destination_cluster", "payments".into())]));
        d.push(descriptor(vec![("path", format!("/api/{}", k % 1000))]));
    }
    RateLimitRequest {
        domain: "edge".into(),
        descriptors: d,
        hits_addend: 1,
    }
}

/// Per task: latencies in microseconds, answers over the limit, errors, late sends.
#[derive(Default)]
struct Tally {
    micros: Vec<u32>,
    over: u64,
    errors: u64,
    late: u64,
}

impl Tally {
    fn record(&mut self, r: Result<tonic::Response<pb::RateLimitResponse>, tonic::Status>) {
        match r {
            Ok(r) => {
                if r.into_inner().overall_code == Code::OverLimit as i32 {
                    self.over += 1;
                }
            }
            Err(_) => self.errors += 1,
        }
    }
}

/// What one task sends, and when.
#[derive(Clone, Copy)]
struct Plan {
    task: u64,
    tasks: u64,
    descriptors: usize,
    keys: u64,
    end: Instant,
    /// Key flood: this many requests in all, each with a new key.
    distinct: Option<u64>,
}

/// Open loop's pacer: an OS thread that puts each send's scheduled time `start + i * every`
/// into the queue of the task that owns it (`i % tasks`) once that time has come, until `end`.
/// A thread rather than a tokio timer because the timer's resolution is one millisecond. It
/// wakes at most once per `tick` (`--tick-us`, default 200) and then releases every send that
/// is due, so that the client's runtime is woken from idle once per batch rather than once per
/// send (which cost the client about a quarter more CPU per request: the open loop's client
/// must not be what is measured); a send released up to a tick late counts that in its
/// latency.
fn pace(
    start: Instant,
    every: Duration,
    end: Instant,
    tick: Duration,
    tasks: usize,
) -> Vec<mpsc::UnboundedReceiver<Instant>> {
    let (txs, rxs): (Vec<_>, Vec<_>) = (0..tasks).map(|_| mpsc::unbounded_channel()).unzip();
    std::thread::spawn(move || {
        let mut i = 0u32;
        loop {
            let now = Instant::now();
            loop {
                let due = start + every * i;
                if due >= end {
                    return;
                }
                if due > now {
                    std::thread::sleep((due - now).max(tick));
                    break;
                }
                if txs[i as usize % txs.len()].send(due).is_err() {
                    return;
                }
                i += 1;
            }
        }
    });
    rxs
}

/// A send a millisecond or more after its scheduled time is counted late.
const LATE: Duration = Duration::from_millis(1);

/// One task's sends: on its own in closed loop, or those the pacer releases into `paced`.
async fn task(
    mut c: RateLimitServiceClient<Channel>,
    p: Plan,
    mut paced: Option<mpsc::UnboundedReceiver<Instant>>,
) -> Tally {
    let mut t = Tally::default();
    let mut g = Keys((p.task + 1).wrapping_mul(0x2545_F491_4F6C_DD1D));
    for j in 0u64.. {
        let key = match p.distinct {
            Some(n) => {
                let k = p.task + j * p.tasks;
                if k >= n {
                    break;
                }
                k
            }
            None => g.next(p.keys),
        };
        let start = match paced.as_mut() {
            Some(queue) => {
                let Some(due) = queue.recv().await else { break };
                if due.elapsed() >= LATE {
                    t.late += 1;
                }
                due
            }
            None if p.distinct.is_none() && Instant::now() >= p.end => break,
            None => Instant::now(),
        };
        t.record(c.should_rate_limit(request(key, p.descriptors)).await);
        let micros = start.elapsed().as_micros();
        t.micros.push(micros.min(u128::from(u32::MAX)) as u32);
    }
    t
}

pub(crate) async fn run(a: Args) -> Result<(), Box<dyn std::error::Error>> {
    let mut chans = Vec::new();
    for _ in 0..a.connections {
        chans.push(RateLimitServiceClient::connect(format!("http://{}", a.addr)).await?);
    }
    let started = Instant::now();
    let end = started + Duration::from_secs(a.seconds);
    let plan = Plan {
        task: 0,
        tasks: a.in_flight as u64,
        descriptors: a.descriptors,
        keys: a.keys,
        end,
        distinct: a.distinct,
    };
    let mut queues = a.rate.map_or_else(Vec::new, |r| {
        pace(
            started,
            Duration::from_secs(1).div_f64(r as f64),
            end,
            a.tick,
            a.in_flight,
        )
    });
    queues.reverse();
    let handles: Vec<_> = (0..a.in_flight)
        .map(|i| {
            let c = chans[i % chans.len()].clone();
            tokio::spawn(task(
                c,
                Plan {
                    task: i as u64,
                    ..plan
                },
                queues.pop(),
            ))
        })
        .collect();
    let mut tallies = Vec::new();
    for h in handles {
        tallies.push(h.await?);
    }
    report(&a, started.elapsed(), tallies);
    Ok(())
}

fn report(a: &Args, elapsed: Duration, tallies: Vec<Tally>) {
    let mut micros: Vec<u32> = Vec::new();
    let (mut over, mut errors, mut late) = (0, 0, 0);
    for t in tallies {
        micros.extend(t.micros);
        over += t.over;
        errors += t.errors;
        late += t.late;
    }
    micros.sort_unstable();
    let pct = |p: f64| -> u32 {
        let i = (micros.len() as f64 * p) as usize;
        micros
            .get(i.min(micros.len().saturating_sub(1)))
            .copied()
            .unwrap_or(0)
    };
    let n = micros.len();
    let rps = n as f64 / elapsed.as_secs_f64();
    let (p50, p99, p999) = (pct(0.50), pct(0.99), pct(0.999));
    if a.csv {
        println!("{rps:.0},{p50},{p99},{p999},{over},{errors},{late}");
        return;
    }
    let mode = match a.rate {
        Some(r) => format!("open loop at {r} req/s, {late} sent late"),
        None => "closed loop".into(),
    };
    println!(
        "{}: {rps:.0} req/s, p50 {p50} us, p99 {p99} us, p99.9 {p999} us ({n} requests in \
         {:.1} s; {} connections, {} in flight, {mode}, {} descriptor(s), {} keys); over the \
         limit {over}, errors {errors}",
        a.label,
        elapsed.as_secs_f64(),
        a.connections,
        a.in_flight,
        a.descriptors,
        a.distinct.unwrap_or(a.keys),
    );
}
