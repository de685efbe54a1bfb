//! Loom models of the bounded fingerprint table: the real `cellgate::KeyedLimiter` built with
//! `max_keys` (so `src/store/table/mod.rs` is its store), shared by loom threads.
//!
//! Under `cfg(loom)` the table's per-shard writer lock is a loom `Mutex` and each 16-byte slot
//! is a loom-visible stand-in for `AtomicU128` (see `src/sync/mod.rs`), so loom explores the lock-free
//! probe, the slot compare-and-swap, the insert under the lock (with its re-probe) and the
//! sweep's TOMB/EMPTY handling, interleaved with each other.
//!
//! The clock is a frozen `ManualClock`, set from the main thread before any thread is spawned,
//! except in `evict_with_check_behind_the_sweep`, where it is a loom atomic that moves. Keys are chosen so that the slot layout is known: `max_keys` is tiny, so the table has one
//! shard of about twenty slots, hashing is made deterministic (see `common::deterministic_hashing`)
//! and two-key models use keys with the same home slot, so the second key's probe passes the
//! first key's slot.
//!
//! Every model checks that the run is *linearizable*: the results the threads got and the
//! state left behind (held keys, and every key's observable state: peeks, then checks until the
//! first denial, now and one interval later) are exactly those of running the same operations
//! one after another, in some order, on a fresh limiter. The serial outcomes are tabulated once
//! before each model runs. Each model also asserts its quota directly (admitted never exceeds
//! the burst, no admission is lost, one slot per key).
//!
//! Run: `RUSTFLAGS="--cfg loom" LOOM_MAX_PREEMPTIONS=3 cargo test --release`.

use std::time::Duration;

use cellgate::clock::ManualClock;
use cellgate::{KeyedLimiter, Quota};

use crate::common::{
    admitted, admitted_a_whole_interval_later, assert_eviction_kept_the_admission,
    assert_one_admission_one_entry, burst_quota, check_linearizable, colliding_keys,
    deterministic_hashing, distant_keys, drained, keyed_check_behind_the_sweep, serial_outcomes,
    Got, KeyedObserved, KeyedOp as Op, KeyedScenario, LoomClock, Parts, StoreScenario,
};

/// Emission interval, ns.
const T: u64 = 100;
/// The time the models start at.
const NOW: u64 = 1_000;

type Keyed = KeyedLimiter<u64, ManualClock>;

/// A scenario (see `StoreScenario`): `max_keys(n).fixed_capacity()`; the setup gets the
/// limiter, its clock and the scenario's keys.
type Scenario = StoreScenario<usize, fn(&Keyed, &ManualClock, &[u64])>;

impl Scenario {
    /// Model-checks the scenario: linearizability against the tabulated serial outcomes, plus
    /// `extra` (scenario-specific invariants) on each explored execution.
    fn check(&self, name: &str, extra: fn(&[Got], &KeyedObserved)) {
        deterministic_hashing();
        check_linearizable(name, self, serial_outcomes(self), extra);
    }
}

impl KeyedScenario for Scenario {
    const NOW: u64 = NOW;
    type Limiter = Keyed;
    const LATER_NS: u64 = T;
    /// Not `evicted()`: a sweep at the bound may drop an idle key that a racing check then
    /// re-creates, which decides as the serial order where the check came first but counts
    /// one eviction more.
    const OBSERVE_EVICTED: bool = false;

    fn limiter(&self, clock: &ManualClock) -> Keyed {
        let lim = KeyedLimiter::<u64>::gcra(burst_quota(self.burst, T))
            .max_keys(self.max_keys)
            .fixed_capacity()
            .when_full(cellgate::WhenFull::DenyNew)
            .clock(clock.clone())
            .build()
            .expect("valid quota");
        (self.setup)(&lim, clock, &self.keys);
        lim
    }

    fn parts(&self) -> Parts<'_> {
        self.store_parts()
    }
}

fn no_setup(_: &Keyed, _: &ManualClock, _: &[u64]) {}

/// (a) The insert race: two threads check the same new key at once, burst 1. Both miss on the
/// lock-free probe; the one that inserts second must find the key on its re-probe under the
/// shard lock and decide on it, so exactly one slot is created and exactly one is admitted.
#[test]
fn insert_race_same_new_key() {
    let [k, _] = distant_keys();
    Scenario {
        burst: 1,
        max_keys: 2,
        setup: no_setup,
        keys: vec![k],
        ops: vec![Op::Check(k), Op::Check(k)],
    }
    .check("insert_race_same_new_key", assert_one_admission_one_entry);
}

