//! Warm-up limiters (Guava's `SmoothWarmingUp`, cold factor 3): the real limiters against an
//! exact integer reference model, plus the differential and invariant checks this target had
//! before the model.
//!
//! # The model
//!
//! Written from the module docs of `src/algorithm/warm_up/mod.rs` and the `Limiter::warm_up` docs
//! (not from the code). Stable interval `I = period / count` (integer ns), warm-up period `W`
//! (ns), `M = W / I` stored permits at most. The state is `(next_free, m)`: `next_free` in whole
//! µs, `m` the permits *missing* from a full store in fixed point with `F = 16 - bits(ceil(M))`
//! fractional bits; a fresh key is `(0, 0)` (cold). A request for `n` at `now`, accepting a
//! wait of `max_wait` (0 for a check):
//!
//! ```text
//! resync:   if now > next_free: m -= ceil((now - next_free) * 2^F / I) (not below 0),
//!           base = now; else base = next_free        (accrual rounds up: a colder key)
//! wait = base - now; denied iff wait > max_wait (retry_after = wait - max_wait)
//! cost(m, n) = n*I + P(m) - P(m + n*2^F),  P(x) = max(0, W*2^F - 2*I*x)^2 / (2W * 4^F)
//! admitted (n > 0): next_free = ceil((base + cost') / 1000) µs, where cost' is the crate's
//!           integer cost, documented as "rounded up, by less than 5 ns":
//!           cost' in [ceil(cost), ceil(cost) + 4];  m = min(floor(M * 2^F), m + n*2^F)
//! horizon:  a next_free past 2^48 - 1 µs is denied with no retry_after; so is a request denied
//!           by its wait whose admission later would pass it
//! limit = 1; remaining = 1 iff a one-unit check at now would be admitted after the decision
//! delay = wait (admitted); reset_after = (next_free - now) + ceil(m * I / 2^F) (saturating)
//! idle: next_free <= now and the resync leaves m = 0; a key swept at s comes back as
//!       (floor(s / 1000) µs, 0)
//! ```
//!
//! Everything is exact integer arithmetic (`u128`, and a 256-bit product for `P`'s squares).
//! The one freedom the docs leave is the cost's sub-5-ns rounding, which moves `next_free` by
//! one µs when the exact end lies within 4 ns below a µs boundary. There the model lists both
//! candidates, accepts a decision that matches either exactly, and continues from the one the
//! decision shows (an admission's `reset_after` tells them apart: they differ by 1000 ns). In
//! every other case the comparison is exact, field by field. (`Stats::rounding_choices` counts
//! how often a decision had two candidates.) Configurations with `W >= 2^62` ns only get the
//! differential checks: there `reset_after` may saturate and could no longer tell the two
//! candidates apart (`Stats::model_skipped`).
//!
//! # The subjects
//!
//! One input drives, on a `ManualClock` that may also go back:
//! - one direct `Limiter::warm_up` per key,
//! - a `KeyedLimiter::<u8>::warm_up` with no bound (never evicts),
//! - a bounded table (`max_keys(64)`) and a bounded exact map (`max_keys(64).exact_keys()`),
//!   both swept with `evict_idle()` after every operation,
//!
//! and compares every decision of each (`check_n`, `peek`, `peek_n`, `reserve`, `cancel`; a
//! peek of every key after every operation) with the model, the keyed stores with a model of
//! the store (a key is held once admitted; a sweep drops idle keys and raises the sweep floor; a
//! key not held starts from the swept state of the floor), including `len()`, `evict_idle()`'s
//! count and `evicted()`. Cancels: nothing unless the reservation holds units and the key is
//! held (keyed) and not idle; if the key still holds the word the reservation wrote, it goes
//! back to the word before it, exactly; otherwise nothing (only the last one can be undone).
//!
//! Differential checks on top: the never-evicting keyed limiter decides exactly like the
//! per-key direct limiters, the swept stores do too while the clock has never gone back
//! (lossless eviction), and the invariants of every decision: `limit()` is 1, `remaining()` at
//! most 1, a check has no delay, a reservation waits at most what it accepted, a denial's
//! `retry_after` is positive, and an invalid configuration is the same `ConfigError` from every
//! builder.

use std::collections::BTreeMap;
use std::fmt::Debug;
use std::time::Duration;

use arbitrary::Arbitrary;
use cellgate::clock::{Clock, ManualClock};
use cellgate::{ConfigError, Decision, KeyedLimiter, Limiter, Quota, Reservation};

use crate::common::{Expect, Observe, Seen, U64};

/// The last representable `next_free`, µs (module docs: a 48-bit field).
pub const MAX_NEXT_FREE_US: u128 = (1 << 48) - 1;
/// The most stored permits a configuration may ask for (`cellgate::MAX_WARM_UP_PERMITS`).
pub const MAX_PERMITS: u128 = 65_535;
/// Warm-up periods from here on get only the differential checks (see the module docs).
pub const MODEL_MAX_WARM_UP_NS: u128 = 1 << 62;

// ---------------------------------------------------------------------------------------------
// Exact arithmetic
// ---------------------------------------------------------------------------------------------

/// `(floor(a * b / q), a * b % q == 0)` for any `a`, `b` and `0 < q < 2^126`, exactly (the
/// product may need 256 bits; the quotient must fit `u128`).
pub fn mul_div(a: u128, b: u128, q: u128) -> (u128, bool) {
    assert!(q > 0 && q < 1 << 126, "mul_div: divisor out of range");
    if let Some(p) = a.checked_mul(b) {
        return (p / q, p % q == 0);
    }
    const LOW: u128 = u64::MAX as u128;
    // The product in 64-bit limbs, least significant first.
    let mut limbs = [0u64; 5];
    let mut add_at = |pos: usize, v: u128| {
        let mut carry = v;
        let mut i = pos;
        while carry != 0 {
            let s = u128::from(limbs[i]) + (carry & LOW);
            limbs[i] = s as u64;
            carry = (carry >> 64) + (s >> 64);
            i += 1;
        }
    };
    let (a1, a0, b1, b0) = (a >> 64, a & LOW, b >> 64, b & LOW);
    add_at(0, a0 * b0);
    add_at(1, a0 * b1);
    add_at(1, a1 * b0);
    add_at(2, a1 * b1);
    // Long division, one bit at a time.
    let (mut quot, mut rem) = (0u128, 0u128);
    for bit in (0..256).rev() {
        let b = u128::from((limbs[bit / 64] >> (bit % 64)) & 1);
        rem = (rem << 1) | b;
        assert!(quot >> 127 == 0, "mul_div: quotient past u128");
        quot <<= 1;
        if rem >= q {
            rem -= q;
            quot |= 1;
        }
    }
    (quot, rem == 0)
}

