//! The batching task of a keyed fleet limiter: coalesces cold checks into script calls, keeps
//! the hot keys' leases, decides by the fallback what Redis does not answer in time, and
//! charges that back.
//!
//! One batch is in flight at a time per shard (one shard on a single Redis node; on a cluster
//! [`CLUSTER_SHARDS`], each its own hash tag, so batches to different masters run at once). A
//! batch that fails is sent again, the same sequence and the same operations, until Redis
//! answers (it is executed at most once, and its answer says what it did): meanwhile the
//! checks it carried are decided by the fallback at their deadline (at once when it failed),
//! and units it granted to a check already decided are given back.
//!
//! [`CLUSTER_SHARDS`]: super::client::CLUSTER_SHARDS

use std::collections::{HashMap, VecDeque};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::Poll;
use std::time::{Duration, Instant};

use cellgate::{KeyedLimiter, Quota};
use tokio::sync::mpsc;

mod holdings;
mod register;
mod reply;

use super::client::{BatchReply, KeyOp, KeyedClient, MAX_BATCH};
use super::{Forget, KeyDecision, KeyedFleetBuilder, Request, Via};
use crate::book::Book;
use crate::error::FleetError;
use crate::shared::{KeyedShared, CONNECTED, FALLBACK, FORGOTTEN, PARTITIONED};

/// How often hot keys are looked at.
const TICK: Duration = Duration::from_millis(5);
/// How often an idle task (no hot key, no key seen, nothing queued, owed or in flight, every
/// shard answering) wakes for its heartbeat: it has nothing to look at until a request wakes
/// it, so a server of many idle limits does not wake each one every `TICK`.
const IDLE_TICK: Duration = Duration::from_millis(50);
/// The window over which a key's rate is measured.
const RATE_WINDOW: Duration = Duration::from_millis(100);
/// A silent process still heartbeats, so the server counts it live.
const HEARTBEAT: Duration = Duration::from_secs(1);
/// The most keys with fallback admissions waiting to be charged (more are denied).
const MAX_DEBTS: usize = 100_000;
/// The most keys the fallback tracks.
const FALLBACK_KEYS: usize = 100_000;

type Call = Pin<Box<dyn Future<Output = Result<BatchReply, FleetError>> + Send>>;

enum Event {
    /// A shard's batch was answered (or failed).
    Reply(usize, Result<BatchReply, FleetError>),
    Request(Option<Request>),
    /// A hot key whose lease a check found spent.
    Dry(String),
    Forget(Forget),
    Wake,
}

/// A batch being sent: retried as the same sequence until answered.
struct InFlight {
    seq: u64,
    ops: Vec<(String, KeyOp, u64)>,
    touch: bool,
    /// The callers of the `Check` operations still waiting, index-aligned with `ops`.
    waiters: Vec<Option<Request>>,
    first_sent: Instant,
    call: Option<Call>,
    retry_at: Instant,
    /// The callers of the `Forget` operations, by index in `ops`, until the first answer
    /// (the batch is retried without them: a forget is applied at most once).
    forgets: Vec<(usize, Forget)>,
    /// Keys forgotten since this batch was sent: units it leased or granted to a check
    /// decided meanwhile are dropped, not given back (they belong to the budget the forget
    /// replaced).
    dropped: Vec<String>,
}

/// A key leased by this process.
struct Hot {
    book: Book,
    last_use: Instant,
    want: u64,
    /// A lease operation is queued or in flight.
    asking: bool,
    /// Units admitted and cold checks seen in the current window.
    window: u64,
    rate: f64,
    /// Asked for less than it got: no lease asked before this.
    next_ask: Instant,
    /// The key's shard.
    shard: usize,
    /// A check found the lease spent since the last lease was asked: the next one doubles.
    dried: bool,
    /// The key's GCRA had nothing when it was last asked: checks are denied here, without
    /// asking Redis, until this moment (conservative: a give-back elsewhere may free units
    /// earlier).
    dry_until: Instant,
    /// A stock: the units Redis records this process as holding of the key (what it last
    /// said, plus what it was leased since).
    reported: u64,
}

