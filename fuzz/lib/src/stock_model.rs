//! Stock (units that only go down, unless an operator restocks): the real `Limiter` and
//! `KeyedLimiter<u8>` (both stores) against `cellgate_models::StockModel` (whose docs give the
//! semantics).
//!
//! There is no invalid stock configuration; `max_keys(0)` is still a `ConfigError`.
//!
//! A stock limiter's decisions do not depend on time: they run at time 0
//! (`KeyedLimiter::now`). The 10 ms back-off between the automatic sweeps that a full store
//! triggers runs on the clock all the same (it once ran at time 0 too, so that a full stock
//! store swept once and never again; this target found that).

use arbitrary::Arbitrary;
use cellgate::clock::ManualClock;
use cellgate::{KeyedLimiter, Limiter};

pub use cellgate_models::stock::{State, StockModel};

use crate::common::{Op, Stats};
use crate::keyed_model::{run_built, Stores};

/// One fuzz input: the stock per key, the stores' bounds, and operations.
#[derive(Arbitrary, Debug, Clone)]
pub struct Input {
    pub stock: StockSel,
    pub stores: Stores,
    pub ops: Vec<Op>,
}

/// How the configured stock is chosen.
#[derive(Arbitrary, Debug, Clone, Copy)]
pub enum StockSel {
    /// `0..8`.
    Small(u8),
    Any(u32),
    /// `u32::MAX - 0..=3`.
    NearMax(u8),
}

impl StockSel {
    pub fn get(self) -> u32 {
        match self {
            StockSel::Small(x) => u32::from(x % 8),
            StockSel::Any(x) => x,
            StockSel::NearMax(x) => u32::MAX - u32::from(x % 4),
        }
    }
}

/// Replays `input` against the real limiters and the model; panics on any difference.
pub fn run(input: &Input) -> Stats {
    let stock = input.stock.get();
    let clock = ManualClock::new();
    run_built(
        Ok(StockModel { stock }),
        &input.stores,
        &input.ops,
        &clock,
        Limiter::stock(stock).clock(clock.clone()).build(),
        KeyedLimiter::<u8>::stock(stock).clock(clock.clone()),
        KeyedLimiter::<u8>::stock(stock).clock(clock.clone()),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    crate::corpus_tests!("stock_model", run);
}