/// The number of bits of `x` (0 for 0), by counting.
fn bits(x: u128) -> u32 {
    let mut b = 0;
    while b < 128 && (1u128 << b) <= x {
        b += 1;
    }
    b
}

// ---------------------------------------------------------------------------------------------
// The model
// ---------------------------------------------------------------------------------------------

/// A validated warm-up configuration.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WarmModel {
    /// `I`, ns.
    pub interval: u128,
    /// `W`, ns.
    pub warm_up: u128,
    /// `F`.
    pub frac: u32,
    /// `floor(M * 2^F)`: `m` with no permit stored.
    pub max_missing: u128,
}

/// A key's state: `next_free` (whole µs since the clock's origin) and the missing permits
/// (`2^-F` units).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct St {
    pub next_us: u128,
    pub missing: u128,
}

/// The state of a key never seen: a full store (cold) at the origin.
pub const FRESH: St = St {
    next_us: 0,
    missing: 0,
};

/// One decision the docs allow, and the state it leaves (`None`: nothing written).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Outcome {
    pub expect: Expect,
    pub delay: u128,
    pub write: Option<St>,
}

/// Which configurations are valid, and the exact error of an invalid one: the stable quota's
/// checks first (as `Quota`'s own: count, period, period past `u64::MAX` ns, an interval under
/// 1 ns), then the warm-up period's (zero, past `u64::MAX` ns, more than [`MAX_PERMITS`]
/// stored permits, counted as `ceil(W / I)`).
pub fn validate(count: u32, period: Duration, warm_up: Duration) -> Result<WarmModel, ConfigError> {
    if count == 0 {
        return Err(ConfigError::Zero { field: "count" });
    }
    if period.is_zero() {
        return Err(ConfigError::Zero { field: "period" });
    }
    if period.as_nanos() > U64 {
        return Err(ConfigError::PeriodTooLong { period });
    }
    let interval = period.as_nanos() / u128::from(count);
    if interval == 0 {
        return Err(ConfigError::RateTooFast { count, period });
    }
    if warm_up.is_zero() {
        return Err(ConfigError::Zero { field: "warm_up" });
    }
    let w = warm_up.as_nanos();
    if w > U64 {
        return Err(ConfigError::PeriodTooLong { period: warm_up });
    }
    let permits = w.div_ceil(interval);
    if permits > MAX_PERMITS {
        return Err(ConfigError::WarmUpTooLong {
            permits: permits as u64,
            max: MAX_PERMITS as u64,
        });
    }
    let frac = 16 - bits(permits);
    Ok(WarmModel {
        interval,
        warm_up: w,
        frac,
        max_missing: (w << frac) / interval,
    })
}

impl WarmModel {
    /// `(base, missing)` after idling from the state's `next_free` to `now`.
    pub fn resync(&self, st: St, now: u64) -> (u128, u128) {
        let (next_free, now) = (st.next_us * 1_000, u128::from(now));
        if now <= next_free {
            return (next_free, st.missing);
        }
        let gained = ((now - next_free) << self.frac).div_ceil(self.interval);
        (now, st.missing.saturating_sub(gained))
    }

    /// Whether the state decides like the fresh one at `now` and later.
    pub fn is_idle(&self, st: St, now: u64) -> bool {
        st.next_us * 1_000 <= u128::from(now) && self.resync(st, now).1 == 0
    }

    /// The state a key not held starts from after a sweep at `swept`.
    pub fn swept(&self, swept: u64) -> St {
        St {
            next_us: (u128::from(swept) / 1_000).min(MAX_NEXT_FREE_US),
            missing: 0,
        }
    }

    /// `W * 2^F - 2 * I * x`, not below 0: `P(x) = excess(x)^2 / (2W * 4^F)`.
    fn excess(&self, x: u128) -> u128 {
        (self.warm_up << self.frac).saturating_sub(2 * self.interval * x)
    }

    /// `ceil(cost(m, n))`, ns: `n * I + ceil(P(m) - P(m + n))`.
    pub fn cost_up(&self, missing: u128, n: u32) -> u128 {
        let (d0, d1) = (
            self.excess(missing),
            self.excess(missing + (u128::from(n) << self.frac)),
        );
        // P(m) - P(m') = (d0 - d1)(d0 + d1) / (2W * 4^F); d0 >= d1.
        let q = (2 * self.warm_up) << (2 * self.frac);
        let (area, exact) = mul_div(d0 - d1, d0 + d1, q);
        u128::from(n) * self.interval + area + u128::from(!exact)
    }

    /// The `next_free` values (µs) the docs allow after admitting `n >= 1` at `base` with
    /// `missing`: the integer cost is `ceil(cost)` up to `ceil(cost) + 4`, then rounded up to a
    /// µs. One value, or two one µs apart.
    pub fn next_candidates(&self, base: u128, missing: u128, n: u32) -> Vec<u128> {
        if self.excess(missing) == 0 {
            // "P is zero from m = M / 2 on, so permits past the empty store cost exactly I":
            // no area, nothing to round.
            return vec![(base + u128::from(n) * self.interval).div_ceil(1_000)];
        }
        let c = self.cost_up(missing, n);
        let lo = (base + c).div_ceil(1_000);
        let hi = (base + c + 4).div_ceil(1_000);
        if lo == hi {
            vec![lo]
        } else {
            vec![lo, hi]
        }
    }

    /// `ceil(missing * I / 2^F)`: the time to accrue the missing permits.
    pub fn refill(&self, missing: u128) -> u128 {
        (missing * self.interval).div_ceil(1 << self.frac)
    }

