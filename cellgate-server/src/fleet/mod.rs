//! Fleet mode (`--redis`): every limit shared by the servers that run the same configuration,
//! through cellgate-redis's [`KeyedFleet`] (hot keys leased, cold keys checked in Redis in
//! batches, at most `max_wait` per request, whatever its number of fleet limits).
//!
//! Each limit becomes one keyed fleet limit, named from its domain, its place in the
//! descriptor tree and its definition (see the `name` module): servers with the same configuration
//! share it, and a limit whose definition changes gets a new name, so a reload never reuses
//! Redis state kept for another rate. `stock` is a per-key stock; `gcra` a per-key GCRA of its
//! rate and burst; `fixed_window` and `sliding_window` a per-key GCRA of the same rate with a
//! burst of the window's limit (the README's fleet section states the bound that holds).

mod name;
mod throttle;
mod url;

use std::sync::Arc;
use std::time::{Duration, Instant};

use cellgate::{Decision, Reservation};

use cellgate_redis::{FleetError, FleetState, KeyedFleet};

use crate::config::{Algorithm, RuleSpec};
use crate::sync::Total;

pub(crate) use name::{describe, name};
pub(crate) use throttle::{Cold, Throttled, Throttles};
pub use url::RatelimitRedis;

/// How the servers of a fleet reach Redis.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use cellgate_server::fleet::FleetOptions;
/// let o = FleetOptions::new("redis://127.0.0.1:6379");
/// assert_eq!(o.max_wait, Duration::from_millis(5));
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FleetOptions {
    /// One URL (`redis://`, `redis+unix://`, or `rediss://` with the `tls` feature), or
    /// several comma-separated seed nodes of a Redis Cluster.
    pub redis: String,
    /// The longest a request waits on Redis, for all its limits together, before the outage
    /// rules decide what is left of it.
    pub max_wait: Duration,
    /// Checks per second of one key in this server above which the key is leased (answered
    /// here from units taken from Redis in advance) rather than checked in Redis.
    pub hot_rate: u32,
    /// Put before every limit's name in Redis (ratelimit's `CACHE_KEY_PREFIX`), so that
    /// fleets with different prefixes keep apart in one Redis; no `{` or `}`.
    pub key_prefix: String,
}

impl FleetOptions {
    /// Options for the Redis at `redis`, waiting at most 5 ms per request, leasing keys
    /// checked more than 10 times a second.
    ///
    /// # Examples
    ///
    /// ```
    /// let o = cellgate_server::fleet::FleetOptions::new("redis://10.0.0.7:6379");
    /// assert!(o.redis.starts_with("redis://"));
    /// ```
    pub fn new(redis: &str) -> Self {
        FleetOptions {
            redis: redis.to_owned(),
            max_wait: Duration::from_millis(5),
            hot_rate: 10,
            key_prefix: String::new(),
        }
    }
}

/// Builds the fleet limits of an engine and keeps the errors of those it retired.
pub(crate) struct Backend {
    options: FleetOptions,
    retired: Arc<Total>,
}

impl Backend {
    /// A backend for `options`.
    ///
    /// # Errors
    ///
    /// A URL that is not `redis://`, `redis+unix://` or `rediss://` (or is `rediss://`
    /// without the `tls` feature), or a zero `max_wait`.
    pub(crate) fn new(options: FleetOptions) -> Result<Self, String> {
        for url in options.redis.split(',').map(str::trim) {
            if !(url.starts_with("redis://") || url.starts_with("rediss://") || url::is_unix(url)) {
                return Err(format!(
                    "--redis: {url:?} is not a redis://, rediss:// or redis+unix:// URL (several \
                     URLs are separated by commas)"
                ));
            }
            // Without the feature the limits would start in the background, fail to connect and
            // run in the outage fallback for good: refuse at startup instead.
            if !cfg!(feature = "tls") && url.starts_with("rediss://") {
                return Err(format!(
                    "--redis: {url:?} is rediss:// (TLS), which needs cellgate-server built \
                     with the `tls` feature (cargo build --features tls)"
                ));
            }
        }
        if options.max_wait.is_zero() {
            return Err("--redis-max-wait-ms must be at least 1".to_owned());
        }
        if options.key_prefix.contains(['{', '}']) {
            // Braces would change the Redis Cluster hash tag that keeps a limit's keys together.
            return Err(format!(
                "CACHE_KEY_PREFIX {:?} must not hold {{ or }}",
                options.key_prefix
            ));
        }
        Ok(Backend {
            options,
            retired: Arc::new(Total::default()),
        })
    }

