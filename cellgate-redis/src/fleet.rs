//! The fleet limiter: a local pool of pre-debited units, kept topped up by a background task.
//!
//! # Implementation details
//!
//! A check is one compare-and-swap on a local `cellgate` stock (the *pool*) that holds only
//! units already taken from Redis. A background thread (its own single-threaded tokio runtime)
//! watches the pool every tick: it accounts what was spent ([`Book`]), withdraws rate leases
//! whose lifetime ended and leftovers of an idle process, and sends at most one command at a
//! time, retrying the same sequence until it is answered, so a timed-out or duplicated command
//! never grants twice. A denial wakes it early.
//!
//! When Redis does not answer, a rate limit falls back to a local GCRA at its share `R/N` with
//! the burst the server reserved for it at registration, and counts those admissions; they are
//! charged to Redis once it answers again. The fallback ends when the server may have
//! reconciled this holder (its ttl since the last command known to have reached Redis); from
//! then on, and for a stock always, only leased units are sold.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use cellgate::{Decision, Limiter, Policy, Quota, RateLimiter, Reservation};
use tokio::sync::Notify;

use crate::book::Book;
use crate::client::{check_name, Kind, LeaseClient, Op, Reply};
use crate::error::FleetError;

/// How often the background task looks at the pool.
const TICK: Duration = Duration::from_millis(2);
/// A process silent this long still heartbeats, so the server counts it live.
const HEARTBEAT: Duration = Duration::from_secs(1);
/// The period over which the spending rate is measured.
const RATE_WINDOW: Duration = Duration::from_millis(100);
/// The largest lease: the pool's decisions report `u32` remaining counts.
const MAX_LEASE: u64 = 1 << 30;

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
}

const CONNECTED: u8 = 0;
const FALLBACK: u8 = 1;
const PARTITIONED: u8 = 2;

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

/// State shared by the checking threads and the background task.
struct Shared {
    /// Leased units: the only thing a check touches while Redis answers.
    pool: Limiter,
    /// The outage share (rate limits with a reserved burst only).
    fallback: Option<Limiter>,
    state: AtomicU8,
    /// A check was denied since the task last looked: refill now, and lease more.
    dry: AtomicBool,
    stop: AtomicBool,
    wake: Notify,
    /// Units admitted by the fallback, to charge to Redis.
    fallback_admitted: AtomicU64,
    lease_requests: AtomicU64,
    backend_errors: AtomicU64,
    charged_back: AtomicU64,
    commands: AtomicU64,
    live: AtomicU64,
}

// Orderings: every atomic here is either a flag read as a hint (`dry`, `state`: a stale read
// only delays a refill or sends one more check to the path the task is leaving, whose
// admissions are counted either way) or a counter whose value alone matters (`Relaxed`
// read-modify-writes never lose an increment). The one hand-over that needs ordering is
// `stop`, which the task reads after the owner sets it: Release/Acquire, though the join that
// follows would order it anyway. The pool and the fallback are cellgate limiters, whose own
// compare-and-swap loops make admissions exact.

impl Shared {
    fn state(&self) -> u8 {
        self.state.load(Ordering::Relaxed)
    }

    #[cold]
    fn denied(&self, n: u32, pool: Decision) -> Decision {
        if self.state() == FALLBACK {
            if let Some(f) = &self.fallback {
                let d = f.check_n(n);
                if d.is_allowed() {
                    self.fallback_admitted
                        .fetch_add(u64::from(n), Ordering::Relaxed);
                    return d;
                }
            }
        }
        // Load first: a pool that stays dry is checked by every thread, and a plain load keeps
        // the flag's cache line shared.
        if !self.dry.load(Ordering::Relaxed) && !self.dry.swap(true, Ordering::Relaxed) {
            self.wake.notify_one();
        }
        pool
    }
}

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
    name: String,
    kind: Result<Kind, String>,
    command_timeout: Duration,
    lease_lifetime: Duration,
    idle: Duration,
    min_lease: u64,
    horizon: Duration,
}

