//! The limits configuration: envoyproxy/ratelimit's YAML (a file or a directory of files), plus
//! cellgate's documented extensions.
//!
//! (Interface only; the parser and validation are being written.)

use std::path::Path;

/// A loaded, validated configuration: every domain with its descriptors and limits.
///
/// # Examples
///
/// ```
/// use cellgate_server::config::Config;
/// let c = Config::default();
/// assert!(c.dump().is_empty());
/// ```
#[derive(Clone, Debug, Default)]
pub struct Config {}

impl Config {
    /// The loaded configuration as text, for `GET /rlconfig`.
    ///
    /// # Examples
    ///
    /// ```
    /// use cellgate_server::config::Config;
    /// assert_eq!(Config::default().dump(), "");
    /// ```
    pub fn dump(&self) -> String {
        String::new()
    }
}

/// Why a configuration was refused: the file, the place in it, and what is wrong.
///
/// # Examples
///
/// ```
/// use cellgate_server::config::ConfigError;
/// let e = ConfigError { file: "a.yaml".into(), place: "descriptors[0]".into(), message: "bad unit".into() };
/// assert!(e.to_string().contains("a.yaml"));
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfigError {
    /// The file.
    pub file: String,
    /// Where in the file (a path such as `descriptors[1].rate_limit.unit`, or a line).
    pub place: String,
    /// What is wrong.
    pub message: String,
}

impl std::fmt::Display for ConfigError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}: {}", self.file, self.place, self.message)
    }
}

impl std::error::Error for ConfigError {}

/// Loads a YAML file, or every `.yaml`/`.yml` file of a directory (domains merged).
///
/// # Errors
///
/// The first problem found, with its file and place.
///
/// # Examples
///
/// ```
/// use cellgate_server::config::load;
/// assert!(load(std::path::Path::new("/nonexistent/config")).is_err());
/// ```
pub fn load(path: &Path) -> Result<Config, ConfigError> {
    Err(ConfigError {
        file: path.display().to_string(),
        place: String::new(),
        message: "not implemented yet".into(),
    })
}
