//! `StripedLimiter` and `SlidingLog` as gates of `check_all` and as `AnyLimiter`s: charge,
//! cancel, peek, reserve and policy, all or nothing across limiters.

use std::collections::HashMap;
use std::time::Duration;

use cellgate::clock::ManualClock;
use cellgate::{check_all, AnyLimiter, KeyedLimiter, Limiter, PolicyKind, Quota, StripedLimiter};

/// The README's flash sale: the SKU's stock in hot-key mode, a per-user cap and a global rate,
/// all or nothing. Every limiter ends holding exactly what was admitted.
#[test]
fn striped_stock_in_check_all_is_all_or_nothing() {
    const STOCK: u32 = 200;
    for stripes in [1, 2, 3, 4] {
        let sku = StripedLimiter::stock(STOCK)
            .stripes(stripes)
            .build()
            .unwrap();
        let per_user = KeyedLimiter::<u64>::stock(1).build().unwrap();
        let global = Limiter::gcra(Quota::per_hour(10_000))
            .clock(ManualClock::new())
            .build()
            .unwrap();
        let admitted: Vec<u64> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..3u64)
                .map(|t| {
                    let (sku, per_user, global) = (&sku, &per_user, &global);
                    s.spawn(move || {
                        let mut won = Vec::new();
                        for i in 0..300u64 {
                            // Users overlap across threads: some try twice.
                            let user = (i * 3 + t) % 500;
                            let cap = per_user.gate(&user);
                            let d = check_all([
                                (&cap as &dyn AnyLimiter, 1),
                                (sku as &dyn AnyLimiter, 1),
                                (global as &dyn AnyLimiter, 1),
                            ]);
                            if d.is_allowed() {
                                won.push(user);
                            }
                        }
                        won
                    })
                })
                .collect();
            handles
                .into_iter()
                .flat_map(|h| h.join().unwrap())
                .collect()
        });
        let mut per: HashMap<u64, u32> = HashMap::new();
        for u in &admitted {
            *per.entry(*u).or_default() += 1;
        }
        assert!(per.values().all(|&c| c == 1), "a user bought twice");
        let sold = admitted.len() as u64;
        assert!(sold <= u64::from(STOCK));
        assert_eq!(
            sku.remaining(),
            u64::from(STOCK) - sold,
            "{stripes} stripes"
        );
        assert_eq!(u64::from(global.peek().remaining()), 10_000 - sold);
        for user in 0..500u64 {
            let bought = u32::from(per.contains_key(&user));
            assert_eq!(per_user.peek(&user).remaining(), 1 - bought, "user {user}");
        }
    }
}

/// A striped stock request that no single stripe can fill gathers units from several; when a
/// later gate denies, every gathered unit goes back.
#[test]
fn a_gathered_request_is_rolled_back_whole() {
    let sku = StripedLimiter::stock(10).stripes(4).build().unwrap(); // 3 3 2 2
    let sold_out = Limiter::stock(0).build().unwrap();
    let d = check_all([(&sku as &dyn AnyLimiter, 9), (&sold_out, 1)]);
    assert_eq!(d.denied_by(), Some(1));
    assert_eq!(sku.remaining(), 10);
    assert_eq!(
        d.decisions()[0].remaining(),
        10,
        "reported after the rollback"
    );
    let d = check_all([(&sku as &dyn AnyLimiter, 9)]);
    assert!(d.is_allowed());
    assert_eq!(sku.remaining(), 1);
}

/// GCRA 10 per second, burst 4, over two stripes, on a manual clock.
fn two_stripes() -> StripedLimiter<ManualClock> {
    StripedLimiter::gcra(Quota::per_second(10).with_burst(4))
        .stripes(2)
        .clock(ManualClock::new())
        .build()
        .unwrap()
}

/// A striped GCRA limiter rolls back on the stripe that took the units, exactly, also behind
/// later admissions (frozen clock).
#[test]
fn striped_gcra_rolls_back_on_its_stripe() {
    let l = two_stripes();
    let sold_out = Limiter::stock(0).build().unwrap();
    for _ in 0..5 {
        let d = check_all([(&l as &dyn AnyLimiter, 2), (&sold_out, 1)]);
        assert_eq!(d.denied_by(), Some(1));
    }
    assert_eq!(l.remaining(), 4, "no rolled-back unit is kept");
    let r = AnyLimiter::charge(&l, &(), 2);
    assert!(r.is_allowed());
    assert!(l.check().is_allowed()); // behind it, on whichever stripe
    assert!(AnyLimiter::cancel(&l, &(), r));
    assert_eq!(l.remaining(), 3);
}

#[test]
fn striped_limiter_is_an_any_limiter() {
    let l = two_stripes();
    let dynamic: &dyn AnyLimiter = &l;
    assert!(dynamic.peek_n(&(), 2).is_allowed());
    assert!(!dynamic.peek_n(&(), 3).is_allowed(), "one stripe holds 2");
    assert!(dynamic.check_n(&(), 2).is_allowed());
    let r = dynamic.reserve(&(), 2, Duration::ZERO);
    assert!(r.is_allowed());
    let late = dynamic.reserve(&(), 1, Duration::from_millis(100));
    assert!(!late.is_allowed(), "a stripe refills a unit in 200 ms");
    let queued = dynamic.reserve(&(), 1, Duration::from_millis(200));
    assert_eq!(queued.delay(), Duration::from_millis(200));
    assert!(dynamic.cancel(&(), queued));
    let p = dynamic.policy();
    assert_eq!(
        (p.kind(), p.limit(), p.interval()),
        (PolicyKind::Gcra, 4, Some(Duration::from_millis(100)))
    );
    let sku = StripedLimiter::stock(7).stripes(3).build().unwrap();
    assert_eq!(AnyLimiter::policy(&sku).kind(), PolicyKind::Stock);
    assert_eq!(AnyLimiter::policy(&sku).limit(), 7);
    let r = AnyLimiter::charge(&sku, &(), 6);
    assert!(r.is_allowed());
    assert_eq!(sku.remaining(), 1);
    assert!(AnyLimiter::cancel(&sku, &(), r));
    assert_eq!(sku.remaining(), 7);
}

/// A sliding log as a gate: a rolled-back admission's log entries are forgotten exactly.
#[test]
fn sliding_log_rolls_back_its_entries() {
    let clock = ManualClock::new();
    let log = KeyedLimiter::<String>::sliding_log(3, Duration::from_secs(60))
        .clock(clock.clone())
        .build()
        .unwrap();
    let sold_out = Limiter::stock(0).build().unwrap();
    let user: &dyn AnyLimiter<str> = &log;
    assert!(log.check("alice").is_allowed());
    clock.advance(Duration::from_secs(10));
    for _ in 0..4 {
        let d = check_all([(&(user, "alice"), 2), (&sold_out, 1)]);
        assert_eq!(d.denied_by(), Some(1));
    }
    assert_eq!(log.peek("alice").remaining(), 2);
    assert!(log.check_n("alice", 2).is_allowed());
    // The first unit expires at 60 s: exactly then one more fits, not earlier.
    clock.set(Duration::from_secs(59));
    assert!(!log.check("alice").is_allowed());
    clock.set(Duration::from_secs(60));
    assert!(log.check("alice").is_allowed());
    assert_eq!(user.policy().kind(), PolicyKind::SlidingLog);
    assert_eq!(log.policy().limit(), 3);
}
