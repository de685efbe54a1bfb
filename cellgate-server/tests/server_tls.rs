//! gRPC over TLS (feature `tls`), configured by ratelimit's variables: a certificate authority,
//! a server certificate and two client certificates made with the `openssl` command, and
//! tonic's TLS client: server TLS alone, then client certificates checked against the authority
//! and against `GRPC_CLIENT_TLS_SAN`, then the certificate replaced on disk as a Kubernetes
//! Secret volume replaces it (its `..data` symlink swapped).
#![cfg(feature = "tls")]

use crate::common;

use std::path::Path;
use std::process::Command;

use common::{eventually, metric, Server, SHOP};
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::{
    rate_limit_descriptor::Entry, RateLimitDescriptor,
};
use envoy_types::pb::envoy::service::ratelimit::v3::{
    rate_limit_response::Code, rate_limit_service_client::RateLimitServiceClient, RateLimitRequest,
};
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Identity};

/// In `dir`: `ca.pem`; `server` for localhost and 127.0.0.1; clients `envoy` (DNS name
/// envoy.local) and `intruder` (intruder.local). `None` when `openssl` is missing (outside CI).
fn certificates(dir: &Path) -> Option<()> {
    if !common::need(common::certs::openssl_found(), "openssl") {
        return None;
    }
    common::certs::authority(dir);
    common::certs::signed(
        dir,
        "server",
        "subjectAltName=DNS:localhost,IP:127.0.0.1\nextendedKeyUsage=serverAuth\n",
    );
    for client in ["envoy", "intruder"] {
        common::certs::signed(
            dir,
            client,
            &format!("subjectAltName=DNS:{client}.local\nextendedKeyUsage=clientAuth\n"),
        );
    }
    Some(())
}

/// Asks `s` once over TLS trusting `ca.pem`, presenting `client`'s certificate if given:
/// the answer's code, or the gRPC error's.
async fn ask(s: &Server, dir: &Path, client: Option<&str>) -> Result<i32, tonic::Code> {
    let read = |f: &str| std::fs::read(dir.join(f)).expect("read a certificate file");
    let mut tls = ClientTlsConfig::new()
        .ca_certificate(Certificate::from_pem(read("ca.pem")))
        .domain_name("localhost");
    if let Some(c) = client {
        tls = tls.identity(Identity::from_pem(
            read(&format!("{c}.pem")),
            read(&format!("{c}.key")),
        ));
    }
    let url = format!("https://{}", s.grpc.as_deref().expect("grpc"));
    let channel = Channel::from_shared(url)
        .expect("url")
        .tls_config(tls)
        .expect("client TLS")
        .connect()
        .await
        .map_err(|_| tonic::Code::Unavailable)?;
    let mut c = RateLimitServiceClient::new(channel);
    let r = c.should_rate_limit(request()).await.map_err(|e| e.code())?;
    Ok(r.into_inner().overall_code)
}

/// The server with gRPC over TLS from `cert` and `key`, no client certificates asked for.
fn tls_server(cert: &str, key: &str) -> Server {
    Server::start(
        SHOP,
        &[],
        &[
            ("GRPC_SERVER_USE_TLS", "true"),
            ("GRPC_SERVER_TLS_CERT", cert),
            ("GRPC_SERVER_TLS_KEY", key),
        ],
    )
}

fn request() -> RateLimitRequest {
    RateLimitRequest {
        domain: "shop".into(),
        descriptors: vec![RateLimitDescriptor {
            entries: vec![Entry {
                key: "remote_address".into(),
                value: "tls".into(),
            }],
            ..RateLimitDescriptor::default()
        }],
        hits_addend: 0,
    }
}

#[tokio::test]
async fn grpc_over_tls_then_client_certificates_checked_as_ratelimit() {
    let dir = tempfile::tempdir().expect("temp dir");
    if certificates(dir.path()).is_none() {
        return;
    }
    let file = |f: &str| dir.path().join(f).to_string_lossy().into_owned();
    let (cert, key, ca) = (file("server.pem"), file("server.key"), file("ca.pem"));
    let ok = Ok(Code::Ok as i32);

    // Server TLS alone: a TLS client is answered; a plaintext one is not.
    let s = tls_server(&cert, &key);
    assert_eq!(ask(&s, dir.path(), None).await, ok);
    let plain = format!("http://{}", s.grpc.as_deref().expect("grpc"));
    let answered = match RateLimitServiceClient::connect(plain).await {
        Ok(mut c) => c.should_rate_limit(request()).await.is_ok(),
        Err(_) => false,
    };
    assert!(
        !answered,
        "a plaintext client was answered by a TLS listener"
    );
    drop(s);

    // Client certificates: signed by the authority and naming envoy.local.
    let s = Server::start(
        SHOP,
        &[],
        &[
            ("GRPC_SERVER_USE_TLS", "1"),
            ("GRPC_SERVER_TLS_CERT", &cert),
            ("GRPC_SERVER_TLS_KEY", &key),
            ("GRPC_CLIENT_TLS_CACERT", &ca),
            ("GRPC_CLIENT_TLS_SAN", "envoy.local"),
        ],
    );
    assert_eq!(ask(&s, dir.path(), Some("envoy")).await, ok);
    assert!(
        ask(&s, dir.path(), None).await.is_err(),
        "a client without a certificate was answered"
    );
    // The name is checked in the handshake, as ratelimit does: the connection fails.
    assert!(
        ask(&s, dir.path(), Some("intruder")).await.is_err(),
        "a client certificate without GRPC_CLIENT_TLS_SAN's name was answered"
    );
    // Each refused client failed at least one handshake (tonic's channel may try again).
    assert!(metric(&s, "cellgate_grpc_tls_handshake_errors") >= 2);
    assert_eq!(ask(&s, dir.path(), Some("envoy")).await, ok);
}

