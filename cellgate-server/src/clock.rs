//! The server's clock: nanoseconds since the Unix epoch, so that every limit's windows are
//! aligned to Unix time (a minute window starts on the minute), counts agree across restarts,
//! and servers of a fleet open and close their windows together.

use std::time::{SystemTime, UNIX_EPOCH};

use cellgate::clock::{Clock, QuantaClock};

/// A monotonic clock whose origin is the Unix epoch: the wall time read once at creation plus
/// the monotonic time elapsed since. Later wall-clock steps (NTP) do not move it, so no limit
/// gains or loses budget when the system time is corrected.
///
/// # Examples
///
/// ```
/// use cellgate::clock::Clock;
/// use cellgate_server::clock::UnixClock;
/// let c = UnixClock::new();
/// // Past 2020-01-01 in nanoseconds since the epoch.
/// assert!(c.now() > 1_577_836_800_000_000_000);
/// ```
#[derive(Debug, Clone)]
pub struct UnixClock {
    elapsed: QuantaClock,
    start: u64,
}

impl UnixClock {
    /// A clock reading the wall time now (a system time before 1970 counts as the epoch).
    ///
    /// # Examples
    ///
    /// ```
    /// let _ = cellgate_server::clock::UnixClock::new();
    /// ```
    #[must_use]
    pub fn new() -> Self {
        let start = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
            .unwrap_or(0);
        UnixClock {
            elapsed: QuantaClock::new(),
            start,
        }
    }
}

impl Default for UnixClock {
    fn default() -> Self {
        Self::new()
    }
}

impl Clock for UnixClock {
    #[inline]
    fn now(&self) -> u64 {
        self.start.saturating_add(self.elapsed.now())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn starts_at_the_wall_time_and_never_goes_back() {
        let wall = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_nanos() as u64;
        let c = UnixClock::new();
        let a = c.now();
        let b = c.now();
        assert!(a + 1_000_000_000 > wall && a < wall + 60_000_000_000);
        assert!(b >= a);
    }
}
