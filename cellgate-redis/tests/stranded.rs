//! Units a stock's holder took but will never sell are recorded in Redis, where an operator
//! sees the undersell. `Fleet::stock`: units no replica acknowledged (a failover could lose
//! the debit) go to the limit's `stranded` field, out of what the holder holds; a real master
//! and replica (`redis-server --replicaof`), the replica frozen mid-sale. `KeyedFleet::stock`:
//! each process's leased holding per key is in the limit's leases hash (`h:<pid>:<key>`), and
//! a process killed with `kill -9` while holding leases on several keys leaves them there as
//! each key's stranded units (`s:<key>`) once its holder expires; a clean shutdown leaves
//! nothing. The killed process is this test binary run again (`current_exe`) with only the
//! ignored test [`keyed_holder_node`] selected.

use crate::common;

use std::collections::HashMap;
use std::io::Write;
use std::process::Child;
use std::sync::mpsc::Receiver;
use std::time::{Duration, Instant};

use cellgate_redis::{Fleet, KeyedFleet, Via};

#[test]
fn unacknowledged_grants_of_a_stock_are_recorded_as_stranded() {
    let Some((master, replica)) = master_and_replica() else {
        return;
    };
    let stock = 100_000u64;
    let f = Fleet::stock("stranded", stock)
        .connect(&master.url())
        .unwrap();
    let [state, holders] = cellgate_redis::wire::keys("stranded");
    let stranded = || -> u64 {
        master
            .cmd::<Option<u64>>(&["HGET", &state, "stranded"])
            .unwrap_or(0)
    };
    assert_eq!(stranded(), 0);
    let mut sold = 0u64;
    while sold < 10 {
        sold += u64::from(f.check().is_allowed());
    }
    // From now on no grant is acknowledged.
    replica.pause();
    let deadline = Instant::now() + Duration::from_secs(10);
    while stranded() == 0 {
        if Instant::now() > deadline {
            replica.resume();
            let st: Vec<String> = master.cmd(&["HGETALL", &state]);
            panic!("nothing recorded as stranded: {st:?} {:?}", f.stats());
        }
        sold += u64::from(f.check().is_allowed());
        std::thread::sleep(Duration::from_millis(1));
    }
    f.shutdown();
    replica.resume();
    // What Redis says adds up: on sale, plus stranded, plus what the holder still holds (what
    // it sold, given nothing back of it).
    let rem: u64 = master.cmd(&["HGET", &state, "rem"]);
    let fields: Vec<(String, String)> = master.cmd(&["HGETALL", &holders]);
    let held: u64 = fields
        .iter()
        .filter(|(k, _)| k.starts_with("n:"))
        .map(|(_, v)| v.parse::<u64>().unwrap())
        .sum();
    let s = stranded();
    eprintln!("sold {sold}, rem {rem}, stranded {s}, held {held}");
    assert_eq!(
        rem + s + held,
        stock,
        "rem {rem} + stranded {s} + held {held}"
    );
    assert!(sold <= held, "sold {sold}, but the holder holds {held}");
}

/// The keys the killed process holds leases on.
const KEYS: [&str; 3] = ["sku0", "sku1", "sku2"];
/// Units of every key.
const KEY_STOCK: u64 = 1_000;
/// The environment variable that makes [`keyed_holder_node`] a node: `URL NAME`.
const NODE_ENV: &str = "CELLGATE_STRANDED_KEYED_NODE";

fn keyed(url: &str, name: &str) -> KeyedFleet {
    KeyedFleet::stock(name, KEY_STOCK)
        .max_lease(16)
        .hot_rate(50)
        // Leases are held until the process goes: neither idle nor expired within the test.
        .idle_return(Duration::from_secs(120))
        .lease_lifetime(Duration::from_secs(120))
        .max_wait(Duration::from_secs(2))
        .command_timeout(Duration::from_secs(1))
        .connect(url)
        .expect("connecting to redis-server")
}

/// The leases hash of keyed limit `name` on one Redis node, split: holdings by
/// `(pid, key)` and stranded units by key.
type Records = (HashMap<(String, String), u64>, HashMap<String, u64>);

fn records(r: &common::RedisServer, name: &str) -> Records {
    let mut held = HashMap::new();
    let mut stranded = HashMap::new();
    for (field, v) in r.hgetall(&format!("cellgate:{{{name}}}:kleases")) {
        let v: u64 = v.parse().expect("a count");
        if let Some(rest) = field.strip_prefix("h:") {
            let (pid, key) = rest.split_once(':').expect("h:<pid>:<key>");
            held.insert((pid.to_owned(), key.to_owned()), v);
        } else if let Some(key) = field.strip_prefix("s:") {
            stranded.insert(key.to_owned(), v);
        } else {
            panic!("unexpected field {field}");
        }
    }
    (held, stranded)
}

