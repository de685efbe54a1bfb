//! The runtimes that the fleet limiters' background tasks run on (a keyed limit's batching task,
//! a whole limit's lease task): a few per process, made when the first limiter starts, one
//! thread each, a thread per core up to four; each limiter goes to one of them in turn. A
//! limiter's task is one future, so it never had more than a thread's worth of work; what a
//! runtime of its own per limiter cost was a thread per limiter, each waking on its own (a
//! server of many limits ran as many). Single-threaded runtimes, not one multi-threaded one: a
//! task and its Redis connection's driver stay on one thread, so a Redis answer reaches the task
//! without a hop between threads (on a shared multi-threaded runtime a hot key's lease came back
//! later under load, and its checks were refused meanwhile).

use tokio::runtime::{Builder, Handle};

use crate::error::FleetError;
use crate::sync::{next_sequence, Once};

/// The most runtimes (threads).
const MAX_THREADS: usize = 4;

static RUNTIMES: Once<Result<Vec<Handle>, String>> = Once::new();

/// A runtime for the next limiter (in turn), made at the first call.
///
/// # Errors
///
/// [`FleetError::Config`] when tokio cannot start them (no threads left to spawn).
pub(crate) fn next() -> Result<Handle, FleetError> {
    let all = RUNTIMES
        .get_or_init(|| {
            let threads = std::thread::available_parallelism()
                .map_or(1, usize::from)
                .min(MAX_THREADS);
            (0..threads).map(start).collect()
        })
        .as_ref()
        .map_err(|e| FleetError::Config(format!("tokio runtime: {e}")))?;
    let i = usize::try_from(next_sequence()).unwrap_or(0) % all.len();
    Ok(all[i].clone())
}

/// Starts runtime `i`: its thread drives it for the process's life (its timers, its I/O and the
/// tasks spawned on it through the handle).
fn start(i: usize) -> Result<Handle, String> {
    let runtime = Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    let handle = runtime.handle().clone();
    std::thread::Builder::new()
        .name(format!("cellgate-fleet-{i}"))
        .spawn(move || runtime.block_on(std::future::pending::<()>()))
        .map_err(|e| e.to_string())?;
    Ok(handle)
}
