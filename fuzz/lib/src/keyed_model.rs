//! The driver of the one-cell targets (fixed window, sliding window, stock): it replays one
//! operation sequence against a direct [`Limiter`], a [`KeyedLimiter`] in the fingerprint table
//! (`max_keys(m)`) and one in the exact store (`exact_keys()`: no bound, or `max_keys(m)`), all
//! reading one [`ManualClock`], and against the models of `cellgate-models`: the algorithm's
//! [`CellModel`] and the keyed store's [`KeyedModel`] (whose docs give the store's documented
//! behaviour).
//!
//! On top of that, eviction is checked to be lossless: a shadow model that never evicts must
//! make the same decisions as the uncapped exact store as long as no request comes at a time before
//! the sweep floor. At the first request behind the floor that store must be at least as strict as
//! the shadow (no admission the shadow denies; no more `remaining` when both decide alike);
//! from there on only the exact model is compared.

use std::collections::BTreeMap;
use std::fmt::Debug;
use std::time::Duration;

use arbitrary::Arbitrary;
use cellgate::clock::{Clock, DefaultClock, ManualClock};
use cellgate::{ConfigError, KeyedLimiter, KeyedLimiterBuilder, Limiter, LimiterBuilder};

pub use cellgate_models::keyed::KeyedModel;
pub use cellgate_models::{cancel, CellModel, Model};

use crate::common::{
    apply_time, assert_decision, check_pair, key, layout_max, model_time, Expect, LimitSel,
    Observe, Op, Seen, Stats, WindowSel,
};

/// A known bug in cellgate that the window targets let through (counting it in
/// `Stats::excused_zero_count_ahead`) so that fuzzing can go on; see `fuzz/README.md`. Set it
/// to `false` to see the targets fail on it again.
///
/// A refund or cancel can take a window's count to zero while the stored window is later than
/// the clock (the clock went back). `is_idle` calls that state idle (nothing counts at `now`),
/// but it is not a fresh key: a check at the clock's time still counts in the later window. A
/// sweep at that time drops it, and the key comes back counting in the clock's window, so the
/// decisions after the sweep differ from those of a limiter that never evicts (lossless
/// eviction is broken; the re-created key is *less* strict in the later window).
pub const EXCUSE_ZERO_COUNT_AHEAD: bool = false;

/// A known bug in cellgate that the window targets let through (counting it in
/// `Stats::excused_refund_zero`); see `fuzz/README.md`. Set it to `false` to see it fail.
///
/// `refund(0)` on a sliding window whose stored current window is now's previous one, with a
/// count in it, answers `true` ("something was given back") although nothing changed: the step
/// asks to write the word it was given, and the cell reports the step's answer without a write.
pub const EXCUSE_REFUND_ZERO: bool = false;

/// What a reservation recorded, for one subject: the model's state before and after it, and
/// the real reservation.
#[derive(Debug, Clone)]
pub struct Held<S> {
    pub reservation: cellgate::Reservation,
    /// Whether `cancel` may give anything back: admitted, `n > 0`, and the admission changed
    /// the word.
    pub holds: bool,
    pub before: S,
    pub after: S,
}

/// An outstanding reservation: its key, its units, and what each subject (direct, table, map)
/// recorded.
type Outstanding<S> = (u8, u32, [Held<S>; 3]);

/// One input of a window target (fixed or sliding window): a configuration (possibly
/// invalid), the stores' bounds, and operations.
#[derive(Arbitrary, Debug, Clone)]
pub struct WindowInput {
    pub window: WindowSel,
    pub limit: LimitSel,
    pub stores: Stores,
    pub ops: Vec<Op>,
}

/// The bounds of the two keyed stores.
#[derive(Arbitrary, Debug, Clone, Copy)]
pub struct Stores {
    /// The table's `max_keys`.
    pub table: Cap,
    /// `None`: the map without a bound; `Some`: `max_keys(m).exact_keys()`.
    pub map: Option<Cap>,
}

