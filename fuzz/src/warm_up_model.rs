//! Warm-up limiters (Guava's `SmoothWarmingUp`): differential and invariant checks, no
//! reference model here (the algorithm's floating-point reference model and its property tests
//! live in `src/algorithm/warm_up.rs` and `tests/warm_up.rs`).
//!
//! One input drives, on a `ManualClock` that may also go back:
//! - one direct `Limiter::warm_up` per key (the reference for everything else),
//! - a `KeyedLimiter::<u8>::warm_up` exact map with no bound (never evicts),
//! - a bounded table (`max_keys(64)`) swept with `evict_idle()` after every operation,
//!
//! and checks that the never-evicting keyed limiter decides exactly like the per-key direct
//! limiters (checks, reservations, cancels), that the swept table does too while the clock has
//! never gone back (lossless eviction), and the invariants every decision must keep: `limit()`
//! is 1, `remaining()` at most 1, an admitted check has no delay, an admitted reservation waits
//! at most what it accepted, a denial's `retry_after` is positive, and nothing panics for any
//! configuration (invalid ones must be a `ConfigError`).

use std::time::Duration;

use arbitrary::Arbitrary;
use cellgate::clock::{Clock, ManualClock};
use cellgate::{Decision, KeyedLimiter, Limiter, Quota, Reservation};

/// One fuzz input.
#[derive(Arbitrary, Debug, Clone)]
pub struct Input {
    /// The stable interval, ns (0 is a configuration error).
    pub interval_ns: u32,
    /// The warm-up period, in stable intervals / 16 (0 is a configuration error).
    pub warm_up_sixteenths: u16,
    pub ops: Vec<WarmOp>,
}

/// One operation.
#[derive(Arbitrary, Debug, Clone, Copy)]
pub enum WarmOp {
    /// Move the clock forward by this many ns.
    Advance(u32),
    /// Move the clock back by this many ns.
    Back(u16),
    /// Move the clock far forward (this many seconds).
    Leap(u16),
    Check {
        key: u8,
        n: u8,
    },
    /// Reserve, accepting a wait of `wait` stable intervals / 4.
    Reserve {
        key: u8,
        n: u8,
        wait: u8,
    },
    /// Cancel the outstanding reservation `pick % count`.
    Cancel {
        pick: u8,
    },
}

/// What an input exercised.
#[derive(Debug, Default, Clone, Copy)]
pub struct Stats {
    pub invalid_config: u64,
    pub allowed: u64,
    pub denied: u64,
    pub delayed: u64,
    pub cancels: u64,
    pub evicted: u64,
}

const KEYS: u8 = 4;

/// The invariants of one warm-up decision.
fn sane(d: &Decision, what: &str) {
    assert_eq!(d.limit(), 1, "{what}: {d:?}");
    assert!(d.remaining() <= 1, "{what}: {d:?}");
    if !d.is_allowed() {
        assert_eq!(d.delay_ns(), 0, "{what}: {d:?}");
        if let Some(r) = d.retry_after_ns() {
            assert!(r > 0, "{what}: a denial that a zero wait would fix: {d:?}");
        }
    }
}

