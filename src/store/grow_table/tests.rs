//! The growing table against a model: grow, shrink, reclaim, the ceiling, and concurrent
//! checks racing rebuilds.

use super::*;
use std::cell::Cell;

/// The tests' policy: no time, idle means state 0, a ceiling.
struct Policy {
    ceiling: usize,
    sweeps: Cell<u32>,
}

impl Policy {
    fn new(ceiling: usize) -> Self {
        Self {
            ceiling,
            sweeps: Cell::new(0),
        }
    }
}

impl GrowPolicy for Policy {
    fn fresh(&self) -> u64 {
        0
    }
    fn is_idle(&self, word: u64) -> bool {
        word == 0
    }
    fn before_sweep(&self) {
        self.sweeps.set(self.sweeps.get() + 1);
    }
    fn has_room(&self, held: usize) -> bool {
        held < self.ceiling
    }
    fn make_room(&self) -> bool {
        false
    }
    fn dropped(&self, _: usize) {}
    fn is_light(&self, _: u64) -> bool {
        false
    }
    fn evicts_light(&self) -> bool {
        false
    }
    fn now(&self) -> u64 {
        0
    }
    fn dropped_live(&self, _: usize) {}
}

/// Spreads small integers over the hash space (an odd multiplier is a bijection).
fn h(k: u64) -> u64 {
    k.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ (k >> 7)
}

fn set(t: &GrowTable, k: u64, v: u64) -> Option<u64> {
    t.insert(
        h(k),
        &ByFingerprint,
        |_| (v, Some(v)),
        &Policy::new(usize::MAX),
        None,
    )
}

#[test]
fn grows_finds_and_shrinks() {
    let t = GrowTable::new(None, None);
    let start = t.slots();
    const N: u64 = 20_000;
    for k in 0..N {
        assert_eq!(set(&t, k, k + 1), Some(k + 1));
    }
    assert_eq!(t.len(), N as usize);
    for k in 0..N {
        assert_eq!(t.get(h(k), &ByFingerprint), Some(k + 1), "key {k}");
    }
    assert_eq!(t.get(h(N * 2), &ByFingerprint), None);
    let grown = t.slots();
    assert!(grown >= N as usize * 4 / 3, "{grown} slots for {N} keys");
    // Load 0.5 at least, right after a rebuild.
    assert!(
        grown <= N as usize * 2 + start,
        "{grown} slots for {N} keys"
    );
    // Make all but 100 idle, then sweep: the arrays shrink to the live keys.
    for k in 100..N {
        assert_eq!(
            t.update_existing(h(k), &ByFingerprint, |w| (w, Some(0))),
            Some(k + 1)
        );
    }
    assert_eq!(t.sweep(&|w| w == 0), N as usize - 100);
    assert_eq!(t.len(), 100);
    assert!(
        t.slots() <= start + 200,
        "{} slots after the sweep",
        t.slots()
    );
    for k in 0..N {
        let want = (k < 100).then_some(k + 1);
        assert_eq!(t.get(h(k), &ByFingerprint), want, "key {k}");
    }
}

#[test]
fn inserts_reclaim_idle_keys_and_memory_follows_live_keys() {
    // A million distinct keys, each idle right after its insert except every 100th: the
    // arrays must stay sized for the live ones, with no sweep called.
    let t = GrowTable::new(None, None);
    let p = Policy::new(usize::MAX);
    for k in 0..1_000_000u64 {
        let v = u64::from(k % 100 == 0);
        // A step that writes 2 then (via update) the final value: inserts need a write that
        // differs from fresh.
        t.insert(h(k), &ByFingerprint, |_| ((), Some(2)), &p, None);
        t.update_existing(h(k), &ByFingerprint, |_| ((), Some(v)));
    }
    // A shard rebuilt for its live keys (load 0.5) takes idle ones again until its load
    // reaches 0.75: at most 0.75 / 0.5 of the live keys are held, plus each shard's least
    // array.
    assert!(
        t.len() <= 10_000 * 3 / 2 + DEFAULT_SHARDS * MIN_SLOTS,
        "held {}",
        t.len()
    );
    assert!(t.slots() < 40_000, "{} slots", t.slots());
    for k in (0..1_000_000u64).step_by(100) {
        assert_eq!(t.get(h(k), &ByFingerprint), Some(1), "live key {k} kept");
    }
}

#[test]
fn ceiling_refuses_new_keys_but_not_old_ones() {
    let t = GrowTable::new(Some(10), None);
    let p = Policy::new(10);
    for k in 0..10 {
        assert!(t
            .insert(h(k), &ByFingerprint, |_| ((), Some(1)), &p, None)
            .is_some());
    }
    assert!(t
        .insert(h(99), &ByFingerprint, |_| ((), Some(1)), &p, None)
        .is_none());
    assert_eq!(
        t.insert(h(5), &ByFingerprint, |w| (w, Some(w + 1)), &p, None),
        Some(1)
    );
    // A step that writes nothing never inserts.
    assert_eq!(
        t.insert(h(98), &ByFingerprint, |_| (7, None), &p, None),
        Some(7)
    );
    assert_eq!(t.len(), 10);
}

