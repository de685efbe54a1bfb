//! Stock (flash-sale inventory): the window family's tests (`family_tests!`: the keyed and
//! direct limiters against `cellgate_models::StockModel`, with restocks and `set_stock`;
//! eviction; many threads selling exactly the stock), and many threads selling exactly the
//! stock plus whatever was restocked during the run.

use std::sync::atomic::{AtomicBool, Ordering};

use cellgate::clock::ManualClock;
use cellgate::{ConfigError, KeyedLimiter, Limiter};
use proptest::prelude::*;

use crate::common::threads::{hammer, ATTEMPTS};
use crate::common::windows::*;
use cellgate_models::StockModel;

/// Time plays no part in a stock; the clock still moves (by multiples of this) to show it.
const W: u64 = 1_000;

fn keyed(stock: u32, clock: &ManualClock) -> KeyedLimiter<u8, ManualClock> {
    KeyedLimiter::<u8>::stock(stock)
        .clock(clock.clone())
        .build()
        .unwrap()
}

/// The bounded fingerprint table store (`max_keys` selects it); never full here.
fn table(stock: u32, clock: &ManualClock) -> KeyedLimiter<u8, ManualClock> {
    KeyedLimiter::<u8>::stock(stock)
        .clock(clock.clone())
        .max_keys(1_024)
        .build()
        .unwrap()
}

fn direct(stock: u32, clock: &ManualClock) -> Limiter<ManualClock> {
    Limiter::stock(stock).clock(clock.clone()).build().unwrap()
}

struct Stock;

impl Family for Stock {
    type Model = StockModel;

    /// Stocks of every size (0 included) on a nominal window: time plays no part.
    fn configs() -> BoxedStrategy<(u64, u32)> {
        prop_oneof![
            1 => Just(0u32),
            4 => 1u32..=6,
            1 => Just(u32::MAX),
            1 => any::<u32>(),
        ]
        .prop_map(|stock| (W, stock))
        .boxed()
    }

    /// Checks, peeks, restocks and `set_stock`s.
    fn actions() -> BoxedStrategy<Action> {
        stock_actions().boxed()
    }

    fn model(_window: u64, stock: u32) -> StockModel {
        StockModel { stock }
    }

    fn stores(_w: u64, stock: u32, clock: &ManualClock) -> [Box<dyn Subject>; 2] {
        [Box::new(keyed(stock, clock)), Box::new(table(stock, clock))]
    }

    fn direct(_w: u64, stock: u32, clock: &ManualClock) -> Option<Box<dyn Subject>> {
        Some(Box::new(direct(stock, clock)))
    }

    fn racer(max_keys: Option<usize>, clock: ManualClock) -> Box<dyn Racer> {
        keyed_racer(KeyedLimiter::<u32>::stock(1), max_keys, clock)
    }

    /// Time plays no part in a stock: eviction is lossless even when the clock goes back.
    const TIMED: bool = false;
    const THREAD_LIMIT: u32 = 100_000;
}

family_tests!(Stock);

#[test]
fn sells_exactly_the_stock_whatever_the_time() {
    let clock = ManualClock::new();
    let l = keyed(3, &clock);
    assert_eq!(l.peek(&1).reset_after_ns(), 0);
    assert!(l.check_n(&1, 2).is_allowed());
    clock.set_ns(u64::MAX);
    let d = l.check_n(&1, 2);
    assert!(!d.is_allowed());
    assert_eq!((d.limit(), d.remaining(), d.retry_after()), (3, 1, None));
    assert_eq!(d.reset_after_ns(), u64::MAX);
    clock.set_ns(0);
    assert!(l.check(&1).is_allowed());
    assert!(!l.check(&1).is_allowed());
    assert!(!l.check_n(&1, 4).is_allowed());
}

#[test]
fn restock_and_set_stock() {
    let clock = ManualClock::new();
    let l = keyed(5, &clock);
    // A restock above the configured stock: remaining exceeds the limit.
    assert_eq!(l.restock(&1, 10), Ok(15));
    let d = l.peek(&1);
    assert_eq!(
        (d.limit(), d.remaining(), d.reset_after_ns()),
        (5, 15, u64::MAX)
    );
    assert!(l.check_n(&1, 15).is_allowed());
    // Saturating at u64::MAX remaining, reported as u32::MAX.
    assert_eq!(l.restock(&2, u64::MAX), Ok(u64::MAX));
    assert_eq!(l.peek(&2).remaining(), u32::MAX);
    assert!(l.check_n(&2, u32::MAX).is_allowed());
    assert_eq!(l.restock(&2, 1), Ok(u64::MAX - u64::from(u32::MAX) + 1));
    // set_stock back to the configured stock: equivalent to a fresh key again.
    l.set_stock(&1, 5).unwrap();
    assert_eq!(l.peek(&1).reset_after_ns(), 0);
    let before = l.len();
    assert_eq!(l.evict_idle(), 1);
    assert_eq!(l.len(), before - 1);
    // set_stock(0) on a new key creates it, sold out.
    l.set_stock(&3, 0).unwrap();
    assert!(!l.check(&3).is_allowed());
    // Direct limiter: the same.
    let d = direct(0, &clock);
    assert!(!d.check().is_allowed());
    d.set_stock(2).unwrap();
    assert!(d.check_n(2).is_allowed());
    assert_eq!(d.restock(1), Ok(1));
    assert_eq!(d.peek().remaining(), 1);
}

