//! GCRA, from the README's "GCRA, exactly" and the `Quota::with_queue`, `reserve`,
//! `cancel`, `refund` docs, in unbounded-enough arithmetic (`u128`) so that it cannot share an
//! overflow bug with the implementation:
//!
//! ```text
//! T = period_ns / count, DVT = T * burst, CEIL = T * (burst + queue),
//! limit = burst + queue (saturating in u32)
//! new_tat = max(tat, now) + n*T           (tat = now for a key never seen)
//! a check admits iff n*T <= DVT and ahead <= CEIL   (ahead = new_tat - now)
//!   allowed: store new_tat (if n > 0), reset_after = ahead, delay = max(ahead - DVT, 0)
//!   denied:  store nothing, reset_after = max(tat - now, 0),
//!            retry_after = ahead - CEIL if n*T <= DVT, else None
//! remaining = min(floor((CEIL - used) / T), limit), 0 if CEIL < used
//! reserve(n, w) is the same with CEIL replaced by min(DVT + w, CEIL) when the quota has a
//!   queue, DVT + w without one (remaining still against CEIL)
//! cancel of n units admitted at `at` (now taken as at least `at`): while a place waits to act
//!   (tat > now + DVT) only the last place comes back (tat == after: tat := max(before, now));
//!   otherwise tat := max(tat - min(n*T, at + n*T - now), now), whatever was admitted since
//! refund(n): tat := max(tat - n*T, now)
//! ```
//!
//! plus the one limit of the packed state, the *horizon*: a TAT is a `u64` of nanoseconds, so
//! a request the formula allows but whose `new_tat` exceeds `u64::MAX` is denied with no
//! `retry_after`, `reset_after = max(tat - now, 0)` and `remaining = 0` (fail closed).

/// The last instant a TAT can hold.
pub const HORIZON: u128 = u64::MAX as u128;

/// The five observable fields of a decision.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Expected {
    pub allowed: bool,
    pub limit: u32,
    pub remaining: u32,
    pub retry_after_ns: Option<u64>,
    pub reset_after_ns: u64,
    /// `delay_ns()`: the wait before acting on an admission (0 when denied).
    pub delay_ns: u64,
}

impl Expected {
    /// The five fields every decision has, and the delay of an admission.
    pub fn with_delay(seen: crate::expect::Seen, delay_ns: u64) -> Self {
        Self {
            allowed: seen.allowed,
            limit: seen.limit,
            remaining: seen.remaining,
            retry_after_ns: seen.retry_after_ns,
            reset_after_ns: seen.reset_after_ns,
            delay_ns,
        }
    }
}

/// Validated GCRA parameters, in model arithmetic.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Params {
    /// Emission interval, ns.
    pub t: u128,
    /// Tolerance `T * burst`, ns.
    pub dvt: u128,
    /// `T * (burst + queue)`, ns: how far ahead any admission may leave the TAT.
    pub ceiling: u128,
    pub burst: u32,
    /// `burst + queue`, saturating in `u32`: the decisions' `limit`.
    pub limit: u32,
}

impl Params {
    /// The parameters of an emission interval of `t` ns (at least 1), a burst and a queue,
    /// which the caller has validated (`DVT` and the ceiling fit `u64`).
    pub fn of(t: u128, burst: u32, queue: u32) -> Self {
        assert!(t >= 1, "model bug: an emission interval of 0");
        let dvt = t * u128::from(burst);
        Self {
            t,
            dvt,
            ceiling: dvt + t * u128::from(queue),
            burst,
            limit: u32::try_from(u64::from(burst) + u64::from(queue)).unwrap_or(u32::MAX),
        }
    }
}

/// The model's decision for `n` units at `now` on stored `tat` (`None`: never seen), and the
/// TAT to store, if any: a check, which may queue up to the quota's ceiling.
pub fn step(p: &Params, tat: Option<u64>, now: u64, n: u32) -> (Expected, Option<u64>) {
    decide(p, tat, now, n, p.ceiling)
}

