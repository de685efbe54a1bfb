//! The background task: accounts the pool, withdraws expired and idle leases, and talks to
//! Redis one command at a time (see the [`Fleet`](crate::Fleet) module docs).

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::client::{Kind, LeaseClient, Op, Reply};
use crate::book::Book;
use crate::error::FleetError;
use crate::shared::{Shared, CONNECTED, FALLBACK, FORGOTTEN, PARTITIONED};

/// How often the background task looks at the pool.
const TICK: Duration = Duration::from_millis(2);
/// A process silent this long still heartbeats, so the server counts it live.
const HEARTBEAT: Duration = Duration::from_secs(1);
/// The period over which the spending rate is measured.
const RATE_WINDOW: Duration = Duration::from_millis(100);
/// The largest lease: the pool's decisions report `u32` remaining counts.
const MAX_LEASE: u64 = 1 << 30;

/// A command being sent, retried as the same sequence until answered.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Pending {
    op: Op,
    seq: u64,
    n: u64,
    first_sent: Option<Instant>,
}

/// The background side: owns the Redis client and the ledger.
pub(crate) struct Task {
    pub(crate) client: LeaseClient,
    pub(crate) shared: Arc<Shared>,
    pub(crate) kind: Kind,
    pub(crate) name: String,
    pub(crate) book: Book,
    pub(crate) seq: u64,
    pub(crate) pending: Option<Pending>,
    pub(crate) retry_at: Instant,
    pub(crate) failures: u32,
    /// Redis has answered this process once (before that, no holder ttl runs on the server,
    /// so the outage fallback has no deadline).
    pub(crate) registered: bool,
    /// When the last answered command was first sent: the server saw this holder no earlier.
    pub(crate) last_ok_sent: Instant,
    pub(crate) last_contact: Instant,
    pub(crate) live: u64,
    pub(crate) fallback_burst: u64,
    /// Units withdrawn from the pool, to give back.
    pub(crate) to_give: u64,
    /// Units of unacknowledged grants to record as stranded (a stock).
    pub(crate) to_strand: u64,
    /// Fallback admissions charged so far.
    pub(crate) charged: u64,
    pub(crate) want: u64,
    pub(crate) next_grant: Instant,
    pub(crate) stock_backoff: Duration,
    pub(crate) dry_since_grant: bool,
    /// The largest check denied since the last grant.
    pub(crate) need: u64,
    pub(crate) window_start: Instant,
    pub(crate) window_spent: u64,
    /// Spending rate, units per second.
    pub(crate) rate: f64,
    pub(crate) last_use: Instant,
    /// The last grant's debit reached no replica in time: only heartbeats (which wait too)
    /// are sent until one is acknowledged, so a sick replica strands at most one lease.
    pub(crate) unreplicated: bool,
    /// The wait before the next such heartbeat.
    pub(crate) replica_backoff: Duration,
    pub(crate) cfg: Settings,
}

/// What the task keeps of its limiter's settings (see [`FleetBuilder`](crate::FleetBuilder)).
#[derive(Debug, Clone)]
pub(crate) struct Settings {
    pub(crate) command_timeout: Duration,
    pub(crate) horizon: Duration,
    pub(crate) idle: Duration,
    pub(crate) lease_lifetime: Duration,
    pub(crate) min_lease: u64,
    pub(crate) max_lease: Option<u64>,
}

impl Settings {
    /// The cap on one stock lease of a stock of `units`: `max_lease`, or by default 1/1000 of
    /// the stock, at least `min_lease`.
    pub(crate) fn stock_lease_cap(&self, units: u64) -> u64 {
        self.max_lease
            .unwrap_or_else(|| (units / 1000).max(self.min_lease))
    }
}