    /// Every decision the docs allow for `n` units at `now` accepting `max_wait` ns, on `st`.
    pub fn outcomes(&self, st: St, now: u64, n: u32, max_wait: u64) -> Vec<Outcome> {
        let (base, missing) = self.resync(st, now);
        let now128 = u128::from(now);
        let wait = base - now128;
        let reset = wait + self.refill(missing);
        let fits = |next_us: u128| next_us <= MAX_NEXT_FREE_US;
        let decision = |allowed, remaining: bool, retry, reset| Expect {
            allowed,
            limit: 1,
            remaining: u128::from(remaining),
            retry_ns: retry,
            reset_ns: reset,
        };
        // `remaining` without a write: a one-unit check now fits iff nothing is ahead of now
        // and its admission stays within the horizon.
        let remaining_now = || -> Vec<bool> {
            if base > now128 {
                return vec![false];
            }
            self.next_candidates(base, missing, 1)
                .into_iter()
                .map(fits)
                .collect()
        };
        let mut out = Vec::new();
        if wait > u128::from(max_wait) {
            let retry = wait - u128::from(max_wait);
            // Later nothing accrues before `base`, so the request costs what it costs now.
            let later_fits: Vec<bool> = if n == 0 {
                vec![true]
            } else {
                self.next_candidates(base, missing, n)
                    .into_iter()
                    .map(fits)
                    .collect()
            };
            for f in later_fits {
                out.push(Outcome {
                    expect: decision(false, false, f.then_some(retry), reset),
                    delay: 0,
                    write: None,
                });
            }
        } else if n == 0 {
            for r in remaining_now() {
                out.push(Outcome {
                    expect: decision(true, r, None, reset),
                    delay: wait,
                    write: None,
                });
            }
        } else {
            for next_us in self.next_candidates(base, missing, n) {
                if fits(next_us) {
                    let after = (missing + (u128::from(n) << self.frac)).min(self.max_missing);
                    // `next_us * 1000 >= base + cost > now`: no check fits now.
                    let reset = next_us * 1_000 - now128 + self.refill(after);
                    out.push(Outcome {
                        expect: decision(true, false, None, reset),
                        delay: wait,
                        write: Some(St {
                            next_us,
                            missing: after,
                        }),
                    });
                } else {
                    for r in remaining_now() {
                        out.push(Outcome {
                            expect: decision(false, r, None, reset),
                            delay: 0,
                            write: None,
                        });
                    }
                }
            }
        }
        out.dedup();
        out
    }
}

/// The outcome among `outs` that `got` shows; panics if none does (or, a model limitation, if
/// two that write different states do).
pub fn resolve(outs: &[Outcome], got: &Decision, ctx: &dyn Fn() -> String) -> Outcome {
    let seen = Seen::of(got);
    let matching: Vec<&Outcome> = outs
        .iter()
        .filter(|o| o.expect.seen() == seen && o.delay == u128::from(got.delay_ns()))
        .collect();
    match matching.as_slice() {
        [] => panic!(
            "{}: got {seen:?} with delay {} ns, the model allows {outs:#?}",
            ctx(),
            got.delay_ns()
        ),
        [one, rest @ ..] => {
            assert!(
                rest.iter().all(|o| o.write == one.write),
                "{}: the model cannot tell {outs:?} apart",
                ctx()
            );
            **one
        }
    }
}

/// A store of keys as the model sees it: a direct limiter per key or a keyed limiter.
#[derive(Debug, Default)]
pub struct Store {
    pub held: BTreeMap<u8, St>,
    /// The sweep floor: the latest sweep's time (0: none).
    pub floor: u64,
    pub evicted: u64,
}

impl Store {
    /// The state `k` decides from.
    pub fn state(&self, m: &WarmModel, k: u8) -> St {
        match self.held.get(&k) {
            Some(st) => *st,
            None if self.floor == 0 => FRESH,
            None => m.swept(self.floor),
        }
    }

    /// Checks `got`, the decision on `n` units of `k` at `now` accepting `max_wait`, and applies
    /// it. Returns the state before and after, and whether the model had two candidates.
    #[allow(clippy::too_many_arguments)]
    pub fn decide(
        &mut self,
        m: &WarmModel,
        k: u8,
        now: u64,
        n: u32,
        max_wait: u64,
        got: &Decision,
        ctx: &dyn Fn() -> String,
    ) -> (St, St, bool) {
        let before = self.state(m, k);
        let outs = m.outcomes(before, now, n, max_wait);
        let o = resolve(&outs, got, &|| format!("{}, state {before:?}", ctx()));
        if let Some(w) = o.write {
            self.held.insert(k, w);
        }
        (before, o.write.unwrap_or(before), outs.len() > 1)
    }

    /// `cancel` of a reservation on `k` that moved it from `before` to `after`.
    pub fn cancel(&mut self, m: &WarmModel, k: u8, now: u64, holds: bool, r: (St, St)) -> bool {
        let Some(st) = self.held.get_mut(&k) else {
            return false;
        };
        if !holds || m.is_idle(*st, now) || *st != r.1 {
            return false;
        }
        *st = r.0;
        true
    }

    /// `evict_idle()` at `now`: returns the count.
    pub fn evict(&mut self, m: &WarmModel, now: u64) -> usize {
        self.floor = self.floor.max(now);
        let before = self.held.len();
        self.held.retain(|_, st| !m.is_idle(*st, now));
        let gone = before - self.held.len();
        self.evicted += gone as u64;
        gone
    }
}

// ---------------------------------------------------------------------------------------------
// Input
// ---------------------------------------------------------------------------------------------

/// One fuzz input.
#[derive(Arbitrary, Debug, Clone)]
pub struct Input {
    pub rate: RateSel,
    pub warm_up: WarmSel,
    pub ops: Vec<WarmOp>,
}

/// The stable rate: a quota, possibly invalid.
#[derive(Arbitrary, Debug, Clone, Copy)]
pub enum RateSel {
    /// `Quota::with_interval(ns)` (0: `Zero { field: "period" }`).
    Interval(u32),
    /// `1 + x` whole µs: costs land on µs boundaries, where the rounding is decided.
    Micros(u16),
    /// `Quota::new(count, period)`: a floored interval, `Zero { field: "count" }`, `RateTooFast`.
    Counted { count: u8, period: u32 },
    /// `secs` s + `nanos % 1e9` ns (may exceed `u64::MAX` ns: `PeriodTooLong`).
    Long { secs: u64, nanos: u32 },
}

impl RateSel {
    pub fn quota(self) -> (u32, Duration) {
        match self {
            RateSel::Interval(ns) => (1, Duration::from_nanos(u64::from(ns))),
            RateSel::Micros(x) => (1, Duration::from_micros(1 + u64::from(x))),
            RateSel::Counted { count, period } => {
                (u32::from(count), Duration::from_nanos(u64::from(period)))
            }
            RateSel::Long { secs, nanos } => (1, long(secs, nanos)),
        }
    }
}

/// `secs` s + `nanos % 1e9` ns.
fn long(secs: u64, nanos: u32) -> Duration {
    Duration::new(secs, nanos % 1_000_000_000)
}