    /// The fleet limit for `spec`, keeping at most `max_hot` keys leased in this process.
    pub(crate) fn build(&self, spec: &RuleSpec, max_hot: usize) -> Result<FleetLim, FleetError> {
        let name = format!("{}{}", self.options.key_prefix, name(spec));
        let rpu = spec.requests_per_unit;
        let builder = match spec.algorithm {
            Algorithm::Stock => KeyedFleet::stock(&name, u64::from(rpu)),
            Algorithm::Gcra { burst } => {
                KeyedFleet::rate(&name, rpu, spec.period).burst(u64::from(burst))
            }
            Algorithm::FixedWindow | Algorithm::SlidingWindow => {
                KeyedFleet::rate(&name, rpu, spec.period).burst(u64::from(rpu))
            }
        };
        let builder = builder
            .max_wait(self.options.max_wait)
            .hot_rate(self.options.hot_rate.max(1))
            .max_hot(max_hot.max(1));
        let fleet = start(builder, &self.options.redis)?;
        tracing::debug!(limit = %describe(spec), fleet = %name, "fleet limit started");
        Ok(FleetLim {
            fleet,
            max_wait: self.options.max_wait,
            retired: Arc::clone(&self.retired),
        })
    }

    /// The state of `limiters` as Redis answers them.
    pub(crate) fn report<'a>(&self, fleets: impl IntoIterator<Item = &'a FleetLim>) -> Report {
        let mut report = Report {
            backend_errors: self.retired.get(),
            ..Report::default()
        };
        for f in fleets {
            report.add(f.fleet.state(), f.fleet.stats().backend_errors);
        }
        report
    }
}

/// Starts `builder`'s limit on `url` without waiting for Redis. The start runs on
/// cellgate-redis's runtime for keyed limits (`block_on`), which cannot be done from a thread
/// that drives a runtime (a request bringing a new override or parameter set, the server's
/// start): there, it is started from a plain thread.
pub(crate) fn start(
    builder: cellgate_redis::KeyedFleetBuilder,
    url: &str,
) -> Result<KeyedFleet, FleetError> {
    if tokio::runtime::Handle::try_current().is_err() {
        return builder.start(url);
    }
    std::thread::scope(|s| {
        s.spawn(|| builder.start(url))
            .join()
            .unwrap_or_else(|_| Err(FleetError::Config("the start panicked".to_owned())))
    })
}

/// Runs `f`, which may wait on Redis (at most a limit's `max_wait`); on a worker of a
/// multi-threaded runtime the worker is marked as blocking first, so that the runtime moves
/// its other tasks to another worker meanwhile.
pub(crate) fn blocking<T>(f: impl FnOnce() -> T) -> T {
    use tokio::runtime::{Handle, RuntimeFlavor};
    let multi =
        Handle::try_current().is_ok_and(|h| h.runtime_flavor() == RuntimeFlavor::MultiThread);
    if multi {
        tokio::task::block_in_place(f)
    } else {
        f()
    }
}

/// One limit shared through Redis.
pub(crate) struct FleetLim {
    fleet: KeyedFleet,
    /// The longest a request waits on Redis, for all its fleet limits together.
    max_wait: Duration,
    retired: Arc<Total>,
}

impl FleetLim {
    /// The keyed fleet limit.
    pub(crate) fn fleet(&self) -> &KeyedFleet {
        &self.fleet
    }