impl Task {
    pub(crate) async fn run(mut self) {
        if self.registered {
            self.warn_if_volatile().await;
        }
        while !self.shared.stop.raised() {
            tokio::select! {
                () = self.shared.wake.notified() => {}
                () = tokio::time::sleep(TICK) => {}
            }
            if self.shared.stop.raised() {
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
        let shared = Arc::clone(&self.shared);
        let deadline = self.returned_deadline();
        let x = crate::local::withdraw(
            || u64::from(shared.pool.peek_n(0).remaining()),
            |remaining| {
                let spent = self.book.observe(remaining, deadline);
                self.note_spent(spent);
                target(&self.book)
            },
            |x| shared.pool.check_n(x).is_allowed(),
        );
        self.book.take_front(x);
        x
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
        if self.shared.state() == FORGOTTEN {
            // Nothing to ask of Redis: the limit's books are gone there. The pool sells what
            // it holds.
            self.publish();
            return;
        }
        let elapsed = now.duration_since(self.window_start);
        if elapsed >= RATE_WINDOW {
            let r = self.window_spent as f64 / elapsed.as_secs_f64();
            self.rate = 0.5 * self.rate + 0.5 * r;
            self.window_start = now;
            self.window_spent = 0;
        }
        // The dry signal is taken only when a grant may be sent: while this process waits for
        // its slot (or a stock's backoff) the signal stays raised, so the refusals meanwhile
        // see it raised and neither write it nor wake this task (one wake-up per refill, not
        // one per refused check).
        let need = if now >= self.next_grant {
            self.shared.dry.take()
        } else {
            0
        };
        if need > 0 {
            self.dry_since_grant = true;
            self.need = self.need.max(u64::from(need));
        }
        if matches!(self.kind, Kind::Rate { .. }) {
            self.to_give += self.withdraw(|b| b.expired(now));
        }
        if self.book.level() > 0 && now.duration_since(self.last_use) >= self.cfg.idle {
            self.to_give += self.withdraw(Book::level);
        }
        if self.shared.state() == FALLBACK && !self.may_fall_back(now) {
            self.transition(PARTITIONED, None);
        }
        // Outage admissions are charged before anything more is granted: a grant still
        // waiting from before the outage would otherwise take room they already used. Dropping
        // it is safe: if it ran and only its reply was lost, its units are never sold.
        if let Some(Pending { op: Op::Grant, .. }) = self.pending
            && self.debt() > 0
        {
            self.pending = None;
        }
        if self.pending.is_none() {
            self.pending = self.next_command(now);
        }
        if let Some(p) = self.pending
            && now >= self.retry_at
        {
            self.send(p).await;
        }
        self.publish();
    }

    /// Units admitted by the fallback and not yet charged.
    fn debt(&self) -> u64 {
        self.shared
            .fallback_admitted
            .get()
            .saturating_sub(self.charged)
    }

    /// Whether the outage fallback may admit at `now`: it must end before the server may
    /// reconcile this holder (never registered: nothing to reconcile), and the server must
    /// have reserved a fallback burst for it.
    fn may_fall_back(&self, now: Instant) -> bool {
        let ttl = self.client.holder_ttl();
        self.shared.fallback.is_some()
            && self.fallback_burst > 0
            && (!self.registered || now < self.last_ok_sent + ttl - ttl / 5)
    }

    fn next_command(&mut self, now: Instant) -> Option<Pending> {
        let op_n = if self.to_give > 0 {
            Some((Op::Give, std::mem::take(&mut self.to_give)))
        } else if self.to_strand > 0 {
            Some((Op::Strand, std::mem::take(&mut self.to_strand)))
        } else if self.debt() > 0 {
            Some((Op::Charge, self.debt()))
        } else if self.unreplicated {
            // A heartbeat, acknowledged by a replica, ends this (see `apply`).
            (now >= self.next_grant).then_some((Op::Grant, 0))
        } else {
            let want = self.lease_size();
            // A denial refills early only when the pool still holds less than the denied
            // check (a check of more than half a lease): a denial of a check the pool could
            // now pass is stale, and a second lease stacked on the first would be lost with
            // the rest in a crash: a holder holds at most 1.5 leases (2 with such checks).
            let level = self.book.level();
            let low = level <= want / 2 || (level < self.need && level < want);
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
    /// doubled while the pool keeps running dry, at most the burst (rate) or `max_lease`
    /// (stock).
    fn lease_size(&self) -> u64 {
        let mut want = (self.rate * self.cfg.horizon.as_secs_f64()) as u64;
        want = want.max(self.cfg.min_lease);
        if self.dry_since_grant {
            want = want.max(self.want.saturating_mul(2));
        }
        let cap = match self.kind {
            Kind::Rate { burst, .. } => burst.max(1),
            // A crashed holder takes its lease with it: the cap bounds that undersell.
            Kind::Stock { units } => self.cfg.stock_lease_cap(units),
        };
        want.min(cap).min(MAX_LEASE)
    }

    async fn send(&mut self, mut p: Pending) {
        let sent = Instant::now();
        let first_sent = *p.first_sent.get_or_insert(sent);
        self.pending = Some(p);
        self.shared.commands.add(1);
        match self.client.call(p.op, p.seq, p.n).await {
            Ok(reply) => {
                self.pending = None;
                self.failures = 0;
                self.last_ok_sent = first_sent;
                self.last_contact = Instant::now();
                if !self.registered {
                    self.registered = true;
                    tracing::info!(limit = %self.name, live = reply.live, "registered with redis");
                    self.warn_if_volatile().await;
                }
                if reply.forgotten {
                    // A rate whose bucket Redis lost: the script set it empty and goes on.
                    tracing::error!(limit = %self.name, "redis lost this rate limit's bucket (a restart without persistence?): it was re-created empty");
                    self.record(FleetError::Forgotten);
                }
                if reply.unreplicated {
                    self.transition(PARTITIONED, Some(FleetError::NotReplicated));
                } else {
                    self.transition(CONNECTED, None);
                }
                self.apply(p, first_sent, reply);
            }
            Err(FleetError::Forgotten) => {
                self.pending = None;
                self.shared.backend_errors.add(1);
                self.transition(FORGOTTEN, Some(FleetError::Forgotten));
            }
            Err(e) => {
                self.shared.backend_errors.add(1);
                self.failures = self.failures.saturating_add(1);
                let backoff = Duration::from_millis(10 << self.failures.min(5));
                self.retry_at = Instant::now() + backoff;
                let state = if self.may_fall_back(Instant::now()) {
                    FALLBACK
                } else {
                    PARTITIONED
                };
                self.transition(state, Some(e));
            }
        }
    }

    /// Logs a warning when Redis keeps no append-only file: a restart would forget the
    /// limit (detected, and a stock then stops selling: see [`FleetState::Forgotten`]).
    ///
    /// [`FleetState::Forgotten`]: crate::FleetState::Forgotten
    async fn warn_if_volatile(&mut self) {
        if self.client.volatile().await == Some(true) {
            tracing::warn!(limit = %self.name, "redis keeps no append-only file: a restart forgets this limit, and a stock then stops selling until an operator resets it (appendonly yes, appendfsync always)");
        }
    }

    /// Records `error` as the last one, with the time.
    fn record(&self, error: FleetError) {
        crate::shared::record(&self.shared.last_error, error);
    }

    /// Moves to `state` (recording `error` when there is one), logging the change.
    fn transition(&self, state: u8, error: Option<FleetError>) {
        crate::shared::transition(
            &self.name,
            &self.shared.state,
            &self.shared.last_error,
            state,
            error,
        );
    }

    fn apply(&mut self, p: Pending, first_sent: Instant, r: Reply) {
        if r.live != self.live || r.fallback_burst != self.fallback_burst {
            self.live = r.live.max(1);
            self.fallback_burst = r.fallback_burst;
            self.shared.live.set(self.live);
            if let (Some(f), Kind::Rate { interval_us, .. }) = (&self.shared.fallback, self.kind)
                && r.fallback_burst > 0
            {
                let _ = f.set_quota(share(interval_us, self.live, r.fallback_burst));
            }
        }
        match p.op {
            Op::Grant if r.unreplicated => {
                // Debited, and maybe lost in a failover: never sold. The units stay debited
                // (an undersell: giving them back could be replayed on a replica that never
                // had the debit, which would then sell them twice); a stock records them as
                // stranded in Redis, where an operator sees them.
                if r.value > 0 && !r.stale {
                    tracing::warn!(limit = %self.name, units = r.value, "no replica acknowledged a lease in time: its units are not sold");
                    self.shared.lease_requests.add(1);
                    if matches!(self.kind, Kind::Stock { .. }) {
                        self.to_strand += r.value;
                    }
                }
                self.unreplicated = true;
                self.replica_backoff = (self.replica_backoff * 2)
                    .clamp(Duration::from_millis(50), Duration::from_secs(1));
                self.next_grant = Instant::now() + self.replica_backoff;
            }
            Op::Grant => {
                if self.unreplicated {
                    // A replica acknowledged again.
                    self.unreplicated = false;
                    self.replica_backoff = Duration::ZERO;
                }
                if p.n == 0 {
                    return;
                }
                self.shared.lease_requests.add(1);
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
                self.need = 0;
                let now = Instant::now();
                self.next_grant = match self.kind {
                    // The fleet is short: come back at the slot the server gave (spaced so
                    // the fleet's short requests each carry about a short spacing of the rate,
                    // whatever the demand), within half a lease lifetime.
                    Kind::Rate { .. } if got < p.n => {
                        now + Duration::from_micros(r.retry_us).min(self.cfg.lease_lifetime / 2)
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
            Op::Give | Op::Strand => {}
            Op::Charge => {
                if r.stale {
                    // Not executed: the debt stays and is charged by a later command.
                    return;
                }
                self.charged += p.n;
                self.shared.charged_back.add(p.n);
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
    fn shared_stats(&self) -> crate::report::FleetStats {
        let s = &self.shared;
        crate::report::FleetStats {
            leased: self.book.level(),
            lease_requests: s.lease_requests.get(),
            backend_errors: s.backend_errors.get(),
            charged_back: s.charged_back.get(),
            commands: s.commands.get(),
            live: s.live.get(),
        }
    }

    /// Shutdown: finish the command in flight, withdraw the pool, give it back, charge the
    /// outage debt, each retried within a bounded time.
    async fn finish(&mut self) {
        let give_up = Instant::now() + self.cfg.command_timeout * 8;
        if self.shared.state() == FORGOTTEN {
            return;
        }
        // No more outage admissions: what was admitted so far is charged below.
        self.shared.state.set(PARTITIONED);
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
            if self.shared.state() == FORGOTTEN {
                break;
            }
            if self.pending.is_some() {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
        self.publish();
    }

    fn next_command_final(&mut self) -> Option<Pending> {
        let debt = self.debt();
        let (op, n) = if self.to_give > 0 {
            (Op::Give, std::mem::take(&mut self.to_give))
        } else if self.to_strand > 0 {
            (Op::Strand, std::mem::take(&mut self.to_strand))
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

/// The outage share of one of `live` processes: `R / live`, with its reserved burst.
pub(crate) fn share(interval_us: u64, live: u64, burst: u64) -> cellgate::Quota {
    let interval = Duration::from_micros(interval_us.saturating_mul(live.max(1)));
    cellgate::Quota::with_interval(interval).with_burst(u32::try_from(burst).unwrap_or(u32::MAX))
}
