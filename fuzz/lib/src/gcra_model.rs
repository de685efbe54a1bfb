//! GCRA: the real `Limiter` and `KeyedLimiter<u8>` against a `u128` reference model.
//!
//! The model (`cellgate_models::gcra`, shared with `tests/`) is written from the README's "GCRA
//! semantics (exact)", in unbounded-enough arithmetic (`u128`) so that it cannot share an
//! overflow bug with the implementation:
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
//! the model builds with a bound, and the exact store with `exact_keys()`): a new key arriving while
//! the store is full triggers a sweep at most once every 10 ms of the limiter's clock; if
//! still full, the request is refused: denied, `remaining = 0`, no `retry_after`,
//! `reset_after = 0`, counted in `refused()`.
//!
//! Finally, eviction is checked to be *lossless*: a shadow model that never evicts (and has
//! no floor) must make the same decisions, as long as no request has been made at a time
//! before the sweep floor (README, "Bounded memory": idle keys are dropped losslessly, so
//! dropping one changes no decision made at the time of the sweep or later).
//!
//! **Queues, reservations, refunds, per-call quotas.** From the `Quota::with_queue`,
//! `reserve`, `cancel`, `refund`, `check_with` and `set_quota` docs, in the same arithmetic:
//!
//! ```text
//! CEIL = T * (burst + queue), limit = burst + queue (saturating in u32)
//! a check admits iff n*T <= DVT and ahead <= CEIL   (ahead = max(tat, now) + n*T - now);
//!   delay = max(ahead - DVT, 0); remaining counts against CEIL; denied: retry = ahead - CEIL
//! reserve(n, w) is the same with CEIL replaced by min(DVT + w, CEIL) when the quota has a
//!   queue, DVT + w without one (remaining still against CEIL)
//! cancel of n units admitted at `at`: while a place waits to act (tat > now + DVT) only the
//!   last place comes back (tat == after: tat := max(before, now)); otherwise the part of n*T
//!   the clock has not eaten since `at`, whatever was admitted since, never below now
//! refund(n): tat := max(tat - n*T, now)
//! both return whether the TAT moved; on a keyed limiter neither creates a key
//! check_with(q, n): a check judged with q's parameters on the same TAT (a refused new key
//!   still reports the limiter's own limit); set_quota(q): every later decision uses q
//! ```
//!
//! and invariants on top of the model: every decision's `remaining` is at most its `limit`;
//! a cancel never gives back more than its reservation took; and, while
//! the clock never goes back and nothing is refunded or judged with another quota, the units
//! admitted and not given back by a cancel, at their acting times (`now + delay`), conform to
//! the quota: at most `burst + floor(L / T)` of them act in any closed interval of length `L`
//! (per key, and on the direct limiter).

use std::collections::HashMap;
use std::time::Duration;

use arbitrary::Arbitrary;
use cellgate::clock::ManualClock;
use cellgate::{ConfigError, Decision, KeyedLimiter, Limiter, Quota, Reservation};

pub use cellgate_models::gcra::{cancel, decide, refund, step, Expected, Params, HORIZON};
use cellgate_models::keyed::SWEEP_BACKOFF_NS;

use crate::common::{Observe, Seen};

mod run;
pub use run::run;

