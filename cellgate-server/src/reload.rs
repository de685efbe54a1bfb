//! Reloads what the server reads from files when they change: the configuration, and (feature
//! `tls`) the gRPC listener's certificate, key and client authority.
//!
//! The watch is on directories (the config directory itself, or a file's parent), not on the
//! files: editors replace a file by renaming a new one over it, and Kubernetes updates a
//! ConfigMap or Secret volume by swapping its `..data` symlink, and a watch on the old file
//! sees neither. Events are debounced, then everything is read again: a valid set replaces the
//! one in force; an invalid one is logged with the reason, counted, and ignored.

use std::ffi::OsString;
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

/// Reloads the configuration at `path` (a file or a directory) into `engine` when it changes;
/// the task ends when `shutdown` changes.
///
/// # Errors
///
/// The watch could not be set up (the path does not exist, no inotify instances left).
pub(crate) fn spawn(
    path: PathBuf,
    merge_domains: bool,
    engine: Arc<Engine>,
    metrics: Arc<Metrics>,
    shutdown: watch::Receiver<bool>,
) -> notify::Result<()> {
    let watched = path.clone();
    // The swap runs off the runtime's workers: in fleet mode it starts the new limits' tasks
    // and hands back the removed ones' leases (blocking joins).
    on_change(&[watched], shutdown, move || {
        match config::load_merging(&path, merge_domains).map(|cfg| engine.reload(cfg)) {
            Ok(()) => {
                metrics.config_load_success.add(1);
                tracing::info!(path = %path.display(), "configuration reloaded");
            }
            Err(e) => {
                metrics.config_load_error.add(1);
                tracing::error!(
                    file = %e.file, place = %e.place, message = %e.message,
                    "configuration refused; the previous one stays in force"
                );
            }
        }
    })
}

/// Runs `apply` (on a blocking thread, one run at a time) once the files at `paths` have
/// changed and been quiet for [`DEBOUNCE`]; the task ends when `shutdown` changes. A
/// directory among `paths` is watched whole (recursively); a file, through its directory, for
/// events about it or about a ConfigMap's `..` entries.
///
/// # Errors
///
/// The watch could not be set up (a path does not exist, no inotify instances left).
pub(crate) fn on_change(
    paths: &[PathBuf],
    mut shutdown: watch::Receiver<bool>,
    apply: impl Fn() + Send + Sync + 'static,
) -> notify::Result<()> {
    // One pending signal is enough: every reload reads everything again.
    let (tx, mut rx) = mpsc::channel::<()>(1);
    let mut dirs: Vec<(PathBuf, RecursiveMode)> = Vec::new();
    // The files' names; `None` once a directory is watched whole (every event counts).
    let mut names: Option<Vec<OsString>> = Some(Vec::new());
    for path in paths {
        if path.is_dir() {
            dirs.push((path.clone(), RecursiveMode::Recursive));
            names = None;
            continue;
        }
        let parent = path.parent().filter(|p| !p.as_os_str().is_empty());
        let dir = parent.unwrap_or(Path::new(".")).to_owned();
        if !dirs.iter().any(|(d, _)| *d == dir) {
            dirs.push((dir, RecursiveMode::NonRecursive));
        }
        if let (Some(names), Some(name)) = (names.as_mut(), path.file_name()) {
            names.push(name.to_owned());
        }
    }
    let mut watcher = RecommendedWatcher::new(
        move |res: notify::Result<Event>| {
            if let Ok(ev) = res
                && relevant(&ev, names.as_deref())
            {
                let _ = tx.try_send(());
            }
        },
        notify::Config::default(),
    )?;
    for (dir, mode) in &dirs {
        watcher.watch(dir, *mode)?;
    }
    let apply = Arc::new(apply);
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
            let apply = Arc::clone(&apply);
            if let Err(e) = tokio::task::spawn_blocking(move || apply()).await {
                tracing::error!(error = %e, "reload task failed");
            }
        }
    });
    Ok(())
}

/// Whether an event may change what is watched: not a read (loading the files is one), and,
/// when watching files through their directories, about one of the files (`names`) or a
/// ConfigMap's `..` entries.
fn relevant(ev: &Event, names: Option<&[OsString]>) -> bool {
    if matches!(ev.kind, EventKind::Access(_)) {
        return false;
    }
    let Some(names) = names else {
        return true;
    };
    ev.paths.iter().any(|p| {
        p.file_name().is_some_and(|n| {
            names.iter().any(|name| n == name) || n.to_string_lossy().starts_with("..")
        })
    })
}
