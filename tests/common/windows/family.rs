//! The property tests every member of the window family runs ([`family_tests!`]), and the
//! helpers they share.

use super::*;

/// A limiter under test with `u32` keys, for the race on new keys.
pub trait Racer: Sync {
    fn admits(&self, key: u32) -> bool;
    fn held(&self) -> usize;
}

impl Racer for KeyedLimiter<u32, ManualClock> {
    fn admits(&self, key: u32) -> bool {
        self.check(&key).is_allowed()
    }
    fn held(&self) -> usize {
        self.len()
    }
}

impl Racer for SlidingLog<u32, ManualClock> {
    fn admits(&self, key: u32) -> bool {
        self.check(&key).is_allowed()
    }
    fn held(&self) -> usize {
        self.len()
    }
}

/// One member of the window family, as [`family_tests!`] needs it: its model, its configurations
/// and its limiters, each built on the given clock.
pub trait Family {
    type Model: Model;

    /// Random `(window ns, limit)` configurations that build.
    fn configs() -> BoxedStrategy<(u64, u32)>;

    /// Where the clock starts before a test's steps, for a configuration: at 0 unless the
    /// algorithm has an edge late in the clock's range for the steps to cross (the sliding
    /// window's horizon).
    fn starts(_window: u64, _limit: u32) -> BoxedStrategy<u64> {
        Just(0).boxed()
    }

    /// The operations the model comparison draws from (checks and peeks; a stock adds its
    /// operator actions).
    fn actions() -> BoxedStrategy<Action> {
        actions().boxed()
    }

    fn model(window: u64, limit: u32) -> Self::Model;

    /// The keyed stores, each a fresh limiter that never fills: the exact map, then the
    /// fingerprint table (`max_keys`).
    fn stores(window: u64, limit: u32, clock: &ManualClock) -> [Box<dyn Subject>; 2];

    /// The direct limiter, where the algorithm has one.
    fn direct(window: u64, limit: u32, clock: &ManualClock) -> Option<Box<dyn Subject>>;

    /// A keyed limiter with a limit of 1 and `u32` keys: the exact map, or the table bounded
    /// to `max_keys` keys.
    fn racer(max_keys: Option<usize>, clock: ManualClock) -> Box<dyn Racer>;

    /// Whether decisions depend on the clock (a stock's do not: its eviction is lossless even
    /// when the clock goes back).
    const TIMED: bool = true;

    /// The limit of the many-threads tests: each key admits exactly this many units.
    const THREAD_LIMIT: u32;

    /// The window of the many-threads tests (long enough for [`Family::THREAD_LIMIT`]).
    const THREAD_WINDOW: u64 = 1_000_000_000;
}

/// A window counter (fixed or sliding window): its constructors and its layout, from which the
/// blanket [`Family`] impl builds everything the family's tests need.
pub trait Counter {
    type Model: Model;

    /// The keyed constructor (`KeyedLimiter::<u8>::fixed_window`, ...).
    const KEYED: fn(u32, Duration) -> KeyedLimiterBuilder<u8, DefaultClock>;
    /// The same with `u32` keys, for the race on new keys.
    const KEYED_U32: fn(u32, Duration) -> KeyedLimiterBuilder<u32, DefaultClock>;
    /// The direct constructor (`Limiter::fixed_window`, ...).
    const DIRECT: fn(u32, Duration) -> LimiterBuilder<DefaultClock>;
    /// The largest limit the layout of a window of `w` ns holds (from the model).
    const MAX_LIMIT: fn(u64) -> u128;
    /// The window of the many-threads tests: long enough for 50 000 units.
    const THREADS_WINDOW: u64;

    fn new_model(window: u64, limit: u32) -> Self::Model;

    /// The window lengths of the random configurations: every layout regime ([`windows`]).
    fn config_windows() -> BoxedStrategy<u64> {
        windows().boxed()
    }

    /// See [`Family::starts`].
    fn starts(_window: u64, _limit: u32) -> BoxedStrategy<u64> {
        Just(0).boxed()
    }

    /// The exact map store on `clock`.
    fn keyed(limit: u32, w: u64, clock: &ManualClock) -> KeyedLimiter<u8, ManualClock> {
        let window = Duration::from_nanos(w);
        Self::KEYED(limit, window)
            .clock(clock.clone())
            .build()
            .unwrap()
    }

    /// The bounded fingerprint table store (`max_keys` selects it); never full here.
    fn table(limit: u32, w: u64, clock: &ManualClock) -> KeyedLimiter<u8, ManualClock> {
        let window = Duration::from_nanos(w);
        let builder = Self::KEYED(limit, window).clock(clock.clone());
        builder.max_keys(1_024).build().unwrap()
    }

