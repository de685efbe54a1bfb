//! RLS v3 scenarios from Python's grpcio, whose stubs grpcio-tools generates from Envoy's
//! protos (tests/py/rls_scenarios.py).

use crate::common;

use std::process::Command;

use common::{envoy_proto_dir, need, python_with, Server, SHOP};

#[test]
fn grpcio_client_sees_ratelimit_semantics() {
    let py = python_with("grpc, grpc_tools, google.protobuf");
    if !need(
        py.is_some(),
        "a Python with grpcio, grpcio-tools and protobuf (CELLGATE_PYTHON)",
    ) {
        return;
    }
    let proto = envoy_proto_dir().expect("envoy-types' proto directory via cargo metadata");
    let server = Server::start(
        SHOP,
        &["--max-request-bytes", "16384", "--max-descriptors", "8"],
        &[("LIMIT_RESPONSE_HEADERS_ENABLED", "true")],
    );
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/py/rls_scenarios.py");
    let out = Command::new(py.expect("checked"))
        .arg(script)
        .arg(&proto)
        .arg(server.grpc.as_deref().expect("grpc"))
        .output()
        .expect("run python");
    let stdout = String::from_utf8_lossy(&out.stdout);
    eprintln!("{stdout}{}", String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "the Python scenarios failed");
    assert!(
        stdout.contains("ok bad inputs"),
        "the scenarios did not all run"
    );
}
