//! Exact sliding window log: never more than `limit` units in any window of length `W`.
//!
//! This is the guarantee the Redis `ZSET` scripts give (`ZREMRANGEBYSCORE`, `ZCARD`, `ZADD`)
//! and that no counter can: a counter forgets *when* inside a window its units were spent. The
//! price is memory: the log keeps one entry per admission time, so O(limit) per key (at most
//! `limit` entries of 16 bytes; consecutive admissions at the same nanosecond share one).
//!
//! A unit admitted at `t` counts in every window `(s - W, s]` with `s - W < t <= s`, i.e. it
//! expires at `t + W`. A request for `n` at `now` is allowed iff the live units plus `n` are at
//! most `limit`. Admission times are recorded at `max(now, latest recorded time)`, and expiry
//! uses the caller's `now`, so a clock that goes backwards keeps more units alive, never fewer.

use std::collections::VecDeque;
use std::num::NonZeroU64;
use std::time::Duration;

use super::window::{clamp_ns, limit, window_ns};
use crate::decision::Decision;
use crate::error::ConfigError;

/// The largest limit a sliding log accepts: its memory is O(limit) per key.
pub const MAX_SLIDING_LOG_LIMIT: u32 = 10_000;

/// A validated sliding-log configuration.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct LogConfig {
    pub(crate) window: NonZeroU64,
    pub(crate) limit: u32,
}

impl LogConfig {
    /// The policy this configuration enforces (see [`crate::Policy`]).
    pub(crate) fn policy(&self) -> crate::policy::Policy {
        crate::policy::Policy::new(
            crate::policy::PolicyKind::SlidingLog,
            self.limit,
            Some(std::time::Duration::from_nanos(self.window.get())),
            None,
        )
    }
}

impl LogConfig {
    pub(crate) fn new(lim: u32, window: Duration) -> Result<Self, ConfigError> {
        let lim = limit(lim)?;
        if lim > MAX_SLIDING_LOG_LIMIT {
            return Err(ConfigError::LogLimitTooLarge {
                limit: lim,
                max: MAX_SLIDING_LOG_LIMIT,
            });
        }
        Ok(Self {
            window: window_ns(window)?,
            limit: lim,
        })
    }
}

/// One key's log: admission times in non-decreasing order, with units per time.
#[derive(Debug, Default, Clone)]
pub(crate) struct Log {
    entries: VecDeque<(u64, u32)>,
    /// Sum of the units in `entries`.
    live: u64,
    /// The latest expiry (`t + W`) of any unit this log has dropped (or that a sweep may have
    /// dropped with the whole key). A clock that is behind it may be looking at a time when
    /// those units were live, and the log no longer knows how many: it then counts itself full.
    forgotten: u64,
}

impl Log {
    /// The most conservative log a key could have had if a sweep at `swept` found it idle:
    /// nothing live from `swept` on, but possibly a full log before it.
    pub(crate) fn swept(swept: u64) -> Self {
        Self {
            forgotten: swept,
            ..Self::default()
        }
    }

    /// Drops entries that have expired at `now`.
    fn expire(&mut self, now: u64, w: u64) {
        while let Some(&(t, units)) = self.entries.front() {
            // Expired iff t + W <= now (computed without overflow; then t + W fits in u64).
            if now.checked_sub(w).is_some_and(|edge| t <= edge) {
                self.entries.pop_front();
                self.live -= u64::from(units);
                self.forgotten = self.forgotten.max(t + w);
            } else {
                break;
            }
        }
    }

    /// Decides `n` units at `now`, recording them if admitted.
    pub(crate) fn step(&mut self, cfg: &LogConfig, now: u64, n: u32) -> Decision {
        self.decide(cfg, now, n, true).0
    }

    /// The decision `n` units would get at `now`, recording nothing.
    pub(crate) fn peek_n(&mut self, cfg: &LogConfig, now: u64, n: u32) -> Decision {
        self.decide(cfg, now, n, false).0
    }

