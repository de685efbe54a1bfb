//! Exact sliding log, from the `SlidingLog` docs and the module docs of
//! `src/algorithm/sliding_log.rs`:
//!
//! ```text
//! a unit admitted at t is live at now iff t + W > now (it expires at t + W)
//! each decision first forgets every unit that has expired at now; `forgotten` is the latest
//! expiry of any unit forgotten so far (or the sweep floor the key came back from)
//! live = limit while now < forgotten (the clock is behind an expiry it forgot: the log no
//!        longer knows how many units were live then and counts itself full), else the units
//!        not forgotten
//! allowed iff live + n <= limit; units are recorded at max(now, latest recorded time)
//! remaining = limit - live (- n when admitted), 0 at the least
//! reset_after = until every unit has expired and the clock is past `forgotten`
//! retry_after (denied) = the shortest wait after which the same request is admitted if
//!                        nothing else happens; None if n > limit or if it ends past u64::MAX
//! ```
//!
//! The model keeps every unit ever recorded with a flag for "forgotten by the log" and finds
//! `retry_after` by a binary search, so it checks the log's queue and closed form. Peeks decide
//! `n = 0` on the held log, so they forget expired units too. A key swept at `s` comes back as
//! an empty log with `forgotten = s` ([`LogState::swept`]).

use crate::expect::{first_true, wait_until, Expect};
use crate::model::Model;

/// The configuration: at most `limit` units in any window of `window` ns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SlidingLogModel {
    pub limit: u32,
    pub window: u64,
}

/// One key's log: every unit ever recorded, and the floor it started from.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LogState {
    /// `(recorded at, units, forgotten by the log)`.
    pub entries: Vec<(u64, u32, bool)>,
    /// The sweep floor when the key was created (0: none).
    pub floor: u64,
}

impl LogState {
    /// The log a key not held starts from after a sweep at `floor`.
    pub fn swept(floor: u64) -> Self {
        Self {
            entries: Vec::new(),
            floor,
        }
    }
}

impl SlidingLogModel {
    fn expiry(&self, t: u64) -> u128 {
        u128::from(t) + u128::from(self.window)
    }

    /// The latest expiry the log has forgotten, or its floor.
    fn forgotten(&self, st: &LogState) -> u128 {
        st.entries
            .iter()
            .filter(|e| e.2)
            .map(|e| self.expiry(e.0))
            .fold(u128::from(st.floor), u128::max)
    }

    /// Units recorded and live at `t` (whether or not the log has forgotten them).
    fn live_at(&self, st: &LogState, t: u128) -> u128 {
        st.entries
            .iter()
            .filter(|e| self.expiry(e.0) > t)
            .map(|e| u128::from(e.1))
            .sum()
    }

    /// The log's view of what is live at `t`: full while `t` is behind a forgotten expiry.
    fn counted_at(&self, st: &LogState, t: u128) -> u128 {
        if t < self.forgotten(st) {
            u128::from(self.limit)
        } else {
            self.live_at(st, t)
        }
    }

    /// Once every unit has expired and the clock is past `forgotten`, nothing counts.
    fn clear_at(&self, st: &LogState) -> u128 {
        st.entries
            .iter()
            .map(|e| self.expiry(e.0))
            .fold(self.forgotten(st), u128::max)
    }

    fn reset(&self, st: &LogState, now: u64) -> u128 {
        self.clear_at(st).saturating_sub(u128::from(now))
    }
}

impl Model for SlidingLogModel {
    type State = LogState;

    fn fresh(&self) -> LogState {
        LogState::default()
    }

    fn step(&self, st: &mut LogState, now: u64, n: u32) -> Expect {
        for e in &mut st.entries {
            if self.expiry(e.0) <= u128::from(now) {
                e.2 = true;
            }
        }
        let limit = u128::from(self.limit);
        let live = self.counted_at(st, u128::from(now));
        let n128 = u128::from(n);
        if live + n128 <= limit {
            if n > 0 {
                let latest = st.entries.iter().map(|e| e.0).max().unwrap_or(0);
                st.entries.push((now.max(latest), n, false));
            }
            return Expect {
                allowed: true,
                limit: self.limit,
                remaining: limit - live - n128,
                retry_ns: None,
                reset_ns: self.reset(st, now),
            };
        }
        let retry_ns = if n128 > limit {
            None
        } else {
            let at = first_true(u128::from(now) + 1, self.clear_at(st), |t| {
                self.counted_at(st, t) + n128 <= limit
            });
            wait_until(at, now)
        };
        Expect {
            allowed: false,
            limit: self.limit,
            remaining: limit.saturating_sub(live),
            retry_ns,
            reset_ns: self.reset(st, now),
        }
    }

