//! The decisions: matches a request's descriptors against the config and checks the limits,
//! all or nothing.
//!
//! Every limit is a cellgate keyed limiter whose clock counts from the Unix epoch, so windows
//! are aligned to Unix time. A reload swaps the config and its limiters in one step; limits
//! whose definition (place in the tree, algorithm, rate) did not change keep their counts.

mod backend;
mod decide;
mod input;
mod limiters;
mod matcher;
mod overrides;
#[cfg(feature = "server")]
mod wait;

#[cfg(feature = "server")]
pub(crate) use wait::Awaited;

use std::sync::Arc;

use arc_swap::ArcSwap;
use cellgate::clock::Clock;

use crate::api::{
    Code, Descriptor, DescriptorStatus, RateLimitRequest, RateLimitResponse, RequestError,
};
use crate::clock::UnixClock;
use crate::config::Config;
use backend::Mode;
use decide::{Check, Item, Kind, Ran};
#[cfg(feature = "server")]
pub(crate) use limiters::Lim;
use limiters::{Backend, Limiters};
use overrides::{Overridden, Overrides};

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
    /// Live keys held at most, over all limits: split into equal shares, one per configured
    /// limit and one for the override pool (the stores make room past a share by dropping
    /// keys one unit from idle, else refuse new keys).
    pub max_keys: usize,
    /// Every limit in shadow mode (ratelimit's `SHADOW_MODE`).
    pub shadow_mode: bool,
    /// Every limit in quota mode (ratelimit's `QUOTA_MODE`): a request is refused when a limit
    /// outside quota mode is over, or when every quota-mode limit it charges is.
    pub quota_mode: bool,
    /// The fraction of a limit past which admitted hits count as `near_limit`.
    pub near_limit_ratio: f64,
    /// Bounds on one request.
    pub input: InputLimits,
    /// Distinct rates that descriptors' `limit` overrides may bring (each gets a limiter, kept
    /// for the engine's life); a request bringing one more is refused as
    /// [`RequestError::TooLarge`].
    pub max_override_limits: usize,
}

impl Default for EngineOptions {
    fn default() -> Self {
        EngineOptions {
            max_keys: 1_000_000,
            shadow_mode: false,
            quota_mode: false,
            near_limit_ratio: 0.8,
            input: InputLimits::default(),
            max_override_limits: 64,
        }
    }
}

/// The rate-limit engine: a config and the limiters' state.
///
/// # Examples
///
/// ```
/// use cellgate_server::api::{Code, Descriptor, RateLimitRequest};
/// use cellgate_server::config::Config;
/// use cellgate_server::engine::{Engine, EngineOptions};
/// let config = Config::from_yaml("c.yaml", "domain: edge\ndescriptors:\n  - key: ip\n    rate_limit: {unit: minute, requests_per_unit: 1}\n")?;
/// let e = Engine::new(config, EngineOptions::default());
/// let req = RateLimitRequest {
///     domain: "edge".into(),
///     descriptors: vec![Descriptor::new([("ip", "10.0.0.1")])],
///     hits_addend: 1,
/// };
/// assert_eq!(e.decide(&req)?.overall, Code::Ok);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct Engine {
    state: ArcSwap<Snapshot>,
    overrides: Overrides,
    clock: Arc<dyn Clock>,
    options: EngineOptions,
    backend: Backend,
}

/// A config and its limiters, swapped together.
struct Snapshot {
    config: Arc<Config>,
    limiters: Limiters,
}

impl Engine {
    /// An engine over `config`, on a clock counting from the Unix epoch.
    ///
    /// # Examples
    ///
    /// ```
    /// use cellgate_server::{config::Config, engine::{Engine, EngineOptions}};
    /// let _ = Engine::new(Config::default(), EngineOptions::default());
    /// ```
    pub fn new(config: Config, options: EngineOptions) -> Self {
        Self::with_clock(config, options, UnixClock::new())
    }

    /// An engine over `config` on `clock` (tests drive a `ManualClock`; its time is taken as
    /// nanoseconds since the Unix epoch).
    ///
    /// # Examples
    ///
    /// ```
    /// use cellgate::clock::ManualClock;
    /// use cellgate_server::{config::Config, engine::{Engine, EngineOptions}};
    /// let _ = Engine::with_clock(Config::default(), EngineOptions::default(), ManualClock::new());
    /// ```
    pub fn with_clock(config: Config, options: EngineOptions, clock: impl Clock + 'static) -> Self {
        Self::with_backend(config, options, Arc::new(clock), Backend::Local)
    }

