//! GCRA: the generic cell rate algorithm.
//!
//! # State
//!
//! The whole state of a key is its *theoretical arrival time* (TAT): nanoseconds since the
//! clock's origin, one `u64`, no packing. A fresh key is `0` (any TAT at or before `now` is
//! equivalent to a fresh key).
//!
//! # Step
//!
//! With emission interval `T`, tolerance `DVT = T * burst`, a request for `n` at `now`:
//!
//! ```text
//! ahead   = max(tat, now) - now + n * T        (exact, in u128)
//! allowed = ahead <= DVT
//! allowed: tat := now + ahead;  reset_after = ahead;  remaining = (DVT - ahead) / T
//! denied:  tat unchanged;       reset_after = tat - now (≥ 0);
//!          retry_after = ahead - DVT if n <= burst, else None
//! ```
//!
//! `n = 0` (a peek) never writes. The stored TAT never decreases, so a clock that moves
//! backwards only makes `ahead` larger: no extra credit.
//!
//! # Limits
//!
//! The TAT must fit in a `u64`: the last representable instant is `u64::MAX` ns (about 584
//! years) after the origin. A request that would need a TAT beyond it is denied with no
//! `retry_after` (fail closed), and so is a denied request whose admission would need one
//! (no wait can help it); no arithmetic wraps.

use std::num::NonZeroU64;

use crate::decision::Decision;
use crate::quota::GcraParams;

/// GCRA parameters, validated at build time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Gcra {
    interval: NonZeroU64,
    tolerance: u64,
    burst: u32,
}

impl Gcra {
    pub(crate) fn new(p: GcraParams) -> Self {
        Self {
            interval: p.interval,
            tolerance: p.tolerance,
            burst: p.burst,
        }
    }

    /// Decides `n` units at `now` against the stored `tat`.
    #[inline(always)]
    pub(crate) fn step(&self, tat: u64, now: u64, n: u32) -> (Decision, Option<u64>) {
        let t = self.interval.get();
        let dvt = self.tolerance;
        let backlog = tat.saturating_sub(now);
        // u128: backlog < 2^64 and n * T < 2^96, so the sum cannot overflow.
        let ahead = u128::from(backlog) + u128::from(n) * u128::from(t);
        if ahead <= u128::from(dvt) {
            // `ahead <= dvt` fits in u64.
            let ahead = ahead as u64;
            if let Some(new_tat) = now.checked_add(ahead) {
                let write = if n == 0 { None } else { Some(new_tat) };
                return (
                    Decision::allow(self.burst, dvt - ahead, self.interval, ahead),
                    write,
                );
            }
            // Past the representable horizon: fail closed.
            return (
                Decision::deny(self.burst, 0, self.interval, None, backlog),
                None,
            );
        }
        // Waiting `ahead - DVT` admits the request with TAT `now + ahead`; if that is past the
        // horizon no wait helps (it would be denied there with no retry).
        let retry = if n <= self.burst && u128::from(now) + ahead <= u128::from(u64::MAX) {
            // Fits: `ahead - dvt <= u64::MAX - now`.
            Some((ahead - u128::from(dvt)) as u64)
        } else {
            None
        };
        (
            Decision::deny(
                self.burst,
                dvt.saturating_sub(backlog),
                self.interval,
                retry,
                backlog,
            ),
            None,
        )
    }

