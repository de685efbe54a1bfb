//! The hot-key mode (`StripedLimiter`, GCRA and stock) against its reference model,
//! `cellgate_models::striped` (written from the `striped` module docs, in `u128` arithmetic;
//! its module docs state the rules and the bounds checked over runs of checks). This file is
//! the driver: the input, the real limiter on a `ManualClock` that moves both ways, this
//! thread's start stripe, and the comparison of every decision, `remaining()`, `restock`,
//! `cancel` and `check_all` with the model. Invalid configurations must be the documented
//! `ConfigError`s.

use std::time::Duration;

use std::cell::RefCell;
use std::collections::HashMap;

use arbitrary::Arbitrary;
use cellgate::clock::{Clock, ManualClock};
use cellgate::{AnyLimiter, ConfigError, Decision, Limiter, Quota, Reservation, StripedLimiter};

use cellgate_models::gcra::Expected;
use cellgate_models::striped::{self, Bounds, Config, Held, Mode, Model, Tally};

use crate::common::{check_pair, config_error, Observe, Seen};

const HORIZON: u128 = u64::MAX as u128;

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

impl TimeMode {
    fn model(self) -> striped::TimeMode {
        match self {
            TimeMode::Lagged => striped::TimeMode::Lagged,
            TimeMode::Strict => striped::TimeMode::Strict,
            TimeMode::Relaxed => striped::TimeMode::Relaxed,
        }
    }
}

/// What a decision shows, with its delay (0 when denied), as the model's plain struct.
fn shown(d: &Decision) -> Expected {
    Expected::with_delay(Seen::of(d), if d.is_allowed() { d.delay_ns() } else { 0 })
}

/// The model of the limiter `kind` asks for, or the `ConfigError` it must be.
fn build_model(kind: Kind, stripes: Option<u8>, time: TimeMode) -> Result<Model, ConfigError> {
    let config = match quota_of(kind) {
        None => {
            let Kind::Stock { units } = kind else {
                unreachable!("only stock has no quota")
            };
            Config::Stock {
                units: u32::from(units),
            }
        }
        Some(q) => Config::Gcra {
            count: q.count(),
            period: q.period(),
            burst: q.burst(),
            queue: q.queue(),
        },
    };
    striped::build(config, stripes.map(usize::from), time.model()).map_err(config_error)
}

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
    /// `charge(n)` (the `AnyLimiter` charge), kept for a later `Cancel`.
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

/// Replays `input` against the real limiter and the model; panics on the first difference.
pub fn run(input: &Input) -> Stats {
    take_first_tickets();
    let mut stats = Stats {
        inputs: 1,
        ..Stats::default()
    };
    let mut tally = Tally::default();
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
    let mut held: Vec<(Reservation, Expected, Option<Held>)> = Vec::new();
    for (step, op) in input.ops.iter().enumerate() {
        let moved_from = now;
        match *op {
            Op::Check { hint, n } => {
                let n = u32::from(n % 8);
                stats.checks += 1;
                let got = shown(&real.check_n_from(usize::from(hint), n));
                let s = real.stripes();
                let (want, _) = model.take(now, usize::from(hint), n, Mode::Take(None), &mut tally);
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
                let got = shown(&real.peek_n(n));
                let (want, _) = model.take(now, start, n, Mode::Peek, &mut tally);
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
                            AnyLimiter::reserve(&real, &(), n, Duration::from_nanos(ns as u64)),
                            Mode::Take(Some(ns)),
                        )
                    }
                    _ => (AnyLimiter::charge(&real, &(), n), Mode::Take(None)),
                };
                let got = shown(&r.decision());
                let (want, h) = model.take(now, start, n, mode, &mut tally);
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
                let got = AnyLimiter::cancel(&real, &(), r);
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
                let d = check_pair(striped_first, (&other, b), (&real, a));
                // The model: each charged in turn, the earlier ones cancelled on a denial.
                let striped = |model: &mut Model, tally: &mut Tally| {
                    let (seen, h) = model.take(now, start, a, Mode::Take(None), tally);
                    (seen.allowed, seen, h)
                };
                let stock_ok = |left: u128| u128::from(b) <= left;
                let (allowed, denied_by) = if striped_first {
                    let (ok, seen, h) = striped(&mut model, &mut tally);
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
                    let (ok, _, _) = striped(&mut model, &mut tally);
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
                    model.restock(units).map_err(config_error),
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
    stats.caught_up += tally.caught_up;
    stats.at_mark += tally.at_mark;
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

    /// A clock stepping back, checked from two stripes: by default the model's
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
        assert_eq!(
            striped::MAX_STRIPES,
            cellgate::MAX_STRIPES,
            "the model's stripe cap"
        );
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
