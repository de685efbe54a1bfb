//! Unplanned failovers on the Redis Cluster of `cluster`: a master dies with writes its
//! replica never received, and the replica takes over. A stock oversells nothing through it,
//! and a stock whose creation was lost that way (nothing sold from it) is created again rather
//! than taken for lost.

use crate::cluster::{apart, master_and_replica, master_of, probe, slot, stock_of_3};
use crate::common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use cellgate_redis::{Fleet, KeyedFleet};
use common::RedisServer;

/// An unplanned failover: the master holding a stock dies with writes its replica never
/// received, and the replica takes over. Here the replica is frozen (SIGSTOP) and its link
/// cut (`CLIENT KILL TYPE replica` on the master) while the limiters go on leasing from the
/// master, then the master is killed (SIGKILL), the replica thawed and promoted (`CLUSTER
/// FAILOVER TAKEOVER`). Every lease debited while the replica was frozen is gone from the new
/// master, whose limit keeps its epoch (nothing tells it from the old one): a limiter that
/// sold those units would see them sold a second time. A lease's units are sold only once a
/// replica acknowledged its debit (`WAIT`), so nothing is oversold; the sale goes on after the
/// takeover and strands at most one lease per limiter (a debit the replica may have received
/// without acknowledging it before it froze).
///
/// The scenario of both tests below: `sellers` sell a stock of `stock` units whose keys live
/// on `slot`, through `limiters` limiters leasing at most `max_lease` units at a time;
/// `report` describes the limiters once the sale is over.
fn crash_the_master_mid_sale(
    nodes: &mut [RedisServer],
    slot: u16,
    sellers: common::Sellers,
    (stock, max_lease, limiters): (u64, u64, u64),
    report: impl Fn() -> String,
) {
    common::wait_for("the first 500 sales", || sellers.sold() >= 500);
    let (master, replica) = master_and_replica(&nodes[0], slot);
    let m = nodes.iter().position(|n| n.port == master).unwrap();
    let r = nodes.iter().position(|n| n.port == replica).unwrap();
    // The replica stops receiving the master's writes (frozen, and its link cut by the
    // master: what the master writes next is in no socket buffer of the replica either); the
    // limiters go on leasing there.
    nodes[r].pause();
    nodes[m].cmd::<u64>(&["CLIENT", "KILL", "TYPE", "replica"]);
    let at_pause = sellers.sold();
    let calls = nodes[m].script_calls();
    common::wait_for("six script calls on the master", || {
        nodes[m].script_calls() >= calls + 6
    });
    let while_paused = sellers.sold() - at_pause;
    // The master crashes with those writes; the replica takes over without it.
    nodes[m].kill();
    nodes[r].resume();
    nodes[r].cmd::<()>(&["CLUSTER", "FAILOVER", "TAKEOVER"]);
    common::wait_for("the replica to take over", || {
        master_of(&nodes[r], slot) == Some(replica)
    });
    let at_takeover = sellers.sold();
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline && sellers.sold() < stock {
        std::thread::sleep(Duration::from_millis(20));
    }
    // Sell on a little past the end: nothing more may be sold.
    std::thread::sleep(Duration::from_millis(300));
    let sold = sellers.stop();
    eprint!("{}", report());
    eprintln!(
        "unplanned failover from :{master} to :{replica}: {while_paused} sold while the replica \
         was frozen, {at_takeover} at the takeover, {sold} of {stock} in all"
    );
    assert!(sold <= stock, "sold {sold} of {stock}: oversold");
    assert!(sold > at_takeover, "the sale stopped at the takeover");
    assert!(
        sold >= stock - limiters * max_lease,
        "sold {sold} of {stock}: more than one lease per limiter stranded"
    );
}

/// [`crash_the_master_mid_sale`] with two `Fleet::stock` limiters (3,300 of 3,000 sold before
/// leases waited for a replica, three runs in three).
#[test]
fn an_unplanned_master_failover_mid_sale_oversells_nothing() {
    let Some(mut nodes) = common::cluster() else {
        return;
    };
    let seeds = common::seeds(&nodes);
    let (stock, max_lease) = (3_000u64, 50u64);
    let fleets: Vec<Arc<Fleet>> = (0..2)
        .map(|_| {
            Arc::new(
                Fleet::stock("crash", stock)
                    .max_lease(max_lease)
                    .connect(&seeds)
                    .unwrap(),
            )
        })
        .collect();
    let sellers = common::Sellers::start(&fleets);
    let slot = slot(&nodes[0], "crash");
    crash_the_master_mid_sale(&mut nodes, slot, sellers, (stock, max_lease, 2), || {
        fleets
            .iter()
            .map(|f| {
                format!(
                    "limiter: {:?}, last error {:?}\n",
                    f.state(),
                    f.last_error()
                )
            })
            .collect()
    });
}

/// [`crash_the_master_mid_sale`] with one key of a `KeyedFleet::stock` sold by two limiters:
/// the key is hot in both (leased), and its cold checks and leases ride in batches that wait
/// for a replica too.
#[test]
fn an_unplanned_master_failover_mid_sale_oversells_no_key_of_a_keyed_stock() {
    let Some(mut nodes) = common::cluster() else {
        return;
    };
    let seeds = common::seeds(&nodes);
    let (stock, max_lease) = (3_000u64, 50u64);
    let fleets: Vec<Arc<KeyedFleet>> = (0..2)
        .map(|_| {
            Arc::new(
                KeyedFleet::stock("crash-keys", stock)
                    .max_lease(max_lease)
                    .connect(&seeds)
                    .unwrap(),
            )
        })
        .collect();
    let key = "sku-1";
    let sellers = common::Sellers::selling(
        fleets
            .iter()
            .map(|f| {
                let f = f.clone();
                move || f.check_blocking(key, 1).is_allowed()
            })
            .collect(),
    );
    let (_rt, probe) = probe(&seeds, "crash-keys", stock);
    let slot: u16 = nodes[0].cmd(&["CLUSTER", "KEYSLOT", &probe.redis_key(key)]);
    crash_the_master_mid_sale(&mut nodes, slot, sellers, (stock, max_lease, 2), || {
        fleets
            .iter()
            .map(|f| {
                format!(
                    "limiter: {:?}, last error {:?}, {:?}\n",
                    f.state(),
                    f.last_error(),
                    f.stats()
                )
            })
            .collect()
    });
}

