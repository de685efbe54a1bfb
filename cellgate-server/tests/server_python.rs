//! RLS v3 scenarios from Python's grpcio, whose stubs grpcio-tools generates from Envoy's
//! protos (tests/py/rls_scenarios.py).

use crate::common;

use std::process::Command;

use common::{curl, envoy_proto_dir, has, need, python_with, Server, SHOP};

/// The scenarios' server: ratelimit's response headers on, small input limits, `env` beside.
fn start(env: &[(&str, &str)]) -> Server {
    let mut env = env.to_vec();
    env.push(("LIMIT_RESPONSE_HEADERS_ENABLED", "true"));
    Server::start(
        SHOP,
        &["--max-request-bytes", "16384", "--max-descriptors", "8"],
        &env,
    )
}

/// Runs the scenarios against the gRPC address `addr`; their output, once they all passed.
/// `None` when no Python with grpcio is found (outside CI).
fn scenarios(addr: &str) -> Option<String> {
    let py = python_with("grpc, grpc_tools, google.protobuf");
    if !need(
        py.is_some(),
        "a Python with grpcio, grpcio-tools and protobuf (CELLGATE_PYTHON)",
    ) {
        return None;
    }
    let proto = envoy_proto_dir().expect("envoy-types' proto directory via cargo metadata");
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/py/rls_scenarios.py");
    let out = Command::new(py.expect("checked"))
        .arg(script)
        .arg(&proto)
        .arg(addr)
        .output()
        .expect("run python");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    eprintln!("{stdout}{}", String::from_utf8_lossy(&out.stderr));
    assert!(
        out.status.success(),
        "the Python scenarios failed against {addr}"
    );
    for scenario in ["ok zero limit", "ok quota mode", "ok bad inputs"] {
        assert!(stdout.contains(scenario), "the scenarios did not all run");
    }
    Some(stdout)
}

#[test]
fn grpcio_client_sees_ratelimit_semantics() {
    let server = start(&[]);
    let Some(stdout) = scenarios(server.grpc.as_deref().expect("grpc")) else {
        return;
    };

    // ratelimit's request count and response-time histogram, through curl: one per request
    // that reached the service (the script counts them), in seconds, buckets cumulative.
    if !need(has("curl"), "curl") {
        return;
    }
    let handled: u64 = stdout
        .lines()
        .find_map(|l| l.strip_prefix("handled ")?.trim().parse().ok())
        .expect("the script prints how many requests it sent to the handler");
    let m = curl(&[&server.url("/metrics")]);
    let method = r#"{grpc_method="ShouldRateLimit""#;
    let value = |name: &str| -> Option<f64> {
        m.body
            .lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.rsplit(' ').next()?.parse().ok())
    };
    let total = value(&format!("ratelimit_service_total_requests{method}}}"));
    let count = value(&format!(
        "ratelimit_service_response_time_seconds_count{method}}}"
    ));
    let inf = value(&format!(
        r#"ratelimit_service_response_time_seconds_bucket{method},le="+Inf"}}"#
    ));
    let want = Some(handled as f64);
    assert_eq!((total, count, inf), (want, want, want), "{}", m.body);
    let sum = value(&format!(
        "ratelimit_service_response_time_seconds_sum{method}}}"
    ));
    assert!(sum.is_some_and(|s| s > 0.0), "{}", m.body);
    let buckets: Vec<f64> = m
        .body
        .lines()
        .filter(|l| l.starts_with("ratelimit_service_response_time_seconds_bucket"))
        .filter_map(|l| l.rsplit(' ').next()?.parse().ok())
        .collect();
    assert_eq!(buckets.len(), 17, "{}", m.body);
    assert!(buckets.windows(2).all(|w| w[0] <= w[1]), "{}", m.body);
}

/// ratelimit's `GRPC_UDS`: the same scenarios from grpcio over a Unix domain socket (grpcio's
/// `unix:` target), a stale socket file at the path replaced; the file is removed at exit.
#[test]
fn grpcio_client_over_a_unix_domain_socket() {
    let sockets = tempfile::tempdir().expect("temp dir");
    let path = sockets.path().join("rls.sock");
    // A stale socket file, as a killed server leaves.
    drop(std::os::unix::net::UnixListener::bind(&path).expect("stale socket"));
    let path_text = path.to_str().expect("utf-8 path");
    let mut server = start(&[("GRPC_UDS", path_text)]);
    let addr = server.grpc.clone().expect("grpc");
    assert_eq!(addr, format!("unix:{path_text}"));
    if scenarios(&addr).is_none() {
        return;
    }
    assert!(server.terminate().success());
    assert!(!path.exists(), "the socket file is removed at exit");
}
