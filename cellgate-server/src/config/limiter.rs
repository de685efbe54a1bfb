//! The core limiter a limit's spec describes: built here, where the spec is defined, so that
//! validation can ask the core whether it accepts a spec (limits the packed layout cannot
//! hold, periods too long) without the config depending on the engine.

use std::sync::Arc;

use cellgate::clock::Clock;
use cellgate::{KeyedLimiter, Quota, MAX_TABLE_KEYS};

use super::{Algorithm, RuleSpec};

/// A limit's keyed state in this process.
pub(crate) type LocalLim = KeyedLimiter<String, Arc<dyn Clock>>;

/// Builds the limiter a spec describes.
pub(crate) fn build(
    spec: &RuleSpec,
    clock: Arc<dyn Clock>,
    max_keys: usize,
) -> Result<LocalLim, cellgate::ConfigError> {
    let rpu = spec.requests_per_unit;
    let builder = match spec.algorithm {
        Algorithm::FixedWindow => KeyedLimiter::<String>::fixed_window(rpu, spec.period),
        Algorithm::Gcra { burst } => {
            KeyedLimiter::<String>::gcra(Quota::new(rpu, spec.period).with_burst(burst))
        }
        Algorithm::SlidingWindow => KeyedLimiter::<String>::sliding_window(rpu, spec.period),
        Algorithm::Stock => KeyedLimiter::<String>::stock(rpu),
    };
    builder
        .clock(clock)
        .max_keys(max_keys.clamp(1, MAX_TABLE_KEYS))
        .build()
}

/// A clock for limiters built only to validate a spec.
struct Epoch;

impl Clock for Epoch {
    fn now(&self) -> u64 {
        0
    }
}

/// Whether the core accepts the spec (limits the packed layout cannot hold, periods too long).
///
/// # Errors
///
/// The core's reason.
pub(crate) fn check_spec(spec: &RuleSpec) -> Result<(), cellgate::ConfigError> {
    build(spec, Arc::new(Epoch), 1).map(drop)
}