/// A `max_keys` value.
#[derive(Arbitrary, Debug, Clone, Copy)]
pub enum Cap {
    /// Small enough for 16 keys to fill: `4 + x % 13` for the table, `1 + x % 16` for the map;
    /// `x = 255` is 0 (a `ConfigError`).
    Small(u8),
    /// 64, as an application would set it.
    Big,
}

impl Cap {
    /// The table's bound. At least 4: with the table's per-shard slack (a single shard for
    /// bounds up to 4096), 16 keys created by `restock` beyond the bound never fill the shard,
    /// which this model does not describe.
    pub fn table(self) -> usize {
        match self {
            Cap::Small(255) => 0,
            Cap::Small(x) => 4 + usize::from(x % 13),
            Cap::Big => 64,
        }
    }

    pub fn map(self) -> usize {
        match self {
            Cap::Small(255) => 0,
            Cap::Small(x) => 1 + usize::from(x % 16),
            Cap::Big => 64,
        }
    }
}

/// The limiters under test.
pub struct Subjects<'a> {
    pub clock: &'a ManualClock,
    pub direct: &'a Limiter<ManualClock>,
    pub table: &'a KeyedLimiter<u8, ManualClock>,
    pub map: &'a KeyedLimiter<u8, ManualClock>,
}

/// Checks the builds of the three limiters against the model's verdict on the configuration
/// and the bounds. Returns the built limiters when all three must succeed, `None` (after
/// checking every error) otherwise.
#[allow(clippy::type_complexity)]
pub fn check_builds(
    want: Result<(), ConfigError>,
    stores: &Stores,
    direct: Result<Limiter<ManualClock>, ConfigError>,
    table: Result<KeyedLimiter<u8, ManualClock>, ConfigError>,
    map: Result<KeyedLimiter<u8, ManualClock>, ConfigError>,
) -> Option<(
    Limiter<ManualClock>,
    KeyedLimiter<u8, ManualClock>,
    KeyedLimiter<u8, ManualClock>,
)> {
    let zero = ConfigError::Zero { field: "max_keys" };
    let (table_want, map_want) = match &want {
        // The algorithm's error comes first, whatever the bound.
        Err(e) => (Err(e.clone()), Err(e.clone())),
        Ok(()) => (
            if stores.table.table() == 0 {
                Err(zero.clone())
            } else {
                Ok(())
            },
            if stores.map.map(Cap::map) == Some(0) {
                Err(zero)
            } else {
                Ok(())
            },
        ),
    };
    assert_eq!(direct.as_ref().err(), want.as_ref().err(), "direct build");
    assert_eq!(
        table.as_ref().err(),
        table_want.as_ref().err(),
        "table build"
    );
    assert_eq!(map.as_ref().err(), map_want.as_ref().err(), "map build");
    Some((direct.ok()?, table.ok()?, map.ok()?))
}

/// Applies the keyed builders' bounds: the table gets `max_keys(m)`, the map `max_keys(m)
/// .exact_keys()` or nothing.
pub fn bound<C: Clock>(
    table: cellgate::KeyedLimiterBuilder<u8, C>,
    map: cellgate::KeyedLimiterBuilder<u8, C>,
    stores: &Stores,
) -> (
    cellgate::KeyedLimiterBuilder<u8, C>,
    cellgate::KeyedLimiterBuilder<u8, C>,
) {
    // The fixed-capacity table and the exact store (which drops keys only by sweeps and at its
    // bound): the models do not describe the default table's reclaiming of idle keys on inserts.
    // The models describe `DenyNew` at the ceiling (the default drops light keys instead).
    let deny = cellgate::WhenFull::DenyNew;
    let table = table
        .max_keys(stores.table.table())
        .fixed_capacity()
        .when_full(deny);
    let map = match stores.map {
        Some(c) => map.max_keys(c.map()).exact_keys().when_full(deny),
        None => map.exact_keys(),
    };
    (table, map)
}