/// The warm-up period, relative to the stable interval `I` (as far as it is valid).
#[derive(Arbitrary, Debug, Clone, Copy)]
pub enum WarmSel {
    /// `I * x / 16` (0: `Zero { field: "warm_up" }`).
    Sixteenths(u16),
    /// `(whole % 65_540) * I + part % I` ns: both sides of `MAX_PERMITS`, every `F`.
    Permits {
        whole: u32,
        part: u32,
    },
    Ns(u64),
    /// `secs` s + `nanos % 1e9` ns (may exceed `u64::MAX` ns).
    Long {
        secs: u64,
        nanos: u32,
    },
}

impl WarmSel {
    pub fn get(self, interval: u128) -> Duration {
        let ns = |v: u128| {
            let secs = u64::try_from(v / 1_000_000_000).unwrap_or(u64::MAX);
            Duration::new(secs, (v % 1_000_000_000) as u32)
        };
        match self {
            WarmSel::Sixteenths(x) => ns(interval * u128::from(x) / 16),
            WarmSel::Permits { whole, part } => {
                ns(u128::from(whole % 65_540) * interval + u128::from(part) % interval.max(1))
            }
            WarmSel::Ns(x) => Duration::from_nanos(x),
            WarmSel::Long { secs, nanos } => long(secs, nanos),
        }
    }
}

/// Units of a request.
#[derive(Arbitrary, Debug, Clone, Copy)]
pub enum Units {
    /// `0..8`.
    Small(u8),
    /// Any count (large ones pass the horizon).
    Any(u32),
}

impl Units {
    pub fn get(self) -> u32 {
        match self {
            Units::Small(n) => u32::from(n % 8),
            Units::Any(n) => n,
        }
    }
}

/// The wait a reservation accepts.
#[derive(Arbitrary, Debug, Clone, Copy)]
pub enum Wait {
    /// `x / 4` stable intervals.
    Quarters(u8),
    Ns(u64),
    /// `Duration::MAX` (`acquire`).
    Forever,
}

/// One operation.
#[derive(Arbitrary, Debug, Clone, Copy)]
pub enum WarmOp {
    /// Move the clock forward by this many ns.
    Advance(u32),
    /// Forward by `k % 8` stable intervals plus `frac / 256` of one.
    Intervals {
        k: u8,
        frac: u8,
    },
    /// Move the clock back by this many ns.
    Back(u16),
    /// Move the clock back by up to `u32::MAX` ns.
    Rewind(u32),
    /// Move the clock far forward (this many seconds).
    Leap(u16),
    /// Set the clock to the horizon (`(2^48 - 1)` µs) `+ 2 ms - x % 4 ms`.
    Horizon(u32),
    /// `check_n(n)`, or `check()` for `n = 1`.
    Check {
        key: u8,
        n: Units,
    },
    /// `peek_n(n)` (every key's `peek()` is compared after every operation).
    Peek {
        key: u8,
        n: Units,
    },
    Reserve {
        key: u8,
        n: Units,
        wait: Wait,
    },
    /// Cancel the outstanding reservation `pick % count`.
    Cancel {
        pick: u8,
    },
}

crate::counters! {
    /// What an input exercised.
    pub struct Stats {
        pub inputs: u64,
        pub invalid_config: u64,
        pub model_skipped: u64,
        pub allowed: u64,
        /// Admitted with a wait (a reservation).
        pub delayed: u64,
        /// Admissions that paid more than `n * I` (permits spent above the threshold: cold).
        pub cold_costs: u64,
        /// Admissions that left no permit stored.
        pub emptied: u64,
        pub denied_with_retry: u64,
        /// Denied with no `retry_after`: the horizon.
        pub denied_no_retry: u64,
        /// Decisions where the docs' cost rounding allowed two `next_free`s.
        pub rounding_choices: u64,
        pub cancels: u64,
        pub cancels_nothing: u64,
        pub evicted: u64,
        pub clock_backwards: u64,
        /// Decisions of a swept store on a key not held, with the clock behind the sweep floor.
        pub behind_sweep: u64,
    }
}

// ---------------------------------------------------------------------------------------------
// The driver
// ---------------------------------------------------------------------------------------------

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

/// The subjects' names, in the order of the model stores.
const NAMES: [&str; 4] = ["direct", "never-evicting", "swept table", "swept map"];

/// One outstanding reservation: its key and units, and per subject the reservation and the
/// model's states before and after it.
type Held = (u8, u32, Vec<(Reservation, St, St)>);