impl FleetBuilder {
    fn new(name: &str, kind: Result<Kind, String>) -> Self {
        Self {
            name: name.to_owned(),
            kind,
            command_timeout: Duration::from_millis(200),
            lease_lifetime: Duration::from_secs(1),
            idle: Duration::from_secs(1),
            min_lease: 128,
            horizon: Duration::from_millis(200),
        }
    }

    /// The burst of a rate limit (default: its count). Ignored for a stock.
    pub fn burst(mut self, burst: u64) -> Self {
        if let Ok(Kind::Rate { burst: b, .. }) = &mut self.kind {
            *b = burst;
        }
        self
    }

    /// The longest Redis may take to answer one command (default 200 ms); past it the
    /// process counts Redis as unreachable and retries in the background.
    pub fn command_timeout(mut self, timeout: Duration) -> Self {
        self.command_timeout = timeout;
        self
    }

    /// How long a rate lease may be used after it was requested (default 1 s): the `L` of
    /// the window bound `R·(w + L) + burst`. The background task withdraws a lease's unused
    /// units at 3/4 of it, leaving the rest as slack for its thread to be scheduled. Ignored
    /// for a stock (its units never expire).
    pub fn lease_lifetime(mut self, lifetime: Duration) -> Self {
        self.lease_lifetime = lifetime;
        self
    }

    /// After this long without an admission the process gives its leftovers back (default
    /// 1 s).
    pub fn idle_return(mut self, idle: Duration) -> Self {
        self.idle = idle;
        self
    }

    /// The smallest lease asked for (default 128): under contention each Redis command then
    /// carries at least about this many units.
    pub fn min_lease(mut self, units: u64) -> Self {
        self.min_lease = units.max(1);
        self
    }

    /// Connects to the Redis at `url`, registers this process, and starts the background
    /// task. Blocks for at most a few command timeouts.
    ///
    /// # Errors
    ///
    /// [`FleetError::Config`] for an invalid configuration or URL; [`FleetError::Redis`] or
    /// [`FleetError::Timeout`] when Redis cannot be reached or holds this name with another
    /// configuration.
    pub fn connect(self, url: &str) -> Result<Fleet, FleetError> {
        check_name(&self.name)?;
        let kind = self.kind.clone().map_err(FleetError::Config)?;
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
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| FleetError::Config(format!("tokio runtime: {e}")))?;
        let pid = process_id();
        let timeout = self.command_timeout;
        let (client, first) = runtime.block_on(async {
            let mut c = LeaseClient::connect(url, &self.name, kind, &pid, timeout).await?;
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
        let fallback = match kind {
            Kind::Rate { interval_us, .. } if first.fallback_burst > 0 => Some(
                Limiter::gcra(share(interval_us, first.live, first.fallback_burst))
                    .build()
                    .map_err(|e| FleetError::Config(e.to_string()))?,
            ),
            _ => None,
        };
        let shared = Arc::new(Shared {
            pool: Limiter::stock(0)
                .build()
                .map_err(|e| FleetError::Config(e.to_string()))?,
            fallback,
            state: AtomicU8::new(CONNECTED),
            dry: AtomicBool::new(false),
            stop: AtomicBool::new(false),
            wake: Notify::new(),
            fallback_admitted: AtomicU64::new(0),
            lease_requests: AtomicU64::new(0),
            backend_errors: AtomicU64::new(0),
            charged_back: AtomicU64::new(0),
            commands: AtomicU64::new(1),
            live: AtomicU64::new(first.live),
        });
        let now = Instant::now();
        let task = Task {
            client,
            shared: shared.clone(),
            kind,
            name: self.name.clone(),
            book: Book::default(),
            seq: 1,
            pending: None,
            retry_at: now,
            failures: 0,
            last_ok_sent: now,
            last_contact: now,
            live: first.live.max(1),
            fallback_burst: first.fallback_burst,
            to_give: 0,
            charged: 0,
            want: self.min_lease,
            next_grant: now,
            stock_backoff: Duration::ZERO,
            dry_since_grant: false,
            window_start: now,
            window_spent: 0,
            rate: 0.0,
            last_use: now,
            cfg: self.clone(),
        };
        let thread = std::thread::Builder::new()
            .name(format!("cellgate-fleet-{}", self.name))
            .spawn(move || runtime.block_on(task.run()))
            .map_err(|e| FleetError::Config(format!("spawning the lease thread: {e}")))?;
        Ok(Fleet {
            shared,
            thread: Mutex::new(Some(thread)),
            descriptor,
            name: self.name,
        })
    }
}

/// A process id unique across the fleet and across restarts of one process.
fn process_id() -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    // Relaxed: only uniqueness of the returned values matters.
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    format!("{:x}-{:x}-{n}", std::process::id(), nanos)
}

