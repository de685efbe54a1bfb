//! A limiter's algorithm, changeable at runtime without slowing the checks of limiters whose
//! quota never changes.
//!
//! The algorithm a limiter was built with stays in a plain field. Only GCRA can change at
//! runtime (`set_quota`), and only its four parameter words: those live in a small seqlock
//! beside it. The first `set_quota` raises a flag; from then on checks read the current
//! parameters from the seqlock (four relaxed loads between two loads of its sequence number:
//! no write, no lock, no copy of the whole algorithm). Until then a check costs one load of a
//! read-only flag more than it would with no runtime change at all.
//!
//! A reader never sees a mix of two quotas: it retries until the sequence number was even (no
//! write in progress) and unchanged around its four loads. `loom-tests/tests/setting.rs`
//! model-checks this (the words and the sequence number are loom atomics under `cfg(loom)`).

use crate::algorithm::{Algorithm, Gcra};

use crate::sync::{Flag, SeqLock};

/// The algorithm of one limiter.
pub(crate) struct Setting {
    built: Algorithm,
    changed: Flag,
    /// The current GCRA parameters ([`Gcra::to_words`]).
    current: SeqLock,
}

impl Setting {
    pub(crate) fn new(algorithm: Algorithm) -> Self {
        // Algorithms other than GCRA never change; their words (a valid GCRA configuration
        // all the same: interval 1) are never read.
        let words = match algorithm {
            Algorithm::Gcra(g) => g.to_words(),
            _ => [1, 0, 0, 0],
        };
        Self {
            built: algorithm,
            changed: Flag::new(),
            current: SeqLock::new(words),
        }
    }

    /// The algorithm as built, while no runtime change has been made; `None` after one (read
    /// [`load`](Self::load) then).
    #[inline(always)]
    pub(crate) fn unchanged(&self) -> Option<&Algorithm> {
        // A reader that sees the flag raised also sees the configuration stored before it
        // (the flag publishes it), so it never reads the built algorithm after having been
        // told it is stale. A reader that has not seen the flag yet uses the built one: the
        // change is not visible to it yet, as with any concurrent update.
        if self.changed.is_raised() {
            None
        } else {
            Some(&self.built)
        }
    }

    /// The current algorithm.
    #[inline]
    pub(crate) fn load(&self) -> Algorithm {
        match self.unchanged() {
            Some(a) => *a,
            // Words of one write only, so always a valid configuration (`None` cannot
            // happen; it would be retried like a torn copy).
            None => Algorithm::Gcra(self.current.read(Gcra::from_words)),
        }
    }

    /// [`load`](Self::load), kept out of line: the path of checks after a runtime change.
    #[cold]
    #[inline(never)]
    pub(crate) fn load_cold(&self) -> Algorithm {
        self.load()
    }

    /// The time for a decision on `clock`: its reading, or 0 when the algorithm ignores time
    /// (stock), which then costs no clock read at all.
    #[inline(always)]
    pub(crate) fn now(&self, clock: &impl crate::clock::Clock) -> u64 {
        if self.built.uses_time() {
            clock.now()
        } else {
            0
        }
    }

    /// The algorithm as built: its kind (and, for every kind but GCRA, its parameters) never
    /// change, so what depends only on the kind may read this without a load.
    #[inline(always)]
    pub(crate) fn kind(&self) -> &Algorithm {
        &self.built
    }

    /// Replaces the current GCRA configuration (of a GCRA limiter). Concurrent calls are
    /// serialised; the last to take the seqlock wins.
    pub(crate) fn store(&self, gcra: Gcra) {
        debug_assert!(matches!(self.built, Algorithm::Gcra(_)));
        self.current.write(gcra.to_words());
        self.changed.raise();
    }
}

impl Setting {
    /// Replaces a GCRA limiter's quota: every limiter's `set_quota`.
    pub(crate) fn set_quota(
        &self,
        quota: crate::quota::Quota,
    ) -> Result<(), crate::error::ConfigError> {
        self.kind().gcra("set_quota")?;
        self.store(Gcra::new(quota.gcra_params()?));
        Ok(())
    }
}

impl std::fmt::Debug for Setting {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Debug::fmt(&self.load(), f)
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::quota::Quota;

    fn gcra(per_second: u32, burst: u32) -> Gcra {
        Gcra::new(
            Quota::per_second(per_second)
                .with_burst(burst)
                .gcra_params()
                .unwrap(),
        )
    }

    #[test]
    fn store_then_load() {
        let s = Setting::new(Algorithm::Gcra(gcra(10, 1)));
        assert!(s.unchanged().is_some());
        assert_eq!(s.load(), Algorithm::Gcra(gcra(10, 1)));
        s.store(gcra(20, 5));
        assert!(s.unchanged().is_none());
        assert_eq!(s.load(), Algorithm::Gcra(gcra(20, 5)));
        assert_eq!(s.kind(), &Algorithm::Gcra(gcra(10, 1)));
    }

    #[test]
    fn readers_never_see_a_mix() {
        // Two configurations whose four words all differ; readers racing writers must only
        // ever see one or the other.
        let (a, b) = (gcra(10, 1), gcra(1_000, 7));
        let s = Setting::new(Algorithm::Gcra(a));
        s.store(a);
        std::thread::scope(|scope| {
            for w in 0..2 {
                let s = &s;
                scope.spawn(move || {
                    for i in 0..20_000 {
                        s.store(if (i + w) % 2 == 0 { a } else { b });
                    }
                });
            }
            for _ in 0..2 {
                scope.spawn(|| {
                    for _ in 0..50_000 {
                        let got = s.load();
                        assert!(got == Algorithm::Gcra(a) || got == Algorithm::Gcra(b));
                    }
                });
            }
        });
    }
}