pub(crate) struct Task {
    client: KeyedClient,
    shared: Arc<KeyedShared>,
    rx: mpsc::Receiver<Request>,
    dry_rx: mpsc::Receiver<String>,
    forget_rx: mpsc::Receiver<Forget>,
    cfg: KeyedFleetBuilder,
    interval_us: u64,
    burst: u64,
    fallback: KeyedLimiter<String>,
    /// The last batch sequence used (one counter for every shard: each shard's grow).
    seq: u64,
    /// Per shard: cold checks waiting for a batch.
    queues: Vec<VecDeque<Request>>,
    /// Per shard: the batch in flight.
    inflight: Vec<Option<InFlight>>,
    /// Per shard: calls failed in a row (the retry's backoff).
    failures: Vec<u32>,
    /// Per shard: when the last batch that refreshed this holder's liveness there was sent.
    last_touch: Vec<Instant>,
    live: u64,
    hot: HashMap<String, Hot>,
    /// Cold checks per key in the current window (cleared every window).
    seen: HashMap<String, u32>,
    window_start: Instant,
    next_tick: Instant,
    /// Per shard: units to give back, by key.
    gives: Vec<HashMap<String, u64>>,
    /// Per shard: fallback admissions to charge, by key.
    debts: Vec<HashMap<String, u64>>,
    /// Per shard: keys to forget in Redis, with their callers.
    forgets: Vec<Vec<Forget>>,
    /// Per shard (a stock): holdings to record in Redis, by key (0: a key no longer held).
    holds: Vec<HashMap<String, u64>>,
    /// Per shard (a stock): units taken that will never be sold, to record, by key.
    strands: Vec<HashMap<String, u64>>,
    /// Per shard: when the hot keys' holdings there were last reported.
    last_report: Vec<Instant>,
    /// Shutting down: no more leases.
    closing: bool,
    /// A per-key stock started lazily, until every shard has answered once: per shard, `None`
    /// before its first answer, then whether its last batch was answered and replicated (it
    /// would be connected). Nothing is sold meanwhile (every shard stays out), so the epochs
    /// are compared as `connect` does before any sale (see [`Task::settle`]).
    starting: Option<Vec<Option<bool>>>,
}

impl Task {
    /// Connects and registers (one empty batch), on `runtime`, which the task will run on;
    /// with `lazy`, neither: the task starts in the outage fallback and registers with its
    /// first batch (a heartbeat, sent at once) when Redis answers.
    pub(crate) fn connect(
        cfg: &KeyedFleetBuilder,
        url: &str,
        (interval_us, burst): (u64, u64),
        shared: Arc<KeyedShared>,
        (rx, dry_rx, forget_rx): (
            mpsc::Receiver<Request>,
            mpsc::Receiver<String>,
            mpsc::Receiver<Forget>,
        ),
        lazy: bool,
        runtime: &tokio::runtime::Handle,
    ) -> Result<Task, FleetError> {
        let pid = crate::conn::process_id();
        let timeout = cfg.command_timeout;
        let (client, live) = runtime.block_on(async {
            let mut c =
                KeyedClient::open(url, &cfg.name, interval_us, burst, &pid, timeout, lazy).await?;
            c.set_replication(cfg.replication, cfg.wait());
            if lazy {
                return Ok((c, cfg.outage_processes));
            }
            let live = register::register(&mut c, interval_us == 0).await?;
            Ok::<_, FleetError>((c, live))
        })?;
        let shards = client.shards();
        shared.shards.set(shards as u64);
        shared
            .counters
            .batches
            .set(if lazy { 0 } else { shards as u64 });
        shared.counters.live.set(live);
        shared.lease_max.set(lease_max(cfg, burst, live));
        if lazy {
            let state = if cfg.fallback { FALLBACK } else { PARTITIONED };
            shared.set_all(state);
        }
        // A stock (interval 0) never falls back; its fallback limiter is never asked.
        let fallback = KeyedLimiter::<String>::gcra(share(interval_us.max(1), live))
            .max_keys(FALLBACK_KEYS)
            .build()
            .map_err(|e| FleetError::Config(e.to_string()))?;
        let now = Instant::now();
        let task = Task {
            client,
            shared,
            rx,
            dry_rx,
            forget_rx,
            cfg: cfg.clone(),
            interval_us,
            burst,
            fallback,
            // Registration used batch 1 of every shard (and one more to mark a lost part).
            seq: if lazy { 0 } else { 2 },
            queues: (0..shards).map(|_| VecDeque::new()).collect(),
            inflight: (0..shards).map(|_| None).collect(),
            failures: vec![0; shards],
            // Not registered yet: the first batch touches (registers) at once.
            last_touch: vec![
                if lazy {
                    now.checked_sub(HEARTBEAT).unwrap_or(now)
                } else {
                    now
                };
                shards
            ],
            live,
            hot: HashMap::new(),
            seen: HashMap::new(),
            window_start: now,
            next_tick: now,
            gives: vec![HashMap::new(); shards],
            debts: vec![HashMap::new(); shards],
            forgets: (0..shards).map(|_| Vec::new()).collect(),
            holds: vec![HashMap::new(); shards],
            strands: vec![HashMap::new(); shards],
            last_report: vec![now; shards],
            closing: false,
            starting: (lazy && interval_us == 0).then(|| vec![None; shards]),
        };
        Ok(task)
    }

