//! [`check_many`](KeyedLimiter::check_many): the fingerprint tables hash and touch a group of
//! keys before checking them (one key's check is in `check.rs`).

use super::check::Now;
use super::lifecycle::Fingerprints;
use super::*;
use crate::algorithm::Steps;
use crate::store::Hasher;

impl<K: Hash + Eq + 'static, C: Clock> KeyedLimiter<K, C> {
    /// Checks one request for each key of `keys`, in order, and appends the decisions to `out`
    /// (one per key, in the same order). Each decision is the one [`check`](Self::check) would
    /// give for that key if called for the keys one after another, **all at one instant**: the
    /// clock is read once per call. A key that appears twice is charged twice; a new key is
    /// created (or refused at [`max_keys`](KeyedLimiterBuilder::max_keys)) exactly as by `check`.
    ///
    /// With the fingerprint tables this is faster than a loop of `check` when the keys are spread
    /// over a store much larger than the CPU's caches: the keys are hashed and their slots
    /// loaded in groups, so the cache misses of a group overlap instead of being paid one
    /// after another. Allocation-free once `out` has room for the decisions (reuse it:
    /// `out.clear()` keeps its capacity). The exact store (`exact_keys()`) checks the keys one by one.
    ///
    /// Checks of other threads may interleave with the batch's; each check is atomic on its
    /// own, as with `check`.
    ///
    /// ```
    /// use cellgate::{KeyedLimiter, Quota};
    /// use cellgate::clock::ManualClock;
    ///
    /// let l = KeyedLimiter::<u64>::gcra(Quota::per_second(2))
    ///     .clock(ManualClock::new())
    ///     .max_keys(1_000)
    ///     .build()?;
    /// let mut out = Vec::with_capacity(64);
    /// l.check_many(&[1, 2, 1, 1], &mut out);
    /// let allowed: Vec<bool> = out.iter().map(|d| d.is_allowed()).collect();
    /// assert_eq!(allowed, [true, true, true, false]); // key 1's burst of 2 is spent
    ///
    /// // Borrowed forms work as in `check`: `&str` for `String` keys.
    /// let names = KeyedLimiter::<String>::gcra(Quota::per_second(1)).build()?;
    /// out.clear();
    /// names.check_many(["alice", "bob", "alice"], &mut out);
    /// assert_eq!(out.iter().filter(|d| d.is_allowed()).count(), 2);
    /// # Ok::<(), cellgate::ConfigError>(())
    /// ```
    pub fn check_many<'q, Q, I>(&self, keys: I, out: &mut Vec<Decision>)
    where
        I: IntoIterator<Item = &'q Q>,
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized + 'q,
    {
        let changed;
        let algorithm = match self.setting.unchanged() {
            Some(algorithm) => algorithm,
            None => {
                changed = self.setting.load();
                &changed
            }
        };
        let now = self.now();
        let keys = keys.into_iter();
        // Each kind with steps of its own takes a copy of the batch laid out for it (see
        // `algorithm::steps`).
        match algorithm {
            Algorithm::Gcra(g) => self.check_many_on(g, now, keys, out),
            Algorithm::FixedWindow(f) => self.check_many_on(f, now, keys, out),
            Algorithm::SlidingWindow(s) => self.check_many_on(s, now, keys, out),
            other => self.check_many_on(other, now, keys, out),
        }
    }

    /// [`check_many`](Self::check_many) by `algorithm`'s steps, at `now`.
    #[inline(always)]
    fn check_many_on<'q, Q>(
        &self,
        algorithm: &impl Steps,
        now: u64,
        keys: impl Iterator<Item = &'q Q>,
        out: &mut Vec<Decision>,
    ) where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized + 'q,
    {
        match &self.store {
            Store::Table(table, hasher) => batched(table, hasher, keys, out, move |h| {
                self.check_hashed(table, h, algorithm, now, 1)
            }),
            Store::Grow(table, hasher) => batched(table, hasher, keys, out, move |h| {
                self.check_grow(table, h, &ByFingerprint, algorithm, &Now::at(now), 1)
            }),
            Store::Exact(..) | Store::Int(..) => {
                out.reserve(keys.size_hint().0);
                for key in keys {
                    out.push(self.check_at(algorithm, key, &Now::at(now), 1));
                }
            }
        }
    }
}

/// [`KeyedLimiter::check_many`] over a fingerprint table: hashes a group of keys and touches
/// each one's home slot, then `check` checks them, in order. Out of line, one copy per table:
/// each copy is laid out for its own table's probe alone, which LLVM then inlines here; inlined
/// into `check_many`, beside every store's path, the batch cost more per key (BENCHMARKS.md,
/// "Instruction counts").
#[inline(never)]
fn batched<'q, T: Fingerprints, Q: Hash + ?Sized + 'q>(
    table: &T,
    hasher: &Hasher,
    keys: impl Iterator<Item = &'q Q>,
    out: &mut Vec<Decision>,
    check: impl Fn(u64) -> Decision,
) {
    let mut keys = keys.fuse();
    let mut hashes = [0u64; BATCH];
    loop {
        // First pass: hash a group of keys and touch each one's home slot. The loads are
        // independent of each other, so the CPU overlaps their misses.
        let mut len = 0;
        for (slot, key) in hashes.iter_mut().zip(&mut keys) {
            *slot = table.hash_and_touch(hasher, key);
            len += 1;
        }
        if len == 0 {
            break;
        }
        // Second pass: the checks themselves, in order, each probing afresh (the slots are in
        // cache now). Probing afresh, not from the first pass's values, keeps every decision
        // exactly `check`'s: an earlier check of the batch may have changed a later key's slot
        // (the same key twice, a new key inserted, or a key swept or evicted to make room).
        out.reserve(len);
        for &h in &hashes[..len] {
            out.push(check(h));
        }
    }
}
