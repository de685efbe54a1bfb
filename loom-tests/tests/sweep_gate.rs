//! Loom model of a full bounded store making room: two threads ask for two new keys while the
//! table is at `max_keys` and holds one idle key. Both go through the real insert path, the
//! global bound, the sweep gate (`src/sync/sweep_gate.rs`, whose flag and timestamp are loom atomics
//! under `cfg(loom)`) and the sweep itself (per-shard loom mutex, loom-visible 16-byte slots).
//!
//! What any interleaving must give:
//! - the idle key is dropped exactly once (one sweeper, one removal);
//! - each new key is admitted (its single unit spent, exactly once) or refused, never anything
//!   else; at least one is admitted (the first to reach the gate sweeps and finds room);
//! - the store never holds more than `max_keys`: with one shard, the bound is checked under the
//!   shard's lock, so it is exact (the documented slack of one key per concurrent inserter
//!   arises only across shards);
//! - the counters agree: held keys = admitted keys, refused = 2 - admitted.
//!
//! So exactly one is admitted whatever the interleaving: the other finds the store full again,
//! and the gate closed for its back-off (the sweep ran at this same instant).
//!
//! Run: `RUSTFLAGS="--cfg loom" LOOM_MAX_PREEMPTIONS=3 cargo test --release`.

use std::collections::BTreeSet;
use std::time::Duration;

use cellgate::clock::ManualClock;
use cellgate::{KeyedLimiter, Quota};
use loom::sync::Arc;
use loom::thread;

use crate::common::{deterministic_hashing, distant_keys, model};

/// Emission interval, ns.
const T: u64 = 100;
/// When the models start.
const NOW: u64 = 1_000;

#[test]
fn two_new_keys_race_through_the_sweep_gate() {
    deterministic_hashing();
    let [old, a] = distant_keys();
    // A third key: any other value (the table has one shard of a few slots; where it lands
    // does not matter to the invariants).
    let b = a ^ 0x5555;
    let outcomes = std::sync::Arc::new(std::sync::Mutex::new(BTreeSet::new()));
    let seen = std::sync::Arc::clone(&outcomes);
    model("two_new_keys_race_through_the_sweep_gate", move || {
        let clock = ManualClock::new();
        clock.set_ns(NOW);
        let lim = KeyedLimiter::<u64>::gcra(Quota::with_interval(Duration::from_nanos(T)))
            .max_keys(1)
            .fixed_capacity()
            .when_full(cellgate::WhenFull::DenyNew)
            .clock(clock.clone())
            .build()
            .expect("valid quota");
        assert!(lim.check(&old).is_allowed());
        // One interval later the old key is idle: the store is full, but of an idle key.
        clock.set_ns(NOW + T);
        let lim = Arc::new(lim);
        let other = {
            let lim = Arc::clone(&lim);
            thread::spawn(move || lim.check(&b).is_allowed())
        };
        let got_a = lim.check(&a).is_allowed();
        let got_b = other.join().expect("model thread panicked");
        let admitted = usize::from(got_a) + usize::from(got_b);
        assert!(
            admitted >= 1,
            "nobody got in after the idle key was dropped"
        );
        assert_eq!(
            lim.stats().evicted,
            1,
            "the idle key is dropped exactly once"
        );
        assert_eq!(lim.len(), admitted, "held keys are the admitted ones");
        assert_eq!(lim.len(), 1, "one shard: the cap is exact");
        assert_eq!(lim.stats().refused, 2 - admitted as u64);
        // Each admitted key spent exactly its one unit (burst 1: nothing more now).
        for (key, got) in [(a, got_a), (b, got_b)] {
            if got {
                assert_eq!(lim.peek(&key).remaining(), 0, "key {key}");
            }
        }
        seen.lock().unwrap().insert(admitted);
    });
    let outcomes = outcomes.lock().unwrap();
    eprintln!("  two_new_keys_race_through_the_sweep_gate: admitted counts seen {outcomes:?}");
    assert_eq!(*outcomes, BTreeSet::from([1]), "{outcomes:?}");
}
