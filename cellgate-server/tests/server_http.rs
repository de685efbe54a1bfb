//! The HTTP listener through curl: ratelimit's `/json` and `/healthcheck`, `/metrics`,
//! `/rlconfig`, malformed and oversized bodies; the metrics' own listener (`USE_PROMETHEUS`).

use crate::common;

use common::{curl, has, need, post_json, Server, SHOP};

const ADDR: &str = r#"{"domain":"shop","descriptors":[{"entries":[{"key":"remote_address","value":"10.1.1.1"}]}]}"#;

#[test]
fn json_endpoint_answers_200_then_429_as_ratelimit() {
    if !need(has("curl"), "curl") {
        return;
    }
    let s = Server::start(SHOP, &[], &[]);
    for left in [2, 1, 0] {
        let r = post_json(&s, ADDR);
        assert_eq!(r.status, 200, "{}", r.body);
        let v: serde_json::Value = serde_json::from_str(&r.body).expect("JSON body");
        assert_eq!(v["overallCode"], "OK");
        assert_eq!(v["statuses"][0]["code"], "OK");
        assert_eq!(v["statuses"][0]["currentLimit"]["requestsPerUnit"], 3);
        assert_eq!(v["statuses"][0]["currentLimit"]["unit"], "YEAR");
        // protojson omits zero values.
        let want = if left == 0 {
            serde_json::Value::Null
        } else {
            left.into()
        };
        assert_eq!(v["statuses"][0]["limitRemaining"], want, "{}", r.body);
        let reset = v["statuses"][0]["durationUntilReset"]
            .as_str()
            .expect("reset");
        assert!(reset.ends_with('s'), "{reset}");
    }
    let r = post_json(&s, ADDR);
    assert_eq!(r.status, 429, "{}", r.body);
    let v: serde_json::Value = serde_json::from_str(&r.body).expect("JSON body");
    assert_eq!(v["overallCode"], "OVER_LIMIT");
    assert_eq!(v["statuses"][0]["code"], "OVER_LIMIT");

    // ratelimit's snake_case field names are accepted too; an unknown domain is OK.
    let r = post_json(
        &s,
        r#"{"domain":"elsewhere","hits_addend":2,"descriptors":[{"entries":[{"key":"k","value":"v"}]}]}"#,
    );
    assert_eq!(r.status, 200, "{}", r.body);
    assert!(r.body.contains(r#""overallCode":"OK""#), "{}", r.body);
}

#[test]
fn json_endpoint_refuses_bad_requests_with_400_and_big_bodies_with_413() {
    if !need(has("curl"), "curl") {
        return;
    }
    let s = Server::start(SHOP, &["--max-request-bytes", "1024"], &[]);
    for bad in [
        "{not json",
        r#"{"domain":"","descriptors":[{"entries":[{"key":"a","value":"b"}]}]}"#,
        r#"{"domain":"shop","descriptors":[]}"#,
        r#"{"domain":"shop","descriptors":[{"entries":[]}]}"#,
        r#"{"domain":"shop","descriptors":[{"entries":[{"key":"a"}]}],"surprise":1}"#,
        r#"{"domain":"shop","descriptors":[{"entries":[{"key":"a"}],"limit":{"unit":"EON"}}]}"#,
    ] {
        let r = post_json(&s, bad);
        assert_eq!(r.status, 400, "{bad} -> {}", r.body);
    }
    let big = format!(
        r#"{{"domain":"shop","descriptors":[{{"entries":[{{"key":"a","value":"{}"}}]}}]}}"#,
        "x".repeat(4096)
    );
    assert_eq!(post_json(&s, &big).status, 413);
    let m = curl(&[&s.url("/metrics")]);
    assert!(
        m.body
            .contains("ratelimit_service_should_rate_limit_error{err_type=\"service_error\"} "),
        "{}",
        m.body
    );
}

#[test]
fn healthcheck_metrics_and_rlconfig() {
    if !need(has("curl"), "curl") {
        return;
    }
    let s = Server::start(SHOP, &[], &[]);
    let r = curl(&[&s.url("/healthcheck")]);
    assert_eq!((r.status, r.body.trim()), (200, "OK"));
    assert_eq!(curl(&[&s.url("/nothing-here")]).status, 404);
    assert_eq!(curl(&["-X", "POST", &s.url("/healthcheck")]).status, 405);

    for _ in 0..4 {
        post_json(&s, ADDR);
    }
    let m = curl(&[&s.url("/metrics")]);
    assert_eq!(m.status, 200);
    let line = |name: &str| -> Option<u64> {
        m.body
            .lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.rsplit(' ').next()?.parse().ok())
    };
    let labels = r#"{domain="shop",key1="remote_address"}"#;
    let hits = |what: &str| line(&format!("ratelimit_service_rate_limit_{what}{labels}"));
    assert_eq!(hits("total_hits"), Some(4), "{}", m.body);
    assert_eq!(hits("over_limit"), Some(1), "{}", m.body);
    assert_eq!(hits("within_limit"), Some(3), "{}", m.body);
    assert_eq!(line("ratelimit_service_config_load_success"), Some(1));
    assert!(
        line("cellgate_live_keys").is_some_and(|n| n >= 1),
        "{}",
        m.body
    );

    let c = curl(&[&s.url("/rlconfig")]);
    assert_eq!(c.status, 200);
    assert!(
        c.body.contains("shop") && c.body.contains("remote_address"),
        "{}",
        c.body
    );
}

#[test]
fn shadow_mode_from_the_environment_admits_everything_and_counts_it() {
    if !need(has("curl"), "curl") {
        return;
    }
    let s = Server::start(SHOP, &[], &[("SHADOW_MODE", "1")]);
    for _ in 0..5 {
        let r = post_json(&s, ADDR);
        assert_eq!(r.status, 200, "{}", r.body);
    }
    let m = curl(&[&s.url("/metrics")]);
    let labels = r#"{domain="shop",key1="remote_address"}"#;
    let shadow = format!("ratelimit_service_rate_limit_shadow_mode{labels} ");
    let n: u64 = m
        .body
        .lines()
        .find_map(|l| l.strip_prefix(&shadow)?.parse().ok())
        .unwrap_or(0);
    assert_eq!(n, 2, "two of five were over the limit of 3: {}", m.body);
}

#[test]
fn a_silent_connection_is_closed_after_the_idle_timeout() {
    use std::io::Read;
    let s = Server::start(SHOP, &["--idle-timeout-ms", "300"], &[]);
    let mut silent =
        std::net::TcpStream::connect(s.http.as_deref().expect("http")).expect("connect");
    // Bounded: if the server never closed it, the read fails with a timeout error instead.
    silent
        .set_read_timeout(Some(std::time::Duration::from_secs(20)))
        .expect("timeout");
    let mut buf = [0u8; 64];
    match silent.read(&mut buf) {
        Ok(0) => {}
        Ok(n) => panic!("unexpected {n} bytes from the server"),
        Err(e) => assert!(
            !matches!(
                e.kind(),
                std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
            ),
            "the silent connection was still open: {e}"
        ),
    }
}

/// ratelimit's `HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED`: started on an empty configuration
/// directory, the server answers 503 (and gRPC health NOT_SERVING) until a file with a domain
/// arrives; without the variable, the same empty start is healthy.
#[test]
fn health_waits_for_a_domain_when_asked_as_ratelimit() {
    if !need(has("curl"), "curl") {
        return;
    }
    let dir = tempfile::tempdir().expect("temp dir");
    let root = dir.path().join("config");
    std::fs::create_dir(&root).expect("mkdir");
    let plain = Server::start_in(tempfile::tempdir().expect("temp dir"), &root, &[], &[]);
    assert_eq!(curl(&[&plain.url("/healthcheck")]).status, 200);
    drop(plain);

    let s = Server::start_in(
        dir,
        &root,
        &[],
        &[("HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED", "true")],
    );
    let r = curl(&[&s.url("/healthcheck")]);
    assert_eq!(r.status, 503, "{}", r.body);
    assert!(r.body.contains("no domain configured yet"), "{}", r.body);
    let grpc = s.grpc.clone().expect("grpc");
    assert_eq!(common::grpc_health(&grpc, ""), Ok(2));
    std::fs::write(root.join("shop.yaml"), SHOP).expect("write");
    common::eventually("healthy once a domain is configured", || {
        curl(&[&s.url("/healthcheck")]).status == 200
    });
    common::eventually("gRPC health SERVING", || {
        common::grpc_health(&grpc, "") == Ok(1)
    });
}

#[test]
fn use_prometheus_serves_the_metrics_on_their_own_listener_and_path() {
    if !need(has("curl"), "curl") {
        return;
    }
    let env = [
        ("USE_PROMETHEUS", "true"),
        ("PROMETHEUS_ADDR", "127.0.0.1:0"),
        ("PROMETHEUS_PATH", "/stats/prometheus"),
    ];
    let mut s = Server::start(SHOP, &[], &env);
    let addr = s.listening("prometheus");
    for _ in 0..4 {
        post_json(&s, ADDR);
    }
    let m = curl(&[&format!("http://{addr}/stats/prometheus")]);
    assert_eq!(m.status, 200);
    let total = r#"ratelimit_service_rate_limit_total_hits{domain="shop",key1="remote_address"} 4"#;
    assert!(m.body.lines().any(|l| l == total), "{}", m.body);
    // The metrics alone: no other path there, nothing but GET.
    for path in ["/metrics", "/json", "/healthcheck", "/rlconfig"] {
        assert_eq!(
            curl(&[&format!("http://{addr}{path}")]).status,
            404,
            "{path}"
        );
    }
    assert_eq!(
        curl(&["-X", "POST", &format!("http://{addr}/stats/prometheus")]).status,
        405
    );
    // And still on the HTTP listener.
    assert_eq!(curl(&[&s.url("/metrics")]).status, 200);
}

#[test]
fn a_prometheus_path_that_is_no_route_is_refused_at_start() {
    for path in ["metrics", "/{x}", "/a b", "/m?x=1"] {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_cellgate-server"))
            .args(["--grpc", "off", "--http", "off", "--resp", "off"])
            .env_remove("REDIS_URL")
            .env("USE_PROMETHEUS", "true")
            .env("PROMETHEUS_ADDR", "127.0.0.1:0")
            .env("PROMETHEUS_PATH", path)
            .output()
            .expect("run");
        assert_eq!(out.status.code(), Some(1), "{path}: {out:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("USE_PROMETHEUS"), "{path}: {err}");
    }
}
