//! cellgate-server's engine: small configs built as values (and, on one path, written to YAML
//! and parsed back) and random requests, against a reference model of ratelimit's matching and
//! of fixed-window counting, all or nothing, on a manual clock. Arbitrary bytes also go to
//! the YAML loader, which must answer (accept or refuse) without panicking.
//!
//! The model is written from ratelimit's README and the server's docs: for each entry in
//! order, the child with the same key and value, else the first child of that key whose
//! `prefix*` matches, else the child of the key alone; the limit is the one of the node the
//! last entry lands on. A request is admitted iff, charging its descriptors in order, every
//! charge fits its window (`count + hits <= limit`); then all are charged, else none. A
//! refused request reports over the limit each descriptor whose charge alone would not fit
//! and the one at which the charges in order first failed.

use std::collections::HashMap;
use std::time::Duration;

use arbitrary::Arbitrary;
use cellgate::clock::ManualClock;
use cellgate_server::api::{Code, Descriptor, RateLimitRequest};
use cellgate_server::config::yaml::{RawDescriptor, RawRateLimit, RawRoot};
use cellgate_server::config::Config;
use cellgate_server::engine::{Engine, EngineOptions};

const KEYS: [&str; 3] = ["a", "b", "c"];
/// Config values: `None` is the key alone; values ending in `*` are prefixes.
const CONFIG_VALUES: [Option<&str>; 5] = [None, Some("x"), Some("y"), Some("x*"), Some("*")];
const REQUEST_VALUES: [&str; 4] = ["x", "y", "xz", "*"];

/// One fuzz input.
#[derive(Arbitrary, Debug)]
pub struct Input {
    pub tree: Vec<Node>,
    pub through_yaml: bool,
    pub steps: Vec<Step>,
    pub yaml: Vec<u8>,
}

/// A config descriptor.
#[derive(Arbitrary, Debug, Clone)]
pub struct Node {
    pub key: u8,
    pub value: u8,
    /// `None`: no limit; `Some(0)`: unlimited; else the limit (1 to 4).
    pub limit: Option<u8>,
    pub minute: bool,
    pub children: Vec<Leaf>,
}

/// A second-level descriptor.
#[derive(Arbitrary, Debug, Clone)]
pub struct Leaf {
    pub key: u8,
    pub value: u8,
    pub limit: Option<u8>,
}

/// A request descriptor: entries (key, value) as indices, and its own hits_addend.
pub type RequestDescriptor = (Vec<(u8, u8)>, Option<u8>);

/// The model's counters: (descriptor path in the tree, request values) -> (window, count).
type Counts = HashMap<(Vec<usize>, Vec<String>), (u64, u32)>;

/// What happens next.
#[derive(Arbitrary, Debug)]
pub enum Step {
    Advance(u16),
    Request {
        descriptors: Vec<RequestDescriptor>,
        hits: u8,
    },
}

fn key(k: u8) -> &'static str {
    KEYS[usize::from(k) % KEYS.len()]
}

fn config_value(v: u8) -> Option<&'static str> {
    CONFIG_VALUES[usize::from(v) % CONFIG_VALUES.len()]
}

fn raw_limit(limit: Option<u8>, minute: bool) -> Option<RawRateLimit> {
    limit.map(|l| match l % 5 {
        0 => RawRateLimit {
            unlimited: true,
            ..RawRateLimit::default()
        },
        n => RawRateLimit {
            unit: Some(if minute { "minute" } else { "second" }.into()),
            requests_per_unit: Some(u32::from(n)),
            ..RawRateLimit::default()
        },
    })
}

