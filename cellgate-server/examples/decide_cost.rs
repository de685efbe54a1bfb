//! The decision path's own cost, without the transport: `Engine::decide` on the sample config
//! (`config/`), the requests the gRPC load generator sends (1 or 3 descriptors, keys from a set),
//! on one thread, reporting nanoseconds per decision. Run it under
//! `valgrind --tool=callgrind` to compare instruction counts before and after a change.
//!
//! ```sh
//! cargo run --release -p cellgate-server --example decide_cost -- 3 1000000 1000000
//! ```
//!
//! Arguments: descriptors (1 or 3), distinct keys, decisions (defaults 3, 1000000, 1000000).
//! At most 65,536 requests are built, spread over the keys, and sent in turn.

use std::time::Instant;

use cellgate_server::api::{Code, Descriptor, RateLimitRequest};
use cellgate_server::config;
use cellgate_server::engine::{Engine, EngineOptions};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let arg = |i: usize, default: u64| -> Result<u64, std::num::ParseIntError> {
        std::env::args().nth(i).map_or(Ok(default), |v| v.parse())
    };
    let (descriptors, keys, n) = (arg(1, 3)?, arg(2, 1_000_000)?.max(1), arg(3, 1_000_000)?);
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("config");
    let engine = Engine::new(config::load(&dir)?, EngineOptions::default());
    // The requests are built before the clock starts: the engine's cost alone is measured.
    let requests: Vec<RateLimitRequest> = (0..n.min(1 << 16))
        .map(|i| {
            let k = i.wrapping_mul(0x9E37_79B9_7F4A_7C15) % keys;
            let address = format!("10.{}.{}.{}", (k >> 16) & 255, (k >> 8) & 255, k & 255);
            let path = format!("/api/{}", k % 1000);
            let mut d = vec![Descriptor::new([("remote_address", address.as_str())])];
            if descriptors == 3 {
                d.push(Descriptor::new([("destination_cluster", "payments")]));
                d.push(Descriptor::new([("path", path.as_str())]));
            }
            RateLimitRequest {
                domain: "edge".into(),
                descriptors: d,
                hits_addend: 1,
            }
        })
        .collect();
    let mut over = 0u64;
    let start = Instant::now();
    for i in 0..n as usize {
        let r = engine.decide(&requests[i % requests.len()])?;
        over += u64::from(r.overall == Code::OverLimit);
    }
    let took = start.elapsed();
    println!(
        "{descriptors} descriptor(s), {keys} keys: {n} decisions in {:.3} s, {:.0} ns each, {over} over the limit",
        took.as_secs_f64(),
        took.as_nanos() as f64 / n.max(1) as f64
    );
    Ok(())
}
