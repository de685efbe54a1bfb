//! `forget(&key)`: the one call that hands a key a fresh budget on purpose, in every keyed
//! store and algorithm, and in the sliding log.

use std::time::Duration;

use cellgate::clock::ManualClock;
use cellgate::{KeyedLimiter, KeyedLimiterBuilder, Quota};

const LIMIT: u32 = 5;

const ALGORITHMS: [&str; 4] = ["gcra", "fixed_window", "sliding_window", "stock"];

fn builder(alg: &str, clock: &ManualClock) -> KeyedLimiterBuilder<u64, ManualClock> {
    let w = Duration::from_secs(60);
    match alg {
        "gcra" => KeyedLimiter::<u64>::gcra(Quota::new(LIMIT, w)),
        "fixed_window" => KeyedLimiter::<u64>::fixed_window(LIMIT, w),
        "sliding_window" => KeyedLimiter::<u64>::sliding_window(LIMIT, w),
        _ => KeyedLimiter::<u64>::stock(LIMIT),
    }
    .clock(clock.clone())
}

/// `alg` in each store the builder offers: the growing table, the fixed-capacity table, the
/// exact map.
fn stores(alg: &str, clock: &ManualClock) -> Vec<(&'static str, KeyedLimiter<u64, ManualClock>)> {
    vec![
        ("grow", builder(alg, clock).build().unwrap()),
        (
            "fixed",
            builder(alg, clock)
                .max_keys(64)
                .fixed_capacity()
                .build()
                .unwrap(),
        ),
        ("exact", builder(alg, clock).exact_keys().build().unwrap()),
    ]
}

/// A drained key, forgotten, has exactly a new key's budget again; the other keys keep theirs;
/// a key that is not held is not created; the forgotten key goes at the next sweep.
#[test]
fn a_forgotten_key_has_a_fresh_budget_and_the_others_keep_theirs() {
    for alg in ALGORITHMS {
        let clock = ManualClock::new();
        clock.set(Duration::from_secs(3600));
        for (store, l) in stores(alg, &clock) {
            let at = format!("{alg} in {store}");
            assert!(l.check_n(&1, LIMIT).is_allowed(), "{at}");
            assert!(l.check_n(&2, 2).is_allowed(), "{at}");
            assert!(!l.check(&1).is_allowed(), "{at}: drained");
            assert!(l.forget(&1), "{at}: key 1 was held");
            assert_eq!(l.peek(&1).remaining(), LIMIT, "{at}: a fresh budget");
            assert_eq!(l.peek(&2).remaining(), LIMIT - 2, "{at}: key 2 untouched");
            let admitted = (0..=LIMIT).filter(|_| l.check(&1).is_allowed()).count();
            assert_eq!(admitted, LIMIT as usize, "{at}: exactly one budget again");
            let held = l.len();
            assert!(!l.forget(&3), "{at}: key 3 was never seen");
            assert_eq!(l.len(), held, "{at}: forget creates no key");
            // Forgotten again right away, the key is idle: a sweep drops it (not a stock,
            // whose keys are never idle once sold from, nor dropped).
            assert!(l.forget(&1), "{at}");
            if alg != "stock" {
                assert_eq!(l.evict_idle(), 1, "{at}: the forgotten key is idle");
                assert_eq!(l.len(), 1, "{at}");
            }
        }
    }
}

/// After a sweep at `s` and the clock back behind it (in the same window), a forgotten key
/// decides exactly as a key never seen: no more than a new key would get there.
#[test]
fn a_forgotten_key_behind_a_sweep_gets_what_a_new_key_gets() {
    for alg in ALGORITHMS {
        let clock = ManualClock::new();
        let s = Duration::from_secs(3650);
        for (store, l) in stores(alg, &clock) {
            let at = format!("{alg} in {store}");
            clock.set(s);
            l.evict_idle();
            clock.set(s - Duration::from_secs(40));
            assert!(l.check(&1).is_allowed(), "{at}");
            assert!(l.forget(&1), "{at}");
            assert_eq!(l.peek(&1), l.peek(&9), "{at}: as a key never seen");
        }
    }
}

#[test]
fn a_forgotten_sliding_log_key_has_a_fresh_budget() {
    let clock = ManualClock::new();
    let l = KeyedLimiter::<String>::sliding_log(LIMIT, Duration::from_secs(60))
        .clock(clock.clone())
        .build()
        .unwrap();
    assert!(l.check_n("alice", LIMIT).is_allowed());
    assert!(l.check_n("bob", 1).is_allowed());
    assert!(!l.check("alice").is_allowed());
    assert!(l.forget("alice"));
    assert_eq!(l.peek("alice").remaining(), LIMIT);
    assert_eq!(l.peek("bob").remaining(), LIMIT - 1);
    let admitted = (0..=LIMIT)
        .filter(|_| l.check("alice").is_allowed())
        .count();
    assert_eq!(admitted, LIMIT as usize);
    assert!(!l.forget("carol"));
    assert_eq!(l.len(), 2);
    assert!(l.forget("alice"));
    assert_eq!(l.evict_idle(), 1, "the forgotten key is idle");
}