/// Replays `input`; panics on the first difference from the model or the reference limiter,
/// or broken invariant.
pub fn run(input: &Input) -> Stats {
    let mut stats = Stats {
        inputs: 1,
        ..Stats::default()
    };
    let (count, period) = input.rate.quota();
    let quota = Quota::new(count, period);
    let interval = period.as_nanos() / u128::from(count.max(1));
    let warm = input.warm_up.get(interval);
    let clock = ManualClock::new();
    clock.set(Duration::from_secs(1));
    let direct: Vec<_> = (0..KEYS)
        .map(|_| Limiter::warm_up(quota, warm).clock(clock.clone()).build())
        .collect();
    let keyed = || KeyedLimiter::<u8>::warm_up(quota, warm).clock(clock.clone());
    let never = keyed().build();
    // The model describes `DenyNew` at the ceiling (the default drops light keys instead).
    let deny = cellgate::WhenFull::DenyNew;
    let table = keyed()
        .max_keys(64)
        .fixed_capacity()
        .when_full(deny)
        .build();
    let map = keyed().max_keys(64).exact_keys().when_full(deny).build();
    let want = validate(count, period, warm);
    // Every builder must agree with the model on validity, to the error.
    let err = want.as_ref().err();
    assert_eq!(never.as_ref().err(), err, "never-evicting build");
    assert_eq!(table.as_ref().err(), err, "table build");
    assert_eq!(map.as_ref().err(), err, "map build");
    assert!(
        direct.iter().all(|d| d.as_ref().err() == err),
        "direct build"
    );
    let (Ok(model), Ok(never), Ok(table), Ok(map)) = (want, never, table, map) else {
        stats.invalid_config += 1;
        return stats;
    };
    let direct: Vec<_> = direct.into_iter().map(Result::unwrap).collect();
    let use_model = model.warm_up < MODEL_MAX_WARM_UP_NS;
    stats.model_skipped += u64::from(!use_model);
    // Model stores: direct (one state per key), never-evicting, table, map.
    let mut stores: [Store; 4] = Default::default();
    let mut monotone = true;
    let mut held: Vec<Held> = Vec::new();
    for (i, op) in input.ops.iter().enumerate() {
        let now = clock.now();
        let ctx = |what: &str| format!("op #{i} {op:?} at {now}: {what}");
        match *op {
            WarmOp::Advance(ns) => clock.set_ns(now.saturating_add(u64::from(ns))),
            WarmOp::Intervals { k, frac } => {
                let d = u128::from(k % 8) * interval + u128::from(frac) * interval / 256;
                clock.set_ns(now.saturating_add(u64::try_from(d).unwrap_or(u64::MAX)));
            }
            WarmOp::Leap(s) => clock.set_ns(now.saturating_add(u64::from(s) * 1_000_000_000)),
            WarmOp::Back(ns) => clock.set_ns(now.saturating_sub(u64::from(ns))),
            WarmOp::Rewind(ns) => clock.set_ns(now.saturating_sub(u64::from(ns))),
            WarmOp::Horizon(x) => {
                let edge = (MAX_NEXT_FREE_US * 1_000) as u64;
                clock.set_ns(edge + 2_000_000 - u64::from(x % 4_000_000));
            }
            WarmOp::Check { key, n } => {
                let (k, n) = (key % KEYS, n.get());
                // `check()` is `check_n(1)`: one unit goes through it.
                let keyed = |l: &KeyedLimiter<u8, ManualClock>| {
                    if n == 1 {
                        l.check(&k)
                    } else {
                        l.check_n(&k, n)
                    }
                };
                let d = &direct[usize::from(k)];
                let want = if n == 1 { d.check() } else { d.check_n(n) };
                sane(&want, "check");
                assert_eq!(want.delay_ns(), 0, "a check never delays: {want:?}");
                let got = [want, keyed(&never), keyed(&table), keyed(&map)];
                differential(&got, monotone, &|| ctx(&format!("check_n({k}, {n})")));
                if use_model {
                    note_behind(&stores, k, now, &mut stats);
                    for (s, (store, d)) in stores.iter_mut().zip(&got).enumerate() {
                        let (_, _, two) = store.decide(&model, k, now, n, 0, d, &|| {
                            ctx(&format!("{} check_n({k}, {n})", NAMES[s]))
                        });
                        stats.rounding_choices += u64::from(two && s == 0);
                    }
                }
                tally(&mut stats, &want, n, &model, &stores[0], k);
            }
            WarmOp::Peek { key, n } => {
                let (k, n) = (key % KEYS, n.get());
                let want = direct[usize::from(k)].peek_n(n);
                sane(&want, "peek_n");
                assert_eq!(want.delay_ns(), 0, "a peek never delays: {want:?}");
                let got = [
                    want,
                    never.peek_n(&k, n),
                    table.peek_n(&k, n),
                    map.peek_n(&k, n),
                ];
                differential(&got, monotone, &|| ctx(&format!("peek_n({k}, {n})")));
                if use_model {
                    note_behind(&stores, k, now, &mut stats);
                    for (s, (store, d)) in stores.iter().zip(&got).enumerate() {
                        let outs = model.outcomes(store.state(&model, k), now, n, 0);
                        resolve(&outs, d, &|| ctx(&format!("{} peek_n({k}, {n})", NAMES[s])));
                    }
                }
            }
            WarmOp::Reserve { key, n, wait } => {
                let (k, n) = (key % KEYS, n.get());
                let max_wait = match wait {
                    Wait::Quarters(x) => {
                        let ns = interval * u128::from(x) / 4;
                        Duration::from_nanos(u64::try_from(ns).unwrap_or(u64::MAX))
                    }
                    Wait::Ns(ns) => Duration::from_nanos(ns),
                    Wait::Forever => Duration::MAX,
                };
                let max_wait_ns = u64::try_from(max_wait.as_nanos()).unwrap_or(u64::MAX);
                let want = direct[usize::from(k)].reserve(n, max_wait);
                sane(&want.decision(), "reserve");
                if want.is_allowed() {
                    assert!(
                        want.delay() <= max_wait,
                        "waits past {max_wait:?}: {want:?}"
                    );
                    stats.delayed += u64::from(!want.delay().is_zero());
                }
                let got = [
                    want.clone(),
                    never.reserve(&k, n, max_wait),
                    table.reserve(&k, n, max_wait),
                    map.reserve(&k, n, max_wait),
                ];
                let decisions = got.clone().map(|r| r.decision());
                differential(&decisions, monotone, &|| ctx(&format!("reserve({k}, {n})")));
                if use_model {
                    note_behind(&stores, k, now, &mut stats);
                    let mut recorded = Vec::new();
                    for (s, (store, r)) in stores.iter_mut().zip(got).enumerate() {
                        let what = || ctx(&format!("{} reserve({k}, {n}, {max_wait:?})", NAMES[s]));
                        let d = r.decision();
                        let (before, after, two) =
                            store.decide(&model, k, now, n, max_wait_ns, &d, &what);
                        stats.rounding_choices += u64::from(two && s == 0);
                        // From the `Reservation` docs: the decision's fields, and the units it
                        // holds (admitted, n > 0, the state changed).
                        assert_eq!(r.is_allowed(), d.is_allowed(), "{}", what());
                        assert_eq!(r.delay(), d.delay(), "{}", what());
                        let holds = d.is_allowed() && n > 0 && before != after;
                        assert_eq!(r.units(), if holds { n } else { 0 }, "{}", what());
                        recorded.push((r, before, after));
                    }
                    if want.is_allowed() {
                        held.push((k, n, recorded));
                    }
                } else if want.is_allowed() {
                    let recorded = got.into_iter().map(|r| (r, FRESH, FRESH)).collect();
                    held.push((k, n, recorded));
                }
                tally(&mut stats, &want.decision(), n, &model, &stores[0], k);
            }
            WarmOp::Cancel { pick } => {
                if held.is_empty() {
                    continue;
                }
                let (k, n, recorded) = held.remove(usize::from(pick) % held.len());
                let mut answers = Vec::new();
                for (s, (r, before, after)) in recorded.into_iter().enumerate() {
                    let got = match s {
                        0 => direct[usize::from(k)].cancel(r.clone()),
                        1 => never.cancel(&k, r.clone()),
                        2 => table.cancel(&k, r.clone()),
                        _ => map.cancel(&k, r.clone()),
                    };
                    if use_model {
                        let holds = r.is_allowed() && n > 0 && before != after;
                        let want = stores[s].cancel(&model, k, now, holds, (before, after));
                        assert_eq!(got, want, "{}", ctx(&format!("{} cancel on {k}", NAMES[s])));
                        if s == 0 {
                            stats.cancels_nothing += u64::from(holds && !want);
                        }
                    }
                    answers.push(got);
                }
                assert_eq!(answers[1], answers[0], "{}", ctx("never-evicting cancel"));
                if monotone {
                    assert_eq!(answers[2], answers[0], "{}", ctx("swept table cancel"));
                    assert_eq!(answers[3], answers[0], "{}", ctx("swept map cancel"));
                }
                stats.cancels += u64::from(answers[0]);
            }
        }
        let after = clock.now();
        if after < now {
            monotone = false;
            stats.clock_backwards += 1;
        }
        // The swept stores sweep after every operation.
        let (t, p) = (table.evict_idle(), map.evict_idle());
        stats.evicted += t as u64;
        if use_model {
            assert_eq!(
                t,
                stores[2].evict(&model, after),
                "{}",
                ctx("table evict_idle")
            );
            assert_eq!(
                p,
                stores[3].evict(&model, after),
                "{}",
                ctx("map evict_idle")
            );
        }
        for (s, l) in [(1, &never), (2, &table), (3, &map)] {
            if use_model {
                assert_eq!(l.len(), stores[s].held.len(), "{}", ctx(NAMES[s]));
                assert_eq!(l.stats().evicted, stores[s].evicted, "{}", ctx(NAMES[s]));
            }
        }
        for k in 0..KEYS {
            let got = [
                direct[usize::from(k)].peek(),
                never.peek(&k),
                table.peek(&k),
                map.peek(&k),
            ];
            differential(&got, monotone, &|| ctx(&format!("peek({k}) after")));
            if use_model {
                for (s, (store, d)) in stores.iter().zip(&got).enumerate() {
                    let outs = model.outcomes(store.state(&model, k), after, 0, 0);
                    resolve(&outs, d, &|| ctx(&format!("{} peek({k}) after", NAMES[s])));
                }
            }
        }
    }
    stats
}