/// The outage share of one of `live` processes: `R / live`, with its reserved burst.
fn share(interval_us: u64, live: u64, burst: u64) -> Quota {
    let interval = Duration::from_micros(interval_us.saturating_mul(live.max(1)));
    Quota::with_interval(interval).with_burst(u32::try_from(burst).unwrap_or(u32::MAX))
}

/// One limit shared by every process that connects with the same name to the same Redis,
/// admitted locally from pre-debited leases.
///
/// - [`Fleet::stock`]: a global stock; across the fleet Σ sold ≤ stock, through process kills,
///   timeouts and Redis restarts (with persistence).
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
    shared: Arc<Shared>,
    thread: Mutex<Option<JoinHandle<()>>>,
    descriptor: Limiter,
    name: String,
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
        match self.shared.state() {
            CONNECTED => FleetState::Connected,
            FALLBACK => FleetState::Fallback,
            _ => FleetState::Partitioned,
        }
    }

    /// The counters of this limiter.
    pub fn stats(&self) -> FleetStats {
        let s = &self.shared;
        FleetStats {
            leased: u64::from(s.pool.peek_n(0).remaining()),
            lease_requests: s.lease_requests.load(Ordering::Relaxed),
            backend_errors: s.backend_errors.load(Ordering::Relaxed),
            charged_back: s.charged_back.load(Ordering::Relaxed),
            commands: s.commands.load(Ordering::Relaxed),
            live: s.live.load(Ordering::Relaxed),
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
        self.shared.stop.store(true, Ordering::Release);
        self.shared.wake.notify_one();
        let handle = self
            .thread
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take();
        if let Some(h) = handle {
            let _ = h.join();
        }
    }
}

impl Drop for Fleet {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// The fleet limiter as a `cellgate` limiter (for the HTTP layer and `check_all`): `charge`
/// and `cancel` act on the leased pool; `reserve` cannot schedule ahead and decides as
/// `charge`; `policy` is the global limit's.
impl RateLimiter for Fleet {
    fn check_n(&self, _key: &(), n: u32) -> Decision {
        Fleet::check_n(self, n)
    }

    fn peek_n(&self, _key: &(), n: u32) -> Decision {
        self.shared.pool.peek_n(n)
    }

    fn charge(&self, _key: &(), n: u32) -> Reservation {
        RateLimiter::charge(&self.shared.pool, &(), n)
    }

    fn cancel(&self, _key: &(), reservation: Reservation) -> bool {
        RateLimiter::cancel(&self.shared.pool, &(), reservation)
    }

    fn reserve(&self, key: &(), n: u32, _max_wait: Duration) -> Reservation {
        RateLimiter::charge(self, key, n)
    }

