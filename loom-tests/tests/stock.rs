//! Loom models of the stock algorithm (flash-sale inventory), on the direct `cellgate::Limiter`
//! (one `Cell`, a loom `AtomicU64`) and the keyed limiter's bounded table (`max_keys`, loom
//! mutex-backed slots; the exact map store's races are modelled in `exact_map.rs`). Stock
//! ignores time, so no clock is involved.
//!
//! Each model checks that no unit is sold twice and none is lost: units sold plus units left
//! equal the stock plus units restocked, and the threads' results and the state left behind
//! are those of one serial order of the same operations.
//!
//! Run: `RUSTFLAGS="--cfg loom" LOOM_MAX_PREEMPTIONS=3 cargo test --release`.

mod common;

use cellgate::clock::ManualClock;
use cellgate::{Decision, KeyedLimiter, Limiter};
use loom::sync::Arc;
use loom::thread;

use common::{assert_serial, deterministic_hashing, distant_keys, model, permutations, serially};

/// What one thread does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op {
    Check,
    Restock(u64),
}

/// What it got back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Got {
    Decision(Decision),
    Left(u64),
}

/// The two stores, behind one interface; the keyed one always uses one key.
trait Shop: Send + Sync + 'static {
    fn check(&self) -> Decision;
    fn restock(&self, units: u64) -> u64;
    fn peek(&self) -> Decision;
    /// Keys held (1 for the direct limiter).
    fn keys(&self) -> usize;
}

impl Shop for Limiter<ManualClock> {
    fn check(&self) -> Decision {
        Limiter::check(self)
    }
    fn restock(&self, units: u64) -> u64 {
        Limiter::restock(self, units).expect("a stock limiter")
    }
    fn peek(&self) -> Decision {
        Limiter::peek(self)
    }
    fn keys(&self) -> usize {
        1
    }
}

/// A keyed stock limiter in the table store, used on one key.
struct Keyed(KeyedLimiter<u64, ManualClock>, u64);

impl Shop for Keyed {
    fn check(&self) -> Decision {
        self.0.check(&self.1)
    }
    fn restock(&self, units: u64) -> u64 {
        self.0.restock(&self.1, units).expect("a stock limiter")
    }
    fn peek(&self) -> Decision {
        self.0.peek(&self.1)
    }
    fn keys(&self) -> usize {
        self.0.len()
    }
}

fn direct(stock: u32) -> Limiter<ManualClock> {
    Limiter::stock(stock)
        .clock(ManualClock::new())
        .build()
        .expect("valid stock")
}

fn keyed(stock: u32) -> Keyed {
    let [key, _] = distant_keys();
    Keyed(
        KeyedLimiter::<u64>::stock(stock)
            .max_keys(1)
            .fixed_capacity()
            .clock(ManualClock::new())
            .build()
            .expect("valid stock"),
        key,
    )
}

fn apply(shop: &impl Shop, op: Op) -> Got {
    match op {
        Op::Check => Got::Decision(shop.check()),
        Op::Restock(n) => Got::Left(shop.restock(n)),
    }
}

/// The final state: keys held, the peek, then checks until the first denial.
fn observe(shop: &impl Shop, most: u64) -> (usize, Vec<Decision>) {
    let keys = shop.keys();
    let mut seen = vec![shop.peek()];
    for _ in 0..=most {
        let d = shop.check();
        seen.push(d);
        if !d.is_allowed() {
            break;
        }
    }
    (keys, seen)
}

fn sold(got: &[Got]) -> u64 {
    got.iter()
        .filter(|g| matches!(g, Got::Decision(d) if d.is_allowed()))
        .count() as u64
}

/// Runs `ops` (the last on the main thread) on the shop `make` builds, model-checks it against
/// every serial order, and asserts conservation: sold + left == stock + restocked.
fn check_model<S: Shop>(name: &str, make: fn(u32) -> S, stock: u32, ops: &'static [Op]) {
    deterministic_hashing();
    let restocked: u64 = ops
        .iter()
        .map(|op| match op {
            Op::Restock(n) => *n,
            Op::Check => 0,
        })
        .sum();
    let most = u64::from(stock) + restocked;
    let serial = serially(move || {
        permutations(ops.len())
            .into_iter()
            .map(|order| {
                let shop = make(stock);
                let mut got = vec![None; ops.len()];
                for &i in &order {
                    got[i] = Some(apply(&shop, ops[i]));
                }
                let got: Vec<Got> = got.into_iter().map(Option::unwrap).collect();
                let state = observe(&shop, most);
                (order, got, state)
            })
            .collect::<Vec<_>>()
    });
    model(name, move || {
        let shop = Arc::new(make(stock));
        let (last, spawned) = ops.split_last().unwrap();
        let handles: Vec<_> = spawned
            .iter()
            .map(|&op| {
                let shop = Arc::clone(&shop);
                thread::spawn(move || apply(&*shop, op))
            })
            .collect();
        let mine = apply(&*shop, *last);
        let mut got: Vec<Got> = handles
            .into_iter()
            .map(|h| h.join().expect("model thread panicked"))
            .collect();
        got.push(mine);
        let state = observe(&*shop, most);
        let left = u64::from(state.1[0].remaining());
        let sold_now = sold(&got);
        assert!(sold_now <= most, "oversold: {got:#?}");
        assert_eq!(
            sold_now + left,
            most,
            "sold + left != stock + restocked: {got:#?} {state:#?}"
        );
        assert_eq!(state.0, 1, "the key is held exactly once");
        assert_serial(&serial, &got, &state);
    });
}

/// Three buyers, two units, one cell: exactly two sold.
#[test]
fn three_buyers_two_units() {
    check_model("three_buyers_two_units", direct, 2, &[Op::Check; 3]);
}

/// Three buyers, two units, a new key in the table: three inserts race (only one may create the
/// slot, the others must decide on it), exactly two sold.
#[test]
fn three_buyers_two_units_keyed() {
    check_model("three_buyers_two_units_keyed", keyed, 2, &[Op::Check; 3]);
}

/// A restock of one unit racing two buyers on a stock of one: one or two sold depending on the
/// order, and sold + left is always 2.
#[test]
fn restock_races_two_buyers() {
    check_model(
        "restock_races_two_buyers",
        direct,
        1,
        &[Op::Check, Op::Check, Op::Restock(1)],
    );
}

/// The same on a new key in the table: the restock (an operator action, never refused) and the
/// buyers race to create the key.
#[test]
fn restock_races_two_buyers_keyed() {
    check_model(
        "restock_races_two_buyers_keyed",
        keyed,
        1,
        &[Op::Check, Op::Check, Op::Restock(1)],
    );
}
