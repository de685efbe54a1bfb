//! Metrics through the `metrics` facade (feature `metrics`).
//!
//! # Implementation details
//!
//! A check must not pay for a registry lookup, a hash, or a shared atomic. Every thread that
//! records gets one row of plain counters for the whole process (a fixed array of
//! [`COLUMNS`] counters, made on the thread's first record and reached through a `const`
//! thread-local that needs no lazy initialisation). Each layer owns a range of columns,
//! chosen when it is built: recording a decision is the thread-local load, one add to a fixed
//! index, and a load and a store on the thread's own row (no locked instruction, no shared
//! cache line). Units are not counted per check: a limit's cost per request is fixed, so its
//! units are its decisions times its cost, computed when publishing.
//!
//! Publishing ([`MetricsHandle::publish`], at scrape time or from
//! [`MetricsHandle::spawn_publisher`] once a second) sums the layer's columns over every row
//! and hands the totals to the recorder with `absolute`, so the registry is touched only then.
//!
//! Rows and columns are recycled: a row goes back to a free list when its thread exits (its
//! counts stay: the next thread to take it adds to them, so the sums never go back), and a
//! layer's columns are zeroed in every row and freed when the layer (and every service made
//! from it) is dropped. With more than [`COLUMNS`] columns in use at once (about 250 layers of
//! one limit each), a new layer counts on its own shared counters instead, with one atomic
//! add per decision.
//!
//! Published, with label `limit` (the limit's name) and `outcome` (`allowed`, `denied`,
//! `delayed`: admitted by a queueing limit with a delay):
//!
//! | name | kind | what |
//! |---|---|---|
//! | `cellgate_http_decisions_total` | counter | requests decided by the limit |
//! | `cellgate_http_units_total` | counter | units those requests asked for |
//! | `cellgate_http_rejections_total` | counter | requests a key extractor refused (no `limit` label) |
//! | `cellgate_http_keys` | gauge | keys the limiter holds (from [`Limit::stats`](crate::Limit::stats)) |
//! | `cellgate_http_key_refusals_total` | counter | new keys the limiter's full table refused |
//! | `cellgate_http_evictions_total` | counter | keys evicted, by `reason` (`fresh`: equivalent to a new key; `live`: to make room) |
//!
//! A denied request counts as `denied` for the limit that denied it only; the others did not
//! decide it (their charges were rolled back or never made).

use std::cell::Cell;
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};
use std::time::Duration;

use cellgate::{Decision, KeyedLimiter};

use crate::admit::Shared;

const ALLOWED: usize = 0;
const DENIED: usize = 1;
const DELAYED: usize = 2;
const OUTCOMES: [&str; 3] = ["allowed", "denied", "delayed"];
/// Columns per limit: one decision counter per outcome.
const PER_LIMIT: usize = OUTCOMES.len();

/// Counters in every thread's row (8 KiB a row).
pub(crate) const COLUMNS: usize = 1024;

/// What a keyed limiter says about its keys, for [`Limit::stats`](crate::Limit::stats).
///
/// # Examples
///
/// ```
/// use std::sync::Arc;
/// use cellgate::{KeyedLimiter, Quota};
/// use cellgate_http::KeyStats;
///
/// let l = Arc::new(KeyedLimiter::<u64>::gcra(Quota::per_second(1)).build()?);
/// l.check(&1);
/// assert_eq!(KeyStats::of(&l).held, 1);
/// # Ok::<(), cellgate::ConfigError>(())
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct KeyStats {
    /// Keys held now.
    pub held: u64,
    /// New keys refused because the table was full.
    pub refused: u64,
    /// Keys dropped because their state was equivalent to a fresh key.
    pub evicted_fresh: u64,
    /// Live keys evicted to make room.
    pub evicted_live: u64,
}

impl KeyStats {
    /// The statistics of `limiter`.
    pub fn of<K, C>(limiter: &KeyedLimiter<K, C>) -> Self
    where
        K: std::hash::Hash + Eq,
        C: cellgate::clock::Clock,
    {
        Self {
            held: limiter.len() as u64,
            refused: limiter.stats().refused,
            evicted_fresh: limiter.stats().evicted,
            evicted_live: limiter.stats().evicted_live,
        }
    }
}

/// A source of [`KeyStats`], read at publish time.
pub(crate) type StatsFn = Arc<dyn Fn() -> KeyStats + Send + Sync>;

