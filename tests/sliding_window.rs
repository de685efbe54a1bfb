//! Sliding window counter: the keyed and direct limiters against the reference model in
//! `window_models` (whose `retry_after` is a binary search, not the crate's closed form),
//! eviction, layout bounds, configuration errors and many threads on a frozen clock.

#[path = "window_models/mod.rs"]
mod window_models;

use std::sync::Barrier;
use std::time::Duration;

use cellgate::clock::ManualClock;
use cellgate::{ConfigError, Decision, KeyedLimiter, Limiter};
use proptest::prelude::*;

use window_models::*;

fn keyed(limit: u32, w: u64, clock: &ManualClock) -> KeyedLimiter<u8, ManualClock> {
    KeyedLimiter::<u8>::sliding_window(limit, Duration::from_nanos(w))
        .clock(clock.clone())
        .build()
        .unwrap()
}

/// The bounded fingerprint table store (`max_keys` selects it); never full here.
fn table(limit: u32, w: u64, clock: &ManualClock) -> KeyedLimiter<u8, ManualClock> {
    KeyedLimiter::<u8>::sliding_window(limit, Duration::from_nanos(w))
        .clock(clock.clone())
        .max_keys(1_024)
        .build()
        .unwrap()
}

fn direct(limit: u32, w: u64, clock: &ManualClock) -> Limiter<ManualClock> {
    Limiter::sliding_window(limit, Duration::from_nanos(w))
        .clock(clock.clone())
        .build()
        .unwrap()
}

// ---------------------------------------------------------------------------------------------
// Layout bounds and the horizon (from `src/algorithm/sliding_window.rs`'s module docs),
// computed here without the crate's helpers
// ---------------------------------------------------------------------------------------------

/// The shortest horizon a configuration may have: 180 days.
const MIN_HORIZON_NS: u128 = 180 * 86_400 * 1_000_000_000;

/// The width of one count field for `limit`: the bits of the limit (1 to 31).
fn count_bits(limit: u32) -> u32 {
    let mut bits = 1;
    while bits < 31 && (1u64 << bits) <= u64::from(limit) {
        bits += 1;
    }
    bits
}

/// The first instant past the last window the index field (`64 - 2C` bits) holds, or `None`
/// when that is past every `u64` time.
fn horizon_of(count_bits: u32, window_ns: u64) -> Option<u128> {
    let end = (1u128 << (64 - 2 * count_bits)) * u128::from(window_ns);
    (end <= U64).then_some(end)
}

/// The largest limit a sliding window of `window_ns` accepts: `2^C - 1` for the widest count
/// field whose horizon is at least 180 days (or absent).
fn max_limit(window_ns: u64) -> u32 {
    (1..=31u32)
        .rev()
        .find(|&c| horizon_of(c, window_ns).map_or(true, |h| h >= MIN_HORIZON_NS))
        .map(|c| u32::try_from((1u64 << c) - 1).unwrap())
        .unwrap()
}

/// The model with the horizon: DESIGN.md's formula (`SlidingWindowModel`) before it; from it
/// on every request is denied with nothing remaining, no wait and no state, and a wait that
/// would end at or past it is no wait.
#[derive(Debug, Clone, Copy)]
struct HorizonModel {
    inner: SlidingWindowModel,
    horizon: Option<u128>,
}

impl HorizonModel {
    fn new(limit: u32, window: u64) -> Self {
        Self {
            inner: SlidingWindowModel { limit, window },
            horizon: horizon_of(count_bits(limit), window),
        }
    }

    fn past(&self, now: u64) -> bool {
        self.horizon.is_some_and(|h| u128::from(now) >= h)
    }
}

impl Model for HorizonModel {
    type State = SlidingState;

    fn step(&self, st: &mut SlidingState, now: u64, n: u32) -> Expect {
        if self.past(now) {
            return Expect {
                allowed: false,
                limit: self.inner.limit,
                remaining: 0,
                retry_ns: None,
                reset_ns: 0,
            };
        }
        let mut e = self.inner.step(st, now, n);
        if let (Some(wait), Some(h)) = (e.retry_ns, self.horizon) {
            if u128::from(now) + wait >= h {
                e.retry_ns = None;
            }
        }
        e
    }

