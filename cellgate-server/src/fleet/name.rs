//! The name of a limit's state in Redis: the same on every server that runs the same
//! configuration, and a new one whenever the limit's definition changes.
//!
//! The name is a readable prefix (domain, algorithm, rate) and a 64-bit FNV-1a hash of the
//! whole definition (domain, every key and value of its place in the tree, its position among
//! the descriptor's limits, algorithm, burst, rate, period). FNV-1a is written here rather
//! than taken from std's hasher because std's is not guaranteed stable across Rust releases,
//! and servers built by different compilers must agree on the name.

use std::fmt::Write;

use crate::config::{Algorithm, RuleSpec};

/// Bytes of the domain kept in the readable prefix (the hash covers all of it).
const PREFIX_BYTES: usize = 32;

/// The fleet name of the limit `spec` describes.
pub(crate) fn name(spec: &RuleSpec) -> String {
    let (algorithm, burst) = match spec.algorithm {
        Algorithm::FixedWindow => ("fixed_window", 0),
        Algorithm::SlidingWindow => ("sliding_window", 0),
        Algorithm::Gcra { burst } => ("gcra", burst),
        Algorithm::Stock => ("stock", 0),
    };
    let mut h = Fnv::new();
    h.part(b"cellgate-server/1");
    for (key, value) in &spec.path {
        h.part(key.as_bytes());
        match value {
            Some(v) => h.part(v.as_bytes()),
            None => h.part(b"\x00none"),
        }
    }
    h.part(&spec.index.to_le_bytes());
    h.part(algorithm.as_bytes());
    h.part(&burst.to_le_bytes());
    h.part(&spec.requests_per_unit.to_le_bytes());
    h.part(&spec.period.as_nanos().to_le_bytes());
    let domain = spec.path.first().map_or("override", |(d, _)| d.as_str());
    let mut label: String = domain
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || "-_.".contains(c) {
                c
            } else {
                '_'
            }
        })
        .take(PREFIX_BYTES)
        .collect();
    if label.is_empty() {
        label.push('_');
    }
    let mut out = format!("cgs:{label}:{algorithm}:{}", spec.requests_per_unit);
    if !matches!(spec.algorithm, Algorithm::Stock) {
        let _ = write!(out, "/{}ms", spec.period.as_millis());
    }
    let _ = write!(out, ":{:016x}", h.0);
    out
}

/// The limit's place, for messages: `domain/key=value/key#index`.
pub(crate) fn describe(spec: &RuleSpec) -> String {
    let mut out = String::new();
    for (i, (key, value)) in spec.path.iter().enumerate() {
        if i > 0 {
            out.push('/');
        }
        out.push_str(key);
        if let Some(v) = value {
            let _ = write!(out, "={v}");
        }
    }
    let _ = write!(out, "#{}", spec.index);
    out
}

/// FNV-1a, 64 bits, over length-prefixed parts (so that no two part lists hash alike by
/// concatenation).
struct Fnv(u64);

impl Fnv {
    fn new() -> Self {
        Fnv(0xcbf2_9ce4_8422_2325)
    }

    fn part(&mut self, bytes: &[u8]) {
        for &b in (bytes.len() as u64).to_le_bytes().iter().chain(bytes) {
            self.0 ^= u64::from(b);
            self.0 = self.0.wrapping_mul(0x0000_0100_0000_01b3);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn spec(rpu: u32) -> RuleSpec {
        RuleSpec {
            path: vec![
                ("edge".into(), None),
                ("ip".into(), Some("{10.0.0.1}".into())),
            ],
            index: 0,
            algorithm: Algorithm::FixedWindow,
            requests_per_unit: rpu,
            period: Duration::from_secs(60),
        }
    }

    #[test]
    fn a_changed_limit_gets_a_new_name_and_the_same_limit_the_same() {
        assert_eq!(name(&spec(10)), name(&spec(10)));
        assert_ne!(name(&spec(10)), name(&spec(11)));
        let mut other = spec(10);
        other.algorithm = Algorithm::Gcra { burst: 10 };
        assert_ne!(name(&spec(10)), name(&other));
        assert!(name(&spec(10)).starts_with("cgs:edge:fixed_window:10/60000ms:"));
        assert!(!name(&spec(10)).contains(['{', '}']));
    }

    #[test]
    fn places_are_described() {
        assert_eq!(describe(&spec(1)), "edge/ip={10.0.0.1}#0");
    }
}