    pub(crate) async fn run(mut self) {
        loop {
            let wake_at = self.wake_at();
            let event = {
                let inflight = &mut self.inflight;
                let rx = &mut self.rx;
                let dry_rx = &mut self.dry_rx;
                let forget_rx = &mut self.forget_rx;
                let wake = &self.shared.wake;
                tokio::select! {
                    (shard, r) = std::future::poll_fn(|cx| {
                        for (i, f) in inflight.iter_mut().enumerate() {
                            if let Some(c) = f.as_mut().and_then(|f| f.call.as_mut())
                                && let Poll::Ready(r) = c.as_mut().poll(cx) {
                                    // Answered: `on_reply` takes the call out before any
                                    // further poll.
                                    return Poll::Ready((i, r));
                                }
                        }
                        Poll::Pending
                    }) => Event::Reply(shard, r),
                    req = rx.recv() => Event::Request(req),
                    Some(key) = dry_rx.recv() => Event::Dry(key),
                    Some(f) = forget_rx.recv() => Event::Forget(f),
                    () = wake.notified() => Event::Wake,
                    () = tokio::time::sleep_until(wake_at.into()) => Event::Wake,
                }
            };
            match event {
                Event::Reply(shard, r) => self.on_reply(shard, r),
                Event::Request(Some(r)) => self.accept(r),
                // Every sender is gone: the limiter was dropped.
                Event::Request(None) => self.shared.stop.raise(),
                Event::Dry(key) => self.on_dry(&key),
                Event::Forget(f) => self.on_forget(f),
                Event::Wake => {}
            }
            if self.shared.stop.raised() {
                break;
            }
            while let Ok(r) = self.rx.try_recv() {
                self.accept(r);
            }
            while let Ok(key) = self.dry_rx.try_recv() {
                self.on_dry(&key);
            }
            while let Ok(f) = self.forget_rx.try_recv() {
                self.on_forget(f);
            }
            let now = Instant::now();
            self.expire(now);
            if now >= self.next_tick {
                self.housekeeping(now);
                self.next_tick = now + if self.idle() { IDLE_TICK } else { TICK };
            }
            self.maybe_send(now);
        }
        self.finish().await;
    }

    /// Nothing to look at each tick (see [`IDLE_TICK`]).
    fn idle(&self) -> bool {
        let empty = |maps: &[HashMap<String, u64>]| maps.iter().all(HashMap::is_empty);
        self.hot.is_empty()
            && self.seen.is_empty()
            && self.queues.iter().all(VecDeque::is_empty)
            && self.inflight.iter().all(Option::is_none)
            && self.forgets.iter().all(Vec::is_empty)
            && empty(&self.gives)
            && empty(&self.debts)
            && empty(&self.holds)
            && empty(&self.strands)
            && (0..self.inflight.len()).all(|s| self.shared.shard_state(s) == CONNECTED)
    }

