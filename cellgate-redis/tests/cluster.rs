//! Redis Cluster: a real cluster of three masters and three replicas on loopback, started by
//! the test (`redis-server --cluster-enabled yes`, `redis-cli --cluster create`). Limits are
//! spread over the masters (each limit's keys on one slot, by its hash tag), and so are the
//! keys of one per-key limit (its shards' hash tags). Unplanned failovers are in
//! `cluster_failover`.

use crate::common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use cellgate_redis::wire::KeyedClient;
use cellgate_redis::{Fleet, KeyedFleet};
use common::RedisServer;

/// The cluster's slot of limit `name` (its keys share the hash tag `{name}`).
pub(crate) fn slot(node: &RedisServer, name: &str) -> u16 {
    node.cmd(&["CLUSTER", "KEYSLOT", &cellgate_redis::wire::keys(name)[0]])
}

/// One line of `CLUSTER NODES`: (id, port, is master, master id, slot ranges).
struct ClusterNode {
    id: String,
    port: u16,
    master: bool,
    master_id: String,
    slots: Vec<(u16, u16)>,
}

fn cluster_nodes(node: &RedisServer) -> Vec<ClusterNode> {
    let text: String = node.cmd(&["CLUSTER", "NODES"]);
    text.lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            let port = f.get(1)?.split(['@', ':']).nth(1)?.parse().ok()?;
            let slots = f[8.min(f.len())..]
                .iter()
                .filter_map(|r| {
                    let (a, b) = r.split_once('-').unwrap_or((r, r));
                    Some((a.parse().ok()?, b.parse().ok()?))
                })
                .collect();
            Some(ClusterNode {
                id: f[0].to_owned(),
                port,
                master: f.get(2)?.contains("master"),
                master_id: f.get(3)?.to_string(),
                slots,
            })
        })
        .collect()
}

/// The port of the master serving `slot`, as `node` sees the cluster.
pub(crate) fn master_of(node: &RedisServer, slot: u16) -> Option<u16> {
    cluster_nodes(node)
        .iter()
        .find(|n| n.master && n.slots.iter().any(|(a, b)| (*a..=*b).contains(&slot)))
        .map(|n| n.port)
}

/// The port of the master serving `slot`, and of its replica.
pub(crate) fn master_and_replica(node: &RedisServer, slot: u16) -> (u16, u16) {
    let all = cluster_nodes(node);
    let port = master_of(node, slot).expect("a master for the slot");
    let master = all.iter().find(|n| n.port == port).expect("listed");
    let replica = all
        .iter()
        .find(|n| !n.master && n.master_id == master.id)
        .expect("a replica of the master");
    (master.port, replica.port)
}

/// A keyed client of the per-key stock `limit` (`units` a key), for the names and slots of its
/// keys, with the runtime it was connected on (keep it while the client is used).
pub(crate) fn probe(
    seeds: &str,
    limit: &str,
    units: u64,
) -> (tokio::runtime::Runtime, KeyedClient) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let client = rt
        .block_on(KeyedClient::connect(
            seeds,
            limit,
            0,
            units,
            "probe",
            Duration::from_secs(1),
        ))
        .unwrap();
    (rt, client)
}

