//! What the README says a `Fleet` composes with: `check_all`, through `cellgate::Bound` (a
//! `Fleet` is a `RateLimiter<()>`, not a `Gate`), all or nothing with in-process limiters.

mod common;

use std::time::{Duration, Instant};

use cellgate::{check_all, Bound, Limiter};
use cellgate_redis::Fleet;

/// A fleet stock beside a local stock of 1: the first pair is sold; the second is refused by
/// the local stock after the fleet admitted its unit, which comes back: the fleet then sells
/// the whole rest of its stock (without it, one unit short, until the deadline).
#[test]
fn a_fleet_in_check_all_through_bound_is_all_or_nothing() {
    let Some(r) = common::redis() else { return };
    let stock = 5_000;
    let tickets = Fleet::stock("compose", stock).connect(&r.url()).unwrap();
    common::wait_for("a lease of two units", || tickets.stats().leased >= 2);
    let local = Limiter::stock(1).build().unwrap();
    let fleet = Bound::new(&tickets, &());
    let first = check_all([(&fleet, 1), (&local, 1)]);
    assert!(first.is_allowed(), "{first:?}");
    let second = check_all([(&fleet, 1), (&local, 1)]);
    assert!(second.decisions()[0].is_allowed(), "{second:?}");
    assert_eq!(second.denied_by(), Some(1), "the local stock refused");
    let mut sold = 1;
    let deadline = Instant::now() + Duration::from_secs(10);
    while sold < stock && Instant::now() < deadline {
        if tickets.check().is_allowed() {
            sold += 1;
        }
    }
    assert_eq!(
        sold, stock,
        "the fleet sold exactly its stock: the refused pair's unit came back"
    );
    tickets.shutdown();
}