/// The differential checks on one operation's decisions (direct, never-evicting, table, map):
/// the invariants, never-evicting = direct always, the swept stores = direct while the clock
/// has not gone back.
fn differential(got: &[Decision; 4], monotone: bool, ctx: &dyn Fn() -> String) {
    for (d, name) in got.iter().zip(NAMES) {
        sane(d, name);
    }
    assert_eq!(got[1], got[0], "never-evicting {}", ctx());
    if monotone {
        assert_eq!(got[2], got[0], "swept table {}", ctx());
        assert_eq!(got[3], got[0], "swept map {}", ctx());
    }
}

/// Counts a swept store's decision on a key it does not hold behind its sweep floor.
fn note_behind(stores: &[Store; 4], k: u8, now: u64, stats: &mut Stats) {
    let t = &stores[2];
    stats.behind_sweep += u64::from(now < t.floor && !t.held.contains_key(&k));
}

/// Counts what the direct limiter's decision `d` exercised (`direct` is its model store after
/// the decision).
fn tally(stats: &mut Stats, d: &Decision, n: u32, m: &WarmModel, direct: &Store, k: u8) {
    if d.is_allowed() {
        stats.allowed += 1;
        if n > 0 {
            let st = direct.state(m, k);
            stats.emptied += u64::from(st.missing == m.max_missing);
            // Cold: the interval to the next permit is longer than n stable intervals.
            let paid = d.reset_after_ns().saturating_sub(d.delay_ns());
            stats.cold_costs += u64::from(
                u128::from(paid) > u128::from(n) * m.interval + m.refill(st.missing) + 1_000,
            );
        }
    } else if d.retry_after_ns().is_some() {
        stats.denied_with_retry += 1;
    } else {
        stats.denied_no_retry += 1;
    }
}

#[cfg(test)]
mod tests {
    //! The model against hand-computed vectors (the module docs' worked example, the
    //! `Limiter::warm_up` doctest) and against Guava's definition by integration, so a model bug
    //! is not mistaken for an implementation bug.
    use super::*;
    use crate::common::Counters;

    const MS: u64 = 1_000_000;

    fn m(interval_ns: u64, warm_up_ns: u64) -> WarmModel {
        validate(
            1,
            Duration::from_nanos(interval_ns),
            Duration::from_nanos(warm_up_ns),
        )
        .unwrap()
    }

    /// The exact model's outcome (the first; a second one may differ by the documented µs of
    /// rounding), applied.
    fn only(m: &WarmModel, st: &mut St, now: u64, n: u32, max_wait: u64) -> Outcome {
        let outs = m.outcomes(*st, now, n, max_wait);
        assert!(!outs.is_empty(), "{outs:?}");
        if let Some(w) = outs[0].write {
            *st = w;
        }
        outs[0]
    }

    #[test]
    fn mul_div_is_exact() {
        for (a, b, q) in [(7u128, 9, 4), (0, 5, 3), (12, 12, 144), (u128::MAX, 1, 3)] {
            assert_eq!(mul_div(a, b, q), (a * b / q, a * b % q == 0));
        }
        // 2^100 * 2^100 / 2^90 = 2^110; and (2^100 + 1)^2 / 2^90 leaves a remainder.
        assert_eq!(mul_div(1 << 100, 1 << 100, 1 << 90), (1 << 110, true));
        let x = (1u128 << 100) + 1;
        assert_eq!(mul_div(x, x, 1 << 90), ((1 << 110) + (1 << 11), false));
        // (2^127 - 1) * 6 / 3 = 2^128 - 2.
        assert_eq!(mul_div(u128::MAX >> 1, 6, 3), (u128::MAX - 1, true));
    }