#[test]
fn limits_on_three_masters_each_sell_exactly() {
    let Some(nodes) = common::cluster() else {
        return;
    };
    let seeds = common::seeds(&nodes);
    // One limit name per master (redis-cli splits the 16,384 slots in three ranges).
    let mut names: Vec<String> = Vec::new();
    let mut masters = std::collections::HashSet::new();
    for i in 0.. {
        let name = format!("spread{i}");
        let (master, _) = master_and_replica(&nodes[0], slot(&nodes[0], &name));
        if masters.insert(master) {
            names.push(name);
        }
        if masters.len() == 3 {
            break;
        }
    }
    let stock = 2_000u64;
    let fleets: Vec<(String, Arc<Fleet>)> = names
        .iter()
        .flat_map(|n| {
            (0..2).map(|_| {
                // Generous timeouts: a lease whose replica acknowledgement times out on a
                // loaded machine is not sold (an undersell by design), and this test counts
                // an exact sale.
                let f = Fleet::stock(n, stock)
                    .max_lease(100)
                    .command_timeout(Duration::from_secs(2))
                    .replica_wait(Duration::from_secs(1))
                    .connect(&seeds)
                    .unwrap();
                (n.clone(), Arc::new(f))
            })
        })
        .collect();
    let sellers: Vec<_> = fleets
        .iter()
        .map(|(n, f)| {
            let (n, f) = (n.clone(), f.clone());
            std::thread::spawn(move || {
                let deadline = Instant::now() + Duration::from_secs(5);
                let mut sold = 0u64;
                while Instant::now() < deadline && sold < stock {
                    sold += u64::from(f.check().is_allowed());
                }
                (n, sold)
            })
        })
        .collect();
    let mut per_name = std::collections::HashMap::new();
    for s in sellers {
        let (n, sold) = s.join().unwrap();
        *per_name.entry(n).or_insert(0u64) += sold;
    }
    eprintln!("sold per limit on three masters: {per_name:?}");
    for n in &names {
        assert_eq!(per_name[n], stock, "limit {n}");
    }
    // A per-key stock on the cluster too (its keys share the limit's slot).
    let skus = KeyedFleet::stock("skus", 5).connect(&seeds).unwrap();
    let sold = (0..10)
        .filter(|_| skus.check_blocking("sku-1", 1).is_allowed())
        .count();
    assert_eq!(sold, 5);
}

#[test]
fn a_master_failover_mid_sale_oversells_nothing() {
    let Some(nodes) = common::cluster() else {
        return;
    };
    let seeds = common::seeds(&nodes);
    let stock = 3_000u64;
    let fleets: Vec<Arc<Fleet>> = (0..2)
        .map(|_| {
            Arc::new(
                Fleet::stock("failover", stock)
                    .max_lease(50)
                    .connect(&seeds)
                    .unwrap(),
            )
        })
        .collect();
    let sellers = common::Sellers::start(&fleets);
    common::wait_for("the first 500 sales", || sellers.sold() >= 500);
    let (master, replica) = master_and_replica(&nodes[0], slot(&nodes[0], "failover"));
    let replica_node = nodes.iter().find(|n| n.port == replica).unwrap();
    replica_node.cmd::<()>(&["CLUSTER", "FAILOVER"]);
    common::wait_for("the replica to take over", || {
        master_of(replica_node, slot(replica_node, "failover")) == Some(replica)
    });
    let at_failover = sellers.sold();
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline && sellers.sold() < stock {
        std::thread::sleep(Duration::from_millis(20));
    }
    // Sell on a little past the end: nothing more may be sold.
    std::thread::sleep(Duration::from_millis(300));
    let sold = sellers.stop();
    eprintln!(
        "failover from :{master} to :{replica} after {at_failover} sold: {sold} of {stock} sold"
    );
    assert!(sold <= stock, "sold {sold} of {stock}");
    // The sale went on after the failover. A lease whose replica acknowledgement did not come
    // across the switch is not sold (an undersell by design): at most one per fleet.
    assert!(
        sold >= stock - 2 * 50 && sold > at_failover,
        "the sale did not go on after the failover: {sold} of {stock}"
    );
}

#[test]
fn fleet_node_takes_the_seed_urls() {
    let Some(nodes) = common::cluster() else {
        return;
    };
    let seeds = common::seeds(&nodes);
    let args = ["--name", "nodes", "--stock", "1000"];
    let sold: u64 = (0..2)
        .map(|_| common::node(&seeds, &args, "1", 1))
        .collect::<Vec<_>>()
        .into_iter()
        .map(|n| n.finish(Duration::from_secs(30)))
        .sum();
    assert_eq!(sold, 1000);
}

