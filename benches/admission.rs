//! The cost of all-or-nothing admission: one `check_all` over three gates against the same
//! three limiters checked one after another, in the same run.
//!
//! ```sh
//! cargo bench --bench admission
//! ```
//!
//! The three gates of a flash sale: a global GCRA rate (`Limiter`), the SKU's stock
//! (`KeyedLimiter<u32>::stock`, one key) and a per-user GCRA rate (`KeyedLimiter<u64>`, 1000
//! pre-inserted keys cycled in a shuffled order), all on one `ManualClock` (no clock cost in
//! either entry). Quotas and stock are large enough that every check is admitted (the path that
//! writes), so both entries do the same three compare-and-swaps per iteration:
//!
//! | entry | what |
//! |---|---|
//! | `three_checks` | `global.check()`, `stock.check(&sku)`, `users.check(&user)`: three separate checks, nothing rolled back if a later one denies |
//! | `check_all_3` | `check_all([(&global, 1), (&stock.gate(&sku), 1), (&users.gate(&user), 1)])`: the same charges, plus what a rollback needs |
//! | `check_all_3_denied` | the same `check_all` with the stock sold out and put first: one charge refused, nothing to roll back, two peeks reported |
//! | `check_all_3_rolled_back` | the stock put last and sold out: two charges made and rolled back, then two peeks |
//!
//! Figures: BENCHMARKS.md.

use std::hint::black_box;

use cellgate::clock::ManualClock;
use cellgate::{check_all, AnyLimiter, KeyedLimiter, Limiter, Quota};
use criterion::{criterion_group, criterion_main, Criterion};

fn quota() -> Quota {
    Quota::per_second(1_000_000_000).with_burst(10_000_000)
}

fn user_keys() -> Vec<u64> {
    // A fixed shuffle (an LCG permutation of 0..1000).
    (0..1000u64).map(|i| (i * 389 + 17) % 1000).collect()
}

fn admission(c: &mut Criterion) {
    let clock = ManualClock::new();
    let global = Limiter::gcra(quota()).clock(clock.clone()).build().unwrap();
    let stock = KeyedLimiter::<u32>::stock(u32::MAX).build().unwrap();
    let sold_out = KeyedLimiter::<u32>::stock(0).build().unwrap();
    let users = KeyedLimiter::<u64>::gcra(quota())
        .clock(clock.clone())
        .max_keys(1000)
        .build()
        .unwrap();
    let keys = user_keys();
    for k in &keys {
        users.check(k);
    }
    let sku = 42u32;
    let mut group = c.benchmark_group("admission");
    let mut i = 0usize;
    group.bench_function("three_checks", |b| {
        b.iter(|| {
            i = (i + 1) % keys.len();
            let user = &keys[i];
            black_box(global.check());
            black_box(stock.check(&sku));
            black_box(users.check(user));
        })
    });
    group.bench_function("check_all_3", |b| {
        b.iter(|| {
            i = (i + 1) % keys.len();
            let stock_gate = stock.gate(&sku);
            let user_gate = users.gate(&keys[i]);
            black_box(check_all([
                (&global as &dyn AnyLimiter, 1),
                (&stock_gate, 1),
                (&user_gate, 1),
            ]))
        })
    });
    group.bench_function("check_all_3_denied", |b| {
        b.iter(|| {
            i = (i + 1) % keys.len();
            let stock_gate = sold_out.gate(&sku);
            let user_gate = users.gate(&keys[i]);
            black_box(check_all([
                (&stock_gate as &dyn AnyLimiter, 1),
                (&global, 1),
                (&user_gate, 1),
            ]))
        })
    });
    group.bench_function("check_all_3_rolled_back", |b| {
        b.iter(|| {
            i = (i + 1) % keys.len();
            let stock_gate = sold_out.gate(&sku);
            let user_gate = users.gate(&keys[i]);
            black_box(check_all([
                (&global as &dyn AnyLimiter, 1),
                (&user_gate, 1),
                (&stock_gate, 1),
            ]))
        })
    });
    group.finish();
}

criterion_group!(benches, admission);
criterion_main!(benches);
