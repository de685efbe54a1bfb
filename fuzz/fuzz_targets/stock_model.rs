//! See `src/stock_model.rs` and `fuzz/README.md`.
//!
//! Run: `cargo +nightly fuzz run stock_model`.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|input: cellgate_fuzz::stock_model::Input| {
    cellgate_fuzz::stock_model::run(&input);
});