fn raw(tree: &[Node]) -> RawRoot {
    let descriptors = tree
        .iter()
        .take(5)
        .map(|n| RawDescriptor {
            key: Some(key(n.key).into()),
            value: config_value(n.value).map(Into::into),
            rate_limit: raw_limit(n.limit, n.minute),
            descriptors: n
                .children
                .iter()
                .take(4)
                .map(|l| RawDescriptor {
                    key: Some(key(l.key).into()),
                    value: config_value(l.value).map(Into::into),
                    rate_limit: raw_limit(l.limit, n.minute),
                    ..RawDescriptor::default()
                })
                .collect(),
            ..RawDescriptor::default()
        })
        .collect();
    RawRoot {
        domain: Some("d".into()),
        descriptors,
    }
}

/// The model's limit: `None` unlimited, else (limit, window in ms).
type ModelLimit = Option<(u32, u64)>;

/// The model's view of the tree; `Err` when two siblings have the same key and value.
fn model_match(root: &RawRoot, entries: &[(String, String)]) -> Option<(Vec<usize>, ModelLimit)> {
    let mut level = &root.descriptors;
    let mut path = Vec::new();
    for (i, (k, v)) in entries.iter().enumerate() {
        let same_key = || {
            level
                .iter()
                .enumerate()
                .filter(|(_, d)| d.key.as_deref() == Some(k))
        };
        let exact =
            same_key().find(|(_, d)| d.value.as_deref() == Some(v.as_str()) && !v.ends_with('*'));
        let wildcard = || {
            same_key().find(
                |(_, d)| match d.value.as_deref().and_then(|p| p.strip_suffix('*')) {
                    Some(prefix) => v.starts_with(prefix),
                    None => false,
                },
            )
        };
        let alone = || same_key().find(|(_, d)| d.value.is_none());
        let (index, next) = exact.or_else(wildcard).or_else(alone)?;
        path.push(index);
        if i + 1 == entries.len() {
            let limit = next.rate_limit.as_ref()?;
            let model = (!limit.unlimited).then(|| {
                let ms = if limit.unit.as_deref() == Some("minute") {
                    60_000
                } else {
                    1_000
                };
                (limit.requests_per_unit.unwrap_or(0), ms)
            });
            return Some((path, model));
        }
        level = &next.descriptors;
    }
    None
}

fn duplicates(descriptors: &[RawDescriptor]) -> bool {
    descriptors.iter().enumerate().any(|(i, a)| {
        descriptors[..i]
            .iter()
            .any(|b| a.key == b.key && a.value == b.value)
    }) || descriptors.iter().any(|d| duplicates(&d.descriptors))
}

/// What one input exercised (so that a test can tell the model was reached).
#[derive(Debug, Default, Clone, Copy)]
pub struct Coverage {
    /// Requests decided and compared.
    pub requests: u64,
    /// Statuses of limited descriptors compared.
    pub limited: u64,
    /// Requests refused.
    pub refused: u64,
}

/// Replays `input`; panics on any difference between the engine and the model.
pub fn run(input: &Input) -> Coverage {
    let mut seen = Coverage::default();
    // Any bytes: an answer, never a panic.
    if let Ok(text) = std::str::from_utf8(&input.yaml) {
        let _ = Config::from_yaml("fuzz.yaml", text);
    }
    let root = raw(&input.tree);
    let built = if input.through_yaml {
        let text = serde_yaml::to_string(&root).expect("a RawRoot always serialises");
        Config::from_yaml("fuzz.yaml", &text)
    } else {
        Config::from_roots([("fuzz.yaml", root.clone())])
    };
    let config = match built {
        Ok(c) => {
            assert!(
                !duplicates(&root.descriptors),
                "duplicate siblings accepted"
            );
            c
        }
        Err(e) => {
            assert!(duplicates(&root.descriptors), "refused: {e}");
            return seen;
        }
    };
    let clock = ManualClock::new();
    let engine = Engine::with_clock(config, EngineOptions::default(), clock.clone());
    // (descriptor path, values) -> (window index, count)
    let mut counts = Counts::new();
    for step in input.steps.iter().take(64) {
        match step {
            Step::Advance(ms) => clock.advance(Duration::from_millis(u64::from(*ms))),
            Step::Request { descriptors, hits } => request(
                &engine,
                &clock,
                &root,
                &mut counts,
                descriptors,
                *hits,
                &mut seen,
            ),
        }
    }
    seen
}