/// One per-key limit's keys land on more than one master (its keys are spread over
/// `CLUSTER_SHARDS` hash tags), and every key's stock is still exact: two limiters sell 60 keys
/// of 5 units each through the seeds, and Redis holds exactly 5 taken of each. (Before the
/// shards every key of a limit shared its slot: one master.)
#[test]
fn a_keyed_limits_keys_spread_over_the_masters() {
    let Some(nodes) = common::cluster() else {
        return;
    };
    let seeds = common::seeds(&nodes);
    let units = 5u64;
    let keys: Vec<String> = (0..60).map(|k| format!("sku{k}")).collect();
    // Where each key lives: the key names the client would use, their slots, their masters.
    let (_rt, probe) = probe(&seeds, "spread-keys", units);
    assert_eq!(probe.shards(), cellgate_redis::wire::CLUSTER_SHARDS);
    let mut masters = std::collections::HashMap::new();
    for k in &keys {
        let slot: u16 = nodes[0].cmd(&["CLUSTER", "KEYSLOT", &probe.redis_key(k)]);
        let master = master_of(&nodes[0], slot).expect("a master for the slot");
        *masters.entry(master).or_insert(0u32) += 1;
    }
    eprintln!("60 keys of one limit over the masters: {masters:?}");
    assert!(
        masters.len() >= 2,
        "one master holds every key: {masters:?}"
    );
    let fleets: Vec<KeyedFleet> = (0..2)
        .map(|_| {
            KeyedFleet::stock("spread-keys", units)
                .max_wait(Duration::from_secs(2))
                .command_timeout(Duration::from_secs(1))
                .connect(&seeds)
                .unwrap()
        })
        .collect();
    let mut sold = std::collections::HashMap::new();
    for round in 0..(2 * units) {
        for k in &keys {
            let f = &fleets[(round % 2) as usize];
            *sold.entry(k.clone()).or_insert(0u64) +=
                u64::from(f.check_blocking(k, 1).is_allowed());
        }
    }
    for f in &fleets {
        f.shutdown();
    }
    for k in &keys {
        assert_eq!(sold[k], units, "{k} sold");
        let slot: u16 = nodes[0].cmd(&["CLUSTER", "KEYSLOT", &probe.redis_key(k)]);
        let port = master_of(&nodes[0], slot).unwrap();
        let node = nodes.iter().find(|n| n.port == port).unwrap();
        let taken: u64 = node.cmd(&["GET", &probe.redis_key(k)]);
        assert_eq!(taken, units, "{k}: taken in Redis");
    }
}

/// The per-key stock `name` of 3 units a key, as the lost-shard tests use it.
pub(crate) fn stock_of_3(name: &str) -> cellgate_redis::KeyedFleetBuilder {
    KeyedFleet::stock(name, 3)
        .max_wait(Duration::from_secs(2))
        .command_timeout(Duration::from_secs(1))
}

/// What `fleet` sells of `key` in five checks.
fn sell_out(fleet: &KeyedFleet, key: &str) -> usize {
    (0..5)
        .filter(|_| fleet.check_blocking(key, 1).is_allowed())
        .count()
}

/// A key of a keyed limit on the cluster in shard 0 (`in_shard_0`) or in another shard.
fn key_in(in_shard_0: bool) -> String {
    let shards = cellgate_redis::wire::CLUSTER_SHARDS;
    (0..)
        .map(|k| format!("sku{k}"))
        .find(|k| (cellgate_redis::wire::shard_of(k, shards) == 0) == in_shard_0)
        .unwrap()
}

/// Loses `key`'s shard of the per-key stock `limit` (`units` a key) on the master of its slot,
/// as a restart without persistence would: the shard's configuration, holders and replies and
/// the key's count are deleted. Returns the master and the key's name in Redis.
fn lose_shard<'a>(
    nodes: &'a [RedisServer],
    limit: &str,
    units: u64,
    key: &str,
) -> (&'a RedisServer, String) {
    let (_rt, probe) = probe(&common::seeds(nodes), limit, units);
    let state_key = probe.redis_key(key);
    let tag = &state_key[state_key.find('{').unwrap()..=state_key.find('}').unwrap()];
    let slot: u16 = nodes[0].cmd(&["CLUSTER", "KEYSLOT", &state_key]);
    let port = master_of(&nodes[0], slot).unwrap();
    let master = nodes.iter().find(|n| n.port == port).unwrap();
    for k in ["kconf", "kholders", "kreplies"] {
        master.cmd::<u64>(&["DEL", &format!("cellgate:{tag}:{k}")]);
    }
    master.cmd::<u64>(&["DEL", &state_key]);
    (master, state_key)
}

