//! Stock (units that only go down, unless an operator restocks), from the `stock` docs:
//!
//! ```text
//! remaining starts at the configured stock (0 included: nothing on sale until set)
//! allowed iff n <= remaining; an admission takes n; time plays no part
//! limit = the configured stock; remaining reported up to u32::MAX (it may exceed the limit
//! after a restock); retry_after is always None (waiting brings no stock back);
//! reset_after = 0 while the key holds exactly its configured stock, u64::MAX ns otherwise
//! restock(u): remaining += u, saturating at u64::MAX; returns the new remaining
//! set_stock(u): remaining = u
//! ```
//!
//! A key holding exactly its configured stock is the fresh key (never stored, dropped by a
//! sweep), and a sweep leaves nothing behind (the swept state is the fresh one).

use crate::expect::{Expect, U64};
use crate::model::{CellModel, Model};

/// The configured stock per key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StockModel {
    pub stock: u32,
}

/// State: the remaining units, normalised so that equal remaining counts are equal states:
/// `None` is the configured stock, `Some(r)` anything else.
pub type State = Option<u128>;

impl StockModel {
    fn remaining(&self, st: &State) -> u128 {
        st.unwrap_or(u128::from(self.stock))
    }

    fn reset(&self, remaining: u128) -> u128 {
        if remaining == u128::from(self.stock) {
            0
        } else {
            U64
        }
    }

    fn put(&self, st: &mut State, r: u128) {
        *st = (r != u128::from(self.stock)).then_some(r);
    }
}

impl Model for StockModel {
    type State = State;

    fn fresh(&self) -> State {
        None
    }

    fn step(&self, st: &mut State, _now: u64, n: u32) -> Expect {
        let r = self.remaining(st);
        let n = u128::from(n);
        if n <= r {
            if n > 0 {
                self.put(st, r - n);
            }
            return Expect {
                allowed: true,
                limit: self.stock,
                remaining: r - n,
                retry_ns: None,
                reset_ns: self.reset(r - n),
            };
        }
        Expect {
            allowed: false,
            limit: self.stock,
            remaining: r,
            retry_ns: None,
            reset_ns: self.reset(r),
        }
    }

    fn is_idle(&self, st: &State, _now: u64) -> bool {
        self.remaining(st) == u128::from(self.stock)
    }

    fn restock(&self, st: &mut State, units: u64) -> Option<u64> {
        let r = (self.remaining(st) + u128::from(units)).min(U64);
        self.put(st, r);
        Some(u64::try_from(r).unwrap())
    }

    fn set_stock(&self, st: &mut State, units: u64) -> Option<()> {
        self.put(st, u128::from(units));
        Some(())
    }
}

impl CellModel for StockModel {
    const NAME: &'static str = "stock";

    fn limit(&self) -> u32 {
        self.stock
    }

    fn window(&self) -> u64 {
        // Time plays no part; clock moves still run (they must change nothing).
        1000
    }

    fn swept(&self, _swept: u64) -> State {
        None
    }

    fn uses_time(&self) -> bool {
        false
    }

    fn word(&self, st: &State) -> State {
        *st
    }

    /// The units back, up to the configured stock and never beyond it (a restock adds stock;
    /// a key already at or above its configured stock gets nothing).
    fn refund(&self, st: &mut State, _now: u64, n: u32) -> bool {
        let r = self.remaining(st);
        let back = (r + u128::from(n)).min(u128::from(self.stock).max(r));
        self.put(st, back);
        back != r
    }

    /// A stock takes a cancelled admission's units back whatever happened since (they were
    /// taken; no ceiling), saturating at `u64::MAX` remaining.
    fn uncount(&self, st: &mut State, _now: u64, n: u32, _after: &State) -> bool {
        let r = self.remaining(st);
        let back = (r + u128::from(n)).min(U64);
        self.put(st, back);
        back != r
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::cancel;

    #[test]
    fn sells_exactly_the_stock_and_restocks() {
        let s = StockModel { stock: 3 };
        let mut st = None;
        let d = s.step(&mut st, 0, 0);
        assert_eq!((d.allowed, d.remaining, d.reset_ns), (true, 3, 0));
        let d = s.step(&mut st, 0, 2);
        assert_eq!(
            (d.allowed, d.limit, d.remaining, d.reset_ns),
            (true, 3, 1, U64)
        );
        let d = s.step(&mut st, 0, 2);
        assert_eq!((d.allowed, d.remaining, d.retry_ns), (false, 1, None));
        assert_eq!(s.restock(&mut st, 2), Some(3));
        assert_eq!(st, None, "back to the configured stock is the fresh state");
        assert_eq!(s.step(&mut st, 0, 0).reset_ns, 0);
        assert_eq!(s.restock(&mut st, u64::MAX), Some(u64::MAX));
        assert_eq!(s.step(&mut st, 0, 0).seen().remaining, u32::MAX);
        s.set_stock(&mut st, 0);
        assert!(!s.step(&mut st, 0, 1).allowed);
        assert!(s.step(&mut st, 0, 0).allowed, "n = 0 always fits");
    }

    #[test]
    fn refund_and_cancel() {
        let s = StockModel { stock: 3 };
        let mut st = None;
        s.step(&mut st, 0, 2);
        assert!(s.refund(&mut st, 0, 1));
        assert_eq!(st, Some(2));
        assert!(s.refund(&mut st, 0, 5), "up to the configured stock");
        assert_eq!(st, None);
        assert!(!s.refund(&mut st, 0, 1), "never beyond it");
        assert!(!s.refund(&mut st, 0, 0));
        let mut restocked = Some(7);
        assert!(
            !s.refund(&mut restocked, 0, 1),
            "a restocked key gets nothing"
        );
        // Cancel: the exact word back, or the units added back whatever happened since.
        let (before, after) = (Some(5), Some(4));
        let mut now_st = after;
        assert!(cancel(&s, &mut now_st, 0, 1, true, &before, &after));
        assert_eq!(now_st, before);
        let mut now_st = Some(0);
        assert!(cancel(&s, &mut now_st, 0, 1, true, &before, &after));
        assert_eq!(now_st, Some(1));
    }
}
