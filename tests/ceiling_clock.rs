//! A full store and a clock that steps back: a key dropped as light gains at most one unit,
//! whatever the clock does afterwards (`WhenFull::EvictLight`, every store).
//!
//! A key dropped to make room is re-created from the state a new key starts from. If it was
//! judged light at a clock reading *behind* its own state (a window the clock has not reached
//! again, a theoretical arrival time past a sweep's), the re-created key belonged to an older
//! window than the dropped one, and when the clock came back it had a whole fresh budget.
//!
//! The fuzz target `ceiling_model` (`fuzz/lib/src/ceiling_model.rs`) checks the same bound over
//! random sequences; these are the cases found by review and by it, one per way to gain.

use std::time::Duration;

use cellgate::clock::ManualClock;
use cellgate::{KeyedLimiter, KeyedLimiterBuilder, Quota};

/// The window (and GCRA period) of the first example found: 187,224,423 ns.
const W: u64 = 187_224_423;
const LIMIT: u32 = 8;

#[derive(Debug, Clone, Copy)]
enum Alg {
    Fixed,
    Sliding,
    Gcra,
}

#[derive(Debug, Clone, Copy)]
enum Store {
    Grow,
    Fixed,
    Exact,
}

fn builder(alg: Alg) -> KeyedLimiterBuilder<u64, cellgate::clock::DefaultClock> {
    let w = Duration::from_nanos(W);
    match alg {
        Alg::Fixed => KeyedLimiter::<u64>::fixed_window(LIMIT, w),
        Alg::Sliding => KeyedLimiter::<u64>::sliding_window(LIMIT, w),
        Alg::Gcra => KeyedLimiter::<u64>::gcra(Quota::new(LIMIT, w)),
    }
}

/// The limiter under test (`max_keys(cap)`, the default `EvictLight`) and a reference that
/// holds every key for ever, both on `clock`.
fn pair(
    alg: Alg,
    store: Store,
    cap: usize,
    clock: &ManualClock,
) -> (
    KeyedLimiter<u64, ManualClock>,
    KeyedLimiter<u64, ManualClock>,
) {
    let capped = builder(alg).clock(clock.clone()).max_keys(cap);
    let capped = match store {
        Store::Grow => capped,
        Store::Fixed => capped.fixed_capacity(),
        Store::Exact => capped.exact_keys(),
    };
    let reference = builder(alg).clock(clock.clone()).exact_keys().build();
    (capped.build().unwrap(), reference.unwrap())
}

const ALGS: [Alg; 3] = [Alg::Fixed, Alg::Sliding, Alg::Gcra];
const STORES: [Store; 3] = [Store::Grow, Store::Fixed, Store::Exact];

/// Checks `n` units of key 0 on both limiters; returns the units each admitted.
fn check_both(
    capped: &KeyedLimiter<u64, ManualClock>,
    reference: &KeyedLimiter<u64, ManualClock>,
    n: u32,
) -> (u64, u64) {
    let units = |allowed: bool| if allowed { u64::from(n) } else { 0 };
    (
        units(capped.check_n(&0, n).is_allowed()),
        units(reference.check_n(&0, n).is_allowed()),
    )
}

/// New keys, one unit each (light keys themselves). Key 0 is not checked during a flood, so a
/// flood drops it at most once.
fn flood(capped: &KeyedLimiter<u64, ManualClock>, next: &mut u64, keys: u64) {
    for _ in 0..keys {
        *next += 1;
        capped.check(next);
    }
}

/// The first example found (fixed window 8 per 187,224,423 ns, `max_keys(2)`), in every store and
/// algorithm: one check at `t`, the clock back three windows, a flood, key 0 drains its
/// budget, the clock to 0 and another flood, the clock to `t - 1`: key 0 drains again. A
/// limiter that never drops the key admits 8 in all; the dropped key may gain one unit.
#[test]
fn a_flood_behind_the_clock_never_hands_a_key_a_whole_budget() {
    for alg in ALGS {
        for store in STORES {
            let clock = ManualClock::new();
            let (capped, reference) = pair(alg, store, 2, &clock);
            let t = 20 * W + W / 2;
            let mut next = 100;
            let (mut got, mut want) = (0, 0);
            let mut add = |(g, w): (u64, u64)| {
                got += g;
                want += w;
            };
            clock.set(Duration::from_nanos(t));
            add(check_both(&capped, &reference, 1));
            clock.set(Duration::from_nanos(t - 3 * W));
            flood(&capped, &mut next, 5);
            for _ in 0..LIMIT {
                add(check_both(&capped, &reference, 1));
            }
            clock.set(Duration::ZERO);
            flood(&capped, &mut next, 5);
            clock.set(Duration::from_nanos(t - 1));
            for _ in 0..LIMIT {
                add(check_both(&capped, &reference, 1));
            }
            // Two floods: key 0 was dropped at most twice.
            assert!(
                got <= want + 2,
                "{alg:?} in {store:?}: key 0 got {got} units, the reference {want}"
            );
        }
    }
}