    /// A TAT at or before `now` holds no information.
    #[inline]
    pub(crate) fn is_idle(&self, tat: u64, now: u64) -> bool {
        tat <= now
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::quota::Quota;
    use std::time::Duration;

    fn gcra(count: u32, period_ns: u64, burst: u32) -> Gcra {
        Gcra::new(
            Quota::new(count, Duration::from_nanos(period_ns))
                .with_burst(burst)
                .gcra_params()
                .unwrap(),
        )
    }

    /// Runs `n` at `now` against `tat`, applying the write.
    fn run(g: &Gcra, tat: &mut u64, now: u64, n: u32) -> Decision {
        super::super::apply_step(g.step(*tat, now, n), tat, n)
    }

    #[test]
    fn burst_then_refill() {
        // T = 100, burst 3, DVT = 300.
        let g = gcra(1, 100, 3);
        let mut tat = 0;
        for (i, rem) in [2u32, 1, 0].into_iter().enumerate() {
            let d = run(&g, &mut tat, 1000, 1);
            assert!(d.is_allowed(), "request {i}");
            assert_eq!(d.remaining(), rem);
            assert_eq!(d.limit(), 3);
            assert_eq!(d.reset_after_ns(), 100 * (i as u64 + 1));
            assert_eq!(d.retry_after(), None);
        }
        assert_eq!(tat, 1300);
        let d = run(&g, &mut tat, 1000, 1);
        assert!(!d.is_allowed());
        assert_eq!(d.retry_after_ns(), Some(100));
        assert_eq!(d.reset_after_ns(), 300);
        assert_eq!(d.remaining(), 0);
        assert_eq!(tat, 1300, "a denial writes nothing");
        // 99 ns later: still no; 100 ns later: yes.
        assert!(!run(&g, &mut tat, 1099, 1).is_allowed());
        let d = run(&g, &mut tat, 1100, 1);
        assert!(d.is_allowed());
        assert_eq!(d.remaining(), 0);
        assert_eq!(tat, 1400);
        // Long idle: back to a full burst, TAT restarts from now.
        let d = run(&g, &mut tat, 10_000, 1);
        assert_eq!(d.remaining(), 2);
        assert_eq!(tat, 10_100);
    }

    #[test]
    fn n_larger_than_burst_never_fits() {
        let g = gcra(1, 100, 3);
        let mut tat = 0;
        let d = run(&g, &mut tat, 0, 4);
        assert!(!d.is_allowed());
        assert_eq!(d.retry_after(), None);
        assert_eq!(d.remaining(), 3);
        assert_eq!(d.reset_after_ns(), 0);
        // n == burst fits exactly on a fresh key.
        let d = run(&g, &mut tat, 0, 3);
        assert!(d.is_allowed());
        assert_eq!(d.remaining(), 0);
        assert_eq!(tat, 300);
        // Partial: 2 denied with the exact wait for 2 units.
        let d = run(&g, &mut tat, 50, 2);
        assert!(!d.is_allowed());
        assert_eq!(d.retry_after_ns(), Some(150));
    }

    #[test]
    fn zero_units_is_a_free_look() {
        let g = gcra(1, 100, 2);
        let mut tat = 0;
        run(&g, &mut tat, 500, 2);
        let d = run(&g, &mut tat, 500, 0);
        assert!(d.is_allowed());
        assert_eq!(d.remaining(), 0);
        assert_eq!(d.reset_after_ns(), 200);
        assert_eq!(tat, 700);
    }

    #[test]
    fn time_going_backwards_gives_no_credit() {
        let g = gcra(1, 100, 2);
        let mut tat = 0;
        run(&g, &mut tat, 1000, 2);
        assert_eq!(tat, 1200);
        // Clock jumps back 500 ns: the backlog grows, nothing is admitted.
        let d = run(&g, &mut tat, 500, 1);
        assert!(!d.is_allowed());
        assert_eq!(d.reset_after_ns(), 700);
        assert_eq!(d.remaining(), 0);
        assert_eq!(d.retry_after_ns(), Some(600));
        assert_eq!(tat, 1200);
        // Back to the original time: exactly as if the jump never happened.
        assert!(!run(&g, &mut tat, 1000, 1).is_allowed());
        assert!(run(&g, &mut tat, 1100, 1).is_allowed());
    }

    #[test]
    fn saturation_at_the_horizon() {
        let g = gcra(1, 100, 2);
        let mut tat = 0;
        // Right at the edge: now + 100 still fits.
        let d = run(&g, &mut tat, u64::MAX - 100, 1);
        assert!(d.is_allowed());
        assert_eq!(tat, u64::MAX);
        // The next would need a TAT past u64::MAX: denied, no wait helps.
        let d = run(&g, &mut tat, u64::MAX - 100, 1);
        assert!(!d.is_allowed());
        assert_eq!(d.retry_after(), None);
        // Denied by the formula, and admitting it later would need a TAT past the horizon.
        let d = run(&g, &mut tat, u64::MAX - 100, 2);
        assert!(!d.is_allowed());
        assert_eq!(d.retry_after(), None);
        let d = run(&g, &mut tat, u64::MAX, 1);
        assert!(!d.is_allowed());
        assert_eq!(d.retry_after(), None);
        assert_eq!(tat, u64::MAX);
        // Largest interval and burst: no overflow anywhere.
        let g = Gcra::new(
            Quota::new(1, Duration::from_nanos(u64::MAX))
                .gcra_params()
                .unwrap(),
        );
        let mut tat = 0;
        assert!(run(&g, &mut tat, 0, 1).is_allowed());
        assert_eq!(tat, u64::MAX);
        let d = run(&g, &mut tat, 0, u32::MAX);
        assert!(!d.is_allowed());
        assert_eq!(d.retry_after(), None);
    }

    #[test]
    fn idle_means_tat_not_after_now() {
        let g = gcra(1, 100, 2);
        assert!(g.is_idle(0, 0));
        assert!(g.is_idle(100, 100));
        assert!(!g.is_idle(101, 100));
    }
}
