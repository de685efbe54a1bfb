//! Metrics through the `metrics` facade (feature `metrics`).
//!
//! # Implementation details
//!
//! A check must not pay for a registry lookup or a contended atomic. Each thread that records
//! for a layer gets its own row of counters (allocated on its first record, registered with
//! the layer once); a record is a plain load and store on the thread's own row. Publishing
//! ([`MetricsHandle::publish`], at scrape time or from [`MetricsHandle::spawn_publisher`]
//! once a second) sums the rows and hands the totals to the recorder with `absolute`, so the
//! registry is touched only then.
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

use std::cell::RefCell;
use std::fmt;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::Duration;

use cellgate::{Decision, KeyedLimiter};

use crate::admit::Shared;
use crate::limit::Limit;

const ALLOWED: usize = 0;
const DENIED: usize = 1;
const DELAYED: usize = 2;
const OUTCOMES: [&str; 3] = ["allowed", "denied", "delayed"];
/// Per limit: decisions and units for each outcome.
const PER_LIMIT: usize = 2 * OUTCOMES.len();

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

/// Layer ids, so a thread can tell its rows for different layers apart.
static NEXT_ID: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    /// This thread's rows: (layer id, row). Few layers per process, so a short list.
    static ROWS: RefCell<Vec<(usize, Arc<[AtomicU64]>)>> = const { RefCell::new(Vec::new()) };
}

/// The counters of one layer.
pub(crate) struct Registry {
    id: usize,
    width: usize,
    on: bool,
    rows: Mutex<Vec<Arc<[AtomicU64]>>>,
}

impl Registry {
    pub(crate) fn new(limits: &[Limit], on: bool) -> Self {
        Self {
            // Relaxed: only uniqueness matters, which the atomic increment gives at any ordering.
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
            width: limits.len() * PER_LIMIT + 1,
            on,
            rows: Mutex::new(Vec::new()),
        }
    }

    /// Runs `f` on this thread's row, creating and registering it on first use.
    #[inline]
    fn with_row(&self, f: impl FnOnce(&[AtomicU64])) {
        ROWS.with(|rows| {
            let mut rows = rows.borrow_mut();
            if let Some((_, row)) = rows.iter().find(|(id, _)| *id == self.id) {
                f(row);
                return;
            }
            let row: Arc<[AtomicU64]> = (0..self.width).map(|_| AtomicU64::new(0)).collect();
            self.rows
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .push(row.clone());
            f(&row);
            rows.push((self.id, row));
        });
    }

    pub(crate) fn rejected(&self) {
        if self.on {
            self.with_row(|row| bump(&row[self.width - 1], 1));
        }
    }

    pub(crate) fn record(
        &self,
        limits: &[Limit],
        decisions: &[Decision],
        denied_by: Option<usize>,
    ) {
        if !self.on {
            return;
        }
        self.with_row(|row| match denied_by {
            Some(i) => {
                bump(&row[i * PER_LIMIT + DENIED], 1);
                bump(
                    &row[i * PER_LIMIT + OUTCOMES.len() + DENIED],
                    u64::from(limits[i].cost_per_request()),
                );
            }
            None => {
                for (i, (l, d)) in limits.iter().zip(decisions).enumerate() {
                    let o = if d.delay().is_zero() {
                        ALLOWED
                    } else {
                        DELAYED
                    };
                    bump(&row[i * PER_LIMIT + o], 1);
                    bump(
                        &row[i * PER_LIMIT + OUTCOMES.len() + o],
                        u64::from(l.cost_per_request()),
                    );
                }
            }
        });
    }

    /// Column sums over every thread's row.
    fn totals(&self) -> Vec<u64> {
        let mut sums = vec![0u64; self.width];
        for row in self
            .rows
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
        {
            for (s, c) in sums.iter_mut().zip(row.iter()) {
                // Relaxed: a statistic; coherence makes each row's value monotonic as read.
                *s += c.load(Ordering::Relaxed);
            }
        }
        sums
    }
}

/// Adds `n` to a counter only this thread writes: a load and a store, not a locked
/// read-modify-write. Relaxed: no other memory is published through the counter, and with a
/// single writer no increment can be lost.
#[inline]
fn bump(c: &AtomicU64, n: u64) {
    c.store(c.load(Ordering::Relaxed).wrapping_add(n), Ordering::Relaxed);
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
                metrics::counter!("cellgate_http_units_total", &labels)
                    .absolute(totals[i * PER_LIMIT + OUTCOMES.len() + o]);
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
    use crate::{Global, RateLimitLayer};
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
