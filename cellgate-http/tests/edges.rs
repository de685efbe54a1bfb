//! The layer at its edges, with a real server and client on 127.0.0.1: stacked cellgate
//! layers are all or nothing, and a request whose key cannot be extracted still meets the
//! limits whose keys were extracted.

mod common;

use std::net::IpAddr;
use std::sync::Arc;

use axum::routing::get;
use axum::Router;
use cellgate::clock::ManualClock;
use cellgate::{KeyedLimiter, Limiter, Quota};
use cellgate_http::{Global, HeaderKey, Limit, PeerIp, RateLimitLayer};
use common::{get as fetch, serve};
use http::StatusCode;

const LOCAL: IpAddr = IpAddr::V4(std::net::Ipv4Addr::LOCALHOST);

fn one(limit: Limit) -> RateLimitLayer {
    RateLimitLayer::builder().limit(limit).build().unwrap()
}

/// A router-level per-IP layer around a route-level per-user layer (a common setup): the
/// per-user layer's denials give the per-IP charge back, so only served requests count per IP.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_inner_denial_gives_back_what_the_outer_layer_charged() {
    let clock = ManualClock::new();
    let ip = Arc::new(
        KeyedLimiter::<IpAddr>::gcra(Quota::per_minute(20))
            .clock(clock.clone())
            .build()
            .unwrap(),
    );
    let user = KeyedLimiter::<String>::gcra(Quota::per_minute(1))
        .clock(clock.clone())
        .build()
        .unwrap();
    let app = Router::new()
        .route(
            "/",
            get(|| async { "ok" }).layer(one(Limit::new(
                "per-user",
                HeaderKey::new("x-user-id"),
                user,
            ))),
        )
        .layer(one(Limit::new("per-ip", PeerIp::new(), ip.clone())));
    let addr = serve(app).await;
    let u1 = [("x-user-id", "u1")];
    assert_eq!(fetch(addr, "/", &u1).await.status, StatusCode::OK);
    for _ in 0..7 {
        let r = fetch(addr, "/", &u1).await;
        assert_eq!(r.status, StatusCode::TOO_MANY_REQUESTS, "{r:?}");
    }
    assert_eq!(
        ip.peek(&LOCAL).remaining(),
        19,
        "only the served request is charged per IP"
    );
    let r = fetch(addr, "/", &[("x-user-id", "u2")]).await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(ip.peek(&LOCAL).remaining(), 18);
}

/// Three layers: a denial by the innermost gives back both layers around it; a request the
/// innermost admits stays charged on all three.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_denial_gives_back_every_layer_around_it() {
    let clock = ManualClock::new();
    let global = |per_minute| {
        Arc::new(
            Limiter::gcra(Quota::per_minute(per_minute))
                .clock(clock.clone())
                .build()
                .unwrap(),
        )
    };
    let (outer, middle, inner) = (global(10), global(10), global(2));
    let app = Router::new()
        .route(
            "/",
            get(|| async { "ok" })
                .layer::<_, std::convert::Infallible>(one(Limit::new(
                    "inner",
                    Global,
                    inner.clone(),
                )))
                .layer(one(Limit::new("middle", Global, middle.clone()))),
        )
        .layer(one(Limit::new("outer", Global, outer.clone())));
    let addr = serve(app).await;
    let statuses: Vec<u16> = {
        let mut s = Vec::new();
        for _ in 0..5 {
            s.push(fetch(addr, "/", &[]).await.status.as_u16());
        }
        s
    };
    assert_eq!(statuses, [200, 200, 429, 429, 429]);
    let left = |l: &Limiter<ManualClock>| l.peek().remaining();
    assert_eq!((left(&outer), left(&middle), left(&inner)), (8, 8, 0));
}

/// A per-IP limit and a per-user limit in one layer; requests with no user id are answered 400
/// while the per-IP limit admits them, and they count there: once it is spent they get 429s
/// (a flood of malformed requests is limited per IP).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_without_a_key_still_meets_the_limits_it_has_keys_for() {
    let clock = ManualClock::new();
    let ip = Arc::new(
        KeyedLimiter::<IpAddr>::gcra(Quota::per_minute(3))
            .clock(clock.clone())
            .build()
            .unwrap(),
    );
    let user = KeyedLimiter::<String>::gcra(Quota::per_minute(100))
        .clock(clock.clone())
        .build()
        .unwrap();
    let layer = RateLimitLayer::builder()
        .limit(Limit::new("per-ip", PeerIp::new(), ip.clone()))
        .limit(Limit::new("per-user", HeaderKey::new("x-user-id"), user))
        .build()
        .unwrap();
    let app = Router::new().route("/", get(|| async { "ok" }).layer(layer));
    let addr = serve(app).await;
    let mut statuses = Vec::new();
    for _ in 0..5 {
        let r = fetch(addr, "/", &[]).await;
        if r.status == StatusCode::TOO_MANY_REQUESTS {
            assert!(r.header("retry-after").is_some(), "{r:?}");
        }
        statuses.push(r.status.as_u16());
    }
    assert_eq!(statuses, [400, 400, 400, 429, 429]);
    assert_eq!(ip.peek(&LOCAL).remaining(), 0);
    // A well-formed request from the same IP is limited too.
    let r = fetch(addr, "/", &[("x-user-id", "u1")]).await;
    assert_eq!(r.status, StatusCode::TOO_MANY_REQUESTS);
}
