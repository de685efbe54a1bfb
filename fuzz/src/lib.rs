//! Reference models and drivers for cellgate's fuzz targets.
//!
//! Each module holds one target's structured input (derived with `arbitrary`), a reference
//! model written from `DESIGN.md` (not from the implementation), and a `run` function that
//! replays an input against the real limiters and the model and panics on the first
//! difference. The targets in `fuzz_targets/` are one-line wrappers, so a crash input can also
//! be replayed from a plain test or debugger.

pub mod gcra_model;
