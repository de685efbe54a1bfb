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
//! ```
//!
//! and the ceiling of the module docs, while the clock never goes back: all GCRA admissions
//! together at most `burst + queue + elapsed / T` units. Invalid configurations must be the
//! documented `ConfigError`s.

use std::time::Duration;

use arbitrary::Arbitrary;
use cellgate::clock::{Clock, ManualClock};
use cellgate::{ConfigError, Decision, Quota, StripedLimiter, MAX_STRIPES};

const HORIZON: u128 = u64::MAX as u128;
const NEVER: u64 = u64::MAX;

/// One fuzz input.
#[derive(Arbitrary, Debug, Clone)]
pub struct Input {
    pub kind: Kind,
    /// Stripes asked for: `Some(0)` must be an error; `None`: not set (the default).
    pub stripes: Option<u8>,
    pub ops: Vec<Op>,
}

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
}

/// A GCRA stripe: `(T_i, DVT_i, CEIL_i, tat)`.
#[derive(Debug, Clone, Copy)]
struct GStripe {
    t: u128,
    dvt: u128,
    ceil: u128,
    tat: u128,
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
    /// The stripe's decision on `n` at `now` (whole `limit`), and the TAT to write if admitted.
    fn step(&self, now: u128, n: u128, limit: u32) -> (Seen, Option<u128>) {
        let backlog = self.tat.saturating_sub(now);
        let need = n * self.t;
        let ahead = backlog + need;
        let fits = need <= self.dvt;
        if fits && ahead <= self.ceil {
            if now + ahead <= HORIZON {
                let seen = Seen {
                    allowed: true,
                    limit,
                    remaining: cap32((self.ceil - ahead) / self.t),
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
            let r = ahead - self.ceil;
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

fn build_model(kind: Kind, stripes: Option<u8>) -> Result<Model, ConfigError> {
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
        });
    }
    Ok(Model::Gcra {
        stripes: out,
        limit: cap32(b + queue),
        t,
        whole: b + queue,
    })
}

impl Model {
    fn check(&mut self, now: u128, hint: usize, n: u32) -> Seen {
        match self {
            Model::Gcra { stripes, limit, .. } => {
                let s = stripes.len();
                let start = hint % s;
                let mut denied: Option<Seen> = None;
                for k in 0..s {
                    let i = (start + k) % s;
                    let (seen, write) = stripes[i].step(now, u128::from(n), *limit);
                    if seen.allowed {
                        if let Some(tat) = write {
                            stripes[i].tat = tat;
                        }
                        return seen;
                    }
                    denied = match denied {
                        None => Some(seen),
                        Some(d) => match (seen.retry, d.retry) {
                            (Some(_), None) => Some(seen),
                            (Some(a), Some(b)) if a < b => Some(seen),
                            _ => Some(d),
                        },
                    };
                }
                denied.expect("at least one stripe")
            }
            Model::Stock { stripes, limit } => {
                let s = stripes.len();
                let start = hint % s;
                let n = u128::from(n);
                let reset = |share: u128, left: u128| if left == share { 0 } else { NEVER };
                let mut first: Option<Seen> = None;
                for k in 0..s {
                    let i = (start + k) % s;
                    let (share, left) = stripes[i];
                    if n <= left {
                        stripes[i].1 = left - n;
                        return Seen {
                            allowed: true,
                            limit: *limit,
                            remaining: cap32(left - n),
                            retry: None,
                            delay: 0,
                            reset: reset(share, left - n),
                        };
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
                                    return Seen {
                                        allowed: true,
                                        limit: *limit,
                                        remaining: cap32(stripes[i].1),
                                        retry: None,
                                        delay: 0,
                                        reset: NEVER,
                                    };
                                }
                            }
                        }
                        unreachable!("the total held n units");
                    }
                }
                first.expect("at least one stripe")
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

/// Replays `input` against the real limiter and the model; panics on the first difference.
pub fn run(input: &Input) {
    let clock = ManualClock::new();
    let mut builder = match (input.kind, quota_of(input.kind)) {
        (Kind::Stock { units }, _) => StripedLimiter::stock(u32::from(units)),
        (_, Some(q)) => StripedLimiter::gcra(q),
        (_, None) => unreachable!("only stock has no quota"),
    };
    if let Some(s) = input.stripes {
        builder = builder.stripes(usize::from(s));
    }
    let (real, mut model) = match (
        builder.clock(clock.clone()).build(),
        build_model(input.kind, input.stripes),
    ) {
        (Ok(r), Ok(m)) => (r, m),
        (Err(a), Err(b)) => {
            assert_eq!(a, b, "configuration error");
            return;
        }
        (r, m) => panic!(
            "build: real {:?}, model {:?}",
            r.map(|r| r.stripes()),
            m.map(|_| ())
        ),
    };
    let mut now: u128 = 0;
    // Units admitted by GCRA since `origin`, the clock's furthest point so far when it last
    // went back (the ceiling is asserted only over stretches where it never goes back).
    let mut admitted: u128 = 0;
    let mut origin: u128 = 0;
    for (step, op) in input.ops.iter().enumerate() {
        match *op {
            Op::Check { hint, n } => {
                let n = u32::from(n % 8);
                let got = Seen::of(&real.check_n_from(usize::from(hint), n));
                let want = model.check(now, usize::from(hint), n);
                assert_eq!(got, want, "step {step}: check_n_from({hint}, {n}) at {now}");
                if let Model::Gcra { t, whole, .. } = &model {
                    if got.allowed {
                        admitted += u128::from(n);
                    }
                    assert!(
                        admitted <= whole + (now - origin) / t,
                        "step {step}: {admitted} units admitted in {} ns",
                        now - origin
                    );
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
                // A new stretch for the ceiling starts here (the cells keep their TATs, so
                // the clock going back can only make later admissions rarer).
                admitted = 0;
                origin = now;
            }
            Op::Restock(units) => {
                assert_eq!(
                    real.restock(units),
                    model.restock(units),
                    "step {step}: restock({units})"
                );
            }
            Op::Remaining => {
                let clock_now = if matches!(model, Model::Stock { .. }) {
                    0
                } else {
                    now
                };
                assert_eq!(
                    real.remaining(),
                    model.remaining(clock_now),
                    "step {step}: remaining()"
                );
            }
        }
        assert_eq!(clock.now() as u128, now);
    }
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
        run(&Input {
            kind: Kind::Gcra {
                count: 10,
                period: 100,
                exact: true,
                burst: Some(7),
                queue: 3,
            },
            stripes: Some(4),
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
            let err = build_model(kind, stripes).err();
            assert!(err.is_some(), "{kind:?} over {stripes:?}");
            run(&Input {
                kind,
                stripes,
                ops: Vec::new(),
            });
        }
    }
}
