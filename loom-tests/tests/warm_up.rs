//! Loom models of the warm-up algorithm (Guava's `SmoothWarmingUp`, `src/algorithm/warm_up/mod.rs`):
//! the real `cellgate::Limiter::warm_up` (one `Cell`, a loom `AtomicU64`, driven by the same
//! compare-and-swap loop as GCRA) and `KeyedLimiter::warm_up` with `max_keys` (the bounded
//! table: loom-visible slots and shard lock), shared by loom threads.
//!
//! The clock is a frozen `ManualClock`, set from the main thread before any thread is spawned.
//! With a frozen clock a warm-up key is a schedule: one request at a time, each placed at the
//! `next_free` the requests before it left, and each admission moving `next_free` on by its
//! cost, which depends on how many permits the key still stores (a cold key pays more). The
//! configuration makes every cost a whole number of µs (the state's resolution), so the
//! expected schedule is exact integer arithmetic, computed below from the module docs'
//! closed form, not from the implementation.
//!
//! Every model checks that the run is *linearizable*: the results the threads got and the
//! state left behind (keys held and refused, a peek, which at a frozen instant reads both
//! fields of the state, `next_free - now` as its `retry_after` and the missing permits in its
//! `reset_after`, then the schedule of two more one-unit reservations, and a peek `W` after
//! the last one's place) are exactly those of running the same operations one after another,
//! in some order, on a fresh limiter; and that every distinct serial outcome is reached (the
//! race went every way; at preemption bound 2 or more). The frozen-clock models also assert
//! the schedule directly: admitted requests hold distinct places, each at the cost of the
//! units admitted before it, and the final `next_free` is the cost of all admitted units and
//! the missing permits their number (none lost, none counted twice). The moving-clock model
//! (`evict_with_check_behind_the_sweep_keyed`) compares with every order × instant instead.
//!
//! Run: `RUSTFLAGS="--cfg loom" LOOM_MAX_PREEMPTIONS=3 cargo test --release --test models warm_up::`.

use std::time::Duration;

use cellgate::clock::ManualClock;
use cellgate::{Decision, KeyedLimiter, Limiter, Quota};

use crate::common::{
    check_behind_the_sweep, check_linearizable, coverage, coverage_required, deterministic_hashing,
    distant_keys, serial_outcomes, Scenario as Linearizable,
};

/// Stable interval `I`, ns (10 µs).
const I: u64 = 10_000;
/// Warm-up period `W`, ns: `M = W / I = 4` stored permits, threshold `M / 2 = 2`.
const W: u64 = 40_000;
/// The frozen time (a whole µs, long after the origin: a fresh key is idle and cold).
const NOW: u64 = 1_000_000;

/// `P(m) = max(0, W - 2·I·m)² / (2W)`: the stored area above `I` with `m` permits missing
/// (module docs of `warm_up.rs`). Exact for this configuration: 20 µs, 5 µs, then 0.
fn area(missing: u64) -> u64 {
    let d = W.saturating_sub(2 * I * missing);
    d * d / (2 * W)
}

/// The cost of `n` permits with `missing` permits missing: `n·I + P(m) - P(m + n)` (valid
/// while `m + n <= M`, which every model keeps). A cold key: `cost(0, 1) = 25 µs`,
/// `cost(0, 2) = 40 µs`; then `cost(1, 1) = 15 µs`, `cost(1, 2) = 25 µs`, `cost(2, 1) = 10 µs`.
fn cost(missing: u64, n: u64) -> u64 {
    n * I + area(missing) - area(missing + n)
}

/// What one thread does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op {
    CheckN(u32),
    /// `reserve(n, max_wait)`, the wait in ns.
    Reserve(u32, u64),
    EvictIdle,
}

impl Op {
    fn units(self) -> u64 {
        match self {
            Op::CheckN(n) | Op::Reserve(n, _) => u64::from(n),
            Op::EvictIdle => 0,
        }
    }
}

/// What it got back (a reservation as its decision: admitted, with its delay).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Got {
    Decision(Decision),
    Evicted(usize),
}

impl Got {
    fn admitted(&self) -> Option<Decision> {
        match self {
            Got::Decision(d) if d.is_allowed() => Some(*d),
            _ => None,
        }
    }
}

