//! ratelimit's statsd counters (`USE_STATSD`, `STATSD_HOST`, `STATSD_PORT`,
//! `STATS_FLUSH_INTERVAL`): every flush interval, the counts since the last one, under the
//! names ratelimit's statsd sink gives them (`ratelimit.service.rate_limit.<key>.total_hits`,
//! ...), which statsd_exporter's mapping in ratelimit's examples turns into the Prometheus
//! names `/metrics` serves.
//!
//! Sent over UDP, buffered into datagrams by cadence: a statsd that is down or slow costs a
//! lost datagram, never a decision (the send happens on its own task, once per interval).

use std::net::{ToSocketAddrs, UdpSocket};
use std::sync::Arc;
use std::time::Duration;

use cadence::{BufferedUdpMetricSink, Counted, StatsdClient};

use crate::metrics::{Metrics, STATSD_HITS};

/// Where and how often the statsd counters are sent.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use cellgate_server::server::{Settings, Statsd};
/// let settings = Settings {
///     statsd: Some(Statsd { addr: "localhost:8125".into(), flush_interval: Duration::from_secs(10) }),
///     ..Settings::default()
/// };
/// assert!(settings.statsd.is_some());
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Statsd {
    /// The statsd server, `host:port` (resolved once, at start).
    pub addr: String,
    /// How often the counts are sent.
    pub flush_interval: Duration,
}

/// A client sending to `statsd`'s address; an error names the address when it does not
/// resolve or no socket can be bound.
pub(crate) fn client(statsd: &Statsd) -> Result<StatsdClient, String> {
    let fail = |e: &dyn std::fmt::Display| format!("statsd at {}: {e}", statsd.addr);
    let to = (statsd.addr.as_str().to_socket_addrs())
        .map_err(|e| fail(&e))?
        .next()
        .ok_or_else(|| fail(&"no address"))?;
    let local = if to.is_ipv4() { "0.0.0.0:0" } else { "[::]:0" };
    let socket = UdpSocket::bind(local).map_err(|e| fail(&e))?;
    let sink = BufferedUdpMetricSink::from(to, socket).map_err(|e| fail(&e))?;
    Ok(StatsdClient::from_sink("", sink))
}

/// Sends the counts every `interval` until `stop`, then once more.
pub(crate) async fn run(
    client: StatsdClient,
    metrics: Arc<Metrics>,
    interval: Duration,
    stop: impl std::future::Future<Output = ()>,
) {
    tokio::pin!(stop);
    let mut sent = [0; 4];
    loop {
        let stopping = tokio::select! {
            () = &mut stop => true,
            () = tokio::time::sleep(interval) => false,
        };
        flush(&client, &metrics, &mut sent);
        if stopping {
            return;
        }
    }
}

/// One flush: each series' new hits, and each total's growth since `sent` (updated).
fn flush(client: &StatsdClient, metrics: &Metrics, sent: &mut [u64; 4]) {
    let mut failed = 0;
    for (key, hits) in metrics.take_statsd_hits() {
        let key = sanitize(&key);
        for (name, n) in STATSD_HITS.iter().zip(hits) {
            if n > 0 {
                let metric = format!("ratelimit.service.rate_limit.{key}.{name}");
                failed += usize::from(client.count(&metric, count(n)).is_err());
            }
        }
    }
    for ((name, total), last) in metrics.statsd_totals().into_iter().zip(sent.iter_mut()) {
        if total > *last {
            failed += usize::from(client.count(name, count(total - *last)).is_err());
            *last = total;
        }
    }
    if client.flush().is_err() || failed > 0 {
        tracing::debug!(failed, "statsd: counts not sent");
    }
}

/// `n` as statsd's signed count.
fn count(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// A stat key as a statsd name part: `:` and `|` (statsd's separators) become `_`, as
/// ratelimit's sanitizer writes them.
fn sanitize(key: &str) -> std::borrow::Cow<'_, str> {
    if key.contains([':', '|']) {
        key.replace([':', '|'], "_").into()
    } else {
        key.into()
    }
}

#[cfg(test)]
mod tests {
    use super::sanitize;

    #[test]
    fn statsd_separators_in_keys_become_underscores() {
        assert_eq!(sanitize("d.k_a:b|c"), "d.k_a_b_c");
        assert_eq!(sanitize("d.k_v"), "d.k_v");
    }
}
