//! See `src/sliding_window_model.rs` and `fuzz/README.md`.
//!
//! Run: `cargo +nightly fuzz run sliding_window_model`.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|input: cellgate_fuzz::sliding_window_model::Input| {
    cellgate_fuzz::sliding_window_model::run(&input);
});
