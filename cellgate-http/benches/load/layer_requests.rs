//! Serves N requests through the layer (no network) and exits: for counting instructions per
//! request, which a loaded machine does not disturb the way it does timings.
//!
//! ```sh
//! cargo build --release -p cellgate-http --features metrics --example layer_requests
//! for m in bare off on; do for n in 100000 200000; do
//!   valgrind --tool=callgrind --callgrind-out-file=/dev/null \
//!     target/release/examples/layer_requests $m $n 2>&1 | grep Collected
//! done; done
//! ```
//!
//! (instructions at 200k - instructions at 100k) / 100k = instructions per request, setup
//! excluded. `bare`: the service without the layer; `off` / `on`: the layer with one `Global`
//! GCRA limit, metrics counting off / on; a third argument `deny` drains the limit first, so
//! that every request is denied. What the metrics add is smaller than the program
//! total's run-to-run swing: `metrics_instructions.sh` (beside this file) compares off and on
//! per function instead.

use std::convert::Infallible;
use std::future::Future;
use std::hint::black_box;
use std::pin::pin;
use std::process::ExitCode;
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};

use cellgate::{Limiter, Quota};
use cellgate_http::{Global, Limit, RateLimitLayer};
use tower::{Layer, Service};

struct NoopWake;

impl Wake for NoopWake {
    fn wake(self: Arc<Self>) {}
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (Some(mode), Some(Ok(n))) = (args.first(), args.get(1).map(|n| n.parse::<u64>())) else {
        eprintln!("usage: layer_requests on|off|bare N [deny]");
        return ExitCode::from(2);
    };
    // Admitting everything (a unit a nanosecond), or, with `deny`, nothing (drained, a unit
    // an hour).
    let deny = args.get(2).is_some_and(|a| a == "deny");
    let quota = if deny {
        Quota::per_hour(1)
    } else {
        Quota::new(1_000_000_000, std::time::Duration::from_secs(1))
    };
    let limiter = Limiter::gcra(quota).build().expect("a valid quota");
    if deny {
        limiter.check();
    }
    let builder = RateLimitLayer::builder().limit(Limit::new("global", Global, limiter));
    #[cfg(feature = "metrics")]
    let builder = builder.metrics(mode == "on");
    #[cfg(not(feature = "metrics"))]
    if mode == "on" {
        eprintln!("built without the `metrics` feature");
        return ExitCode::from(2);
    }
    let layer = builder.build().expect("a valid layer");
    let inner = tower::service_fn(|_r: http::Request<()>| async {
        Ok::<_, Infallible>(http::Response::new(String::new()))
    });
    let waker = Waker::from(Arc::new(NoopWake));
    let mut cx = Context::from_waker(&waker);
    let mut ok = 0u64;
    if mode == "bare" {
        let mut svc = inner;
        for _ in 0..n {
            if let Poll::Ready(Ok(r)) = pin!(svc.call(http::Request::new(()))).poll(&mut cx) {
                ok += u64::from(black_box(r.status().is_success()));
            }
        }
    } else {
        let mut svc = layer.layer(inner);
        for _ in 0..n {
            if let Poll::Ready(Ok(r)) = pin!(svc.call(http::Request::new(()))).poll(&mut cx) {
                ok += u64::from(black_box(r.status().is_success()));
            }
        }
    }
    println!("{ok} of {n} admitted");
    ExitCode::SUCCESS
}
