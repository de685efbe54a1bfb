//! Loom models of the exact keyed store: the real `cellgate::KeyedLimiter` built with
//! `exact_keys()` (with or without `max_keys`), shared by loom threads. Its store is the growing
//! table (`src/store/grow_table/`) with each key kept beside its slot (`Keys` in
//! `src/sync/grow.rs`) and compared on every probe that meets the key's fingerprint, so the
//! models explore the lock-free probe, the state CAS, the inserts under the shard's lock and the
//! rebuilds (freeze, copy of states and keys, publish) with keys compared exactly. Under
//! `cfg(loom)` the table has one shard of two slots at least (see `grow_table.rs`'s models).
//!
//! The keys are [`Word`]s, not `u64`s: integer keys take the integer exact store
//! (`src/store/int_key.rs`), which is the growing table by fingerprint (modelled in
//! `grow_table.rs`) keeping idle keys on insert (as here), with no key column to model. The
//! last models use keys that all hash alike ([`Colliding`]): every key has the same 64-bit
//! fingerprint and home slot, so only the keys tell them apart, through a grow and a sweep that
//! race checks. The key column itself is once_cell's `OnceCell` (set under the shard's lock before
//! the slot's fingerprint is released, or filled before a rebuilt array is shared): loom does not
//! model its memory ordering, only the protocol around it.
//!
//! The clock is a frozen `ManualClock`, set from the main thread before any thread is spawned.
//! Hashing is made deterministic (`common::deterministic_hashing`) so that the map iterates its
//! keys in the same order in every execution (a sweep loads each cell in that order).
//!
//! Every model checks that the run is *linearizable*: the results the threads got and the
//! state left behind (keys held, refused and evicted, and every key's observable state: a peek,
//! then checks until the first denial, now and one interval later) are exactly those of running
//! the same operations one after another, in some order, on a fresh limiter. The serial
//! outcomes are tabulated once before each model runs. Each model also asserts its quota
//! directly (admitted never exceeds the burst, no admission is lost, one entry per key).
//!
//! Run: `RUSTFLAGS="--cfg loom" LOOM_MAX_PREEMPTIONS=3 cargo test --release`.

use std::time::Duration;

use cellgate::clock::ManualClock;
use cellgate::{KeyedLimiter, Quota};

use crate::common::{
    admitted, admitted_a_whole_interval_later, assert_eviction_kept_the_admission,
    assert_one_admission_one_entry, assert_race_went_both_ways, burst_quota, check_linearizable,
    deterministic_hashing, drained, keyed_check_behind_the_sweep, model, serial_outcomes, Got,
    KeyedObserved, KeyedOp as Op, KeyedScenario, LoomClock, Parts, StoreScenario, Word,
};

/// Emission interval, ns.
const T: u64 = 100;
/// The time the models start at.
const NOW: u64 = 1_000;
/// Two keys (the store compares them exactly: any two distinct keys will do).
const K1: u64 = 1;
const K2: u64 = 2;

type Keyed = KeyedLimiter<Word, ManualClock>;

/// A scenario (see `StoreScenario`): the bound `None` (`exact_keys()` with no bound) or `Some(n)`
/// (`max_keys(n).exact_keys()`); the setup gets the limiter and its clock.
type Scenario = StoreScenario<Option<usize>, fn(&Keyed, &ManualClock)>;

impl Scenario {
    /// Every serial order's outcome, labelled by its order.
    fn serial_outcomes(&self) -> Vec<(String, Vec<Got>, KeyedObserved)> {
        serial_outcomes(self)
            .into_iter()
            .map(|(order, got, seen)| (format!("serial {order:?}"), got, seen))
            .collect()
    }

    /// Model-checks the scenario against its serial outcomes (see `check_linearizable`), and
    /// asserts that loom reached at least two different serial orders' outcomes where the
    /// serial runs have two different outcomes (the race went both ways).
    fn check(&self, name: &str, extra: fn(&[Got], &KeyedObserved)) {
        deterministic_hashing();
        let serial = self.serial_outcomes();
        let matched = check_linearizable(name, self, serial.clone(), extra);
        assert_race_went_both_ways(name, &serial, &matched);
    }
}