/// The two limiters behind one interface; the keyed one always uses one key.
trait Target: Send + Sync + 'static {
    fn check_n(&self, n: u32) -> Decision;
    fn reserve(&self, n: u32, max_wait: Duration) -> Decision;
    fn evict_idle(&self) -> usize;
    fn peek(&self) -> Decision;
    /// Keys held and keys refused (1 and 0 for the direct limiter).
    fn keys(&self) -> (usize, u64);
}

fn quota() -> Quota {
    Quota::with_interval(Duration::from_nanos(I))
}

impl Target for Limiter<ManualClock> {
    fn check_n(&self, n: u32) -> Decision {
        Limiter::check_n(self, n)
    }
    fn reserve(&self, n: u32, max_wait: Duration) -> Decision {
        Limiter::reserve(self, n, max_wait).decision()
    }
    fn evict_idle(&self) -> usize {
        unreachable!("a direct limiter holds no keys")
    }
    fn peek(&self) -> Decision {
        Limiter::peek(self)
    }
    fn keys(&self) -> (usize, u64) {
        (1, 0)
    }
}

/// A keyed warm-up limiter in the bounded table, used on one key.
struct Keyed(KeyedLimiter<u64, ManualClock>, u64);

impl Target for Keyed {
    fn check_n(&self, n: u32) -> Decision {
        self.0.check_n(&self.1, n)
    }
    fn reserve(&self, n: u32, max_wait: Duration) -> Decision {
        self.0.reserve(&self.1, n, max_wait).decision()
    }
    fn evict_idle(&self) -> usize {
        self.0.evict_idle()
    }
    fn peek(&self) -> Decision {
        self.0.peek(&self.1)
    }
    fn keys(&self) -> (usize, u64) {
        (self.0.len(), self.0.stats().refused)
    }
}

fn direct(clock: &ManualClock) -> Limiter<ManualClock> {
    Limiter::warm_up(quota(), Duration::from_nanos(W))
        .clock(clock.clone())
        .build()
        .expect("valid warm-up")
}

fn keyed(max_keys: usize, clock: &ManualClock) -> Keyed {
    let [key, _] = distant_keys();
    Keyed(
        KeyedLimiter::<u64>::warm_up(quota(), Duration::from_nanos(W))
            .max_keys(max_keys)
            .fixed_capacity()
            .when_full(cellgate::WhenFull::DenyNew)
            .clock(clock.clone())
            .build()
            .expect("valid warm-up"),
        key,
    )
}

fn apply(target: &impl Target, op: Op) -> Got {
    match op {
        Op::CheckN(n) => Got::Decision(target.check_n(n)),
        Op::Reserve(n, wait) => Got::Decision(target.reserve(n, Duration::from_nanos(wait))),
        Op::EvictIdle => Got::Evicted(target.evict_idle()),
    }
}

/// The final state as far as the public API can tell.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Observed {
    /// Keys held, keys refused.
    keys: (usize, u64),
    /// At the model's instant: `retry_after` is `next_free - now`, `reset_after` adds the
    /// refill of the missing permits.
    peek: Decision,
    /// Two more one-unit reservations accepting any wait: the rest of the schedule.
    schedule: [Decision; 2],
    /// A peek `W` after the last reservation's place: the permits accrued since.
    later: Decision,
}

fn observe(target: &impl Target, clock: &ManualClock) -> Observed {
    let keys = target.keys();
    let peek = target.peek();
    let schedule = [
        target.reserve(1, Duration::MAX),
        target.reserve(1, Duration::MAX),
    ];
    clock.advance_ns(schedule[1].delay_ns() + W);
    let later = target.peek();
    Observed {
        keys,
        peek,
        schedule,
        later,
    }
}

/// The wait from the model's instant until `next_free`, read off a peek at that instant.
fn next_free_wait(peek: &Decision) -> u64 {
    if peek.is_allowed() {
        0
    } else {
        peek.retry_after_ns().expect("no horizon in these models")
    }
}

