//! Loom models of the direct GCRA limiter: the real `cellgate::Limiter`, whose cell's
//! `AtomicU64` is loom's under `cfg(loom)`, shared by loom threads.
//!
//! Every model freezes the clock (a `ManualClock`, set from the main thread before any thread
//! is spawned, so its std atomic needs no modelling) and checks that the concurrent run is
//! *linearizable*: the decisions the threads got, and the state the cell is left in, are
//! exactly those of running the same requests one after another in some order on a fresh
//! limiter. With a frozen clock every order is a legal linearization, so the check is: there
//! is a permutation of the threads whose serial replay gives the same decision to every
//! thread and the same final state.
//!
//! Run: `RUSTFLAGS="--cfg loom" LOOM_MAX_PREEMPTIONS=3 cargo test --release`.

use std::time::Duration;

use cellgate::clock::ManualClock;
use cellgate::{Decision, Limiter, Quota};
use loom::sync::Arc;
use loom::thread;

use crate::common::{check_linearizable, model, serial_outcomes, Scenario};

/// Emission interval of every model, ns.
const T: u64 = 100;
/// The frozen time: any instant after the origin (a fresh cell's TAT is 0, i.e. idle).
const NOW: u64 = 1_000;

/// `burst` requests per `burst * T` ns with burst `burst`: emission interval exactly `T`.
fn limiter(burst: u32, clock: &ManualClock) -> Limiter<ManualClock> {
    Limiter::gcra(Quota::new(burst, Duration::from_nanos(T * u64::from(burst))).with_burst(burst))
        .clock(clock.clone())
        .build()
        .expect("valid quota")
}

fn frozen_clock() -> ManualClock {
    let clock = ManualClock::new();
    clock.set_ns(NOW);
    clock
}

/// Concurrent `check_n`s on one direct limiter: `ops[i]` is thread `i`'s count.
#[derive(Clone, Copy)]
struct Checks {
    burst: u32,
    ops: &'static [u32],
}

impl Scenario for Checks {
    type Subject = Limiter<ManualClock>;
    type Clock = ManualClock;
    type Op = u32;
    type Got = Decision;
    type Observed = Vec<Decision>;

    /// Every check on a thread of its own.
    const LAST_ON_MAIN: bool = false;

    fn ops(&self) -> &[u32] {
        self.ops
    }

    fn start(&self) -> (Limiter<ManualClock>, ManualClock) {
        let clock = frozen_clock();
        (limiter(self.burst, &clock), clock)
    }

    fn apply(&self, lim: &Limiter<ManualClock>, n: u32) -> Decision {
        lim.check_n(n)
    }

    /// The observable state of a limiter at the frozen time and after it: the peek now, then a
    /// probe sequence that spends whatever is left one interval later. Two limiters with equal
    /// probes hold the same TAT (`peek().reset_after()` is `TAT - now` whenever `TAT > now`).
    fn observe(&self, lim: &Limiter<ManualClock>, clock: &ManualClock) -> Vec<Decision> {
        let mut seen = vec![lim.peek()];
        clock.advance_ns(T);
        seen.push(lim.peek());
        loop {
            let d = lim.check();
            seen.push(d);
            if !d.is_allowed() {
                break;
            }
        }
        seen
    }
}

impl Checks {
    /// Model-checks the checks: the decisions and final state of every execution are those of
    /// one serial order, and `extra` holds on them.
    fn check(self, name: &str, extra: fn(&[u32], &[Decision], &[Decision])) {
        let ops = self.ops;
        check_linearizable(name, &self, serial_outcomes(&self), move |got, state| {
            extra(ops, got, state)
        });
    }
}

fn admitted_units(ops: &[u32], got: &[Decision]) -> u64 {
    ops.iter()
        .zip(got)
        .filter(|(_, d)| d.is_allowed())
        .map(|(&n, _)| u64::from(n))
        .sum()
}

/// (a) Two threads race for a burst of one: exactly one wins; the loser is told to retry after
/// exactly one interval.
#[test]
fn two_checks_burst_one() {
    Checks {
        burst: 1,
        ops: &[1, 1],
    }
    .check("two_checks_burst_one", |_, got, _| {
        assert_eq!(got.iter().filter(|d| d.is_allowed()).count(), 1, "{got:#?}");
        for d in got {
            assert_eq!(d.remaining(), 0);
            assert_eq!(d.reset_after_ns(), T);
            if !d.is_allowed() {
                assert_eq!(d.retry_after_ns(), Some(T));
            }
        }
    });
}

/// (b) Three threads, burst two: exactly two admitted, nothing left, and the cell holds what a
/// serial run leaves: one interval later exactly one more request fits.
#[test]
fn three_checks_burst_two() {
    Checks {
        burst: 2,
        ops: &[1, 1, 1],
    }
    .check("three_checks_burst_two", |_, got, state| {
        assert_eq!(got.iter().filter(|d| d.is_allowed()).count(), 2, "{got:#?}");
        let peek = state[0];
        assert_eq!(peek.remaining(), 0);
        assert_eq!(peek.reset_after_ns(), 2 * T, "TAT = now + 2T");
        // Serial outcome: after exactly one interval, exactly one more is admitted.
        let admitted_later = state[2..].iter().filter(|d| d.is_allowed()).count();
        assert_eq!(admitted_later, 1, "{state:#?}");
    });
}

/// (c) `check_n(2)` races `check_n(1)` on a burst of two: never more than two units admitted,
/// and the outcome (decisions and final TAT) is one of the two serial orders.
#[test]
fn check_n_two_and_one_burst_two() {
    Checks {
        burst: 2,
        ops: &[2, 1],
    }
    .check("check_n_two_and_one_burst_two", |ops, got, _| {
        assert!(admitted_units(ops, got) <= 2, "{got:#?}");
        // Whoever goes first fits, and then the other cannot.
        assert_eq!(got.iter().filter(|d| d.is_allowed()).count(), 1, "{got:#?}");
    });
}

/// (d) A peek racing a check sees the cell either before or after the check, never anything
/// else, and changes nothing.
#[test]
fn peek_during_check() {
    model("peek_during_check", || {
        let clock = frozen_clock();
        let lim = Arc::new(limiter(2, &clock));
        let before = lim.peek();
        let checker = {
            let lim = Arc::clone(&lim);
            thread::spawn(move || lim.check())
        };
        let peeker = {
            let lim = Arc::clone(&lim);
            thread::spawn(move || lim.peek())
        };
        let d = checker.join().unwrap();
        let seen = peeker.join().unwrap();
        assert!(d.is_allowed());
        let after = lim.peek();
        assert!(seen == before || seen == after, "peek saw {seen:?}");
        assert_eq!(after.remaining(), 1);
        assert_eq!(after.reset_after_ns(), T);
    });
}
