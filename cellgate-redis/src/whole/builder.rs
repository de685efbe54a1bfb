//! Configuring a fleet limiter and connecting it.

use std::sync::Arc;
use std::time::{Duration, Instant};

use cellgate::{Limiter, Quota, StripedLimiter};
use tokio::sync::Notify;

use super::client::{Kind, LeaseClient, Op, Reply};
use super::task::{Settings, Task};
use super::Fleet;
use crate::book::Book;
use crate::conn::check_name;
use crate::error::FleetError;
use crate::replica::Replication;
use crate::shared::{Shared, CONNECTED, FALLBACK, PARTITIONED};
use crate::sync::{Counter, Dry, Link, Lock, Stop};

/// Configures a [`Fleet`]; see [`Fleet::stock`] and [`Fleet::rate`].
///
/// # Examples
///
/// ```no_run
/// use std::time::Duration;
/// use cellgate_redis::Fleet;
///
/// let api = Fleet::rate("api", 10_000, Duration::from_secs(1))
///     .burst(2_000)
///     .command_timeout(Duration::from_millis(100))
///     .connect("redis://127.0.0.1:6379")?;
/// # Ok::<(), cellgate_redis::FleetError>(())
/// ```
#[derive(Debug, Clone)]
#[must_use]
pub struct FleetBuilder {
    pub(crate) name: String,
    pub(crate) kind: Result<Kind, String>,
    pub(crate) command_timeout: Duration,
    pub(crate) lease_lifetime: Duration,
    pub(crate) idle: Duration,
    pub(crate) min_lease: u64,
    pub(crate) short_spacing: Duration,
    pub(crate) max_lease: Option<u64>,
    pub(crate) horizon: Duration,
    pub(crate) outage_processes: u64,
    pub(crate) replication: Replication,
    pub(crate) replica_wait: Option<Duration>,
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
}

impl FleetBuilder {
    pub(crate) fn new(name: &str, kind: Result<Kind, String>) -> Self {
        Self {
            name: name.to_owned(),
            kind,
            command_timeout: Duration::from_millis(200),
            lease_lifetime: Duration::from_secs(1),
            idle: Duration::from_secs(1),
            min_lease: super::client::DEFAULT_MIN_LEASE,
            short_spacing: super::client::DEFAULT_SHORT_SPACING,
            max_lease: None,
            horizon: Duration::from_millis(200),
            outage_processes: 1,
            replication: Replication::Auto,
            replica_wait: None,
        }
    }

    /// The burst of a rate limit (default: its count). Ignored for a stock.
    pub fn burst(mut self, burst: u64) -> Self {
        if let Ok(Kind::Rate { burst: b, .. }) = &mut self.kind {
            *b = burst;
        }
        self
    }

    crate::setters::setters! {
        /// The longest Redis may take to answer one command (default 200 ms); past it the
        /// process counts Redis as unreachable and retries in the background.
        command_timeout(timeout: Duration) => command_timeout = timeout;

        /// Whether a lease's units are sold only once a replica acknowledged its debit
        /// (Redis `WAIT`), so that a failover to a replica that had not received it sells
        /// nothing twice. Default [`Replication::Auto`]: whenever the master of the limit's
        /// keys has replicas (one node or a cluster). A lease no replica acknowledged within
        /// [`replica_wait`](Self::replica_wait) is not sold (an undersell of one lease; the
        /// state is `Partitioned` with [`FleetError::NotReplicated`] until a replica
        /// acknowledges again).
        ///
        /// ```no_run
        /// use cellgate_redis::{Fleet, Replication};
        /// let sale = Fleet::stock("sale", 1_000)
        ///     .replication(Replication::Off) // sell without waiting for replicas
        ///     .connect("redis://127.0.0.1:6379")?;
        /// # Ok::<(), cellgate_redis::FleetError>(())
        /// ```
        replication(policy: Replication) => replication = policy;

        /// The longest a lease request waits for a replica's acknowledgement (default: 100 ms,
        /// or half the command timeout when that is less; it must be less than the command
        /// timeout). The background task waits, never a check.
        replica_wait(wait: Duration) => replica_wait = Some(wait);

        /// How long a rate lease may be used after it was requested (default 1 s): the `L` of
        /// the window bound `R·(w + L) + burst`. The background task withdraws a lease's unused
        /// units at 3/4 of it, leaving the rest as slack for its thread to be scheduled. Ignored
        /// for a stock (its units never expire).
        lease_lifetime(lifetime: Duration) => lease_lifetime = lifetime;

        /// After this long without an admission the process gives its leftovers back (default
        /// 1 s).
        idle_return(idle: Duration) => idle = idle;

        /// The smallest lease asked for (default 128): under contention each Redis command then
        /// carries at least about this many units.
        min_lease(units: u64) => min_lease = units.max(1);

        /// The least time between two lease requests of a rate's fleet while it is short (default
        /// 100 ms): when the processes together want more than the rate, the server spaces their
        /// requests this far apart (or [`min_lease`](Self::min_lease) units of the rate, when
        /// that is longer), whoever asks, so each request carries about this long of the rate and
        /// the fleet's commands per second stay bounded however large the demand. A shorter
        /// spacing spreads a short fleet's units over more, smaller grants (more commands); it is
        /// capped at a quarter of the time the leasable burst takes to fill, so a holder scheduled
        /// late loses no capacity. Ignored for a stock.
        ///
        /// ```
        /// use std::time::Duration;
        /// use cellgate_redis::Fleet;
        /// // At most 50 short requests a second across the fleet, each about 200 units.
        /// let api = Fleet::rate("api", 10_000, Duration::from_secs(1))
        ///     .short_spacing(Duration::from_millis(20));
        /// ```
        short_spacing(spacing: Duration) => short_spacing = spacing;

        /// The largest stock lease a process holds at once (default: 1/1000 of the stock, at
        /// least [`min_lease`](Self::min_lease)); ignored for a rate, whose leases are capped by
        /// its burst. A process killed with `kill -9` takes its outstanding lease with it, so this
        /// bounds the undersell of a crash: **a crashed holder costs at most `1.5 × max_lease`
        /// units** (what is left of one lease plus the next one it was asking for), `2 ×
        /// max_lease` if it checks more than `max_lease / 2` units at once. Smaller
        /// leases cost more Redis commands: one per `max_lease / 2` units sold at most.
        ///
        /// ```
        /// use cellgate_redis::Fleet;
        /// // A crash loses at most 150 of 100,000 tickets.
        /// let tickets = Fleet::stock("concert", 100_000).max_lease(100);
        /// ```
        max_lease(units: u64) => max_lease = Some(units.max(1));

        /// How many processes a rate limit assumes share it when it [`start`](Self::start)s
        /// while Redis is down (default 1): until Redis first answers it admits `R / processes`,
        /// with a burst of `B / 16`, and charges those admissions to Redis when it answers. Once
        /// registered, the outage share is `R / live` as the server counts the live processes.
        outage_processes(processes: u64) => outage_processes = processes.max(1);
    }