/// The `run` of every one-cell target: applies the stores' bounds to the keyed builders,
/// checks the three builds against the model's verdict `want` (see [`check_builds`]), and
/// replays `ops` with [`run_cell`] when all three are built; otherwise counts an invalid
/// configuration. `clock` is the one every subject was given.
pub fn run_built<M: CellModel>(
    want: Result<M, ConfigError>,
    stores: &Stores,
    ops: &[Op],
    clock: &ManualClock,
    direct: Result<Limiter<ManualClock>, ConfigError>,
    table: cellgate::KeyedLimiterBuilder<u8, ManualClock>,
    map: cellgate::KeyedLimiterBuilder<u8, ManualClock>,
) -> Stats {
    let (table, map) = bound(table, map, stores);
    let verdict = want.as_ref().map(|_| ()).map_err(Clone::clone);
    let built = check_builds(verdict, stores, direct, table.build(), map.build());
    let (Ok(model), Some((direct, table, map))) = (want, built) else {
        return Stats {
            inputs: 1,
            invalid_config: 1,
            ..Stats::default()
        };
    };
    let subjects = Subjects {
        clock,
        direct: &direct,
        table: &table,
        map: &map,
    };
    run_cell(&model, &subjects, stores, ops)
}

/// The `run` of the window targets (fixed and sliding window): the limit is chosen relative to
/// the layout's maximum for `window` (`max_limit`), the model is `validate`'s verdict, and the
/// subjects are built with the algorithm's constructors (`Limiter::fixed_window`, ...); then as
/// [`run_built`].
pub fn run_window<M: CellModel>(
    input: &WindowInput,
    max_limit: fn(u64) -> u128,
    validate: fn(u32, Duration) -> Result<M, ConfigError>,
    direct: fn(u32, Duration) -> LimiterBuilder<DefaultClock>,
    keyed: fn(u32, Duration) -> KeyedLimiterBuilder<u8, DefaultClock>,
) -> Stats {
    let window = input.window.get();
    let limit = input.limit.get(layout_max(window, max_limit));
    let clock = ManualClock::new();
    run_built(
        validate(limit, window),
        &input.stores,
        &input.ops,
        &clock,
        direct(limit, window).clock(clock.clone()).build(),
        keyed(limit, window).clock(clock.clone()),
        keyed(limit, window).clock(clock.clone()),
    )
}

