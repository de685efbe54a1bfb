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

use super::Step;
use crate::decision::Decision;
use crate::quota::GcraParams;

/// GCRA parameters, validated at build time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Gcra {
    interval: NonZeroU64,
    /// `DVT`: admissions that leave the TAT at most this far ahead act at once.
    tolerance: u64,
    /// `DVT + T * queue`: admissions that leave the TAT at most this far ahead are admitted,
    /// delayed by how far they overshoot `DVT`.
    ceiling: u64,
    /// `burst + queue`, the decisions' limit.
    limit: u32,
}

impl Gcra {
    /// The policy this configuration enforces (see [`crate::Policy`]).
    pub(crate) fn policy(&self) -> crate::policy::Policy {
        let t = self.interval.get();
        crate::policy::Policy::new(
            crate::policy::PolicyKind::Gcra,
            self.limit,
            Some(std::time::Duration::from_nanos(
                t.saturating_mul(u64::from(self.limit)),
            )),
            Some(std::time::Duration::from_nanos(t)),
        )
    }

    pub(crate) fn new(p: GcraParams) -> Self {
        Self {
            interval: p.interval,
            tolerance: p.tolerance,
            ceiling: p.ceiling,
            limit: p.limit,
        }
    }

    /// The configuration as four words, for a tear-free runtime copy
    /// ([`crate::limiter::setting`]); [`from_words`](Self::from_words) reverses it.
    #[inline]
    pub(crate) fn to_words(self) -> [u64; 4] {
        [
            self.interval.get(),
            self.tolerance,
            self.ceiling,
            u64::from(self.limit),
        ]
    }

    /// The configuration [`to_words`](Self::to_words) gave; `None` for words that no
    /// configuration gives (a zero interval, a limit beyond `u32`).
    #[inline]
    pub(crate) fn from_words([interval, tolerance, ceiling, limit]: [u64; 4]) -> Option<Self> {
        Some(Self {
            interval: NonZeroU64::new(interval)?,
            tolerance,
            ceiling,
            limit: u32::try_from(limit).ok()?,
        })
    }

    /// Decides `n` units at `now` against the stored `tat`, queueing up to the configured
    /// queue.
    #[inline(always)]
    pub(crate) fn step(&self, tat: u64, now: u64, n: u32) -> Step {
        self.step_within(tat, now, n, self.ceiling)
    }

    /// The TAT [`step`](Self::step) writes, without its decision: `Some` iff `n > 0` units
    /// fit the burst and the tolerance at `now`, before the representable horizon.
    #[inline(always)]
    pub(crate) fn next_word(&self, tat: u64, now: u64, n: u32) -> Option<u64> {
        if n == 0 {
            return None;
        }
        let need = u64::from(n).checked_mul(self.interval.get())?;
        if need > self.tolerance {
            return None;
        }
        let ahead = tat.saturating_sub(now).checked_add(need)?;
        if ahead > self.ceiling {
            return None;
        }
        now.checked_add(ahead)
    }

    /// Decides `n` units at `now`, admitting them if the TAT afterwards is at most `ceiling`
    /// ahead of `now`; the admission is delayed by how far it overshoots the tolerance. A
    /// reservation passes `tolerance + max_wait`.
    #[inline(always)]
    pub(crate) fn step_within(&self, tat: u64, now: u64, n: u32, ceiling: u64) -> Step {
        let t = self.interval.get();
        let backlog = tat.saturating_sub(now);
        // `None` where the value is past `u64::MAX`: then it exceeds every tolerance and
        // ceiling too (plain u64 arithmetic with overflow flags, cheaper than u128's).
        let need = u64::from(n).checked_mul(t);
        let ahead = need.and_then(|need| backlog.checked_add(need));
        // Units admitted together act together, so more than the burst never fits, however
        // long the caller would wait (a queue delays requests; it does not widen the burst).
        let fits = need.is_some_and(|need| need <= self.tolerance);
        if let Some(ahead) = ahead.filter(|&ahead| ahead <= ceiling && fits) {
            if let Some(new_tat) = now.checked_add(ahead) {
                let write = if n == 0 { None } else { Some(new_tat) };
                return (self.allowed_ahead(ahead), write);
            }
            // Past the representable horizon: fail closed.
            return (
                Decision::deny(self.limit, 0, self.interval, None, backlog),
                None,
            );
        }
        // Waiting `ahead - ceiling` admits the request with TAT `now + ahead`, if `n` fits the
        // burst at all; if that TAT is past the horizon no wait helps (it would be denied there with
        // no retry).
        let retry = match ahead {
            // Not admitted although `n` fits: `ahead > ceiling`.
            Some(ahead) if fits => now.checked_add(ahead).map(|_| ahead - ceiling),
            // Past `u64::MAX` ahead, so past the horizon.
            _ => None,
        };
        (
            Decision::deny(
                self.limit,
                self.ceiling.saturating_sub(backlog),
                self.interval,
                retry,
                backlog,
            ),
            None,
        )
    }

