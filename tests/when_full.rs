//! The policies for a new key when a bounded store is full of live keys: drop light keys
//! (default), deny it, evict the live key nearest to fresh, or decide it untracked.

use std::time::Duration;

use cellgate::clock::ManualClock;
use cellgate::{ConfigError, KeyedLimiter, Quota, WhenFull};

/// A GCRA limiter of one request per second, burst `burst`, at most `cap` keys.
fn limiter(
    cap: usize,
    burst: u32,
    policy: WhenFull,
) -> (ManualClock, KeyedLimiter<u64, ManualClock>) {
    let clock = ManualClock::new();
    let l = KeyedLimiter::<u64>::gcra(Quota::per_second(1).with_burst(burst))
        .clock(clock.clone())
        .max_keys(cap)
        .when_full(policy)
        .build()
        .unwrap();
    (clock, l)
}

#[test]
fn deny_new_never_touches_held_keys() {
    let (clock, l) = limiter(4, 5, WhenFull::DenyNew);
    for k in 0..4 {
        assert!(l.check(&k).is_allowed());
    }
    let d = l.check(&99);
    assert!(!d.is_allowed());
    assert_eq!(d.retry_after(), None);
    assert_eq!(
        (
            l.len(),
            l.stats().refused,
            l.stats().evicted_live,
            l.stats().untracked
        ),
        (4, 1, 0, 0)
    );
    // Held keys keep exactly their budgets.
    for k in 0..4 {
        assert_eq!(l.check_n(&k, 4).remaining(), 0);
    }
    // Once the held keys are idle, the new key gets in (a lossless sweep makes room).
    clock.advance(Duration::from_secs(5));
    assert!(l.check(&99).is_allowed());
}

/// The default: at the ceiling a new key takes the place of light keys (at most one unit
/// from fresh); keys with a backlog and stock keys keep their state, and when only they are
/// left the new key is refused.
#[test]
fn evict_light_is_the_default_and_drops_only_light_keys() {
    for store in ["grow", "fixed", "exact"] {
        let clock = ManualClock::new();
        let b = KeyedLimiter::<u64>::gcra(Quota::per_second(1).with_burst(5))
            .clock(clock.clone())
            .max_keys(4);
        let l = match store {
            "grow" => b.build(),
            "fixed" => b.fixed_capacity().build(),
            _ => b.exact_keys().build(),
        }
        .unwrap();
        assert_eq!(l.when_full(), WhenFull::EvictLight);
        // Keys 0 and 1 busy (3 and 5 units spent), 2 and 3 light (one unit each).
        assert!(l.check_n(&0, 3).is_allowed());
        assert!(l.check_n(&1, 5).is_allowed());
        assert!(l.check(&2).is_allowed());
        assert!(l.check(&3).is_allowed());
        let d = l.check(&10);
        assert!(d.is_allowed(), "{store}: a light key made room: {d:?}");
        assert!(
            l.check(&11).is_allowed(),
            "{store}: the other light key too"
        );
        assert_eq!(l.stats().evicted_live, 2, "{store}");
        assert_eq!(l.len(), 4, "{store}");
        // The busy keys kept exactly their budgets.
        assert_eq!(l.peek(&0).remaining(), 2, "{store}");
        assert_eq!(l.peek(&1).remaining(), 0, "{store}");
        // Keys 10 and 11 are light now, but a light key only goes for a new one: make them
        // busy, and the next new key is refused (nothing light is left).
        assert!(l.check_n(&10, 2).is_allowed());
        assert!(l.check_n(&11, 2).is_allowed());
        let d = l.check(&12);
        assert!(!d.is_allowed(), "{store}: no light key left: {d:?}");
        assert_eq!(d.denial(), Some(cellgate::Denial::StoreFull), "{store}");
        assert_eq!(l.peek(&10).remaining(), 2, "{store}");
    }
}