    #[test]
    fn validation() {
        let s = Duration::from_secs(1);
        assert_eq!(validate(0, s, s), Err(ConfigError::Zero { field: "count" }));
        assert_eq!(
            validate(1, Duration::ZERO, s),
            Err(ConfigError::Zero { field: "period" })
        );
        assert_eq!(
            validate(1, s, Duration::ZERO),
            Err(ConfigError::Zero { field: "warm_up" })
        );
        assert_eq!(
            validate(2, Duration::from_nanos(1), s),
            Err(ConfigError::RateTooFast {
                count: 2,
                period: Duration::from_nanos(1)
            })
        );
        assert_eq!(
            validate(1, Duration::MAX, s),
            Err(ConfigError::PeriodTooLong {
                period: Duration::MAX
            })
        );
        assert_eq!(
            validate(1, s, Duration::MAX),
            Err(ConfigError::PeriodTooLong {
                period: Duration::MAX
            })
        );
        let us = Duration::from_micros(1);
        let g = validate(1, us, Duration::from_micros(65_535)).unwrap();
        assert_eq!((g.frac, g.max_missing), (0, 65_535));
        assert_eq!(
            validate(1, us, Duration::from_nanos(65_535_001)),
            Err(ConfigError::WarmUpTooLong {
                permits: 65_536,
                max: 65_535
            })
        );
        // ceil(M) = 10 needs 4 bits: F = 12, M * 2^12 = 40960; ceil(M) = 1: F = 15.
        let g = m(MS, 10 * MS);
        assert_eq!((g.frac, g.max_missing), (12, 40_960));
        let g = validate(1, s, Duration::from_millis(1)).unwrap();
        assert_eq!((g.frac, g.max_missing), (15, 32));
        let g = validate(1, s, Duration::from_nanos(1)).unwrap();
        assert_eq!((g.frac, g.max_missing), (15, 0));
        // 3 per 10 ns: I = 3 ns (floored).
        let w = Duration::from_nanos(30);
        assert_eq!(
            validate(3, Duration::from_nanos(10), w).map(|g| g.interval),
            Ok(3)
        );
    }

    /// The module docs' example: I = 1 ms, W = 10 ms: from cold the permits are due at 0, 2.8,
    /// 5.2, 7.2, 8.8, 10.0, 11.0, 12.0, 13.0 ms.
    #[test]
    fn hand_worked_spacings_from_cold() {
        let g = m(MS, 10 * MS);
        let due_us = [
            0u64, 2_800, 5_200, 7_200, 8_800, 10_000, 11_000, 12_000, 13_000,
        ];
        let mut st = FRESH;
        for (k, &due) in due_us.iter().enumerate() {
            let due = due * 1_000;
            if due > 0 {
                let o = only(&g, &mut st, due - 1, 1, 0);
                assert!(!o.expect.allowed);
                assert_eq!((o.expect.retry_ns, o.expect.remaining), (Some(1), 0));
            }
            let o = only(&g, &mut st, due, 1, 0);
            assert!(o.expect.allowed, "permit {k}");
            assert_eq!((o.expect.remaining, o.delay), (0, 0));
            let next = due_us.get(k + 1).map_or(due + MS, |u| u * 1_000);
            assert_eq!(st.next_us * 1_000, u128::from(next), "after permit {k}");
            let spent = (k as u64 + 1).min(10);
            assert_eq!(o.expect.reset_ns, u128::from(next - due + spent * MS));
        }
        // Idle until 20 ms: 7 stored; the top one costs 1.6 ms.
        only(&g, &mut st, 20 * MS, 1, 0);
        assert_eq!(st.next_us, 21_600);
        // Fresh once the 4 missing permits accrue; accrual rounds up (by < I / 2^12 = 244 ns).
        assert!(!g.is_idle(st, 25_600_000 - 245));
        assert!(g.is_idle(st, 25_600_000 - 244));
    }

    /// The `Limiter::warm_up` doctest: reservations with no bound, each made when the previous
    /// one's delay is up, wait 0, 2.8, 2.4, 2.0, 1.6, 1.2, then 1 ms.
    #[test]
    fn doctest_gaps() {
        let g = m(MS, 10 * MS);
        let (mut st, mut now) = (FRESH, 0);
        let mut gaps = vec![];
        for _ in 0..7 {
            let o = only(&g, &mut st, now, 1, u64::MAX);
            assert!(o.expect.allowed);
            now += o.delay as u64;
            gaps.push(o.delay / 1_000);
        }
        assert_eq!(gaps, [0, 2800, 2400, 2000, 1600, 1200, 1000]);
    }

    #[test]
    fn large_requests_pay_later() {
        let g = m(MS, 10 * MS);
        let mut st = FRESH;
        // 2.8 + 2.4 + 2.0 ms, admitted at once.
        assert!(only(&g, &mut st, 0, 3, 0).expect.allowed);
        assert_eq!(st.next_us, 7_200);
        let o = only(&g, &mut st, 3 * MS, 20, 0);
        assert_eq!(o.expect.retry_ns, Some(4_200_000));
        assert_eq!(o.expect.reset_ns, 4_200_000 + 3_000_000);
        let o = only(&g, &mut st, 3 * MS, 20, 4_200_000);
        assert_eq!((o.expect.allowed, o.delay), (true, 4_200_000));
        // 1.6 + 1.2 + 18 * 1 ms: next free at 28 ms, the store empty.
        assert_eq!((st.next_us, st.missing), (28_000, g.max_missing));
        // A peek sees the wait and writes nothing.
        let o = only(&g, &mut st, 20 * MS, 0, 0);
        assert_eq!(
            (o.expect.retry_ns, o.write),
            (Some(8 * u128::from(MS)), None)
        );
    }

    /// The closed form `n*I + P(m) - P(m+n)` against Guava's definition: the integral of
    /// `f(x) = I` up to `h = M/2`, rising linearly to `3I` at `M`, over the permits spent
    /// (those beyond the store at `I` each).
    #[test]
    fn closed_form_is_guavas_integral() {
        for (i, w) in [
            (MS, 10 * MS),
            (1_234_567, 987_654_321),
            (7_777, 5_000),
            (3, 100),
        ] {
            let g = m(i, w);
            let (fi, fw) = (i as f64, w as f64);
            let max = fw / fi;
            let h = max / 2.0;
            let f_int = |a: f64, b: f64| {
                // ∫[a, b] f, with f(x) = I + (x - h)+ * 2I / (M - h).
                let above = |x: f64| (x - h).max(0.0);
                fi * (b - a) + (2.0 * fi / (max - h)) * (above(b).powi(2) - above(a).powi(2)) / 2.0
            };
            let q = f64::from(1u32 << g.frac);
            for missing in [0, 1, g.max_missing / 3, g.max_missing / 2, g.max_missing] {
                for n in [1u32, 2, 5] {
                    let stored = max - missing as f64 / q;
                    let spend = f64::from(n).min(stored);
                    let want = f_int(stored - spend, stored) + (f64::from(n) - spend) * fi;
                    let got = g.cost_up(missing, n) as f64;
                    assert!(
                        got >= want - 1e-6 * want && got <= want + 1.0 + 1e-9 * want,
                        "I {i} W {w} m {missing} n {n}: {got} vs {want}"
                    );
                }
            }
        }
    }

