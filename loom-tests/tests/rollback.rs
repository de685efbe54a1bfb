//! Loom models of exact rollbacks: a rolled-back charge racing other admissions on the same
//! state, on the real limiters (loom atomics under `cfg(loom)`), with the clock frozen.
//!
//! The property: after the rollback the limiter holds exactly what the other threads' admitted
//! requests alone would leave, whatever landed between the charge and its rollback, and those
//! requests are decided as if the rolled-back units had been charged at the moment they were
//! (no limiter ever admits beyond its quota, not even for an instant).
//!
//! Mutations these models catch (each planted in `src/` by hand, the model run, then removed):
//! - `gcra_rollback_races_check`: GCRA's cancel freeing only the last place in the schedule
//!   (the rule before exact rollbacks: `tat != after` gives nothing back) leaves the rolled-back
//!   units charged when the check lands in between; giving back one interval more than the
//!   units (`g = (n + 1)·T`) leaves the cell below what the check alone leaves.
//! - `striped_rollback_races_check`: a striped cancel that gives back one unit fewer than the
//!   reservation took (`restock(w, n - 1)`), and a gather that gives up without returning the
//!   units it took, each leave the stock short of `3 - B's unit`.
//!
//! Run: `RUSTFLAGS="--cfg loom" LOOM_MAX_PREEMPTIONS=3 cargo test --release --test models rollback::`.

use std::time::Duration;

use cellgate::clock::ManualClock;
use cellgate::{AnyLimiter, Decision, Limiter, Quota};
use loom::sync::Arc;
use loom::thread;

use crate::common::{model, serially};

/// Emission interval, ns.
const T: u64 = 100;
/// The frozen time.
const NOW: u64 = 1_000;

fn frozen_clock() -> ManualClock {
    let clock = ManualClock::new();
    clock.set_ns(NOW);
    clock
}

fn gcra(burst: u32, clock: &ManualClock) -> Limiter<ManualClock> {
    Limiter::gcra(Quota::new(burst, Duration::from_nanos(T * u64::from(burst))).with_burst(burst))
        .clock(clock.clone())
        .build()
        .expect("valid quota")
}

/// What a limiter holds: the peek (its `reset_after` is the TAT minus now) and how many single
/// units it still admits, one after another.
fn observe(lim: &Limiter<ManualClock>) -> (Decision, u32) {
    let peek = lim.peek();
    let mut admitted = 0;
    while lim.check().is_allowed() {
        admitted += 1;
    }
    (peek, admitted)
}

/// Thread A charges 2 units of a GCRA cell of burst 3 and rolls them back (the `check_all`
/// rollback: `AnyLimiter::charge`, then `AnyLimiter::cancel`); thread B checks 1 unit (or 2) meanwhile.
/// Wherever B's check lands (before A's charge, between the charge and the cancel, or after),
/// the cell ends exactly as B's check alone leaves it, and B is decided as if A's units were
/// held from the charge to the cancel.
#[test]
fn gcra_rollback_races_check() {
    for b in [1u32, 2] {
        // What B's check alone leaves, and what B gets with A's 2 units held (burst 3).
        let (alone, with_a_held) = serially(move || {
            let lim = gcra(3, &frozen_clock());
            let admitted_alone = lim.check_n(b).is_allowed();
            let alone = observe(&lim);
            let lim = gcra(3, &frozen_clock());
            assert!(lim.check_n(2).is_allowed());
            ((admitted_alone, alone), lim.check_n(b).is_allowed())
        });
        model(&format!("gcra_rollback_races_check b={b}"), move || {
            let lim = Arc::new(gcra(3, &frozen_clock()));
            let a = {
                let lim = Arc::clone(&lim);
                thread::spawn(move || {
                    let r = AnyLimiter::charge(&*lim, &(), 2);
                    // Denied only behind B's 2 units (then there is nothing to roll back).
                    r.is_allowed().then(|| AnyLimiter::cancel(&*lim, &(), r))
                })
            };
            let got_b = lim.check_n(b).is_allowed();
            let cancelled = a.join().expect("thread A");
            assert_ne!(
                cancelled,
                Some(false),
                "an admitted charge's rollback always gives something back"
            );
            assert!(
                got_b == alone.0 || got_b == with_a_held,
                "B is decided with or without A's units held"
            );
            let state = observe(&lim);
            if got_b {
                assert_eq!(
                    state, alone.1,
                    "the cell holds exactly B's admission, b = {b}"
                );
            } else {
                // Denied while A's units were held: nothing at all is charged.
                assert_eq!(state, serially_fresh(), "nothing charged, b = {b}");
            }
        });
    }
}

/// What a fresh cell of burst 3 shows.
fn serially_fresh() -> (Decision, u32) {
    let lim = gcra(3, &frozen_clock());
    observe(&lim)
}

/// A striped stock of 3 units over 2 stripes (2 + 1). Thread A charges all 3 (through
/// `AnyLimiter::charge`: no stripe holds 3, so it gathers from both) and rolls them back; thread B
/// checks 1 unit meanwhile. Whatever the interleaving: B is admitted unless A's 3 units are held
/// when it looks (then it is refused, and A's rollback gives them all back), A is admitted
/// unless B's unit is gone first (then its gather gives back what it took), and the stock ends
/// holding exactly `3 - B's unit`: not one unit lost or created by the gather, its failure or
/// its rollback. Both ways of the race are reached.
#[test]
fn striped_rollback_races_check() {
    use cellgate::StripedLimiter;
    use std::collections::BTreeSet;
    use std::sync::Mutex;

    let seen = std::sync::Arc::new(Mutex::new(BTreeSet::new()));
    let seen_in = std::sync::Arc::clone(&seen);
    model("striped_rollback_races_check", move || {
        let sku = Arc::new(
            StripedLimiter::stock(3)
                .stripes(2)
                .clock(ManualClock::new())
                .build()
                .expect("valid stock"),
        );
        let a = {
            let sku = Arc::clone(&sku);
            thread::spawn(move || {
                let r = AnyLimiter::charge(&*sku, &(), 3);
                let admitted = r.is_allowed();
                let cancelled = admitted && AnyLimiter::cancel(&*sku, &(), r);
                (admitted, cancelled)
            })
        };
        let b = sku.check().is_allowed();
        let (a_admitted, a_cancelled) = a.join().expect("thread A");
        assert_eq!(a_admitted, a_cancelled, "an admitted charge is rolled back");
        assert!(a_admitted || b, "someone gets the stock");
        assert_eq!(
            sku.remaining(),
            3 - u64::from(b),
            "the stock holds exactly B's sale (A admitted: {a_admitted})"
        );
        seen_in.lock().unwrap().insert((a_admitted, b));
    });
    let seen = seen.lock().unwrap();
    assert!(
        seen.contains(&(true, true)) && seen.contains(&(true, false)),
        "both ways of the race are reached: {seen:?}"
    );
}