    /// Charges `n` units of `key`, a cold key waiting for Redis at most until `start` plus
    /// the bound: every fleet limit of a request shares the request's `start`, so the request
    /// waits at most one bound in all (a check left no time is decided by the outage rules).
    pub(crate) fn charge_within(&self, key: &str, n: u32, start: Instant) -> Reservation {
        self.fleet.charge_by(key, n, start + self.max_wait)
    }

    /// Charges `n` units of `key` when this process can decide without Redis; `None` (and
    /// nothing charged) when the check would wait.
    pub(crate) fn charge_now(&self, key: &str, n: u32) -> Option<Reservation> {
        self.fleet.charge_now(key, n)
    }

    /// Checks `n` units of `key` in Redis, awaiting the answer at most until `start` plus the
    /// bound (the outage rules decide past it), as `charge_within` would without its lease.
    pub(crate) async fn check_cold(&self, key: &str, n: u32, start: Instant) -> Decision {
        let d = self.fleet.check_n_by(key, n, start + self.max_wait).await;
        self.fleet.decision_of(&d)
    }

    /// Keys leased in this process.
    pub(crate) fn len(&self) -> usize {
        usize::try_from(self.fleet.stats().hot_keys).unwrap_or(usize::MAX)
    }
}

impl Drop for FleetLim {
    /// A limit a reload removed: its leases go back to Redis, and its errors stay counted.
    fn drop(&mut self) {
        self.fleet.shutdown();
        self.retired.add(self.fleet.stats().backend_errors);
    }
}

/// How Redis answers the limits in force.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Report {
    /// Limits per state: connected, fallback, partitioned, forgotten.
    pub(crate) states: [usize; 4],
    /// Failed Redis commands, over every limit this server ran.
    pub(crate) backend_errors: u64,
}

/// The states in [`Report::states`]' order, with their metric label.
pub(crate) const STATES: [(FleetState, &str); 4] = [
    (FleetState::Connected, "connected"),
    (FleetState::Fallback, "fallback"),
    (FleetState::Partitioned, "partitioned"),
    (FleetState::Forgotten, "forgotten"),
];

impl Report {
    fn add(&mut self, state: FleetState, errors: u64) {
        if let Some(i) = STATES.iter().position(|(s, _)| *s == state) {
            self.states[i] += 1;
        }
        self.backend_errors = self.backend_errors.saturating_add(errors);
    }

    /// Limits not connected.
    pub(crate) fn out(&self) -> usize {
        self.states[1..].iter().sum()
    }

    /// Every limit.
    pub(crate) fn limits(&self) -> usize {
        self.states.iter().sum()
    }

    /// The worst state of any limit, as its label (`connected` when there is none).
    pub(crate) fn worst(&self) -> &'static str {
        STATES
            .iter()
            .zip(self.states)
            .rev()
            .find(|(_, n)| *n > 0)
            .map_or("connected", |((_, label), _)| label)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_worst_state_names_the_health() {
        let mut r = Report::default();
        assert_eq!(r.worst(), "connected");
        r.add(FleetState::Connected, 0);
        r.add(FleetState::Fallback, 3);
        assert_eq!((r.worst(), r.out(), r.limits()), ("fallback", 1, 2));
        assert_eq!(r.backend_errors, 3);
    }

    #[test]
    fn only_redis_urls_are_taken() {
        assert!(Backend::new(FleetOptions::new("redis://a:1,redis://b:2")).is_ok());
        let tls = Backend::new(FleetOptions::new("redis://a:1,rediss://b:2"));
        if cfg!(feature = "tls") {
            assert!(tls.is_ok());
        } else {
            assert!(tls.err().is_some_and(|e| e.contains("`tls` feature")));
        }
        assert!(Backend::new(FleetOptions::new("http://a:1")).is_err());
        let mut zero = FleetOptions::new("redis://a:1");
        zero.max_wait = Duration::ZERO;
        assert!(Backend::new(zero).is_err());
    }
}