/// One fuzz input: a quota (possibly invalid), an optional key cap, and operations.
#[derive(Arbitrary, Debug, Clone)]
pub struct Input {
    pub count: u32,
    pub period: Period,
    /// `None`: the default burst (= count).
    pub burst: Option<u32>,
    /// `with_queue(q)`; `None`: no call (no queue).
    pub queue: Option<QueueSel>,
    /// `max_keys` of the keyed limiter; `Some(0)` must be a `ConfigError`.
    pub max_keys: Option<u8>,
    /// `exact_keys()`: the exact store even when `max_keys` is set (otherwise a bound
    /// selects the fixed fingerprint table). Both must decide identically here: with at most 255
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

/// How long a queue is.
#[derive(Arbitrary, Debug, Clone, Copy)]
pub enum QueueSel {
    /// `0..5`.
    Small(u8),
    /// Anything (large ones overflow: `QueueTooLarge`).
    Any(u32),
}

impl QueueSel {
    pub fn get(self) -> u32 {
        match self {
            QueueSel::Small(q) => u32::from(q % 5),
            QueueSel::Any(q) => q,
        }
    }
}

/// How long a reservation may wait.
#[derive(Arbitrary, Debug, Clone, Copy)]
pub enum Wait {
    Zero,
    /// `k % 8` emission intervals plus `frac / 256` of one.
    Intervals {
        k: u8,
        frac: u8,
    },
    Ns(u64),
    /// `Duration::MAX` (saturates to `u64::MAX` ns).
    Max,
}

impl Wait {
    fn get(self, t: u128) -> Duration {
        match self {
            Wait::Zero => Duration::ZERO,
            Wait::Intervals { k, frac } => {
                let ns = u128::from(k % 8) * t + u128::from(frac) * t / 256;
                Duration::from_nanos(u64::try_from(ns).unwrap_or(u64::MAX))
            }
            Wait::Ns(ns) => Duration::from_nanos(ns),
            Wait::Max => Duration::MAX,
        }
    }
}

/// A quota for `check_with` and `set_quota`, possibly invalid.
#[derive(Arbitrary, Debug, Clone, Copy)]
pub enum Tier {
    /// `count % 9` per `interval * count` ns (a zero `interval` or count is invalid), burst
    /// `burst % 9` (`None`: the count), queue `queue % 5`.
    Small {
        count: u8,
        interval: u16,
        burst: Option<u8>,
        queue: u8,
    },
    /// Any values, as the input's own quota.
    Raw {
        count: u32,
        period: Period,
        burst: Option<u32>,
        queue: Option<u32>,
    },
}

impl Tier {
    /// The quota, and what the model validates: `(count, period, burst, queue)`.
    fn quota(self) -> (Quota, (u32, Duration, u32, u32)) {
        let (count, period, burst, queue) = match self {
            Tier::Small {
                count,
                interval,
                burst,
                queue,
            } => {
                let count = u32::from(count % 9);
                let period = Duration::from_nanos(u64::from(interval) * u64::from(count));
                (
                    count,
                    period,
                    burst.map(|b| u32::from(b % 9)),
                    Some(u32::from(queue % 5)),
                )
            }
            Tier::Raw {
                count,
                period,
                burst,
                queue,
            } => (count, period.get(count), burst, queue),
        };
        let mut q = Quota::new(count, period);
        if let Some(b) = burst {
            q = q.with_burst(b);
        }
        if let Some(queue) = queue {
            q = q.with_queue(queue);
        }
        (
            q,
            (count, period, burst.unwrap_or(count), queue.unwrap_or(0)),
        )
    }
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
    /// `reserve(n, max_wait)` / `reserve(&key, n, max_wait)`; the reservation joins the
    /// outstanding ones.
    Reserve {
        key: u8,
        n: Units,
        max_wait: Wait,
    },
    /// `cancel` of the outstanding reservation `pick % outstanding` (each at most once, as its
    /// docs intend); nothing if none is outstanding.
    Cancel {
        pick: u8,
    },
    Refund {
        key: u8,
        n: Units,
    },
    CheckWith {
        key: u8,
        n: Units,
        quota: Tier,
    },
    SetQuota(Tier),
    /// `check_all([(direct, n), (keyed gate of key, m)])`, or the keyed gate first: all or
    /// nothing, the earlier charge rolled back (cancelled) when the later gate denies.
    CheckAll {
        key: u8,
        n: Units,
        m: Units,
        keyed_first: bool,
    },
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

impl Observe for Expected {
    /// Reads a real decision, checking that its `Duration` accessors agree with the ns ones,
    /// and that `remaining` never exceeds `limit`.
    fn of(d: &Decision) -> Self {
        let seen = Seen::of(d);
        assert_eq!(d.delay(), Duration::from_nanos(d.delay_ns()));
        assert!(
            seen.remaining <= seen.limit,
            "Inv: remaining above the limit: {d:?}"
        );
        Expected::with_delay(seen, d.delay_ns())
    }
}

/// Which quotas are valid, and the error an invalid one must get. Checked in the order the
/// fields are documented (count, period, burst, then representability, then the queue), which
/// is also the order `ConfigError` lists them.
pub fn validate(
    count: u32,
    period: Duration,
    burst: u32,
    queue: u32,
) -> Result<Params, ConfigError> {
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
    let ceiling = dvt + t * u128::from(queue);
    if ceiling > HORIZON {
        return Err(ConfigError::QueueTooLarge {
            burst,
            queue,
            interval_ns: t as u64,
        });
    }
    Ok(Params::of(t, burst, queue))
}

/// The keyed store, modelled: key -> TAT, plus the cap's bookkeeping.
#[derive(Debug, Default)]
struct KeyedModel {
    tats: HashMap<u8, u64>,
    max_keys: Option<usize>,
    /// A bounded store (the fixed table, or the exact store, which is the growing table with
    /// its keys): after a sweep made room for a new key, it reads the fresh TAT again under its
    /// shard lock, so a reservation records the raised floor as its `before` (the dashmap that
    /// the exact store once was recorded the floor it read before the sweep; the decision is
    /// the same either way).
    table: bool,
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

