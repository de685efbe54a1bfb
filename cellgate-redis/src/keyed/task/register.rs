//! A process's registration on every shard of a keyed limit when it connects: shard 0 first
//! (it fixes the limit's epoch), then the others, their epochs compared with shard 0's, and
//! shard 0 marked complete once every shard is seen (see `KeyedClient::adopt`).

use super::super::client::KeyedClient;
use crate::error::FleetError;

/// Registers on every shard, checks that they agree on the limit's epoch (a stock), and marks
/// the limit complete; returns the live holders shard 0 counts.
pub(super) async fn register(c: &mut KeyedClient, stock: bool) -> Result<u64, FleetError> {
    let live = register_shards(c).await?;
    agree_on_epoch(c, stock).await?;
    if c.marks_complete() {
        // Every shard seen with the limit's epoch: shard 0 records it (batch 2 there:
        // registration used 1, and `agree_on_epoch` uses 2 on the others only).
        c.batch_on(0, 2, &[], true).await?;
    }
    Ok(live)
}

/// Registers on every shard: shard 0 first (it fixes the limit's epoch), then every other
/// shard (created with that epoch), each batch 1 of its shard, a timeout retried a few times.
/// Returns the live holders shard 0 counts.
async fn register_shards(c: &mut KeyedClient) -> Result<u64, FleetError> {
    let mut live = 1;
    for shard in 0..c.shards() {
        let mut tries = 0;
        let r = loop {
            match c.batch_on(shard, 1, &[], true).await {
                Ok(r) => break r,
                Err(FleetError::Timeout) if tries < 4 => tries += 1,
                Err(FleetError::Redis(e)) if tries < 4 && e.is_timeout() => tries += 1,
                Err(e) => return Err(e),
            }
        };
        if shard == 0 {
            live = r.live.max(1);
        }
    }
    Ok(live)
}

/// After registering on every shard: on a cluster each shard must carry the epoch of shard 0
/// (the limit's). One that carries another was created afresh after Redis lost a part of the
/// limit (or shard 0 was): a per-key stock is then marked forgotten on that shard (a batch
/// sending the limit's epoch, which the script refuses and marks) and the limiter fails with
/// [`FleetError::Forgotten`]; a per-key rate goes on with each shard's own epoch (a lost key
/// costs at most its burst once).
async fn agree_on_epoch(c: &mut KeyedClient, stock: bool) -> Result<(), FleetError> {
    let limit = c.epoch(0);
    let mut lost = false;
    for shard in 1..c.shards() {
        if c.epoch(shard) != limit && stock {
            c.learn(shard, limit, false, true);
            match c.batch_on(shard, 2, &[], true).await {
                Err(FleetError::Forgotten) => lost = true,
                Err(e) => return Err(e),
                Ok(_) => {}
            }
        }
    }
    if lost {
        return Err(FleetError::Forgotten);
    }
    Ok(())
}
