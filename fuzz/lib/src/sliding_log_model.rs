//! Exact sliding log: the real `SlidingLog<u8>` (without a bound, and with `max_keys(m)`)
//! against `cellgate_models::SlidingLogModel`, a model of the `SlidingLog` /
//! `src/algorithm/sliding_log.rs` docs:
//!
//! ```text
//! a unit admitted at t is live at now iff t + W > now (it expires at t + W)
//! each decision first forgets every unit that has expired at now; `forgotten` is the latest
//! expiry of any unit forgotten so far (or the sweep floor the key came back from)
//! live = limit while now < forgotten (the clock is behind an expiry it forgot: the log no
//!        longer knows how many units were live then and counts itself full), else the units
//!        not forgotten
//! allowed iff live + n <= limit; units are recorded at max(now, latest recorded time)
//! remaining = limit - live (- n when admitted), 0 at the least
//! reset_after = until every unit has expired and the clock is past `forgotten`
//! retry_after (denied) = the shortest wait after which the same request is admitted if
//!                        nothing else happens; None if n > limit or if it ends past u64::MAX
//! ```
//!
//! The model keeps every unit ever recorded with a flag for "forgotten by the log" and finds
//! `retry_after` by a binary search, so it checks the log's queue and closed form. Peeks decide
//! `n = 0` on the held log, so they forget expired units too.
//!
//! The store: a key is held once a request for `n > 0` is admitted on it; `evict_idle` drops
//! every log that holds no information (all units expired, clock not behind `forgotten`) and
//! raises the sweep floor; a key not held starts from an empty log with `forgotten` = the floor
//! (`Log::swept`). At `max_keys` a new key that would be admitted (decided on the log it would
//! start from) triggers a sweep at most once every 10 ms of the clock; if the map is still
//! full it is refused (denied, `remaining = 0`, no wait, no reset) and counted in `refused()`.
//! Otherwise the log that was decided on is inserted, so its `forgotten` is the floor from
//! before that sweep.
//!
//! Configuration: a zero limit, a limit above `MAX_SLIDING_LOG_LIMIT`, a zero window or one longer than
//! `u64::MAX` ns are `ConfigError`s, in that order; `max_keys(0)` too.

use std::collections::BTreeMap;
use std::time::Duration;

use arbitrary::Arbitrary;
use cellgate::clock::{Clock, ManualClock};
use cellgate::{ConfigError, KeyedLimiter, SlidingLog, MAX_SLIDING_LOG_LIMIT};

pub use cellgate_models::sliding_log::{LogState, SlidingLogModel};
use cellgate_models::Model;

use crate::common::{
    apply_time, assert_decision, key, model_time, sweep_due, Expect, LimitSel, Op, Stats,
    WindowSel, U64,
};
use crate::keyed_model::shadow_step;

/// One fuzz input: a configuration (possibly invalid), a bound, and operations.
#[derive(Arbitrary, Debug, Clone)]
pub struct Input {
    pub window: WindowSel,
    pub limit: LimitSel,
    /// `max_keys` of the second log: `1 + x % 16`, or 0 for `x = 255` (a `ConfigError`).
    pub max_keys: u8,
    pub ops: Vec<Op>,
}

/// Which configurations are valid, and the exact error of an invalid one.
pub fn validate(limit: u32, window: Duration) -> Result<SlidingLogModel, ConfigError> {
    if limit == 0 {
        return Err(ConfigError::Zero { field: "limit" });
    }
    if limit > MAX_SLIDING_LOG_LIMIT {
        return Err(ConfigError::LogLimitTooLarge {
            limit,
            max: MAX_SLIDING_LOG_LIMIT,
        });
    }
    if window.as_nanos() > U64 {
        return Err(ConfigError::WindowTooLong { window });
    }
    if window.is_zero() {
        return Err(ConfigError::Zero { field: "window" });
    }
    Ok(SlidingLogModel {
        limit,
        window: u64::try_from(window.as_nanos()).unwrap(),
    })
}

/// The keyed log store, modelled.
#[derive(Debug)]
pub struct LogStore {
    pub held: BTreeMap<u8, LogState>,
    pub max_keys: Option<usize>,
    pub refused: u64,
    pub swept: u64,
    pub last_sweep: u64,
    /// Automatic sweeps exactly at the back-off boundary that dropped a key.
    pub sweeps_at_backoff: u64,
}

