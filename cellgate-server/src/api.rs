//! The service's own request and answer types, independent of the wire.
//!
//! The gRPC service (Envoy's RLS v3) and the HTTP `POST /json` endpoint both convert their
//! messages into a [`RateLimitRequest`], ask the engine for a [`RateLimitResponse`], and convert
//! it back. Keeping the engine free of protobuf and JSON types lets the fuzz target and the
//! reference model drive it directly.

use std::sync::Arc;
use std::time::Duration;

/// One `ShouldRateLimit` call: a domain and its descriptors, in request order.
///
/// # Examples
///
/// ```
/// use cellgate_server::api::{Descriptor, RateLimitRequest};
/// let req = RateLimitRequest {
///     domain: "edge".into(),
///     descriptors: vec![Descriptor::new([("remote_address", "10.0.0.1")])],
///     hits_addend: 1,
/// };
/// assert_eq!(req.descriptors[0].entries[0].0, "remote_address");
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RateLimitRequest {
    /// The config domain the descriptors are matched in.
    pub domain: String,
    /// The descriptors; the answer has one status per descriptor, in this order.
    pub descriptors: Vec<Descriptor>,
    /// Units each descriptor charges unless it names its own; ratelimit's rule: 0 on the wire
    /// means 1 (the wire converters apply that, so this is always the effective value).
    pub hits_addend: u64,
}

/// One descriptor: ordered `(key, value)` entries, an optional limit override and an optional
/// per-descriptor `hits_addend`.
///
/// # Examples
///
/// ```
/// use cellgate_server::api::Descriptor;
/// let d = Descriptor::new([("key", "value")]);
/// assert!(d.limit.is_none() && d.hits_addend.is_none());
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Descriptor {
    /// The entries, in order.
    pub entries: Vec<(String, String)>,
    /// The descriptor's `limit` override: replaces the configured limit for this request.
    pub limit: Option<LimitOverride>,
    /// The descriptor's own `hits_addend`: `Some(0)` looks without charging; `None` takes the
    /// request's.
    pub hits_addend: Option<u64>,
}

impl Descriptor {
    /// A descriptor of the given entries, with no override.
    ///
    /// # Examples
    ///
    /// ```
    /// use cellgate_server::api::Descriptor;
    /// assert_eq!(Descriptor::new([("a", "b")]).entries.len(), 1);
    /// ```
    pub fn new<'a>(entries: impl IntoIterator<Item = (&'a str, &'a str)>) -> Self {
        Descriptor {
            entries: entries
                .into_iter()
                .map(|(k, v)| (k.to_owned(), v.to_owned()))
                .collect(),
            limit: None,
            hits_addend: None,
        }
    }
}

/// A limit given in the request (Envoy's `RateLimitDescriptor.limit`).
///
/// # Examples
///
/// ```
/// use cellgate_server::api::{LimitOverride, Unit};
/// let o = LimitOverride { requests_per_unit: 10, unit: Unit::Second };
/// assert_eq!(o.unit.seconds(), Some(1));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LimitOverride {
    /// Requests allowed per unit.
    pub requests_per_unit: u32,
    /// The unit.
    pub unit: Unit,
}

/// The time units of ratelimit's config and of RLS v3's `RateLimit.Unit`.
///
/// # Examples
///
/// ```
/// use cellgate_server::api::Unit;
/// assert_eq!(Unit::Hour.seconds(), Some(3600));
/// assert_eq!(Unit::Unknown.seconds(), None);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Unit {
    /// Not one of the units below (a period of another length, a cellgate extension).
    Unknown,
    /// One second.
    Second,
    /// One minute.
    Minute,
    /// One hour.
    Hour,
    /// One day.
    Day,
    /// One week.
    Week,
    /// 30 days, as ratelimit counts a month.
    Month,
    /// 365 days, as ratelimit counts a year.
    Year,
}

impl Unit {
    /// The unit's length in seconds (`None` for [`Unit::Unknown`]).
    ///
    /// # Examples
    ///
    /// ```
    /// use cellgate_server::api::Unit;
    /// assert_eq!(Unit::Day.seconds(), Some(86_400));
    /// ```
    pub fn seconds(self) -> Option<u64> {
        Some(match self {
            Unit::Unknown => return None,
            Unit::Second => 1,
            Unit::Minute => 60,
            Unit::Hour => 3_600,
            Unit::Day => 86_400,
            Unit::Week => 7 * 86_400,
            Unit::Month => 30 * 86_400,
            Unit::Year => 365 * 86_400,
        })
    }
}

/// The answer's code, overall and per descriptor.
///
/// # Examples
///
/// ```
/// use cellgate_server::api::Code;
/// assert_ne!(Code::Ok, Code::OverLimit);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Code {
    /// Under the limit (or no limit applies).
    Ok,
    /// Over the limit.
    OverLimit,
}

