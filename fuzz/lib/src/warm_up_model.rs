//! Warm-up limiters (Guava's `SmoothWarmingUp`, cold factor 3): the real limiters against an
//! exact integer reference model, plus the differential and invariant checks this target had
//! before the model.
//!
//! # The model
//!
//! The exact integer model of one key and of a store of keys is `cellgate_models::warm_up`
//! (shared with the crate's unit tests in `src/algorithm/warm_up/tests.rs`), written from the
//! module docs of `src/algorithm/warm_up/mod.rs` and the `Limiter::warm_up` docs. Where the
//! docs' sub-5-ns cost rounding allows two `next_free`s one µs apart, the model lists both and
//! this target continues from the one the decision shows (`Stats::rounding_choices` counts
//! them); configurations with `W >= 2^62` ns get only the differential checks
//! (`Stats::model_skipped`).
//!
//! # The subjects
//!
//! One input drives, on a `ManualClock` that may also go back:
//! - one direct `Limiter::warm_up` per key,
//! - a `KeyedLimiter::<u8>::warm_up` with no bound (never evicts),
//! - a bounded table (`max_keys(64)`) and a bounded exact map (`max_keys(64).exact_keys()`),
//!   both swept with `evict_idle()` after every operation,
//!
//! and compares every decision of each (`check_n`, `peek`, `peek_n`, `reserve`, `cancel`; a
//! peek of every key after every operation) with the model, the keyed stores with a model of
//! the store (a key is held once admitted; a sweep drops idle keys and raises the sweep floor; a
//! key not held starts from the swept state of the floor), including `len()`, `evict_idle()`'s
//! count and `evicted()`. Cancels: nothing unless the reservation holds units and the key is
//! held (keyed) and not idle; if the key still holds the word the reservation wrote, it goes
//! back to the word before it, exactly; otherwise nothing (only the last one can be undone).
//!
//! Differential checks on top: the never-evicting keyed limiter decides exactly like the
//! per-key direct limiters, the swept stores do too while the clock has never gone back
//! (lossless eviction), and the invariants of every decision: `limit()` is 1, `remaining()` at
//! most 1, a check has no delay, a reservation waits at most what it accepted, a denial's
//! `retry_after` is positive, and an invalid configuration is the same `ConfigError` from every
//! builder.

use std::fmt::Debug;
use std::time::Duration;

use arbitrary::Arbitrary;
use cellgate::clock::{Clock, ManualClock};
use cellgate::{Decision, KeyedLimiter, Limiter, Quota, Reservation};

use cellgate_models::warm_up::{
    pick, validate, Outcome, St, Store, WarmModel, FRESH, MAX_NEXT_FREE_US, MODEL_MAX_WARM_UP_NS,
};

use crate::common::{config_error, Observe, Seen};

/// The outcome among `outs` that `got` shows; panics if none does (or, a model limitation, if
/// two that write different states do).
pub fn resolve(outs: &[Outcome], got: &Decision, ctx: &dyn Fn() -> String) -> Outcome {
    pick(outs, Seen::of(got), u128::from(got.delay_ns()))
        .unwrap_or_else(|e| panic!("{}: {e}", ctx()))
}

/// Checks `got`, the decision on `n` units of `k` at `now` accepting `max_wait`, against the
/// store's model and applies it. Returns the state before and after, and whether the model had
/// two candidates.
#[allow(clippy::too_many_arguments)]
fn decide(
    store: &mut Store,
    m: &WarmModel,
    k: u8,
    now: u64,
    n: u32,
    max_wait: u64,
    got: &Decision,
    ctx: &dyn Fn() -> String,
) -> (St, St, bool) {
    store
        .decide(
            m,
            k,
            now,
            n,
            max_wait,
            Seen::of(got),
            u128::from(got.delay_ns()),
        )
        .unwrap_or_else(|e| panic!("{}: {e}", ctx()))
}

// ---------------------------------------------------------------------------------------------
// Input
// ---------------------------------------------------------------------------------------------

/// One fuzz input.
#[derive(Arbitrary, Debug, Clone)]
pub struct Input {
    pub rate: RateSel,
    pub warm_up: WarmSel,
    pub ops: Vec<WarmOp>,
}

