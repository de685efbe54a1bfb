//! The layer's own cost per request, metrics counting on and off, in the same run: one thread,
//! and two threads on one hot key; first, the difference on minus off measured directly, in
//! alternating short runs (`on_minus_off`, and `two_threads_on_over_off` for two threads). No network: the service is called and its (ready) future polled
//! directly, so the figures are the layer's work alone.
//!
//! ```sh
//! cargo bench -p cellgate-http --features metrics --bench metrics_overhead
//! ```

mod common;

use std::convert::Infallible;
use std::future::Future;
use std::hint::black_box;
use std::pin::pin;
use std::sync::{Arc, Barrier};
use std::task::{Context, Poll, Wake, Waker};
use std::time::{Duration, Instant};

use cellgate::{Limiter, Quota};
use cellgate_http::{Global, Limit, RateLimitLayer};
use criterion::{criterion_group, Criterion};
use tower::{Layer, Service};

struct NoopWake;

impl Wake for NoopWake {
    fn wake(self: Arc<Self>) {}
}

fn layer(metrics: bool, admit: bool) -> RateLimitLayer {
    // A limit that always admits, or one that is drained and always denies.
    let limiter = if admit {
        Limiter::gcra(Quota::per_second(1_000_000_000))
            .build()
            .unwrap()
    } else {
        Limiter::gcra(Quota::per_hour(1)).build().unwrap()
    };
    if !admit {
        limiter.check();
    }
    RateLimitLayer::builder()
        .limit(Limit::new("global", Global, limiter))
        .metrics(metrics)
        .build()
        .unwrap()
}

/// Builds the limited service and returns a closure that serves one request.
fn service(layer: &RateLimitLayer) -> impl FnMut() -> u16 + use<> {
    let mut svc = layer.layer(tower::service_fn(|_r: http::Request<()>| async {
        Ok::<_, Infallible>(http::Response::new(String::new()))
    }));
    let waker = Waker::from(Arc::new(NoopWake));
    move || {
        let mut cx = Context::from_waker(&waker);
        let fut = svc.call(http::Request::new(()));
        match pin!(fut).poll(&mut cx) {
            Poll::Ready(Ok(resp)) => resp.status().as_u16(),
            _ => unreachable!("the inner service is always ready"),
        }
    }
}

fn one_thread(c: &mut Criterion) {
    let mut g = c.benchmark_group("layer_one_thread");
    // The same request and response through the bare service: what the layer adds is the rest.
    let mut bare = tower::service_fn(|_r: http::Request<()>| async {
        Ok::<_, Infallible>(http::Response::new(String::new()))
    });
    let waker = Waker::from(Arc::new(NoopWake));
    g.bench_function("no_layer", |b| {
        b.iter(|| {
            let mut cx = Context::from_waker(&waker);
            let fut = bare.call(http::Request::new(()));
            match pin!(fut).poll(&mut cx) {
                Poll::Ready(Ok(resp)) => black_box(resp.status().as_u16()),
                _ => unreachable!("the service is always ready"),
            }
        })
    });
    for (name, admit) in [("admit", true), ("deny", false)] {
        for metrics in [false, true] {
            let l = layer(metrics, admit);
            let mut serve = service(&l);
            let id = format!("{name}/metrics_{}", if metrics { "on" } else { "off" });
            g.bench_function(id, |b| b.iter(|| black_box(serve())));
        }
    }
    g.finish();
}

fn two_threads_hot_key(c: &mut Criterion) {
    let mut g = c.benchmark_group("layer_two_threads_hot_key");
    for metrics in [false, true] {
        let l = layer(metrics, true);
        let id = format!("admit/metrics_{}", if metrics { "on" } else { "off" });
        g.bench_function(id, |b| {
            b.iter_custom(|iters| {
                let barrier = Arc::new(Barrier::new(2));
                let workers: Vec<_> = (0..2)
                    .map(|_| {
                        let l = l.clone();
                        let barrier = barrier.clone();
                        std::thread::spawn(move || {
                            let mut serve = service(&l);
                            barrier.wait();
                            let start = Instant::now();
                            for _ in 0..iters {
                                black_box(serve());
                            }
                            start.elapsed()
                        })
                    })
                    .collect();
                // Time per request of the pair: the slower thread's time over both threads' work.
                let slowest = workers
                    .into_iter()
                    .map(|w| w.join().unwrap())
                    .max()
                    .unwrap_or(Duration::ZERO);
                slowest / 2
            })
        });
    }
    g.finish();
}

