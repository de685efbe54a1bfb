//! GCRA: the real `Limiter` and `KeyedLimiter<u8>` against a `u128` reference model.
//!
//! The model is written from DESIGN.md, "GCRA semantics (exact)", in unbounded-enough
//! arithmetic (`u128`) so that it cannot share an overflow bug with the implementation:
//!
//! ```text
//! T = period_ns / count, DVT = T * burst, limit = burst
//! new_tat = max(tat, now) + n*T           (tat = now for a key never seen)
//! allowed iff new_tat - now <= DVT
//!   allowed: store new_tat (if n > 0), reset_after = new_tat - now
//!   denied:  store nothing, reset_after = max(tat - now, 0),
//!            retry_after = new_tat - DVT - now if n <= burst, else None
//! remaining = min(floor((DVT - reset_after) / T), burst), 0 if DVT < reset_after
//! ```
//!
//! plus the one limit of the packed state, the *horizon*: a TAT is a `u64` of nanoseconds, so
//! a request the formula allows but whose `new_tat` exceeds `u64::MAX` is denied with no
//! `retry_after`, `reset_after = max(tat - now, 0)` and `remaining = 0` (fail closed).
//!
//! On top of the decisions, the keyed store's bookkeeping is modelled (from the
//! `KeyedLimiter` docs): which keys are held (only an admission of `n > 0` creates one; peeks
//! and denials never do), `len()`, `evict_idle()` (drops keys with `tat <= now`), the *sweep
//! floor* (every sweep at `now` raises `swept` to at least `now`, and a key not in the map
//! starts from TAT `swept` instead of "never seen", so a clock behind the sweeper gains no
//! credit from eviction), and the `max_keys` cap, in both stores (the fingerprint table that
//! a bound selects by default, and the dashmap with `exact_keys()`): a new key arriving while
//! the store is full triggers a sweep at most once every 10 ms of the limiter's clock; if
//! still full, the request is refused: denied, `remaining = 0`, no `retry_after`,
//! `reset_after = 0`, counted in `refused()`.
//!
//! Finally, eviction is checked to be *lossless*: a shadow model that never evicts (and has
//! no floor) must make the same decisions, as long as no request has been made at a time
//! before the sweep floor (DESIGN: dropping an idle key changes no decision made at the time
//! of the sweep or later).

use std::collections::HashMap;
use std::time::Duration;

use arbitrary::Arbitrary;
use cellgate::clock::{Clock, ManualClock};
use cellgate::{ConfigError, Decision, KeyedLimiter, Limiter, Quota};

/// The last instant a TAT can hold.
const HORIZON: u128 = u64::MAX as u128;

/// The keyed store's minimum time between two automatic sweeps (limiter clock, ns).
/// From the `KeyedLimiter` docs: "at most one every 10 ms of the limiter's clock".
const SWEEP_BACKOFF_NS: u64 = 10_000_000;

/// One fuzz input: a quota (possibly invalid), an optional key cap, and operations.
#[derive(Arbitrary, Debug, Clone)]
pub struct Input {
    pub count: u32,
    pub period: Period,
    /// `None`: the default burst (= count).
    pub burst: Option<u32>,
    /// `max_keys` of the keyed limiter; `Some(0)` must be a `ConfigError`.
    pub max_keys: Option<u8>,
    /// `exact_keys()`: the dashmap store even when `max_keys` is set (otherwise a bound
    /// selects the fingerprint table). Both must decide identically here: with at most 255
    /// keys the table has one shard sized above the bound, and 16 keys' 64-bit fingerprints
    /// do not collide in practice.
    pub exact_keys: bool,
    pub ops: Vec<Op>,
}

/// How the quota's period is given.
#[derive(Arbitrary, Debug, Clone, Copy)]
pub enum Period {
    /// Any nanosecond count.
    Ns(u64),
    /// `secs` seconds plus `nanos % 1e9` ns: may exceed `u64::MAX` ns (PeriodTooLong).
    Long { secs: u64, nanos: u32 },
    /// `interval * count` ns: an exact, usually small emission interval.
    PerRequest { interval: u16 },
}

