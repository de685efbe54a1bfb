//! Extreme configurations and times for every constructor: no panic, and either the exact
//! `ConfigError` the models predict or decisions that keep the basic invariants.
//!
//! Constructors: `Limiter::gcra` / `KeyedLimiter::gcra` (with `Quota::new`, `with_interval`,
//! `per_second` / `per_minute` / `per_hour`, any burst), `fixed_window`, `sliding_window`,
//! `stock` (direct and keyed), `KeyedLimiter::sliding_log`. Values: 0, 1, `u32::MAX`, powers of
//! two, the layout maxima and their neighbours; periods and windows of 0, 1 ns, `u64::MAX` ns,
//! `Duration::from_nanos(u64::MAX)`, just above it, `Duration::MAX`; `max_keys` of 0, 1, small,
//! powers of two, `MAX_TABLE_KEYS` and one above, `usize::MAX`; clock times of 0, 1,
//! `u32::MAX`, `u64::MAX` and near it.
//!
//! The fingerprint table allocates about 23 bytes per key of capacity at build, so it is only
//! built for `max_keys` up to 2^16; larger bounds up to [`MAX_TABLE_KEYS`] use `exact_keys()`
//! instead, and bounds above it must be `ConfigError::TooManyKeys`.
//!
//! Invariants checked on every decision (`Inv` in the messages):
//!
//! - the `Duration` accessors agree with the ns ones; `limit()` is the configured limit (the
//!   burst for GCRA); `retry_after` is `None` when allowed and when `n > limit`, and otherwise
//!   ends at a time the clock can show (`now + retry_after <= u64::MAX` ns);
//! - `remaining <= limit`, unless a stock was restocked or set;
//! - `peek()` is `check_n(0)`; right after a check, a peek at the same instant reports the same
//!   `remaining` and `reset_after` ("how many more unit requests would be admitted right now,
//!   after this decision");
//! - at a frozen clock, the units admitted on one key never exceed the limit (for a stock: the
//!   stock, or the remaining units after the last restock / `set_stock`);
//! - `Probe`: with `r = peek().remaining()`, `check_n(r + 1)` is denied and `check_n(r)` is
//!   admitted;
//! - `FollowRetry`: after a denial with `retry_after = r`, the same request is still denied at
//!   `+ r - 1` ns and admitted at `+ r` (the shortest wait, if no other request came);
//!
//! with the documented exceptions: a keyed store's refusal of a new key at `max_keys`, GCRA's
//! horizon (a TAT past `u64::MAX` ns is denied without a wait), and a wait of exactly
//! `u64::MAX` ns reported 1 ns shorter.

use std::collections::HashMap;
use std::time::Duration;

use cellgate::clock::{Clock, ManualClock};
use cellgate::{
    ConfigError, Decision, KeyedLimiter, KeyedLimiterBuilder, Limiter, LimiterBuilder, Quota,
    SlidingLog, SlidingLogBuilder, MAX_SLIDING_LOG_LIMIT, MAX_TABLE_KEYS,
};

use crate::common::{Observe, Seen, Stats, U64};
use crate::{fixed_window_model, gcra_model, sliding_log_model, sliding_window_model};

/// The largest table this target builds (the table allocates its capacity up front).
pub const MAX_BUILT_TABLE: usize = 1 << 16;

mod input;

pub use input::*;

/// A limiter under test behind one interface; keys are `u8` (a direct limiter ignores them).
pub trait Subject {
    fn check_n(&self, key: u8, n: u32) -> Decision;
    fn peek(&self, key: u8) -> Decision;
    fn evict_idle(&self) -> Option<usize>;
    fn restock(&self, key: u8, units: u64) -> Option<Result<u64, ConfigError>>;
    fn set_stock(&self, key: u8, units: u64) -> Option<Result<(), ConfigError>>;
    fn held(&self) -> Option<usize>;
    fn refused(&self) -> u64;
    /// Whether keys are distinct (a direct limiter has one state for every key).
    fn keyed(&self) -> bool {
        true
    }
}