    fn policy(&self) -> Policy {
        self.descriptor.policy()
    }
}

/// A command being sent, retried as the same sequence until answered.
#[derive(Debug, Clone, Copy)]
struct Pending {
    op: Op,
    seq: u64,
    n: u64,
    first_sent: Option<Instant>,
}

/// The background side: owns the Redis client and the ledger.
struct Task {
    client: LeaseClient,
    shared: Arc<Shared>,
    kind: Kind,
    name: String,
    book: Book,
    seq: u64,
    pending: Option<Pending>,
    retry_at: Instant,
    failures: u32,
    /// When the last answered command was first sent: the server saw this holder no earlier.
    last_ok_sent: Instant,
    last_contact: Instant,
    live: u64,
    fallback_burst: u64,
    /// Units withdrawn from the pool, to give back.
    to_give: u64,
    /// Fallback admissions charged (or being charged) so far.
    charged: u64,
    want: u64,
    next_grant: Instant,
    stock_backoff: Duration,
    dry_since_grant: bool,
    window_start: Instant,
    window_spent: u64,
    /// Spending rate, units per second.
    rate: f64,
    last_use: Instant,
    cfg: FleetBuilder,
}

impl Task {
    async fn run(mut self) {
        while !self.shared.stop.load(Ordering::Acquire) {
            tokio::select! {
                () = self.shared.wake.notified() => {}
                () = tokio::time::sleep(TICK) => {}
            }
            if self.shared.stop.load(Ordering::Acquire) {
                break;
            }
            self.step().await;
        }
        self.finish().await;
    }

    fn pool_remaining(&self) -> u64 {
        u64::from(self.shared.pool.peek_n(0).remaining())
    }

    /// Withdraws from the pool the units `target` names (given the ledger after a fresh
    /// look), so no check can admit them; returns how many.
    fn withdraw(&mut self, target: impl Fn(&Book) -> u64) -> u64 {
        loop {
            let remaining = self.pool_remaining();
            let spent = self.book.observe(remaining, self.returned_deadline());
            self.note_spent(spent);
            let x = target(&self.book).min(u64::from(u32::MAX));
            if x == 0 {
                return 0;
            }
            // Units are interchangeable: if checks took some meanwhile, look again.
            if self.shared.pool.check_n(x as u32).is_allowed() {
                self.book.take_front(x);
                return x;
            }
        }
    }

    /// Units cancelled back into the pool: a rate limit gives them back at once (their grant's
    /// lifetime is unknown); a stock keeps them.
    fn returned_deadline(&self) -> Option<Instant> {
        match self.kind {
            Kind::Rate { .. } => Some(Instant::now()),
            Kind::Stock { .. } => None,
        }
    }

    fn note_spent(&mut self, spent: u64) {
        if spent > 0 {
            self.window_spent += spent;
            self.last_use = Instant::now();
        }
    }

    async fn step(&mut self) {
        let now = Instant::now();
        let spent = self
            .book
            .observe(self.pool_remaining(), self.returned_deadline());
        self.note_spent(spent);
        let elapsed = now.duration_since(self.window_start);
        if elapsed >= RATE_WINDOW {
            let r = self.window_spent as f64 / elapsed.as_secs_f64();
            self.rate = 0.5 * self.rate + 0.5 * r;
            self.window_start = now;
            self.window_spent = 0;
        }
        if self.shared.dry.swap(false, Ordering::Relaxed) {
            self.dry_since_grant = true;
        }
        if matches!(self.kind, Kind::Rate { .. }) {
            self.to_give += self.withdraw(|b| b.expired(now));
        }
        if self.book.level() > 0 && now.duration_since(self.last_use) >= self.cfg.idle {
            self.to_give += self.withdraw(Book::level);
        }
        if self.shared.state() == FALLBACK && now >= self.fallback_deadline() {
            self.shared.state.store(PARTITIONED, Ordering::Relaxed);
        }
        if self.pending.is_none() {
            self.pending = self.next_command(now);
        }
        if let Some(p) = self.pending {
            if now >= self.retry_at {
                self.send(p).await;
            }
        }
        self.publish();
    }