    /// A check (or a reservation, `check_with`) of `n` units on `k` with parameters `p`,
    /// admitting up to `ceiling`; `own` is the limiter's own quota (a refused new key reports
    /// its limit). Returns the decision, the keys an automatic sweep dropped, and the key's TAT
    /// before and after (what a reservation records).
    fn admit(
        &mut self,
        p: &Params,
        own: &Params,
        k: u8,
        now: u64,
        n: u32,
        ceiling: u128,
    ) -> (Expected, usize, Option<u64>, Option<u64>) {
        if let Some(&tat) = self.tats.get(&k) {
            let (d, w) = decide(p, Some(tat), now, n, ceiling);
            if let Some(w) = w {
                self.tats.insert(k, w);
            }
            return (d, 0, Some(tat), w);
        }
        let before = self.fresh();
        let (d, w) = decide(p, before, now, n, ceiling);
        let Some(w) = w else {
            return (d, 0, before, None);
        };
        let mut swept = 0;
        let mut did_sweep = false;
        if let Some(max) = self.max_keys {
            if self.tats.len() >= max {
                let last = self.last_sweep;
                let due = last == u64::MAX || now < last || now - last >= SWEEP_BACKOFF_NS;
                if due {
                    swept = self.evict_idle(now);
                    self.last_sweep = now;
                    did_sweep = true;
                }
                if self.tats.len() >= max {
                    self.refused += 1;
                    let refused = Expected {
                        allowed: false,
                        limit: own.limit,
                        remaining: 0,
                        retry_after_ns: None,
                        reset_after_ns: 0,
                        delay_ns: 0,
                    };
                    return (refused, swept, before, None);
                }
            }
        }
        self.tats.insert(k, w);
        let before = if self.table && did_sweep {
            self.fresh()
        } else {
            before
        };
        (d, swept, before, Some(w))
    }

    /// `refund` / `cancel` on `k`: they create no key, so nothing happens unless `k` is held.
    fn on_held(&mut self, k: u8, f: impl FnOnce(u64) -> Option<u64>) -> Option<(u64, u64)> {
        let tat = self.tats.get_mut(&k)?;
        let new = f(*tat)?;
        let old = std::mem::replace(tat, new);
        Some((old, new))
    }

