//! What a limiter enforces, described for the outside world (`RateLimit-Policy` headers,
//! metrics labels, logs): the algorithm, the limit and the time over which it refills.

use std::time::Duration;

/// Which algorithm a limiter runs (see the crate docs for each one's semantics).
///
/// # Examples
///
/// ```
/// use cellgate::{AnyLimiter, Limiter, PolicyKind, Quota};
///
/// let l = Limiter::stock(100).build()?;
/// assert_eq!(AnyLimiter::policy(&l).kind(), PolicyKind::Stock);
/// # Ok::<(), cellgate::ConfigError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum PolicyKind {
    /// GCRA (token bucket / leaky bucket as a meter, with an optional queue).
    Gcra,
    /// Fixed window counter.
    FixedWindow,
    /// Sliding window counter (two-window estimate).
    SlidingWindow,
    /// Sliding window log (exact).
    SlidingLog,
    /// Units that only go down (flash-sale inventory).
    Stock,
    /// Guava's `SmoothWarmingUp`.
    WarmUp,
}

impl PolicyKind {
    /// A short lowercase name (`"gcra"`, `"fixed_window"`, ...), stable for labels and logs.
    #[must_use]
    pub const fn name(self) -> &'static str {
        match self {
            PolicyKind::Gcra => "gcra",
            PolicyKind::FixedWindow => "fixed_window",
            PolicyKind::SlidingWindow => "sliding_window",
            PolicyKind::SlidingLog => "sliding_log",
            PolicyKind::Stock => "stock",
            PolicyKind::WarmUp => "warm_up",
        }
    }
}

/// A limiter's policy: `limit` units per `window`, by `kind`.
///
/// - GCRA: `limit` is what decisions report (burst plus queue), `interval` the emission
///   interval `T`, and `window = limit * T`, the time a drained key takes to regain its whole
///   limit; `limit / window` is the steady rate.
/// - Fixed and sliding windows, sliding log: `limit` per `window`; no interval.
/// - Stock: `limit` is the configured stock; no window (it never refills).
/// - Warm-up: `limit` 1, `interval` the stable interval, `window` one interval.
///
/// This is what an IETF `RateLimit-Policy: "name";q=<limit>;w=<window in seconds>` header says.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use cellgate::{AnyLimiter, KeyedLimiter, Quota};
///
/// let l = KeyedLimiter::<u64>::gcra(Quota::per_minute(30).with_burst(15)).build()?;
/// let p = AnyLimiter::<u64>::policy(&l);
/// assert_eq!(p.limit(), 15);
/// assert_eq!(p.interval(), Some(Duration::from_secs(2)));
/// assert_eq!(p.window(), Some(Duration::from_secs(30)));
/// # Ok::<(), cellgate::ConfigError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Policy {
    kind: PolicyKind,
    limit: u32,
    window: Option<Duration>,
    interval: Option<Duration>,
}

impl Policy {
    pub(crate) const fn new(
        kind: PolicyKind,
        limit: u32,
        window: Option<Duration>,
        interval: Option<Duration>,
    ) -> Self {
        Self {
            kind,
            limit,
            window,
            interval,
        }
    }

    /// The algorithm.
    #[must_use]
    pub const fn kind(&self) -> PolicyKind {
        self.kind
    }

    /// The limit decisions report ([`Decision::limit`](crate::Decision::limit)).
    #[must_use]
    pub const fn limit(&self) -> u32 {
        self.limit
    }

    /// The time over which `limit` units are granted; `None` for a stock (no refill).
    #[must_use]
    pub const fn window(&self) -> Option<Duration> {
        self.window
    }

    /// The emission interval of GCRA and warm-up limiters; `None` for the others.
    #[must_use]
    pub const fn interval(&self) -> Option<Duration> {
        self.interval
    }
}