/// One thread's counters. Aligned to two cache lines so that no line holds counters of two
/// threads (the adjacent-line prefetcher pairs lines).
#[repr(align(128))]
struct Row([AtomicU64; COLUMNS]);

impl Row {
    fn leak_new() -> &'static Row {
        Box::leak(Box::new(Row(std::array::from_fn(|_| AtomicU64::new(0)))))
    }
}

thread_local! {
    /// This thread's row: a `const` thread-local without a destructor, so reading it is one
    /// load from the thread's TLS block (no lazy-initialisation check).
    static ROW: Cell<Option<&'static Row>> = const { Cell::new(None) };
    /// Gives the row back when the thread exits; touched only on the thread's first record.
    static GIVE_BACK: GiveBack = const { GiveBack };
}

struct GiveBack;

impl Drop for GiveBack {
    fn drop(&mut self) {
        // Clear the pointer first: if anything records on this thread after this (from
        // another thread-local's destructor), it takes a fresh row rather than write to one
        // another thread may be using.
        if let Some(row) = ROW.with(Cell::take) {
            rows().free.push(row);
        }
    }
}

/// Every row made so far, the rows of exited threads, and which columns live layers own.
struct Rows {
    all: Vec<&'static Row>,
    free: Vec<&'static Row>,
    used: [bool; COLUMNS],
}

static ROWS: Mutex<Rows> = Mutex::new(Rows {
    all: Vec::new(),
    free: Vec::new(),
    used: [false; COLUMNS],
});

/// The rows, locked. Only a thread's first record, building and dropping a layer, and
/// publishing take the lock; a panic cannot leave `Rows` half-updated in a way that matters
/// (each field is a list or a flag array), so a poisoned lock is used as is.
fn rows() -> MutexGuard<'static, Rows> {
    ROWS.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The counters of one layer: per limit, a decision count for each outcome, then the key
/// extractors' rejections.
pub(crate) struct Registry {
    width: usize,
    /// The layer's first column in every thread's row; [`OFF_ROWS`] when it does not count in
    /// the rows (metrics off, or no free columns).
    base: usize,
    /// The layer's own counters, shared by all threads, when the rows had no room.
    own: Option<Box<[AtomicU64]>>,
}

/// [`Registry::base`] of a layer that does not count in the rows.
const OFF_ROWS: usize = usize::MAX;

impl Registry {
    pub(crate) fn new(limits: usize, on: bool) -> Self {
        let width = limits * PER_LIMIT + 1;
        let base = if on { claim(width) } else { None };
        Self {
            width,
            base: base.unwrap_or(OFF_ROWS),
            own: (on && base.is_none()).then(|| (0..width).map(|_| AtomicU64::new(0)).collect()),
        }
    }

    /// Counts the decision of a layer with one limit.
    #[inline]
    pub(crate) fn record_one(&self, d: &Decision) {
        let outcome = if !d.is_allowed() {
            DENIED
        } else if d.delay_ns() == 0 {
            ALLOWED
        } else {
            DELAYED
        };
        self.add(outcome);
    }

    /// Counts a decided request: `denied` for the limit that denied it, else `allowed` or
    /// `delayed` for every limit.
    pub(crate) fn record(&self, decisions: &[Decision], denied_by: Option<usize>) {
        match denied_by {
            Some(i) => self.add(i * PER_LIMIT + DENIED),
            None => {
                for (i, d) in decisions.iter().enumerate() {
                    let o = if d.delay_ns() == 0 { ALLOWED } else { DELAYED };
                    self.add(i * PER_LIMIT + o);
                }
            }
        }
    }

    /// Counts a request a key extractor refused.
    pub(crate) fn rejected(&self) {
        self.add(self.width - 1);
    }

