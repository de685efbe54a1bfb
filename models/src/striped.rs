//! The hot-key mode (`StripedLimiter`, GCRA and stock): a reference model written from the
//! `striped` module docs, in `u128` arithmetic, shared by the `striped_model` fuzz target
//! (which drives it beside the real limiter):
//!
//! ```text
//! s stripes; stripe i's share of a whole w: w / s, plus 1 for i < w % s
//! GCRA stripe i: T_i = s*T, DVT_i = T_i * burst_i, CEIL_i = T_i * (burst_i + queue_i),
//!   each an independent GCRA cell (the gcra_model rules: ahead = max(tat, now) - now + n*T_i;
//!   admitted iff n*T_i <= DVT_i and ahead <= CEIL_i and now + ahead <= u64::MAX)
//! stock stripe i: units_i; admitted iff n <= units_i
//! check_n_from(hint, n): stripes from hint % s on, in turn; the first that admits decides;
//!   stock only, none admitting and n > 1: take min(left, need) from each stripe in the same
//!   order; n gathered: admitted (remaining = what the last stripe touched has left);
//!   otherwise every unit goes back and the request is denied
//! denied: the first stripe's decision, unless a later stripe offers a strictly sooner
//!   retry_after (the soonest; the first of equals)
//! every decision's limit: the whole limit (burst + queue, or the stock)
//! remaining(): the sum over stripes of what each would admit now (saturating)
//! restock(u), stock only: stripe i gains its share of u (saturating at u64::MAX); returns the
//!   sum of the stripes' units (saturating); GCRA: Unsupported { "restock", "gcra" }
//!
//! time (GCRA; "A clock that steps back"): every operation decides at e = max(clock, H), H the
//!   high-water mark (0 at first); with strict_clock() a request allowed at e (n = 0 too) raises
//!   H to e (stamps stay 0); with relaxed_clock(), a request allowed at e raises the stamp of the
//!   stripe it started at (whichever stripe allowed it) to e; by default both: the stamp, and
//!   H to e when e > H + lag (lag = max(T, 16384 ns)); a check whose first stripe refuses
//!   it reads P = that stripe's stamp; if P > e: H = max(H, P), and the check goes on at P from
//!   its first stripe again (the denial then is chosen among the decisions at P); otherwise on
//!   from the next stripe at e
//! peek_n(n), from this thread's stripe: GCRA as a check that writes nothing (H unchanged);
//!   stock: one stock holding the sum of all stripes
//! charge(n) / reserve(n, w), from this thread's stripe: as a check (reserve: each stripe's
//!   GCRA ceiling for the request is min(DVT_i + w, CEIL_i) with a queue, DVT_i + w without,
//!   saturating at u64::MAX); the reservation keeps (stripe, n, before, after, e) (a gathered
//!   stock: the start stripe, 0 -> n)
//! cancel(r): nothing unless r was allowed with n > 0 and before != after; stock: the stripe
//!   gains n; GCRA at e (taken as at least r's e), on r's stripe: nothing if tat <= e; else if
//!   tat > e + DVT_i only the last place (tat == after: back to max(before, e)); else tat drops
//!   by min(n*T_i, at + n*T_i - e), never below e; true iff the stripe's word changed
//! check_all([(striped, a), (stock cell, b)]) in either order: each charged in turn; on the
//!   first denial the earlier charges are cancelled in reverse; allowed iff none denied
//! ```
//!
//! and the bounds of the module docs, with the clock moving both ways: over a run of checks
//! that starts at the latest reading so far and in which the clock does not go back, at most
//! `burst + queue + elapsed / T` units; over a run from the start or from a step back, at most
//! `burst + queue + (latest - earliest) / T`; and, for runs in which every check starts at the
//! same stripe with `n` within its share of the burst, one cell's ceiling `burst + queue +
//! (A_end - A_start) / T` over every run from an admission on (`A`: the latest reading of an
//! admitted check) — with strict_clock() that last bound for every run from an admission on,
//! whatever stripes the checks start at and whatever their size; by default that bound plus the
//! lag (`burst + queue + (A_end + lag - A_start) / T`) from any stripes. A rollback or a
//! reservation ends the runs (the bounds count checks only).
//! Invalid configurations must be the documented `ConfigError`s ([`Invalid`] here).
//!
//! Plain integers in, plain structs out: a caller reads a real decision into a
//! [`Expected`] (with its delay, 0 when denied) and compares.

