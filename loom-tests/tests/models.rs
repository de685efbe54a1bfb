//! Every loom model in one test binary (one build of cellgate under `--cfg loom` instead of one
//! per file); each module is one protocol's models, documented at its top.

mod common;

// cellgate-redis's lease pool and its sync module, at the crate root as in their crate (the
// library cannot build under `--cfg loom`: its tokio task and Redis client do not); the models
// are in `fleet_local`.
#[allow(dead_code)]
#[path = "../../cellgate-redis/src/local.rs"]
mod local;
#[allow(dead_code)]
#[path = "../../cellgate-redis/src/sync.rs"]
mod sync;

mod admission;
mod exact_map;
mod fleet_local;
mod gcra_cell;
mod grow_table;
mod http_rows;
mod rollback;
mod setting;
mod sliding_log;
mod stock;
mod striped;
mod sweep_gate;
mod table;
mod warm_up;
mod windows;