    /// Connects to the Redis at `url` (or, with comma-separated URLs, to the Redis Cluster
    /// they are seed nodes of), registers this process, and starts the background task.
    /// Blocks for at most a few command timeouts.
    ///
    /// # Errors
    ///
    /// [`FleetError::Config`] for an invalid configuration or URL; [`FleetError::Redis`] or
    /// [`FleetError::Timeout`] when Redis cannot be reached or holds this name with another
    /// configuration (the message says what to fix when the cause is known);
    /// [`FleetError::Forgotten`] when Redis lost this stock and no operator reset it yet.
    pub fn connect(self, url: &str) -> Result<Fleet, FleetError> {
        let (kind, descriptor) = self.validate()?;
        let runtime = runtime()?;
        let pid = crate::conn::process_id();
        let timeout = self.command_timeout;
        let (client, first) = runtime.block_on(async {
            let mut c = LeaseClient::connect(url, &self.name, kind, &pid, timeout).await?;
            c.set_min_lease(self.min_lease);
            c.set_short_spacing(self.short_spacing);
            c.set_replication(self.replication, self.wait());
            // Registration: a few tries, the same sequence each time (idempotent).
            let mut tries = 0;
            let first = loop {
                match c.call(Op::Grant, 1, 0).await {
                    Ok(r) => break r,
                    Err(FleetError::Timeout) if tries < 4 => tries += 1,
                    Err(FleetError::Redis(e)) if tries < 4 && e.is_timeout() => tries += 1,
                    Err(e) => return Err(e),
                }
            };
            Ok::<_, FleetError>((c, first))
        })?;
        self.launch(&runtime, client, kind, descriptor, Some(first))
    }

    /// Starts without waiting for Redis: returns at once (errors only for an invalid
    /// configuration or URL), and the background task connects and registers when Redis
    /// answers. Until then the limiter is in its outage fallback: a rate admits at its share
    /// ([`outage_processes`](Self::outage_processes)) and charges that to Redis when it
    /// answers; a stock sells nothing. So a replica can boot while Redis is down.
    /// [`Fleet::state`] and [`Fleet::last_error`] show how far it got.
    ///
    /// # Errors
    ///
    /// [`FleetError::Config`] for an invalid configuration or URL.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use cellgate_redis::{Fleet, FleetState};
    ///
    /// // Nothing listens on port 1: the limiter starts anyway, on its outage share.
    /// let api = Fleet::rate("api", 1_000, Duration::from_secs(1)).start("redis://127.0.0.1:1")?;
    /// assert_eq!(api.state(), FleetState::Fallback);
    /// assert!(api.check().is_allowed());
    /// # Ok::<(), cellgate_redis::FleetError>(())
    /// ```
    pub fn start(self, url: &str) -> Result<Fleet, FleetError> {
        let (kind, descriptor) = self.validate()?;
        let runtime = runtime()?;
        let pid = crate::conn::process_id();
        let mut client = runtime.block_on(LeaseClient::open(
            url,
            &self.name,
            kind,
            &pid,
            self.command_timeout,
            true,
        ))?;
        client.set_min_lease(self.min_lease);
        client.set_short_spacing(self.short_spacing);
        client.set_replication(self.replication, self.wait());
        self.launch(&runtime, client, kind, descriptor, None)
    }