    fn is_idle(&self, st: &SlidingState, now: u64) -> bool {
        self.past(now) || self.inner.is_idle(st, now)
    }
}

/// Window lengths: the shared ones (every layout regime) and 1 s to 1 day, with the round ones.
fn all_windows() -> impl Strategy<Value = u64> {
    const S: u64 = 1_000_000_000;
    prop_oneof![
        3 => windows(),
        1 => prop::sample::select(vec![S, 10 * S, 60 * S, 3_600 * S, 86_400 * S]),
        1 => S..=86_400 * S,
    ]
}

/// A window and a limit for it: small ones, the maximum, and everything in between.
fn configs() -> impl Strategy<Value = (u64, u32)> {
    all_windows().prop_flat_map(|w| (Just(w), limits(u128::from(max_limit(w)))))
}

/// Where a test's clock starts: at 0, or a few windows before the horizon (the last `u64`
/// time's window when there is none), so that steps cross it.
fn start_near_horizon(w: u64, limit: u32, windows_before: u8, frac: u16) -> u64 {
    let end = horizon_of(count_bits(limit), w).unwrap_or(U64 + 1);
    let back =
        u128::from(w) * u128::from(windows_before % 4) + u128::from(w) * u128::from(frac) / 1000;
    u64::try_from(end.saturating_sub(back + 1).min(U64)).unwrap()
}

/// `steps`, after a first jump to `start` (a peek there).
fn from(start: u64, steps: &[Step]) -> Vec<Step> {
    let first = Step {
        time: TimeOp::Jump(start),
        action: Action::Peek { key: 0 },
    };
    std::iter::once(first)
        .chain(steps.iter().copied())
        .collect()
}

