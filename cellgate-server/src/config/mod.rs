//! The limits configuration: envoyproxy/ratelimit's YAML (a file or a directory of files), plus
//! cellgate's documented extensions.
//!
//! ratelimit's format: a `domain` and a tree of `descriptors`, each a `key`, an optional
//! `value` (with a `*` anywhere, a wildcard: `files/*`, `*.pdf`, `/api/*/orders`), an optional
//! `rate_limit` (`unit`, `requests_per_unit`, `unlimited`, `name`, `replaces`), `shadow_mode`,
//! `detailed_metric`, `value_to_metric`, `share_threshold` (a wildcard's values share one
//! limit), `metadata` (accepted, not used) and nested `descriptors`; `quota_mode: true` is
//! refused (not supported). Extensions, on a `rate_limit`: `algorithm` (`fixed_window`, the
//! default; `gcra` with an optional `burst`; `sliding_window`; `stock`), `period` (a duration
//! such as `500ms`, `30s`, `5m`, `2h`, `1d`, instead of `unit`); on a descriptor, `rate_limits`
//! (a list of limits that must all admit) instead of `rate_limit`.
//!
//! Two files of one domain are refused, as ratelimit refuses them, naming both files; with
//! ratelimit's `MERGE_DOMAIN_CONFIG` ([`load_merging`]) their descriptors make one domain, a
//! composite key in both refused as a duplicate.

mod build;
mod dump;
mod files;
mod limiter;
mod period;
pub mod yaml;

pub(crate) use limiter::{build, check_spec, LocalLim};

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use crate::api::Unit;

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
pub struct Config {
    pub(crate) domains: BTreeMap<String, Domain>,
    /// Every limit of every domain, indexed by [`Rule::slot`].
    pub(crate) slots: Vec<RuleSpec>,
}

impl Config {
    /// The loaded configuration as text, for `GET /rlconfig`: one line per limit, as ratelimit
    /// prints it (`domain.key_value: unit=MINUTE requests_per_unit=100, shadow_mode: false, quota_mode: false`),
    /// with the extensions' fields after it; domains and descriptors sorted.
    ///
    /// # Examples
    ///
    /// ```
    /// use cellgate_server::config::Config;
    /// assert_eq!(Config::default().dump(), "");
    /// ```
    pub fn dump(&self) -> String {
        dump::dump(self)
    }

    /// Parses one YAML document as if it were the file `name` (for tests and tools).
    ///
    /// # Errors
    ///
    /// As [`load`].
    ///
    /// # Examples
    ///
    /// ```
    /// use cellgate_server::config::Config;
    /// let c = Config::from_yaml("a.yaml", "domain: d\ndescriptors: [{key: k, rate_limit: {unit: second, requests_per_unit: 1}}]")?;
    /// assert!(c.domains().any(|d| d == "d"));
    /// # Ok::<(), cellgate_server::config::ConfigError>(())
    /// ```
    pub fn from_yaml(name: &str, text: &str) -> Result<Config, ConfigError> {
        let mut builder = build::Builder::default();
        builder.add_text(name, text)?;
        Ok(builder.finish())
    }

    /// Builds a config from documents already parsed (the fuzz target's path).
    ///
    /// # Errors
    ///
    /// As [`load`].
    ///
    /// # Examples
    ///
    /// ```
    /// use cellgate_server::config::{yaml::RawRoot, Config};
    /// let root = RawRoot { domain: Some("d".into()), descriptors: vec![] };
    /// assert!(Config::from_roots([("a.yaml", root)]).is_ok());
    /// ```
    pub fn from_roots<'a>(
        roots: impl IntoIterator<Item = (&'a str, yaml::RawRoot)>,
    ) -> Result<Config, ConfigError> {
        let mut builder = build::Builder::default();
        for (name, root) in roots {
            builder.add_root(name, root)?;
        }
        Ok(builder.finish())
    }

