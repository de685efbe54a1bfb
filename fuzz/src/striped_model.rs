//! The hot-key mode (`StripedLimiter`, GCRA and stock) against a reference model written from
//! the `striped` module docs, in `u128` arithmetic:
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
//! Invalid configurations must be the documented `ConfigError`s.

use std::time::Duration;

use std::cell::RefCell;
use std::collections::HashMap;

use arbitrary::Arbitrary;
use cellgate::clock::{Clock, ManualClock};
use cellgate::{
    check_all, ConfigError, Decision, Limiter, Quota, RateLimiter, Reservation,
    StripedLimiter, MAX_STRIPES,
};

const HORIZON: u128 = u64::MAX as u128;
const NEVER: u64 = u64::MAX;

/// One fuzz input.
#[derive(Arbitrary, Debug, Clone)]
pub struct Input {
    pub kind: Kind,
    /// Stripes asked for: `Some(0)` must be an error; `None`: not set (the default).
    pub stripes: Option<u8>,
    /// How admissions share their time (GCRA).
    pub time: TimeMode,
    pub ops: Vec<Op>,
}

/// The striped GCRA limiter's time modes.
#[derive(Arbitrary, Debug, Clone, Copy, PartialEq, Eq)]
pub enum TimeMode {
    /// The default: an admission stamps its start stripe, and raises the mark when it is more
    /// than the lag (`max(T, 16384 ns)`) ahead of it.
    Lagged,
    /// `strict_clock()`: every admission raises the mark.
    Strict,
    /// `relaxed_clock()`: stamps only.
    Relaxed,
}

/// The default mode's least lag, ns (the crate's `MARK_LAG_NS`).
const MARK_LAG_NS: u128 = 16_384;

#[derive(Arbitrary, Debug, Clone, Copy)]
pub enum Kind {
    Stock {
        units: u16,
    },
    Gcra {
        count: u16,
        /// Period in ns: `interval * count` (an exact interval) when `exact`, else as given.
        period: u32,
        exact: bool,
        burst: Option<u8>,
        queue: u8,
    },
    /// A huge interval, so that stripe arithmetic overflows.
    SlowGcra {
        burst: u8,
        queue: u8,
    },
}

#[derive(Arbitrary, Debug, Clone, Copy)]
pub enum Op {
    Check {
        hint: u8,
        n: u8,
    },
    Advance(u32),
    AdvanceIntervals(u8),
    /// Moves the clock back (no credit may come of it).
    Back(u32),
    Remaining,
    /// `restock(units)`: stock only (a GCRA limiter must refuse it).
    Restock(u64),
    /// `peek_n(n)` from this thread's stripe.
    Peek {
        n: u8,
    },
    /// `charge(n)` (the `RateLimiter` charge), kept for a later `Cancel`.
    Charge {
        n: u8,
    },
    /// `reserve(n, wait)`, kept for a later `Cancel`; `wait`: `wait % 16` stripe intervals,
    /// plus `frac / 256` of one.
    Reserve {
        n: u8,
        wait: u8,
        frac: u8,
    },
    /// Cancels the outstanding reservation `pick % count` (each at most once).
    Cancel {
        pick: u8,
    },
    /// `check_all` of the striped limiter (`a` units) and a one-cell stock (`b` units), the
    /// striped one first or second.
    CheckAll {
        a: u8,
        b: u8,
        striped_first: bool,
    },
}

crate::counters! {
    /// What a run exercised (for the corpus tools).
    pub struct Stats {
        pub inputs: u64,
        pub checks: u64,
        /// Checks (or charges, peeks) whose clock was behind a stripe's stamp.
        pub caught_up: u64,
        /// Decisions made at the high-water mark rather than the clock.
        pub at_mark: u64,
        pub reservations: u64,
        pub cancels_given_back: u64,
        pub cancels_refused: u64,
        pub gates_allowed: u64,
        pub gates_rolled_back: u64,
        pub steps_back: u64,
    }
}