/// Checks every key until each sells from a lease, then stops selling and waits a few
/// heartbeats (the holdings are said in Redis within one).
fn hold_leases(f: &KeyedFleet) {
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut leased = [false; KEYS.len()];
    while !leased.iter().all(|&l| l) {
        assert!(
            Instant::now() < deadline,
            "no lease on every key: {:?}",
            f.stats()
        );
        for (i, k) in KEYS.iter().enumerate() {
            let d = f.check_blocking(k, 1);
            leased[i] = d.is_allowed() && d.via() == Via::Lease;
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    std::thread::sleep(Duration::from_millis(2_500));
}

/// One node, run by [`a_killed_keyed_holder_leaves_its_leases_stranded_per_key`] in a process
/// of its own: holds leases on every key, prints `held N` (its leased units, `stats().leased`),
/// then waits to be killed.
#[test]
#[ignore = "a node of a_killed_keyed_holder_leaves_its_leases_stranded_per_key, run in a child process"]
fn keyed_holder_node() {
    let Ok(setting) = std::env::var(NODE_ENV) else {
        eprintln!("{NODE_ENV} is not set: nothing to do (this test is run by another)");
        return;
    };
    let (url, name) = setting.split_once(' ').expect("URL NAME");
    let f = keyed(url, name);
    hold_leases(&f);
    let mut out = std::io::stdout().lock();
    writeln!(out, "held {}", f.stats().leased).unwrap();
    out.flush().unwrap();
    // Killed by the test long before this ends.
    std::thread::sleep(Duration::from_secs(60));
}

/// The child process, killed (SIGKILL) on drop.
struct Victim(Child, Receiver<String>);

impl Victim {
    fn start(url: &str, name: &str) -> Self {
        let (child, rx) = common::rerun_test(
            "stranded::keyed_holder_node",
            (NODE_ENV, format!("{url} {name}")),
        );
        Self(child, rx)
    }

    /// The units the node says it holds, once it does.
    fn held(&self) -> u64 {
        let deadline = Instant::now() + Duration::from_secs(40);
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let line = self.1.recv_timeout(left).expect("the node's `held` line");
            if let Some(n) = line.strip_prefix("held ") {
                return n.parse().expect("a count");
            }
        }
    }
}

impl Drop for Victim {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn a_killed_keyed_holder_leaves_its_leases_stranded_per_key() {
    let Some(r) = common::redis() else { return };
    let name = "kstranded";
    // A survivor: its heartbeats are the batches that find the victim's holder expired.
    let survivor = keyed(&r.url(), name);
    let mut victim = Victim::start(&r.url(), name);
    let held = victim.held();
    assert!(held > 0, "the node holds no lease");
    // What Redis records of the victim's holdings adds up to what it holds (said within a
    // heartbeat of its last sale).
    let deadline = Instant::now() + Duration::from_secs(10);
    let before = loop {
        let (h, s) = records(&r, name);
        assert!(s.is_empty(), "stranded while every holder lives: {s:?}");
        if h.values().sum::<u64>() == held {
            break h;
        }
        assert!(
            Instant::now() < deadline,
            "recorded holdings {h:?}, the node holds {held}"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(before.len() >= 2, "holdings of one key only: {before:?}");
    // A crash: nothing is handed back.
    victim.0.kill().unwrap();
    victim.0.wait().unwrap();
    // The holder ttl (10 s) passes; the survivor's next heartbeat reconciles it.
    let deadline = Instant::now() + Duration::from_secs(30);
    let (after_held, stranded) = loop {
        let (h, s) = records(&r, name);
        if h.is_empty() && !s.is_empty() {
            break (h, s);
        }
        assert!(
            Instant::now() < deadline,
            "not reconciled: held {h:?}, stranded {s:?}"
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    eprintln!("held {held}: recorded {before:?}, stranded {stranded:?}");
    assert!(after_held.is_empty());
    assert_eq!(stranded.values().sum::<u64>(), held, "{stranded:?}");
    for ((_, key), units) in &before {
        assert_eq!(stranded.get(key), Some(units), "{key}: {stranded:?}");
        assert!(
            *units <= r.taken(name, key),
            "{key}: stranded more than taken"
        );
    }
    // The operator's reconciliation (the README's command): the stranded units of one key
    // back on sale, the survivor sells them.
    let key = before.keys().next().map(|(_, k)| k.clone()).unwrap();
    let taken = r.taken(name, &key);
    let back: u64 = r.cmd(&[
        "EVAL",
        RECONCILE,
        "2",
        &cellgate_redis::wire::key_of(name, &key),
        &format!("cellgate:{{{name}}}:kleases"),
        &key,
    ]);
    assert_eq!(back, stranded[&key]);
    assert_eq!(r.taken(name, &key), taken - back);
    assert_eq!(records(&r, name).1.get(&key), None);
    let rest = u32::try_from(KEY_STOCK - taken + back).unwrap();
    assert!(!survivor.check_blocking(&key, rest + 1).is_allowed());
    assert!(survivor.check_blocking(&key, rest).is_allowed());
    survivor.shutdown();
    assert_eq!(
        records(&r, name).0,
        HashMap::new(),
        "the survivor held nothing"
    );
}

/// The README's reconciliation of one key's stranded units: back on sale.
const RECONCILE: &str = "local n = tonumber(redis.call('HGET', KEYS[2], 's:' .. ARGV[1]) or '0') if n > 0 then redis.call('DECRBY', KEYS[1], n) redis.call('HDEL', KEYS[2], 's:' .. ARGV[1]) end return n";

#[test]
fn a_clean_shutdown_leaves_no_keyed_holding_nor_stranded_units() {
    let Some(r) = common::redis() else { return };
    let name = "kclean";
    let f = keyed(&r.url(), name);
    hold_leases(&f);
    let held = f.stats().leased;
    let (h, s) = records(&r, name);
    assert!(held > 0 && h.len() >= 2, "{held}: {h:?}");
    assert_eq!(h.values().sum::<u64>(), held, "recorded {h:?}");
    assert!(s.is_empty(), "{s:?}");
    f.shutdown();
    let (h, s) = records(&r, name);
    assert!(h.is_empty() && s.is_empty(), "held {h:?}, stranded {s:?}");
    // And the leases went back: nothing of the stock is taken but what was sold.
    for key in KEYS {
        assert!(r.taken(name, key) < KEY_STOCK, "{key}");
    }
}

#[test]
fn unacknowledged_keyed_batches_of_a_stock_are_recorded_as_stranded_per_key() {
    let Some((master, replica)) = master_and_replica() else {
        return;
    };
    let name = "kunacked";
    let f = KeyedFleet::stock(name, KEY_STOCK)
        // Cold keys only: every check is passed through in a batch.
        .hot_rate(1_000_000)
        .max_wait(Duration::from_secs(2))
        .command_timeout(Duration::from_secs(1))
        .connect(&master.url())
        .unwrap();
    let mut sold: HashMap<&str, u64> = HashMap::new();
    let mut check = |f: &KeyedFleet, key| {
        *sold.entry(key).or_default() += u64::from(f.check_blocking(key, 1).is_allowed());
    };
    for key in KEYS {
        check(&f, key);
    }
    // From now on no batch is acknowledged.
    replica.pause();
    let deadline = Instant::now() + Duration::from_secs(10);
    while records(&master, name).1.is_empty() {
        if Instant::now() > deadline {
            replica.resume();
            panic!("nothing recorded as stranded: {:?}", f.stats());
        }
        for key in KEYS {
            check(&f, key);
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    f.shutdown();
    replica.resume();
    let (held, stranded) = records(&master, name);
    eprintln!("sold {sold:?}, stranded {stranded:?}");
    assert!(held.is_empty(), "{held:?}");
    // Every unit taken of a key was sold or is recorded as stranded.
    for key in KEYS {
        let s = stranded.get(key).copied().unwrap_or(0);
        let sold = sold.get(key).copied().unwrap_or(0);
        assert_eq!(
            master.taken(name, key),
            sold + s,
            "{key}: sold {sold}, stranded {s}"
        );
    }
}

/// A master and one replica of it, in sync.
fn master_and_replica() -> Option<(common::RedisServer, common::RedisServer)> {
    let master = common::redis()?;
    let port = master.port.to_string();
    let replica = common::redis_with(&["--replicaof", "127.0.0.1", &port])?;
    common::wait_for("the replica to sync", || {
        let info: String = master.cmd(&["INFO", "replication"]);
        info.contains("state=online")
    });
    Some((master, replica))
}
