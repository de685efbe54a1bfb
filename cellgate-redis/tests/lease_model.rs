//! The lease protocol against a model, on a real `redis-server`: random sequences of grants
//! and give-backs from several processes, with lost replies (retried or abandoned), duplicated
//! commands, late replays of old sequences, process kills and Redis restarts. After every step
//! the server's books must match the model exactly, and the bounds must hold:
//! stock: Σ sold ≤ stock; rate: Σ granted net ≤ R·t + burst.

use crate::common;

use common::{fate, Fate};

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use cellgate_redis::wire::{keys, Kind, LeaseClient, Op, Reply};
use proptest::prelude::*;

#[derive(Debug, Clone, Copy)]
enum Step {
    Grant {
        p: usize,
        n: u64,
        fate: Fate,
    },
    Give {
        p: usize,
        percent: u64,
        fate: Fate,
    },
    Sell {
        p: usize,
        percent: u64,
    },
    /// An old command of `p` arrives late, after newer ones: it must change nothing.
    Replay {
        p: usize,
    },
    Kill {
        p: usize,
    },
    RestartRedis,
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        6 => (0..3usize, 0..400u64, fate()).prop_map(|(p, n, fate)| Step::Grant { p, n, fate }),
        3 => (0..3usize, 0..=100u64, fate()).prop_map(|(p, percent, fate)| Step::Give { p, percent, fate }),
        4 => (0..3usize, 0..=100u64).prop_map(|(p, percent)| Step::Sell { p, percent }),
        1 => (0..3usize).prop_map(|p| Step::Replay { p }),
        1 => (0..3usize).prop_map(|p| Step::Kill { p }),
        1 => Just(Step::RestartRedis),
    ]
}

/// One simulated process: its client, next sequence, and what it holds and sold.
struct Proc {
    client: LeaseClient,
    seq: u64,
    held: u64,
    sold: u64,
    /// Net units the server should have granted this pid (executed grants less gives).
    net: u64,
    last_give: Option<(u64, u64)>,
}

static CASE: AtomicU64 = AtomicU64::new(0);

