//! Per-key fleet limits (`KeyedFleet`) against a real `redis-server`: the bound per key across
//! two limiters sharing a name (hot keys leased, cold keys passed through), the batching
//! (never more script calls than checks, many keys per call under concurrency), and a sick
//! Redis never holding a check past its wait.

use crate::common;

use common::wait_for;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use cellgate_redis::{FleetState, KeyedFleet, Via};

/// Per key: 20 a second, burst 8.
const RATE: f64 = 20.0;
const BURST: u64 = 8;

fn limiter(url: &str, name: &str) -> KeyedFleet {
    KeyedFleet::rate(name, 20, Duration::from_secs(1))
        .burst(BURST)
        // Generous: these tests check the bound of answered checks, not the fallback.
        .max_wait(Duration::from_secs(2))
        .command_timeout(Duration::from_secs(1))
        // Leased from 5 checks in 100 ms on.
        .hot_rate(50)
        .connect(url)
        .unwrap()
}

#[test]
fn each_key_stays_within_its_rate_across_two_limiters() {
    let Some(r) = common::redis() else { return };
    let fleets: Vec<Arc<KeyedFleet>> = (0..2)
        .map(|_| Arc::new(limiter(&r.url(), "users")))
        .collect();
    let run = Duration::from_millis(1500);
    let start = Instant::now();
    let mut threads = Vec::new();
    for f in &fleets {
        // One hot key, hammered (leased).
        let hot = f.clone();
        threads.push(std::thread::spawn(move || {
            let mut counts = common::Counts::new();
            while start.elapsed() < run {
                let d = hot.check_blocking("hot", 1);
                common::record(&mut counts, "hot", &d, 1);
                if !d.is_allowed() {
                    std::thread::yield_now();
                }
            }
            counts
        }));
        // Forty cold keys, each checked three times every 200 ms by each limiter: below
        // hot_rate, above the rate together.
        threads.push(common::cold_rounds(
            f.clone(),
            (start, run),
            (40, 3, 1),
            Duration::from_millis(200),
        ));
    }
    let (per_key, per_via) = common::tally(threads);
    let elapsed = start.elapsed().as_secs_f64();
    let stats: Vec<_> = fleets.iter().map(|f| f.stats()).collect();
    eprintln!(
        "keyed: {per_via:?} in {elapsed:.3} s, hot key admitted {}; {stats:?}",
        per_key["hot"]
    );
    for s in &stats {
        assert_eq!(s.fallback_admitted, 0, "Redis answered in time: {s:?}");
    }
    let bound = RATE * elapsed + BURST as f64;
    for (key, admitted) in &per_key {
        assert!(
            *admitted as f64 <= bound,
            "{key}: admitted {admitted} > R·T + B = {bound:.1}"
        );
    }
    assert_eq!(per_key.len(), 41);
    // The hot key was leased and used most of its rate; the cold keys went to Redis.
    assert!(per_via.get("Lease").is_some_and(|&n| n > 0), "{per_via:?}");
    assert!(per_via.get("Redis").is_some_and(|&n| n > 0), "{per_via:?}");
    assert!(
        per_key["hot"] as f64 >= 0.5 * bound,
        "the hot key got {} of {bound:.0}",
        per_key["hot"]
    );
    for f in &fleets {
        f.shutdown();
    }
    assert!(!fleets[0].check_blocking("hot", 1).is_allowed());
}