/// The stable rate: a quota, possibly invalid.
#[derive(Arbitrary, Debug, Clone, Copy)]
pub enum RateSel {
    /// `Quota::with_interval(ns)` (0: `Zero { field: "period" }`).
    Interval(u32),
    /// `1 + x` whole µs: costs land on µs boundaries, where the rounding is decided.
    Micros(u16),
    /// `Quota::new(count, period)`: a floored interval, `Zero { field: "count" }`, `RateTooFast`.
    Counted { count: u8, period: u32 },
    /// `secs` s + `nanos % 1e9` ns (may exceed `u64::MAX` ns: `PeriodTooLong`).
    Long { secs: u64, nanos: u32 },
}

impl RateSel {
    pub fn quota(self) -> (u32, Duration) {
        match self {
            RateSel::Interval(ns) => (1, Duration::from_nanos(u64::from(ns))),
            RateSel::Micros(x) => (1, Duration::from_micros(1 + u64::from(x))),
            RateSel::Counted { count, period } => {
                (u32::from(count), Duration::from_nanos(u64::from(period)))
            }
            RateSel::Long { secs, nanos } => (1, long(secs, nanos)),
        }
    }
}

/// `secs` s + `nanos % 1e9` ns.
fn long(secs: u64, nanos: u32) -> Duration {
    Duration::new(secs, nanos % 1_000_000_000)
}

/// The warm-up period, relative to the stable interval `I` (as far as it is valid).
#[derive(Arbitrary, Debug, Clone, Copy)]
pub enum WarmSel {
    /// `I * x / 16` (0: `Zero { field: "warm_up" }`).
    Sixteenths(u16),
    /// `(whole % 65_540) * I + part % I` ns: both sides of `MAX_PERMITS`, every `F`.
    Permits {
        whole: u32,
        part: u32,
    },
    Ns(u64),
    /// `secs` s + `nanos % 1e9` ns (may exceed `u64::MAX` ns).
    Long {
        secs: u64,
        nanos: u32,
    },
}

impl WarmSel {
    pub fn get(self, interval: u128) -> Duration {
        let ns = |v: u128| {
            let secs = u64::try_from(v / 1_000_000_000).unwrap_or(u64::MAX);
            Duration::new(secs, (v % 1_000_000_000) as u32)
        };
        match self {
            WarmSel::Sixteenths(x) => ns(interval * u128::from(x) / 16),
            WarmSel::Permits { whole, part } => {
                ns(u128::from(whole % 65_540) * interval + u128::from(part) % interval.max(1))
            }
            WarmSel::Ns(x) => Duration::from_nanos(x),
            WarmSel::Long { secs, nanos } => long(secs, nanos),
        }
    }
}

/// Units of a request.
#[derive(Arbitrary, Debug, Clone, Copy)]
pub enum Units {
    /// `0..8`.
    Small(u8),
    /// Any count (large ones pass the horizon).
    Any(u32),
}

impl Units {
    pub fn get(self) -> u32 {
        match self {
            Units::Small(n) => u32::from(n % 8),
            Units::Any(n) => n,
        }
    }
}

/// The wait a reservation accepts.
#[derive(Arbitrary, Debug, Clone, Copy)]
pub enum Wait {
    /// `x / 4` stable intervals.
    Quarters(u8),
    Ns(u64),
    /// `Duration::MAX` (`acquire`).
    Forever,
}

/// One operation.
#[derive(Arbitrary, Debug, Clone, Copy)]
pub enum WarmOp {
    /// Move the clock forward by this many ns.
    Advance(u32),
    /// Forward by `k % 8` stable intervals plus `frac / 256` of one.
    Intervals {
        k: u8,
        frac: u8,
    },
    /// Move the clock back by this many ns.
    Back(u16),
    /// Move the clock back by up to `u32::MAX` ns.
    Rewind(u32),
    /// Move the clock far forward (this many seconds).
    Leap(u16),
    /// Set the clock to the horizon (`(2^48 - 1)` µs) `+ 2 ms - x % 4 ms`.
    Horizon(u32),
    /// `check_n(n)`, or `check()` for `n = 1`.
    Check {
        key: u8,
        n: Units,
    },
    /// `peek_n(n)` (every key's `peek()` is compared after every operation).
    Peek {
        key: u8,
        n: Units,
    },
    Reserve {
        key: u8,
        n: Units,
        wait: Wait,
    },
    /// Cancel the outstanding reservation `pick % count`.
    Cancel {
        pick: u8,
    },
}