/// Connects a stock (`connect`) while the replica of the master of `slot` lags (frozen, its
/// link cut: the stock must be built with `Replication::Required`, since a master listing no
/// replica is otherwise not waited on), then crashes that master and lets the replica take
/// over without what the connection created there. The old master then comes back as the new
/// one's replica (so that `Required` sells again). Returns what `connect` returned.
fn connect_then_lose_it<T>(nodes: &mut [RedisServer], slot: u16, connect: impl FnOnce() -> T) -> T {
    let (master, replica) = master_and_replica(&nodes[0], slot);
    let m = nodes.iter().position(|n| n.port == master).unwrap();
    let r = nodes.iter().position(|n| n.port == replica).unwrap();
    nodes[r].pause();
    nodes[m].cmd::<u64>(&["CLIENT", "KILL", "TYPE", "replica"]);
    let connected = connect();
    nodes[m].kill();
    nodes[r].resume();
    nodes[r].cmd::<()>(&["CLUSTER", "FAILOVER", "TAKEOVER"]);
    common::wait_for("the replica to take over", || {
        master_of(&nodes[r], slot) == Some(replica)
    });
    nodes[m].start();
    common::wait_for("the old master to replicate the new one", || {
        let info: String = nodes[r].cmd(&["INFO", "replication"]);
        info.contains("state=online")
    });
    connected
}

/// What `check` sells of a stock of 3 once it sells again (checks until a sale, then for a
/// moment more), or `None` once `forgotten` says the stock was taken for lost. Less than 3 is
/// the fleet's undersell: a batch or lease no replica acknowledged in time while the old
/// master catches up is not sold, and its units stay debited.
fn sold_after_failover(check: impl Fn() -> bool, forgotten: impl Fn() -> bool) -> Option<usize> {
    let mut sold = 0;
    common::wait_for("a sale, or the stock forgotten", || {
        sold += usize::from(check());
        sold > 0 || forgotten()
    });
    if forgotten() {
        return None;
    }
    let until = Instant::now() + Duration::from_secs(2);
    while sold < 3 && Instant::now() < until {
        sold += usize::from(check());
        std::thread::sleep(Duration::from_millis(10));
    }
    // Nothing more than the stock, ever.
    std::thread::sleep(Duration::from_millis(100));
    Some(sold + (0..5).filter(|_| check()).count())
}

/// Sold again after the failover (not forgotten), never more than the stock of 3.
fn sells_again(sold: Option<usize>) {
    let Some(sold) = sold else {
        panic!("the stock was taken for lost");
    };
    assert!((1..=3).contains(&sold), "sold {sold} of 3");
}

/// A per-key stock registered while one master's replica lags: that master's shard is created
/// there, but no replica acknowledges it, and a failover to the replica loses the creation.
/// Nothing was sold from the shard, so the limiter creates it again (with the limit's epoch)
/// and sells the key again, rather than taking the shard for one Redis lost after selling and
/// refusing it for good. (When the limiter learned the shard's epoch from the
/// unacknowledged answer, the key was `Forgotten` here.)
#[test]
fn a_shard_created_unacknowledged_and_lost_in_a_failover_is_created_again() {
    use cellgate_redis::{FleetState, Replication};
    let Some(mut nodes) = common::cluster() else {
        return;
    };
    let seeds = common::seeds(&nodes);
    let name = "lagging-creation";
    let (_rt, probe) = probe(&seeds, name, 3);
    let (key, _, _) = apart(&nodes, &probe);
    let slot: u16 = nodes[0].cmd(&["CLUSTER", "KEYSLOT", &probe.redis_key(&key)]);
    let skus = connect_then_lose_it(&mut nodes, slot, || {
        stock_of_3(name)
            .replication(Replication::Required)
            .replica_wait(Duration::from_millis(200))
            .connect(&seeds)
    })
    .unwrap();
    sells_again(sold_after_failover(
        || skus.check_blocking(&key, 1).is_allowed(),
        || skus.state_of(&key) == FleetState::Forgotten,
    ));
}

/// The same for a whole stock: its creation (the limiter's registration) is not acknowledged
/// and lost in the failover; nothing was sold, so it is created again and sells again.
/// (Learning the epoch from the unacknowledged registration, the limiter found it `Forgotten`.)
#[test]
fn a_stock_created_unacknowledged_and_lost_in_a_failover_is_created_again() {
    use cellgate_redis::{FleetState, Replication};
    let Some(mut nodes) = common::cluster() else {
        return;
    };
    let seeds = common::seeds(&nodes);
    let slot = slot(&nodes[0], "lagging-stock");
    let stock = connect_then_lose_it(&mut nodes, slot, || {
        Fleet::stock("lagging-stock", 3)
            .command_timeout(Duration::from_secs(1))
            .replication(Replication::Required)
            .replication(Replication::Required)
            .replica_wait(Duration::from_millis(200))
            .connect(&seeds)
    });
    let stock = stock.unwrap();
    sells_again(sold_after_failover(
        || stock.check().is_allowed(),
        || stock.state() == FleetState::Forgotten,
    ));
}
