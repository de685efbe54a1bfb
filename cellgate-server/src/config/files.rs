//! Which files a config path names.

use std::path::{Path, PathBuf};

use super::ConfigError;

/// `path` itself when it is a file; else its `.yaml`/`.yml` files (links followed), sorted by
/// name, skipping hidden entries (a ConfigMap's `..data` and `..<timestamp>` directories hold
/// the same files as the links beside them).
pub(crate) fn list(path: &Path) -> Result<Vec<PathBuf>, ConfigError> {
    let error = |message: String| ConfigError {
        file: path.display().to_string(),
        place: String::new(),
        message,
    };
    let meta = std::fs::metadata(path).map_err(|e| error(format!("cannot read: {e}")))?;
    if !meta.is_dir() {
        return Ok(vec![path.to_path_buf()]);
    }
    let entries = std::fs::read_dir(path).map_err(|e| error(format!("cannot list: {e}")))?;
    let mut files = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|e| error(format!("cannot list: {e}")))?;
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        let yaml = name.ends_with(".yaml") || name.ends_with(".yml");
        if name.starts_with('.') || !yaml {
            continue;
        }
        let file = entry.path();
        // A dangling link or a subdirectory named *.yaml is not a config file.
        if std::fs::metadata(&file).is_ok_and(|m| m.is_file()) {
            files.push(file);
        }
    }
    files.sort();
    Ok(files)
}