proptest! {
    #![proptest_config(config(384))]

    /// Every field of every decision, keyed and direct, for random sequences of checks and
    /// peeks with time moving forwards, backwards, across boundaries and over huge gaps.
    #[test]
    fn matches_the_model(
        (w, limit) in configs(),
        steps in steps_of(actions(), 1..=60),
        near in any::<bool>(),
        (before, frac) in (any::<u8>(), 0u16..1000),
    ) {
        let clock = ManualClock::new();
        let (k, t, d) = (keyed(limit, w, &clock), table(limit, w, &clock), direct(limit, w, &clock));
        let model = HorizonModel::new(limit, w);
        let steps = if near { from(start_near_horizon(w, limit, before, frac), &steps) } else { steps };
        drive(&model, w, limit, &clock, &[&k, &t, &d], &steps, false)?;
    }

    /// A limiter that evicts idle keys after every step decides exactly like one that never
    /// does, and keeps exactly the live keys.
    #[test]
    fn evict_idle_is_lossless(
        (w, limit) in configs(),
        steps in steps_of(actions(), 1..=60),
        near in any::<bool>(),
        (before, frac) in (any::<u8>(), 0u16..1000),
    ) {
        let clock = ManualClock::new();
        let model = HorizonModel::new(limit, w);
        let steps = if near { from(start_near_horizon(w, limit, before, frac), &steps) } else { steps };
        let (a, b) = (keyed(limit, w, &clock), table(limit, w, &clock));
        drive_evicting(&model, w, limit, &clock, &a, &b, &steps, true)?;
        let (a, b) = (table(limit, w, &clock), keyed(limit, w, &clock));
        drive_evicting(&model, w, limit, &clock, &a, &b, &steps, true)?;
    }

    /// Eviction gives no credit back to a clock behind the sweep (both stores).
    #[test]
    fn evict_then_earlier_clock_is_never_more_lenient(
        (w, limit) in configs(),
        history in steps_of(actions(), 1..=40),
        back in 0u16..1000,
        n in n_sels(),
        near in any::<bool>(),
        (before, frac) in (any::<u8>(), 0u16..1000),
    ) {
        let clock = ManualClock::new();
        let n = n.resolve(limit);
        let history = if near {
            from(start_near_horizon(w, limit, before, frac), &history)
        } else {
            history
        };
        let (a, b) = (keyed(limit, w, &clock), keyed(limit, w, &clock));
        evict_then_earlier_clock(w, limit, &clock, &a, &b, &history, back, n)?;
        let (a, b) = (table(limit, w, &clock), table(limit, w, &clock));
        evict_then_earlier_clock(w, limit, &clock, &a, &b, &history, back, n)?;
    }

    /// `retry_after` is the shortest wait: the same request is denied one nanosecond earlier
    /// and admitted at that time (checked on the limiter itself, not the model).
    #[test]
    fn retry_after_is_the_shortest_wait(
        (w, limit) in configs(),
        steps in steps_of(actions(), 1..=30),
        n in n_sels(),
        near in any::<bool>(),
        (before, frac) in (any::<u8>(), 0u16..1000),
    ) {
        let clock = ManualClock::new();
        let l = keyed(limit, w, &clock);
        let model = HorizonModel::new(limit, w);
        let steps = if near { from(start_near_horizon(w, limit, before, frac), &steps) } else { steps };
        drive(&model, w, limit, &clock, &[&l], &steps, false)?;
        let n = n.resolve(limit);
        let now = clock_now(&clock);
        let asked = l.check_n(&0, n);
        if let Some(wait) = asked.retry_after_ns() {
            prop_assert!(!asked.is_allowed() && n <= limit);
            prop_assert_eq!(fields(&asked), fields(&l.check_n(&0, n)), "a denial changes nothing");
            clock.set_ns(now + wait - 1);
            prop_assert!(!l.check_n(&0, n).is_allowed(), "admitted 1 ns before retry_after");
            clock.set_ns(now + wait);
            let fits = l.peek(&0);
            prop_assert!(fits.remaining() >= n, "{:?} does not fit at retry_after: {:?}", n, fits);
            prop_assert!(l.check_n(&0, n).is_allowed());
        } else if !asked.is_allowed() && n <= limit {
            // No wait helps within the clock's range and before the horizon: still denied at
            // the last instant of both.
            let last = horizon_of(count_bits(limit), w).map_or(U64, |h| h - 1);
            clock.set_ns(u64::try_from(last).unwrap().max(now));
            prop_assert!(!l.check_n(&0, n).is_allowed(), "no retry_after, but admitted at {}", last);
        }
    }

    /// A sweep at or past the horizon (where every key is idle, whatever it holds) gives no
    /// credit to a clock set back before it: the evicting limiter is at least as strict as one
    /// that never evicts, for every key, in the last windows before the horizon.
    #[test]
    fn a_sweep_past_the_horizon_gives_no_credit_before_it(
        (w, limit) in configs().prop_filter("a horizon", |&(w, l)| horizon_of(count_bits(l), w).is_some()),
        history in steps_of(actions(), 1..=30),
        (before, frac) in (any::<u8>(), 0u16..1000),
        (after, back) in (0u64..3, 0u64..3000),
        n in n_sels(),
    ) {
        let h = u64::try_from(horizon_of(count_bits(limit), w).unwrap()).unwrap();
        let n = n.resolve(limit);
        let history = from(start_near_horizon(w, limit, before, frac), &history);
        for store in [keyed, table] {
            let clock = ManualClock::new();
            let (a, b) = (store(limit, w, &clock), store(limit, w, &clock));
            let model = HorizonModel::new(limit, w);
            drive(&model, w, limit, &clock, &[&a, &b], &history, true)?;
            let swept = clock_now(&clock).max(h).saturating_add(after);
            clock.set_ns(swept);
            a.evict_idle();
            prop_assert!(a.is_empty(), "every key is idle past the horizon");
            // Back into the last three windows before the horizon.
            // `h >= 4 * w`: the index holds at least 2 bits.
            let back = u64::try_from(u128::from(back) * u128::from(w) / 1000).unwrap();
            clock.set_ns(h - 1 - back);
            for key in 0..3u8 {
                let (pa, pb) = (a.peek(&key), b.peek(&key));
                prop_assert!(pa.remaining() <= pb.remaining(), "key {}: {:?} vs {:?}", key, pa, pb);
                if n >= 1 && a.check_n(&key, n).is_allowed() {
                    prop_assert!(b.check_n(&key, n).is_allowed(), "key {}: admitted after the sweep only", key);
                }
            }
        }
    }

    /// The largest limit of the layout builds; one more is `LimitTooLarge`.
    #[test]
    fn layout_bounds(w in all_windows()) {
        let max = max_limit(w);
        let window = Duration::from_nanos(w);
        prop_assert!(KeyedLimiter::<u8>::sliding_window(max, window).build().is_ok());
        prop_assert!(Limiter::sliding_window(max, window).build().is_ok());
        // The old bound, kept with no horizon, is never more than the new one.
        prop_assert!(sliding_max_limit(w) <= u128::from(max));
        let want = ConfigError::LimitTooLarge { limit: max + 1, max: u64::from(max), window };
        prop_assert_eq!(
            KeyedLimiter::<u8>::sliding_window(max + 1, window).build().unwrap_err(),
            want.clone()
        );
        prop_assert_eq!(Limiter::sliding_window(max + 1, window).build().unwrap_err(), want);
    }
}

