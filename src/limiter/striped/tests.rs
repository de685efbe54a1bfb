//! Unit and property tests of the striped limiter.

use super::builder::share;
use super::*;
use crate::clock::ManualClock;
use crate::error::ConfigError;
use crate::quota::Quota;
use proptest::prelude::*;
use std::time::Duration;

fn gcra(quota: Quota, stripes: usize) -> StripedLimiter<ManualClock> {
    gcra_in(quota, stripes, false)
}

/// A burst from `bursts` and a number of stripes from `stripes`, cut to at most the burst (so
/// that every stripe's share is at least one unit).
fn burst_and_stripes(
    bursts: std::ops::Range<u32>,
    stripes: std::ops::Range<usize>,
) -> impl Strategy<Value = (u32, usize)> {
    (bursts, stripes).prop_map(|(burst, stripes)| (burst, stripes.min(burst as usize)))
}

/// A GCRA limiter on a manual clock, with the default shared time or `relaxed_clock()`.
fn gcra_in(quota: Quota, stripes: usize, relaxed: bool) -> StripedLimiter<ManualClock> {
    let b = StripedLimiter::gcra(quota)
        .stripes(stripes)
        .clock(ManualClock::new());
    if relaxed { b.relaxed_clock() } else { b }.build().unwrap()
}

#[test]
fn shares_add_up_to_the_whole() {
    for whole in [0, 1, 2, 7, 100, 101, u32::MAX] {
        for stripes in [1, 2, 3, 7, 64, 1000] {
            let shares: Vec<u64> = (0..stripes)
                .map(|i| u64::from(share(whole, stripes, i)))
                .collect();
            assert_eq!(shares.iter().sum::<u64>(), u64::from(whole));
            let (lo, hi) = (shares.iter().min().unwrap(), shares.iter().max().unwrap());
            assert!(hi - lo <= 1, "{whole} over {stripes}: {shares:?}");
        }
    }
}

#[test]
fn fast_mod_is_the_remainder() {
    let mut a = 0x1234_5678u32;
    for d in (1..70).chain([255, 256, 1000, 4099, MAX_STRIPES]) {
        let magic = mod_magic(d);
        for x in [0, 1, d as u32 - 1, d as u32, u32::MAX, u32::MAX - 1] {
            assert_eq!(fast_mod(x, magic, d), x as usize % d, "{x} % {d}");
        }
        for _ in 0..1000 {
            a ^= a << 13;
            a ^= a >> 17;
            a ^= a << 5;
            assert_eq!(fast_mod(a, magic, d), a as usize % d, "{a} % {d}");
        }
        // Consecutive tickets start on distinct stripes.
        let starts: std::collections::HashSet<usize> =
            (7..7 + d as u32).map(|t| fast_mod(t, magic, d)).collect();
        assert_eq!(starts.len(), d);
    }
}

#[test]
fn restock_is_for_stock_only() {
    let l = gcra(Quota::per_second(10), 2);
    assert_eq!(
        l.restock(3).unwrap_err(),
        ConfigError::Unsupported {
            operation: "restock",
            algorithm: "gcra"
        }
    );
    let sku = StripedLimiter::stock(0).stripes(3).build().unwrap();
    assert!(!sku.check().is_allowed());
    assert_eq!(sku.restock(u64::MAX).unwrap(), u64::MAX);
    assert_eq!(sku.restock(7).unwrap(), u64::MAX, "saturates");
}