fn request(
    engine: &Engine,
    clock: &ManualClock,
    root: &RawRoot,
    counts: &mut Counts,
    descriptors: &[RequestDescriptor],
    hits: u8,
    seen: &mut Coverage,
) {
    let descriptors: Vec<Descriptor> = descriptors
        .iter()
        .take(4)
        .filter(|(entries, _)| !entries.is_empty())
        .map(|(entries, own)| Descriptor {
            entries: entries
                .iter()
                .take(3)
                .map(|&(k, v)| {
                    let value = REQUEST_VALUES[usize::from(v) % REQUEST_VALUES.len()];
                    (key(k).to_owned(), value.to_owned())
                })
                .collect(),
            limit: None,
            hits_addend: own.map(|h| u64::from(h % 4)),
        })
        .collect();
    if descriptors.is_empty() {
        return;
    }
    let req = RateLimitRequest {
        domain: "d".into(),
        descriptors,
        hits_addend: u64::from(hits % 4),
    };
    let answer = engine.decide(&req).expect("a well-formed request");
    let now_ms = clock.now_ms();
    // The model: each limited descriptor's counter, its window's count, and its charge.
    let mut pending: HashMap<(Vec<usize>, Vec<String>), u32> = HashMap::new();
    let mut first_failure = None;
    let mut plan = Vec::new();
    for (i, d) in req.descriptors.iter().enumerate() {
        let n = d.hits_addend.unwrap_or(req.hits_addend) as u32;
        let found = model_match(root, &d.entries);
        let Some((path, Some((limit, window_ms)))) = found.clone() else {
            plan.push((found.map(|f| f.1.is_none()), None));
            continue;
        };
        let values = d.entries.iter().map(|(_, v)| v.clone()).collect::<Vec<_>>();
        let id = (path, values);
        let window = now_ms / window_ms;
        let current = match counts.get(&id) {
            Some(&(w, c)) if w == window => c,
            _ => 0,
        };
        let extra = pending.entry(id.clone()).or_default();
        if n > 0 && current + *extra + n > limit && first_failure.is_none() {
            first_failure = Some(i);
        }
        *extra += n;
        plan.push((Some(false), Some((id, limit, window, current, n))));
    }
    let admitted = first_failure.is_none();
    seen.requests += 1;
    seen.refused += u64::from(!admitted);
    assert_eq!(
        answer.overall == Code::Ok,
        admitted,
        "{req:?} -> {answer:?}"
    );
    // Charges first (in request order), then every status: a look-only descriptor of an
    // admitted request sees the state after the request's charges.
    let mut remaining_at_charge = vec![None; plan.len()];
    if admitted {
        for (i, (_, limited)) in plan.iter().enumerate() {
            if let Some((id, limit, window, _, n)) = limited {
                if *n == 0 {
                    continue;
                }
                let entry = counts.entry(id.clone()).or_insert((*window, 0));
                if entry.0 != *window {
                    *entry = (*window, 0);
                }
                entry.1 += n;
                remaining_at_charge[i] = Some(limit - entry.1);
            }
        }
    }
    for (i, ((unlimited, limited), status)) in plan.into_iter().zip(&answer.statuses).enumerate() {
        let Some((id, limit, window, current, n)) = limited else {
            assert_eq!(status.code, Code::Ok);
            assert!(status.current_limit.is_none(), "{i}: {status:?}");
            let expected = if unlimited == Some(true) { u32::MAX } else { 0 };
            assert_eq!(status.limit_remaining, expected, "{i}: {status:?}");
            continue;
        };
        seen.limited += 1;
        let limit_of = status.current_limit.as_ref().map(|l| l.requests_per_unit);
        assert_eq!(limit_of, Some(limit), "{i}: {status:?}");
        let over = !admitted && (first_failure == Some(i) || current + n > limit);
        assert_eq!(
            status.code == Code::OverLimit,
            over,
            "{i}: {req:?} -> {answer:?}"
        );
        let expected = remaining_at_charge[i].unwrap_or_else(|| match counts.get(&id) {
            Some(&(w, c)) if w == window => limit - c,
            _ => limit,
        });
        assert_eq!(
            status.limit_remaining, expected,
            "{i}: {req:?} -> {answer:?}"
        );
    }
}