/// A GCRA stripe: `(T_i, DVT_i, CEIL_i, tat)` and its stamp (the latest time a request that
/// started at it was allowed).
#[derive(Debug, Clone, Copy)]
struct GStripe {
    t: u128,
    dvt: u128,
    ceil: u128,
    tat: u128,
    stamp: u128,
}

/// The model's side of a reservation: stripe, units, words before and after, time taken at.
#[derive(Debug, Clone, Copy)]
struct Held {
    stripe: usize,
    n: u128,
    before: u128,
    after: u128,
    at: u128,
}

/// What a decision shows, for comparison.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Seen {
    allowed: bool,
    limit: u32,
    remaining: u32,
    retry: Option<u64>,
    delay: u64,
    reset: u64,
}

impl Seen {
    fn of(d: &Decision) -> Self {
        Seen {
            allowed: d.is_allowed(),
            limit: d.limit(),
            remaining: d.remaining(),
            retry: d.retry_after_ns(),
            delay: if d.is_allowed() { d.delay_ns() } else { 0 },
            reset: d.reset_after_ns(),
        }
    }
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
    fn reserve_ceiling(&self, wait: u128) -> u128 {
        let wanted = (self.dvt + wait).min(HORIZON);
        if self.ceil > self.dvt {
            wanted.min(self.ceil)
        } else {
            wanted
        }
    }