#[test]
fn bad_configurations_are_errors() {
    let q = Quota::per_second(10).with_burst(4);
    assert_eq!(
        StripedLimiter::gcra(q).stripes(0).build().unwrap_err(),
        ConfigError::Zero { field: "stripes" }
    );
    assert_eq!(
        StripedLimiter::gcra(q).stripes(5).build().unwrap_err(),
        ConfigError::TooManyStripes { stripes: 5, max: 4 }
    );
    assert_eq!(
        StripedLimiter::stock(10)
            .stripes(MAX_STRIPES + 1)
            .build()
            .unwrap_err(),
        ConfigError::TooManyStripes {
            stripes: MAX_STRIPES + 1,
            max: MAX_STRIPES
        }
    );
    assert!(StripedLimiter::gcra(q).stripes(4).build().is_ok());
    // T = u64::MAX / 5 ns and burst 4 fit (tolerance 0.8 * u64::MAX), but over 3 stripes
    // the first stripe's tolerance is 2 * 3T: it does not.
    let t = u64::MAX / 5;
    let slow = Quota::new(1, Duration::from_nanos(t)).with_burst(4);
    assert!(StripedLimiter::gcra(slow).stripes(1).build().is_ok());
    assert_eq!(
        StripedLimiter::gcra(slow).stripes(3).build().unwrap_err(),
        ConfigError::BurstTooLarge {
            burst: 4,
            interval_ns: t
        }
    );
    assert_eq!(
        StripedLimiter::gcra(Quota::per_second(0))
            .build()
            .unwrap_err(),
        ConfigError::Zero { field: "count" }
    );
    // The default stripe count never exceeds the burst.
    let one = StripedLimiter::gcra(Quota::per_second(5).with_burst(1))
        .build()
        .unwrap();
    assert_eq!(one.stripes(), 1);
}

#[test]
fn a_frozen_clock_admits_exactly_the_burst_from_any_start() {
    for stripes in 1..=6 {
        for start in 0..stripes {
            let l = gcra(Quota::per_second(1000).with_burst(6), stripes);
            let admitted = (0..20)
                .filter(|_| l.check_n_from(start, 1).is_allowed())
                .count();
            assert_eq!(admitted, 6, "{stripes} stripes from {start}");
            let d = l.check_n_from(start, 1);
            assert_eq!(d.limit(), 6);
            // The soonest any stripe refills: one stripe interval (stripes * 1 ms).
            assert_eq!(d.retry_after(), Some(Duration::from_millis(stripes as u64)));
        }
    }
}

#[test]
fn a_request_is_served_by_one_gcra_stripe() {
    // Burst 5 over 2 stripes: 3 + 2. Three units fit the first stripe only.
    let l = gcra(Quota::per_second(10).with_burst(5), 2);
    assert!(!l.check_n_from(0, 4).is_allowed());
    assert_eq!(l.check_n_from(0, 4).retry_after(), None);
    assert!(l.check_n_from(1, 3).is_allowed()); // stripe 1 holds 2: stripe 0 serves it
    assert!(!l.check_n_from(1, 3).is_allowed());
    assert!(l.check_n_from(0, 2).is_allowed());
    assert_eq!(l.remaining(), 0);
}

#[test]
fn stock_gathers_all_or_nothing() {
    let l = StripedLimiter::stock(10).stripes(4).build().unwrap(); // 3 3 2 2
    assert!(l.check_n_from(3, 9).is_allowed());
    assert_eq!(l.remaining(), 1);
    let d = l.check_n_from(0, 2);
    assert!(!d.is_allowed());
    assert_eq!((d.limit(), d.retry_after()), (10, None));
    assert_eq!(l.remaining(), 1, "a refused gather gives every unit back");
    assert!(l.check_n_from(1, 1).is_allowed());
    assert_eq!(l.remaining(), 0);
}