/// The direct assertions on one execution: the admitted requests hold distinct places, each
/// the cost of the units admitted before it (the serial schedule from a cold key, every model
/// starts from one), each within its own `max_wait`; the state's `next_free` is the cost of
/// all of them and its missing permits their number; the number admitted is at most `most`,
/// the most any serial run admits.
fn assert_schedule(ops: &[Op], got: &[Got], seen: &Observed, most: usize) {
    let mut admitted: Vec<(u64, Op)> = ops
        .iter()
        .zip(got)
        .filter_map(|(&op, g)| g.admitted().map(|d| (d.delay_ns(), op)))
        .collect();
    assert!(
        admitted.len() <= most,
        "more admitted than any serial run admits ({most}): {got:#?}"
    );
    admitted.sort_by_key(|&(delay, _)| delay);
    let mut units = 0;
    for &(delay, op) in &admitted {
        assert_eq!(
            delay,
            cost(0, units),
            "not the serial schedule (places shared or skipped): {got:#?}"
        );
        match op {
            Op::CheckN(_) => assert_eq!(delay, 0, "a check never waits: {got:#?}"),
            Op::Reserve(_, wait) => assert!(delay <= wait, "waits past max_wait: {got:#?}"),
            Op::EvictIdle => unreachable!(),
        }
        units += op.units();
    }
    assert_eq!(
        next_free_wait(&seen.peek),
        cost(0, units),
        "next_free is not the cost of the {units} units admitted (lost or doubled): {got:#?} {seen:#?}"
    );
    // `reset_after` adds the refill of the missing permits, one per `I`: exactly the units
    // admitted (never more than `M = 4` here).
    assert_eq!(
        seen.peek.reset_after_ns(),
        cost(0, units) + units * I,
        "the stored permits are not those left by the {units} units admitted: {got:#?} {seen:#?}"
    );
}

/// A race: the target `make` builds at `NOW`, set up by `setup`, and one operation per thread
/// (the last on the main thread).
struct Race<T> {
    make: fn(&ManualClock) -> T,
    setup: fn(&T, &ManualClock),
    ops: &'static [Op],
}

impl<T> Clone for Race<T> {
    fn clone(&self) -> Self {
        Self { ..*self }
    }
}

impl<T: Target> Linearizable for Race<T> {
    type Subject = T;
    type Clock = ManualClock;
    type Op = Op;
    type Got = Got;
    type Observed = Observed;

    fn ops(&self) -> &[Op] {
        self.ops
    }

    fn start(&self) -> (T, ManualClock) {
        let clock = ManualClock::new();
        clock.set_ns(NOW);
        let target = (self.make)(&clock);
        (self.setup)(&target, &clock);
        (target, clock)
    }

    fn apply(&self, target: &T, op: Op) -> Got {
        apply(target, op)
    }

    fn observe(&self, target: &T, clock: &ManualClock) -> Observed {
        observe(target, clock)
    }
}

/// Runs `ops` (the last on the main thread) on a target built by `make` at `NOW` and set up by
/// `setup`; model-checks linearizability against every serial order, the schedule
/// (`assert_schedule`) and `extra` on each execution, and that every distinct serial outcome
/// is reached (at preemption bound 2 or more, or unbounded).
fn check_model<T: Target>(
    name: &str,
    make: fn(&ManualClock) -> T,
    setup: fn(&T, &ManualClock),
    ops: &'static [Op],
    extra: fn(&[Got], &Observed),
) {
    deterministic_hashing();
    let race = Race { make, setup, ops };
    let serial: Vec<_> = serial_outcomes(&race)
        .into_iter()
        .map(|(order, got, seen)| {
            // The expected schedule (computed from the docs' formula) holds serially.
            assert_schedule(ops, &got, &seen, usize::MAX);
            (format!("serial {order:?}"), got, seen)
        })
        .collect();
    let most = serial
        .iter()
        .map(|(_, g, _)| g.iter().filter(|g| g.admitted().is_some()).count())
        .max()
        .unwrap_or(0);
    let matched = check_linearizable(name, &race, serial.clone(), move |got, seen| {
        assert_schedule(ops, got, seen, most);
        extra(got, seen);
    });
    let (distinct, reached) = coverage(&serial, &matched);
    eprintln!("  {name}: {reached} of {distinct} distinct serial outcomes reached");
    // At bound 1 loom does not reach every outcome of the three-thread model (4 of 5,
    // measured), so the coverage is asserted at bound 2 or more and in the exhaustive search,
    // as in `admission.rs`.
    if coverage_required() {
        assert_eq!(
            reached, distinct,
            "{name}: some serial outcome was never reached"
        );
    }
}

