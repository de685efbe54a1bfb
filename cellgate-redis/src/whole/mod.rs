//! One limit for the whole fleet ([`Fleet`]): a local pool of pre-debited units, kept topped up
//! by a background task. The facade is here; [`FleetBuilder`](builder::FleetBuilder) configures
//! and starts it (`builder.rs`), `client.rs` speaks the lease protocol, `task.rs` is the
//! background task.
//!
//! # Implementation details
//!
//! A check is one compare-and-swap on a local `cellgate` stock (the *pool*) that holds only
//! units already taken from Redis. A background task (on the runtime every fleet limiter of the
//! process shares) watches the pool every tick: it accounts what was spent (`book.rs`), withdraws rate leases
//! whose lifetime ended and leftovers of an idle process, and sends at most one command at a
//! time, retrying the same sequence until it is answered, so a timed-out or duplicated command
//! never grants twice. A denial wakes it early.
//!
//! When Redis does not answer, a rate limit falls back to a local GCRA at its share `R/N` with
//! the burst the server reserved for it at registration, and counts those admissions; they are
//! charged to Redis once it answers again. The fallback ends when the server may have
//! reconciled this holder (its ttl since the last command known to have reached Redis); from
//! then on, and for a stock always, only leased units are sold.

pub(crate) mod builder;
pub(crate) mod client;
mod task;

use std::sync::Arc;

use cellgate::{Decision, Limiter};

use crate::report::{FleetState, FleetStats, LastError};
use crate::shared::Shared;
use crate::sync::Lock;

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
    /// The end of the lease task.
    pub(crate) task: Lock<Option<crate::shared::Ended>>,
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
    /// outage admissions, retried for at most eight command timeouts (1.6 s by default) while
    /// Redis does not answer: the time a shutdown during an outage takes when there is
    /// something to give back or charge. Checks afterwards are denied. Dropping the limiter
    /// does the same.
    pub fn shutdown(&self) {
        crate::shared::stop_task(&self.shared.stop, &self.shared.wake, &self.task);
    }
}

impl Drop for Fleet {
    fn drop(&mut self) {
        self.shutdown();
    }
}
