//! The fleet limiter: a local pool of pre-debited units, kept topped up by a background task.
//!
//! # Implementation details
//!
//! A check is one compare-and-swap on a local `cellgate` stock (the *pool*) that holds only
//! units already taken from Redis. A background thread (its own single-threaded tokio runtime)
//! watches the pool every tick: it accounts what was spent (`book.rs`), withdraws rate leases
//! whose lifetime ended and leftovers of an idle process, and sends at most one command at a
//! time, retrying the same sequence until it is answered, so a timed-out or duplicated command
//! never grants twice. A denial wakes it early.
//!
//! When Redis does not answer, a rate limit falls back to a local GCRA at its share `R/N` with
//! the burst the server reserved for it at registration, and counts those admissions; they are
//! charged to Redis once it answers again. The fallback ends when the server may have
//! reconciled this holder (its ttl since the last command known to have reached Redis); from
//! then on, and for a stock always, only leased units are sold.

use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, SystemTime};

use cellgate::{Decision, Limiter};

use crate::builder::FleetBuilder;
use crate::client::Kind;
use crate::error::FleetError;
use crate::shared::{Shared, CONNECTED, FALLBACK, PARTITIONED};
use crate::sync::Lock;

/// Whether Redis is answering, as this process sees it.
///
/// # Examples
///
/// ```no_run
/// use cellgate_redis::{Fleet, FleetState};
/// let fleet = Fleet::stock("sale", 1000).connect("redis://127.0.0.1:6379")?;
/// if fleet.state() != FleetState::Connected {
///     eprintln!("redis unreachable: selling only what this process holds");
/// }
/// # Ok::<(), cellgate_redis::FleetError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FleetState {
    /// The last command was answered.
    Connected,
    /// Redis is not answering; a rate limit admits at its local share, charged back later.
    Fallback,
    /// Redis is not answering; only leased units are admitted.
    Partitioned,
    /// Redis lost this stock (a [`KeyedFleet::stock`](crate::KeyedFleet::stock) included)
    /// after it was created (a restart without persistence, a failover to a replica that
    /// lagged): only units still leased are sold, and [`Fleet::last_error`] says
    /// [`FleetError::Forgotten`]. It lasts until the
    /// process builds a new limiter after an operator reset the limit (see the README's
    /// "Production" section). A rate never enters it: Redis's forgotten bucket is re-created
    /// empty, and the limiter goes on.
    Forgotten,
}

impl FleetState {
    /// The state a [`Link`](crate::sync::Link) word holds.
    pub(crate) fn of(link: u8) -> Self {
        match link {
            CONNECTED => FleetState::Connected,
            FALLBACK => FleetState::Fallback,
            PARTITIONED => FleetState::Partitioned,
            _ => FleetState::Forgotten,
        }
    }
}

/// The last failure a fleet limiter met, and when (see [`Fleet::last_error`]).
///
/// # Examples
///
/// ```no_run
/// use cellgate_redis::Fleet;
/// let fleet = Fleet::stock("sale", 1000).connect("redis://127.0.0.1:6379")?;
/// if let Some(e) = fleet.last_error() {
///     eprintln!("{:?} ago: {}", e.at.elapsed(), e.error);
/// }
/// # Ok::<(), cellgate_redis::FleetError>(())
/// ```
#[derive(Debug, Clone)]
pub struct LastError {
    /// When it happened.
    pub at: SystemTime,
    /// What happened; its `Display` says what to fix when the cause is known.
    pub error: FleetError,
}

/// Counters of one fleet limiter (see [`Fleet::stats`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FleetStats {
    /// Leased units held in the local pool, not yet admitted.
    pub leased: u64,
    /// Grant commands answered.
    pub lease_requests: u64,
    /// Commands that failed or timed out.
    pub backend_errors: u64,
    /// Units admitted during outages and charged to Redis afterwards.
    pub charged_back: u64,
    /// Redis commands sent (retries included).
    pub commands: u64,
    /// Live processes sharing the limit, as the server last said.
    pub live: u64,
}

