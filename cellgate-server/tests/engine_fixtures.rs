//! Decisions on the fixtures modelled on ratelimit's README (nested descriptors, wildcards)
//! and on cellgate's extensions (several limits, GCRA, sliding window, stock), on a manual
//! clock.

use std::path::Path;
use std::time::Duration;

use cellgate::clock::ManualClock;
use cellgate_server::api::{Code, Descriptor, RateLimitRequest, RateLimitResponse, Unit};
use cellgate_server::config::load;
use cellgate_server::engine::{Engine, EngineOptions};

/// A Unix time on a day boundary.
const MIDNIGHT: Duration = Duration::from_secs(1_700_006_400);

fn engine(fixture: &str, options: EngineOptions) -> (Engine, ManualClock) {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(fixture);
    let config = load(&path).unwrap_or_else(|e| panic!("{e}"));
    let clock = ManualClock::new();
    clock.set(MIDNIGHT);
    (Engine::with_clock(config, options, clock.clone()), clock)
}

fn ask(e: &Engine, domain: &str, entries: &[(&str, &str)], hits: u64) -> RateLimitResponse {
    let req = RateLimitRequest {
        domain: domain.into(),
        descriptors: vec![Descriptor::new(entries.iter().copied())],
        hits_addend: hits,
    };
    e.decide(&req).unwrap_or_else(|err| panic!("{err}"))
}

fn admitted(e: &Engine, domain: &str, entries: &[(&str, &str)]) -> usize {
    (0..50)
        .take_while(|_| ask(e, domain, entries, 1).overall == Code::Ok)
        .count()
}

#[test]
fn nested_descriptors_match_as_ratelimit_does() {
    let (e, _clock) = engine("nested", EngineOptions::default());
    let d = "mongo_cps";
    let r = ask(&e, d, &[("to_number", "1"), ("from_number", "2")], 1);
    let s = &r.statuses[0];
    assert_eq!(s.current_limit.as_ref().unwrap().unit, Unit::Day);
    assert_eq!(
        s.stats.as_ref().unwrap().key.as_ref(),
        "mongo_cps.to_number.from_number"
    );
    assert_eq!(
        admitted(&e, d, &[("to_number", "1"), ("from_number", "2")]),
        9
    );
    // Another caller of the same number has its own 10.
    assert_eq!(
        admitted(&e, d, &[("to_number", "1"), ("from_number", "3")]),
        10
    );
    // key1=value1 alone has no limit: its limits are one level down.
    assert!(ask(&e, d, &[("key1", "value1")], 1).statuses[0]
        .current_limit
        .is_none());
    // The default subkey, with detailed metrics: the key carries the request's values.
    let r = ask(&e, d, &[("key1", "value1"), ("subkey1", "other")], 1);
    let s = &r.statuses[0];
    assert_eq!(s.current_limit.as_ref().unwrap().requests_per_unit, 3);
    assert_eq!(
        s.stats.as_ref().unwrap().key.as_ref(),
        "mongo_cps.key1_value1.subkey1_other"
    );
    let r = ask(&e, d, &[("key1", "value1"), ("subkey1", "subvalue1")], 1);
    assert_eq!(
        r.statuses[0]
            .current_limit
            .as_ref()
            .unwrap()
            .requests_per_unit,
        10
    );
    assert_eq!(
        r.statuses[0].stats.as_ref().unwrap().key.as_ref(),
        "mongo_cps.key1_value1.subkey1_subvalue1"
    );
}

#[test]
fn wildcards_match_by_prefix_after_exact_values() {
    let (e, _clock) = engine("wildcards", EngineOptions::default());
    let rpu = |v: &str| {
        ask(&e, "example", &[("foo", v)], 0).statuses[0]
            .current_limit
            .as_ref()
            .map(|l| l.requests_per_unit)
    };
    assert_eq!(rpu("bar"), Some(20));
    assert_eq!(rpu("foo1"), Some(10));
    assert_eq!(rpu("foo"), Some(10));
    assert_eq!(rpu("baz"), Some(1));
    // The metric key names the wildcard, not the value.
    let r = ask(&e, "example", &[("foo", "foo42")], 1);
    assert_eq!(
        r.statuses[0].stats.as_ref().unwrap().key.as_ref(),
        "example.foo_foo*"
    );
    // Each value has its own count under the wildcard's limit.
    assert_eq!(admitted(&e, "example", &[("foo", "foo42")]), 9);
    assert_eq!(admitted(&e, "example", &[("foo", "foo43")]), 10);
}

