//! The keyed protocol (`keyed.lua`) against a model, on a real `redis-server`: random batches
//! of checks, leases, give-backs and charges on a few keys from several processes, with lost
//! replies (retried or abandoned), duplicated batches, late replays of old sequences, process
//! kills and Redis restarts. After every step, for every key, with `T` the interval, `B` the
//! burst and `t` the time since the case began:
//!
//! - granted (checks and leases executed) − given ≤ ⌊t/T⌋ + B: never more than the GCRA allows,
//!   whatever was retried or replayed;
//! - the units Redis has free now ≥ B − (granted + charged − given): nothing was debited twice
//!   (`tat − now ≤ net·T` by induction over the operations);
//! - a repeated batch returns its first answer; an older one changes nothing;
//! - a forget (`KeyOp::Forget`) starts the key's books afresh: the bounds above hold from
//!   then on with nothing granted, and it reports whether the key held state. (The model
//!   drops every process's leases of the key at a forget, as the forgetting process does;
//!   what other processes still hold is the documented carve-out of `KeyedFleet::forget`.)
//!
//! The same steps run against a per-key stock (`T = 0`, `B` units per key), where time
//! gives nothing back: granted − given ≤ B at every step, and the units Redis has left are
//! exactly max(0, B − (granted + charged − given)): nothing taken twice, nothing lost.

use crate::common;

use common::{fate, Fate};

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use cellgate_redis::wire::{BatchReply, KeyOp, KeyedClient};
use proptest::prelude::*;

const T_US: u64 = 200_000;

/// A batch's operations.
type Ops = Vec<(String, KeyOp, u64)>;
const B: u64 = 12;
const KEYS: usize = 3;

#[derive(Debug, Clone, Copy)]
enum Item {
    Check(usize, u64),
    Lease(usize, u64),
    /// Give back this percentage of what the process holds of the key.
    Give(usize, u64),
    Charge(usize, u64),
    Forget(usize),
}

#[derive(Debug, Clone)]
enum Step {
    Batch {
        p: usize,
        items: Vec<Item>,
        fate: Fate,
    },
    Replay {
        p: usize,
        back: usize,
    },
    Kill {
        p: usize,
    },
    RestartRedis,
}

fn item() -> impl Strategy<Value = Item> {
    prop_oneof![
        3 => (0..KEYS, 0..6u64).prop_map(|(k, n)| Item::Check(k, n)),
        3 => (0..KEYS, 0..10u64).prop_map(|(k, n)| Item::Lease(k, n)),
        2 => (0..KEYS, 0..=100u64).prop_map(|(k, p)| Item::Give(k, p)),
        1 => (0..KEYS, 0..4u64).prop_map(|(k, n)| Item::Charge(k, n)),
        1 => (0..KEYS).prop_map(Item::Forget),
    ]
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        8 => (0..3usize, proptest::collection::vec(item(), 0..6), fate())
            .prop_map(|(p, items, fate)| Step::Batch { p, items, fate }),
        1 => (0..3usize, 0..8usize).prop_map(|(p, back)| Step::Replay { p, back }),
        1 => (0..3usize).prop_map(|p| Step::Kill { p }),
        1 => Just(Step::RestartRedis),
    ]
}

struct Proc {
    client: KeyedClient,
    seq: u64,
    /// Leased units held per key, not yet admitted or given back.
    held: [u64; KEYS],
    /// Executed batches, oldest first.
    history: Vec<(u64, Ops)>,
}

/// What the server executed, per key.
#[derive(Debug, Default, Clone, Copy)]
struct Books {
    granted: u64,
    given: u64,
    charged: u64,
}

static CASE: AtomicU64 = AtomicU64::new(0);

async fn call(c: &mut KeyedClient, seq: u64, ops: &[(String, KeyOp, u64)]) -> BatchReply {
    for _ in 0..200 {
        // Every third batch refreshes the holder (as the limiter does once a heartbeat).
        match c.batch(seq, ops, seq.is_multiple_of(3)).await {
            Ok(r) => return r,
            Err(_) => tokio::time::sleep(Duration::from_millis(20)).await,
        }
    }
    panic!("redis never answered");
}

async fn new_proc(url: &str, name: &str, t_us: u64, id: usize) -> Proc {
    let client = KeyedClient::connect(
        url,
        name,
        t_us,
        B,
        &format!("p{id}"),
        Duration::from_millis(500),
    )
    .await
    .expect("connect");
    Proc {
        client,
        seq: 0,
        held: [0; KEYS],
        history: Vec::new(),
    }
}

fn key(k: usize) -> String {
    format!("key{k}")
}

