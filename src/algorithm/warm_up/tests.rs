//! Warm-up's unit and property tests, against the exact integer reference model that the
//! fuzz target uses too (`cellgate_models::warm_up`), apart from the step they check.

use super::*;
use cellgate_models::warm_up::{self as model, Outcome, St, WarmModel};
use cellgate_models::Seen;
use proptest::prelude::*;

const MS: u64 = 1_000_000;

fn warm(interval_ns: u64, warm_up_ns: u64) -> WarmUp {
    WarmUp::new(
        Quota::with_interval(Duration::from_nanos(interval_ns)),
        Duration::from_nanos(warm_up_ns),
    )
    .unwrap()
}

// `check(g, &mut word, now, n)`: a check of `n` at `now`, its write applied.
use crate::algorithm::run as check;

/// Runs a reservation of `n` at `now` accepting `max_wait` ns, applying the write.
fn reserve(g: &WarmUp, word: &mut u64, now: u64, n: u32, max_wait: u64) -> Decision {
    super::super::apply_step(g.step_within(*word, now, n, max_wait), word, n)
}

fn next_free_ns(word: u64) -> u64 {
    unpack(word).0 * NS_PER_US
}

/// The reference model of `g`'s configuration (one unit per interval, as `warm` builds it).
fn exact(g: &WarmUp) -> WarmModel {
    let m = model::validate(
        1,
        Duration::from_nanos(g.interval.get()),
        Duration::from_nanos(g.warm_up.get()),
    )
    .expect("a valid configuration for the crate is valid for the model");
    assert_eq!(
        (u128::from(g.frac_bits), u128::from(g.max_missing)),
        (u128::from(m.frac), m.max_missing),
        "the model's fixed point"
    );
    m
}

/// The model's state for a packed word.
fn state(word: u64) -> St {
    let (us, missing) = unpack(word);
    St {
        next_us: us.into(),
        missing: missing.into(),
    }
}

/// What a decision shows, as the model's plain struct.
fn seen(d: &Decision) -> Seen {
    Seen {
        allowed: d.is_allowed(),
        limit: d.limit(),
        remaining: d.remaining(),
        retry_after_ns: d.retry_after_ns(),
        reset_after_ns: d.reset_after_ns(),
    }
}

/// The model's outcome that a step from `st` (`n` at `now` accepting `max_wait`) showing `d`
/// and writing `write` is: every field exact, the write exactly the model's state; the one
/// freedom is the documented sub-5-ns cost rounding (two candidates one µs apart, the model's
/// list). `Err` says how they differ.
fn model_step(
    m: &WarmModel,
    st: St,
    now: u64,
    n: u32,
    max_wait: u64,
    d: &Decision,
    write: Option<u64>,
) -> Result<Outcome, String> {
    let outs = m.outcomes(st, now, n, max_wait);
    let o = model::pick(&outs, seen(d), u128::from(d.delay_ns()))?;
    let wrote = write.map(state);
    if o.write != wrote {
        return Err(format!("wrote {wrote:?}, the model {:?}", o.write));
    }
    Ok(o)
}

// I = 1 ms, W = 10 ms: M = 10 stored permits, threshold h = 5, cold interval 3 ms, and
// f(x) = 1 ms up to x = 5, then rising 0.4 ms per permit to 3 ms at x = 10. Spending one
// permit from x costs the mean of f over [x - 1, x]:
//   x = 10: (3.0 + 2.6) / 2 = 2.8 ms
//   x =  9: (2.6 + 2.2) / 2 = 2.4 ms
//   x =  8: (2.2 + 1.8) / 2 = 2.0 ms
//   x =  7: (1.8 + 1.4) / 2 = 1.6 ms
//   x =  6: (1.4 + 1.0) / 2 = 1.2 ms     (sum of these five: 10 ms = W)
//   x <= 5: 1.0 ms
// Pay later: each permit waits for the cost of the one before it, so from cold the permits
// are due at 0, 2.8, 5.2, 7.2, 8.8, 10.0, 11.0, 12.0, ... ms.
const HAND_DUE_US: [u64; 9] = [
    0, 2_800, 5_200, 7_200, 8_800, 10_000, 11_000, 12_000, 13_000,
];

