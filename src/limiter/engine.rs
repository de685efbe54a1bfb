//! The check of one cell under an algorithm: the cell's compare-and-swap loop
//! ([`Cell::update`]) running the algorithm's step. Kept here, beside the limiters, so that the
//! cell itself knows no algorithm.

use crate::algorithm::gcra::decision_after;
use crate::algorithm::{Algorithm, Gcra};
use crate::decision::Decision;
use crate::sync::cell::Cell;

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
            let next = algorithm.step(w, now, n).1;
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
