//! Metrics through the `metrics` facade (feature `metrics`).
//!
//! # Implementation details
//!
//! A check must not pay for a registry lookup, a hash, or a shared atomic. Every thread that
//! records gets one row of plain counters for the whole process (a fixed array of
//! [`COLUMNS`](crate::sync::rows::COLUMNS) counters, made on the thread's first record and
//! reached through a `const` thread-local that needs no lazy initialisation). Each layer owns a range of
//! columns, chosen when it is built: recording a decision is the thread-local load, a branch
//! on the outcome, and a load and a store at that outcome's fixed index on the thread's own
//! row (no locked instruction, no shared cache line). Units are not counted per check: a
//! limit's cost per request is fixed, so its units are its decisions times its cost, computed
//! when publishing.
//!
//! Publishing ([`MetricsHandle::publish`], at scrape time or from
//! [`MetricsHandle::spawn_publisher`] once a second) sums the layer's columns over every row
//! and hands the totals to the recorder with `absolute`, so the registry is touched only then.
//!
//! Rows and columns are recycled: a row goes back to a free list when its thread exits (its
//! counts stay: the next thread to take it adds to them, so the sums never go back), and a
//! layer's columns are zeroed in every row and freed when the layer (and every service made
//! from it) is dropped. With more than [`COLUMNS`](crate::sync::rows::COLUMNS) columns in use
//! at once (about 250 layers of one limit each), a new layer counts on its own shared counters
//! instead, with one atomic add per decision.
//!
//! The protocol (rows, claiming and freeing columns, the sums) is in `sync/rows.rs`, in the
//! crate's only module that names an atomic, an ordering or a lock; this module adds the
//! thread-local that keeps each thread's row and gives it back at exit. Every hand-over (a row
//! to a new thread, zeroed columns to a new layer) goes through one mutex, which is what
//! guarantees, as stated there and model-checked with loom (`loom-tests/tests/http_rows.rs`):
//! published sums never go back; they are exact once the recording threads are done; a layer
//! that reuses a dropped layer's columns starts from zero in every row. A publish concurrent
//! with records may or may not include them.
//!
//! Published, with label `limit` (the limit's name) and `outcome` (`allowed`, `denied`,
//! `delayed`: admitted by a queueing limit with a delay):
//!
//! | name | kind | what |
//! |---|---|---|
//! | `cellgate_http_decisions_total` | counter | requests decided by the limit |
//! | `cellgate_http_units_total` | counter | units those requests asked for |
//! | `cellgate_http_rejections_total` | counter | requests a key extractor refused (no `limit` label) |
//! | `cellgate_http_keys` | gauge | keys the limiter holds (its [`AnyLimiter::store_stats`](cellgate::AnyLimiter::store_stats), for a limiter with a key store) |
//! | `cellgate_http_key_refusals_total` | counter | new keys the limiter's full table refused |
//! | `cellgate_http_evictions_total` | counter | keys evicted, by `reason` (`fresh`: equivalent to a new key; `live`: to make room) |
//!
//! A denied request counts as `denied` for the limit that denied it only; the others did not
//! decide it (their charges were rolled back or never made).

use std::cell::Cell;
use std::fmt;
use std::sync::{Arc, Weak};
use std::time::Duration;

use cellgate::Decision;

use crate::limit::Limit;
#[cfg(test)]
use crate::sync::rows::COLUMNS;
use crate::sync::rows::{self, Columns, Row, Table};

const ALLOWED: usize = 0;
const DENIED: usize = 1;
const DELAYED: usize = 2;
const OUTCOMES: [&str; 3] = ["allowed", "denied", "delayed"];
/// Columns per limit: one decision counter per outcome.
const PER_LIMIT: usize = OUTCOMES.len();

/// The column of `d`'s outcome.
fn outcome(d: &Decision) -> usize {
    if !d.is_allowed() {
        DENIED
    } else if d.delay_ns() == 0 {
        ALLOWED
    } else {
        DELAYED
    }
}

/// The rows and columns of the process.
static ROWS: Table = Table::new();

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
            ROWS.give_back(row);
        }
    }
}

/// The counters of one layer: per limit, a decision count for each outcome, then the key
/// extractors' rejections.
pub(crate) struct Registry {
    width: usize,
    /// The layer's first column in every thread's row; [`OFF_ROWS`] when it does not count in
    /// the rows (metrics off, or no free columns). A copy of `columns`' base, tested on every
    /// record.
    base: usize,
    /// The layer's columns in the rows, freed (and zeroed) when the layer is dropped.
    columns: Option<Columns>,
    /// The layer's own counters, shared by all threads, when the rows had no room.
    own: Option<rows::Shared>,
}

/// [`Registry::base`] of a layer that does not count in the rows.
const OFF_ROWS: usize = usize::MAX;

