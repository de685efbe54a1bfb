//! A striped limiter under a clock that steps back gives no more credit than one cell: a clock
//! stepping back, through the public API (the unit and property tests of
//! `src/limiter/striped/tests.rs` cover more shapes and the bounds of the module docs).

use std::time::Duration;

use cellgate::clock::ManualClock;
use cellgate::{Limiter, Quota, StripedLimiter};

/// Quota 10/s, burst 4: two checks at 10 s, then every check the clock allows at 9 s, then at
/// 10 s again. One cell admits 4 in all; the striped limiter must not admit more, whichever
/// stripes the checks start at.
#[test]
fn a_clock_stepping_back_gives_stripes_no_extra_credit() {
    let quota = Quota::per_second(10).with_burst(4);
    let run = |check: &dyn Fn() -> bool, clock: &ManualClock| {
        let mut admitted = 0;
        clock.set(Duration::from_secs(10));
        admitted += (0..2).filter(|_| check()).count();
        clock.set(Duration::from_secs(9));
        admitted += (0..10).filter(|_| check()).count();
        clock.set(Duration::from_secs(10));
        admitted += (0..10).filter(|_| check()).count();
        admitted
    };
    let clock = ManualClock::new();
    let cell = Limiter::gcra(quota).clock(clock.clone()).build().unwrap();
    let one_cell = run(&|| cell.check().is_allowed(), &clock);
    assert_eq!(one_cell, 4);
    // From one stripe, alternating stripes, and the 9 s checks on the other stripe.
    let starts: [&dyn Fn(usize) -> usize; 3] = [&|_| 0, &|i| i % 2, &|i| usize::from(i >= 2)];
    for start in starts {
        let clock = ManualClock::new();
        let striped = StripedLimiter::gcra(quota)
            .stripes(2)
            .clock(clock.clone())
            .build()
            .unwrap();
        let i = std::cell::Cell::new(0);
        let striped_admitted = run(
            &|| {
                i.set(i.get() + 1);
                striped.check_n_from(start(i.get() - 1), 1).is_allowed()
            },
            &clock,
        );
        assert!(
            striped_admitted <= one_cell,
            "striped admitted {striped_admitted}, one cell {one_cell}"
        );
    }
}
