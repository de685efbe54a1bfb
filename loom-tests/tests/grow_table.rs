//! Loom models of the growing table (`src/store/grow_table/`, `src/sync/grow.rs`,
//! `src/sync/published.rs`): the real `cellgate::KeyedLimiter` with its default store, shared
//! by loom threads.
//!
//! Under `cfg(loom)` the table has one shard whose smallest array has two slots (so a second
//! key grows it and a sweep of one of two keys shrinks it), its slots and frozen flags are loom
//! atomics, its writer lock a loom mutex, and the per-thread cache of the published arrays a
//! loom `thread_local!`. So loom explores the lock-free probe and 64-bit state CAS, on fresh and
//! stale views, against the rebuild's steps (freeze, judge and copy, install and publish).
//!
//! Each model states what every interleaving must give; the mutations each one catches are
//! listed in `loom-tests/README.md` ("The growing table").
//!
//! Run: `RUSTFLAGS="--cfg loom" LOOM_MAX_PREEMPTIONS=3 cargo test --release --test models grow_table::`.

use std::time::Duration;

use cellgate::clock::ManualClock;
use cellgate::{KeyedLimiter, Quota};
use loom::sync::Arc;
use loom::thread;

use crate::common::{deterministic_hashing, model};

/// Emission interval, ns.
const T: u64 = 100;
/// The time the models start at.
const NOW: u64 = 1_000;

const A: u64 = 1;
const B: u64 = 2;
const C: u64 = 3;

/// Interval `T`, burst 2, the default (growing) store.
fn limiter(clock: &ManualClock) -> KeyedLimiter<u64, ManualClock> {
    KeyedLimiter::<u64>::gcra(Quota::new(2, Duration::from_nanos(2 * T)).with_burst(2))
        .clock(clock.clone())
        .build()
        .expect("valid quota")
}

/// A shared limiter of the default store, and its clock, set to `NOW`.
fn shared_at_now() -> (ManualClock, Arc<KeyedLimiter<u64, ManualClock>>) {
    let clock = ManualClock::new();
    clock.set_ns(NOW);
    let lim = Arc::new(limiter(&clock));
    (clock, lim)
}

/// A shared limiter at `NOW` in which A has spent one unit: A fills the two-slot array, so the
/// insert of another key grows it.
fn a_fills_the_array() -> Arc<KeyedLimiter<u64, ManualClock>> {
    let (_, lim) = shared_at_now();
    assert!(lim.check(&A).is_allowed());
    lim
}

/// The limiter of the shrink and sweep models: A has spent both units at `NOW` and B one; the
/// clock then moves one interval on, so B is idle (TAT = now) and A has one unit back.
fn a_spent_b_idle() -> Arc<KeyedLimiter<u64, ManualClock>> {
    let (clock, lim) = shared_at_now();
    assert!(lim.check(&A).is_allowed());
    assert!(lim.check(&A).is_allowed());
    assert!(lim.check(&B).is_allowed());
    clock.set_ns(NOW + T);
    lim
}

/// After B's insert grew the array past A: B's check got its first unit, both keys are held,
/// and A's last admission survived the grow (A has no unit left).
fn assert_the_grow_kept_a(lim: &KeyedLimiter<u64, ManualClock>, b: cellgate::Decision) {
    assert!(
        b.is_allowed() && b.remaining() == 1,
        "B's first unit: {b:?}"
    );
    assert_eq!(lim.len(), 2);
    assert_eq!(
        lim.peek(&A).remaining(),
        0,
        "A's admission was lost in the grow"
    );
}

/// Two checks of the new key B raced (one insert growing the array): both were admitted, one
/// unit each, and B is held once, beside A, with both units spent.
fn assert_both_units_of_b_landed(
    lim: &KeyedLimiter<u64, ManualClock>,
    mine: cellgate::Decision,
    theirs: cellgate::Decision,
) {
    assert!(mine.is_allowed() && theirs.is_allowed());
    let mut left = [mine.remaining(), theirs.remaining()];
    left.sort_unstable();
    assert_eq!(left, [0, 1], "one of the two units was lost");
    assert_eq!(lim.len(), 2, "B held once, A kept");
    assert_eq!(lim.peek(&B).remaining(), 0, "B's units were not stored");
}

/// A loom thread that checks `key` once.
fn spawn_check(
    lim: &Arc<KeyedLimiter<u64, ManualClock>>,
    key: u64,
) -> thread::JoinHandle<cellgate::Decision> {
    let lim = Arc::clone(lim);
    thread::spawn(move || lim.check(&key))
}

