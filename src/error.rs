//! Configuration errors.

use std::fmt;
use std::time::Duration;

/// A limiter configuration that cellgate cannot honour exactly.
///
/// Every builder's `build()` returns this instead of panicking or silently wrapping. The
/// [`Display`](fmt::Display) text names the offending field and its value.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use cellgate::{ConfigError, Limiter, Quota};
///
/// let err = Limiter::gcra(Quota::new(0, Duration::from_secs(1))).build().unwrap_err();
/// assert_eq!(err, ConfigError::Zero { field: "count" });
/// assert_eq!(err.to_string(), "count must be at least 1, got 0");
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ConfigError {
    /// A field that must be positive was zero (`count`, `period`, `burst`, `max_keys`).
    Zero {
        /// The field's name.
        field: &'static str,
    },
    /// The period does not fit in `u64` nanoseconds (about 584 years).
    PeriodTooLong {
        /// The period given.
        period: Duration,
    },
    /// `count` requests per `period` is faster than one request per nanosecond, the finest
    /// interval the clock can express.
    RateTooFast {
        /// Requests per period.
        count: u32,
        /// The period.
        period: Duration,
    },
    /// The window does not fit in `u64` nanoseconds (about 584 years).
    WindowTooLong {
        /// The window given.
        window: Duration,
    },
    /// The limit does not fit in the packed layout for this window length.
    LimitTooLarge {
        /// The limit given.
        limit: u32,
        /// The largest limit this window length can hold.
        max: u64,
        /// The window given.
        window: Duration,
    },
    /// A sliding log's limit above [`MAX_SLIDING_LOG_LIMIT`](crate::MAX_SLIDING_LOG_LIMIT): its memory is
    /// O(limit) per key.
    LogLimitTooLarge {
        /// The limit given.
        limit: u32,
        /// The largest limit a sliding log accepts.
        max: u32,
    },
    /// `max_keys` above what the fixed-capacity table accepts
    /// ([`MAX_TABLE_KEYS`](crate::MAX_TABLE_KEYS)); use `exact_keys()` for larger bounds.
    TooManyKeys {
        /// The bound given.
        max_keys: usize,
        /// The largest bound the table accepts.
        max: usize,
    },
    /// An operator action (`restock`, `set_stock`) needed a new key, but the bounded table had
    /// no slot left for it, even after dropping idle keys. Nothing was changed.
    StoreFull {
        /// The limiter's bound.
        max_keys: usize,
    },
    /// An operation that the limiter's algorithm does not have (for example `restock` on a
    /// GCRA limiter).
    Unsupported {
        /// The operation attempted.
        operation: &'static str,
        /// The limiter's algorithm.
        algorithm: &'static str,
    },
    /// The burst times the emission interval (the tolerance, in nanoseconds) does not fit in a
    /// `u64`.
    BurstTooLarge {
        /// The burst given.
        burst: u32,
        /// The emission interval it multiplies, in nanoseconds.
        interval_ns: u64,
    },
    /// The burst plus the queue, times the emission interval, does not fit in a `u64` of
    /// nanoseconds.
    QueueTooLarge {
        /// The burst given.
        burst: u32,
        /// The queue given.
        queue: u32,
        /// The emission interval, in nanoseconds.
        interval_ns: u64,
    },
    /// Text in a configuration notation (nginx's `limit_req`) that cellgate could not read.
    Parse {
        /// The text that was read.
        input: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A warm-up period that holds more stored permits (warm-up period / stable interval) than
    /// the packed warm-up state can count.
    WarmUpTooLong {
        /// Stored permits the configuration asks for.
        permits: u64,
        /// The most the state holds.
        max: u64,
    },
    /// A striped limiter with more stripes than it can have: a GCRA stripe needs a burst of at
    /// least one (at most `burst` stripes), and no limiter has more than
    /// [`MAX_STRIPES`](crate::MAX_STRIPES).
    TooManyStripes {
        /// Stripes asked for.
        stripes: usize,
        /// The most this configuration allows.
        max: usize,
    },
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ConfigError::Zero { field } => write!(f, "{field} must be at least 1, got 0"),
            ConfigError::PeriodTooLong { period } => write!(
                f,
                "period {period:?} is too long: at most {} ns (u64::MAX) is supported",
                u64::MAX
            ),
            ConfigError::WindowTooLong { window } => write!(
                f,
                "window {window:?} is too long: at most {} ns (u64::MAX) is supported",
                u64::MAX
            ),
            ConfigError::LimitTooLarge { limit, max, window } => write!(
                f,
                "limit {limit} is too large for a {window:?} window: its packed state holds at most {max}"
            ),
            ConfigError::TooManyKeys { max_keys, max } => write!(
                f,
                "max_keys {max_keys} is too large for the fixed-capacity table (at most {max}); use exact_keys() for larger bounds"
            ),
            ConfigError::LogLimitTooLarge { limit, max } => write!(
                f,
                "limit {limit} is too large for a sliding log (O(limit) memory per key): at most {max}"
            ),
            ConfigError::StoreFull { max_keys } => write!(
                f,
                "the key store is full (max_keys {max_keys}) of keys still in use: no slot for a new key"
            ),
            ConfigError::Unsupported {
                operation,
                algorithm,
            } => write!(f, "{operation} is not supported by a {algorithm} limiter"),
            ConfigError::RateTooFast { count, period } => write!(
                f,
                "count {count} per period {period:?} is faster than 1 request per nanosecond"
            ),
            ConfigError::BurstTooLarge { burst, interval_ns } => write!(
                f,
                "burst {burst} times the emission interval {interval_ns} ns overflows u64 nanoseconds"
            ),
            ConfigError::QueueTooLarge {
                burst,
                queue,
                interval_ns,
            } => write!(
                f,
                "burst {burst} plus queue {queue} times the emission interval {interval_ns} ns overflows u64 nanoseconds"
            ),
            ConfigError::Parse { input, reason } => write!(f, "cannot read {input:?}: {reason}"),
            ConfigError::WarmUpTooLong { permits, max } => write!(
                f,
                "the warm-up period holds {permits} stored permits (warm-up / stable interval): at most {max} are supported"
            ),
            ConfigError::TooManyStripes { stripes, max } => write!(
                f,
                "{stripes} stripes: at most {max} (a GCRA stripe needs a burst of at least 1)"
            ),
        }
    }
}

impl std::error::Error for ConfigError {}
