//! What a decision must say, in unbounded arithmetic, and the search the models use for waits.

/// `u64::MAX` as a `u128`: the last instant a clock can show, in ns.
pub const U64: u128 = u64::MAX as u128;

/// What a decision must say, in unbounded arithmetic.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Expect {
    pub allowed: bool,
    pub limit: u32,
    pub remaining: u128,
    /// The wait when denied and waiting helps; models give `None` for a wait that would end
    /// past `u64::MAX` ns (a time the clock cannot show).
    pub retry_ns: Option<u128>,
    pub reset_ns: u128,
}

/// The five observable fields of a decision, as a `cellgate::Decision` shows them (the tests
/// and fuzz targets read a real decision into one of these).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Seen {
    pub allowed: bool,
    pub limit: u32,
    pub remaining: u32,
    pub retry_after_ns: Option<u64>,
    pub reset_after_ns: u64,
}

impl Expect {
    /// The refusal of a new key by a full store: denied, nothing remaining, no wait, no reset.
    pub fn refused(limit: u32) -> Self {
        Self {
            allowed: false,
            limit,
            remaining: 0,
            retry_ns: None,
            reset_ns: 0,
        }
    }

    /// As a decision represents it: `remaining` saturates at `u32::MAX`, `reset_after` at
    /// `u64::MAX` ns, and a wait of exactly `u64::MAX` ns reads `u64::MAX - 1` (the decision
    /// reserves `u64::MAX` for "no wait"; documented in `Decision::deny`).
    pub fn seen(&self) -> Seen {
        let retry = self.retry_ns.map(|r| {
            assert!(r <= U64, "model bug: a wait past the horizon must be None");
            u64::try_from(r.min(U64 - 1)).unwrap()
        });
        assert!(
            !(self.allowed && retry.is_some()),
            "model bug: a wait on an admission"
        );
        Seen {
            allowed: self.allowed,
            limit: self.limit,
            remaining: u32::try_from(self.remaining).unwrap_or(u32::MAX),
            retry_after_ns: retry,
            reset_after_ns: u64::try_from(self.reset_ns.min(U64)).unwrap(),
        }
    }
}

/// The smallest `t` in `[lo, hi]` with `fits(t)`, for a predicate that is false below some
/// point and true from it on; `fits(hi)` must hold.
///
/// The window models find `retry_after` with it rather than in closed form, so they check the
/// crate's closed forms instead of repeating them.
pub fn first_true(mut lo: u128, mut hi: u128, fits: impl Fn(u128) -> bool) -> u128 {
    assert!(
        fits(hi),
        "model bug: the predicate must hold at the upper bound"
    );
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        if fits(mid) {
            hi = mid;
        } else {
            lo = mid + 1;
        }
    }
    lo
}

/// The wait from `now` until the absolute time `at`, or `None` when `at` is past what the clock
/// can show.
pub fn wait_until(at: u128, now: u64) -> Option<u128> {
    (at <= U64).then(|| at - u128::from(now))
}

/// `I`: the bits of the largest window index a `u64` time can have, `u64::MAX / W` (from the
/// window counters' layout docs), computed by counting rather than with `leading_zeros`.
pub fn index_bits(window_ns: u64) -> u32 {
    let max_index = u128::from(u64::MAX / window_ns);
    let mut bits = 0;
    while (1u128 << bits) <= max_index {
        bits += 1;
    }
    bits
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_true_finds_the_edge() {
        assert_eq!(first_true(0, 100, |t| t >= 37), 37);
        assert_eq!(first_true(5, 5, |_| true), 5);
    }

    #[test]
    fn seen_saturates_as_a_decision_does() {
        let e = Expect {
            allowed: false,
            limit: 1,
            remaining: u128::from(u32::MAX) + 5,
            retry_ns: Some(U64),
            reset_ns: U64 + 9,
        };
        let s = e.seen();
        assert_eq!(s.remaining, u32::MAX);
        assert_eq!(s.retry_after_ns, Some(u64::MAX - 1));
        assert_eq!(s.reset_after_ns, u64::MAX);
    }

    #[test]
    fn index_bits_counts() {
        assert_eq!(index_bits(u64::MAX), 1);
        assert_eq!(index_bits(1), 64);
        assert_eq!(index_bits(1_000_000_000), 35);
    }
}
