//! Admission semantics beyond check: reservations (the leaky bucket as a queue) and their
//! cancellation, refunds, queued limiters, per-call and runtime quotas, and all-or-nothing
//! admission across limiters. Everything here runs on a `ManualClock`; the real-clock waits
//! are in `tests/waiting.rs`.

use std::collections::HashMap;
use std::time::Duration;

use cellgate::clock::{Clock, ManualClock};
use cellgate::{check_all, ConfigError, Decision, KeyedLimiter, Limiter, Quota, Reservation};
use proptest::prelude::*;

/// A GCRA configuration as raw numbers.
#[derive(Debug, Clone, Copy)]
struct G {
    t: u64,
    burst: u32,
}

impl G {
    fn quota(self) -> Quota {
        Quota::with_interval(Duration::from_nanos(self.t)).with_burst(self.burst)
    }
}

fn configs() -> impl Strategy<Value = G> {
    (1u64..=1_000, 1u32..=8).prop_map(|(t, burst)| G { t, burst })
}

/// One operation on a single key.
#[derive(Debug, Clone, Copy)]
enum Op {
    /// Move the clock forward by this many intervals / 4.
    Advance(u8),
    Check(u32),
    /// Reserve n, accepting a wait of this many intervals / 2.
    Reserve(u32, u8),
    /// Cancel the outstanding reservation with this index (modulo their number).
    Cancel(usize),
}

fn ops(burst: u32) -> impl Strategy<Value = Vec<Op>> {
    let op = prop_oneof![
        3 => (0u8..=8).prop_map(Op::Advance),
        2 => (1..=burst + 1).prop_map(Op::Check),
        4 => ((1..=burst + 1), 0u8..=12).prop_map(|(n, w)| Op::Reserve(n, w)),
        2 => any::<usize>().prop_map(Op::Cancel),
    ];
    prop::collection::vec(op, 1..80)
}

/// Units admitted at one acting time (`now + delay`); `None` once cancelled.
struct Acting {
    at: u64,
    units: u32,
    reservation: Option<Reservation>,
}

/// Runs `ops` on a keyed GCRA limiter and returns every admission with its acting time.
fn run(g: G, ops: &[Op]) -> Vec<Acting> {
    let clock = ManualClock::new();
    clock.set_ns(1_000_000);
    let l = KeyedLimiter::<u8>::gcra(g.quota())
        .clock(clock.clone())
        .build()
        .unwrap();
    let mut acting: Vec<Acting> = vec![];
    let mut cancelled = false;
    for &op in ops {
        let now = clock.now();
        match op {
            Op::Advance(q) => clock.advance_ns(g.t * u64::from(q) / 4),
            Op::Check(n) => {
                let d = l.check_n(&0, n);
                assert_eq!(d.delay_ns(), 0, "a limiter without a queue never delays");
                if d.is_allowed() {
                    acting.push(Acting {
                        at: now,
                        units: n,
                        reservation: None,
                    });
                }
            }
            Op::Reserve(n, w) => {
                let max_wait = g.t * u64::from(w) / 2;
                let r = l.reserve(&0, n, Duration::from_nanos(max_wait));
                let d = r.decision();
                if r.is_allowed() {
                    assert!(d.delay_ns() <= max_wait, "{d:?} waits past {max_wait}");
                    assert!(n <= g.burst, "more than the burst at once");
                    let at = now + d.delay_ns();
                    // First come, first served: until a place is given back, a later
                    // reservation never acts before an earlier one. (A cancelled place, wherever
                    // it was, may then go to a newcomer: the conformance bound still holds.)
                    let last_at = acting.iter().map(|a| a.at).max().unwrap_or(0);
                    if !cancelled {
                        assert!(
                            at >= last_at,
                            "reservation at {at} overtakes one at {last_at}"
                        );
                    }
                    assert_eq!(r.units(), n);
                    acting.push(Acting {
                        at,
                        units: n,
                        reservation: Some(r),
                    });
                } else {
                    assert_eq!(r.units(), 0);
                    // Denied: waiting `retry_after` is exactly what it would take.
                    if let Some(retry) = d.retry_after_ns() {
                        assert!(n <= g.burst);
                        let peek = l.peek_n(&0, n);
                        assert!(!peek.is_allowed() || max_wait < peek.delay_ns());
                        assert!(retry > 0);
                    } else {
                        assert!(n > g.burst, "{d:?}");
                    }
                }
            }
            Op::Cancel(i) => {
                let open: Vec<usize> = (0..acting.len())
                    .filter(|&j| acting[j].reservation.is_some())
                    .collect();
                if !open.is_empty() {
                    let j = open[i % open.len()];
                    let r = acting[j].reservation.take().unwrap();
                    cancelled |= l.cancel(&0, r);
                    acting[j].units = 0;
                }
            }
        }
        let p = l.peek(&0);
        assert!(p.remaining() <= p.limit());
    }
    acting
}

