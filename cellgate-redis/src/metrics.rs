//! The fleet's counters through the `metrics` facade (feature `metrics`), published by the
//! background task, never from a check.

use crate::fleet::FleetStats;

/// Publishes one limiter's counters, labelled `limit = name`:
/// `cellgate_fleet_leased_units` (gauge), `cellgate_fleet_lease_requests`,
/// `cellgate_fleet_backend_errors`, `cellgate_fleet_charged_back_units`,
/// `cellgate_fleet_commands` (counters, absolute), `cellgate_fleet_state` (gauge: 0 connected,
/// 1 fallback, 2 partitioned) and `cellgate_fleet_live_holders` (gauge).
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