impl Registry {
    pub(crate) fn new(limits: usize, on: bool) -> Self {
        let width = limits * PER_LIMIT + 1;
        let columns = if on {
            Columns::claim(&ROWS, width)
        } else {
            None
        };
        Self {
            width,
            base: columns.as_ref().map_or(OFF_ROWS, Columns::base),
            own: (on && columns.is_none()).then(|| rows::Shared::new(width)),
            columns,
        }
    }

    /// Counts the decision of a layer with one limit.
    #[inline]
    pub(crate) fn record_one(&self, d: &Decision) {
        if self.base != OFF_ROWS {
            let row = match ROW.with(Cell::get) {
                Some(row) => row,
                None => first_row(),
            };
            // Each outcome adds to its fixed column, and the two rarer ones out of line. Not
            // one add to a column computed from the decision: the compiler may compute it
            // without a branch, and then the counter's address waits for the decision and the
            // next check's locked compare-and-swap waits for that store. Calls to two
            // different functions cannot be merged into one computed add, so the branches stay
            // branches, which the CPU predicts and runs ahead of the decision.
            if d.is_allowed() && d.delay_ns() == 0 {
                row.bump(self.base + ALLOWED);
            } else if !d.is_allowed() {
                self.record_denied(row);
            } else {
                self.record_delayed(row);
            }
        } else if let Some(own) = &self.own {
            own.add(outcome(d));
        }
    }

    /// Counts a denial in `row` (see [`Registry::record_one`]).
    #[inline(never)]
    fn record_denied(&self, row: &Row) {
        row.bump(self.base + DENIED);
    }

    /// Counts a delayed admission in `row` (see [`Registry::record_one`]).
    #[cold]
    #[inline(never)]
    fn record_delayed(&self, row: &Row) {
        row.bump(self.base + DELAYED);
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
            // `claim` placed `base + col` below COLUMNS; `bump` masks it into range, which
            // changes nothing and saves the bounds check.
            let i = self.base + col;
            match ROW.with(Cell::get) {
                Some(row) => row.bump(i),
                None => first_row().bump(i),
            }
        } else if let Some(own) = &self.own {
            own.add(col);
        }
    }

    /// Column sums over every thread's row.
    fn totals(&self) -> Vec<u64> {
        match (&self.columns, &self.own) {
            (Some(c), _) => c.totals(),
            (None, Some(own)) => own.totals(),
            (None, None) => vec![0; self.width],
        }
    }
}

/// Not part of the API (hidden, may change without notice): the layer's recording of one
/// limit's decision, on its own, for `benches/record_check.rs`, which measures what recording
/// adds to a check.
///
/// # Examples
///
/// ```
/// use cellgate::{Limiter, Quota};
/// use cellgate_http::BenchRecording;
///
/// let limiter = Limiter::gcra(Quota::per_second(10)).build()?;
/// let recording = BenchRecording::new(true);
/// recording.record(&limiter.check());
/// assert_eq!(recording.totals()[0], 1); // one `allowed`
/// # Ok::<(), cellgate::ConfigError>(())
/// ```
#[doc(hidden)]
pub struct BenchRecording(Registry);

impl BenchRecording {
    /// The counters of a layer with one limit, with metrics on or off.
    pub fn new(on: bool) -> Self {
        Self(Registry::new(1, on))
    }

    /// Counts `d` as the layer does after its check.
    #[inline]
    pub fn record(&self, d: &Decision) {
        self.0.record_one(d);
    }

    /// The counts (allowed, denied, delayed, rejected) over every thread.
    pub fn totals(&self) -> Vec<u64> {
        self.0.totals()
    }
}

/// This thread's row on its first record: a free row or a new one, given back at exit.
#[cold]
#[inline(never)]
fn first_row() -> &'static Row {
    let row = ROWS.take();
    ROW.with(|r| r.set(Some(row)));
    // Register the destructor that gives the row back. During this thread's own TLS
    // destruction that is refused: the row then stays with the exited thread (its counts
    // are still summed), a few KiB in a case that needs a destructor recording a request.
    let _ = GIVE_BACK.try_with(|_| ());
    row
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
    shared: Weak<dyn Source>,
}

/// What a layer's metrics are read from: its counters and its limits (the layer's shared state
/// implements it; the handle holds it weakly).
pub(crate) trait Source: Send + Sync {
    /// The layer's decision counters.
    fn registry(&self) -> &Registry;
    /// The layer's limits, in order.
    fn limits(&self) -> &[Limit];
}

impl fmt::Debug for MetricsHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("MetricsHandle")
    }
}

