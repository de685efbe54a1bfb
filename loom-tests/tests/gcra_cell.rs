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

mod common;

use std::time::Duration;

use cellgate::clock::ManualClock;
use cellgate::{Decision, Limiter, Quota};
use loom::sync::Arc;
use loom::thread;

use common::permutations;

/// Emission interval of every model, ns.
const T: u64 = 100;
/// The frozen time: any instant after the origin (a fresh cell's TAT is 0, i.e. idle).
const NOW: u64 = 1_000;

/// Model-checks `f` with a loom builder configured from the environment
/// (`LOOM_MAX_PREEMPTIONS`, `LOOM_MAX_BRANCHES`, `LOOM_CHECKPOINT_FILE`, ...; an unset
/// `LOOM_MAX_PREEMPTIONS` means an exhaustive search), and reports how many interleavings it
/// explored and how long that took.
fn model(name: &str, f: impl Fn() + Sync + Send + 'static) {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let builder = loom::model::Builder::new();
    let bound = builder.preemption_bound;
    let iterations = std::sync::Arc::new(AtomicUsize::new(0));
    let counter = std::sync::Arc::clone(&iterations);
    let start = std::time::Instant::now();
    builder.check(move || {
        counter.fetch_add(1, Ordering::Relaxed);
        f();
    });
    eprintln!(
        "loom model {name}: {} interleavings in {:.2?} (preemption bound {})",
        iterations.load(Ordering::Relaxed),
        start.elapsed(),
        bound.map_or_else(|| "none: exhaustive".to_string(), |b| b.to_string()),
    );
}

/// `burst` requests per `burst * T` ns with burst `burst`: emission interval exactly `T`.
fn limiter(burst: u32, clock: &ManualClock) -> Limiter<ManualClock> {
    Limiter::gcra(Quota::new(burst, Duration::from_nanos(T * u64::from(burst))).with_burst(burst))
        .clock(clock.clone())
        .build()
        .expect("valid quota")
}

/// Each thread's decision, the limiter afterwards, and its clock.
type Outcome = (Vec<Decision>, Limiter<ManualClock>, ManualClock);

fn frozen_clock() -> ManualClock {
    let clock = ManualClock::new();
    clock.set_ns(NOW);
    clock
}

/// Runs `ops[i]` (a `check_n` count) on thread `i`, all concurrently on one limiter, and
/// returns each thread's decision plus the limiter (joined: every write is visible).
fn run_concurrently(burst: u32, ops: &[u32]) -> Outcome {
    let clock = frozen_clock();
    let lim = Arc::new(limiter(burst, &clock));
    let handles: Vec<_> = ops
        .iter()
        .map(|&n| {
            let lim = Arc::clone(&lim);
            thread::spawn(move || lim.check_n(n))
        })
        .collect();
    let decisions = handles
        .into_iter()
        .map(|h| h.join().expect("model thread panicked"))
        .collect();
    let lim = Arc::try_unwrap(lim).unwrap_or_else(|_| panic!("threads still hold the limiter"));
    (decisions, lim, clock)
}

/// What a serial run of `ops` in `order` gives, per thread (indexed like `ops`), and the
/// limiter afterwards.
fn serial(burst: u32, ops: &[u32], order: &[usize]) -> Outcome {
    let clock = frozen_clock();
    let lim = limiter(burst, &clock);
    let mut decisions = vec![None; ops.len()];
    for &i in order {
        decisions[i] = Some(lim.check_n(ops[i]));
    }
    (
        decisions.into_iter().map(Option::unwrap).collect(),
        lim,
        clock,
    )
}

/// The observable state of a limiter at the frozen time and after it: the peek now, then a
/// probe sequence that spends whatever is left one interval later. Two limiters with equal
/// probes hold the same TAT (`peek().reset_after()` is `TAT - now` whenever `TAT > now`).
fn observe(lim: &Limiter<ManualClock>, clock: &ManualClock) -> Vec<Decision> {
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

/// Asserts the concurrent outcome equals some serial order's outcome, decisions and final
/// state both; returns that order.
fn assert_linearizable(
    burst: u32,
    ops: &[u32],
    got: &[Decision],
    state: Vec<Decision>,
) -> Vec<usize> {
    for order in permutations(ops.len()) {
        let (want, lim, clock) = serial(burst, ops, &order);
        if want == got {
            assert_eq!(
                observe(&lim, &clock),
                state,
                "decisions match serial order {order:?} but the final state does not"
            );
            return order;
        }
    }
    panic!("no serial order of {ops:?} gives the decisions {got:#?}");
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
    model("two_checks_burst_one", || {
        let ops = [1, 1];
        let (got, lim, clock) = run_concurrently(1, &ops);
        assert_eq!(got.iter().filter(|d| d.is_allowed()).count(), 1, "{got:#?}");
        for d in &got {
            assert_eq!(d.remaining(), 0);
            assert_eq!(d.reset_after_ns(), T);
            if !d.is_allowed() {
                assert_eq!(d.retry_after_ns(), Some(T));
            }
        }
        let state = observe(&lim, &clock);
        assert_linearizable(1, &ops, &got, state);
    });
}

/// (b) Three threads, burst two: exactly two admitted, nothing left, and the cell holds what a
/// serial run leaves: one interval later exactly one more request fits.
#[test]
fn three_checks_burst_two() {
    model("three_checks_burst_two", || {
        let ops = [1, 1, 1];
        let (got, lim, clock) = run_concurrently(2, &ops);
        assert_eq!(got.iter().filter(|d| d.is_allowed()).count(), 2, "{got:#?}");
        let peek = lim.peek();
        assert_eq!(peek.remaining(), 0);
        assert_eq!(peek.reset_after_ns(), 2 * T, "TAT = now + 2T");
        // Serial outcome: after exactly one interval, exactly one more is admitted.
        let state = observe(&lim, &clock);
        let admitted_later = state[2..].iter().filter(|d| d.is_allowed()).count();
        assert_eq!(admitted_later, 1, "{state:#?}");
        assert_linearizable(2, &ops, &got, state);
    });
}

/// (c) `check_n(2)` races `check_n(1)` on a burst of two: never more than two units admitted,
/// and the outcome (decisions and final TAT) is one of the two serial orders.
#[test]
fn check_n_two_and_one_burst_two() {
    model("check_n_two_and_one_burst_two", || {
        let ops = [2, 1];
        let (got, lim, clock) = run_concurrently(2, &ops);
        assert!(admitted_units(&ops, &got) <= 2, "{got:#?}");
        // Whoever goes first fits, and then the other cannot.
        assert_eq!(got.iter().filter(|d| d.is_allowed()).count(), 1, "{got:#?}");
        let state = observe(&lim, &clock);
        assert_linearizable(2, &ops, &got, state);
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
