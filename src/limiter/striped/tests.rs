//! The striped limiter's unit tests and property tests.

use super::*;
use crate::clock::ManualClock;
use proptest::prelude::*;
use std::time::Duration;

fn gcra(quota: Quota, stripes: usize) -> StripedLimiter<ManualClock> {
    StripedLimiter::gcra(quota)
        .stripes(stripes)
        .clock(ManualClock::new())
        .build()
        .unwrap()
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
        burst in 1u32..20,
        stripes in 1usize..8,
        ops in proptest::collection::vec((0u64..3_000_000, 0usize..16, 1u32..4), 1..200),
    ) {
        let stripes = stripes.min(burst as usize);
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