#[test]
fn several_limits_all_must_admit_and_the_strictest_is_reported() {
    let (e, clock) = engine("extensions", EngineOptions::default());
    // GCRA burst 2 at 10/s; sliding window 3 per 5 minutes.
    assert_eq!(admitted(&e, "shop", &[("sku", "1")]), 2);
    clock.advance(Duration::from_secs(1));
    let r = ask(&e, "shop", &[("sku", "1")], 1);
    assert_eq!(r.overall, Code::Ok);
    let limit = r.statuses[0].current_limit.clone().unwrap();
    assert_eq!(
        (
            limit.requests_per_unit,
            limit.unit,
            r.statuses[0].limit_remaining
        ),
        (3, Unit::Unknown, 0)
    );
    clock.advance(Duration::from_secs(1));
    let r = ask(&e, "shop", &[("sku", "1")], 1);
    assert_eq!(r.overall, Code::OverLimit);
    assert_eq!(
        r.statuses[0]
            .current_limit
            .as_ref()
            .unwrap()
            .requests_per_unit,
        3
    );
    // The GCRA limit was not charged by the refused request: 2 fit at once once the window
    // has slid by.
    clock.advance(Duration::from_secs(600));
    let r = ask(&e, "shop", &[("sku", "1")], 2);
    assert_eq!(r.overall, Code::Ok);
}

#[test]
fn a_stock_sells_exactly_its_units_and_never_resets() {
    let (e, clock) = engine("extensions", EngineOptions::default());
    assert_eq!(admitted(&e, "shop", &[("item", "iphone")]), 2);
    clock.advance(Duration::from_secs(86_400 * 30));
    let r = ask(&e, "shop", &[("item", "iphone")], 1);
    assert_eq!(r.overall, Code::OverLimit);
    assert_eq!(r.statuses[0].duration_until_reset, None);
    // Another item has not been configured as a stock: no limit.
    assert!(ask(&e, "shop", &[("item", "ipad")], 1).statuses[0]
        .current_limit
        .is_none());
}

#[test]
fn a_period_that_is_not_a_unit_is_aligned_to_unix_time() {
    let (e, clock) = engine("extensions", EngineOptions::default());
    clock.advance(Duration::from_millis(300));
    assert_eq!(admitted(&e, "shop", &[("half", "x")]), 1);
    let r = ask(&e, "shop", &[("half", "x")], 1);
    assert_eq!(
        r.statuses[0].duration_until_reset,
        Some(Duration::from_millis(200))
    );
    clock.advance(Duration::from_millis(200));
    assert_eq!(admitted(&e, "shop", &[("half", "x")]), 1);
}

#[test]
fn near_limit_counts_the_hits_admitted_past_the_ratio() {
    let (e, _clock) = engine("wildcards", EngineOptions::default());
    // limit 20, ratio 0.8: the threshold is 16.
    let near = |hits| {
        let r = ask(&e, "example", &[("foo", "bar")], hits);
        r.statuses[0].stats.clone().unwrap()
    };
    assert_eq!(near(15).near_limit, 0);
    let s = near(3); // 15 -> 18: two past 16
    assert_eq!((s.near_limit, s.within_limit), (2, 3));
    assert_eq!(near(2).near_limit, 2); // 18 -> 20
    let s = near(1);
    assert_eq!((s.over_limit, s.near_limit, s.within_limit), (1, 0, 0));
}

#[test]
fn global_shadow_mode_counts_without_refusing() {
    let options = EngineOptions {
        shadow_mode: true,
        ..EngineOptions::default()
    };
    let (e, _clock) = engine("wildcards", options);
    for _ in 0..3 {
        let r = ask(&e, "example", &[("foo", "x")], 1);
        assert_eq!(r.overall, Code::Ok);
    }
    let s = ask(&e, "example", &[("foo", "x")], 1).statuses[0]
        .stats
        .clone()
        .unwrap();
    assert_eq!((s.over_limit, s.shadow_mode), (1, 1));
}

