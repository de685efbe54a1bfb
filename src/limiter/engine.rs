//! The operations of the direct and the keyed limiter, written once.
//!
//! Both limiters do the same thing around a different way of reaching a word: the direct
//! limiter has one [`Cell`]; the keyed limiter finds (or creates) one key's cell in its store.
//! [`Held`] and [`Engine`] are that difference, and their provided methods are the operations:
//! peek, cancel and refund need only a word that may exist ([`Held`]); reserve, charge,
//! `check_with`, restock and `set_stock` may create it ([`Engine`]). The facades' public methods
//! forward here. The hot check stays in each facade (see [`Cell::check`] and
//! `KeyedLimiter::check_at`): its code layout is measured instruction by instruction.
//!
//! Also here: [`Cell::check`], the check of one cell under an algorithm (the cell's
//! compare-and-swap loop running the algorithm's step), kept beside the limiters so that the
//! cell itself knows no algorithm.

use std::time::Duration;

use crate::algorithm::decision_after;
use crate::algorithm::{Algorithm, Gcra};
use crate::decision::Decision;
use crate::error::ConfigError;
use crate::limiter::setting::Setting;
use crate::quota::Quota;
use crate::reservation::Reservation;
use crate::sync::cell::Cell;

/// The word one call of a limiter works on, when it may not exist yet: what peek, cancel and
/// refund need (none of them creates a key).
pub(crate) trait Held {
    /// The limiter's algorithm.
    fn setting(&self) -> &Setting;

    /// The time for a decision: the clock, unless the algorithm ignores time (stock).
    fn now(&self) -> u64;

    /// The word, or the one it would start from.
    fn word(&self) -> u64;

    /// Applies `step` to the word if it exists (a direct limiter's always does); `None` if not.
    fn update_existing<R>(&self, step: impl Fn(u64) -> (R, Option<u64>)) -> Option<R>;

    /// The decision a request for `n` units would get now, consuming nothing.
    #[inline]
    fn peek_n(&self, n: u32) -> Decision {
        let now = self.now();
        self.setting().load().decide(self.word(), now, n)
    }

    /// The decision a request would get now (with its `remaining` before it), consuming
    /// nothing.
    #[inline]
    fn peek(&self) -> Decision {
        let now = self.now();
        self.setting().load().peek(self.word(), now)
    }

    /// Gives back the units of `reservation` that are provably unspent.
    fn cancel(&self, reservation: Reservation) -> bool {
        if !reservation.holds() {
            return false;
        }
        let algorithm = self.setting().load();
        let now = self.now();
        self.update_existing(|w| {
            let write = algorithm.cancel(w, now, &reservation);
            (write.is_some(), write)
        })
        .unwrap_or(false)
    }

    /// Gives back `n` admitted units, never beyond a fresh state.
    fn refund(&self, n: u32) -> bool {
        let algorithm = self.setting().load();
        let now = self.now();
        self.update_existing(|w| {
            let write = algorithm.refund(w, now, n);
            (write.is_some(), write)
        })
        .unwrap_or(false)
    }
}

/// The word one call of a limiter works on, created when a step writes on a fresh state: what
/// checks, reservations and the stock operations need.
pub(crate) trait Engine: Held {
    /// Applies `step` to the word, creating it if `step` writes on the fresh state. `None` when
    /// the word is new and the store has no room for it (only when `capped`, or when a bounded
    /// table has no slot left even for an operator action).
    fn apply<R>(&self, now: u64, step: impl Fn(u64) -> (R, Option<u64>), capped: bool)
        -> Option<R>;

    /// The decision for a new word the store had no room for (see [`apply`](Self::apply)):
    /// refused, or `decide` on a fresh word that is not stored.
    fn full(&self, decide: impl Fn(u64) -> Decision) -> Decision;

    /// The error of an operator action that found no room (see [`apply`](Self::apply)).
    fn store_full(&self) -> ConfigError;

    /// The check of `n` units under `algorithm`, now.
    fn check_on(&self, algorithm: &Algorithm, n: u32) -> Decision;

    /// Reserves `n` units, admitted now with a delay if their turn comes within `max_wait`.
    fn reserve(&self, n: u32, max_wait: Duration) -> Reservation {
        let algorithm = self.setting().load();
        let now = self.now();
        let wait = crate::quota::saturating_ns(max_wait);
        let step = |w| {
            let write = algorithm.step_within(w, now, n, wait).1;
            ((w, write), write)
        };
        match self.apply(now, step, true) {
            Some((before, after)) => Reservation::new(
                algorithm.step_within(before, now, n, wait).0,
                n,
                before,
                after,
            ),
            None => {
                let decision = self.full(|w| algorithm.step_within(w, now, n, wait).0);
                Reservation::new(decision, n, 0, None)
            }
        }
    }

