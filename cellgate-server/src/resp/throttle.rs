//! `CL.THROTTLE key max_burst count_per_period period [quantity]`, answered integer for integer
//! as redis-cell 0.2.2 answers it, on cellgate's keyed GCRA limiter.
//!
//! # Arithmetic (redis-cell's, reproduced)
//!
//! redis-cell computes in nanoseconds: the emission interval `T = (period_ns as f64 /
//! count as f64) as i64` (a float division, truncated), the tolerance `DVT = T * (max_burst +
//! 1)`, and the limit `max_burst + 1`. Its decision is the GCRA that cellgate's core implements
//! with interval `T` and burst `max_burst + 1`, so the core decides, given exactly that `T`
//! (a quota of one unit per `T` ns) with the call's burst: the quota travels with each call
//! (`KeyedLimiter::check_with`), and a key called with other parameters is judged by them
//! against the same history, as in redis-cell. The reply then rounds as redis-cell does:
//!
//! - `retry_after`: the wait in whole seconds, truncated; `-1` when allowed or when the
//!   quantity exceeds the limit (no wait helps);
//! - `reset_after`: the key's backlog (`TAT - now`) in whole seconds, truncated;
//! - `remaining`: `(DVT - backlog)` and `T` both truncated to microseconds, divided as floats,
//!   truncated; `0` when `DVT - backlog <= -T`.
//!
//! # Where it differs (redis-cell's defects)
//!
//! Inputs on which redis-cell crashes the server, wraps around or answers nonsense are errors
//! here: a negative `max_burst`, `quantity` or any other negative value, a zero count or
//! period, a period whose nanoseconds overflow an `i64`, a rate faster than one per
//! nanosecond, a `max_burst + 1` above `u32::MAX` or a tolerance overflowing an `i64`. Where
//! `T` is under one microsecond redis-cell divides by zero for `remaining`; here it divides in
//! nanoseconds. Keys may be any bytes (redis-cell requires UTF-8).
//!
//! # Keys and memory
//!
//! Keys live in one keyed limiter bounded by [`RespConfig::max_keys`](super::RespConfig): a key
//! whose backlog has drained is equivalent to a fresh one and its slot is reused; when the cap
//! is reached by keys that all still hold a backlog, a call for a new key is answered with an
//! error (fail closed: `Cell error: ... key cap ...`) until keys drain. Keys are told apart by a
//! seeded 64-bit fingerprint (the core's default store), so memory per key does not depend on
//! the key's length.

use std::time::Duration;

use bytes::Bytes;
use cellgate::clock::Clock;
use cellgate::{Decision, Denial, KeyedLimiter, Quota};

const NS_PER_SEC: i64 = 1_000_000_000;
const NS_PER_US: i64 = 1_000;

/// redis-cell's usage error (its wording, for its arity check).
pub(crate) const USAGE: &str =
    "Cell error: Usage: cl.throttle <key> <max_burst> <count per period> <period> [<quantity>]";

/// The parameters of one call, validated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Params {
    /// Emission interval `T`, ns (≥ 1).
    pub(crate) interval_ns: i64,
    /// `max_burst + 1`: the limit.
    pub(crate) burst: u32,
    /// `T * burst`, ns.
    pub(crate) tolerance_ns: i64,
    /// Units asked for (≥ 0).
    pub(crate) quantity: i64,
}

/// The five integers of the reply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Reply {
    pub(crate) limited: bool,
    pub(crate) limit: i64,
    pub(crate) remaining: i64,
    pub(crate) retry_after: i64,
    pub(crate) reset_after: i64,
}

/// Parses `max_burst count period [quantity]` (the arguments after the key).
pub(crate) fn parse(args: &[Bytes]) -> Result<Params, String> {
    let int = |b: &Bytes| {
        // redis-cell parses with Rust's `i64::from_str` (a leading `+` is taken): so do we.
        std::str::from_utf8(b)
            .ok()
            .and_then(|s| s.parse::<i64>().ok())
            .ok_or_else(|| {
                format!(
                    "Cell error: Couldn't parse as integer: {}",
                    String::from_utf8_lossy(b)
                )
            })
    };
    let max_burst = int(&args[0])?;
    let count = int(&args[1])?;
    let period = int(&args[2])?;
    let quantity = args.get(3).map(int).transpose()?.unwrap_or(1);
    params(max_burst, count, period, quantity)
}

/// Validates the numbers and derives redis-cell's `T`, limit and tolerance from them.
pub(crate) fn params(
    max_burst: i64,
    count: i64,
    period_s: i64,
    quantity: i64,
) -> Result<Params, String> {
    let err = |what: &str| Err(format!("Cell error: {what}"));
    if max_burst < 0 {
        return err("max_burst must not be negative");
    }
    if count <= 0 {
        return err("count per period must be positive");
    }
    if period_s <= 0 {
        return err("period must be positive");
    }
    if quantity < 0 {
        return err("quantity must not be negative");
    }
    let Some(period_ns) = period_s.checked_mul(NS_PER_SEC) else {
        return err("period is too long (its nanoseconds overflow a 64-bit integer)");
    };
    // redis-cell's float division, truncated: the same `T` to the nanosecond.
    #[allow(clippy::cast_precision_loss, clippy::cast_possible_truncation)]
    let interval_ns = (period_ns as f64 / count as f64) as i64;
    if interval_ns <= 0 {
        return err("rate is too fast (more than one per nanosecond)");
    }
    let burst = max_burst
        .checked_add(1)
        .and_then(|b| u32::try_from(b).ok())
        .filter(|&b| b < u32::MAX);
    let tolerance_ns = burst.and_then(|b| interval_ns.checked_mul(i64::from(b)));
    let (Some(burst), Some(tolerance_ns)) = (burst, tolerance_ns) else {
        return err("max_burst is too large for this rate");
    };
    Ok(Params {
        interval_ns,
        burst,
        tolerance_ns,
        quantity,
    })
}