impl Subject for Limiter<ManualClock> {
    fn check_n(&self, _: u8, n: u32) -> Decision {
        Limiter::check_n(self, n)
    }
    fn peek(&self, _: u8) -> Decision {
        Limiter::peek(self)
    }
    fn evict_idle(&self) -> Option<usize> {
        None
    }
    fn restock(&self, _: u8, units: u64) -> Option<Result<u64, ConfigError>> {
        Some(Limiter::restock(self, units))
    }
    fn set_stock(&self, _: u8, units: u64) -> Option<Result<(), ConfigError>> {
        Some(Limiter::set_stock(self, units))
    }
    fn held(&self) -> Option<usize> {
        None
    }
    fn refused(&self) -> u64 {
        0
    }
    fn keyed(&self) -> bool {
        false
    }
}

impl Subject for KeyedLimiter<u8, ManualClock> {
    fn check_n(&self, key: u8, n: u32) -> Decision {
        KeyedLimiter::check_n(self, &key, n)
    }
    fn peek(&self, key: u8) -> Decision {
        KeyedLimiter::peek(self, &key)
    }
    fn evict_idle(&self) -> Option<usize> {
        Some(KeyedLimiter::evict_idle(self))
    }
    fn restock(&self, key: u8, units: u64) -> Option<Result<u64, ConfigError>> {
        Some(KeyedLimiter::restock(self, &key, units))
    }
    fn set_stock(&self, key: u8, units: u64) -> Option<Result<(), ConfigError>> {
        Some(KeyedLimiter::set_stock(self, &key, units))
    }
    fn held(&self) -> Option<usize> {
        Some(KeyedLimiter::len(self))
    }
    fn refused(&self) -> u64 {
        KeyedLimiter::stats(self).refused
    }
}

impl Subject for SlidingLog<u8, ManualClock> {
    fn check_n(&self, key: u8, n: u32) -> Decision {
        SlidingLog::check_n(self, &key, n)
    }
    fn peek(&self, key: u8) -> Decision {
        SlidingLog::peek(self, &key)
    }
    fn evict_idle(&self) -> Option<usize> {
        Some(SlidingLog::evict_idle(self))
    }
    fn restock(&self, _: u8, _: u64) -> Option<Result<u64, ConfigError>> {
        None
    }
    fn set_stock(&self, _: u8, _: u64) -> Option<Result<(), ConfigError>> {
        None
    }
    fn held(&self) -> Option<usize> {
        Some(SlidingLog::len(self))
    }
    fn refused(&self) -> u64 {
        SlidingLog::stats(self).refused
    }
}

/// What the invariants need to know about the configuration.
#[derive(Debug, Clone, Copy)]
struct Conf {
    /// The limit every decision reports.
    limit: u32,
    stock: bool,
    /// GCRA's tolerance `T * burst`, for its horizon exception.
    gcra_dvt: Option<u128>,
}

/// The resolved constructor: how to build each kind of limiter, and the expected verdict.
struct Built {
    conf: Result<Conf, ConfigError>,
    direct: Option<LimiterBuilder<ManualClock>>,
    keyed: Option<KeyedLimiterBuilder<u8, ManualClock>>,
    log: Option<SlidingLogBuilder<u8, ManualClock>>,
}

fn quota_max_burst(count: u32, period: Duration) -> u128 {
    match gcra_model::validate(count, period, 1, 0) {
        Ok(p) => U64 / p.t,
        Err(_) => U64,
    }
}