crate::counters! {
    /// What an input exercised.
    pub struct Stats {
        pub invalid_config: u64,
        pub model_skipped: u64,
        pub allowed: u64,
        /// Admitted with a wait (a reservation).
        pub delayed: u64,
        /// Admissions that paid more than `n * I` (permits spent above the threshold: cold).
        pub cold_costs: u64,
        /// Admissions that left no permit stored.
        pub emptied: u64,
        pub denied_with_retry: u64,
        /// Denied with no `retry_after`: the horizon.
        pub denied_no_retry: u64,
        /// Decisions where the docs' cost rounding allowed two `next_free`s.
        pub rounding_choices: u64,
        pub cancels: u64,
        pub cancels_nothing: u64,
        pub evicted: u64,
        pub clock_backwards: u64,
        /// Decisions of a swept store on a key not held, with the clock behind the sweep floor.
        pub behind_sweep: u64,
    }
}

// ---------------------------------------------------------------------------------------------
// The driver
// ---------------------------------------------------------------------------------------------

const KEYS: u8 = 4;

/// The invariants of one warm-up decision.
fn sane(d: &Decision, what: &str) {
    assert_eq!(d.limit(), 1, "{what}: {d:?}");
    assert!(d.remaining() <= 1, "{what}: {d:?}");
    if !d.is_allowed() {
        assert_eq!(d.delay_ns(), 0, "{what}: {d:?}");
        if let Some(r) = d.retry_after_ns() {
            assert!(r > 0, "{what}: a denial that a zero wait would fix: {d:?}");
        }
    }
}

/// The subjects' names, in the order of the model stores.
const NAMES: [&str; 4] = ["direct", "never-evicting", "swept table", "swept map"];

/// One outstanding reservation: its key and units, and per subject the reservation and the
/// model's states before and after it.
type Held = (u8, u32, Vec<(Reservation, St, St)>);

