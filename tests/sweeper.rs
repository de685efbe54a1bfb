//! The background sweeper: it drops idle keys, holds no strong reference to the limiter, and
//! ends when its handle is stopped or dropped, or when the limiter is dropped.

use std::sync::Arc;
use std::time::{Duration, Instant};

use cellgate::clock::ManualClock;
use cellgate::{KeyedLimiter, Quota, WhenFull};

/// Polls `done` until it holds, for at most a minute (a generous bound for a loaded machine:
/// the test asserts the outcome, never how soon it came).
fn eventually(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !done() {
        assert!(Instant::now() < deadline, "gave up waiting for: {what}");
        std::thread::sleep(Duration::from_millis(1));
    }
}

fn limiter(clock: &ManualClock, bounded: bool) -> Arc<KeyedLimiter<u64, ManualClock>> {
    let b = KeyedLimiter::<u64>::gcra(Quota::per_second(1).with_burst(2)).clock(clock.clone());
    let b = if bounded {
        b.max_keys(1_000).when_full(WhenFull::EvictNearestFresh)
    } else {
        b
    };
    Arc::new(b.build().unwrap())
}

#[test]
fn sweeper_drops_idle_keys_and_ends_with_the_limiter() {
    for bounded in [true, false] {
        let clock = ManualClock::new();
        let l = limiter(&clock, bounded);
        for k in 0..100 {
            assert!(l.check(&k).is_allowed());
        }
        let sweeper = l.spawn_sweeper(Duration::from_millis(1)).unwrap();
        assert_eq!(Arc::weak_count(&l), 1, "the thread holds a Weak");
        // Nothing is idle yet: sweeps (if any ran already) drop nothing.
        assert_eq!((l.len(), l.stats().evicted), (100, 0), "bounded {bounded}");
        // Keys 0..50 go idle (one second later every key is back to full), 50..100 stay busy.
        for k in 50..100 {
            assert!(l.check(&k).is_allowed());
        }
        clock.advance(Duration::from_secs(1));
        eventually("the idle keys dropped", || l.stats().evicted == 50);
        assert_eq!(l.len(), 50);
        for k in 50..100 {
            assert_eq!(l.peek(&k).remaining(), 1, "key {k} kept its state");
        }
        // Dropping the limiter ends the thread at its next tick.
        assert!(!sweeper.is_finished());
        drop(l);
        eventually("the thread to end", || sweeper.is_finished());
        sweeper.stop();
    }
}

#[test]
fn dropping_the_handle_joins_the_thread() {
    let clock = ManualClock::new();
    let l = limiter(&clock, true);
    // A period that never comes: only the handle can end the thread.
    let sweeper = l.spawn_sweeper(Duration::from_secs(3_600)).unwrap();
    assert_eq!(Arc::weak_count(&l), 1);
    drop(sweeper);
    // The drop returned after joining: the thread and its Weak are gone.
    assert_eq!((Arc::weak_count(&l), Arc::strong_count(&l)), (0, 1));
    let s = l.spawn_sweeper(Duration::MAX).unwrap();
    s.stop();
    assert_eq!(Arc::weak_count(&l), 0);
}

#[test]
fn a_zero_period_is_refused() {
    let l = limiter(&ManualClock::new(), false);
    let err = l.spawn_sweeper(Duration::ZERO).unwrap_err();
    assert_eq!(err.kind(), std::io::ErrorKind::InvalidInput);
    assert_eq!(err.to_string(), "every must be at least 1, got 0");
    assert_eq!(Arc::weak_count(&l), 0, "no thread started");
}
