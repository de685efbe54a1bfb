//! The table's unit tests: probes, inserts, sweeps, evictions and compactions against its
//! invariants.

use super::*;

/// The tests' policy: no time, idle means state 0, a global bound; `evicts` picks
/// `WhenFull::EvictNearestFresh`'s behaviour (at the bound, evict the live key with the
/// smallest state in the sample, as it does with `reset_after`) or never evicting live keys.
struct Policy {
    bound: usize,
    evicts: bool,
    evicted: std::cell::Cell<u64>,
}

impl Policy {
    /// Never evicts live keys.
    fn plain(bound: usize) -> Self {
        Self {
            bound,
            evicts: false,
            evicted: std::cell::Cell::new(0),
        }
    }

    /// Evicts the live key nearest to fresh when full.
    fn evicting(bound: usize) -> Self {
        Self {
            evicts: true,
            ..Self::plain(bound)
        }
    }
}

impl InsertPolicy for Policy {
    fn fresh(&self) -> u64 {
        0
    }
    fn is_idle(&self, word: u64) -> bool {
        word == 0
    }
    fn before_sweep(&self) {}
    fn has_room(&self, table: &Table) -> bool {
        table.len() < self.bound
    }
    fn make_room(&self, _: &Table) -> bool {
        false
    }
    fn eviction_cost(&self, word: u64) -> Option<u64> {
        self.evicts.then_some(word)
    }
    fn evicted(&self, _: bool) {
        self.evicted.set(self.evicted.get() + 1);
    }
}

/// Spreads small integers over the hash space (an odd multiplier is a bijection).
fn h(k: u64) -> u64 {
    k.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ (k >> 7)
}

fn set(t: &Table, k: u64, v: u64) -> Option<u64> {
    t.insert(h(k), |_| (v, Some(v)), &Policy::plain(usize::MAX))
}

fn get(t: &Table, k: u64) -> Option<u64> {
    t.find(h(k)).map(|f| f.state())
}

#[test]
fn fingerprints_avoid_the_markers() {
    assert_eq!(fingerprint(0), 2);
    assert_eq!(fingerprint(1), 3);
    assert_eq!(fingerprint(7), 7);
    for (fp, st) in [(2, 0), (u64::MAX, u64::MAX), (5, 1)] {
        let v = pack(fp, st);
        assert_eq!((fp_of(v), state_of(v)), (fp, st));
    }
}

#[test]
fn insert_find_update_sweep() {
    // Miri interprets every 16-byte atomic: a smaller table keeps its run to seconds.
    const N: u64 = if cfg!(miri) { 300 } else { 5_000 };
    let t = Table::with_capacity(N as usize);
    for k in 0..N {
        assert_eq!(set(&t, k, k + 1), Some(k + 1));
    }
    assert_eq!(t.len(), N as usize);
    for k in 0..N {
        assert_eq!(get(&t, k), Some(k + 1), "key {k}");
    }
    assert_eq!(get(&t, 2 * N), None);
    // Update through the lock-free path.
    let found = t.find(h(3)).unwrap();
    assert_eq!(Table::update(found, h(3), |w| (w, Some(w * 10))), Ok(4));
    assert_eq!(get(&t, 3), Some(40));
    // Make the even keys idle, then sweep them away.
    for k in (0..N).step_by(2) {
        let found = t.find(h(k)).unwrap();
        Table::update(found, h(k), |_| ((), Some(0))).unwrap();
    }
    assert_eq!(t.sweep(&|w| w == 0), N as usize / 2);
    assert_eq!(t.len(), N as usize / 2);
    for k in 0..N {
        let want = (k % 2 == 1).then_some(if k == 3 { 40 } else { k + 1 });
        assert_eq!(get(&t, k), want, "key {k}");
    }
}

#[test]
fn churn_keeps_probe_runs_short() {
    // Far more distinct keys over time than the table holds: removed slots must be reused
    // or returned to EMPTY, or misses would scan whole shards and inserts would fail.
    let t = Table::with_capacity(1_000);
    for round in 0..50u64 {
        for k in 0..900 {
            assert!(set(&t, round * 1_000_000 + k, 1).is_some(), "round {round}");
        }
        for k in 0..900 {
            let key = round * 1_000_000 + k;
            let found = t.find(h(key)).unwrap();
            Table::update(found, h(key), |_| ((), Some(0))).unwrap();
        }
        assert_eq!(t.sweep(&|w| w == 0), 900);
        assert_eq!(t.len(), 0);
    }
    for shard in t.shards.iter() {
        let counts = shard.writer.lock();
        assert_eq!(counts.live, 0);
        assert_eq!(counts.tombs, 0, "every TOMB went back to EMPTY");
        assert!(shard.slots.iter().all(|s| s.load() == 0));
    }
}

