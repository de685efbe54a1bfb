//! Loom models of the fleet mode's local side (`cellgate-redis`): the hand-off between the
//! threads that check and the background task that leases from Redis. The two files that hold
//! it are included here as they ship: `cellgate-redis/src/sync.rs` (the one file of that crate
//! naming an atomic, an ordering or a lock; under `cfg(loom)` they are loom's) and
//! `cellgate-redis/src/local.rs` (a refused check's dry signal and fallback, and the task's
//! withdrawal of units from the pool), with the core's striped stock as the pool (two
//! stripes; `Fleet` stripes it per CPU), whose atomics are loom's too. This crate cannot depend on `cellgate-redis` (tokio does not build
//! under `--cfg loom`), hence the `#[path]` includes; the task's tokio loop and its Redis calls
//! are not modelled (the lease script is checked by the proptest model against a real server in
//! `cellgate-redis/tests/lease_model.rs`).
//!
//! What the models check: a leased unit is admitted by a check or withdrawn by the task, never
//! both and never neither; and a refusal's dry signal is never lost to the task taking the
//! signal or to another refusal (the largest refused request is either taken by the task or
//! still in the signal).
//!
//! Run: `RUSTFLAGS="--cfg loom" LOOM_MAX_PREEMPTIONS=3 cargo test --release --test models fleet_local::`.

use std::collections::BTreeSet;

use cellgate::StripedLimiter;
use loom::sync::Arc;
use loom::thread;

use crate::common::model_reaching;
use crate::sync::{Counter, Dry, Link};

/// What a checking thread and the task share in a model: the pool of leased units, the link
/// state, the dry signal and the fallback's count (no fallback limiter: the link stays
/// connected).
struct Local {
    pool: StripedLimiter,
    link: Link,
    dry: Dry,
    fallback_admitted: Counter,
}

impl Local {
    fn new(leased: u32) -> Arc<Self> {
        Arc::new(Self {
            pool: StripedLimiter::stock(leased)
                .stripes(2)
                .build()
                .expect("valid stock"),
            link: Link::new(crate::local::CONNECTED),
            dry: Dry::new(),
            fallback_admitted: Counter::new(0),
        })
    }

    /// A check of `n` units as `Fleet::check_n` makes it: the pool, then on a refusal the
    /// local protocol's `refused`. Whether it was admitted.
    fn check(&self, n: u32) -> bool {
        let d = self.pool.check_n(n);
        if d.is_allowed() {
            return true;
        }
        let (d, _wake) =
            crate::local::refused(n, d, &self.link, None, &self.fallback_admitted, &self.dry);
        d.is_allowed()
    }

    /// The task giving back everything the pool holds (a holder gone idle), as `Task::withdraw`
    /// calls `local::withdraw`.
    fn withdraw_all(&self) -> u64 {
        crate::local::withdraw(
            || u64::from(self.pool.peek_n(0).remaining()),
            |remaining| remaining,
            |x| self.pool.check_n(x).is_allowed(),
        )
    }
}

/// Three leased units. A checking thread asks for one unit twice while the task, its holder
/// gone idle, withdraws everything the pool holds (to give it back to Redis). Every unit must
/// end up exactly once: admitted, withdrawn, or still in the pool (sum 3), whichever order the
/// checks' and the withdrawal's compare-and-swaps land in; the withdrawal takes what the checks
/// left (3, 2 or 1 units). Mutation caught: `withdraw` ignoring the result of its take (counting
/// units that checks took meanwhile as withdrawn: the sum exceeds 3).
#[test]
fn checks_and_a_withdrawal_share_the_leased_units() {
    model_reaching(
        "fleet local: checks racing a withdrawal",
        BTreeSet::from([1, 2, 3]),
        || {
            let l = Local::new(3);
            let checker = {
                let l = Arc::clone(&l);
                thread::spawn(move || u64::from(l.check(1)) + u64::from(l.check(1)))
            };
            let withdrawn = l.withdraw_all();
            let admitted = checker.join().expect("checking thread");
            let left = u64::from(l.pool.peek_n(0).remaining());
            assert_eq!(
                admitted + withdrawn + left,
                3,
                "admitted {admitted}, withdrawn {withdrawn}, left {left}"
            );
            assert_eq!(left, 0, "the withdrawal left units behind");
            withdrawn
        },
    );
}

/// An empty pool. Two checking threads ask for 2 units and for 1 unit, both refused, each
/// raising the dry signal, while the task takes the signal (its next step). The largest refusal
/// must reach the task: taken by it, or still in the signal for its next step, in every
/// interleaving. Returns what the task took (0, 1 or 2: the race went every way). Mutations
/// caught: `Dry::signal` storing `n` after its load instead of `fetch_max` (the 1-unit refusal
/// overwrites the 2-unit one); `Dry::take` as a load and a store of 0 instead of `swap` (a
/// signal landing between them is erased).
#[test]
fn a_refusal_is_never_lost_to_the_tasks_take() {
    model_reaching(
        "fleet local: dry signals racing the task's take",
        BTreeSet::from([0, 1, 2]),
        || {
            let l = Local::new(0);
            let two = {
                let l = Arc::clone(&l);
                thread::spawn(move || assert!(!l.check(2), "an empty pool admitted"))
            };
            let one = {
                let l = Arc::clone(&l);
                thread::spawn(move || assert!(!l.check(1), "an empty pool admitted"))
            };
            let taken = l.dry.take();
            two.join().expect("2-unit check");
            one.join().expect("1-unit check");
            let pending = l.dry.take();
            assert!(
                taken == 2 || pending == 2,
                "the 2-unit refusal was lost: task took {taken}, signal then {pending}"
            );
            assert!(taken.max(pending) <= 2, "a signal larger than any refusal");
            taken
        },
    );
}
