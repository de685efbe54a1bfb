//! The runtime that every keyed fleet limit's batching task runs on: one per process, made when
//! the first limit starts, with a thread per core up to four. A limit's task is one future, so a
//! limit never had more than a thread's worth of work; what a runtime of its own per limit cost
//! was a thread per limit, each waking on its own (a server of many limits ran as many).

use tokio::runtime::{Builder, Runtime};

use crate::error::FleetError;
use crate::sync::Once;

/// The most threads the runtime runs.
const MAX_THREADS: usize = 4;

static KEYED: Once<Result<Runtime, String>> = Once::new();

/// The keyed limits' runtime, made at the first call.
///
/// # Errors
///
/// [`FleetError::Config`] when tokio cannot start it (no threads left to spawn).
pub(crate) fn keyed() -> Result<&'static Runtime, FleetError> {
    KEYED
        .get_or_init(|| {
            let threads = std::thread::available_parallelism()
                .map_or(1, usize::from)
                .min(MAX_THREADS);
            Builder::new_multi_thread()
                .worker_threads(threads)
                .thread_name("cellgate-keyed")
                .enable_all()
                .build()
                .map_err(|e| e.to_string())
        })
        .as_ref()
        .map_err(|e| FleetError::Config(format!("tokio runtime: {e}")))
}
