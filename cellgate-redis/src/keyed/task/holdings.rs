//! A per-key stock's record in Redis of what each process holds leased, and of what is
//! stranded (`keyed.lua`'s leases hash): the task says what it holds of a key with each lease,
//! when the key leaves its hot set, and, once a heartbeat, for the hot keys whose holding
//! changed, inside batches that go anyway (no call of its own); units it took and will never
//! sell (no replica acknowledged their batch) it records as stranded. When a process dies, the
//! script moves its holdings to the keys' stranded counts, where an operator sees them.

use std::time::Instant;

use super::super::client::{KeyOp, MAX_BATCH};
use super::super::Request;
use super::{Task, HEARTBEAT};

impl Task {
    /// Key `key` of shard `shard` is no longer held (it left the hot set, or its lease came
    /// for a key no longer hot): its holding in Redis, `reported`, goes to 0.
    pub(super) fn release(&mut self, shard: usize, key: &str, reported: u64) {
        if self.cfg.stock && reported > 0 {
            self.holds[shard].insert(key.to_owned(), 0);
        }
    }

    /// `units` of `key` were taken in a batch no replica acknowledged: never sold, recorded as
    /// stranded (a stock).
    pub(super) fn strand(&mut self, shard: usize, key: &str, units: u64) {
        if self.cfg.stock && units > 0 {
            tracing::warn!(limit = %self.cfg.name, key, units, "no replica acknowledged a batch: its units are not sold, recorded as stranded");
            *self.strands[shard].entry(key.to_owned()).or_insert(0) += units;
        }
    }

    /// Once a heartbeat per shard, in a batch going there anyway (shard 0's heartbeat is one),
    /// the holding of each hot key of the shard whose holding changed since it was last said
    /// (sales lower it; withdrawals too), as room in the batch allows.
    pub(super) fn report_holdings(
        &mut self,
        answers: &[bool],
        ops: &mut [Vec<(String, KeyOp, u64)>],
        waiters: &mut [Vec<Option<Request>>],
        now: Instant,
    ) {
        if !self.cfg.stock {
            return;
        }
        let due: Vec<bool> = (0..ops.len())
            .map(|s| {
                let heartbeat = s == 0 && now.duration_since(self.last_touch[s]) >= HEARTBEAT;
                answers[s]
                    && now.duration_since(self.last_report[s]) >= HEARTBEAT
                    && (heartbeat || !ops[s].is_empty())
            })
            .collect();
        if !due.contains(&true) {
            return;
        }
        for (key, h) in &mut self.hot {
            let level = h.book.level();
            if due[h.shard] && level != h.reported && ops[h.shard].len() < MAX_BATCH {
                h.reported = level;
                ops[h.shard].push((key.clone(), KeyOp::Hold, level));
                waiters[h.shard].push(None);
            }
        }
        for (s, _) in due.iter().enumerate().filter(|(_, d)| **d) {
            self.last_report[s] = now;
        }
    }
}
