//! The fleet limiter in one process against a real `redis-server`: exact sales from two
//! limiters sharing a name, the `cellgate::AnyLimiter` view, a visible partitioned state.

use crate::common;

use common::wait_for;

use std::sync::Arc;
use std::time::{Duration, Instant};

use cellgate::{AnyLimiter, PolicyKind};
use cellgate_redis::{Fleet, FleetError, FleetState};

#[test]
fn two_limiters_with_one_name_sell_the_stock_exactly() {
    let Some(r) = common::redis() else { return };
    let a = Arc::new(Fleet::stock("shared", 5_000).connect(&r.url()).unwrap());
    let b = Arc::new(Fleet::stock("shared", 5_000).connect(&r.url()).unwrap());
    let sell = |f: Arc<Fleet>| {
        std::thread::spawn(move || {
            let deadline = Instant::now() + Duration::from_secs(3);
            let mut sold = 0u64;
            while Instant::now() < deadline {
                if f.check().is_allowed() {
                    sold += 1;
                }
            }
            sold
        })
    };
    let (ta, tb) = (sell(a.clone()), sell(b.clone()));
    let sold = ta.join().unwrap() + tb.join().unwrap();
    assert_eq!(sold, 5_000, "the two limiters sold the stock exactly");
    a.shutdown();
    b.shutdown();
    assert!(!a.check().is_allowed(), "a stopped limiter admits nothing");
}

/// What a `kill -9` would lose at a moment mid-sale: the units the server counts as held by
/// the limiters less what they sold. The sellers stop at a few points of the sale; once the
/// background tasks have settled (well before the 1 s idle return) the holders may hold at
/// most 1.5 leases each: what is left of one plus the next one asked for.
#[test]
fn a_crash_loses_at_most_one_and_a_half_leases() {
    let Some(r) = common::redis() else { return };
    let stock = 400_000u64;
    let cap = 400; // the default: stock / 1000
    let fleets: Vec<Arc<Fleet>> = (0..2)
        .map(|_| Arc::new(Fleet::stock("crash", stock).connect(&r.url()).unwrap()))
        .collect();
    let mut sold = 0u64;
    let mut worst = 0u64;
    for target in [3_000u64, 20_000, 45_000, 90_000, 150_000] {
        // Both limiters sell until the fleet has sold `target` (or the stock is out).
        let handles: Vec<_> = fleets
            .iter()
            .map(|f| {
                let f = f.clone();
                let quota = (target - sold) / 2;
                std::thread::spawn(move || {
                    let mut n = 0u64;
                    let deadline = Instant::now() + Duration::from_secs(10);
                    while n < quota && Instant::now() < deadline {
                        n += u64::from(f.check().is_allowed());
                    }
                    n
                })
            })
            .collect();
        sold += handles.into_iter().map(|h| h.join().unwrap()).sum::<u64>();
        std::thread::sleep(Duration::from_millis(100));
        let holders = r.hgetall("cellgate:{crash}:holders");
        let held: u64 = holders
            .iter()
            .filter(|(k, _)| k.starts_with("n:"))
            .map(|(_, v)| v.parse::<u64>().unwrap())
            .sum();
        assert!(
            held >= sold,
            "the server counts {held} held for {sold} sold"
        );
        let at_risk = held - sold;
        worst = worst.max(at_risk);
        assert!(
            at_risk <= 2 * (cap + cap / 2),
            "after selling {sold}: a crash of both would lose {at_risk}: {holders:?} {:?}",
            fleets.iter().map(|f| f.stats()).collect::<Vec<_>>()
        );
    }
    eprintln!(
        "crash: worst units at risk {worst} (bound {})",
        2 * (cap + cap / 2)
    );
}

#[test]
fn a_fleet_is_a_cellgate_any_limiter() {
    let Some(r) = common::redis() else { return };
    let fleet = Fleet::rate("api", 100, Duration::from_secs(1))
        .burst(40)
        .connect(&r.url())
        .unwrap();
    let l: &dyn AnyLimiter = &fleet;
    assert_eq!(l.policy().kind(), PolicyKind::Gcra);
    assert_eq!(l.policy().limit(), 40);
    assert_eq!(l.policy().interval(), Some(Duration::from_millis(10)));
    let mut admitted = 0;
    let start = Instant::now();
    while start.elapsed() < Duration::from_millis(500) {
        admitted += u32::from(l.check_n(&(), 1).is_allowed());
    }
    let elapsed = start.elapsed().as_secs_f64();
    assert!(admitted > 0, "nothing admitted");
    // 100/s with burst 40 over the time since the limit's first grant.
    assert!(
        f64::from(admitted) <= 100.0 * elapsed + 40.0 + 1.0,
        "admitted {admitted}"
    );
    let res = l.charge(&(), 1);
    if res.is_allowed() {
        assert!(l.cancel(&(), res), "a charge comes back");
    }
}

#[test]
fn an_outage_is_visible_and_a_stock_sells_only_what_it_holds() {
    let Some(mut r) = common::redis() else { return };
    let fleet = Fleet::stock("outage", 1_000_000)
        .command_timeout(Duration::from_millis(50))
        .connect(&r.url())
        .unwrap();
    wait_for("a first lease", || fleet.check().is_allowed());
    r.stop();
    wait_for("the partitioned state", || {
        fleet.check();
        fleet.state() == FleetState::Partitioned
    });
    // Drain what it holds: a stock never falls back.
    let held = fleet.stats().leased;
    let mut sold = 0u64;
    for _ in 0..held + 10_000 {
        sold += u64::from(fleet.check().is_allowed());
    }
    assert!(
        sold <= held,
        "sold {sold} while holding {held} and partitioned"
    );
    assert!(fleet.stats().backend_errors > 0);
    r.start();
    wait_for("reconnection", || {
        fleet.check();
        fleet.state() == FleetState::Connected
    });
    wait_for("a lease after the outage", || fleet.check().is_allowed());
}

#[test]
fn bad_configurations_are_errors() {
    let url = "redis://127.0.0.1:1";
    for b in [
        Fleet::rate("x", 0, Duration::from_secs(1)),
        Fleet::rate("x", 1, Duration::ZERO),
        Fleet::rate("x", 1, Duration::from_secs(1)).burst(0),
        Fleet::rate("x", 1, Duration::from_secs(1)).burst(1 << 40),
        Fleet::stock("", 1),
        Fleet::stock("a{b}", 1),
        Fleet::stock("x", 1 << 53),
    ] {
        assert!(matches!(b.connect(url), Err(FleetError::Config(_))));
    }
    assert!(matches!(
        Fleet::stock("x", 1).connect("not a url"),
        Err(FleetError::Config(_))
    ));
}
