//! See `src/ceiling_model.rs` and `fuzz/README.md`.
//!
//! Run: `cargo +nightly fuzz run ceiling_model`.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|input: cellgate_fuzz::ceiling_model::Input| {
    cellgate_fuzz::ceiling_model::run(&input);
});
