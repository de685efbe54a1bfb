//! What a keyed check's compare-and-swap loop runs of an algorithm: [`Steps`], implemented by
//! [`Algorithm`] (every kind, dispatched inside the loop) and by GCRA and each window counter
//! alone.
//!
//! A keyed check is generic over it so that a limiter built with GCRA or a window counter runs
//! a copy of the check laid out for that kind only: its step and its admission's decision
//! inlined into the loop, with no dispatch on the kind there. The kind is known when the
//! limiter is built and never changes (only GCRA's parameters change at runtime), so the check
//! picks its copy with one branch on the built kind. Inlining a window's step into the copy
//! that dispatches instead made every algorithm's check slower; a stock and warm-up keep that
//! copy.

use super::{Algorithm, FixedWindow, Gcra, Outcome, SlidingWindow};
use crate::decision::Decision;

/// An algorithm as a keyed check's loop sees it (see the module docs).
pub(crate) trait Steps {
    /// The word to write for `n` units at `now` on `word`: [`Algorithm::next_word`].
    fn next_word(&self, word: u64, now: u64, n: u32) -> Option<u64>;

    /// What the check carries out of its loop: [`Outcome::of`]; for a kind whose check's
    /// decision follows from the written word alone (GCRA, the window counters), the word and
    /// what was written.
    #[inline(always)]
    fn outcome(&self, word: u64, next: Option<u64>) -> Outcome {
        Outcome::written(word, next)
    }

    /// The check's decision from what its loop gave: [`Outcome::decision`].
    fn decision(&self, outcome: Outcome, now: u64, n: u32) -> Decision;

    /// The decision of a step run on `word` that asked to write `next`, for a loop that
    /// carries both out: [`decision_after`](super::decision_after).
    #[inline(always)]
    fn after(&self, word: u64, next: Option<u64>, now: u64, n: u32) -> Decision {
        self.decision(self.outcome(word, next), now, n)
    }

    /// The decision on `word` with nothing written: [`Algorithm::decide`].
    fn decide(&self, word: u64, now: u64, n: u32) -> Decision;
}

impl Steps for Algorithm {
    #[inline(always)]
    fn next_word(&self, word: u64, now: u64, n: u32) -> Option<u64> {
        Algorithm::next_word(self, word, now, n)
    }

    #[inline(always)]
    fn outcome(&self, word: u64, next: Option<u64>) -> Outcome {
        Outcome::of(self, word, next)
    }

    #[inline(always)]
    fn decision(&self, outcome: Outcome, now: u64, n: u32) -> Decision {
        outcome.decision(self, now, n)
    }

    #[inline(always)]
    fn after(&self, word: u64, next: Option<u64>, now: u64, n: u32) -> Decision {
        super::decision_after(self, word, next, now, n)
    }

    #[inline(always)]
    fn decide(&self, word: u64, now: u64, n: u32) -> Decision {
        Algorithm::decide(self, word, now, n)
    }
}

/// The steps of a window counter, as its own check's loop runs them: the common path inlined,
/// a denial's decision out of line.
macro_rules! window_steps {
    ($($counter:ident),*) => {$(
        impl Steps for $counter {
            #[inline(always)]
            fn next_word(&self, word: u64, now: u64, n: u32) -> Option<u64> {
                self.next_word_inline(word, now, n)
            }

            #[inline(always)]
            fn decision(&self, outcome: Outcome, now: u64, n: u32) -> Decision {
                match outcome.admitted() {
                    Some(written) => self.admitted_inline(written, now),
                    None => self.decide_cold(outcome.word(), now, n),
                }
            }

            #[inline(always)]
            fn decide(&self, word: u64, now: u64, n: u32) -> Decision {
                self.decide_cold(word, now, n)
            }
        }
    )*};
}

window_steps!(FixedWindow, SlidingWindow);

/// GCRA's steps, as its own check's loop runs them: all inlined, a denial's decision too (as
/// in the copy that dispatches).
impl Steps for Gcra {
    #[inline(always)]
    fn next_word(&self, word: u64, now: u64, n: u32) -> Option<u64> {
        Gcra::next_word(self, word, now, n)
    }

    #[inline(always)]
    fn decision(&self, outcome: Outcome, now: u64, n: u32) -> Decision {
        match outcome.admitted() {
            Some(written) => self.admitted(written, now),
            None => self.step(outcome.word(), now, n).0,
        }
    }

    #[inline(always)]
    fn decide(&self, word: u64, now: u64, n: u32) -> Decision {
        self.step(word, now, n).0
    }
}
