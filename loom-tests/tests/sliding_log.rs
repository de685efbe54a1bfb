//! Loom models of the exact sliding log: the real `cellgate::SlidingLog`
//! (`KeyedLimiter::sliding_log`), shared by loom threads.
//!
//! Each key's log sits behind its own mutex inside the exact map. Under `cfg(loom)` that mutex
//! is a loom `Mutex` (`src/sync/mod.rs`) and the map is the loom-visible stand-in for dashmap
//! (`src/sync/map.rs`: one shard behind a loom `RwLock`), so loom explores the lookups (read
//! lock), the per-key mutex, the insert of a new key (`entry`, write lock) and the sweep
//! (`retain`, write lock, locking each log to judge it) against each other. The algorithm
//! inside the lock (`Log::step`) is the shipped code.
//!
//! The clock is a frozen `ManualClock`, set from the main thread before any thread is spawned.
//! Window `W = 100 ns`, the models start at `NOW = 1000`.
//!
//! Every model checks linearizability against the serial outcomes (results, keys held, keys
//! refused, and per key a peek and checks until the first denial, now and one window later),
//! and asserts the limit directly: never more than `limit` admitted, no admission lost.
//!
//! Run: `RUSTFLAGS="--cfg loom" LOOM_MAX_PREEMPTIONS=3 cargo test --release`.

use std::time::Duration;

use cellgate::clock::ManualClock;
use cellgate::{KeyedLimiter, SlidingLog};

use crate::common::{
    admitted, assert_eviction_kept_the_admission, assert_one_admission_one_entry,
    assert_race_went_both_ways, check_linearizable, deterministic_hashing, drained,
    keyed_check_behind_the_sweep, serial_outcomes, Got, KeyedObserved, KeyedOp as Op,
    KeyedScenario, LoomClock, Parts,
};

/// The window, ns.
const W: u64 = 100;
/// The time the models start at.
const NOW: u64 = 1_000;
/// The key.
const KEY: u64 = 7;

type Log = SlidingLog<u64, ManualClock>;
type Observed = KeyedObserved;

/// A scenario: a limit, a prefix run before any thread starts, one operation per thread.
#[derive(Clone)]
struct Scenario {
    limit: u32,
    /// Runs on the main thread before the threads are spawned (and before each serial run).
    setup: fn(&Log, &ManualClock),
    ops: Vec<Op>,
}

impl Scenario {
    /// Model-checks the scenario: linearizability against the serial outcomes, `extra` on each
    /// execution, and (where the serial orders differ in outcome) that the race went both ways.
    fn check(&self, name: &str, extra: fn(&[Got], &Observed)) {
        deterministic_hashing();
        let serial = serial_outcomes(self);
        let matched = check_linearizable(name, self, serial.clone(), extra);
        assert_race_went_both_ways(name, &serial, &matched);
    }
}

impl KeyedScenario for Scenario {
    const NOW: u64 = NOW;
    type Limiter = Log;
    const LATER_NS: u64 = W;

    fn limiter(&self, clock: &ManualClock) -> Log {
        let log = KeyedLimiter::<u64>::sliding_log(self.limit, Duration::from_nanos(W))
            .clock(clock.clone())
            .build()
            .expect("valid limit and window");
        (self.setup)(&log, clock);
        log
    }

    fn parts(&self) -> Parts<'_> {
        Parts {
            ops: &self.ops,
            keys: &[KEY],
            most: self.limit,
        }
    }
}

/// Two checks of a new key, limit 1: both miss the lookup and decide on a fresh log; the one
/// whose `entry` comes second must find the key occupied and decide again on the winner's
/// log, under its mutex. Exactly one admitted, one log.
#[test]
fn two_checks_new_key_limit_one() {
    Scenario {
        limit: 1,
        setup: |_, _| {},
        ops: vec![Op::Check(KEY), Op::Check(KEY)],
    }
    .check(
        "sliding_log::two_checks_new_key_limit_one",
        assert_one_admission_one_entry,
    );
}

