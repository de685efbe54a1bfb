//! The binary's command line: `--validate`, the `listening` lines, `--redis`, SIGTERM.

use crate::common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::Command;
use std::time::Duration;

use common::{curl, has, need, send, Server, SHOP};

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

/// ratelimit's `MERGE_DOMAIN_CONFIG`: two files of one domain (the fixture `merged_domain`).
fn merged_domain_dir() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/merged_domain")
}

#[test]
fn merge_domain_config_lets_two_files_share_a_domain() {
    let dir = merged_domain_dir();
    let out = bin()
        .arg("--validate")
        .arg("--config")
        .arg(&dir)
        .env_remove("MERGE_DOMAIN_CONFIG")
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("duplicate domain 'shop'"), "{text}");
    for merge in [&["--merge-domain-config", "true"][..], &[]] {
        let out = bin()
            .arg("--validate")
            .arg("--config")
            .arg(&dir)
            .args(merge)
            .env(
                "MERGE_DOMAIN_CONFIG",
                if merge.is_empty() { "true" } else { "false" },
            )
            .output()
            .expect("run");
        assert!(out.status.success(), "{merge:?}: {out:?}");
        assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "OK");
    }
}

#[test]
fn a_merged_domain_serves_every_files_limits() {
    if !need(has("curl"), "curl") {
        return;
    }
    let holder = tempfile::tempdir().expect("temp dir");
    let s = Server::start_in(
        holder,
        &merged_domain_dir(),
        &[],
        &[("MERGE_DOMAIN_CONFIG", "true")],
    );
    let ask = |path: &str| {
        format!(
            r#"{{"domain":"shop","descriptors":[{{"entries":[{{"key":"path","value":"{path}"}}]}}]}}"#
        )
    };
    // The first file's limit (1 a minute) and the second's (2 a minute), each in force.
    assert_eq!(send(&s, &ask("/checkout"), 3), (1, 2));
    assert_eq!(send(&s, &ask("/search"), 4), (2, 2));
    let nested = r#"{"domain":"shop","descriptors":[{"entries":[{"key":"user","value":"u1"},{"key":"path","value":"/checkout"}]}]}"#;
    assert_eq!(send(&s, nested, 7), (5, 2));
    let dump = curl(&[&s.url("/rlconfig")]);
    assert!(
        dump.body.contains("shop.user.path_/checkout"),
        "{}",
        dump.body
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
    assert!(
        err.contains("is not a redis://, rediss:// or redis+unix:// URL"),
        "{err}"
    );
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

/// A request in flight when SIGTERM arrives is answered before the server exits. One connection:
/// a first request answered (so the connection is accepted and served), then the head and half
/// the body of a second; SIGTERM; then the rest of the body: the second request's answer comes
/// back whole, and the server exits 0.
#[test]
fn sigterm_answers_the_request_in_flight_then_exits_zero() {
    const BODY: &str = r#"{"domain":"shop","descriptors":[{"entries":[{"key":"remote_address","value":"10.9.9.9"}]}]}"#;
    let mut s = Server::start(SHOP, &[], &[]);
    let mut c = TcpStream::connect(s.http.as_deref().expect("http")).expect("connect");
    c.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let head = format!(
        "POST /json HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\nContent-Length: {}\r\n",
        BODY.len()
    );
    write!(c, "{head}\r\n{BODY}").unwrap();
    let first = read_response(&mut c);
    assert!(first.starts_with("HTTP/1.1 200"), "{first}");

    let (half, rest) = BODY.split_at(BODY.len() / 2);
    write!(c, "{head}Connection: close\r\n\r\n{half}").unwrap();
    // Time for the server to read the head (an ordering, not an assertion): the request is
    // then in flight, waiting for its body.
    std::thread::sleep(Duration::from_millis(500));
    let pid = s.child.id().to_string();
    let signal = "-TERM";
    assert!(Command::new("kill")
        .args([signal, &pid])
        .status()
        .unwrap()
        .success());
    std::thread::sleep(Duration::from_millis(200));
    c.write_all(rest.as_bytes()).unwrap();
    let mut second = String::new();
    c.read_to_string(&mut second)
        .expect("the answer to the request in flight");
    assert!(second.starts_with("HTTP/1.1 200"), "{second}");
    assert!(second.contains(r#""overallCode":"OK""#), "{second}");
    let status = s.terminate();
    assert_eq!(status.code(), Some(0), "{status:?}");
}

/// One HTTP/1.1 response with a `Content-Length`, read whole.
fn read_response(c: &mut TcpStream) -> String {
    let mut buf = Vec::new();
    let mut byte = [0u8; 1];
    while !buf.ends_with(b"\r\n\r\n") {
        c.read_exact(&mut byte).expect("a response head");
        buf.push(byte[0]);
    }
    let head = String::from_utf8_lossy(&buf).into_owned();
    let len: usize = head
        .lines()
        .find_map(|l| {
            l.to_ascii_lowercase()
                .strip_prefix("content-length:")
                .map(|v| v.trim().parse().unwrap())
        })
        .expect("content-length");
    let mut body = vec![0u8; len];
    c.read_exact(&mut body).expect("the body");
    head + &String::from_utf8_lossy(&body)
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

/// Starts the binary on an ephemeral gRPC port with `env`, waits for its `listening` line,
/// stops it with SIGTERM and returns its exit status and standard error.
fn run_then_terminate(env: &[(&str, &str)]) -> (std::process::ExitStatus, String) {
    use std::io::BufRead;
    let dir = tempfile::tempdir().expect("temp dir");
    let cfg = dir.path().join("shop.yaml");
    std::fs::write(&cfg, SHOP).expect("write");
    let mut cmd = bin();
    cmd.arg("--config")
        .arg(&cfg)
        .args(["--grpc", "127.0.0.1:0", "--http", "off", "--resp", "off"])
        .env_remove("RUST_LOG")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    for (k, v) in env {
        cmd.env(k, v);
    }
    let mut child = cmd.spawn().expect("start");
    let stdout = child.stdout.take().expect("stdout");
    let listening = std::io::BufReader::new(stdout)
        .lines()
        .map_while(Result::ok)
        .any(|l| l.starts_with("listening grpc "));
    assert!(listening, "no listening line");
    let pid = child.id().to_string();
    let sent = Command::new("kill").args(["-TERM", &pid]).status();
    assert!(sent.is_ok_and(|s| s.success()), "kill -TERM failed");
    let out = child.wait_with_output().expect("wait");
    (
        out.status,
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn log_format_json_writes_one_object_per_line_at_ratelimits_level_names() {
    // ratelimit's variables, in its spelling: upper-case values, logrus' level names.
    let (status, err) = run_then_terminate(&[("LOG_FORMAT", "JSON"), ("LOG_LEVEL", "Info")]);
    assert_eq!(status.code(), Some(0), "{err}");
    let lines: Vec<serde_json::Value> = err
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect();
    assert!(
        lines.iter().all(|v| v["level"] == "INFO"),
        "only info lines on a clean stop: {err}"
    );
    assert!(
        lines.iter().any(|v| v["fields"]["message"] == "stopped"),
        "{err}"
    );

    // At ratelimit's "warning" a clean stop writes nothing.
    let (status, err) = run_then_terminate(&[("LOG_LEVEL", "warning")]);
    assert_eq!((status.code(), err.as_str()), (Some(0), ""));

    // A level that is none is refused, naming the choices.
    let out = bin()
        .args(["--grpc", "off", "--http", "off", "--resp", "off"])
        .env("LOG_LEVEL", "loud")
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("expected trace, debug, info, warn or error"),
        "{err}"
    );
}

#[test]
fn a_connection_age_that_is_no_duration_is_refused() {
    let out = bin()
        .args(["--grpc", "off", "--http", "off", "--resp", "off"])
        .env("GRPC_MAX_CONNECTION_AGE", "forever")
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("GRPC_MAX_CONNECTION_AGE") || err.contains("max-connection-age"),
        "{err}"
    );
    assert!(err.contains("expected e.g. 24h"), "{err}");
}

/// SIGTERM sent the moment the server says it listens (an orchestrator stopping a pod that just
/// started) is a drain and exit 0, not the signal's default action: the handlers are in place
/// before the first `listening` line. Several times, as the window was a race.
#[test]
fn sigterm_right_after_the_listening_line_exits_zero() {
    for _ in 0..10 {
        let (status, err) = run_then_terminate(&[]);
        assert_eq!(status.code(), Some(0), "{status:?} {err}");
    }
}
