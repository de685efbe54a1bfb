//! See `lib/src/extreme_config/` and `fuzz/README.md`.
//!
//! Run: `cargo +nightly fuzz run extreme_config`.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|input: cellgate_fuzz::extreme_config::Input| {
    cellgate_fuzz::extreme_config::run(&input);
});