/// The GCRA conformance bound: in any closed interval of length `L`, at most
/// `burst + floor(L / T)` units act.
fn assert_conforms(g: G, acting: &[Acting]) {
    let mut at: Vec<(u64, u32)> = acting
        .iter()
        .filter(|a| a.units > 0)
        .map(|a| (a.at, a.units))
        .collect();
    at.sort_unstable();
    for i in 0..at.len() {
        let mut units = 0u64;
        for &(t, n) in &at[i..] {
            units += u64::from(n);
            let bound = u64::from(g.burst) + (t - at[i].0) / g.t;
            assert!(
                units <= bound,
                "{units} units act in [{}, {t}], bound {bound}: {at:?}",
                at[i].0
            );
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// Reservations, cancellations and checks in any mix: the units that act (admitted and
    /// not cancelled, at now + delay) never exceed the GCRA bound, delays never exceed the
    /// accepted wait, reservations are served in order, remaining never exceeds the limit.
    #[test]
    fn reservations_and_cancels_conform((g, ops) in configs().prop_flat_map(|g| (Just(g), ops(g.burst)))) {
        let acting = run(g, &ops);
        assert_conforms(g, &acting);
    }

    /// A queued limiter's check is a reservation with a wait of `queue * T` on the same
    /// burst: same verdict, delay, retry_after and state.
    #[test]
    fn queue_is_a_standing_reservation(
        g in configs(),
        queue in 0u32..6,
        steps in prop::collection::vec((0u64..2_000, 1u32..=9), 1..60),
    ) {
        let clock = ManualClock::new();
        let queued = Limiter::gcra(g.quota().with_queue(queue)).clock(clock.clone()).build().unwrap();
        let plain = Limiter::gcra(g.quota()).clock(clock.clone()).build().unwrap();
        let wait = Duration::from_nanos(g.t * u64::from(queue));
        for (dt, n) in steps {
            clock.advance_ns(dt);
            let a = queued.check_n(n);
            let b = plain.reserve(n, wait).decision();
            prop_assert_eq!(a.is_allowed(), b.is_allowed());
            prop_assert_eq!(a.delay(), b.delay());
            prop_assert_eq!(a.retry_after(), b.retry_after());
            prop_assert_eq!(a.reset_after(), b.reset_after());
            prop_assert_eq!(a.limit(), g.burst + queue);
            prop_assert!(a.remaining() <= a.limit());
        }
    }

    /// reserve with no wait is check_n; cancel right after (nothing in between) restores the
    /// state exactly; a refund right after a check at the same instant does too, unless it
    /// would go past a fresh key's budget.
    #[test]
    fn zero_wait_reserve_is_check_and_undo_is_exact(
        g in configs(),
        steps in prop::collection::vec((0u64..3_000, 1u32..=9, any::<bool>()), 1..60),
    ) {
        let clock = ManualClock::new();
        let a = Limiter::gcra(g.quota()).clock(clock.clone()).build().unwrap();
        let b = Limiter::gcra(g.quota()).clock(clock.clone()).build().unwrap();
        for (dt, n, undo) in steps {
            clock.advance_ns(dt);
            let before = a.peek();
            let r = a.reserve(n, Duration::ZERO);
            let d = b.check_n(n);
            prop_assert_eq!(r.decision(), d);
            if undo && r.is_allowed() {
                prop_assert!(a.cancel(r));
                prop_assert_eq!(a.peek(), before);
                prop_assert!(b.refund(n));
                // A refund is clamped at a fresh budget; right after the admission it is exact.
                prop_assert_eq!(b.peek(), before);
            }
            prop_assert_eq!(a.peek(), b.peek());
        }
    }

    /// Refunds never create more than a fresh key's budget, whatever is refunded.
    #[test]
    fn refunds_never_exceed_the_quota(
        g in configs(),
        steps in prop::collection::vec((0u64..3_000, 0u32..=9, 0u32..=20), 1..60),
    ) {
        let clock = ManualClock::new();
        let l = KeyedLimiter::<u8>::gcra(g.quota()).clock(clock.clone()).build().unwrap();
        for (dt, n, back) in steps {
            clock.advance_ns(dt);
            l.check_n(&1, n);
            l.refund(&1, back);
            let p = l.peek(&1);
            prop_assert!(p.remaining() <= g.burst);
            // Never more than `burst` at once after any refunds.
            prop_assert!(!l.peek_n(&1, g.burst + 1).is_allowed());
        }
    }
}

#[test]
fn cancel_of_a_shadowed_reservation_keeps_the_later_ones_places() {
    // T = 1 s, burst 1. A acts at 0, B at 1 s, C at 2 s.
    let clock = ManualClock::new();
    let l = Limiter::gcra(Quota::with_interval(Duration::from_secs(1)))
        .clock(clock.clone())
        .build()
        .unwrap();
    let wait = Duration::from_secs(10);
    let a = l.reserve(1, wait);
    let b = l.reserve(1, wait);
    let c = l.reserve(1, wait);
    let secs: Vec<u64> = [&a, &b, &c].iter().map(|r| r.delay().as_secs()).collect();
    assert_eq!(secs, [0, 1, 2]);
    // B gives up. C keeps its place at 2 s; handing B's place to a newcomer at the end of the
    // schedule would put it at 2 s beside C, so nothing comes back.
    assert!(!l.cancel(b));
    assert_eq!(l.reserve(1, wait).delay().as_secs(), 3);
    // The last one in the schedule gives up: its place is reused.
    let e = l.reserve(1, wait);
    assert_eq!(e.delay().as_secs(), 4);
    assert!(l.cancel(e));
    assert_eq!(l.reserve(1, wait).delay().as_secs(), 4);
    // Cancelling twice cannot happen (cancel takes the reservation by value), and a denied
    // reservation holds nothing.
    let denied = l.reserve(1, Duration::ZERO);
    assert!(!denied.is_allowed());
    assert!(!l.cancel(denied));
}

#[test]
fn cancel_after_part_of_the_place_elapsed_gives_back_the_rest() {
    let clock = ManualClock::new();
    let l = Limiter::gcra(Quota::with_interval(Duration::from_millis(100)).with_burst(2))
        .clock(clock.clone())
        .build()
        .unwrap();
    let r = l.reserve(2, Duration::ZERO); // TAT at 200 ms
    assert!(r.is_allowed());
    clock.advance(Duration::from_millis(150));
    // 150 ms of the 200 ms taken have elapsed: 1.5 units were earned back already.
    assert_eq!(l.peek().remaining(), 1);
    assert!(l.cancel(r));
    assert_eq!(l.peek().remaining(), 2);
    assert_eq!(l.peek().reset_after(), Duration::ZERO);
}

/// Every algorithm: a reservation cancelled with nothing in between leaves no trace.
#[test]
fn cancel_restores_every_algorithm_exactly() {
    let clock = ManualClock::new();
    clock.set(Duration::from_millis(1_500));
    let limiters: Vec<Limiter<ManualClock>> = vec![
        Limiter::gcra(Quota::per_second(3))
            .clock(clock.clone())
            .build()
            .unwrap(),
        Limiter::fixed_window(3, Duration::from_secs(1))
            .clock(clock.clone())
            .build()
            .unwrap(),
        Limiter::sliding_window(3, Duration::from_secs(1))
            .clock(clock.clone())
            .build()
            .unwrap(),
        Limiter::stock(3).clock(clock.clone()).build().unwrap(),
    ];
    for l in &limiters {
        l.check();
        let before = l.peek();
        let r = l.reserve(2, Duration::ZERO);
        assert!(r.is_allowed(), "{l:?}");
        assert_eq!(r.delay(), Duration::ZERO);
        assert_ne!(l.peek(), before);
        assert!(l.cancel(r), "{l:?}");
        assert_eq!(l.peek(), before, "{l:?}");
    }
}

#[test]
fn window_refunds_and_cancels_stay_in_their_window() {
    let clock = ManualClock::new();
    let fixed = Limiter::fixed_window(3, Duration::from_secs(1))
        .clock(clock.clone())
        .build()
        .unwrap();
    let r = fixed.reserve(2, Duration::from_secs(5));
    assert_eq!(r.delay(), Duration::ZERO, "windows never schedule ahead");
    fixed.check();
    assert!(!fixed.check().is_allowed());
    assert!(fixed.refund(1));
    assert_eq!(fixed.peek().remaining(), 1);
    assert!(fixed.refund(10));
    assert_eq!(fixed.peek().remaining(), 3, "never below zero");
    fixed.check_n(3);
    clock.advance(Duration::from_secs(1));
    // The window of the reservation is over: cancelling or refunding it gives nothing.
    assert!(!fixed.cancel(r));
    assert!(!fixed.refund(1));
    assert_eq!(fixed.peek().remaining(), 3);

    let clock = ManualClock::new();
    let sliding = Limiter::sliding_window(4, Duration::from_secs(1))
        .clock(clock.clone())
        .build()
        .unwrap();
    let r = sliding.reserve(2, Duration::ZERO);
    sliding.check();
    clock.advance(Duration::from_millis(1_500)); // the units now weigh half in the previous window
    sliding.check(); // another thread's admission: the word changed since r
    assert_eq!(sliding.peek().remaining(), 1); // 3 * 0.5 = 1.5 -> 2 counted, plus 1
    assert!(sliding.cancel(r)); // r's 2 come off the previous window's count
    assert_eq!(sliding.peek().remaining(), 2); // 1 * 0.5 -> 1, plus 1
}

#[test]
fn stock_refund_puts_units_back() {
    let skus = KeyedLimiter::<u32>::stock(2).build().unwrap();
    assert!(skus.check_n(&9, 2).is_allowed());
    assert!(!skus.check(&9).is_allowed());
    assert!(skus.refund(&9, 1)); // a failed payment
    assert!(skus.check(&9).is_allowed());
    assert!(!skus.refund(&10, 0));
}

#[test]
fn refund_and_cancel_create_no_keys() {
    let clock = ManualClock::new();
    let l = KeyedLimiter::<u64>::gcra(Quota::per_second(1))
        .clock(clock.clone())
        .max_keys(16)
        .build()
        .unwrap();
    let r = l.reserve(&1, 1, Duration::ZERO);
    assert_eq!(l.len(), 1);
    clock.advance(Duration::from_secs(1));
    assert_eq!(l.evict_idle(), 1);
    assert!(
        !l.cancel(&1, r),
        "an evicted key had nothing left to give back"
    );
    assert!(!l.refund(&2, 1));
    assert!(l.is_empty());
}

#[test]
fn check_with_applies_the_callers_quota_to_the_same_history() {
    let clock = ManualClock::new();
    let free = Quota::per_second(2);
    let premium = Quota::per_second(10);
    let l = KeyedLimiter::<&str>::gcra(free)
        .clock(clock.clone())
        .build()
        .unwrap();
    assert!(l.check_n(&"f", 2).is_allowed());
    assert!(!l.check(&"f").is_allowed());
    // The same key under the premium quota: a backlog of 1 s (2 x 500 ms) is within its
    // 10 x 100 ms tolerance exactly, so nothing more fits now...
    let d = l.check_with(&"f", &premium, 1).unwrap();
    assert!(!d.is_allowed());
    assert_eq!(d.retry_after(), Some(Duration::from_millis(100)));
    // ...but 100 ms later one does.
    clock.advance(Duration::from_millis(100));
    assert!(l.check_with(&"f", &premium, 1).unwrap().is_allowed());
    let p = l.check_with(&"p", &premium, 10).unwrap();
    assert!(p.is_allowed());
    assert_eq!(p.limit(), 10);
    // Invalid quotas and other algorithms are errors, never panics.
    let bad = Quota::per_second(0);
    assert_eq!(
        l.check_with(&"p", &bad, 1),
        Err(ConfigError::Zero { field: "count" })
    );
    let w = KeyedLimiter::<u8>::fixed_window(5, Duration::from_secs(1))
        .build()
        .unwrap();
    assert!(matches!(
        w.check_with(&1, &premium, 1),
        Err(ConfigError::Unsupported { .. })
    ));
    assert!(matches!(
        w.set_quota(premium),
        Err(ConfigError::Unsupported { .. })
    ));
}

#[test]
fn set_quota_keeps_each_keys_backlog_in_time() {
    let clock = ManualClock::new();
    let l = KeyedLimiter::<u8>::gcra(Quota::per_second(10))
        .clock(clock.clone())
        .max_keys(64)
        .build()
        .unwrap();
    assert!(l.check_n(&1, 5).is_allowed()); // backlog 500 ms
    l.set_quota(Quota::per_second(1).with_burst(10)).unwrap();
    // 500 ms of backlog against T = 1 s, DVT = 10 s: 9 left.
    let d = l.peek(&1);
    assert_eq!((d.limit(), d.remaining()), (10, 9));
    assert_eq!(d.reset_after(), Duration::from_millis(500));
    assert_eq!(l.peek(&2).remaining(), 10);
    // A failed set_quota changes nothing.
    assert!(l.set_quota(Quota::per_second(0)).is_err());
    assert_eq!(l.peek(&2).remaining(), 10);
    // The direct limiter too, and checks from other threads see the new quota.
    let g = Limiter::gcra(Quota::per_second(1))
        .clock(clock.clone())
        .build()
        .unwrap();
    g.set_quota(Quota::per_second(1).with_burst(1000)).unwrap();
    let admitted: u32 = std::thread::scope(|s| {
        let hs: Vec<_> = (0..4)
            .map(|_| s.spawn(|| (0..400).filter(|_| g.check().is_allowed()).count() as u32))
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).sum()
    });
    assert_eq!(admitted, 1000);
}

fn fingerprint(d: &Decision) -> (bool, u32, u32, Option<Duration>, Duration) {
    (
        d.is_allowed(),
        d.limit(),
        d.remaining(),
        d.retry_after(),
        d.reset_after(),
    )
}

#[test]
fn a_denied_multi_check_leaves_no_trace() {
    let clock = ManualClock::new();
    clock.set(Duration::from_millis(2_500));
    let user = KeyedLimiter::<u64>::gcra(Quota::per_minute(5))
        .clock(clock.clone())
        .build()
        .unwrap();
    let window = KeyedLimiter::<u64>::sliding_window(10, Duration::from_secs(1))
        .clock(clock.clone())
        .build()
        .unwrap();
    let fixed = Limiter::fixed_window(10, Duration::from_secs(1))
        .clock(clock.clone())
        .build()
        .unwrap();
    let sku = KeyedLimiter::<u64>::stock(1).build().unwrap();
    user.check(&1);
    window.check(&1);
    fixed.check();
    sku.check(&42); // sold out
    let before = [
        fingerprint(&user.peek(&1)),
        fingerprint(&window.peek(&1)),
        fingerprint(&fixed.peek()),
    ];
    let d = check_all([
        (&user.gate(&1), 1),
        (&window.gate(&1), 1),
        (&fixed, 1),
        (&sku.gate(&42), 1),
    ]);
    assert!(!d.is_allowed());
    assert_eq!(d.denied_by(), Some(3));
    assert!(d.decisions()[..3].iter().all(Decision::is_allowed));
    assert_eq!(d.retry_after(), None, "a sold-out stock never comes back");
    let after = [
        fingerprint(&user.peek(&1)),
        fingerprint(&window.peek(&1)),
        fingerprint(&fixed.peek()),
    ];
    assert_eq!(before, after);

    // The longest wait among those that deny, and later gates are only peeked.
    let slow = Limiter::gcra(Quota::with_interval(Duration::from_secs(3)))
        .clock(clock.clone())
        .build()
        .unwrap();
    slow.check();
    let user_before = user.peek(&2);
    let d = check_all([(&user.gate(&2), 1), (&slow, 1), (&fixed, 11)]);
    assert_eq!(d.denied_by(), Some(1));
    assert_eq!(d.retry_after(), None, "11 never fits a window of 10");
    let d = check_all([(&user.gate(&2), 1), (&slow, 1), (&fixed, 9)]);
    assert_eq!(d.retry_after(), Some(Duration::from_secs(3)));
    assert_eq!(user.peek(&2), user_before);
    assert_eq!(fixed.peek().remaining(), 9);
}

/// Frozen clock, several threads buying: no limiter ever admits beyond its quota, every
/// successful multi-check is charged on every limiter exactly once, and the rolled-back ones
/// leave per-user budgets exactly intact (nobody else charges a user's key).
#[test]
fn concurrent_multi_checks_never_over_admit() {
    const THREADS: u64 = 4;
    const ATTEMPTS: u32 = 300;
    let clock = ManualClock::new();
    clock.set(Duration::from_secs(10));
    let per_user = KeyedLimiter::<u64>::gcra(Quota::per_hour(40))
        .clock(clock.clone())
        .build()
        .unwrap();
    let sku = KeyedLimiter::<u64>::stock(100).build().unwrap();
    // Shared and tight: its rollbacks race with other threads' charges.
    let global = Limiter::gcra(Quota::per_hour(90))
        .clock(clock.clone())
        .build()
        .unwrap();
    let buy = |user: u64, i: u32| {
        let d = if i % 2 == 0 {
            check_all([(&global, 1), (&per_user.gate(&user), 1), (&sku.gate(&7), 1)])
        } else {
            check_all([(&sku.gate(&7), 1), (&per_user.gate(&user), 1), (&global, 1)])
        };
        u32::from(d.is_allowed())
    };
    let mut wins: HashMap<u64, u32> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..THREADS)
            .map(|user| {
                let buy = &buy;
                s.spawn(move || (user, (0..ATTEMPTS).map(|i| buy(user, i)).sum::<u32>()))
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let exact = |wins: &HashMap<u64, u32>| {
        let total: u32 = wins.values().sum();
        assert!(total <= 90, "global admitted {total} > 90");
        let sold = 100 - sku.peek(&7).remaining();
        assert_eq!(sold, total, "the stock's rollbacks are exact");
        for (user, won) in wins {
            assert!(*won <= 40);
            let used = 40 - per_user.peek(user).remaining();
            assert_eq!(
                used, *won,
                "user {user}: rolled-back charges come back exactly"
            );
        }
        // On a frozen clock with no queue, a GCRA rollback gives back all of its charge,
        // whatever was admitted in between.
        let global_used = 90 - global.peek().remaining();
        assert_eq!(global_used, total, "the global rollbacks are exact");
        (total, sold)
    };
    exact(&wins);
    // While the threads ran, a buyer holding a charge it was about to roll back could make the
    // others see a full global budget (failing closed, as it must) for as long as it was
    // descheduled: nothing says the buyers exhausted anything. Capacity is lost only if it
    // stays withheld after they are gone: one more round, alone, must use up a budget.
    for user in 0..THREADS {
        *wins.entry(user).or_default() += (0..ATTEMPTS).map(|i| buy(user, i)).sum::<u32>();
    }
    // 4 users of 40 and a stock of 100: the global budget of 90 is the one to run out.
    let (total, _) = exact(&wins);
    assert_eq!(
        total, 90,
        "capacity withheld after the buyers left: {wins:?}"
    );
}
