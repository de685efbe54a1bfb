//! `KeyedLimiter::check_many` decides exactly as `check` called on each key in order at the
//! same instant: two identical limiters on one `ManualClock`, one fed batches through
//! `check_many`, the other the same keys one `check` at a time, must agree on every decision
//! and on the keys held, refused and untracked, for both stores, with duplicate keys in a
//! batch, new keys, and keys arriving at `max_keys`.

use std::time::Duration;

use cellgate::clock::{Clock, ManualClock};
use cellgate::{Decision, KeyedLimiter, Quota, WhenFull};
use proptest::prelude::*;

#[derive(Debug, Clone, Copy)]
enum Algo {
    /// GCRA, interval 100 ns, this burst.
    Gcra(u32),
    /// Fixed window of 100 ns, this limit.
    FixedWindow(u32),
    /// A stock of this many units per key.
    Stock(u32),
}

#[derive(Debug, Clone, Copy)]
enum Store {
    /// The bounded table with this `max_keys`.
    Table(usize),
    /// The exact map, unbounded.
    Map,
    /// The exact map with this `max_keys`.
    MapCapped(usize),
}

#[derive(Debug, Clone)]
enum Step {
    /// Move the clock forward by this many ns.
    Advance(u64),
    /// One batch of keys.
    Batch(Vec<u64>),
    /// `set_quota` on both (GCRA only; ignored otherwise): interval 100 ns, this burst.
    SetQuota(u32),
}

fn build(
    algo: Algo,
    store: Store,
    policy: WhenFull,
    clock: &ManualClock,
) -> KeyedLimiter<u64, ManualClock> {
    let b = match algo {
        Algo::Gcra(burst) => KeyedLimiter::<u64>::gcra(
            Quota::with_interval(Duration::from_nanos(100)).with_burst(burst),
        ),
        Algo::FixedWindow(limit) => {
            KeyedLimiter::<u64>::fixed_window(limit, Duration::from_nanos(100))
        }
        Algo::Stock(units) => KeyedLimiter::<u64>::stock(units),
    }
    .clock(clock.clone())
    .when_full(policy);
    match store {
        Store::Table(n) => b.max_keys(n),
        Store::Map => b,
        Store::MapCapped(n) => b.exact_keys().max_keys(n),
    }
    .build()
    .expect("valid configuration")
}

fn algos() -> impl Strategy<Value = Algo> {
    prop_oneof![
        (1u32..=3).prop_map(Algo::Gcra),
        (1u32..=3).prop_map(Algo::FixedWindow),
        (1u32..=3).prop_map(Algo::Stock),
    ]
}

fn stores() -> impl Strategy<Value = Store> {
    prop_oneof![
        (1usize..=4).prop_map(Store::Table),
        // A table larger than one batch group (16 keys), so batches span several groups.
        Just(Store::Table(64)),
        Just(Store::Map),
        (1usize..=4).prop_map(Store::MapCapped),
    ]
}

fn steps() -> impl Strategy<Value = Vec<Step>> {
    let step = prop_oneof![
        2 => (0u64..=300).prop_map(Step::Advance),
        // Keys from a small range: duplicates within a batch, and more keys than `max_keys`.
        6 => prop::collection::vec(0u64..8, 0..40).prop_map(Step::Batch),
        // Many distinct keys: several groups of the table's first pass, new keys at the cap.
        1 => prop::collection::vec(0u64..100, 0..70).prop_map(Step::Batch),
        1 => (1u32..=3).prop_map(Step::SetQuota),
    ];
    prop::collection::vec(step, 1..25)
}

fn counters(l: &KeyedLimiter<u64, ManualClock>) -> (usize, u64, u64) {
    (l.len(), l.stats().refused, l.stats().untracked)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn check_many_equals_checks_in_order(
        algo in algos(),
        store in stores(),
        untracked in any::<bool>(),
        steps in steps(),
    ) {
        let policy = if untracked { WhenFull::AdmitUntracked } else { WhenFull::DenyNew };
        let clock = ManualClock::new();
        clock.set_ns(1_000);
        let batched = build(algo, store, policy, &clock);
        let single = build(algo, store, policy, &clock);
        let mut out: Vec<Decision> = Vec::new();
        for step in &steps {
            match step {
                Step::Advance(ns) => clock.advance(Duration::from_nanos(*ns)),
                Step::SetQuota(burst) => {
                    if let Algo::Gcra(_) = algo {
                        let q = Quota::with_interval(Duration::from_nanos(100))
                            .with_burst(*burst);
                        batched.set_quota(q).unwrap();
                        single.set_quota(q).unwrap();
                    }
                }
                Step::Batch(keys) => {
                    // Something already in `out` stays: decisions are appended.
                    out.clear();
                    out.push(single.peek(&u64::MAX));
                    let now = clock.now();
                    batched.check_many(keys, &mut out);
                    prop_assert_eq!(clock.now(), now);
                    let want: Vec<Decision> = keys.iter().map(|k| single.check(k)).collect();
                    prop_assert_eq!(out.len(), keys.len() + 1);
                    prop_assert_eq!(&out[1..], &want[..], "keys {:?}", keys);
                    prop_assert_eq!(counters(&batched), counters(&single));
                }
            }
        }
        // Same state afterwards, key by key.
        for k in 0..100u64 {
            prop_assert_eq!(batched.peek(&k), single.peek(&k), "key {}", k);
        }
    }
}

#[test]
fn duplicates_and_the_cap_in_one_batch() {
    // Burst 2, room for 2 keys: key 1 three times (the third denied), key 2 new, key 3 new but
    // the table is full of live keys (refused), key 2 again.
    let clock = ManualClock::new();
    let l = KeyedLimiter::<u64>::gcra(Quota::per_second(2))
        .clock(clock.clone())
        .max_keys(2)
        .when_full(cellgate::WhenFull::DenyNew)
        .build()
        .unwrap();
    let mut out = Vec::new();
    l.check_many(&[1, 1, 2, 1, 3, 2], &mut out);
    let got: Vec<(bool, u32)> = out
        .iter()
        .map(|d| (d.is_allowed(), d.remaining()))
        .collect();
    assert_eq!(
        got,
        [
            (true, 1),
            (true, 0),
            (true, 1),
            (false, 0),
            (false, 0),
            (true, 0)
        ]
    );
    assert_eq!((l.len(), l.stats().refused), (2, 1));
    // An empty batch appends nothing.
    l.check_many(std::iter::empty::<&u64>(), &mut out);
    assert_eq!(out.len(), 6);
}

#[test]
fn string_keys_by_str_in_both_stores() {
    for bounded in [false, true] {
        let b = KeyedLimiter::<String>::gcra(Quota::per_minute(1)).clock(ManualClock::new());
        let l = if bounded { b.max_keys(10) } else { b }.build().unwrap();
        let mut out = Vec::new();
        l.check_many(["a", "b", "a"], &mut out);
        let allowed: Vec<bool> = out.iter().map(Decision::is_allowed).collect();
        assert_eq!(allowed, [true, true, false], "bounded: {bounded}");
        assert_eq!(l.len(), 2);
    }
}
