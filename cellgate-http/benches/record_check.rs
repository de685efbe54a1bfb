//! What recording a decision adds to a check: the target is at most 1 ns median per check with
//! metrics on. A whole request through the layer (about 300 ns, `metrics_overhead`) cannot
//! resolve 1 ns on a noisy machine; the check alone (tens of ns) can come closer. Each limiter
//! is checked on its own (`unrecorded`), and then with the layer's recording of the decision
//! (`recorded`: metrics on; `recorded_off`: a layer built with `.metrics(false)`, which still
//! tests whether it counts). The control is a second, identical unrecorded variant in the same
//! run (`unrecorded_again`): the difference between the two unrecorded figures is the floor of
//! the measurement.
//!
//! Two forms, one command:
//!
//! ```sh
//! cargo bench -p cellgate-http --features metrics --bench record_check
//! ```
//!
//! 1. `record_minus_check` (printed first, not criterion): the checks with and without
//!    recording, alternately in runs of 1,024 on one thread (which goes first alternates), so
//!    that the machine's load drifts over both alike; the median over 20,000 pairs of runs of
//!    (recorded - unrecorded) per check, and the same for two unrecorded runs as the control.
//!    Each check twice: compiled inline with its recording (`keyed`), and behind a call the
//!    compiler cannot inline (`keyed_called`), as the layer calls its limit through
//!    `Arc<dyn ErasedLimit>` and records after the call returns. The control's two loops run
//!    the same code from two places in the binary: what it shows beside zero is what code
//!    placement alone moves a figure by in that build.
//! 2. Criterion, each variant on its own, in the order unrecorded, recorded, unrecorded again,
//!    recorded_off (so that a drift in the machine over the run shows in the control).
//!
//! The checks are admitted (a quota of 10^9 per second) but for `direct_denied` and
//! `keyed_denied` (drained limiters), on one key, on the limiter's real clock, as the layer
//! would check them.

mod common;

use std::hint::black_box;
use std::time::{Duration, Instant};

use cellgate::{Decision, KeyedLimiter, Limiter, Quota};
use cellgate_http::BenchRecording;
use criterion::{criterion_group, Criterion};

/// A quota that admits every check of the benchmark.
fn quota() -> Quota {
    Quota::per_second(1_000_000_000)
}

/// Runs `each` on the checks measured: a direct GCRA limiter admitting, the same denying, and a
/// keyed one admitting and denying (a `u64` key in the default store, as `PeerIp` and the
/// other extractors key their limits). Generic, so that the inline form compiles each check
/// with its recording; the `_called` form then puts the same check behind a `&dyn Fn`.
macro_rules! for_each_check {
    ($each:ident $(, $arg:expr)*) => {{
        let direct = Limiter::gcra(quota()).build().unwrap();
        $each("direct", &|| direct.check() $(, $arg)*);
        // Drained (one per hour, its one unit taken): every check denied.
        let drained = Limiter::gcra(Quota::per_hour(1)).build().unwrap();
        drained.check();
        $each("direct_denied", &|| drained.check() $(, $arg)*);
        let keyed = KeyedLimiter::<u64>::gcra(quota()).build().unwrap();
        let key = 0x5eed_u64;
        $each("keyed", &|| keyed.check(black_box(&key)) $(, $arg)*);
        let keyed_drained = KeyedLimiter::<u64>::gcra(Quota::per_hour(1)).build().unwrap();
        keyed_drained.check(&key);
        $each("keyed_denied", &|| keyed_drained.check(black_box(&key)) $(, $arg)*);
    }};
}

/// One check, recorded by `rec` (or not), as the layer does it.
#[inline(always)]
fn step(check: &impl Fn() -> Decision, rec: Option<&BenchRecording>) {
    let d = check();
    if let Some(rec) = rec {
        rec.record(&d);
    }
    black_box(d);
}

fn criterion_variants(c: &mut Criterion) {
    let on = BenchRecording::new(true);
    let off = BenchRecording::new(false);
    let ran = std::cell::Cell::new(false);
    for_each_check!(criterion_one, c, &on, &off, &ran);
    // Something was counted if a recorded variant ran (a filter may leave them all out).
    assert_eq!(on.totals().iter().sum::<u64>() > 0, ran.get());
}

fn criterion_one(
    name: &str,
    check: &impl Fn() -> Decision,
    c: &mut Criterion,
    on: &BenchRecording,
    off: &BenchRecording,
    ran: &std::cell::Cell<bool>,
) {
    let mut g = c.benchmark_group(format!("record_check_{name}"));
    g.bench_function("unrecorded", |b| b.iter(|| step(check, None)));
    g.bench_function("recorded", |b| {
        ran.set(true);
        b.iter(|| step(check, Some(on)))
    });
    g.bench_function("unrecorded_again", |b| b.iter(|| step(check, None)));
    g.bench_function("recorded_off", |b| b.iter(|| step(check, Some(off))));
    g.finish();
}

/// The alternating form (see the module docs).
fn record_minus_check() {
    let on = BenchRecording::new(true);
    for_each_check!(alternate, &on);
    assert!(on.totals()[0] > 0);
}

fn alternate(name: &str, check: &impl Fn() -> Decision, on: &BenchRecording) {
    pairs(name, check, on);
    // As the layer runs it: the check behind a call the compiler cannot inline (the layer
    // calls its limit through `Arc<dyn ErasedLimit>`), so that both variants run the same
    // compiled check and differ only by the recording after it.
    let called: &dyn Fn() -> Decision = black_box(check);
    pairs(&format!("{name}_called"), &|| called(), on);
}

fn pairs(name: &str, check: &impl Fn() -> Decision, on: &BenchRecording) {
    const RUN: u32 = 1024;
    const PAIRS: usize = 20_000;
    // The recorder of the second run of each pair; `None` is the control.
    for (what, rec) in [("recorded", Some(on)), ("control_unrecorded", None)] {
        let unrecorded = || {
            let start = Instant::now();
            for _ in 0..RUN {
                step(check, None);
            }
            start.elapsed().as_secs_f64() * 1e9 / f64::from(RUN)
        };
        let second = || {
            let start = Instant::now();
            match rec {
                // Two loops, so that the test of `rec` is not inside the timed loop.
                Some(rec) => {
                    for _ in 0..RUN {
                        step(check, Some(rec));
                    }
                }
                None => {
                    for _ in 0..RUN {
                        step(check, None);
                    }
                }
            }
            start.elapsed().as_secs_f64() * 1e9 / f64::from(RUN)
        };
        // Warm-up: the row, the caches, the branch predictors.
        for _ in 0..200 {
            unrecorded();
            second();
        }
        let [q1, median, q3] = common::quartiles_of_differences(PAIRS, unrecorded, second);
        println!(
            "record_minus_check/{name}/{what}: median {:+.3} ns per check (quartiles {:+.3} .. {:+.3}; {PAIRS} pairs of {RUN}-check runs)",
            median, q1, q3
        );
    }
}

criterion_group! {
    name = benches;
    config = Criterion::default().warm_up_time(Duration::from_secs(1)).measurement_time(Duration::from_secs(3));
    targets = criterion_variants
}

fn main() {
    // `cargo bench ... -- FILTER`: the alternating runs go with the criterion groups unless a
    // filter leaves them out.
    let filter = std::env::args().skip(1).find(|a| !a.starts_with('-'));
    if filter
        .as_deref()
        .is_none_or(|f| "record_minus_check".contains(f))
    {
        record_minus_check();
    }
    benches();
    Criterion::default().configure_from_args().final_summary();
}