    /// The configured domains, sorted.
    ///
    /// # Examples
    ///
    /// ```
    /// use cellgate_server::config::Config;
    /// assert_eq!(Config::default().domains().count(), 0);
    /// ```
    pub fn domains(&self) -> impl Iterator<Item = &str> {
        self.domains.keys().map(String::as_str)
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

/// Loads a YAML file, or every `.yaml`/`.yml` file of a directory.
///
/// A directory's files are read in name order; entries whose name starts with `.` are skipped
/// (a Kubernetes ConfigMap mount holds each file twice, once under `..data/` and once as a
/// link beside it), and subdirectories are not entered. Links are followed. A domain in two
/// files is refused (see [`load_merging`]).
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
    load_merging(path, false)
}

/// As [`load`]; with `merge_domains` (ratelimit's `MERGE_DOMAIN_CONFIG`) the files of one
/// domain add their descriptors to it, in name order, rather than being refused: a descriptor
/// whose composite key (`key_value` at the top level) an earlier file already gave is refused
/// as a duplicate, naming the later file, as ratelimit does.
///
/// # Errors
///
/// As [`load`].
///
/// # Examples
///
/// ```
/// use cellgate_server::config::load_merging;
/// assert!(load_merging(std::path::Path::new("/nonexistent/config"), true).is_err());
/// ```
pub fn load_merging(path: &Path, merge_domains: bool) -> Result<Config, ConfigError> {
    let mut builder = build::Builder::merging(merge_domains);
    for file in files::list(path)? {
        let text = std::fs::read_to_string(&file).map_err(|e| ConfigError {
            file: file.display().to_string(),
            place: String::new(),
            message: format!("cannot read: {e}"),
        })?;
        builder.add_text(&file.display().to_string(), &text)?;
    }
    Ok(builder.finish())
}

/// One domain's tree.
#[derive(Clone, Debug)]
pub(crate) struct Domain {
    /// The file it came from (the first, when files are merged).
    pub(crate) file: String,
    pub(crate) root: Node,
}

/// A level of the tree: an optional limit and the descriptors under it, by key.
#[derive(Clone, Debug, Default)]
pub(crate) struct Node {
    pub(crate) limit: Option<LimitDef>,
    pub(crate) children: HashMap<String, Children>,
    /// `value_to_metric`: the metric key takes the request's value for this level.
    pub(crate) value_to_metric: bool,
    /// `share_threshold` (a wildcard node): every value it matches shares one limiter key.
    pub(crate) share_threshold: bool,
}

/// A wildcard value: `*` matches any run of characters (none included), anywhere and any
/// number of times, as in ratelimit (`files/*`, `*.pdf`, `a*b*c`).
#[derive(Clone, Debug)]
pub(crate) struct Pattern {
    /// The value as configured.
    pub(crate) text: String,
    /// The text between the `*`s (at least two parts).
    parts: Vec<String>,
}

impl Pattern {
    /// `value` as a pattern, if it has a `*`.
    pub(crate) fn new(value: &str) -> Option<Pattern> {
        value.contains('*').then(|| Pattern {
            text: value.to_owned(),
            parts: value.split('*').map(str::to_owned).collect(),
        })
    }

    /// Whether `value` matches: it starts with the first part, ends with the last, and holds the
    /// others in order between them, none overlapping.
    pub(crate) fn matches(&self, value: &str) -> bool {
        let (Some(first), Some(last)) = (self.parts.first(), self.parts.last()) else {
            return false;
        };
        let fixed: usize = self.parts.iter().map(String::len).sum();
        if value.len() < fixed
            || !value.starts_with(first.as_str())
            || !value.ends_with(last.as_str())
        {
            return false;
        }
        // In bounds: the value is at least as long as the first and last parts together.
        let mut rest = &value[first.len()..value.len() - last.len()];
        for part in &self.parts[1..self.parts.len() - 1] {
            match rest.find(part.as_str()) {
                Some(at) => rest = &rest[at + part.len()..],
                None => return false,
            }
        }
        true
    }
}

/// The descriptors of one key at one level.
#[derive(Clone, Debug, Default)]
pub(crate) struct Children {
    /// `key` + `value`.
    pub(crate) exact: HashMap<String, Node>,
    /// `key` + a value with `*`s, in file order (the first that matches wins).
    pub(crate) wildcards: Vec<(Pattern, Node)>,
    /// `key` alone.
    pub(crate) any: Option<Box<Node>>,
}

/// The limits of one descriptor.
#[derive(Clone, Debug)]
pub(crate) struct LimitDef {
    pub(crate) unlimited: bool,
    pub(crate) shadow_mode: bool,
    /// ratelimit's quota mode: over this limit, the request is refused only when every quota
    /// descriptor it charges is over (see the engine's `decide`).
    pub(crate) quota_mode: bool,
    pub(crate) detailed_metric: bool,
    /// ratelimit's metric key for the descriptor (`domain.key_value.key`).
    pub(crate) stat_key: Arc<str>,
    pub(crate) rules: Vec<Rule>,
}

/// One limit of a descriptor.
#[derive(Clone, Debug)]
pub(crate) struct Rule {
    /// Its limiter's spec in [`Config::slots`]; `None`: `requests_per_unit: 0`, every request
    /// over it (ratelimit's way to refuse a descriptor outright), with no state to keep.
    pub(crate) slot: Option<usize>,
    pub(crate) requests_per_unit: u32,
    pub(crate) unit: Unit,
    pub(crate) name: Option<Arc<str>>,
    pub(crate) replaces: Vec<Arc<str>>,
}

/// The algorithms a limit can use.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Algorithm {
    FixedWindow,
    Gcra { burst: u32 },
    SlidingWindow,
    Stock,
}

/// What a limiter is built from, and what identifies its state across reloads: the same
/// place in the same domain's tree with the same definition keeps its counts.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) struct RuleSpec {
    /// The domain, then each level's key and value.
    pub(crate) path: Vec<(String, Option<String>)>,
    /// The position in the descriptor's `rate_limits`.
    pub(crate) index: usize,
    pub(crate) algorithm: Algorithm,
    pub(crate) requests_per_unit: u32,
    /// Zero for a stock.
    pub(crate) period: Duration,
}