/// Replays `ops` against the subjects and the model `m`; panics on the first difference.
pub fn run_cell<M: CellModel>(m: &M, s: &Subjects<'_>, stores: &Stores, ops: &[Op]) -> Stats {
    let mut stats = Stats {
        inputs: 1,
        ..Stats::default()
    };
    let w = m.window();
    let mut direct = m.fresh();
    let mut table = KeyedModel::<M::State>::new(Some(stores.table.table()));
    table.decide_after_sweep = true;
    let mut map = KeyedModel::<M::State>::new(stores.map.map(Cap::map));
    // The exact store is the growing table with its keys: like the fixed table, it decides a
    // new key again after the sweep that made room for it.
    map.decide_after_sweep = true;
    // Lossless eviction: a never-evicting shadow of the uncapped map.
    let mut shadow: BTreeMap<u8, M::State> = BTreeMap::new();
    let mut shadow_valid = stores.map.is_none();
    // Outstanding reservations: key, units, and what each subject (direct, table, map) got.
    let mut outstanding: Vec<Outstanding<M::State>> = Vec::new();
    let mut now = 0u64;
    s.clock.set_ns(0);

    for (i, op) in ops.iter().enumerate() {
        let ctx = |what: &str, now: u64| format!("op #{i} {op:?}: {what} at clock {now}");
        if let Some(t) = apply_time(op, s.clock, w) {
            let want = model_time(op, now, w).unwrap();
            assert_eq!(t, want, "{}", ctx("clock", now));
            stats.clock_backwards += u64::from(t < now);
            now = t;
            continue;
        }
        // The time decisions are made at: the clock, unless the algorithm ignores time.
        let at = if m.uses_time() { now } else { 0 };
        match *op {
            Op::Check { key: k, n } | Op::Check2 { key: k, n } => {
                let (k, n) = (key(k), n.get(m.limit()));
                let want = m.step(&mut direct, at, n);
                assert_decision(&s.direct.check_n(n), &want, &|| {
                    ctx(&format!("direct check_n({n}), model state {direct:?}"), now)
                });
                let behind = m.uses_time() && at < map.swept && !map.held.contains_key(&k);
                stats.behind_sweep += u64::from(behind);
                let (want, swept, ..) = table.check_full(m, k, at, now, n);
                let before = s.table.stats().refused;
                assert_decision(&s.table.check_n(&k, n), &want, &|| {
                    ctx(&format!("table check_n(&{k}, {n}), model {table:?}"), now)
                });
                stats.keys_evicted += swept as u64;
                stats.refused_by_cap += s.table.stats().refused - before;
                let (want, swept, ..) = map.check_full(m, k, at, now, n);
                let got = s.map.check_n(&k, n);
                assert_decision(&got, &want, &|| {
                    ctx(&format!("map check_n(&{k}, {n}), model {map:?}"), now)
                });
                stats.keys_evicted += swept as u64;
                stats.count_check(&want);
                if shadow_valid {
                    let shadow_ctx = || ctx(&format!("shadow check_n(&{k}, {n})"), now);
                    let (floor, valid) = (map.swept, &mut shadow_valid);
                    let st =
                        shadow_request(m, &shadow, valid, floor, (k, at, n), &got, &shadow_ctx);
                    shadow.insert(k, st);
                    stats.shadow_checks += 1;
                }
            }
            Op::Peek { key: k } => {
                let k = key(k);
                let want = m.step(&mut direct.clone(), at, 0);
                assert_decision(&s.direct.peek(), &want, &|| ctx("direct peek", now));
                assert_decision(&s.direct.check_n(0), &want, &|| {
                    ctx("direct check_n(0)", now)
                });
                stats.behind_sweep +=
                    u64::from(m.uses_time() && at < map.swept && !map.held.contains_key(&k));
                for (name, subject, model) in [("table", s.table, &table), ("map", s.map, &map)] {
                    let want = model.peek(m, k, at);
                    assert_decision(&subject.peek(&k), &want, &|| {
                        ctx(&format!("{name} peek(&{k}), model {model:?}"), now)
                    });
                    // A peek is `n = 0` without a write: the same as check_n(0).
                    assert_decision(&subject.check_n(&k, 0), &want, &|| {
                        ctx(&format!("{name} check_n(&{k}, 0)"), now)
                    });
                }
                if shadow_valid {
                    // A peek writes nothing: the shadow's state is not kept.
                    let shadow_ctx = || ctx(&format!("shadow peek(&{k})"), now);
                    let (floor, valid) = (map.swept, &mut shadow_valid);
                    let got = s.map.peek(&k);
                    shadow_request(m, &shadow, valid, floor, (k, at, 0), &got, &shadow_ctx);
                }
            }
            Op::EvictIdle => {
                // A known bug (see `EXCUSE_ZERO_COUNT_AHEAD`): dropping such a key changes
                // later decisions, so the lossless-eviction comparison ends here.
                if EXCUSE_ZERO_COUNT_AHEAD
                    && shadow_valid
                    && map.held.values().any(|st| m.zero_count_ahead(st, now))
                {
                    shadow_valid = false;
                    stats.excused_zero_count_ahead += 1;
                }
                // `evict_idle` reads the clock itself, whatever the algorithm.
                let want = table.evict_idle(m, now);
                assert_eq!(
                    s.table.evict_idle(),
                    want,
                    "{}",
                    ctx("table evict_idle", now)
                );
                let want = map.evict_idle(m, now);
                assert_eq!(s.map.evict_idle(), want, "{}", ctx("map evict_idle", now));
                stats.keys_evicted += want as u64;
            }
            Op::Restock { key: k, units } | Op::SetStock { key: k, units } => {
                let (k, units) = (key(k), units.get(m.limit()));
                let restock = matches!(op, Op::Restock { .. });
                let operation = if restock { "restock" } else { "set_stock" };
                // Both read as the units remaining afterwards (`set_stock` answers `()`: the
                // units it set).
                let on_model = |st: &mut M::State| match restock {
                    true => m.restock(st, units),
                    false => m.set_stock(st, units).map(|()| units),
                };
                let on_keyed = |l: &KeyedLimiter<u8, ManualClock>| match restock {
                    true => l.restock(&k, units),
                    false => l.set_stock(&k, units).map(|()| units),
                };
                let on_direct = match restock {
                    true => s.direct.restock(units),
                    false => s.direct.set_stock(units).map(|()| units),
                };
                let unsupported = ConfigError::Unsupported {
                    operation,
                    algorithm: M::NAME,
                };
                let want = on_model(&mut direct).ok_or(unsupported.clone());
                assert_eq!(on_direct, want, "{}", ctx("direct", now));
                for (name, subject, model) in
                    [("table", s.table, &mut table), ("map", s.map, &mut map)]
                {
                    let want = model.operator(m, k, on_model).ok_or(unsupported.clone());
                    assert_eq!(on_keyed(subject), want, "{}", ctx(name, now));
                }
                let mut st = shadow.get(&k).cloned().unwrap_or_else(|| m.fresh());
                on_model(&mut st);
                shadow.insert(k, st);
                stats.restocks += 1;
            }
            Op::Refund { key: k, n } => {
                let (k, n) = (key(k), n.get(m.limit()));
                // `refund` says whether anything was given back; a known bug (see
                // `EXCUSE_REFUND_ZERO`) answers `true` to some refunds of nothing.
                let mut answer = |got: bool, want: bool, what: &dyn Fn() -> String| {
                    if EXCUSE_REFUND_ZERO && n == 0 && got && !want {
                        stats.excused_refund_zero += 1;
                        return;
                    }
                    assert_eq!(got, want, "{}", what());
                };
                let want = m.refund(&mut direct, at, n);
                let direct_state = direct.clone();
                answer(s.direct.refund(n), want, &|| {
                    ctx(&format!("direct refund({n}), model {direct_state:?}"), now)
                });
                for (name, subject, model) in
                    [("table", s.table, &mut table), ("map", s.map, &mut map)]
                {
                    let want = model.on_held(k, |st| m.refund(st, at, n));
                    answer(subject.refund(&k, n), want, &|| {
                        ctx(&format!("{name} refund(&{k}, {n}), model {model:?}"), now)
                    });
                }
                stats.refunds += u64::from(want);
                // The shadow refunds what the map refunded: a key the map does not hold gets
                // nothing (see the README's notes: for a stock that makes eviction visible).
                if let (true, Some(st)) = (map.held.contains_key(&k), shadow.get_mut(&k)) {
                    m.refund(st, at, n);
                }
            }
            Op::Reserve {
                key: k,
                n,
                max_wait,
            } => {
                let (k, n) = (key(k), n.get(m.limit()));
                let wait = Duration::from_nanos(max_wait);
                let held = |r: cellgate::Reservation, want: &Expect, before: M::State, after| {
                    let holds = want.allowed && n > 0 && m.word(&before) != m.word(&after);
                    Held {
                        reservation: r,
                        holds,
                        before,
                        after,
                    }
                };
                // Windows and stock cannot schedule ahead: a reservation is a check, whatever
                // the wait, with no delay.
                let check_reservation =
                    |r: &cellgate::Reservation, want: &Expect, h: bool, what| {
                        assert_decision(&r.decision(), want, &|| ctx(what, now));
                        assert_eq!(r.is_allowed(), want.allowed, "{}", ctx(what, now));
                        assert_eq!(r.delay(), Duration::ZERO, "{}", ctx(what, now));
                        assert_eq!(r.units(), if h { n } else { 0 }, "{}", ctx(what, now));
                    };
                let before = direct.clone();
                let want = m.step(&mut direct, at, n);
                let r = s.direct.reserve(n, wait);
                let d = held(r.clone(), &want, before, direct.clone());
                check_reservation(&r, &want, d.holds, "direct reserve");
                let (want, swept, before, after) = table.check_full(m, k, at, now, n);
                let refused = s.table.stats().refused;
                let r = s.table.reserve(&k, n, wait);
                stats.refused_by_cap += s.table.stats().refused - refused;
                stats.keys_evicted += swept as u64;
                let t = held(r.clone(), &want, before, after);
                check_reservation(&r, &want, t.holds, "table reserve");
                let (want, swept, before, after) = map.check_full(m, k, at, now, n);
                let r = s.map.reserve(&k, n, wait);
                stats.keys_evicted += swept as u64;
                let p = held(r.clone(), &want, before, after);
                check_reservation(&r, &want, p.holds, "map reserve");
                stats.reserves += u64::from(p.holds);
                if shadow_valid {
                    // As a check for the shadow comparison.
                    let shadow_ctx = || ctx(&format!("shadow reserve(&{k}, {n})"), now);
                    let (floor, valid) = (map.swept, &mut shadow_valid);
                    let got = r.decision();
                    let st =
                        shadow_request(m, &shadow, valid, floor, (k, at, n), &got, &shadow_ctx);
                    shadow.insert(k, st);
                }
                outstanding.push((k, n, [d, t, p]));
            }
            Op::Cancel { pick } => {
                if outstanding.is_empty() {
                    continue;
                }
                let (k, n, [d, t, p]) = outstanding.remove(usize::from(pick) % outstanding.len());
                // Never more back than it took: `remaining` at this instant rises by at most
                // the reservation's units.
                let at_most_n = |before: &cellgate::Decision, after: &cellgate::Decision, what| {
                    assert!(
                        u64::from(after.remaining())
                            <= u64::from(before.remaining()) + u64::from(n),
                        "{what}: cancel of {n} units gave back more: {before:?} -> {after:?}: {}",
                        ctx("cancel", now)
                    );
                };
                let want = cancel(m, &mut direct, at, n, d.holds, &d.before, &d.after);
                let seen = s.direct.peek();
                assert_eq!(
                    s.direct.cancel(d.reservation.clone()),
                    want,
                    "{}",
                    ctx(&format!("direct cancel {d:?}, model {direct:?}"), now)
                );
                at_most_n(&seen, &s.direct.peek(), "direct");
                for (name, subject, model, h) in [
                    ("table", s.table, &mut table, &t),
                    ("map", s.map, &mut map, &p),
                ] {
                    let want =
                        model.on_held(k, |st| cancel(m, st, at, n, h.holds, &h.before, &h.after));
                    let seen = subject.peek(&k);
                    assert_eq!(
                        subject.cancel(&k, h.reservation.clone()),
                        want,
                        "{}",
                        ctx(
                            &format!("{name} cancel on {k}: {h:?}, model {model:?}"),
                            now
                        )
                    );
                    at_most_n(&seen, &subject.peek(&k), name);
                    if name == "map" {
                        stats.cancels += u64::from(want);
                        stats.cancels_nothing += u64::from(h.holds && !want);
                    }
                }
                // The shadow cancels where the map did (as for refunds).
                if let (true, Some(st)) = (map.held.contains_key(&k), shadow.get_mut(&k)) {
                    cancel(m, st, at, n, p.holds, &p.before, &p.after);
                }
            }
            Op::CheckAll {
                key: k,
                n,
                m: units,
                keyed_first,
            } => {
                let (k, n, units) = (key(k), n.get(m.limit()), units.get(m.limit()));
                let gate = s.map.gate(&k);
                let d = check_pair(keyed_first, (s.direct, n), (&gate, units));
                // The model: each gate charged as a check, in order; the first denial cancels
                // the earlier charge (the cancel rules of `cellgate_models::cancel`).
                let holds = |want: &Expect, units: u32, before: &M::State, after: &M::State| {
                    want.allowed && units > 0 && m.word(before) != m.word(after)
                };
                let charge_direct = |direct: &mut M::State| {
                    let before = direct.clone();
                    let want = m.step(direct, at, n);
                    let h = holds(&want, n, &before, direct);
                    (want.allowed, h, before, direct.clone())
                };
                let (allowed, denied_by) = if keyed_first {
                    let (want, swept, before, after) = map.check_full(m, k, at, now, units);
                    stats.keys_evicted += swept as u64;
                    if !want.allowed {
                        (false, Some(0))
                    } else if charge_direct(&mut direct).0 {
                        (true, None)
                    } else {
                        let h = holds(&want, units, &before, &after);
                        map.on_held(k, |st| cancel(m, st, at, units, h, &before, &after));
                        (false, Some(1))
                    }
                } else {
                    let (ok, h, before, after) = charge_direct(&mut direct);
                    if !ok {
                        (false, Some(0))
                    } else {
                        let (want, swept, ..) = map.check_full(m, k, at, now, units);
                        stats.keys_evicted += swept as u64;
                        if want.allowed {
                            (true, None)
                        } else {
                            cancel(m, &mut direct, at, n, h, &before, &after);
                            (false, Some(1))
                        }
                    }
                };
                assert_eq!(
                    (d.is_allowed(), d.denied_by()),
                    (allowed, denied_by),
                    "{}",
                    ctx(&format!("check_all(direct {n}, map {k} {units}, keyed first {keyed_first}), model {map:?}"), now)
                );
                if allowed {
                    stats.gates_allowed += 1;
                } else if denied_by == Some(1) {
                    stats.gates_rolled_back += 1;
                }
                // Both limiters now decide as the model, whatever was rolled back.
                assert_decision(
                    &s.direct.peek(),
                    &m.step(&mut direct.clone(), at, 0),
                    &|| {
                        ctx(
                            &format!("direct peek after check_all, model {direct:?}"),
                            now,
                        )
                    },
                );
                assert_decision(&s.map.peek(&k), &map.peek(m, k, at), &|| {
                    ctx(
                        &format!("map peek(&{k}) after check_all, model {map:?}"),
                        now,
                    )
                });
                // The shadow does not follow gates (it would need the charge's own decision).
                shadow_valid = false;
            }
            _ => unreachable!("clock moves are handled above"),
        }
        for (name, subject, model) in [("table", s.table, &table), ("map", s.map, &map)] {
            assert_eq!(subject.len(), model.held.len(), "{}", ctx(name, now));
            assert_eq!(subject.is_empty(), model.held.is_empty());
            assert_eq!(subject.stats().refused, model.refused, "{}", ctx(name, now));
            assert_eq!(subject.stats().evicted, model.evicted, "{}", ctx(name, now));
        }
    }
    stats.sweeps_at_backoff = table.sweeps_at_backoff + map.sweeps_at_backoff;
    stats
}