#[test]
fn threads_sell_the_stock_exactly() {
    for stripes in [1, 2, 3, 8] {
        let l = StripedLimiter::stock(10_000)
            .stripes(stripes)
            .build()
            .unwrap();
        let sold: u64 = std::thread::scope(|s| {
            let workers: Vec<_> = (0..4u32)
                .map(|t| {
                    let l = &l;
                    s.spawn(move || {
                        let mut sold = 0u64;
                        for i in 0..6_000u32 {
                            // 1 to 3 units, some starting at a named stripe.
                            let n = 1 + (i + t) % 3;
                            let d = if i % 2 == 0 {
                                l.check_n(n)
                            } else {
                                l.check_n_from((i * 7 + t) as usize, n)
                            };
                            if d.is_allowed() {
                                sold += u64::from(n);
                            }
                        }
                        sold
                    })
                })
                .collect();
            workers.into_iter().map(|w| w.join().unwrap()).sum()
        });
        // Demand (4 threads x ~12 000 units) far exceeds the stock: all of it sells, and
        // never a unit more; leftovers are only what no request size could still take.
        assert!(sold <= 10_000, "{stripes} stripes: sold {sold}");
        assert_eq!(sold + l.remaining(), 10_000, "{stripes} stripes");
        assert_eq!(
            l.remaining(),
            0,
            "{stripes} stripes: unit requests drain it"
        );
    }
}

proptest! {
    /// Over any sequence of checks and clock steps, a striped GCRA limiter admits at most
    /// `burst + elapsed / T` units, as one GCRA cell with the whole quota would.
    #[test]
    fn gcra_stripes_keep_the_whole_quota_ceiling(
        (burst, stripes) in burst_and_stripes(1u32..20, 1usize..8),
        ops in proptest::collection::vec((0u64..3_000_000, 0usize..16, 1u32..4), 1..200),
    ) {
        let interval_ns = 1_000_000u64; // 1000 per second
        let l = gcra(Quota::per_second(1000).with_burst(burst), stripes);
        let mut admitted = 0u64;
        let mut elapsed = 0u64;
        for (step, hint, n) in ops {
            l.clock().advance(Duration::from_nanos(step));
            elapsed += step;
            let d = l.check_n_from(hint, n);
            if d.is_allowed() {
                admitted += u64::from(n);
            }
            prop_assert_eq!(d.limit(), burst);
            prop_assert!(
                admitted <= u64::from(burst) + elapsed / interval_ns,
                "admitted {} after {} ns", admitted, elapsed
            );
        }
    }

    /// Stock over stripes, one thread: a request is admitted iff the total holds `n`
    /// units (no single stripe needs to), exactly as one stock cell decides.
    #[test]
    fn stock_stripes_decide_as_one_stock(
        units in 0u32..50,
        stripes in 1usize..8,
        ops in proptest::collection::vec((0usize..16, 0u32..6, 0u64..4), 1..60),
    ) {
        let l = StripedLimiter::stock(units).stripes(stripes).build().unwrap();
        let mut left = u64::from(units);
        for (hint, n, restock) in ops {
            if restock > 0 && hint % 4 == 0 {
                left += restock;
                prop_assert_eq!(l.restock(restock).unwrap(), left);
            }
            let d = l.check_n_from(hint, n);
            prop_assert_eq!(d.is_allowed(), u64::from(n) <= left);
            if d.is_allowed() {
                left -= u64::from(n);
            }
            prop_assert_eq!(l.remaining(), left);
        }
    }
}

/// A clock stepping back, in several shapes: quota 10/s over 2 to 4 stripes, a check at 10 s
/// (taking 1 to 4 units), then the clock at 9 s, then at 10 s again, all checks from one
/// stripe: never more than one cell admits over the same readings (4 in all), in either mode.
#[test]
fn a_clock_stepping_back_and_returning_lends_nothing_from_one_start() {
    for (stripes, relaxed) in (2..=4).flat_map(|s| [(s, false), (s, true)]) {
        for first in 1..=4u32 {
            for start in 0..stripes {
                let l = gcra_in(Quota::per_second(10).with_burst(4), stripes, relaxed);
                let mut admitted = 0;
                l.clock().set(Duration::from_secs(10));
                admitted += (0..first)
                    .filter(|_| l.check_n_from(start, 1).is_allowed())
                    .count();
                l.clock().set(Duration::from_secs(9));
                admitted += (0..10)
                    .filter(|_| l.check_n_from(start, 1).is_allowed())
                    .count();
                l.clock().set(Duration::from_secs(10));
                admitted += (0..10)
                    .filter(|_| l.check_n_from(start, 1).is_allowed())
                    .count();
                assert_eq!(
                    admitted, 4,
                    "{stripes} stripes, {first} first, from {start}, relaxed {relaxed}"
                );
            }
        }
    }
}

