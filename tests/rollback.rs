//! Exact rollbacks: after any mix of admitted and rolled-back `check_all`s, under any
//! concurrency, every limiter holds exactly what was admitted; and what `check_all` reports for
//! a rolled-back limiter is the state after the rollback.

use std::collections::HashMap;
use std::time::Duration;

use cellgate::clock::ManualClock;
use cellgate::{check_all, check_all_in, AnyLimiter, Decision, KeyedLimiter, Limiter, Quota};

/// A seckill: gates `[global GCRA, SKU stock, per-user GCRA]`, a frozen clock, a few
/// threads fighting over a small stock and shared per-user keys. Once the stock sells out every
/// attempt charges the global limiter and is rolled back; the global limiter must end up
/// charged exactly what was admitted, and so must every user.
#[test]
fn contended_check_all_leaves_every_limiter_holding_exactly_what_was_admitted() {
    const GLOBAL: u32 = 50_000;
    const STOCK: u32 = 300;
    const PER_USER: u32 = 3;
    const USERS: u64 = 40;
    const ATTEMPTS: u64 = 6_000;
    for threads in 2..=4u64 {
        let clock = ManualClock::new();
        clock.set(Duration::from_secs(5));
        // Burst = the whole budget: a frozen clock never refills it.
        let global = Limiter::gcra(Quota::per_hour(GLOBAL))
            .clock(clock.clone())
            .build()
            .unwrap();
        let stock = KeyedLimiter::<u32>::stock(STOCK).build().unwrap();
        let per_user = KeyedLimiter::<u64>::gcra(Quota::per_hour(PER_USER))
            .clock(clock.clone())
            .build()
            .unwrap();
        let admitted: Vec<HashMap<u64, u32>> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..threads)
                .map(|t| {
                    let (global, stock, per_user) = (&global, &stock, &per_user);
                    s.spawn(move || {
                        let mut mine = HashMap::new();
                        for i in 0..ATTEMPTS {
                            // Neighbouring threads share users, so per-user keys are contended.
                            let user = (i * threads + t) % USERS;
                            let d = check_all([
                                (global as &dyn AnyLimiter, 1),
                                (&stock.gate(&42), 1),
                                (&per_user.gate(&user), 1),
                            ]);
                            if d.is_allowed() {
                                *mine.entry(user).or_insert(0) += 1;
                            }
                        }
                        mine
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        let mut per_key: HashMap<u64, u32> = HashMap::new();
        for m in admitted {
            for (k, v) in m {
                *per_key.entry(k).or_insert(0) += v;
            }
        }
        let total: u32 = per_key.values().sum();
        assert!(total <= STOCK, "{threads} threads: oversold {total}");
        assert_eq!(
            global.peek().remaining(),
            GLOBAL - total,
            "{threads} threads: the global limiter must hold exactly the {total} admitted"
        );
        assert_eq!(stock.peek(&42).remaining(), STOCK - total);
        for user in 0..USERS {
            let got = per_key.get(&user).copied().unwrap_or(0);
            assert!(got <= PER_USER, "user {user} admitted {got}");
            assert_eq!(
                per_user.peek(&user).remaining(),
                PER_USER - got,
                "{threads} threads: user {user} must hold exactly its {got} admissions"
            );
        }
    }
}

/// The same race, played out by hand: a charge, another admission behind it, then the
/// rollback of the first. The rolled-back unit comes back although it is not the last place.
#[test]
fn a_rolled_back_charge_behind_later_admissions_comes_back() {
    let clock = ManualClock::new();
    let l = Limiter::gcra(Quota::per_second(10))
        .clock(clock.clone())
        .build()
        .unwrap();
    let ours = AnyLimiter::charge(&l, &(), 2);
    assert!(ours.is_allowed());
    assert!(l.check().is_allowed()); // someone else, scheduled behind us
    assert!(AnyLimiter::cancel(&l, &(), ours));
    assert_eq!(
        l.peek().remaining(),
        9,
        "only the other request's unit is spent"
    );

    // Keyed, with time passing between the charge and the rollback: only the part of the
    // rolled-back units that time has not already given back is returned, never more.
    let k = KeyedLimiter::<u8>::gcra(Quota::per_second(10))
        .clock(clock.clone())
        .build()
        .unwrap();
    let ours = AnyLimiter::charge(&k, &1, 3);
    assert!(k.check(&1).is_allowed());
    clock.advance(Duration::from_millis(150));
    assert!(AnyLimiter::cancel(&k, &1, ours));
    // TAT 400 ms after the 4 units. The rollback cannot tell which part of the schedule the
    // 150 ms that passed used up, so it counts them against the rolled-back units (fail
    // closed): 300 - 150 ms come back, leaving the TAT at 250 ms.
    assert_eq!(k.peek(&1).reset_after(), Duration::from_millis(100));
}

/// `MultiDecision::decisions()` and `check_all_in`'s output report what each limiter holds
/// after the rollback, not the admission that was rolled back.
#[test]
fn decisions_report_the_state_after_the_rollback() {
    let global = Limiter::gcra(Quota::per_minute(10))
        .clock(ManualClock::new())
        .build()
        .unwrap();
    let sold_out = Limiter::stock(0).build().unwrap();
    let d = check_all([(&global as &dyn AnyLimiter, 3), (&sold_out, 1)]);
    assert_eq!(d.denied_by(), Some(1));
    assert!(d.decisions()[0].is_allowed(), "3 units would fit: a peek");
    assert_eq!(d.decisions()[0].remaining(), 10, "nothing of it is charged");
    assert_eq!(global.peek().remaining(), 10);

    let mut out = [Decision::NONE; 2];
    let gates: [(&dyn AnyLimiter, u32); 2] = [(&global, 4), (&sold_out, 1)];
    assert_eq!(check_all_in(&gates, &mut out), Some(1));
    assert_eq!(out[0].remaining(), 10);
    assert!(!out[1].is_allowed());

    // Admitted: each limiter's own admission.
    let stock = Limiter::stock(5).build().unwrap();
    let d = check_all([(&global as &dyn AnyLimiter, 2), (&stock, 1)]);
    assert!(d.is_allowed());
    assert_eq!(
        (d.decisions()[0].remaining(), d.decisions()[1].remaining()),
        (8, 4)
    );
}

mod ceiling {
    use super::*;
    use proptest::prelude::*;

    /// One operation on a GCRA limiter.
    #[derive(Debug, Clone)]
    enum Op {
        /// The clock moves forward by this many ns.
        Advance(u64),
        /// A charge of `n` units (a `check_all` gate's first step), kept for a later rollback.
        Charge(u32),
        /// A plain check of `n` units.
        Check(u32),
        /// The rollback of the outstanding charge at this index (modulo their count).
        Cancel(usize),
    }

    fn ops() -> impl Strategy<Value = Vec<Op>> {
        proptest::collection::vec(
            prop_oneof![
                (0u64..400).prop_map(Op::Advance),
                (1u32..4).prop_map(Op::Charge),
                (1u32..4).prop_map(Op::Check),
                any::<usize>().prop_map(Op::Cancel),
            ],
            1..80,
        )
    }

    proptest! {
        /// Any mix of checks, charges and rollbacks (in any order, not only the last) on a
        /// monotone clock: at every admission at reading `a`, the units admitted at readings
        /// `>= s` and not rolled back fit `burst + (a - s) / T` for every `s`, i.e.
        /// `units * T <= a - s + burst * T`: rolled-back units consume nothing, and no rollback
        /// ever hands out more than the quota.
        #[test]
        fn rollbacks_keep_the_ceiling_over_what_was_really_admitted(
            t in 1u64..200,
            burst in 1u32..6,
            ops in ops(),
        ) {
            let clock = ManualClock::new();
            clock.set_ns(1_000);
            let l = Limiter::gcra(Quota::with_interval(Duration::from_nanos(t)).with_burst(burst))
                .clock(clock.clone())
                .build()
                .unwrap();
            // (reading, units, live) of every admission.
            let mut admitted: Vec<(u64, u32, bool)> = Vec::new();
            let mut open: Vec<(usize, cellgate::Reservation)> = Vec::new();
            let mut now = 1_000u64;
            for op in ops {
                let got = match op {
                    Op::Advance(ns) => {
                        now += ns;
                        clock.set_ns(now);
                        None
                    }
                    Op::Charge(n) => {
                        let r = AnyLimiter::charge(&l, &(), n);
                        r.is_allowed().then(|| {
                            admitted.push((now, n, true));
                            open.push((admitted.len() - 1, r));
                        })
                    }
                    Op::Check(n) => l.check_n(n).is_allowed().then(|| {
                        admitted.push((now, n, true));
                    }),
                    Op::Cancel(i) => {
                        if !open.is_empty() {
                            let (at, r) = open.remove(i % open.len());
                            AnyLimiter::cancel(&l, &(), r);
                            admitted[at].2 = false;
                        }
                        None
                    }
                };
                if got.is_some() {
                    let a = now;
                    for &(s, _, live) in &admitted {
                        if !live {
                            continue;
                        }
                        let units: u64 = admitted
                            .iter()
                            .filter(|&&(r, _, live)| live && r >= s)
                            .map(|&(_, n, _)| u64::from(n))
                            .sum();
                        prop_assert!(
                            units * t <= a - s + u64::from(burst) * t,
                            "{} units at readings >= {} by {}", units, s, a
                        );
                    }
                }
            }
            // On a frozen clock a rollback is exact: cancelling every open charge leaves what
            // the checks and kept charges alone leave, once the clock stops.
            for (at, r) in open.drain(..) {
                AnyLimiter::cancel(&l, &(), r);
                admitted[at].2 = false;
            }
            let live: u64 = admitted.iter().filter(|a| a.2 && a.0 == now).map(|a| u64::from(a.1)).sum();
            prop_assert!(u64::from(l.peek().remaining()) + live <= u64::from(burst));
        }
    }
}
