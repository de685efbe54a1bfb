//! See `src/warm_up_model.rs` and `fuzz/README.md`.
//!
//! Run: `cargo +nightly fuzz run warm_up_model`.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|input: cellgate_fuzz::warm_up_model::Input| {
    cellgate_fuzz::warm_up_model::run(&input);
});
