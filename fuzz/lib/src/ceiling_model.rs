//! A full store, floods of new keys and a clock that steps back (`WhenFull::EvictLight`, the
//! default, in every store): a key dropped to make room gains at most one unit per drop,
//! whatever the clock does afterwards, and no key gains credit from the clock going back.
//!
//! Differential: a `KeyedLimiter<u32>` with `max_keys(1..=4)` (growing table, fixed-capacity
//! table or exact map) against one that holds every key for ever (the exact map without a
//! bound, which never drops a key; the other targets check it against the models), both on
//! one `ManualClock`. Four tracked keys are checked one unit at a time; floods check new keys
//! once each (light keys themselves). A tracked key can be dropped at most once between two of
//! its admissions, and only by another key's insert or a sweep, so after every operation each
//! tracked key has admitted at most what the reference admitted plus the number of such
//! chances it had (`Tracked::chances`).

use std::time::Duration;

use arbitrary::Arbitrary;
use cellgate::clock::{DefaultClock, ManualClock};
use cellgate::{Denial, KeyedLimiter, KeyedLimiterBuilder, Quota};

/// One fuzz input: the algorithm, its limit and window, the store and its bound, operations.
#[derive(Arbitrary, Debug, Clone)]
pub struct Input {
    pub alg: Alg,
    /// The limit (GCRA: the burst, one per `window / limit`): `1 + limit % 16`.
    pub limit: u8,
    /// The window (GCRA: the period): `1 ms + window * 15 µs`, up to about a second, so the
    /// stores' sweeps (at most one per 10 ms of the clock) run between floods.
    pub window: u16,
    pub store: Store,
    /// `max_keys(1 + cap % 4)`.
    pub cap: u8,
    pub ops: Vec<CeilingOp>,
}

#[derive(Arbitrary, Debug, Clone, Copy)]
pub enum Alg {
    FixedWindow,
    SlidingWindow,
    Gcra,
}

#[derive(Arbitrary, Debug, Clone, Copy)]
pub enum Store {
    Grow,
    FixedCapacity,
    Exact,
}

#[derive(Arbitrary, Debug, Clone, Copy)]
pub enum CeilingOp {
    /// One unit of tracked key `key % 4`, on both limiters.
    Check { key: u8 },
    /// `1 + keys % 8` new keys, one unit each, on the capped limiter.
    Flood { keys: u8 },
    /// The clock to `(16 + windows % 16 + frac / 256) * window`: anywhere over sixteen windows,
    /// backwards included.
    Set { windows: u8, frac: u8 },
    /// `evict_idle()` on both.
    EvictIdle,
}

const TRACKED: usize = 4;

/// What one tracked key got, and its chances to be dropped.
#[derive(Debug, Default, Clone, Copy)]
struct Tracked {
    got: u64,
    want: u64,
    /// Operations that could drop the key: the first insert or sweep after each of its
    /// admissions in the capped limiter (once dropped, it is not held until it is admitted
    /// again).
    chances: u64,
    /// Admitted since its last chance.
    exposed: bool,
}

fn builder(alg: Alg, limit: u32, window: Duration) -> KeyedLimiterBuilder<u32, DefaultClock> {
    match alg {
        Alg::FixedWindow => KeyedLimiter::<u32>::fixed_window(limit, window),
        Alg::SlidingWindow => KeyedLimiter::<u32>::sliding_window(limit, window),
        Alg::Gcra => KeyedLimiter::<u32>::gcra(Quota::new(limit, window)),
    }
}

