//! The generated configs: the input's descriptors as a tree of values, written out as the
//! loader's `RawRoot` (and from it, on one path, as YAML), and the model's reading of the same
//! tree: which configs the loader must refuse, ratelimit's matching, and each limit's spec.

use std::time::Duration;

use arbitrary::Arbitrary;
use cellgate_server::api::Unit;
use cellgate_server::config::yaml::{RawDescriptor, RawRateLimit, RawReplaces, RawRoot};

use super::limit::{unit_of, Family, Spec};

const KEYS: [&str; 3] = ["a", "b", "c"];
/// Config values: `None` is the key alone; values with a `*` are wildcards (`*` matches any
/// run of characters, anywhere).
const CONFIG_VALUES: [Option<&str>; 8] = [
    None,
    Some("x"),
    Some("y"),
    Some("x*"),
    Some("*"),
    Some("*z"),
    Some("x*z"),
    Some("x*y*z"),
];
/// Top-level descriptors and children per descriptor, at most.
const TOP: usize = 5;
const CHILDREN: usize = 4;
/// Limits in one `rate_limits` list, at most.
const LIST: usize = 3;
/// Limits' `name`s (a few, so that `replaces` finds them).
const NAMES: [&str; 3] = ["n0", "n1", "n2"];

/// A top-level config descriptor.
#[derive(Arbitrary, Debug, Clone)]
pub struct Node {
    pub key: u8,
    pub value: u8,
    pub limits: Limits,
    pub shadow: bool,
    /// `share_threshold` (refused unless the value is a wildcard).
    pub share: bool,
    pub children: Vec<Leaf>,
    /// `quota_mode`.
    pub quota: bool,
}

/// A second-level config descriptor.
#[derive(Arbitrary, Debug, Clone)]
pub struct Leaf {
    pub key: u8,
    pub value: u8,
    pub limits: Limits,
    pub shadow: bool,
    pub share: bool,
    /// `quota_mode`.
    pub quota: bool,
}

/// A descriptor's limits.
#[derive(Arbitrary, Debug, Clone)]
pub enum Limits {
    None,
    /// `rate_limit: {unlimited: true}`.
    Unlimited,
    /// `rate_limit: ...`.
    One(Limit),
    /// `rate_limits: [...]` (the first three; an empty list is refused).
    Several(Vec<Limit>),
}

/// One limit.
#[derive(Arbitrary, Debug, Clone, Copy)]
pub struct Limit {
    pub algorithm: Algorithm,
    /// `1 + requests % 6` (a stock: units sold); 0 when `requests % 16 == 15` (every
    /// request over the limit; refused in `rate_limits`).
    pub requests: u8,
    /// Ignored by a stock, which has none.
    pub period: Period,
    /// `name`, one of three.
    pub name: Option<u8>,
    /// `replaces: [{name}]`, one of the same three (its own name is refused).
    pub replaces: Option<u8>,
}

/// `algorithm`.
#[derive(Arbitrary, Debug, Clone, Copy)]
pub enum Algorithm {
    /// Not written (the default), or written out.
    FixedWindow {
        written: bool,
    },
    /// `burst: b % 9` when given (0 is refused); the default is `requests_per_unit`.
    Gcra {
        burst: Option<u8>,
    },
    SlidingWindow,
    Stock,
}

/// `unit` or `period`.
#[derive(Arbitrary, Debug, Clone, Copy)]
pub enum Period {
    Second,
    Minute,
    /// `period: "{1 + s % 4}s"`.
    Seconds(u8),
    /// `period: "{100 + ms % 2000}ms"`.
    Millis(u16),
}

/// A config descriptor as values.
#[derive(Debug, Clone)]
pub(crate) struct Desc {
    pub(crate) key: &'static str,
    pub(crate) value: Option<&'static str>,
    pub(crate) limits: Limits,
    pub(crate) shadow: bool,
    pub(crate) quota: bool,
    pub(crate) share: bool,
    pub(crate) children: Vec<Desc>,
}

pub(crate) fn key(k: u8) -> &'static str {
    KEYS[usize::from(k) % KEYS.len()]
}

fn name(n: u8) -> &'static str {
    NAMES[usize::from(n) % NAMES.len()]
}

fn config_value(v: u8) -> Option<&'static str> {
    CONFIG_VALUES[usize::from(v) % CONFIG_VALUES.len()]
}