    /// Adds one to column `col` of this layer.
    #[inline]
    fn add(&self, col: usize) {
        if self.base != OFF_ROWS {
            // `claim` placed `base + col` below COLUMNS, a power of two: the mask changes
            // nothing and saves the bounds check.
            let i = (self.base + col) & (COLUMNS - 1);
            match ROW.with(Cell::get) {
                Some(row) => bump(&row.0[i]),
                None => bump(&first_row().0[i]),
            }
        } else if let Some(own) = &self.own {
            // Relaxed: a statistic; no other memory is published through it.
            own[col].fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Column sums over every thread's row.
    fn totals(&self) -> Vec<u64> {
        if let Some(own) = &self.own {
            // Relaxed: a statistic; each counter's own values are read in order (coherence).
            return own.iter().map(|c| c.load(Ordering::Relaxed)).collect();
        }
        let mut sums = vec![0u64; self.width];
        if self.base == OFF_ROWS {
            return sums;
        }
        for row in &rows().all {
            for (s, c) in sums
                .iter_mut()
                .zip(&row.0[self.base..self.base + self.width])
            {
                // Relaxed: as above. Under the lock, so two publishers read in order.
                *s = s.wrapping_add(c.load(Ordering::Relaxed));
            }
        }
        sums
    }
}

impl Drop for Registry {
    fn drop(&mut self) {
        if self.base == OFF_ROWS {
            return;
        }
        let base = self.base;
        // No thread can record for this layer any more (recording borrows the registry), so
        // the columns are zeroed for the next layer that claims them. Every record made for
        // this layer happens before this drop (the last `Arc` release), so no older value
        // can reappear; the next owner learns of the columns through the lock.
        let mut rows = rows();
        for row in &rows.all {
            for c in &row.0[base..base + self.width] {
                c.store(0, Ordering::Relaxed);
            }
        }
        rows.used[base..base + self.width].fill(false);
    }
}

/// The first free run of `width` columns, marked used; `None` when there is none.
fn claim(width: usize) -> Option<usize> {
    let mut rows = rows();
    let mut run = 0;
    for i in 0..COLUMNS {
        run = if rows.used[i] { 0 } else { run + 1 };
        if run == width {
            let base = i + 1 - width;
            rows.used[base..=i].fill(true);
            return Some(base);
        }
    }
    None
}

/// This thread's row on its first record: a free row or a new one, given back at exit.
#[cold]
#[inline(never)]
fn first_row() -> &'static Row {
    let row = {
        let mut rows = rows();
        match rows.free.pop() {
            Some(row) => row,
            None => {
                let row = Row::leak_new();
                rows.all.push(row);
                row
            }
        }
    };
    ROW.with(|r| r.set(Some(row)));
    // Register the destructor that gives the row back. During this thread's own TLS
    // destruction that is refused: the row then stays with the exited thread (its counts
    // are still summed), a few KiB in a case that needs a destructor recording a request.
    let _ = GIVE_BACK.try_with(|_| ());
    row
}

/// Adds one to a counter only this thread writes: a load and a store, not a locked
/// read-modify-write. Relaxed: no other memory is published through the counter, and with a
/// single writer no increment can be lost.
#[inline]
fn bump(c: &AtomicU64) {
    c.store(c.load(Ordering::Relaxed).wrapping_add(1), Ordering::Relaxed);
}

/// Publishes a layer's metrics to the installed `metrics` recorder; from
/// [`RateLimitLayer::metrics`](crate::RateLimitLayer::metrics).
///
/// # Examples
///
/// ```
/// use cellgate::Quota;
/// use cellgate_http::RateLimitLayer;
///
/// let layer = RateLimitLayer::per_ip(Quota::per_second(10))?;
/// let metrics = layer.metrics();
/// metrics.publish(); // at scrape time, or:
/// let _thread = metrics.spawn_publisher(std::time::Duration::from_secs(1));
/// # Ok::<(), cellgate::ConfigError>(())
/// ```
#[derive(Clone)]
pub struct MetricsHandle {
    shared: Weak<Shared>,
}

impl fmt::Debug for MetricsHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("MetricsHandle")
    }
}

impl MetricsHandle {
    pub(crate) fn new(shared: &Arc<Shared>) -> Self {
        Self {
            shared: Arc::downgrade(shared),
        }
    }

    /// Sends the current totals to the recorder; returns `false` once the layer (and every
    /// service made from it) is gone.
    pub fn publish(&self) -> bool {
        let Some(shared) = self.shared.upgrade() else {
            return false;
        };
        let totals = shared.metrics.totals();
        for (i, l) in shared.limits.iter().enumerate() {
            let name = l.name().to_owned();
            for (o, outcome) in OUTCOMES.iter().enumerate() {
                let labels = [("limit", name.clone()), ("outcome", (*outcome).to_owned())];
                metrics::counter!("cellgate_http_decisions_total", &labels)
                    .absolute(totals[i * PER_LIMIT + o]);
                // The cost per request is fixed, so units are decisions times cost.
                metrics::counter!("cellgate_http_units_total", &labels).absolute(
                    totals[i * PER_LIMIT + o].wrapping_mul(u64::from(l.cost_per_request())),
                );
            }
            if let Some(stats) = l.stats_fn() {
                let s = stats();
                let label = [("limit", name.clone())];
                metrics::gauge!("cellgate_http_keys", &label).set(s.held as f64);
                metrics::counter!("cellgate_http_key_refusals_total", &label).absolute(s.refused);
                for (reason, n) in [("fresh", s.evicted_fresh), ("live", s.evicted_live)] {
                    let labels = [("limit", name.clone()), ("reason", reason.to_owned())];
                    metrics::counter!("cellgate_http_evictions_total", &labels).absolute(n);
                }
            }
        }
        metrics::counter!("cellgate_http_rejections_total").absolute(totals[totals.len() - 1]);
        true
    }