fn clock_now(clock: &ManualClock) -> u64 {
    use cellgate::clock::Clock;
    clock.now()
}

fn at(clock: &ManualClock, ns: u64) -> &ManualClock {
    clock.set_ns(ns);
    clock
}

/// The model itself, on hand-worked cases (so a wrong model cannot pass unnoticed).
#[test]
fn model_hand_worked() {
    let m = SlidingWindowModel {
        limit: 10,
        window: 1000,
    };
    let mut s = SlidingState::default();
    assert!(m.step(&mut s, 500, 10).allowed);
    // At 1250: prev 10 weighs 10 * 750 = 7500; 3 more would be 10500 > 10000.
    let e = m.step(&mut s, 1250, 3);
    assert!(!e.allowed);
    assert_eq!(e.remaining, 2);
    // 10 * (1000 - e) <= 7000 from e = 300.
    assert_eq!(e.retry_ns, Some(50));
    assert_eq!(
        e.reset_ns, 750,
        "only prev holds a count: the end of window 1"
    );
    let e = m.step(&mut s, 1300, 3);
    assert!(e.allowed && e.remaining == 0 && e.reset_ns == 1700);
    // 10 units: need prev 3 gone, i.e. window 3 at 3000? No: in window 2, prev = 3 weighs
    // 3 * (1000 - e) <= 0 only at e = 1000, so the start of window 3.
    let e = m.step(&mut s, 1300, 10);
    assert_eq!(e.retry_ns, Some(3000 - 1300));
    assert_eq!(m.step(&mut s, 1300, 11).retry_ns, None);
    // Backwards: evaluated at the start of window 1 (e = 0): 10 * 1000 + 3 * 1000 > 10 * 1000,
    // so even a peek is denied, until 10 * (1000 - e) <= 7000 at 1300.
    let e = m.step(&mut s, 10, 0);
    assert_eq!(
        (e.allowed, e.remaining, e.reset_ns, e.retry_ns),
        (false, 0, 2990, Some(1290))
    );
}

#[test]
fn documented_example() {
    let clock = ManualClock::new();
    let l = KeyedLimiter::<u64>::sliding_window(100, Duration::from_secs(60))
        .clock(clock.clone())
        .build()
        .unwrap();
    assert!(l.check_n(&1, 100).is_allowed());
    clock.advance(Duration::from_secs(90));
    assert_eq!(l.peek(&1).remaining(), 50);
}