/// A shard of a per-key stock that Redis lost (here its keys deleted on its master, as a
/// failover to a replica without them would) is never sold afresh: every shard carries the
/// limit's epoch, so the limiter that used it finds it forgotten at its next check, and a
/// process starting afterwards, which never used that shard, fails to connect instead of
/// creating it anew.
#[test]
fn a_lost_shard_of_a_per_key_stock_is_never_sold_afresh() {
    use cellgate_redis::{FleetError, FleetState};
    let Some(nodes) = common::cluster() else {
        return;
    };
    let seeds = common::seeds(&nodes);
    let stock = || stock_of_3("lost-shard").connect(&seeds);
    let key = key_in(false);
    let a = stock().unwrap();
    assert_eq!(sell_out(&a, &key), 3);
    // The shard's keys, on the master of their slot, are lost.
    let (master, state_key) = lose_shard(&nodes, "lost-shard", 3, &key);
    // A newcomer does not create the shard afresh.
    let late = stock();
    assert!(
        matches!(late, Err(FleetError::Forgotten)),
        "a newcomer connected to a limit with a lost shard: {late:?}"
    );
    // The limiter that sold there finds it lost, and sells nothing more of the key.
    assert!(!a.check_blocking(&key, 1).is_allowed());
    assert_eq!(a.state(), FleetState::Forgotten);
    let taken: Option<u64> = master.cmd(&["GET", &state_key]);
    assert_eq!(taken, None, "the lost key was created again");
}

/// Two processes registering a new per-key stock at the same moment: the one that did not
/// create shard 0 reaches the other shards before their creator does (or the creator stopped
/// after shard 0). It creates them with the limit's epoch instead of taking them for lost, and
/// both sell everywhere. Once a process has seen every shard, shard 0 is marked complete, and a
/// shard lost after that is found forgotten by every process, one that never used it too.
#[test]
fn a_stock_registered_by_two_processes_at_once_sells_on_every_shard() {
    use cellgate_redis::wire::KeyOp;
    use cellgate_redis::FleetError;
    let Some(nodes) = common::cluster() else {
        return;
    };
    let seeds = common::seeds(&nodes);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let client = |pid: &str| {
        rt.block_on(KeyedClient::connect(
            &seeds,
            "at-once",
            0,
            10,
            pid,
            Duration::from_secs(1),
        ))
        .unwrap()
    };
    let (mut a, mut b) = (client("a"), client("b"));
    let shards = a.shards();
    let keys: Vec<String> = (0..shards)
        .map(|s| {
            (0..)
                .map(|k| format!("sku{k}"))
                .find(|k| a.shard(k) == s)
                .unwrap()
        })
        .collect();
    let one = |k: &str| vec![(k.to_owned(), KeyOp::Check, 1)];
    // `a` creates the limit's shard 0, and goes no further for now.
    rt.block_on(a.batch_on(0, 1, &[], true)).unwrap();
    let first = rt.block_on(b.batch_on(0, 1, &one(&keys[0]), true)).unwrap();
    assert!(
        !first.complete,
        "complete before any process saw every shard"
    );
    for (s, key) in keys.iter().enumerate().skip(1) {
        let r = rt
            .block_on(b.batch_on(s, 1, &one(key), true))
            .unwrap_or_else(|e| panic!("shard {s} not yet created by its creator: {e}"));
        assert_eq!((r.epoch, r.results[0].value), (first.epoch, 1), "shard {s}");
    }
    for (s, key) in keys.iter().enumerate().skip(1) {
        let r = rt.block_on(a.batch_on(s, 1, &one(key), true)).unwrap();
        assert_eq!((r.epoch, r.results[0].value), (first.epoch, 1), "shard {s}");
    }
    // `b` has seen every shard with the limit's epoch: its next batch on shard 0 marks it.
    assert!(rt.block_on(b.batch_on(0, 2, &[], true)).unwrap().complete);
    // A config written before the mark existed has no such field: it counts as complete.
    let conf = format!("cellgate:{{{}}}:kconf", a.tag(0));
    let slot: u16 = nodes[0].cmd(&["CLUSTER", "KEYSLOT", &conf]);
    let port = master_of(&nodes[0], slot).unwrap();
    let master = nodes.iter().find(|n| n.port == port).unwrap();
    assert_eq!(master.cmd::<u64>(&["HDEL", &conf, "complete"]), 1);
    // A shard lost now is not created afresh: not by a newcomer, nor by `a`.
    lose_shard(&nodes, "at-once", 10, &keys[1]);
    let mut c = client("c");
    assert!(rt.block_on(c.batch_on(0, 1, &[], true)).unwrap().complete);
    let late = rt.block_on(c.batch_on(1, 1, &one(&keys[1]), true));
    assert!(matches!(late, Err(FleetError::Forgotten)), "{late:?}");
    let again = rt.block_on(a.batch_on(1, 2, &one(&keys[1]), true));
    assert!(matches!(again, Err(FleetError::Forgotten)), "{again:?}");
}