/// With a burst of one a used key has nothing left: it is not light, so a flood of new keys
/// can never drop it and turn its denial into an admission.
#[test]
fn evict_light_never_unblocks_a_denied_key() {
    let (_clock, l) = limiter(2, 1, WhenFull::EvictLight);
    assert!(l.check(&1).is_allowed());
    assert!(!l.check(&1).is_allowed());
    assert!(l.check(&2).is_allowed());
    for k in 10..20 {
        assert!(!l.check(&k).is_allowed(), "key {k} got a place");
    }
    assert!(
        !l.check(&1).is_allowed(),
        "key 1 was dropped and came back fresh"
    );
    assert_eq!(l.stats().evicted_live, 0);
}

#[test]
fn admit_untracked_decides_as_fresh_without_storing() {
    let (_clock, l) = limiter(2, 3, WhenFull::AdmitUntracked);
    assert!(l.check(&1).is_allowed());
    assert!(l.check(&2).is_allowed());
    for _ in 0..5 {
        let d = l.check_n(&3, 3);
        assert!(d.is_allowed());
        assert_eq!(d.remaining(), 0);
    }
    // A request that a fresh key would deny is still denied.
    assert!(!l.check_n(&3, 4).is_allowed());
    // Five admitted untracked; the denial needed no storing, so it is not counted.
    assert_eq!((l.len(), l.stats().untracked, l.stats().refused), (2, 5, 0));
    // Held keys are limited as always.
    assert!(l.check_n(&1, 2).is_allowed());
    assert!(!l.check(&1).is_allowed());
    // Reservations for untracked keys hold nothing to cancel.
    let r = l.reserve(&4, 1, Duration::ZERO);
    assert!(r.is_allowed());
    assert_eq!(r.units(), 0);
    assert!(!l.cancel(&4, r));
}

/// The window counters' keyed checks (laid out for each counter alone) decide an untracked key
/// as a fresh one too, in every store that has a ceiling.
#[test]
fn admit_untracked_window_counters_decide_as_fresh() {
    let w = Duration::from_secs(1);
    for sliding in [false, true] {
        for store in 0..3 {
            let b = if sliding {
                KeyedLimiter::<u64>::sliding_window(3, w)
            } else {
                KeyedLimiter::<u64>::fixed_window(3, w)
            };
            let b = b
                .clock(ManualClock::new())
                .max_keys(2)
                .when_full(WhenFull::AdmitUntracked);
            let l = match store {
                0 => b.build(),
                1 => b.fixed_capacity().build(),
                _ => b.exact_keys().build(),
            }
            .unwrap();
            let at = format!("sliding {sliding}, store {store}");
            assert!(l.check_n(&1, 3).is_allowed(), "{at}");
            assert!(l.check(&2).is_allowed(), "{at}");
            for _ in 0..3 {
                let d = l.check_n(&3, 3);
                assert!(d.is_allowed(), "{at}");
                assert_eq!(d.remaining(), 0, "{at}");
            }
            // Over the limit: denied as a fresh key is, with no wait that helps.
            let d = l.check_n(&3, 4);
            assert!(!d.is_allowed(), "{at}");
            assert_eq!(d.retry_after(), None, "{at}");
            // The held keys are limited as always: key 1 spent its window.
            let d = l.check(&1);
            assert!(!d.is_allowed(), "{at}");
            // A fixed window's next one starts in `w`; a sliding window's estimate needs a
            // third of the next window to pass (rounded up to the nanosecond).
            let retry = if sliding {
                w + Duration::from_nanos(333_333_334)
            } else {
                w
            };
            assert_eq!(d.retry_after(), Some(retry), "{at}");
            assert_eq!((l.len(), l.stats().untracked), (2, 3), "{at}");
        }
    }
}

#[test]
fn evict_nearest_fresh_forgets_the_key_closest_to_fresh() {
    let (_clock, l) = limiter(4, 10, WhenFull::EvictNearestFresh);
    // Keys 0..4 spend 4, 3, 2, 1 units: key 3 is nearest to fresh (1 s of backlog).
    for k in 0..4u64 {
        assert!(l.check_n(&k, 4 - k as u32).is_allowed());
    }
    assert!(l.check(&100).is_allowed());
    assert_eq!(
        (l.len(), l.stats().evicted_live, l.stats().refused),
        (4, 1, 0)
    );
    // Key 3 was forgotten (lossy: back to a full budget); the others kept theirs.
    assert_eq!(l.peek(&3).remaining(), 10);
    for k in 0..3u64 {
        assert_eq!(l.peek(&k).remaining(), 10 - (4 - k as u32), "key {k}");
    }
    // The new key (1 s of backlog) and key 2 (2 s) are now the nearest: the new one goes next.
    assert!(l.check_n(&101, 5).is_allowed());
    assert_eq!(l.peek(&100).remaining(), 10);
    assert_eq!(l.stats().evicted_live, 2);
    assert!(l.len() <= 4);
}