/// A decision that admits when the TAT afterwards is at most `ceiling` ahead of `now` (the
/// quota's ceiling for a check, `DVT + max_wait` for a reservation) and `n` fits the burst.
pub fn decide(
    p: &Params,
    tat: Option<u64>,
    now: u64,
    n: u32,
    ceiling: u128,
) -> (Expected, Option<u64>) {
    let now = u128::from(now);
    let tat = tat.map_or(now, u128::from);
    let need = u128::from(n) * p.t;
    let new_tat = tat.max(now) + need;
    let backlog = tat.saturating_sub(now);
    let ahead = new_tat - now;
    // `remaining` counts the places left before the quota's ceiling, queue included.
    let remaining = |used: u128| -> u32 {
        let r = p.ceiling.saturating_sub(used) / p.t;
        r.min(u128::from(p.limit)) as u32
    };
    let narrow = |v: u128| u64::try_from(v).expect("model value fits u64 here");
    // More than the burst never fits: a queue delays requests, it does not widen the burst.
    let fits = need <= p.dvt;
    if fits && ahead <= ceiling {
        if new_tat > HORIZON {
            // Allowed by the formula, but the TAT would not fit: fail closed.
            let d = Expected {
                allowed: false,
                limit: p.limit,
                remaining: 0,
                retry_after_ns: None,
                reset_after_ns: narrow(backlog),
                delay_ns: 0,
            };
            return (d, None);
        }
        let d = Expected {
            allowed: true,
            limit: p.limit,
            remaining: remaining(ahead),
            retry_after_ns: None,
            reset_after_ns: narrow(ahead),
            delay_ns: narrow(ahead.saturating_sub(p.dvt)),
        };
        return (d, (n > 0).then(|| narrow(new_tat)));
    }
    // When `new_tat > u64::MAX` no wait can help (the request was denied, so `tat > now` and
    // at the retry instant the horizon rule above denies it): no retry, fail closed.
    let retry = (fits && new_tat <= HORIZON).then(|| narrow(ahead - ceiling));
    let d = Expected {
        allowed: false,
        limit: p.limit,
        remaining: remaining(backlog),
        retry_after_ns: retry,
        reset_after_ns: narrow(backlog),
        delay_ns: 0,
    };
    (d, None)
}

/// `cancel` of a reservation of `n` units admitted at clock reading `at` that moved the TAT
/// from `before` to `after`, on the stored `tat` at `now` (taken as at least `at`). While a
/// place waits to act (`tat > now + DVT`) only the last place comes back (`tat == after`: the
/// TAT goes back to `before`, never below `now`); otherwise the part of `n * T` the clock has
/// not eaten since `at` comes back, whatever was admitted since, never below `now`. The new
/// TAT, or `None` when nothing comes back.
pub fn cancel(
    p: &Params,
    tat: Option<u64>,
    now: u64,
    n: u32,
    (before, after, at): (u64, u64, u64),
) -> Option<u64> {
    let tat = tat.unwrap_or(0);
    let now = now.max(at);
    if tat <= now {
        // Idle: nothing left to give back.
        return None;
    }
    if u128::from(tat) > u128::from(now) + p.dvt {
        if tat != after {
            return None;
        }
        let new = before.max(now);
        return (new < tat).then_some(new);
    }
    let units = u128::from(n) * p.t;
    let unspent = (u128::from(at) + units).saturating_sub(u128::from(now));
    let back = units.min(unspent);
    let new = (u128::from(tat).saturating_sub(back)).max(u128::from(now)) as u64;
    (new < tat).then_some(new)
}

/// `refund(n)` on the stored `tat` at `now`: the new TAT, or `None` when nothing comes back.
pub fn refund(p: &Params, tat: Option<u64>, now: u64, n: u32) -> Option<u64> {
    let tat = u128::from(tat.unwrap_or(0));
    let new = tat.saturating_sub(u128::from(n) * p.t).max(u128::from(now));
    (new < tat).then_some(new as u64)
}