impl MetricsHandle {
    pub(crate) fn new<S: Source + 'static>(shared: &Arc<S>) -> Self {
        let weak: Weak<S> = Arc::downgrade(shared);
        Self { shared: weak }
    }

    /// Sends the current totals to the recorder; returns `false` once the layer (and every
    /// service made from it) is gone.
    pub fn publish(&self) -> bool {
        let Some(shared) = self.shared.upgrade() else {
            return false;
        };
        let totals = shared.registry().totals();
        for (i, l) in shared.limits().iter().enumerate() {
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
            if let Some(s) = l.stats() {
                let label = [("limit", name.clone())];
                metrics::gauge!("cellgate_http_keys", &label).set(s.keys as f64);
                metrics::counter!("cellgate_http_key_refusals_total", &label).absolute(s.refused);
                for (reason, n) in [("fresh", s.evicted), ("live", s.evicted_live)] {
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
    use crate::{Global, Limit, RateLimitLayer};
    use cellgate::{KeyedLimiter, Limiter, Quota};
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
        let stock = KeyedLimiter::<String>::stock(3).build().unwrap();
        let layer = RateLimitLayer::builder()
            .limit(
                Limit::new(
                    "rate",
                    Global,
                    Limiter::gcra(Quota::per_minute(1_000)).build().unwrap(),
                )
                .cost(2),
            )
            .limit(Limit::new("stock", crate::HeaderKey::new("x-k"), stock))
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

    fn allowed(layer: &RateLimitLayer) -> u64 {
        layer.shared.metrics.totals()[ALLOWED]
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
        let rows = ROWS.rows_made();
        assert!(rows < 100, "{rows} rows for at most a few live threads");
    }

    #[test]
    fn sums_are_exact_and_never_go_back_while_threads_come_and_go() {
        let l = layer();
        // Dropping the sender tells the publisher to stop.
        let (stop, stopped) = std::sync::mpsc::channel::<()>();
        let publisher = {
            let l = l.clone();
            std::thread::spawn(move || {
                let mut last = 0;
                let mut reads = 0u32;
                let running = || stopped.try_recv() == Err(std::sync::mpsc::TryRecvError::Empty);
                while running() || reads == 0 {
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
        drop(stop);
        publisher.join().unwrap();
        assert_eq!(allowed(&l), 10 * 4 * (250 + 20_000));
    }

    #[test]
    fn each_outcome_of_one_limit_counts_in_its_own_column() {
        // One request every 100 ms, and one more queued behind it: admitted, delayed, denied.
        let q = Quota::with_interval(std::time::Duration::from_millis(100)).with_queue(1);
        let l = Limiter::gcra(q).build().unwrap();
        let (now, queued, over) = (l.check(), l.check(), l.check());
        assert!(now.is_allowed() && now.delay_ns() == 0);
        assert!(queued.is_allowed() && queued.delay_ns() > 0);
        assert!(!over.is_allowed());
        let reg = Registry::new(1, true);
        for d in [now, queued, queued, over, over, over] {
            reg.record_one(&d);
        }
        // On another thread too: its own row, summed with this one's.
        std::thread::scope(|s| {
            s.spawn(|| reg.record_one(&over));
        });
        let mut want = vec![0; PER_LIMIT + 1];
        want[ALLOWED] = 1;
        want[DELAYED] = 2;
        want[DENIED] = 4;
        assert_eq!(reg.totals(), want);
    }

    /// One test, so that nothing else here fills the columns meanwhile (layers built by the
    /// other tests take a few columns at a time, which leaves room for these).
    #[test]
    fn columns_are_reused_from_zero_and_a_layer_without_room_counts_on_its_own() {
        // More layers, one after the other, than the rows have columns for: each must count
        // in the rows (columns were freed) and start from zero (they were cleared).
        for round in 0..2 * COLUMNS {
            let l = layer();
            assert_ne!(l.shared.metrics.base, OFF_ROWS, "round {round}");
            serve(&l, 3);
            assert_eq!(allowed(&l), 3, "round {round}");
        }
        // Every column taken: the next layer counts on its own counters. The other tests here
        // build and drop layers meanwhile, so a column one of them frees can go to a layer made
        // after the columns first ran out: keep what is made until a layer finds no column.
        let mut held = Vec::new();
        let l = loop {
            let l = layer();
            if l.shared.metrics.base == OFF_ROWS {
                break l;
            }
            held.push(l);
            assert!(held.len() <= 2 * COLUMNS, "the columns never ran out");
        };
        assert!(l.shared.metrics.own.is_some());
        let clone = l.clone();
        std::thread::spawn(move || serve(&clone, 5)).join().unwrap();
        serve(&l, 2);
        assert_eq!(allowed(&l), 7);
        drop(held);
        // Freed again: a new layer counts in the rows, from zero.
        let l = layer();
        assert_ne!(l.shared.metrics.base, OFF_ROWS);
        serve(&l, 1);
        assert_eq!(allowed(&l), 1);
    }
}
