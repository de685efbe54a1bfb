//! Waiting for capacity: blocking `acquire` and the async `until_ready`.
//!
//! On the real clock the rate is checked loosely, as counts over about a second: never more
//! than the quota allows (a hard bound, measured on the limiter's own clock), and not far below
//! it (a loose bound, so that a loaded machine cannot make the test flaky). Cancellation is
//! checked exactly, on a manual clock.

use std::time::Duration;

use cellgate::clock::{Clock, ManualClock};
use cellgate::{KeyedLimiter, Limiter, Quota};

/// Interval of the real-clock tests: 200 admissions a second.
const T: Duration = Duration::from_millis(5);
/// How long the real-clock tests run.
const RUN: Duration = Duration::from_millis(1_000);

/// The hard bound: admissions acting within `elapsed` of a fresh key with burst `burst`.
fn most(burst: u32, elapsed_ns: u64) -> u64 {
    u64::from(burst) + elapsed_ns / T.as_nanos() as u64
}

#[test]
fn blocking_waiters_admit_at_the_configured_rate() {
    let l = KeyedLimiter::<u8>::gcra(Quota::with_interval(T).with_burst(2))
        .build()
        .unwrap();
    let start = l.clock().now();
    let admitted: u64 = std::thread::scope(|s| {
        let hs: Vec<_> = (0..4)
            .map(|_| {
                s.spawn(|| {
                    let mut n = 0;
                    while l.clock().now() - start < RUN.as_nanos() as u64 {
                        if l.acquire(&0, 1, Duration::from_secs(5)).is_allowed() {
                            n += 1;
                        }
                    }
                    n
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).sum()
    });
    // Every acquire returned after its turn, so all acted by now.
    let elapsed = l.clock().now() - start;
    assert!(
        admitted <= most(2, elapsed),
        "{admitted} admitted in {elapsed} ns"
    );
    let expected = most(2, RUN.as_nanos() as u64);
    assert!(admitted * 4 >= expected, "{admitted} of about {expected}");
}

#[test]
fn acquire_gives_up_without_consuming() {
    let clock = ManualClock::new();
    let l = Limiter::gcra(Quota::with_interval(Duration::from_secs(3600)))
        .clock(clock.clone())
        .build()
        .unwrap();
    assert!(l.acquire(1, Duration::ZERO).is_allowed());
    let before = l.peek();
    // The turn is an hour away: denied at once (no sleep), nothing reserved.
    let d = l.acquire(1, Duration::from_secs(60));
    assert!(!d.is_allowed());
    // The wait beyond the accepted 60 s (plus the instant acquire spent deciding).
    let retry = d.retry_after().unwrap();
    assert!(retry >= Duration::from_secs(3600 - 60) && retry < Duration::from_secs(3600));
    assert_eq!(l.peek(), before);
    // More than the burst: never.
    assert_eq!(l.acquire(2, Duration::MAX).retry_after(), None);
}

#[test]
fn blocking_acquire_on_a_window_retries_after_the_window() {
    let l = Limiter::fixed_window(2, Duration::from_millis(20))
        .build()
        .unwrap();
    let start = l.clock().now();
    let mut admitted = 0;
    for _ in 0..6 {
        assert!(l.acquire(1, Duration::from_secs(5)).is_allowed());
        admitted += 1;
    }
    // Six admissions at two per 20 ms window need at least the start of a third window.
    let windows = (l.clock().now() - start) / 20_000_000 + 1;
    assert!(
        admitted <= 2 * windows + 2,
        "{admitted} in {windows} windows"
    );
    assert!(!l.acquire(3, Duration::from_secs(5)).is_allowed());
}

#[cfg(feature = "async")]
mod asynchronous {
    use super::*;
    use std::future::Future;
    use std::pin::pin;
    use std::sync::Arc;
    use std::task::{Context, Poll, Wake, Waker};

    /// The smallest executor there is: park the thread until woken. Used to show that
    /// `until_ready` needs no runtime.
    fn block_on<F: Future>(f: F) -> F::Output {
        struct Unpark(std::thread::Thread);
        impl Wake for Unpark {
            fn wake(self: Arc<Self>) {
                self.0.unpark();
            }
        }
        let waker = Waker::from(Arc::new(Unpark(std::thread::current())));
        let mut cx = Context::from_waker(&waker);
        let mut f = pin!(f);
        loop {
            if let Poll::Ready(v) = f.as_mut().poll(&mut cx) {
                return v;
            }
            std::thread::park();
        }
    }

    fn noop() -> Waker {
        struct Noop;
        impl Wake for Noop {
            fn wake(self: Arc<Self>) {}
        }
        Waker::from(Arc::new(Noop))
    }

    #[test]
    fn until_ready_runs_without_a_runtime() {
        let l = Limiter::gcra(Quota::with_interval(T)).build().unwrap();
        let start = l.clock().now();
        let mut admitted = 0;
        while l.clock().now() - start < RUN.as_nanos() as u64 / 4 {
            assert!(block_on(l.until_ready(1)).is_allowed());
            admitted += 1;
        }
        let elapsed = l.clock().now() - start;
        assert!(admitted <= most(1, elapsed), "{admitted} in {elapsed} ns");
        assert!(admitted * 4 >= most(1, RUN.as_nanos() as u64 / 4));
    }

    #[test]
    fn async_waiters_on_tokio_admit_at_the_configured_rate() {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_time()
            .build()
            .unwrap();
        let l = Arc::new(
            KeyedLimiter::<u8>::gcra(Quota::with_interval(T).with_burst(3))
                .build()
                .unwrap(),
        );
        let start = l.clock().now();
        let admitted: u64 = rt.block_on(async {
            let tasks: Vec<_> = (0..16)
                .map(|_| {
                    let l = Arc::clone(&l);
                    tokio::spawn(async move {
                        let mut n = 0u64;
                        while l.clock().now() - start < RUN.as_nanos() as u64 {
                            let d = l
                                .until_ready(&0, 1)
                                .with_jitter(Duration::from_micros(200))
                                .await;
                            n += u64::from(d.is_allowed());
                        }
                        n
                    })
                })
                .collect();
            let mut sum = 0;
            for t in tasks {
                sum += t.await.unwrap();
            }
            sum
        });
        let elapsed = l.clock().now() - start;
        assert!(admitted <= most(3, elapsed), "{admitted} in {elapsed} ns");
        assert!(admitted * 4 >= most(3, RUN.as_nanos() as u64));
    }

    #[test]
    fn dropping_a_waiter_gives_its_place_back() {
        let clock = ManualClock::new();
        let l = KeyedLimiter::<u8>::gcra(Quota::with_interval(Duration::from_secs(60)))
            .clock(clock.clone())
            .build()
            .unwrap();
        assert!(l.check(&1).is_allowed());
        let before = l.peek(&1);
        let waker = noop();
        let mut cx = Context::from_waker(&waker);
        {
            let mut f = pin!(l.until_ready(&1, 1));
            // First poll: reserves the place a minute away and starts sleeping.
            assert!(f.as_mut().poll(&mut cx).is_pending());
            assert_ne!(l.peek(&1), before);
        }
        // Dropped before its turn: the place is free again, exactly.
        assert_eq!(l.peek(&1), before);
        // A waiter that can never be served resolves at once with the denial.
        let d = block_on(l.until_ready(&1, 2));
        assert!(!d.is_allowed());
        assert_eq!(d.retry_after(), None);
        // A resolved future that is dropped gives nothing back.
        clock.advance(Duration::from_secs(60));
        assert!(block_on(l.until_ready(&1, 1)).is_allowed());
        assert!(!l.check(&1).is_allowed());
    }

    #[test]
    fn waiters_are_served_in_order() {
        let clock = ManualClock::new();
        let l = Limiter::gcra(Quota::with_interval(Duration::from_secs(1)))
            .clock(clock.clone())
            .build()
            .unwrap();
        let waker = noop();
        let mut cx = Context::from_waker(&waker);
        l.check();
        let mut a = pin!(l.until_ready(1));
        let mut b = pin!(l.until_ready(1));
        assert!(a.as_mut().poll(&mut cx).is_pending());
        assert!(b.as_mut().poll(&mut cx).is_pending());
        // Each holds its own place: 1 s and 2 s away; a newcomer comes after both.
        let r = l.reserve(1, Duration::MAX);
        assert_eq!(r.delay(), Duration::from_secs(3));
        assert!(l.cancel(r));
    }
}