/// The same scenario with the checks at 9 s and back at 10 s starting at another stripe than
/// the checks at 10 s: by default (admissions share their time) one cell's 4; relaxed, the
/// stripes that were idle at 10 s lend the second between 9 s and 10 s again (the bound the
/// docs give: at most `d / T` = 10 more).
#[test]
fn a_clock_stepping_back_lends_nothing_across_stripes_by_default() {
    for stripes in 2..=4 {
        for first in 1..=4u32 {
            for relaxed in [false, true] {
                let l = gcra_in(Quota::per_second(10).with_burst(4), stripes, relaxed);
                let mut admitted = 0;
                l.clock().set(Duration::from_secs(10));
                admitted += (0..first)
                    .filter(|_| l.check_n_from(0, 1).is_allowed())
                    .count();
                for at in [9, 10] {
                    l.clock().set(Duration::from_secs(at));
                    admitted += (0..10)
                        .filter(|_| l.check_n_from(1, 1).is_allowed())
                        .count();
                }
                if relaxed {
                    assert!(admitted <= 4 + 10, "{stripes} stripes, {first} first");
                } else {
                    assert_eq!(admitted, 4, "{stripes} stripes, {first} first");
                }
            }
        }
    }
}

/// A reservation may schedule a stripe far ahead (a quota without a queue lets the wait alone
/// decide). That schedule is no proof that the clock got there: a refused check right after it
/// must not move the limiter's time forward and refill the other stripes.
#[test]
fn a_reservation_far_ahead_is_not_taken_for_the_time() {
    let l = gcra(Quota::per_second(10).with_burst(2), 2);
    l.clock().set(Duration::from_secs(10));
    // Drain both stripes, then reserve an hour ahead on this thread's stripe.
    assert!(l.check_n_from(0, 1).is_allowed() && l.check_n_from(1, 1).is_allowed());
    let r = l.reserve(1, Duration::from_secs(3600));
    assert!(r.is_allowed());
    // Still 10 s: every stripe is drained; no check may find credit.
    for hint in 0..4 {
        assert!(!l.check_n_from(hint, 1).is_allowed(), "hint {hint}");
    }
    assert_eq!(l.remaining(), 0);
    // A refill of one stripe interval later, one unit per stripe whose schedule is not an
    // hour ahead.
    l.clock().set(Duration::from_millis(10_200));
    assert_eq!(
        (0..4)
            .filter(|&h| l.check_n_from(h, 1).is_allowed())
            .count(),
        1
    );
}

/// Units admitted by a striped GCRA limiter over the whole quota's ceiling, clock moves that
/// may go backwards, and two of the bounds the module docs give (checked by integer
/// arithmetic): `(admitted - limit) * T <= elapsed`.
fn within(admitted: u64, limit: u64, t: u64, elapsed: u64) -> bool {
    admitted.saturating_sub(limit) * t <= elapsed
}