fn resolve(ctor: Ctor, clock: &ManualClock) -> Built {
    let gcra = |quota: Quota| {
        let conf =
            gcra_model::validate(quota.count(), quota.period(), quota.burst(), quota.queue()).map(
                |p| Conf {
                    limit: p.burst,
                    stock: false,
                    gcra_dvt: Some(p.dvt),
                },
            );
        Built {
            conf,
            direct: Some(Limiter::gcra(quota).clock(clock.clone())),
            keyed: Some(KeyedLimiter::<u8>::gcra(quota).clock(clock.clone())),
            log: None,
        }
    };
    let with_burst = |q: Quota, burst: Option<X32>| match burst {
        Some(b) => q.with_burst(b.get(quota_max_burst(q.count(), q.period()))),
        None => q,
    };
    let window_max = |window: Duration, max: fn(u64) -> u128| {
        u64::try_from(window.as_nanos())
            .ok()
            .filter(|&w| w > 0)
            .map_or(U64, max)
    };
    let plain = |limit: u32| Conf {
        limit,
        stock: false,
        gcra_dvt: None,
    };
    match ctor {
        Ctor::Gcra {
            count,
            period,
            burst,
        } => {
            let period = period.get();
            let count = count.get(period.as_nanos().min(U64));
            gcra(with_burst(Quota::new(count, period), burst))
        }
        Ctor::GcraInterval { interval, burst } => {
            gcra(with_burst(Quota::with_interval(interval.get()), burst))
        }
        Ctor::GcraPer { count, unit, burst } => {
            let (ctor, secs): (fn(u32) -> Quota, u128) = match unit % 3 {
                0 => (Quota::per_second, 1),
                1 => (Quota::per_minute, 60),
                _ => (Quota::per_hour, 3600),
            };
            let quota = ctor(count.get(secs * 1_000_000_000));
            gcra(with_burst(quota, burst))
        }
        Ctor::FixedWindow { limit, window } => {
            let window = window.get();
            let limit = limit.get(window_max(window, fixed_window_model::max_limit));
            Built {
                conf: fixed_window_model::validate(limit, window).map(|_| plain(limit)),
                direct: Some(Limiter::fixed_window(limit, window).clock(clock.clone())),
                keyed: Some(KeyedLimiter::<u8>::fixed_window(limit, window).clock(clock.clone())),
                log: None,
            }
        }
        Ctor::SlidingWindow { limit, window } => {
            let window = window.get();
            let limit = limit.get(window_max(window, sliding_window_model::max_limit));
            Built {
                conf: sliding_window_model::validate(limit, window).map(|_| plain(limit)),
                direct: Some(Limiter::sliding_window(limit, window).clock(clock.clone())),
                keyed: Some(KeyedLimiter::<u8>::sliding_window(limit, window).clock(clock.clone())),
                log: None,
            }
        }
        Ctor::Stock { units } => {
            let units = units.get(U64);
            Built {
                conf: Ok(Conf {
                    limit: units,
                    stock: true,
                    gcra_dvt: None,
                }),
                direct: Some(Limiter::stock(units).clock(clock.clone())),
                keyed: Some(KeyedLimiter::<u8>::stock(units).clock(clock.clone())),
                log: None,
            }
        }
        Ctor::SlidingLog { limit, window } => {
            let window = window.get();
            let limit = limit.get(u128::from(MAX_SLIDING_LOG_LIMIT));
            Built {
                conf: sliding_log_model::validate(limit, window).map(|_| plain(limit)),
                direct: None,
                keyed: None,
                log: Some(KeyedLimiter::<u8>::sliding_log(limit, window).clock(clock.clone())),
            }
        }
    }
}

