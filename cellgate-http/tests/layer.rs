//! The layer against a real axum / hyper server on 127.0.0.1, driven by a real HTTP client.

mod common;

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use axum::routing::get;
use axum::Router;
use cellgate::clock::ManualClock;
use cellgate::{KeyedLimiter, Limiter, Quota};
use cellgate_http::{Global, HeaderKey, Limit, PeerIp, RateLimitLayer, TrustedProxies};
use common::{get as fetch, send, serve, serve_hyper};
use http::{Method, StatusCode};

fn per_ip(clock: &ManualClock, quota: Quota) -> KeyedLimiter<IpAddr, ManualClock> {
    KeyedLimiter::<IpAddr>::gcra(quota)
        .clock(clock.clone())
        .build()
        .unwrap()
}

fn per_user(clock: &ManualClock, quota: Quota) -> KeyedLimiter<String, ManualClock> {
    KeyedLimiter::<String>::gcra(quota)
        .clock(clock.clone())
        .build()
        .unwrap()
}

fn global(clock: &ManualClock, quota: Quota) -> Limiter<ManualClock> {
    Limiter::gcra(quota).clock(clock.clone()).build().unwrap()
}

fn layer(limits: Vec<Limit>) -> RateLimitLayer {
    limits
        .into_iter()
        .fold(RateLimitLayer::builder(), |b, l| b.limit(l))
        .build()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn headers_are_exact_and_sub_second_waits_say_retry_after_1() {
    let clock = ManualClock::new();
    let fast = layer(vec![Limit::new(
        "per-ip",
        PeerIp::new(),
        per_ip(&clock, Quota::per_second(2)),
    )]);
    let slow = layer(vec![Limit::new(
        "slow",
        PeerIp::new(),
        per_ip(&clock, Quota::per_minute(1)),
    )]);
    let app = Router::new()
        .route("/fast", get(|| async { "ok" }).layer(fast))
        .route("/slow", get(|| async { "ok" }).layer(slow));
    let addr = serve(app).await;

    let r = fetch(addr, "/fast", &[]).await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(r.header("ratelimit-policy"), Some("\"per-ip\";q=2;w=1"));
    assert_eq!(r.header("ratelimit"), Some("\"per-ip\";r=1;t=1"));
    assert_eq!(r.header("retry-after"), None);
    assert_eq!(r.body, "ok");
    let r = fetch(addr, "/fast", &[]).await;
    assert_eq!(r.header("ratelimit"), Some("\"per-ip\";r=0;t=1"));

    // Drained: the next unit comes in 500 ms; Retry-After rounds up to 1, never 0.
    let r = fetch(addr, "/fast", &[]).await;
    assert_eq!(r.status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(r.header("ratelimit-policy"), Some("\"per-ip\";q=2;w=1"));
    assert_eq!(r.header("ratelimit"), Some("\"per-ip\";r=0;t=1"));
    assert_eq!(r.header("retry-after"), Some("1"));
    assert_eq!(r.header("cache-control"), Some("no-store"));
    assert_eq!(
        r.body,
        "rate limited by policy \"per-ip\"; see Retry-After\n"
    );
    clock.advance(Duration::from_millis(499));
    let r = fetch(addr, "/fast", &[]).await;
    assert_eq!(r.header("retry-after"), Some("1"));
    clock.advance(Duration::from_millis(1));
    assert_eq!(fetch(addr, "/fast", &[]).await.status, StatusCode::OK);

    // Whole seconds round up too: a 60 s wait, then 59.5 s, then 0.1 s.
    assert_eq!(
        fetch(addr, "/slow", &[]).await.header("ratelimit"),
        Some("\"slow\";r=0;t=60")
    );
    let r = fetch(addr, "/slow", &[]).await;
    assert_eq!(r.header("retry-after"), Some("60"));
    assert_eq!(r.header("ratelimit"), Some("\"slow\";r=0;t=60"));
    clock.advance(Duration::from_millis(500));
    let r = fetch(addr, "/slow", &[]).await;
    assert_eq!(r.header("retry-after"), Some("60"));
    clock.advance(Duration::from_millis(59_400));
    let r = fetch(addr, "/slow", &[]).await;
    assert_eq!(r.header("retry-after"), Some("1"));
    assert_eq!(r.header("ratelimit"), Some("\"slow\";r=0;t=1"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifteen_hundred_concurrent_requests_admit_exactly_the_quota() {
    let clock = ManualClock::new();
    let quota = Quota::per_minute(100).with_burst(100);
    let global = global(&clock, Quota::per_second(10_000));
    let app = Router::new().route(
        "/",
        get(|| async { "ok" }).layer(layer(vec![
            Limit::new("per-ip", PeerIp::new(), per_ip(&clock, quota)),
            Limit::new("global", Global, global),
        ])),
    );
    let addr = serve(app).await;
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..1_500 {
        tasks.spawn(async move { fetch(addr, "/", &[]).await });
    }
    let (mut ok, mut limited) = (0, 0);
    while let Some(r) = tasks.join_next().await {
        let r = r.unwrap();
        match r.status {
            StatusCode::OK => ok += 1,
            StatusCode::TOO_MANY_REQUESTS => {
                limited += 1;
                // The clock is frozen: the per-IP limit denies, with a wait of 600 ms.
                assert_eq!(r.header("retry-after"), Some("1"));
                assert!(r.body.contains("\"per-ip\""));
            }
            s => panic!("unexpected status {s}"),
        }
    }
    assert_eq!((ok, limited), (100, 1_400));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spoofed_forwarded_for_from_an_untrusted_peer_is_ignored() {
    let clock = ManualClock::new();
    // The test client is 127.0.0.1: not a proxy here.
    let untrusted = TrustedProxies::new(["10.0.0.0/8"]).unwrap();
    let trusted = TrustedProxies::new(["127.0.0.1/32"]).unwrap();
    let q = Quota::per_minute(2);
    let app = Router::new()
        .route(
            "/untrusted",
            get(|| async { "ok" }).layer(layer(vec![Limit::new(
                "ip",
                untrusted,
                per_ip(&clock, q),
            )])),
        )
        .route(
            "/trusted",
            get(|| async { "ok" }).layer(layer(vec![Limit::new("ip", trusted, per_ip(&clock, q))])),
        );
    let addr = serve(app).await;
    let statuses = |path: &'static str, xffs: Vec<&'static str>| async move {
        let mut out = Vec::new();
        for x in xffs {
            out.push(
                fetch(addr, path, &[("x-forwarded-for", x)])
                    .await
                    .status
                    .as_u16(),
            );
        }
        out
    };
    // A fresh address in every spoofed header, all keyed by the peer: the third is denied.
    assert_eq!(
        statuses("/untrusted", vec!["1.1.1.1", "2.2.2.2", "3.3.3.3"]).await,
        [200, 200, 429]
    );
    // Garbage from an untrusted peer is not even read.
    assert_eq!(statuses("/untrusted", vec!["not an ip"]).await, [429]);
    // From a trusted proxy the right-most hop is the client; what is left of it is not.
    assert_eq!(
        statuses("/trusted", vec!["1.1.1.1", "2.2.2.2", "3.3.3.3"]).await,
        [200, 200, 200]
    );
    assert_eq!(
        statuses("/trusted", vec!["9.9.9.9, 1.1.1.1", "8.8.8.8, 1.1.1.1"]).await,
        [200, 429]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_headers_get_a_400_with_the_reason_and_charge_nothing() {
    let clock = ManualClock::new();
    let trusted = TrustedProxies::new(["127.0.0.0/8"]).unwrap();
    let users = per_user(&clock, Quota::per_minute(5));
    let app = Router::new()
        .route(
            "/ip",
            get(|| async { "ok" }).layer(layer(vec![Limit::new(
                "ip",
                trusted,
                per_ip(&clock, Quota::per_minute(5)),
            )])),
        )
        .route(
            "/user",
            get(|| async { "ok" }).layer(layer(vec![Limit::new(
                "user",
                HeaderKey::new("x-user-id"),
                users,
            )])),
        );
    let addr = serve(app).await;
    let long = "x".repeat(129);
    type Case<'a> = (&'a str, Vec<(&'a str, &'a str)>, &'a str);
    let cases: [Case; 4] = [
        (
            "/ip",
            vec![("x-forwarded-for", "1.2.3.4, not-an-ip")],
            "malformed x-forwarded-for header: \"not-an-ip\" is not an IP address\n",
        ),
        ("/user", vec![], "missing header x-user-id\n"),
        (
            "/user",
            vec![("x-user-id", "two words")],
            "header x-user-id must be visible ASCII without spaces\n",
        ),
        (
            "/user",
            vec![("x-user-id", &long)],
            "header x-user-id longer than 128 bytes\n",
        ),
    ];
    for (path, headers, reason) in cases {
        let r = fetch(addr, path, &headers).await;
        assert_eq!(r.status, StatusCode::BAD_REQUEST, "{path} {headers:?}");
        assert_eq!(r.body, reason);
        assert_eq!(r.header("ratelimit"), None);
    }
    // Nothing was charged by the refusals.
    let r = fetch(addr, "/ip", &[("x-forwarded-for", "1.2.3.4")]).await;
    assert_eq!(r.header("ratelimit"), Some("\"ip\";r=4;t=12"));
    let r = fetch(addr, "/user", &[("x-user-id", "u1")]).await;
    assert_eq!(r.header("ratelimit"), Some("\"user\";r=4;t=12"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn several_limits_are_all_or_nothing_and_the_429_names_the_denier() {
    let per_user = KeyedLimiter::<String>::stock(2).build().unwrap();
    let stock = std::sync::Arc::new(Limiter::stock(3).build().unwrap());
    let l = RateLimitLayer::builder()
        .limit(Limit::new(
            "per-user",
            HeaderKey::new("x-user-id"),
            per_user,
        ))
        .limit(Limit::new("stock", Global, stock.clone()))
        .problem_json(true)
        .legacy_headers(true)
        .build()
        .unwrap();
    let app = Router::new().route("/buy", axum::routing::post(|| async { "sold" }).layer(l));
    let addr = serve(app).await;
    let buy = |user: &'static str| async move {
        send(addr, Method::POST, "/buy", &[("x-user-id", user)]).await
    };
    assert_eq!(buy("a").await.status, StatusCode::OK);
    let r = buy("a").await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(
        r.header("ratelimit"),
        Some("\"per-user\";r=0, \"stock\";r=1")
    );
    assert_eq!(r.header("x-ratelimit-remaining"), Some("0"));
    // User a's third: the per-user limit says no, and the stock is not touched.
    let r = buy("a").await;
    assert_eq!(r.status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(r.header("retry-after"), None);
    assert_eq!(r.header("content-type"), Some("application/problem+json"));
    assert_eq!(
        r.body,
        "{\"type\":\"about:blank\",\"title\":\"Too Many Requests\",\"status\":429,\
         \"detail\":\"denied by policy \\\"per-user\\\"; waiting will not help\",\
         \"policy\":\"per-user\"}\n"
    );
    assert_eq!(
        r.header("ratelimit"),
        Some("\"per-user\";r=0, \"stock\";r=1")
    );
    assert_eq!(r.header("x-ratelimit-limit"), Some("2"));
    assert_eq!(cellgate::AnyLimiter::peek_n(&*stock, &(), 0).remaining(), 1);
    assert_eq!(buy("b").await.status, StatusCode::OK);
    // Sold out: user c's own unit is given back (c keeps r=2 of its own limit).
    let r = buy("c").await;
    assert_eq!(r.status, StatusCode::TOO_MANY_REQUESTS);
    assert!(r.body.contains("\"policy\":\"stock\""));
    assert_eq!(
        r.header("ratelimit"),
        Some("\"per-user\";r=2, \"stock\";r=0")
    );
    assert_eq!(r.header("retry-after"), None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn options_requests_skip_the_limit_by_default() {
    let clock = ManualClock::new();
    let make = |skip: bool| {
        RateLimitLayer::builder()
            .limit(Limit::new(
                "ip",
                PeerIp::new(),
                per_ip(&clock, Quota::per_minute(1)),
            ))
            .skip_options(skip)
            .build()
            .unwrap()
    };
    let h = || async { "ok" };
    let app = Router::new()
        .route("/skip", get(h).options(h).layer(make(true)))
        .route("/check", get(h).options(h).layer(make(false)));
    let addr = serve(app).await;
    for path in ["/skip", "/check"] {
        assert_eq!(fetch(addr, path, &[]).await.status, StatusCode::OK);
    }
    let r = send(addr, Method::OPTIONS, "/skip", &[]).await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(r.header("ratelimit"), None);
    let r = send(addr, Method::OPTIONS, "/check", &[]).await;
    assert_eq!(r.status, StatusCode::TOO_MANY_REQUESTS);
}

/// Served without `into_make_service_with_connect_info`: no request has a peer address. Each
/// is answered 500 saying what to fix (and one line on stderr), never limited in one bucket
/// shared by every client; the layer's other limits still apply to it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_connect_info_a_request_is_an_error_never_a_shared_bucket() {
    let clock = ManualClock::new();
    let global = std::sync::Arc::new(global(&clock, Quota::per_minute(10)));
    let app = Router::new().route(
        "/",
        get(|| async { "ok" }).layer(layer(vec![
            Limit::new("ip", PeerIp::new(), per_ip(&clock, Quota::per_minute(2))),
            Limit::new("global", Global, global.clone()),
        ])),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    for _ in 0..3 {
        let r = fetch(addr, "/", &[]).await;
        assert_eq!(r.status, StatusCode::INTERNAL_SERVER_ERROR, "{r:?}");
        assert!(r.body.contains("no peer address"), "{}", r.body);
    }
    assert_eq!(
        global.peek().remaining(),
        7,
        "the global limit, which has its key, counted each request"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plain_hyper_server_with_the_peer_address_in_the_extensions() {
    use cellgate_http::PeerAddr;
    use http_body_util::Full;
    use tower::ServiceBuilder;

    let clock = ManualClock::new();
    let limit = layer(vec![Limit::new(
        "ip",
        PeerIp::new(),
        per_ip(&clock, Quota::per_minute(1)),
    )]);
    // Two connections, then stop accepting.
    let addr = serve_hyper(2, false, move |peer| {
        ServiceBuilder::new()
            .map_request(move |mut r: http::Request<hyper::body::Incoming>| {
                r.extensions_mut().insert(PeerAddr(peer));
                r
            })
            .layer(limit.clone())
            .service_fn(|_req| async {
                Ok::<_, std::convert::Infallible>(http::Response::new(Full::new(
                    bytes::Bytes::from_static(b"hyper"),
                )))
            })
    })
    .await;
    let r = fetch(addr, "/", &[]).await;
    assert_eq!((r.status, r.body.as_str()), (StatusCode::OK, "hyper"));
    assert_eq!(r.header("ratelimit"), Some("\"ip\";r=0;t=60"));
    let r = fetch(addr, "/", &[]).await;
    assert_eq!(r.status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(r.header("retry-after"), Some("60"));
}

/// The partition key of a `RateLimit` member: the bytes of its `pk=:..:` byte sequence.
fn partition_key(member: &str) -> Vec<u8> {
    let (_, pk) = member.split_once(";pk=:").expect("a pk parameter");
    let b64 = pk.strip_suffix(':').expect("a closed byte sequence");
    let mut bits = 0u32;
    let mut n = 0;
    let mut out = Vec::new();
    for c in b64.bytes().take_while(|c| *c != b'=') {
        let v = match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' => 62,
            b'/' => 63,
            _ => panic!("{c} is not base64"),
        };
        bits = bits << 6 | u32::from(v);
        n += 6;
        if n >= 8 {
            n -= 8;
            out.push((bits >> n) as u8);
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_partition_key_is_a_keyed_hash_per_key_and_only_where_asked() {
    let clock = ManualClock::new();
    let users = per_user(&clock, Quota::per_second(2));
    let app = Router::new().route(
        "/",
        get(|| async { "ok" }).layer(layer(vec![
            Limit::new("per-user", HeaderKey::new("x-user-id"), users)
                .partition_key_secret(*b"0123456789abcdef"),
            Limit::new(
                "per-ip",
                PeerIp::new(),
                per_ip(&clock, Quota::per_second(10)),
            ),
        ])),
    );
    let addr = serve(app).await;
    let mut members = Vec::new();
    for user in ["u1", "u1", "u2", "u1"] {
        let r = fetch(addr, "/", &[("x-user-id", user)]).await;
        let state = r.header("ratelimit").unwrap().to_owned();
        let (user_member, ip_member) = state.split_once(", ").unwrap();
        assert!(!ip_member.contains("pk="), "{state}");
        members.push((r.status, user_member.to_owned()));
    }
    let exact: Vec<_> = members
        .iter()
        .map(|(s, m)| (s.as_u16(), m.split_once(";pk=").unwrap().0))
        .collect();
    assert_eq!(
        exact,
        [
            (200, "\"per-user\";r=1;t=1"),
            (200, "\"per-user\";r=0;t=1"),
            (200, "\"per-user\";r=1;t=1"),
            (429, "\"per-user\";r=0;t=1"),
        ]
    );
    let pks: Vec<Vec<u8>> = members.iter().map(|(_, m)| partition_key(m)).collect();
    // SipHash-2-4 of what the key's `Hash` writes, under the secret (little-endian halves),
    // big-endian: std's own (deprecated) SipHasher is the reference.
    let expected = |user: &str| {
        use std::hash::{Hash, Hasher};
        let k0 = u64::from_le_bytes(*b"01234567");
        let k1 = u64::from_le_bytes(*b"89abcdef");
        #[allow(deprecated)]
        let mut h = std::hash::SipHasher::new_with_keys(k0, k1);
        user.to_owned().hash(&mut h);
        h.finish().to_be_bytes().to_vec()
    };
    assert_eq!(
        pks,
        [
            expected("u1"),
            expected("u1"),
            expected("u2"),
            expected("u1")
        ]
    );
    assert_ne!(pks[0], pks[2]);
    // The key itself is not what is sent.
    assert!(
        !members.iter().any(|(_, m)| m.contains("dTE")),
        "{members:?}"
    );
}

/// One gRPC-style call over HTTP/2 (prior knowledge) to `addr`: the response head, its body
/// bytes, its trailers, and whether the head alone ended the stream.
async fn grpc_call(
    addr: SocketAddr,
    content_type: &str,
    headers: &[(&str, &str)],
) -> (
    http::response::Parts,
    bytes::Bytes,
    Option<http::HeaderMap>,
    bool,
) {
    use http_body_util::{BodyExt, Full};
    use hyper::body::Body as _;
    use hyper_util::rt::{TokioExecutor, TokioIo};

    let stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let (mut sender, conn) =
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(stream))
            .await
            .unwrap();
    tokio::spawn(conn);
    let mut req = http::Request::post(format!("http://{addr}/pkg.Svc/Call"))
        .header("content-type", content_type)
        .header("te", "trailers");
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    // An empty message: compressed flag 0, length 0.
    let body = Full::new(bytes::Bytes::from_static(&[0, 0, 0, 0, 0]));
    let resp = tokio::time::timeout(
        Duration::from_secs(20),
        sender.send_request(req.body(body).unwrap()),
    )
    .await
    .unwrap()
    .unwrap();
    let (parts, body) = resp.into_parts();
    let ended = body.is_end_stream();
    let collected = body.collect().await.unwrap();
    let trailers = collected.trailers().cloned();
    (parts, collected.to_bytes(), trailers, ended)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_denied_grpc_call_is_a_trailers_only_resource_exhausted_over_http2() {
    use http_body_util::{BodyExt, Full};
    use tower::ServiceBuilder;

    let clock = ManualClock::new();
    let global = global(&clock, Quota::per_minute(1));
    let limit = layer(vec![
        Limit::new(
            "per-user",
            HeaderKey::new("x-user-id"),
            per_user(&clock, Quota::per_second(100)),
        ),
        Limit::new("global", Global, global),
    ]);
    // The handler answers like a gRPC server: a message, then grpc-status 0 in the trailers.
    let addr = serve_hyper(6, true, move |_| {
        ServiceBuilder::new()
            .layer(limit.clone())
            .service_fn(|_req| async {
                let mut trailers = http::HeaderMap::new();
                trailers.insert("grpc-status", http::HeaderValue::from_static("0"));
                let body = Full::new(bytes::Bytes::from_static(&[0, 0, 0, 0, 0]))
                    .with_trailers(async { Some(Ok(trailers)) });
                let mut resp = http::Response::new(body);
                resp.headers_mut().insert(
                    "content-type",
                    http::HeaderValue::from_static("application/grpc"),
                );
                Ok::<_, std::convert::Infallible>(resp)
            })
    })
    .await;

    let user = [("x-user-id", "u1")];
    let (head, body, trailers, _) = grpc_call(addr, "application/grpc", &user).await;
    assert_eq!(head.status, StatusCode::OK);
    assert_eq!(body.as_ref(), [0, 0, 0, 0, 0]);
    assert_eq!(trailers.unwrap()["grpc-status"], "0");
    assert_eq!(
        head.headers["ratelimit"],
        "\"per-user\";r=99;t=1, \"global\";r=0;t=60"
    );

    // Denied by the global limit: HTTP 200, the status in the only HEADERS frame.
    let (head, body, trailers, ended) = grpc_call(addr, "application/grpc+proto", &user).await;
    assert_eq!(head.status, StatusCode::OK);
    assert!(
        ended,
        "a trailers-only response ends the stream with its headers"
    );
    assert!(body.is_empty() && trailers.is_none());
    let h = &head.headers;
    assert_eq!(h["content-type"], "application/grpc+proto");
    assert_eq!(h["grpc-status"], "8");
    assert_eq!(
        h["grpc-message"],
        "rate limited by policy \"global\"; see Retry-After"
    );
    assert_eq!(
        h["ratelimit-policy"],
        "\"per-user\";q=100;w=1, \"global\";q=1;w=60"
    );
    assert_eq!(
        h["ratelimit"],
        "\"per-user\";r=100;t=1, \"global\";r=0;t=60"
    );
    assert_eq!(h["retry-after"], "60");
    assert!(h.get("cache-control").is_none());

    // A key extractor's rejection while the limit that has a key (global) denies: the
    // denial is the answer.
    let (head, _, _, _) = grpc_call(addr, "application/grpc", &[]).await;
    assert_eq!(head.headers["grpc-status"], "8");
    // With room on the global limit: INVALID_ARGUMENT with the reason, percent-encoded (and
    // the global limit charged for it).
    clock.advance(std::time::Duration::from_secs(60));
    let (head, _, trailers, ended) = grpc_call(addr, "application/grpc", &[]).await;
    assert!(ended && trailers.is_none());
    assert_eq!(head.status, StatusCode::OK);
    assert_eq!(head.headers["grpc-status"], "3");
    assert_eq!(head.headers["grpc-message"], "missing header x-user-id");
    clock.advance(std::time::Duration::from_secs(60));
    let (head, _, _, _) = grpc_call(addr, "application/grpc", &[("x-user-id", "a b")]).await;
    assert_eq!(head.headers["grpc-status"], "3");
    assert_eq!(
        head.headers["grpc-message"],
        "header x-user-id must be visible ASCII without spaces"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grpc_answers_can_be_turned_off_and_other_types_are_not_grpc() {
    let drained = |clock: &ManualClock| {
        let l = global(clock, Quota::per_minute(1));
        l.check();
        Limit::new("global", Global, l)
    };
    let clock = ManualClock::new();
    let off = RateLimitLayer::builder()
        .limit(drained(&clock))
        .grpc(false)
        .build()
        .unwrap();
    let on = layer(vec![drained(&clock)]);
    let app = Router::new()
        .route("/off", axum::routing::post(|| async { "ok" }).layer(off))
        .route("/on", axum::routing::post(|| async { "ok" }).layer(on));
    let addr = serve(app).await;
    let ct = |v| [("content-type", v)];
    let r = send(addr, Method::POST, "/off", &ct("application/grpc")).await;
    assert_eq!(r.status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(r.header("grpc-status"), None);
    // gRPC-Web over HTTP/1.1 is gRPC too; `application/grpcx` and JSON are not.
    let r = send(addr, Method::POST, "/on", &ct("application/grpc-web+proto")).await;
    assert_eq!(
        (r.status, r.header("grpc-status")),
        (StatusCode::OK, Some("8"))
    );
    assert_eq!(r.body, "");
    for other in ["application/grpcx", "application/json"] {
        let r = send(addr, Method::POST, "/on", &ct(other)).await;
        assert_eq!(r.status, StatusCode::TOO_MANY_REQUESTS, "{other}");
        assert_eq!(r.header("grpc-status"), None);
    }
}

#[test]
fn the_layer_and_service_are_clone_send_sync() {
    fn check<T: Clone + Send + Sync + 'static>(_: &T) {}
    let l = RateLimitLayer::per_ip(Quota::per_second(1)).unwrap();
    check(&l);
    let svc = tower::Layer::layer(
        &l,
        tower::service_fn(|_r: http::Request<()>| async {
            Ok::<_, std::convert::Infallible>(http::Response::new(String::new()))
        }),
    );
    check(&svc);
}
