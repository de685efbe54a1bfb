//! One process of a fleet sharing a limit through Redis: checks as fast as `--threads` threads
//! can for `--seconds`, printing `admitted N` (this process's running total) every 100 ms and
//! once more at the end.
//!
//! ```text
//! cargo run --release -p cellgate-redis --example fleet_node -- --redis redis://127.0.0.1:6379 \
//!     --name sale (--stock UNITS | --rate COUNT/SECONDS --burst B) --seconds S --threads T
//! ```
//!
//! The same program is the `fleet_node` binary (so tests can run it as
//! `CARGO_BIN_EXE_fleet_node`) and the `fleet_node` example (`examples/fleet_node.rs`).
include!("../../node/fleet_node.rs");