/// What `fleet` sells of `key` while it starts (until it says the limit is forgotten, at most
/// 10 s), and in five checks afterwards.
fn sold_until_forgotten(fleet: &KeyedFleet, key: &str) -> usize {
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut sold = 0;
    while Instant::now() < deadline && fleet.state() != cellgate_redis::FleetState::Forgotten {
        sold += usize::from(fleet.check_blocking(key, 1).is_allowed());
        std::thread::sleep(Duration::from_millis(5));
    }
    sold + sell_out(fleet, key)
}

/// Shard 0 of a per-key stock (the limit's configuration and its keys) lost while no process
/// is running; a process then starts lazily (`start`, which runs in the outage fallback until
/// Redis answers). It is the first to see the limit, so it creates shard 0 afresh with its
/// own epoch, and only the other shards, which kept the old epoch, tell that the limit was
/// lost: it must compare them before selling anything, as `connect` does, and find the whole
/// limit forgotten instead of selling shard 0's keys a second time.
#[test]
fn a_lazy_start_never_sells_afresh_a_lost_shard_0() {
    use cellgate_redis::{FleetError, FleetState};
    let Some(nodes) = common::cluster() else {
        return;
    };
    let seeds = common::seeds(&nodes);
    let stock = || stock_of_3("lost-first");
    let key = key_in(true);
    {
        let a = stock().connect(&seeds).unwrap();
        assert_eq!(sell_out(&a, &key), 3);
        a.shutdown();
    }
    // Shard 0 is lost (its configuration, holders, replies and the sold-out key).
    lose_shard(&nodes, "lost-first", 3, &key);
    // A process starting lazily sells nothing of the key, while it starts and afterwards.
    let late = stock().start(&seeds).unwrap();
    let sold = sold_until_forgotten(&late, &key);
    assert_eq!(sold, 0, "a lazy start sold a lost shard's key afresh");
    assert_eq!(late.state(), FleetState::Forgotten);
    // And `connect` refuses the limit too (it adopts the new shard 0 and finds the others
    // forgotten: that marks them).
    let other = stock().connect(&seeds);
    assert!(
        matches!(other, Err(FleetError::Forgotten)),
        "connected to a limit whose shard 0 was lost: {other:?}"
    );
    // So does a second lazy start, which adopts shard 0's new epoch: the forgotten shards it
    // meets before selling stop the whole limit, shard 0's keys included.
    let third = stock().start(&seeds).unwrap();
    let sold = sold_until_forgotten(&third, &key);
    assert_eq!(
        sold, 0,
        "a lazy start sold a key of a limit with forgotten shards"
    );
    assert_eq!(third.state(), FleetState::Forgotten);
    // Shard 0's own state says so too (not merely out).
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline && third.state_of(&key) != FleetState::Forgotten {
        std::thread::sleep(Duration::from_millis(5));
    }
    assert_eq!(third.state_of(&key), FleetState::Forgotten);
    assert_eq!(late.state_of(&key), FleetState::Forgotten);
}

/// Two keys of the keyed limit `probe` names, on two masters, neither of them the master of
/// shard 0 (where every process heartbeats): `(sick, its master's port, healthy)`.
pub(crate) fn apart(nodes: &[RedisServer], probe: &KeyedClient) -> (String, u16, String) {
    let master_of_key = |key: &str| {
        let slot: u16 = nodes[0].cmd(&["CLUSTER", "KEYSLOT", &probe.redis_key(key)]);
        master_of(&nodes[0], slot).expect("a master for the slot")
    };
    let master0 = master_of_key(
        &(0..)
            .map(|k| format!("k{k}"))
            .find(|k| probe.shard(k) == 0)
            .unwrap(),
    );
    let sick = (0..)
        .map(|k| format!("sick{k}"))
        .find(|k| master_of_key(k) != master0)
        .unwrap();
    let sick_master = master_of_key(&sick);
    let healthy = (0..)
        .map(|k| format!("healthy{k}"))
        .find(|k| ![master0, sick_master].contains(&master_of_key(k)))
        .unwrap();
    (sick, sick_master, healthy)
}