/// Replays `input`; panics on the first difference from the model or the reference limiter,
/// or broken invariant.
pub fn run(input: &Input) -> Stats {
    let mut stats = Stats {
        inputs: 1,
        ..Stats::default()
    };
    let (count, period) = input.rate.quota();
    let quota = Quota::new(count, period);
    let interval = period.as_nanos() / u128::from(count.max(1));
    let warm = input.warm_up.get(interval);
    let clock = ManualClock::new();
    clock.set(Duration::from_secs(1));
    let direct: Vec<_> = (0..KEYS)
        .map(|_| Limiter::warm_up(quota, warm).clock(clock.clone()).build())
        .collect();
    let keyed = || KeyedLimiter::<u8>::warm_up(quota, warm).clock(clock.clone());
    let never = keyed().build();
    // The model describes `DenyNew` at the ceiling (the default drops light keys instead).
    let deny = cellgate::WhenFull::DenyNew;
    let table = keyed()
        .max_keys(64)
        .fixed_capacity()
        .when_full(deny)
        .build();
    let map = keyed().max_keys(64).exact_keys().when_full(deny).build();
    let want = validate(count, period, warm).map_err(config_error);
    // Every builder must agree with the model on validity, to the error.
    let err = want.as_ref().err();
    assert_eq!(never.as_ref().err(), err, "never-evicting build");
    assert_eq!(table.as_ref().err(), err, "table build");
    assert_eq!(map.as_ref().err(), err, "map build");
    assert!(
        direct.iter().all(|d| d.as_ref().err() == err),
        "direct build"
    );
    let (Ok(model), Ok(never), Ok(table), Ok(map)) = (want, never, table, map) else {
        stats.invalid_config += 1;
        return stats;
    };
    let direct: Vec<_> = direct.into_iter().map(Result::unwrap).collect();
    let use_model = model.warm_up < MODEL_MAX_WARM_UP_NS;
    stats.model_skipped += u64::from(!use_model);
    // Model stores: direct (one state per key), never-evicting, table, map.
    let mut stores: [Store; 4] = Default::default();
    let mut monotone = true;
    let mut held: Vec<Held> = Vec::new();
    for (i, op) in input.ops.iter().enumerate() {
        let now = clock.now();
        let ctx = |what: &str| format!("op #{i} {op:?} at {now}: {what}");
        match *op {
            WarmOp::Advance(ns) => clock.set_ns(now.saturating_add(u64::from(ns))),
            WarmOp::Intervals { k, frac } => {
                let d = u128::from(k % 8) * interval + u128::from(frac) * interval / 256;
                clock.set_ns(now.saturating_add(u64::try_from(d).unwrap_or(u64::MAX)));
            }
            WarmOp::Leap(s) => clock.set_ns(now.saturating_add(u64::from(s) * 1_000_000_000)),
            WarmOp::Back(ns) => clock.set_ns(now.saturating_sub(u64::from(ns))),
            WarmOp::Rewind(ns) => clock.set_ns(now.saturating_sub(u64::from(ns))),
            WarmOp::Horizon(x) => {
                let edge = (MAX_NEXT_FREE_US * 1_000) as u64;
                clock.set_ns(edge + 2_000_000 - u64::from(x % 4_000_000));
            }
            WarmOp::Check { key, n } => {
                let (k, n) = (key % KEYS, n.get());
                // `check()` is `check_n(1)`: one unit goes through it.
                let keyed = |l: &KeyedLimiter<u8, ManualClock>| {
                    if n == 1 {
                        l.check(&k)
                    } else {
                        l.check_n(&k, n)
                    }
                };
                let d = &direct[usize::from(k)];
                let want = if n == 1 { d.check() } else { d.check_n(n) };
                sane(&want, "check");
                assert_eq!(want.delay_ns(), 0, "a check never delays: {want:?}");
                let got = [want, keyed(&never), keyed(&table), keyed(&map)];
                differential(&got, monotone, &|| ctx(&format!("check_n({k}, {n})")));
                if use_model {
                    note_behind(&stores, k, now, &mut stats);
                    for (s, (store, d)) in stores.iter_mut().zip(&got).enumerate() {
                        let (_, _, two) = decide(store, &model, k, now, n, 0, d, &|| {
                            ctx(&format!("{} check_n({k}, {n})", NAMES[s]))
                        });
                        stats.rounding_choices += u64::from(two && s == 0);
                    }
                }
                tally(&mut stats, &want, n, &model, &stores[0], k);
            }
            WarmOp::Peek { key, n } => {
                let (k, n) = (key % KEYS, n.get());
                let want = direct[usize::from(k)].peek_n(n);
                sane(&want, "peek_n");
                assert_eq!(want.delay_ns(), 0, "a peek never delays: {want:?}");
                let got = [
                    want,
                    never.peek_n(&k, n),
                    table.peek_n(&k, n),
                    map.peek_n(&k, n),
                ];
                differential(&got, monotone, &|| ctx(&format!("peek_n({k}, {n})")));
                if use_model {
                    note_behind(&stores, k, now, &mut stats);
                    for (s, (store, d)) in stores.iter().zip(&got).enumerate() {
                        let outs = model.outcomes(store.state(&model, k), now, n, 0);
                        resolve(&outs, d, &|| ctx(&format!("{} peek_n({k}, {n})", NAMES[s])));
                    }
                }
            }
            WarmOp::Reserve { key, n, wait } => {
                let (k, n) = (key % KEYS, n.get());
                let max_wait = match wait {
                    Wait::Quarters(x) => {
                        let ns = interval * u128::from(x) / 4;
                        Duration::from_nanos(u64::try_from(ns).unwrap_or(u64::MAX))
                    }
                    Wait::Ns(ns) => Duration::from_nanos(ns),
                    Wait::Forever => Duration::MAX,
                };
                let max_wait_ns = u64::try_from(max_wait.as_nanos()).unwrap_or(u64::MAX);
                let want = direct[usize::from(k)].reserve(n, max_wait);
                sane(&want.decision(), "reserve");
                if want.is_allowed() {
                    assert!(
                        want.delay() <= max_wait,
                        "waits past {max_wait:?}: {want:?}"
                    );
                    stats.delayed += u64::from(!want.delay().is_zero());
                }
                let got = [
                    want.clone(),
                    never.reserve(&k, n, max_wait),
                    table.reserve(&k, n, max_wait),
                    map.reserve(&k, n, max_wait),
                ];
                let decisions = got.clone().map(|r| r.decision());
                differential(&decisions, monotone, &|| ctx(&format!("reserve({k}, {n})")));
                if use_model {
                    note_behind(&stores, k, now, &mut stats);
                    let mut recorded = Vec::new();
                    for (s, (store, r)) in stores.iter_mut().zip(got).enumerate() {
                        let what = || ctx(&format!("{} reserve({k}, {n}, {max_wait:?})", NAMES[s]));
                        let d = r.decision();
                        let (before, after, two) =
                            decide(store, &model, k, now, n, max_wait_ns, &d, &what);
                        stats.rounding_choices += u64::from(two && s == 0);
                        // From the `Reservation` docs: the decision's fields, and the units it
                        // holds (admitted, n > 0, the state changed).
                        assert_eq!(r.is_allowed(), d.is_allowed(), "{}", what());
                        assert_eq!(r.delay(), d.delay(), "{}", what());
                        let holds = d.is_allowed() && n > 0 && before != after;
                        assert_eq!(r.units(), if holds { n } else { 0 }, "{}", what());
                        recorded.push((r, before, after));
                    }
                    if want.is_allowed() {
                        held.push((k, n, recorded));
                    }
                } else if want.is_allowed() {
                    let recorded = got.into_iter().map(|r| (r, FRESH, FRESH)).collect();
                    held.push((k, n, recorded));
                }
                tally(&mut stats, &want.decision(), n, &model, &stores[0], k);
            }
            WarmOp::Cancel { pick } => {
                if held.is_empty() {
                    continue;
                }
                let (k, n, recorded) = held.remove(usize::from(pick) % held.len());
                let mut answers = Vec::new();
                for (s, (r, before, after)) in recorded.into_iter().enumerate() {
                    let got = match s {
                        0 => direct[usize::from(k)].cancel(r.clone()),
                        1 => never.cancel(&k, r.clone()),
                        2 => table.cancel(&k, r.clone()),
                        _ => map.cancel(&k, r.clone()),
                    };
                    if use_model {
                        let holds = r.is_allowed() && n > 0 && before != after;
                        let want = stores[s].cancel(&model, k, now, holds, (before, after));
                        assert_eq!(got, want, "{}", ctx(&format!("{} cancel on {k}", NAMES[s])));
                        if s == 0 {
                            stats.cancels_nothing += u64::from(holds && !want);
                        }
                    }
                    answers.push(got);
                }
                assert_eq!(answers[1], answers[0], "{}", ctx("never-evicting cancel"));
                if monotone {
                    assert_eq!(answers[2], answers[0], "{}", ctx("swept table cancel"));
                    assert_eq!(answers[3], answers[0], "{}", ctx("swept map cancel"));
                }
                stats.cancels += u64::from(answers[0]);
            }
        }
        let after = clock.now();
        if after < now {
            monotone = false;
            stats.clock_backwards += 1;
        }
        // The swept stores sweep after every operation.
        let (t, p) = (table.evict_idle(), map.evict_idle());
        stats.evicted += t as u64;
        if use_model {
            assert_eq!(
                t,
                stores[2].evict(&model, after),
                "{}",
                ctx("table evict_idle")
            );
            assert_eq!(
                p,
                stores[3].evict(&model, after),
                "{}",
                ctx("map evict_idle")
            );
        }
        for (s, l) in [(1, &never), (2, &table), (3, &map)] {
            if use_model {
                assert_eq!(l.len(), stores[s].held.len(), "{}", ctx(NAMES[s]));
                assert_eq!(l.stats().evicted, stores[s].evicted, "{}", ctx(NAMES[s]));
            }
        }
        for k in 0..KEYS {
            let got = [
                direct[usize::from(k)].peek(),
                never.peek(&k),
                table.peek(&k),
                map.peek(&k),
            ];
            differential(&got, monotone, &|| ctx(&format!("peek({k}) after")));
            if use_model {
                for (s, (store, d)) in stores.iter().zip(&got).enumerate() {
                    let outs = model.outcomes(store.state(&model, k), after, 0, 0);
                    resolve(&outs, d, &|| ctx(&format!("{} peek({k}) after", NAMES[s])));
                }
            }
        }
    }
    stats
}

