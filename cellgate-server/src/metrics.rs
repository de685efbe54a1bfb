//! The Prometheus metrics served on `GET /metrics`, under the names envoyproxy/ratelimit's
//! Prometheus mapping gives its statsd counters.
//!
//! ratelimit exports `ratelimit_service_rate_limit_total_hits{domain,key1[,key2]}` and its
//! siblings without the OpenMetrics `_total` suffix. prometheus-client appends that suffix to
//! every counter, so the counters here are encoded as metrics of type `unknown` under their exact
//! names: dashboards and alerts written for ratelimit keep working unchanged.

use std::sync::Arc;

use cellgate::clock::{Clock, QuantaClock};
use prometheus_client::encoding::{EncodeMetric, MetricEncoder};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::{MetricType, TypedMetric};
use prometheus_client::registry::Registry;

use crate::api::StatHits;
use crate::sync::{BoundedMap, BoundedSet, Histogram, Tally};

/// The response-time buckets' upper bounds, in nanoseconds: Prometheus' default buckets (5 ms
/// to 10 s, which ratelimit's mapping uses), with four below them (100 µs to 1 ms), where a
/// decision taken in memory lands.
const RESPONSE_TIME_BOUNDS: [u64; 17] = [
    100_000,
    250_000,
    500_000,
    1_000_000,
    2_500_000,
    5_000_000,
    10_000_000,
    25_000_000,
    50_000_000,
    100_000_000,
    250_000_000,
    500_000_000,
    1_000_000_000,
    2_500_000_000,
    5_000_000_000,
    10_000_000_000,
    u64::MAX,
];

/// The statsd names of a series' counts, after `ratelimit.service.rate_limit.<key>.`.
pub(crate) const STATSD_HITS: [&str; 5] = [
    "total_hits",
    "over_limit",
    "near_limit",
    "within_limit",
    "shadow_mode",
];

type ResponseTimes = Histogram<{ RESPONSE_TIME_BOUNDS.len() }>;

/// `ShouldRateLimit`'s response times, as ratelimit's `ratelimit_service_response_time_seconds`
/// histogram: in seconds, or in milliseconds when `per_unit` is 1e6 (nanoseconds a unit).
#[derive(Clone, Debug)]
struct ResponseTime {
    times: Arc<ResponseTimes>,
    per_unit: f64,
}

impl TypedMetric for ResponseTime {
    const TYPE: MetricType = MetricType::Histogram;
}

impl EncodeMetric for ResponseTime {
    fn encode(&self, mut encoder: MetricEncoder) -> Result<(), std::fmt::Error> {
        let snap = self.times.snapshot();
        // The encoder accumulates the counts and writes `f64::MAX` as `+Inf`.
        let buckets: Vec<(f64, u64)> = snap
            .bounds
            .iter()
            .zip(snap.counts)
            .map(|(&b, n)| {
                let bound = if b == u64::MAX {
                    f64::MAX
                } else {
                    b as f64 / self.per_unit
                };
                (bound, n)
            })
            .collect();
        encoder.encode_histogram::<prometheus_client::encoding::NoLabelSet>(
            snap.sum as f64 / self.per_unit,
            snap.count,
            &buckets,
            None,
        )
    }

    fn metric_type(&self) -> MetricType {
        MetricType::Histogram
    }
}

/// `ShouldRateLimit` requests served, as ratelimit's `ratelimit_service_total_requests`: the
/// response-time histogram's count (each request is recorded there once).
#[derive(Clone, Debug)]
struct Requests(Arc<ResponseTimes>);

impl TypedMetric for Requests {
    const TYPE: MetricType = MetricType::Unknown;
}

impl EncodeMetric for Requests {
    fn encode(&self, mut encoder: MetricEncoder) -> Result<(), std::fmt::Error> {
        let n = self.0.snapshot().count;
        encoder.encode_gauge(&i64::try_from(n).unwrap_or(i64::MAX))
    }

    fn metric_type(&self) -> MetricType {
        MetricType::Unknown
    }
}

