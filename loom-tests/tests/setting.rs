//! Loom models of a runtime quota change (`set_quota`) racing checks, on the real direct
//! `Limiter`: its GCRA parameters live in a seqlock of four words (`src/sync/seqlock.rs`), whose
//! sequence number and words are loom atomics under `cfg(loom)`, so loom explores a reader's
//! loads between a writer's stores (and stale values of each word).
//!
//! What must hold: a check or peek is decided by *one* quota, never by a mix of the words of
//! two; two racing `set_quota`s leave one whole quota in force. The quotas are chosen so that
//! every word shows in the decisions: `check_n(2)` on a fresh cell is admitted iff `2T` fits
//! the tolerance, its `remaining` is `(ceiling - 2T) / T`, its `reset_after` `2T` and its
//! `limit` the fourth word; a mix of any two quotas' words gives a decision none of them gives.
//!
//! Run: `RUSTFLAGS="--cfg loom" LOOM_MAX_PREEMPTIONS=3 cargo test --release`.

use std::time::Duration;

use cellgate::clock::ManualClock;
use cellgate::{Decision, Limiter, Quota};
use loom::sync::Arc;
use loom::thread;

use crate::common::{model, serially};

/// The frozen time.
const NOW: u64 = 1_000;

/// `(interval ns, burst)` of the three quotas: the built one and two runtime changes.
const Q1: (u64, u32) = (100, 1);
const Q2: (u64, u32) = (300, 3);
const Q3: (u64, u32) = (50, 8);

fn quota((t, burst): (u64, u32)) -> Quota {
    Quota::new(burst, Duration::from_nanos(t * u64::from(burst))).with_burst(burst)
}

fn limiter(q: (u64, u32)) -> Limiter<ManualClock> {
    let clock = ManualClock::new();
    clock.set_ns(NOW);
    Limiter::gcra(quota(q))
        .clock(clock)
        .build()
        .expect("valid quota")
}

/// `check_n(2)` and `peek()` on a fresh limiter with quota `q`, serially.
fn fresh_decisions(q: (u64, u32)) -> (Decision, Decision) {
    serially(move || {
        let l = limiter(q);
        (l.check_n(2), limiter(q).peek())
    })
}

#[test]
fn the_quotas_are_told_apart() {
    // The serial decisions differ pairwise, so a decision identifies its quota.
    let ds: Vec<_> = [Q1, Q2, Q3].into_iter().map(fresh_decisions).collect();
    for i in 0..3 {
        for j in 0..i {
            assert_ne!(ds[i].0, ds[j].0);
            assert_ne!(ds[i].1, ds[j].1);
        }
    }
    assert!(!ds[0].0.is_allowed() && ds[1].0.is_allowed() && ds[2].0.is_allowed());
}

/// A: `set_quota(Q2)` then `set_quota(Q3)` ‖ main: `check_n(2)`. The check reads the seqlock
/// only after the first change is published, so it can overlap the second write word by word.
#[test]
fn check_never_mixes_two_quotas() {
    let serial: Vec<(Decision, Decision)> = [Q1, Q2, Q3]
        .into_iter()
        .map(|q| {
            serially(move || {
                // The check under `q`, then the state it leaves judged under Q3 (in force after
                // the join).
                let l = limiter(q);
                let d = l.check_n(2);
                l.set_quota(quota(Q3)).expect("GCRA");
                (d, l.peek())
            })
        })
        .collect();
    model("setting::check_never_mixes_two_quotas", move || {
        let l = Arc::new(limiter(Q1));
        let writer = {
            let l = Arc::clone(&l);
            thread::spawn(move || {
                l.set_quota(quota(Q2)).expect("GCRA");
                l.set_quota(quota(Q3)).expect("GCRA");
            })
        };
        let d = l.check_n(2);
        writer.join().unwrap();
        let after = l.peek();
        assert!(
            serial.contains(&(d, after)),
            "a decision no single quota gives: {d:?}, then {after:?}; serial: {serial:?}"
        );
    });
}

/// A: `set_quota(Q2)` ‖ B: `set_quota(Q3)` ‖ main: `peek()`. The peek sees one whole quota;
/// afterwards one whole quota (the last writer's) is in force, judged by `check_n(2)`.
#[test]
fn racing_set_quotas_leave_one_whole_quota() {
    let fresh: Vec<(Decision, Decision)> = [Q1, Q2, Q3].into_iter().map(fresh_decisions).collect();
    model(
        "setting::racing_set_quotas_leave_one_whole_quota",
        move || {
            let l = Arc::new(limiter(Q1));
            let writers: Vec<_> = [Q2, Q3]
                .into_iter()
                .map(|q| {
                    let l = Arc::clone(&l);
                    thread::spawn(move || l.set_quota(quota(q)).expect("GCRA"))
                })
                .collect();
            let peeked = l.peek();
            for w in writers {
                w.join().unwrap();
            }
            let checked = l.check_n(2);
            assert!(
                fresh.iter().any(|(_, p)| *p == peeked),
                "a peek no single quota gives: {peeked:?}"
            );
            assert!(
                fresh[1..].iter().any(|(c, _)| *c == checked),
                "after both changes, a check no single quota of theirs gives: {checked:?}"
            );
        },
    );
}