#[test]
fn boundaries_are_exact() {
    let clock = ManualClock::new();
    let l = direct(4, 100, &clock);
    at(&clock, 99);
    assert!(l.check_n(4).is_allowed());
    // At 100 (e = 0) prev weighs fully; at 124 4 * 76 = 304 > 300; at 125 exactly 300.
    at(&clock, 100);
    let d = l.check();
    assert_eq!(d.retry_after_ns(), Some(25));
    assert_eq!(d.reset_after_ns(), 100);
    at(&clock, 124);
    assert!(!l.check().is_allowed());
    at(&clock, 125);
    assert!(l.check().is_allowed());
    // curr = 1 in window 1: the key is clear at 300, not at 299.
    at(&clock, 299);
    assert_eq!(l.peek().reset_after_ns(), 1);
    at(&clock, 300);
    assert_eq!(l.peek().reset_after_ns(), 0);
    assert_eq!(l.peek().remaining(), 4);
}

/// The tenant of issue 15: six million a minute builds, is exact up to its horizon (2^18
/// minutes after the clock's origin, 182 days), and is closed from it on, for every store.
#[test]
fn six_million_a_minute_up_to_the_horizon() {
    let (limit, w) = (6_000_000u32, 60_000_000_000u64);
    let h = (1u64 << 18) * w;
    let clock = ManualClock::new();
    let (k, t, d) = (
        keyed(limit, w, &clock),
        table(limit, w, &clock),
        direct(limit, w, &clock),
    );
    let subjects: [&dyn Fn(u32) -> Decision; 3] =
        [&|n| k.check_n(&7, n), &|n| t.check_n(&7, n), &|n| {
            d.check_n(n)
        }];
    for check in subjects {
        // The whole limit in the window before the last; a third into the last window, the
        // previous count weighs 4 000 000 of the 6 000 000.
        at(&clock, h - 2 * w + 1);
        assert!(check(limit).is_allowed());
        at(&clock, h - w + w / 3);
        let denied = check(2_000_001);
        assert!(!denied.is_allowed());
        assert_eq!(denied.remaining(), 2_000_000);
        assert!(check(2_000_000).is_allowed());
        // At the last instant, the previous count weighs ceil(6 000 000 / W) = 1; once the
        // rest is taken, no wait helps before the horizon.
        at(&clock, h - 1);
        assert_eq!(check(0).remaining(), 3_999_999);
        assert!(check(3_999_999).is_allowed());
        let last = check(1);
        assert!(!last.is_allowed());
        assert_eq!(last.retry_after(), None);
        // From the horizon on: closed, even for a fresh key, and a peek too.
        for now in [h, h + w / 2, u64::MAX] {
            at(&clock, now);
            let past = check(1);
            assert!(!past.is_allowed() && past.retry_after().is_none());
            assert_eq!((past.remaining(), past.reset_after_ns()), (0, 0));
            assert!(!check(0).is_allowed());
        }
        at(&clock, h - 1);
        assert_eq!(
            check(0).remaining(),
            0,
            "the state before the horizon is kept"
        );
    }
    at(&clock, h);
    assert!(!k.check(&99).is_allowed(), "a new key past the horizon");
    let held = k.len();
    assert!(held >= 1);
    assert_eq!(k.evict_idle(), held, "every key is idle past the horizon");
    assert!(k.is_empty());
}

#[test]
fn idle_gaps_beyond_2_pow_32_windows_start_fresh() {
    let clock = ManualClock::new();
    let w = 1_000u64;
    let l = keyed(3, w, &clock);
    for k in [
        0u64,
        1 << 32,
        (1 << 32) + 2,
        (1 << 33) + 5,
        u64::MAX / w - 2,
    ] {
        at(&clock, k * w + 999);
        assert_eq!(l.peek(&0).remaining(), 3, "window {k}");
        assert!(l.check_n(&0, 3).is_allowed(), "window {k}");
        assert!(!l.check(&0).is_allowed(), "window {k}");
    }
}