proptest! {
    /// With a clock that moves both ways:
    /// * from any reading that is the latest so far, while the clock does not go back, at most
    ///   `burst + elapsed / T` (one cell's ceiling);
    /// * over any run of checks that starts at the beginning or right after a step back, at
    ///   most `burst + (latest - earliest) / T` (latest: the latest reading up to the run's
    ///   end; earliest: the earliest reading in it).
    #[test]
    fn gcra_stripes_bound_what_a_clock_going_back_gives(
        (burst, stripes) in burst_and_stripes(1u32..12, 1usize..6),
        relaxed in any::<bool>(),
        ops in proptest::collection::vec((-3_000_000i64..4_000_000, 0usize..8, 1u32..4), 1..150),
    ) {
        let t = 1_000_000u64; // 1000 per second
        let l = gcra_in(Quota::per_second(1000).with_burst(burst), stripes, relaxed);
        l.clock().set(Duration::from_secs(5));
        let mut now = 5_000_000_000u64;
        let mut latest = now;
        // The forward run: (origin, admitted) since the latest reading that was a new high.
        let mut forward: Option<(u64, u64)> = Some((now, 0));
        // Runs starting at the beginning and after each step back: (earliest, admitted).
        let mut runs: Vec<(u64, u64)> = vec![(now, 0)];
        for (step, hint, n) in ops {
            if step < 0 {
                now -= step.unsigned_abs();
                forward = None;
                runs.push((now, 0));
                if runs.len() > 8 {
                    runs.remove(1);
                }
            } else {
                now += step as u64;
                if now > latest {
                    latest = now;
                    if forward.is_none() {
                        forward = Some((now, 0));
                    }
                }
            }
            l.clock().set(Duration::from_nanos(now));
            for run in &mut runs {
                run.0 = run.0.min(now);
            }
            let d = l.check_n_from(hint, n);
            if !d.is_allowed() {
                continue;
            }
            let n = u64::from(n);
            if let Some((origin, admitted)) = &mut forward {
                *admitted += n;
                prop_assert!(
                    within(*admitted, u64::from(burst), t, now - *origin),
                    "{} units since {} (now {})", admitted, origin, now
                );
            }
            for (earliest, admitted) in &mut runs {
                *admitted += n;
                prop_assert!(
                    within(*admitted, u64::from(burst), t, latest - *earliest),
                    "{} units in a run from {} (latest {})", admitted, earliest, latest
                );
            }
        }
    }
}

proptest! {
    /// Checks that all start at one stripe, requests within its share of the burst, a clock
    /// that moves both ways: over every run of checks from an admission on, at most
    /// `burst + (A_end - A_start) / T` units, where `A` is the latest reading of an admitted
    /// check so far: one cell's ceiling.
    #[test]
    fn checks_from_one_stripe_keep_one_cells_ceiling_whatever_the_clock(
        (burst, stripes) in burst_and_stripes(1u32..12, 1usize..6),
        start in 0usize..6,
        relaxed in any::<bool>(),
        ops in proptest::collection::vec((-3_000_000i64..4_000_000, 1u32..4), 1..120),
    ) {
        let start = start % stripes;
        let most = share(burst, stripes, start);
        let l = gcra_in(Quota::per_second(1000).with_burst(burst), stripes, relaxed);
        one_cells_ceiling(&l, burst, ops.into_iter().map(|(step, n)| (step, start, n.min(most))))?;
    }

    /// `strict_clock()`, checks from any stripes (each request within the smallest share of
    /// the burst, so any stripe could take it), a clock that moves both ways: one cell's
    /// ceiling over every run, as above. By default, the same within the lag of the mark (one
    /// interval here: one unit).
    #[test]
    fn checks_from_any_stripes_keep_one_cells_ceiling_whatever_the_clock(
        (burst, stripes) in burst_and_stripes(1u32..12, 1usize..6),
        strict in any::<bool>(),
        ops in proptest::collection::vec((-3_000_000i64..4_000_000, 0usize..8, 1u32..4), 1..120),
    ) {
        let most = burst / stripes as u32;
        let q = Quota::per_second(1000).with_burst(burst);
        let b = StripedLimiter::gcra(q).stripes(stripes).clock(ManualClock::new());
        let (l, slack) = if strict { (b.strict_clock().build().unwrap(), 0) } else { (b.build().unwrap(), 1_000_000) };
        one_cells_ceiling_within(&l, burst, slack, ops.into_iter().map(|(step, hint, n)| (step, hint, n.min(most))))?;
    }
}

