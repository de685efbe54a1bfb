//! Units a stock's holder took but will never sell (no replica acknowledged their grant, so a
//! failover could lose the debit) are recorded in the limit's `stranded` field in Redis, out
//! of what the holder holds: an operator sees the undersell there. A real master and replica
//! (`redis-server --replicaof`); the replica is frozen mid-sale, so grants go unacknowledged.

mod common;

use std::time::{Duration, Instant};

use cellgate_redis::Fleet;

#[test]
fn unacknowledged_grants_of_a_stock_are_recorded_as_stranded() {
    let Some(master) = common::redis() else {
        return;
    };
    let port = master.port.to_string();
    let Some(replica) = common::redis_with(&["--replicaof", "127.0.0.1", &port]) else {
        return;
    };
    common::wait_for("the replica to sync", || {
        let info: String = master.cmd(&["INFO", "replication"]);
        info.contains("state=online")
    });
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