fn no_setup<T>(_: &T, _: &ManualClock) {}

/// (a) Two checks on a cold direct limiter at one instant. A warm-up limiter admits one
/// request at a time: exactly one is admitted, at once, and pays the cold cost (25 µs, and
/// the key is fresh again 10 µs after that, once its one missing permit has accrued); the
/// other is told to come back exactly when the winner's cost is paid. Linearizable, both
/// threads win in some execution.
#[test]
fn two_checks_cold_direct() {
    const OPS: &[Op] = &[Op::CheckN(1), Op::CheckN(1)];
    check_model("two_checks_cold_direct", direct, no_setup, OPS, |got, _| {
        let wins: Vec<Decision> = got.iter().filter_map(Got::admitted).collect();
        assert_eq!(wins.len(), 1, "one request at a time: {got:#?}");
        assert_eq!(wins[0].delay_ns(), 0);
        assert_eq!(wins[0].reset_after_ns(), cost(0, 1) + I, "{got:#?}");
        for g in got {
            if let Got::Decision(d) = g {
                assert_eq!(d.remaining(), 0, "{got:#?}");
                if !d.is_allowed() {
                    assert_eq!(d.retry_after_ns(), Some(cost(0, 1)), "{got:#?}");
                }
            }
        }
    });
}

/// (b) A new key in the bounded table (`max_keys(1)`), three threads at one instant:
/// `reserve(2, 30 µs)` ‖ `reserve(1, 30 µs)` ‖ `check_n(1)`. The three race to create the key
/// (one slot); then each is placed after the ones before it: the first at once, the second
/// after the first's cost (25 µs after a first single permit, 40 µs after a first pair, which
/// is too long for either reservation), the check only if it came first. Serially one or two
/// are admitted (two only when a single permit went first); concurrently the admitted ones
/// hold distinct places in that schedule and `next_free` is the cost of all their units.
#[test]
fn reserves_and_check_n_new_key_keyed() {
    const OPS: &[Op] = &[
        Op::Reserve(2, 30_000),
        Op::Reserve(1, 30_000),
        Op::CheckN(1),
    ];
    check_model(
        "reserves_and_check_n_new_key_keyed",
        |clock| keyed(1, clock),
        no_setup,
        OPS,
        |got, seen| {
            assert_eq!(seen.keys, (1, 0), "one slot, nothing refused: {seen:#?}");
            assert!(
                got.iter().any(|g| g.admitted().is_some()),
                "the first is always admitted: {got:#?}"
            );
        },
    );
}

/// (c) Eviction racing a check on an idle key (table, `max_keys(2)`). The key was admitted
/// once at `NOW` and the clock then set to the instant its missing permit has accrued again
/// (`NOW + reset_after`): it is idle, as good as fresh. Thread A checks it while the main
/// thread sweeps. Whichever lands first, A is admitted exactly as on a cold key (delay 0,
/// the cold cost: eviction gives no credit back, the key comes back no less strict than a
/// fresh one), its admission is never lost to the sweep (a further check at that instant is
/// denied until the cold cost is paid), the key is held once, and the sweep removes the key
/// exactly when it ran first.
#[test]
fn evict_idle_races_check_keyed() {
    const OPS: &[Op] = &[Op::CheckN(1), Op::EvictIdle];
    check_model(
        "evict_idle_races_check_keyed",
        |clock| keyed(2, clock),
        |target, clock| {
            let first = target.check_n(1);
            assert!(first.is_allowed());
            assert_eq!(first.reset_after_ns(), cost(0, 1) + I);
            clock.set_ns(NOW + first.reset_after_ns());
            assert_eq!(target.keys(), (1, 0));
        },
        OPS,
        |got, seen| {
            let Got::Decision(d) = got[0] else {
                unreachable!()
            };
            assert!(d.is_allowed(), "the idle key admits at once: {got:#?}");
            assert_eq!(
                d.reset_after_ns(),
                cost(0, 1) + I,
                "the key came back warmer than a fresh one: {got:#?}"
            );
            assert!(matches!(got[1], Got::Evicted(0 | 1)), "{got:#?}");
            assert_eq!(seen.keys, (1, 0), "the key is held exactly once: {seen:#?}");
            assert_eq!(
                seen.peek.retry_after_ns(),
                Some(cost(0, 1)),
                "the admission was lost: {seen:#?}"
            );
        },
    );
}