    fn is_idle(&self, st: &LogState, now: u64) -> bool {
        self.reset(st, now) == 0
    }
}

#[cfg(test)]
mod tests {
    //! The model against the crate's own hand-computed vectors.
    use super::*;

    fn m(limit: u32, window: u64) -> SlidingLogModel {
        SlidingLogModel { limit, window }
    }

    #[test]
    fn exact_window() {
        let c = m(3, 100);
        let mut log = LogState::default();
        assert!(c.step(&mut log, 10, 1).allowed);
        assert!(c.step(&mut log, 50, 2).allowed);
        let d = c.step(&mut log, 60, 1);
        assert_eq!((d.allowed, d.retry_ns, d.reset_ns), (false, Some(50), 90));
        assert!(!c.step(&mut log, 109, 1).allowed);
        let d = c.step(&mut log, 110, 1);
        assert_eq!((d.allowed, d.remaining), (true, 0));
        assert_eq!(c.step(&mut log, 120, 3).retry_ns, Some(90));
        assert_eq!(c.step(&mut log, 120, 4).retry_ns, None);
        assert!(!c.is_idle(&log, 209) && c.is_idle(&log, 210));
    }

    #[test]
    fn forgotten_expiries_count_as_full() {
        let c = m(1, 100);
        let mut log = LogState::default();
        assert!(c.step(&mut log, 0, 1).allowed);
        assert_eq!(c.step(&mut log, 100, 0).remaining, 1);
        let d = c.step(&mut log, 50, 1);
        assert_eq!((d.allowed, d.retry_ns, d.reset_ns), (false, Some(50), 50));
        assert!(!c.is_idle(&log, 99) && c.is_idle(&log, 100));
        assert!(c.step(&mut log, 100, 1).allowed);
        // Without the forgetting step (never looked at time 100), time 50 still sees the unit.
        let mut log = LogState::default();
        c.step(&mut log, 0, 1);
        let d = c.step(&mut log, 50, 1);
        assert_eq!((d.allowed, d.retry_ns), (false, Some(50)));
    }

    #[test]
    fn hand_worked() {
        let m = m(3, 100);
        let mut s = LogState::default();
        assert!(m.step(&mut s, 10, 1).allowed);
        assert!(m.step(&mut s, 50, 2).allowed);
        let e = m.step(&mut s, 60, 1);
        assert_eq!(
            (e.allowed, e.retry_ns, e.reset_ns, e.remaining),
            (false, Some(50), 90, 0)
        );
        // The unit at 10 expires at 110: this step forgets it.
        assert!(m.step(&mut s, 110, 1).allowed);
        assert_eq!(m.step(&mut s, 120, 3).retry_ns, Some(210 - 120));
        assert_eq!(m.step(&mut s, 120, 4).retry_ns, None);
        // Backwards to 20, behind the forgotten expiry (110): the log counts itself full, so a
        // peek fits with nothing remaining, and the key is clear once every unit has expired.
        let e = m.step(&mut s, 20, 0);
        assert_eq!(
            (e.allowed, e.remaining, e.reset_ns, e.retry_ns),
            (true, 0, 190, None)
        );
        let e = m.step(&mut s, 20, 1);
        // One more unit fits once the two units at 50 have expired too (150).
        assert_eq!((e.allowed, e.retry_ns), (false, Some(130)));
    }

    #[test]
    fn swept_log() {
        let c = m(2, 100);
        let swept = LogState::swept(250);
        for now in [250, 300] {
            assert_eq!(
                c.step(&mut swept.clone(), now, 2),
                c.step(&mut LogState::default(), now, 2)
            );
        }
        let d = c.step(&mut swept.clone(), 249, 1);
        assert_eq!((d.allowed, d.retry_ns), (false, Some(1)));
    }

    #[test]
    fn last_window() {
        let c = m(1, u64::MAX);
        let mut log = LogState::default();
        assert!(c.step(&mut log, u64::MAX, 1).allowed);
        assert_eq!(c.step(&mut log, u64::MAX, 1).retry_ns, None);
    }
}