thread_local! {
    /// The largest burst leases were ever allowed in this case (the burst less fallback
    /// reservations), from every reply seen.
    static LEASABLE: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// Calls until answered: a failure may or may not have executed, and the same sequence again
/// is safe either way (that is the property under test).
async fn call(c: &mut LeaseClient, op: Op, seq: u64, n: u64) -> Reply {
    for _ in 0..200 {
        match c.call(op, seq, n).await {
            Ok(r) => {
                LEASABLE.with(|l| l.set(l.get().max(r.leasable_burst)));
                return r;
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(20)).await,
        }
    }
    panic!("redis never answered");
}

async fn new_proc(url: &str, name: &str, kind: Kind, id: usize) -> Proc {
    let pid = format!("p{id}");
    let client = LeaseClient::connect(url, name, kind, &pid, Duration::from_millis(500))
        .await
        .expect("connect");
    Proc {
        client,
        seq: 0,
        held: 0,
        sold: 0,
        net: 0,
        last_give: None,
    }
}

fn run(server: &mut common::RedisServer, kind: Kind, steps: &[Step]) -> Result<(), TestCaseError> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let name = format!("model{}", CASE.fetch_add(1, Ordering::Relaxed));
    let url = server.url();
    let mut next_id = 0;
    let mut procs = Vec::new();
    for _ in 0..3 {
        procs.push(rt.block_on(new_proc(&url, &name, kind, next_id)));
        next_id += 1;
    }
    // Every pid ever used, with the net the server must show for it.
    let mut nets: HashMap<String, u64> = HashMap::new();
    let mut dead_sold = 0u64;
    LEASABLE.with(|l| l.set(0));
    let start = Instant::now();
    for &s in steps {
        match s {
            Step::Grant { p, n, fate } => {
                let pr = &mut procs[p];
                pr.seq += 1;
                let seq = pr.seq;
                let got = rt.block_on(async {
                    match fate {
                        Fate::NeverArrived => None,
                        Fate::Delivered => Some(call(&mut pr.client, Op::Grant, seq, n).await),
                        Fate::LostThenRetried | Fate::Duplicated => {
                            let a = call(&mut pr.client, Op::Grant, seq, n).await;
                            let b = call(&mut pr.client, Op::Grant, seq, n).await;
                            assert!(
                                b.repeated && b.value == a.value,
                                "a repeat granted anew: {a:?} {b:?}"
                            );
                            Some(a)
                        }
                        Fate::LostAbandoned => {
                            let a = call(&mut pr.client, Op::Grant, seq, n).await;
                            pr.net += a.value;
                            None
                        }
                    }
                });
                if let Some(r) = got {
                    prop_assert!(!r.stale && r.value <= n);
                    pr.held += r.value;
                    pr.net += r.value;
                }
            }
            Step::Give { p, percent, fate } => {
                let pr = &mut procs[p];
                let k = pr.held * percent / 100;
                pr.held -= k; // withdrawn locally first: never sold, whatever happens next
                pr.seq += 1;
                let seq = pr.seq;
                let executed = rt.block_on(async {
                    match fate {
                        Fate::NeverArrived => false,
                        Fate::Delivered | Fate::LostAbandoned => {
                            call(&mut pr.client, Op::Give, seq, k).await;
                            true
                        }
                        Fate::LostThenRetried | Fate::Duplicated => {
                            call(&mut pr.client, Op::Give, seq, k).await;
                            let b = call(&mut pr.client, Op::Give, seq, k).await;
                            assert!(b.repeated, "a repeated give was executed again");
                            true
                        }
                    }
                });
                if executed {
                    pr.net -= k;
                    pr.last_give = Some((seq, k));
                }
            }
            Step::Sell { p, percent } => {
                let pr = &mut procs[p];
                let x = pr.held * percent / 100;
                pr.held -= x;
                pr.sold += x;
            }
            Step::Replay { p } => {
                let pr = &mut procs[p];
                if let Some((seq, k)) = pr.last_give
                    && seq < pr.seq
                {
                    let r = rt.block_on(call(&mut pr.client, Op::Give, seq, k));
                    // Stale, or the newest executed one repeated: executed again never.
                    prop_assert!(
                        r.stale || r.repeated,
                        "a late replay of sequence {} ran: {:?}",
                        seq,
                        r
                    );
                }
            }
            Step::Kill { p } => {
                let fresh = rt.block_on(new_proc(&url, &name, kind, next_id));
                next_id += 1;
                let old = std::mem::replace(&mut procs[p], fresh);
                // What it held is gone with it; what it sold stays sold.
                nets.insert(old.client.pid().to_owned(), old.net);
                dead_sold += old.sold;
            }
            Step::RestartRedis => {
                server.stop();
                server.start();
            }
        }
        // The server's books against the model.
        let k = keys(&name);
        let state = server.hgetall(&k[0]);
        let holders = server.hgetall(&k[1]);
        for pr in &procs {
            nets.insert(pr.client.pid().to_owned(), pr.net);
        }
        let sold: u64 = procs.iter().map(|p| p.sold).sum::<u64>() + dead_sold;
        match kind {
            Kind::Stock { units } => {
                // Before the first command reaches Redis the limit does not exist yet.
                let rem: u64 = state.get("rem").map_or(units, |v| v.parse().unwrap());
                let mut total = rem;
                for (pid, net) in &nets {
                    let server_net = holders
                        .get(&format!("n:{pid}"))
                        .map_or(0, |v| v.parse().unwrap());
                    prop_assert_eq!(server_net, *net, "net units of {}", pid);
                    total += net;
                }
                prop_assert_eq!(total, units, "units created or destroyed");
                prop_assert!(sold <= units, "sold {} of a stock of {}", sold, units);
            }
            Kind::Rate { interval_us, burst } => {
                // tat ≥ first grant + G·T and tat ≤ now + leasable·T, so G ≤ ⌊t/T⌋ + leasable
                // exactly, with t the time since this case's first command.
                let leasable = LEASABLE.with(std::cell::Cell::get);
                prop_assert!(leasable <= burst);
                let net: u64 = nets.values().sum();
                let elapsed = start.elapsed().as_micros() as u64;
                let bound = elapsed / interval_us + leasable.max(1);
                prop_assert!(net <= bound, "granted {} net > R·t + B = {}", net, bound);
            }
        }
    }
    Ok(())
}

/// Runs `cases` random step sequences against one server started for this test.
fn check(kind: Kind) {
    common::model_cases(step(), |server, steps| run(server, kind, steps));
}

#[test]
fn stock_protocol_matches_the_model() {
    check(Kind::Stock { units: 1_000 });
}

#[test]
fn rate_protocol_stays_under_the_bound() {
    check(Kind::Rate {
        interval_us: 100_000,
        burst: 50,
    });
}