/// One step of the scenario.
#[derive(Arbitrary, Debug, Clone, Copy)]
pub enum Op {
    AdvanceNs(u64),
    AdvanceSmall(u16),
    /// Forward by `k` intervals plus `frac / 256` of one.
    AdvanceIntervals {
        k: u8,
        frac: u8,
    },
    /// Set the clock anywhere, possibly backwards.
    SetNs(u64),
    /// Move the clock back by up to `u32::MAX` ns.
    Rewind(u32),
    Check {
        key: u8,
        n: Units,
    },
    Peek {
        key: u8,
    },
    EvictIdle,
}

/// Units requested by a check.
#[derive(Arbitrary, Debug, Clone, Copy)]
pub enum Units {
    /// `0..8`, zero included.
    Small(u8),
    Any(u32),
}

impl Units {
    fn get(self) -> u32 {
        match self {
            Units::Small(n) => u32::from(n % 8),
            Units::Any(n) => n,
        }
    }
}

/// Keys used: few enough that they collide and exceed small caps.
fn key(k: u8) -> u8 {
    k % 16
}

/// The five observable fields of a decision.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Expected {
    pub allowed: bool,
    pub limit: u32,
    pub remaining: u32,
    pub retry_after_ns: Option<u64>,
    pub reset_after_ns: u64,
}

impl Expected {
    /// Reads a real decision, checking that its `Duration` accessors agree with the ns ones.
    pub fn of(d: &Decision) -> Self {
        assert_eq!(
            d.retry_after(),
            d.retry_after_ns().map(Duration::from_nanos)
        );
        assert_eq!(d.reset_after(), Duration::from_nanos(d.reset_after_ns()));
        Self {
            allowed: d.is_allowed(),
            limit: d.limit(),
            remaining: d.remaining(),
            retry_after_ns: d.retry_after_ns(),
            reset_after_ns: d.reset_after_ns(),
        }
    }
}

/// Validated GCRA parameters, in model arithmetic.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Params {
    /// Emission interval, ns.
    pub t: u128,
    /// Tolerance `T * burst`, ns.
    pub dvt: u128,
    pub burst: u32,
}

/// Which quotas are valid, and the error an invalid one must get. Checked in the order the
/// fields are documented (count, period, burst, then representability), which is also the
/// order `ConfigError` lists them.
pub fn validate(count: u32, period: Duration, burst: u32) -> Result<Params, ConfigError> {
    if count == 0 {
        return Err(ConfigError::Zero { field: "count" });
    }
    if period.is_zero() {
        return Err(ConfigError::Zero { field: "period" });
    }
    if burst == 0 {
        return Err(ConfigError::Zero { field: "burst" });
    }
    let period_ns = period.as_nanos();
    if period_ns > HORIZON {
        return Err(ConfigError::PeriodTooLong { period });
    }
    let t = period_ns / u128::from(count);
    if t < 1 {
        return Err(ConfigError::RateTooFast { count, period });
    }
    let dvt = t * u128::from(burst);
    if dvt > HORIZON {
        return Err(ConfigError::BurstTooLarge {
            burst,
            interval_ns: t as u64,
        });
    }
    Ok(Params { t, dvt, burst })
}

/// The model's decision for `n` units at `now` on stored `tat` (`None`: never seen), and the
/// TAT to store, if any.
pub fn step(p: &Params, tat: Option<u64>, now: u64, n: u32) -> (Expected, Option<u64>) {
    let now = u128::from(now);
    let tat = tat.map_or(now, u128::from);
    let new_tat = tat.max(now) + u128::from(n) * p.t;
    let backlog = tat.saturating_sub(now);
    let remaining = |reset: u128| -> u32 {
        let r = p.dvt.saturating_sub(reset) / p.t;
        r.min(u128::from(p.burst)) as u32
    };
    let narrow = |v: u128| u64::try_from(v).expect("model value fits u64 here");
    if new_tat - now <= p.dvt {
        if new_tat > HORIZON {
            // Allowed by the formula, but the TAT would not fit: fail closed.
            let d = Expected {
                allowed: false,
                limit: p.burst,
                remaining: 0,
                retry_after_ns: None,
                reset_after_ns: narrow(backlog),
            };
            return (d, None);
        }
        let reset = new_tat - now;
        let d = Expected {
            allowed: true,
            limit: p.burst,
            remaining: remaining(reset),
            retry_after_ns: None,
            reset_after_ns: narrow(reset),
        };
        return (d, (n > 0).then(|| narrow(new_tat)));
    }
    // When `new_tat > u64::MAX` no wait can help (the request was denied, so `tat > now` and
    // at the retry instant the horizon rule above denies it): no retry, fail closed.
    let retry = (n <= p.burst && new_tat <= HORIZON).then(|| narrow(new_tat - p.dvt - now));
    let d = Expected {
        allowed: false,
        limit: p.burst,
        remaining: remaining(backlog),
        retry_after_ns: retry,
        reset_after_ns: narrow(backlog),
    };
    (d, None)
}