#[test]
fn hand_worked_spacings_from_cold() {
    let g = warm(MS, 10 * MS);
    // ceil(M) = 10 needs 4 bits: F = 12; M * 2^12 = 40960 exactly.
    assert_eq!((g.frac_bits, g.max_missing), (12, 40_960));
    let mut word = 0;
    for (k, due_us) in HAND_DUE_US.into_iter().enumerate() {
        let due = due_us * 1_000;
        if due > 0 {
            let d = check(&g, &mut word, due - 1, 1);
            assert!(!d.is_allowed(), "permit {k} 1 ns early");
            assert_eq!(d.retry_after_ns(), Some(1));
            assert_eq!(d.remaining(), 0);
        }
        let d = check(&g, &mut word, due, 1);
        assert!(d.is_allowed(), "permit {k}");
        assert_eq!((d.limit(), d.remaining(), d.delay_ns()), (1, 0, 0));
        let next = HAND_DUE_US.get(k + 1).map_or(due + MS, |u| u * 1_000);
        assert_eq!(next_free_ns(word), next, "after permit {k}");
        // Fresh again once the next permit is due and the spent ones have accrued back.
        let spent = (k as u64 + 1).min(10);
        assert_eq!(d.reset_after_ns(), next - due + spent * MS, "reset {k}");
    }
    // Nine permits spent, one left stored, the next due at 14 ms. Idle until 20 ms: one
    // stored permit per idle ms, so 7 stored; the top one, at x = 7, costs 1.6 ms.
    let d = check(&g, &mut word, 20 * MS, 1);
    assert!(d.is_allowed());
    assert_eq!(next_free_ns(word), 21_600_000);
    assert_eq!(d.reset_after_ns(), 1_600_000 + 4 * MS, "4 permits missing");
    // Fresh once the 4 missing permits accrue (accrual rounds up: at most I/2^F early).
    let fresh = 25_600_000;
    assert!(!g.is_idle(word, fresh - 245));
    assert!(g.is_idle(word, fresh - 244));
    assert_eq!(g.step(word, fresh - 244, 0), g.step(0, fresh - 244, 0));
    let d = check(&g, &mut word, 40 * MS, 1);
    assert!(d.is_allowed());
    assert_eq!(next_free_ns(word), 42_800_000);
}

#[test]
fn large_requests_pay_later() {
    let g = warm(MS, 10 * MS);
    // Three permits from cold: 2.8 + 2.4 + 2.0 = 7.2 ms, admitted at once.
    let mut word = 0;
    let d = check(&g, &mut word, 0, 3);
    assert!(d.is_allowed());
    assert_eq!(d.delay_ns(), 0);
    assert_eq!(next_free_ns(word), 7_200_000);
    // 3 ms later: waits 4.2 ms whatever its size; a reservation accepts it.
    let d = check(&g, &mut word, 3 * MS, 20);
    assert_eq!(d.retry_after_ns(), Some(4_200_000));
    assert_eq!(d.reset_after_ns(), 4_200_000 + 3 * MS);
    let d = reserve(&g, &mut word, 3 * MS, 20, 4_200_000);
    assert_eq!((d.is_allowed(), d.delay_ns()), (true, 4_200_000));
    // 20 from x = 7: 1.6 + 1.2 (x = 7..5), then 5 stored and 13 fresh at 1 ms: 20.8 ms.
    assert_eq!(next_free_ns(word), 28 * MS);
    assert_eq!(unpack(word).1, g.max_missing);
    // 1 ns short of the wait: denied, retry counts the accepted wait.
    let d = reserve(&g, &mut word, 20 * MS, 1, 8 * MS - 1);
    assert_eq!(d.retry_after_ns(), Some(1));
    assert_eq!(d.remaining(), 0);
    // A wait of u64::MAX: acquire().
    let d = reserve(&g, &mut word, 0, 1, u64::MAX);
    assert_eq!((d.is_allowed(), d.delay_ns()), (true, 28 * MS));
    assert_eq!(next_free_ns(word), 29 * MS);
}