    /// An engine whose every limit (configured or brought by a request's `limit` override) is
    /// shared through Redis by every server running the same configuration (see the README's
    /// fleet section for what each algorithm becomes and the bounds that hold).
    ///
    /// # Errors
    ///
    /// The Redis URL is invalid, or a limit cannot be built in Redis's terms (its first
    /// problem, naming the limit).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use std::time::Duration;
    /// use cellgate_server::{config::Config, engine::{Engine, EngineOptions}, fleet::FleetOptions};
    /// let fleet = FleetOptions::new("redis://127.0.0.1:6379");
    /// let e = Engine::with_fleet(Config::default(), EngineOptions::default(), fleet)?;
    /// e.shutdown();
    /// # Ok::<(), String>(())
    /// ```
    #[cfg(feature = "server")]
    pub fn with_fleet(
        config: Config,
        options: EngineOptions,
        fleet: crate::fleet::FleetOptions,
    ) -> Result<Self, String> {
        let backend = Arc::new(crate::fleet::Backend::new(fleet)?);
        let clock: Arc<dyn Clock> = Arc::new(UnixClock::new());
        let engine = Self::with_backend(config, options, clock, Backend::Fleet(backend));
        let snapshot = engine.state.load();
        let missing = snapshot.limiters.by_slot.iter().position(Option::is_none);
        if let Some(spec) = missing.and_then(|i| snapshot.config.slots.get(i)) {
            return Err(format!(
                "the limit at {} cannot be shared through Redis (the error is logged above)",
                crate::fleet::describe(spec)
            ));
        }
        drop(snapshot);
        Ok(engine)
    }

    fn with_backend(
        config: Config,
        options: EngineOptions,
        clock: Arc<dyn Clock>,
        backend: Backend,
    ) -> Self {
        let limiters = Limiters::new(&config, None, &clock, options.max_keys, &backend);
        let overrides = Overrides::new(
            options.max_override_limits,
            limiters::override_share(
                options.max_keys,
                config.slots.len(),
                options.max_override_limits,
            ),
            Arc::clone(&clock),
            backend.clone(),
        );
        Engine {
            state: ArcSwap::from_pointee(Snapshot {
                config: Arc::new(config),
                limiters,
            }),
            overrides,
            clock,
            options,
            backend,
        }
    }

    /// Decides one request: every descriptor's limits, all or nothing.
    ///
    /// Statuses come in request order. A descriptor charges its own `hits_addend`, else the
    /// request's (more than `u32::MAX` counts as `u32::MAX`, which no limit admits); zero looks
    /// without charging. A descriptor's `limit` override replaces the configured limit (a
    /// fixed window of its unit, never in shadow mode; an override in
    /// [`Unit::Unknown`](crate::api::Unit) is ignored, one of zero requests is always over).
    /// A refused request charges nothing, and reports over the limit the descriptor whose
    /// charge failed and every descriptor whose charge alone would not fit.
    ///
    /// # Errors
    ///
    /// A malformed request (empty domain or descriptors, unknown domain, over an input limit,
    /// one limit override too many).
    ///
    /// # Examples
    ///
    /// ```
    /// use cellgate_server::{api::RateLimitRequest, config::Config, engine::{Engine, EngineOptions}};
    /// let e = Engine::new(Config::default(), EngineOptions::default());
    /// assert!(e.decide(&RateLimitRequest::default()).is_err());
    /// ```
    pub fn decide(&self, req: &RateLimitRequest) -> Result<RateLimitResponse, RequestError> {
        let snapshot = self.state.load();
        let overrides = self.accept(&snapshot, req)?;
        let items = self.items(&snapshot, req, &overrides);
        Ok(match decide::run(&items, self.ratio(), Mode::Wait) {
            Ran::Done(statuses) => response(&items, statuses),
            // A run that may wait always ends (the others come only from runs that may not);
            // were it ever otherwise, the request is refused rather than admitted unchecked.
            Ran::Wait(_) | Ran::Shadowed(..) => refused(req),
        })
    }

    /// The request's checks before any charge: its input within bounds, its domain known,
    /// its limit overrides found (or made).
    fn accept(
        &self,
        snapshot: &Snapshot,
        req: &RateLimitRequest,
    ) -> Result<Vec<Option<Overridden>>, RequestError> {
        input::check(req, &self.options.input)?;
        if !snapshot.config.domains.contains_key(&req.domain) {
            return Err(RequestError::UnknownDomain(req.domain.clone()));
        }
        req.descriptors
            .iter()
            .map(|d| d.limit.as_ref().map_or(Ok(None), |o| self.overrides.get(o)))
            .collect()
    }

