//! The path of one keyed check, from [`check`](KeyedLimiter::check) to the store: the
//! algorithm as built (or as last changed), the instant, the key's hash, then the store's own
//! check: [`check_grow`](KeyedLimiter::check_grow) for the growing tables (the default and the
//! exact store), [`check_hashed`](KeyedLimiter::check_hashed) for the fixed table. ARCHITECTURE.md
//! draws the whole path, file by file, down to the compare-and-swap.

use std::borrow::Borrow;
use std::hash::Hash;

use super::KeyedLimiter;
use crate::algorithm::{Algorithm, Steps};
use crate::clock::Clock;
use crate::decision::Decision;
use crate::store::grow_table::{ByFingerprint, Exact, GrowTable, Probe, SlotKey};
use crate::store::table::Table;
use crate::store::Located;

impl<K: Hash + Eq + 'static, C: Clock> KeyedLimiter<K, C> {
    /// Checks one request for `key`.
    #[inline(always)]
    pub fn check<Q>(&self, key: &Q) -> Decision
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        self.check_n(key, 1)
    }

    /// Checks a request for `n` units on `key`: all admitted or none.
    ///
    /// `n = 0` consumes nothing; `n` above the limit is denied with no `retry_after`. Neither
    /// creates a key.
    ///
    /// ```
    /// use cellgate::{KeyedLimiter, Quota};
    /// use cellgate::clock::ManualClock;
    /// let l = KeyedLimiter::<u64>::gcra(Quota::per_second(5)).clock(ManualClock::new()).build()?;
    /// assert!(l.check_n(&1, 5).is_allowed());
    /// assert!(!l.check_n(&2, 6).is_allowed());
    /// assert_eq!(l.len(), 1);
    /// # Ok::<(), cellgate::ConfigError>(())
    /// ```
    #[inline(always)]
    pub fn check_n<Q>(&self, key: &Q, n: u32) -> Decision
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        // The built algorithm, at a fixed place in `self`, until a `set_quota`. A GCRA limiter
        // whose quota never changed is checked here, by the copy of the check laid out for
        // GCRA alone (its steps known, no dispatch in the loop: see `algorithm::steps`); every
        // other case by a second, out-of-line copy, `check_other`. `inline(always)` (here and
        // on `check`): with the runtime-change path, LLVM stopped inlining this function into
        // its callers, and the call (the arguments, the 40-byte decision returned through
        // memory) was all of the difference from a limiter with no runtime change at all;
        // inlined, the flag and the kind cost two loads and two predicted branches.
        match self.setting.unchanged() {
            Some(Algorithm::Gcra(g)) => self.check_at(g, key, &Now::lazy(|| self.clock.now()), n),
            _ => self.check_other(key, n),
        }
    }

    /// [`check_n`](Self::check_n) of every algorithm but a GCRA never changed, out of line so
    /// that GCRA's check, inlined into the caller, stays small. A window counter (never changed
    /// at runtime) takes the copy of the check laid out for it alone, GCRA after a `set_quota`
    /// GCRA's copy on the current parameters, and a stock or warm-up the copy that dispatches
    /// on the algorithm in its loop.
    #[inline(never)]
    fn check_other<Q>(&self, key: &Q, n: u32) -> Decision
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        let now = Now::lazy(|| self.clock.now());
        match self.setting.unchanged() {
            Some(Algorithm::FixedWindow(f)) => self.check_at(f, key, &now, n),
            Some(Algorithm::SlidingWindow(s)) => self.check_at(s, key, &now, n),
            Some(algorithm) => self.check_on(algorithm, key, n),
            None => match self.setting.load() {
                Algorithm::Gcra(g) => self.check_at(&g, key, &now, n),
                other => self.check_on(&other, key, n),
            },
        }
    }

    #[inline(always)]
    pub(super) fn check_on<Q>(&self, algorithm: &Algorithm, key: &Q, n: u32) -> Decision
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        self.check_at(
            algorithm,
            key,
            &Now::lazy(|| self.setting.now(&self.clock)),
            n,
        )
    }

    /// [`check_on`](Self::check_on) at the instant `now` gives.
    #[inline(always)]
    pub(super) fn check_at<Q>(
        &self,
        algorithm: &impl Steps,
        key: &Q,
        now: &Now<impl Fn() -> u64>,
        n: u32,
    ) -> Decision
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        // Every path runs its compare-and-swap loop on the word alone and returns the word the
        // decision is taken on; the decision is built once, at the end (see
        // `Algorithm::decide`; a GCRA admission's decision comes from its write, see
        // `decision_after`). Each path gets its own closure, called from exactly one place,
        // so that LLVM inlines the step into the loop. The closures are `move`: they hold
        // copies of `now` and `n`, so no address of theirs escapes (to the out-of-line insert
        // paths) and LLVM keeps them in registers and folds a constant `n` (BENCHMARKS.md,
        // "Instruction counts").
        match self.store.locate(key) {
            Located::Table(table, h) => self.check_hashed(table, h, algorithm, now.get(), n),
            Located::Fingerprint(table, h) => {
                self.check_grow(table, h, &ByFingerprint, algorithm, now, n)
            }
            Located::Exact(table, h) => {
                self.check_grow(table, h, &Exact::<K, Q>::new(key), algorithm, now, n)
            }
        }
    }

    /// The table store's check of the key with hash `h`.
    #[inline(always)]
    pub(super) fn check_hashed(
        &self,
        table: &Table,
        h: u64,
        algorithm: &impl Steps,
        now: u64,
        n: u32,
    ) -> Decision {
        if let Some(found) = table.find(h) {
            let hit = Table::update(found, h, move |w| {
                let next = algorithm.next_word(w, now, n);
                ((w, next), next)
            });
            if let Ok((word, next)) = hit {
                return algorithm.after(word, next, now, n);
            }
        }
        let step = move |w| {
            let next = algorithm.next_word(w, now, n);
            ((w, next), next)
        };
        match self.insert_hashed(table, h, &ByFingerprint, now, step, true, None) {
            Some((word, next)) => algorithm.after(word, next, now, n),
            None => self.full(move |w| algorithm.decide(w, now, n)),
        }
    }

    /// The growing table's check of `key`, with hash `h`.
    #[inline(always)]
    pub(super) fn check_grow(
        &self,
        table: &GrowTable,
        h: u64,
        key: &impl SlotKey,
        algorithm: &impl Steps,
        now: &Now<impl Fn() -> u64>,
        n: u32,
    ) -> Decision {
        // A thread whose checks lately lost a compare-and-swap reads the clock now, before the
        // probe (see `sync::contended`); a lost one tells it so, through the loop's hook.
        if crate::sync::contended::read_clock_first() {
            now.get();
        }
        // The step gives an `Outcome` (two words) rather than the word and the step's
        // `Option<u64>` (three): what comes back through the per-thread view's closures then
        // fits in two registers. It reads the clock (`now`) itself, once the probe has loaded
        // the key's slot, unless it was read above.
        let step = move |w| {
            let next = algorithm.next_word(w, now.get(), n);
            (algorithm.outcome(w, next), next)
        };
        let decided = match table.try_update_noting(h, key, step, crate::sync::contended::lost) {
            Probe::Hit(outcome) => return algorithm.decision(outcome, now.get(), n),
            Probe::Absent => match self.decide_absent(&step) {
                Ok(outcome) => return algorithm.decision(outcome, now.get(), n),
                Err(decided) => Some(decided),
            },
            Probe::Unsure => None,
        };
        let now = now.get();
        match self.insert_hashed(table, h, key, now, step, true, decided) {
            Some(outcome) => algorithm.decision(outcome, now, n),
            None => self.full(move |w| algorithm.decide(w, now, n)),
        }
    }
}