    /// The next moment something is due: a tick, a waiting check's deadline, a retry.
    fn wake_at(&self) -> Instant {
        let mut at = self.next_tick;
        for r in self.queues.iter().flatten() {
            at = at.min(r.deadline);
        }
        for f in self.inflight.iter().flatten() {
            if f.call.is_none() {
                at = at.min(f.retry_at);
            }
            for w in f.waiters.iter().flatten() {
                at = at.min(w.deadline);
            }
        }
        at
    }

    /// The units per holder a short key's fleet accrues before the holder asks again: the
    /// minimum lease or 100 ms of the key's rate, whichever is more (so a saturated hot key
    /// costs about ten lease operations a second, whatever its rate), but no more than one
    /// lease can hold (`B / (2·live)`), so a small burst is not left to fill unused.
    fn short_lease(&self) -> u64 {
        let spacing = u64::try_from(crate::whole::client::DEFAULT_SHORT_SPACING.as_micros())
            .unwrap_or(u64::MAX)
            .div_ceil(self.interval_us.max(1));
        let cap = (self.burst / (2 * self.live.max(1))).max(1);
        self.cfg.min_lease.max(spacing).min(cap)
    }

    /// A check found `key`'s lease spent: look at the pool now (not at the next tick), so a
    /// lease is asked at once when the key's rules allow one, twice the last.
    fn on_dry(&mut self, key: &str) {
        let Some(h) = self.hot.get_mut(key) else {
            return;
        };
        let now = Instant::now();
        let left = u64::from(self.shared.pool.peek_n(key, 0).remaining());
        let spent = h.book.observe(left, Some(now));
        if spent > 0 {
            h.last_use = now;
            h.window += spent;
        }
        h.dried = true;
    }

    /// Forgets a key on purpose: this process drops what it holds of it (its lease, unspent,
    /// is not given back: the forget replaces that budget; its marks, pending give-backs and
    /// charges, its fallback share) and the next batch to its shard deletes its state in
    /// Redis, ahead of any check of it.
    fn on_forget(&mut self, f: Forget) {
        let key = f.key.as_str();
        let shard = self.client.shard(key);
        if self.hot.remove(key).is_some() {
            self.shared.counters.hot_keys.set(self.hot.len() as u64);
        }
        self.seen.remove(key);
        self.gives[shard].remove(key);
        self.debts[shard].remove(key);
        // The forget deletes this process's holding and the key's stranded units in Redis.
        self.holds[shard].remove(key);
        self.strands[shard].remove(key);
        let s = &self.shared;
        s.pool.forget(key);
        s.marks.forget(key);
        self.fallback.forget(key);
        if let Some(inflight) = &mut self.inflight[shard] {
            inflight.dropped.push(f.key.clone());
        }
        self.forgets[shard].push(f);
    }

    fn accept(&mut self, r: Request) {
        if let Some(h) = self.hot.get_mut(&r.key) {
            h.window += u64::from(r.n);
            let now = Instant::now();
            if now < h.dry_until && u64::from(r.n) <= self.burst {
                // A sold-out stock says no time: only a give-back brings units back.
                let wait = Some(h.dry_until - now).filter(|_| !self.cfg.stock);
                let _ = r.reply.send(KeyDecision::new(false, Via::Lease, wait));
                return;
            }
        } else {
            *self.seen.entry(r.key.clone()).or_insert(0) += 1;
        }
        let shard = self.client.shard(&r.key);
        if self.shared.shard_state(shard) == CONNECTED {
            self.queues[shard].push_back(r);
        } else {
            // The key's shard is known not to answer: do not make the caller wait for it.
            self.decide_by_fallback(r);
        }
    }

    /// Moves shard `shard` to `state` (recording `error` when there is one), logging the
    /// change; the limit's state is the worst of its shards'.
    fn transition(&self, shard: usize, state: u8, error: Option<FleetError>) {
        self.shared
            .transition(|| self.client.tag(shard), shard, state, error);
    }

