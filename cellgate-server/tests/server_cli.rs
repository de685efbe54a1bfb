//! The binary's command line: `--validate`, the `listening` lines, `--redis`, SIGTERM.

use crate::common;

use std::process::Command;

use common::{curl, has, need, Server, SHOP};

fn bin() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_cellgate-server"));
    c.env_remove("REDIS_URL").env_remove("RUNTIME_ROOT");
    c
}

#[test]
fn validate_prints_ok_or_the_error_and_sets_the_exit_status() {
    let dir = tempfile::tempdir().expect("temp dir");
    let good = dir.path().join("good.yaml");
    std::fs::write(&good, SHOP).expect("write");
    let out = bin()
        .arg("--validate")
        .arg("--config")
        .arg(&good)
        .output()
        .expect("run");
    assert!(out.status.success(), "{out:?}");
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "OK");

    let bad = dir.path().join("bad.yaml");
    std::fs::write(&bad, "domain: shop\ndescriptors:\n  - key: a\n    rate_limit: {unit: fortnight, requests_per_unit: 1}\n").expect("write");
    let out = bin()
        .arg("--validate")
        .arg("--config")
        .arg(&bad)
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("bad.yaml"),
        "the error names the file: {text}"
    );
}

#[test]
fn the_runtime_root_variables_locate_the_config_as_ratelimit_does() {
    let dir = tempfile::tempdir().expect("temp dir");
    let cfg = dir.path().join("current").join("config");
    std::fs::create_dir_all(&cfg).expect("mkdir");
    std::fs::write(cfg.join("shop.yaml"), "domain: [").expect("write");
    let out = bin()
        .arg("--validate")
        .env("RUNTIME_ROOT", dir.path())
        .env("RUNTIME_SUBDIRECTORY", "current")
        .output()
        .expect("run");
    // The broken file was found (and refused) through RUNTIME_ROOT/RUNTIME_SUBDIRECTORY/config.
    assert_eq!(out.status.code(), Some(1), "{out:?}");
}

#[test]
fn a_redis_url_that_is_not_one_is_refused_clearly() {
    let out = bin()
        .args(["--grpc", "off", "--http", "off", "--resp", "off"])
        .env("REDIS_URL", "http://127.0.0.1:1")
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("is not a redis:// or rediss:// URL"), "{err}");
}

#[test]
fn sigterm_exits_zero_and_the_listeners_close() {
    if !need(has("curl"), "curl") {
        return;
    }
    let mut s = Server::start(SHOP, &[], &[]);
    assert_eq!(curl(&[&s.url("/healthcheck")]).status, 200);
    let status = s.terminate();
    assert_eq!(status.code(), Some(0), "{status:?}");
    // curl reports 000 when nothing listens.
    assert_eq!(curl(&[&s.url("/healthcheck")]).status, 0);
}

#[test]
fn listening_lines_name_the_bound_ports() {
    let s = Server::start(SHOP, &[], &[]);
    for addr in [s.grpc.as_deref(), s.http.as_deref()] {
        let addr: std::net::SocketAddr = addr.expect("announced").parse().expect("an address");
        assert!(addr.ip().is_loopback() && addr.port() != 0);
    }
}

#[test]
fn the_sample_config_directory_is_valid() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/config");
    let out = bin()
        .arg("--validate")
        .arg("--config")
        .arg(dir)
        .output()
        .expect("run");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
}
