//! Loom model checks of cellgate live in `tests/`; this library only holds a guard.
//!
//! Run them with `RUSTFLAGS="--cfg loom" LOOM_MAX_PREEMPTIONS=3 cargo test --release`
//! (see `README.md`).

#![forbid(unsafe_code)]

// Without `--cfg loom` cellgate compiles against std atomics and loom would explore nothing:
// refuse to build rather than pass vacuously.
#[cfg(not(loom))]
compile_error!(
    "cellgate-loom-tests must be built with RUSTFLAGS=\"--cfg loom\" \
     (see loom-tests/README.md)"
);