    /// Publishes every `every` from a thread of its own, which ends once the layer is gone.
    pub fn spawn_publisher(&self, every: Duration) -> std::thread::JoinHandle<()> {
        let me = self.clone();
        std::thread::spawn(move || {
            while me.publish() {
                std::thread::sleep(every);
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Global, Limit, RateLimitLayer};
    use cellgate::{Limiter, Quota};
    use metrics_util::debugging::{DebugValue, DebuggingRecorder};
    use metrics_util::{CompositeKey, MetricKind};

    type Snapshot = Vec<(
        CompositeKey,
        Option<metrics::Unit>,
        Option<metrics::SharedString>,
        DebugValue,
    )>;
    use tower_service::Service;

    fn counter(snap: &Snapshot, name: &str, labels: &[(&str, &str)]) -> Option<u64> {
        snap.iter().find_map(|(k, _, _, v)| {
            let key = k.key();
            let same = k.kind() == MetricKind::Counter
                && key.name() == name
                && labels
                    .iter()
                    .all(|(ln, lv)| key.labels().any(|l| l.key() == *ln && l.value() == *lv));
            match (same, v) {
                (true, DebugValue::Counter(n)) => Some(*n),
                _ => None,
            }
        })
    }

    #[test]
    fn counts_from_several_threads_are_summed_at_publish() {
        let recorder = DebuggingRecorder::new();
        let snapshotter = recorder.snapshotter();
        let stock = Arc::new(KeyedLimiter::<String>::stock(3).build().unwrap());
        let stats = stock.clone();
        let layer = RateLimitLayer::builder()
            .limit(
                Limit::new(
                    "rate",
                    Global,
                    Limiter::gcra(Quota::per_minute(1_000)).build().unwrap(),
                )
                .cost(2),
            )
            .limit(
                Limit::new("stock", crate::HeaderKey::new("x-k"), stock)
                    .stats(move || KeyStats::of(&stats)),
            )
            .build()
            .unwrap();
        let handle = layer.metrics();
        metrics::with_local_recorder(&recorder, || {
            let threads: Vec<_> = (0..2)
                .map(|t| {
                    let layer = layer.clone();
                    std::thread::spawn(move || {
                        let mut svc = tower_layer::Layer::layer(
                            &layer,
                            tower::service_fn(|_r: http::Request<()>| async {
                                Ok::<_, std::convert::Infallible>(
                                    http::Response::new(String::new()),
                                )
                            }),
                        );
                        for i in 0..5 {
                            let mut req = http::Request::new(());
                            if !(t == 1 && i == 4) {
                                req.headers_mut().insert("x-k", "same".parse().unwrap());
                            }
                            drop(svc.call(req));
                        }
                    })
                })
                .collect();
            for t in threads {
                t.join().unwrap();
            }
            assert!(handle.publish());
        });
        let snap = snapshotter.snapshot().into_vec();
        let allowed = [("limit", "stock"), ("outcome", "allowed")];
        let denied = [("limit", "stock"), ("outcome", "denied")];
        assert_eq!(
            counter(&snap, "cellgate_http_decisions_total", &allowed),
            Some(3)
        );
        assert_eq!(
            counter(&snap, "cellgate_http_decisions_total", &denied),
            Some(6)
        );
        let rate = [("limit", "rate"), ("outcome", "allowed")];
        assert_eq!(counter(&snap, "cellgate_http_units_total", &rate), Some(6));
        assert_eq!(
            counter(&snap, "cellgate_http_rejections_total", &[]),
            Some(1)
        );
        assert_eq!(
            counter(
                &snap,
                "cellgate_http_key_refusals_total",
                &[("limit", "stock")]
            ),
            Some(0)
        );
        drop(layer);
        assert!(!handle.publish());
    }
}

#[cfg(test)]
mod recycling {
    use super::*;
    use crate::{Global, Limit, RateLimitLayer};
    use cellgate::{Limiter, Quota};
    use tower_service::Service;

    /// A one-limit layer that admits everything, with metrics on.
    fn layer() -> RateLimitLayer {
        RateLimitLayer::builder()
            .limit(Limit::new(
                "all",
                Global,
                Limiter::gcra(Quota::per_second(1_000_000)).build().unwrap(),
            ))
            .build()
            .unwrap()
    }

    /// Serves `n` requests through `layer` on this thread.
    fn serve(layer: &RateLimitLayer, n: usize) {
        let mut svc = tower_layer::Layer::layer(
            layer,
            tower::service_fn(|_r: http::Request<()>| async {
                Ok::<_, std::convert::Infallible>(http::Response::new(String::new()))
            }),
        );
        for _ in 0..n {
            drop(svc.call(http::Request::new(())));
        }
    }

    /// The tests that fill or need free columns take turns.
    static COLUMN_TESTS: Mutex<()> = Mutex::new(());

    fn allowed(layer: &RateLimitLayer) -> u64 {
        layer.shared.metrics.totals()[ALLOWED]
    }

    #[test]
    fn a_dropped_layers_columns_are_reused_from_zero() {
        // More layers, one after the other, than the rows have columns for: each must count
        // in the rows (columns were freed) and start from zero (they were cleared).
        let _turn = COLUMN_TESTS.lock().unwrap_or_else(PoisonError::into_inner);
        for round in 0..2 * COLUMNS {
            let l = layer();
            assert_ne!(l.shared.metrics.base, OFF_ROWS, "round {round}");
            serve(&l, 3);
            assert_eq!(allowed(&l), 3, "round {round}");
        }
    }

    #[test]
    fn an_exited_threads_row_is_reused_and_its_counts_kept() {
        let l = layer();
        for _ in 0..200 {
            let l = l.clone();
            std::thread::spawn(move || serve(&l, 2)).join().unwrap();
        }
        assert_eq!(allowed(&l), 400);
        // 200 threads one after the other: without reuse, 200 rows. Other tests run threads
        // at the same time, so allow for those.
        let rows = rows().all.len();
        assert!(rows < 100, "{rows} rows for at most a few live threads");
    }

    #[test]
    fn sums_are_exact_and_never_go_back_while_threads_come_and_go() {
        let l = layer();
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let publisher = {
            let (l, stop) = (l.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut last = 0;
                let mut reads = 0u32;
                // Relaxed: only a flag to stop; the join below orders everything else.
                while !stop.load(Ordering::Relaxed) || reads == 0 {
                    let now = allowed(&l);
                    assert!(now >= last, "the sum went back from {last} to {now}");
                    last = now;
                    reads += 1;
                }
            })
        };
        // Waves of short-lived threads: each records, exits and gives its row back while
        // the others of its wave still record, and the next wave takes those rows. Half of
        // each thread's records go straight to the registry, in a tight loop, so that two
        // threads writing one row would lose counts.
        for _ in 0..10 {
            let wave: Vec<_> = (0..4)
                .map(|_| {
                    let l = l.clone();
                    std::thread::spawn(move || {
                        serve(&l, 250);
                        // Not denied by any limit, no delay: counted as allowed.
                        let d = Decision::NONE;
                        for _ in 0..20_000 {
                            l.shared.metrics.record(&[d], None);
                        }
                    })
                })
                .collect();
            for t in wave {
                t.join().unwrap();
            }
        }
        stop.store(true, Ordering::Relaxed);
        publisher.join().unwrap();
        assert_eq!(allowed(&l), 10 * 4 * (250 + 20_000));
    }

    #[test]
    fn with_every_column_taken_a_layer_counts_on_its_own() {
        let _turn = COLUMN_TESTS.lock().unwrap_or_else(PoisonError::into_inner);
        let held: Vec<_> = std::iter::repeat_with(layer)
            .take_while(|l| l.shared.metrics.base != OFF_ROWS)
            .take(COLUMNS)
            .collect();
        assert!(held.len() < COLUMNS, "the columns ran out");
        let l = layer();
        assert!(l.shared.metrics.own.is_some());
        let clone = l.clone();
        std::thread::spawn(move || serve(&clone, 5)).join().unwrap();
        serve(&l, 2);
        assert_eq!(allowed(&l), 7);
        drop(held);
    }
}