#[test]
fn shared_thresholds_wildcards_anywhere_and_values_in_metrics_as_ratelimit() {
    let (e, _clock) = engine("metrics_and_sharing", EngineOptions::default());
    let d = "example";
    let stat = |entries: &[(&str, &str)]| {
        let r = ask(&e, d, entries, 0);
        r.statuses[0].stats.as_ref().map(|s| s.key.to_string())
    };
    // share_threshold: files/a.pdf and files/b.csv draw on one limit of 10.
    assert_eq!(admitted(&e, d, &[("files", "files/a.pdf")]), 10);
    assert_eq!(admitted(&e, d, &[("files", "files/b.csv")]), 0);
    // Without it, each file has its own 10.
    assert_eq!(admitted(&e, d, &[("files", "files_no_share/a.pdf")]), 10);
    assert_eq!(admitted(&e, d, &[("files", "files_no_share/b.csv")]), 10);
    assert_eq!(
        stat(&[("files", "files/c")]).as_deref(),
        Some("example.files_files/*")
    );
    // A '*' in the middle and several: each value matched has its own limit.
    assert_eq!(admitted(&e, d, &[("path", "/api/v1/orders")]), 3);
    assert_eq!(admitted(&e, d, &[("path", "/api/v2/orders")]), 3);
    let limited = |v: &str| {
        ask(&e, d, &[("path", v)], 0).statuses[0]
            .current_limit
            .is_some()
    };
    assert!(!limited("/api/orders"), "/api/ and /orders would overlap");
    assert_eq!(admitted(&e, d, &[("path", "/api//orders")]), 3);
    assert_eq!(admitted(&e, d, &[("path", "/v2/users/7/avatar.png")]), 4);
    assert_eq!(admitted(&e, d, &[("path", "/v2/users/7/avatar")]), 4);
    assert!(!limited("/v2/user/7/avatar"));
    assert_eq!(
        stat(&[("path", "/api/v3/orders")]).as_deref(),
        Some("example.path_/api/*/orders")
    );
    // value_to_metric: the request's values where the config has none.
    assert_eq!(
        stat(&[("route", "r1"), ("http_method", "GET")]).as_deref(),
        Some("example.route_r1.http_method_GET")
    );
    assert_eq!(
        stat(&[("route", "r1"), ("subject_id", "42")]).as_deref(),
        Some("example.route_r1.subject_id_42")
    );
    assert_eq!(admitted(&e, d, &[("route", "r1"), ("subject_id", "42")]), 6);
    // A shared wildcard keeps its pattern in the metric key, value_to_metric or not.
    assert_eq!(admitted(&e, d, &[("bucket", "b-1")]), 2);
    assert_eq!(admitted(&e, d, &[("bucket", "b-2")]), 0);
    assert_eq!(
        stat(&[("bucket", "b-3")]).as_deref(),
        Some("example.bucket_b-*")
    );
}

#[test]
fn a_zero_limit_refuses_every_request_unless_replaced() {
    let (e, _clock) = engine("banned", EngineOptions::default());
    let banned = [("foo", "f"), ("bar", "banned")];
    let r = ask(&e, "rl", &banned, 1);
    assert_eq!(r.overall, Code::OverLimit);
    let s = &r.statuses[0];
    assert_eq!(s.code, Code::OverLimit);
    assert_eq!(s.limit_remaining, 0);
    let limit = s.current_limit.clone().unwrap();
    assert_eq!(
        (limit.name.as_deref(), limit.requests_per_unit, limit.unit),
        (Some("banned_limit"), 0, Unit::Minute)
    );
    // Looking (0 hits) charges nothing and is not refused.
    assert_eq!(ask(&e, "rl", &banned, 0).overall, Code::Ok);

    // All or nothing: the banned descriptor refuses the request, and the other descriptor
    // (2 a minute) is not charged: it still admits its two afterwards.
    let both = RateLimitRequest {
        domain: "rl".into(),
        descriptors: vec![
            Descriptor::new([("foo", "g")]),
            Descriptor::new(banned.iter().copied()),
        ],
        hits_addend: 1,
    };
    for _ in 0..3 {
        assert_eq!(e.decide(&both).unwrap().overall, Code::OverLimit);
    }
    assert_eq!(admitted(&e, "rl", &[("foo", "g")]), 2);

    // Another descriptor of the request replaces the banned limit by name.
    let replaced = RateLimitRequest {
        domain: "rl".into(),
        descriptors: vec![
            Descriptor::new(banned.iter().copied()),
            Descriptor::new([
                ("source_cluster", "proxy"),
                ("destination_cluster", "override"),
            ]),
        ],
        hits_addend: 1,
    };
    let r = e.decide(&replaced).unwrap();
    assert_eq!(r.overall, Code::Ok);
    assert!(r.statuses[0].current_limit.is_none(), "{r:?}");

    // In shadow mode it is counted, never enforced.
    let r = ask(&e, "rl", &[("foo", "f"), ("bar", "watched")], 1);
    assert_eq!((r.overall, r.statuses[0].code), (Code::Ok, Code::Ok));
    let stats = r.statuses[0].stats.clone().unwrap();
    assert_eq!((stats.over_limit, stats.shadow_mode), (1, 1));
}

