//! The fleet limiters as `cellgate` limiters: [`Fleet`] is a `AnyLimiter<()>` and
//! [`KeyedFleet`] a `AnyLimiter<str>`, so that `check_all`, the HTTP layer and any code
//! written for `cellgate`'s one trait take them as they take an in-process limiter.

use std::future::Future;
use std::pin::pin;
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};
use std::time::{Duration, Instant};

use cellgate::{AnyLimiter, Decision, Policy, Reservation, Stats};

use crate::keyed::{KeyedFleet, Via};
use crate::whole::Fleet;

/// The fleet limiter as a `cellgate` limiter (for the HTTP layer and `check_all`): `charge`
/// and `cancel` act on the leased pool; `reserve` cannot schedule ahead and decides as
/// `charge`; `policy` is the global limit's.
impl AnyLimiter for Fleet {
    fn check_n(&self, _key: &(), n: u32) -> Decision {
        Fleet::check_n(self, n)
    }

    fn peek_n(&self, _key: &(), n: u32) -> Decision {
        self.shared.pool.peek_n(n)
    }

    fn charge(&self, _key: &(), n: u32) -> Reservation {
        AnyLimiter::charge(&self.shared.pool, &(), n)
    }

    fn cancel(&self, _key: &(), reservation: Reservation) -> bool {
        AnyLimiter::cancel(&self.shared.pool, &(), reservation)
    }

    fn reserve(&self, key: &(), n: u32, _max_wait: Duration) -> Reservation {
        AnyLimiter::charge(self, key, n)
    }

    fn policy(&self) -> Policy {
        self.descriptor.policy()
    }
}

/// The keyed fleet limiter as a `cellgate` limiter of `str` keys (for the HTTP layer with a
/// `HeaderKey`, and `check_all` as `(&fleet, "alice")`).
///
/// - A hot key is checked on its lease, at once; its admission is a charge of the local
///   lease, which `cancel` gives back to the lease (its decision's `remaining` is what this
///   process holds leased for the key).
/// - A cold key is checked in Redis as [`KeyedFleet::check_blocking`] does: **the calling
///   thread waits** for the answer, at most [`max_wait`](crate::KeyedFleetBuilder::max_wait)
///   (then the outage fallback decides). This trait is synchronous; inside an async server
///   (the HTTP layer) a cold check so holds its worker thread for up to `max_wait`: keep
///   `max_wait` short, or check with the async [`KeyedFleet::check_n`] before the layer. Its
///   admission cannot be taken back (the key's budget in Redis stays charged: `cancel` returns
///   `false`, failing closed), so put a keyed fleet limit last in `check_all`, after the
///   limits more likely to deny. Redis does not say what is left: the decision reports 0
///   remaining.
/// - `peek_n` answers an admission whose `remaining` is what this process holds leased for
///   the key (0 for a cold key): whether Redis would admit is not known without asking it.
/// - `reserve` decides as `charge`; `policy` is the per-key rate or stock; `store_stats` counts
///   the keys hot here (`keys`).
impl AnyLimiter<str> for KeyedFleet {
    fn check_n(&self, key: &str, n: u32) -> Decision {
        AnyLimiter::charge(self, key, n).decision()
    }

    fn peek_n(&self, key: &str, n: u32) -> Decision {
        let lease = self.shared.pool.peek_n(key, n);
        let leased = if lease.is_allowed() {
            lease.remaining()
        } else {
            0
        };
        Decision::admitted(self.policy.limit(), leased, Duration::ZERO)
    }

    fn charge(&self, key: &str, n: u32) -> Reservation {
        self.charge_within(key, n, None)
    }

    fn cancel(&self, key: &str, reservation: Reservation) -> bool {
        // Only a lease's charge holds units here; a Redis admission stays.
        reservation.units() > 0 && AnyLimiter::cancel(&self.shared.pool, key, reservation)
    }

    fn reserve(&self, key: &str, n: u32, _max_wait: Duration) -> Reservation {
        AnyLimiter::charge(self, key, n)
    }

    fn policy(&self) -> Policy {
        self.policy
    }

    fn store_stats(&self) -> Option<Stats> {
        let mut s = Stats::default();
        s.keys = usize::try_from(KeyedFleet::stats(self).hot_keys).unwrap_or(usize::MAX);
        Some(s)
    }
}

