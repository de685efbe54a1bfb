//! The per-thread view of a growing table's current arrays ([`Published`]): how a check reaches
//! its shard's array without a shared write, and how a rebuild publishes a new set. Swapped for
//! loom's under `cfg(loom)`, so that `loom-tests/tests/grow_table.rs` model-checks this very
//! code.
//!
//! The protocol it serves is written down in [`crate::store::grow_table`]'s module docs;
//! correctness rests on the arrays' freeze ([`super::grow`]), never on a view being fresh.

use std::cell::RefCell;

use super::grow::{Array, Shared};
use super::{AtomicU64, Lock, Ordering};

/// A table's current arrays (one per shard), as a set that a rebuild replaces whole.
pub(crate) type Arrays = Box<[Shared<Array>]>;

/// A published set of arrays: one allocation with the arrays' pointers in it, reached from a
/// cache entry through one pointer (a `Shared<Arrays>` would add a load to every check: to
/// the box, then to its slice). Loom's `Arc` holds only sized values, so under loom the set is
/// the boxed slice behind it.
#[cfg(not(loom))]
type Set = std::sync::Arc<[Shared<Array>]>;
#[cfg(loom)]
type Set = Shared<Arrays>;

/// `arrays` as a [`Set`].
fn set(arrays: Arrays) -> Set {
    #[cfg(not(loom))]
    return Set::from(arrays);
    #[cfg(loom)]
    return Shared::new(arrays);
}

/// The arrays a table's checks use, published so that a check reaches them without a shared
/// write: each thread keeps its own reference to the set it last saw of each table (a
/// thread-local cache with one entry per table) and takes a new one only when a rebuild of that
/// table has published a newer set.
///
/// A check finds its table's entry by the table's *index* (a small number, unique among the
/// tables alive, reused after a table is dropped) and trusts it if the entry's generation is the
/// table's current one. Generations are drawn from one process-wide sequence, so an entry left
/// by a dropped table whose index was reused never matches the new table's. A thread that
/// checks many tables in turn therefore renews nothing on a hit: no lock, no reference count,
/// no reordering of its cache.
///
/// A thread may use a set that is out of date for as long as one check takes (it compared the
/// generation just before a rebuild bumped it): its array is then frozen, and the check goes to
/// the shard's lock (see [`Array::update`]). So correctness never depends on the cache being
/// fresh, only speed does.
///
/// Memory: a thread's cache keeps the arrays of the last set it saw of each table alive until
/// its next check of that table after a rebuild (it then drops them), until it renews any
/// table's entry after the table was dropped (renewing drops the entries of dropped tables), or
/// until it exits. The cache has one entry per index, so its length is the most tables alive at
/// once.
pub(crate) struct Published {
    /// This table's entry in every thread's cache (see [`Indices`]).
    index: usize,
    /// The current set's generation: a fresh value of [`next_generation`] at every
    /// [`replace`](Self::replace).
    generation: AtomicU64,
    current: Lock<Set>,
    /// Lets caches see that the table is gone (they hold only weak references to it).
    #[cfg(not(loom))]
    alive: std::sync::Arc<()>,
}

impl std::fmt::Debug for Published {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Published")
            .field("index", &self.index)
            .finish_non_exhaustive()
    }
}

/// One table's entry in a thread's cache.
struct Entry {
    generation: u64,
    arrays: Set,
    #[cfg(not(loom))]
    alive: std::sync::Weak<()>,
}

/// A thread's cache: entry `i` is that of the table with index `i`, if the thread has used it.
struct Cache {
    entries: Vec<Option<Entry>>,
}

#[cfg(not(loom))]
thread_local! {
    static CACHE: RefCell<Cache> = const {
        RefCell::new(Cache { entries: Vec::new() })
    };
}
#[cfg(loom)]
loom::thread_local! {
    static CACHE: RefCell<Cache> = RefCell::new(Cache { entries: Vec::new() });
}

/// Generations of every table's sets: one process-wide sequence, so that a generation names one
/// set of one table. A std atomic even under loom (a static cannot hold a loom atomic): only
/// distinctness matters.
fn next_generation() -> u64 {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    // Relaxed: only distinctness matters, which the atomic increment gives.
    NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}

/// The indices of the tables alive: the smallest free one for a new table, given back when the
/// table is dropped, so that the caches' length follows the tables alive at once rather than
/// every table ever built. Taken only when a table is built or dropped.
struct Indices {
    /// Indices given back, to be reused.
    free: Vec<usize>,
    /// One past the largest index ever handed out.
    next: usize,
}

#[cfg(not(loom))]
static INDICES: std::sync::Mutex<Indices> = std::sync::Mutex::new(Indices {
    free: Vec::new(),
    next: 0,
});
// Under loom, a static made afresh for each execution, behind a loom mutex: which index a table
// gets then depends only on the interleaving (models run in parallel in one process).
#[cfg(loom)]
loom::lazy_static! {
    static ref INDICES: loom::sync::Mutex<Indices> = loom::sync::Mutex::new(Indices {
        free: Vec::new(),
        next: 0,
    });
}

impl Indices {
    fn with<R>(f: impl FnOnce(&mut Indices) -> R) -> R {
        // The data is consistent at every point a panic could unwind from (see `lock.rs`).
        let mut indices = INDICES.lock().unwrap_or_else(|e| e.into_inner());
        f(&mut indices)
    }

    fn take() -> usize {
        Self::with(|indices| {
            // Smallest first, so that tables built and dropped in turn keep caches short.
            match indices.free.iter().enumerate().min_by_key(|&(_, &i)| i) {
                Some((at, _)) => indices.free.swap_remove(at),
                None => {
                    indices.next += 1;
                    indices.next - 1
                }
            }
        })
    }

