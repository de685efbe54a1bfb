//! `rediss://` (feature `tls`): a real `redis-server` serving TLS with a certificate authority
//! and a server certificate the test makes with the `openssl` command, and a `fleet_node`
//! process that trusts that authority through `SSL_CERT_FILE`, selling a stock over TLS.
#![cfg(feature = "tls")]

use crate::common;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

/// Runs `openssl` with `args` in `dir`, failing the test when it fails.
fn openssl(dir: &Path, args: &[&str]) {
    let out = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .stdin(Stdio::null())
        .output()
        .expect("running openssl");
    assert!(
        out.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A CA and a server certificate for 127.0.0.1 signed by it (EC P-256, valid one day), in
/// `dir`: `ca.pem`, `server.pem`, `server.key`. `None` when `openssl` is missing (outside CI).
fn certificates(dir: &Path) -> Option<()> {
    let found = Command::new("openssl")
        .arg("version")
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !found {
        if std::env::var("CI").is_ok_and(|v| v == "true") {
            panic!("openssl is not installed, and CI=true requires the TLS test to run");
        }
        eprintln!("!!!!! SKIPPED: openssl not found; install it to run the TLS test !!!!!");
        return None;
    }
    let ec = [
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:prime256v1",
        "-nodes",
    ];
    let mut ca = vec![
        "req",
        "-x509",
        "-days",
        "1",
        "-subj",
        "/CN=cellgate test CA",
    ];
    ca.extend(ec);
    ca.extend(["-keyout", "ca.key", "-out", "ca.pem"]);
    openssl(dir, &ca);
    let mut csr = vec!["req", "-subj", "/CN=127.0.0.1"];
    csr.extend(ec);
    csr.extend(["-keyout", "server.key", "-out", "server.csr"]);
    openssl(dir, &csr);
    std::fs::write(dir.join("san.ext"), "subjectAltName=IP:127.0.0.1\n").unwrap();
    openssl(
        dir,
        &[
            "x509",
            "-req",
            "-in",
            "server.csr",
            "-CA",
            "ca.pem",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-days",
            "1",
            "-extfile",
            "san.ext",
            "-out",
            "server.pem",
        ],
    );
    Some(())
}

#[test]
fn a_stock_sells_exactly_over_rediss() {
    let certs = common::TempDir::new("tls");
    if certificates(&certs.0).is_none() {
        return;
    }
    let file = |f: &str| certs.0.join(f).to_str().unwrap().to_owned();
    let tls_port = common::free_port();
    let (port, cert, key, ca) = (
        tls_port.to_string(),
        file("server.pem"),
        file("server.key"),
        file("ca.pem"),
    );
    // The plain port stays open for the test's own look at the books.
    let Some(r) = common::redis_with(&[
        "--tls-port",
        &port,
        "--tls-cert-file",
        &cert,
        "--tls-key-file",
        &key,
        "--tls-ca-cert-file",
        &ca,
        "--tls-auth-clients",
        "no",
    ]) else {
        return;
    };
    let url = format!("rediss://127.0.0.1:{tls_port}");
    let args = ["--name", "tls", "--stock", "2000"];
    let ca_file = certs.0.join("ca.pem");
    let nodes: Vec<common::Node> = (0..2)
        .map(|_| common::node_env(&url, &args, "1.5", 1, &[("SSL_CERT_FILE", &ca_file)]))
        .collect();
    let sold: u64 = nodes
        .into_iter()
        .map(|n| n.finish(Duration::from_secs(30)))
        .sum();
    let state = r.hgetall("cellgate:{tls}:state");
    assert_eq!(sold, 2000, "sold over TLS");
    assert_eq!(state.get("rem").map(String::as_str), Some("0"));
    // Without the authority the certificate is refused: the error says so.
    let mut refused = common::node(&url, &["--name", "tls2", "--stock", "10"], "0.2", 1);
    let status = refused.child.wait().unwrap();
    assert!(!status.success(), "connected without trusting the CA");
    common::wait_for("the refusal on stderr", || {
        !refused.stderr.lock().unwrap().is_empty()
    });
    let message = refused.stderr.lock().unwrap().clone();
    assert!(message.contains("certificate"), "{message}");

    // The wrong scheme for the port, either way: an error whose hint names the right one (a
    // TLS port reached in plain text closes the connection; a plain port reached with TLS
    // stays silent, the TLS client waiting for an answer to its hello).
    let plain_to_tls = cellgate_redis::Fleet::stock("tls3", 10)
        .command_timeout(Duration::from_millis(300))
        .connect(&format!("redis://127.0.0.1:{tls_port}"))
        .map(|_| ())
        .unwrap_err();
    let tls_to_plain = cellgate_redis::Fleet::stock("tls4", 10)
        .command_timeout(Duration::from_millis(300))
        .connect(&format!("rediss://127.0.0.1:{}", r.port))
        .map(|_| ())
        .unwrap_err();
    let (plain_to_tls, tls_to_plain) = (plain_to_tls.to_string(), tls_to_plain.to_string());
    assert!(plain_to_tls.contains("use rediss://"), "{plain_to_tls}");
    assert!(tls_to_plain.contains("use redis://"), "{tls_to_plain}");
}
