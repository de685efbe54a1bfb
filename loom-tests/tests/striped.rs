//! Loom models of the hot-key mode (`cellgate::StripedLimiter`, `src/limiter/striped/mod.rs`): one quota or
//! stock split over several cells (loom `AtomicU64`s), each updated by the crate's one
//! compare-and-swap loop, with checks that fall back from stripe to stripe and stock requests
//! that gather units from several stripes and give them back when they cannot gather enough.
//!
//! Each model checks the promise of the module docs in every interleaving: never more admitted
//! than the whole limit, no unit lost (sold plus left is the stock), and only outcomes that some
//! serial order of the same requests gives; where the race can go more than one way, that every
//! way is reached.
//!
//! Run: `RUSTFLAGS="--cfg loom" LOOM_MAX_PREEMPTIONS=3 cargo test --release --test models striped::`.

use std::collections::BTreeSet;
use std::time::Duration;

use cellgate::clock::{Clock, ManualClock};
use cellgate::{Quota, StripedLimiter};
use loom::sync::Arc;
use loom::thread;

use crate::common::{model, model_reaching};

fn stock(units: u32, stripes: usize) -> Arc<StripedLimiter<ManualClock>> {
    Arc::new(
        StripedLimiter::stock(units)
            .stripes(stripes)
            .clock(ManualClock::new())
            .build()
            .expect("valid stock"),
    )
}

/// Stock 2 over two stripes (1 + 1). A asks for 2 units from stripe 0, which must gather them
/// from both stripes; B asks for 1 from stripe 1. Serially either A gets both (B is refused) or
/// B gets one and A, finding one unit, gives it back (1 left). A gather holding a unit while B
/// looks must never let both through, lose a unit, or refuse both.
#[test]
fn gather_races_a_unit_request() {
    let expected = BTreeSet::from([(true, false), (false, true)]);
    model_reaching("striped gather vs unit", expected, || {
        let l = stock(2, 2);
        let a = {
            let l = Arc::clone(&l);
            thread::spawn(move || l.check_n_from(0, 2).is_allowed())
        };
        let b = l.check_n_from(1, 1).is_allowed();
        let a = a.join().expect("thread A");
        let left = l.remaining();
        let sold = if a { 2 } else { 0 } + u64::from(b);
        assert_eq!(
            sold + left,
            2,
            "a unit was lost or sold twice: A {a}, B {b}, left {left}"
        );
        assert!(
            (a, b, left) == (true, false, 0) || (a, b, left) == (false, true, 1),
            "no serial order gives A {a}, B {b}, left {left}"
        );
        (a, b)
    });
}

/// Stock 1 over two stripes (1 + 0): both threads start at the empty stripe and fall back to
/// the other. Exactly one of them gets the unit, in every interleaving.
#[test]
fn fallback_sells_the_last_unit_once() {
    model("striped fallback, last unit", || {
        let l = stock(1, 2);
        let other = {
            let l = Arc::clone(&l);
            thread::spawn(move || l.check_n_from(1, 1).is_allowed())
        };
        let mine = l.check_n_from(1, 1).is_allowed();
        let other = other.join().expect("other thread");
        assert!(
            mine ^ other,
            "sold {} times",
            u8::from(mine) + u8::from(other)
        );
        assert_eq!(l.remaining(), 0);
    });
}

/// GCRA burst 2 over two stripes (1 + 1) at a frozen instant: two threads make two checks each,
/// starting at their own stripe. Exactly two are admitted in every interleaving: never more than
/// the burst, and no check refused while a stripe still had room (a refusal reads every stripe,
/// and at a frozen instant room only shrinks).
#[test]
fn frozen_gcra_admits_exactly_the_burst() {
    model("striped gcra, frozen clock", || {
        let l = Arc::new(
            StripedLimiter::gcra(Quota::per_second(10).with_burst(2))
                .stripes(2)
                .clock(ManualClock::new())
                .build()
                .expect("valid quota"),
        );
        let other = {
            let l = Arc::clone(&l);
            thread::spawn(move || (0..2).filter(|_| l.check_n_from(1, 1).is_allowed()).count())
        };
        let mine = (0..2).filter(|_| l.check_n_from(0, 1).is_allowed()).count();
        let other = other.join().expect("other thread");
        assert_eq!(mine + other, 2, "admitted {mine} + {other} of a burst of 2");
        assert_eq!(l.remaining(), 0);
    });
}

/// Stock 1 over two stripes (1 + 0). A asks for 2 units from stripe 1 (a gather: no stripe
/// holds 2) while B restocks 1 unit (to stripe 0). Whatever the order, no unit is lost or sold
/// twice: sold + left == 1 + 1; A gets its 2 units only if the restock landed before its gather
/// looked at stripe 0, and then nothing is left. Both ways are reached.
#[test]
fn restock_races_a_gather() {
    model_reaching(
        "striped restock vs gather",
        BTreeSet::from([true, false]),
        || {
            let l = stock(1, 2);
            let a = {
                let l = Arc::clone(&l);
                thread::spawn(move || l.check_n_from(1, 2).is_allowed())
            };
            l.restock(1).expect("a stock");
            let a = a.join().expect("thread A");
            let left = l.remaining();
            let sold = if a { 2 } else { 0 };
            assert_eq!(
                sold + left,
                2,
                "a unit was lost or sold twice: A {a}, left {left}"
            );
            a
        },
    );
}