use std::time::Duration;

use crate::gcra::Expected;
use crate::invalid::Invalid;

const HORIZON: u128 = u64::MAX as u128;
const NEVER: u64 = u64::MAX;

/// The most stripes a limiter may have (`cellgate::MAX_STRIPES`).
pub const MAX_STRIPES: usize = 1 << 16;

/// The default mode's least lag, ns (the crate's `MARK_LAG_NS`).
pub const MARK_LAG_NS: u128 = 16_384;

/// The striped GCRA limiter's time modes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TimeMode {
    /// The default: an admission stamps its start stripe, and raises the mark when it is more
    /// than the lag (`max(T, 16384 ns)`) ahead of it.
    Lagged,
    /// `strict_clock()`: every admission raises the mark.
    Strict,
    /// `relaxed_clock()`: stamps only.
    Relaxed,
}

/// What the model saw on the way (for a caller's statistics).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Tally {
    /// Checks (or charges, peeks) whose clock was behind a stripe's stamp.
    pub caught_up: u64,
    /// Decisions made at the high-water mark rather than the clock.
    pub at_mark: u64,
}

/// A GCRA stripe: `(T_i, DVT_i, CEIL_i, tat)` and its stamp (the latest time a request that
/// started at it was allowed).
#[derive(Debug, Clone, Copy)]
pub struct GStripe {
    pub t: u128,
    pub dvt: u128,
    pub ceil: u128,
    pub tat: u128,
    pub stamp: u128,
}

/// The model's side of a reservation: stripe, units, words before and after, time taken at.
#[derive(Debug, Clone, Copy)]
pub struct Held {
    pub stripe: usize,
    pub n: u128,
    pub before: u128,
    pub after: u128,
    pub at: u128,
}

fn cap32(x: u128) -> u32 {
    u32::try_from(x).unwrap_or(u32::MAX)
}

fn cap64(x: u128) -> u64 {
    u64::try_from(x).unwrap_or(u64::MAX)
}

fn share(whole: u128, s: u128, i: u128) -> u128 {
    whole / s + u128::from(i < whole % s)
}

impl GStripe {
    /// The ceiling of a reservation that waits up to `wait` ns.
    pub fn reserve_ceiling(&self, wait: u128) -> u128 {
        let wanted = (self.dvt + wait).min(HORIZON);
        if self.ceil > self.dvt {
            wanted.min(self.ceil)
        } else {
            wanted
        }
    }

    /// The stripe's decision on `n` at `now` (whole `limit`), admitting up to `ceiling` ahead
    /// (`CEIL_i` for a check), and the TAT to write if admitted.
    pub fn step_within(
        &self,
        now: u128,
        n: u128,
        limit: u32,
        ceiling: u128,
    ) -> (Expected, Option<u128>) {
        let backlog = self.tat.saturating_sub(now);
        let need = n * self.t;
        let ahead = backlog + need;
        let fits = need <= self.dvt;
        if fits && ahead <= ceiling {
            if now + ahead <= HORIZON {
                let seen = Expected {
                    allowed: true,
                    limit,
                    remaining: cap32(self.ceil.saturating_sub(ahead) / self.t),
                    retry_after_ns: None,
                    delay_ns: cap64(ahead.saturating_sub(self.dvt)),
                    reset_after_ns: cap64(ahead),
                };
                return (seen, (n > 0).then_some(now + ahead));
            }
            let seen = Expected {
                allowed: false,
                limit,
                remaining: 0,
                retry_after_ns: None,
                delay_ns: 0,
                reset_after_ns: cap64(backlog),
            };
            return (seen, None);
        }
        let retry = (fits && now + ahead <= HORIZON).then(|| {
            let r = ahead - ceiling;
            // `u64::MAX` stands for "no retry" inside a decision; a real wait that long is
            // reported 1 ns shorter.
            if r >= HORIZON {
                u64::MAX - 1
            } else {
                r as u64
            }
        });
        let seen = Expected {
            allowed: false,
            limit,
            remaining: cap32(self.ceil.saturating_sub(backlog) / self.t),
            retry_after_ns: retry,
            delay_ns: 0,
            reset_after_ns: cap64(backlog),
        };
        (seen, None)
    }
}