/// The keyed store, modelled: key -> TAT, plus the cap's bookkeeping.
#[derive(Debug, Default)]
struct KeyedModel {
    tats: HashMap<u8, u64>,
    max_keys: Option<usize>,
    refused: u64,
    evicted: u64,
    /// The latest `now` of any sweep (0: none yet): where a key not in the map starts.
    swept: u64,
    /// Clock time of the last automatic sweep; `u64::MAX` for never (as the implementation
    /// encodes it, so a sweep at `u64::MAX` reads as "never" again).
    last_sweep: u64,
}

impl KeyedModel {
    /// The TAT a key that is not in the map starts from.
    fn fresh(&self) -> Option<u64> {
        (self.swept > 0).then_some(self.swept)
    }

    fn evict_idle(&mut self, now: u64) -> usize {
        self.swept = self.swept.max(now);
        let before = self.tats.len();
        self.tats.retain(|_, tat| *tat > now);
        let removed = before - self.tats.len();
        self.evicted += removed as u64;
        removed
    }

    fn check(&mut self, p: &Params, k: u8, now: u64, n: u32) -> (Expected, usize) {
        if let Some(&tat) = self.tats.get(&k) {
            let (d, w) = step(p, Some(tat), now, n);
            if let Some(w) = w {
                self.tats.insert(k, w);
            }
            return (d, 0);
        }
        let (d, w) = step(p, self.fresh(), now, n);
        let Some(w) = w else {
            return (d, 0);
        };
        let mut swept = 0;
        if let Some(max) = self.max_keys {
            if self.tats.len() >= max {
                let last = self.last_sweep;
                let due = last == u64::MAX || now < last || now - last >= SWEEP_BACKOFF_NS;
                if due {
                    swept = self.evict_idle(now);
                    self.last_sweep = now;
                }
                if self.tats.len() >= max {
                    self.refused += 1;
                    let refused = Expected {
                        allowed: false,
                        limit: p.burst,
                        remaining: 0,
                        retry_after_ns: None,
                        reset_after_ns: 0,
                    };
                    return (refused, swept);
                }
            }
        }
        self.tats.insert(k, w);
        (d, swept)
    }

    fn peek(&self, p: &Params, k: u8, now: u64) -> Expected {
        step(p, self.tats.get(&k).copied().or(self.fresh()), now, 0).0
    }
}

/// What one input exercised: summed over a corpus it shows which paths the fuzzer reaches
/// (`cargo test --release corpus_stats -- --ignored --nocapture`).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Stats {
    pub inputs: u64,
    pub invalid_quota: u64,
    pub zero_max_keys: u64,
    pub checks: u64,
    pub allowed: u64,
    pub denied_with_retry: u64,
    /// Denied with no `retry_after` although `n <= burst`: the horizon (or the key cap).
    pub denied_at_horizon: u64,
    pub denied_n_above_burst: u64,
    pub refused_by_cap: u64,
    pub keys_evicted: u64,
    pub clock_backwards: u64,
    pub shadow_checks: u64,
}

impl std::ops::AddAssign for Stats {
    fn add_assign(&mut self, o: Stats) {
        self.inputs += o.inputs;
        self.invalid_quota += o.invalid_quota;
        self.zero_max_keys += o.zero_max_keys;
        self.checks += o.checks;
        self.allowed += o.allowed;
        self.denied_with_retry += o.denied_with_retry;
        self.denied_at_horizon += o.denied_at_horizon;
        self.denied_n_above_burst += o.denied_n_above_burst;
        self.refused_by_cap += o.refused_by_cap;
        self.keys_evicted += o.keys_evicted;
        self.clock_backwards += o.clock_backwards;
        self.shadow_checks += o.shadow_checks;
    }
}