/// Slots a lock-free probe for hash `h` loads before it stops (counting the last one).
fn probes(t: &Table, h: u64) -> usize {
    let fp = fingerprint(h);
    let shard = t.shard(h);
    let n = shard.slots.len();
    let mut i = Table::home(shard, h);
    for count in 1..=n {
        let f = fp_of(shard.slots[i].load());
        if f == fp || f == EMPTY {
            return count;
        }
        i = (i + 1) % n;
    }
    n
}

/// (EMPTY, TOMB, live) slots of every shard, checked against the shard's counts.
fn census(t: &Table) -> Vec<(usize, usize, usize)> {
    t.shards
        .iter()
        .map(|shard| {
            let counts = shard.writer.lock();
            let fps: Vec<u64> = shard.slots.iter().map(|s| fp_of(s.load())).collect();
            let empty = fps.iter().filter(|&&f| f == EMPTY).count();
            let tombs = fps.iter().filter(|&&f| f == TOMB).count();
            let live = fps.len() - empty - tombs;
            assert_eq!((counts.live, counts.tombs), (live, tombs), "shard counts");
            (empty, tombs, live)
        })
        .collect()
}

#[test]
fn evictions_at_the_cap_keep_empty_slots_and_short_probes() {
    // A sustained flood of new keys at the bound, each insert evicting a live key: without
    // compaction the evictions' tombstones crowd out every EMPTY slot and a miss probes the
    // whole shard.
    const CAP: usize = 5_000;
    let t = Table::with_capacity(CAP);
    let p = Policy::evicting(CAP);
    for k in 0..200_000u64 {
        // States 1..=1000: every key is live, so each insert at the bound evicts one.
        let v = 1 + k % 1_000;
        assert_eq!(t.insert(h(k), |_| (v, Some(v)), &p), Some(v), "key {k}");
    }
    assert_eq!(t.len(), CAP);
    assert_eq!(p.evicted.get(), 200_000 - CAP as u64);
    for (empty, tombs, live) in census(&t) {
        let slots = empty + tombs + live;
        assert!(tombs <= slots / COMPACT_TOMBS_DIVISOR, "{tombs} of {slots}");
        assert!(empty >= slots / 8, "only {empty} EMPTY of {slots}");
    }
    // Misses (keys never inserted) stop at an EMPTY slot soon.
    let lens: Vec<usize> = (1u64 << 40..(1 << 40) + 10_000)
        .map(|k| probes(&t, h(k)))
        .collect();
    let mean = lens.iter().sum::<usize>() as f64 / lens.len() as f64;
    let max = *lens.iter().max().unwrap();
    assert!(mean < 16.0, "mean miss probe {mean}");
    assert!(max < 400, "longest miss probe {max}");
    // And every key held is found.
    let found = (0..200_000u64).filter(|&k| get(&t, k).is_some()).count();
    assert_eq!(found, CAP);
}

#[test]
fn compaction_moves_a_key_to_its_home_and_empties_the_tombs() {
    // Four keys share a home slot; the first three are swept away, leaving tombstones that
    // the fourth key's probe must pass (so they cannot simply become EMPTY). Three is past
    // the threshold, so the sweep compacts: the fourth key moves to its home and every
    // other slot is EMPTY again.
    let t = Table::with_capacity(4);
    assert_eq!(t.shards.len(), 1);
    let slots = t.shards[0].slots.len();
    assert!(3 > slots / COMPACT_TOMBS_DIVISOR, "{slots} slots");
    // Distinct fingerprints, the same low 32 bits: the same home, a quarter into the shard.
    let hs: Vec<u64> = (0..4u64).map(|k| (k + 2) << 40 | 0x4000_0000).collect();
    let home = Table::home(&t.shards[0], hs[0]);
    let p = Policy::plain(usize::MAX);
    for (i, &hk) in hs.iter().enumerate() {
        let v = if i < 3 { 1 } else { 7 };
        assert_eq!(t.insert(hk, |_| ((), Some(v)), &p), Some(()));
    }
    let fp_at = |i: usize| fp_of(t.shards[0].slots[i % slots].load());
    assert_eq!(
        fp_at(home + 3),
        fingerprint(hs[3]),
        "the fourth key after the others"
    );
    assert_eq!(t.sweep(&|w| w == 1), 3);
    assert_eq!(fp_at(home), fingerprint(hs[3]), "the fourth key moved home");
    assert_eq!(t.get(hs[3]), Some(7));
    assert_eq!(census(&t), vec![(slots - 1, 0, 1)]);
    // With two tombstones (not past the threshold) nothing moves.
    for &hk in &hs[..2] {
        t.insert(hk, |_| ((), Some(1)), &p);
    }
    assert_eq!(t.sweep(&|w| w == 1), 2);
    assert_eq!(
        census(&t),
        vec![(slots - 1, 0, 1)],
        "trailing tombs just cleared"
    );
}