/// Builds the subject the input asks for, checking the build's verdict. `None` when the
/// configuration is (correctly) refused.
fn build(input: &Input, clock: &ManualClock) -> Option<(Conf, Box<dyn Subject>)> {
    let built = resolve(input.ctor, clock);
    let zero = ConfigError::Zero { field: "max_keys" };
    // The bound's verdict, after the algorithm's.
    let bound_check = |m: usize, table: bool| -> Result<(), ConfigError> {
        if m == 0 {
            Err(zero.clone())
        } else if table && m > MAX_TABLE_KEYS {
            Err(ConfigError::TooManyKeys {
                max_keys: m,
                max: MAX_TABLE_KEYS,
            })
        } else {
            Ok(())
        }
    };
    let (want, got): (
        Result<Conf, ConfigError>,
        Result<Box<dyn Subject>, ConfigError>,
    ) = match (built, input.store) {
        (
            Built {
                log: Some(log),
                conf,
                ..
            },
            store,
        ) => {
            let (log, m) = match store {
                StoreSel::Direct | StoreSel::Map(None) => (log, None),
                StoreSel::Table(m) | StoreSel::Map(Some(m)) => {
                    (log.max_keys(m.get()), Some(m.get()))
                }
            };
            let want = conf.and_then(|c| m.map_or(Ok(()), |m| bound_check(m, false)).map(|()| c));
            (want, log.build().map(|l| Box::new(l) as Box<dyn Subject>))
        }
        (
            Built {
                direct: Some(d),
                conf,
                ..
            },
            StoreSel::Direct,
        ) => (conf, d.build().map(|l| Box::new(l) as Box<dyn Subject>)),
        (
            Built {
                keyed: Some(k),
                conf,
                ..
            },
            StoreSel::Table(m),
        ) => {
            let m = m.get();
            // The invariants describe `DenyNew` at the ceiling (the default drops light keys).
            let k = k.max_keys(m).when_full(cellgate::WhenFull::DenyNew);
            // Only small tables are allocated; larger bounds take the exact map.
            let (k, table) = if m > MAX_BUILT_TABLE && m <= MAX_TABLE_KEYS {
                (k.exact_keys(), false)
            } else {
                (k, true)
            };
            let want = conf.and_then(|c| bound_check(m, table).map(|()| c));
            (want, k.build().map(|l| Box::new(l) as Box<dyn Subject>))
        }
        (
            Built {
                keyed: Some(k),
                conf,
                ..
            },
            StoreSel::Map(m),
        ) => {
            let (k, want) = match m {
                Some(m) => (
                    k.max_keys(m.get())
                        .exact_keys()
                        .when_full(cellgate::WhenFull::DenyNew),
                    conf.and_then(|c| bound_check(m.get(), false).map(|()| c)),
                ),
                None => (k, conf),
            };
            (want, k.build().map(|l| Box::new(l) as Box<dyn Subject>))
        }
        _ => unreachable!("every constructor has a direct and a keyed form, or is a log"),
    };
    match (want, got) {
        (Ok(c), Ok(s)) => Some((c, s)),
        (Err(w), Err(g)) => {
            assert_eq!(g, w, "build of {:?}", input.ctor);
            None
        }
        (Ok(_), Err(g)) => panic!("valid {:?} refused: {g}", input.ctor),
        (Err(w), Ok(_)) => panic!("{:?} built, want {w}", input.ctor),
    }
}

/// The invariants of one decision on its own.
fn inv_decision(
    conf: &Conf,
    restocked: bool,
    now: u64,
    n: u32,
    d: &Decision,
    ctx: &dyn Fn() -> String,
) {
    let s = Seen::of(d);
    if let Some(r) = s.retry_after_ns {
        assert!(
            now.checked_add(r).is_some(),
            "Inv a wait must end at a time the clock can show: {s:?}: {}",
            ctx()
        );
    }
    assert_eq!(s.limit, conf.limit, "Inv limit: {}", ctx());
    if !(conf.stock && restocked) {
        assert!(
            s.remaining <= conf.limit,
            "Inv remaining <= limit: {s:?}: {}",
            ctx()
        );
        if n > conf.limit {
            assert!(!s.allowed, "Inv n > limit admitted: {s:?}: {}", ctx());
        }
    }
    if s.allowed || n > conf.limit {
        assert_eq!(s.retry_after_ns, None, "Inv retry_after: {s:?}: {}", ctx());
    }
}

