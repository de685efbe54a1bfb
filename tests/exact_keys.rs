//! `exact_keys()`: keys compared with `Eq`, never by fingerprint alone. The keys here hash to
//! one value, so every key has the same 64-bit fingerprint, the same shard and the same home
//! slot: only the comparison of the keys kept beside the slots tells them apart, through
//! inserts, probes, the rebuilds that grow the table and the sweeps that shrink it.

use std::hash::{Hash, Hasher};
use std::sync::Arc;
use std::time::Duration;

use cellgate::clock::ManualClock;
use cellgate::{KeyedLimiter, Quota};

/// A key whose hash ignores its value: every `Colliding` key has the same fingerprint.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Colliding(u64);

impl Hash for Colliding {
    fn hash<H: Hasher>(&self, state: &mut H) {
        state.write_u64(7);
    }
}

const BURST: u32 = 2;

fn limiter(clock: &ManualClock, exact: bool) -> KeyedLimiter<Colliding, ManualClock> {
    let b = KeyedLimiter::<Colliding>::gcra(Quota::per_second(1).with_burst(BURST))
        .clock(clock.clone());
    if exact { b.exact_keys() } else { b }.build().unwrap()
}

/// Admissions of `keys` keys, each checked `BURST + 1` times.
fn admitted(l: &KeyedLimiter<Colliding, ManualClock>, keys: u64) -> u32 {
    let mut admitted = 0;
    for _ in 0..=BURST {
        for k in 0..keys {
            admitted += u32::from(l.check(&Colliding(k)).is_allowed());
        }
    }
    admitted
}

#[test]
fn keys_with_one_fingerprint_keep_their_own_budgets() {
    let clock = ManualClock::new();
    clock.set(Duration::from_secs(10));
    let l = limiter(&clock, true);
    // 300 keys in one probe run: the shard grows (rebuilds) several times on the way.
    assert_eq!(admitted(&l, 300), 300 * BURST);
    assert_eq!(l.len(), 300);
    for k in 0..300 {
        let peek = l.peek_n(&Colliding(k), 1);
        assert!(!peek.is_allowed(), "key {k} got a budget back");
    }
    // The fingerprint store, for contrast: the same keys share one budget.
    let shared = limiter(&clock, false);
    assert_eq!(admitted(&shared, 300), BURST);
}

#[test]
fn a_sweep_and_a_forget_drop_only_their_own_keys() {
    let clock = ManualClock::new();
    clock.set(Duration::from_secs(10));
    let l = limiter(&clock, true);
    // Keys 0..100 spend their burst now, keys 100..200 two seconds later.
    for k in 0..100 {
        for _ in 0..BURST {
            assert!(l.check(&Colliding(k)).is_allowed());
        }
    }
    clock.advance(Duration::from_secs(2));
    for k in 100..200 {
        for _ in 0..BURST {
            assert!(l.check(&Colliding(k)).is_allowed());
        }
    }
    // The first hundred are full again, so idle: the sweep drops exactly them (a rebuild
    // that copies the other hundred keys with their states).
    assert_eq!(l.evict_idle(), 100);
    assert_eq!(l.len(), 100);
    for k in 100..200 {
        assert!(
            !l.check(&Colliding(k)).is_allowed(),
            "key {k} after the sweep"
        );
    }
    // Forgetting one key hands that key, and no other, a fresh budget.
    assert!(l.forget(&Colliding(150)));
    assert!(l.check(&Colliding(150)).is_allowed());
    assert!(!l.check(&Colliding(151)).is_allowed());
}

#[test]
fn threads_on_keys_of_one_fingerprint_lose_and_share_nothing() {
    let clock = ManualClock::new();
    clock.set(Duration::from_secs(10));
    let l = Arc::new(limiter(&clock, true));
    // Four threads, each on its own 64 keys, all in one probe run, inserting at once (so the
    // shard rebuilds under checks of the others): each key admits exactly its burst.
    let totals: Vec<u32> = (0..4u64)
        .map(|t| {
            let l = Arc::clone(&l);
            std::thread::spawn(move || {
                let mut admitted = 0;
                for _ in 0..=BURST {
                    for k in 0..64 {
                        admitted += u32::from(l.check(&Colliding(t * 1000 + k)).is_allowed());
                    }
                }
                admitted
            })
        })
        .map(|h| h.join().unwrap())
        .collect();
    assert_eq!(totals, vec![64 * BURST; 4]);
    assert_eq!(l.len(), 256);
}

#[test]
fn borrowed_keys_find_owned_ones() {
    let l = KeyedLimiter::<String>::gcra(Quota::per_second(1))
        .exact_keys()
        .max_keys(10)
        .build()
        .unwrap();
    assert!(l.check("alice").is_allowed());
    assert!(!l.check(&"alice".to_string()).is_allowed());
    assert!(l.check("bob").is_allowed());
    assert_eq!(l.len(), 2);
}
