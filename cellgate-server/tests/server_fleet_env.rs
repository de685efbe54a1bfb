//! Fleet mode reached through envoyproxy/ratelimit's own Redis variables, unchanged from a
//! ratelimit deployment: `REDIS_URL` as `host:port` with `REDIS_SOCKET_TYPE=tcp` and a
//! `REDIS_AUTH` password, a Unix socket's path, and the settings refused with a reason. A real
//! `redis-server` with `requirepass`; a stock sells only while Redis answers (it fails closed),
//! so what sells shows the server reached it.

use crate::common;

use std::process::Command;

use common::redis_server::{Reach, Redis};
use common::{metric, send, Server};

const STOCKS: &str = r#"domain: fleet
descriptors:
  - key: item
    rate_limit: {algorithm: stock, requests_per_unit: 5}
"#;

const ITEM: &str =
    r#"{"domain":"fleet","descriptors":[{"entries":[{"key":"item","value":"sku"}]}]}"#;

/// A password that needs percent-encoding in a URL.
const PASSWORD: &str = "s3cr@t/pw";

/// Sends `ITEM` in rounds until 5 sold or the rounds run out; returns what sold.
fn sell(s: &Server) -> u64 {
    let mut sold = 0;
    for _ in 0..40 {
        sold += send(s, ITEM, 4).0;
        if sold >= 5 {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    sold
}

#[test]
fn ratelimits_tcp_address_and_password_reach_redis() {
    let Some(redis) = Redis::start_reached(Reach {
        password: Some(PASSWORD),
        ..Reach::default()
    }) else {
        return;
    };
    let addr = format!("127.0.0.1:{}", redis.port);
    let env = [
        ("REDIS_SOCKET_TYPE", "tcp"),
        ("REDIS_URL", addr.as_str()),
        ("REDIS_AUTH", PASSWORD),
    ];
    let s = Server::start(STOCKS, &[], &env);
    assert_eq!(sell(&s), 5, "the stock sold through Redis, exactly");
    assert_eq!(metric(&s, "cellgate_fleet_limits{state=\"connected\"}"), 1);
    assert!(redis.dbsize() > 0, "the stock's state is in Redis");

    // The same address with a wrong password: Redis refuses it, the stock fails closed.
    let wrong = [
        ("REDIS_SOCKET_TYPE", "tcp"),
        ("REDIS_URL", addr.as_str()),
        ("REDIS_AUTH", "not-the-password"),
    ];
    let w = Server::start(STOCKS, &[], &wrong);
    assert_eq!(sell(&w), 0, "nothing sells without Redis");
    assert_eq!(metric(&w, "cellgate_fleet_limits{state=\"connected\"}"), 0);
}

#[test]
fn a_unix_sockets_path_reaches_redis() {
    let Some(redis) = Redis::start_reached(Reach {
        password: Some(PASSWORD),
        unix_socket: true,
    }) else {
        return;
    };
    let path = redis.socket().display().to_string();
    // No REDIS_SOCKET_TYPE: a path is a Unix socket.
    let env = [("REDIS_URL", path.as_str()), ("REDIS_AUTH", PASSWORD)];
    let s = Server::start(STOCKS, &[], &env);
    assert_eq!(sell(&s), 5);
    assert!(redis.dbsize() > 0);
}

/// Runs the binary with `env` and no listeners; its exit code and standard error.
fn refused(env: &[(&str, &str)]) -> (Option<i32>, String) {
    let mut c = Command::new(env!("CARGO_BIN_EXE_cellgate-server"));
    c.args(["--grpc", "off", "--http", "off", "--resp", "off"])
        .env_remove("REDIS_URL");
    for (k, v) in env {
        c.env(k, v);
    }
    let out = c.output().expect("run");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn redis_settings_it_cannot_honour_are_refused_with_the_reason() {
    let cases: [(&[(&str, &str)], &str); 4] = [
        (
            &[
                ("REDIS_TYPE", "SENTINEL"),
                ("REDIS_URL", "mymaster,127.0.0.1:26379"),
            ],
            "REDIS_TYPE=SENTINEL is not supported",
        ),
        (
            &[("BACKEND_TYPE", "memcache")],
            "BACKEND_TYPE=memcache is not supported",
        ),
        (
            &[
                ("REDIS_URL", "127.0.0.1:1"),
                ("REDIS_TLS_CACERT", "/ca.pem"),
            ],
            "SSL_CERT_FILE",
        ),
        (
            &[("REDIS_SOCKET_TYPE", "tcp"), ("REDIS_URL", "redis-host")],
            "is not host:port",
        ),
    ];
    for (env, says) in cases {
        let (code, err) = refused(env);
        assert_eq!(code, Some(1), "{env:?}: {err}");
        assert!(err.contains(says), "{env:?}: {err}");
    }
}

#[test]
fn fleets_with_different_cache_key_prefixes_keep_apart_in_one_redis() {
    let Some(redis) = Redis::start() else { return };
    let url = redis.url();
    let a = Server::start(
        STOCKS,
        &[],
        &[("REDIS_URL", url.as_str()), ("CACHE_KEY_PREFIX", "team_a:")],
    );
    let b = Server::start(
        STOCKS,
        &[],
        &[("REDIS_URL", url.as_str()), ("CACHE_KEY_PREFIX", "team_b:")],
    );
    // Each fleet has its own stock of 5 (one fleet would sell 5 in all).
    assert_eq!(sell(&a), 5);
    assert_eq!(sell(&b), 5);
    let mut c = redis.connection().expect("connect");
    let keys: Vec<String> = redis::cmd("KEYS").arg("*").query(&mut c).expect("KEYS");
    for prefix in ["team_a:cgs:", "team_b:cgs:"] {
        assert!(
            keys.iter().any(|k| k.contains(prefix)),
            "{prefix}: {keys:?}"
        );
    }
    let (code, err) = refused(&[("REDIS_URL", "127.0.0.1:1"), ("CACHE_KEY_PREFIX", "{x}")]);
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("CACHE_KEY_PREFIX"), "{err}");
}