#[test]
fn stock_keys_are_never_evicted() {
    for policy in [WhenFull::EvictNearestFresh, WhenFull::EvictLight] {
        let l = KeyedLimiter::<u64>::stock(5)
            .max_keys(2)
            .when_full(policy)
            .build()
            .unwrap();
        assert!(l.check(&1).is_allowed());
        assert!(l.check(&2).is_allowed());
        assert!(!l.check(&3).is_allowed());
        assert_eq!(
            (l.stats().evicted_live, l.stats().refused),
            (0, 1),
            "{policy:?}"
        );
        assert_eq!(l.peek(&1).remaining(), 4, "{policy:?}");
    }
}

#[test]
fn eviction_needs_the_table() {
    let err = KeyedLimiter::<u64>::gcra(Quota::per_second(1))
        .max_keys(10)
        .exact_keys()
        .when_full(WhenFull::EvictNearestFresh)
        .build()
        .unwrap_err();
    assert!(matches!(err, ConfigError::Unsupported { .. }), "{err}");
    // The other policies work on both stores.
    for policy in [WhenFull::DenyNew, WhenFull::AdmitUntracked] {
        let l = KeyedLimiter::<u64>::gcra(Quota::per_hour(1))
            .clock(ManualClock::new())
            .max_keys(1)
            .exact_keys()
            .when_full(policy)
            .build()
            .unwrap();
        assert!(l.check(&1).is_allowed());
        assert_eq!(l.check(&2).is_allowed(), policy == WhenFull::AdmitUntracked);
        assert_eq!(l.len(), 1);
    }
}

/// Threads inserting distinct keys at the cap: the store never holds more than the cap plus
/// one key per thread inserting at the same moment (the documented slack), under every policy.
#[test]
fn concurrent_inserts_respect_the_cap() {
    const THREADS: u64 = 4;
    const CAP: usize = 2_000;
    for policy in [
        WhenFull::EvictLight,
        WhenFull::DenyNew,
        WhenFull::EvictNearestFresh,
        WhenFull::AdmitUntracked,
    ] {
        for exact in [false, true] {
            if exact && policy == WhenFull::EvictNearestFresh {
                continue;
            }
            let mut b = KeyedLimiter::<u64>::gcra(Quota::per_hour(1))
                .clock(ManualClock::new())
                .max_keys(CAP)
                .when_full(policy);
            if exact {
                b = b.exact_keys();
            }
            let l = b.build().unwrap();
            let most = std::thread::scope(|s| {
                let hs: Vec<_> = (0..THREADS)
                    .map(|t| {
                        let l = &l;
                        s.spawn(move || {
                            let mut most = 0;
                            for i in 0..5_000u64 {
                                l.check(&(t << 32 | i));
                                most = most.max(l.len());
                            }
                            most
                        })
                    })
                    .collect();
                hs.into_iter().map(|h| h.join().unwrap()).max().unwrap()
            });
            assert!(
                most <= CAP + THREADS as usize,
                "{policy:?} exact={exact}: held {most}"
            );
            let attempts = THREADS * 5_000 - CAP as u64;
            match policy {
                WhenFull::DenyNew => assert!(l.stats().refused >= attempts - THREADS),
                // No key is light (one request spends a burst of one: nothing left), so new
                // keys are refused.
                WhenFull::EvictLight => {
                    assert!(l.stats().evicted_live + l.stats().refused >= attempts - THREADS);
                }
                WhenFull::EvictNearestFresh => {
                    assert!(l.stats().evicted_live >= attempts - THREADS)
                }
                _ => assert!(l.stats().untracked >= attempts - THREADS),
            }
        }
    }
}

