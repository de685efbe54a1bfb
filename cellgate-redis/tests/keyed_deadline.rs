//! A keyed check given less than `max_wait` by its caller (`check_n_by`): against a Redis that
//! accepts connections and never answers, such a check is decided by the outage fallback once
//! its own deadline passes, as one given the whole `max_wait` is. No timing assertions.

use std::net::TcpListener;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use cellgate_redis::{FleetState, KeyedFleet, Via};

/// A loopback listener that reads what it is sent and never answers; stops when dropped.
struct Silent {
    port: u16,
    _stop: mpsc::Sender<()>,
}

fn silent() -> Silent {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind a loopback port");
    let port = listener.local_addr().expect("its address").port();
    listener.set_nonblocking(true).expect("non-blocking accept");
    let (stop, stopped) = mpsc::channel::<()>();
    std::thread::spawn(move || {
        let mut held = Vec::new();
        while let Err(mpsc::TryRecvError::Empty) = stopped.try_recv() {
            if let Ok((conn, _)) = listener.accept() {
                let _ = conn.set_nonblocking(true);
                held.push(conn);
            }
            for conn in &mut held {
                let mut sink = [0u8; 4096];
                let _ = std::io::Read::read(conn, &mut sink);
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    });
    Silent { port, _stop: stop }
}

#[test]
fn a_check_whose_deadline_has_passed_is_decided_by_the_fallback() {
    let redis = silent();
    let fleet = KeyedFleet::rate("cut-short", 10, Duration::from_secs(1))
        .max_wait(Duration::from_millis(100))
        .start(&format!("redis://127.0.0.1:{}", redis.port))
        .expect("the limit starts without waiting for Redis");
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .expect("a runtime");
    // The caller's bound is already spent: the outage fallback decides (and admits: the
    // process's share of the key's rate).
    let cut = rt.block_on(fleet.check_n_by("alice", 1, Instant::now()));
    assert_eq!(cut.via(), Via::Fallback);
    assert!(cut.is_allowed());
    // A check given the whole wait, unanswered, is decided the same way.
    let full = rt.block_on(fleet.check_n("bob", 1));
    assert_eq!(full.via(), Via::Fallback);
    assert_ne!(fleet.state(), FleetState::Connected);
    drop(rt);
    fleet.shutdown();
}