/// Replays `input`; panics when a tracked key admitted more than the bound.
pub fn run(input: &Input) {
    let limit = 1 + u32::from(input.limit % 16);
    let w = 1_000_000 + u64::from(input.window) * 15_000;
    let window = Duration::from_nanos(w);
    let cap = 1 + usize::from(input.cap % 4);
    let clock = ManualClock::new();
    let capped = builder(input.alg, limit, window)
        .clock(clock.clone())
        .max_keys(cap);
    let capped = match input.store {
        Store::Grow => capped,
        Store::FixedCapacity => capped.fixed_capacity(),
        Store::Exact => capped.exact_keys(),
    }
    .build()
    .expect("a valid configuration");
    let reference = builder(input.alg, limit, window)
        .clock(clock.clone())
        .exact_keys()
        .build()
        .expect("a valid configuration");
    let mut keys = [Tracked::default(); TRACKED];
    let mut next_new = TRACKED as u32;
    // Every operation but a check of key `checked` is a chance to drop the exposed keys.
    let chance = |keys: &mut [Tracked; TRACKED], checked: Option<usize>| {
        for (i, k) in keys.iter_mut().enumerate() {
            if k.exposed && Some(i) != checked {
                k.chances += 1;
                k.exposed = false;
            }
        }
    };
    for (i, op) in input.ops.iter().enumerate() {
        match *op {
            CeilingOp::Check { key } => {
                let k = usize::from(key) % TRACKED;
                chance(&mut keys, Some(k));
                let id = k as u32;
                let d = capped.check(&id);
                let t = &mut keys[k];
                // A new key refused at the ceiling was not admitted: the request is not made
                // to the reference either (admitted there, with the clock going back, it would
                // count in a later window and make the reference the stricter one afterwards).
                if d.denial() != Some(Denial::StoreFull) {
                    t.got += u64::from(d.is_allowed());
                    t.want += u64::from(reference.check(&id).is_allowed());
                    t.exposed |= d.is_allowed();
                }
            }
            CeilingOp::Flood { keys: n } => {
                chance(&mut keys, None);
                for _ in 0..=n % 8 {
                    capped.check(&next_new);
                    next_new += 1;
                }
            }
            CeilingOp::Set { windows, frac } => {
                let at = u128::from(16 + u64::from(windows % 16)) * u128::from(w)
                    + u128::from(w) * u128::from(frac) / 256;
                clock.set(Duration::from_nanos(at as u64));
            }
            CeilingOp::EvictIdle => {
                chance(&mut keys, None);
                capped.evict_idle();
                reference.evict_idle();
            }
        }
        for (k, t) in keys.iter().enumerate() {
            assert!(
                t.got <= t.want + t.chances,
                "key {k} admitted {} units, the reference {}, with {} chances to be dropped, \
                 after op {i} of {input:?}",
                t.got,
                t.want,
                t.chances
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// xorshift64*: fixed seeds, so a failure replays.
    struct Rng(u64);

    impl Rng {
        fn byte(&mut self) -> u8 {
            self.0 ^= self.0 >> 12;
            self.0 ^= self.0 << 25;
            self.0 ^= self.0 >> 27;
            (self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 56) as u8
        }
    }

    /// The target's invariant on a few thousand random sequences, without a fuzzer: forty
    /// operations each, mostly checks and clock moves, at most two floods (so that a key's
    /// chances to be dropped stay few and a whole budget regained shows).
    #[test]
    fn random_sequences_keep_the_bound() {
        let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
        for _ in 0..6000 {
            let mut floods = 0;
            let ops = (0..40)
                .map(|_| match rng.byte() % 8 {
                    0 if floods < 2 => {
                        floods += 1;
                        CeilingOp::Flood { keys: rng.byte() }
                    }
                    0..=2 => CeilingOp::Set {
                        windows: rng.byte() % 6,
                        frac: rng.byte(),
                    },
                    3 if rng.byte() < 16 => CeilingOp::EvictIdle,
                    _ => CeilingOp::Check { key: 0 },
                })
                .collect();
            let input = Input {
                alg: [Alg::FixedWindow, Alg::SlidingWindow, Alg::Gcra][usize::from(rng.byte() % 3)],
                limit: 7,
                window: rng.byte().into(),
                store: [Store::Grow, Store::FixedCapacity, Store::Exact]
                    [usize::from(rng.byte() % 3)],
                cap: rng.byte(),
                ops,
            };
            run(&input);
        }
    }
}
