//! What the batching task does with a shard's answer: a failure puts the shard in the outage
//! state and decides its checks by the fallback (the batch is sent again later, the same
//! sequence); an answer settles the shard's state, then each operation's result goes to its
//! caller, its hot key or the give-backs.

use std::time::{Duration, Instant};

use super::super::client::{BatchReply, KeyOp, KeyReply};
use super::super::{KeyDecision, Request, Via};
use super::{lease_max, share, InFlight, Task, HEARTBEAT};
use crate::error::FleetError;
use crate::shared::{ARMED, CONNECTED, FORGOTTEN, PARTITIONED};

impl Task {
    /// Shard `shard`'s batch in flight was answered (or failed).
    pub(super) fn on_reply(&mut self, shard: usize, r: Result<BatchReply, FleetError>) {
        let Some(f) = self.inflight[shard].take() else {
            return;
        };
        let now = Instant::now();
        match r {
            Ok(reply) if !reply.stale => self.on_answer(shard, f, reply, now),
            // Not answered (or, impossibly, superseded): decide its checks now and send it
            // again later, the same sequence.
            other => {
                let e = other
                    .err()
                    .unwrap_or_else(|| FleetError::Protocol("a stale batch".into()));
                self.on_failure(shard, f, e, now);
            }
        }
    }

    /// The batch failed with `e`: the shard is out (forgotten, or in the outage state), its
    /// checks are decided by the fallback, and the batch waits for its retry.
    fn on_failure(&mut self, shard: usize, mut f: InFlight, e: FleetError, now: Instant) {
        self.shared.counters.backend_errors.add(1);
        self.failures[shard] = self.failures[shard].saturating_add(1);
        let state = if matches!(e, FleetError::Forgotten) {
            FORGOTTEN
        } else {
            self.outage_state()
        };
        // Not confirmed: the forget stays in the batch, applied when it is answered.
        for (_, forget) in f.forgets.drain(..) {
            let _ = forget.reply.send(Err(e.clone()));
        }
        let lost = state == FORGOTTEN && self.starting.is_some();
        self.transition(shard, state, Some(e));
        if lost {
            // A lazily started stock found a shard forgotten before selling: as `connect`
            // would, it gives up the whole limit.
            self.forget_all();
        } else if let Some(answered) = &mut self.starting {
            answered[shard] = answered[shard].map(|_| false);
        }
        // This shard's checks: the others' masters may well answer.
        let queued = std::mem::take(&mut self.queues[shard]);
        for r in f.waiters.iter_mut().filter_map(Option::take).chain(queued) {
            self.decide_by_fallback(r);
        }
        f.call = None;
        f.retry_at = now + Duration::from_millis(10 << self.failures[shard].min(5));
        self.inflight[shard] = Some(f);
    }

    /// The batch was answered: the shard's state and the live holders first, then each
    /// operation's result.
    fn on_answer(&mut self, shard: usize, f: InFlight, reply: BatchReply, now: Instant) {
        self.failures[shard] = 0;
        self.client
            .learn(shard, reply.epoch, reply.complete, !reply.unreplicated);
        let settled = self.settle(shard, !reply.unreplicated);
        if reply.unreplicated {
            // Executed, but no replica acknowledged it: a failover could lose its debits, so
            // what its checks and leases took is not sold (an undersell), and the shard's
            // checks are decided at once (a stock: denied) until a batch there is
            // acknowledged again (the shard's next heartbeat, within a second).
            self.transition(shard, PARTITIONED, Some(FleetError::NotReplicated));
        } else if settled {
            self.transition(shard, CONNECTED, None);
        }
        if reply.live > 0 {
            // The batch touched (it is 0 otherwise).
            self.last_touch[shard] = f.first_sent;
        }
        // The live holders as shard 0 counts them: every process touches it every heartbeat
        // (another shard counts only the processes that used it lately).
        if shard == 0 && reply.live > 0 && reply.live != self.live {
            self.live = reply.live;
            self.shared.counters.live.set(self.live);
            self.shared
                .lease_max
                .set(lease_max(&self.cfg, self.burst, self.live));
            let _ = self
                .fallback
                .set_quota(share(self.interval_us.max(1), self.live));
        }
        for (i, forget) in f.forgets {
            let held = reply.results.get(i).is_some_and(|r| r.value > 0);
            let _ = forget.reply.send(Ok(held));
        }
        let deadline = f.first_sent + self.cfg.lease_lifetime * 3 / 4;
        let mut refused = Vec::new();
        let dropped = f.dropped;
        for (((key, op, n), waiter), res) in f.ops.into_iter().zip(f.waiters).zip(reply.results) {
            if reply.unreplicated && matches!(op, KeyOp::Check | KeyOp::Lease) {
                refused.extend(waiter);
                if let Some(h) = self.hot.get_mut(&key).filter(|_| op == KeyOp::Lease) {
                    h.asking = false;
                    h.next_ask = now + HEARTBEAT;
                    // Redis counts the lease in this process's holding; its next report
                    // leaves it out.
                    h.reported += res.value;
                }
                if !dropped.contains(&key) {
                    self.strand(shard, &key, res.value);
                }
                continue;
            }
            // Units granted for a key forgotten since the batch was sent are dropped, not
            // given back (they belong to the budget the forget replaced).
            let give_back = !dropped.contains(&key);
            match op {
                KeyOp::Check => self.on_check(shard, key, n, waiter, res, give_back),
                KeyOp::Lease => {
                    self.shared.counters.lease_requests.add(1);
                    self.on_lease(shard, key, (n, res), deadline, give_back, now);
                }
                KeyOp::Give | KeyOp::Forget | KeyOp::Hold | KeyOp::Strand => {}
                KeyOp::Charge => self.shared.counters.charged_back.add(res.value),
            }
        }
        for w in refused {
            self.decide_by_fallback(w);
        }
    }

