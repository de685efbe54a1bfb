//! Failures a user can see: the Redis errors a deployment meets (no password, a wrong or
//! changed one, an ACL user without the permissions, a key of another type, scripting
//! disabled, a URL whose port is not Redis's) each say what to fix, the last error and its
//! time stay on the limiter, and a limiter can start while Redis is down. Each test starts its own real `redis-server`.

use crate::common;

use std::time::Duration;

use cellgate_redis::{Fleet, FleetError, FleetState};

/// The message of a failed connect.
fn refusal(url: &str, name: &str) -> String {
    match Fleet::stock(name, 100).connect(url) {
        Ok(_) => panic!("{url}: connected"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn a_missing_or_wrong_password_says_to_fix_the_url() {
    let Some(r) = common::redis_with(&["--requirepass", "s3cret"]) else {
        return;
    };
    let none = refusal(&r.url(), "auth");
    assert!(none.contains("requires a password"), "{none}");
    let wrong = refusal(&format!("redis://:nope@127.0.0.1:{}", r.port), "auth");
    assert!(wrong.contains("refused the user or password"), "{wrong}");
    let f = Fleet::stock("auth", 100).connect(&r.admin_url()).unwrap();
    common::wait_for("a sale with the password", || f.check().is_allowed());
}

#[test]
fn a_password_changed_mid_run_is_visible_and_recovers() {
    let Some(mut r) = common::redis_with(&["--requirepass", "old"]) else {
        return;
    };
    let f = Fleet::rate("pw", 1_000, Duration::from_secs(1))
        .connect(&r.admin_url())
        .unwrap();
    assert!(f.last_error().is_none());
    r.cmd::<()>(&["CONFIG", "SET", "requirepass", "new"]);
    r.password = Some("new".into());
    r.cmd::<()>(&["CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes"]);
    common::wait_for("the refused password on the limiter", || {
        f.state() != FleetState::Connected
            && f.last_error()
                .is_some_and(|e| e.error.to_string().contains("refused the user or password"))
    });
    let seen = f.last_error().unwrap();
    assert!(seen.at.elapsed().unwrap() < Duration::from_secs(60));
    r.cmd::<()>(&["CONFIG", "SET", "requirepass", "old"]);
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while f.state() != FleetState::Connected {
        assert!(
            std::time::Instant::now() < deadline,
            "not connected again: {:?}",
            f.last_error()
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn an_acl_user_is_told_what_to_grant_and_the_documented_grant_works() {
    let Some(r) = common::redis_with(&[]) else {
        return;
    };
    let url = format!("redis://app:pw@127.0.0.1:{}", r.port);
    // No scripting at all.
    r.cmd::<()>(&["ACL", "SETUSER", "app", "on", ">pw", "~cellgate:*", "+ping"]);
    let no_eval = refusal(&url, "acl");
    assert!(no_eval.contains("+evalsha"), "{no_eval}");
    // Scripting, but not the commands the script runs.
    r.cmd::<()>(&["ACL", "SETUSER", "app", "+evalsha", "+eval", "+script|load"]);
    let no_hset = refusal(&url, "acl");
    assert!(no_hset.contains("+evalsha"), "{no_hset}");
    // The README's grant, for both scripts (the fleet's and the keyed one's).
    let mut grant = vec!["ACL", "SETUSER", "app", "reset", "on", ">pw", "~cellgate:*"];
    grant.extend(cellgate_redis::ACL_COMMANDS.split_whitespace());
    r.cmd::<()>(&grant);
    let f = Fleet::stock("acl", 100).connect(&url).unwrap();
    common::wait_for("a sale as the ACL user", || f.check().is_allowed());
    let k = cellgate_redis::KeyedFleet::stock("acl-keys", 10)
        .connect(&url)
        .unwrap();
    assert!(k.check_blocking("sku", 1).is_allowed());
}

#[test]
fn a_key_of_another_type_and_disabled_scripting_are_named() {
    let Some(r) = common::redis_with(&["--rename-command", "EVALSHA", ""]) else {
        return;
    };
    let disabled = refusal(&r.url(), "any");
    assert!(disabled.contains("does not run Lua scripts"), "{disabled}");
    let Some(r) = common::redis_with(&[]) else {
        return;
    };
    r.cmd::<()>(&["SET", &cellgate_redis::wire::keys("taken")[0], "x"]);
    let wrong_type = refusal(&r.url(), "taken");
    assert!(wrong_type.contains("holds another type"), "{wrong_type}");
}

#[test]
fn a_limiter_starts_while_redis_is_down_and_joins_when_it_answers() {
    let Some(mut r) = common::redis_with(&[]) else {
        return;
    };
    r.stop();
    let rate = Fleet::rate("boot", 1_000, Duration::from_secs(1))
        .burst(320)
        .start(&r.url())
        .unwrap();
    let stock = Fleet::stock("boot-stock", 100).start(&r.url()).unwrap();
    assert_eq!(rate.state(), FleetState::Fallback);
    assert_eq!(stock.state(), FleetState::Partitioned);
    // The rate admits its outage share (burst 320 / 16 = 20 at once); the stock nothing.
    let admitted = (0..100).filter(|_| rate.check().is_allowed()).count() as u64;
    assert!((20..100).contains(&admitted), "admitted {admitted}");
    assert!(!stock.check().is_allowed(), "a stock sold without Redis");
    common::wait_for("the failed connection on the limiter", || {
        rate.last_error()
            .is_some_and(|e| matches!(e.error, FleetError::Redis(_)))
    });
    r.start();
    common::wait_for("both connected", || {
        rate.state() == FleetState::Connected && stock.state() == FleetState::Connected
    });
    common::wait_for("the outage admissions charged", || {
        rate.stats().charged_back >= admitted
    });
    common::wait_for("a sale once Redis answers", || stock.check().is_allowed());
}

/// A URL whose port serves something else (an HTTP server here, a real one on 127.0.0.1 that
/// answers every connection with a 400, as a web service on a mistyped port would): the error
/// says the server does not speak the Redis protocol, not only that a reply did not parse.
#[test]
fn a_url_whose_port_is_not_redis_says_so() {
    use std::io::{Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let (done, stop) = std::sync::mpsc::channel::<()>();
    let server = std::thread::spawn(move || {
        listener.set_nonblocking(true).unwrap();
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        while stop.try_recv().is_err() && std::time::Instant::now() < deadline {
            match listener.accept() {
                Ok((mut s, _)) => {
                    s.set_nonblocking(false).unwrap();
                    s.set_read_timeout(Some(Duration::from_secs(1))).unwrap();
                    let _ = s.read(&mut [0u8; 1024]);
                    let _ = s.write_all(b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\n\r\n");
                }
                Err(_) => std::thread::sleep(Duration::from_millis(5)),
            }
        }
    });
    let message = refusal(&format!("redis://127.0.0.1:{port}"), "http");
    done.send(()).unwrap();
    server.join().unwrap();
    assert!(
        message.contains("does not speak the Redis protocol"),
        "{message}"
    );
}

#[test]
fn a_unix_socket_url_works() {
    let dir = common::TempDir::new("unix");
    let socket = dir.0.join("redis.sock");
    let path = socket.to_str().unwrap();
    let Some(_r) = common::redis_with(&["--unixsocket", path, "--unixsocketperm", "700"]) else {
        return;
    };
    let f = Fleet::stock("unix", 100)
        .connect(&format!("redis+unix://{path}"))
        .unwrap();
    common::wait_for("a sale over the unix socket", || f.check().is_allowed());
}

#[test]
fn a_keyed_limiter_starts_while_redis_is_down_and_joins_when_it_answers() {
    let Some(mut r) = common::redis_with(&[]) else {
        return;
    };
    r.stop();
    let users = cellgate_redis::KeyedFleet::rate("kboot", 10, Duration::from_secs(1))
        .burst(5)
        .start(&r.url())
        .unwrap();
    let skus = cellgate_redis::KeyedFleet::stock("kboot-stock", 5)
        .start(&r.url())
        .unwrap();
    assert_eq!(users.state(), FleetState::Fallback);
    assert_eq!(skus.state(), FleetState::Partitioned);
    // The outage share admits a key's first unit at once (burst 1), the stock nothing.
    let d = users.check_blocking("alice", 1);
    assert!(d.is_allowed(), "{d:?}");
    assert_eq!(d.via(), cellgate_redis::Via::Fallback);
    assert!(!skus.check_blocking("sku", 1).is_allowed());
    r.start();
    common::wait_for("both connected", || {
        users.state() == FleetState::Connected && skus.state() == FleetState::Connected
    });
    common::wait_for("the outage admission charged", || {
        users.stats().charged_back >= 1
    });
    assert!(skus.check_blocking("sku", 1).is_allowed());
}