/// Replays `input` against the real limiters and the model; panics on any difference.
pub fn run(input: &Input) -> Stats {
    let mut stats = Stats {
        inputs: 1,
        ..Stats::default()
    };
    let period = match input.period {
        Period::Ns(ns) => Duration::from_nanos(ns),
        Period::Long { secs, nanos } => {
            Duration::from_secs(secs) + Duration::from_nanos(u64::from(nanos % 1_000_000_000))
        }
        Period::PerRequest { interval } => {
            Duration::from_nanos(u64::from(interval) * u64::from(input.count))
        }
    };
    let mut quota = Quota::new(input.count, period);
    if let Some(b) = input.burst {
        quota = quota.with_burst(b);
    }
    let burst = input.burst.unwrap_or(input.count);
    assert_eq!(quota.burst(), burst);

    let clock = ManualClock::new();
    let direct = Limiter::gcra(quota).clock(clock.clone()).build();
    let mut keyed_builder = KeyedLimiter::<u8>::gcra(quota).clock(clock.clone());
    if let Some(m) = input.max_keys {
        keyed_builder = keyed_builder.max_keys(usize::from(m));
    }
    if input.exact_keys {
        keyed_builder = keyed_builder.exact_keys();
    }
    let keyed = keyed_builder.build();

    let params = match validate(input.count, period, burst) {
        Ok(p) => p,
        Err(want) => {
            assert_eq!(
                direct.err(),
                Some(want.clone()),
                "direct build of {quota:?}"
            );
            assert_eq!(keyed.err(), Some(want), "keyed build of {quota:?}");
            stats.invalid_quota += 1;
            return stats;
        }
    };
    let direct = direct.unwrap_or_else(|e| panic!("valid {quota:?} refused: {e}"));
    if input.max_keys == Some(0) {
        assert_eq!(keyed.err(), Some(ConfigError::Zero { field: "max_keys" }));
        stats.zero_max_keys += 1;
        return stats;
    }
    let keyed = keyed.unwrap_or_else(|e| panic!("valid {quota:?} refused by keyed: {e}"));

    let mut model = KeyedModel {
        max_keys: input.max_keys.map(usize::from),
        last_sweep: u64::MAX,
        ..KeyedModel::default()
    };
    let mut direct_tat: Option<u64> = None;
    // Lossless eviction: a model that never evicts must agree while no request comes at a time
    // before the sweep floor.
    let mut shadow: HashMap<u8, u64> = HashMap::new();
    let mut shadow_valid = input.max_keys.is_none();
    let mut now: u64 = 0;

    for (i, op) in input.ops.iter().enumerate() {
        let before = now;
        let ctx = |now: u64| format!("op #{i} {op:?} at now={now}, {params:?}");
        match *op {
            Op::AdvanceNs(ns) => now = now.saturating_add(ns),
            Op::AdvanceSmall(ns) => now = now.saturating_add(u64::from(ns)),
            Op::AdvanceIntervals { k, frac } => {
                let ns = u128::from(k) * params.t + u128::from(frac) * params.t / 256;
                now = now.saturating_add(u64::try_from(ns).unwrap_or(u64::MAX));
            }
            Op::SetNs(ns) => now = ns,
            Op::Rewind(ns) => now = now.saturating_sub(u64::from(ns)),
            Op::Check { key: k, n } => {
                let (k, n) = (key(k), n.get());
                // Behind the sweep floor, eviction is only promised to give no credit, not to
                // be invisible; from here on the shadow may legitimately differ.
                shadow_valid &= now >= model.swept;
                // Direct limiter: one cell for every request.
                let (want, w) = step(&params, direct_tat, now, n);
                direct_tat = w.or(direct_tat);
                assert_eq!(
                    Expected::of(&direct.check_n(n)),
                    want,
                    "direct {}",
                    ctx(now)
                );
                // Keyed limiter.
                let (want, swept) = model.check(&params, k, now, n);
                let got = Expected::of(&keyed.check_n(&k, n));
                assert_eq!(got, want, "keyed {} held={:?}", ctx(now), model.tats);
                stats.checks += 1;
                stats.keys_evicted += swept as u64;
                match (want.allowed, want.retry_after_ns) {
                    (true, _) => stats.allowed += 1,
                    (false, Some(_)) => stats.denied_with_retry += 1,
                    (false, None) if n > params.burst => stats.denied_n_above_burst += 1,
                    (false, None) if keyed.refused() > stats.refused_by_cap => {
                        stats.refused_by_cap += 1;
                    }
                    (false, None) => stats.denied_at_horizon += 1,
                }
                if shadow_valid {
                    let (want_shadow, w) = step(&params, shadow.get(&k).copied(), now, n);
                    if let Some(w) = w {
                        shadow.insert(k, w);
                    }
                    assert_eq!(
                        got,
                        want_shadow,
                        "eviction changed a decision: {}",
                        ctx(now)
                    );
                    stats.shadow_checks += 1;
                }
            }
            Op::Peek { key: k } => {
                let k = key(k);
                shadow_valid &= now >= model.swept;
                let want = step(&params, direct_tat, now, 0).0;
                assert_eq!(
                    Expected::of(&direct.peek()),
                    want,
                    "direct peek {}",
                    ctx(now)
                );
                assert_eq!(
                    Expected::of(&direct.check_n(0)),
                    want,
                    "direct check_n(0) {}",
                    ctx(now)
                );
                let want = model.peek(&params, k, now);
                let got = Expected::of(&keyed.peek(&k));
                assert_eq!(got, want, "keyed peek {}", ctx(now));
                // A peek is `n = 0` without a write: the same as check_n(0).
                assert_eq!(
                    Expected::of(&keyed.check_n(&k, 0)),
                    want,
                    "check_n(0) {}",
                    ctx(now)
                );
                if shadow_valid {
                    let want_shadow = step(&params, shadow.get(&k).copied(), now, 0).0;
                    assert_eq!(got, want_shadow, "eviction changed a peek: {}", ctx(now));
                }
            }
            Op::EvictIdle => {
                let want = model.evict_idle(now);
                assert_eq!(keyed.evict_idle(), want, "evict_idle {}", ctx(now));
                stats.keys_evicted += want as u64;
            }
        }
        stats.clock_backwards += u64::from(now < before);
        clock.set_ns(now);
        assert_eq!(clock.now(), now);
        assert_eq!(keyed.len(), model.tats.len(), "len after {}", ctx(now));
        assert_eq!(keyed.is_empty(), model.tats.is_empty());
        assert_eq!(keyed.refused(), model.refused, "refused after {}", ctx(now));
        assert_eq!(keyed.evicted(), model.evicted, "evicted after {}", ctx(now));
    }
    stats
}