/// The model's limiter.
pub enum Model {
    Gcra {
        stripes: Vec<GStripe>,
        limit: u32,
        /// `T` of the whole quota, `burst + queue`.
        t: u128,
        whole: u128,
        /// The high-water mark.
        high: u128,
        time: TimeMode,
        /// The default mode's lag: `max(t, MARK_LAG_NS)`.
        lag: u128,
    },
    Stock {
        /// `(share, left)` per stripe.
        stripes: Vec<(u128, u128)>,
        limit: u32,
    },
}

/// The stripe count the builder picks by default.
fn default_stripes(burst: Option<u32>) -> usize {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    match burst {
        Some(b) => cores.min(b as usize),
        None => cores,
    }
}

/// A striped limiter's configuration, in plain integers: a stock of `units`, or the whole
/// GCRA quota (`count` per `period`, `burst`, `queue`, as the `Quota` reads them).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Config {
    Stock {
        units: u32,
    },
    Gcra {
        count: u32,
        period: Duration,
        burst: u32,
        queue: u32,
    },
}

/// The model of a limiter built from `config` with `stripes` stripes (`None`: the default)
/// and the time mode `time`, or the documented reason it is invalid.
pub fn build(config: Config, stripes: Option<usize>, time: TimeMode) -> Result<Model, Invalid> {
    let (count, period, burst, queue) = match config {
        Config::Stock { units } => {
            let s = match stripes {
                Some(0) => return Err(Invalid::Zero { field: "stripes" }),
                Some(s) => s,
                None => default_stripes(None),
            };
            let units = u128::from(units);
            let stripes = (0..s as u128)
                .map(|i| {
                    let sh = share(units, s as u128, i);
                    (sh, sh)
                })
                .collect();
            return Ok(Model::Stock {
                stripes,
                limit: units as u32,
            });
        }
        Config::Gcra {
            count,
            period,
            burst,
            queue,
        } => (u128::from(count), period, burst, u128::from(queue)),
    };
    let period_ns = period.as_nanos();
    // The whole quota's own errors first (Quota docs).
    if count == 0 {
        return Err(Invalid::Zero { field: "count" });
    }
    if period_ns == 0 {
        return Err(Invalid::Zero { field: "period" });
    }
    let b = u128::from(burst);
    if b == 0 {
        return Err(Invalid::Zero { field: "burst" });
    }
    let t = period_ns / count;
    if t == 0 {
        return Err(Invalid::RateTooFast {
            count: count as u32,
            period,
        });
    }
    if t * b > HORIZON {
        return Err(Invalid::BurstTooLarge {
            burst: b as u32,
            interval_ns: t as u64,
        });
    }
    if t * (b + queue) > HORIZON {
        return Err(Invalid::QueueTooLarge {
            burst: b as u32,
            queue: queue as u32,
            interval_ns: t as u64,
        });
    }
    let s = match stripes {
        Some(0) => return Err(Invalid::Zero { field: "stripes" }),
        Some(s) => s,
        None => default_stripes(Some(b as u32)),
    };
    if s > MAX_STRIPES {
        return Err(Invalid::TooManyStripes {
            stripes: s,
            max: MAX_STRIPES,
        });
    }
    if s as u128 > b {
        return Err(Invalid::TooManyStripes {
            stripes: s,
            max: b as usize,
        });
    }
    let overflow = Invalid::BurstTooLarge {
        burst: b as u32,
        interval_ns: t as u64,
    };
    let ts = t * s as u128;
    if ts > HORIZON {
        return Err(overflow);
    }
    let mut out = Vec::new();
    for i in 0..s as u128 {
        let bi = share(b, s as u128, i);
        let qi = share(queue, s as u128, i);
        if ts * bi > HORIZON || ts * (bi + qi) > HORIZON {
            return Err(overflow);
        }
        out.push(GStripe {
            t: ts,
            dvt: ts * bi,
            ceil: ts * (bi + qi),
            tat: 0,
            stamp: 0,
        });
    }
    Ok(Model::Gcra {
        stripes: out,
        limit: cap32(b + queue),
        t,
        whole: b + queue,
        high: 0,
        time,
        lag: t.max(MARK_LAG_NS),
    })
}