/// `relaxed_clock()`: a clock that stepped back, two checks that each find their first stripe's
/// stamp later than the clock (`src/sync/high_water.rs`, `StripedLimiter` "A clock that steps
/// back"). GCRA
/// 10/s, burst 3 over three stripes (one unit each, a stripe interval of 300 ms). Before the
/// threads: a check from stripe 1 admitted at 12 s, one from stripe 0 at 10 s; then the clock
/// reads 9 s. A starts at stripe 0 (stamp 10 s), B at stripe 1 (stamp 12 s): each refused by
/// its first stripe, each raises the high-water mark to its stamp, in either order, racing the
/// other's raise and checks. B always raises 12 s (its first stripe refuses it at 9 or 10 s),
/// so afterwards the mark is 12 s whatever the order: with the clock at 0, `remaining()`
/// (which decides at the mark) is what it is with the clock at 12 s. B is always admitted (at
/// 12 s, stripe 2 or 0 is free); A unless B took the last free stripe first. Mutation caught:
/// the mark raised by a plain store instead of `fetch_max` (A's 10 s landing after B's 12 s
/// leaves stripe 0, TAT 10.3 s, uncounted).
#[test]
fn racing_raises_keep_the_latest_mark() {
    model_reaching(
        "striped high-water mark, racing raises",
        BTreeSet::from([true, false]),
        || {
            let clock = ManualClock::new();
            let l = Arc::new(
                StripedLimiter::gcra(Quota::per_second(10).with_burst(3))
                    .stripes(3)
                    .clock(clock.clone())
                    .relaxed_clock()
                    .build()
                    .expect("valid quota"),
            );
            clock.set(Duration::from_secs(12));
            assert!(l.check_n_from(1, 1).is_allowed());
            clock.set(Duration::from_secs(10));
            assert!(l.check_n_from(0, 1).is_allowed());
            clock.set(Duration::from_secs(9));
            let a = {
                let l = Arc::clone(&l);
                thread::spawn(move || l.check_n_from(0, 1).is_allowed())
            };
            let b = l.check_n_from(1, 1).is_allowed();
            let a = a.join().expect("thread A");
            assert!(b, "B refused");
            clock.set(Duration::ZERO);
            let at_mark = l.remaining();
            clock.set(Duration::from_secs(12));
            let at_12 = l.remaining();
            assert_eq!(at_mark, at_12, "the mark is not 12 s (A {a})");
            a
        },
    );
}

loom::thread_local! {
    /// This model thread's clock reading (ns), for [`ThreadClock`].
    static READING: std::cell::Cell<u64> = std::cell::Cell::new(0);
}

/// A clock that reads a different time on each model thread: two threads checking at the same
/// instant with readings a second apart, as cores whose clocks disagree, or a thread that read
/// its clock and was descheduled.
struct ThreadClock;

impl ThreadClock {
    fn set(at: Duration) {
        READING.with(|r| r.set(at.as_nanos() as u64));
    }
}

impl Clock for ThreadClock {
    fn now(&self) -> u64 {
        READING.with(std::cell::Cell::get)
    }
}

/// `strict_clock()`: every admission raises the limiter's high-water mark to the time it was
/// admitted at, and every check decides at the mark at least (`StripedLimiter`, "A clock that
/// steps back"). GCRA 10/s, burst 2 over two stripes (one unit each, a stripe interval of
/// 200 ms). A checks with its clock at 10 s, C with its clock at 12 s, both from stripe 0,
/// racing: both are admitted in every interleaving (C on stripe 0; A on stripe 0 before it, or
/// on stripe 1, at 10 s or, if it read the mark after C's raise, at 12 s), and each raises the
/// mark. Afterwards the mark must be 12 s whatever the order the raises landed in: with the
/// clock at 9 s, `remaining()` (which decides at the mark) is what it is at 12 s. Returns what
/// remains at 12 s: 1 if stripe 1 is free by then, 0 if A took it at 12 s (the race went both
/// ways). Mutations caught: no raise at all (A on stripe 1 at 10 s leaves it busy at 9 s, free
/// at 12 s); the mark raised by a plain store after its load instead of `fetch_max` (A's 10 s
/// landing after C's 12 s).
#[test]
fn admissions_raise_the_mark_to_the_latest() {
    racing_admissions_raise_the_mark("striped strict time, racing admissions", true);
}

/// The default mode, the same race: the two readings are seconds apart, far more than the
/// mark's lag (the quota's interval, 100 ms), so each admission lifts the mark as under
/// `strict_clock()`, and the same outcomes follow. Mutation caught: the default never lifting
/// the mark (`HighWater::lift_lagged` a no-op): the stamps alone leave it at 0.
#[test]
fn default_admissions_beyond_the_lag_raise_the_mark() {
    racing_admissions_raise_the_mark("striped default time, racing admissions", false);
}

fn racing_admissions_raise_the_mark(name: &str, strict: bool) {
    model_reaching(name, BTreeSet::from([0, 1]), move || {
        let b = StripedLimiter::gcra(Quota::per_second(10).with_burst(2))
            .stripes(2)
            .clock(ThreadClock);
        let l = Arc::new(
            if strict { b.strict_clock() } else { b }
                .build()
                .expect("valid quota"),
        );
        let a = {
            let l = Arc::clone(&l);
            thread::spawn(move || {
                ThreadClock::set(Duration::from_secs(10));
                assert!(l.check_n_from(0, 1).is_allowed(), "A refused");
            })
        };
        ThreadClock::set(Duration::from_secs(12));
        assert!(l.check_n_from(0, 1).is_allowed(), "C refused");
        a.join().expect("thread A");
        ThreadClock::set(Duration::from_secs(9));
        let at_mark = l.remaining();
        ThreadClock::set(Duration::from_secs(12));
        let at_12 = l.remaining();
        assert_eq!(at_mark, at_12, "the mark is not 12 s");
        at_12
    });
}
