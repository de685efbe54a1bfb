//! Per-key stocks across the fleet (`KeyedFleet::stock`) against a real `redis-server`: two
//! limiters selling the same keys (hot keys leased, cold keys passed through) sell exactly
//! each key's stock in total, never more; a frozen Redis never oversells (cold checks fail
//! closed, hot keys sell only what they hold leased) and never holds a check past its wait.

use crate::common;

use common::wait_for;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use cellgate_redis::{FleetState, KeyedFleet, Via};

/// Units of every key.
const STOCK: u64 = 400;
const MAX_LEASE: u64 = 4;

fn limiter(url: &str, name: &str) -> KeyedFleet {
    KeyedFleet::stock(name, STOCK)
        .max_lease(MAX_LEASE)
        // Generous: this test checks the answered checks, not the outage.
        .max_wait(Duration::from_secs(2))
        .command_timeout(Duration::from_secs(1))
        // Leased from 5 checks in 100 ms on.
        .hot_rate(50)
        .connect(url)
        .unwrap()
}

#[test]
fn two_limiters_sell_exactly_each_keys_stock() {
    let Some(r) = common::redis() else { return };
    let fleets: Vec<Arc<KeyedFleet>> = (0..2)
        .map(|_| Arc::new(limiter(&r.url(), "skus")))
        .collect();
    let run = Duration::from_millis(1500);
    let start = Instant::now();
    let mut threads = Vec::new();
    for f in &fleets {
        // Two hot keys, checked about every millisecond by both limiters: leased, then sold
        // out.
        for hot in ["hot0", "hot1"] {
            let f = f.clone();
            threads.push(std::thread::spawn(move || {
                let mut counts = common::Counts::new();
                while start.elapsed() < run {
                    let d = f.check_blocking(hot, 1);
                    common::record(&mut counts, hot, &d, 1);
                    std::thread::sleep(Duration::from_millis(1));
                }
                counts
            }));
        }
        // Twenty cold keys, two units at a time, every 50 ms by each limiter: below hot_rate,
        // never sold out within the run.
        threads.push(common::cold_rounds(
            f.clone(),
            (start, run),
            (20, 1, 2),
            Duration::from_millis(50),
        ));
    }
    let (sold, per_via) = common::tally(threads);
    let stats: Vec<_> = fleets.iter().map(|f| f.stats()).collect();
    eprintln!("keyed stock: {per_via:?}; sold {sold:?}; {stats:?}");
    assert_eq!(sold.len(), 22);
    for (key, n) in &sold {
        assert!(*n <= STOCK, "{key}: sold {n} of {STOCK}");
    }
    assert!(per_via.get("Lease").is_some_and(|&n| n > 0), "{per_via:?}");
    assert!(per_via.get("Redis").is_some_and(|&n| n > 0), "{per_via:?}");
    assert_eq!(per_via.get("Fallback"), None, "Redis answered in time");
    // Shut down: the leases go back; Redis then holds exactly what was sold.
    for f in &fleets {
        f.shutdown();
    }
    for (key, n) in &sold {
        assert_eq!(r.taken("skus", key), *n, "{key}: taken in Redis vs sold");
    }
    // A third limiter sells the rest, exactly: each key's stock sold in total.
    let last = limiter(&r.url(), "skus");
    for (key, n) in &sold {
        let rest = u32::try_from(STOCK - n).unwrap();
        if rest > 0 {
            assert!(!last.check_blocking(key, rest + 1).is_allowed(), "{key}");
            assert!(
                last.check_blocking(key, rest).is_allowed(),
                "{key}: {n} sold"
            );
        }
        let d = last.check_blocking(key, 1);
        assert!(!d.is_allowed() && d.via() == Via::Redis, "{key}: oversold");
    }
    // The hot keys were sold out during the run.
    assert_eq!(sold["hot0"], STOCK);
    assert_eq!(sold["hot1"], STOCK);
}

