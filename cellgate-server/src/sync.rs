//! Every lock and atomic of this crate, in one place.
//!
//! The rest of the crate uses these types instead of `std::sync` primitives directly, so that
//! each ordering and each lock is chosen (and justified) once.

#[cfg(feature = "server")]
use std::collections::HashSet;
#[cfg(feature = "server")]
use std::hash::Hash;
#[cfg(feature = "server")]
use std::sync::atomic::AtomicUsize;
use std::sync::atomic::{AtomicU64, Ordering};
#[cfg(feature = "server")]
use std::sync::RwLock;

/// A set that admits at most `cap` distinct members, then refuses new ones.
///
/// Used to bound the number of metric series a client can create through `detailed_metric`
/// descriptors, whose values come from requests.
#[cfg(feature = "server")]
pub(crate) struct BoundedSet<T> {
    cap: usize,
    members: RwLock<HashSet<T>>,
}

#[cfg(feature = "server")]
impl<T: Eq + Hash + Clone> BoundedSet<T> {
    /// An empty set admitting at most `cap` members.
    pub(crate) fn new(cap: usize) -> Self {
        BoundedSet {
            cap,
            members: RwLock::new(HashSet::new()),
        }
    }

    /// Whether `value` is (now) a member: true if it already was or there was room for it.
    pub(crate) fn admit(&self, value: &T) -> bool {
        // A poisoned lock only means a panic elsewhere while holding it; the set itself is
        // always consistent (insert is the only mutation), so its contents are still usable.
        {
            let members = self.members.read().unwrap_or_else(|e| e.into_inner());
            if members.contains(value) {
                return true;
            }
        }
        let mut members = self.members.write().unwrap_or_else(|e| e.into_inner());
        if members.contains(value) {
            return true;
        }
        if members.len() >= self.cap {
            return false;
        }
        members.insert(value.clone());
        true
    }
}

/// A map that holds at most `cap` distinct keys, then refuses new ones; values are shared
/// (`Arc`) so that a caller works on one outside the lock.
///
/// The statsd sink's per-series tallies: one read lock per look-up of a key already held.
#[cfg(feature = "server")]
pub(crate) struct BoundedMap<K, V> {
    cap: usize,
    entries: RwLock<std::collections::HashMap<K, std::sync::Arc<V>>>,
}

#[cfg(feature = "server")]
impl<K: Eq + Hash + Clone, V: Default> BoundedMap<K, V> {
    /// An empty map holding at most `cap` keys.
    pub(crate) fn new(cap: usize) -> Self {
        BoundedMap {
            cap,
            entries: RwLock::new(std::collections::HashMap::new()),
        }
    }

    /// `key`'s value, made (default) if the key is new and there is room; `None` when full.
    pub(crate) fn get_or_default(&self, key: &K) -> Option<std::sync::Arc<V>> {
        // Poisoning only means a panic elsewhere while holding the lock; inserting is the only
        // mutation, so the map is consistent either way.
        if let Some(v) = self
            .entries
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(key)
        {
            return Some(std::sync::Arc::clone(v));
        }
        let mut entries = self.entries.write().unwrap_or_else(|e| e.into_inner());
        if let Some(v) = entries.get(key) {
            return Some(std::sync::Arc::clone(v));
        }
        if entries.len() >= self.cap {
            return None;
        }
        let v = std::sync::Arc::new(V::default());
        entries.insert(key.clone(), std::sync::Arc::clone(&v));
        Some(v)
    }

    /// Every key and its value, at one moment.
    pub(crate) fn entries(&self) -> Vec<(K, std::sync::Arc<V>)> {
        let entries = self.entries.read().unwrap_or_else(|e| e.into_inner());
        entries
            .iter()
            .map(|(k, v)| (k.clone(), std::sync::Arc::clone(v)))
            .collect()
    }
}

/// Counts added by many threads and taken (read and reset) by one: the statsd sink's deltas.
#[cfg(feature = "server")]
#[derive(Debug)]
pub(crate) struct Tally<const N: usize>([AtomicU64; N]);

#[cfg(feature = "server")]
impl<const N: usize> Default for Tally<N> {
    fn default() -> Self {
        Tally(std::array::from_fn(|_| AtomicU64::new(0)))
    }
}

