//! The input: a constructor with extreme values, a store, and operations at extreme times.

use std::time::Duration;

use arbitrary::Arbitrary;

use super::*;

#[derive(Arbitrary, Debug, Clone)]
pub struct Input {
    pub ctor: Ctor,
    pub store: StoreSel,
    pub ops: Vec<XOp>,
}

/// A constructor and its (extreme) arguments.
#[derive(Arbitrary, Debug, Clone, Copy)]
pub enum Ctor {
    Gcra {
        count: X32,
        period: XDur,
        burst: Option<X32>,
    },
    GcraInterval {
        interval: XDur,
        burst: Option<X32>,
    },
    /// `per_second` (0), `per_minute` (1), `per_hour` (2).
    GcraPer {
        count: X32,
        unit: u8,
        burst: Option<X32>,
    },
    FixedWindow {
        limit: X32,
        window: XDur,
    },
    SlidingWindow {
        limit: X32,
        window: XDur,
    },
    Stock {
        units: X32,
    },
    SlidingLog {
        limit: X32,
        window: XDur,
    },
}

/// A `u32` argument. `LayoutMax(d)` is the largest value the configuration accepts (the
/// layout's limit for windows, `MAX_SLIDING_LOG_LIMIT`, `u64::MAX / T` for a burst, the period in ns
/// for a count) plus `d`, clamped into `u32`.
#[derive(Arbitrary, Debug, Clone, Copy)]
pub enum X32 {
    Zero,
    One,
    Two,
    Max,
    MaxMinus(u8),
    Pow2(u8),
    Pow2Minus1(u8),
    LayoutMax(i8),
    Any(u32),
}

impl X32 {
    pub fn get(self, layout_max: u128) -> u32 {
        match self {
            X32::Zero => 0,
            X32::One => 1,
            X32::Two => 2,
            X32::Max => u32::MAX,
            X32::MaxMinus(d) => u32::MAX - u32::from(d),
            X32::Pow2(x) => 1 << (x % 32),
            X32::Pow2Minus1(x) => u32::try_from((1u64 << (x % 33)) - 1).unwrap(),
            X32::LayoutMax(d) => {
                let v = i128::try_from(layout_max).unwrap_or(i128::MAX) + i128::from(d);
                u32::try_from(v.clamp(0, i128::from(u32::MAX))).unwrap()
            }
            X32::Any(x) => x,
        }
    }
}

/// A period or window.
#[derive(Arbitrary, Debug, Clone, Copy)]
pub enum XDur {
    Zero,
    OneNs,
    TwoNs,
    U32MaxNs,
    /// `Duration::from_nanos(u64::MAX)`.
    U64MaxNs,
    U64MaxMinus(u16),
    /// `u64::MAX + 1` ns: just too long.
    JustTooLong,
    DurationMax,
    Pow2(u8),
    /// `u64::MAX / (1 + d)` ns.
    DivMax(u16),
    Secs(u64),
    Ns(u64),
    Parts {
        secs: u64,
        nanos: u32,
    },
}

impl XDur {
    pub fn get(self) -> Duration {
        match self {
            XDur::Zero => Duration::ZERO,
            XDur::OneNs => Duration::from_nanos(1),
            XDur::TwoNs => Duration::from_nanos(2),
            XDur::U32MaxNs => Duration::from_nanos(u64::from(u32::MAX)),
            XDur::U64MaxNs => Duration::from_nanos(u64::MAX),
            XDur::U64MaxMinus(d) => Duration::from_nanos(u64::MAX - u64::from(d)),
            XDur::JustTooLong => Duration::from_nanos(u64::MAX) + Duration::from_nanos(1),
            XDur::DurationMax => Duration::MAX,
            XDur::Pow2(x) => Duration::from_nanos(1 << (x % 64)),
            XDur::DivMax(d) => Duration::from_nanos(u64::MAX / (1 + u64::from(d))),
            XDur::Secs(s) => Duration::from_secs(s),
            XDur::Ns(ns) => Duration::from_nanos(ns),
            XDur::Parts { secs, nanos } => {
                Duration::from_secs(secs).saturating_add(Duration::from_nanos(u64::from(nanos)))
            }
        }
    }
}