/// Of two GCRA denials, the one with the soonest retry (the first of equals; `None` last).
fn sooner(best: Option<Expected>, d: Expected) -> Expected {
    match best {
        None => d,
        Some(b) => match (d.retry_after_ns, b.retry_after_ns) {
            (Some(_), None) => d,
            (Some(x), Some(y)) if x < y => d,
            _ => b,
        },
    }
}

/// How a request goes through the stripes.
#[derive(Debug, Clone, Copy)]
pub enum Mode {
    /// A check, a charge or a reservation (`Some(wait)`): writes, raises the mark.
    Take(Option<u128>),
    /// A peek: writes nothing.
    Peek,
}

impl Model {
    /// The time an operation decides at.
    pub fn at(&self, now: u128) -> u128 {
        match self {
            Model::Gcra { high, .. } => now.max(*high),
            Model::Stock { .. } => 0,
        }
    }

    /// A check, charge, reservation or peek of `n` units from stripe `start`: the decision and,
    /// for an admission, what a cancel needs.
    pub fn take(
        &mut self,
        now: u128,
        start: usize,
        n: u32,
        mode: Mode,
        tally: &mut Tally,
    ) -> (Expected, Option<Held>) {
        let e = self.at(now);
        if e > now {
            tally.at_mark += 1;
        }
        match self {
            Model::Gcra {
                stripes,
                limit,
                high,
                time,
                lag,
                ..
            } => {
                let s = stripes.len();
                let start = start % s;
                let n = u128::from(n);
                let mut e = e;
                let mut denied: Option<Expected> = None;
                let mut k = 0;
                let mut caught_up = false;
                while k < s {
                    let i = (start + k) % s;
                    let g = stripes[i];
                    let ceiling = match mode {
                        Mode::Take(Some(wait)) => g.reserve_ceiling(wait),
                        _ => g.ceil,
                    };
                    let (seen, write) = g.step_within(e, n, *limit, ceiling);
                    if seen.allowed {
                        if let Mode::Take(_) = mode {
                            match *time {
                                TimeMode::Strict => *high = (*high).max(e),
                                TimeMode::Relaxed => {
                                    stripes[start].stamp = stripes[start].stamp.max(e);
                                }
                                TimeMode::Lagged => {
                                    stripes[start].stamp = stripes[start].stamp.max(e);
                                    if e > *high + *lag {
                                        *high = e;
                                    }
                                }
                            }
                            let before = g.tat;
                            if let Some(tat) = write {
                                stripes[i].tat = tat;
                            }
                            let held = Held {
                                stripe: i,
                                n,
                                before,
                                after: stripes[i].tat,
                                at: e,
                            };
                            return (seen, Some(held));
                        }
                        return (seen, None);
                    }
                    denied = Some(sooner(denied, seen));
                    k += 1;
                    if k == 1 && !caught_up {
                        caught_up = true;
                        let proven = stripes[start].stamp;
                        if proven > e {
                            tally.caught_up += 1;
                            let mut at = proven;
                            if let Mode::Take(_) = mode {
                                *high = (*high).max(proven);
                                at = *high;
                            }
                            (e, k, denied) = (at, 0, None);
                        }
                    }
                }
                (denied.expect("at least one stripe"), None)
            }
            Model::Stock { stripes, limit } => {
                let s = stripes.len();
                let start = start % s;
                let n = u128::from(n);
                let reset = |share: u128, left: u128| if left == share { 0 } else { NEVER };
                if let Mode::Peek = mode {
                    let total: u128 = stripes.iter().map(|x| x.1).sum();
                    let untouched = stripes.iter().all(|x| x.0 == x.1);
                    let reset = if untouched { 0 } else { NEVER };
                    let seen = match total.checked_sub(n) {
                        Some(left) => Expected {
                            allowed: true,
                            limit: *limit,
                            remaining: cap32(left),
                            retry_after_ns: None,
                            delay_ns: 0,
                            reset_after_ns: reset,
                        },
                        None => Expected {
                            allowed: false,
                            limit: *limit,
                            remaining: cap32(total),
                            retry_after_ns: None,
                            delay_ns: 0,
                            reset_after_ns: reset,
                        },
                    };
                    return (seen, None);
                }
                let mut first: Option<Expected> = None;
                for k in 0..s {
                    let i = (start + k) % s;
                    let (share, left) = stripes[i];
                    if n <= left {
                        stripes[i].1 = left - n;
                        let seen = Expected {
                            allowed: true,
                            limit: *limit,
                            remaining: cap32(left - n),
                            retry_after_ns: None,
                            delay_ns: 0,
                            reset_after_ns: reset(share, left - n),
                        };
                        let held = Held {
                            stripe: i,
                            n,
                            before: left,
                            after: left - n,
                            at: 0,
                        };
                        return (seen, Some(held));
                    }
                    first.get_or_insert(Expected {
                        allowed: false,
                        limit: *limit,
                        remaining: cap32(left),
                        retry_after_ns: None,
                        delay_ns: 0,
                        reset_after_ns: reset(share, left),
                    });
                }
                if n > 1 {
                    let total: u128 = stripes.iter().map(|x| x.1).sum();
                    if total >= n {
                        let mut need = n;
                        for k in 0..s {
                            let i = (start + k) % s;
                            let got = stripes[i].1.min(need);
                            if got > 0 {
                                stripes[i].1 -= got;
                                need -= got;
                                if need == 0 {
                                    let seen = Expected {
                                        allowed: true,
                                        limit: *limit,
                                        remaining: cap32(stripes[i].1),
                                        retry_after_ns: None,
                                        delay_ns: 0,
                                        reset_after_ns: NEVER,
                                    };
                                    // Gathered: "n taken", given back on the start stripe.
                                    let held = Held {
                                        stripe: start,
                                        n,
                                        before: 0,
                                        after: n,
                                        at: 0,
                                    };
                                    return (seen, Some(held));
                                }
                            }
                        }
                        unreachable!("the total held n units");
                    }
                }
                (first.expect("at least one stripe"), None)
            }
        }
    }

