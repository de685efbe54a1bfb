//! Warm-up (Guava's `SmoothWarmingUp`, cold factor 3): an exact integer reference model of
//! one key, and of a store of keys, shared by the crate's own unit tests
//! (`src/algorithm/warm_up/tests.rs`) and the `warm_up_model` fuzz target.
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
//! every other case the comparison is exact, field by field. (The fuzz target's
//! `Stats::rounding_choices` counts how often a decision had two candidates.) Configurations
//! with `W >= 2^62` ns ([`MODEL_MAX_WARM_UP_NS`]) are beyond the model: there `reset_after` may
//! saturate and could no longer tell the two candidates apart (the fuzz target gives them only
//! its differential checks).
//!
//! Plain integers in, plain structs out: a caller reads a real decision into a [`Seen`] and its
//! delay, and asks [`pick`] (or [`Store::decide`]) which allowed outcome it is.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::expect::{Expect, Seen, U64};
use crate::invalid::Invalid;

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
pub fn validate(count: u32, period: Duration, warm_up: Duration) -> Result<WarmModel, Invalid> {
    if count == 0 {
        return Err(Invalid::Zero { field: "count" });
    }
    if period.is_zero() {
        return Err(Invalid::Zero { field: "period" });
    }
    if period.as_nanos() > U64 {
        return Err(Invalid::PeriodTooLong { period });
    }
    let interval = period.as_nanos() / u128::from(count);
    if interval == 0 {
        return Err(Invalid::RateTooFast { count, period });
    }
    if warm_up.is_zero() {
        return Err(Invalid::Zero { field: "warm_up" });
    }
    let w = warm_up.as_nanos();
    if w > U64 {
        return Err(Invalid::PeriodTooLong { period: warm_up });
    }
    let permits = w.div_ceil(interval);
    if permits > MAX_PERMITS {
        return Err(Invalid::WarmUpTooLong {
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

/// The outcome among `outs` that a decision showing `seen` with `delay` ns (0 when denied) is;
/// `Err` says why none is (or, a model limitation, that two which write different states are).
pub fn pick(outs: &[Outcome], seen: Seen, delay: u128) -> Result<Outcome, String> {
    let matching: Vec<&Outcome> = outs
        .iter()
        .filter(|o| o.expect.seen() == seen && o.delay == delay)
        .collect();
    match matching.as_slice() {
        [] => Err(format!(
            "got {seen:?} with delay {delay} ns, the model allows {outs:#?}"
        )),
        [one, rest @ ..] => {
            if rest.iter().all(|o| o.write == one.write) {
                Ok(**one)
            } else {
                Err(format!("the model cannot tell {outs:?} apart"))
            }
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

    /// Checks a decision on `n` units of `k` at `now` accepting `max_wait`, which showed `seen`
    /// and `delay` ns, and applies it. Returns the state before and after, and whether the model
    /// had two candidates; `Err` (with the state) if the model allows no such decision.
    #[allow(clippy::too_many_arguments)]
    pub fn decide(
        &mut self,
        m: &WarmModel,
        k: u8,
        now: u64,
        n: u32,
        max_wait: u64,
        seen: Seen,
        delay: u128,
    ) -> Result<(St, St, bool), String> {
        let before = self.state(m, k);
        let outs = m.outcomes(before, now, n, max_wait);
        let o = pick(&outs, seen, delay).map_err(|e| format!("state {before:?}: {e}"))?;
        if let Some(w) = o.write {
            self.held.insert(k, w);
        }
        Ok((before, o.write.unwrap_or(before), outs.len() > 1))
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

#[cfg(test)]
mod tests {
    //! The model against hand-computed vectors (the module docs' worked example, the
    //! `Limiter::warm_up` doctest) and against Guava's definition by integration, so a model bug
    //! is not mistaken for an implementation bug.
    use super::*;

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
        assert_eq!(validate(0, s, s), Err(Invalid::Zero { field: "count" }));
        assert_eq!(
            validate(1, Duration::ZERO, s),
            Err(Invalid::Zero { field: "period" })
        );
        assert_eq!(
            validate(1, s, Duration::ZERO),
            Err(Invalid::Zero { field: "warm_up" })
        );
        assert_eq!(
            validate(2, Duration::from_nanos(1), s),
            Err(Invalid::RateTooFast {
                count: 2,
                period: Duration::from_nanos(1)
            })
        );
        assert_eq!(
            validate(1, Duration::MAX, s),
            Err(Invalid::PeriodTooLong {
                period: Duration::MAX
            })
        );
        assert_eq!(
            validate(1, s, Duration::MAX),
            Err(Invalid::PeriodTooLong {
                period: Duration::MAX
            })
        );
        let us = Duration::from_micros(1);
        let g = validate(1, us, Duration::from_micros(65_535)).unwrap();
        assert_eq!((g.frac, g.max_missing), (0, 65_535));
        assert_eq!(
            validate(1, us, Duration::from_nanos(65_535_001)),
            Err(Invalid::WarmUpTooLong {
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
}