    /// The replica wait: as set, or by default 100 ms within half the command timeout.
    fn wait(&self) -> Duration {
        crate::replica::wait_or_default(self.replica_wait, self.command_timeout)
    }

    /// The limit's kind, checked, and the policy it describes.
    fn validate(&self) -> Result<(Kind, Limiter), FleetError> {
        check_name(&self.name)?;
        let kind = self.kind.clone().map_err(FleetError::Config)?;
        if self.replication != Replication::Off && self.wait() >= self.command_timeout {
            return Err(FleetError::Config(format!(
                "replica_wait {:?} must be shorter than command_timeout {:?}",
                self.wait(),
                self.command_timeout
            )));
        }
        if let Kind::Rate { interval_us, burst } = kind {
            // The server's GCRA room is burst·interval µs past now: all of it below 2^52 so
            // Lua's doubles stay exact.
            if burst == 0 || burst.saturating_mul(interval_us) >= 1 << 50 {
                return Err(FleetError::Config(format!(
                    "burst {burst} must be positive and burst · interval ({interval_us} µs) below 2^50 µs"
                )));
            }
        }
        let descriptor = match kind {
            Kind::Stock { units } => {
                Limiter::stock(u32::try_from(units).unwrap_or(u32::MAX)).build()
            }
            Kind::Rate { interval_us, burst } => Limiter::gcra(
                Quota::with_interval(Duration::from_micros(interval_us))
                    .with_burst(u32::try_from(burst).unwrap_or(u32::MAX)),
            )
            .build(),
        }
        .map_err(|e| FleetError::Config(e.to_string()))?;
        Ok((kind, descriptor))
    }

    /// Starts the background task; `first` is the registration's reply (`None`: not yet
    /// registered, starting in the outage fallback).
    fn launch(
        self,
        runtime: &tokio::runtime::Handle,
        client: LeaseClient,
        kind: Kind,
        descriptor: Limiter,
        first: Option<Reply>,
    ) -> Result<Fleet, FleetError> {
        let (live, fallback_burst) = match (first, kind) {
            (Some(r), _) => (r.live.max(1), r.fallback_burst),
            // Before registration: the share it was told to assume, with the largest burst
            // the server would reserve for it.
            (None, Kind::Rate { burst, .. }) => (self.outage_processes, (burst / 16).max(1)),
            (None, Kind::Stock { .. }) => (self.outage_processes, 0),
        };
        let fallback = match kind {
            Kind::Rate { interval_us, .. } if fallback_burst > 0 => Some(
                Limiter::gcra(super::task::share(interval_us, live, fallback_burst))
                    .build()
                    .map_err(|e| FleetError::Config(e.to_string()))?,
            ),
            _ => None,
        };
        let state = match (first, &fallback) {
            (Some(_), _) => CONNECTED,
            (None, Some(_)) => FALLBACK,
            (None, None) => PARTITIONED,
        };
        let shared = Arc::new(Shared {
            pool: StripedLimiter::stock(0)
                .build()
                .map_err(|e| FleetError::Config(e.to_string()))?,
            fallback,
            state: Link::new(state),
            dry: Dry::new(),
            stop: Stop::new(),
            wake: Notify::new(),
            fallback_admitted: Counter::new(0),
            lease_requests: Counter::new(0),
            backend_errors: Counter::new(0),
            charged_back: Counter::new(0),
            commands: Counter::new(u64::from(first.is_some())),
            live: Counter::new(live),
            last_error: Lock::new(None),
        });
        let now = Instant::now();
        let task = Task {
            client,
            shared: shared.clone(),
            kind,
            name: self.name.clone(),
            book: Book::default(),
            seq: u64::from(first.is_some()),
            pending: None,
            retry_at: now,
            failures: 0,
            registered: first.is_some(),
            last_ok_sent: now,
            last_contact: now,
            live,
            fallback_burst,
            to_give: 0,
            to_strand: 0,
            charged: 0,
            want: self.min_lease,
            next_grant: now,
            stock_backoff: Duration::ZERO,
            dry_since_grant: false,
            need: 0,
            window_start: now,
            window_spent: 0,
            rate: 0.0,
            last_use: now,
            unreplicated: first.is_some_and(|r| r.unreplicated),
            replica_backoff: Duration::ZERO,
            cfg: Settings {
                command_timeout: self.command_timeout,
                horizon: self.horizon,
                idle: self.idle,
                lease_lifetime: self.lease_lifetime,
                min_lease: self.min_lease,
                max_lease: self.max_lease,
            },
        };
        let (done, ended) = std::sync::mpsc::channel::<()>();
        runtime.spawn(async move {
            task.run().await;
            drop(done);
        });
        Ok(Fleet {
            shared,
            task: Lock::new(Some(ended)),
            descriptor,
            name: self.name,
        })
    }
}

/// The background task's runtime: one of those every fleet limiter of the process shares.
fn runtime() -> Result<tokio::runtime::Handle, FleetError> {
    crate::runtime::next()
}