    /// A check of `n` units with the limiter's own queue, keeping what
    /// [`cancel`](Held::cancel) needs.
    #[inline]
    fn charge(&self, n: u32) -> Reservation {
        // As a check: the built algorithm by reference while no runtime change was made (no
        // copy of it), the current one through an out-of-line copy after one.
        match self.setting().unchanged() {
            Some(algorithm) => self.charge_on(algorithm, n),
            None => self.charge_changed(n),
        }
    }

    /// [`charge`](Self::charge) after a runtime quota change.
    #[cold]
    #[inline(never)]
    fn charge_changed(&self, n: u32) -> Reservation {
        self.charge_on(&self.setting().load(), n)
    }

    /// [`charge`](Self::charge) under `algorithm`.
    #[inline(always)]
    fn charge_on(&self, algorithm: &Algorithm, n: u32) -> Reservation {
        let now = self.now();
        // The loop carries the words before and after (two registers; `after` is `before`
        // when the step writes nothing), and the decision is built once at the end, as a check
        // builds it. `decision_after` on the word the step wrote is `decide` on the word before
        // without running a GCRA admission's step a second time; when the words are equal,
        // `decide` on `before` is taken (always right).
        let step = move |w| {
            let write = algorithm.next_word(w, now, n);
            ((w, write.unwrap_or(w)), write)
        };
        match self.apply(now, step, true) {
            Some((before, after)) => {
                let wrote = (after != before).then_some(after);
                let decision = decision_after(algorithm, before, wrote, now, n);
                Reservation::new(decision, n, before, Some(after))
            }
            // Untracked or refused: nothing to cancel.
            None => Reservation::new(self.full(|w| algorithm.decide(w, now, n)), n, 0, None),
        }
    }

    /// A check of `n` units against `quota` instead of the limiter's own (GCRA only).
    fn check_with(&self, quota: &Quota, n: u32) -> Result<Decision, ConfigError> {
        self.setting().kind().gcra("check_with")?;
        let algorithm = Algorithm::Gcra(Gcra::new(quota.gcra_params()?));
        Ok(self.check_on(&algorithm, n))
    }

    /// Adds `units` to the stock (saturating); the units now remaining.
    fn restock(&self, units: u64) -> Result<u64, ConfigError> {
        let stock = *self.setting().kind().stock("restock")?;
        self.apply(self.now(), |word| stock.restock(word, units), false)
            .ok_or_else(|| self.store_full())
    }

    /// Sets the remaining stock to `units`.
    fn set_stock(&self, units: u64) -> Result<(), ConfigError> {
        let word = self.setting().kind().stock("set_stock")?.word(units);
        self.apply(self.now(), |_| ((), Some(word)), false)
            .ok_or_else(|| self.store_full())
    }
}

impl Cell {
    /// A check of `n` units at `now`: one [`update`](Self::update) running `algorithm`'s step,
    /// then the decision, built once from the word it was taken on and the word written (see
    /// `Algorithm::decide` and `decision_after`). The check loop of the direct and the striped
    /// limiter. The keyed map store keeps its own copy of these lines in `KeyedLimiter::check_at`:
    /// routed through here, LLVM laid that function out differently and the *table's* check
    /// grew (see BENCHMARKS.md, "Instruction counts").
    #[inline(always)]
    pub(crate) fn check(&self, algorithm: &Algorithm, now: u64, n: u32) -> Decision {
        if let Algorithm::Gcra(g) = algorithm {
            return self.check_gcra(g, now, n);
        }
        // `move`: the closure holds copies of `now` and `n`, so that no address of theirs
        // escapes and LLVM keeps them in registers (and folds `n` when it is a constant).
        let (word, next) = self.update(move |w| {
            let next = algorithm.next_word(w, now, n);
            ((w, next), next)
        });
        decision_after(algorithm, word, next, now, n)
    }

    /// [`check`](Self::check) for GCRA, with the algorithm's kind already known: an admission's
    /// decision comes from the TAT it wrote, a denial's from the step on the TAT it read,
    /// without testing the kind again after the loop.
    #[inline(always)]
    pub(crate) fn check_gcra(&self, gcra: &Gcra, now: u64, n: u32) -> Decision {
        let (word, next) = self.update(move |w| {
            let next = gcra.step(w, now, n).1;
            ((w, next), next)
        });
        match next {
            Some(new_tat) => gcra.admitted(new_tat, now),
            None => gcra.step(word, now, n).0,
        }
    }
}
