//! The engine's decisions on a manual clock: matching, fixed windows aligned to Unix time, all
//! or nothing, hits_addend, overrides, shadow mode, replaces, reload.

use std::time::Duration;

use cellgate::clock::ManualClock;
use cellgate_server::api::{Code, Descriptor, LimitOverride, RateLimitRequest, RequestError, Unit};
use cellgate_server::config::Config;
use cellgate_server::engine::{Engine, EngineOptions};

fn engine(yaml: &str) -> (Engine, ManualClock) {
    let clock = ManualClock::new();
    // A Unix time on a minute boundary, as the server's clock would read.
    clock.set(Duration::from_secs(1_700_000_040));
    let config = Config::from_yaml("test.yaml", yaml).expect("config");
    (
        Engine::with_clock(config, EngineOptions::default(), clock.clone()),
        clock,
    )
}

fn req(descriptors: Vec<Descriptor>) -> RateLimitRequest {
    RateLimitRequest {
        domain: "d".into(),
        descriptors,
        hits_addend: 1,
    }
}

fn d(entries: &[(&str, &str)]) -> Descriptor {
    Descriptor::new(entries.iter().copied())
}

const BASICS: &str = include_str!("fixtures/basics/config.yaml");

#[test]
fn a_fixed_window_admits_its_limit_then_refuses_until_the_next_minute() {
    let (e, clock) = engine(BASICS);
    let r = req(vec![d(&[("user", "alice")])]);
    let first = e.decide(&r).unwrap();
    assert_eq!(first.overall, Code::Ok);
    let s = &first.statuses[0];
    assert_eq!(s.limit_remaining, 1);
    let limit = s.current_limit.as_ref().unwrap();
    assert_eq!((limit.requests_per_unit, limit.unit), (2, Unit::Minute));
    assert_eq!(s.duration_until_reset, Some(Duration::from_secs(60)));
    assert_eq!(s.stats.as_ref().unwrap().key.as_ref(), "d.user");
    assert_eq!(e.decide(&r).unwrap().overall, Code::Ok);
    clock.advance(Duration::from_secs(30));
    let third = e.decide(&r).unwrap();
    assert_eq!(third.overall, Code::OverLimit);
    assert_eq!(
        third.statuses[0].duration_until_reset,
        Some(Duration::from_secs(30))
    );
    assert_eq!(third.statuses[0].stats.as_ref().unwrap().over_limit, 1);
    // Another user has its own budget.
    assert_eq!(
        e.decide(&req(vec![d(&[("user", "bob")])])).unwrap().overall,
        Code::Ok
    );
    clock.advance(Duration::from_secs(30));
    assert_eq!(e.decide(&r).unwrap().overall, Code::Ok);
}

#[test]
fn a_refused_request_charges_none_of_its_descriptors() {
    let (e, _clock) = engine(BASICS);
    let alice = d(&[("user", "alice")]);
    let bob = d(&[("user", "bob")]);
    assert_eq!(
        e.decide(&req(vec![alice.clone(), alice.clone()]))
            .unwrap()
            .overall,
        Code::Ok
    );
    // alice is spent: bob's descriptor is refused with her, and charged nothing.
    for _ in 0..3 {
        let r = e.decide(&req(vec![bob.clone(), alice.clone()])).unwrap();
        assert_eq!(r.overall, Code::OverLimit);
        assert_eq!(r.statuses[0].code, Code::Ok);
        assert_eq!(r.statuses[1].code, Code::OverLimit);
        assert_eq!(r.statuses[0].limit_remaining, 2);
    }
    let r = e.decide(&req(vec![bob.clone(), bob])).unwrap();
    assert_eq!(r.overall, Code::Ok);
    assert_eq!(r.statuses[1].limit_remaining, 0);
}

