//! See `src/server_engine.rs`.
//!
//! Run: `cargo +nightly fuzz run server_engine`.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|input: cellgate_fuzz::server_engine::Input| {
    let _ = cellgate_fuzz::server_engine::run(&input);
});
