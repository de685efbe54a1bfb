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
use cellgate::clock::{Clock, ManualClock};
use cellgate::{ConfigError, Decision, KeyedLimiter, Limiter, Quota, Reservation};

pub use cellgate_models::gcra::{cancel, decide, refund, step, Expected, Params, HORIZON};
use cellgate_models::keyed::SWEEP_BACKOFF_NS;

use crate::common::{check_pair, Observe, Seen};

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

/// Replays `input` against the real limiters and the model; panics on any difference.
pub fn run(input: &Input) -> Stats {
    let mut stats = Stats {
        inputs: 1,
        ..Stats::default()
    };
    let period = input.period.get(input.count);
    let mut quota = Quota::new(input.count, period);
    if let Some(b) = input.burst {
        quota = quota.with_burst(b);
    }
    let queue = input.queue.map(QueueSel::get);
    if let Some(q) = queue {
        quota = quota.with_queue(q);
    }
    let burst = input.burst.unwrap_or(input.count);
    assert_eq!(quota.burst(), burst);
    assert_eq!(quota.queue(), queue.unwrap_or(0));

    let clock = ManualClock::new();
    let direct = Limiter::gcra(quota).clock(clock.clone()).build();
    let mut keyed_builder = KeyedLimiter::<u8>::gcra(quota).clock(clock.clone());
    if let Some(m) = input.max_keys {
        // The model describes `DenyNew` at the ceiling (the default drops light keys instead).
        keyed_builder = keyed_builder
            .max_keys(usize::from(m))
            .when_full(cellgate::WhenFull::DenyNew);
    }
    // The model describes the fixed-capacity table (a bound without `exact_keys`) and the exact
    // store (otherwise), which drops keys only by sweeps and at its bound; the default growing
    // table also reclaims idle keys on inserts, which the model does not describe.
    if input.exact_keys || input.max_keys.is_none() {
        keyed_builder = keyed_builder.exact_keys();
    } else {
        keyed_builder = keyed_builder.fixed_capacity();
    }
    let keyed = keyed_builder.build();

    let mut params = match validate(input.count, period, burst, queue.unwrap_or(0)) {
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
        table: input.max_keys.is_some(),
        last_sweep: u64::MAX,
        ..KeyedModel::default()
    };
    let mut direct_tat: Option<u64> = None;
    // Lossless eviction: a model that never evicts must agree while no request comes at a time
    // before the sweep floor.
    let mut shadow: HashMap<u8, u64> = HashMap::new();
    let mut shadow_valid = input.max_keys.is_none();
    let mut outstanding: Vec<Outstanding> = Vec::new();
    let mut epoch = 0u64;
    // The conformance bound applies while the clock never goes back and the quota never
    // changes (and per subject, see `Acting`).
    let mut conform = true;
    let mut direct_acting: Acting = Some(Vec::new());
    let mut keyed_acting: HashMap<u8, Acting> = HashMap::new();
    let mut now: u64 = 0;

    for (i, op) in input.ops.iter().enumerate() {
        let before = now;
        // A key whose peeks (and the direct limiter's) must match the model after this op.
        let mut peeks_after: Option<u8> = None;
        let ctx = |now: u64, p: &Params| format!("op #{i} {op:?} at now={now}, {p:?}");
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
                    ctx(now, &params)
                );
                if w.is_some() {
                    act(&mut direct_acting, now + want.delay_ns, n);
                }
                // Keyed limiter.
                let (want, swept, _, w) = model.admit(&params, &params, k, now, n, params.ceiling);
                let got = Expected::of(&keyed.check_n(&k, n));
                assert_eq!(
                    got,
                    want,
                    "keyed {} held={:?}",
                    ctx(now, &params),
                    model.tats
                );
                if w.is_some() {
                    let list = keyed_acting.entry(k).or_insert_with(|| Some(Vec::new()));
                    act(list, now + want.delay_ns, n);
                }
                stats.checks += 1;
                stats.keys_evicted += swept as u64;
                stats.queued += u64::from(want.allowed && want.delay_ns > 0);
                match (want.allowed, want.retry_after_ns) {
                    (true, _) => stats.allowed += 1,
                    (false, Some(_)) => stats.denied_with_retry += 1,
                    (false, None) if n > params.burst => stats.denied_n_above_burst += 1,
                    (false, None) if keyed.stats().refused > stats.refused_by_cap => {
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
                        ctx(now, &params)
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
                    ctx(now, &params)
                );
                assert_eq!(
                    Expected::of(&direct.check_n(0)),
                    want,
                    "direct check_n(0) {}",
                    ctx(now, &params)
                );
                let want = model.peek(&params, k, now);
                let got = Expected::of(&keyed.peek(&k));
                assert_eq!(got, want, "keyed peek {}", ctx(now, &params));
                // A peek is `n = 0` without a write: the same as check_n(0).
                assert_eq!(
                    Expected::of(&keyed.check_n(&k, 0)),
                    want,
                    "check_n(0) {}",
                    ctx(now, &params)
                );
                if shadow_valid {
                    let want_shadow = step(&params, shadow.get(&k).copied(), now, 0).0;
                    assert_eq!(
                        got,
                        want_shadow,
                        "eviction changed a peek: {}",
                        ctx(now, &params)
                    );
                }
            }
            Op::EvictIdle => {
                let want = model.evict_idle(now);
                assert_eq!(keyed.evict_idle(), want, "evict_idle {}", ctx(now, &params));
                stats.keys_evicted += want as u64;
            }
            Op::Reserve {
                key: k,
                n,
                max_wait,
            } => {
                let (k, n) = (key(k), n.get());
                shadow_valid &= now >= model.swept;
                let wait = max_wait.get(params.t);
                // Admitted iff its delay, `ahead - DVT`, is at most the wait; the ceiling
                // `DVT + max_wait` saturates at `u64::MAX` ns (a request that needs a TAT further
                // ahead than that is denied as beyond the ceiling, not as beyond the horizon:
                // `remaining` then counts what is left, see the README's notes).
                // A quota with a queue bounds reservations by it (the wait only narrows it).
                let mut ceiling = (params.dvt + wait.as_nanos()).min(HORIZON);
                if params.ceiling > params.dvt {
                    ceiling = ceiling.min(params.ceiling);
                }
                let booked =
                    |r: Reservation, want: &Expected, before: Option<u64>, w: Option<u64>| {
                        assert_eq!(
                            Expected::of(&r.decision()),
                            *want,
                            "reserve(&{k}, {n}, {wait:?}) {}",
                            ctx(now, &params)
                        );
                        assert_eq!(r.is_allowed(), want.allowed);
                        assert_eq!(r.delay(), Duration::from_nanos(want.delay_ns));
                        let holds = w.is_some();
                        assert_eq!(r.units(), if holds { n } else { 0 }, "units of {r:?}");
                        let after: u64 = w.unwrap_or(0);
                        let start = before.unwrap_or(0).max(now);
                        Booked {
                            reservation: r,
                            holds,
                            before: before.unwrap_or(0),
                            after,
                            took: u128::from(after.saturating_sub(start)),
                            acting: None,
                        }
                    };
                let (want, w) = decide(&params, direct_tat, now, n, ceiling);
                let mut d = booked(direct.reserve(n, wait), &want, direct_tat, w);
                direct_tat = w.or(direct_tat);
                if w.is_some() {
                    d.acting = act(&mut direct_acting, now + want.delay_ns, n);
                }
                let (want, swept, before_k, w) = model.admit(&params, &params, k, now, n, ceiling);
                let r = keyed.reserve(&k, n, wait);
                let mut kb = booked(r.clone(), &want, before_k, w);
                if w.is_some() {
                    let list = keyed_acting.entry(k).or_insert_with(|| Some(Vec::new()));
                    kb.acting = act(list, now + want.delay_ns, n);
                }
                stats.keys_evicted += swept as u64;
                stats.reserves += u64::from(kb.holds);
                stats.reserves_delayed += u64::from(kb.holds && want.delay_ns > 0);
                if shadow_valid {
                    let (want_shadow, w) =
                        decide(&params, shadow.get(&k).copied(), now, n, ceiling);
                    if let Some(w) = w {
                        shadow.insert(k, w);
                    }
                    assert_eq!(
                        Expected::of(&r.decision()),
                        want_shadow,
                        "eviction changed a reservation: {}",
                        ctx(now, &params)
                    );
                    stats.shadow_checks += 1;
                }
                outstanding.push(Outstanding {
                    key: k,
                    epoch,
                    direct: d,
                    keyed: kb,
                });
            }
            Op::Cancel { pick } => {
                if outstanding.is_empty() {
                    continue;
                }
                let o = outstanding.remove(usize::from(pick) % outstanding.len());
                let k = o.key;
                // Never further back than the state before the reservation (and, while the clock
                // has not gone back since, never more than the reservation moved it forward).
                let mut took = |old: u64, new: u64, b: &Booked, what: &str| {
                    let back = u128::from(old - new);
                    // A rollback gives back at most what its reservation took (out of order too:
                    // the TAT may then end below the reservation's `before`).
                    if back <= b.took || now < old.saturating_sub(b.took as u64) {
                        return;
                    }
                    if EXCUSE_CANCEL_AFTER_SET_QUOTA && o.epoch != epoch {
                        stats.excused_cancel_after_set_quota += 1;
                        return;
                    }
                    panic!(
                        "Inv: {what} cancel moved the TAT back {back} ns to {new}, its reservation \
                         moved it forward {} ns from {}: {o:?} {}",
                        b.took,
                        b.before,
                        ctx(now, &params)
                    );
                };
                let want = if o.direct.holds {
                    cancel(
                        &params,
                        direct_tat,
                        now,
                        o.direct.reservation.units(),
                        (o.direct.before, o.direct.after, admitted_at(&o.direct)),
                    )
                } else {
                    None
                };
                assert_eq!(
                    direct.cancel(o.direct.reservation.clone()),
                    want.is_some(),
                    "direct cancel of {o:?} on TAT {direct_tat:?}: {}",
                    ctx(now, &params)
                );
                if let Some(new) = want {
                    took(direct_tat.unwrap_or(0), new, &o.direct, "direct");
                    direct_tat = Some(new);
                    if let (Some(v), Some(j)) = (direct_acting.as_mut(), o.direct.acting) {
                        v[j].2 = false;
                    }
                }
                let held = model.tats.contains_key(&k);
                let want = if o.keyed.holds {
                    model.on_held(k, |tat| {
                        cancel(
                            &params,
                            Some(tat),
                            now,
                            o.keyed.reservation.units(),
                            (o.keyed.before, o.keyed.after, admitted_at(&o.keyed)),
                        )
                    })
                } else {
                    None
                };
                assert_eq!(
                    keyed.cancel(&k, o.keyed.reservation.clone()),
                    want.is_some(),
                    "keyed cancel of {o:?}, held={:?}: {}",
                    model.tats,
                    ctx(now, &params)
                );
                if let Some((old, new)) = want {
                    took(old, new, &o.keyed, "keyed");
                    if let (Some(Some(v)), Some(j)) = (keyed_acting.get_mut(&k), o.keyed.acting) {
                        v[j].2 = false;
                    }
                    stats.cancels += 1;
                    stats.cancels_partial += u64::from(u128::from(old - new) < o.keyed.took);
                } else {
                    stats.cancels_nothing += u64::from(o.keyed.holds);
                }
                // The shadow cancels where the keyed limiter held the key.
                if let (true, true, Some(tat)) = (held, o.keyed.holds, shadow.get_mut(&k)) {
                    let at = admitted_at(&o.keyed);
                    let r = (o.keyed.before, o.keyed.after, at);
                    let units = o.keyed.reservation.units();
                    if let Some(new) = cancel(&params, Some(*tat), now, units, r) {
                        *tat = new;
                    }
                }
                peeks_after = Some(k);
            }
            Op::CheckAll {
                key: k,
                n,
                m,
                keyed_first,
            } => {
                // The model: a charge is a check (ceiling CEIL); a later gate's denial cancels
                // the earlier charge at the same instant (`at` = now), by the cancel rules.
                let (k, n, m) = (key(k), n.get(), m.get());
                shadow_valid &= now >= model.swept;
                let gate = keyed.gate(&k);
                let d = check_pair(keyed_first, (&direct, n), (&gate, m));
                let direct_charge = |direct_tat: &mut Option<u64>| {
                    let before = *direct_tat;
                    let (want, w) = step(&params, before, now, n);
                    *direct_tat = w.or(before);
                    (want, before.unwrap_or(0), w)
                };
                let shadow_charge = |shadow: &mut HashMap<u8, u64>, valid: bool| {
                    if valid {
                        let (_, w) = step(&params, shadow.get(&k).copied(), now, m);
                        if let Some(w) = w {
                            shadow.insert(k, w);
                        }
                    }
                };
                // Each gate charged in order, until one denies.
                let (mut keyed_got, mut direct_got) = (None, None);
                let mut denied_by = None;
                let order = if keyed_first {
                    [true, false]
                } else {
                    [false, true]
                };
                for (i, is_keyed) in order.into_iter().enumerate() {
                    let ok = if is_keyed {
                        let (kw, swept, before_k, w) =
                            model.admit(&params, &params, k, now, m, params.ceiling);
                        stats.keys_evicted += swept as u64;
                        shadow_charge(&mut shadow, shadow_valid && kw.allowed);
                        keyed_got = Some((kw.allowed, kw.delay_ns, before_k.unwrap_or(0), w));
                        kw.allowed
                    } else {
                        let (dw, before, w) = direct_charge(&mut direct_tat);
                        direct_got = Some((dw.allowed, dw.delay_ns, before, w));
                        dw.allowed
                    };
                    if !ok {
                        denied_by = Some(i);
                        break;
                    }
                }
                let allowed = denied_by.is_none();
                match (denied_by, keyed_got, direct_got) {
                    (None, Some((_, kdelay, _, kw)), Some((_, ddelay, _, dw))) => {
                        // Both admitted: their units count in the conformance bound.
                        if kw.is_some() {
                            let list = keyed_acting.entry(k).or_insert_with(|| Some(Vec::new()));
                            act(list, now + kdelay, m);
                        }
                        if dw.is_some() {
                            act(&mut direct_acting, now + ddelay, n);
                        }
                    }
                    (Some(1), Some((_, _, before, Some(after))), _) if keyed_first && m > 0 => {
                        // Roll back the keyed charge (and the shadow's, where the key is held).
                        let r = (before, after, now);
                        let held = model.on_held(k, |tat| cancel(&params, Some(tat), now, m, r));
                        if let (true, true, Some(tat)) =
                            (shadow_valid, held.is_some(), shadow.get_mut(&k))
                        {
                            if let Some(new) = cancel(&params, Some(*tat), now, m, r) {
                                *tat = new;
                            }
                        }
                    }
                    (Some(1), _, Some((_, _, before, Some(after)))) if !keyed_first && n > 0 => {
                        // Roll back the direct charge.
                        if let Some(new) = cancel(&params, direct_tat, now, n, (before, after, now))
                        {
                            direct_tat = Some(new);
                        }
                    }
                    _ => {}
                }
                assert_eq!(
                    (d.is_allowed(), d.denied_by()),
                    (allowed, denied_by),
                    "check_all(direct {n}, key {k} {m}, keyed first {keyed_first}) {}",
                    ctx(now, &params)
                );
                if allowed {
                    stats.gates_allowed += 1;
                } else if denied_by == Some(1) {
                    stats.gates_rolled_back += 1;
                }
                // Whatever was rolled back, both limiters now decide as the model.
                peeks_after = Some(k);
            }
            Op::Refund { key: k, n } => {
                let (k, n) = (key(k), n.get());
                let want = refund(&params, direct_tat, now, n);
                assert_eq!(
                    direct.refund(n),
                    want.is_some(),
                    "direct refund on {direct_tat:?}: {}",
                    ctx(now, &params)
                );
                if want.is_some() {
                    direct_tat = want;
                    direct_acting = None;
                }
                let held = model.tats.contains_key(&k);
                let want = model.on_held(k, |tat| refund(&params, Some(tat), now, n));
                assert_eq!(
                    keyed.refund(&k, n),
                    want.is_some(),
                    "keyed refund, held={:?}: {}",
                    model.tats,
                    ctx(now, &params)
                );
                if want.is_some() {
                    keyed_acting.insert(k, None);
                    stats.refunds += 1;
                }
                if let (true, Some(tat)) = (held, shadow.get_mut(&k)) {
                    if let Some(new) = refund(&params, Some(*tat), now, n) {
                        *tat = new;
                    }
                }
                peeks_after = Some(k);
            }
            Op::CheckWith { key: k, n, quota } => {
                let (k, n) = (key(k), n.get());
                shadow_valid &= now >= model.swept;
                let (q, (count, period, burst, queue)) = quota.quota();
                let got_direct = direct.check_with(&q, n);
                let got_keyed = keyed.check_with(&k, &q, n);
                let with = match validate(count, period, burst, queue) {
                    Ok(p) => p,
                    Err(e) => {
                        assert_eq!(got_direct.err(), Some(e.clone()), "direct check_with {q:?}");
                        assert_eq!(got_keyed.err(), Some(e), "keyed check_with {q:?}");
                        stats.quota_errors += 1;
                        continue;
                    }
                };
                let (want, w) = step(&with, direct_tat, now, n);
                direct_tat = w.or(direct_tat);
                let got = got_direct.unwrap_or_else(|e| panic!("check_with {q:?}: {e}"));
                assert_eq!(
                    Expected::of(&got),
                    want,
                    "direct check_with {q:?} {}",
                    ctx(now, &params)
                );
                if w.is_some() {
                    direct_acting = None;
                }
                let (want, swept, _, w) = model.admit(&with, &params, k, now, n, with.ceiling);
                let got = got_keyed.unwrap_or_else(|e| panic!("check_with {q:?}: {e}"));
                let got = Expected::of(&got);
                assert_eq!(
                    got,
                    want,
                    "keyed check_with {q:?} {} held={:?}",
                    ctx(now, &params),
                    model.tats
                );
                if w.is_some() {
                    keyed_acting.insert(k, None);
                }
                stats.keys_evicted += swept as u64;
                stats.checks_with += 1;
                if shadow_valid {
                    let (want_shadow, w) = step(&with, shadow.get(&k).copied(), now, n);
                    if let Some(w) = w {
                        shadow.insert(k, w);
                    }
                    assert_eq!(
                        got,
                        want_shadow,
                        "eviction changed a check_with: {}",
                        ctx(now, &params)
                    );
                    stats.shadow_checks += 1;
                }
            }
            Op::SetQuota(tier) => {
                let (q, (count, period, burst, queue)) = quota_of(tier);
                let got = (direct.set_quota(q), keyed.set_quota(q));
                match validate(count, period, burst, queue) {
                    Ok(p) => {
                        assert_eq!(got, (Ok(()), Ok(())), "set_quota {q:?}");
                        params = p;
                        epoch += 1;
                        conform = false;
                        stats.quota_changes += 1;
                    }
                    Err(e) => {
                        assert_eq!(got, (Err(e.clone()), Err(e)), "set_quota {q:?}");
                        stats.quota_errors += 1;
                    }
                }
            }
        }
        stats.clock_backwards += u64::from(now < before);
        conform &= now >= before;
        clock.set_ns(now);
        assert_eq!(clock.now(), now);
        if let Some(k) = peeks_after {
            assert_peeks(
                &params,
                &direct,
                direct_tat,
                &keyed,
                &model,
                k,
                now,
                &|| ctx(now, &params),
            );
        }
        assert_eq!(
            keyed.len(),
            model.tats.len(),
            "len after {}",
            ctx(now, &params)
        );
        assert_eq!(keyed.is_empty(), model.tats.is_empty());
        assert_eq!(
            keyed.stats().refused,
            model.refused,
            "refused after {}",
            ctx(now, &params)
        );
        assert_eq!(
            keyed.stats().evicted,
            model.evicted,
            "evicted after {}",
            ctx(now, &params)
        );
    }
    if conform {
        let what = |subject: String| move || format!("{subject}: {:?}", input);
        stats.conformance_checked +=
            assert_conforms(&direct_acting, &params, &what("direct".into()));
        for (k, list) in &keyed_acting {
            stats.conformance_checked +=
                assert_conforms(list, &params, &what(format!("keyed key {k}")));
        }
    }
    stats
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
