//! Waiting for capacity: a blocking [`acquire`](crate::KeyedLimiter::acquire) and, with the
//! `async` feature, an `UntilReady` future that works on any executor.
//!
//! A waiter on a GCRA limiter *reserves* its place first (see [`Reservation`](crate::Reservation)): its turn is
//! fixed the moment it asks, first come first served, so a steady stream of new callers cannot
//! overtake a waiter. It then sleeps until its turn. Window and stock limiters cannot hold a
//! place ahead of time; their waiters sleep until the `retry_after` their denial reported and
//! ask again, so they are not served in order.
//!
//! Waits are real time: the sleep is `std::thread::sleep` (blocking) or a timer (async), for
//! the delay computed on the limiter's clock.

use std::time::{Duration, Instant};

use crate::any_limiter::AnyLimiter;
use crate::decision::Decision;

/// Blocks until `n` units are admitted on `limiter` or it is clear they cannot be within
/// `timeout`; returns the admission, or the denial with its `retry_after`.
pub(crate) fn acquire(limiter: &dyn AnyLimiter, n: u32, timeout: Duration) -> Decision {
    let start = Instant::now();
    loop {
        let left = timeout.saturating_sub(start.elapsed());
        let r = limiter.reserve(&(), n, left);
        if r.is_allowed() {
            std::thread::sleep(r.delay());
            return r.decision();
        }
        match r.decision().retry_after() {
            Some(wait) if wait <= left => std::thread::sleep(wait),
            _ => return r.decision(),
        }
    }
}

#[cfg(feature = "async")]
pub use future::UntilReady;

#[cfg(feature = "async")]
mod future {
    use super::*;
    use crate::reservation::Reservation;
    use std::future::Future;
    use std::pin::Pin;
    use std::task::{Context, Poll};

    type Sleep = Pin<Box<dyn Future<Output = ()> + Send>>;

    fn sleep(d: Duration) -> Sleep {
        Box::pin(futures_timer::Delay::new(d))
    }

    /// A uniformly random duration in `[0, max)`: spreads waiters that were told the same
    /// time, so they do not all wake at once.
    fn jitter(max: Duration) -> Duration {
        let max_ns = u64::try_from(max.as_nanos()).unwrap_or(u64::MAX);
        if max_ns == 0 {
            return Duration::ZERO;
        }
        // A fresh randomly keyed hash of the current instant: no shared state, no new
        // dependency, and plenty for spreading wake-ups.
        let r = ahash::RandomState::new().hash_one(Instant::now());
        Duration::from_nanos(r % max_ns)
    }

    enum State {
        /// Not polled yet: nothing reserved.
        Start,
        /// Holding `reservation`, sleeping until its turn (`None`: sleeping until a retry).
        Sleeping(Sleep, Option<Reservation>),
        /// Returned this decision (returned again if polled again).
        Done(Decision),
    }

    /// A future that resolves once `n` units are admitted (GCRA: at the turn it reserved when
    /// first polled), or at once with the denial when they can never be (more units than the
    /// limit, or a full key store). Made by
    /// [`KeyedLimiter::until_ready`](crate::KeyedLimiter::until_ready) and
    /// [`Limiter::until_ready`](crate::Limiter::until_ready); needs the `async` feature.
    ///
    /// It runs on any executor (tokio, async-std, smol, a hand-written `block_on`): its timer is
    /// [`futures-timer`](https://docs.rs/futures-timer)'s, one shared timer thread, so it needs
    /// nothing from the runtime. Dropping it before it resolves cancels its reservation, giving
    /// its place back.
    #[must_use = "futures do nothing unless polled"]
    pub struct UntilReady<G: AnyLimiter> {
        limiter: G,
        n: u32,
        jitter: Duration,
        state: State,
    }

    impl<G: AnyLimiter> UntilReady<G> {
        pub(crate) fn new(limiter: G, n: u32) -> Self {
            Self {
                limiter,
                n,
                jitter: Duration::ZERO,
                state: State::Start,
            }
        }

        /// Adds a random extra wait in `[0, max)` to every sleep, so that many waiters told the
        /// same time do not all wake at once. It never changes the reserved place, only when
        /// this waiter wakes up after it.
        pub fn with_jitter(mut self, max: Duration) -> Self {
            self.jitter = max;
            self
        }
    }

    impl<G: AnyLimiter + Unpin> Future for UntilReady<G> {
        type Output = Decision;

        fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Decision> {
            let this = self.get_mut();
            loop {
                match &mut this.state {
                    State::Start => {
                        let r = this.limiter.reserve(&(), this.n, Duration::MAX);
                        let wait = if r.is_allowed() {
                            if r.delay().is_zero() {
                                this.state = State::Done(r.decision());
                                return Poll::Ready(r.decision());
                            }
                            r.delay()
                        } else {
                            match r.decision().retry_after() {
                                Some(wait) => wait,
                                None => {
                                    this.state = State::Done(r.decision());
                                    return Poll::Ready(r.decision());
                                }
                            }
                        };
                        let held = r.is_allowed().then_some(r);
                        this.state = State::Sleeping(sleep(wait + jitter(this.jitter)), held);
                    }
                    State::Sleeping(timer, held) => {
                        if timer.as_mut().poll(cx).is_pending() {
                            return Poll::Pending;
                        }
                        match held.take() {
                            Some(r) => {
                                this.state = State::Done(r.decision());
                                return Poll::Ready(r.decision());
                            }
                            // A retry after a window's wait: ask again.
                            None => this.state = State::Start,
                        }
                    }
                    State::Done(d) => return Poll::Ready(*d),
                }
            }
        }
    }

    impl<G: AnyLimiter> Drop for UntilReady<G> {
        fn drop(&mut self) {
            if let State::Sleeping(_, held) = &mut self.state {
                if let Some(r) = held.take() {
                    self.limiter.cancel(&(), r);
                }
            }
        }
    }

    impl<G: AnyLimiter> std::fmt::Debug for UntilReady<G> {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            let state = match &self.state {
                State::Start => "start",
                State::Sleeping(_, Some(_)) => "waiting for its turn",
                State::Sleeping(_, None) => "waiting to retry",
                State::Done(_) => "done",
            };
            f.debug_struct("UntilReady")
                .field("n", &self.n)
                .field("jitter", &self.jitter)
                .field("state", &state)
                .finish()
        }
    }
}