#[test]
fn a_frozen_redis_never_oversells_nor_holds_a_check() {
    let Some(r) = common::redis() else { return };
    let max_wait = Duration::from_millis(50);
    let fleet = KeyedFleet::stock("frozen", STOCK)
        .max_lease(MAX_LEASE)
        .max_wait(max_wait)
        // Far above the bound checked below: a check must not wait for the command timeout.
        .command_timeout(Duration::from_secs(3))
        .hot_rate(50)
        // Asked for, and refused: a stock never falls back.
        .fallback(true)
        .connect(&r.url())
        .unwrap();
    // Make "hot" hot: it holds a lease when Redis freezes.
    let mut sold: HashMap<String, u64> = HashMap::new();
    wait_for("a lease", || {
        let d = fleet.check_blocking("hot", 1);
        *sold.entry("hot".into()).or_default() += u64::from(d.is_allowed());
        d.via() == Via::Lease && fleet.stats().leased > 0
    });
    assert!(fleet.check_blocking("cold", 1).is_allowed());
    *sold.entry("cold".into()).or_default() += 1;
    r.pause();
    let start = Instant::now();
    let mut during: HashMap<&str, u64> = HashMap::new();
    let mut via: HashMap<Via, u64> = HashMap::new();
    while start.elapsed() < Duration::from_millis(600) {
        for key in ["hot", "cold", "new"] {
            let t = Instant::now();
            let d = fleet.check_blocking(key, 1);
            let took = t.elapsed();
            // A bound, not a benchmark: 20 times the wait, a third of the command timeout.
            assert!(took < Duration::from_secs(1), "a check waited {took:?}");
            *during.entry(key).or_default() += u64::from(d.is_allowed());
            *via.entry(d.via()).or_default() += 1;
        }
    }
    eprintln!("frozen: {via:?}, sold during the outage {during:?}");
    assert_ne!(fleet.state(), FleetState::Connected);
    assert_eq!(via.get(&Via::Redis), None, "Redis was frozen");
    // Cold keys fail closed; the hot key sells at most what it held leased.
    assert_eq!(during.get("cold").copied().unwrap_or(0), 0);
    assert_eq!(during.get("new").copied().unwrap_or(0), 0);
    assert!(
        during.get("hot").copied().unwrap_or(0) * 2 <= 3 * MAX_LEASE,
        "{during:?}"
    );
    assert_eq!(fleet.stats().fallback_admitted, 0);
    r.resume();
    wait_for("reconnection", || {
        fleet.check_blocking("after", 1);
        fleet.state() == FleetState::Connected
    });
    *sold.entry("hot".into()).or_default() += during.get("hot").copied().unwrap_or(0);
    fleet.shutdown();
    // Nothing sold twice nor lost: Redis holds exactly what was sold, leases given back.
    for (key, n) in &sold {
        assert!(*n <= STOCK);
        assert_eq!(r.taken("frozen", key), *n, "{key}");
    }
}