    fn direct(limit: u32, w: u64, clock: &ManualClock) -> Limiter<ManualClock> {
        let window = Duration::from_nanos(w);
        Self::DIRECT(limit, window)
            .clock(clock.clone())
            .build()
            .unwrap()
    }
}

impl<C: Counter> Family for C {
    type Model = C::Model;

    /// A window whose layout holds at least a limit of 1, and a limit for it.
    fn configs() -> BoxedStrategy<(u64, u32)> {
        C::config_windows()
            .prop_filter("the layout must hold a count", |&w| C::MAX_LIMIT(w) >= 1)
            .prop_flat_map(|w| (Just(w), limits(C::MAX_LIMIT(w))))
            .boxed()
    }

    fn starts(window: u64, limit: u32) -> BoxedStrategy<u64> {
        C::starts(window, limit)
    }

    fn model(window: u64, limit: u32) -> C::Model {
        C::new_model(window, limit)
    }

    fn stores(w: u64, limit: u32, clock: &ManualClock) -> [Box<dyn Subject>; 2] {
        [
            Box::new(C::keyed(limit, w, clock)),
            Box::new(C::table(limit, w, clock)),
        ]
    }

    fn direct(w: u64, limit: u32, clock: &ManualClock) -> Option<Box<dyn Subject>> {
        Some(Box::new(C::direct(limit, w, clock)))
    }

    fn racer(max_keys: Option<usize>, clock: ManualClock) -> Box<dyn Racer> {
        keyed_racer(C::KEYED_U32(1, Duration::from_secs(1)), max_keys, clock)
    }

    const THREAD_LIMIT: u32 = 50_000;
    const THREAD_WINDOW: u64 = C::THREADS_WINDOW;
}

/// A keyed limiter with `u32` keys from `builder`: the exact map, or the table bounded to
/// `max_keys`.
pub fn keyed_racer(
    builder: KeyedLimiterBuilder<u32, DefaultClock>,
    max_keys: Option<usize>,
    clock: ManualClock,
) -> Box<dyn Racer> {
    let builder = builder.clock(clock);
    Box::new(match max_keys {
        Some(m) => builder.max_keys(m).build().unwrap(),
        None => builder.build().unwrap(),
    })
}

/// The largest limit of the layout builds; one more is `LimitTooLarge` (keyed and direct).
pub fn counter_layout_bounds<C: Counter>(w: u64) -> Result<(), TestCaseError> {
    layout_bounds(w, C::MAX_LIMIT, |limit, window| {
        [
            C::KEYED(limit, window).build().map(drop),
            C::DIRECT(limit, window).build().map(drop),
        ]
    })
}

/// The configuration errors every window counter shares, from the keyed and the direct
/// builder: a zero limit, a zero window, a window past `u64::MAX` ns, `max_keys(0)`; a window
/// of exactly `u64::MAX` ns builds.
pub fn counter_config_errors<C: Counter>() {
    let s = Duration::from_secs(1);
    let both = |limit, window| -> [Result<(), ConfigError>; 2] {
        [
            C::KEYED(limit, window).build().map(drop),
            C::DIRECT(limit, window).build().map(drop),
        ]
    };
    let zero = |field| Err(ConfigError::Zero { field });
    assert_eq!(both(0, s), [zero("limit"), zero("limit")]);
    assert_eq!(both(1, Duration::ZERO), [zero("window"), zero("window")]);
    for window in [
        Duration::MAX,
        Duration::from_nanos(u64::MAX) + Duration::from_nanos(1),
    ] {
        let too_long = Err(ConfigError::WindowTooLong { window });
        assert_eq!(both(1, window), [too_long.clone(), too_long]);
    }
    assert!(C::DIRECT(1, Duration::from_nanos(u64::MAX)).build().is_ok());
    let capped = C::KEYED(1, s).max_keys(0).build().map(drop);
    assert_eq!(capped, zero("max_keys"));
}

/// `restock` and `set_stock` on a window counter are `Unsupported` (naming the algorithm), on
/// the keyed and the direct limiter, and change nothing.
pub fn counter_has_no_stock<C: Counter>(algorithm: &'static str) {
    let k = C::keyed(1, 1_000, &ManualClock::new());
    let d = C::direct(1, 1_000, &ManualClock::new());
    let unsupported = |operation| {
        Err(ConfigError::Unsupported {
            operation,
            algorithm,
        })
    };
    assert_eq!(k.restock(&1, 5), unsupported("restock"));
    assert_eq!(k.set_stock(&1, 5), unsupported("set_stock").map(drop));
    assert_eq!(d.restock(5), unsupported("restock"));
    assert_eq!(d.set_stock(5), unsupported("set_stock").map(drop));
    assert!(k.is_empty(), "a refused operation creates no key");
    assert_eq!(d.peek().remaining(), 1);
}