#[test]
fn peek_never_writes() {
    let g = warm(MS, 10 * MS);
    let (d, w) = g.step(0, 5, 0);
    assert_eq!(w, None);
    assert!(d.is_allowed());
    assert_eq!((d.remaining(), d.reset_after_ns(), d.delay_ns()), (1, 0, 0));
    let mut word = 0;
    check(&g, &mut word, 0, 1);
    for (now, max_wait) in [(0, 0), (MS, 0), (MS, 2 * MS), (3 * MS, 0), (50 * MS, 0)] {
        let (d, w) = g.step_within(word, now, 0, max_wait);
        assert_eq!(w, None, "at {now}");
        let wait = 2_800_000u64.saturating_sub(now);
        assert_eq!(d.is_allowed(), wait <= max_wait);
        assert_eq!(d.remaining(), u32::from(wait == 0));
        if d.is_allowed() {
            assert_eq!(d.delay_ns(), wait);
        } else {
            assert_eq!(d.retry_after_ns(), Some(wait - max_wait));
        }
    }
    // The peek at 3 ms sees the accrual without storing it: 0.2 permit accrued, rounded up
    // to 820/4096, so 0.8 permit missing less up to one 2^-12 step (244 ns of refill).
    let reset = g.step(word, 3 * MS, 0).0.reset_after_ns();
    assert!((800_000 - 244..=800_000).contains(&reset), "{reset}");
    assert_eq!(next_free_ns(word), 2_800_000);
}

#[test]
fn time_going_backwards_gives_no_credit() {
    let g = warm(MS, 10 * MS);
    let mut word = 0;
    check(&g, &mut word, 100 * MS, 1);
    let after = word;
    assert_eq!(next_free_ns(word), 102_800_000);
    // The clock jumps back: the wait grows, nothing accrues, nothing is written.
    let d = check(&g, &mut word, 50 * MS, 1);
    assert!(!d.is_allowed());
    assert_eq!(d.retry_after_ns(), Some(52_800_000));
    assert_eq!(d.reset_after_ns(), 52_800_000 + MS);
    assert_eq!(word, after);
    // A reservation behind the clock waits the whole way and pays from the same state.
    let d = reserve(&g, &mut word, 50 * MS, 1, u64::MAX);
    assert_eq!(d.delay_ns(), 52_800_000);
    assert_eq!(
        next_free_ns(word),
        105_200_000,
        "the second permit costs 2.4 ms"
    );
    // Back at the original time: as if the jump never happened.
    let mut straight = after;
    reserve(&g, &mut straight, 100 * MS, 1, u64::MAX);
    assert_eq!(straight, word);
    // Before the origin's first µs: nothing breaks.
    assert!(!check(&g, &mut word, 0, 1).is_allowed());
    assert!(!g.is_idle(word, 0));
}

#[test]
fn horizon_fails_closed() {
    let g = warm(MS, 10 * MS);
    let edge = MAX_NEXT_FREE_US * NS_PER_US;
    // Admissions whose next_free would pass the last µs are denied with no retry.
    let mut word = 0;
    let d = check(&g, &mut word, edge - 2_800_000, 1);
    assert!(d.is_allowed());
    assert_eq!(next_free_ns(word), edge);
    let d = check(&g, &mut word, edge, 1);
    assert!(!d.is_allowed());
    assert_eq!((d.retry_after(), d.remaining()), (None, 0));
    // Denied by the wait, and admission later would pass the horizon too: no retry.
    let d = check(&g, &mut word, edge - MS, 1);
    assert_eq!(d.retry_after(), None);
    // A peek has no cost: it is told the wait.
    assert_eq!(g.step(word, edge - MS, 0).0.retry_after_ns(), Some(MS));
    // A fresh key after the horizon, and a word of all ones.
    for word in [0, u64::MAX] {
        for now in [edge, edge + 1, u64::MAX] {
            let (d, w) = g.step_within(word, now, 1, u64::MAX);
            assert!(!d.is_allowed() && w.is_none(), "{word:#x} at {now}");
            assert_eq!(d.retry_after(), None);
        }
    }
    let d = g.step(0, edge - 3 * MS, 1).0;
    assert!(d.is_allowed(), "cost 2.8 ms fits");
    let d = g.step(0, edge - 2 * MS, 1).0;
    assert!(!d.is_allowed());
    assert_eq!(d.retry_after(), None);
    assert_eq!(d.remaining(), 0, "no check fits now");
    // Far too many units for any horizon: 2^32 s is 136 years.
    let g = warm(1_000 * MS, 10_000 * MS);
    let d = g.step(0, 0, u32::MAX).0;
    assert!(!d.is_allowed());
    assert_eq!(d.retry_after(), None);
    // n * I well past 2^64 ns: no overflow.
    let g = warm(u64::MAX / 2, u64::MAX);
    let (d, w) = g.step(0, 0, u32::MAX);
    assert!(!d.is_allowed() && w.is_none());
    assert_eq!(g.step(0, 0, 1).0.retry_after(), None);
}