/// (d) Eviction with a clock that moves while a check reads it: the sweep floor (table,
/// `max_keys(2)`). The key was admitted at `NOW` (its next permit is free at `NOW + 25 µs`,
/// and it is idle again at `NOW + 35 µs`, once its missing permit has accrued); the clock
/// stands at `BEFORE = NOW + 30 µs`, where the key is free but still half a permit warm.
/// Thread A checks the key, thread B calls `evict_idle()`, and the main thread moves the clock
/// (a `common::LoomClock`) to `AFTER = NOW + 35 µs`. If B reads `AFTER` and drops the key
/// while A, having read `BEFORE`, has not reached it yet, A re-creates the key from the sweep
/// floor: the most conservative word a key idle at `AFTER` could have held (`next_free =
/// AFTER`, cold), so A is denied until `AFTER` (a fresh key would have admitted it at
/// `BEFORE`, and a dropped key may have had its next permit as late as `AFTER`). Every outcome
/// is a serial run of {check, evict} with each at either instant (the check's instant may be
/// the earlier one although it lands after the sweep: that is the race); directly, an
/// admission on a key the sweep dropped is the cold one from `AFTER`.
#[test]
fn evict_with_check_behind_the_sweep_keyed() {
    use crate::common::LoomClock;

    const BEFORE: u64 = NOW + 30_000;
    const AFTER: u64 = NOW + 35_000;
    type Lim = KeyedLimiter<u64, LoomClock>;
    deterministic_hashing();
    let [key, _] = distant_keys();
    let build = move |clock: &LoomClock| {
        let lim = KeyedLimiter::<u64>::warm_up(quota(), Duration::from_nanos(W))
            .max_keys(2)
            .fixed_capacity()
            .when_full(cellgate::WhenFull::DenyNew)
            .clock(clock.clone())
            .build()
            .expect("valid warm-up");
        clock.set(NOW);
        let first = lim.check(&key);
        assert!(first.is_allowed());
        assert_eq!(NOW + first.reset_after_ns(), AFTER, "idle exactly at AFTER");
        clock.set(BEFORE);
        lim
    };
    // At `AFTER`: keys held, a peek (both fields of the state), then the next reservation.
    let observe = move |lim: &Lim, clock: &LoomClock| {
        clock.set(AFTER);
        (
            lim.len(),
            lim.peek(&key),
            lim.reserve(&key, 1, Duration::MAX).decision(),
        )
    };
    let matched = check_behind_the_sweep(
        "evict_with_check_behind_the_sweep_keyed",
        [BEFORE, AFTER],
        build,
        move |lim: &Lim| lim.check(&key),
        |lim: &Lim| lim.evict_idle(),
        observe,
        |got, seen| {
            assert!(got.1 <= 1, "{got:#?}");
            if got.0.is_allowed() && got.1 == 1 {
                // The sweep dropped the key before A reached it: A's admission is the cold one
                // from the sweep's instant, `next_free = AFTER + cost(0, 1)`.
                assert_eq!(
                    seen.1.retry_after_ns(),
                    Some(cost(0, 1)),
                    "the key was dropped, and A's admission is not the cold one from AFTER \
                     (lost, or the key came back less strict than the dropped one could have \
                     been): {got:#?} {seen:#?}"
                );
            }
            if !got.0.is_allowed() {
                // Only a check that read `BEFORE` and found the key dropped at `AFTER` is
                // denied, and only until `AFTER`.
                assert_eq!(got.1, 1, "{got:#?}");
                assert_eq!(got.0.retry_after_ns(), Some(AFTER - BEFORE), "{got:#?}");
            }
        },
    );
    // The race the model is about: the sweep at `AFTER`, then the check at `BEFORE`.
    assert!(
        matched.contains(&format!("order [1, 0] at {:?}", [BEFORE, AFTER])),
        "the check behind the sweep was never reached: {matched:?}"
    );
}
