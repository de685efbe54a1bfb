//! A sequence lock over four `u64` words: many lock-free readers, one writer at a time.
//!
//! Writers make the sequence number odd (the compare-and-swap that makes it odd is the writer
//! lock), store the words, and make it even again. Readers load it, the words, and it again;
//! the copy is consistent iff both loads saw the same even number, otherwise they retry.
//! `loom-tests/tests/setting.rs` model-checks this through the limiters' `set_quota`.

use super::{back_off, fence, AtomicBool, AtomicU64, Ordering};

/// Four words that change together, read without a lock.
pub(crate) struct SeqLock {
    seq: AtomicU64,
    words: [AtomicU64; 4],
}

impl SeqLock {
    pub(crate) fn new(words: [u64; 4]) -> Self {
        Self {
            seq: AtomicU64::new(0),
            words: words.map(AtomicU64::new),
        }
    }

    /// A consistent copy of the words, passed through `accept`; retried while a write is in
    /// progress, while the copy is torn, or while `accept` refuses it (`None`).
    #[inline]
    pub(crate) fn read<T>(&self, accept: impl Fn([u64; 4]) -> Option<T>) -> T {
        loop {
            // Acquire: pairs with the Release store that ended a write, so that the words
            // loaded below are no older than that write's.
            let before = self.seq.load(Ordering::Acquire);
            // Relaxed: whether these values belong together is decided by the check below.
            let words = [0, 1, 2, 3].map(|i| self.words[i].load(Ordering::Relaxed));
            // Acquire fence: orders the word loads above before the second load of `seq`. If
            // any of them read a value stored by a write that began after `before`, this fence
            // synchronises with that write's Release fence, so the second load sees its odd
            // (or a later) number and the copy is discarded.
            fence(Ordering::Acquire);
            // Relaxed: ordered by the fence above.
            let after = self.seq.load(Ordering::Relaxed);
            if before == after && before % 2 == 0 {
                if let Some(value) = accept(words) {
                    return value;
                }
            }
            back_off();
        }
    }

    /// Replaces the words; concurrent writers are serialised, the last to take the lock wins.
    pub(crate) fn write(&self, values: [u64; 4]) {
        // Take the writer's turn: make `seq` odd from an even value.
        let mut seq = self.seq.load(Ordering::Relaxed);
        loop {
            if seq % 2 == 0 {
                // Acquire on success: the previous write's words (published by its Release
                // store of `seq`, which this reads) happen before ours, so ours come later in
                // each word's modification order. Relaxed on failure: we try again.
                match self.seq.compare_exchange_weak(
                    seq,
                    seq + 1,
                    Ordering::Acquire,
                    Ordering::Relaxed,
                ) {
                    Ok(_) => break,
                    Err(actual) => seq = actual,
                }
            } else {
                back_off();
                // Relaxed: only a hint of when to try; the compare-and-swap decides.
                seq = self.seq.load(Ordering::Relaxed);
            }
        }
        // Release fence: a reader whose word loads see any of the stores below synchronises
        // with it through its Acquire fence, and then sees `seq` odd (see `read`).
        fence(Ordering::Release);
        for (word, value) in self.words.iter().zip(values) {
            // Relaxed: published by the fences and the Release store below.
            word.store(value, Ordering::Relaxed);
        }
        // Release: a reader that loads this even number (Acquire) sees all four words.
        self.seq.store(seq + 2, Ordering::Release);
    }
}

/// A flag raised once, publishing what was written before it was raised.
pub(crate) struct Flag(AtomicBool);

impl Flag {
    pub(crate) fn new() -> Self {
        Self(AtomicBool::new(false))
    }

    /// Whether the flag is raised.
    #[inline(always)]
    pub(crate) fn is_raised(&self) -> bool {
        // Acquire pairs with the Release in `raise`: a reader that sees the flag raised also
        // sees what was stored before it was raised.
        self.0.load(Ordering::Acquire)
    }

    /// Raises the flag, after the writes it publishes.
    pub(crate) fn raise(&self) {
        // Release: see `is_raised`.
        self.0.store(true, Ordering::Release);
    }
}