    /// The request's descriptors resolved against `snapshot` (its domain known: see
    /// `accept`), the replaced limits dropped.
    fn items<'s>(
        &self,
        snapshot: &'s Snapshot,
        req: &RateLimitRequest,
        overrides: &'s [Option<Overridden>],
    ) -> Vec<Item<'s>> {
        let Some(domain) = snapshot.config.domains.get(&req.domain) else {
            return Vec::new();
        };
        let mut items: Vec<Item<'_>> = req
            .descriptors
            .iter()
            .zip(overrides)
            .map(|(d, o)| self.item(snapshot, &req.domain, &domain.root, req, d, o.as_ref()))
            .collect();
        drop_replaced(&mut items);
        items
    }

    /// The near-limit ratio. In fleet mode what is left of a limit is not known here (Redis
    /// does not say; a lease is this server's part only): near_limit is not counted rather
    /// than counted wrong.
    fn ratio(&self) -> f64 {
        if self.is_fleet() {
            1.0
        } else {
            self.options.near_limit_ratio
        }
    }

    /// The descriptor resolved against the config (or its override).
    fn item<'s>(
        &self,
        snapshot: &'s Snapshot,
        domain: &str,
        root: &'s crate::config::Node,
        req: &RateLimitRequest,
        d: &Descriptor,
        over: Option<&'s Overridden>,
    ) -> Item<'s> {
        let hits = u32::try_from(d.hits_addend.unwrap_or(req.hits_addend)).unwrap_or(u32::MAX);
        let global_shadow = self.options.shadow_mode;
        let global_quota = self.options.quota_mode;
        if let Some(o) = over {
            let key = decide::values_key(
                std::iter::once(domain)
                    .chain(d.entries.iter().flat_map(|(k, v)| [k.as_str(), v.as_str()])),
            );
            let (kind, checks) = match &o.limiter {
                None => (Kind::Zero(o.unit, None), Vec::new()),
                Some(lim) => (
                    Kind::Limited,
                    vec![Check {
                        lim: lim.as_ref(),
                        name: None,
                        requests_per_unit: o.requests_per_unit,
                        unit: o.unit,
                    }],
                ),
            };
            return Item {
                kind,
                checks,
                key,
                stat_key: Arc::from(override_stat_key(domain, d)),
                hits,
                shadow: global_shadow,
                quota: global_quota,
                replaces: Vec::new(),
            };
        }
        let mut item = Item {
            kind: Kind::Nothing,
            checks: Vec::new(),
            key: String::new(),
            stat_key: Arc::from(""),
            hits,
            shadow: global_shadow,
            quota: global_quota,
            replaces: Vec::new(),
        };
        let Some(found) = matcher::find(root, &d.entries) else {
            return item;
        };
        let def = found.def;
        if def.unlimited {
            item.kind = Kind::Unlimited;
            return item;
        }
        item.kind = Kind::Limited;
        item.shadow |= def.shadow_mode;
        item.quota |= def.quota_mode;
        if found.flagged {
            let steps = matcher::path(root, &d.entries);
            let (key, stat) =
                matcher::flagged_keys(domain, &d.entries, &steps, def.detailed_metric);
            item.key = key;
            item.stat_key = if stat == *def.stat_key {
                Arc::clone(&def.stat_key)
            } else {
                Arc::from(stat)
            };
        } else {
            item.key = decide::values_key(d.entries.iter().map(|(_, v)| v.as_str()));
            item.stat_key = if def.detailed_metric {
                Arc::from(detailed_stat_key(domain, d))
            } else {
                Arc::clone(&def.stat_key)
            };
        }
        item.checks = def
            .rules
            .iter()
            .filter_map(|r| {
                let lim = snapshot.limiters.by_slot.get(r.slot?)?.as_deref()?;
                Some(Check {
                    lim,
                    name: r.name.clone(),
                    requests_per_unit: r.requests_per_unit,
                    unit: r.unit,
                })
            })
            .collect();
        item.replaces = def
            .rules
            .iter()
            .flat_map(|r| r.replaces.iter().cloned())
            .collect();
        // `requests_per_unit: 0` stands alone (not in `rate_limits`): every request over it.
        if let Some(zero) = def.rules.iter().find(|r| r.slot.is_none()) {
            item.kind = Kind::Zero(zero.unit, zero.name.clone());
        }
        item
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
    pub fn reload(&self, config: Config) {
        let config = Arc::new(config);
        // Built from the snapshot it replaces, and built again if another reload got in
        // first: two racing reloads never drop the state the first one carried over.
        self.state.rcu(|old| Snapshot {
            config: Arc::clone(&config),
            limiters: Limiters::new(
                &config,
                Some((&old.config, &old.limiters)),
                &self.clock,
                self.options.max_keys,
                &self.backend,
            ),
        });
    }

    /// Whether the limits are shared through Redis (a check may wait on it, up to its bound).
    ///
    /// # Examples
    ///
    /// ```
    /// use cellgate_server::{config::Config, engine::{Engine, EngineOptions}};
    /// assert!(!Engine::new(Config::default(), EngineOptions::default()).is_fleet());
    /// ```
    pub fn is_fleet(&self) -> bool {
        !matches!(self.backend, Backend::Local)
    }

    /// Every limiter in force: the config's and the overrides'.
    #[cfg(feature = "server")]
    fn each_limiter(&self) -> Vec<Arc<limiters::Lim>> {
        let mut all: Vec<Arc<limiters::Lim>> = self.state.load().limiters.all().cloned().collect();
        all.extend(self.overrides.all());
        all
    }

    /// In fleet mode, how Redis answers the limits in force (`None`: the limits are local).
    #[cfg(feature = "server")]
    pub(crate) fn fleet_report(&self) -> Option<crate::fleet::Report> {
        let Backend::Fleet(backend) = &self.backend else {
            return None;
        };
        let limiters = self.each_limiter();
        Some(
            backend.report(limiters.iter().filter_map(|l| match l.as_ref() {
                Lim::Fleet(f) => Some(f),
                _ => None,
            })),
        )
    }

    /// Hands back what the fleet limits hold leased and stops their background tasks; checks
    /// afterwards are refused. Nothing to do for local limits.
    ///
    /// # Examples
    ///
    /// ```
    /// use cellgate_server::{config::Config, engine::{Engine, EngineOptions}};
    /// Engine::new(Config::default(), EngineOptions::default()).shutdown();
    /// ```
    #[cfg(feature = "server")]
    pub fn shutdown(&self) {
        for lim in self.each_limiter() {
            if let limiters::Lim::Fleet(f) = lim.as_ref() {
                f.fleet().shutdown();
            }
        }
    }

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
        Arc::clone(&self.state.load().config)
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
        self.state.load().limiters.len() + self.overrides.len()
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