    #[test]
    fn time_going_backwards_gives_no_credit() {
        let g = m(MS, 10 * MS);
        let mut st = FRESH;
        only(&g, &mut st, 100 * MS, 1, 0);
        assert_eq!(st.next_us, 102_800);
        let o = only(&g, &mut st, 50 * MS, 1, 0);
        assert_eq!(
            (o.expect.allowed, o.expect.retry_ns),
            (false, Some(52_800_000))
        );
        assert_eq!(o.expect.reset_ns, 52_800_000 + 1_000_000);
        let o = only(&g, &mut st, 50 * MS, 1, u64::MAX);
        assert_eq!(o.delay, 52_800_000);
        assert_eq!(st.next_us, 105_200, "the second permit costs 2.4 ms");
    }

    #[test]
    fn horizon_fails_closed() {
        let g = m(MS, 10 * MS);
        let edge = (MAX_NEXT_FREE_US * 1_000) as u64;
        let mut st = FRESH;
        assert!(only(&g, &mut st, edge - 2_800_000, 1, 0).expect.allowed);
        assert_eq!(st.next_us, MAX_NEXT_FREE_US);
        // Ending exactly on the last µs, the documented rounding may also pass it.
        let outs = g.outcomes(FRESH, edge - 2_800_000, 1, 0);
        assert!(outs[0].expect.allowed && outs.len() > 1);
        assert!(outs[1..]
            .iter()
            .all(|o| !o.expect.allowed && o.expect.retry_ns.is_none()));
        let o = only(&g, &mut st, edge, 1, 0);
        assert_eq!(
            (o.expect.allowed, o.expect.retry_ns, o.expect.remaining),
            (false, None, 0)
        );
        // Denied by the wait, and later past the horizon too: no retry; a peek is told the wait.
        assert_eq!(only(&g, &mut st, edge - MS, 1, 0).expect.retry_ns, None);
        assert_eq!(
            only(&g, &mut st, edge - MS, 0, 0).expect.retry_ns,
            Some(MS.into())
        );
        let mut fresh = FRESH;
        let o = only(&g, &mut fresh, edge - 2 * MS, 1, 0);
        assert_eq!(
            (o.expect.allowed, o.expect.retry_ns, o.expect.remaining),
            (false, None, 0)
        );
    }

    #[test]
    fn idle_and_swept_states() {
        let g = m(MS, 10 * MS);
        assert!(g.is_idle(FRESH, 0));
        let mut st = FRESH;
        only(&g, &mut st, 5 * MS, 2, 0);
        assert_eq!((st.next_us, st.missing), (10_200, 2 << 12));
        assert!(!g.is_idle(st, 12_200_000 - 245));
        assert!(g.is_idle(st, 12_200_000 - 244));
        assert_eq!(
            only(&g, &mut st, 10_200_000, 0, 0).expect.reset_ns,
            2_000_000
        );
        assert_eq!(
            g.swept(12_200_500),
            St {
                next_us: 12_200,
                missing: 0
            }
        );
        assert_eq!(g.swept(u64::MAX).next_us, MAX_NEXT_FREE_US);
        // Behind the sweep the swept state denies what the dropped key admitted.
        let (mut swept, mut dropped) = (g.swept(12_200_500), st);
        assert!(!only(&g, &mut swept, 12 * MS, 1, 0).expect.allowed);
        assert!(only(&g, &mut dropped, 12 * MS, 1, 0).expect.allowed);
    }

    /// Where the exact end lies within 4 ns below a µs boundary the docs allow two `next_free`s,
    /// and the model lists both; elsewhere one.
    #[test]
    fn rounding_freedom_is_one_us_at_most() {
        let g = m(MS, 10 * MS);
        let mut two = 0;
        for missing in 0..=g.max_missing {
            let c = g.next_candidates(0, missing, 1);
            assert!(c.len() == 1 || (c.len() == 2 && c[1] == c[0] + 1), "{c:?}");
            two += usize::from(c.len() == 2);
        }
        assert!(two > 0 && two < 1_000, "{two} of 40961");
    }

    #[test]
    fn a_store_keeps_swept_keys_and_cancels_the_last_reservation_only() {
        let g = m(MS, 10 * MS);
        let mut s = Store::default();
        let d = |st: St| g.outcomes(st, 0, 1, 0)[0].expect.allowed;
        assert!(d(s.state(&g, 1)));
        s.held.insert(
            1,
            St {
                next_us: 3,
                missing: 4096,
            },
        );
        // At 3 µs + 1 ms the missing permit has accrued: idle, dropped, floor raised.
        assert_eq!(s.evict(&g, 1_003_000), 1);
        assert_eq!(
            (s.floor, s.state(&g, 1)),
            (
                1_003_000,
                St {
                    next_us: 1_003,
                    missing: 0
                }
            )
        );
        // A cancel on a key not held gives nothing; on the last reservation, exactly.
        let (a, b) = (
            FRESH,
            St {
                next_us: 2_000,
                missing: 4096,
            },
        );
        assert!(!s.cancel(&g, 2, 0, true, (a, b)));
        s.held.insert(2, b);
        assert!(!s.cancel(&g, 2, 0, false, (a, b)), "holds nothing");
        assert!(s.cancel(&g, 2, 0, true, (a, b)));
        assert_eq!(s.held[&2], a);
        assert!(!s.cancel(&g, 2, 0, true, (a, b)), "not the word it wrote");
    }

    #[test]
    fn seeds_replay() {
        let total = crate::common::replay_dir(
            concat!(env!("CARGO_MANIFEST_DIR"), "/corpus/seed_warm_up_model"),
            run,
        );
        for (name, n) in total.fields() {
            if name != "model_skipped" {
                assert!(n > 0, "the seeds exercise {name}: {total:?}");
            }
        }
    }

    crate::corpus_tools!("warm_up_model", run);

    #[test]
    fn a_cold_limiter_spaces_its_first_permits() {
        let input = Input {
            rate: RateSel::Interval(1_000_000),
            warm_up: WarmSel::Sixteenths(160),
            ops: vec![
                WarmOp::Reserve {
                    key: 0,
                    n: Units::Small(1),
                    wait: Wait::Quarters(255),
                },
                WarmOp::Reserve {
                    key: 0,
                    n: Units::Small(1),
                    wait: Wait::Quarters(255),
                },
                WarmOp::Check {
                    key: 0,
                    n: Units::Small(1),
                },
                WarmOp::Cancel { pick: 1 },
                WarmOp::Advance(4_000_000),
                WarmOp::Check {
                    key: 0,
                    n: Units::Small(1),
                },
            ],
        };
        let s = run(&input);
        assert_eq!(
            (s.delayed, s.denied_with_retry, s.cancels, s.allowed),
            (1, 1, 1, 3)
        );
    }
}