    /// `cancel` of a reservation whose decision was `seen`; whether anything came back.
    pub fn cancel(&mut self, now: u128, seen: &Expected, held: &Held) -> bool {
        if !seen.allowed || held.n == 0 || held.before == held.after {
            return false;
        }
        let e = self.at(now);
        match self {
            Model::Stock { stripes, .. } => {
                let x = &mut stripes[held.stripe].1;
                *x = (*x + held.n).min(HORIZON);
                true
            }
            Model::Gcra { stripes, .. } => {
                let g = &mut stripes[held.stripe];
                let now = e.max(held.at);
                if g.tat <= e {
                    return false;
                }
                let new = if g.tat > now + g.dvt {
                    if g.tat != held.after {
                        return false;
                    }
                    held.before.max(now)
                } else {
                    let units = held.n * g.t;
                    let unspent = (held.at + units).saturating_sub(now);
                    g.tat.saturating_sub(units.min(unspent)).max(now)
                };
                if new < g.tat {
                    g.tat = new;
                    true
                } else {
                    false
                }
            }
        }
    }

    pub fn remaining(&self, now: u128) -> u64 {
        match self {
            Model::Gcra { stripes, .. } => stripes
                .iter()
                .map(|g| {
                    u64::from(cap32(
                        g.ceil.saturating_sub(g.tat.saturating_sub(now)) / g.t,
                    ))
                })
                .sum(),
            Model::Stock { stripes, .. } => stripes
                .iter()
                .map(|x| cap64(x.1))
                .fold(0, u64::saturating_add),
        }
    }

    pub fn restock(&mut self, units: u64) -> Result<u64, Invalid> {
        match self {
            Model::Gcra { .. } => Err(Invalid::Unsupported {
                operation: "restock",
                algorithm: "gcra",
            }),
            Model::Stock { stripes, .. } => {
                let s = stripes.len() as u128;
                for (i, x) in stripes.iter_mut().enumerate() {
                    x.1 = (x.1 + share(u128::from(units), s, i as u128)).min(HORIZON);
                }
                Ok(self.remaining(0))
            }
        }
    }
}