/// Why a call got no decision.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Refusal {
    /// The key cap is reached by keys that all hold a backlog.
    KeyCap,
}

/// Runs one call on `limiter`.
pub(crate) fn throttle<C: Clock>(
    limiter: &KeyedLimiter<Vec<u8>, C>,
    key: &[u8],
    p: &Params,
) -> Result<Reply, Refusal> {
    #[allow(clippy::cast_sign_loss)] // validated positive
    let quota = Quota::new(1, Duration::from_nanos(p.interval_ns as u64)).with_burst(p.burst);
    // More units than the limit never fit: look without charging (`n = 0` writes nothing) and
    // answer the denial redis-cell gives, with its backlog.
    let never_fits = p.quantity > i64::from(p.burst);
    let n = if never_fits { 0 } else { p.quantity as u32 };
    // `params` validated the quota, so the core accepts it.
    let d = limiter
        .check_with(key, &quota, n)
        .map_err(|_| Refusal::KeyCap)?;
    if d.denial() == Some(Denial::StoreFull) {
        return Err(Refusal::KeyCap);
    }
    Ok(reply(p, &d, never_fits))
}

/// The reply for the core's decision `d` on a call with parameters `p`.
pub(crate) fn reply(p: &Params, d: &Decision, never_fits: bool) -> Reply {
    let limited = never_fits || !d.is_allowed();
    let backlog = i64::try_from(d.reset_after_ns()).unwrap_or(i64::MAX);
    let retry_after = match d.retry_after_ns() {
        Some(ns) if limited && !never_fits => i64::try_from(ns).unwrap_or(i64::MAX) / NS_PER_SEC,
        _ => -1,
    };
    Reply {
        limited,
        limit: i64::from(p.burst),
        remaining: remaining(p, backlog),
        retry_after,
        reset_after: backlog / NS_PER_SEC,
    }
}

/// redis-cell's `remaining`: computed in microseconds, divided as floats, truncated.
fn remaining(p: &Params, backlog: i64) -> i64 {
    let next = p.tolerance_ns.saturating_sub(backlog);
    if next <= -p.interval_ns {
        return 0;
    }
    let interval_us = p.interval_ns / NS_PER_US;
    if interval_us == 0 {
        return next / p.interval_ns;
    }
    #[allow(clippy::cast_precision_loss, clippy::cast_possible_truncation)]
    let r = ((next / NS_PER_US) as f64 / interval_us as f64) as i64;
    r
}

#[cfg(test)]
mod tests {
    use super::*;
    use cellgate::clock::ManualClock;

    fn limiter(clock: &ManualClock) -> KeyedLimiter<Vec<u8>, ManualClock> {
        KeyedLimiter::gcra(Quota::with_interval(Duration::from_nanos(1)))
            .clock(clock.clone())
            .build()
            .unwrap()
    }

    fn call(l: &KeyedLimiter<Vec<u8>, ManualClock>, b: i64, c: i64, s: i64, q: i64) -> Reply {
        throttle(l, b"k", &params(b, c, s, q).unwrap()).unwrap()
    }

    fn five(r: Reply) -> [i64; 5] {
        [
            i64::from(r.limited),
            r.limit,
            r.remaining,
            r.retry_after,
            r.reset_after,
        ]
    }

    #[test]
    fn the_readme_sequence_of_redis_cell() {
        // redis-cell's README: 15 burst, 30 per 60 s: T = 2 s, DVT = 32 s.
        let clock = ManualClock::new();
        let l = limiter(&clock);
        assert_eq!(five(call(&l, 15, 30, 60, 1)), [0, 16, 15, -1, 2]);
        for _ in 0..15 {
            call(&l, 15, 30, 60, 1);
        }
        // Full: the next waits one interval.
        assert_eq!(five(call(&l, 15, 30, 60, 1)), [1, 16, 0, 2, 32]);
        clock.advance(Duration::from_millis(2500));
        // 29.5 s of backlog: one more fits (2.5 s drained), 31.5 s after.
        assert_eq!(five(call(&l, 15, 30, 60, 1)), [0, 16, 0, -1, 31]);
        // More than the limit never fits: no retry.
        assert_eq!(five(call(&l, 15, 30, 60, 17)), [1, 16, 0, -1, 31]);
    }

    #[test]
    fn bad_parameters_are_errors() {
        assert!(params(-1, 1, 1, 1).is_err());
        assert!(params(1, 0, 1, 1).is_err());
        assert!(params(1, -5, 1, 1).is_err());
        assert!(params(1, 1, 0, 1).is_err());
        assert!(params(1, 1, 1, -1).is_err());
        assert!(params(1, 1, i64::MAX, 1).is_err());
        assert!(params(1, i64::MAX, 1, 1).is_err());
        assert!(params(i64::MAX, 1, 1, 1).is_err());
        assert!(params(1_000_000, 1, 9_000_000_000, 1).is_err());
        assert!(params(0, 1, 1, 0).is_ok());
    }
}