/// A check of a held key races the insert of a second key, which finds the two-slot array full
/// and grows it (rebuild into three slots). The check's admission must survive the grow: it
/// lands on the old array before the freeze flips A's word (and is copied) or fails there,
/// goes to the lock and lands on the new one.
#[test]
fn check_races_a_grow() {
    deterministic_hashing();
    model("check_races_a_grow", || {
        let lim = a_fills_the_array();
        let other = spawn_check(&lim, A);
        let b = lim.check(&B);
        let a = other.join().unwrap();
        assert!(
            a.is_allowed() && a.remaining() == 0,
            "A's second unit: {a:?}"
        );
        assert_the_grow_kept_a(&lim, b);
        assert!(!lim.check(&A).is_allowed());
        assert_eq!(lim.peek(&B).remaining(), 1);
    });
}

/// A check of a live key races a sweep that drops another, idle key and so shrinks the array
/// (three slots for two keys, rebuilt into two for one).
#[test]
fn check_races_a_shrink() {
    deterministic_hashing();
    model("check_races_a_shrink", || {
        let lim = a_spent_b_idle();
        let other = spawn_check(&lim, A);
        let evicted = lim.evict_idle();
        let a = other.join().unwrap();
        assert_eq!(evicted, 1, "B, and only B");
        assert!(a.is_allowed() && a.remaining() == 0, "A's unit: {a:?}");
        assert_eq!(lim.len(), 1);
        assert_eq!(
            lim.peek(&A).remaining(),
            0,
            "A's admission was lost in the shrink"
        );
        assert_eq!(lim.peek(&B).remaining(), 2);
    });
}

/// Two checks of the same new key race while its insert grows the array: exactly one slot is
/// made for the key, and both units land in it.
#[test]
fn inserts_of_one_key_race_a_grow() {
    deterministic_hashing();
    model("inserts_of_one_key_race_a_grow", || {
        let lim = a_fills_the_array();
        let other = spawn_check(&lim, B);
        let mine = lim.check(&B);
        let theirs = other.join().unwrap();
        assert_both_units_of_b_landed(&lim, mine, theirs);
        assert_eq!(lim.peek(&A).remaining(), 1);
    });
}

/// A sweep of a table holding A (spent) and B (idle) races a check of `key`: the check's unit
/// is spent whatever lands first, the sweep dropped at most B, and A keeps its state.
fn sweep_races_a_check_of(key: u64) {
    let lim = a_spent_b_idle();
    let other = spawn_check(&lim, key);
    let evicted = lim.evict_idle();
    let d = other.join().unwrap();
    assert!(d.is_allowed() && d.remaining() == 1, "{key}'s unit: {d:?}");
    assert!(evicted <= 1);
    assert_eq!(lim.len(), 2, "A and {key}");
    assert_eq!(lim.peek(&key).remaining(), 1, "{key}'s admission was lost");
    assert_eq!(lim.peek(&A).remaining(), 1);
}

/// A sweep races a check that makes an idle key live again. Whichever lands first, the key
/// ends with the check's unit spent: a key is dropped only on its settled, idle state.
#[test]
fn eviction_races_a_check_that_revives_the_key() {
    deterministic_hashing();
    model("eviction_races_a_check_that_revives_the_key", || {
        sweep_races_a_check_of(B);
    });
}

/// The insert of a new key races a sweep that shrinks the array (dropping an idle key): the new
/// key is kept, in the array that the sweep installed or one rebuilt after it. (B is dropped by
/// the sweep, or by C's insert if that had to rebuild first; then the sweep finds nothing idle.)
#[test]
fn insert_races_a_shrink() {
    deterministic_hashing();
    model("insert_races_a_shrink", || {
        sweep_races_a_check_of(C);
    });
}

/// A thread whose cached view of the arrays goes stale: it checks A twice (its first check
/// takes the current set into its cache) while the main thread's insert of B grows the array.
/// A check on the stale view finds the old array frozen and goes to the lock: A's units land
/// exactly once, in the array that survives.
#[test]
fn a_stale_view_sends_checks_to_the_lock() {
    deterministic_hashing();
    model("a_stale_view_sends_checks_to_the_lock", || {
        let (clock, lim) = shared_at_now();
        assert!(lim.check(&A).is_allowed());
        assert!(lim.check(&A).is_allowed());
        // One interval on, A has one unit back.
        clock.set_ns(NOW + T);
        let other = {
            let lim = Arc::clone(&lim);
            thread::spawn(move || (lim.check(&A), lim.check(&A)))
        };
        let b = lim.check(&B);
        let (first, second) = other.join().unwrap();
        assert!(first.is_allowed() && first.remaining() == 0, "{first:?}");
        assert!(!second.is_allowed(), "A's unit admitted twice: {second:?}");
        assert_the_grow_kept_a(&lim, b);
    });
}