    /// The fallback must end before the server may reconcile this holder.
    fn fallback_deadline(&self) -> Instant {
        let ttl = self.client.holder_ttl();
        self.last_ok_sent + ttl - ttl / 5
    }

    fn next_command(&mut self, now: Instant) -> Option<Pending> {
        let op_n = if self.to_give > 0 {
            Some((Op::Give, std::mem::take(&mut self.to_give)))
        } else if let Some(debt) = self
            .shared
            .fallback_admitted
            .load(Ordering::Relaxed)
            .checked_sub(self.charged)
            .filter(|d| *d > 0)
        {
            Some((Op::Charge, debt))
        } else {
            let want = self.lease_size();
            let low = self.book.level() <= want / 2 || self.dry_since_grant;
            if low && now >= self.next_grant && self.book.level() + want <= u64::from(u32::MAX) {
                self.want = want;
                Some((Op::Grant, want))
            } else if now.duration_since(self.last_contact) >= HEARTBEAT {
                Some((Op::Grant, 0))
            } else {
                None
            }
        };
        op_n.map(|(op, n)| {
            self.seq += 1;
            Pending {
                op,
                seq: self.seq,
                n,
                first_sent: None,
            }
        })
    }

    /// The next lease: about `horizon` of the observed spending, at least `min_lease`,
    /// doubled while the pool keeps running dry.
    fn lease_size(&self) -> u64 {
        let mut want = (self.rate * self.cfg.horizon.as_secs_f64()) as u64;
        want = want.max(self.cfg.min_lease);
        if self.dry_since_grant {
            want = want.max(self.want.saturating_mul(2));
        }
        let cap = match self.kind {
            Kind::Rate { burst, .. } => burst.max(1),
            Kind::Stock { .. } => MAX_LEASE,
        };
        want.min(cap).min(MAX_LEASE)
    }

    async fn send(&mut self, mut p: Pending) {
        let sent = Instant::now();
        let first_sent = *p.first_sent.get_or_insert(sent);
        self.pending = Some(p);
        self.shared.commands.fetch_add(1, Ordering::Relaxed);
        match self.client.call(p.op, p.seq, p.n).await {
            Ok(reply) => {
                self.pending = None;
                self.failures = 0;
                self.last_ok_sent = first_sent;
                self.last_contact = Instant::now();
                self.shared.state.store(CONNECTED, Ordering::Relaxed);
                self.apply(p, first_sent, reply);
            }
            Err(_) => {
                self.shared.backend_errors.fetch_add(1, Ordering::Relaxed);
                self.failures = self.failures.saturating_add(1);
                let backoff = Duration::from_millis(10 << self.failures.min(5));
                self.retry_at = Instant::now() + backoff;
                let can_fall_back =
                    self.shared.fallback.is_some() && Instant::now() < self.fallback_deadline();
                let state = if can_fall_back { FALLBACK } else { PARTITIONED };
                self.shared.state.store(state, Ordering::Relaxed);
            }
        }
    }