/// Points `live/..data` at `live/<version>` by a rename over it, as the kubelet updates a
/// Secret volume (`live/server.pem` and `live/server.key` link through `..data`).
fn publish(live: &Path, version: &str) {
    let tmp = live.join("..data_tmp");
    let _ = std::fs::remove_file(&tmp);
    std::os::unix::fs::symlink(version, &tmp).expect("symlink ..data_tmp");
    std::fs::rename(&tmp, live.join("..data")).expect("swap ..data");
}

#[tokio::test]
async fn a_certificate_replaced_on_disk_serves_new_connections_and_a_broken_one_is_refused() {
    let dir = tempfile::tempdir().expect("temp dir");
    if certificates(dir.path()).is_none() {
        return;
    }
    // A second authority and a server certificate it signed: the rotated certificate.
    let next = dir.path().join("next");
    std::fs::create_dir(&next).expect("mkdir");
    common::certs::authority(&next);
    common::certs::signed(
        &next,
        "server",
        "subjectAltName=DNS:localhost,IP:127.0.0.1\nextendedKeyUsage=serverAuth\n",
    );
    // The volume: each version a directory, the files linked through `..data`.
    let live = dir.path().join("live");
    for (version, from) in [("..v1", dir.path()), ("..v2", next.as_path())] {
        std::fs::create_dir_all(live.join(version)).expect("mkdir");
        for f in ["server.pem", "server.key"] {
            std::fs::copy(from.join(f), live.join(version).join(f)).expect("copy");
        }
    }
    std::fs::create_dir_all(live.join("..v3")).expect("mkdir");
    std::fs::write(live.join("..v3/server.pem"), "not a certificate").expect("write");
    std::fs::copy(next.join("server.key"), live.join("..v3/server.key")).expect("copy");
    publish(&live, "..v1");
    for f in ["server.pem", "server.key"] {
        std::os::unix::fs::symlink(format!("..data/{f}"), live.join(f)).expect("symlink");
    }
    let file = |f: &str| live.join(f).to_string_lossy().into_owned();
    let s = tls_server(&file("server.pem"), &file("server.key"));
    let ok = Ok(Code::Ok as i32);
    assert_eq!(ask(&s, dir.path(), None).await, ok);
    assert!(
        ask(&s, &next, None).await.is_err(),
        "the next authority trusted early"
    );
    assert_eq!(metric(&s, "cellgate_grpc_tls_load_success"), 1);

    publish(&live, "..v2");
    eventually("the rotated certificate read", || {
        metric(&s, "cellgate_grpc_tls_load_success") == 2
    });
    assert_eq!(ask(&s, &next, None).await, ok);
    assert!(
        ask(&s, dir.path(), None).await.is_err(),
        "a new connection was given the replaced certificate"
    );

    // A broken certificate: refused, counted, and the one in force stays.
    publish(&live, "..v3");
    eventually("the broken certificate refused", || {
        metric(&s, "cellgate_grpc_tls_load_error") == 1
    });
    assert_eq!(ask(&s, &next, None).await, ok);
    assert_eq!(metric(&s, "cellgate_grpc_tls_load_success"), 2);
}

#[test]
fn tls_asked_without_its_files_is_refused_at_start() {
    let out = Command::new(env!("CARGO_BIN_EXE_cellgate-server"))
        .args(["--grpc", "127.0.0.1:0", "--http", "off", "--resp", "off"])
        .env_remove("REDIS_URL")
        .env("GRPC_SERVER_USE_TLS", "true")
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("GRPC_SERVER_USE_TLS needs GRPC_SERVER_TLS_CERT and GRPC_SERVER_TLS_KEY"),
        "{err}"
    );
}
