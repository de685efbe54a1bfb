//! Counts what a steady-state check costs in shared writes that are not its own compare-and-swap:
//! locks taken and per-thread cache renewals (each of which takes the table's lock and writes a
//! shared reference count), with 1, 3 and 9 limiters used in turn by each thread, as a request
//! that checks a limiter per IP, per user and per SKU does.
//!
//! "Steady state": every key checked has been checked before, and the tables have stopped
//! growing. The checks then include hits that admit, hits that deny, peeks, `check_all` with its
//! rollbacks, and peeks and denials of keys the tables have never held (a sold-out rush), none
//! of which may take a lock.

use std::time::Duration;

use crate::admission::gate::check_all;
use crate::clock::ManualClock;
use crate::limiter::direct::Limiter;
use crate::limiter::keyed::KeyedLimiter;
use crate::limiter::striped::StripedLimiter;
use crate::quota::Quota;
use crate::sync::counts::{count, Event};

fn locks_taken() -> u64 {
    count(Event::Lock)
}

fn refreshes() -> u64 {
    count(Event::Refresh)
}

/// Keys per keyed limiter.
const KEYS: u64 = 300;

/// The limiters one thread uses in turn: `limiters` keyed ones of every kind, on the default
/// store and (every second one) on the exact store (`exact_keys()`: the growing table with the
/// keys beside the slots), and with 3 or more, a direct limiter and a striped stock besides.
struct Set {
    keyed: Vec<KeyedLimiter<u64, ManualClock>>,
    direct: Option<Limiter<ManualClock>>,
    striped: Option<StripedLimiter<ManualClock>>,
}

fn set(limiters: usize, clock: &ManualClock) -> Set {
    let extra = limiters >= 3;
    let keyed = (0..limiters)
        .map(|i| {
            let builder = match i % 4 {
                0 => KeyedLimiter::<u64>::gcra(Quota::per_second(1_000).with_burst(4)),
                1 => KeyedLimiter::<u64>::fixed_window(4, Duration::from_secs(1)),
                2 => KeyedLimiter::<u64>::sliding_window(4, Duration::from_secs(1)),
                _ => KeyedLimiter::<u64>::stock(4),
            };
            let builder = builder.clock(clock.clone());
            if i % 2 == 1 {
                builder.exact_keys()
            } else {
                builder
            }
            .build()
            .expect("valid")
        })
        .collect();
    Set {
        keyed,
        direct: extra.then(|| {
            Limiter::gcra(Quota::per_second(1_000).with_burst(4))
                .clock(clock.clone())
                .build()
                .expect("valid")
        }),
        striped: extra.then(|| {
            StripedLimiter::stock(1_000)
                .stripes(2)
                .clock(clock.clone())
                .build()
                .expect("valid")
        }),
    }
}

/// One pass of the shapes a request runs, over every key.
fn pass(set: &Set, absent: u64) {
    for k in 0..KEYS {
        for l in &set.keyed {
            l.check(&k);
            l.peek(&k);
            // Keys never held: a peek, and a check of more than a fresh key allows.
            l.peek(&(absent + k));
            l.check_n(&(absent + k), 5);
        }
        if let (Some(direct), Some(striped)) = (&set.direct, &set.striped) {
            direct.check();
            striped.check();
            let never = absent + k;
            let (a, b) = (set.keyed[0].gate(&k), set.keyed[1].gate(&never));
            // The last denies (5 > its limit): the first three are rolled back.
            assert!(!check_all([(&a, 1), (direct, 1), (striped, 1), (&b, 5)]).is_allowed());
        }
    }
}

/// Locks taken and cache renewals per check of a warmed-up thread using `limiters` limiters.
fn per_steady_pass(limiters: usize) -> (u64, u64) {
    let clock = ManualClock::new();
    clock.set(Duration::from_secs(1));
    let set = set(limiters, &clock);
    // Warm-up: every key inserted (the tables grow to their size), every cache entry taken.
    for _ in 0..2 {
        pass(&set, 1 << 40);
    }
    let (locks, renewals) = (locks_taken(), refreshes());
    pass(&set, 1 << 40);
    // The clock moves: windows roll, GCRA keys refill; still no insert, no lock.
    clock.advance(Duration::from_millis(1500));
    pass(&set, 1 << 40);
    (locks_taken() - locks, refreshes() - renewals)
}

fn assert_no_shared_write(limiters: usize) {
    // Two threads at once, each counting its own (the counts are per thread).
    let threads: Vec<_> = (0..2)
        .map(|_| std::thread::spawn(move || per_steady_pass(limiters)))
        .collect();
    for t in threads {
        let (locks, renewals) = t.join().unwrap();
        assert_eq!(
            (locks, renewals),
            (0, 0),
            "{limiters} limiters per thread: {locks} locks and {renewals} cache renewals in \
             steady-state checks"
        );
    }
}

#[test]
fn one_limiter_per_thread_takes_no_lock_per_check() {
    assert_no_shared_write(1);
}

#[test]
fn three_limiters_per_thread_take_no_lock_per_check() {
    assert_no_shared_write(3);
}

#[test]
fn nine_limiters_per_thread_take_no_lock_per_check() {
    assert_no_shared_write(9);
}

/// The counters count: a new key's insert takes its shard's lock, and a thread's first check of
/// a table takes the table's set into its cache.
#[test]
fn the_counters_see_an_insert_and_a_renewal() {
    let l = KeyedLimiter::<u64>::gcra(Quota::per_second(10))
        .build()
        .expect("valid");
    let (locks, renewals) = (locks_taken(), refreshes());
    assert!(l.check(&1).is_allowed());
    assert!(locks_taken() > locks, "the insert took no lock");
    assert!(refreshes() > renewals, "the first check renewed no entry");
}