/// GCRA after a sweep: a sweep at `s` raises the state new keys start from to "fresh at `s`";
/// back at an earlier reading, a key one and a half emission intervals past that state has
/// one unit less than a new key there, and was dropped as light; back at `s`, the re-created
/// key had two units more than the dropped one.
#[test]
fn a_gcra_key_dropped_behind_a_sweep_gains_at_most_one_unit() {
    for store in STORES {
        let clock = ManualClock::new();
        let (capped, reference) = pair(Alg::Gcra, store, 2, &clock);
        let t = W / u64::from(LIMIT);
        let s = 20 * W;
        let (mut got, mut want) = (0, 0);
        let mut add = |(g, w): (u64, u64)| {
            got += g;
            want += w;
        };
        let u = s - 2 * t / 5;
        clock.set(Duration::from_nanos(u));
        add(check_both(&capped, &reference, 2));
        clock.set(Duration::from_nanos(s));
        capped.evict_idle();
        reference.evict_idle();
        clock.set(Duration::from_nanos(u));
        flood(&capped, &mut 100, 5);
        clock.set(Duration::from_nanos(s));
        for _ in 0..LIMIT {
            add(check_both(&capped, &reference, 1));
        }
        assert!(
            got <= want + 1,
            "{store:?}: key 0 got {got} units, the reference {want}"
        );
    }
}

/// Checks single units of key 0 at each of `readings` in turn (ns), `units` times each, with
/// a flood of new keys wherever the reading is `None`; returns the units key 0 got in the
/// capped limiter and in the reference.
fn replay(alg: Alg, store: Store, readings: &[(Option<u64>, u32)]) -> (u64, u64) {
    let clock = ManualClock::new();
    let (capped, reference) = pair(alg, store, 2, &clock);
    let (mut got, mut want) = (0, 0);
    let mut next = 100;
    for &(at, units) in readings {
        match at {
            Some(at) => {
                clock.set(Duration::from_nanos(at));
                for _ in 0..units {
                    let (g, w) = check_both(&capped, &reference, 1);
                    got += g;
                    want += w;
                }
            }
            None => flood(&capped, &mut next, 5),
        }
    }
    (got, want)
}

/// Sliding window, a key that used its whole budget at the end of window `k - 1`, judged
/// near the end of window `k`, where the previous window weighs little: one unit from a
/// fresh key's budget there, but back at the start of window `k` it has nothing left, and the
/// key re-created from the sweep floor had a whole budget.
#[test]
fn a_sliding_key_light_only_late_in_a_window_is_kept() {
    let k = 20 * W;
    for store in STORES {
        let (got, want) = replay(
            Alg::Sliding,
            store,
            &[
                (Some(k - 1), LIMIT),
                (Some(k + W * 95 / 100), 0),
                (None, 0),
                (Some(k + W / 100), LIMIT),
            ],
        );
        assert!(
            got <= want + 1,
            "{store:?}: key 0 got {got}, the reference {want}"
        );
    }
}

/// Sliding window, a key that used one unit in window `k`, dropped as light in that window,
/// then checked in window `k - 1` (the clock went back) and `k` again: the dropped key's
/// checks in `k - 1` still counted in window `k`, at full weight; the re-created key counted
/// them in `k - 1`, whose weight in `k` decays, and got more than one unit extra.
#[test]
fn a_sliding_key_counted_in_the_current_window_is_kept() {
    let k = 15 * W;
    for store in STORES {
        let (got, want) = replay(
            Alg::Sliding,
            store,
            &[
                (Some(k + W / 4), 1),
                (None, 0),
                (Some(k - W / 4), LIMIT),
                (Some(k + W * 9 / 10), LIMIT),
            ],
        );
        assert!(
            got <= want + 1,
            "{store:?}: key 0 got {got}, the reference {want}"
        );
    }
}
