//! A Redis that restarts without persistence forgets every limit. A limit it forgot is never
//! started afresh: a stock is marked forgotten and sells only what the processes still hold
//! leased (state `Forgotten`, error `FleetError::Forgotten`); a rate's bucket is re-created
//! empty.

use crate::common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use cellgate_redis::wire::{Kind, LeaseClient, Op};
use cellgate_redis::{Fleet, FleetError, FleetState};

/// The server keeps nothing across a restart: no AOF, no RDB snapshot (`--save ""`).
const NO_PERSISTENCE: &[&str] = &["--appendonly", "no"];

#[test]
fn a_stock_redis_forgot_mid_sale_is_not_sold_afresh() {
    let Some(mut r) = common::redis_with(NO_PERSISTENCE) else {
        return;
    };
    let stock = 3_000u64;
    let fleets: Vec<Arc<Fleet>> = (0..3)
        .map(|_| {
            let f = Fleet::stock("forget", stock).max_lease(50);
            Arc::new(f.connect(&r.url()).unwrap())
        })
        .collect();
    let sellers = common::Sellers::start(&fleets);
    common::wait_for("the first 600 sales", || sellers.sold() >= 600);
    r.stop();
    r.start(); // empty: every limit is gone
               // Sell on for 5 s, or until the stock is oversold.
    let deadline = Instant::now() + Duration::from_secs(5);
    while Instant::now() < deadline && sellers.sold() <= stock {
        std::thread::sleep(Duration::from_millis(20));
    }
    let sold = sellers.stop();
    eprintln!("sold {sold} of {stock} through a restart that lost the data");
    assert!(sold <= stock, "sold {sold} of a stock of {stock}");
    for f in &fleets {
        assert_eq!(f.state(), FleetState::Forgotten, "the loss is visible");
        let e = f.last_error().expect("the loss is the last error");
        assert!(matches!(e.error, FleetError::Forgotten), "{}", e.error);
        assert!(e.error.to_string().contains("reset"), "{}", e.error);
    }
    // A process started after the loss does not start the stock afresh either.
    let late = Fleet::stock("forget", stock).connect(&r.url());
    assert!(
        matches!(late, Err(FleetError::Forgotten)),
        "a newcomer connected to the forgotten stock: {late:?}"
    );
    // The operator's reset: delete the limit's keys, start again with what is really left.
    for f in &fleets {
        f.shutdown();
    }
    let mut c = r.connection().unwrap();
    redis::cmd("DEL")
        .arg(&cellgate_redis::wire::keys("forget")[..])
        .query::<u64>(&mut c)
        .unwrap();
    let rest = Fleet::stock("forget", stock - sold)
        .connect(&r.url())
        .unwrap();
    common::wait_for("a sale after the reset", || rest.check().is_allowed());
    assert_eq!(rest.state(), FleetState::Connected);
}

#[test]
fn a_rate_redis_forgot_comes_back_empty() {
    let Some(mut r) = common::redis_with(NO_PERSISTENCE) else {
        return;
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    // 10 units a second, burst 100: the whole burst is taken, then Redis forgets the bucket.
    let kind = Kind::Rate {
        interval_us: 100_000,
        burst: 100,
    };
    let timeout = Duration::from_secs(2);
    let mut c = rt
        .block_on(LeaseClient::connect(&r.url(), "rate", kind, "p1", timeout))
        .unwrap();
    let first = rt.block_on(c.call(Op::Grant, 1, 1_000)).unwrap();
    assert!(
        first.value >= 90,
        "the first grant took the burst: {first:?}"
    );
    assert!(!first.forgotten);
    r.stop();
    r.start();
    let again = rt
        .block_on(async {
            let mut last = Err(FleetError::Timeout);
            for _ in 0..20 {
                last = c.call(Op::Grant, 2, 1_000).await;
                if last.is_ok() {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            last
        })
        .unwrap();
    assert!(again.forgotten, "the loss was not noticed: {again:?}");
    assert_eq!(
        again.value, 0,
        "a forgotten bucket was granted afresh: {again:?}"
    );
    // A process that never saw the old bucket starts on the same (empty) one.
    let mut late = rt
        .block_on(LeaseClient::connect(&r.url(), "rate", kind, "p2", timeout))
        .unwrap();
    let g = rt.block_on(late.call(Op::Grant, 1, 1_000)).unwrap();
    assert!(g.value <= 2, "a newcomer got a fresh burst: {g:?}");
    assert_eq!(g.epoch, again.epoch);
}

#[test]
fn a_per_key_stock_redis_forgot_is_not_sold_afresh() {
    let Some(mut r) = common::redis_with(NO_PERSISTENCE) else {
        return;
    };
    let per_key = 40u64;
    let fleets: Vec<cellgate_redis::KeyedFleet> = (0..2)
        .map(|_| {
            cellgate_redis::KeyedFleet::stock("kforget", per_key)
                .connect(&r.url())
                .unwrap()
        })
        .collect();
    let keys = ["a", "b", "c"];
    let mut sold = std::collections::HashMap::new();
    let mut sell = |fleets: &[cellgate_redis::KeyedFleet], rounds: usize| {
        for _ in 0..rounds {
            for f in fleets {
                for k in keys {
                    if f.check_blocking(k, 1).is_allowed() {
                        *sold.entry(k).or_insert(0u64) += 1;
                    }
                }
            }
        }
    };
    sell(&fleets, 10); // 20 of each key's 40
    r.stop();
    r.start(); // empty
    let deadline = Instant::now() + Duration::from_secs(3);
    while Instant::now() < deadline {
        sell(&fleets, 5);
        std::thread::sleep(Duration::from_millis(10));
    }
    eprintln!("sold per key through the loss: {sold:?}");
    for k in keys {
        assert!(sold[k] <= per_key, "key {k}: sold {} of {per_key}", sold[k]);
    }
    for f in &fleets {
        assert_eq!(f.state(), FleetState::Forgotten);
        let e = f.last_error().expect("the loss is the last error");
        assert!(matches!(e.error, FleetError::Forgotten), "{}", e.error);
    }
}
