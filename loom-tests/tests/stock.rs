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

use cellgate::clock::ManualClock;
use cellgate::{Decision, KeyedLimiter, Limiter};

use crate::common::{
    check_linearizable, deterministic_hashing, distant_keys, drain, serial_outcomes,
    Scenario as Linearizable,
};

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

/// A sale: the shop `make` builds with `stock` units, and one operation per thread (the last
/// on the main thread).
struct Sale<S> {
    make: fn(u32) -> S,
    stock: u32,
    ops: &'static [Op],
}

impl<S> Clone for Sale<S> {
    fn clone(&self) -> Self {
        Self { ..*self }
    }
}

impl<S> Sale<S> {
    /// The most units any run can sell: the stock plus everything restocked.
    fn most(&self) -> u64 {
        let restocked: u64 = self
            .ops
            .iter()
            .map(|op| match op {
                Op::Restock(n) => *n,
                Op::Check => 0,
            })
            .sum();
        u64::from(self.stock) + restocked
    }
}

impl<S: Shop> Linearizable for Sale<S> {
    type Subject = S;
    type Clock = ();
    type Op = Op;
    type Got = Got;
    type Observed = (usize, Vec<Decision>);

    fn ops(&self) -> &[Op] {
        self.ops
    }

    fn start(&self) -> (S, ()) {
        ((self.make)(self.stock), ())
    }

    fn apply(&self, shop: &S, op: Op) -> Got {
        match op {
            Op::Check => Got::Decision(shop.check()),
            Op::Restock(n) => Got::Left(shop.restock(n)),
        }
    }

    /// The final state: keys held, the peek, then checks until the first denial.
    fn observe(&self, shop: &S, _: &()) -> (usize, Vec<Decision>) {
        let most = u32::try_from(self.most()).expect("a small stock");
        (shop.keys(), drain(|| shop.peek(), || shop.check(), most))
    }
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
    let sale = Sale { make, stock, ops };
    let most = sale.most();
    check_linearizable(name, &sale, serial_outcomes(&sale), move |got, state| {
        let left = u64::from(state.1[0].remaining());
        let sold_now = sold(got);
        assert!(sold_now <= most, "oversold: {got:#?}");
        assert_eq!(
            sold_now + left,
            most,
            "sold + left != stock + restocked: {got:#?} {state:#?}"
        );
        assert_eq!(state.0, 1, "the key is held exactly once");
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