    /// Records that shard `shard` answered (`ok`: and replicated), its epoch learnt; returns
    /// whether the shard may be connected now. A lazily started per-key stock holds every
    /// shard out until all have answered once, then compares each shard's epoch with shard
    /// 0's (the limit's), as `connect` does (`agree_on_epoch`): a shard with another epoch
    /// was created afresh after Redis lost a part of the limit (shard 0 too: a lost shard 0 is
    /// created anew by the first process that never saw it, and only the other shards tell),
    /// so the whole limit is forgotten and nothing is sold. Otherwise every shard whose last
    /// batch was answered is connected.
    fn settle(&mut self, shard: usize, ok: bool) -> bool {
        let Some(answered) = self.starting.as_mut() else {
            return true;
        };
        answered[shard] = Some(ok);
        if answered.iter().any(Option::is_none) {
            return false;
        }
        let answered = self.starting.take().unwrap_or_default();
        let limit = self.client.epoch(0);
        if (0..answered.len()).any(|s| self.client.epoch(s) != limit) {
            self.forget_all();
            return false;
        }
        for (s, _) in answered
            .iter()
            .enumerate()
            .filter(|(_, ok)| **ok == Some(true))
        {
            self.transition(s, CONNECTED, None);
        }
        true
    }

    /// Every shard forgotten (they stay so): the limit sells nothing more.
    fn forget_all(&mut self) {
        self.starting = None;
        for shard in 0..self.inflight.len() {
            self.transition(shard, FORGOTTEN, Some(FleetError::Forgotten));
        }
    }

    fn outage_state(&self) -> u8 {
        if self.cfg.fallback {
            FALLBACK
        } else {
            PARTITIONED
        }
    }

    /// Decides a check by the local share, recording what it admits to charge later.
    fn decide_by_fallback(&mut self, r: Request) {
        let shard = self.client.shard(&r.key);
        let debts: usize = self.debts.iter().map(HashMap::len).sum();
        let d =
            if self.cfg.fallback && (debts < MAX_DEBTS || self.debts[shard].contains_key(&r.key)) {
                let d = self.fallback.check_n(r.key.as_str(), r.n);
                if d.is_allowed() {
                    *self.debts[shard].entry(r.key).or_insert(0) += u64::from(r.n);
                    self.shared.counters.fallback_admitted.add(u64::from(r.n));
                }
                KeyDecision::new(d.is_allowed(), Via::Fallback, d.retry_after())
            } else {
                KeyDecision::new(false, Via::Fallback, None)
            };
        let _ = r.reply.send(d);
    }

    /// Checks past their deadline are decided by the fallback.
    fn expire(&mut self, now: Instant) {
        // Queued checks wait for the batch in flight (one at a time): one that expires in the
        // queue while a batch is out waited on Redis as much as the batch's own checks.
        let mut late = Vec::new();
        for shard in 0..self.queues.len() {
            // A caller may give a check less than `max_wait`, so deadlines are not in queue
            // order: every queued check is looked at.
            let mut queued_late = false;
            if self.queues[shard].iter().any(|r| r.deadline <= now) {
                let (gone, kept) = std::mem::take(&mut self.queues[shard])
                    .into_iter()
                    .partition::<Vec<_>, _>(|r| r.deadline <= now);
                self.queues[shard] = kept.into_iter().collect();
                queued_late = gone.iter().any(|r| r.patient);
                late.extend(gone);
            }
            let mut held_up = queued_late
                && self.inflight[shard]
                    .as_ref()
                    .is_some_and(|f| f.call.is_some());
            if let Some(f) = &mut self.inflight[shard] {
                for w in &mut f.waiters {
                    if w.as_ref().is_some_and(|r| r.deadline <= now) {
                        let r = w.take();
                        held_up |= r.as_ref().is_some_and(|r| r.patient);
                        late.extend(r);
                    }
                }
            }
            if held_up {
                // Redis holds this shard's batch past a check's wait (a check in the batch,
                // or one queued behind it): count the shard sick, so the next checks of its
                // keys are decided at once, until this batch (or its retry) is answered. A
                // batch with no check in it (a lease request) counts too: the checks behind
                // it waited. Other shards (other masters, on a cluster) go on.
                self.transition(shard, self.outage_state(), Some(FleetError::Timeout));
                late.extend(std::mem::take(&mut self.queues[shard]));
            }
        }
        for r in late {
            self.decide_by_fallback(r);
        }
    }

