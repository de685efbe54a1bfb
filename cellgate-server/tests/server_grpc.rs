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