/// The instant a check decides at: read from the clock at its first use, and the same at every
/// use after it (so one read per check, counted by `clock::tests`). A check of a held key
/// first uses it in its step, after the probe has loaded the key's slot. Read before the
/// probe, a keyed check on the default clock was measurably slower (BENCHMARKS.md, "The
/// clock's share of a check"), likely because the time-stamp counter read's latency added to
/// the probe's loads instead of overlapping them. A clock that is one load (`CoarseClock`,
/// `ManualClock`) gains nothing and pays the deferral, a call. A thread whose checks lately
/// lost a compare-and-swap (one hot key, several threads) reads it before the probe instead
/// (`sync::contended`).
pub(super) struct Now<F> {
    read: F,
    at: std::cell::Cell<Option<u64>>,
}

impl<F: Fn() -> u64> Now<F> {
    /// Read from `read` at the first [`get`](Self::get).
    #[inline(always)]
    pub(super) fn lazy(read: F) -> Self {
        Now {
            read,
            at: std::cell::Cell::new(None),
        }
    }

    /// The instant.
    #[inline(always)]
    pub(super) fn get(&self) -> u64 {
        match self.at.get() {
            Some(now) => now,
            None => self.first(),
        }
    }

    /// The first use: reads the clock. Out of line: inlined, it made the check's step too
    /// large for LLVM to inline into the compare-and-swap loop (`probe table1k`: 324
    /// instructions a check against 295).
    #[inline(never)]
    fn first(&self) -> u64 {
        let now = (self.read)();
        self.at.set(Some(now));
        now
    }
}

impl Now<fn() -> u64> {
    /// A given instant (`check_many`'s one reading for its whole batch); its `read` is never
    /// called.
    #[inline(always)]
    pub(super) fn at(now: u64) -> Self {
        Now {
            read: || 0,
            at: std::cell::Cell::new(Some(now)),
        }
    }
}