    /// Hot keys: account what was spent, withdraw expired and idle leases, ask for more;
    /// every window, measure rates and promote keys seen often.
    fn housekeeping(&mut self, now: Instant) {
        let pool = &self.shared.pool;
        let mut leased = 0;
        let mut cold = Vec::new();
        // Closing, every lease goes back: a key spent from since the last look is not kept
        // for being in use (its units would stay counted as this process's in Redis).
        let closing = self.closing;
        for (key, h) in &mut self.hot {
            let remaining = |k: &str| u64::from(pool.peek_n(k, 0).remaining());
            let spent = h.book.observe(remaining(key), Some(now));
            if spent > 0 {
                h.last_use = now;
                h.window += spent;
            }
            let idle = closing || now.duration_since(h.last_use) >= self.cfg.idle;
            // Withdraw idle or expired units (the book observed above: a first look again
            // finds nothing more spent).
            let x = crate::local::withdraw(
                || remaining(key),
                |left| {
                    h.window += h.book.observe(left, Some(now));
                    if idle {
                        h.book.level()
                    } else {
                        h.book.expired(now)
                    }
                },
                |x| pool.check_n(key.as_str(), x).is_allowed(),
            );
            if x > 0 {
                h.book.take_front(x);
                *self.gives[h.shard].entry(key.clone()).or_insert(0) += x;
            }
            if idle && h.book.level() == 0 && !h.asking {
                cold.push(key.clone());
            }
            leased += h.book.level();
        }
        for k in cold {
            if let Some(h) = self.hot.remove(&k) {
                self.release(h.shard, &k, h.reported);
            }
            // Its checks go to the task again (a cold key's).
            self.shared.marks.forget(k.as_str());
        }
        let elapsed = now.duration_since(self.window_start);
        if elapsed >= RATE_WINDOW {
            let secs = elapsed.as_secs_f64();
            for h in self.hot.values_mut() {
                h.rate = 0.5 * h.rate + 0.5 * h.window as f64 / secs;
                h.window = 0;
            }
            let threshold = (f64::from(self.cfg.hot_rate) * secs).max(1.0);
            for (key, count) in self.seen.drain() {
                if f64::from(count) >= threshold && self.hot.len() < self.cfg.max_hot {
                    let shard = self.client.shard(&key);
                    // Its lease says what it holds: no older "none held" after it.
                    self.holds[shard].remove(&key);
                    self.hot.insert(
                        key,
                        Hot {
                            book: Book::default(),
                            last_use: now,
                            want: self.cfg.min_lease,
                            asking: false,
                            window: 0,
                            rate: f64::from(count) / secs,
                            next_ask: now,
                            shard,
                            dry_until: now,
                            dried: false,
                            reported: 0,
                        },
                    );
                }
            }
            self.window_start = now;
        }
        let c = &self.shared.counters;
        c.hot_keys.set(self.hot.len() as u64);
        c.leased.set(leased);
        #[cfg(feature = "metrics")]
        crate::metrics::publish_keyed(
            &self.cfg.name,
            &self.shared.stats(),
            self.shared.state.get(),
            self.shared.shards_out(),
        );
    }