/// What counting adds, measured directly: requests through a layer with metrics off and one
/// with them on, alternately in short runs of 256 on one thread (which of the two goes first
/// alternates too), so that the machine's load drifts over both alike. Prints the median and
/// quartiles over 10,000 pairs of runs of (on time - off time) per request, and the same for two
/// layers with metrics off as a control. Not a criterion
/// benchmark: criterion sizes its samples by the time measured, which here is a small
/// difference of two large times.
fn on_minus_off() {
    const RUN: u32 = 256;
    const PAIRS: usize = 10_000;
    // The control: two layers with metrics off, the second in the place of `on`; what it
    // shows is the floor of this measurement (and any difference between two instances).
    for (name, admit, second) in [
        ("admit", true, true),
        ("deny", false, true),
        ("admit_control_off_minus_off", true, false),
        ("deny_control_off_minus_off", false, false),
    ] {
        let (off, on) = (layer(false, admit), layer(second, admit));
        let (mut serve_off, mut serve_on) = (service(&off), service(&on));
        let run = |serve: &mut dyn FnMut() -> u16| {
            let start = Instant::now();
            for _ in 0..RUN {
                black_box(serve());
            }
            start.elapsed().as_secs_f64() * 1e9 / f64::from(RUN)
        };
        // Warm-up: the rows, the allocator, the caches.
        for _ in 0..50 {
            run(&mut serve_off);
            run(&mut serve_on);
        }
        let [q1, median, q3] =
            common::quartiles_of_differences(PAIRS, || run(&mut serve_off), || run(&mut serve_on));
        println!(
            "metrics_on_minus_off/{name}: median {:+.2} ns per request (quartiles {:+.2} .. {:+.2}; {PAIRS} pairs of {RUN}-request runs)",
            median, q1, q3
        );
    }
}

/// Two threads on one hot key, metrics on against off, in alternating runs: two worker
/// threads, each with its own service of each layer, serve 2,048 requests each per run,
/// started together; a run's time is the slower thread's. Prints the median and quartiles over
/// 2,000 pairs of runs of on time / off time (which of the two goes first alternates), and the
/// same for two layers with metrics off as the control. Criterion's figures for two threads
/// (`layer_two_threads_hot_key`) move between two levels, about 165 and 300 ns a request on the
/// 2-vCPU VM, from one run to the next whatever the setting; pairs of short runs see both
/// settings at the same level.
fn two_threads_on_over_off() {
    const RUN: u32 = 2048;
    const PAIRS: usize = 2_000;
    for (name, second) in [("admit", true), ("admit_control_off_over_off", false)] {
        let layers = [layer(false, true), layer(second, true)];
        let start = Arc::new(Barrier::new(2));
        let (done_tx, done_rx) = std::sync::mpsc::channel();
        let orders: Vec<_> = (0..2)
            .map(|_| {
                let (tx, rx) = std::sync::mpsc::channel::<Option<usize>>();
                let layers = layers.clone();
                let (start, done) = (start.clone(), done_tx.clone());
                std::thread::spawn(move || {
                    let mut serve = [service(&layers[0]), service(&layers[1])];
                    while let Ok(Some(which)) = rx.recv() {
                        start.wait();
                        let t = Instant::now();
                        for _ in 0..RUN {
                            black_box(serve[which]());
                        }
                        done.send(t.elapsed()).unwrap();
                    }
                });
                tx
            })
            .collect();
        let run = |which: usize| {
            for o in &orders {
                o.send(Some(which)).unwrap();
            }
            let slowest = done_rx.recv().unwrap().max(done_rx.recv().unwrap());
            slowest.as_secs_f64() * 1e9 / f64::from(2 * RUN)
        };
        for _ in 0..100 {
            run(0);
            run(1);
        }
        let [q1, median, q3] =
            common::quartiles_of_pairs(PAIRS, || run(0), || run(1), |off, on| on / off);
        for o in &orders {
            o.send(None).unwrap();
        }
        println!(
            "metrics_two_threads_on_over_off/{name}: median {median:.3} (quartiles {q1:.3} .. {q3:.3}; {PAIRS} pairs of runs of 2 x {RUN} requests)",
        );
    }
}

criterion_group! {
    name = benches;
    config = Criterion::default().warm_up_time(Duration::from_secs(1)).measurement_time(Duration::from_secs(3));
    targets = one_thread, two_threads_hot_key
}

fn main() {
    // `cargo bench ... -- FILTER`: the alternating runs go with the criterion groups unless
    // a filter leaves them out.
    let filter = std::env::args().skip(1).find(|a| !a.starts_with('-'));
    if filter
        .as_deref()
        .is_none_or(|f| "metrics_on_minus_off".contains(f))
    {
        on_minus_off();
    }
    if filter
        .as_deref()
        .is_none_or(|f| "metrics_two_threads_on_over_off".contains(f))
    {
        two_threads_on_over_off();
    }
    benches();
    Criterion::default().configure_from_args().final_summary();
}