/// A configuration of `F` and where its clock starts ([`Family::starts`]): `(window, limit,
/// start)`.
pub fn started_configs<F: Family>() -> impl Strategy<Value = (u64, u32, u64)> {
    F::configs().prop_flat_map(|(w, limit)| F::starts(w, limit).prop_map(move |s| (w, limit, s)))
}

/// A family member's window and limit with a fresh clock, and its steps from `start` on (see
/// [`starting_at`]): what the family's property tests start from.
pub struct Started {
    pub w: u64,
    pub limit: u32,
    pub clock: ManualClock,
    pub steps: Vec<Step>,
}

impl Started {
    /// `(w, limit, start)` as [`started_configs`] draws it, and the steps after the start.
    pub fn new((w, limit, start): (u64, u32, u64), steps: &[Step]) -> Self {
        Started {
            w,
            limit,
            clock: ManualClock::new(),
            steps: starting_at(start, steps),
        }
    }
}

/// Every field of every decision, keyed (both stores) and direct, against the model.
pub fn matches_the_model<F: Family>(s: &Started) -> Result<(), TestCaseError> {
    let (w, limit, clock) = (s.w, s.limit, &s.clock);
    let [map, table] = F::stores(w, limit, clock);
    let direct = F::direct(w, limit, clock);
    let mut subjects: Vec<&dyn Subject> = vec![&*map, &*table];
    subjects.extend(direct.as_deref());
    drive(
        &F::model(w, limit),
        w,
        limit,
        clock,
        &subjects,
        &s.steps,
        false,
    )
}

/// Each store evicting after every step decides like the other store never evicting, and keeps
/// exactly the keys the model calls live.
pub fn evict_idle_is_lossless<F: Family>(s: &Started) -> Result<(), TestCaseError> {
    let (w, limit, clock) = (s.w, s.limit, &s.clock);
    let model = F::model(w, limit);
    for evicting in 0..2 {
        let subjects = F::stores(w, limit, clock);
        let (a, b) = (&subjects[evicting], &subjects[1 - evicting]);
        drive_evicting(&model, w, limit, clock, &**a, &**b, &s.steps, F::TIMED)?;
    }
    Ok(())
}

/// Eviction gives no credit back to a clock behind the sweep, in either store (the history:
/// the started steps).
pub fn evict_then_earlier_clock_is_never_more_lenient<F: Family>(
    s: &Started,
    back: u16,
    n: NSel,
) -> Result<(), TestCaseError> {
    let (w, limit, clock) = (s.w, s.limit, &s.clock);
    let n = n.resolve(limit);
    for store in 0..2 {
        let (a, b) = (F::stores(w, limit, clock), F::stores(w, limit, clock));
        evict_then_earlier_clock(w, limit, clock, &*a[store], &*b[store], &s.steps, back, n)?;
    }
    Ok(())
}

/// Many threads on a frozen clock: each key of each store (two keys, four threads each) and
/// the direct limiter admit exactly [`Family::THREAD_LIMIT`] unit requests, the k-th leaving
/// `limit - k`.
pub fn threads_admit_exactly_the_limit<F: Family>() {
    use crate::common::threads::{admitted_remainings, assert_exactly_the_limit, THREADS};
    let clock = ManualClock::new();
    clock.set_ns(1_000_000_007);
    let limit = F::THREAD_LIMIT;
    let [map, table] = F::stores(F::THREAD_WINDOW, limit, &clock);
    let direct = F::direct(F::THREAD_WINDOW, limit, &clock);
    let subjects = [Some(map), Some(table), direct];
    for (s, subject) in subjects.iter().flatten().enumerate() {
        let keys = if subject.keyed() { 2 } else { 1 };
        let per_key =
            admitted_remainings(keys, |i| i % keys, |i| subject.decide((i % keys) as u8, 1));
        for (key, r) in per_key.iter().enumerate() {
            assert_exactly_the_limit(
                r,
                limit,
                &format!("subject {s} key {key} of {THREADS} threads"),
            );
            assert_eq!(subject.look(key as u8).remaining(), 0);
        }
    }
}

/// Many threads checking mixed sizes (`n = 0..=3`) on one key of a frozen clock: what was
/// admitted plus what is left is exactly the limit; the rest can still be taken, nothing more.
pub fn threads_with_mixed_sizes_never_overspend<F: Family>() {
    use crate::common::threads::{admitted_units, ATTEMPTS};
    let clock = ManualClock::new();
    clock.set_ns(5);
    let limit = F::THREAD_LIMIT;
    let [map, table] = F::stores(F::THREAD_WINDOW, limit, &clock);
    let direct = F::direct(F::THREAD_WINDOW, limit, &clock);
    for subject in [Some(map), Some(table), direct].iter().flatten() {
        let units = admitted_units(4, ATTEMPTS / 4, |n| subject.decide(7, n));
        let left = subject.look(7).remaining();
        assert_eq!(units + u64::from(left), u64::from(limit));
        assert!(subject.decide(7, left).is_allowed());
        assert!(!subject.decide(7, 1).is_allowed());
    }
}