#[test]
fn stock_operations_on_other_algorithms_are_unsupported() {
    let gcra = KeyedLimiter::<u8>::gcra(cellgate::Quota::per_second(5))
        .clock(ManualClock::new())
        .build()
        .unwrap();
    assert_eq!(
        gcra.restock(&1, 1),
        Err(ConfigError::Unsupported {
            operation: "restock",
            algorithm: "gcra"
        })
    );
    let gcra = Limiter::gcra(cellgate::Quota::per_second(5))
        .clock(ManualClock::new())
        .build()
        .unwrap();
    assert_eq!(
        gcra.set_stock(1),
        Err(ConfigError::Unsupported {
            operation: "set_stock",
            algorithm: "gcra"
        })
    );
    // A stock of zero is valid (nothing on sale until set).
    assert!(KeyedLimiter::<u8>::stock(0).build().is_ok());
    assert_eq!(
        KeyedLimiter::<u8>::stock(1)
            .max_keys(0)
            .build()
            .unwrap_err(),
        ConfigError::Zero { field: "max_keys" }
    );
}

/// One thread restocks while the others buy (in lots of 1 to 3): every unit stocked or
/// restocked is sold at most once, and what is left is exactly the rest.
#[test]
fn threads_sell_exactly_stock_plus_restocks() {
    const RESTOCKS: u64 = 200;
    const LOT: u64 = 500;
    let stock = 50_000u32;
    let clock = ManualClock::new();
    let k = keyed(stock, &clock);
    let d = direct(stock, &clock);
    let done = AtomicBool::new(false);
    let sold: Vec<u64> = hammer(|i| {
        if i == 0 {
            for _ in 0..RESTOCKS {
                k.restock(&9, LOT).unwrap();
                d.restock(LOT).unwrap();
                std::thread::yield_now();
            }
            done.store(true, Ordering::Release);
            return 0;
        }
        let mut units = 0u64;
        for j in 0..ATTEMPTS {
            let n = (j % 3 + 1) as u32;
            units += u64::from(n) * u64::from(k.check_n(&9, n).is_allowed());
            units += u64::from(n) * u64::from(d.check_n(n).is_allowed());
        }
        units
    });
    assert!(done.load(Ordering::Acquire));
    let total = 2 * (u64::from(stock) + RESTOCKS * LOT);
    let left = u64::from(k.peek(&9).remaining()) + u64::from(d.peek().remaining());
    assert_eq!(sold.iter().sum::<u64>() + left, total);
    // The rest can be sold, and nothing more.
    let (lk, ld) = (k.peek(&9).remaining(), d.peek().remaining());
    assert!(k.check_n(&9, lk).is_allowed() && d.check_n(ld).is_allowed());
    assert!(!k.check(&9).is_allowed() && !d.check().is_allowed());
}

/// With unit purchases and restocks racing, the exact count holds too: sales == stock +
/// restocked once the buyers keep trying after the last restock.
#[test]
fn threads_sell_exactly_stock_plus_restocks_unit_requests() {
    const RESTOCKS: u64 = 100;
    const LOT: u64 = 1_000;
    let stock = 50_000u32;
    let l = direct(stock, &ManualClock::new());
    let done = AtomicBool::new(false);
    let sold: Vec<u64> = hammer(|i| {
        if i == 0 {
            for _ in 0..RESTOCKS {
                l.restock(LOT).unwrap();
                std::thread::yield_now();
            }
            done.store(true, Ordering::Release);
            return 0;
        }
        let mut units = 0u64;
        // Buy until the restocker has finished and then the stock is gone (a denial seen after
        // `done` ends the loop whatever the limiter does, so this cannot hang).
        loop {
            let finished = done.load(Ordering::Acquire);
            if l.check().is_allowed() {
                units += 1;
            } else if finished {
                break;
            }
        }
        units
    });
    assert_eq!(sold.iter().sum::<u64>(), u64::from(stock) + RESTOCKS * LOT);
    assert_eq!(l.peek().remaining(), 0);
}