/// (b) Eviction racing a check. The key is idle (admitted once at `NOW`, then the clock is set
/// to its TAT) when thread A checks it (burst 1: A must be admitted) while thread B sweeps
/// (`evict_idle`). Whichever order the slot's CASes land in, A's admission must not be lost:
/// afterwards a check at the same instant is denied, the key is held exactly once, and the
/// total admitted at that instant equals the burst.
#[test]
fn evict_idle_races_check() {
    let [k, _] = distant_keys();
    Scenario {
        burst: 1,
        max_keys: 2,
        setup: |lim, clock, keys| {
            assert!(lim.check(&keys[0]).is_allowed());
            clock.set_ns(NOW + T); // TAT == now: idle
            assert_eq!(lim.len(), 1);
        },
        keys: vec![k],
        ops: vec![Op::Check(k), Op::EvictIdle],
    }
    .check("evict_idle_races_check", assert_eviction_kept_the_admission);
}

/// (c) Two different keys with the same home slot are inserted at once into a table bounded
/// to two keys, while a third thread checks the first key (burst 1). Exactly one slot per key,
/// each key admitted exactly once, nothing refused.
#[test]
fn two_new_keys_and_a_check() {
    let [k1, k2] = colliding_keys();
    Scenario {
        burst: 1,
        max_keys: 2,
        setup: no_setup,
        keys: vec![k1, k2],
        ops: vec![Op::Check(k1), Op::Check(k2), Op::Check(k1)],
    }
    .check("two_new_keys_and_a_check", |got, seen| {
        assert!(got[1].admitted(), "k2 is new and alone: {got:#?}");
        assert_eq!(seen.refused, 0);
        assert_eq!(
            [&got[0], &got[2]].iter().filter(|g| g.admitted()).count(),
            1,
            "burst 1: k1 admitted exactly once: {got:#?}"
        );
        assert_eq!(seen.len, 2, "exactly one slot per key");
    });
}

