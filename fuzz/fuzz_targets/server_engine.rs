//! See `lib/src/server_engine/mod.rs` (the input, the model and the driver).
//!
//! Run: `cargo +nightly fuzz run server_engine`.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|input: cellgate_fuzz::server_engine::Input| {
    let _ = cellgate_fuzz::server_engine::run(&input);
});
