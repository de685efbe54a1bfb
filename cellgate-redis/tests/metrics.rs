//! The fleet's counters through the `metrics` facade (feature `metrics`), against a real
//! `redis-server`.
#![cfg(feature = "metrics")]

use crate::common;

use common::wait_for;

use std::time::Duration;

use cellgate_redis::{Fleet, FleetState, KeyedFleet};
use metrics_util::debugging::{DebugValue, DebuggingRecorder, Snapshotter};

/// The value `name` was last published with. A snapshot of the debugging recorder resets what
/// it reads, so this takes one, lets the background task publish again (it does every tick),
/// and reads the next.
fn value(s: &Snapshotter, name: &str) -> Option<f64> {
    let _ = s.snapshot();
    std::thread::sleep(Duration::from_millis(30));
    s.snapshot()
        .into_vec()
        .into_iter()
        .find_map(|(k, _, _, v)| {
            let key = k.key();
            let ours = key.name() == name && key.labels().any(|l| l.value() == "metered");
            ours.then(|| match v {
                DebugValue::Counter(c) => c as f64,
                DebugValue::Gauge(g) => g.into_inner(),
                DebugValue::Histogram(_) => f64::NAN,
            })
        })
}

#[test]
fn leases_errors_and_the_state_are_published() {
    let Some(mut r) = common::redis() else { return };
    let recorder = DebuggingRecorder::new();
    let snap = recorder.snapshotter();
    recorder
        .install()
        .expect("the only recorder of this test binary");

    let fleet = Fleet::stock("metered", 10_000)
        .command_timeout(Duration::from_millis(50))
        .connect(&r.url())
        .unwrap();
    wait_for("a lease", || fleet.check().is_allowed());
    wait_for("lease requests published", || {
        value(&snap, "cellgate_fleet_lease_requests").is_some_and(|v| v >= 1.0)
    });
    assert_eq!(value(&snap, "cellgate_fleet_state"), Some(0.0));
    wait_for("the leased gauge", || {
        value(&snap, "cellgate_fleet_leased_units") == Some(fleet.stats().leased as f64)
    });

    r.stop();
    wait_for("the partitioned state", || {
        fleet.check();
        fleet.state() == FleetState::Partitioned
    });
    wait_for("errors and state published", || {
        value(&snap, "cellgate_fleet_backend_errors").is_some_and(|v| v >= 1.0)
            && value(&snap, "cellgate_fleet_state") == Some(2.0)
    });

    // The keyed limiter's counters, with the same recorder (one per test binary).
    r.start();
    let keyed = KeyedFleet::rate("metered", 100, Duration::from_secs(1))
        .max_wait(Duration::from_millis(50))
        .command_timeout(Duration::from_millis(100))
        .connect(&r.url())
        .unwrap();
    assert!(keyed.check_blocking("a", 1).is_allowed());
    wait_for("batches published", || {
        value(&snap, "cellgate_fleet_keyed_passed_through").is_some_and(|v| v >= 1.0)
            && value(&snap, "cellgate_fleet_keyed_batches").is_some_and(|v| v >= 2.0)
            && value(&snap, "cellgate_fleet_keyed_state") == Some(0.0)
            && value(&snap, "cellgate_fleet_keyed_shards_out") == Some(0.0)
    });
    r.pause();
    wait_for("the fallback published", || {
        keyed.check_blocking("b", 1);
        value(&snap, "cellgate_fleet_keyed_fallback_admitted_units").is_some_and(|v| v >= 1.0)
            && value(&snap, "cellgate_fleet_keyed_state") == Some(1.0)
            && value(&snap, "cellgate_fleet_keyed_shards_out") == Some(1.0)
    });
    r.resume();
}