#[cfg(feature = "server")]
impl<const N: usize> Tally<N> {
    /// Adds `n` to count `i`.
    pub(crate) fn add(&self, i: usize, n: u64) {
        // Relaxed: a statistic; the swap in `take` sees every add once, whatever the order.
        self.0[i].fetch_add(n, Ordering::Relaxed);
    }

    /// Count `i` since the last take, reset to zero in the same step (no add is lost or
    /// counted twice).
    pub(crate) fn take(&self, i: usize) -> u64 {
        // Relaxed: the swap is one atomic read-modify-write; nothing else is published by it.
        self.0[i].swap(0, Ordering::Relaxed)
    }
}

/// A running total that only grows (a fleet limit's backend errors, added when the limit is
/// retired so that the exported counter never goes down).
#[cfg(feature = "server")]
#[derive(Debug, Default)]
pub(crate) struct Total(AtomicU64);

#[cfg(feature = "server")]
impl Total {
    /// Adds `n`.
    pub(crate) fn add(&self, n: u64) {
        // Relaxed: a statistic read on its own; no other memory is published through it.
        self.0.fetch_add(n, Ordering::Relaxed);
    }

    /// The total so far.
    pub(crate) fn get(&self) -> u64 {
        // Relaxed: a scrape may miss an addition racing with it; the next one sees it.
        self.0.load(Ordering::Relaxed)
    }
}

/// Counts of durations (or any `u64` measure) in `N` fixed buckets, with their sum, spread
/// over stripes so that threads recording at the same moment write different cache lines: a
/// thread adds to its own stripe (two relaxed additions), a scrape sums the stripes.
///
/// Hand-written rather than prometheus-client's `Histogram`, whose `observe` takes a write lock
/// shared by every thread: one per gRPC request here, on every core.
#[cfg(feature = "server")]
#[derive(Debug)]
pub(crate) struct Histogram<const N: usize> {
    /// Inclusive upper bounds, increasing; the last is `u64::MAX` (the `+Inf` bucket).
    bounds: [u64; N],
    stripes: Box<[Stripe<N>]>,
}

/// One thread group's counts, on cache lines of its own (128 bytes: the pair of lines that
/// adjacent-line prefetchers fetch together).
#[cfg(feature = "server")]
#[derive(Debug)]
#[repr(align(128))]
struct Stripe<const N: usize> {
    buckets: [AtomicU64; N],
    sum: AtomicU64,
}

#[cfg(feature = "server")]
impl<const N: usize> Histogram<N> {
    /// An empty histogram with `bounds` (increasing, the last `u64::MAX`), one stripe per
    /// available core (a power of two, at most 64).
    pub(crate) fn new(bounds: [u64; N]) -> Self {
        debug_assert!(bounds.windows(2).all(|w| w[0] < w[1]) && bounds.last() == Some(&u64::MAX));
        let cores = std::thread::available_parallelism().map_or(1, usize::from);
        let stripes = cores.next_power_of_two().min(64);
        Histogram {
            bounds,
            stripes: (0..stripes)
                .map(|_| Stripe {
                    buckets: std::array::from_fn(|_| AtomicU64::new(0)),
                    sum: AtomicU64::new(0),
                })
                .collect(),
        }
    }

    /// Counts `value` in the first bucket whose bound is at least `value`.
    pub(crate) fn record(&self, value: u64) {
        let bucket = self.bounds.partition_point(|&b| b < value).min(N - 1);
        let stripe = &self.stripes[stripe_of_thread() & (self.stripes.len() - 1)];
        // Relaxed: statistics read on their own by a scrape; nothing else is published through
        // them, and a scrape racing a record may see one of the two additions (see `snapshot`).
        stripe.buckets[bucket].fetch_add(1, Ordering::Relaxed);
        stripe.sum.fetch_add(value, Ordering::Relaxed);
    }

    /// What has been recorded so far (see [`Snapshot`]).
    pub(crate) fn snapshot(&self) -> Snapshot<N> {
        let mut counts = [0u64; N];
        let mut sum = 0u64;
        for stripe in &self.stripes {
            for (c, b) in counts.iter_mut().zip(&stripe.buckets) {
                // Relaxed: see `record`.
                *c = c.wrapping_add(b.load(Ordering::Relaxed));
            }
            // Relaxed: see `record`.
            sum = sum.wrapping_add(stripe.sum.load(Ordering::Relaxed));
        }
        let count = counts.iter().fold(0u64, |a, &n| a.wrapping_add(n));
        Snapshot {
            bounds: self.bounds,
            counts,
            count,
            sum,
        }
    }
}