/// Three checks of a held key, limit 2: the key was admitted once a window ago, so it is held
/// with an expired entry and its whole limit. The three find it under the read lock and
/// decide one after another under its mutex: exactly two admitted, and nothing fits at the same
/// instant afterwards.
#[test]
fn three_checks_held_key_limit_two() {
    Scenario {
        limit: 2,
        setup: |log, clock| {
            clock.set_ns(NOW - W);
            assert!(log.check(&KEY).is_allowed());
            clock.set_ns(NOW); // that entry has just expired
            assert_eq!(log.len(), 1);
        },
        ops: vec![Op::Check(KEY), Op::Check(KEY), Op::Check(KEY)],
    }
    .check(
        "sliding_log::three_checks_held_key_limit_two",
        |got, seen| {
            assert_eq!(admitted(got), 2, "limit 2: exactly two admitted: {got:#?}");
            assert_eq!(seen.len, 1, "{seen:#?}");
            assert_eq!(drained(&seen.now[0]), 0, "an admission was lost: {seen:#?}");
            assert_eq!(drained(&seen.later[0]), 2, "{seen:#?}");
        },
    );
}

/// Eviction racing a check: the key was admitted at `NOW` (limit 1) and the clock is then set
/// to `NOW + W`, where that entry has expired and the key is idle. Thread A checks it (it must
/// be admitted) while thread B calls `evict_idle()`, which locks each log to judge it under the
/// shard's write lock. A's admission must never be recorded in a log that is then dropped: a
/// further check at the same instant is denied, the key is held once, and `evict_idle()`
/// returned 1 exactly when it ran first.
#[test]
fn evict_idle_races_check() {
    Scenario {
        limit: 1,
        setup: |log, clock| {
            assert!(log.check(&KEY).is_allowed());
            clock.set_ns(NOW + W); // idle
            assert_eq!(log.len(), 1);
        },
        ops: vec![Op::Check(KEY), Op::EvictIdle],
    }
    .check(
        "sliding_log::evict_idle_races_check",
        assert_eviction_kept_the_admission,
    );
}

/// Eviction with a clock that moves while a check reads it: the sweep floor. The key was
/// admitted at `NOW` (limit 1, so that entry expires at `NOW + W`) and the clock stands at
/// `NOW + W/2`. Thread A checks the key, thread B calls `evict_idle()`, and the main thread
/// moves the clock (a `common::LoomClock`) to `NOW + W`, where the key is idle. If B reads the
/// new time and drops the log while A, having read the old time, has not looked it up yet, A
/// misses and creates the key again. It must start from `Log::swept` (the most conservative
/// log the key could have had: full before the sweep's time), not from an empty log, which
/// would admit A at `NOW + W/2` with the entry of `NOW` still inside its window. So A is
/// admitted only if it read `NOW + W`, and the outcome is one of the serial runs of
/// {check, evict} at either instant.
#[test]
fn evict_with_check_behind_the_sweep() {
    const BEFORE: u64 = NOW + W / 2;
    const AFTER: u64 = NOW + W;
    deterministic_hashing();
    keyed_check_behind_the_sweep(
        "sliding_log::evict_with_check_behind_the_sweep",
        KEY,
        [NOW, BEFORE, AFTER, W],
        |clock: &LoomClock| {
            KeyedLimiter::<u64>::sliding_log(1, Duration::from_nanos(W))
                .clock(clock.clone())
                .build()
                .expect("valid limit and window")
        },
        |got, seen| {
            // Limit 1 in any window of W: A may be admitted only once the entry of `NOW` has
            // expired, so its own entry (seen by the peek at `AFTER`) expires at `AFTER + W`.
            if got.0.is_allowed() {
                assert_eq!(
                    seen.1[0].reset_after_ns(),
                    W,
                    "admitted with the entry of NOW still in its window: {got:#?} {seen:#?}"
                );
            }
        },
    );
    // The interleaving the model is about (the sweep at the new time, then the check at the
    // old one) has the outcome of the check first: both deny at `BEFORE`. That loom reaches it
    // shows under mutation (see the README).
}