#[test]
fn concurrent_checks_and_rebuilds_lose_nothing() {
    // Threads add to their own counters while another thread's inserts grow the table and
    // sweeps rebuild it: every increment must be there at the end.
    let t = GrowTable::new(Some(64), None);
    let p = Policy::new(usize::MAX);
    for k in 0..4 {
        t.insert(h(k), &ByFingerprint, |_| ((), Some(1)), &p, None);
    }
    std::thread::scope(|s| {
        for k in 0..4u64 {
            let t = &t;
            s.spawn(move || {
                for _ in 0..20_000 {
                    let step = |w: u64| ((), Some(w + 1));
                    if t.update_existing(h(k), &ByFingerprint, step).is_none() {
                        panic!("key {k} lost");
                    }
                }
            });
        }
        let t = &t;
        s.spawn(move || {
            let p = Policy::new(usize::MAX);
            for round in 0..20u64 {
                for k in 0..500 {
                    t.insert(
                        h(1000 + round * 1000 + k),
                        &ByFingerprint,
                        |_| ((), Some(0)),
                        &p,
                        None,
                    );
                    t.insert(
                        h(1000 + round * 1000 + k),
                        &ByFingerprint,
                        |_| ((), Some(7)),
                        &p,
                        None,
                    );
                }
                for k in 0..500 {
                    t.update_existing(h(1000 + round * 1000 + k), &ByFingerprint, |_| {
                        ((), Some(0))
                    });
                }
                t.sweep(&|w| w == 0);
            }
        });
    });
    for k in 0..4 {
        assert_eq!(t.get(h(k), &ByFingerprint), Some(20_001), "key {k}");
    }
}

/// A test's key: by fingerprint, or exact (compared with the key kept in the slot).
enum TestKey<'q> {
    Fp,
    Exact(Exact<'q, u64, u64>),
}

impl<'q> TestKey<'q> {
    fn of(exact: bool, k: &'q u64) -> Self {
        if exact {
            TestKey::Exact(Exact::new(k))
        } else {
            TestKey::Fp
        }
    }
}

impl SlotKey for TestKey<'_> {
    fn is_in(&self, array: &Array, i: usize) -> bool {
        match self {
            TestKey::Fp => ByFingerprint.is_in(array, i),
            TestKey::Exact(e) => e.is_in(array, i),
        }
    }
    fn put(&self, array: &Array, i: usize) {
        match self {
            TestKey::Fp => ByFingerprint.put(array, i),
            TestKey::Exact(e) => e.put(array, i),
        }
    }
}

proptest::proptest! {
    /// Random inserts, updates, idles and sweeps against a `HashMap`, with hashes clustered
    /// onto eight home slots (long probe runs that wrap around): every key the model holds
    /// is found with its state, no other key is found. `exact`: the exact store (keys kept
    /// beside the slots), with every key's hash one of three, so that forty keys share each
    /// full 64-bit fingerprint and only the keys tell them apart, through inserts, probes
    /// and the rebuilds that copy them.
    #[test]
    fn every_key_stays_findable(
        ops in proptest::collection::vec((0..3u8, 0..120u64, 1..50u64), 1..600),
        clustered in proptest::bool::ANY,
        exact in proptest::bool::ANY,
        ceiling in 8..200usize,
    ) {
        let hash = |k: u64| match (exact, clustered) {
            (true, _) => (k % 3 + 2) << 40 | 0x0F00,
            (false, true) => (k + 2) << 32 | ((k % 8) << 29 | 0x0F00),
            (false, false) => h(k),
        };
        let column = exact.then_some(crate::sync::grow::Keys::<u64>::column as NewColumn);
        let t = GrowTable::new(Some(ceiling), column);
        let p = Policy::new(ceiling);
        let mut model = std::collections::HashMap::new();
        for (op, k, v) in ops {
            let key = TestKey::of(exact, &k);
            match op {
                0 => {
                    let done = t.insert(hash(k), &key, |_| ((), Some(v)), &p, None);
                    if done.is_none() {
                        proptest::prop_assert!(!model.contains_key(&k) && model.len() >= ceiling);
                    } else {
                        model.insert(k, v);
                    }
                }
                1 => {
                    let got = t.update_existing(hash(k), &key, |w| (w, Some(0)));
                    proptest::prop_assert_eq!(got, model.get(&k).copied());
                    if let Some(w) = model.get_mut(&k) {
                        *w = 0;
                    }
                }
                _ => {
                    let idle = model.values().filter(|&&w| w == 0).count();
                    proptest::prop_assert_eq!(t.sweep(&|w| w == 0), idle);
                    model.retain(|_, w| *w != 0);
                }
            }
            // Inserts may also reclaim idle keys (rebuilds): the model forgets them too.
            if t.len() < model.len() {
                model.retain(|_, w| *w != 0);
            }
            proptest::prop_assert_eq!(t.len(), model.len());
        }
        for k in 0..120u64 {
            let got = t.get(hash(k), &TestKey::of(exact, &k));
            proptest::prop_assert_eq!(got, model.get(&k).copied(), "key {}", k);
        }
    }
}