    /// Starts each shard's next call: its failed batch again once its backoff has passed, or
    /// a new one with what is due there (charges and give-backs first, then leases, then
    /// waiting checks). A shard other than 0 waits until shard 0 has answered once (its
    /// epoch is the limit's).
    fn maybe_send(&mut self, now: Instant) {
        let shards = self.inflight.len();
        let free = self.retry_due(now);
        if !free.contains(&true) {
            return;
        }
        let mut ops: Vec<Vec<(String, KeyOp, u64)>> = vec![Vec::new(); shards];
        let mut waiters: Vec<Vec<Option<Request>>> = (0..shards).map(|_| Vec::new()).collect();
        let mut forgets: Vec<Vec<(usize, Forget)>> = (0..shards).map(|_| Vec::new()).collect();
        for shard in (0..shards).filter(|&s| free[s]) {
            let (ops, waiters) = (&mut ops[shard], &mut waiters[shard]);
            // Forgets first: a check of the key in the same batch finds it fresh.
            let n = self.forgets[shard].len().min(MAX_BATCH);
            for f in self.forgets[shard].drain(..n) {
                ops.push((f.key.clone(), KeyOp::Forget, 0));
                waiters.push(None);
                forgets[shard].push((ops.len() - 1, f));
            }
            for (map, op) in [
                (&mut self.debts[shard], KeyOp::Charge),
                (&mut self.gives[shard], KeyOp::Give),
                (&mut self.strands[shard], KeyOp::Strand),
                (&mut self.holds[shard], KeyOp::Hold),
            ] {
                let keys: Vec<String> = map.keys().take(MAX_BATCH - ops.len()).cloned().collect();
                for k in keys {
                    let n = map.remove(&k).expect("listed");
                    ops.push((k, op, n));
                    waiters.push(None);
                }
            }
        }
        // Leases and checks only where the shard answers (the others' checks are decided by
        // the fallback).
        let answers: Vec<bool> = (0..shards)
            .map(|s| free[s] && self.shared.shard_state(s) == CONNECTED)
            .collect();
        if !self.closing {
            self.ask_leases(&answers, &mut ops, &mut waiters, now);
            for shard in (0..shards).filter(|&s| answers[s]) {
                while ops[shard].len() < MAX_BATCH {
                    let Some(r) = self.queues[shard].pop_front() else {
                        break;
                    };
                    ops[shard].push((r.key.clone(), KeyOp::Check, u64::from(r.n)));
                    waiters[shard].push(Some(r));
                }
            }
            self.report_holdings(&answers, &mut ops, &mut waiters, now);
        }
        for shard in (0..shards).filter(|&s| free[s]) {
            // Liveness is refreshed (and the live holders counted) once a heartbeat: on shard
            // 0 by the batch due then or by an empty one; on another shard by a batch sent
            // there anyway (a lease always touches), or by an empty one while the shard is
            // out (a batch no replica acknowledged: the heartbeat tells when one does again;
            // a lazy start: it registers there).
            let stale = now.duration_since(self.last_touch[shard]) >= HEARTBEAT;
            let ops = std::mem::take(&mut ops[shard]);
            let out = self.shared.shard_state(shard) != CONNECTED;
            let touch = stale && (shard == 0 || !ops.is_empty() || out);
            if ops.is_empty() && !touch {
                continue;
            }
            self.seq += 1;
            let waiters = std::mem::take(&mut waiters[shard]);
            let forgets = std::mem::take(&mut forgets[shard]);
            let passed = waiters.iter().filter(|w| w.is_some()).count() as u64;
            self.shared.counters.passed_through.add(passed);
            let call = call(
                &self.client,
                &self.shared,
                (shard, self.seq),
                ops.clone(),
                touch,
            );
            self.inflight[shard] = Some(InFlight {
                seq: self.seq,
                ops,
                touch,
                waiters,
                first_sent: now,
                call: Some(call),
                retry_at: now,
                forgets,
                dropped: Vec::new(),
            });
        }
    }

    /// Sends each failed batch again whose backoff has passed; returns the shards free for a
    /// new batch (none in flight; a shard other than 0 once shard 0 has answered).
    fn retry_due(&mut self, now: Instant) -> Vec<bool> {
        let mut free = vec![false; self.inflight.len()];
        for (shard, slot) in self.inflight.iter_mut().enumerate() {
            match slot {
                Some(f) => {
                    if f.call.is_none() && now >= f.retry_at {
                        f.call = Some(call(
                            &self.client,
                            &self.shared,
                            (shard, f.seq),
                            f.ops.clone(),
                            f.touch,
                        ));
                    }
                }
                None => free[shard] = shard == 0 || self.client.epoch(0) != 0,
            }
        }
        free
    }