    /// [`step`](Self::step), also returning the time the admitted units were logged at (what
    /// [`unadmit`](Self::unadmit) needs); `None` when nothing was logged.
    pub(crate) fn charge(&mut self, cfg: &LogConfig, now: u64, n: u32) -> (Decision, Option<u64>) {
        self.decide(cfg, now, n, true)
    }

    /// Takes `n` units logged at `at` out of the log again (an admission rolled back): exactly
    /// those units, if they are still live; units that have expired meanwhile are spent by time
    /// and nothing of them comes back. Entries at one instant share one slot, so removing `n`
    /// units from the slot at `at` is the same as never having logged them. Returns whether
    /// anything was removed.
    pub(crate) fn unadmit(&mut self, at: u64, n: u32) -> bool {
        let Some(i) = self.entries.iter().position(|&(t, _)| t == at) else {
            return false;
        };
        let units = &mut self.entries[i].1;
        let back = (*units).min(n);
        *units -= back;
        if *units == 0 {
            self.entries.remove(i);
        }
        self.live -= u64::from(back);
        back > 0
    }

    fn decide(
        &mut self,
        cfg: &LogConfig,
        now: u64,
        n: u32,
        record: bool,
    ) -> (Decision, Option<u64>) {
        let w = cfg.window.get();
        self.expire(now, w);
        let limit = u64::from(cfg.limit);
        // Behind a forgotten expiry (the clock went backwards): count the log as full, so that
        // going back in time never brings credit back.
        let live = if now < self.forgotten {
            limit
        } else {
            self.live
        };
        let after = live + u64::from(n);
        if after <= limit {
            let mut logged = None;
            if n > 0 && record {
                let at = self.entries.back().map_or(now, |&(t, _)| t.max(now));
                match self.entries.back_mut() {
                    Some((t, units)) if *t == at => *units += n,
                    _ => self.entries.push_back((at, n)),
                }
                self.live = after;
                logged = Some(at);
            }
            let reset = self.reset(now, w);
            return (
                Decision::allow(cfg.limit, limit - after, NonZeroU64::MIN, reset),
                logged,
            );
        }
        let retry = if n <= cfg.limit {
            self.earliest_fit(now, n, limit, w).map(|t| t - now)
        } else {
            None
        };
        (
            Decision::deny(
                cfg.limit,
                limit.saturating_sub(live),
                NonZeroU64::MIN,
                retry,
                self.reset(now, w),
            ),
            None,
        )
    }

    /// The earliest time at or after `now` (and after any forgotten expiry) when `n <= limit`
    /// units fit if nothing else is admitted: the oldest entries must expire until they do.
    /// `None` if that time is past `u64::MAX`.
    fn earliest_fit(&self, now: u64, n: u32, limit: u64, w: u64) -> Option<u64> {
        let start = now.max(self.forgotten);
        // Every entry still held expires after `forgotten`, so all are live at `start`.
        let mut need = (self.live + u64::from(n)).saturating_sub(limit);
        if need == 0 {
            return Some(start);
        }
        for &(t, units) in &self.entries {
            if u64::from(units) >= need {
                return t.checked_add(w).map(|expiry| expiry.max(start));
            }
            need -= u64::from(units);
        }
        None
    }

    /// The decision a request would get, without recording anything (entries that have
    /// expired are dropped, which changes no decision).
    pub(crate) fn peek(&mut self, cfg: &LogConfig, now: u64) -> Decision {
        self.step(cfg, now, 0)
    }

    /// Time until every entry has expired and the clock is past any forgotten expiry.
    fn reset(&self, now: u64, w: u64) -> u64 {
        let newest = self
            .entries
            .back()
            .map_or(0, |&(t, _)| u128::from(t) + u128::from(w));
        let until = newest.max(u128::from(self.forgotten));
        clamp_ns(until.saturating_sub(u128::from(now)))
    }

    /// Whether the log holds no information at `now`: every entry has expired and the clock is
    /// past any forgotten expiry.
    pub(crate) fn is_idle(&self, cfg: &LogConfig, now: u64) -> bool {
        now >= self.forgotten
            && self.entries.back().is_none_or(|&(t, _)| {
                u128::from(t) + u128::from(cfg.window.get()) <= u128::from(now)
            })
    }

