//! The decisions: matches a request's descriptors against the config and checks the limits,
//! all or nothing.
//!
//! (Interface only; the matching and the limiters are being written.)

use std::sync::Arc;

use crate::api::{Code, DescriptorStatus, RateLimitRequest, RateLimitResponse, RequestError};
use crate::config::Config;

/// Bounds on what one request may hold; a request over any of them is a [`RequestError`].
///
/// # Examples
///
/// ```
/// use cellgate_server::engine::InputLimits;
/// assert!(InputLimits::default().max_descriptors > 0);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct InputLimits {
    /// Descriptors in one request.
    pub max_descriptors: usize,
    /// Entries in one descriptor.
    pub max_entries: usize,
    /// Bytes of one key or value (and of the domain).
    pub max_bytes: usize,
}

impl Default for InputLimits {
    fn default() -> Self {
        InputLimits {
            max_descriptors: 64,
            max_entries: 16,
            max_bytes: 1024,
        }
    }
}

/// How the engine runs.
///
/// # Examples
///
/// ```
/// use cellgate_server::engine::EngineOptions;
/// assert!(!EngineOptions::default().shadow_mode);
/// ```
#[derive(Clone, Copy, Debug)]
pub struct EngineOptions {
    /// Live keys held at most, over all limits (the store evicts past it).
    pub max_keys: usize,
    /// Every limit in shadow mode (ratelimit's `SHADOW_MODE`).
    pub shadow_mode: bool,
    /// The fraction of a limit past which admitted hits count as `near_limit`.
    pub near_limit_ratio: f64,
    /// Bounds on one request.
    pub input: InputLimits,
}

impl Default for EngineOptions {
    fn default() -> Self {
        EngineOptions {
            max_keys: 1_000_000,
            shadow_mode: false,
            near_limit_ratio: 0.8,
            input: InputLimits::default(),
        }
    }
}

/// The rate-limit engine: a config and the limiters' state.
///
/// # Examples
///
/// ```
/// use cellgate_server::config::Config;
/// use cellgate_server::engine::{Engine, EngineOptions};
/// let e = Engine::new(Config::default(), EngineOptions::default());
/// assert_eq!(e.config().dump(), "");
/// ```
pub struct Engine {
    config: Arc<Config>,
}

impl Engine {
    /// An engine over `config`.
    ///
    /// # Examples
    ///
    /// ```
    /// use cellgate_server::{config::Config, engine::{Engine, EngineOptions}};
    /// let _ = Engine::new(Config::default(), EngineOptions::default());
    /// ```
    pub fn new(config: Config, _options: EngineOptions) -> Self {
        Engine {
            config: Arc::new(config),
        }
    }

    /// Decides one request: every descriptor's limits, all or nothing.
    ///
    /// # Errors
    ///
    /// A malformed request (empty domain or descriptors, unknown domain, over an input limit).
    ///
    /// # Examples
    ///
    /// ```
    /// use cellgate_server::{api::RateLimitRequest, config::Config, engine::{Engine, EngineOptions}};
    /// let e = Engine::new(Config::default(), EngineOptions::default());
    /// assert!(e.decide(&RateLimitRequest::default()).is_err());
    /// ```
    pub fn decide(&self, req: &RateLimitRequest) -> Result<RateLimitResponse, RequestError> {
        if req.domain.is_empty() {
            return Err(RequestError::EmptyDomain);
        }
        Ok(RateLimitResponse {
            overall: Code::Ok,
            statuses: req
                .descriptors
                .iter()
                .map(|_| DescriptorStatus::unlimited())
                .collect(),
        })
    }

    /// Swaps in a new config atomically; limits that did not change keep their state.
    ///
    /// # Examples
    ///
    /// ```
    /// use cellgate_server::{config::Config, engine::{Engine, EngineOptions}};
    /// let e = Engine::new(Config::default(), EngineOptions::default());
    /// e.reload(Config::default());
    /// ```
    pub fn reload(&self, _config: Config) {}

    /// The config in force.
    ///
    /// # Examples
    ///
    /// ```
    /// use cellgate_server::{config::Config, engine::{Engine, EngineOptions}};
    /// let e = Engine::new(Config::default(), EngineOptions::default());
    /// assert_eq!(e.config().dump(), "");
    /// ```
    pub fn config(&self) -> Arc<Config> {
        Arc::clone(&self.config)
    }

    /// Live keys held, over all limits.
    ///
    /// # Examples
    ///
    /// ```
    /// use cellgate_server::{config::Config, engine::{Engine, EngineOptions}};
    /// assert_eq!(Engine::new(Config::default(), EngineOptions::default()).len(), 0);
    /// ```
    pub fn len(&self) -> usize {
        0
    }

    /// Whether no key is held.
    ///
    /// # Examples
    ///
    /// ```
    /// use cellgate_server::{config::Config, engine::{Engine, EngineOptions}};
    /// assert!(Engine::new(Config::default(), EngineOptions::default()).is_empty());
    /// ```
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}
