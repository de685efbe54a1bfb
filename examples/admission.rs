//! A tour of cellgate's admission semantics on a manual clock, printing what each call decides:
//! a queue (delay instead of reject), nginx's two-stage `limit_req`, reservations and their
//! cancellation, refunds, all-or-nothing checks across limiters, per-call and runtime quotas,
//! and warm-up.
//!
//! ```sh
//! cargo run --example admission
//! ```

use std::time::Duration;

use cellgate::clock::ManualClock;
use cellgate::nginx::LimitReq;
use cellgate::{check_all, ConfigError, KeyedLimiter, Limiter, Quota};

const USAGE: &str = "\
admission: a tour of cellgate's admission semantics on a manual clock, printing what each call
decides: a queue (delay instead of reject), nginx's limit_req, reservations and their
cancellation, refunds, all-or-nothing checks across limiters, per-call and runtime quotas, and
warm-up. It takes no flags and runs in well under a second.

USAGE: cargo run --example admission [-- --help]";

fn main() -> Result<(), ConfigError> {
    if let Some(arg) = std::env::args().nth(1) {
        if arg == "--help" || arg == "-h" {
            println!("{USAGE}");
            return Ok(());
        }
        eprintln!("admission: unknown argument {arg:?}\n\n{USAGE}");
        std::process::exit(2);
    }
    let clock = ManualClock::new();
    let ms = Duration::from_millis;

    println!("-- nginx: limit_req rate=10r/s burst=4 delay=2");
    let nginx = LimitReq::parse("rate=10r/s burst=4 delay=2")?;
    let per_ip = KeyedLimiter::<&str>::gcra(nginx.quota())
        .clock(clock.clone())
        .build()?;
    for i in 0..6 {
        let d = per_ip.check(&"10.0.0.1");
        println!(
            "request {i}: allowed {:5}  delay {:>6?}  remaining {}",
            d.is_allowed(),
            d.delay(),
            d.remaining()
        );
    }

    println!("-- reservations: one per 100 ms, waiting at most 250 ms");
    let upstream = Limiter::gcra(Quota::with_interval(ms(100)))
        .clock(clock.clone())
        .build()?;
    let mut held: Vec<_> = (0..4).map(|_| upstream.reserve(1, ms(250))).collect();
    for (i, r) in held.iter().enumerate() {
        println!(
            "reservation {i}: allowed {:5}  delay {:?}",
            r.is_allowed(),
            r.delay()
        );
    }
    // The last admitted caller gives up: its place is free again.
    println!(
        "cancel the last one: gave back {}",
        upstream.cancel(held.swap_remove(2))
    );
    println!(
        "a newcomer now waits {:?}",
        upstream.reserve(1, ms(250)).delay()
    );

    println!("-- refund: a failed payment gives its unit back");
    let buyers = KeyedLimiter::<u64>::gcra(Quota::per_minute(3))
        .clock(clock.clone())
        .build()?;
    buyers.check_n(&7, 3);
    println!("before refund: remaining {}", buyers.peek(&7).remaining());
    buyers.refund(&7, 1);
    println!("after refund:  remaining {}", buyers.peek(&7).remaining());

    println!("-- all or nothing: user AND stock AND global");
    let stock = KeyedLimiter::<u32>::stock(1).build()?;
    let global = Limiter::gcra(Quota::per_second(1_000))
        .clock(clock.clone())
        .build()?;
    for user in [1u64, 2] {
        let d = check_all([
            (&stock.gate(&42), 1),
            (&buyers.gate(&user), 1),
            (&global, 1),
        ]);
        println!(
            "user {user}: allowed {:5}  denied by {:?}  user {user} remaining {}",
            d.is_allowed(),
            d.denied_by(),
            buyers.peek(&user).remaining()
        );
    }

    println!("-- per-call and runtime quotas");
    let api = KeyedLimiter::<&str>::gcra(Quota::per_second(2))
        .clock(clock.clone())
        .build()?;
    let premium = Quota::per_second(100);
    println!(
        "free 5 at once:    {}",
        api.check_n(&"free", 5).is_allowed()
    );
    println!(
        "premium 5 at once: {}",
        api.check_with(&"gold", &premium, 5)?.is_allowed()
    );
    api.set_quota(Quota::per_second(10))?;
    println!(
        "after set_quota(10/s), free 5 at once: {}",
        api.check_n(&"free", 5).is_allowed()
    );

    println!("-- warm-up: stable 1 per ms, 10 ms to warm up");
    let warm = Limiter::warm_up(Quota::with_interval(ms(1)), ms(10))
        .clock(clock.clone())
        .build()?;
    let mut gaps = vec![];
    for _ in 0..8 {
        let r = warm.reserve(1, Duration::MAX);
        clock.advance(r.delay());
        gaps.push(r.delay());
    }
    println!("spacing under continuous demand: {gaps:?}");
    Ok(())
}
