//! The fleet limiter in one process against a real `redis-server`: exact sales from two
//! limiters sharing a name, the `cellgate::RateLimiter` view, a visible partitioned state.

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use cellgate::{PolicyKind, RateLimiter};
use cellgate_redis::{Fleet, FleetError, FleetState};

fn wait_for(what: &str, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !f() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

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

#[test]
fn a_fleet_is_a_cellgate_rate_limiter() {
    let Some(r) = common::redis() else { return };
    let fleet = Fleet::rate("api", 100, Duration::from_secs(1))
        .burst(40)
        .connect(&r.url())
        .unwrap();
    let l: &dyn RateLimiter = &fleet;
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