/// Milliseconds on a manual clock.
trait Millis {
    fn now_ms(&self) -> u64;
}

impl Millis for ManualClock {
    fn now_ms(&self) -> u64 {
        cellgate::clock::Clock::now(self) / 1_000_000
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arbitrary::Unstructured;

    /// A small xorshift generator: the test's inputs are built directly (arbitrary's
    /// decoding of random bytes yields mostly empty trees and requests).
    struct Rng(u64);

    impl Rng {
        fn below(&mut self, n: u64) -> u8 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            (self.0 % n) as u8
        }
    }

    fn generate(rng: &mut Rng) -> Input {
        let limit = |rng: &mut Rng| (rng.below(4) > 0).then(|| rng.below(5));
        let tree = (0..1 + rng.below(4))
            .map(|_| Node {
                key: rng.below(3),
                value: rng.below(5),
                limit: limit(rng),
                minute: rng.below(2) == 0,
                children: (0..rng.below(3))
                    .map(|_| Leaf {
                        key: rng.below(3),
                        value: rng.below(5),
                        limit: limit(rng),
                    })
                    .collect(),
            })
            .collect();
        let steps = (0..30)
            .map(|_| match rng.below(4) {
                0 => Step::Advance(u16::from(rng.below(250)) * 8),
                _ => Step::Request {
                    descriptors: (0..1 + rng.below(3))
                        .map(|_| {
                            let entries = (0..1 + rng.below(2))
                                .map(|_| (rng.below(3), rng.below(4)))
                                .collect();
                            (entries, (rng.below(4) == 0).then(|| rng.below(4)))
                        })
                        .collect(),
                    hits: 1 + rng.below(2),
                },
            })
            .collect();
        Input {
            tree,
            through_yaml: rng.below(2) == 0,
            steps,
            yaml: Vec::new(),
        }
    }

    #[test]
    fn random_inputs_agree_with_the_model() {
        let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
        let mut total = Coverage::default();
        for _ in 0..2000 {
            let c = run(&generate(&mut rng));
            total.requests += c.requests;
            total.limited += c.limited;
            total.refused += c.refused;
        }
        println!("{total:?}");
        assert!(total.limited > 5_000 && total.refused > 1_000, "{total:?}");
    }

    #[test]
    fn arbitrary_bytes_never_panic_the_loader() {
        let mut rng = Rng(7);
        for _ in 0..2000 {
            let len = rng.below(200);
            let bytes: Vec<u8> = (0..len).map(|_| rng.below(256)).collect();
            let input = Input::arbitrary(&mut Unstructured::new(&bytes));
            if let Ok(input) = input {
                let _ = run(&input);
            }
        }
        for text in [
            "",
            "domain: [",
            "- - -",
            "domain: d\ndescriptors: 7",
            "{a: *b}",
        ] {
            let _ = Config::from_yaml("t.yaml", text);
        }
    }

    #[test]
    fn seeds_replay() {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../corpus/seed_server_engine");
        let mut seen = 0;
        for entry in std::fs::read_dir(dir).unwrap() {
            let bytes = std::fs::read(entry.unwrap().path()).unwrap();
            if let Ok(input) = Input::arbitrary_take_rest(Unstructured::new(&bytes)) {
                let _ = run(&input);
                seen += 1;
            }
        }
        assert!(seen > 0);
    }
}