impl KeyedScenario for Scenario {
    const NOW: u64 = NOW;
    type Limiter = Keyed;
    const LATER_NS: u64 = T;

    fn limiter(&self, clock: &ManualClock) -> Keyed {
        let builder = KeyedLimiter::<Word>::gcra(burst_quota(self.burst, T)).clock(clock.clone());
        let builder = match self.max_keys {
            Some(n) => builder
                .max_keys(n)
                .exact_keys()
                .when_full(cellgate::WhenFull::DenyNew),
            None => builder.exact_keys(),
        };
        let lim = builder.build().expect("valid quota");
        (self.setup)(&lim, clock);
        lim
    }

    fn parts(&self) -> Parts<'_> {
        self.store_parts()
    }
}

fn no_setup(_: &Keyed, _: &ManualClock) {}

/// (a) The insert race: two threads check the same new key at once, burst 1, no bound. Both
/// miss the lookup (read lock) and decide on a fresh state; the one whose `entry` comes second
/// finds the key occupied and must decide again on the winner's cell, under the write lock. So
/// exactly one entry is created and exactly one check admitted.
#[test]
fn insert_race_same_new_key() {
    Scenario {
        burst: 1,
        max_keys: None,
        setup: no_setup,
        keys: vec![K1],
        ops: vec![Op::Check(K1), Op::Check(K1)],
    }
    .check(
        "exact_map::insert_race_same_new_key",
        assert_one_admission_one_entry,
    );
}

/// (b) Eviction racing a check. The key is idle (admitted once at `NOW`, then the clock is set
/// to its TAT) when thread A checks it (burst 1: A must be admitted) while thread B calls
/// `evict_idle()`. The sweep judges and removes under the shard's write lock and A updates the
/// cell under the read lock, so A's admission is never written into a cell that is then
/// removed: afterwards a check at the same instant is denied, the key is held exactly once,
/// and `evict_idle()` returned 1 exactly when it ran first.
#[test]
fn evict_idle_races_check() {
    Scenario {
        burst: 1,
        max_keys: None,
        setup: |lim, clock| {
            assert!(lim.check(&Word(K1)).is_allowed());
            clock.set_ns(NOW + T); // TAT == now: idle
            assert_eq!(lim.len(), 1);
        },
        keys: vec![K1],
        ops: vec![Op::Check(K1), Op::EvictIdle],
    }
    .check(
        "exact_map::evict_idle_races_check",
        assert_eviction_kept_the_admission,
    );
}