#[cfg(test)]
mod tests {
    //! The model against hand-computed vectors (DESIGN.md and cellgate's own unit tests), so a
    //! model bug is not mistaken for an implementation bug.
    use super::*;

    fn params(count: u32, period_ns: u64, burst: u32) -> Params {
        validate(count, Duration::from_nanos(period_ns), burst).unwrap()
    }

    fn run_model(p: &Params, tat: &mut Option<u64>, now: u64, n: u32) -> Expected {
        let (d, w) = step(p, *tat, now, n);
        *tat = w.or(*tat);
        d
    }

    #[test]
    fn burst_then_refill() {
        let p = params(1, 100, 3);
        let mut tat = None;
        for (i, rem) in [2u32, 1, 0].into_iter().enumerate() {
            let d = run_model(&p, &mut tat, 1000, 1);
            assert!(d.allowed);
            assert_eq!(d.remaining, rem);
            assert_eq!(d.reset_after_ns, 100 * (i as u64 + 1));
        }
        let d = run_model(&p, &mut tat, 1000, 1);
        assert_eq!(
            d,
            Expected {
                allowed: false,
                limit: 3,
                remaining: 0,
                retry_after_ns: Some(100),
                reset_after_ns: 300
            }
        );
        assert!(!run_model(&p, &mut tat, 1099, 1).allowed);
        assert!(run_model(&p, &mut tat, 1100, 1).allowed);
        assert_eq!(tat, Some(1400));
        assert_eq!(run_model(&p, &mut tat, 10_000, 1).remaining, 2);
    }

