//! RLS v3 through tonic's client from envoy-types: conversions, errors, connection cap.

use crate::common;

use std::time::Duration;

use common::{Server, SHOP};
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::{
    rate_limit_descriptor::Entry, RateLimitDescriptor,
};
use envoy_types::pb::envoy::service::ratelimit::v3::{
    rate_limit_response::Code, rate_limit_service_client::RateLimitServiceClient, RateLimitRequest,
    RateLimitResponse,
};
use tonic::transport::Channel;

fn descriptor(key: &str, value: &str) -> RateLimitDescriptor {
    RateLimitDescriptor {
        entries: vec![Entry {
            key: key.into(),
            value: value.into(),
        }],
        ..RateLimitDescriptor::default()
    }
}

fn request(descriptors: Vec<RateLimitDescriptor>) -> RateLimitRequest {
    RateLimitRequest {
        domain: "shop".into(),
        descriptors,
        hits_addend: 0,
    }
}

async fn client(s: &Server) -> RateLimitServiceClient<Channel> {
    let url = format!("http://{}", s.grpc.as_deref().expect("grpc"));
    RateLimitServiceClient::connect(url).await.expect("connect")
}

async fn ask(c: &mut RateLimitServiceClient<Channel>, r: RateLimitRequest) -> RateLimitResponse {
    c.should_rate_limit(r).await.expect("answer").into_inner()
}

#[tokio::test]
async fn statuses_carry_the_limit_the_remaining_and_the_reset() {
    let s = Server::start(SHOP, &[], &[]);
    let mut c = client(&s).await;
    let r = ask(
        &mut c,
        request(vec![
            descriptor("remote_address", "a"),
            descriptor("x", "y"),
        ]),
    )
    .await;
    assert_eq!(r.overall_code, Code::Ok as i32);
    assert_eq!(r.statuses.len(), 2, "one status per descriptor, in order");
    let st = &r.statuses[0];
    let limit = st.current_limit.as_ref().expect("a limit");
    assert_eq!((limit.requests_per_unit, st.limit_remaining), (3, 2));
    let reset = st.duration_until_reset.expect("a reset");
    // A yearly window aligned to Unix time resets within a year.
    assert!(
        reset.seconds > 0 && reset.seconds <= 366 * 86_400,
        "{reset:?}"
    );
    assert!(
        r.statuses[1].current_limit.is_none(),
        "no limit matches x=y"
    );
    assert!(
        r.response_headers_to_add.is_empty(),
        "headers are off by default"
    );
}

#[tokio::test]
async fn malformed_requests_are_invalid_argument() {
    let s = Server::start(SHOP, &[], &[]);
    let mut c = client(&s).await;
    let mut negative = descriptor("remote_address", "a");
    negative.is_negative_hits = true;
    let cases = [
        RateLimitRequest {
            domain: String::new(),
            ..request(vec![descriptor("a", "b")])
        },
        request(vec![]),
        request(vec![RateLimitDescriptor::default()]),
        request(vec![negative]),
    ];
    for r in cases {
        let e = c.should_rate_limit(r.clone()).await.expect_err("refused");
        assert_eq!(e.code(), tonic::Code::InvalidArgument, "{r:?}: {e}");
    }
}

#[tokio::test]
async fn past_the_connection_cap_a_client_waits_until_a_connection_closes() {
    let s = Server::start(SHOP, &["--max-connections", "1"], &[]);
    let addr = s.grpc.clone().expect("grpc");
    let held = tokio::net::TcpStream::connect(&addr)
        .await
        .expect("connect");
    // Give the server the chance to accept the held connection first.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let second = tokio::spawn(async move {
        let url = format!("http://{addr}");
        let mut c = RateLimitServiceClient::connect(url).await.expect("connect");
        ask(&mut c, request(vec![descriptor("remote_address", "b")])).await
    });
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(!second.is_finished(), "answered past the connection cap");
    drop(held);
    let r = tokio::time::timeout(Duration::from_secs(20), second)
        .await
        .expect("answered once the slot was free")
        .expect("task");
    assert_eq!(r.overall_code, Code::Ok as i32);
}