impl KeyedFleet {
    /// As [`AnyLimiter::charge`], a cold key waiting for Redis at most until `deadline` (and at
    /// most `max_wait`): for a caller that checks several limits within one bound. See
    /// [`KeyedFleet::check_n_by`].
    ///
    /// ```no_run
    /// # fn run(users: cellgate_redis::KeyedFleet) {
    /// use std::time::{Duration, Instant};
    /// let by = Instant::now() + Duration::from_millis(5);
    /// let r = users.charge_by("alice", 1, by);
    /// assert!(r.decision().limit() > 0);
    /// # }
    /// ```
    pub fn charge_by(&self, key: &str, n: u32, deadline: Instant) -> Reservation {
        self.charge_within(key, n, Some(deadline))
    }

    /// As [`AnyLimiter::charge`] when this process can answer without Redis (from the key's
    /// lease, or a spent lease refused here); `None` when only Redis can answer, and then
    /// nothing was charged and nothing sent: for a caller on an async runtime's thread that
    /// must not block, and moves the check elsewhere only when it would wait.
    ///
    /// ```no_run
    /// # fn run(users: cellgate_redis::KeyedFleet) {
    /// use cellgate::AnyLimiter;
    /// let r = match users.charge_now("alice", 1) {
    ///     Some(r) => r,
    ///     // Waits for Redis (at most `max_wait`): off the async runtime's threads.
    ///     None => AnyLimiter::charge(&users, "alice", 1),
    /// };
    /// # }
    /// ```
    pub fn charge_now(&self, key: &str, n: u32) -> Option<Reservation> {
        if let Some(r) = self.charge_lease(key, n) {
            return Some(r);
        }
        self.answer_now(key, n).map(|d| self.reservation_of(d))
    }

    /// A charge of the key's lease, when it holds `n` units.
    fn charge_lease(&self, key: &str, n: u32) -> Option<Reservation> {
        let pool = &self.shared.pool;
        // Peek first: a check of a key the pool does not hold would insert it.
        if n > 0 && pool.peek_n(key, n).is_allowed() {
            let r = AnyLimiter::charge(pool, key, n);
            if r.is_allowed() {
                return Some(r);
            }
        }
        None
    }

    /// A charge whose cold check waits at most until `deadline`, or the whole `max_wait`
    /// (`None`).
    fn charge_within(&self, key: &str, n: u32, deadline: Option<Instant>) -> Reservation {
        if let Some(r) = self.charge_lease(key, n) {
            return r;
        }
        self.reservation_of(wait(self.check_within(key, n, deadline)))
    }

    /// A decision made away from the lease, as a reservation that holds no units here.
    fn reservation_of(&self, d: crate::keyed::KeyDecision) -> Reservation {
        Reservation::unheld(self.decision_of(&d))
    }

    /// The key decision `d` (of [`check_n`](KeyedFleet::check_n) or its kin) as a `cellgate`
    /// decision of this limit, as [`AnyLimiter::check_n`] answers it: for a caller that awaits
    /// a cold check and goes on with the core's types.
    ///
    /// ```no_run
    /// # async fn run(users: cellgate_redis::KeyedFleet) {
    /// let d = users.decision_of(&users.check_n("alice", 1).await);
    /// assert!(d.limit() > 0);
    /// # }
    /// ```
    pub fn decision_of(&self, d: &crate::keyed::KeyDecision) -> Decision {
        let limit = self.policy.limit();
        if d.is_allowed() {
            Decision::admitted(limit, 0, Duration::ZERO)
        } else if d.via() == Via::Refused {
            Decision::denied(limit, None, Duration::ZERO)
        } else {
            let retry = d.retry_after();
            Decision::denied(limit, retry, retry.unwrap_or_default())
        }
    }
}

/// Runs `fut` to completion on this thread, parking it while the future waits (the keyed
/// fleet's batching task runs on the fleet limiters' own runtimes, whose threads are never the
/// caller's, so this never waits on itself).
fn wait<F: Future>(fut: F) -> F::Output {
    struct Unpark(std::thread::Thread);

    impl Wake for Unpark {
        fn wake(self: Arc<Self>) {
            self.0.unpark();
        }
    }

    let waker = Waker::from(Arc::new(Unpark(std::thread::current())));
    let mut cx = Context::from_waker(&waker);
    let mut fut = pin!(fut);
    loop {
        if let Poll::Ready(out) = fut.as_mut().poll(&mut cx) {
            return out;
        }
        std::thread::park();
    }
}