#[cfg(test)]
mod tests {
    //! The model against hand-computed vectors (the README and cellgate's own unit tests), so
    //! a model bug is not mistaken for an implementation bug.
    use super::*;

    fn params(count: u32, period_ns: u64, burst: u32) -> Params {
        queued(count, period_ns, burst, 0)
    }

    fn queued(count: u32, period_ns: u64, burst: u32, queue: u32) -> Params {
        Params::of(u128::from(period_ns / u64::from(count)), burst, queue)
    }

    fn run_model(p: &Params, tat: &mut Option<u64>, now: u64, n: u32) -> Expected {
        let (d, w) = step(p, *tat, now, n);
        *tat = w.or(*tat);
        d
    }

    #[test]
    fn burst_then_refill() {
        let p = params(1, 100, 3);
        let mut tat = None;
        for (i, rem) in [2u32, 1, 0].into_iter().enumerate() {
            let d = run_model(&p, &mut tat, 1000, 1);
            assert!(d.allowed);
            assert_eq!(d.remaining, rem);
            assert_eq!(d.reset_after_ns, 100 * (i as u64 + 1));
        }
        let d = run_model(&p, &mut tat, 1000, 1);
        assert_eq!(
            d,
            Expected {
                allowed: false,
                limit: 3,
                remaining: 0,
                retry_after_ns: Some(100),
                reset_after_ns: 300,
                delay_ns: 0,
            }
        );
        assert!(!run_model(&p, &mut tat, 1099, 1).allowed);
        assert!(run_model(&p, &mut tat, 1100, 1).allowed);
        assert_eq!(tat, Some(1400));
        assert_eq!(run_model(&p, &mut tat, 10_000, 1).remaining, 2);
    }

    #[test]
    fn n_above_burst_and_backwards_time() {
        let p = params(1, 100, 3);
        let mut tat = None;
        let d = run_model(&p, &mut tat, 0, 4);
        assert_eq!((d.allowed, d.retry_after_ns, d.remaining), (false, None, 3));
        let p = params(1, 100, 2);
        let mut tat = None;
        run_model(&p, &mut tat, 1000, 2);
        let d = run_model(&p, &mut tat, 500, 1);
        assert_eq!(
            (d.allowed, d.reset_after_ns, d.remaining, d.retry_after_ns),
            (false, 700, 0, Some(600))
        );
        // A peek while the backlog exceeds DVT is itself a denial (n = 0 fits iff
        // backlog <= DVT), with retry = backlog - DVT.
        let d = run_model(&p, &mut tat, 500, 0);
        assert_eq!((d.allowed, d.retry_after_ns), (false, Some(500)));
    }

    #[test]
    fn horizon() {
        let p = params(1, 100, 2);
        let mut tat = None;
        assert!(run_model(&p, &mut tat, u64::MAX - 100, 1).allowed);
        assert_eq!(tat, Some(u64::MAX));
        let d = run_model(&p, &mut tat, u64::MAX, 1);
        assert_eq!(
            d,
            Expected {
                allowed: false,
                limit: 2,
                remaining: 0,
                retry_after_ns: None,
                reset_after_ns: 0,
                delay_ns: 0,
            }
        );
        let p = params(1, u64::MAX, 1);
        let mut tat = None;
        assert!(run_model(&p, &mut tat, 0, 1).allowed);
        assert_eq!(run_model(&p, &mut tat, 0, u32::MAX).retry_after_ns, None);
    }