#[test]
fn layout_round_trips_at_the_edges() {
    for (us, missing) in [
        (0, 0),
        (MAX_NEXT_FREE_US, MISSING_MASK),
        (MAX_NEXT_FREE_US, 0),
        (0, MISSING_MASK),
        (1, 1),
    ] {
        assert_eq!(unpack(pack(us, missing)), (us, missing));
    }
    assert_eq!(pack(0, 0), 0, "the fresh word is a cold key at the origin");
    assert_eq!(pack(MAX_NEXT_FREE_US, MISSING_MASK), u64::MAX);
    assert_eq!(NEXT_FREE_BITS + MISSING_BITS, u64::BITS);
}

#[test]
fn config_errors() {
    let s = Duration::from_secs(1);
    let new = |q, w| WarmUp::new(q, w);
    assert_eq!(
        new(Quota::new(0, s), s),
        Err(ConfigError::Zero { field: "count" })
    );
    assert_eq!(
        new(Quota::new(1, Duration::ZERO), s),
        Err(ConfigError::Zero { field: "period" })
    );
    assert_eq!(
        new(Quota::per_second(1), Duration::ZERO),
        Err(ConfigError::Zero { field: "warm_up" })
    );
    assert!(matches!(
        new(Quota::new(2, Duration::from_nanos(1)), s),
        Err(ConfigError::RateTooFast { count: 2, .. })
    ));
    assert!(matches!(
        new(Quota::new(1, Duration::MAX), s),
        Err(ConfigError::PeriodTooLong { .. })
    ));
    assert_eq!(
        new(Quota::per_second(1), Duration::MAX),
        Err(ConfigError::PeriodTooLong {
            period: Duration::MAX
        })
    );
    // 65 535 stored permits fit; one ns more needs 65 536.
    let q = Quota::with_interval(Duration::from_micros(1));
    let g = new(q, Duration::from_micros(65_535)).unwrap();
    assert_eq!((g.frac_bits, g.max_missing), (0, 65_535));
    assert_eq!(
        new(q, Duration::from_nanos(65_535_001)),
        Err(ConfigError::WarmUpTooLong {
            permits: 65_536,
            max: 65_535
        })
    );
    let err = new(Quota::per_second(1000), Duration::from_secs(3600)).unwrap_err();
    assert!(err.to_string().contains("3600000 stored permits"), "{err}");
    // Burst and queue play no part.
    assert!(new(Quota::per_second(1).with_burst(0).with_queue(u32::MAX), s).is_ok());
    // Fractional bits: ceil(M) = 1 → F = 15; a warm-up under one interval still works.
    let g = new(Quota::per_second(1), Duration::from_millis(1)).unwrap();
    assert_eq!((g.frac_bits, g.max_missing), (15, 32));
    let g = new(Quota::per_second(1), Duration::from_nanos(1)).unwrap();
    assert_eq!((g.frac_bits, g.max_missing), (15, 0));
}

