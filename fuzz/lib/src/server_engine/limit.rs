//! One configured limit in the model: the core's algorithm models (`cellgate-models`, each
//! checked against the core by its own target) behind one type, so that the engine's model
//! can keep one state per (limit, request values) whatever the algorithm.

use std::time::Duration;

use cellgate_models::{fixed_window, sliding_window, stock, FixedWindowModel, Model};
use cellgate_models::{SlidingWindowModel, StockModel};
use cellgate_server::api::Unit;

use crate::gcra_model::{self, Params};

/// A limit's algorithm with its validated parameters.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Algo {
    Fixed(FixedWindowModel),
    Gcra(Params),
    Sliding(SlidingWindowModel),
    Stock(StockModel),
}

/// One key's state under one limit.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Cell {
    Fixed(fixed_window::State),
    /// The theoretical arrival time; `None`: never charged.
    Gcra(Option<u64>),
    Sliding(sliding_window::State),
    Stock(stock::State),
}

/// What a decision says that the engine reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Said {
    pub(crate) allowed: bool,
    /// The decision's limit (a GCRA's is its burst).
    pub(crate) limit: u32,
    pub(crate) remaining: u32,
    /// `u64::MAX`: never back to fresh by itself (a stock sold from).
    pub(crate) reset_ns: u64,
}

impl Said {
    /// As the engine's `duration_until_reset` shows it.
    pub(crate) fn reset(&self) -> Option<Duration> {
        (self.reset_ns != u64::MAX).then(|| Duration::from_nanos(self.reset_ns))
    }
}

/// Which algorithm a limit counts with (for coverage).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Family {
    Fixed,
    Gcra,
    Sliding,
    Stock,
}

/// A configured limit as the model sees it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Spec {
    pub(crate) algo: Algo,
    pub(crate) requests_per_unit: u32,
    pub(crate) unit: Unit,
}

impl Spec {
    /// A window-based or GCRA limit of `requests` per `period`, or a stock of `requests`
    /// (`period` unused). Panics when the core would refuse it: the inputs only build limits
    /// the core accepts, so the engine must accept them too.
    pub(crate) fn new(family: Family, requests: u32, burst: u32, period: Duration) -> Spec {
        let algo = match family {
            Family::Fixed => Algo::Fixed(
                crate::fixed_window_model::validate(requests, period).expect("a valid window"),
            ),
            Family::Gcra => {
                Algo::Gcra(gcra_model::validate(requests, period, burst, 0).expect("a valid quota"))
            }
            Family::Sliding => Algo::Sliding(
                crate::sliding_window_model::validate(requests, period).expect("a valid window"),
            ),
            Family::Stock => Algo::Stock(StockModel { stock: requests }),
        };
        let unit = match family {
            Family::Stock => Unit::Unknown,
            _ => unit_of(period),
        };
        Spec {
            algo,
            requests_per_unit: requests,
            unit,
        }
    }

    pub(crate) fn family(&self) -> Family {
        match self.algo {
            Algo::Fixed(_) => Family::Fixed,
            Algo::Gcra(_) => Family::Gcra,
            Algo::Sliding(_) => Family::Sliding,
            Algo::Stock(_) => Family::Stock,
        }
    }

    /// A key never charged.
    pub(crate) fn fresh(&self) -> Cell {
        match &self.algo {
            Algo::Fixed(m) => Cell::Fixed(m.fresh()),
            Algo::Gcra(_) => Cell::Gcra(None),
            Algo::Sliding(m) => Cell::Sliding(m.fresh()),
            Algo::Stock(m) => Cell::Stock(m.fresh()),
        }
    }

    /// The decision on `n` units at `now` (ns); an admission of `n > 0` updates `cell`.
    pub(crate) fn step(&self, cell: &mut Cell, now: u64, n: u32) -> Said {
        let seen = match (&self.algo, cell) {
            (Algo::Gcra(p), Cell::Gcra(tat)) => {
                let (e, stored) = gcra_model::step(p, *tat, now, n);
                if stored.is_some() {
                    *tat = stored;
                }
                return Said {
                    allowed: e.allowed,
                    limit: e.limit,
                    remaining: e.remaining,
                    reset_ns: e.reset_after_ns,
                };
            }
            (Algo::Fixed(m), Cell::Fixed(st)) => m.step(st, now, n).seen(),
            (Algo::Sliding(m), Cell::Sliding(st)) => m.step(st, now, n).seen(),
            // A stock decides at time 0 whatever the clock says.
            (Algo::Stock(m), Cell::Stock(st)) => m.step(st, 0, n).seen(),
            (algo, cell) => panic!("model bug: {cell:?} under {algo:?}"),
        };
        Said {
            allowed: seen.allowed,
            limit: seen.limit,
            remaining: seen.remaining,
            reset_ns: seen.reset_after_ns,
        }
    }

    /// The decision on `n` units at `now` without changing anything.
    pub(crate) fn peek(&self, cell: Option<&Cell>, now: u64, n: u32) -> Said {
        let mut scratch = cell.cloned().unwrap_or_else(|| self.fresh());
        self.step(&mut scratch, now, n)
    }
}

/// The unit a period is exactly, else `Unknown` (ratelimit's units: a month is 30 days, a
/// year 365).
pub(crate) fn unit_of(period: Duration) -> Unit {
    const DAY: u64 = 86_400;
    match period.as_secs() {
        _ if period.subsec_nanos() != 0 => Unit::Unknown,
        1 => Unit::Second,
        60 => Unit::Minute,
        3_600 => Unit::Hour,
        DAY => Unit::Day,
        s if s == 7 * DAY => Unit::Week,
        s if s == 30 * DAY => Unit::Month,
        s if s == 365 * DAY => Unit::Year,
        _ => Unit::Unknown,
    }
}