#[test]
fn cold_checks_are_batched_never_more_calls_than_checks() {
    let Some(r) = common::redis() else { return };
    let fleet = Arc::new(limiter(&r.url(), "batched"));
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    // One at a time: each check is one call at most.
    let before = r.script_calls();
    let sequential = 200u64;
    rt.block_on(async {
        for k in 0..sequential {
            let d = fleet.check(&format!("seq{k}")).await;
            assert!(d.is_allowed() && d.via() == Via::Redis, "{d:?}");
        }
    });
    let calls = r.script_calls() - before;
    eprintln!("sequential: {sequential} checks, {calls} script calls");
    assert!(calls <= sequential, "{calls} calls for {sequential} checks");

    // Many at once: many keys per call.
    let before = r.script_calls();
    let concurrent = 3_000u64;
    let admitted = rt.block_on(async {
        let mut set = tokio::task::JoinSet::new();
        for k in 0..concurrent {
            let f = fleet.clone();
            set.spawn(async move { f.check(&format!("many{}", k % 1_000)).await });
        }
        let mut admitted = 0u64;
        while let Some(d) = set.join_next().await {
            let d = d.unwrap();
            assert_eq!(d.via(), Via::Redis);
            admitted += u64::from(d.is_allowed());
        }
        admitted
    });
    let calls = r.script_calls() - before;
    eprintln!(
        "concurrent: {concurrent} checks on 1000 keys, {calls} script calls, {admitted} admitted"
    );
    assert!(
        calls * 10 <= concurrent,
        "{calls} calls for {concurrent} concurrent checks"
    );
    // Three checks of each key within the burst: all admitted.
    assert_eq!(admitted, concurrent);
    assert!(fleet.stats().passed_through >= sequential + concurrent);
}

#[test]
fn a_sick_redis_never_holds_a_cold_check_past_its_wait() {
    let Some(r) = common::redis() else { return };
    let max_wait = Duration::from_millis(50);
    let fleet = KeyedFleet::rate("sick", RATE as u32, Duration::from_secs(1))
        .burst(BURST)
        .max_wait(max_wait)
        // Far above the bound checked below: a check must not wait for the command timeout.
        .command_timeout(Duration::from_secs(3))
        .connect(&r.url())
        .unwrap();
    assert!(fleet.check_blocking("warm", 1).is_allowed());
    r.pause();
    let start = Instant::now();
    let mut admitted: HashMap<u32, u64> = HashMap::new();
    let mut via: HashMap<Via, u64> = HashMap::new();
    let mut checks = 0;
    while start.elapsed() < Duration::from_millis(600) {
        for k in 0..5u32 {
            let t = Instant::now();
            let d = fleet.check_blocking(&format!("k{k}"), 1);
            let took = t.elapsed();
            // A bound, not a benchmark: 20 times the wait, a third of the command timeout.
            assert!(took < Duration::from_secs(1), "a check waited {took:?}");
            *admitted.entry(k).or_default() += u64::from(d.is_allowed());
            *via.entry(d.via()).or_default() += 1;
            checks += 1;
        }
    }
    let outage = start.elapsed().as_secs_f64();
    assert_eq!(fleet.state(), FleetState::Fallback);
    eprintln!("sick: {checks} checks in {outage:.3} s: {via:?}, admitted {admitted:?}");
    assert_eq!(via.get(&Via::Redis), None, "Redis was frozen");
    for (k, n) in &admitted {
        // One live process: its share is the whole rate, burst one, during the outage.
        assert!(
            *n as f64 <= RATE * outage + 1.0,
            "k{k}: {n} admitted in fallback"
        );
    }
    let fell_back = fleet.stats().fallback_admitted;
    assert!(fell_back > 0);
    r.resume();
    wait_for("reconnection", || {
        fleet.check_blocking("after", 1);
        fleet.state() == FleetState::Connected
    });
    wait_for("the charge-back", || {
        let s = fleet.stats();
        s.charged_back == s.fallback_admitted && s.charged_back >= fell_back
    });
    // The charges landed on the keys: each key's GCRA is ahead of the server's clock by at
    // least what the fallback admitted beyond the rate since (at 50 ms a unit).
    let mut c = r.connection().unwrap();
    let (secs, us): (u64, u64) = redis::cmd("TIME").query(&mut c).unwrap();
    let now = secs * 1_000_000 + us;
    let tat: u64 = redis::cmd("GET")
        .arg(cellgate_redis::wire::key_of("sick", "k1"))
        .query(&mut c)
        .unwrap();
    assert!(tat > now, "k1's charges are not in Redis");
}

