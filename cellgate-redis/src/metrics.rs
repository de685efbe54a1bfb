//! The fleet's counters through the `metrics` facade (feature `metrics`), published by the
//! background task, never from a check.

use crate::report::FleetStats;
use crate::report::KeyedStats;

/// Publishes one limiter's counters, labelled `limit = name`:
/// `cellgate_fleet_leased_units` (gauge), `cellgate_fleet_lease_requests`,
/// `cellgate_fleet_backend_errors`, `cellgate_fleet_charged_back_units`,
/// `cellgate_fleet_commands` (counters, absolute), `cellgate_fleet_state` (gauge: 0 connected,
/// 1 fallback, 2 partitioned, 3 forgotten) and `cellgate_fleet_live_holders` (gauge).
pub(crate) fn publish(name: &str, s: &FleetStats, state: u8) {
    let label = [("limit", name.to_owned())];
    metrics::gauge!("cellgate_fleet_leased_units", &label).set(s.leased as f64);
    metrics::counter!("cellgate_fleet_lease_requests", &label).absolute(s.lease_requests);
    metrics::counter!("cellgate_fleet_backend_errors", &label).absolute(s.backend_errors);
    metrics::counter!("cellgate_fleet_charged_back_units", &label).absolute(s.charged_back);
    metrics::counter!("cellgate_fleet_commands", &label).absolute(s.commands);
    metrics::gauge!("cellgate_fleet_state", &label).set(f64::from(state));
    metrics::gauge!("cellgate_fleet_live_holders", &label).set(s.live as f64);
}

/// Publishes one keyed limiter's counters, labelled `limit = name`:
/// `cellgate_fleet_keyed_hot_keys`, `cellgate_fleet_keyed_leased_units`,
/// `cellgate_fleet_keyed_state` (the worst shard's: 0 connected, 1 fallback, 2 partitioned,
/// 3 forgotten), `cellgate_fleet_keyed_shards_out` (shards not connected: on a cluster, one
/// master out shows as the shards it serves, of 16) and `cellgate_fleet_keyed_live_holders`
/// (gauges); `cellgate_fleet_keyed_batches`,
/// `cellgate_fleet_keyed_passed_through`, `cellgate_fleet_keyed_lease_requests`,
/// `cellgate_fleet_keyed_backend_errors`, `cellgate_fleet_keyed_fallback_admitted_units` and
/// `cellgate_fleet_keyed_charged_back_units` (counters, absolute).
pub(crate) fn publish_keyed(name: &str, s: &KeyedStats, state: u8, shards_out: usize) {
    let label = [("limit", name.to_owned())];
    metrics::gauge!("cellgate_fleet_keyed_hot_keys", &label).set(s.hot_keys as f64);
    metrics::gauge!("cellgate_fleet_keyed_leased_units", &label).set(s.leased as f64);
    metrics::gauge!("cellgate_fleet_keyed_state", &label).set(f64::from(state));
    metrics::gauge!("cellgate_fleet_keyed_shards_out", &label).set(shards_out as f64);
    metrics::gauge!("cellgate_fleet_keyed_live_holders", &label).set(s.live as f64);
    metrics::counter!("cellgate_fleet_keyed_batches", &label).absolute(s.batches);
    metrics::counter!("cellgate_fleet_keyed_passed_through", &label).absolute(s.passed_through);
    metrics::counter!("cellgate_fleet_keyed_lease_requests", &label).absolute(s.lease_requests);
    metrics::counter!("cellgate_fleet_keyed_backend_errors", &label).absolute(s.backend_errors);
    metrics::counter!("cellgate_fleet_keyed_fallback_admitted_units", &label)
        .absolute(s.fallback_admitted);
    metrics::counter!("cellgate_fleet_keyed_charged_back_units", &label).absolute(s.charged_back);
}