/// One master of a cluster stops answering the scripts (`CLIENT PAUSE ... WRITE`: its
/// connections stay open, no failover starts) while a per-key rate is checked on its keys and
/// on keys of another master: only the paused master's part of the limit is out. Its keys are
/// decided by the outage fallback, and its shard says `Fallback` with the timeout; the keys on
/// the master that answers are still checked in Redis, exactly (5 of 10 for a burst of 5),
/// and their shard says `Connected`; the limit's `state()` is the worst of its shards'. (Before
/// the shards had their own states, one shard's timeout put every key in the fallback: this
/// test's healthy key was decided `Fallback` in all 9 checks, two runs in two.)
#[test]
fn a_master_that_does_not_answer_puts_only_its_keys_in_the_fallback() {
    use cellgate_redis::{FleetError, FleetState, Via};
    let Some(nodes) = common::cluster() else {
        return;
    };
    let seeds = common::seeds(&nodes);
    let name = "parts";
    let (_rt, probe) = probe(&seeds, name, 1);
    let (sick, sick_master, healthy) = apart(&nodes, &probe);
    // 5 per minute per key, burst 5: ten quick checks of a key admit exactly 5 in Redis.
    // Generous waits: on a loaded machine a healthy master's answer may take a while, and a
    // check decided by the fallback for that would not say which part is out. The paused
    // master's batch fails at the command timeout.
    // Every key stays cold (checked in Redis, never leased): quick checks would make a key hot.
    let users = KeyedFleet::rate(name, 5, Duration::from_secs(60))
        .hot_rate(1_000_000)
        .max_wait(Duration::from_secs(3))
        .command_timeout(Duration::from_secs(1))
        .connect(&seeds)
        .unwrap();
    assert_eq!(users.check_blocking(&healthy, 1).via(), Via::Redis);
    assert_eq!(users.check_blocking(&sick, 1).via(), Via::Redis);
    let paused = nodes.iter().find(|n| n.port == sick_master).unwrap();
    paused.cmd::<()>(&["CLIENT", "PAUSE", "20000", "WRITE"]);
    // The sick key's batch is not answered: decided by the fallback, its shard is out.
    let d = users.check_blocking(&sick, 1);
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        assert_eq!(d.via(), Via::Fallback);
        // The other master's key is still checked in Redis, exactly: 4 more of its burst of 5.
        let healthy_checks: Vec<_> = (0..9).map(|_| users.check_blocking(&healthy, 1)).collect();
        let vias: Vec<Via> = healthy_checks.iter().map(|d| d.via()).collect();
        assert!(
            vias.iter().all(|v| *v == Via::Redis),
            "a key on a master that answers was not checked in Redis: {vias:?}; shards out: {:?}",
            users
                .shard_states()
                .iter()
                .filter(|s| s.state != FleetState::Connected)
                .collect::<Vec<_>>()
        );
        let admitted = healthy_checks.iter().filter(|d| d.is_allowed()).count();
        assert_eq!(admitted, 4, "admitted of the healthy key's last 9 checks");
        // The sick key's next checks are decided at once, by the fallback.
        assert_eq!(users.check_blocking(&sick, 1).via(), Via::Fallback);
        // Which part is out.
        assert_eq!(users.state_of(&healthy), FleetState::Connected);
        assert_eq!(users.state_of(&sick), FleetState::Fallback);
        assert_eq!(users.state(), FleetState::Fallback);
        let shards = users.shard_states();
        let out: Vec<_> = shards
            .iter()
            .filter(|s| s.state != FleetState::Connected)
            .collect();
        let sick_tag = probe.tag(probe.shard(&sick));
        assert_eq!(out.len(), 1, "shards out: {out:?}");
        assert_eq!(out[0].tag, sick_tag);
        // The shard's master did not answer in time (the task's or redis-rs's timeout).
        let timed_out = match out[0].last_error.as_ref().map(|e| &e.error) {
            Some(FleetError::Timeout) => true,
            Some(FleetError::Redis(e)) => e.is_timeout(),
            _ => false,
        };
        assert!(timed_out, "{:?}", out[0].last_error);
    }));
    paused.cmd::<()>(&["CLIENT", "UNPAUSE"]);
    if let Err(p) = result {
        std::panic::resume_unwind(p);
    }
    // Once the master answers again, its shard is back (its batch, retried, is answered).
    common::wait_for("the shard to answer again", || {
        users.state() == FleetState::Connected
    });
    assert!(users
        .shard_states()
        .iter()
        .all(|s| s.state == FleetState::Connected));
}