/// The bounds of the module docs, counted over checks as the clock moves (see the module
/// docs of this file).
#[derive(Debug)]
pub struct Bounds {
    /// `T` and `burst + queue`.
    pub t: u128,
    pub whole: u128,
    /// The latest reading so far, and the latest reading of an admitted check.
    pub latest: u128,
    pub latest_admitted: u128,
    /// The forward run: its origin and units, while the clock has not gone back since it
    /// started at a new latest reading.
    pub forward: Option<(u128, u128)>,
    /// Runs from the start and from the latest steps back: `(earliest reading, units)`.
    pub runs: Vec<(u128, u128)>,
    /// Runs from each admission while every check started at `one` (or, with every admission
    /// sharing its time, from each admission): `(A, units)`.
    pub one: Option<usize>,
    pub shared: bool,
    pub one_runs: Vec<(u128, u128)>,
    /// The default mode: runs from each admission, checks from any stripes, each within one
    /// cell's ceiling plus the mark's lag: `(A, units)`.
    pub lag: Option<u128>,
    pub any_runs: Vec<(u128, u128)>,
    /// A reservation or rollback happened: no bound holds over it any more.
    pub off: bool,
}

/// Adds `n` units to every run of `runs` (`(start, units)`) and asserts each within `whole +
/// (end - start) / t`.
fn count_in(
    runs: &mut [(u128, u128)],
    n: u128,
    t: u128,
    whole: u128,
    end: u128,
    what: &dyn Fn(u128, u128) -> String,
) {
    for (from, units) in runs.iter_mut() {
        *units += n;
        assert!(
            units.saturating_sub(whole) * t <= end - *from,
            "{}",
            what(*from, *units)
        );
    }
}

impl Bounds {
    pub fn new(t: u128, whole: u128, now: u128, time: TimeMode, lag: u128) -> Self {
        Bounds {
            t,
            whole,
            latest: now,
            latest_admitted: 0,
            forward: Some((now, 0)),
            runs: vec![(now, 0)],
            one: None,
            one_runs: Vec::new(),
            shared: time == TimeMode::Strict,
            lag: (time == TimeMode::Lagged).then_some(lag),
            any_runs: Vec::new(),
            off: false,
        }
    }

    fn within(&self, units: u128, span: u128) -> bool {
        units.saturating_sub(self.whole) * self.t <= span
    }

    /// The clock now reads `now` (before the next operation).
    pub fn moved(&mut self, now: u128, back: bool) {
        if back {
            self.forward = None;
            self.runs.push((now, 0));
            if self.runs.len() > 8 {
                self.runs.remove(0);
            }
        } else if now > self.latest {
            self.forward.get_or_insert((now, 0));
        }
        self.latest = self.latest.max(now);
        for run in &mut self.runs {
            run.0 = run.0.min(now);
        }
    }

    /// A check from stripe `start` (of a limiter whose smallest burst share is `fits`) for `n`
    /// units at reading `now`, admitted or not.
    pub fn check(
        &mut self,
        step: usize,
        start: usize,
        n: u128,
        fits: bool,
        admitted: bool,
        now: u128,
    ) {
        if self.off {
            return;
        }
        if self.shared {
            // One cell's ceiling from any stripe, any request.
            self.one = Some(start);
        } else if self.one.is_some_and(|one| one != start) || !fits {
            self.one_runs.clear();
            self.one = None;
        }
        if self.one.is_none() && self.one_runs.is_empty() && fits {
            self.one = Some(start);
        }
        if !admitted {
            return;
        }
        self.latest_admitted = self.latest_admitted.max(now);
        if let Some((origin, units)) = &mut self.forward {
            *units += n;
            let (origin, units) = (*origin, *units);
            assert!(
                self.within(units, now - origin),
                "step {step}: {units} units from {origin} to {now}, the clock never back"
            );
        }
        let (t, whole, latest, a_end) = (self.t, self.whole, self.latest, self.latest_admitted);
        count_in(&mut self.runs, n, t, whole, latest, &|from, units| {
            format!("step {step}: {units} units in a run from {from} (latest {latest})")
        });
        if let Some(lag) = self.lag {
            self.any_runs.push((a_end, 0));
            count_in(
                &mut self.any_runs,
                n,
                t,
                whole,
                a_end + lag,
                &|from, units| {
                    format!("step {step}: {units} units from any stripes, A from {from} to {a_end}")
                },
            );
            if self.any_runs.len() > 64 {
                self.any_runs.remove(0);
            }
        }
        if self.one.is_some() {
            self.one_runs.push((a_end, 0));
            count_in(&mut self.one_runs, n, t, whole, a_end, &|from, units| {
                format!("step {step}: {units} units from one stripe, A from {from} to {a_end}")
            });
            if self.one_runs.len() > 64 {
                self.one_runs.remove(0);
            }
        }
    }
}
