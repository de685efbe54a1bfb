//! The limiters behind a config: one keyed limiter per configured limit, kept across reloads
//! for limits whose definition did not change, and a bounded pool of limiters for the rates
//! that requests bring in their `limit` override.
//!
//! Memory: `EngineOptions::max_keys` is split into `limits + 1` equal shares: one for each
//! configured limit, and one for the override pool, divided among its
//! `max_override_limits` places (at least one key each). So the engine as a whole holds about
//! `max_keys` keys at most (a limiter at its bound makes room by dropping keys one unit from
//! idle, else refuses new keys: the core's `WhenFull::EvictLight`). A limiter kept across a
//! reload keeps the bound it was built with.

use std::collections::HashMap;
use std::sync::Arc;

use cellgate::clock::Clock;
use cellgate::MAX_TABLE_KEYS;

use crate::config::{Config, RuleSpec};

pub(crate) use super::backend::{Backend, Lim};

/// The limiters of one config, indexed by the config's rule slots.
pub(crate) struct Limiters {
    /// `None` for a spec the core refused: unreachable, since a config's specs are all built
    /// once by its validation, but a limit that cannot be built is skipped (and logged)
    /// rather than taking the server down.
    pub(crate) by_slot: Vec<Option<Arc<Lim>>>,
}

impl Limiters {
    /// The limiters for `config`, taking over from `old` those whose spec did not change.
    pub(crate) fn new(
        config: &Config,
        old: Option<(&Config, &Limiters)>,
        clock: &Arc<dyn Clock>,
        max_keys: usize,
        backend: &Backend,
    ) -> Limiters {
        let mut kept: HashMap<&RuleSpec, &Arc<Lim>> = HashMap::new();
        if let Some((old_config, old_limiters)) = old {
            for (spec, lim) in old_config.slots.iter().zip(&old_limiters.by_slot) {
                if let Some(lim) = lim {
                    kept.insert(spec, lim);
                }
            }
        }
        let share = share(max_keys, config.slots.len() + 1);
        let by_slot = config
            .slots
            .iter()
            .map(|spec| match kept.get(spec) {
                Some(lim) => Some(Arc::clone(lim)),
                None => match backend.build(spec, clock, share) {
                    Ok(lim) => Some(Arc::new(lim)),
                    Err(e) => {
                        tracing::error!(?spec, error = %e, "limit skipped: it cannot be built");
                        None
                    }
                },
            })
            .collect();
        Limiters { by_slot }
    }

    pub(crate) fn len(&self) -> usize {
        self.by_slot.iter().flatten().map(|l| l.len()).sum()
    }

    /// Every limiter built.
    #[cfg(feature = "server")]
    pub(crate) fn all(&self) -> impl Iterator<Item = &Arc<Lim>> {
        self.by_slot.iter().flatten()
    }
}

/// Each limiter's key bound when `max_keys` is shared by `parts` limiters.
pub(crate) fn share(max_keys: usize, parts: usize) -> usize {
    (max_keys / parts.max(1)).clamp(1, MAX_TABLE_KEYS)
}

/// Each override limiter's key bound: the pool's share divided among its places.
pub(crate) fn override_share(max_keys: usize, limits: usize, places: usize) -> usize {
    share(share(max_keys, limits + 1), places)
}
