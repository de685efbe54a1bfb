//! An admitted request costs the layer no heap allocation: the keys are looked up in the
//! request head (borrowed where the extractor lends them), and what the layer keeps of the
//! request (decisions, reservations, the charges a stacked layer may have to give back) lives
//! in arrays on the stack and in the response future. Counted with a counting global
//! allocator (dhat's, in testing mode), calling the service directly through
//! `tower::Service` around an inner service whose future is ready at once and which itself
//! allocates nothing; the requests are built before counting.
//!
//! A file of its own: the allocator is the whole test binary's.

use std::convert::Infallible;
use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::pin::pin;
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};

use cellgate::{KeyedLimiter, Limiter, Quota};
use cellgate_http::{Global, HeaderDraft, HeaderKey, Limit, PeerAddr, PeerIp, RateLimitLayer};
use http::header::CONTENT_TYPE;
use http::{HeaderValue, Request, Response, StatusCode};
use tower::{Layer, Service};

#[global_allocator]
static ALLOC: dhat::Alloc = dhat::Alloc;

struct NoopWake;

impl Wake for NoopWake {
    fn wake(self: Arc<Self>) {}
}

/// Admits everything: a unit a nanosecond, a burst of a billion.
fn quota() -> Quota {
    Quota::new(1_000_000_000, std::time::Duration::from_secs(1))
}

fn per_ip(name: &str) -> Limit {
    let l = KeyedLimiter::<IpAddr>::gcra(quota()).build().unwrap();
    Limit::new(name, PeerIp::new(), l)
}

fn per_user(name: &str) -> Limit {
    let l = KeyedLimiter::<String>::gcra(quota()).build().unwrap();
    Limit::new(name, HeaderKey::new("x-user-id"), l)
}

fn global(name: &str) -> Limit {
    Limit::new(name, Global, Limiter::gcra(quota()).build().unwrap())
}

fn layer(limits: Vec<Limit>, headers: bool) -> RateLimitLayer {
    let mut b = RateLimitLayer::builder().draft(headers.then_some(HeaderDraft::Ietf11));
    for l in limits {
        b = b.limit(l);
    }
    b.build().unwrap()
}

/// A request of one of three users from one of three addresses.
fn request(i: usize) -> Request<()> {
    let mut req = Request::builder()
        .header("x-user-id", ["u1", "u2", "u3"][i % 3])
        .body(())
        .unwrap();
    let peer: SocketAddr = ["192.0.2.1:1", "192.0.2.2:2", "[2001:db8::1]:3"][i % 3]
        .parse()
        .unwrap();
    req.extensions_mut().insert(PeerAddr(peer));
    req
}

/// The handler: a response with a content type (so that the layer's fields join a map
/// that already has room, as a real handler's response does), allocating nothing.
fn handler() -> impl Service<
    Request<()>,
    Response = Response<String>,
    Error = Infallible,
    Future = impl Future<Output = Result<Response<String>, Infallible>>,
> + Clone {
    tower::service_fn(|_req: Request<()>| {
        let mut resp = Response::new(String::new());
        resp.headers_mut()
            .insert(CONTENT_TYPE, HeaderValue::from_static("text/plain"));
        std::future::ready(Ok(resp))
    })
}

/// Heap allocations per request made while serving `requests` through `svc` (each polled
/// once, its future ready at once), after as many requests to warm up (thread-locals, the
/// limiters' keys, the metrics rows).
fn allocations_per_request<S, B>(svc: &mut S, requests: usize) -> f64
where
    S: Service<Request<()>, Response = Response<B>>,
    S::Error: std::fmt::Debug,
{
    let waker = Waker::from(Arc::new(NoopWake));
    let mut cx = Context::from_waker(&waker);
    let mut serve = |reqs: Vec<Request<()>>| {
        for req in reqs {
            let Poll::Ready(resp) = pin!(svc.call(req)).poll(&mut cx) else {
                panic!("the inner service is ready at once");
            };
            assert_eq!(resp.unwrap().status(), StatusCode::OK);
        }
    };
    serve((0..requests).map(request).collect());
    let reqs: Vec<_> = (0..requests).map(request).collect();
    let before = dhat::HeapStats::get().total_blocks;
    serve(reqs);
    let after = dhat::HeapStats::get().total_blocks;
    (after - before) as f64 / requests as f64
}

#[test]
fn an_admitted_request_allocates_nothing_in_the_layer() {
    let _profiler = dhat::Profiler::builder().testing().build();
    const N: usize = 300;

    // The handler alone (its response's header map): the baseline, subtracted from every
    // figure below, so that they count what the layer allocates.
    let base = allocations_per_request(&mut handler(), N);

    // One layer, three limits of three key types (an address, a header's text, none),
    // without the IETF fields: nothing.
    let three = || vec![per_ip("ip"), per_user("user"), global("all")];
    let mut svc = layer(three(), false).layer(handler());
    assert_eq!(
        allocations_per_request(&mut svc, N) - base,
        0.0,
        "one layer"
    );

    // Eight limits in one layer: still in place.
    let eight: Vec<Limit> = (0..8)
        .map(|i| match i % 3 {
            0 => per_ip(&format!("ip{i}")),
            1 => per_user(&format!("user{i}")),
            _ => global(&format!("all{i}")),
        })
        .collect();
    let mut svc = layer(eight, false).layer(handler());
    assert_eq!(
        allocations_per_request(&mut svc, N) - base,
        0.0,
        "eight limits"
    );

    // Two stacked layers (a router's around a route's), each keeping what it charged in
    // case the other denies: nothing.
    let inner = layer(vec![per_user("user")], false).layer(handler());
    let mut svc = layer(vec![per_ip("ip"), global("all")], false).layer(inner);
    assert_eq!(
        allocations_per_request(&mut svc, N) - base,
        0.0,
        "stacked layers"
    );

    // With the IETF fields: one allocation per layer, the `RateLimit` value (its digits
    // change with every request); `RateLimit-Policy` is shared.
    let mut svc = layer(three(), true).layer(handler());
    assert_eq!(
        allocations_per_request(&mut svc, N) - base,
        1.0,
        "with the fields"
    );
}