/// A request of these descriptors (one entry each), one hit.
fn request_of(entries: &[(&str, &str)]) -> RateLimitRequest {
    RateLimitRequest {
        domain: "rl".into(),
        descriptors: entries.iter().map(|&e| Descriptor::new([e])).collect(),
        hits_addend: 1,
    }
}

#[test]
fn quota_mode_refuses_only_when_every_quota_is_over() {
    let (e, _clock) = engine("quota", EngineOptions::default());
    let codes = |r: &RateLimitResponse| -> (Code, Vec<Code>) {
        (r.overall, r.statuses.iter().map(|s| s.code).collect())
    };
    let req = request_of(&[
        ("service", "service_1"),
        ("service", "service_2"),
        ("user", "u"),
    ]);
    // 1: service_1 (1 a minute) fits with the user's limit, then service_2 is charged on its
    // own: both quotas and the user charged.
    let r = e.decide(&req).unwrap();
    assert_eq!(codes(&r), (Code::Ok, vec![Code::Ok; 3]));
    // 2: service_1 is over (reported), service_2 has room: admitted.
    let r = e.decide(&req).unwrap();
    assert_eq!(
        codes(&r),
        (Code::Ok, vec![Code::OverLimit, Code::Ok, Code::Ok])
    );
    // 3: both quotas over: refused, and the user's limit is not charged.
    let r = e.decide(&req).unwrap();
    assert_eq!(
        codes(&r),
        (
            Code::OverLimit,
            vec![Code::OverLimit, Code::OverLimit, Code::Ok]
        )
    );
    assert_eq!(r.statuses[2].limit_remaining, 2, "{r:?}");
    // The user's limit outside quota mode still refuses whatever the quotas say.
    let fresh = request_of(&[("service", "service_2"), ("user", "v")]);
    let (e2, _c) = engine("quota", EngineOptions::default());
    for _ in 0..2 {
        e2.decide(&request_of(&[("user", "v")])).unwrap();
    }
    let r = e2.decide(&fresh).unwrap();
    assert_eq!(codes(&r), (Code::Ok, vec![Code::Ok, Code::Ok]));
    e2.decide(&request_of(&[("user", "v")])).unwrap();
    let r = e2.decide(&fresh).unwrap();
    assert_eq!(
        codes(&r),
        (Code::OverLimit, vec![Code::Ok, Code::OverLimit])
    );
    // ... and charged the quota nothing: service_2 still has its second unit.
    let r = e2.decide(&request_of(&[("service", "service_2")])).unwrap();
    assert_eq!(codes(&r), (Code::Ok, vec![Code::Ok]));
}

#[test]
fn quota_mode_for_every_limit_from_the_options() {
    let options = EngineOptions {
        quota_mode: true,
        ..EngineOptions::default()
    };
    let (e, _clock) = engine("quota", options);
    // Every descriptor a quota: the user's limit no longer refuses while a service has room.
    let req = request_of(&[("user", "w"), ("service", "service_2")]);
    for _ in 0..4 {
        assert_eq!(e.decide(&req).unwrap().overall, Code::Ok);
    }
    // The user is over now (4 a minute), service_2 too (2): every quota over.
    let r = e.decide(&req).unwrap();
    assert_eq!(r.overall, Code::OverLimit, "{r:?}");
}