/// Redis frozen while the only batch in flight is a lease request (no check in it): a check
/// queued behind it waits out its `max_wait` and is decided without Redis, and the limiter
/// then shows the outage at once, not only when the request's command timeout (3 s) ends.
/// (Before: only a check inside the late batch marked Redis sick, so a check queued behind a
/// lease request left the state `Connected`.)
#[test]
fn a_check_held_behind_a_lease_request_shows_the_outage() {
    let Some(r) = common::redis() else { return };
    let fleet = KeyedFleet::stock("behind", STOCK)
        .max_lease(MAX_LEASE)
        .max_wait(Duration::from_millis(50))
        .command_timeout(Duration::from_secs(3))
        .hot_rate(50)
        .connect(&r.url())
        .unwrap();
    wait_for("a lease", || {
        fleet.check_blocking("hot", 1).via() == Via::Lease && fleet.stats().leased > 0
    });
    r.pause();
    // Sell the lease down: its refill is asked for now, from the frozen Redis, and held.
    let start = Instant::now();
    let mut sold = 0;
    while start.elapsed() < Duration::from_millis(500) {
        let d = fleet.check_blocking("hot", 1);
        if !d.is_allowed() {
            break;
        }
        sold += 1;
        // Slowly: the task's next tick sees the level fall and asks for a refill, alone in
        // its batch, before the lease runs dry.
        std::thread::sleep(Duration::from_millis(30));
    }
    assert!(
        sold * 2 <= 3 * MAX_LEASE,
        "sold {sold} from a lease of at most {MAX_LEASE}"
    );
    // A cold check now queues behind the held request; it is decided within about its wait.
    let t = Instant::now();
    let d = fleet.check_blocking("cold", 1);
    let took = t.elapsed();
    assert!(!d.is_allowed(), "a stock sells nothing it has not leased");
    assert!(took < Duration::from_secs(1), "a check waited {took:?}");
    assert_ne!(
        fleet.state(),
        FleetState::Connected,
        "a check waited out its max_wait behind a held batch"
    );
    r.resume();
    wait_for("reconnection", || {
        fleet.check_blocking("after", 1);
        fleet.state() == FleetState::Connected
    });
}

#[test]
fn a_crash_strands_at_most_one_and_a_half_leases_per_key() {
    let Some(r) = common::redis() else { return };
    let fleets: Vec<Arc<KeyedFleet>> = (0..2)
        .map(|_| Arc::new(limiter(&r.url(), "crash")))
        .collect();
    let keys = ["a", "b", "c"];
    let mut sold: HashMap<&str, u64> = HashMap::new();
    let mut worst = 0;
    for target in [40u64, 150, 300] {
        // Both limiters sell every key until the fleet has sold `target` of it.
        let threads: Vec<_> = fleets
            .iter()
            .flat_map(|f| keys.iter().map(move |k| (f.clone(), *k)))
            .map(|(f, key)| {
                let quota = (target - sold.get(key).copied().unwrap_or(0)) / 2;
                std::thread::spawn(move || {
                    let mut n = 0;
                    let deadline = Instant::now() + Duration::from_secs(10);
                    while n < quota && Instant::now() < deadline {
                        n += u64::from(f.check_blocking(key, 1).is_allowed());
                    }
                    (key, n)
                })
            })
            .collect();
        for t in threads {
            let (key, n) = t.join().unwrap();
            *sold.entry(key).or_default() += n;
        }
        std::thread::sleep(Duration::from_millis(100));
        // What a crash of both limiters now would strand: taken in Redis, not sold.
        for key in keys {
            let (taken, sold) = (r.taken("crash", key), sold[key]);
            assert!(
                taken >= sold,
                "{key}: Redis counts {taken} taken for {sold} sold"
            );
            worst = worst.max(taken - sold);
            // Each of the two holds at most 1.5 leases of a key.
            assert!(
                taken - sold <= 3 * MAX_LEASE,
                "{key}: after selling {sold}, a crash of both would strand {}",
                taken - sold
            );
        }
    }
    eprintln!(
        "crash: sold {sold:?}, worst units at risk per key {worst} (bound {}); {:?}",
        3 * MAX_LEASE,
        fleets.iter().map(|f| f.stats()).collect::<Vec<_>>()
    );
}

#[test]
fn a_stock_refuses_a_bad_configuration() {
    let Some(r) = common::redis() else { return };
    assert!(matches!(
        KeyedFleet::stock("empty", 0).connect(&r.url()),
        Err(cellgate_redis::FleetError::Config(_))
    ));
    let _first = limiter(&r.url(), "taken");
    // The name holds a stock of another size, or a rate: refused.
    assert!(KeyedFleet::stock("taken", STOCK + 1)
        .connect(&r.url())
        .is_err());
    assert!(KeyedFleet::rate("taken", 10, Duration::from_secs(1))
        .connect(&r.url())
        .is_err());
    assert!(limiter(&r.url(), "taken")
        .check_blocking("k", 1)
        .is_allowed());
}