/// By default an admission lifts the shared mark only when it is more than the lag ahead of it:
/// a limiter admitting on every nanosecond of its clock writes the mark about once per lag,
/// not once per admission (the write that stopped the hot-key mode from scaling). Strict, once
/// per admission.
#[test]
fn the_default_mark_is_written_once_per_lag_not_per_admission() {
    let raises = || crate::sync::counts::count(crate::sync::counts::Event::Raise);
    for strict in [false, true] {
        let b = StripedLimiter::gcra(Quota::per_second(1_000_000_000).with_burst(1_000_000))
            .stripes(4)
            .clock(ManualClock::new());
        let l = if strict { b.strict_clock() } else { b }.build().unwrap();
        let before = raises();
        let checks = 100_000u64;
        for i in 0..checks {
            l.clock().set(Duration::from_nanos(1_000_000 + i));
            assert!(l.check_n_from(i as usize, 1).is_allowed());
        }
        let writes = raises() - before;
        if strict {
            assert_eq!(writes, checks, "strict: one write per admission");
        } else {
            assert!(
                writes <= checks / MARK_LAG_NS + 1,
                "{writes} writes of the mark for {checks} admissions over {checks} ns"
            );
            assert!(writes >= 1, "the mark was never lifted");
        }
    }
}

/// Runs `(clock step, start stripe, units)` checks on `l` (1000 per second, `burst`) and checks
/// one cell's ceiling over every run from an admission on: at most `burst + (A_end - A_start)
/// / T` units, `A` the latest reading of an admitted check so far.
fn one_cells_ceiling(
    l: &StripedLimiter<ManualClock>,
    burst: u32,
    ops: impl Iterator<Item = (i64, usize, u32)>,
) -> Result<(), TestCaseError> {
    one_cells_ceiling_within(l, burst, 0, ops)
}

/// [`one_cells_ceiling`] with `slack` ns added to every run's span.
fn one_cells_ceiling_within(
    l: &StripedLimiter<ManualClock>,
    burst: u32,
    slack: u64,
    ops: impl Iterator<Item = (i64, usize, u32)>,
) -> Result<(), TestCaseError> {
    let t = 1_000_000u64;
    let mut now = 5_000_000_000u64;
    let mut latest_admitted = 0u64;
    // For each admission so far: (A at that admission, units from it on).
    let mut runs: Vec<(u64, u64)> = Vec::new();
    for (step, start, n) in ops {
        now = now.saturating_add_signed(step);
        l.clock().set(Duration::from_nanos(now));
        if !l.check_n_from(start, n).is_allowed() {
            continue;
        }
        latest_admitted = latest_admitted.max(now);
        runs.push((latest_admitted, 0));
        for (a_start, units) in &mut runs {
            *units += u64::from(n);
            prop_assert!(
                within(
                    *units,
                    u64::from(burst),
                    t,
                    latest_admitted - *a_start + slack
                ),
                "{} units from A = {} to A = {}",
                units,
                a_start,
                latest_admitted
            );
        }
    }
    Ok(())
}

/// A check admitted by another stripe after its first refused it stamps its first stripe: a
/// later check from there with a clock behind goes on at that admission's time (a decision's
/// durations count from the time it was made at).
#[test]
fn an_admission_after_a_fallback_stamps_the_start_stripe() {
    // 10/s, burst 2 over 2 stripes: one unit each, a stripe interval of 200 ms. (Relaxed: by
    // default the admission at 10.1 s raises the mark, with the same decision below.)
    for relaxed in [true, false] {
        let l = gcra_in(Quota::per_second(10).with_burst(2), 2, relaxed);
        l.clock().set(Duration::from_secs(10));
        assert!(l.check_n_from(0, 1).is_allowed()); // stripe 0, TAT 10.2 s
        l.clock().set(Duration::from_millis(10_100));
        assert!(l.check_n_from(0, 1).is_allowed()); // stripe 0 refuses; stripe 1, TAT 10.3 s
        l.clock().set(Duration::from_secs(9));
        // Decided at 10.1 s: stripe 0 has room again at 10.2 s (at 10 s it would say 200 ms).
        let d = l.check_n_from(0, 1);
        assert!(!d.is_allowed());
        assert_eq!(
            d.retry_after(),
            Some(Duration::from_millis(100)),
            "relaxed {relaxed}"
        );
    }
}