    /// The stripe's decision on `n` at `now` (whole `limit`), admitting up to `ceiling` ahead
    /// (`CEIL_i` for a check), and the TAT to write if admitted.
    fn step_within(&self, now: u128, n: u128, limit: u32, ceiling: u128) -> (Seen, Option<u128>) {
        let backlog = self.tat.saturating_sub(now);
        let need = n * self.t;
        let ahead = backlog + need;
        let fits = need <= self.dvt;
        if fits && ahead <= ceiling {
            if now + ahead <= HORIZON {
                let seen = Seen {
                    allowed: true,
                    limit,
                    remaining: cap32(self.ceil.saturating_sub(ahead) / self.t),
                    retry: None,
                    delay: cap64(ahead.saturating_sub(self.dvt)),
                    reset: cap64(ahead),
                };
                return (seen, (n > 0).then_some(now + ahead));
            }
            let seen = Seen {
                allowed: false,
                limit,
                remaining: 0,
                retry: None,
                delay: 0,
                reset: cap64(backlog),
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
        let seen = Seen {
            allowed: false,
            limit,
            remaining: cap32(self.ceil.saturating_sub(backlog) / self.t),
            retry,
            delay: 0,
            reset: cap64(backlog),
        };
        (seen, None)
    }
}

/// The model's limiter.
enum Model {
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

/// The whole quota a GCRA input asks for; `None` for stock.
fn quota_of(kind: Kind) -> Option<Quota> {
    match kind {
        Kind::Stock { .. } => None,
        Kind::Gcra {
            count,
            period,
            exact,
            burst,
            queue,
        } => {
            let count = u32::from(count);
            let period_ns = if exact {
                u64::from(period % 1000) * u64::from(count)
            } else {
                u64::from(period)
            };
            let q = Quota::new(count, Duration::from_nanos(period_ns)).with_queue(u32::from(queue));
            Some(match burst {
                Some(b) => q.with_burst(u32::from(b)),
                None => q,
            })
        }
        Kind::SlowGcra { burst, queue } => Some(
            Quota::new(1, Duration::from_nanos(u64::MAX / 64))
                .with_burst(u32::from(burst))
                .with_queue(u32::from(queue)),
        ),
    }
}

fn build_model(kind: Kind, stripes: Option<u8>, time: TimeMode) -> Result<Model, ConfigError> {
    let Some(quota) = quota_of(kind) else {
        let Kind::Stock { units } = kind else {
            unreachable!("only stock has no quota")
        };
        let s = match stripes {
            Some(0) => return Err(ConfigError::Zero { field: "stripes" }),
            Some(s) => usize::from(s),
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
    };
    let count = u128::from(quota.count());
    let period_ns = quota.period().as_nanos();
    let burst = quota.burst();
    let queue = u128::from(quota.queue());
    // The whole quota's own errors first (Quota docs).
    if count == 0 {
        return Err(ConfigError::Zero { field: "count" });
    }
    if period_ns == 0 {
        return Err(ConfigError::Zero { field: "period" });
    }
    let b = u128::from(burst);
    if b == 0 {
        return Err(ConfigError::Zero { field: "burst" });
    }
    let t = period_ns / count;
    if t == 0 {
        return Err(ConfigError::RateTooFast {
            count: count as u32,
            period: quota.period(),
        });
    }
    if t * b > HORIZON {
        return Err(ConfigError::BurstTooLarge {
            burst: b as u32,
            interval_ns: t as u64,
        });
    }
    if t * (b + queue) > HORIZON {
        return Err(ConfigError::QueueTooLarge {
            burst: b as u32,
            queue: queue as u32,
            interval_ns: t as u64,
        });
    }
    let s = match stripes {
        Some(0) => return Err(ConfigError::Zero { field: "stripes" }),
        Some(s) => usize::from(s),
        None => default_stripes(Some(b as u32)),
    };
    if s > MAX_STRIPES {
        return Err(ConfigError::TooManyStripes {
            stripes: s,
            max: MAX_STRIPES,
        });
    }
    if s as u128 > b {
        return Err(ConfigError::TooManyStripes {
            stripes: s,
            max: b as usize,
        });
    }
    let overflow = ConfigError::BurstTooLarge {
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
fn sooner(best: Option<Seen>, d: Seen) -> Seen {
    match best {
        None => d,
        Some(b) => match (d.retry, b.retry) {
            (Some(_), None) => d,
            (Some(x), Some(y)) if x < y => d,
            _ => b,
        },
    }
}

/// How a request goes through the stripes.
#[derive(Debug, Clone, Copy)]
enum Mode {
    /// A check, a charge or a reservation (`Some(wait)`): writes, raises the mark.
    Take(Option<u128>),
    /// A peek: writes nothing.
    Peek,
}

impl Model {
    /// The time an operation decides at.
    fn at(&self, now: u128) -> u128 {
        match self {
            Model::Gcra { high, .. } => now.max(*high),
            Model::Stock { .. } => 0,
        }
    }

    /// A check, charge, reservation or peek of `n` units from stripe `start`: the decision and,
    /// for an admission, what a cancel needs.
    fn take(
        &mut self,
        now: u128,
        start: usize,
        n: u32,
        mode: Mode,
        stats: &mut Stats,
    ) -> (Seen, Option<Held>) {
        let e = self.at(now);
        if e > now {
            stats.at_mark += 1;
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
                let mut denied: Option<Seen> = None;
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
                            stats.caught_up += 1;
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
                        Some(left) => Seen {
                            allowed: true,
                            limit: *limit,
                            remaining: cap32(left),
                            retry: None,
                            delay: 0,
                            reset,
                        },
                        None => Seen {
                            allowed: false,
                            limit: *limit,
                            remaining: cap32(total),
                            retry: None,
                            delay: 0,
                            reset,
                        },
                    };
                    return (seen, None);
                }
                let mut first: Option<Seen> = None;
                for k in 0..s {
                    let i = (start + k) % s;
                    let (share, left) = stripes[i];
                    if n <= left {
                        stripes[i].1 = left - n;
                        let seen = Seen {
                            allowed: true,
                            limit: *limit,
                            remaining: cap32(left - n),
                            retry: None,
                            delay: 0,
                            reset: reset(share, left - n),
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
                    first.get_or_insert(Seen {
                        allowed: false,
                        limit: *limit,
                        remaining: cap32(left),
                        retry: None,
                        delay: 0,
                        reset: reset(share, left),
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
                                    let seen = Seen {
                                        allowed: true,
                                        limit: *limit,
                                        remaining: cap32(stripes[i].1),
                                        retry: None,
                                        delay: 0,
                                        reset: NEVER,
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
    fn cancel(&mut self, now: u128, seen: &Seen, held: &Held) -> bool {
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

    fn remaining(&self, now: u128) -> u64 {
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

    fn restock(&mut self, units: u64) -> Result<u64, ConfigError> {
        match self {
            Model::Gcra { .. } => Err(ConfigError::Unsupported {
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

thread_local! {
    /// This thread's start stripe for each stripe count, once found.
    static STARTS: RefCell<HashMap<usize, usize>> = RefCell::new(HashMap::new());
}

/// Before this process's first striped check: five threads take the first five tickets, so
/// that the fuzzing thread's own ticket is 5 and its start stripe varies with the stripe count
/// (ticket 0 would start every limiter at stripe 0, and a start stripe mixed up with stripe 0
/// would go unseen).
fn take_first_tickets() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        for _ in 0..5 {
            std::thread::spawn(|| {
                let l = StripedLimiter::stock(1)
                    .stripes(1)
                    .build()
                    .expect("a stock");
                assert!(l.check().is_allowed());
            })
            .join()
            .expect("a ticket taker");
        }
    });
}

/// The stripe this thread's checks start at in a limiter of `s` stripes (`ticket % s`, the
/// ticket private to cellgate), found through the public API: a stock of two units per stripe
/// with one unit taken from every stripe but `c` shows `c`'s second unit to a plain check iff
/// the check starts at `c`.
fn thread_start(s: usize) -> usize {
    if let Some(start) = STARTS.with(|m| m.borrow().get(&s).copied()) {
        return start;
    }
    let start = (0..s)
        .find(|&c| {
            let l = StripedLimiter::stock(2 * s as u32)
                .stripes(s)
                .build()
                .expect("a valid stock");
            for j in (0..s).filter(|&j| j != c) {
                assert!(l.check_n_from(j, 1).is_allowed());
            }
            l.check().remaining() == 1
        })
        .expect("some stripe is this thread's");
    STARTS.with(|m| m.borrow_mut().insert(s, start));
    start
}

/// The bounds of the module docs, counted over checks as the clock moves (see the module
/// docs of this file).
#[derive(Debug)]
struct Bounds {
    /// `T` and `burst + queue`.
    t: u128,
    whole: u128,
    /// The latest reading so far, and the latest reading of an admitted check.
    latest: u128,
    latest_admitted: u128,
    /// The forward run: its origin and units, while the clock has not gone back since it
    /// started at a new latest reading.
    forward: Option<(u128, u128)>,
    /// Runs from the start and from the latest steps back: `(earliest reading, units)`.
    runs: Vec<(u128, u128)>,
    /// Runs from each admission while every check started at `one` (or, with every admission
    /// sharing its time, from each admission): `(A, units)`.
    one: Option<usize>,
    shared: bool,
    one_runs: Vec<(u128, u128)>,
    /// The default mode: runs from each admission, checks from any stripes, each within one
    /// cell's ceiling plus the mark's lag: `(A, units)`.
    lag: Option<u128>,
    any_runs: Vec<(u128, u128)>,
    /// A reservation or rollback happened: no bound holds over it any more.
    off: bool,
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
    fn new(t: u128, whole: u128, now: u128, time: TimeMode, lag: u128) -> Self {
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
    fn moved(&mut self, now: u128, back: bool) {
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
    fn check(&mut self, step: usize, start: usize, n: u128, fits: bool, admitted: bool, now: u128) {
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

/// Replays `input` against the real limiter and the model; panics on the first difference.
pub fn run(input: &Input) -> Stats {
    take_first_tickets();
    let mut stats = Stats {
        inputs: 1,
        ..Stats::default()
    };
    let clock = ManualClock::new();
    let mut builder = match (input.kind, quota_of(input.kind)) {
        (Kind::Stock { units }, _) => StripedLimiter::stock(u32::from(units)),
        (_, Some(q)) => StripedLimiter::gcra(q),
        (_, None) => unreachable!("only stock has no quota"),
    };
    if let Some(s) = input.stripes {
        builder = builder.stripes(usize::from(s));
    }
    builder = match input.time {
        TimeMode::Lagged => builder,
        TimeMode::Strict => builder.strict_clock(),
        TimeMode::Relaxed => builder.relaxed_clock(),
    };
    let (real, mut model) = match (
        builder.clock(clock.clone()).build(),
        build_model(input.kind, input.stripes, input.time),
    ) {
        (Ok(r), Ok(m)) => (r, m),
        (Err(a), Err(b)) => {
            assert_eq!(a, b, "configuration error");
            return stats;
        }
        (r, m) => panic!(
            "build: real {:?}, model {:?}",
            r.map(|r| r.stripes()),
            m.map(|_| ())
        ),
    };
    let start = thread_start(real.stripes());
    // The other gate of `CheckAll`: a one-cell stock of 5 units.
    let other = Limiter::stock(5)
        .clock(clock.clone())
        .build()
        .expect("a stock");
    let mut other_left: u128 = 5;
    let mut now: u128 = 0;
    let mut bounds = match &model {
        Model::Gcra {
            t,
            whole,
            time,
            lag,
            ..
        } => Some(Bounds::new(*t, *whole, now, *time, *lag)),
        Model::Stock { .. } => None,
    };
    // The smallest stripe's share of the burst, for the one-stripe bound.
    let smallest_burst = match &model {
        Model::Gcra { stripes, .. } => stripes.iter().map(|g| g.dvt / g.t).min().unwrap_or(0),
        Model::Stock { .. } => 0,
    };
    let stripe_t = match &model {
        Model::Gcra { stripes, .. } => stripes[0].t,
        Model::Stock { .. } => 1,
    };
    let mut held: Vec<(Reservation, Seen, Option<Held>)> = Vec::new();
    for (step, op) in input.ops.iter().enumerate() {
        let moved_from = now;
        match *op {
            Op::Check { hint, n } => {
                let n = u32::from(n % 8);
                stats.checks += 1;
                let got = Seen::of(&real.check_n_from(usize::from(hint), n));
                let s = real.stripes();
                let (want, _) = model.take(now, usize::from(hint), n, Mode::Take(None), &mut stats);
                assert_eq!(got, want, "step {step}: check_n_from({hint}, {n}) at {now}");
                if let Some(b) = &mut bounds {
                    let fits = u128::from(n) <= smallest_burst;
                    b.check(
                        step,
                        usize::from(hint) % s,
                        u128::from(n),
                        fits,
                        got.allowed,
                        now,
                    );
                }
            }
            Op::Peek { n } => {
                let n = u32::from(n % 8);
                let got = Seen::of(&real.peek_n(n));
                let (want, _) = model.take(now, start, n, Mode::Peek, &mut stats);
                // A stock peek's reset: untouched is read off the words, which a gathered
                // cancel can leave unlike a fresh stripe at the same count; compare the rest.
                let same = if matches!(model, Model::Stock { .. }) {
                    (got.allowed, got.limit, got.remaining)
                        == (want.allowed, want.limit, want.remaining)
                } else {
                    got == want
                };
                assert!(
                    same,
                    "step {step}: peek_n({n}) at {now}: real {got:?}, model {want:?}"
                );
            }
            Op::Charge { n } | Op::Reserve { n, .. } => {
                let n = u32::from(n % 8);
                let (r, mode) = match *op {
                    Op::Reserve { wait, frac, .. } => {
                        let ns =
                            u128::from(wait % 16) * stripe_t + stripe_t * u128::from(frac) / 256;
                        let ns = ns.min(HORIZON);
                        stats.reservations += 1;
                        (
                            RateLimiter::reserve(&real, &(), n, Duration::from_nanos(ns as u64)),
                            Mode::Take(Some(ns)),
                        )
                    }
                    _ => (RateLimiter::charge(&real, &(), n), Mode::Take(None)),
                };
                let got = Seen::of(&r.decision());
                let (want, h) = model.take(now, start, n, mode, &mut stats);
                assert_eq!(got, want, "step {step}: {op:?} at {now}");
                if let Some(b) = &mut bounds {
                    if got.allowed && n > 0 {
                        b.off = true;
                    }
                }
                held.push((r, want, h));
            }
            Op::Cancel { pick } => {
                if held.is_empty() {
                    continue;
                }
                let (r, seen, h) = held.remove(usize::from(pick) % held.len());
                let got = RateLimiter::cancel(&real, &(), r);
                let want = h.is_some_and(|h| model.cancel(now, &seen, &h));
                assert_eq!(got, want, "step {step}: cancel at {now}");
                if got {
                    stats.cancels_given_back += 1;
                    if let Some(b) = &mut bounds {
                        b.off = true;
                    }
                } else {
                    stats.cancels_refused += 1;
                }
            }
            Op::CheckAll {
                a,
                b,
                striped_first,
            } => {
                let (a, b) = (u32::from(a % 8), u32::from(b % 4));
                let d = if striped_first {
                    check_all([(&real as &dyn RateLimiter, a), (&other as &dyn RateLimiter, b)])
                } else {
                    check_all([(&other as &dyn RateLimiter, b), (&real as &dyn RateLimiter, a)])
                };
                // The model: each charged in turn, the earlier ones cancelled on a denial.
                let striped = |model: &mut Model, stats: &mut Stats| {
                    let (seen, h) = model.take(now, start, a, Mode::Take(None), stats);
                    (seen.allowed, seen, h)
                };
                let stock_ok = |left: u128| u128::from(b) <= left;
                let (allowed, denied_by) = if striped_first {
                    let (ok, seen, h) = striped(&mut model, &mut stats);
                    if !ok {
                        (false, Some(0))
                    } else if stock_ok(other_left) {
                        other_left -= u128::from(b);
                        (true, None)
                    } else {
                        if let Some(h) = h {
                            if model.cancel(now, &seen, &h) {
                                stats.cancels_given_back += 1;
                            }
                        }
                        (false, Some(1))
                    }
                } else if !stock_ok(other_left) {
                    (false, Some(0))
                } else {
                    let (ok, _, _) = striped(&mut model, &mut stats);
                    if ok {
                        other_left -= u128::from(b);
                        (true, None)
                    } else {
                        (false, Some(1))
                    }
                };
                assert_eq!(
                    (d.is_allowed(), d.denied_by()),
                    (allowed, denied_by),
                    "step {step}: check_all(a {a}, b {b}, striped first {striped_first}) at {now}"
                );
                assert_eq!(
                    u128::from(other.peek_n(0).remaining()),
                    other_left,
                    "step {step}: the other gate's stock after check_all"
                );
                if allowed {
                    stats.gates_allowed += 1;
                } else if denied_by == Some(1) {
                    stats.gates_rolled_back += 1;
                }
                if let Some(bd) = &mut bounds {
                    // A rolled-back charge is a rollback; an admitted one a check from `start`.
                    if denied_by == Some(1) && striped_first && a > 0 {
                        bd.off = true;
                    } else if allowed || denied_by == Some(1) {
                        let fits = u128::from(a) <= smallest_burst;
                        bd.check(step, start, u128::from(a), fits, allowed, now);
                    }
                }
            }
            Op::Advance(ns) => {
                // The manual clock saturates at the last representable instant.
                clock.advance_ns(u64::from(ns));
                now = (now + u128::from(ns)).min(HORIZON);
            }
            Op::AdvanceIntervals(k) => {
                let t = match &model {
                    Model::Gcra { t, .. } => *t,
                    Model::Stock { .. } => 1,
                };
                let ns = u128::from(k % 16) * t;
                if now + ns <= HORIZON {
                    clock.advance_ns(ns as u64);
                    now += ns;
                }
            }
            Op::Back(ns) => {
                now = now.saturating_sub(u128::from(ns));
                clock.set_ns(now as u64);
                stats.steps_back += 1;
            }
            Op::Restock(units) => {
                assert_eq!(
                    real.restock(units),
                    model.restock(units),
                    "step {step}: restock({units})"
                );
            }
            Op::Remaining => {
                let at = model.at(now);
                assert_eq!(
                    real.remaining(),
                    model.remaining(at),
                    "step {step}: remaining()"
                );
            }
        }
        if now != moved_from {
            if let Some(b) = &mut bounds {
                b.moved(now, now < moved_from);
            }
        }
        assert_eq!(clock.now() as u128, now);
    }
    stats
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ops(list: &[Op]) -> Vec<Op> {
        list.to_vec()
    }

    #[test]
    fn stock_gathers_and_gives_back() {
        run(&Input {
            kind: Kind::Stock { units: 10 },
            stripes: Some(3),
            time: TimeMode::Lagged,
            ops: ops(&[
                Op::Check { hint: 2, n: 3 },
                Op::Check { hint: 0, n: 5 }, // 4 + 3 + 0 left: gathered
                Op::Remaining,
                Op::Check { hint: 1, n: 7 }, // 2 left in all: given back
                Op::Remaining,
                Op::Check { hint: 1, n: 2 },
                Op::Check { hint: 1, n: 1 },
                Op::Remaining,
                Op::Restock(5),
                Op::Check { hint: 2, n: 5 },
                Op::Restock(u64::MAX),
                Op::Restock(4),
                Op::Check { hint: 0, n: 7 },
                Op::Remaining,
            ]),
        });
    }

    #[test]
    fn gcra_stripes_with_a_queue_and_a_clock_going_back() {
        for time in [TimeMode::Lagged, TimeMode::Strict, TimeMode::Relaxed] {
            gcra_with_a_queue(time);
        }
    }

    /// The issue's scenario (issue 14, item 3) from two stripes: by default the model's
    /// one-cell ceiling holds for it (the bounds are checked inside `run`).
    #[test]
    fn gcra_clock_back_across_stripes() {
        for time in [TimeMode::Lagged, TimeMode::Strict] {
            gcra_clock_back_across_stripes_in(time);
        }
    }

    fn gcra_clock_back_across_stripes_in(time: TimeMode) {
        run(&Input {
            kind: Kind::Gcra {
                count: 10,
                period: 1_000_000_000,
                exact: false,
                burst: Some(4),
                queue: 0,
            },
            stripes: Some(2),
            time,
            ops: ops(&[
                Op::Advance(u32::MAX),
                Op::Check { hint: 0, n: 1 },
                Op::Check { hint: 0, n: 1 },
                Op::Back(1_000_000_000),
                Op::Check { hint: 1, n: 1 },
                Op::Check { hint: 1, n: 1 },
                Op::Advance(1_000_000_000),
                Op::Check { hint: 1, n: 1 },
                Op::Check { hint: 1, n: 1 },
                Op::Check { hint: 1, n: 1 },
            ]),
        });
    }

    fn gcra_with_a_queue(time: TimeMode) {
        run(&Input {
            kind: Kind::Gcra {
                count: 10,
                period: 100,
                exact: true,
                burst: Some(7),
                queue: 3,
            },
            stripes: Some(4),
            time,
            ops: ops(&[
                Op::Check { hint: 0, n: 2 },
                Op::Check { hint: 0, n: 2 },
                Op::Check { hint: 3, n: 3 },
                Op::Remaining,
                Op::AdvanceIntervals(3),
                Op::Check { hint: 1, n: 1 },
                Op::Back(500),
                Op::Check { hint: 2, n: 1 },
                Op::Remaining,
                Op::Advance(u32::MAX),
                Op::Check { hint: 5, n: 7 },
                Op::Restock(1),
            ]),
        });
    }

    crate::corpus_tests!("striped_model", run);

    #[test]
    fn configuration_errors_match() {
        for (kind, stripes) in [
            (Kind::Stock { units: 3 }, Some(0)),
            (Kind::SlowGcra { burst: 3, queue: 0 }, Some(9)),
            (
                Kind::SlowGcra {
                    burst: 200,
                    queue: 9,
                },
                Some(100),
            ),
            (
                Kind::Gcra {
                    count: 0,
                    period: 5,
                    exact: false,
                    burst: None,
                    queue: 0,
                },
                None,
            ),
        ] {
            let err = build_model(kind, stripes, TimeMode::Lagged).err();
            assert!(err.is_some(), "{kind:?} over {stripes:?}");
            run(&Input {
                kind,
                stripes,
                time: TimeMode::Lagged,
                ops: Vec::new(),
            });
        }
    }
}