    fn peek(&self, p: &Params, k: u8, now: u64) -> Expected {
        step(p, self.tats.get(&k).copied().or(self.fresh()), now, 0).0
    }
}

crate::counters! {
    /// What one input exercised: summed over a corpus it shows which paths the fuzzer reaches
    /// (`cargo test --release corpus_stats -- --ignored --nocapture`).
    pub struct Stats {
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
        /// Checks admitted with a delay (a queue place).
        pub queued: u64,
        /// Reservations admitted (units held), and those of them with a delay.
        pub reserves: u64,
        pub reserves_delayed: u64,
        /// Cancels that gave something back, and cancels of a holding reservation that gave
        /// nothing back.
        pub cancels: u64,
        pub cancels_nothing: u64,
        /// Cancels that gave back only part of the reservation's place.
        pub cancels_partial: u64,
        pub refunds: u64,
        pub checks_with: u64,
        pub quota_changes: u64,
        /// `check_with` / `set_quota` with an invalid quota.
        pub quota_errors: u64,
        /// Admissions whose acting times were checked against the conformance bound at the end.
        pub conformance_checked: u64,
        /// Cancels that moved the TAT back by more than their reservation moved it forward after
        /// a `set_quota` in between, let through by `EXCUSE_CANCEL_AFTER_SET_QUOTA`.
        pub excused_cancel_after_set_quota: u64,
        /// `check_all`s admitted whole, and those whose earlier charge was rolled back.
        pub gates_allowed: u64,
        pub gates_rolled_back: u64,
    }
}

/// A known bug in cellgate that this target lets through (counting it in
/// [`Stats::excused_cancel_after_set_quota`]) so that fuzzing can go on; see `fuzz/README.md`.
/// Set it to `false` to see the target fail on it again.
///
/// `cancel` after `set_quota`: the crate gives back up to `n * T` of the quota in force at the
/// cancel, not what the reservation moved the TAT forward (`n * T` of the quota it was admitted
/// under), so after a change to a longer interval a cancel moves the TAT back by more than its
/// reservation moved it forward: other admissions' units come back with it.
pub const EXCUSE_CANCEL_AFTER_SET_QUOTA: bool = false;

impl Period {
    /// The period, for a quota of `count` requests.
    pub fn get(self, count: u32) -> Duration {
        match self {
            Period::Ns(ns) => Duration::from_nanos(ns),
            Period::Long { secs, nanos } => {
                Duration::from_secs(secs) + Duration::from_nanos(u64::from(nanos % 1_000_000_000))
            }
            Period::PerRequest { interval } => {
                Duration::from_nanos(u64::from(interval) * u64::from(count))
            }
        }
    }
}

/// A reservation as one subject (the direct or the keyed limiter) got it, and what the model
/// recorded about it.
#[derive(Debug, Clone)]
struct Booked {
    reservation: Reservation,
    /// Admitted with `n > 0`: a cancel may give something back.
    holds: bool,
    /// The TAT the admission started from (the stored TAT, or the fresh one).
    before: u64,
    /// The TAT the admission wrote.
    after: u64,
    /// How far the admission moved the TAT forward: `after - max(before, now)`.
    took: u128,
    /// Its units' index in the subject's conformance list, if one is kept.
    acting: Option<usize>,
}

/// The clock reading a GCRA reservation was admitted at: its TAT after, less its decision's
/// `reset_after` (the new TAT's distance from the reading).
fn admitted_at(b: &Booked) -> u64 {
    b.after
        .saturating_sub(b.reservation.decision().reset_after_ns())
}

/// An outstanding reservation.
#[derive(Debug, Clone)]
struct Outstanding {
    key: u8,
    /// `set_quota` calls before it.
    epoch: u64,
    direct: Booked,
    keyed: Booked,
}

/// Units admitted at their acting times (`now + delay`), and whether a cancel gave them back:
/// what the conformance bound is checked on. `None` once the bound no longer applies to the
/// subject (a refund gave something back, or a `check_with` admitted under another quota).
type Acting = Option<Vec<(u64, u32, bool)>>;

fn act(list: &mut Acting, at: u64, n: u32) -> Option<usize> {
    let v = list.as_mut()?;
    v.push((at, n, true));
    Some(v.len() - 1)
}

/// GCRA's conformance bound on the live units of `list`: in every closed interval `[x, y]`, at
/// most `burst + floor((y - x) / T)` units act. Returns how many admissions were checked.
fn assert_conforms(list: &Acting, p: &Params, what: &dyn Fn() -> String) -> u64 {
    let Some(v) = list else { return 0 };
    let mut live: Vec<(u128, u128)> = v
        .iter()
        .filter(|u| u.2)
        .map(|&(at, n, _)| (u128::from(at), u128::from(n)))
        .collect();
    live.sort_unstable();
    for i in 0..live.len() {
        let mut units = 0;
        for j in i..live.len() {
            units += live[j].1;
            let bound = u128::from(p.burst) + (live[j].0 - live[i].0) / p.t;
            assert!(
                units <= bound,
                "Inv: {units} units act in [{}, {}], more than burst + L/T = {bound}: {}, \
                 units (acting time, n) {live:?}",
                live[i].0,
                live[j].0,
                what()
            );
        }
    }
    live.len() as u64
}

/// `Tier::quota`, for `SetQuota`.
fn quota_of(tier: Tier) -> (Quota, (u32, Duration, u32, u32)) {
    tier.quota()
}

/// After a refund or a cancel: both limiters' peeks (the direct one, and key `k`'s) show the
/// model's TATs.
#[allow(clippy::too_many_arguments)]
fn assert_peeks(
    p: &Params,
    direct: &Limiter<ManualClock>,
    direct_tat: Option<u64>,
    keyed: &KeyedLimiter<u8, ManualClock>,
    model: &KeyedModel,
    k: u8,
    now: u64,
    ctx: &dyn Fn() -> String,
) {
    assert_eq!(
        Expected::of(&direct.peek()),
        step(p, direct_tat, now, 0).0,
        "direct peek after {}",
        ctx()
    );
    assert_eq!(
        Expected::of(&keyed.peek(&k)),
        model.peek(p, k, now),
        "keyed peek after {}",
        ctx()
    );
}

#[cfg(test)]
mod tests {
    //! The validation against the documented errors (the model's own vectors are in
    //! `cellgate-models`).
    use super::*;