/// ratelimit's `PROMETHEUS_RESPONSE_TIME_AS_MILLISECONDS`: the response-time histogram's
/// bounds and sum in milliseconds, under the same name (its last bound, 10 s, reads 10000).
#[tokio::test]
async fn response_times_in_milliseconds_when_asked_as_ratelimit() {
    if !common::need(common::has("curl"), "curl") {
        return;
    }
    for (ms, last_bound) in [("true", "10000.0"), ("false", "10.0")] {
        let s = Server::start(
            SHOP,
            &[],
            &[("PROMETHEUS_RESPONSE_TIME_AS_MILLISECONDS", ms)],
        );
        let mut c = client(&s).await;
        ask(&mut c, request(vec![descriptor("remote_address", "m")])).await;
        let m = common::curl(&[&s.url("/metrics")]);
        let want = format!(
            r#"ratelimit_service_response_time_seconds_bucket{{grpc_method="ShouldRateLimit",le="{last_bound}"}} 1"#
        );
        assert!(m.body.contains(&want), "{want} not in {}", m.body);
    }
}

/// Established TCP connections whose local port is `port` (the server's side of each), from
/// the kernel's table (IPv4, loopback).
fn established_to(port: u16) -> usize {
    let table = std::fs::read_to_string("/proc/net/tcp").unwrap_or_default();
    table
        .lines()
        .skip(1)
        .filter(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            // f[1]: local address:port in hex; f[3]: state, 01 = ESTABLISHED.
            f.len() > 3
                && f[3] == "01"
                && f[1]
                    .rsplit(':')
                    .next()
                    .and_then(|p| u16::from_str_radix(p, 16).ok())
                    == Some(port)
        })
        .count()
}

/// ratelimit's `GRPC_MAX_CONNECTION_AGE`: a connection past its age is asked to close and
/// closes (an idle client's too), and the client's next request reconnects. Without it (the
/// default age is 24 h) the same idle connection stays open.
#[tokio::test]
async fn a_connection_past_its_max_age_is_closed_and_the_client_reconnects() {
    if !std::path::Path::new("/proc/net/tcp").exists() {
        return;
    }
    let port = |s: &Server| -> u16 {
        let addr = s.grpc.as_deref().expect("grpc");
        addr.rsplit(':')
            .next()
            .and_then(|p| p.parse().ok())
            .expect("port")
    };
    let aged = Server::start(
        SHOP,
        &[],
        &[
            // Long enough for the first requests to be answered on a loaded machine.
            ("GRPC_MAX_CONNECTION_AGE", "2s"),
            ("GRPC_MAX_CONNECTION_AGE_GRACE", "200ms"),
        ],
    );
    let kept = Server::start(SHOP, &[], &[]);
    let (mut a, mut k) = (client(&aged).await, client(&kept).await);
    ask(&mut a, request(vec![descriptor("remote_address", "age")])).await;
    ask(&mut k, request(vec![descriptor("remote_address", "age")])).await;
    assert_eq!(
        (established_to(port(&aged)), established_to(port(&kept))),
        (1, 1)
    );
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while established_to(port(&aged)) > 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "the aged connection stayed open"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(
        established_to(port(&kept)),
        1,
        "the connection without an age closed"
    );
    // The client reconnects for its next request (the first try may meet the closed
    // connection: a transport error, which gRPC clients retry); the limit's state is the
    // server's. The request only looks (hits_addend 0), so retries charge nothing.
    let mut look = descriptor("remote_address", "age");
    look.hits_addend = Some(envoy_types::pb::google::protobuf::UInt64Value { value: 0 });
    let mut answer = None;
    for _ in 0..100 {
        match a.should_rate_limit(request(vec![look.clone()])).await {
            Ok(r) => {
                answer = Some(r.into_inner());
                break;
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
    let r = answer.expect("answered after reconnecting");
    assert_eq!(r.statuses[0].limit_remaining, 2);
}

/// grpc.health.v1 beside RLS (tonic health's client), as ratelimit registers it: SERVING for
/// the server, for "ratelimit" and for the RLS service's name; an unknown name is NOT_FOUND.
#[test]
fn grpc_health_answers_serving_for_ratelimits_names() {
    let s = Server::start(SHOP, &[], &[]);
    let addr = s.grpc.as_deref().expect("grpc");
    for name in [
        "",
        "ratelimit",
        "envoy.service.ratelimit.v3.RateLimitService",
    ] {
        assert_eq!(common::grpc_health(addr, name), Ok(1), "{name:?}");
    }
    assert_eq!(
        common::grpc_health(addr, "nothing.Here"),
        Err(tonic::Code::NotFound)
    );
}