/// Threads racing to create the same new keys (see
/// [`race_on_new_keys`](crate::common::threads::race_on_new_keys)): each key admits exactly its
/// limit of 1, whichever thread's insertion wins, in the exact map and in the table.
pub fn threads_racing_on_new_keys_admit_exactly_the_limit<F: Family>() {
    use crate::common::threads::race_on_new_keys;
    const ROUNDS: u32 = if cfg!(debug_assertions) {
        20_000
    } else {
        100_000
    };
    for max_keys in [None, Some(2 * ROUNDS as usize)] {
        let clock = ManualClock::new();
        clock.set_ns(42);
        let l = F::racer(max_keys, clock);
        let admitted = race_on_new_keys(ROUNDS, 1, |k| l.admits(k));
        assert_eq!(admitted, u64::from(ROUNDS), "max_keys {max_keys:?}");
        assert_eq!(l.held(), ROUNDS as usize, "max_keys {max_keys:?}");
    }
}

/// The tests every member of the window family runs, for `$family: Family`: the model
/// comparison, lossless eviction, no credit to a clock behind a sweep, and many threads.
#[macro_export]
macro_rules! family_tests {
    ($family:ty) => {
        proptest! {
            #![proptest_config(config(384))]

            /// Every field of every decision, keyed and direct, for random sequences of
            /// operations with time moving forwards, backwards, across boundaries and over huge
            /// gaps.
            #[test]
            fn matches_the_model(
                config in started_configs::<$family>(),
                steps in steps_of(<$family as Family>::actions(), 1..=60),
            ) {
                let started = $crate::common::windows::Started::new(config, &steps);
                $crate::common::windows::matches_the_model::<$family>(&started)?;
            }

            /// A limiter that evicts idle keys after every step decides exactly like one that
            /// never does, and keeps exactly the live keys.
            #[test]
            fn evict_idle_is_lossless(
                config in started_configs::<$family>(),
                steps in steps_of(<$family as Family>::actions(), 1..=60),
            ) {
                let started = $crate::common::windows::Started::new(config, &steps);
                $crate::common::windows::evict_idle_is_lossless::<$family>(&started)?;
            }

            /// Eviction gives no credit back to a clock behind the sweep (both stores).
            #[test]
            fn evict_then_earlier_clock_is_never_more_lenient(
                config in started_configs::<$family>(),
                history in steps_of(actions(), 1..=40),
                back in 0u16..1000,
                n in n_sels(),
            ) {
                let started = $crate::common::windows::Started::new(config, &history);
                $crate::common::windows::evict_then_earlier_clock_is_never_more_lenient::<$family>(&started, back, n)?;
            }
        }

        #[test]
        fn threads_on_a_frozen_clock_admit_exactly_the_limit() {
            $crate::common::windows::threads_admit_exactly_the_limit::<$family>();
        }

        #[test]
        fn threads_with_mixed_sizes_never_overspend() {
            $crate::common::windows::threads_with_mixed_sizes_never_overspend::<$family>();
        }

        #[test]
        fn threads_racing_on_new_keys_admit_exactly_the_limit() {
            $crate::common::windows::threads_racing_on_new_keys_admit_exactly_the_limit::<$family>();
        }
    };
}

/// The largest limit of the layout (`max_limit(w)`, from the model) builds; one more is
/// `LimitTooLarge`. `build(limit, window)` builds the keyed and the direct limiter.
pub fn layout_bounds(
    w: u64,
    max_limit: fn(u64) -> u128,
    build: impl Fn(u32, Duration) -> [Result<(), ConfigError>; 2],
) -> Result<(), TestCaseError> {
    let window = Duration::from_nanos(w);
    let max = match u32::try_from(max_limit(w)) {
        Ok(max) if max < u32::MAX => max,
        _ => {
            prop_assert_eq!(build(u32::MAX, window), [Ok(()), Ok(())]);
            return Ok(());
        }
    };
    if max >= 1 {
        prop_assert_eq!(build(max, window), [Ok(()), Ok(())]);
    }
    let want = Err(ConfigError::LimitTooLarge {
        limit: max + 1,
        max: u64::from(max),
        window,
    });
    prop_assert_eq!(build(max + 1, window), [want.clone(), want]);
    Ok(())
}