    #[test]
    fn n_above_burst_and_backwards_time() {
        let p = params(1, 100, 3);
        let mut tat = None;
        let d = run_model(&p, &mut tat, 0, 4);
        assert_eq!((d.allowed, d.retry_after_ns, d.remaining), (false, None, 3));
        let p = params(1, 100, 2);
        let mut tat = None;
        run_model(&p, &mut tat, 1000, 2);
        let d = run_model(&p, &mut tat, 500, 1);
        assert_eq!(
            (d.allowed, d.reset_after_ns, d.remaining, d.retry_after_ns),
            (false, 700, 0, Some(600))
        );
        // A peek while the backlog exceeds DVT is itself a denial (n = 0 fits iff
        // backlog <= DVT), with retry = backlog - DVT.
        let d = run_model(&p, &mut tat, 500, 0);
        assert_eq!((d.allowed, d.retry_after_ns), (false, Some(500)));
    }

    #[test]
    fn horizon() {
        let p = params(1, 100, 2);
        let mut tat = None;
        assert!(run_model(&p, &mut tat, u64::MAX - 100, 1).allowed);
        assert_eq!(tat, Some(u64::MAX));
        let d = run_model(&p, &mut tat, u64::MAX, 1);
        assert_eq!(
            d,
            Expected {
                allowed: false,
                limit: 2,
                remaining: 0,
                retry_after_ns: None,
                reset_after_ns: 0
            }
        );
        let p = params(1, u64::MAX, 1);
        let mut tat = None;
        assert!(run_model(&p, &mut tat, 0, 1).allowed);
        assert_eq!(run_model(&p, &mut tat, 0, u32::MAX).retry_after_ns, None);
    }

    #[test]
    fn validation_order() {
        let s = Duration::from_secs(1);
        assert_eq!(
            validate(0, Duration::ZERO, 0),
            Err(ConfigError::Zero { field: "count" })
        );
        assert_eq!(
            validate(1, Duration::ZERO, 0),
            Err(ConfigError::Zero { field: "period" })
        );
        assert_eq!(validate(1, s, 0), Err(ConfigError::Zero { field: "burst" }));
        assert!(matches!(
            validate(1, Duration::MAX, 1),
            Err(ConfigError::PeriodTooLong { .. })
        ));
        assert!(matches!(
            validate(2, Duration::from_nanos(1), 1),
            Err(ConfigError::RateTooFast { .. })
        ));
        assert_eq!(
            validate(1, Duration::from_nanos(u64::MAX / 2), 3),
            Err(ConfigError::BurstTooLarge {
                burst: 3,
                interval_ns: u64::MAX / 2
            })
        );
    }

    #[test]
    fn seeds_replay() {
        // Every committed seed must parse and pass (guards the seed corpus against format drift).
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/corpus/seed_gcra_model");
        let mut seen = 0;
        for entry in std::fs::read_dir(dir).unwrap() {
            let bytes = std::fs::read(entry.unwrap().path()).unwrap();
            // The same decoding libfuzzer-sys applies to a typed `fuzz_target!` input.
            let input = Input::arbitrary_take_rest(arbitrary::Unstructured::new(&bytes))
                .expect("a seed that no longer decodes");
            run(&input);
            seen += 1;
        }
        assert!(seen > 0, "no seeds in {dir}");
    }

    /// Sums [`Stats`] over a corpus: `CORPUS=corpus/gcra_model cargo test --release
    /// corpus_stats -- --ignored --nocapture` (default: the seed corpus).
    #[test]
    #[ignore = "reporting tool, not a check"]
    fn corpus_stats() {
        let dir = std::env::var("CORPUS").unwrap_or_else(|_| {
            concat!(env!("CARGO_MANIFEST_DIR"), "/corpus/seed_gcra_model").to_string()
        });
        let mut total = Stats::default();
        for entry in std::fs::read_dir(&dir).unwrap() {
            let bytes = std::fs::read(entry.unwrap().path()).unwrap();
            if let Ok(input) = Input::arbitrary_take_rest(arbitrary::Unstructured::new(&bytes)) {
                total += run(&input);
            }
        }
        println!("{dir}: {total:#?}");
    }
}
