//! One fleet process; the program lives in `src/bin/fleet_node.rs` (also a binary, so the
//! tests can start it), see there.
include!("../src/bin/fleet_node.rs");