impl LogStore {
    fn new(max_keys: Option<usize>) -> Self {
        Self {
            held: BTreeMap::new(),
            max_keys,
            refused: 0,
            swept: 0,
            last_sweep: u64::MAX,
            sweeps_at_backoff: 0,
        }
    }

    fn start(&self) -> LogState {
        LogState::swept(self.swept)
    }

    fn evict_idle(&mut self, m: &SlidingLogModel, now: u64) -> usize {
        self.swept = self.swept.max(now);
        let before = self.held.len();
        self.held.retain(|_, st| !m.is_idle(st, now));
        before - self.held.len()
    }

    fn check(&mut self, m: &SlidingLogModel, k: u8, now: u64, n: u32) -> Expect {
        if let Some(st) = self.held.get_mut(&k) {
            return m.step(st, now, n);
        }
        let mut st = self.start();
        let d = m.step(&mut st, now, n);
        if !d.allowed || n == 0 {
            return d;
        }
        if let Some(max) = self.max_keys {
            if self.held.len() >= max {
                let (due, boundary) = sweep_due(self.last_sweep, now);
                if due {
                    let swept = self.evict_idle(m, now);
                    self.last_sweep = now;
                    if boundary && swept > 0 {
                        self.sweeps_at_backoff += 1;
                    }
                }
                if self.held.len() >= max {
                    self.refused += 1;
                    return Expect::refused(m.limit);
                }
            }
        }
        self.held.insert(k, st);
        d
    }

    fn peek(&mut self, m: &SlidingLogModel, k: u8, now: u64) -> Expect {
        match self.held.get_mut(&k) {
            Some(st) => m.step(st, now, 0),
            None => m.step(&mut self.start(), now, 0),
        }
    }
}

/// The bound of the second log.
fn cap(x: u8) -> usize {
    if x == 255 {
        0
    } else {
        1 + usize::from(x % 16)
    }
}