#[test]
fn backwards_time_gives_no_credit() {
    let clock = ManualClock::new();
    let l = keyed(2, 100, &clock);
    at(&clock, 150);
    assert!(l.check_n(&0, 2).is_allowed());
    at(&clock, 50);
    let d = l.check(&0);
    assert!(!d.is_allowed());
    // Treated as the start of window 1: one unit fits once prev (2) weighs <= 100, at 250.
    assert_eq!(d.retry_after_ns(), Some(200));
    assert_eq!(d.reset_after_ns(), 250);
    assert_eq!(d.remaining(), 0);
}

#[test]
fn config_errors() {
    let s = Duration::from_secs(1);
    assert_eq!(
        KeyedLimiter::<u8>::sliding_window(0, s)
            .build()
            .unwrap_err(),
        ConfigError::Zero { field: "limit" }
    );
    assert_eq!(
        Limiter::sliding_window(0, s).build().unwrap_err(),
        ConfigError::Zero { field: "limit" }
    );
    assert_eq!(
        Limiter::sliding_window(1, Duration::ZERO)
            .build()
            .unwrap_err(),
        ConfigError::Zero { field: "window" }
    );
    assert_eq!(
        KeyedLimiter::<u8>::sliding_window(1, Duration::ZERO)
            .build()
            .unwrap_err(),
        ConfigError::Zero { field: "window" }
    );
    for window in [
        Duration::MAX,
        Duration::from_nanos(u64::MAX) + Duration::from_nanos(1),
    ] {
        assert_eq!(
            Limiter::sliding_window(1, window).build().unwrap_err(),
            ConfigError::WindowTooLong { window }
        );
        assert_eq!(
            KeyedLimiter::<u8>::sliding_window(1, window)
                .build()
                .unwrap_err(),
            ConfigError::WindowTooLong { window }
        );
    }
    // The documented maxima.
    for (secs, max) in [
        (1u64, 1_048_575u32),
        (10, 2_097_151),
        (60, 8_388_607),
        (3_600, 33_554_431),
        (86_400, 268_435_455),
    ] {
        let window = Duration::from_secs(secs);
        assert!(Limiter::sliding_window(max, window).build().is_ok());
        assert_eq!(
            Limiter::sliding_window(max + 1, window)
                .build()
                .unwrap_err(),
            ConfigError::LimitTooLarge {
                limit: max + 1,
                max: u64::from(max),
                window
            }
        );
    }
    assert_eq!(
        KeyedLimiter::<u8>::sliding_window(1, s)
            .max_keys(0)
            .build()
            .unwrap_err(),
        ConfigError::Zero { field: "max_keys" }
    );
}

#[test]
fn stock_operations_are_unsupported() {
    let k = keyed(1, 1_000, &ManualClock::new());
    let d = direct(1, 1_000, &ManualClock::new());
    let unsupported = |operation| ConfigError::Unsupported {
        operation,
        algorithm: "sliding_window",
    };
    assert_eq!(k.restock(&1, 5), Err(unsupported("restock")));
    assert_eq!(k.set_stock(&1, 5), Err(unsupported("set_stock")));
    assert_eq!(d.restock(5), Err(unsupported("restock")));
    assert_eq!(d.set_stock(5), Err(unsupported("set_stock")));
    assert!(k.is_empty());
    assert_eq!(d.peek().remaining(), 1);
}

// ---------------------------------------------------------------------------------------------
// Many threads, frozen clock
// ---------------------------------------------------------------------------------------------

const THREADS: usize = 8;
const ATTEMPTS: usize = if cfg!(debug_assertions) {
    50_000
} else {
    125_000
};

