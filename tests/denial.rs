//! Why a request was denied (`Decision::denial`), and "never" said as `None`
//! (`Decision::resets_after`) instead of a 584-year duration.

use std::time::Duration;

use cellgate::clock::ManualClock;
use cellgate::{
    check_all, AnyLimiter, Decision, Denial, KeyedLimiter, Limiter, Quota, StripedLimiter, WhenFull,
};

#[test]
fn every_algorithm_says_why() {
    let clock = ManualClock::new();
    let gcra = Limiter::gcra(Quota::per_second(2))
        .clock(clock.clone())
        .build()
        .unwrap();
    assert_eq!(gcra.check_n(2).denial(), None);
    let d = gcra.check();
    assert_eq!(d.denial(), Some(Denial::RateLimited));
    assert!(d.retry_after().is_some());
    let d = gcra.check_n(3);
    assert_eq!(d.denial(), Some(Denial::NeverFits));
    assert_eq!(d.retry_after(), None);

    let window = KeyedLimiter::<u8>::fixed_window(2, Duration::from_secs(1))
        .clock(clock.clone())
        .build()
        .unwrap();
    window.check_n(&1, 2);
    assert_eq!(window.check(&1).denial(), Some(Denial::RateLimited));
    assert_eq!(window.check_n(&1, 3).denial(), Some(Denial::NeverFits));

    let sliding = KeyedLimiter::<u8>::sliding_window(2, Duration::from_secs(1))
        .clock(clock.clone())
        .build()
        .unwrap();
    sliding.check_n(&1, 2);
    assert_eq!(sliding.check(&1).denial(), Some(Denial::RateLimited));

    let log = KeyedLimiter::<u8>::sliding_log(2, Duration::from_secs(1))
        .clock(clock.clone())
        .max_keys(1)
        .build()
        .unwrap();
    log.check_n(&1, 2);
    assert_eq!(log.check(&1).denial(), Some(Denial::RateLimited));
    assert_eq!(log.check_n(&1, 3).denial(), Some(Denial::NeverFits));
    assert_eq!(log.check(&2).denial(), Some(Denial::StoreFull));

    let stock = KeyedLimiter::<u8>::stock(2).build().unwrap();
    assert_eq!(stock.peek(&1).resets_after(), Some(Duration::ZERO));
    let d = stock.check_n(&1, 2);
    assert_eq!(d.resets_after(), None, "never by itself");
    assert_eq!(
        d.reset_after(),
        Duration::from_nanos(u64::MAX),
        "kept for compatibility"
    );
    let d = stock.check(&1);
    assert_eq!(d.denial(), Some(Denial::SoldOut));
    assert_eq!((d.retry_after(), d.resets_after()), (None, None));
    assert_eq!(stock.check_n(&2, 3).denial(), Some(Denial::SoldOut));
}

#[test]
fn a_full_store_says_so() {
    let users = KeyedLimiter::<u32>::gcra(Quota::per_minute(5))
        .max_keys(2)
        .when_full(WhenFull::DenyNew)
        .clock(ManualClock::new())
        .build()
        .unwrap();
    users.check(&1);
    users.check(&2);
    let d = users.check(&3);
    assert_eq!(d.denial(), Some(Denial::StoreFull));
    assert_eq!(d.retry_after(), None);
    // In check_all too, with the reason of the gate that denied.
    let cap = users.gate(&4);
    let stock = Limiter::stock(1).build().unwrap();
    let m = check_all([(&stock as &dyn AnyLimiter, 1), (&cap, 1)]);
    assert_eq!(m.denied_by(), Some(1));
    assert_eq!(m.decisions()[1].denial(), Some(Denial::StoreFull));
    assert_eq!(m.decisions()[0].denial(), None);
    assert_eq!(stock.peek().remaining(), 1);
}

#[test]
fn striped_limiters_say_why() {
    let sku = StripedLimiter::stock(3).stripes(2).build().unwrap();
    assert!(sku.check_n(3).is_allowed());
    assert_eq!(sku.check().denial(), Some(Denial::SoldOut));
    assert_eq!(sku.peek_n(1).denial(), Some(Denial::SoldOut));
    assert_eq!(sku.peek_n(0).resets_after(), None);

    let rate = StripedLimiter::gcra(Quota::per_second(10).with_burst(4))
        .stripes(2)
        .clock(ManualClock::new())
        .build()
        .unwrap();
    // Three units never fit one stripe of burst 2.
    assert_eq!(rate.check_n(3).denial(), Some(Denial::NeverFits));
    assert!(rate.check_n(2).is_allowed() && rate.check_n(2).is_allowed());
    assert_eq!(rate.check().denial(), Some(Denial::RateLimited));
}

#[test]
fn the_reason_costs_no_space() {
    // The reason shares the word that holds the limit and the verdict.
    assert_eq!(std::mem::size_of::<Decision>(), 40);
    assert_eq!(Decision::NONE.denial(), Some(Denial::NeverFits));
}
