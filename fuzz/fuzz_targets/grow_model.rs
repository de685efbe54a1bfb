//! The growing table against the exact map (`src/grow_model.rs`).
//!
//! Run: `cargo +nightly fuzz run grow_model` (see `fuzz/README.md`).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|input: cellgate_fuzz::grow_model::Input| {
    cellgate_fuzz::grow_model::run(&input);
});