/// The differential checks on one operation's decisions (direct, never-evicting, table, map):
/// the invariants, never-evicting = direct always, the swept stores = direct while the clock
/// has not gone back.
fn differential(got: &[Decision; 4], monotone: bool, ctx: &dyn Fn() -> String) {
    for (d, name) in got.iter().zip(NAMES) {
        sane(d, name);
    }
    assert_eq!(got[1], got[0], "never-evicting {}", ctx());
    if monotone {
        assert_eq!(got[2], got[0], "swept table {}", ctx());
        assert_eq!(got[3], got[0], "swept map {}", ctx());
    }
}

/// Counts a swept store's decision on a key it does not hold behind its sweep floor.
fn note_behind(stores: &[Store; 4], k: u8, now: u64, stats: &mut Stats) {
    let t = &stores[2];
    stats.behind_sweep += u64::from(now < t.floor && !t.held.contains_key(&k));
}

/// Counts what the direct limiter's decision `d` exercised (`direct` is its model store after
/// the decision).
fn tally(stats: &mut Stats, d: &Decision, n: u32, m: &WarmModel, direct: &Store, k: u8) {
    if d.is_allowed() {
        stats.allowed += 1;
        if n > 0 {
            let st = direct.state(m, k);
            stats.emptied += u64::from(st.missing == m.max_missing);
            // Cold: the interval to the next permit is longer than n stable intervals.
            let paid = d.reset_after_ns().saturating_sub(d.delay_ns());
            stats.cold_costs += u64::from(
                u128::from(paid) > u128::from(n) * m.interval + m.refill(st.missing) + 1_000,
            );
        }
    } else if d.retry_after_ns().is_some() {
        stats.denied_with_retry += 1;
    } else {
        stats.denied_no_retry += 1;
    }
}

