//! The one compare-and-swap driver every algorithm shares.
//!
//! A [`Cell`] is a single `AtomicU64` holding one key's whole limiter state. Algorithms are
//! pure functions from the current word to a decision and, optionally, a new word; the cell
//! applies such a function atomically:
//!
//! 1. load the word;
//! 2. run the step on it;
//! 3. if the step wants no write (a denial, a peek) or the new word equals the old one,
//!    return without touching the cache line for writing;
//! 4. otherwise compare-and-swap; if another thread got there first, run the step again on
//!    the word it wrote and go back to 3.
//!
//! Because every admission is one successful CAS from the exact word its decision was computed
//! on, admissions on a cell are totally ordered by the word's modification order and no unit
//! of capacity can be spent twice.

use std::convert::Infallible;

use crate::sync::{AtomicU64, Ordering};

/// One packed limiter state, updated only by compare-and-swap.
#[derive(Debug)]
pub(crate) struct Cell {
    word: AtomicU64,
}

impl Cell {
    /// A cell holding `word`.
    #[inline]
    pub(crate) fn new(word: u64) -> Self {
        Self {
            word: AtomicU64::new(word),
        }
    }

    /// The current word.
    #[inline]
    pub(crate) fn load(&self) -> u64 {
        // Relaxed: the word is self-contained; no other memory is published through it, so
        // there is nothing to synchronise with. Read-read coherence still guarantees this load
        // returns a value no older than any this thread has already seen in the cell.
        self.word.load(Ordering::Relaxed)
    }

    /// Applies `step` atomically and returns its result.
    ///
    /// `step` maps the current word to `(result, Some(new_word))` to write, or
    /// `(result, None)` to write nothing. It may run several times under contention and must be
    /// a pure function of its argument (plus values captured before the call).
    #[inline(always)]
    pub(crate) fn update<R>(&self, step: impl FnMut(u64) -> (R, Option<u64>)) -> R {
        let swap = |current, next| -> Swap<Infallible> {
            // Relaxed on success and failure: the CAS itself is what makes the update atomic
            // (a read-modify-write always reads the latest value in the word's modification
            // order), and the word carries no other data that a reader would need to see.
            // On failure we get the value that beat us and recompute from it.
            match self.word.compare_exchange_weak(
                current,
                next,
                Ordering::Relaxed,
                Ordering::Relaxed,
            ) {
                Ok(_) => Swap::Done,
                Err(actual) => Swap::Retry(actual),
            }
        };
        match drive(self.load(), step, swap) {
            Ok(result) => result,
            Err(never) => match never {},
        }
    }
}

/// What one compare-and-swap of a [`drive`] loop did.
pub(crate) enum Swap<E> {
    /// The new word is written.
    Done,
    /// Another thread wrote this word first: run the step again on it.
    Retry(u64),
    /// The word is gone (a table slot that changed owner): stop, with this.
    Abort(E),
}

/// The compare-and-swap loop of every state word, a [`Cell`]'s or a table slot's (see the
/// module docs): runs `step` on `current`, returns at once if it writes nothing (or the same
/// word), else tries `swap(current, next)`, and on [`Swap::Retry`] runs `step` again on the
/// word that won. `swap` is the only part that differs between the homes of a word (a 64-bit
/// CAS on a cell; a 16-byte CAS on a slot that also checks the key's fingerprint).
#[inline(always)]
pub(crate) fn drive<R, E>(
    mut current: u64,
    mut step: impl FnMut(u64) -> (R, Option<u64>),
    mut swap: impl FnMut(u64, u64) -> Swap<E>,
) -> Result<R, E> {
    loop {
        let (result, next) = step(current);
        let next = match next {
            Some(next) if next != current => next,
            // Nothing to write: the result was computed on a value the word really held.
            _ => return Ok(result),
        };
        match swap(current, next) {
            Swap::Done => return Ok(result),
            Swap::Retry(actual) => current = actual,
            Swap::Abort(e) => return Err(e),
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::{drive, Cell, Swap};

    #[test]
    fn update_writes_only_when_asked() {
        let cell = Cell::new(7);
        let r = cell.update(|w| (w * 2, None));
        assert_eq!(r, 14);
        assert_eq!(cell.load(), 7);
        let r = cell.update(|w| (w + 1, Some(w + 1)));
        assert_eq!(r, 8);
        assert_eq!(cell.load(), 8);
    }

    #[test]
    fn drive_retries_on_the_winning_word_and_stops_on_abort() {
        // The first swap loses to 10, the second to 11, the third is aborted.
        let mut swaps = vec![Swap::Abort("gone"), Swap::Retry(11), Swap::Retry(10)];
        let mut seen = vec![];
        let r = drive(
            1,
            |w| {
                seen.push(w);
                (w, Some(w + 1))
            },
            |_, _| swaps.pop().unwrap(),
        );
        assert_eq!((r, seen), (Err("gone"), vec![1, 10, 11]));
        // A step that writes nothing (or the same word) swaps nothing.
        let r: Result<u64, ()> = drive(5, |w| (w, Some(w)), |_, _| unreachable!());
        assert_eq!(r, Ok(5));
    }

    #[test]
    fn concurrent_increments_are_not_lost() {
        let cell = Cell::new(0);
        std::thread::scope(|s| {
            for _ in 0..4 {
                s.spawn(|| {
                    for _ in 0..10_000 {
                        cell.update(|w| ((), Some(w + 1)));
                    }
                });
            }
        });
        assert_eq!(cell.load(), 40_000);
    }
}