    /// A cold check's result: to its caller, or, decided by the fallback meanwhile, its
    /// grant given back (not used).
    fn on_check(
        &mut self,
        shard: usize,
        key: String,
        n: u64,
        waiter: Option<Request>,
        res: KeyReply,
        give_back: bool,
    ) {
        match waiter {
            Some(w) => {
                let allowed = res.value == n;
                let retry = u64::try_from(-res.info)
                    .ok()
                    .filter(|&us| us > 1 || res.info < -1)
                    .map(Duration::from_micros);
                let _ = w.reply.send(KeyDecision::new(allowed, Via::Redis, retry));
            }
            None if res.value > 0 && give_back => {
                *self.gives[shard].entry(key).or_insert(0) += res.value;
            }
            None => {}
        }
    }

    /// A hot key's lease answer (`asked` units, `res` granted): into the pool, and when to
    /// ask again; a key no longer hot gives the units back.
    fn on_lease(
        &mut self,
        shard: usize,
        key: String,
        (asked, res): (u64, KeyReply),
        deadline: Instant,
        give_back: bool,
        now: Instant,
    ) {
        let short_lease = self.short_lease();
        let Some(h) = self.hot.get_mut(&key) else {
            if res.value > 0 && give_back {
                // Redis counted the lease in this process's holding: none is held.
                self.release(shard, &key, res.value);
                *self.gives[shard].entry(key).or_insert(0) += res.value;
            }
            return;
        };
        h.asking = false;
        // Redis counts the lease in this process's holding (a restock that fails gives the
        // units back, and the next report corrects it).
        h.reported += res.value;
        if res.value == 0 && self.cfg.stock {
            // Sold out: only give-backs elsewhere (within 3/4 of a lease lifetime) bring
            // units back. Its checks are denied here, without asking Redis, until a lease is
            // asked again (conservative: it may undersell until then).
            h.next_ask = now + self.cfg.lease_lifetime / 4;
            h.dry_until = h.next_ask;
        } else if res.value < asked {
            // The key is short: come back once the fleet has accrued about a short lease per
            // holder (within half a lease lifetime), and not before its next unit.
            let us = self
                .interval_us
                .saturating_mul(short_lease)
                .saturating_mul(self.live);
            let mut back = Duration::from_micros(us).min(self.cfg.lease_lifetime / 2);
            if res.value == 0 {
                let dry = Duration::from_micros(res.info.unsigned_abs());
                h.dry_until = now + dry;
                back = back.max(dry);
            }
            h.next_ask = now + back;
        }
        if res.value > 0 {
            // The pool is a stock: restock cannot fail but on a full table, in which case the
            // units go back.
            if self.shared.pool.restock(key.as_str(), res.value).is_ok() {
                h.book.add(Some(deadline), res.value);
            } else {
                *self.gives[shard].entry(key.clone()).or_insert(0) += res.value;
            }
        }
        // After the units are in the pool: the next check that finds the lease spent signals
        // again (once). A full marks table leaves the key's checks to the task, as a cold
        // key's.
        let _ = self.shared.marks.set_stock(key.as_str(), ARMED);
    }
}