/// The input's tree, cut to its bounds.
pub(crate) fn descs(tree: &[Node]) -> Vec<Desc> {
    let cut = |limits: &Limits| match limits {
        Limits::Several(list) => Limits::Several(list.iter().take(LIST).copied().collect()),
        other => other.clone(),
    };
    tree.iter()
        .take(TOP)
        .map(|n| Desc {
            key: key(n.key),
            value: config_value(n.value),
            limits: cut(&n.limits),
            shadow: n.shadow,
            quota: n.quota,
            share: n.share,
            children: (n.children.iter().take(CHILDREN))
                .map(|l| Desc {
                    key: key(l.key),
                    value: config_value(l.value),
                    limits: cut(&l.limits),
                    shadow: l.shadow,
                    quota: l.quota,
                    share: l.share,
                    children: Vec::new(),
                })
                .collect(),
        })
        .collect()
}

impl Limit {
    pub(crate) fn requests(&self) -> u32 {
        if self.requests % 16 == 15 {
            0
        } else {
            1 + u32::from(self.requests % 6)
        }
    }

    /// The unit a status reports for this limit (a stock has none).
    pub(crate) fn unit(&self) -> Unit {
        match self.algorithm {
            Algorithm::Stock => Unit::Unknown,
            _ => unit_of(self.period()),
        }
    }

    fn burst(&self) -> Option<u32> {
        match self.algorithm {
            Algorithm::Gcra { burst } => burst.map(|b| u32::from(b % 9)),
            _ => None,
        }
    }

    fn period(&self) -> Duration {
        match self.period {
            Period::Second => Duration::from_secs(1),
            Period::Minute => Duration::from_secs(60),
            Period::Seconds(s) => Duration::from_secs(1 + u64::from(s % 4)),
            Period::Millis(ms) => Duration::from_millis(100 + u64::from(ms % 2000)),
        }
    }

    pub(crate) fn name(&self) -> Option<&'static str> {
        self.name.map(name)
    }

    pub(crate) fn replaces(&self) -> Option<&'static str> {
        self.replaces.map(name)
    }

    fn valid(&self) -> bool {
        self.burst() != Some(0) && (self.replaces().is_none() || self.replaces() != self.name())
    }

    fn raw(&self) -> RawRateLimit {
        let (unit, period) = match (self.algorithm, self.period) {
            (Algorithm::Stock, _) => (None, None),
            (_, Period::Second) => (Some("second".to_owned()), None),
            (_, Period::Minute) => (Some("minute".to_owned()), None),
            (_, Period::Seconds(_)) => (None, Some(format!("{}s", self.period().as_secs()))),
            (_, Period::Millis(_)) => (None, Some(format!("{}ms", self.period().as_millis()))),
        };
        let algorithm = match self.algorithm {
            Algorithm::FixedWindow { written: false } => None,
            Algorithm::FixedWindow { written: true } => Some("fixed_window"),
            Algorithm::Gcra { .. } => Some("gcra"),
            Algorithm::SlidingWindow => Some("sliding_window"),
            Algorithm::Stock => Some("stock"),
        };
        RawRateLimit {
            unit,
            period,
            requests_per_unit: Some(self.requests()),
            algorithm: algorithm.map(Into::into),
            burst: self.burst(),
            name: self.name().map(Into::into),
            replaces: (self.replaces().into_iter())
                .map(|n| RawReplaces {
                    name: Some(n.into()),
                })
                .collect(),
            ..RawRateLimit::default()
        }
    }

    /// The model's spec of this limit (valid: see [`valid`]).
    pub(crate) fn spec(&self) -> Spec {
        let family = match self.algorithm {
            Algorithm::FixedWindow { .. } => Family::Fixed,
            Algorithm::Gcra { .. } => Family::Gcra,
            Algorithm::SlidingWindow => Family::Sliding,
            Algorithm::Stock => Family::Stock,
        };
        let requests = self.requests();
        let burst = self.burst().unwrap_or(requests);
        Spec::new(family, requests, burst, self.period())
    }
}

/// The loader's document for `descs`, in domain `d`.
pub(crate) fn raw(descs: &[Desc]) -> RawRoot {
    RawRoot {
        domain: Some("d".into()),
        descriptors: descs.iter().map(raw_desc).collect(),
    }
}