/// Replays `input`; panics on the first difference or broken invariant.
pub fn run(input: &Input) -> Stats {
    let mut stats = Stats::default();
    let interval = Duration::from_nanos(u64::from(input.interval_ns));
    let warm = interval.saturating_mul(u32::from(input.warm_up_sixteenths)) / 16;
    let quota = Quota::with_interval(interval);
    let clock = ManualClock::new();
    clock.set(Duration::from_secs(1));
    let direct: Vec<_> = (0..KEYS)
        .map(|_| Limiter::warm_up(quota, warm).clock(clock.clone()).build())
        .collect();
    let never = KeyedLimiter::<u8>::warm_up(quota, warm)
        .clock(clock.clone())
        .build();
    let table = KeyedLimiter::<u8>::warm_up(quota, warm)
        .clock(clock.clone())
        .max_keys(64)
        .build();
    // Every builder must agree on validity, and an invalid configuration is an error.
    let (direct, never, table) = match (never, table) {
        (Ok(n), Ok(t)) => (
            direct
                .into_iter()
                .map(|d| d.expect("valid for the keyed limiters, so for the direct one"))
                .collect::<Vec<_>>(),
            n,
            t,
        ),
        (Err(a), Err(b)) => {
            assert_eq!(a, b);
            assert!(direct.iter().all(|d| d.as_ref().err() == Some(&a)));
            stats.invalid_config += 1;
            return stats;
        }
        (a, b) => panic!(
            "the stores disagree on validity: {:?} vs {:?}",
            a.err(),
            b.err()
        ),
    };
    let mut monotone = true;
    // Outstanding reservations: (key, direct's, never's, table's if comparable).
    let mut held: Vec<(u8, Reservation, Reservation, Option<Reservation>)> = Vec::new();
    for op in &input.ops {
        let now = clock.now();
        match *op {
            WarmOp::Advance(ns) => clock.set_ns(now.saturating_add(u64::from(ns))),
            WarmOp::Leap(s) => clock.set_ns(now.saturating_add(u64::from(s) * 1_000_000_000)),
            WarmOp::Back(ns) => {
                monotone = false;
                clock.set_ns(now.saturating_sub(u64::from(ns)));
            }
            WarmOp::Check { key, n } => {
                let k = key % KEYS;
                let n = u32::from(n % 8);
                let want = direct[usize::from(k)].check_n(n);
                sane(&want, "check");
                assert_eq!(want.delay_ns(), 0, "a check never delays: {want:?}");
                assert_eq!(
                    never.check_n(&k, n),
                    want,
                    "never-evicting check_n({k}, {n})"
                );
                let t = table.check_n(&k, n);
                if monotone {
                    assert_eq!(t, want, "swept table check_n({k}, {n})");
                }
                if want.is_allowed() {
                    stats.allowed += 1;
                } else {
                    stats.denied += 1;
                }
            }
            WarmOp::Reserve { key, n, wait } => {
                let k = key % KEYS;
                let n = u32::from(n % 8);
                let max_wait = interval.saturating_mul(u32::from(wait)) / 4;
                let want = direct[usize::from(k)].reserve(n, max_wait);
                sane(&want.decision(), "reserve");
                if want.is_allowed() {
                    assert!(
                        want.delay() <= max_wait,
                        "waits past {max_wait:?}: {want:?}"
                    );
                    stats.delayed += u64::from(!want.delay().is_zero());
                }
                let got = never.reserve(&k, n, max_wait);
                assert_eq!(got.decision(), want.decision(), "never-evicting reserve");
                let t = table.reserve(&k, n, max_wait);
                if monotone {
                    assert_eq!(t.decision(), want.decision(), "swept table reserve");
                }
                if want.is_allowed() {
                    held.push((k, want, got, monotone.then_some(t)));
                }
            }
            WarmOp::Cancel { pick } => {
                if held.is_empty() {
                    continue;
                }
                let (k, d, n, t) = held.remove(usize::from(pick) % held.len());
                let want = direct[usize::from(k)].cancel(d);
                assert_eq!(never.cancel(&k, n), want, "never-evicting cancel on {k}");
                if let (true, Some(t)) = (monotone, t) {
                    assert_eq!(table.cancel(&k, t), want, "swept table cancel on {k}");
                }
                stats.cancels += u64::from(want);
            }
        }
        stats.evicted += table.evict_idle() as u64;
        if monotone {
            for k in 0..KEYS {
                let want = direct[usize::from(k)].peek();
                assert_eq!(never.peek(&k), want, "never-evicting peek({k})");
                assert_eq!(table.peek(&k), want, "swept table peek({k})");
            }
        }
    }
    stats
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seeds_replay() {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/corpus/seed_warm_up_model");
        let mut seen = 0;
        let mut total = Stats::default();
        for entry in std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{dir}: {e}")) {
            let bytes = std::fs::read(entry.unwrap().path()).unwrap();
            let input = Input::arbitrary_take_rest(arbitrary::Unstructured::new(&bytes))
                .expect("a seed that no longer decodes");
            let s = run(&input);
            total.allowed += s.allowed;
            total.denied += s.denied;
            total.delayed += s.delayed;
            total.cancels += s.cancels;
            seen += 1;
        }
        assert!(seen > 0, "no seeds in {dir}");
        assert!(
            total.allowed > 0 && total.denied > 0 && total.delayed > 0 && total.cancels > 0,
            "the seeds exercise every path: {total:?}"
        );
    }

    /// Seed picking (a maintenance tool): prints each input of `$CORPUS` with its size and
    /// what it exercised, for choosing a few small inputs that together cover every path.
    #[test]
    #[ignore = "maintenance tool, not a check"]
    fn pick_seeds() {
        let dir = std::env::var("CORPUS").expect("CORPUS=<a corpus directory>");
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            let bytes = std::fs::read(&path).unwrap();
            if let Ok(input) = Input::arbitrary_take_rest(arbitrary::Unstructured::new(&bytes)) {
                let s = run(&input);
                println!(
                    "{} {} {} {} {} {} {} {}",
                    bytes.len(),
                    s.invalid_config,
                    s.allowed,
                    s.denied,
                    s.delayed,
                    s.cancels,
                    s.evicted,
                    path.display()
                );
            }
        }
    }

    #[test]
    fn a_cold_limiter_spaces_its_first_permits() {
        let input = Input {
            interval_ns: 1_000_000,
            warm_up_sixteenths: 160,
            ops: vec![
                WarmOp::Reserve {
                    key: 0,
                    n: 1,
                    wait: 255,
                },
                WarmOp::Reserve {
                    key: 0,
                    n: 1,
                    wait: 255,
                },
                WarmOp::Check { key: 0, n: 1 },
                WarmOp::Cancel { pick: 1 },
                WarmOp::Advance(4_000_000),
                WarmOp::Check { key: 0, n: 1 },
            ],
        };
        let s = run(&input);
        assert_eq!((s.delayed, s.denied, s.cancels, s.allowed), (1, 1, 1, 1));
    }
}