/// Replays `input` against the real logs and the model; panics on any difference.
pub fn run(input: &Input) -> Stats {
    let mut stats = Stats {
        inputs: 1,
        ..Stats::default()
    };
    let window = input.window.get();
    let limit = input.limit.get(u128::from(MAX_SLIDING_LOG_LIMIT));
    let clock = ManualClock::new();
    let free = KeyedLimiter::<u8>::sliding_log(limit, window)
        .clock(clock.clone())
        .build();
    let capped = KeyedLimiter::<u8>::sliding_log(limit, window)
        .clock(clock.clone())
        .max_keys(cap(input.max_keys))
        .build();
    let m = match validate(limit, window) {
        Ok(m) => m,
        Err(want) => {
            assert_eq!(free.err(), Some(want.clone()), "build");
            assert_eq!(capped.err(), Some(want), "build with max_keys");
            stats.invalid_config += 1;
            return stats;
        }
    };
    let free: SlidingLog<u8, ManualClock> = free.expect("a valid configuration");
    if cap(input.max_keys) == 0 {
        assert_eq!(capped.err(), Some(ConfigError::Zero { field: "max_keys" }));
        stats.invalid_config += 1;
        return stats;
    }
    let capped = capped.expect("a valid configuration and bound");

    let mut models = [
        LogStore::new(None),
        LogStore::new(Some(cap(input.max_keys))),
    ];
    let subjects = [&free, &capped];
    let mut shadow: BTreeMap<u8, LogState> = BTreeMap::new();
    let mut shadow_valid = true;
    let mut now = 0u64;
    for (i, op) in input.ops.iter().enumerate() {
        let ctx = |what: &str, now: u64| format!("op #{i} {op:?}: {what} at clock {now}");
        if let Some(t) = apply_time(op, &clock, m.window) {
            assert_eq!(t, model_time(op, now, m.window).unwrap());
            stats.clock_backwards += u64::from(t < now);
            now = t;
            continue;
        }
        match *op {
            Op::Check { key: k, n } | Op::Check2 { key: k, n } => {
                let (k, n) = (key(k), n.get(limit));
                stats.behind_sweep +=
                    u64::from(now < models[0].swept && !models[0].held.contains_key(&k));
                let mut got_free = None;
                for (j, (subject, model)) in subjects.iter().zip(models.iter_mut()).enumerate() {
                    let before = model.refused;
                    let want = model.check(&m, k, now, n);
                    let got = subject.check_n(&k, n);
                    assert_decision(&got, &want, &|| {
                        ctx(&format!("log {j} check_n(&{k}, {n}), model {model:?}"), now)
                    });
                    stats.refused_by_cap += model.refused - before;
                    if j == 0 {
                        got_free = Some(got);
                        stats.count_check(&want);
                    }
                }
                if shadow_valid {
                    let st = shadow.entry(k).or_default();
                    let want = m.step(st, now, n);
                    shadow_step(
                        &mut shadow_valid,
                        now >= models[0].swept,
                        &got_free.unwrap(),
                        &want,
                        &|| ctx(&format!("shadow check_n(&{k}, {n})"), now),
                    );
                    stats.shadow_checks += 1;
                }
            }
            Op::Peek { key: k } => {
                let k = key(k);
                let mut got_free = None;
                for (j, (subject, model)) in subjects.iter().zip(models.iter_mut()).enumerate() {
                    let want = model.peek(&m, k, now);
                    let got = subject.peek(&k);
                    assert_decision(&got, &want, &|| {
                        ctx(&format!("log {j} peek(&{k}), model {model:?}"), now)
                    });
                    // `check_n(0)` is the same decision (and forgets the same expired units).
                    assert_decision(&subject.check_n(&k, 0), &want, &|| {
                        ctx(&format!("log {j} check_n(&{k}, 0)"), now)
                    });
                    if j == 0 {
                        got_free = Some(got);
                    }
                }
                if shadow_valid {
                    let want = m.step(shadow.entry(k).or_default(), now, 0);
                    shadow_step(
                        &mut shadow_valid,
                        now >= models[0].swept,
                        &got_free.unwrap(),
                        &want,
                        &|| ctx(&format!("shadow peek(&{k})"), now),
                    );
                }
            }
            Op::EvictIdle => {
                for (j, (subject, model)) in subjects.iter().zip(models.iter_mut()).enumerate() {
                    let want = model.evict_idle(&m, now);
                    assert_eq!(
                        subject.evict_idle(),
                        want,
                        "{}",
                        ctx(&format!("log {j}"), now)
                    );
                    stats.keys_evicted += want as u64;
                }
            }
            // A sliding log has no stock, no refunds and no reservations.
            Op::Restock { .. }
            | Op::SetStock { .. }
            | Op::Refund { .. }
            | Op::Reserve { .. }
            | Op::Cancel { .. }
            | Op::CheckAll { .. } => {}
            _ => unreachable!("clock moves are handled above"),
        }
        assert_eq!(clock.now(), now);
        for (j, (subject, model)) in subjects.iter().zip(models.iter()).enumerate() {
            assert_eq!(
                subject.len(),
                model.held.len(),
                "{}",
                ctx(&format!("log {j} len"), now)
            );
            assert_eq!(subject.is_empty(), model.held.is_empty());
            assert_eq!(
                subject.stats().refused,
                model.refused,
                "{}",
                ctx(&format!("log {j}"), now)
            );
        }
    }
    stats.sweeps_at_backoff = models[1].sweeps_at_backoff;
    stats
}

#[cfg(test)]
mod tests {
    //! The model against the crate's own hand-computed vectors.
    use super::*;

    fn m(limit: u32, w: u64) -> SlidingLogModel {
        validate(limit, Duration::from_nanos(w)).unwrap()
    }

    #[test]
    fn limits() {
        let s = Duration::from_secs(1);
        assert!(validate(MAX_SLIDING_LOG_LIMIT, s).is_ok());
        assert_eq!(
            validate(MAX_SLIDING_LOG_LIMIT + 1, Duration::ZERO),
            Err(ConfigError::LogLimitTooLarge {
                limit: MAX_SLIDING_LOG_LIMIT + 1,
                max: MAX_SLIDING_LOG_LIMIT
            })
        );
        let c = m(1, u64::MAX);
        let mut log = LogState::default();
        assert!(c.step(&mut log, u64::MAX, 1).allowed);
        assert_eq!(c.step(&mut log, u64::MAX, 1).retry_ns, None);
    }

    crate::corpus_tests!("sliding_log_model", run);
}