/// A flood of new keys at a full store: keys that are held and busy (whose state is never
/// back to fresh, nor within a unit of it) keep exactly the decisions they would get with no
/// flood at all, under the default policy and under `DenyNew`. Returning users (keys that went
/// idle and were dropped) are served under the default, and refused under `DenyNew` while the
/// flood keeps the store full of live keys.
#[test]
fn busy_keys_are_exact_and_returning_users_served_under_a_flood() {
    for policy in [WhenFull::EvictLight, WhenFull::DenyNew] {
        let clock = ManualClock::new();
        let quota = Quota::per_second(10).with_burst(3);
        let flooded = KeyedLimiter::<u64>::gcra(quota)
            .clock(clock.clone())
            .max_keys(500)
            .when_full(policy)
            .build()
            .unwrap();
        let quiet = KeyedLimiter::<u64>::gcra(quota)
            .clock(clock.clone())
            .build()
            .unwrap();
        let busy: Vec<u64> = (0..10).collect();
        let mut next_flood = 1_000_000u64;
        let (mut admitted, mut returning, mut returning_refused) = (0, 0, 0);
        for step in 0..2_000u64 {
            clock.advance(Duration::from_millis(7));
            for &k in &busy {
                let (a, b) = (flooded.check(&k), quiet.check(&k));
                assert_eq!(a, b, "{policy:?}: key {k} at step {step}");
                admitted += u32::from(a.is_allowed());
            }
            // A returning user every 20 steps: a key last seen 2.8 s ago (idle, dropped).
            if step % 20 == 0 {
                let k = 100 + step / 20 % 2;
                returning += 1;
                returning_refused += u32::from(!flooded.check(&k).is_allowed());
            }
            for _ in 0..60 {
                flooded.check(&next_flood);
                next_flood += 1;
            }
            assert!(flooded.len() <= 500);
        }
        // Ten keys at 10 a second for 14 s, plus their bursts.
        assert_eq!(admitted, 10 * (3 + 139), "{policy:?}");
        let s = flooded.stats();
        match policy {
            WhenFull::DenyNew => {
                assert!(s.refused > 10_000, "the flood filled the store: {s:?}");
                assert!(returning_refused > 0, "{returning_refused} of {returning}");
            }
            _ => {
                assert!(s.evicted_live > 10_000, "flood keys made room: {s:?}");
                assert_eq!(returning_refused, 0, "of {returning}: {s:?}");
            }
        }
    }
}

/// A sustained flood of new keys at the cap under `EvictNearestFresh` (every insert evicts a
/// live key, so the table keeps compacting its shards): afterwards exactly the keys counted by
/// `len()` are found, with their state, by `peek` and `refund`, and every other key is fresh.
#[test]
fn evict_nearest_fresh_sustained_flood_keeps_every_held_key_reachable() {
    const CAP: usize = 2_000;
    const FLOOD: u64 = 60_000;
    let (clock, l) = limiter(CAP, 10, WhenFull::EvictNearestFresh);
    for k in 0..FLOOD {
        assert!(l.check(&k).is_allowed(), "key {k}");
    }
    assert_eq!(l.len(), CAP);
    assert_eq!(l.stats().evicted_live, FLOOD - CAP as u64);
    // A held key has spent one unit of ten; an evicted one is fresh.
    let held: Vec<u64> = (0..FLOOD)
        .filter(|k| match l.peek(k).remaining() {
            9 => true,
            10 => false,
            other => panic!("key {k}: remaining {other}"),
        })
        .collect();
    assert_eq!(held.len(), CAP, "every held key is found, once");
    for k in &held {
        assert!(l.refund(k, 1), "key {k} is held");
        assert_eq!(l.peek(k).remaining(), 10);
    }
    assert!(!l.refund(&(FLOOD + 1), 1));
    // Time moves on: every key is idle and a sweep drops them all.
    clock.advance(Duration::from_secs(10));
    assert_eq!(l.evict_idle(), CAP);
    assert!(l.is_empty());
}
