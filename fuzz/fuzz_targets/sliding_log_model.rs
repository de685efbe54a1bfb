//! See `src/sliding_log_model.rs` and `fuzz/README.md`.
//!
//! Run: `cargo +nightly fuzz run sliding_log_model`.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|input: cellgate_fuzz::sliding_log_model::Input| {
    cellgate_fuzz::sliding_log_model::run(&input);
});