/// A monotonic count encoded under its exact name (see the module docs).
#[derive(Clone, Debug, Default)]
pub(crate) struct Count(Counter);

impl Count {
    /// The count so far.
    pub(crate) fn get(&self) -> u64 {
        self.0.get()
    }

    /// Adds `n`.
    pub(crate) fn add(&self, n: u64) {
        self.0.inc_by(n);
    }
}

impl TypedMetric for Count {
    const TYPE: MetricType = MetricType::Unknown;
}

impl EncodeMetric for Count {
    fn encode(&self, mut encoder: MetricEncoder) -> Result<(), std::fmt::Error> {
        // `unknown` metrics are encoded like gauges: the value under the bare name.
        let v = i64::try_from(self.0.get()).unwrap_or(i64::MAX);
        encoder.encode_gauge(&v)
    }

    fn metric_type(&self) -> MetricType {
        MetricType::Unknown
    }
}

/// A total kept elsewhere (a fleet's backend errors, summed over its limits at each scrape),
/// encoded as [`Count`] is: it only grows, and is set rather than added to.
#[derive(Clone, Debug, Default)]
pub(crate) struct Seen(Gauge);

impl Seen {
    fn set(&self, n: u64) {
        self.0.set(i64::try_from(n).unwrap_or(i64::MAX));
    }
}

impl TypedMetric for Seen {
    const TYPE: MetricType = MetricType::Unknown;
}

impl EncodeMetric for Seen {
    fn encode(&self, mut encoder: MetricEncoder) -> Result<(), std::fmt::Error> {
        encoder.encode_gauge(&self.0.get())
    }

    fn metric_type(&self) -> MetricType {
        MetricType::Unknown
    }
}

type Labels = Vec<(&'static str, Arc<str>)>;

/// Every metric of the server.
pub(crate) struct Metrics {
    registry: Registry,
    total_hits: Family<Labels, Count>,
    over_limit: Family<Labels, Count>,
    near_limit: Family<Labels, Count>,
    within_limit: Family<Labels, Count>,
    shadow_mode: Family<Labels, Count>,
    pub(crate) config_load_success: Count,
    pub(crate) config_load_error: Count,
    request_errors: Family<Vec<(&'static str, &'static str)>, Count>,
    series_dropped: Count,
    live_keys: Gauge,
    fleet_limits: Family<Vec<(&'static str, &'static str)>, Gauge>,
    fleet_backend_errors: Seen,
    pub(crate) fleet_waited: Count,
    /// gRPC over TLS: the certificate files read (at start and each reload) and refused.
    pub(crate) tls_load_success: Count,
    pub(crate) tls_load_error: Count,
    /// gRPC over TLS: handshakes that failed or timed out.
    pub(crate) tls_handshake_errors: Count,
    series: BoundedSet<Arc<str>>,
    /// With the statsd sink on: each series' hits since the sink last sent them, in
    /// [`STATSD_HITS`] order.
    statsd: Option<BoundedMap<Arc<str>, Tally<5>>>,
    response_times: Arc<ResponseTimes>,
    /// Times requests: the time-stamp counter (a few nanoseconds a read, against tens for
    /// `Instant::now` on a virtual machine's clock).
    clock: QuantaClock,
}

/// See [`Metrics::time_request`].
pub(crate) struct RequestTimer<'a> {
    metrics: &'a Metrics,
    start: u64,
}

impl Drop for RequestTimer<'_> {
    fn drop(&mut self) {
        // Saturating: the counter is not promised monotonic across cores.
        let took = self.metrics.clock.now().saturating_sub(self.start);
        self.metrics.response_times.record(took);
    }
}