    fn apply(&mut self, p: Pending, first_sent: Instant, r: Reply) {
        if r.live != self.live || r.fallback_burst != self.fallback_burst {
            self.live = r.live.max(1);
            self.fallback_burst = r.fallback_burst;
            self.shared.live.store(self.live, Ordering::Relaxed);
            if let (Some(f), Kind::Rate { interval_us, .. }) = (&self.shared.fallback, self.kind) {
                if r.fallback_burst > 0 {
                    let _ = f.set_quota(share(interval_us, self.live, r.fallback_burst));
                }
            }
        }
        match p.op {
            Op::Grant => {
                if p.n == 0 {
                    return;
                }
                self.shared.lease_requests.fetch_add(1, Ordering::Relaxed);
                let got = if r.stale { 0 } else { r.value };
                if got > 0 {
                    let deadline = match self.kind {
                        // Withdrawn at 3/4 of the lifetime: the rest is slack for this
                        // thread to be scheduled, so no unit is admitted past the lifetime.
                        Kind::Rate { .. } => Some(first_sent + self.cfg.lease_lifetime * 3 / 4),
                        Kind::Stock { .. } => None,
                    };
                    // Cannot fail on a stock limiter; the units are this process's either way.
                    let _ = self.shared.pool.restock(got);
                    self.book.add(deadline, got);
                }
                self.dry_since_grant = false;
                let now = Instant::now();
                self.next_grant = match self.kind {
                    Kind::Rate { interval_us, .. } if got < p.n => {
                        // The fleet is short: wait until the fleet accrues a minimum lease for
                        // every live holder, so each command carries a worthwhile grant.
                        // But come back before the leasable burst could fill up even if
                        // nobody else asks, or the fleet would lose capacity.
                        let us = self
                            .cfg
                            .min_lease
                            .saturating_mul(interval_us)
                            .saturating_mul(self.live)
                            .min(r.leasable_burst.saturating_mul(interval_us) * 3 / 4);
                        now + Duration::from_micros(us).min(self.cfg.lease_lifetime / 2)
                    }
                    Kind::Stock { .. } if got == 0 => {
                        self.stock_backoff = (self.stock_backoff * 2)
                            .clamp(Duration::from_millis(10), Duration::from_millis(500));
                        now + self.stock_backoff
                    }
                    _ => {
                        self.stock_backoff = Duration::ZERO;
                        now
                    }
                };
            }
            Op::Give => {}
            Op::Charge => {
                if r.stale {
                    // Not executed: the debt stays and is charged by a later command.
                    return;
                }
                self.charged += p.n;
                self.shared.charged_back.fetch_add(p.n, Ordering::Relaxed);
            }
        }
    }

    fn publish(&self) {
        #[cfg(feature = "metrics")]
        crate::metrics::publish(&self.name, &self.shared_stats(), self.shared.state());
        #[cfg(not(feature = "metrics"))]
        let _ = &self.name;
    }

    #[cfg(feature = "metrics")]
    fn shared_stats(&self) -> FleetStats {
        let s = &self.shared;
        FleetStats {
            leased: self.book.level(),
            lease_requests: s.lease_requests.load(Ordering::Relaxed),
            backend_errors: s.backend_errors.load(Ordering::Relaxed),
            charged_back: s.charged_back.load(Ordering::Relaxed),
            commands: s.commands.load(Ordering::Relaxed),
            live: s.live.load(Ordering::Relaxed),
        }
    }

    /// Shutdown: finish the command in flight, withdraw the pool, give it back, charge the
    /// outage debt, each retried within a bounded time.
    async fn finish(&mut self) {
        let give_up = Instant::now() + self.cfg.command_timeout * 8;
        // No more outage admissions: what was admitted so far is charged below.
        self.shared.state.store(PARTITIONED, Ordering::Relaxed);
        loop {
            if self.pending.is_none() {
                self.to_give += self.withdraw(Book::level);
                self.pending = self.next_command_final();
            }
            let Some(p) = self.pending else { break };
            if Instant::now() >= give_up {
                break;
            }
            self.send(p).await;
            if self.pending.is_some() {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
        self.publish();
    }

    fn next_command_final(&mut self) -> Option<Pending> {
        let debt = self
            .shared
            .fallback_admitted
            .load(Ordering::Relaxed)
            .saturating_sub(self.charged);
        let (op, n) = if self.to_give > 0 {
            (Op::Give, std::mem::take(&mut self.to_give))
        } else if debt > 0 {
            (Op::Charge, debt)
        } else {
            return None;
        };
        self.seq += 1;
        Some(Pending {
            op,
            seq: self.seq,
            n,
            first_sent: None,
        })
    }
}
