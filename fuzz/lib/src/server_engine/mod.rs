//! cellgate-server's engine: small configs built as values (and, on one path, written to YAML
//! and parsed back) and random requests, against a reference model, on a manual clock.
//! Arbitrary bytes also go to the YAML loader, which must answer (accept or refuse) without
//! panicking.
//!
//! The model is written from ratelimit's README and the server's docs (`decide`, the config
//! extensions): ratelimit's matching (`tree`), each limit's algorithm as the core defines it
//! (`limit`: fixed window, GCRA with its burst, the sliding window's two-window estimate, a
//! stock never refilled, on periods of any length, through the `cellgate-models` reference
//! models), several limits on one descriptor (`rate_limits`: all must admit), named limits
//! and `replaces`, limits of zero requests (every request that charges one refused), shadow
//! mode and quota mode (a request refused only when every quota descriptor it charges is
//! over, or a limit outside quota mode) per descriptor and for the whole engine, and descriptors that only look (`hits_addend`
//! 0), all or nothing across every limit of every descriptor of a request (`request`). Every
//! status is compared whole: code, the deciding limit (name, rate, unit), remaining, the exact time until reset
//! and the hit counts.

mod limit;
mod request;
mod tree;

use std::time::Duration;

use arbitrary::Arbitrary;
use cellgate::clock::{Clock, ManualClock};
use cellgate_server::api::{Code, Descriptor, RateLimitRequest};
use cellgate_server::config::Config;
use cellgate_server::engine::{Engine, EngineOptions};

pub use tree::{Algorithm, Leaf, Limit, Limits, Node, Period};

const REQUEST_VALUES: [&str; 7] = ["x", "y", "xz", "*", "xyz", "yz", "xzz"];
/// Steps of one input, descriptors of one request and entries of one descriptor, at most.
const STEPS: usize = 64;
const DESCRIPTORS: usize = 4;
const ENTRIES: usize = 3;

/// One fuzz input.
#[derive(Arbitrary, Debug, Clone)]
pub struct Input {
    pub tree: Vec<Node>,
    pub through_yaml: bool,
    /// The engine's `shadow_mode` (every limit in shadow mode).
    pub shadow_all: bool,
    /// The engine's `quota_mode` (every limit in quota mode).
    pub quota_all: bool,
    pub steps: Vec<Step>,
    pub yaml: Vec<u8>,
}

/// A request descriptor: entries (key, value) as indices, and its own `hits_addend % 4`.
pub type RequestDescriptor = (Vec<(u8, u8)>, Option<u8>);

/// What happens next.
#[derive(Arbitrary, Debug, Clone)]
pub enum Step {
    /// Milliseconds.
    Advance(u16),
    /// Nanoseconds (GCRA's intervals and the sliding window's weights move within a
    /// millisecond).
    AdvanceNs(u32),
    /// A request of these descriptors and `hits % 4` (0 looks only).
    Request {
        descriptors: Vec<RequestDescriptor>,
        hits: u8,
    },
}

crate::counters! {
    /// What one input exercised.
    pub struct Coverage {
        /// Configs the loader refused, as the model said.
        pub refused_configs: u64,
        /// Requests decided and compared.
        pub requests: u64,
        /// Requests refused.
        pub refused: u64,
        /// Statuses of limited descriptors compared.
        pub limited: u64,
        /// ... of descriptors with several limits.
        pub several: u64,
        /// Limits dropped because another matched limit replaces them.
        pub replaced: u64,
        /// ... in shadow mode.
        pub shadow: u64,
        /// ... of no hits (look only).
        pub look: u64,
        /// ... over a limit.
        pub over: u64,
        /// Statuses of descriptors whose limit is zero requests (always over).
        pub zero: u64,
        /// Requests with a quota-mode descriptor charged.
        pub quota: u64,
        /// Limits compared, per algorithm.
        pub fixed: u64,
        pub gcra: u64,
        pub sliding: u64,
        pub stock: u64,
    }
}

/// Replays `input`; panics on any difference between the engine and the model.
pub fn run(input: &Input) -> Coverage {
    let mut seen = Coverage {
        inputs: 1,
        ..Coverage::default()
    };
    // Any bytes: an answer, never a panic.
    if let Ok(text) = std::str::from_utf8(&input.yaml) {
        let _ = Config::from_yaml("fuzz.yaml", text);
    }
    let descs = tree::descs(&input.tree);
    let root = tree::raw(&descs);
    let built = if input.through_yaml {
        let text = serde_yaml::to_string(&root).expect("a RawRoot always serialises");
        Config::from_yaml("fuzz.yaml", &text)
    } else {
        Config::from_roots([("fuzz.yaml", root.clone())])
    };
    let valid = tree::valid(&descs);
    let config = match built {
        Ok(c) => {
            assert!(valid, "an invalid config accepted: {root:?}");
            c
        }
        Err(e) => {
            assert!(!valid, "refused: {e}");
            seen.refused_configs += 1;
            return seen;
        }
    };
    let clock = ManualClock::new();
    let options = EngineOptions {
        shadow_mode: input.shadow_all,
        quota_mode: input.quota_all,
        ..EngineOptions::default()
    };
    let engine = Engine::with_clock(config, options, clock.clone());
    let mut states = request::States::new();
    for step in input.steps.iter().take(STEPS) {
        match step {
            Step::Advance(ms) => clock.advance(Duration::from_millis(u64::from(*ms))),
            Step::AdvanceNs(ns) => clock.advance(Duration::from_nanos(u64::from(*ns))),
            Step::Request { descriptors, hits } => {
                let Some(req) = build_request(descriptors, *hits) else {
                    continue;
                };
                let answer = engine.decide(&req).expect("a well-formed request");
                let modes = request::Modes {
                    shadow: input.shadow_all,
                    quota: input.quota_all,
                };
                let admitted = request::check(
                    &descs,
                    modes,
                    &mut states,
                    clock.now(),
                    &req,
                    &answer.statuses,
                    &mut seen,
                );
                let over = answer.overall == Code::OverLimit;
                assert_eq!(!admitted, over, "{req:?} -> {answer:?}");
                // Outside quota mode, the request is over exactly when a descriptor is.
                if !input.quota_all && !descs_quota(&descs) {
                    let any = answer.statuses.iter().any(|s| s.code == Code::OverLimit);
                    assert_eq!(any, over, "{answer:?}");
                }
                seen.requests += 1;
                seen.refused += u64::from(!admitted);
            }
        }
    }
    seen
}

/// Whether some config descriptor is in quota mode.
fn descs_quota(descs: &[tree::Desc]) -> bool {
    descs.iter().any(|d| d.quota || descs_quota(&d.children))
}

/// The request the step describes; `None` when it has no descriptor with entries.
fn build_request(descriptors: &[RequestDescriptor], hits: u8) -> Option<RateLimitRequest> {
    let descriptors: Vec<Descriptor> = descriptors
        .iter()
        .take(DESCRIPTORS)
        .filter(|(entries, _)| !entries.is_empty())
        .map(|(entries, own)| Descriptor {
            entries: entries
                .iter()
                .take(ENTRIES)
                .map(|&(k, v)| {
                    let value = REQUEST_VALUES[usize::from(v) % REQUEST_VALUES.len()];
                    (tree::key(k).to_owned(), value.to_owned())
                })
                .collect(),
            limit: None,
            hits_addend: own.map(|h| u64::from(h % 4)),
        })
        .collect();
    (!descriptors.is_empty()).then(|| RateLimitRequest {
        domain: "d".into(),
        descriptors,
        hits_addend: u64::from(hits % 4),
    })
}

#[cfg(test)]
mod tests;
