//! `redis-cli` (Debian's redis-tools) against the RESP listener: `CL.THROTTLE` in the
//! documented format, the commands clients send around it, RESP3 via `-3`, and a clean exit
//! on SIGTERM.

use crate::resp_common;
use resp_common::{cli, tool, Server};

#[test]
fn cl_throttle_replies_in_redis_cells_format() {
    let Some(redis_cli) = tool("redis-cli") else {
        return;
    };
    let server = Server::start(&[]);
    let port = server.port();
    // 15 burst, 30 per 60 s: limit 16, the first call leaves 15, resets after one interval (2 s).
    assert_eq!(
        cli(
            &redis_cli,
            &port,
            &["CL.THROTTLE", "user:1", "15", "30", "60"]
        ),
        "0\n16\n15\n-1\n2\n"
    );
    // Quantity 15 takes the rest: 0 left, 32 s of backlog.
    assert_eq!(
        cli(
            &redis_cli,
            &port,
            &["CL.THROTTLE", "user:1", "15", "30", "60", "15"]
        ),
        "0\n16\n0\n-1\n31\n"
    );
    // Limited: retry after about one interval (truncated to whole seconds).
    assert_eq!(
        cli(
            &redis_cli,
            &port,
            &["cl.throttle", "user:1", "15", "30", "60"]
        ),
        "1\n16\n0\n1\n31\n"
    );
    // Another key is untouched; RESP3 gives the same array.
    assert_eq!(
        cli(
            &redis_cli,
            &port,
            &["-3", "CL.THROTTLE", "user:2", "0", "1", "1"]
        ),
        "0\n1\n0\n-1\n1\n"
    );
    assert_eq!(server.terminate().code(), Some(0));
}

#[test]
fn errors_use_redis_cells_and_redis_wording() {
    let Some(redis_cli) = tool("redis-cli") else {
        return;
    };
    let server = Server::start(&[]);
    let port = server.port();
    let cases: &[(&[&str], &str)] = &[
        (
            &["CL.THROTTLE", "k", "1"],
            "Cell error: Usage: cl.throttle <key> <max_burst> <count per period> <period> [<quantity>]",
        ),
        (&["CL.THROTTLE", "k", "1", "x", "60"], "Cell error: Couldn't parse as integer: x"),
        (&["CL.THROTTLE", "k", "1", "1.5", "60"], "Cell error: Couldn't parse as integer: 1.5"),
        (&["CL.THROTTLE", "k", "-1", "1", "60"], "Cell error: max_burst must not be negative"),
        (&["CL.THROTTLE", "k", "1", "0", "60"], "Cell error: count per period must be positive"),
        (&["CL.THROTTLE", "k", "1", "-3", "60"], "Cell error: count per period must be positive"),
        (&["CL.THROTTLE", "k", "1", "1", "0"], "Cell error: period must be positive"),
        (&["CL.THROTTLE", "k", "1", "1", "60", "-1"], "Cell error: quantity must not be negative"),
        (
            &["CL.THROTTLE", "k", "1", "1", "9223372037"],
            "Cell error: period is too long (its nanoseconds overflow a 64-bit integer)",
        ),
        (
            &["CL.THROTTLE", "k", "1", "9223372036854775807", "1"],
            "Cell error: rate is too fast (more than one per nanosecond)",
        ),
        (
            &["CL.THROTTLE", "k", "9223372036854775807", "1", "1"],
            "Cell error: max_burst is too large for this rate",
        ),
        (&["FLUSHALL", "a", "b"], "ERR unknown command 'FLUSHALL', with args beginning with: 'a' 'b' "),
        (&["PING", "a", "b"], "ERR wrong number of arguments for 'ping' command"),
        (&["ECHO"], "ERR wrong number of arguments for 'echo' command"),
        (&["SELECT", "1"], "ERR DB index is out of range"),
        (&["SELECT", "x"], "ERR value is not an integer or out of range"),
        (&["HELLO", "4"], "NOPROTO unsupported protocol version"),
        (&["HELLO", "x"], "ERR Protocol version is not an integer or out of range"),
        (&["HELLO", "3", "FOO"], "ERR Syntax error in HELLO option 'FOO'"),
        (&["CLIENT", "NOPE"], "ERR unknown subcommand 'NOPE'. Try CLIENT HELP."),
        (&["CLIENT", "SETNAME"], "ERR wrong number of arguments for 'client|setname' command"),
        (&["CLIENT", "SETNAME", "a b"], "ERR Client names cannot contain spaces, newlines or special characters."),
    ];
    for (args, want) in cases {
        // redis-cli prints an error reply, then an empty line.
        assert_eq!(
            cli(&redis_cli, &port, args),
            format!("{want}\n\n"),
            "{args:?}"
        );
    }
}

#[test]
fn connection_commands_answer_as_redis_does() {
    let Some(redis_cli) = tool("redis-cli") else {
        return;
    };
    let server = Server::start(&[]);
    let port = server.port();
    assert_eq!(cli(&redis_cli, &port, &["PING"]), "PONG\n");
    assert_eq!(cli(&redis_cli, &port, &["PING", "hi"]), "hi\n");
    assert_eq!(cli(&redis_cli, &port, &["ECHO", "a b"]), "a b\n");
    assert_eq!(cli(&redis_cli, &port, &["SELECT", "0"]), "OK\n");
    assert_eq!(
        cli(&redis_cli, &port, &["CONFIG", "GET", "save"]),
        "save\n\n"
    );
    assert_eq!(
        cli(&redis_cli, &port, &["CONFIG", "GET", "appendonly"]),
        "appendonly\nno\n"
    );
    assert_eq!(
        cli(&redis_cli, &port, &["CLIENT", "SETINFO", "LIB-NAME", "x"]),
        "OK\n"
    );
    assert_eq!(cli(&redis_cli, &port, &["COMMAND", "COUNT"]), "12\n");
    let info = cli(
        &redis_cli,
        &port,
        &["COMMAND", "INFO", "cl.throttle", "nope"],
    );
    assert!(
        info.starts_with("cl.throttle\n-1\nwrite\n1\n1\n1\n"),
        "{info}"
    );
    let hello = cli(&redis_cli, &port, &["-3", "HELLO", "3", "SETNAME", "me"]);
    for field in [
        "server",
        "redis",
        "proto",
        "3",
        "mode",
        "standalone",
        "modules",
        "redis-cell",
    ] {
        assert!(
            hello.lines().any(|l| l.contains(field)),
            "{field} in {hello}"
        );
    }
    // SETNAME, GETNAME and RESET on one connection (redis-cli runs stdin's lines in order and
    // prints nothing for QUIT).
    let out = std::process::Command::new(&redis_cli)
        .args(["-h", "127.0.0.1", "-p", &port])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .and_then(|mut c| {
            use std::io::Write;
            c.stdin
                .take()
                .unwrap()
                .write_all(b"CLIENT SETNAME app\nCLIENT GETNAME\nRESET\nCLIENT GETNAME\nQUIT\n")?;
            c.wait_with_output()
        })
        .expect("redis-cli");
    assert_eq!(String::from_utf8_lossy(&out.stdout), "OK\napp\nRESET\n\n");
    let info = cli(&redis_cli, &port, &["INFO"]);
    assert!(info.contains("redis_version:7.0.15"), "{info}");
}