/// The answer to one [`RateLimitRequest`].
///
/// # Examples
///
/// ```
/// use cellgate_server::api::{Code, RateLimitResponse};
/// let r = RateLimitResponse { overall: Code::Ok, statuses: vec![] };
/// assert_eq!(r.overall, Code::Ok);
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RateLimitResponse {
    /// `OverLimit` if any descriptor is over its limit (shadow-mode limits never are).
    pub overall: Code,
    /// One status per request descriptor, in request order.
    pub statuses: Vec<DescriptorStatus>,
}

/// The status of one descriptor.
///
/// # Examples
///
/// ```
/// use cellgate_server::api::{Code, DescriptorStatus};
/// let s = DescriptorStatus::unlimited();
/// assert_eq!(s.code, Code::Ok);
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DescriptorStatus {
    /// This descriptor's code.
    pub code: Code,
    /// The limit that decided (the strictest one when a descriptor has several); `None` when no
    /// limit matched or the match is `unlimited`.
    pub current_limit: Option<CurrentLimit>,
    /// Units left in the deciding limit after this request.
    pub limit_remaining: u32,
    /// Time until the deciding limit is back to full (exact, not whole windows only).
    pub duration_until_reset: Option<Duration>,
    /// What the metrics count for this descriptor (`None`: nothing matched).
    pub stats: Option<StatHits>,
}

impl DescriptorStatus {
    /// The status of a descriptor no limit applies to.
    ///
    /// # Examples
    ///
    /// ```
    /// use cellgate_server::api::DescriptorStatus;
    /// assert!(DescriptorStatus::unlimited().current_limit.is_none());
    /// ```
    pub fn unlimited() -> Self {
        DescriptorStatus {
            code: Code::Ok,
            current_limit: None,
            limit_remaining: 0,
            duration_until_reset: None,
            stats: None,
        }
    }
}

/// The limit reported in a status (`RateLimitResponse.DescriptorStatus.current_limit`).
///
/// # Examples
///
/// ```
/// use cellgate_server::api::{CurrentLimit, Unit};
/// let l = CurrentLimit { name: None, requests_per_unit: 5, unit: Unit::Minute };
/// assert_eq!(l.requests_per_unit, 5);
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CurrentLimit {
    /// The config's `name` of the limit, if any.
    pub name: Option<Arc<str>>,
    /// Requests per unit.
    pub requests_per_unit: u32,
    /// The unit ([`Unit::Unknown`] for a period that is not one of the units).
    pub unit: Unit,
}

/// Hit counts of one descriptor in one request, under the metric key ratelimit uses
/// (`domain.key1_value1.key2...`; values only under `detailed_metric`).
///
/// # Examples
///
/// ```
/// use cellgate_server::api::StatHits;
/// let h = StatHits { key: "edge.remote_address".into(), total_hits: 1, ..StatHits::default() };
/// assert_eq!(h.over_limit, 0);
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StatHits {
    /// The metric key.
    pub key: Arc<str>,
    /// Units asked for.
    pub total_hits: u64,
    /// Units refused.
    pub over_limit: u64,
    /// Units admitted that brought the limit past its near-limit ratio.
    pub near_limit: u64,
    /// Units admitted.
    pub within_limit: u64,
    /// Units over the limit but admitted because the limit is in shadow mode.
    pub shadow_mode: u64,
}

/// Why a request was refused as malformed (a gRPC `INVALID_ARGUMENT`, an HTTP 400).
///
/// # Examples
///
/// ```
/// use cellgate_server::api::RequestError;
/// assert!(RequestError::EmptyDomain.to_string().contains("domain"));
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum RequestError {
    /// The domain is empty.
    EmptyDomain,
    /// The request has no descriptors.
    NoDescriptors,
    /// A descriptor has no entries.
    EmptyDescriptor {
        /// Its position in the request.
        index: usize,
    },
    /// No config holds the domain.
    UnknownDomain(String),
    /// A count or length is over a configured input limit.
    TooLarge {
        /// What was too large (e.g. "descriptors", "entries of descriptor 3", "key length").
        what: String,
        /// The configured limit.
        limit: usize,
    },
}

impl std::fmt::Display for RequestError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RequestError::EmptyDomain => f.write_str("rate limit domain must not be empty"),
            RequestError::NoDescriptors => {
                f.write_str("rate limit descriptor list must not be empty")
            }
            RequestError::EmptyDescriptor { index } => {
                write!(f, "descriptor {index} has no entries")
            }
            RequestError::UnknownDomain(d) => write!(f, "unknown domain '{d}'"),
            RequestError::TooLarge { what, limit } => {
                write!(f, "too many {what} (the limit is {limit})")
            }
        }
    }
}

impl std::error::Error for RequestError {}