#[test]
fn hits_addend_zero_looks_without_charging_and_request_hits_charge_each() {
    let (e, _clock) = engine(BASICS);
    let mut look = d(&[("user", "carol")]);
    look.hits_addend = Some(0);
    for _ in 0..5 {
        let r = e.decide(&req(vec![look.clone()])).unwrap();
        assert_eq!((r.overall, r.statuses[0].limit_remaining), (Code::Ok, 2));
    }
    let mut r = req(vec![d(&[("user", "carol")])]);
    r.hits_addend = 3;
    assert_eq!(e.decide(&r).unwrap().overall, Code::OverLimit);
    r.hits_addend = 2;
    assert_eq!(e.decide(&r).unwrap().overall, Code::Ok);
    let r = e.decide(&req(vec![look])).unwrap();
    assert_eq!((r.overall, r.statuses[0].limit_remaining), (Code::Ok, 0));
}

#[test]
fn replaces_unlimited_shadow_and_no_match() {
    let (e, _clock) = engine(BASICS);
    // special replaces api: only special's limit of 1 applies to the two descriptors.
    let api = d(&[("path", "/api/special")]);
    let r = e.decide(&req(vec![api.clone()])).unwrap();
    let limit = r.statuses[0].current_limit.clone().unwrap();
    assert_eq!(limit.name.as_deref(), Some("special"));
    let other = d(&[("path", "/api/other")]);
    let r = e.decide(&req(vec![other.clone(), api.clone()])).unwrap();
    assert_eq!(
        r.statuses[0].current_limit, None,
        "api is replaced by special"
    );
    assert_eq!(r.statuses[1].code, Code::OverLimit);
    // Alone, /api/other has its own limit.
    let r = e.decide(&req(vec![other])).unwrap();
    assert_eq!(
        r.statuses[0]
            .current_limit
            .as_ref()
            .unwrap()
            .requests_per_unit,
        5
    );

    let free = e.decide(&req(vec![d(&[("free", "x")])])).unwrap();
    assert_eq!(free.statuses[0].limit_remaining, u32::MAX);
    assert!(free.statuses[0].current_limit.is_none());

    let watch = d(&[("watch", "w")]);
    assert_eq!(
        e.decide(&req(vec![watch.clone()])).unwrap().overall,
        Code::Ok
    );
    let r = e.decide(&req(vec![watch])).unwrap();
    assert_eq!(r.overall, Code::Ok);
    let stats = r.statuses[0].stats.clone().unwrap();
    assert_eq!((stats.over_limit, stats.shadow_mode), (1, 1));

    let none = e.decide(&req(vec![d(&[("unknown", "x")])])).unwrap();
    assert_eq!(
        none.statuses[0],
        cellgate_server::api::DescriptorStatus::unlimited()
    );
}

#[test]
fn an_override_replaces_the_configured_limit() {
    let (e, _clock) = engine(BASICS);
    let mut o = d(&[("user", "dave")]);
    o.limit = Some(LimitOverride {
        requests_per_unit: 1,
        unit: Unit::Hour,
    });
    let r = e.decide(&req(vec![o.clone()])).unwrap();
    assert_eq!(
        r.statuses[0].current_limit.as_ref().unwrap().unit,
        Unit::Hour
    );
    assert_eq!(
        r.statuses[0].stats.as_ref().unwrap().key.as_ref(),
        "d.user_dave"
    );
    assert_eq!(e.decide(&req(vec![o])).unwrap().overall, Code::OverLimit);
}

#[test]
fn malformed_requests_are_errors() {
    let (e, _clock) = engine(BASICS);
    let mut r = req(vec![d(&[("user", "a")])]);
    r.domain = "other".into();
    assert_eq!(
        e.decide(&r),
        Err(RequestError::UnknownDomain("other".into()))
    );
    assert!(matches!(
        e.decide(&req(vec![d(&[("user", "a")]); 65])),
        Err(RequestError::TooLarge { limit: 64, .. })
    ));
    let long = "x".repeat(1025);
    assert!(matches!(
        e.decide(&req(vec![d(&[("user", long.as_str())])])),
        Err(RequestError::TooLarge { .. })
    ));
    assert_eq!(e.decide(&req(vec![])), Err(RequestError::NoDescriptors));
    assert_eq!(
        e.decide(&req(vec![Descriptor::default()])),
        Err(RequestError::EmptyDescriptor { index: 0 })
    );
}

