//! `redis-benchmark` (Debian's redis-tools) against the RESP listener: a bounded run of
//! `CL.THROTTLE` on random keys, pipelined and not, must complete with no error reply.

use crate::resp_common;
use resp_common::{tool, Server};

fn bench(port: &str, extra: &[&str]) -> String {
    let Some(bin) = tool("redis-benchmark") else {
        return String::new();
    };
    let out = std::process::Command::new(bin)
        .args([
            "-h",
            "127.0.0.1",
            "-p",
            port,
            "-n",
            "2000",
            "-c",
            "10",
            "-q",
        ])
        .args(extra)
        .output()
        .expect("redis-benchmark");
    assert!(out.status.success(), "{out:?}");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.contains("requests per second"), "{text}");
    // redis-benchmark stops at the first error reply and says so.
    assert!(!text.contains("Error from server"), "{text}");
    text
}

#[test]
fn redis_benchmark_completes_without_errors() {
    if tool("redis-benchmark").is_none() {
        return;
    }
    let server = Server::start(&[]);
    let port = server.port();
    let throttle = [
        "-r",
        "1000",
        "CL.THROTTLE",
        "key:__rand_int__",
        "15",
        "30",
        "60",
    ];
    bench(&port, &throttle);
    let mut pipelined = vec!["-P", "16"];
    pipelined.extend_from_slice(&throttle);
    bench(&port, &pipelined);
    // Its own tests too: PING inline and as a bulk array.
    bench(&port, &["-t", "ping"]);
    assert_eq!(server.terminate().code(), Some(0));
}
