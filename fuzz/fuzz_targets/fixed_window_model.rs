//! See `src/fixed_window_model.rs` and `fuzz/README.md`.
//!
//! Run: `cargo +nightly fuzz run fixed_window_model`.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|input: cellgate_fuzz::fixed_window_model::Input| {
    cellgate_fuzz::fixed_window_model::run(&input);
});