#[test]
fn idle_and_swept_words() {
    let g = warm(MS, 10 * MS);
    assert!(g.is_idle(0, 0));
    let mut word = 0;
    check(&g, &mut word, 5 * MS, 2); // next_free 10.2 ms, 2 permits missing
    assert!(!g.is_idle(word, 10_200_000));
    assert!(!g.is_idle(word, 12_200_000 - 245));
    assert!(
        g.is_idle(word, 12_200_000 - 244),
        "accrual rounds up by < I/2^12"
    );
    assert!(g.is_idle(word, 12_200_000));
    assert_eq!(
        g.step(word, 10_200_000, 0).0.reset_after_ns(),
        2 * MS,
        "reset_after counts the refill"
    );
    // A sweep at 12_200_500 ns: next_free 12_200 µs, the latest an idle key can have.
    let swept = g.swept_word(12_200_500);
    assert_eq!(unpack(swept), (12_200, 0));
    for now in [12_200_500, 12_200_999, 13 * MS, u64::MAX] {
        for n in [0, 1, 3] {
            assert_eq!(g.step(swept, now, n), g.step(0, now, n), "at {now}");
        }
    }
    // Behind the sweep: at least as strict as the dropped key.
    assert!(!g.step(swept, 12 * MS, 1).0.is_allowed());
    assert!(g.step(word, 12 * MS, 1).0.is_allowed());
    assert_eq!(
        unpack(g.swept_word(u64::MAX)),
        (MAX_NEXT_FREE_US, 0),
        "clamped, not wrapped"
    );
}

/// From cold, reservations of one unit with no bound on the wait, each made when the
/// previous one's delay is up: each decision and written state is the exact model's, and the
/// spacing of the due times (the cost of each permit) has the documented shape.
fn continuous_demand(interval_ns: u64, warm_up_ns: u64) {
    let g = warm(interval_ns, warm_up_ns);
    let m = exact(&g);
    let permits = warm_up_ns.div_ceil(interval_ns) as usize + 20;
    let (mut word, mut now, mut st) = (0u64, 0u64, model::FRESH);
    let mut due = vec![];
    for k in 0..permits {
        let (d, write) = g.step_within(word, now, 1, u64::MAX);
        let o = model_step(&m, st, now, 1, u64::MAX, &d, write).unwrap_or_else(|e| {
            panic!("I = {interval_ns}, W = {warm_up_ns}: permit {k} at {now}: {e}")
        });
        st = o.write.expect("an admission writes");
        super::super::apply_step((d, write), &mut word, 1);
        assert!(d.is_allowed());
        now += d.delay_ns();
        due.push(now);
    }
    let spacing = |v: &[u64]| v.windows(2).map(|p| p[1] - p[0]).collect::<Vec<_>>();
    let ours = spacing(&due);
    let i = interval_ns as f64;
    // Starts near 3I (the top permit's area: 3I - 2I²/W, when M >= 1; next_free is rounded
    // up to a whole µs) and ends at I.
    if warm_up_ns >= interval_ns {
        let top = 3.0 * i - 2.0 * i * i / warm_up_ns as f64;
        assert!(
            (ours[0] as f64 - top).abs() < 1_005.0,
            "{} vs {top}",
            ours[0]
        );
    }
    assert!(ours.last().is_some_and(|&s| (s as f64 - i).abs() < 1_000.0));
    // The warm region (the first M/2 permits, down to h) takes about W, plus under 1 µs of
    // rounding per permit.
    let half = (warm_up_ns / interval_ns) as usize / 2;
    assert!(
        (due[half] as f64 - warm_up_ns as f64).abs() <= 2.0 * i + 1_005.0 * half as f64,
        "the warm region takes about W: {} vs {warm_up_ns}",
        due[half]
    );
}

#[test]
fn continuous_demand_matches_the_model() {
    continuous_demand(MS, 10 * MS);
    continuous_demand(333_333_333, 10_000_000_000); // 3/s, W = 10 s: M ≈ 30.0000000003
    continuous_demand(1_234_567, 987_654_321); // M ≈ 800
    continuous_demand(10_000, 655_350_000); // 100k/s, M = 65535, F = 0
    continuous_demand(7_777, 5_000); // M < 1
}