/// (d) Evicting a key whose slot lies on another key's probe run, racing a check of that other
/// key. `k1` and `k2` share a home slot, so `k2` sits right after `k1`. At the model's instant
/// `k1` is idle and `k2` is not (burst 2, one unit left). The sweep turns `k1`'s slot into a TOMB
/// and must leave it a TOMB (the next slot is not EMPTY): a probe for `k2` has to pass it. The
/// check of `k2` must find its slot (not create a second one) and get exactly the one unit left.
#[test]
fn evict_neighbour_races_check() {
    let [k1, k2] = colliding_keys();
    Scenario {
        burst: 2,
        max_keys: 2,
        setup: |lim, clock, keys| {
            let (k1, k2) = (keys[0], keys[1]);
            assert!(lim.check(&k1).is_allowed()); // TAT1 = NOW + T
            assert!(lim.check(&k2).is_allowed()); // k2 right after k1
            clock.set_ns(NOW + T); // k1 idle
            assert!(lim.check(&k2).is_allowed()); // TAT2 = NOW + 2T: one unit left
            assert_eq!(lim.len(), 2);
        },
        keys: vec![k1, k2],
        ops: vec![Op::Check(k2), Op::EvictIdle],
    }
    .check("evict_neighbour_races_check", |got, seen| {
        match got[0] {
            Got::Decision(d) => {
                assert!(d.is_allowed(), "k2 has one unit left: {d:?}");
                assert_eq!(d.remaining(), 0, "k2 was checked on a fresh slot: {d:?}");
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(got[1], Got::Evicted(1), "k1 is idle and is evicted");
        assert_eq!(drained(&seen.now[1]), 0, "k2 over its burst: {seen:#?}");
        assert_eq!(seen.len, 1, "k1 evicted, k2 held once");
    });
}

/// (e) The automatic sweep at the bound racing a check of the key it would evict. The table is
/// bounded to one key; `k1` is held and idle. Thread A checks a new key `k2`: the table is full,
/// so A sweeps (through the limiter's `make_room`), which evicts `k1`, and inserts `k2`. Thread B
/// checks `k1` meanwhile. Whatever the interleaving, at most one key is held, each key is
/// admitted at most once, exactly one of the two requests is refused for want of room, and the
/// outcome is one of the two serial ones (the sweep's back-off makes the later request's miss
/// a refusal rather than a second sweep).
#[test]
fn sweep_at_bound_races_check() {
    sweep_at_bound("sweep_at_bound_races_check", distant_keys());
}

/// (f) As (e), but `k2` has `k1`'s home slot, so A inserts `k2` into the very slot it just took
/// from `k1`. B may have found `k1` there before the sweep and then compare-and-swap a slot that
/// now holds `k2` with a state of its own: the CAS must fail on the fingerprint (this is why the
/// CAS covers all 16 bytes) and B must start over, not update or overwrite `k2`.
#[test]
fn sweep_at_bound_reuses_slot() {
    sweep_at_bound("sweep_at_bound_reuses_slot", colliding_keys());
}

fn sweep_at_bound(name: &str, [k1, k2]: [u64; 2]) {
    Scenario {
        burst: 1,
        max_keys: 1,
        setup: |lim, clock, keys| {
            assert!(lim.check(&keys[0]).is_allowed());
            clock.set_ns(NOW + T); // k1 idle
        },
        keys: vec![k1, k2],
        ops: vec![Op::Check(k2), Op::Check(k1)],
    }
    .check(name, |got, seen| {
        assert_eq!(admitted(got), 1, "one admitted, one refused: {got:#?}");
        assert_eq!(seen.refused, 1, "{seen:#?}");
        assert_eq!(seen.len, 1, "the bound holds: {seen:#?}");
    });
}

/// (g) Eviction with a clock that moves while a check reads it: the sweep floor. The key was
/// admitted at `NOW` (burst 1, so its TAT is `NOW + T`) and the clock stands at `NOW + T/2`.
/// Thread A checks the key, thread B calls `evict_idle()`, and the main thread moves the clock
/// to `NOW + T`, where the key is idle. If B reads the new time and evicts the key while A,
/// having read the old time, is between its probe and its CAS, A starts over on a missing key.
/// The key must then come back as the most conservative state it could have had when it was
/// dropped (`swept`), not as a fresh key: a fresh key would admit A at `NOW + T/2`, half an
/// interval after the previous admission, which burst 1 forbids. So A is admitted only if it
/// read `NOW + T`, and the outcome is one of the serial runs of {check, evict} at either instant.
#[test]
fn evict_with_check_behind_the_sweep() {
    const BEFORE: u64 = NOW + T / 2;
    const AFTER: u64 = NOW + T;
    deterministic_hashing();
    let [key, _] = distant_keys();
    keyed_check_behind_the_sweep(
        "evict_with_check_behind_the_sweep",
        key,
        [NOW, BEFORE, AFTER, T],
        |clock: &LoomClock| {
            KeyedLimiter::<u64>::gcra(Quota::new(1, Duration::from_nanos(T)))
                .max_keys(2)
                .fixed_capacity()
                .when_full(cellgate::WhenFull::DenyNew)
                .clock(clock.clone())
                .build()
                .expect("valid quota")
        },
        // Burst 1: A may be admitted only a whole interval after the admission at `NOW`.
        admitted_a_whole_interval_later(T),
    );
}

/// Three keys with the same home slot and distinct fingerprints, in the order of `keys_near`
/// in `common` (which this file cannot reach): the first keys from 0 up whose hashes' low 32
/// bits lie in `[2^30, 2^30 + 2^20)`, so their home is a quarter into the shard in every run.
fn three_colliding_keys() -> [u64; 3] {
    let mut keys: Vec<u64> = Vec::new();
    for key in 0u64.. {
        let h = crate::common::hash(key);
        if (h as u32).wrapping_sub(1 << 30) < 1 << 20
            && keys.iter().all(|&k| crate::common::hash(k) != h)
        {
            keys.push(key);
            if keys.len() == 3 {
                break;
            }
        }
    }
    [keys[0], keys[1], keys[2]]
}

/// The layout of the compaction models. `max_keys(3)` gives one shard of 24 slots, compacted
/// once more than 24 / 16 = 1 of them are TOMBs. Keys `a`, `x`, `k` share a home slot and sit
/// in that order at it and the two slots after it. At `NOW` they take 1, 2 and 4 units (burst
/// 4); at `NOW + T` a sweep drops `a`, leaving a TOMB that `x`'s and `k`'s probes pass (it
/// stays a TOMB: a live slot follows). At the model's instant, `NOW + 2T`, `x` is idle and `k`
/// has 2 units left. The racing `evict_idle()` drops `x`: two TOMBs, so it compacts the shard
/// and moves `k` from the third slot to its home, the first TOMB on its path.
fn compaction_setup(lim: &Keyed, clock: &ManualClock, keys: &[u64]) {
    let [a, x, k] = [keys[0], keys[1], keys[2]];
    assert!(lim.check_n(&a, 1).is_allowed());
    assert!(lim.check_n(&x, 2).is_allowed());
    assert!(lim.check_n(&k, 4).is_allowed());
    clock.set_ns(NOW + T);
    assert_eq!(lim.evict_idle(), 1, "a is idle");
    clock.set_ns(NOW + 2 * T);
    assert_eq!(lim.len(), 2);
    assert_eq!(lim.peek(&k).remaining(), 2);
}

fn compaction_scenario(op: Op) -> Scenario {
    let keys = three_colliding_keys();
    Scenario {
        burst: 4,
        max_keys: 3,
        setup: compaction_setup,
        keys: keys.to_vec(),
        ops: vec![op, Op::EvictIdle],
    }
}

/// (h) A check racing the compaction that moves its key. The sweep's compaction takes `k` out
/// of its slot (CAS to TOMB from the exact value it saw) and stores it at its home. A check of
/// `k` may hit the old slot before the move (its CAS lands first, and the mover must carry the
/// new state, or lands after and fails on the fingerprint), miss it in between (and find it
/// under the shard's lock), or hit the new slot. The admission is never lost nor doubled: `k`
/// is admitted with one unit left, and exactly one more check is admitted afterwards.
#[test]
fn check_races_compaction_moving_its_key() {
    deterministic_hashing();
    let [_, _, k] = three_colliding_keys();
    compaction_scenario(Op::Check(k)).check(
        "check_races_compaction_moving_its_key",
        |got, seen| {
            match got[0] {
                Got::Decision(d) => {
                    assert!(d.is_allowed(), "k has 2 units left: {d:?}");
                    assert_eq!(d.remaining(), 1, "k was checked on a fresh state: {d:?}");
                }
                other => panic!("{other:?}"),
            }
            assert_eq!(got[1], Got::Evicted(1), "x is idle and evicted");
            assert_eq!(seen.len, 1, "only k is held, once: {seen:#?}");
            assert_eq!(
                drained(&seen.now[2]),
                1,
                "k's admission was lost or doubled: {seen:#?}"
            );
        },
    );
}

/// (i) A peek racing the compaction that moves its key: between the move's two steps a
/// lock-free probe misses `k`; the peek must confirm the miss under the shard's lock (and then
/// find `k`), not report a fresh key.
#[test]
fn peek_races_compaction_moving_its_key() {
    deterministic_hashing();
    let [_, _, k] = three_colliding_keys();
    compaction_scenario(Op::Peek(k)).check("peek_races_compaction_moving_its_key", |got, seen| {
        match got[0] {
            Got::Decision(d) => assert_eq!(d.remaining(), 2, "peek saw k as fresh: {d:?}"),
            other => panic!("{other:?}"),
        }
        assert_eq!(seen.len, 1, "{seen:#?}");
    });
}

/// (j) A refund racing the compaction that moves its key: a refund creates no key and gives
/// nothing back for a key that is not held, so a miss during the move must be confirmed under
/// the shard's lock; the unit comes back exactly once.
#[test]
fn refund_races_compaction_moving_its_key() {
    deterministic_hashing();
    let [_, _, k] = three_colliding_keys();
    compaction_scenario(Op::Refund(k, 1)).check(
        "refund_races_compaction_moving_its_key",
        |got, seen| {
            assert_eq!(got[0], Got::Refunded(true), "k is held: {got:#?}");
            assert_eq!(seen.len, 1, "{seen:#?}");
            assert_eq!(
                drained(&seen.now[2]),
                3,
                "the unit came back once: {seen:#?}"
            );
            assert_eq!(
                got[1],
                Got::Evicted(1),
                "x is idle and evicted; k stays live"
            );
        },
    );
}