    #[test]
    fn queue_delays_then_denies() {
        // T = 50, burst 2, queue 2: the first two at once, the next two delayed by one and two
        // intervals, then denied; `limit` and `remaining` count the queue.
        let p = queued(1, 50, 2, 2);
        let mut tat = None;
        for i in 0..4u32 {
            let d = run_model(&p, &mut tat, 2000, 1);
            assert!(d.allowed, "request {i}");
            assert_eq!(
                d.delay_ns,
                50 * u64::from(i.saturating_sub(1)),
                "request {i}"
            );
            assert_eq!((d.remaining, d.limit), (3 - i, 4), "request {i}");
        }
        let d = run_model(&p, &mut tat, 2000, 1);
        assert_eq!((d.allowed, d.delay_ns, d.remaining), (false, 0, 0));
        assert_eq!(tat, Some(2200));
        assert_eq!(d.retry_after_ns, Some(50));
        // More than the burst never fits, queue or not.
        let d = run_model(&p, &mut None, 0, 3);
        assert_eq!((d.allowed, d.retry_after_ns), (false, None));
    }

    #[test]
    fn reservations_wait_at_most_max_wait() {
        // `Reservation` docs: T = 1 s, burst 1.
        let p = params(1, 1_000_000_000, 1);
        let mut tat = None;
        let mut reserve = |wait: u128| {
            let (d, w) = decide(&p, tat, 0, 1, p.dvt + wait);
            tat = w.or(tat);
            (d.allowed, d.delay_ns)
        };
        assert_eq!(reserve(0), (true, 0));
        assert_eq!(reserve(5_000_000_000), (true, 1_000_000_000));
        assert_eq!(reserve(1_500_000_000), (false, 0));
        // The `KeyedLimiter::reserve` docs: T = 100 ms, burst 1, max_wait 250 ms.
        let p = params(10, 1_000_000_000, 1);
        let mut tat = None;
        let delays: Vec<_> = (0..4)
            .map(|_| {
                let (d, w) = decide(&p, tat, 0, 1, p.dvt + 250_000_000);
                tat = w.or(tat);
                d.allowed.then_some(d.delay_ns / 1_000_000)
            })
            .collect();
        assert_eq!(delays, [Some(0), Some(100), Some(200), None]);
    }

    #[test]
    fn cancel_gives_back_the_unelapsed_part_or_the_last_place() {
        // T = 100, DVT = 300, queue 2 (ceiling 500).
        let p = Params {
            t: 100,
            dvt: 300,
            ceiling: 500,
            burst: 3,
            limit: 5,
        };
        // Nobody waiting (TAT 1300 <= 1000 + DVT): the whole unit back on a frozen clock,
        // although others were admitted after it.
        assert_eq!(
            cancel(&p, Some(1300), 1000, 1, (1000, 1100, 1000)),
            Some(1200)
        );
        // 40 ns later: 60 back.
        assert_eq!(
            cancel(&p, Some(1300), 1040, 1, (1000, 1100, 1000)),
            Some(1240)
        );
        // Someone waiting (TAT 1400 > 1000 + DVT): only the last place.
        assert_eq!(
            cancel(&p, Some(1400), 1000, 1, (1300, 1400, 1000)),
            Some(1300)
        );
        assert_eq!(cancel(&p, Some(1400), 1000, 1, (1200, 1300, 1000)), None);
    }

    #[test]
    fn refund_never_beyond_a_fresh_key() {
        let p = params(1, 100, 3);
        assert_eq!(refund(&p, Some(1300), 1000, 1), Some(1200));
        assert_eq!(refund(&p, Some(1300), 1000, 5), Some(1000));
        assert_eq!(refund(&p, Some(1000), 1000, 1), None);
        assert_eq!(refund(&p, Some(500), 1000, 1), None);
        assert_eq!(refund(&p, None, 1000, 1), None);
    }

    #[test]
    fn queue_parameters() {
        let p = queued(10, 1000, 4, 3);
        assert_eq!((p.ceiling, p.limit), (700, 7));
        let p = queued(1, 1, u32::MAX, 5);
        assert_eq!(p.limit, u32::MAX, "burst + queue saturates in u32");
    }
}