/// Where the limiter keeps its state.
#[derive(Arbitrary, Debug, Clone, Copy)]
pub enum StoreSel {
    /// A direct `Limiter` (a sliding log has none: the unbounded keyed log instead).
    Direct,
    /// `max_keys(m)` (the table; `exact_keys()` for 2^16 < m <= `MAX_TABLE_KEYS`).
    Table(XKeys),
    /// The exact map, unbounded (`None`) or `max_keys(m).exact_keys()`.
    Map(Option<XKeys>),
}

#[derive(Arbitrary, Debug, Clone, Copy)]
pub enum XKeys {
    Zero,
    One,
    Two,
    Small(u8),
    /// `2^(x % 64)`, saturating at `usize::MAX`.
    Pow2(u8),
    TableMax,
    TableMaxPlus1,
    UsizeMax,
}

impl XKeys {
    pub fn get(self) -> usize {
        match self {
            XKeys::Zero => 0,
            XKeys::One => 1,
            XKeys::Two => 2,
            XKeys::Small(x) => usize::from(x % 8) + 1,
            XKeys::Pow2(x) => 1usize.checked_shl(u32::from(x % 64)).unwrap_or(usize::MAX),
            XKeys::TableMax => MAX_TABLE_KEYS,
            XKeys::TableMaxPlus1 => MAX_TABLE_KEYS + 1,
            XKeys::UsizeMax => usize::MAX,
        }
    }
}

/// A clock time or step.
#[derive(Arbitrary, Debug, Clone, Copy)]
pub enum XTime {
    Zero,
    One,
    U32Max,
    U64Max,
    NearMax(u16),
    Pow2(u8),
    Ns(u64),
}

impl XTime {
    pub fn get(self) -> u64 {
        match self {
            XTime::Zero => 0,
            XTime::One => 1,
            XTime::U32Max => u64::from(u32::MAX),
            XTime::U64Max => u64::MAX,
            XTime::NearMax(d) => u64::MAX - u64::from(d),
            XTime::Pow2(x) => 1 << (x % 64),
            XTime::Ns(ns) => ns,
        }
    }
}

/// Units for a restock or `set_stock`.
#[derive(Arbitrary, Debug, Clone, Copy)]
pub enum X64 {
    Zero,
    One,
    U32Max,
    Max,
    MaxMinus(u8),
    Any(u64),
}

impl X64 {
    pub fn get(self) -> u64 {
        match self {
            X64::Zero => 0,
            X64::One => 1,
            X64::U32Max => u64::from(u32::MAX),
            X64::Max => u64::MAX,
            X64::MaxMinus(d) => u64::MAX - u64::from(d),
            X64::Any(u) => u,
        }
    }
}

#[derive(Arbitrary, Debug, Clone, Copy)]
pub enum XOp {
    /// `ManualClock::set_ns`.
    SetTime(XTime),
    /// `ManualClock::advance_ns` (saturating).
    Advance(XTime),
    Check {
        key: u8,
        n: X32,
    },
    CheckSmall {
        key: u8,
        n: u8,
    },
    /// `times % 16` checks of one unit.
    Burst {
        key: u8,
        times: u8,
    },
    Peek {
        key: u8,
    },
    /// `r = peek().remaining()`: `check_n(r + 1)` denied, then `check_n(r)` admitted.
    Probe {
        key: u8,
    },
    /// If the previous operation was a check denied with a wait: the wait is exact.
    FollowRetry,
    EvictIdle,
    Restock {
        key: u8,
        units: X64,
    },
    SetStock {
        key: u8,
        units: X64,
    },
}
