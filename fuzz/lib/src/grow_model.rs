//! The growing table (the keyed builder's default store) against the exact store, differentially,
//! each in its two forms: integer keys (`u16` here, whose fingerprints are a bijection of the
//! keys) and the same keys wrapped in a type that is not an integer (`Word`: the default store
//! takes its aHash fingerprint, the exact store keeps it beside the slots). Every decision is the
//! same in all four; the two exact stores hold the same keys.
//!
//! The exact store (`exact_keys()`: the same growing table with the keys kept beside the slots,
//! which drops keys only by sweeps and at a ceiling, never on inserts) is checked against the
//! reference models by the other targets; this target replays the same operations on both
//! stores of a keyed limiter and requires the same decision from each, while enough keys come
//! and go that the default table grows, reclaims idle keys on inserts, and shrinks under sweeps.
//! Its reclaiming is invisible to callers by construction (only idle keys go, and an idle key
//! decides as a fresh one at the same time or later), which is what this checks: every decision
//! equal, the default table never holding more keys than the exact store, and exactly the same
//! keys after a sweep.
//!
//! The clock only moves forward here: a check at a time behind a sweep is decided against the
//! sweep floor (see the README), which the two stores raise at different moments (the exact
//! store only at `evict_idle`, the default table also when an insert reclaims); the other targets
//! check clocks that go backwards on the stores they model. No ceiling: at a ceiling the
//! default table reclaims where the exact store refuses, by design.

use std::time::Duration;

use arbitrary::Arbitrary;
use cellgate::clock::ManualClock;
use cellgate::{Decision, KeyedLimiter, KeyedLimiterBuilder, Quota};

/// The algorithm and its parameters (small, so that keys go idle within a run).
#[derive(Arbitrary, Debug, Clone, Copy)]
pub enum Algorithm {
    /// GCRA: `count` per `period_ms`, burst `burst`.
    Gcra { count: u8, period_ms: u8, burst: u8 },
    /// Fixed window: `limit` per `window_ms`.
    FixedWindow { limit: u8, window_ms: u8 },
    /// Sliding window: `limit` per `window_ms`.
    SlidingWindow { limit: u8, window_ms: u8 },
    /// A stock of `units` per key.
    Stock { units: u8 },
}

/// One operation.
#[derive(Arbitrary, Debug, Clone, Copy)]
pub enum Op {
    /// `check_n(key, n)` on both stores.
    Check { key: u16, n: u8 },
    /// One check of each of `count + 1` consecutive keys from `first` (many new keys: grows).
    Many { first: u16, count: u8 },
    /// `peek(key)`.
    Peek { key: u16 },
    /// `refund(key, n)`.
    Refund { key: u16, n: u8 },
    /// The clock moves forward by `ms` milliseconds.
    Advance { ms: u16 },
    /// `evict_idle()` on both stores.
    EvictIdle,
}

/// A run: the algorithm and the operations.
#[derive(Arbitrary, Debug, Clone)]
pub struct Input {
    pub algorithm: Algorithm,
    pub ops: Vec<Op>,
}

crate::counters! {
    /// What an input exercised.
    pub struct Stats {
        pub invalid_config: u64,
        pub checks: u64,
        pub allowed: u64,
        pub denied: u64,
        pub reclaimed_on_insert: u64,
        pub evicted: u64,
        pub refunds: u64,
    }
}

/// A `u16` key that is not an integer type: the exact store keeps it in its key column.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct Word(u16);

fn builder<K: std::hash::Hash + Eq + 'static>(
    a: Algorithm,
) -> KeyedLimiterBuilder<K, cellgate::clock::DefaultClock> {
    let ms = |v: u8| Duration::from_millis(u64::from(v.max(1)));
    match a {
        Algorithm::Gcra {
            count,
            period_ms,
            burst,
        } => KeyedLimiter::gcra(
            Quota::new(u32::from(count.max(1)), ms(period_ms)).with_burst(u32::from(burst.max(1))),
        ),
        Algorithm::FixedWindow { limit, window_ms } => {
            KeyedLimiter::fixed_window(u32::from(limit.max(1)), ms(window_ms))
        }
        Algorithm::SlidingWindow { limit, window_ms } => {
            KeyedLimiter::sliding_window(u32::from(limit.max(1)), ms(window_ms))
        }
        Algorithm::Stock { units } => KeyedLimiter::stock(u32::from(units.max(1))),
    }
}

fn same(grow: Decision, map: Decision, column: Decision, what: &dyn Fn() -> String) {
    assert_eq!(grow, map, "growing table vs exact store: {}", what());
    assert_eq!(map, column, "integer keys vs the key column: {}", what());
}