/// A [`Histogram`]'s counts at one moment.
#[cfg(feature = "server")]
#[derive(Debug)]
pub(crate) struct Snapshot<const N: usize> {
    /// The buckets' inclusive upper bounds.
    pub(crate) bounds: [u64; N],
    /// Each bucket's count (not cumulative).
    pub(crate) counts: [u64; N],
    /// Values recorded: the buckets' total, so it always agrees with them.
    pub(crate) count: u64,
    /// Their sum; it may lack (or hold) a value whose bucket a racing scrape did not (or did)
    /// see.
    pub(crate) sum: u64,
}

/// This thread's stripe number: handed out in turn at a thread's first record, so that the
/// threads of a runtime (which start together) land on different stripes.
#[cfg(feature = "server")]
fn stripe_of_thread() -> usize {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    thread_local! {
        static STRIPE: std::cell::Cell<usize> = const { std::cell::Cell::new(usize::MAX) };
    }
    STRIPE
        .try_with(|s| {
            if s.get() == usize::MAX {
                // Relaxed: only distinctness (and spread) matters, which the increment gives.
                s.set(NEXT.fetch_add(1, Ordering::Relaxed) & (usize::MAX >> 1));
            }
            s.get()
        })
        // A thread being torn down shares stripe 0.
        .unwrap_or(0)
}

/// Hands out connection ids (`CLIENT ID`, `HELLO`'s `id`): unique, increasing from 1.
#[derive(Debug)]
pub(crate) struct ClientIds(AtomicU64);

impl ClientIds {
    pub(crate) const fn new() -> Self {
        Self(AtomicU64::new(1))
    }

    pub(crate) fn next(&self) -> u64 {
        // Relaxed: an id only has to be unique, which the read-modify-write guarantees under
        // any ordering; no other memory is published with it.
        self.0.fetch_add(1, Ordering::Relaxed)
    }
}

#[cfg(all(test, feature = "server"))]
mod tests {
    use super::{BoundedSet, Histogram};

    #[test]
    fn a_tally_takes_every_add_once() {
        let t = super::Tally::<2>::default();
        std::thread::scope(|s| {
            for _ in 0..4 {
                s.spawn(|| {
                    for _ in 0..1000 {
                        t.add(1, 2);
                    }
                });
            }
        });
        assert_eq!((t.take(0), t.take(1)), (0, 8000));
        assert_eq!(t.take(1), 0);
    }

    #[test]
    fn histogram_counts_each_value_once_in_its_bucket_across_threads() {
        let h = Histogram::new([10, 100, u64::MAX]);
        std::thread::scope(|s| {
            for t in 0..4u64 {
                let h = &h;
                s.spawn(move || {
                    for v in [0, 10, 11, 100, 101, u64::MAX / 8] {
                        h.record(v + t);
                    }
                });
            }
        });
        let snap = h.snapshot();
        let (bounds, counts, sum) = (snap.bounds, snap.counts, snap.sum);
        assert_eq!(bounds, [10, 100, u64::MAX]);
        assert_eq!(snap.count, 24);
        // Threads t = 0..4 record 0+t, 10+t, 11+t, 100+t, 101+t and a huge value plus t:
        // <= 10: 0+t (4) and 10 (1); <= 100: 11..=13 (3), 11+t (4), 100 (1); the rest, 11.
        assert_eq!(counts, [5, 8, 11]);
        let want: u64 = (0..4u64)
            .map(|t| {
                [0, 10, 11, 100, 101, u64::MAX / 8]
                    .iter()
                    .map(|v| v + t)
                    .sum::<u64>()
            })
            .fold(0, u64::wrapping_add);
        assert_eq!(sum, want);
    }

    #[test]
    fn bounded_set_refuses_past_its_cap_but_keeps_members() {
        let s: BoundedSet<&str> = BoundedSet::new(2);
        assert!(s.admit(&"a"));
        assert!(s.admit(&"b"));
        assert!(!s.admit(&"c"));
        assert!(s.admit(&"a"));
    }
}
