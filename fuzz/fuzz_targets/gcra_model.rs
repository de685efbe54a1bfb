//! GCRA (direct and keyed limiters) against the reference model in `src/gcra_model.rs`.
//!
//! Run: `cargo +nightly fuzz run gcra_model` (see `fuzz/README.md`).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|input: cellgate_fuzz::gcra_model::Input| {
    cellgate_fuzz::gcra_model::run(&input);
});