    /// The decision of an admission that [`step`](Self::step) made at `now` by writing
    /// `new_tat`: the same decision `step` returned with that write (which is `now + ahead`), in
    /// a few instructions instead of a second run of the step.
    #[inline(always)]
    pub(crate) fn admitted(&self, new_tat: u64, now: u64) -> Decision {
        self.allowed_ahead(new_tat.saturating_sub(now))
    }

    /// The decision of an admission whose TAT ends up `ahead` ns after now (shared by
    /// [`step`](Self::step) and [`admitted`](Self::admitted)).
    #[inline(always)]
    fn allowed_ahead(&self, ahead: u64) -> Decision {
        Decision::allow_after(
            self.limit,
            self.ceiling.saturating_sub(ahead),
            self.interval,
            ahead.saturating_sub(self.tolerance),
            ahead,
        )
    }

    /// The ceiling for a reservation that accepts waiting up to `max_wait_ns`. A quota with a
    /// queue bounds reservations by it (the wait only narrows it), as nginx's `burst` bounds
    /// every request; a quota without one lets the wait alone decide (Guava's `acquire`).
    #[inline]
    pub(crate) fn reserve_ceiling(&self, max_wait_ns: u64) -> u64 {
        let wanted = self.tolerance.saturating_add(max_wait_ns);
        if self.ceiling > self.tolerance {
            wanted.min(self.ceiling)
        } else {
            wanted
        }
    }

    /// Gives back up to `n` units: the TAT moves back by `n * T`, but never below `now` (a
    /// fresh key's budget is the most any key can have). Returns the new TAT, or `None` when
    /// there is nothing to give back.
    #[inline]
    pub(crate) fn refund(&self, tat: u64, now: u64, n: u32) -> Option<u64> {
        let back =
            u64::try_from(u128::from(n) * u128::from(self.interval.get())).unwrap_or(u64::MAX);
        let new = tat.saturating_sub(back).max(now);
        (new < tat).then_some(new)
    }