    /// Units admitted and still live (as of the last step).
    #[cfg(test)]
    pub(crate) fn live(&self) -> u64 {
        self.live
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(limit: u32, w: u64) -> LogConfig {
        LogConfig::new(limit, Duration::from_nanos(w)).unwrap()
    }

    #[test]
    fn exact_window() {
        let c = cfg(3, 100);
        let mut log = Log::default();
        assert!(log.step(&c, 10, 1).is_allowed());
        assert!(log.step(&c, 50, 2).is_allowed());
        let d = log.step(&c, 60, 1);
        assert!(!d.is_allowed());
        // The unit at 10 expires at 110.
        assert_eq!(d.retry_after_ns(), Some(50));
        assert_eq!(d.reset_after_ns(), 90);
        assert!(!log.step(&c, 109, 1).is_allowed());
        let d = log.step(&c, 110, 1);
        assert!(d.is_allowed());
        assert_eq!(d.remaining(), 0);
        // Two units need both entries at 50 gone... plus the one at 110: only n <= limit waits.
        let d = log.step(&c, 120, 3);
        assert_eq!(d.retry_after_ns(), Some(210 - 120));
        assert_eq!(log.step(&c, 120, 4).retry_after(), None);
        assert_eq!(log.live(), 3);
        assert!(!log.is_idle(&c, 209));
        assert!(log.is_idle(&c, 210));
    }

    #[test]
    fn backwards_time_keeps_units_alive() {
        let c = cfg(2, 100);
        let mut log = Log::default();
        assert!(log.step(&c, 500, 2).is_allowed());
        // Earlier clock: nothing expires, nothing admitted.
        assert!(!log.step(&c, 100, 1).is_allowed());
        assert!(!log.step(&c, 599, 1).is_allowed());
        assert!(log.step(&c, 600, 2).is_allowed());
    }

    #[test]
    fn swept_log_is_fresh_from_the_sweep_on() {
        let c = cfg(2, 100);
        for now in [250, 300] {
            let mut log = Log::swept(250);
            assert_eq!(log.step(&c, now, 2), Log::default().step(&c, now, 2));
        }
        let d = Log::swept(250).step(&c, 249, 1);
        assert!(!d.is_allowed());
        assert_eq!(d.retry_after_ns(), Some(1));
    }

    #[test]
    fn going_back_before_a_forgotten_expiry_regains_nothing() {
        let c = cfg(1, 100);
        let mut log = Log::default();
        assert!(log.step(&c, 0, 1).is_allowed());
        // At 100 the unit from 0 expires and is dropped...
        assert_eq!(log.step(&c, 100, 0).remaining(), 1);
        // ...but at 50 it was live: no second unit in (-50, 50].
        let d = log.step(&c, 50, 1);
        assert!(!d.is_allowed());
        assert_eq!(d.retry_after_ns(), Some(50));
        assert_eq!(d.reset_after_ns(), 50);
        assert!(!log.is_idle(&c, 99));
        assert!(log.is_idle(&c, 100));
        assert!(log.step(&c, 100, 1).is_allowed());
    }

    #[test]
    fn limits() {
        assert!(LogConfig::new(MAX_SLIDING_LOG_LIMIT, Duration::from_secs(1)).is_ok());
        assert_eq!(
            LogConfig::new(MAX_SLIDING_LOG_LIMIT + 1, Duration::from_secs(1)),
            Err(ConfigError::LogLimitTooLarge {
                limit: MAX_SLIDING_LOG_LIMIT + 1,
                max: MAX_SLIDING_LOG_LIMIT
            })
        );
        let c = cfg(1, u64::MAX);
        let mut log = Log::default();
        assert!(log.step(&c, u64::MAX, 1).is_allowed());
        let d = log.step(&c, u64::MAX, 1);
        assert!(!d.is_allowed());
        assert_eq!(d.retry_after(), None, "expiry past the clock's range");
    }
}