    /// Queues a lease for each hot key (on a shard that answers, with room in its batch) whose
    /// holding is down to half of what it would ask, once its rules allow.
    fn ask_leases(
        &mut self,
        answers: &[bool],
        ops: &mut [Vec<(String, KeyOp, u64)>],
        waiters: &mut [Vec<Option<Request>>],
        now: Instant,
    ) {
        let cap = self.cfg.lease_cap(self.burst);
        for (key, h) in &mut self.hot {
            // A stock's lease goes with the holding it adds to: two operations.
            let room = if self.cfg.stock { 2 } else { 1 };
            if !answers[h.shard] || ops[h.shard].len() + room > MAX_BATCH {
                continue;
            }
            let mut want = ((h.rate * 0.2) as u64).max(self.cfg.min_lease);
            if h.dried {
                want = want.max(h.want.saturating_mul(2));
            }
            let want = want.min(cap);
            if !h.asking && h.book.level() <= want / 2 && now >= h.next_ask {
                h.asking = true;
                h.want = want;
                h.dried = false;
                if self.cfg.stock {
                    // What it holds now, then the lease adds what it gets: Redis's record
                    // of this process's holding is right again.
                    h.reported = h.book.level();
                    ops[h.shard].push((key.clone(), KeyOp::Hold, h.reported));
                    waiters[h.shard].push(None);
                }
                ops[h.shard].push((key.clone(), KeyOp::Lease, want));
                waiters[h.shard].push(None);
            }
        }
    }

    /// Shutdown: decide what waits, withdraw every lease, give it back and charge the
    /// fallback's admissions, within a bounded time.
    async fn finish(&mut self) {
        self.closing = true;
        self.rx.close();
        self.dry_rx.close();
        self.forget_rx.close();
        while let Ok(f) = self.forget_rx.try_recv() {
            self.on_forget(f);
        }
        let mut waiting: Vec<Request> = self.queues.iter_mut().flat_map(std::mem::take).collect();
        while let Ok(r) = self.rx.try_recv() {
            waiting.push(r);
        }
        self.shared.set_all(PARTITIONED);
        for r in waiting {
            let _ = r.reply.send(KeyDecision::new(false, Via::Refused, None));
        }
        let now = Instant::now();
        for h in self.hot.values_mut() {
            h.asking = false;
        }
        self.housekeeping(now);
        let give_up = now + self.cfg.command_timeout * 8;
        while Instant::now() < give_up {
            // No borrow of the task is held across the wait below (its future is `Send`: it is
            // spawned through a runtime's handle).
            let next = self.inflight.iter().position(Option::is_some);
            if let Some(shard) = next {
                let pending = {
                    let f = self.inflight[shard].as_mut().expect("found");
                    match f.call.take() {
                        Some(c) => c,
                        None => call(
                            &self.client,
                            &self.shared,
                            (shard, f.seq),
                            f.ops.clone(),
                            f.touch,
                        ),
                    }
                };
                let r = pending.await;
                self.on_reply(shard, r);
                if self.inflight[shard].is_some() {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                continue;
            }
            self.housekeeping(Instant::now());
            if self
                .gives
                .iter()
                .chain(&self.debts)
                .chain(&self.holds)
                .chain(&self.strands)
                .all(HashMap::is_empty)
                && self.forgets.iter().all(Vec::is_empty)
            {
                break;
            }
            // Charges and give-backs only (closing: no leases, no checks).
            self.maybe_send(Instant::now());
        }
    }
}

/// Sends batch `seq` of `shard` (counted) on a clone of the connection.
fn call(
    client: &KeyedClient,
    shared: &KeyedShared,
    (shard, seq): (usize, u64),
    ops: Vec<(String, KeyOp, u64)>,
    touch: bool,
) -> Call {
    shared.counters.batches.add(1);
    let mut client = client.clone();
    Box::pin(async move { client.batch_on(shard, seq, &ops, touch).await })
}

/// The largest check a spent lease denies locally (see `KeyedShared::lease_max`).
fn lease_max(cfg: &KeyedFleetBuilder, burst: u64, live: u64) -> u64 {
    if cfg.stock {
        1
    } else {
        (burst / (2 * live.max(1))).max(1)
    }
}

/// The outage share of one of `live` processes for one key: `R / live`, burst one.
fn share(interval_us: u64, live: u64) -> Quota {
    Quota::with_interval(Duration::from_micros(
        interval_us.saturating_mul(live.max(1)),
    ))
    .with_burst(1)
}
