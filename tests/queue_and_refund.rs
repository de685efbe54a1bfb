//! Reservations honour a configured queue (nginx's `burst`), and a stock's refund stops at the
//! configured stock.

use std::time::Duration;

use cellgate::clock::ManualClock;
use cellgate::nginx::LimitReq;
use cellgate::{AnyLimiter, KeyedLimiter, Limiter, Quota, StripedLimiter};

/// nginx `rate=1r/s burst=5` (no `nodelay`): one request at once, five queued, the seventh
/// rejected. `reserve`, however long the caller would wait, admits no more than `check` does.
#[test]
fn reserve_stays_within_the_configured_queue() {
    let quota = LimitReq::per_second(1).burst(5).quota();
    let check = Limiter::gcra(quota)
        .clock(ManualClock::new())
        .build()
        .unwrap();
    let by_check: Vec<bool> = (0..7).map(|_| check.check().is_allowed()).collect();
    assert_eq!(by_check, [true, true, true, true, true, true, false]);

    let reserve = Limiter::gcra(quota)
        .clock(ManualClock::new())
        .build()
        .unwrap();
    let delays: Vec<Option<u64>> = (0..9)
        .map(|_| reserve.reserve(1, Duration::MAX))
        .map(|r| r.is_allowed().then(|| r.delay().as_secs()))
        .collect();
    assert_eq!(
        delays,
        [
            Some(0),
            Some(1),
            Some(2),
            Some(3),
            Some(4),
            Some(5),
            None,
            None,
            None
        ]
    );
    // max_wait still narrows the queue.
    let keyed = KeyedLimiter::<u8>::gcra(quota)
        .clock(ManualClock::new())
        .build()
        .unwrap();
    let admitted = (0..9)
        .filter(|_| {
            keyed
                .reserve(&1, 1, Duration::from_millis(2_500))
                .is_allowed()
        })
        .count();
    assert_eq!(admitted, 3, "waits of 0, 1 and 2 s");
}

/// A quota without a queue keeps Guava's `acquire`: the wait alone bounds a reservation.
#[test]
fn without_a_queue_the_wait_alone_decides() {
    let l = Limiter::gcra(Quota::with_interval(Duration::from_secs(1)))
        .clock(ManualClock::new())
        .build()
        .unwrap();
    assert!(l.check().is_allowed());
    assert!(!l.check().is_allowed(), "check never waits");
    let r = l.reserve(1, Duration::from_secs(10));
    assert_eq!(r.delay(), Duration::from_secs(1));
}

#[test]
fn a_stock_refund_stops_at_the_configured_stock() {
    let l = Limiter::stock(5).build().unwrap();
    assert!(l.check_n(2).is_allowed());
    assert!(l.refund(10));
    assert_eq!(
        l.peek().remaining(),
        5,
        "back to the configured stock, not 13"
    );
    assert!(!l.refund(1), "nothing was sold: nothing to give back");

    let keyed = KeyedLimiter::<u8>::stock(3).build().unwrap();
    keyed.check_n(&1, 3);
    assert!(keyed.refund(&1, 1));
    assert!(keyed.refund(&1, 5));
    assert_eq!(keyed.peek(&1).remaining(), 3);
    // A restock is what adds stock; a refund then gives nothing beyond it.
    assert_eq!(keyed.restock(&1, 4).unwrap(), 7);
    assert!(!keyed.refund(&1, 1));
    keyed.check_n(&1, 6);
    assert!(keyed.refund(&1, 6));
    assert_eq!(keyed.peek(&1).remaining(), 3);

    // A rolled-back charge, unlike a refund, returns exactly what it took, even above the
    // configured stock.
    let sku = StripedLimiter::stock(2).stripes(1).build().unwrap();
    sku.restock(3).unwrap();
    let r = AnyLimiter::charge(&sku, &(), 4);
    assert!(AnyLimiter::cancel(&sku, &(), r));
    assert_eq!(sku.remaining(), 5);
}