/// One limit shared by every process that connects with the same name to the same Redis,
/// admitted locally from pre-debited leases.
///
/// - [`Fleet::stock`]: a global stock; across the fleet Σ sold ≤ stock, through process kills,
///   timeouts and Redis restarts; a Redis that lost the stock is detected and nothing more is
///   sold from it ([`FleetState::Forgotten`]).
/// - [`Fleet::rate`]: a global GCRA rate `R` with burst `B`; across the fleet Σ admitted over
///   `[0, T]` ≤ `R·T + B`.
///
/// A check never waits on Redis: it is one compare-and-swap on local leased units. See the
/// crate docs for the guarantees and their conditions.
///
/// # Examples
///
/// ```no_run
/// use cellgate_redis::Fleet;
///
/// let tickets = Fleet::stock("concert", 10_000).connect("redis://127.0.0.1:6379")?;
/// if tickets.check().is_allowed() {
///     // sell one
/// }
/// tickets.shutdown(); // gives unsold leased units back
/// # Ok::<(), cellgate_redis::FleetError>(())
/// ```
pub struct Fleet {
    pub(crate) shared: Arc<Shared>,
    pub(crate) thread: Lock<Option<JoinHandle<()>>>,
    pub(crate) descriptor: Limiter,
    pub(crate) name: String,
}

impl std::fmt::Debug for Fleet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Fleet")
            .field("name", &self.name)
            .field("state", &self.state())
            .finish_non_exhaustive()
    }
}

impl Fleet {
    /// A global stock of `units` named `name` (the first process to use the name sets it).
    pub fn stock(name: &str, units: u64) -> FleetBuilder {
        let kind = if units >= 1 << 52 {
            Err(format!("stock {units} does not fit 2^52 (Lua numbers)"))
        } else {
            Ok(Kind::Stock { units })
        };
        FleetBuilder::new(name, kind)
    }

    /// A global rate of `count` units per `period` named `name`, burst `count` unless
    /// [`burst`](FleetBuilder::burst) says otherwise. The server keeps time in whole
    /// microseconds and rounds the interval `period / count` up, so the fleet is never faster
    /// than asked (at most one unit per microsecond).
    pub fn rate(name: &str, count: u32, period: Duration) -> FleetBuilder {
        let period_us = u64::try_from(period.as_micros()).unwrap_or(u64::MAX);
        let kind = if count == 0 || period_us == 0 {
            Err("a rate needs a positive count and a period of at least 1 µs".to_owned())
        } else {
            Ok(Kind::Rate {
                interval_us: period_us.div_ceil(u64::from(count)),
                burst: u64::from(count),
            })
        };
        let mut b = FleetBuilder::new(name, kind);
        b.kind = b.kind.and_then(|k| match k {
            Kind::Rate { interval_us, .. } if interval_us >= 1 << 40 => {
                Err("the interval must be below 2^40 µs".to_owned())
            }
            k => Ok(k),
        });
        b
    }

    /// Checks one unit.
    #[inline]
    pub fn check(&self) -> Decision {
        self.check_n(1)
    }

    /// Checks `n` units against the leased pool (and, during an outage, the local share).
    /// Never waits on Redis.
    #[inline]
    pub fn check_n(&self, n: u32) -> Decision {
        let d = self.shared.pool.check_n(n);
        if d.is_allowed() {
            return d;
        }
        self.shared.denied(n, d)
    }

    /// Whether Redis is answering.
    pub fn state(&self) -> FleetState {
        FleetState::of(self.shared.state())
    }

    /// The last failure this limiter met talking to Redis, and when (`None`: none yet). It
    /// stays after Redis answers again: compare [`state`](Self::state).
    pub fn last_error(&self) -> Option<LastError> {
        self.shared.last_error.lock().clone()
    }

    /// The counters of this limiter.
    pub fn stats(&self) -> FleetStats {
        let s = &self.shared;
        FleetStats {
            leased: u64::from(s.pool.peek_n(0).remaining()),
            lease_requests: s.lease_requests.get(),
            backend_errors: s.backend_errors.get(),
            charged_back: s.charged_back.get(),
            commands: s.commands.get(),
            live: s.live.get(),
        }
    }

    /// The limit's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Stops the background task after giving unsold leased units back and charging any
    /// outage admissions (bounded by a few command timeouts). Checks afterwards are denied.
    /// Dropping the limiter does the same.
    pub fn shutdown(&self) {
        crate::shared::stop_thread(&self.shared.stop, &self.shared.wake, &self.thread);
    }
}

impl Drop for Fleet {
    fn drop(&mut self) {
        self.shutdown();
    }
}