/// A configuration: interval, then warm-up period with `ceil(M) <= MAX_PERMITS`.
fn config() -> impl Strategy<Value = (u64, u64)> {
    (
        prop_oneof![
            1u64..1_000,
            1_000u64..10_000_000,
            10_000_000u64..100_000_000_000
        ],
        prop_oneof![0u64..4, 4u64..100, 100u64..MAX_PERMITS],
        any::<u64>(),
    )
        .prop_map(|(i, whole, part)| {
            let w = (i * whole + part % i).max(1);
            (i, w)
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// Every word packs and unpacks unchanged.
    #[test]
    fn pack_unpack_round_trips(us in 0..=MAX_NEXT_FREE_US, missing in 0..=MISSING_MASK) {
        prop_assert_eq!(unpack(pack(us, missing)), (us, missing));
    }

    /// One step from any valid state is exactly the model's from that state: the same
    /// resync, the same decision field by field, the same delay, and the same written state
    /// (up to the documented sub-5-ns cost rounding, which the model lists as a second
    /// candidate one µs later).
    #[test]
    fn one_step_matches_the_model_from_the_same_state(
        (i, w) in config(),
        us in 0u64..(1 << 40),
        missing in any::<u64>(),
        offset in prop_oneof![0u64..1_000, 0u64..1 << 40],
        before in any::<bool>(),
        n in prop_oneof![0u32..4, 0u32..70_000],
        max_wait in prop_oneof![Just(0u64), 0u64..1 << 41, Just(u64::MAX)],
    ) {
        let g = warm(i, w);
        let m = exact(&g);
        let word = pack(us, missing % (g.max_missing + 1));
        let nf = us * NS_PER_US;
        let now = if before { nf.saturating_sub(offset) } else { nf + offset };
        let (d, write) = g.step_within(word, now, n, max_wait);
        prop_assert_eq!(d.is_allowed() && n > 0, write.is_some());
        let (cbase, cmissing) = g.resync(nf, unpack(word).1, now);
        prop_assert_eq!(
            (u128::from(cbase), u128::from(cmissing)),
            m.resync(state(word), now),
            "resync"
        );
        if let Err(e) = model_step(&m, state(word), now, n, max_wait, &d, write) {
            return Err(TestCaseError::fail(format!("{d:?} at {now}: {e}")));
        }
    }

    /// No input panics, and a step writes exactly when it admits units.
    #[test]
    fn no_input_panics(
        i in prop_oneof![1u64..10, any::<u64>().prop_map(|x| x.max(1))],
        whole in prop_oneof![0u64..3, 0u64..=MAX_PERMITS],
        word in any::<u64>(),
        now in any::<u64>(),
        n in any::<u32>(),
        max_wait in any::<u64>(),
    ) {
        let w = i.saturating_mul(whole).max(1);
        let Ok(g) = WarmUp::new(
            Quota::with_interval(Duration::from_nanos(i)),
            Duration::from_nanos(w),
        ) else {
            return Ok(());
        };
        let (d, write) = g.step_within(word, now, n, max_wait);
        prop_assert_eq!(d.is_allowed() && n > 0, write.is_some());
        let _ = g.step(word, now, n);
        let _ = g.is_idle(word, now);
        let _ = g.swept_word(now);
    }

    /// An idle word decides exactly like the fresh word from then on; a word that is not
    /// idle decides differently at that instant (at least in its reset_after).
    #[test]
    fn idle_is_exact(
        (i, w) in config(),
        us in 0u64..(1 << 40),
        missing in any::<u64>(),
        offset in 0u64..1 << 42,
        later in prop_oneof![Just(0u64), 0u64..1 << 42],
        n in 0u32..5,
        max_wait in prop_oneof![Just(0u64), any::<u64>()],
    ) {
        let g = warm(i, w);
        let word = pack(us, missing % (g.max_missing + 1));
        let now = (us * NS_PER_US).saturating_sub(1 << 20) + offset;
        if g.is_idle(word, now) {
            let t = now + later;
            prop_assert_eq!(
                g.step_within(word, t, n, max_wait),
                g.step_within(0, t, n, max_wait)
            );
        } else {
            prop_assert_ne!(g.step(word, now, 0).0, g.step(0, now, 0).0);
        }
    }

    /// The swept word is fresh from the sweep on, and before it at least as strict as any
    /// word that was idle at the sweep: never admits what that word would not, never with
    /// a shorter delay, and leaves next_free no earlier.
    #[test]
    fn swept_word_is_fresh_after_and_strict_before(
        (i, w) in config(),
        us in 0u64..(1 << 40),
        missing in any::<u64>(),
        idle_for in prop_oneof![0u64..1_000, 0u64..1 << 42],
        t in any::<u64>(),
        n in 0u32..5,
        max_wait in prop_oneof![Just(0u64), any::<u64>()],
    ) {
        let g = warm(i, w);
        let dropped = pack(us, missing % (g.max_missing + 1));
        // Idle from its next_free plus the refill of its missing permits on.
        let refill = g.reset_ns(us * NS_PER_US, unpack(dropped).1, us * NS_PER_US);
        let swept = us * NS_PER_US + refill + idle_for;
        prop_assert!(g.is_idle(dropped, swept));
        let sw = g.swept_word(swept);
        prop_assert!(g.is_idle(sw, swept));
        let t = t % (swept * 2 + 2);
        let (a, wa) = g.step_within(sw, t, n, max_wait);
        if t >= swept {
            prop_assert_eq!((a, wa), g.step_within(0, t, n, max_wait));
        } else {
            let (b, wb) = g.step_within(dropped, t, n, max_wait);
            if a.is_allowed() {
                prop_assert!(b.is_allowed());
                prop_assert!(a.delay_ns() >= b.delay_ns());
            }
            if let (Some(wa), Some(wb)) = (wa, wb) {
                prop_assert!(unpack(wa).0 >= unpack(wb).0);
            }
        }
    }
}

#[derive(Debug, Clone, Copy)]
enum Op {
    /// Advance the clock by this many ns (negative: backwards).
    Advance(i64),
    Check(u32),
    Reserve(u32, u64),
}

fn op(i: u64) -> impl Strategy<Value = Op> {
    let i = i as i64;
    prop_oneof![
        3 => prop_oneof![0i64..2_000, 0..i, 0..4 * i, 0..40 * i].prop_map(Op::Advance),
        1 => (-2 * i..0).prop_map(Op::Advance),
        3 => prop_oneof![1u32..3, 0u32..50].prop_map(Op::Check),
        3 => (prop_oneof![1u32..3, 0u32..50], prop_oneof![Just(u64::MAX), 0..(4 * i as u64)])
            .prop_map(|(n, w)| Op::Reserve(n, w)),
    ]
}

proptest! {
    /// Random sequences against the model fed cellgate's accepted sequence: the model keeps
    /// its own state (not decoded from the word), every decision and written state must be
    /// exactly its own, and where the documented sub-5-ns cost rounding leaves two candidates
    /// (one µs apart) it continues from the one cellgate's decision shows.
    #[test]
    fn sequences_track_an_independent_model(
        ((i, w), ops) in config().prop_flat_map(|(i, w)| {
            (Just((i, w)), proptest::collection::vec(op(i), 1..60))
        }),
    ) {
        let g = warm(i, w);
        let m = exact(&g);
        let (mut word, mut now, mut st) = (0u64, 1u64 << 30, model::FRESH);
        for (step, op) in ops.into_iter().enumerate() {
            let (n, max_wait) = match op {
                Op::Advance(d) => {
                    now = now.saturating_add_signed(d);
                    continue;
                }
                Op::Check(n) => (n, 0),
                Op::Reserve(n, max_wait) => (n, max_wait),
            };
            let (d, write) = g.step_within(word, now, n, max_wait);
            match model_step(&m, st, now, n, max_wait, &d, write) {
                Ok(o) => st = o.write.unwrap_or(st),
                Err(e) => {
                    return Err(TestCaseError::fail(format!(
                        "step {step}: {op:?} at {now}: {d:?}, model state {st:?}: {e}"
                    )));
                }
            }
            if let Some(new) = write {
                word = new;
            }
        }
    }
}
