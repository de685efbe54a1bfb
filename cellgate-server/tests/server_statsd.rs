//! ratelimit's statsd counters (`USE_STATSD`): a UDP socket of the test's stands where statsd
//! would, and the counts the server sends add up to the requests made through curl.

use crate::common;

use std::collections::HashMap;
use std::net::UdpSocket;
use std::process::Command;
use std::time::{Duration, Instant};

use common::{has, need, post_json, Server, SHOP};

const ADDR: &str = r#"{"domain":"shop","descriptors":[{"entries":[{"key":"remote_address","value":"10.9.9.9"}]}]}"#;

/// Reads datagrams from `socket` until `done` holds for the counter sums or `within` passed,
/// each line `name:value|c`; the sums.
fn collect(
    socket: &UdpSocket,
    within: Duration,
    done: impl Fn(&HashMap<String, i64>) -> bool,
) -> HashMap<String, i64> {
    let mut sums = HashMap::new();
    let mut buf = [0u8; 65_536];
    let deadline = Instant::now() + within;
    while !done(&sums) && Instant::now() < deadline {
        let Ok(n) = socket.recv(&mut buf) else {
            continue;
        };
        for line in String::from_utf8_lossy(&buf[..n]).lines() {
            let (name, rest) = line.split_once(':').expect("name:value");
            let value = rest.strip_suffix("|c").expect("a counter");
            *sums.entry(name.to_owned()).or_insert(0) += value.parse::<i64>().expect("a count");
        }
    }
    sums
}

/// A UDP socket on loopback standing where statsd would, and its port.
fn statsd_socket() -> (UdpSocket, String) {
    let socket = UdpSocket::bind("127.0.0.1:0").expect("bind");
    socket
        .set_read_timeout(Some(Duration::from_millis(100)))
        .expect("timeout");
    let port = socket.local_addr().expect("addr").port().to_string();
    (socket, port)
}

#[test]
fn statsd_counters_add_up_to_the_requests_under_ratelimits_names() {
    if !need(has("curl"), "curl") {
        return;
    }
    let (socket, port) = statsd_socket();
    let s = Server::start(
        SHOP,
        &[],
        &[
            ("USE_STATSD", "true"),
            ("STATSD_HOST", "127.0.0.1"),
            ("STATSD_PORT", &port),
            ("STATS_FLUSH_INTERVAL", "100ms"),
        ],
    );
    // A limit of 3 a year: three admitted, the next two refused; one malformed request.
    let codes: Vec<u16> = (0..5).map(|_| post_json(&s, ADDR).status).collect();
    assert_eq!(codes, [200, 200, 200, 429, 429]);
    assert_eq!(post_json(&s, "{not json").status, 400);
    let series = |name: &str| format!("ratelimit.service.rate_limit.shop.remote_address.{name}");
    let want = [
        (series("total_hits"), 5),
        (series("within_limit"), 3),
        (series("over_limit"), 2),
        ("ratelimit.service.config_load_success".to_owned(), 1),
        (
            "ratelimit.service.call.should_rate_limit.service_error".to_owned(),
            1,
        ),
    ];
    let sums = collect(&socket, Duration::from_secs(20), |sums| {
        want.iter().all(|(k, v)| sums.get(k.as_str()) >= Some(v))
    });
    for (name, n) in &want {
        assert_eq!(sums.get(name.as_str()), Some(n), "{name}: {sums:?}");
    }
    // Sent as deltas: nothing more arrives once the counts are out (ten flush intervals).
    let later = collect(&socket, Duration::from_secs(1), |_| false);
    assert!(later.is_empty(), "counted twice: {later:?}");
}

#[test]
fn the_last_counts_are_sent_when_the_server_stops() {
    if !need(has("curl"), "curl") {
        return;
    }
    let (socket, port) = statsd_socket();
    // An interval no test waits for: only the flush at the stop sends anything.
    let mut s = Server::start(
        SHOP,
        &[],
        &[
            ("USE_STATSD", "1"),
            ("STATSD_HOST", "127.0.0.1"),
            ("STATSD_PORT", &port),
            ("STATS_FLUSH_INTERVAL", "1h"),
        ],
    );
    assert_eq!(post_json(&s, ADDR).status, 200);
    assert!(s.terminate().success());
    let name = "ratelimit.service.rate_limit.shop.remote_address.total_hits";
    let sums = collect(&socket, Duration::from_secs(10), |sums| {
        sums.contains_key(name)
    });
    assert_eq!(sums.get(name), Some(&1), "{sums:?}");
}

#[test]
fn a_zero_flush_interval_is_refused() {
    let out = Command::new(env!("CARGO_BIN_EXE_cellgate-server"))
        .args(["--http", "off", "--grpc", "off", "--resp", "off"])
        .env("USE_STATSD", "true")
        .env("STATS_FLUSH_INTERVAL", "0s")
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("must be more than zero"), "{err}");
}
