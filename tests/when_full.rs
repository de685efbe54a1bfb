//! The policies for a new key when a bounded store is full of live keys: deny it (default),
//! evict the live key nearest to fresh, or decide it untracked.

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
fn deny_new_is_the_default_and_never_touches_held_keys() {
    let clock = ManualClock::new();
    let l = KeyedLimiter::<u64>::gcra(Quota::per_second(1).with_burst(5))
        .clock(clock.clone())
        .max_keys(4)
        .build()
        .unwrap();
    assert_eq!(l.when_full(), WhenFull::DenyNew);
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
    let l = KeyedLimiter::<u64>::stock(5)
        .max_keys(2)
        .when_full(WhenFull::EvictNearestFresh)
        .build()
        .unwrap();
    assert!(l.check(&1).is_allowed());
    assert!(l.check(&2).is_allowed());
    assert!(!l.check(&3).is_allowed());
    assert_eq!((l.stats().evicted_live, l.stats().refused), (0, 1));
    assert_eq!(l.peek(&1).remaining(), 4);
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
                WhenFull::EvictNearestFresh => {
                    assert!(l.stats().evicted_live >= attempts - THREADS)
                }
                _ => assert!(l.stats().untracked >= attempts - THREADS),
            }
        }
    }
}

/// A flood of new keys at a full store under the default policy: keys that are held (busy
/// keys, whose state is never back to fresh) keep exactly the decisions they would get with no
/// flood at all. (A light user whose key went idle and was dropped is a new key again: while
/// the flood keeps the store full of live keys, it is refused; see `WhenFull`.)
#[test]
fn held_keys_are_exact_under_a_flood() {
    let clock = ManualClock::new();
    let quota = Quota::per_second(10).with_burst(3);
    let flooded = KeyedLimiter::<u64>::gcra(quota)
        .clock(clock.clone())
        .max_keys(500)
        .build()
        .unwrap();
    let quiet = KeyedLimiter::<u64>::gcra(quota)
        .clock(clock.clone())
        .build()
        .unwrap();
    let legit: Vec<u64> = (0..10).collect();
    let mut next_flood = 1_000_000u64;
    let mut admitted = 0;
    for step in 0..2_000u64 {
        clock.advance(Duration::from_millis(7));
        for &k in &legit {
            let (a, b) = (flooded.check(&k), quiet.check(&k));
            assert_eq!(a, b, "key {k} at step {step}");
            admitted += u32::from(a.is_allowed());
        }
        for _ in 0..60 {
            flooded.check(&next_flood);
            next_flood += 1;
        }
        assert!(flooded.len() <= 500);
    }
    assert!(
        flooded.stats().refused > 10_000,
        "the flood filled the store"
    );
    assert!(
        flooded.stats().evicted > 1_000,
        "sweeps dropped idle flood keys"
    );
    // Ten keys at 10 a second for 14 s, plus their bursts.
    assert_eq!(admitted, 10 * (3 + 139));
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