/// Runs `steps` on a rate (`t_us` the interval) or, with `t_us == 0`, a stock.
fn run(server: &mut common::RedisServer, t_us: u64, steps: &[Step]) -> Result<(), TestCaseError> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let name = format!("kmodel{}", CASE.fetch_add(1, Ordering::Relaxed));
    let url = server.url();
    let mut next_id = 0;
    let mut procs = Vec::new();
    for _ in 0..3 {
        procs.push(rt.block_on(new_proc(&url, &name, t_us, next_id)));
        next_id += 1;
    }
    let mut probe = rt.block_on(new_proc(&url, &name, t_us, 999));
    let mut books = [Books::default(); KEYS];
    let start = Instant::now();
    // Per key: when its books began (the case's start, or the batch of its last forget).
    let mut since = [start; KEYS];
    for s in steps {
        match s {
            Step::Batch { p, items, fate } => {
                let pr = &mut procs[*p];
                // Give-backs are withdrawn locally first: never admitted, whatever happens.
                let ops: Ops = items
                    .iter()
                    .map(|i| match *i {
                        Item::Check(k, n) => (key(k), KeyOp::Check, n),
                        Item::Lease(k, n) => (key(k), KeyOp::Lease, n),
                        Item::Give(k, percent) => {
                            let x = pr.held[k] * percent / 100;
                            pr.held[k] -= x;
                            (key(k), KeyOp::Give, x)
                        }
                        Item::Charge(k, n) => (key(k), KeyOp::Charge, n),
                        Item::Forget(k) => {
                            // Its leases are dropped, never given back after the forget.
                            pr.held[k] = 0;
                            (key(k), KeyOp::Forget, 0)
                        }
                    })
                    .collect();
                pr.seq += 1;
                let seq = pr.seq;
                let sent = Instant::now();
                let reply = rt.block_on(async {
                    match fate {
                        Fate::NeverArrived => None,
                        Fate::Delivered | Fate::LostAbandoned => {
                            Some(call(&mut pr.client, seq, &ops).await)
                        }
                        Fate::LostThenRetried | Fate::Duplicated => {
                            let a = call(&mut pr.client, seq, &ops).await;
                            let b = call(&mut pr.client, seq, &ops).await;
                            assert!(b.repeated, "a repeated batch ran again");
                            assert_eq!(a.results, b.results, "a repeat answered differently");
                            Some(a)
                        }
                    }
                });
                let mut forgotten = Vec::new();
                if let Some(r) = reply {
                    prop_assert!(!r.stale);
                    prop_assert_eq!(r.results.len(), ops.len());
                    for (i, res) in items.iter().zip(&r.results) {
                        match *i {
                            Item::Check(k, n) => {
                                prop_assert!(res.value == 0 || res.value == n);
                                books[k].granted += res.value;
                            }
                            Item::Lease(k, n) => {
                                prop_assert!(res.value <= n);
                                books[k].granted += res.value;
                                if !matches!(fate, Fate::LostAbandoned) {
                                    pr.held[k] += res.value;
                                }
                            }
                            Item::Give(k, _) => books[k].given += res.value,
                            Item::Charge(k, _) => books[k].charged += res.value,
                            Item::Forget(k) => {
                                prop_assert!(res.value <= 1);
                                if t_us == 0 {
                                    // A stock holds state exactly while something is taken.
                                    let b = books[k];
                                    let taken = b.granted + b.charged > b.given;
                                    prop_assert_eq!(res.value == 1, taken, "key{}: {:?}", k, b);
                                }
                                books[k] = Books::default();
                                since[k] = sent;
                                forgotten.push(k);
                            }
                        }
                    }
                    pr.history.push((seq, ops));
                }
                for k in forgotten {
                    for other in &mut procs {
                        other.held[k] = 0;
                    }
                }
            }
            Step::Replay { p, back } => {
                // An executed batch older than the newest executed one arrives late: stale.
                let pr = &mut procs[*p];
                let h = pr.history.len();
                if h >= 2 {
                    let (seq, ops) = pr.history[h - 2 - back % (h - 1)].clone();
                    let r = rt.block_on(call(&mut pr.client, seq, &ops));
                    prop_assert!(r.stale, "a late replay of batch {} ran: {:?}", seq, r);
                }
            }
            Step::Kill { p } => {
                // What it held is lost with it (never given back).
                procs[*p] = rt.block_on(new_proc(&url, &name, t_us, next_id));
                next_id += 1;
            }
            Step::RestartRedis => {
                server.stop();
                server.start();
            }
        }
        // The books against the bounds.
        probe.seq += 1;
        let probes: Vec<_> = (0..KEYS).map(|k| (key(k), KeyOp::Check, 0)).collect();
        let free = rt.block_on(call(&mut probe.client, probe.seq, &probes));
        for (k, b) in books.iter().enumerate() {
            let elapsed = since[k].elapsed().as_micros() as u64;
            let net = b.granted - b.given;
            // A stock (`t_us == 0`): time gives nothing back.
            let upper = elapsed.checked_div(t_us).unwrap_or(0) + B;
            prop_assert!(
                net <= upper,
                "key{}: granted {} net > R·t + B = {}: {:?}",
                k,
                net,
                upper,
                b
            );
            let free = u64::try_from(free.results[k].info.max(0)).unwrap();
            prop_assert!(free <= B, "key{}: {} free above the burst", k, free);
            let debited = (b.granted + b.charged) as i64 - b.given as i64;
            if t_us == 0 {
                prop_assert_eq!(
                    free as i64,
                    (B as i64 - debited).max(0),
                    "key{}: stock left after {:?}",
                    k,
                    b
                );
            }
            prop_assert!(
                free as i64 >= B as i64 - debited,
                "key{}: {} free after {:?}: debited twice",
                k,
                free,
                b
            );
        }
    }
    Ok(())
}

#[test]
fn keyed_protocol_matches_the_model() {
    common::model_cases(step(), |server, steps| run(server, T_US, steps));
}

#[test]
fn keyed_stock_protocol_matches_the_model() {
    common::model_cases(step(), |server, steps| run(server, 0, steps));
}