/// (c) The sweep at the bound racing a check of the key it would evict:
/// `max_keys(1).exact_keys()`, `K1` held and idle. Thread A checks a new key `K2`: the map is
/// full, so A sweeps (`make_room`, through the sweep gate), which evicts `K1`, and inserts
/// `K2`. Thread B checks `K1` meanwhile (burst 1).
///
/// Serially, one of the two is admitted and the other refused (the sweep's back-off makes the
/// later request's miss a refusal rather than a second sweep). The map store reads its cap from
/// a counter outside the shard lock, so, as `KeyedLimiterBuilder::max_keys` documents, the bound may
/// be exceeded by the threads inserting at the same moment: when B's miss (after A's sweep
/// removed `K1`) re-inserts `K1` between A's room check and A's insert, both are admitted and
/// two keys are held. The model accepts exactly that outcome on top of the serial ones: both
/// admitted, two keys held (one over the bound), nothing refused, `K1` evicted once, and each
/// key's state that of one admission (the serial outcome with room for both keys, except for
/// the eviction). It also accepts the serial order B, A with `K1` evicted once: A's sweep
/// evicts `K1`, B re-creates it and is admitted, and A then finds the map full and is refused
/// (the decisions and the map of that order; only the eviction count differs). Each key stays
/// within its burst in every case.
#[test]
fn sweep_at_bound_races_check() {
    deterministic_hashing();
    let name = "exact_map::sweep_at_bound_races_check";
    let at_bound = Scenario {
        burst: 1,
        max_keys: Some(1),
        setup: |lim, clock| {
            assert!(lim.check(&Word(K1)).is_allowed());
            clock.set_ns(NOW + T); // K1 idle
        },
        keys: vec![K1, K2],
        ops: vec![Op::Check(K2), Op::Check(K1)],
    };
    let serial = at_bound.serial_outcomes();
    // One after the other, the bound is exact: one admitted, the other refused, one key held.
    for (label, got, seen) in &serial {
        assert_eq!(admitted(got), 1, "{label}: {got:#?}");
        assert_eq!((seen.refused, seen.len), (1, 1), "{label}: {seen:#?}");
    }
    // The same requests with room for both keys, in the order B then A (B's hit, A's insert):
    // both admitted, two keys held.
    let room = Scenario {
        max_keys: Some(2),
        ..at_bound.clone()
    };
    let (order, got, mut seen) = serial_outcomes(&room)
        .into_iter()
        .find(|(order, _, _)| order == &[1, 0])
        .expect("the order B, A");
    assert_eq!(admitted(&got), 2, "{got:#?}");
    // B re-created K1 after A's sweep evicted it.
    seen.evicted = Some(1);
    // A's sweep evicts the idle `K1`, B's miss re-creates it (admitted), and A, finding the
    // map full again, is refused: the decisions and the map of the serial order B, A, with
    // `K1` evicted once. The key counters are loom atomics, so loom reaches this order.
    let (_, b_first, mut b_first_seen) = serial
        .iter()
        .find(|(label, _, _)| label.contains("[1, 0]"))
        .cloned()
        .expect("the serial order B, A");
    b_first_seen.evicted = Some(1);
    let mut accepted = serial;
    accepted.push((
        format!("over the bound by one inserter (as {order:?} with room for both)"),
        got,
        seen,
    ));
    accepted.push((
        "B re-creates the key A's sweep evicted; A refused (as [1, 0], one eviction)".to_string(),
        b_first,
        b_first_seen,
    ));
    let matched = check_linearizable(name, &at_bound, accepted, |got, seen| {
        // Each key within its burst: admitted once at most, nothing left afterwards.
        for (key, d) in [(0, &got[1]), (1, &got[0])] {
            let admitted_here = usize::from(d.admitted());
            assert!(
                admitted_here + drained(&seen.now[key]) <= 1,
                "key {key} admitted over its burst: {got:#?} {seen:#?}"
            );
        }
        assert_eq!(
            admitted(got) + seen.refused as usize,
            2,
            "every request admitted or refused: {got:#?} {seen:#?}"
        );
        if admitted(got) == 2 {
            // Over the bound only by B's re-insert of the key A's sweep had just removed.
            assert_eq!(
                (seen.len, seen.refused, seen.evicted),
                (2, 0, Some(1)),
                "both admitted, but not by an insert racing the sweep: {got:#?} {seen:#?}"
            );
        } else {
            assert_eq!(seen.len, 1, "the bound holds: {seen:#?}");
        }
    });
    assert!(
        matched.iter().filter(|l| l.starts_with("serial")).count() == 2,
        "{name}: both serial orders are reached: {matched:?}"
    );
}

/// (d) Eviction with a clock that moves while a check reads it: the sweep floor. The key was
/// admitted at `NOW` (burst 1, so its TAT is `NOW + T`) and the clock stands at `NOW + T/2`.
/// Thread A checks the key, thread B calls `evict_idle()`, and the main thread moves the clock
/// (a `common::LoomClock`) to `NOW + T`, where the key is idle. If B reads the new time and
/// removes the key while A, having read the old time, has not looked it up yet, A misses and
/// creates the key again. It must start from the most conservative state the key could have
/// had when it was dropped (`swept`, raised by B before it takes the shard's write lock, and
/// read by A after its lookup missed under the read lock: the lock orders the two, which is
/// why both accesses may be relaxed), not from a fresh key: a fresh key would admit A at
/// `NOW + T/2`, half an interval after the previous admission, which burst 1 forbids. So A is
/// admitted only if it read `NOW + T`, and the outcome is one of the serial runs of
/// {check, evict} at either instant.
#[test]
fn evict_with_check_behind_the_sweep() {
    const BEFORE: u64 = NOW + T / 2;
    const AFTER: u64 = NOW + T;
    deterministic_hashing();
    keyed_check_behind_the_sweep(
        "exact_map::evict_with_check_behind_the_sweep",
        K1,
        [NOW, BEFORE, AFTER, T],
        |clock: &LoomClock| {
            KeyedLimiter::<Word>::gcra(Quota::new(1, Duration::from_nanos(T)))
                .exact_keys()
                .clock(clock.clone())
                .build()
                .expect("valid quota")
        },
        // Burst 1: A may be admitted only a whole interval after the admission at `NOW`.
        admitted_a_whole_interval_later(T),
    );
    // The interleaving the model is about (the sweep at the new time, then the check at the
    // old one) has the outcome of the check first: both deny at `BEFORE`. That loom reaches it
    // shows under mutation (see the README).
}