#[test]
fn hot_keys_are_bounded_and_go_cold_when_idle() {
    let Some(r) = common::redis() else { return };
    let fleet = KeyedFleet::rate("idle", 1_000, Duration::from_secs(1))
        .max_wait(Duration::from_secs(2))
        .command_timeout(Duration::from_secs(1))
        .hot_rate(50)
        .max_hot(2)
        .idle_return(Duration::from_millis(200))
        .connect(&r.url())
        .unwrap();
    // Four keys hammered: at most two are leased.
    let start = Instant::now();
    let mut leased = 0u64;
    while start.elapsed() < Duration::from_millis(500) {
        for k in ["a", "b", "c", "d"] {
            leased += u64::from(fleet.check_blocking(k, 1).via() == Via::Lease);
        }
        let s = fleet.stats();
        assert!(s.hot_keys <= 2, "{s:?}");
    }
    assert!(leased > 0, "no key was leased");
    assert!(fleet.stats().lease_requests > 0);
    // Idle: the leases go back and the keys go cold; nothing is held locally.
    wait_for("the hot keys to go cold", || {
        let s = fleet.stats();
        s.hot_keys == 0 && s.leased == 0
    });
    let stats = fleet.stats();
    eprintln!("idle: {leased} checks from leases; {stats:?}");
}

/// A hot key hammered far past its rate: once it is leased, a check of its spent lease is
/// denied here at once (`Via::Lease`), never a Redis call per check; the task refills the
/// lease when the key's fleet has accrued a short lease (the larger of the minimum lease and
/// 100 ms of the rate, within `B / (2·live)`). Counts: the limiter's own script calls over
/// one second of hammering, after the key went hot. (Before, each check of the spent lease
/// was a Redis check: one call per check here, thousands a second; the test failed.)
#[test]
fn a_spent_hot_lease_denies_locally_without_a_call_per_check() {
    let Some(r) = common::redis() else { return };
    // 100 a second, burst 10: leases of at most 5 units, the key short almost at once.
    let fleet = KeyedFleet::rate("spent", 100, Duration::from_secs(1))
        .burst(10)
        .hot_rate(50)
        .max_wait(Duration::from_secs(2))
        .command_timeout(Duration::from_secs(1))
        .connect(&r.url())
        .unwrap();
    let hammer = |d: Duration| {
        let start = Instant::now();
        let mut via: HashMap<Via, u64> = HashMap::new();
        let mut admitted = 0u64;
        while start.elapsed() < d {
            let v = fleet.check_blocking("k", 1);
            *via.entry(v.via()).or_default() += 1;
            admitted += u64::from(v.is_allowed());
        }
        (via, admitted, start.elapsed().as_secs_f64())
    };
    // Cold first (every check a call), then hot after a rate window or two.
    hammer(Duration::from_millis(400));
    assert_eq!(fleet.stats().hot_keys, 1, "{:?}", fleet.stats());
    let before = (fleet.stats().batches, r.script_calls());
    let (via, admitted, secs) = hammer(Duration::from_secs(1));
    let batches = fleet.stats().batches - before.0;
    let calls = r.script_calls() - before.1;
    eprintln!("spent: {via:?} in {secs:.3} s, {admitted} admitted, {batches} batches, {calls} script calls");
    let local_denials = via.get(&Via::Lease).copied().unwrap_or(0) - admitted;
    assert!(
        local_denials >= 1_000,
        "spent-lease checks were not denied locally: {via:?}"
    );
    assert_eq!(
        via.get(&Via::Redis),
        None,
        "a check of a hot key went to Redis"
    );
    // About 20 lease operations a second (a short lease of 5 units at 100/s), and a
    // heartbeat: far below one call per check.
    assert!(
        calls <= 40 && batches <= 40,
        "{calls} script calls ({batches} batches) for {} checks",
        via.values().sum::<u64>()
    );
    // The key still gets most of its rate from its leases.
    assert!(
        admitted as f64 >= 0.5 * 100.0 * secs,
        "admitted {admitted} in {secs:.3} s"
    );
    // The window bound of leases, R·(w + L) + B with L = 1 s.
    assert!(
        admitted as f64 <= 100.0 * (secs + 1.0) + 10.0,
        "admitted {admitted}"
    );
}