/// The answer of `statuses`, in request order.
fn response(items: &[Item<'_>], statuses: Vec<DescriptorStatus>) -> RateLimitResponse {
    RateLimitResponse {
        overall: decide::overall(items, &statuses),
        statuses,
    }
}

/// Every descriptor of `req` over the limit.
fn refused(req: &RateLimitRequest) -> RateLimitResponse {
    RateLimitResponse {
        overall: Code::OverLimit,
        statuses: (req.descriptors.iter())
            .map(|_| DescriptorStatus {
                code: Code::OverLimit,
                ..DescriptorStatus::unlimited()
            })
            .collect(),
    }
}

/// ratelimit's `replaces`: a named limit that another matched limit of the request replaces
/// is dropped.
fn drop_replaced(items: &mut [Item<'_>]) {
    let replaced: Vec<Arc<str>> = items
        .iter()
        .flat_map(|it| it.replaces.iter().cloned())
        .collect();
    if replaced.is_empty() {
        return;
    }
    for it in items.iter_mut() {
        if let Kind::Zero(_, Some(name)) = &it.kind
            && replaced.contains(name)
        {
            it.kind = Kind::Nothing;
        }
        if !matches!(it.kind, Kind::Limited) {
            continue;
        }
        it.checks
            .retain(|c| c.name.as_ref().is_none_or(|n| !replaced.contains(n)));
        if it.checks.is_empty() {
            it.kind = Kind::Nothing;
        }
    }
}

/// ratelimit's metric key under `detailed_metric`: the request's keys and values.
fn detailed_stat_key(domain: &str, d: &Descriptor) -> String {
    let size = d
        .entries
        .iter()
        .map(|(k, v)| k.len() + v.len() + 2)
        .sum::<usize>();
    let mut key = String::with_capacity(domain.len() + size);
    key.push_str(domain);
    for (k, v) in &d.entries {
        key.push('.');
        key.push_str(k);
        key.push('_');
        key.push_str(v);
    }
    key
}

/// ratelimit's metric key of an override: the request's keys, with their values when not empty.
fn override_stat_key(domain: &str, d: &Descriptor) -> String {
    let parts: Vec<String> = d
        .entries
        .iter()
        .map(|(k, v)| {
            if v.is_empty() {
                k.clone()
            } else {
                format!("{k}_{v}")
            }
        })
        .collect();
    format!("{domain}.{}", parts.join("."))
}