#[test]
fn a_reload_keeps_the_state_of_limits_it_does_not_change() {
    let (e, _clock) = engine(BASICS);
    let alice = req(vec![d(&[("user", "alice")])]);
    e.decide(&alice).unwrap();
    e.decide(&alice).unwrap();
    assert_eq!(e.decide(&alice).unwrap().overall, Code::OverLimit);
    let changed = BASICS.replace(
        "requests_per_unit: 5, name: api",
        "requests_per_unit: 6, name: api",
    );
    e.reload(Config::from_yaml("test.yaml", &changed).unwrap());
    assert_eq!(
        e.decide(&alice).unwrap().overall,
        Code::OverLimit,
        "user's limit kept its count"
    );
    // A changed limit starts afresh.
    let more = BASICS.replace(
        "unit: minute, requests_per_unit: 2",
        "unit: minute, requests_per_unit: 3",
    );
    e.reload(Config::from_yaml("test.yaml", &more).unwrap());
    assert_eq!(e.decide(&alice).unwrap().overall, Code::Ok);
}

#[test]
fn charges_that_fit_alone_but_not_together_refuse_the_request() {
    let (e, _clock) = engine(BASICS);
    let one = d(&[("user", "erin")]);
    assert_eq!(e.decide(&req(vec![one.clone()])).unwrap().overall, Code::Ok);
    // One unit is left: each descriptor alone fits, the two together do not.
    let r = e.decide(&req(vec![one.clone(), one.clone()])).unwrap();
    assert_eq!(r.overall, Code::OverLimit);
    assert_eq!(
        (r.statuses[0].code, r.statuses[1].code),
        (Code::Ok, Code::OverLimit)
    );
    assert_eq!(r.statuses[0].limit_remaining, 1, "nothing was charged");
    assert_eq!(e.decide(&req(vec![one])).unwrap().overall, Code::Ok);
}

#[test]
fn concurrent_requests_admit_exactly_the_limit_and_a_reload_loses_nothing() {
    let yaml = r#"
domain: d
descriptors:
  - key: user
    rate_limit: {unit: hour, requests_per_unit: 300}
  - key: thread
    rate_limit: {unit: hour, requests_per_unit: 1000}
  - key: other
    rate_limit: {unit: hour, requests_per_unit: 1}
"#;
    let variant = yaml.replace("requests_per_unit: 1}", "requests_per_unit: 2}");
    let (e, _clock) = engine(yaml);
    let admitted: u32 = std::thread::scope(|s| {
        let workers: Vec<_> = (0..4)
            .map(|t| {
                let e = &e;
                s.spawn(move || {
                    let thread = t.to_string();
                    let r = req(vec![
                        d(&[("thread", thread.as_str())]),
                        d(&[("user", "shared")]),
                    ]);
                    (0..200)
                        .filter(|_| e.decide(&r).unwrap().overall == Code::Ok)
                        .count() as u32
                })
            })
            .collect();
        // Racing reloads that change another limit, while the requests run, keep every
        // count of the limits they do not change.
        for text in [yaml, variant.as_str()] {
            let e = &e;
            s.spawn(move || {
                for _ in 0..20 {
                    e.reload(Config::from_yaml("test.yaml", text).unwrap());
                }
            });
        }
        workers.into_iter().map(|w| w.join().unwrap()).sum()
    });
    assert_eq!(admitted, 300);
    // The refused requests charged no thread's limit: the threads' counts add up to 300.
    let left: u32 = (0..4)
        .map(|t| {
            let mut look = d(&[("thread", t.to_string().as_str())]);
            look.hits_addend = Some(0);
            e.decide(&req(vec![look])).unwrap().statuses[0].limit_remaining
        })
        .sum();
    assert_eq!(4 * 1000 - left, 300);
}
