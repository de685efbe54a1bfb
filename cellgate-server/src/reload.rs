//! Reloads the configuration when its files change.
//!
//! The watch is on the directory (the config directory itself, or the file's parent), not on
//! the files: editors replace a file by renaming a new one over it, and Kubernetes updates a
//! ConfigMap volume by swapping its `..data` symlink, and a watch on the old file sees neither.
//! Events are debounced, then the whole configuration is loaded again: a valid one replaces
//! the one in force; an invalid one is logged with its file and place, counted, and ignored.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use notify::{Event, EventKind, RecommendedWatcher, RecursiveMode, Watcher};
use tokio::sync::{mpsc, watch};

use crate::config;
use crate::engine::Engine;
use crate::metrics::Metrics;

/// How long the files must be quiet before a reload: a ConfigMap swap or an editor's save is
/// several events.
const DEBOUNCE: Duration = Duration::from_millis(200);

/// Starts watching `path`; the task ends when `shutdown` changes.
///
/// # Errors
///
/// The watch could not be set up (the path does not exist, no inotify instances left).
pub(crate) fn spawn(
    path: PathBuf,
    engine: Arc<Engine>,
    metrics: Arc<Metrics>,
    mut shutdown: watch::Receiver<bool>,
) -> notify::Result<()> {
    // One pending signal is enough: every reload reads everything again.
    let (tx, mut rx) = mpsc::channel::<()>(1);
    let is_dir = path.is_dir();
    let file_name = (!is_dir)
        .then(|| path.file_name().map(|n| n.to_owned()))
        .flatten();
    let mut watcher = RecommendedWatcher::new(
        move |res: notify::Result<Event>| {
            if let Ok(ev) = res
                && relevant(&ev, file_name.as_deref())
            {
                let _ = tx.try_send(());
            }
        },
        notify::Config::default(),
    )?;
    let (dir, mode) = if is_dir {
        (path.clone(), RecursiveMode::Recursive)
    } else {
        let parent = path.parent().filter(|p| !p.as_os_str().is_empty());
        (
            parent.unwrap_or(Path::new(".")).to_owned(),
            RecursiveMode::NonRecursive,
        )
    };
    watcher.watch(&dir, mode)?;
    tokio::spawn(async move {
        // The watcher lives as long as this task.
        let _watcher = watcher;
        loop {
            tokio::select! {
                _ = shutdown.changed() => return,
                got = rx.recv() => if got.is_none() { return },
            }
            // Quiet period: wait until no event came for DEBOUNCE.
            while let Ok(Some(())) = tokio::time::timeout(DEBOUNCE, rx.recv()).await {}
            let p = path.clone();
            let e = Arc::clone(&engine);
            // The swap too runs off the runtime's workers: in fleet mode it starts the new
            // limits' tasks and hands back the removed ones' leases (blocking joins).
            let loaded =
                tokio::task::spawn_blocking(move || config::load(&p).map(|cfg| e.reload(cfg)))
                    .await;
            match loaded {
                Ok(Ok(())) => {
                    metrics.config_load_success.add(1);
                    tracing::info!(path = %path.display(), "configuration reloaded");
                }
                Ok(Err(e)) => {
                    metrics.config_load_error.add(1);
                    tracing::error!(
                        file = %e.file, place = %e.place, message = %e.message,
                        "configuration refused; the previous one stays in force"
                    );
                }
                Err(e) => tracing::error!(error = %e, "configuration load task failed"),
            }
        }
    });
    Ok(())
}

/// Whether an event may change the configuration: not a read (loading the files is one), and,
/// when watching one file's directory, about that file or a ConfigMap's `..` entries.
fn relevant(ev: &Event, file_name: Option<&std::ffi::OsStr>) -> bool {
    if matches!(ev.kind, EventKind::Access(_)) {
        return false;
    }
    let Some(name) = file_name else {
        return true;
    };
    ev.paths.iter().any(|p| {
        p.file_name()
            .is_some_and(|n| n == name || n.to_string_lossy().starts_with(".."))
    })
}