impl Metrics {
    /// The metrics, with at most `max_series` distinct descriptor keys; response times in
    /// milliseconds if `response_time_ms` (ratelimit's legacy unit), else in seconds.
    pub(crate) fn new(max_series: usize, response_time_ms: bool, statsd: bool) -> Self {
        let mut registry = Registry::default();
        let m = Metrics {
            registry: Registry::default(),
            total_hits: Family::default(),
            over_limit: Family::default(),
            near_limit: Family::default(),
            within_limit: Family::default(),
            shadow_mode: Family::default(),
            config_load_success: Count::default(),
            config_load_error: Count::default(),
            request_errors: Family::default(),
            series_dropped: Count::default(),
            live_keys: Gauge::default(),
            fleet_limits: Family::default(),
            fleet_backend_errors: Seen::default(),
            fleet_waited: Count::default(),
            tls_load_success: Count::default(),
            tls_load_error: Count::default(),
            tls_handshake_errors: Count::default(),
            series: BoundedSet::new(max_series),
            statsd: statsd.then(|| BoundedMap::new(max_series)),
            response_times: Arc::new(Histogram::new(RESPONSE_TIME_BOUNDS)),
            clock: QuantaClock::new(),
        };
        let hits = [
            ("total_hits", "Units asked for", &m.total_hits),
            ("over_limit", "Units refused", &m.over_limit),
            (
                "near_limit",
                "Units admitted past the near-limit ratio",
                &m.near_limit,
            ),
            ("within_limit", "Units admitted", &m.within_limit),
            (
                "shadow_mode",
                "Units over a shadow-mode limit, admitted",
                &m.shadow_mode,
            ),
        ];
        for (name, help, family) in hits {
            registry.register(
                format!("ratelimit_service_rate_limit_{name}"),
                help,
                family.clone(),
            );
        }
        registry.register(
            "ratelimit_service_config_load_success",
            "Configurations loaded",
            m.config_load_success.clone(),
        );
        registry.register(
            "ratelimit_service_config_load_error",
            "Configurations refused (the previous one stays in force)",
            m.config_load_error.clone(),
        );
        registry.register(
            "ratelimit_service_should_rate_limit_error",
            "Requests refused as malformed",
            m.request_errors.clone(),
        );
        registry.register(
            "cellgate_metric_series_dropped",
            "Descriptor hits not counted because the series cap was reached",
            m.series_dropped.clone(),
        );
        registry.register(
            "cellgate_live_keys",
            "Limiter keys held, over all limits",
            m.live_keys.clone(),
        );
        registry.register(
            "cellgate_fleet_limits",
            "Fleet mode: limits in force per state of Redis (connected, fallback, partitioned, \
             forgotten)",
            m.fleet_limits.clone(),
        );
        registry.register(
            "cellgate_fleet_backend_errors",
            "Fleet mode: Redis commands that failed or timed out, over every limit",
            m.fleet_backend_errors.clone(),
        );
        registry.register(
            "cellgate_fleet_requests_waited",
            "Fleet mode: requests that had to wait for Redis (a key without a lease here), \
             decided off the threads that serve the network",
            m.fleet_waited.clone(),
        );
        registry.register(
            "cellgate_grpc_tls_load_success",
            "gRPC over TLS: certificate files read, at start and on a change",
            m.tls_load_success.clone(),
        );
        registry.register(
            "cellgate_grpc_tls_load_error",
            "gRPC over TLS: certificate files refused on a change (the previous ones stay in \
             force)",
            m.tls_load_error.clone(),
        );
        registry.register(
            "cellgate_grpc_tls_handshake_errors",
            "gRPC over TLS: handshakes that failed or timed out",
            m.tls_handshake_errors.clone(),
        );
        let grpc =
            registry.sub_registry_with_label(("grpc_method".into(), "ShouldRateLimit".into()));
        grpc.register(
            "ratelimit_service_total_requests",
            "gRPC ShouldRateLimit requests answered (or cancelled)",
            Requests(Arc::clone(&m.response_times)),
        );
        grpc.register(
            "ratelimit_service_response_time_seconds",
            "gRPC ShouldRateLimit: time from the request decoded to the answer made (or the \
             request cancelled)",
            ResponseTime {
                times: Arc::clone(&m.response_times),
                per_unit: if response_time_ms { 1e6 } else { 1e9 },
            },
        );
        Metrics { registry, ..m }
    }

