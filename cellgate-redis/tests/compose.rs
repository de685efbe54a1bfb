//! What the README says the fleet limiters compose with: `check_all` (a `Fleet` is a
//! `AnyLimiter<()>`, a `KeyedFleet` a `AnyLimiter<str>`, and one key of it, the pair
//! `(&fleet, "alice")`, a `AnyLimiter<()>`), all or nothing with in-process limiters, and
//! the HTTP layer.

use crate::common;

use std::convert::Infallible;
use std::future::Future;
use std::pin::pin;
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};
use std::time::{Duration, Instant};

use cellgate::{check_all, AnyLimiter, Limiter, PolicyKind};
use cellgate_http::{HeaderKey, Limit, RateLimitLayer};
use cellgate_redis::{Fleet, KeyedFleet};
use http::{Request, Response, StatusCode};
use tower::{Layer, Service};

/// A fleet stock beside a local stock of 1: the first pair is sold; the second is refused by
/// the local stock after the fleet admitted its unit, which comes back: the fleet then sells
/// the whole rest of its stock (without it, one unit short, until the deadline).
#[test]
fn a_fleet_in_check_all_is_all_or_nothing() {
    let Some(r) = common::redis() else { return };
    let stock = 5_000;
    let tickets = Fleet::stock("compose", stock).connect(&r.url()).unwrap();
    common::wait_for("a lease of two units", || tickets.stats().leased >= 2);
    let local = Limiter::stock(1).build().unwrap();
    let first = check_all([(&tickets, 1), (&local, 1)]);
    assert!(first.is_allowed(), "{first:?}");
    let second = check_all([(&tickets, 1), (&local, 1)]);
    assert!(second.decisions()[0].is_allowed(), "{second:?}");
    assert_eq!(second.denied_by(), Some(1), "the local stock refused");
    let mut sold = 1;
    let deadline = Instant::now() + Duration::from_secs(10);
    while sold < stock && Instant::now() < deadline {
        if tickets.check().is_allowed() {
            sold += 1;
        }
    }
    assert_eq!(
        sold, stock,
        "the fleet sold exactly its stock: the refused pair's unit came back"
    );
    tickets.shutdown();
}

fn per_user(url: &str, name: &str) -> KeyedFleet {
    KeyedFleet::rate(name, 1, Duration::from_secs(3_600))
        .burst(3)
        .max_wait(Duration::from_secs(2))
        .command_timeout(Duration::from_secs(1))
        .connect(url)
        .unwrap()
}

/// A keyed fleet limit through the trait: its policy, a key's burst and no more, and in
/// `check_all` beside an in-process limiter, a key at a time.
#[test]
fn a_keyed_fleet_is_a_cellgate_any_limiter_of_str_keys() {
    let Some(r) = common::redis() else { return };
    let users = per_user(&r.url(), "compose-users");
    let l: &dyn AnyLimiter<str> = &users;
    let p = l.policy();
    assert_eq!((p.kind(), p.limit()), (PolicyKind::Gcra, 3));
    assert_eq!(p.interval(), Some(Duration::from_secs(3_600)));
    assert_eq!(
        l.peek_n("alice", 1).remaining(),
        0,
        "a cold key: nothing leased"
    );
    for i in 0..3 {
        assert!(l.check_n("alice", 1).is_allowed(), "check {i}");
    }
    let d = l.check_n("alice", 1);
    assert!(!d.is_allowed(), "the burst is spent: {d:?}");
    assert!(d.retry_after().is_some());
    // In check_all: bob's unit and a local stock's, together.
    let local = Limiter::stock(1).build().unwrap();
    assert!(check_all([(&local, 1), (&(&users, "bob"), 1)]).is_allowed());
    // The local stock is sold out: bob's fleet budget is not asked (it comes after).
    let d = check_all([(&local, 1), (&(&users, "bob"), 1)]);
    assert_eq!(d.denied_by(), Some(0));
    assert!(
        l.check_n("bob", 2).is_allowed(),
        "bob used one unit of three"
    );
    assert!(!l.check_n("bob", 1).is_allowed());
    users.shutdown();
}

struct NoopWake;

impl Wake for NoopWake {
    fn wake(self: Arc<Self>) {}
}

/// A fleet-wide per-user limit behind the HTTP layer, keyed by a header (a `KeyedFleet` used
/// as the layer's limiter).
#[test]
fn a_keyed_fleet_limits_per_user_behind_the_http_layer() {
    let Some(r) = common::redis() else { return };
    let users = per_user(&r.url(), "compose-http");
    let layer = RateLimitLayer::builder()
        .limit(Limit::new("per-user", HeaderKey::new("x-user-id"), users))
        .build()
        .unwrap();
    let mut svc = layer.layer(tower::service_fn(|_r: Request<()>| async {
        Ok::<_, Infallible>(Response::new(String::new()))
    }));
    let waker = Waker::from(Arc::new(NoopWake));
    let mut cx = Context::from_waker(&waker);
    let mut status = |user: &str| {
        let req = Request::builder()
            .header("x-user-id", user)
            .body(())
            .unwrap();
        match pin!(svc.call(req)).poll(&mut cx) {
            Poll::Ready(resp) => resp.unwrap().status(),
            Poll::Pending => panic!("the handler is ready at once"),
        }
    };
    let carol: Vec<StatusCode> = (0..4).map(|_| status("carol")).collect();
    assert_eq!(
        carol,
        [
            StatusCode::OK,
            StatusCode::OK,
            StatusCode::OK,
            StatusCode::TOO_MANY_REQUESTS
        ]
    );
    assert_eq!(
        status("dave"),
        StatusCode::OK,
        "another user: another budget"
    );
}