/// Replays `input`; panics on the first difference.
pub fn run(input: &Input) -> Stats {
    let mut stats = Stats {
        inputs: 1,
        ..Stats::default()
    };
    let clock = ManualClock::new();
    let grow = builder::<u16>(input.algorithm).clock(clock.clone()).build();
    let map = builder::<u16>(input.algorithm)
        .clock(clock.clone())
        .exact_keys()
        .build();
    let column = builder::<Word>(input.algorithm)
        .clock(clock.clone())
        .exact_keys()
        .build();
    let hashed = builder::<Word>(input.algorithm)
        .clock(clock.clone())
        .build();
    let (grow, map, column, hashed) = match (grow, map, column, hashed) {
        (Ok(g), Ok(m), Ok(c), Ok(h)) => (g, m, c, h),
        (g, m, _, _) => {
            assert_eq!(g.err(), m.err(), "the two builds disagree");
            stats.invalid_config += 1;
            return stats;
        }
    };
    for (i, op) in input.ops.iter().enumerate() {
        let ctx = || format!("op #{i} {op:?} of {:?}", input.algorithm);
        match *op {
            Op::Check { key, n } => {
                let n = u32::from(n % 4);
                let (g, m) = (grow.check_n(&key, n), map.check_n(&key, n));
                same(g, m, column.check_n(&Word(key), n), &ctx);
                assert_eq!(g, hashed.check_n(&Word(key), n), "hashed: {}", ctx());
                stats.checks += 1;
                stats.allowed += u64::from(m.is_allowed());
                stats.denied += u64::from(!m.is_allowed());
            }
            Op::Many { first, count } => {
                for key in (0..=u16::from(count)).map(|d| first.wrapping_add(d)) {
                    let before = grow.len();
                    let (g, m) = (grow.check(&key), map.check(&key));
                    let c = column.check(&Word(key));
                    same(g, m, c, &|| format!("{} key {key}", ctx()));
                    assert_eq!(g, hashed.check(&Word(key)), "hashed: {} key {key}", ctx());
                    stats.checks += 1;
                    stats.allowed += u64::from(m.is_allowed());
                    stats.denied += u64::from(!m.is_allowed());
                    stats.reclaimed_on_insert += u64::from(grow.len() < before);
                }
            }
            Op::Peek { key } => {
                let g = grow.peek(&key);
                same(g, map.peek(&key), column.peek(&Word(key)), &ctx);
                assert_eq!(g, hashed.peek(&Word(key)), "hashed: {}", ctx());
            }
            Op::Refund { key, n } => {
                let n = u32::from(n % 4);
                let (g, m) = (grow.refund(&key, n), map.refund(&key, n));
                // A key the growing table reclaimed was idle: nothing to give back in the map
                // either (a refund never raises a key beyond a fresh one's budget).
                assert_eq!(g, m, "refund: {}", ctx());
                assert_eq!(
                    m,
                    column.refund(&Word(key), n),
                    "refund (column): {}",
                    ctx()
                );
                assert_eq!(
                    g,
                    hashed.refund(&Word(key), n),
                    "refund (hashed): {}",
                    ctx()
                );
                stats.refunds += u64::from(m);
            }
            Op::Advance { ms } => clock.advance(Duration::from_millis(u64::from(ms))),
            Op::EvictIdle => {
                let (_, m) = (grow.evict_idle(), map.evict_idle());
                assert_eq!(m, column.evict_idle(), "swept (column): {}", ctx());
                hashed.evict_idle();
                assert_eq!(
                    grow.len(),
                    hashed.len(),
                    "held after a sweep (hashed): {}",
                    ctx()
                );
                stats.evicted += m as u64;
                // Both now hold exactly the keys that are not idle.
                assert_eq!(grow.len(), map.len(), "held after a sweep: {}", ctx());
            }
        }
        assert_eq!(map.len(), column.len(), "held (column): {}", ctx());
        assert!(
            grow.len() <= map.len(),
            "the growing table holds {} keys, the exact store {}: {}",
            grow.len(),
            map.len(),
            ctx()
        );
    }
    stats
}

#[cfg(test)]
mod tests {
    use super::*;

    crate::corpus_tests!("grow_model", run);

    /// The driver itself: thousands of keys through a small GCRA, time moving on, sweeps.
    #[test]
    fn many_keys_grow_reclaim_and_shrink() {
        let mut ops = Vec::new();
        for round in 0..20u16 {
            ops.push(Op::Many {
                first: round * 200,
                count: 255,
            });
            ops.push(Op::Check { key: 7, n: 1 });
            ops.push(Op::Advance { ms: 1_500 });
            if round % 5 == 4 {
                ops.push(Op::EvictIdle);
            }
        }
        let stats = run(&Input {
            algorithm: Algorithm::Gcra {
                count: 1,
                period_ms: 10,
                burst: 2,
            },
            ops,
        });
        assert!(stats.checks > 5_000, "{stats:?}");
        assert!(stats.reclaimed_on_insert > 0, "{stats:?}");
    }
}
