//! Why a configuration is invalid, as the models read the docs: the same variants and fields
//! as the `cellgate::ConfigError`s they stand for (the callers map one to the other and compare,
//! since this crate does not depend on `cellgate`).

use std::time::Duration;

/// An invalid configuration, field for field as the documented `ConfigError`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Invalid {
    /// A count, period, burst, stripe count or warm-up period of zero.
    Zero { field: &'static str },
    /// A period (or warm-up period) past `u64::MAX` ns.
    PeriodTooLong { period: Duration },
    /// An interval under 1 ns.
    RateTooFast { count: u32, period: Duration },
    /// `T * burst` past `u64::MAX` ns (or a stripe's share of it).
    BurstTooLarge { burst: u32, interval_ns: u64 },
    /// `T * (burst + queue)` past `u64::MAX` ns.
    QueueTooLarge {
        burst: u32,
        queue: u32,
        interval_ns: u64,
    },
    /// More stored permits than a warm-up state holds.
    WarmUpTooLong { permits: u64, max: u64 },
    /// More stripes than allowed (or than the burst has units).
    TooManyStripes { stripes: usize, max: usize },
    /// An operation the algorithm does not have (`restock` on GCRA).
    Unsupported {
        operation: &'static str,
        algorithm: &'static str,
    },
}