/// At the ceiling (`max_keys(2)`, the default `EvictLight`): a new key C's insert drops the
/// light key B while a check makes B busy. B is judged on its final state: if B's check lands
/// while B still holds its first unit, B is busy and is never dropped (C is refused: nothing
/// light is left). If the drop lands first, B's check finds B new and is decided fresh; B is
/// then light again and, as the policy allows, either takes C's place or gives its own to C's
/// retried insert. The busy key A is never touched.
#[test]
fn a_light_key_made_busy_races_its_eviction() {
    deterministic_hashing();
    model("a_light_key_made_busy_races_its_eviction", || {
        let clock = ManualClock::new();
        clock.set_ns(NOW);
        let lim = Arc::new(
            KeyedLimiter::<u64>::gcra(Quota::new(2, Duration::from_nanos(2 * T)).with_burst(2))
                .clock(clock.clone())
                .max_keys(2)
                .build()
                .expect("valid quota"),
        );
        // A busy (both units spent), B light (one unit spent).
        assert!(lim.check_n(&A, 2).is_allowed());
        assert!(lim.check(&B).is_allowed());
        let other = spawn_check(&lim, B);
        let c = lim.check(&C);
        let b = other.join().unwrap();
        assert!(b.is_allowed(), "B's check: {b:?}");
        assert_eq!(lim.len(), 2);
        assert_eq!(lim.peek(&A).remaining(), 0, "busy A was dropped");
        if b.remaining() == 0 {
            // B's check found B holding its first unit: B is busy and must stay.
            assert_eq!(lim.peek(&B).remaining(), 0, "busy B was dropped");
            assert!(!c.is_allowed(), "C took a busy key's place: {c:?}");
            assert_eq!(c.denial(), Some(cellgate::Denial::StoreFull));
            assert_eq!(lim.stats().evicted_live, 0);
        } else {
            // B had been dropped (light): its check was decided fresh, C got in.
            assert_eq!(b.remaining(), 1, "B's check after its drop: {b:?}");
            assert!(c.is_allowed(), "{c:?}");
            let (b_left, c_left) = (lim.peek(&B).remaining(), lim.peek(&C).remaining());
            assert!(
                (b_left, c_left) == (1, 2) || (b_left, c_left) == (2, 1),
                "B {b_left}, C {c_left}: exactly one of the two light keys held"
            );
            assert_eq!(lim.stats().evicted_live, 2);
        }
    });
}

/// Two checks of a new key B race a peek of it, each thread's view taken before B existed (each
/// peeked B once, finding it absent without a lock); one check's insert grows the array. A peek
/// of a key it finds absent, and a check that would write nothing on a fresh state, decide
/// without the lock; one that writes must insert under it. Both units land in B's one slot, and
/// the racing peek reports 2, 1 or 0 left, as some order of the three calls would.
#[test]
fn checks_of_a_new_key_race_a_lock_free_peek() {
    deterministic_hashing();
    model("checks_of_a_new_key_race_a_lock_free_peek", || {
        let lim = a_fills_the_array();
        assert_eq!(lim.peek(&B).remaining(), 2);
        let other = {
            let lim = Arc::clone(&lim);
            thread::spawn(move || {
                // Before this thread's check: at most the main thread's unit is spent.
                assert!(lim.peek(&B).remaining() >= 1, "a unit spent twice");
                lim.check(&B)
            })
        };
        let peeker = {
            let lim = Arc::clone(&lim);
            thread::spawn(move || lim.peek(&B))
        };
        let mine = lim.check(&B);
        let theirs = other.join().unwrap();
        let peeked = peeker.join().unwrap();
        assert_both_units_of_b_landed(&lim, mine, theirs);
        assert!(peeked.remaining() <= 2, "{peeked:?}");
    });
}

/// A table built where a dropped one was (its index in every thread's cache reused): a thread
/// that cached the dropped table's arrays and then checks the new table must use the new
/// table's, never the old one's. The old table had A's two units spent; the new one starts
/// fresh, and its checks are stored in it.
#[test]
fn a_table_built_after_one_was_dropped_starts_fresh() {
    deterministic_hashing();
    model("a_table_built_after_one_was_dropped_starts_fresh", || {
        let (clock, old) = shared_at_now();
        let (tx, rx) = loom::sync::mpsc::channel();
        let user = {
            let old = Arc::clone(&old);
            thread::spawn(move || {
                assert!(old.check_n(&A, 2).is_allowed());
                drop(old);
                let new: Arc<KeyedLimiter<u64, ManualClock>> = rx.recv().unwrap();
                let first = new.check(&A);
                (first, new)
            })
        };
        drop(old);
        let new = Arc::new(limiter(&clock));
        tx.send(Arc::clone(&new)).unwrap();
        let check = new.check(&A);
        let (first, _) = user.join().unwrap();
        assert!(
            check.is_allowed() && first.is_allowed(),
            "{check:?} {first:?}"
        );
        assert_eq!(
            new.peek(&A).remaining(),
            0,
            "a check landed in the dropped table's arrays"
        );
    });
}