    fn queued(count: u32, period_ns: u64, burst: u32, queue: u32) -> Params {
        validate(count, Duration::from_nanos(period_ns), burst, queue).unwrap()
    }

    #[test]
    fn validation_order() {
        let s = Duration::from_secs(1);
        assert_eq!(
            validate(0, Duration::ZERO, 0, 0),
            Err(ConfigError::Zero { field: "count" })
        );
        assert_eq!(
            validate(1, Duration::ZERO, 0, 0),
            Err(ConfigError::Zero { field: "period" })
        );
        assert_eq!(
            validate(1, s, 0, 0),
            Err(ConfigError::Zero { field: "burst" })
        );
        assert!(matches!(
            validate(1, Duration::MAX, 1, 0),
            Err(ConfigError::PeriodTooLong { .. })
        ));
        assert!(matches!(
            validate(2, Duration::from_nanos(1), 1, 0),
            Err(ConfigError::RateTooFast { .. })
        ));
        assert_eq!(
            validate(1, Duration::from_nanos(u64::MAX / 2), 3, 0),
            Err(ConfigError::BurstTooLarge {
                burst: 3,
                interval_ns: u64::MAX / 2
            })
        );
    }

    #[test]
    fn queue_validation() {
        // T = 2^62: burst 3 fits (3 * 2^62 < 2^64), burst 3 plus a queue of 1 does not.
        let t = 1u64 << 62;
        assert!(validate(1, Duration::from_nanos(t), 3, 0).is_ok());
        assert_eq!(
            validate(1, Duration::from_nanos(t), 3, 1),
            Err(ConfigError::QueueTooLarge {
                burst: 3,
                queue: 1,
                interval_ns: t
            })
        );
        let p = queued(10, 1000, 4, 3);
        assert_eq!((p.ceiling, p.limit), (700, 7));
        let p = queued(1, 1, u32::MAX, 5);
        assert_eq!(p.limit, u32::MAX, "burst + queue saturates in u32");
    }

    crate::corpus_tests!("gcra_model", run);
}