/// The never-evicting shadow's decision on `n` units of `k` at `at`, compared with the map's
/// `got` by [`shadow_step`] (`floor`: the map's sweep floor). Returns the shadow's state
/// afterwards, for the caller to keep (or not, for a peek).
fn shadow_request<M: CellModel>(
    m: &M,
    shadow: &BTreeMap<u8, M::State>,
    valid: &mut bool,
    floor: u64,
    (k, at, n): (u8, u64, u32),
    got: &cellgate::Decision,
    ctx: &dyn Fn() -> String,
) -> M::State {
    let mut st = shadow.get(&k).cloned().unwrap_or_else(|| m.fresh());
    let want = m.step(&mut st, at, n);
    shadow_step(valid, !m.uses_time() || at >= floor, got, &want, ctx);
    st
}

/// One shadow comparison. While `valid` and the request is not behind the sweep floor, `got`
/// must equal the never-evicting shadow's `want`. The first request behind the floor ends the
/// comparison; that one decision must be at least as strict as the shadow's: no admission the
/// shadow denies, and no more `remaining` when both admit or both deny.
pub fn shadow_step(
    valid: &mut bool,
    at_or_after_floor: bool,
    got: &cellgate::Decision,
    want: &Expect,
    ctx: &dyn Fn() -> String,
) {
    if at_or_after_floor {
        assert_decision(got, want, &|| {
            format!("eviction changed a decision: {}", ctx())
        });
        return;
    }
    *valid = false;
    let (got, want) = (Seen::of(got), want.seen());
    // `remaining` is after the decision: comparable when both decided alike.
    assert!(
        (!got.allowed || want.allowed)
            && (got.allowed != want.allowed || got.remaining <= want.remaining),
        "eviction gave credit to a clock behind the sweep: got {got:?}, never evicted {want:?}: {}",
        ctx()
    );
}