/// A key whose hash ignores its value: every `Colliding` key has the same fingerprint.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Colliding(u64);

impl std::hash::Hash for Colliding {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        state.write_u64(7);
    }
}

/// Burst 2, interval `T`, exact keys that all collide.
fn colliding(clock: &ManualClock) -> KeyedLimiter<Colliding, ManualClock> {
    KeyedLimiter::<Colliding>::gcra(Quota::new(2, Duration::from_nanos(2 * T)).with_burst(2))
        .clock(clock.clone())
        .exact_keys()
        .build()
        .expect("valid quota")
}

/// A check of held key A races the insert of key B, which has A's fingerprint: B's insert
/// finds the two-slot array full and grows it, copying A's state and key. Every interleaving
/// must keep A's admission (on the old array before the freeze, or on the new one) and give B
/// a slot and a budget of its own, never A's.
#[test]
fn colliding_insert_races_a_check_and_grows() {
    deterministic_hashing();
    model(
        "exact_map::colliding_insert_races_a_check_and_grows",
        || {
            let clock = ManualClock::new();
            clock.set_ns(NOW);
            let lim = loom::sync::Arc::new(colliding(&clock));
            assert!(lim.check(&Colliding(1)).is_allowed());
            let other = {
                let lim = loom::sync::Arc::clone(&lim);
                loom::thread::spawn(move || lim.check(&Colliding(1)))
            };
            let b = lim.check(&Colliding(2));
            let a = other.join().unwrap();
            assert!(
                a.is_allowed() && a.remaining() == 0,
                "A's second unit: {a:?}"
            );
            assert!(
                b.is_allowed() && b.remaining() == 1,
                "B's first unit: {b:?}"
            );
            assert_eq!(lim.len(), 2);
            assert_eq!(lim.peek(&Colliding(1)).remaining(), 0, "A's admission lost");
            assert_eq!(
                lim.peek(&Colliding(2)).remaining(),
                1,
                "B shares A's budget"
            );
        },
    );
}

/// A check of live key A races a sweep that drops idle key B, which has A's fingerprint (and
/// sits before or after A in the probe run): the rebuild must carry A's key and state, drop
/// only B, and A's admission must land exactly once.
#[test]
fn colliding_sweep_races_a_check() {
    deterministic_hashing();
    model("exact_map::colliding_sweep_races_a_check", || {
        let clock = ManualClock::new();
        clock.set_ns(NOW);
        let lim = loom::sync::Arc::new(colliding(&clock));
        // B first (the home slot), then A twice: A spent, B one unit spent.
        assert!(lim.check(&Colliding(2)).is_allowed());
        assert!(lim.check(&Colliding(1)).is_allowed());
        assert!(lim.check(&Colliding(1)).is_allowed());
        // One interval on: B is idle, A has one unit back.
        clock.set_ns(NOW + T);
        let other = {
            let lim = loom::sync::Arc::clone(&lim);
            loom::thread::spawn(move || lim.check(&Colliding(1)))
        };
        let evicted = lim.evict_idle();
        let a = other.join().unwrap();
        assert_eq!(evicted, 1, "B, and only B");
        assert!(a.is_allowed() && a.remaining() == 0, "A's unit: {a:?}");
        assert_eq!(lim.len(), 1);
        assert_eq!(lim.peek(&Colliding(1)).remaining(), 0, "A's admission lost");
        assert_eq!(lim.peek(&Colliding(2)).remaining(), 2);
    });
}