#[cfg(test)]
mod tests {
    //! The seeds, and a hand-written input. The model's own vectors are in
    //! `cellgate_models::warm_up`.
    use super::*;
    use crate::common::Counters;

    #[test]
    fn seeds_replay() {
        let total = crate::common::replay_dir(
            concat!(env!("CARGO_MANIFEST_DIR"), "/../corpus/seed_warm_up_model"),
            run,
        );
        for (name, n) in total.fields() {
            if name != "model_skipped" {
                assert!(n > 0, "the seeds exercise {name}: {total:?}");
            }
        }
    }

    crate::corpus_tools!("warm_up_model", run);

    #[test]
    fn a_cold_limiter_spaces_its_first_permits() {
        let input = Input {
            rate: RateSel::Interval(1_000_000),
            warm_up: WarmSel::Sixteenths(160),
            ops: vec![
                WarmOp::Reserve {
                    key: 0,
                    n: Units::Small(1),
                    wait: Wait::Quarters(255),
                },
                WarmOp::Reserve {
                    key: 0,
                    n: Units::Small(1),
                    wait: Wait::Quarters(255),
                },
                WarmOp::Check {
                    key: 0,
                    n: Units::Small(1),
                },
                WarmOp::Cancel { pick: 1 },
                WarmOp::Advance(4_000_000),
                WarmOp::Check {
                    key: 0,
                    n: Units::Small(1),
                },
            ],
        };
        let s = run(&input);
        assert_eq!(
            (s.delayed, s.denied_with_retry, s.cancels, s.allowed),
            (1, 1, 1, 3)
        );
    }
}