    /// Times one gRPC `ShouldRateLimit` request, from now until the timer is dropped: when its
    /// answer is made, and also when the request is cancelled (its client went away, or
    /// `--request-timeout-ms` passed), which a record after the handler's `await` would miss,
    /// and which are the slowest.
    pub(crate) fn time_request(&self) -> RequestTimer<'_> {
        RequestTimer {
            metrics: self,
            start: self.clock.now(),
        }
    }

    /// Counts one descriptor's hits; `domain` is the request's.
    pub(crate) fn record(&self, domain: &str, hits: &StatHits) {
        if !self.series.admit(&hits.key) {
            self.series_dropped.add(1);
            return;
        }
        let labels = labels(domain, &hits.key);
        self.total_hits.get_or_create(&labels).add(hits.total_hits);
        let pairs = [
            (&self.over_limit, hits.over_limit),
            (&self.near_limit, hits.near_limit),
            (&self.within_limit, hits.within_limit),
            (&self.shadow_mode, hits.shadow_mode),
        ];
        for (family, n) in pairs {
            if n > 0 {
                family.get_or_create(&labels).add(n);
            }
        }
        if let Some(tally) = self
            .statsd
            .as_ref()
            .and_then(|m| m.get_or_default(&hits.key))
        {
            let counts = [
                hits.total_hits,
                hits.over_limit,
                hits.near_limit,
                hits.within_limit,
                hits.shadow_mode,
            ];
            for (i, n) in counts.into_iter().enumerate() {
                if n > 0 {
                    tally.add(i, n);
                }
            }
        }
    }

    /// With the statsd sink on, each series' key and its hits since the last call, in
    /// [`STATSD_HITS`] order (taken: the next call counts from zero).
    pub(crate) fn take_statsd_hits(&self) -> Vec<(Arc<str>, [u64; 5])> {
        let Some(map) = &self.statsd else {
            return Vec::new();
        };
        map.entries()
            .into_iter()
            .map(|(key, tally)| (key, std::array::from_fn(|i| tally.take(i))))
            .collect()
    }

    /// The totals the statsd sink sends besides the series, by ratelimit's statsd names: the
    /// configurations loaded and refused, the requests refused as malformed, the gRPC
    /// requests answered.
    pub(crate) fn statsd_totals(&self) -> [(&'static str, u64); 4] {
        let errors = self
            .request_errors
            .get(&vec![("err_type", "service_error")])
            .map_or(0, |c| c.get());
        [
            (
                "ratelimit.service.config_load_success",
                self.config_load_success.get(),
            ),
            (
                "ratelimit.service.config_load_error",
                self.config_load_error.get(),
            ),
            (
                "ratelimit.service.call.should_rate_limit.service_error",
                errors,
            ),
            (
                "ratelimit_server.ShouldRateLimit.total_requests",
                self.response_times.snapshot().count,
            ),
        ]
    }

    /// Counts one request refused as malformed.
    pub(crate) fn request_error(&self) {
        self.request_errors
            .get_or_create(&vec![("err_type", "service_error")])
            .add(1);
    }

    /// The metrics in the Prometheus text format, with `live_keys` as the live-keys gauge.
    /// In fleet mode, `fleet` sets the fleet's gauges.
    pub(crate) fn encode(&self, live_keys: usize, fleet: Option<&crate::fleet::Report>) -> String {
        self.live_keys
            .set(i64::try_from(live_keys).unwrap_or(i64::MAX));
        if let Some(report) = fleet {
            for ((_, label), n) in crate::fleet::STATES.iter().zip(report.states) {
                self.fleet_limits
                    .get_or_create(&vec![("state", *label)])
                    .set(i64::try_from(n).unwrap_or(i64::MAX));
            }
            self.fleet_backend_errors.set(report.backend_errors);
        }
        let mut out = String::new();
        // Writing to a String cannot fail; an error here would be a bug in the encoder.
        if prometheus_client::encoding::text::encode(&mut out, &self.registry).is_err() {
            out.clear();
        }
        out
    }
}

