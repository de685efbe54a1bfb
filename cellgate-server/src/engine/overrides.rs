//! The limiters of descriptors' `limit` overrides: one fixed-window limiter per distinct rate
//! (requests per unit, unit), created on first use and kept for the engine's life (reloads do
//! not touch them), at most `EngineOptions::max_override_limits` of them.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use cellgate::clock::Clock;

use super::limiters::{Backend, Lim};
use crate::api::{LimitOverride, RequestError, Unit};
use crate::config::{Algorithm, RuleSpec};

/// A descriptor's override, resolved.
pub(crate) struct Overridden {
    /// `None` for zero requests per unit (always over the limit).
    pub(crate) limiter: Option<Arc<Lim>>,
    pub(crate) requests_per_unit: u32,
    pub(crate) unit: Unit,
}

/// The pool. Reads are a lock-free snapshot; a new rate copies the map (rare: at most
/// `max` times in the engine's life).
pub(crate) struct Overrides {
    map: ArcSwap<HashMap<(u32, Unit), Arc<Lim>>>,
    max: usize,
    keys_each: usize,
    clock: Arc<dyn Clock>,
    backend: Backend,
}

impl Overrides {
    pub(crate) fn new(
        max: usize,
        keys_each: usize,
        clock: Arc<dyn Clock>,
        backend: Backend,
    ) -> Self {
        Overrides {
            map: ArcSwap::from_pointee(HashMap::new()),
            max,
            keys_each,
            clock,
            backend,
        }
    }

    /// The limiter for `o` (`None`: an override in an unknown unit, which cannot be counted,
    /// so the config's limit applies).
    ///
    /// # Errors
    ///
    /// [`RequestError::TooLarge`] when the pool is full and `o` is a new rate, or when the
    /// rate is more than a fixed window of its unit can count.
    pub(crate) fn get(&self, o: &LimitOverride) -> Result<Option<Overridden>, RequestError> {
        let Some(seconds) = o.unit.seconds() else {
            return Ok(None);
        };
        let resolved = |limiter| Overridden {
            limiter,
            requests_per_unit: o.requests_per_unit,
            unit: o.unit,
        };
        if o.requests_per_unit == 0 {
            return Ok(Some(resolved(None)));
        }
        let rate = (o.requests_per_unit, o.unit);
        if let Some(l) = self.map.load().get(&rate) {
            return Ok(Some(resolved(Some(Arc::clone(l)))));
        }
        let full = || RequestError::TooLarge {
            what: "distinct limit overrides".into(),
            limit: self.max,
        };
        if self.map.load().len() >= self.max {
            return Err(full());
        }
        let spec = RuleSpec {
            path: Vec::new(),
            index: 0,
            algorithm: Algorithm::FixedWindow,
            requests_per_unit: o.requests_per_unit,
            period: Duration::from_secs(seconds),
        };
        let built = self
            .backend
            .build(&spec, &self.clock, self.keys_each)
            .map_err(|e| RequestError::TooLarge {
                what: format!("requests per unit in a limit override ({e})"),
                limit: u32::MAX as usize,
            })?;
        let built = Arc::new(built);
        self.map.rcu(|map| {
            if map.contains_key(&rate) || map.len() >= self.max {
                Arc::clone(map)
            } else {
                let mut grown = HashMap::clone(map);
                grown.insert(rate, Arc::clone(&built));
                Arc::new(grown)
            }
        });
        let found = self.map.load().get(&rate).cloned().ok_or_else(full)?;
        Ok(Some(resolved(Some(found))))
    }

    /// Keys held over all the pool's limiters.
    pub(crate) fn len(&self) -> usize {
        self.map.load().values().map(|l| l.len()).sum()
    }

    /// Every override limiter built so far.
    #[cfg(feature = "server")]
    pub(crate) fn all(&self) -> Vec<Arc<Lim>> {
        self.map.load().values().cloned().collect()
    }
}