fn hammer<R: Send>(f: impl Fn(usize) -> R + Sync) -> Vec<R> {
    let barrier = Barrier::new(THREADS);
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..THREADS)
            .map(|i| {
                let (f, barrier) = (&f, &barrier);
                s.spawn(move || {
                    barrier.wait();
                    f(i)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    })
}

fn admitted_remainings(check: impl Fn(usize) -> Decision + Sync) -> Vec<u32> {
    let mut all: Vec<u32> = hammer(|i| {
        (0..ATTEMPTS)
            .map(|_| check(i))
            .filter(Decision::is_allowed)
            .map(|d| d.remaining())
            .collect::<Vec<_>>()
    })
    .into_iter()
    .flatten()
    .collect();
    all.sort_unstable();
    all
}

/// With the previous window holding `prev` and the clock frozen a quarter into the current
/// window, exactly `limit - ceil(prev * 3/4)` unit requests fit, and the k-th admission leaves
/// that minus k.
#[test]
fn threads_on_a_frozen_clock_admit_exactly_the_capacity() {
    let w: u64 = 3_600_000_000_000;
    let (limit, prev) = (100_000u32, 40_000u32);
    let capacity = limit - prev * 3 / 4;
    let clock = ManualClock::new();
    let k = keyed(limit, w, &clock);
    let t = table(limit, w, &clock);
    let d = direct(limit, w, &clock);
    clock.set_ns(7 * w + 123);
    assert!(k.check_n(&0, prev).is_allowed());
    assert!(t.check_n(&0, prev).is_allowed());
    assert!(d.check_n(prev).is_allowed());
    clock.set_ns(8 * w + w / 4);
    assert_eq!(k.peek(&0).remaining(), capacity);
    assert_eq!(t.peek(&0).remaining(), capacity);

    let r = admitted_remainings(|_| k.check(&0));
    assert_eq!(r.len(), capacity as usize, "keyed: admitted units");
    assert!(r.iter().copied().eq(0..capacity));
    let r = admitted_remainings(|_| t.check(&0));
    assert_eq!(r.len(), capacity as usize, "table: admitted units");
    assert!(r.iter().copied().eq(0..capacity));
    let r = admitted_remainings(|_| d.check());
    assert_eq!(r.len(), capacity as usize, "direct: admitted units");
    assert!(r.iter().copied().eq(0..capacity));
    assert!(!k.check(&0).is_allowed() && !t.check(&0).is_allowed() && !d.check().is_allowed());
}

#[test]
fn threads_with_mixed_sizes_never_overspend() {
    let clock = ManualClock::new();
    clock.set_ns(5);
    let limit = 1_000_000u32;
    let l = KeyedLimiter::<u8>::sliding_window(limit, Duration::from_secs(3600))
        .clock(clock)
        .build()
        .unwrap();
    let units: u64 = hammer(|i| {
        (0..ATTEMPTS)
            .map(|j| {
                let n = ((i * 7 + j) % 50) as u32;
                if l.check_n(&1, n).is_allowed() {
                    u64::from(n)
                } else {
                    0
                }
            })
            .sum::<u64>()
    })
    .into_iter()
    .sum();
    let left = l.peek(&1).remaining();
    assert_eq!(units + u64::from(left), u64::from(limit));
    assert!(l.check_n(&1, left).is_allowed());
    assert!(!l.check(&1).is_allowed());
}

/// Threads racing to create the same new keys: each key admits exactly its limit, whichever
/// thread's insertion wins.
#[test]
fn threads_racing_on_new_keys_admit_exactly_the_limit() {
    const ROUNDS: u32 = if cfg!(debug_assertions) {
        20_000
    } else {
        100_000
    };
    const BATCH: u32 = 1;
    const KEYS: u32 = ROUNDS * BATCH;
    for bounded in [false, true] {
        let clock = ManualClock::new();
        clock.set_ns(42);
        let builder = KeyedLimiter::<u32>::sliding_window(1, Duration::from_secs(1)).clock(clock);
        // Bounded: the fingerprint table store; unbounded: the exact map.
        let l = if bounded {
            builder.max_keys(2 * KEYS as usize)
        } else {
            builder
        }
        .build()
        .unwrap();
        let admitted = race_on_new_keys(ROUNDS, BATCH, |k| l.check(&k).is_allowed());
        assert_eq!(admitted, u64::from(KEYS), "bounded: {bounded}");
        assert_eq!(l.len(), KEYS as usize, "bounded: {bounded}");
    }
}
