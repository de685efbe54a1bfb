//! The local side of the lease protocol, apart from the task that talks to Redis: how a check
//! meets the leased units and tells the task it ran dry, and how the task takes units back out
//! of the pool. Plain functions over cellgate limiters and the words of [`crate::sync`], with no
//! tokio and no Redis, so that `loom-tests/tests/fleet_local.rs` includes this file (with
//! `sync.rs`) and model-checks it against the core's limiters under loom.
//!
//! The pool is a cellgate stock of leased units (per key, for [`crate::KeyedFleet`]): checks
//! take from it by compare-and-swap, the task adds to it (`restock`) when a lease arrives and
//! takes from it ([`withdraw`]) to give units back. A unit is therefore admitted by a check or
//! withdrawn by the task, never both, and none is lost: both go through the pool's CAS.

use cellgate::{Decision, Limiter};

use crate::sync::{Counter, Dry, Link};

/// The connection states of [`Link`].
pub(crate) const CONNECTED: u8 = 0;
pub(crate) const FALLBACK: u8 = 1;
pub(crate) const PARTITIONED: u8 = 2;
/// Redis lost the limit: only leased units are admitted, and no command is sent.
pub(crate) const FORGOTTEN: u8 = 3;

/// A check of `n` units that the pool refused (`pool`: its decision): in an outage, the
/// fallback decides (its admissions counted in `fallback_admitted`, to be charged to Redis);
/// otherwise the refusal stands and `dry` records it. Returns the decision and whether the
/// task should be woken (the dry signal rose).
pub(crate) fn refused(
    n: u32,
    pool: Decision,
    link: &Link,
    fallback: Option<&Limiter>,
    fallback_admitted: &Counter,
    dry: &Dry,
) -> (Decision, bool) {
    if link.get() == FALLBACK
        && let Some(f) = fallback
    {
        let d = f.check_n(n);
        if d.is_allowed() {
            fallback_admitted.add(u64::from(n));
            return (d, false);
        }
    }
    (pool, dry.signal(n))
}

/// Takes units back out of a pool so that no check can admit them: `look` says how many the
/// pool holds now, `target` how many of those to take given that (it may account what checks
/// spent meanwhile), and `take(x)` takes `x` if all are still there (one compare-and-swap on
/// the pool). Units are interchangeable, so when checks took some between the look and the
/// take, it looks again. Returns the units taken (0 when `target` says none).
pub(crate) fn withdraw(
    mut look: impl FnMut() -> u64,
    mut target: impl FnMut(u64) -> u64,
    mut take: impl FnMut(u32) -> bool,
) -> u64 {
    loop {
        let x = target(look()).min(u64::from(u32::MAX));
        if x == 0 {
            return 0;
        }
        // `x` fits in a u32 (capped above).
        if take(x as u32) {
            return x;
        }
    }
}
