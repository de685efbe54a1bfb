//! Forgetting one key of a `KeyedFleet` on purpose (`forget`), against a real `redis-server`:
//! the key gets a fresh budget across the fleet, exactly once, the forgetting process drops
//! what it held of the key, and no other key gains anything. (Before `forget` existed no call
//! could hand one key a fresh budget: an operator had to `DEL` the limit's Redis key by hand
//! and the processes kept their local state of it.)

use crate::common;

use std::time::{Duration, Instant};

use cellgate_redis::KeyedFleet;

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// 5 per hour per key: nothing accrues during a test. Keys go hot only when `hot` says so.
fn rate(url: &str, name: &str, hot: bool) -> KeyedFleet {
    KeyedFleet::rate(name, 5, Duration::from_secs(3600))
        .max_wait(Duration::from_secs(2))
        .command_timeout(Duration::from_secs(1))
        .hot_rate(if hot { 50 } else { 1_000_000 })
        .connect(url)
        .unwrap()
}

/// How many of `tries` checks of `key` one unit each `f` admits.
fn admitted(f: &KeyedFleet, key: &str, tries: u32) -> u32 {
    (0..tries)
        .map(|_| u32::from(f.check_blocking(key, 1).is_allowed()))
        .sum()
}

#[test]
fn a_forgotten_key_has_a_fresh_budget_fleet_wide_and_the_others_keep_theirs() {
    let Some(r) = common::redis() else { return };
    let rt = runtime();
    let (a, b) = (
        rate(&r.url(), "forget-rate", false),
        rate(&r.url(), "forget-rate", false),
    );
    assert_eq!(admitted(&a, "alice", 4) + admitted(&b, "alice", 4), 5);
    assert_eq!(admitted(&a, "bob", 8), 5);
    // b forgets alice: both processes see her fresh budget, exactly one burst of it.
    assert!(rt.block_on(b.forget("alice")).unwrap());
    assert_eq!(admitted(&a, "alice", 4) + admitted(&b, "alice", 4), 5);
    // Nobody else gained anything; a key never seen has nothing to forget.
    assert_eq!(admitted(&a, "bob", 3) + admitted(&b, "bob", 3), 0);
    assert!(!rt.block_on(a.forget("carol")).unwrap());
    assert_eq!(admitted(&b, "carol", 8), 5);
}

/// The forgetting process held the key hot (leased, found dry): its lease state goes with the
/// forget, so its own checks see the fresh budget at once, and no more than it.
#[test]
fn a_hot_key_forgotten_by_its_own_process_starts_afresh() {
    let Some(r) = common::redis() else { return };
    let rt = runtime();
    let a = rate(&r.url(), "forget-hot", true);
    let hammer = |d: Duration| {
        let start = Instant::now();
        let mut n = 0;
        while start.elapsed() < d {
            n += admitted(&a, "h", 1);
            std::thread::sleep(Duration::from_micros(500));
        }
        n
    };
    assert_eq!(hammer(Duration::from_millis(400)), 5);
    assert_eq!(a.stats().hot_keys, 1, "{:?}", a.stats());
    assert!(rt.block_on(a.forget("h")).unwrap());
    assert_eq!(a.stats().hot_keys, 0, "{:?}", a.stats());
    // The fresh burst, all of it (leased again or checked in Redis), and never more.
    assert_eq!(hammer(Duration::from_millis(600)), 5);
}

#[test]
fn a_forgotten_stock_key_is_restocked_once_and_the_others_stay_sold() {
    let Some(r) = common::redis() else { return };
    let rt = runtime();
    let stock = |name: &str| {
        KeyedFleet::stock(name, 3)
            .max_wait(Duration::from_secs(2))
            .command_timeout(Duration::from_secs(1))
            .hot_rate(1_000_000)
            .connect(&r.url())
            .unwrap()
    };
    let (a, b) = (stock("forget-stock"), stock("forget-stock"));
    assert_eq!(admitted(&a, "u1", 2) + admitted(&b, "u1", 2), 3);
    assert_eq!(admitted(&b, "u2", 4), 3);
    assert_eq!(r.taken("forget-stock", "u1"), 3);
    assert!(rt.block_on(a.forget("u1")).unwrap());
    assert_eq!(r.taken("forget-stock", "u1"), 0);
    assert!(!rt.block_on(a.forget("u1")).unwrap(), "forgotten twice");
    assert_eq!(admitted(&a, "u1", 2) + admitted(&b, "u1", 2), 3);
    assert_eq!(admitted(&a, "u2", 2) + admitted(&b, "u2", 2), 0);
    assert_eq!(r.taken("forget-stock", "u2"), 3);
}

/// A limiter shut down refuses to forget (with an error, never a hang).
#[test]
fn forget_after_shutdown_is_an_error() {
    let Some(r) = common::redis() else { return };
    let a = rate(&r.url(), "forget-closed", false);
    a.shutdown();
    assert!(runtime().block_on(a.forget("x")).is_err());
}