/// The replica of one master is frozen (SIGSTOP): that master's batches of a per-key stock are
/// executed but never acknowledged, so what they take is not sold and their shard goes
/// `Partitioned` with `NotReplicated`; a key on another master is still sold in Redis, and
/// its shard says `Connected`. Once the replica is thawed, the shard's heartbeat is
/// acknowledged and the sick key sells again. (Before the shards had their own states, one
/// unacknowledged batch put the whole limit in `Partitioned`: the healthy key's checks were
/// denied.)
#[test]
fn a_master_whose_replica_does_not_acknowledge_stops_only_its_keys_of_a_stock() {
    use cellgate_redis::{FleetError, FleetState, Via};
    let Some(nodes) = common::cluster() else {
        return;
    };
    let seeds = common::seeds(&nodes);
    let name = "parts-stock";
    let (_rt, probe) = probe(&seeds, name, 100);
    let (sick, sick_master, healthy) = apart(&nodes, &probe);
    let skus = KeyedFleet::stock(name, 100)
        .hot_rate(1_000_000)
        .max_wait(Duration::from_secs(3))
        .command_timeout(Duration::from_secs(1))
        .replica_wait(Duration::from_millis(200))
        .connect(&seeds)
        .unwrap();
    assert!(skus.check_blocking(&healthy, 1).is_allowed());
    assert!(skus.check_blocking(&sick, 1).is_allowed());
    let slot: u16 = nodes[0].cmd(&["CLUSTER", "KEYSLOT", &probe.redis_key(&sick)]);
    let (_, replica) = master_and_replica(&nodes[0], slot);
    assert_ne!(replica, sick_master);
    let frozen = nodes.iter().find(|n| n.port == replica).unwrap();
    frozen.pause();
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        // Not acknowledged: not sold, and the shard is out.
        let d = skus.check_blocking(&sick, 1);
        assert!(!d.is_allowed(), "{d:?}");
        assert_eq!(skus.state_of(&sick), FleetState::Partitioned);
        // The other master's key is still sold in Redis.
        let vias: Vec<(bool, Via)> = (0..5)
            .map(|_| skus.check_blocking(&healthy, 1))
            .map(|d| (d.is_allowed(), d.via()))
            .collect();
        assert!(
            vias.iter().all(|&(ok, via)| ok && via == Via::Redis),
            "a key on a master whose replica answers was not sold in Redis: {vias:?}"
        );
        assert_eq!(skus.state_of(&healthy), FleetState::Connected);
        assert_eq!(skus.state(), FleetState::Partitioned);
        let out: Vec<_> = skus
            .shard_states()
            .into_iter()
            .filter(|s| s.state != FleetState::Connected)
            .collect();
        assert_eq!(out.len(), 1, "shards out: {out:?}");
        assert_eq!(out[0].tag, probe.tag(probe.shard(&sick)));
        assert!(
            matches!(
                out[0].last_error.as_ref().map(|e| &e.error),
                Some(FleetError::NotReplicated)
            ),
            "{:?}",
            out[0].last_error
        );
    }));
    frozen.resume();
    if let Err(p) = result {
        std::panic::resume_unwind(p);
    }
    // The shard's next heartbeat is acknowledged: the sick key sells again.
    common::wait_for("the shard to be acknowledged again", || {
        skus.state() == FleetState::Connected
    });
    assert!(skus.check_blocking(&sick, 1).is_allowed());
}
