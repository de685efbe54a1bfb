//! redis-py (PyPI) against the RESP listener, with its default RESP3 handshake (`HELLO 3`) and
//! with `protocol=2`: connection setup, `CL.THROTTLE` alone and pipelined, error replies. The
//! interpreter is `CELLGATE_PYTHON` (else `python3`); without the `redis` module the test
//! skips, or fails under `CI=true`.

use crate::resp_common;
use resp_common::{skip, Server};

fn python() -> Option<String> {
    let py = std::env::var("CELLGATE_PYTHON").unwrap_or_else(|_| "python3".into());
    let ok = std::process::Command::new(&py)
        .args(["-c", "import redis"])
        .output()
        .is_ok_and(|o| o.status.success());
    if ok {
        Some(py)
    } else {
        skip(&format!(
            "{py} cannot import redis (set CELLGATE_PYTHON to a venv with redis)"
        ));
        None
    }
}

#[test]
fn redis_py_resp3_and_resp2() {
    let Some(py) = python() else { return };
    let server = Server::start(&[]);
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/py/resp_client.py");
    for protocol in ["3", "2"] {
        let out = std::process::Command::new(&py)
            .args([script, &server.port(), protocol])
            .output()
            .expect("run python");
        assert!(
            out.status.success() && out.stdout == b"ok\n",
            "protocol {protocol}: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}