fn raw_desc(d: &Desc) -> RawDescriptor {
    let (rate_limit, rate_limits) = match &d.limits {
        Limits::None => (None, None),
        Limits::Unlimited => (
            Some(RawRateLimit {
                unlimited: true,
                ..RawRateLimit::default()
            }),
            None,
        ),
        Limits::One(l) => (Some(l.raw()), None),
        Limits::Several(list) => (None, Some(list.iter().map(Limit::raw).collect())),
    };
    RawDescriptor {
        key: Some(d.key.into()),
        value: d.value.map(Into::into),
        rate_limit,
        rate_limits,
        shadow_mode: d.shadow,
        quota_mode: d.quota,
        share_threshold: d.share,
        descriptors: d.children.iter().map(raw_desc).collect(),
        ..RawDescriptor::default()
    }
}

/// Whether the loader must accept the tree: no two siblings with the same key and value, no
/// empty `rate_limits`, no `burst: 0`, no limit that replaces its own name, no
/// `share_threshold` on a value without a `*`.
pub(crate) fn valid(descs: &[Desc]) -> bool {
    let unique = descs.iter().enumerate().all(|(i, a)| {
        descs[..i]
            .iter()
            .all(|b| (a.key, a.value) != (b.key, b.value))
    });
    let limits_ok = |d: &Desc| match &d.limits {
        Limits::Several(list) => {
            !list.is_empty() && list.iter().all(|l| l.valid() && l.requests() > 0)
        }
        Limits::One(l) => l.valid(),
        _ => true,
    };
    let share_ok = |d: &Desc| !d.share || d.value.is_some_and(|v| v.contains('*'));
    unique
        && descs
            .iter()
            .all(|d| limits_ok(d) && share_ok(d) && valid(&d.children))
}

/// ratelimit's matching on the model's tree: for each entry, the sibling with the same key and
/// value, else the first of that key whose wildcard value matches the value, else the one of
/// the key alone. The path (sibling indices, and for each entry the wildcard it matched through
/// a `share_threshold` descriptor) and the descriptor the last entry lands on.
pub(crate) fn find<'d>(descs: &'d [Desc], entries: &[(String, String)]) -> Option<Found<'d>> {
    let mut level = descs;
    let mut found = Found {
        path: Vec::new(),
        shared: Vec::new(),
        desc: None,
    };
    for (i, (k, v)) in entries.iter().enumerate() {
        let same_key = || level.iter().enumerate().filter(|(_, d)| d.key == k);
        let exact = same_key().find(|(_, d)| d.value == Some(v.as_str()) && !v.contains('*'));
        let wildcard = || {
            same_key().find(|(_, d)| {
                d.value
                    .is_some_and(|p| p.contains('*') && glob(p.as_bytes(), v.as_bytes()))
            })
        };
        let alone = || same_key().find(|(_, d)| d.value.is_none());
        let (index, next, via_wildcard) = match exact {
            Some((i, d)) => (i, d, false),
            None => match wildcard() {
                Some((i, d)) => (i, d, true),
                None => {
                    let (i, d) = alone()?;
                    (i, d, false)
                }
            },
        };
        found.path.push(index);
        found
            .shared
            .push(next.value.filter(|_| via_wildcard && next.share));
        if i + 1 == entries.len() {
            found.desc = Some(next);
            return Some(found);
        }
        level = &next.children;
    }
    None
}

/// What [`find`] found.
pub(crate) struct Found<'d> {
    pub(crate) path: Vec<usize>,
    /// Per entry: the pattern that stands for its value in the limit's key (`share_threshold`).
    pub(crate) shared: Vec<Option<&'static str>>,
    pub(crate) desc: Option<&'d Desc>,
}

/// Whether `text` matches the wildcard `pattern` (`*`: any run of bytes, none included), by
/// trying every split at each `*` (the model's way: plain recursion, not the loader's scan).
fn glob(pattern: &[u8], text: &[u8]) -> bool {
    match pattern.split_first() {
        None => text.is_empty(),
        Some((b'*', rest)) => (0..=text.len()).any(|skip| glob(rest, &text[skip..])),
        Some((c, rest)) => text.first() == Some(c) && glob(rest, &text[1..]),
    }
}
