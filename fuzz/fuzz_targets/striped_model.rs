//! See `src/striped_model.rs` and `fuzz/README.md`.
//!
//! Run: `cargo +nightly fuzz run striped_model`.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|input: cellgate_fuzz::striped_model::Input| {
    cellgate_fuzz::striped_model::run(&input);
});
