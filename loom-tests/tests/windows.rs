//! Loom models of the window algorithms with a *moving* clock: the real `cellgate::Limiter`
//! (its cell's `AtomicU64` is loom's under `cfg(loom)`), driven by a clock that is itself a loom
//! atomic, so loom explores one thread moving the clock across a window boundary while two
//! others read it and check.
//!
//! With time moving, a request's decision depends on the instant its thread read the clock as
//! well as on its place in the cell's modification order, and the two need not agree: a thread
//! can read the old time, be overtaken by a thread that read the new time and counted in the
//! next window, and only then reach the cell (so the cell sees time go backwards). The
//! linearizability check therefore accepts any order of the requests combined with any
//! assignment of the clock's two values to them, replayed one at a time; on top of that, each
//! model asserts the quota itself (at most `limit` admitted per fixed window; exactly one of the
//! two racing requests admitted in the sliding window, which is what the two-window estimate
//! allows in every case), and observes the final state by peeking and checking at later
//! instants.
//!
//! Run: `RUSTFLAGS="--cfg loom" LOOM_MAX_PREEMPTIONS=3 cargo test --release`.

use std::time::Duration;

use cellgate::{Decision, Limiter};
use loom::sync::Arc;
use loom::thread;

use crate::common::{assert_serial, model, permutations, serially, LoomClock};

/// Window length, ns.
const W: u64 = 100;
/// Near the end of window 0.
const T0: u64 = W - 10;
/// Early in window 1.
const T1: u64 = W + 10;
/// Instants at which the final state is observed: window 1 (where the race ends) and window 2.
const PROBES: [u64; 2] = [T1, 2 * W + 10];

type Build = fn(&LoomClock) -> Limiter<LoomClock>;

/// One window scenario: two threads check while the main thread moves the clock from `T0` to
/// `T1`; `setup` runs at `T0` before the threads start.
#[derive(Clone, Copy)]
struct Scenario {
    build: Build,
    limit: u32,
    setup: fn(&Limiter<LoomClock>),
}

/// The final state: per probe instant, a peek and then checks until the first denial.
type Observed = Vec<Vec<Decision>>;

fn observe(lim: &Limiter<LoomClock>, clock: &LoomClock, limit: u32) -> Observed {
    PROBES
        .iter()
        .map(|&t| {
            clock.set(t);
            let mut seen = vec![lim.peek()];
            for _ in 0..=limit {
                let d = lim.check();
                seen.push(d);
                if !d.is_allowed() {
                    break;
                }
            }
            seen
        })
        .collect()
}

impl Scenario {
    fn start(&self, clock: &LoomClock) -> Limiter<LoomClock> {
        let lim = (self.build)(clock);
        (self.setup)(&lim);
        lim
    }

    /// Every serial outcome: each order of the two checks, each check at `T0` or `T1`.
    fn serial_outcomes(&self) -> Vec<(String, [Decision; 2], Observed)> {
        let s = *self;
        serially(move || {
            let mut out = Vec::new();
            for times in [[T0, T0], [T0, T1], [T1, T0], [T1, T1]] {
                for order in permutations(2) {
                    let clock = LoomClock::at(T0);
                    let lim = s.start(&clock);
                    let mut got = [None; 2];
                    for &i in &order {
                        clock.set(times[i]);
                        got[i] = Some(lim.check());
                    }
                    let got = got.map(Option::unwrap);
                    let seen = observe(&lim, &clock, s.limit);
                    out.push((format!("order {order:?} at {times:?}"), got, seen));
                }
            }
            out
        })
    }

    /// Model-checks the scenario; `extra` asserts the quota on each explored execution.
    fn check(&self, name: &str, extra: fn(&[Decision; 2], &Observed)) {
        let serial = self.serial_outcomes();
        let s = *self;
        // Which serial runs the explored executions matched (the first match of each).
        let matched = std::sync::Arc::new(std::sync::Mutex::new(std::collections::BTreeSet::new()));
        let seen_runs = std::sync::Arc::clone(&matched);
        model(name, move || {
            let clock = LoomClock::at(T0);
            let lim = Arc::new(s.start(&clock));
            let handles = [0, 1].map(|_| {
                let lim = Arc::clone(&lim);
                thread::spawn(move || lim.check())
            });
            // Thread C (the main thread): the clock moves into window 1.
            clock.set(T1);
            let got = handles.map(|h| h.join().expect("model thread panicked"));
            let lim =
                Arc::try_unwrap(lim).unwrap_or_else(|_| panic!("threads still hold the limiter"));
            let seen = observe(&lim, &clock, s.limit);
            extra(&got, &seen);
            let how = assert_serial(&serial, &got, &seen);
            seen_runs.lock().unwrap().insert(how);
        });
        eprintln!(
            "  {name}: matched serial runs {:?}",
            matched.lock().unwrap()
        );
    }
}

/// The window an admitted fixed-window decision was counted in, from its `reset_after` (the
/// time to the end of that window): 10 ns at `T0` means window 0, `W - 10` at `T1` window 1.
fn fixed_window_of(d: &Decision) -> usize {
    match d.reset_after_ns() {
        r if r == W - T0 => 0,
        r if r == 2 * W - T1 => 1,
        r => panic!("an admission at neither instant: reset_after {r} ns: {d:?}"),
    }
}

/// Fixed window, limit 1, rollover racing two checks: at most one admission is counted in each
/// window, and window 1's unit is spent exactly once over the whole run (by a racing thread or,
/// if neither got it, by the probe afterwards).
#[test]
fn fixed_window_rollover() {
    Scenario {
        build: |clock| {
            Limiter::fixed_window(1, Duration::from_nanos(W))
                .clock(clock.clone())
                .build()
                .expect("valid window")
        },
        limit: 1,
        setup: |_| {},
    }
    .check("fixed_window_rollover", |got, seen| {
        let mut per_window = [0; 2];
        for d in got.iter().filter(|d| d.is_allowed()) {
            per_window[fixed_window_of(d)] += 1;
        }
        // The probe at T1 (window 1) spends whatever window 1 has left.
        per_window[1] += seen[0][1..].iter().filter(|d| d.is_allowed()).count();
        assert!(per_window[0] <= 1, "window 0 over its limit: {got:#?}");
        assert_eq!(
            per_window[1], 1,
            "window 1 over its limit, or its unit lost: {got:#?} {seen:#?}"
        );
    });
}

/// Sliding window, limit 2, rollover racing two checks after one admission at `T0`. At `T0` one
/// unit is left; at `T1` the previous window weighs 90% of its count, so one more fits after
/// one admission in window 0 and none after two. Exactly one of the racing checks is admitted,
/// whatever instant each one read and in whatever order they reach the cell.
#[test]
fn sliding_window_rollover() {
    Scenario {
        build: |clock| {
            Limiter::sliding_window(2, Duration::from_nanos(W))
                .clock(clock.clone())
                .build()
                .expect("valid window")
        },
        limit: 2,
        setup: |lim| assert!(lim.check().is_allowed()),
    }
    .check("sliding_window_rollover", |got, seen| {
        assert_eq!(
            got.iter().filter(|d| d.is_allowed()).count(),
            1,
            "the two-window estimate allows exactly one more: {got:#?}"
        );
        // Nothing more fits at T1 afterwards: the probe's first check is denied.
        assert!(!seen[0][1].is_allowed(), "over the limit at T1: {seen:#?}");
    });
}