    /// Undoes an admission of `n` units made at `at` that moved the TAT from `before` to
    /// `after`, now that the TAT is `tat`. Returns the new TAT, or `None` when nothing can be
    /// given back.
    ///
    /// Two cases, told apart by whether any admitted place is still waiting to act
    /// (`tat > now + DVT`: a queue or a reservation scheduled someone ahead):
    ///
    /// * **Nobody is waiting** (every admission so far acted when it was admitted, as with any
    ///   quota without a queue): the admission gives back `g = min(n·T, at + n·T - now)`, the
    ///   part of its `n·T` that the clock has not yet eaten since `at`, *whatever was admitted
    ///   since*. On a frozen clock that is all of `n·T`: exact.
    /// * **Someone is waiting** for a place in the schedule: only the last place can be freed
    ///   (`tat == after`: back to `before`, never below `now`). Freeing a place in the middle
    ///   would give a newcomer the same instant to act as the last one queued.
    ///
    /// Why the first case never admits more than the quota. Write `U(s)` for the units of the
    /// admissions made at clock readings `≥ s` and not given back. Every TAT this code writes
    /// satisfies `tat ≥ s + T·U(s)` for every reading `s` of such an admission (I):
    ///
    /// * an admission at `a` writes `max(tat, a) + m·T`: for `s ≤ a`, `U(s)` grows by `m` and
    ///   the TAT by at least `m·T`; for `s > a`, `U(s)` is unchanged and the TAT does not drop.
    ///   Its check `new_tat - a ≤ ceiling` then gives `U(s) ≤ (a - s + ceiling) / T` for every
    ///   `s ≤ a`: never more than the limit plus the elapsed time's worth over any interval
    ///   ending at `a`, counting only what was really admitted (I).
    /// * giving back `g` for our admission at `at`: for `s ≤ at`, `U(s)` drops by `n` and the TAT
    ///   by `g ≤ n·T`. For a later reading `at < s ≤ now`, `U(s)` is unchanged, and (I) at
    ///   `s = at` before the rollback says `tat ≥ at + n·T + T·U(s)` (our `n` units count in
    ///   `U(at)`), so `tat - g ≥ min(at + n·T, now) + T·U(s) ≥ s + T·U(s)`: (I) still holds.
    /// * clamping a TAT up to `now` (a fresh key, a refund's floor) only raises it.
    ///
    /// This needs `now` at least every reading since `at` (a clock that does not run
    /// backwards): `now` is taken as at least `at`, and a rollback whose clock reads `d` earlier
    /// than a check that ran in between can give back at most `d` of schedule beyond (I) (never
    /// more than `n·T`). A refund is outside (I) on purpose: it is the caller saying that
    /// admitted units were not used.
    #[inline]
    pub(crate) fn cancel(
        &self,
        tat: u64,
        now: u64,
        n: u32,
        (before, after, at): (u64, u64, u64),
    ) -> Option<u64> {
        let now = now.max(at);
        if tat > now.saturating_add(self.tolerance) {
            if tat != after {
                return None;
            }
            let new = before.max(now);
            return (new < tat).then_some(new);
        }
        let units = u128::from(n) * u128::from(self.interval.get());
        let unspent = (u128::from(at) + units).saturating_sub(u128::from(now));
        // `g <= tat - now`'s bound below keeps it in u64.
        let g = units.min(unspent).min(u128::from(tat));
        let new = (tat - g as u64).max(now);
        (new < tat).then_some(new)
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
    use crate::algorithm::{decision_after, run, Algorithm, Outcome};
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

    fn queued(count: u32, period_ns: u64, burst: u32, queue: u32) -> Gcra {
        Gcra::new(
            Quota::new(count, Duration::from_nanos(period_ns))
                .with_burst(burst)
                .with_queue(queue)
                .gcra_params()
                .unwrap(),
        )
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
    fn queue_delays_then_denies() {
        // T = 100, burst 2, queue 2: two at once, two delayed, then denied.
        let g = queued(1, 100, 2, 2);
        let mut tat = 0;
        let got: Vec<_> = (0..5)
            .map(|_| {
                let d = run(&g, &mut tat, 1000, 1);
                (d.is_allowed(), d.delay_ns(), d.remaining(), d.limit())
            })
            .collect();
        assert_eq!(
            got,
            [
                (true, 0, 3, 4),
                (true, 0, 2, 4),
                (true, 100, 1, 4),
                (true, 200, 0, 4),
                (false, 0, 0, 4)
            ]
        );
        assert_eq!(tat, 1400);
        let d = run(&g, &mut tat, 1000, 1);
        assert_eq!(d.retry_after_ns(), Some(100));
        // n = 2 (the burst) fits at once on a fresh key; n = 3 fits the ceiling but not the
        // burst, and a queue does not widen the burst: it never fits.
        let mut fresh = 0;
        let d = run(&g, &mut fresh, 0, 2);
        assert_eq!((d.is_allowed(), d.delay_ns()), (true, 0));
        let d = run(&g, &mut fresh, 0, 2);
        assert_eq!((d.is_allowed(), d.delay_ns()), (true, 200));
        let mut fresh = 0;
        let d = run(&g, &mut fresh, 0, 3);
        assert!(!d.is_allowed());
        assert_eq!(d.retry_after(), None);
    }

    #[test]
    fn reservation_ceiling_bounds_the_wait() {
        let g = gcra(1, 100, 1);
        let mut tat = 0;
        let ceiling = g.reserve_ceiling(250);
        let mut delays = vec![];
        for _ in 0..4 {
            let (d, w) = g.step_within(tat, 1000, 1, ceiling);
            delays.push(d.is_allowed().then(|| d.delay_ns()));
            if let Some(w) = w {
                tat = w;
            }
        }
        assert_eq!(delays, [Some(0), Some(100), Some(200), None]);
        assert_eq!(tat, 1300);
        assert_eq!(g.reserve_ceiling(u64::MAX), u64::MAX);
        // A configured queue bounds reservations; the wait only narrows it.
        let q = queued(1, 100, 2, 3);
        assert_eq!(q.reserve_ceiling(u64::MAX), 500);
        assert_eq!(q.reserve_ceiling(150), 350);
    }

    #[test]
    fn refund_gives_back_at_most_to_fresh() {
        let g = gcra(1, 100, 3);
        assert_eq!(g.refund(1300, 1000, 1), Some(1200));
        assert_eq!(g.refund(1300, 1000, 5), Some(1000));
        assert_eq!(g.refund(1000, 1000, 1), None);
        assert_eq!(g.refund(500, 1000, 1), None);
        assert_eq!(
            g.refund(u64::MAX, 0, u32::MAX),
            Some(u64::MAX - u64::from(u32::MAX) * 100)
        );
    }

    #[test]
    fn cancel_with_nobody_waiting_gives_back_the_unelapsed_part() {
        let g = gcra(1, 100, 3);
        // Admitted at 1000 (TAT 1000 -> 1100), then two more at 1000 (TAT 1300): cancelling the
        // first on the frozen clock gives back its whole 100, although it is not the last.
        assert_eq!(g.cancel(1300, 1000, 1, (1000, 1100, 1000)), Some(1200));
        // 40 ns later only 60 of it is unspent.
        assert_eq!(g.cancel(1300, 1040, 1, (1000, 1100, 1000)), Some(1240));
        // Its whole slot elapsed: nothing, even though the TAT is ahead (later admissions).
        assert_eq!(g.cancel(1300, 1100, 1, (1000, 1100, 1000)), None);
        // A clock behind the admission counts as the admission's own reading.
        assert_eq!(g.cancel(1300, 900, 1, (1000, 1100, 1000)), Some(1200));
        // Never below now.
        assert_eq!(g.cancel(1100, 1000, 2, (900, 1100, 900)), Some(1000));
        // Idle: nothing.
        assert_eq!(g.cancel(1000, 1000, 1, (900, 1000, 900)), None);
    }

    #[test]
    fn cancel_with_someone_waiting_frees_only_the_last_place() {
        let g = queued(1, 100, 1, 3);
        // TAT 1300 at now 1000 is beyond DVT = 100: places are waiting to act.
        // Ours is the last (1200 -> 1300): back to 1200.
        assert_eq!(g.cancel(1300, 1000, 1, (1200, 1300, 1000)), Some(1200));
        // Someone was scheduled behind us: their place depends on ours; nothing comes back.
        assert_eq!(g.cancel(1400, 1000, 1, (1200, 1300, 1000)), None);
        assert_eq!(g.cancel(1350, 1000, 1, (1200, 1300, 1000)), None);
    }

    #[test]
    fn admitted_equals_the_steps_decision() {
        for g in [gcra(1, 100, 3), queued(1, 100, 2, 2), gcra(7, 1_000, 1)] {
            let alg = Algorithm::Gcra(g);
            for tat in [0, 900, 1_000, 1_050, 1_150, 1_300] {
                for n in 0..=4 {
                    let (d, next) = g.step(tat, 1_000, n);
                    if let Some(new_tat) = next {
                        assert_eq!(g.admitted(new_tat, 1_000), d, "tat {tat} n {n}");
                    }
                    assert_eq!(decision_after(&alg, tat, next, 1_000, n), d);
                    assert_eq!(Outcome::of(&alg, tat, next).decision(&alg, 1_000, n), d);
                }
            }
        }
    }

    #[test]
    fn words_round_trip() {
        let g = queued(3, 1_000, 2, 5);
        assert_eq!(Gcra::from_words(g.to_words()), Some(g));
        assert_eq!(Gcra::from_words([0, 1, 1, 1]), None);
        assert_eq!(Gcra::from_words([1, 1, 1, u64::MAX]), None);
    }

    #[test]
    fn idle_means_tat_not_after_now() {
        let g = gcra(1, 100, 2);
        assert!(g.is_idle(0, 0));
        assert!(g.is_idle(100, 100));
        assert!(!g.is_idle(101, 100));
    }
}