/// Replays `input`; panics on a violated invariant.
pub fn run(input: &Input) -> Stats {
    let mut stats = Stats {
        inputs: 1,
        ..Stats::default()
    };
    let clock = ManualClock::new();
    let Some((conf, subject)) = build(input, &clock) else {
        stats.invalid_config += 1;
        return stats;
    };
    let s = subject.as_ref();
    let mut restocked = false;
    // Units admitted per key since the clock last moved (or, for a stock, since the last
    // restock / set_stock of that key), and what they may add up to.
    let mut admitted: HashMap<u8, (u128, u128)> = HashMap::new();
    // The last operation, when it was a check denied with a wait: (key, n, at, wait).
    let mut pending: Option<(u8, u32, u64, u64)> = None;
    // Keys 0..4; a direct limiter's one state is tallied as key 0.
    let key_of = |k: u8| if s.keyed() { k % 4 } else { 0 };
    for (i, op) in input.ops.iter().enumerate() {
        let now = clock.now();
        let ctx = |what: &str| format!("op #{i} {op:?} at {now}: {what}, {conf:?}");
        let budget = |admitted: &HashMap<u8, (u128, u128)>, k: u8| {
            admitted
                .get(&k)
                .copied()
                .unwrap_or((0, u128::from(conf.limit)))
        };
        // One check with all its per-decision invariants; returns the decision and whether it
        // was a keyed store's refusal of a new key.
        let mut next_pending = None;
        let check = |k: u8, n: u32, admitted: &mut HashMap<u8, (u128, u128)>| {
            let refused = s.refused();
            let d = s.check_n(k, n);
            let was_refused = s.refused() > refused;
            let what = format!("check_n({k}, {n}) = {d:?}");
            inv_decision(&conf, restocked, clock.now(), n, &d, &|| ctx(&what));
            if was_refused {
                let seen = Seen::of(&d);
                assert!(!seen.allowed && seen.remaining == 0 && seen.retry_after_ns.is_none());
                return (d, true);
            }
            if d.is_allowed() {
                let (sum, max) = budget(admitted, k);
                let sum = sum + u128::from(n);
                assert!(
                    sum <= max,
                    "Inv frozen-clock admissions {sum} > {max}: {}",
                    ctx(&what)
                );
                admitted.insert(k, (sum, max));
            }
            // Right after: a peek at the same instant agrees on remaining and reset_after,
            // except at GCRA's horizon (a denial with nothing remaining by rule).
            let horizon = conf.gcra_dvt.is_some() && !d.is_allowed() && d.retry_after().is_none();
            if !horizon {
                let p = s.peek(k);
                assert_eq!(
                    (p.remaining(), p.reset_after_ns()),
                    (d.remaining(), d.reset_after_ns()),
                    "Inv peek after check: {p:?}: {}",
                    ctx(&what)
                );
            }
            (d, false)
        };
        match *op {
            XOp::SetTime(t) => {
                clock.set_ns(t.get());
                stats.clock_backwards += u64::from(t.get() < now);
            }
            XOp::Advance(t) => clock.advance_ns(t.get()),
            XOp::Check { key, n } => {
                let n = n.get(u128::from(conf.limit));
                let (d, _) = check(key_of(key), n, &mut admitted);
                stats.checks += 1;
                stats.allowed += u64::from(d.is_allowed());
                if let Some(r) = d.retry_after_ns() {
                    next_pending = Some((key_of(key), n, now, r));
                    stats.denied_with_retry += 1;
                } else if !d.is_allowed() {
                    stats.denied_no_retry += 1;
                }
            }
            XOp::CheckSmall { key, n } => {
                let (d, _) = check(key_of(key), u32::from(n % 4), &mut admitted);
                stats.checks += 1;
                stats.allowed += u64::from(d.is_allowed());
                if let Some(r) = d.retry_after_ns() {
                    next_pending = Some((key_of(key), u32::from(n % 4), now, r));
                    stats.denied_with_retry += 1;
                } else if !d.is_allowed() {
                    stats.denied_no_retry += 1;
                }
            }
            XOp::Burst { key, times } => {
                for _ in 0..times % 16 {
                    check(key_of(key), 1, &mut admitted);
                    stats.checks += 1;
                }
            }
            XOp::Peek { key } => {
                let k = key_of(key);
                let p = s.peek(k);
                inv_decision(&conf, restocked, now, 0, &p, &|| ctx("peek"));
                let c = s.check_n(k, 0);
                assert_eq!(
                    Seen::of(&p),
                    Seen::of(&c),
                    "Inv peek == check_n(0): {}",
                    ctx("")
                );
            }
            XOp::Probe { key } => {
                let k = key_of(key);
                let p = s.peek(k);
                let r = p.remaining();
                if r < u32::MAX {
                    let (d, refused) = check(k, r + 1, &mut admitted);
                    assert!(
                        refused || !d.is_allowed(),
                        "Inv probe r+1={} admitted: {}",
                        r + 1,
                        ctx("")
                    );
                }
                let (d, refused) = check(k, r, &mut admitted);
                let at_horizon = conf.gcra_dvt.is_some_and(|dvt| u128::from(now) + dvt > U64)
                    && d.retry_after().is_none();
                // With r = 0 the check is the peek itself (which a GCRA backlog beyond the
                // tolerance, after the clock went back, denies).
                assert!(
                    refused || at_horizon || d.is_allowed() || (r == 0 && !p.is_allowed()),
                    "Inv probe r={r} denied: {d:?}: {}",
                    ctx("")
                );
                stats.checks += 2;
            }
            XOp::FollowRetry => {
                if let Some((k, n, at, r)) = pending {
                    // A wait of exactly u64::MAX ns reads 1 ns shorter (Decision::deny).
                    if r < u64::MAX - 1 {
                        let target = at.checked_add(r).unwrap_or_else(|| {
                            panic!(
                                "Inv retry_after {r} past the clock's range from {at}: {}",
                                ctx("")
                            )
                        });
                        admitted.clear();
                        if r > 1 {
                            clock.set_ns(target - 1);
                            let (d, refused) = check(k, n, &mut admitted);
                            assert!(
                                refused || !d.is_allowed(),
                                "Inv retry_after {r} not the shortest wait: admitted at {}: {}",
                                target - 1,
                                ctx("")
                            );
                        }
                        clock.set_ns(target);
                        admitted.clear();
                        let (d, refused) = check(k, n, &mut admitted);
                        assert!(
                            refused || d.is_allowed(),
                            "Inv retry_after {r} too short: denied at {target}: {d:?}: {}",
                            ctx("")
                        );
                    }
                }
            }
            XOp::EvictIdle => {
                if let (Some(before), Some(removed)) = (s.held(), s.evict_idle()) {
                    assert_eq!(
                        s.held(),
                        Some(before - removed),
                        "Inv evict_idle count: {}",
                        ctx("")
                    );
                    stats.keys_evicted += removed as u64;
                }
            }
            XOp::Restock { key, units } => {
                let k = key_of(key);
                match s.restock(k, units.get()) {
                    Some(Ok(left)) => {
                        assert!(conf.stock, "restock on a non-stock limiter: {}", ctx(""));
                        restocked = true;
                        admitted.insert(k, (0, u128::from(left)));
                        stats.restocks += 1;
                    }
                    Some(Err(e)) => {
                        assert!(!conf.stock, "restock failed: {e}: {}", ctx(""));
                        assert!(matches!(
                            e,
                            ConfigError::Unsupported {
                                operation: "restock",
                                ..
                            }
                        ));
                    }
                    None => {}
                }
            }
            XOp::SetStock { key, units } => {
                let k = key_of(key);
                match s.set_stock(k, units.get()) {
                    Some(Ok(())) => {
                        assert!(conf.stock, "set_stock on a non-stock limiter: {}", ctx(""));
                        restocked = true;
                        admitted.insert(k, (0, u128::from(units.get())));
                        stats.restocks += 1;
                    }
                    Some(Err(e)) => {
                        assert!(!conf.stock, "set_stock failed: {e}: {}", ctx(""));
                        assert!(matches!(
                            e,
                            ConfigError::Unsupported {
                                operation: "set_stock",
                                ..
                            }
                        ));
                    }
                    None => {}
                }
            }
        }
        // Clock moves keep a pending wait: "if no other request came".
        if !matches!(op, XOp::SetTime(_) | XOp::Advance(_)) {
            pending = next_pending;
        }
        // At a new instant the tallies start over (a stock ignores time: its budget stays).
        if clock.now() != now && !conf.stock {
            admitted.clear();
        }
    }
    stats.refused_by_cap = s.refused();
    stats
}

#[cfg(test)]
mod tests;