/// One operation of the model test.
#[derive(Debug, Clone, Copy)]
enum Op {
    /// Set key `k`'s state to `v` (inserting it, evicting another at the bound).
    Set(u64, u64),
    /// Make key `k` idle (state 0) if it is held.
    Idle(u64),
    /// Remove the idle keys.
    Sweep,
}

fn op() -> impl proptest::strategy::Strategy<Value = Op> {
    use proptest::prelude::*;
    prop_oneof![
        6 => (0..120u64, 1..50u64).prop_map(|(k, v)| Op::Set(k, v)),
        3 => (0..120u64).prop_map(Op::Idle),
        1 => Just(Op::Sweep),
    ]
}

proptest::proptest! {
    /// Random inserts, evictions at the bound, idles and sweeps against a `HashMap`: every
    /// key the model holds is found with its state (also by `get` and `update_existing`),
    /// no other key is found, and each eviction loses exactly one key. `clustered` gives
    /// the keys only eight home slots, so clusters are long and wrap around the shard's end,
    /// and compactions move many keys.
    #[test]
    fn every_key_stays_findable(
        ops in proptest::collection::vec(op(), 1..600),
        clustered in proptest::bool::ANY,
        cap in 8..64usize,
    ) {
        let hash = |k: u64| if clustered {
            (k + 2) << 32 | ((k % 8) << 29 | 0x0F00)
        } else {
            h(k)
        };
        let t = Table::with_capacity(64);
        let p = Policy::evicting(cap);
        let mut model = std::collections::HashMap::new();
        for op in ops {
            match op {
                Op::Set(k, v) => {
                    let before = p.evicted.get();
                    let done = t.insert(hash(k), |_| ((), Some(v)), &p);
                    if done.is_none() {
                        // At the bound with no key in the eviction sample: refused.
                        assert!(!model.contains_key(&k) && model.len() == cap);
                        assert_eq!(p.evicted.get(), before);
                        assert!(t.find(hash(k)).is_none());
                        continue;
                    }
                    if p.evicted.get() != before {
                        // Exactly one other key was evicted: find which.
                        let gone: Vec<u64> = model
                            .keys()
                            .copied()
                            .filter(|&m| m != k && t.find(hash(m)).is_none())
                            .collect();
                        assert_eq!(gone.len(), 1, "evicted {gone:?}");
                        model.remove(&gone[0]);
                    }
                    model.insert(k, v);
                }
                Op::Idle(k) => {
                    let got = t.update_existing(hash(k), |w| (w, Some(0)));
                    assert_eq!(got, model.get(&k).copied(), "key {k}");
                    if let Some(w) = model.get_mut(&k) {
                        *w = 0;
                    }
                }
                Op::Sweep => {
                    let idle = model.values().filter(|&&w| w == 0).count();
                    assert_eq!(t.sweep(&|w| w == 0), idle);
                    model.retain(|_, w| *w != 0);
                }
            }
            assert_eq!(t.len(), model.len());
            assert!(model.len() <= cap);
        }
        census(&t);
        for k in 0..120u64 {
            assert_eq!(t.get(hash(k)), model.get(&k).copied(), "key {k}");
            assert_eq!(
                t.find(hash(k)).map(|f| f.state()),
                model.get(&k).copied(),
                "key {k}"
            );
        }
    }
}

#[test]
fn bound_refuses_new_keys_but_not_old_ones() {
    let t = Table::with_capacity(100);
    let p = Policy::plain(10);
    for k in 0..10 {
        assert!(t.insert(h(k), |_| ((), Some(1)), &p).is_some());
    }
    assert!(t.insert(h(99), |_| ((), Some(1)), &p).is_none());
    // A present key is updated even at the bound.
    assert_eq!(t.insert(h(5), |w| (w, Some(w + 1)), &p), Some(1));
    // A step that writes nothing never inserts.
    assert_eq!(t.insert(h(98), |_| (7, None), &p), Some(7));
    assert_eq!(t.len(), 10);
}
