//! The same random sequences of `CL.THROTTLE` calls to redis-cell 0.2.2 (loaded into a local
//! `redis-server`) and to cellgate-server: every reply must be identical, byte for byte.
//!
//! Runs when `CELLGATE_REDIS_CELL_SO` names redis-cell's module (build it with
//! `tests/tools/build-redis-cell.sh DEST`); skips with a message otherwise.
//!
//! # Keeping wall-clock differences out
//!
//! The two servers see each call a few hundred microseconds apart, and each key's history
//! starts at a different instant on each. Every emission interval `T = period / count` here is
//! a whole number of seconds, so a key's backlog is `k·T − e` (whole seconds minus the time
//! `e` elapsed since the key's history began on that server) and every field of the reply is
//! a function of the integers alone as long as `0 < e < 1 s` on both servers (`e = 0` exactly
//! on a key's first call, on both). So each round uses fresh keys and a round that took more
//! than 500 ms of wall time (a noisy machine) is discarded and rerun with new keys: no timing
//! is asserted, and no compared call can straddle a second boundary that the other did not.

use crate::resp_common;
use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use resp_common::{resp, tool, RedisServer, Server};

/// A connection that sends a command and reads one RESP2 reply (an integer array or a line).
struct Conn {
    w: TcpStream,
    r: BufReader<TcpStream>,
}

impl Conn {
    fn new(port: u16) -> Conn {
        let s = TcpStream::connect(("127.0.0.1", port)).expect("connect");
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        s.set_nodelay(true).unwrap();
        Conn {
            r: BufReader::new(s.try_clone().unwrap()),
            w: s,
        }
    }

    fn call(&mut self, args: &[String]) -> String {
        let args: Vec<&[u8]> = args.iter().map(|a| a.as_bytes()).collect();
        self.w.write_all(&resp(&args)).expect("write");
        let mut line = String::new();
        self.r.read_line(&mut line).expect("read");
        let mut reply = line.clone();
        if let Some(n) = line.strip_prefix('*') {
            for _ in 0..n.trim().parse::<usize>().expect("array length") {
                let mut item = String::new();
                self.r.read_line(&mut item).expect("read");
                reply.push_str(&item);
            }
        }
        reply
    }
}

/// splitmix64: a seeded sequence, so a failure names the seed that reproduces it.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// One random call on one of `keys` (parameters, quantities and bad inputs vary per call).
fn random_call(rng: &mut Rng, keys: &[String]) -> Vec<String> {
    let key = keys[rng.below(keys.len() as u64) as usize].clone();
    let interval_s = [1u64, 2, 3, 5, 10, 60, 3600][rng.below(7) as usize];
    let count = 1 + rng.below(10);
    let burst = rng.below(13);
    let mut call = vec![
        "CL.THROTTLE".to_string(),
        key,
        burst.to_string(),
        count.to_string(),
        (interval_s * count).to_string(),
    ];
    match rng.below(10) {
        0 => call.push(rng.below(20).to_string()), // 0, within, and beyond the limit
        1 => call.push("2".into()),
        2 if rng.below(4) == 0 => call[3] = "x1".into(), // redis-cell's parse error
        3 if rng.below(4) == 0 => call.truncate(3),      // redis-cell's usage error
        _ => {}
    }
    call
}

#[test]
fn random_sequences_match_redis_cell() {
    let Some(so) = std::env::var_os("CELLGATE_REDIS_CELL_SO") else {
        eprintln!("SKIPPED: CELLGATE_REDIS_CELL_SO is not set (tests/tools/build-redis-cell.sh)");
        return;
    };
    let Some(redis_server) = tool("redis-server") else {
        return;
    };
    let reference = RedisServer::start(&redis_server, &[so.to_str().expect("utf-8 path")]);
    let ours = Server::start(&[]);
    let mut theirs = Conn::new(reference.port);
    let mut mine = Conn::new(ours.addr.port());
    let seed = 0x5EED_0001;
    let mut rng = Rng(seed);
    let (mut rounds, mut attempts, mut calls) = (0, 0, 0);
    while rounds < 60 {
        attempts += 1;
        assert!(
            attempts < 600,
            "too many rounds over 500 ms: the machine is too slow"
        );
        let keys: Vec<String> = (0..3).map(|i| format!("a{attempts}:k{i}")).collect();
        let started = Instant::now();
        let mut transcript = Vec::new();
        for _ in 0..40 {
            let call = random_call(&mut rng, &keys);
            let want = theirs.call(&call);
            let got = mine.call(&call);
            transcript.push((call, want, got));
        }
        if started.elapsed() > Duration::from_millis(500) {
            continue;
        }
        for (i, (call, want, got)) in transcript.iter().enumerate() {
            assert_eq!(
                got,
                want,
                "seed {seed:#x}, attempt {attempts}, call {i}: {call:?}\nhistory: {:#?}",
                &transcript[..i]
            );
        }
        rounds += 1;
        calls += transcript.len();
    }
    eprintln!("{calls} calls compared in {rounds} rounds ({attempts} attempts)");
}