    fn give_back(index: usize) {
        Self::with(|indices| indices.free.push(index));
    }
}

impl Published {
    /// Publishes `arrays` (one per shard).
    pub(crate) fn new(arrays: Arrays) -> Self {
        Self {
            index: Indices::take(),
            generation: AtomicU64::new(next_generation()),
            current: Lock::new(set(arrays)),
            #[cfg(not(loom))]
            alive: std::sync::Arc::new(()),
        }
    }

    /// Runs `f` on the arrays as this thread last saw them, after taking the current set if a
    /// rebuild published a newer one since. `None` if `f` gives `None`, or if the thread has no
    /// cache to use (it is exiting, or its cache is in use): the caller then goes to the lock.
    #[inline(always)]
    pub(crate) fn with<R>(&self, f: impl FnOnce(&[Shared<Array>]) -> Option<R>) -> Option<R> {
        CACHE
            .try_with(|cache| {
                // A check never runs another check inside `f` (steps are pure); a cache in use
                // sends the caller to the lock rather than panic.
                let mut cache = cache.try_borrow_mut().ok()?;
                // Relaxed: a stale generation only means a stale set, which checks detect
                // through the frozen arrays; the set itself is taken under the lock.
                let generation = self.generation.load(Ordering::Relaxed);
                if let Some(Some(e)) = cache.entries.get(self.index) {
                    if e.generation == generation {
                        return f(&e.arrays);
                    }
                }
                f(&self.refresh(&mut cache).arrays)
            })
            .ok()
            .flatten()
    }

    /// Puts this table's current set in its entry of `cache`.
    #[cold]
    #[inline(never)]
    fn refresh<'c>(&self, cache: &'c mut Cache) -> &'c Entry {
        #[cfg(all(test, not(loom)))]
        super::counts::bump(super::counts::Event::Refresh);
        let (generation, arrays) = {
            let current = self.current.lock();
            // Relaxed: read under the lock that `replace` sets it under.
            (
                self.generation.load(Ordering::Relaxed),
                Set::clone(&current),
            )
        };
        cache.prune();
        if cache.entries.len() <= self.index {
            cache.entries.resize_with(self.index + 1, || None);
        }
        cache.entries[self.index].insert(Entry {
            generation,
            arrays,
            #[cfg(not(loom))]
            alive: std::sync::Arc::downgrade(&self.alive),
        })
    }

    /// Replaces shard `shard`'s array in the published set. Under that shard's lock.
    pub(crate) fn replace(&self, shard: usize, array: Shared<Array>) {
        let mut current = self.current.lock();
        let mut arrays: Vec<Shared<Array>> = current.iter().map(Shared::clone).collect();
        arrays[shard] = array;
        *current = set(arrays.into_boxed_slice());
        // Relaxed: read by `refresh` under the same lock; by checks only as a hint.
        self.generation.store(next_generation(), Ordering::Relaxed);
    }
}

impl Drop for Published {
    fn drop(&mut self) {
        Indices::give_back(self.index);
    }
}

impl Cache {
    /// Drops the entries of tables that are gone, and the empty tail.
    fn prune(&mut self) {
        #[cfg(not(loom))]
        for entry in &mut self.entries {
            if entry.as_ref().is_some_and(|e| e.alive.strong_count() == 0) {
                *entry = None;
            }
        }
        while matches!(self.entries.last(), Some(None)) {
            self.entries.pop();
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use std::sync::Arc;

    /// Publishes a set, runs `body` on a thread that then exits (`join` returns after its
    /// thread-local destructors have run), replaces the set, and tells whether the first set
    /// was freed: it stays alive only if an exited thread's cache still holds it.
    fn freed_after_exit(body: impl FnOnce(&Arc<Published>) + Send + 'static) -> bool {
        let published = Arc::new(Published::new(
            vec![Shared::new(Array::empty(8, None))].into_boxed_slice(),
        ));
        let first = Set::downgrade(&published.current.lock());
        let p = Arc::clone(&published);
        std::thread::spawn(move || body(&p)).join().unwrap();
        published.replace(0, Shared::new(Array::empty(16, None)));
        first.upgrade().is_none()
    }

    #[test]
    fn an_exited_thread_keeps_no_arrays_alive() {
        let freed = freed_after_exit(|p| {
            assert_eq!(p.with(|arrays| Some(arrays.len())), Some(1));
        });
        assert!(freed, "the exited thread kept the set");
    }

    /// Checks the table from a thread-local's destructor, at thread exit.
    struct CheckAtExit(Arc<Published>);

    impl Drop for CheckAtExit {
        fn drop(&mut self) {
            // Whether or not this thread's cache is still there, the check is answered (by the
            // cache, or through the lock once it is gone: `None` here).
            let seen = self.0.with(|arrays| Some(arrays.len()));
            assert!(seen.is_none() || seen == Some(1));
        }
    }

    thread_local! {
        static AT_EXIT: std::cell::RefCell<Option<CheckAtExit>> = const {
            std::cell::RefCell::new(None)
        };
    }

    #[test]
    fn a_check_at_thread_exit_leaves_nothing_cached() {
        let freed = freed_after_exit(|p| {
            // Registered before the cache's thread-local, so that (destructors running in
            // reverse order of registration, as on Linux) it checks the table after the cache
            // was dropped: nothing may be cached again then.
            AT_EXIT.with(|c| *c.borrow_mut() = Some(CheckAtExit(Arc::clone(p))));
            assert_eq!(p.with(|arrays| Some(arrays.len())), Some(1));
        });
        assert!(freed, "a check at exit left the set cached");
    }
}