/// The labels ratelimit's mapping derives from a stat key `domain.key1[.key2[...]]`: the domain,
/// the first descriptor entry and the second (deeper entries are not labelled, as there).
fn labels(domain: &str, key: &str) -> Labels {
    let rest = key
        .strip_prefix(domain)
        .and_then(|r| r.strip_prefix('.'))
        .unwrap_or(key);
    let mut parts = rest.splitn(3, '.');
    let mut labels: Labels = vec![("domain", Arc::from(domain))];
    if let Some(k1) = parts.next() {
        labels.push(("key1", Arc::from(k1)));
    }
    if let Some(k2) = parts.next() {
        labels.push(("key2", Arc::from(k2)));
    }
    labels
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_follow_ratelimits_mapping() {
        let l = labels("shop.eu", "shop.eu.path_/api.user.deep");
        let names: Vec<_> = l.iter().map(|(k, v)| format!("{k}={v}")).collect();
        assert_eq!(names, ["domain=shop.eu", "key1=path_/api", "key2=user"]);
    }

    #[test]
    fn counts_are_encoded_under_exact_names_and_series_are_capped() {
        let m = Metrics::new(1, false, false);
        let hits = |key: &str| StatHits {
            key: key.into(),
            total_hits: 2,
            over_limit: 1,
            within_limit: 1,
            ..StatHits::default()
        };
        m.record("d", &hits("d.k"));
        m.record("d", &hits("d.other"));
        let text = m.encode(7, None);
        assert!(text.contains("ratelimit_service_rate_limit_total_hits{domain=\"d\",key1=\"k\"} 2"));
        assert!(text.contains("ratelimit_service_rate_limit_over_limit{domain=\"d\",key1=\"k\"} 1"));
        assert!(!text.contains("other"));
        assert!(text.contains("cellgate_metric_series_dropped 1"));
        assert!(text.contains("cellgate_live_keys 7"));
    }

    #[test]
    fn response_times_are_ratelimits_histogram_in_seconds() {
        let m = Metrics::new(1, false, false);
        for us in [50, 300, 300, 20_000] {
            m.response_times.record(us * 1_000);
        }
        // A timer records once, when dropped.
        drop(m.time_request());
        let text = m.encode(0, None);
        let method = r#"grpc_method="ShouldRateLimit""#;
        for want in [
            format!("ratelimit_service_total_requests{{{method}}} 5\n"),
            format!("ratelimit_service_response_time_seconds_count{{{method}}} 5\n"),
            // 20,650 µs and the timer's few.
            format!("ratelimit_service_response_time_seconds_sum{{{method}}} 0.0206"),
            format!(r#"ratelimit_service_response_time_seconds_bucket{{{method},le="0.0001"}} 2"#),
            format!(r#"ratelimit_service_response_time_seconds_bucket{{{method},le="0.00025"}} 2"#),
            format!(r#"ratelimit_service_response_time_seconds_bucket{{{method},le="0.0005"}} 4"#),
            format!(r#"ratelimit_service_response_time_seconds_bucket{{{method},le="0.01"}} 4"#),
            format!(r#"ratelimit_service_response_time_seconds_bucket{{{method},le="0.025"}} 5"#),
            format!(r#"ratelimit_service_response_time_seconds_bucket{{{method},le="+Inf"}} 5"#),
            "# TYPE ratelimit_service_response_time_seconds histogram".to_string(),
        ] {
            assert!(text.contains(&want), "{want} not in\n{text}");
        }
        // In milliseconds, as ratelimit's PROMETHEUS_RESPONSE_TIME_AS_MILLISECONDS.
        let m = Metrics::new(1, true, false);
        m.response_times.record(300_000);
        let text = m.encode(0, None);
        for want in [
            format!("ratelimit_service_response_time_seconds_sum{{{method}}} 0.3\n"),
            format!(r#"ratelimit_service_response_time_seconds_bucket{{{method},le="0.25"}} 0"#),
            format!(r#"ratelimit_service_response_time_seconds_bucket{{{method},le="0.5"}} 1"#),
            format!(r#"ratelimit_service_response_time_seconds_bucket{{{method},le="10000.0"}} 1"#),
        ] {
            assert!(text.contains(&want), "{want} not in\n{text}");
        }
    }
}
