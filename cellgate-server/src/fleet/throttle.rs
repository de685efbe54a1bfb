//! `CL.THROTTLE` in fleet mode: one keyed fleet rate per parameter set (`max_burst`, `count`,
//! `period`), keyed by the call's key, created on first use and kept for the listener's life,
//! at most `max` of them (a call bringing one more gets an error reply: refusing is
//! predictable, where dropping a set in use would hand back its leases under load).
//!
//! The rate is redis-cell's: one unit per emission interval `T` (in whole microseconds,
//! rounded up, as cellgate-redis keeps it) with a burst of `max_burst + 1`. Whether a call is
//! `limited` is the fleet's decision. The other integers are this server's view: `remaining`
//! is what it holds leased for the key (0 for a key it checks in Redis), `retry_after` the wait
//! Redis reports for a denial (`-1` when unknown), `reset_after` 0 when admitted and
//! `retry_after` when limited.

use std::borrow::Cow;
use std::collections::HashMap;
use std::fmt::Write;
use std::sync::Arc;
use std::time::{Duration, Instant};

use arc_swap::ArcSwap;
use cellgate::{AnyLimiter, Decision};
use cellgate_redis::KeyedFleet;

use super::{start, Backend, FleetOptions};
use crate::resp::throttle::{Params, Reply};

/// The fleet rates of `CL.THROTTLE` calls, by `(limit, interval_ns)`.
pub(crate) struct Throttles {
    map: ArcSwap<HashMap<(u32, i64), Arc<KeyedFleet>>>,
    max: usize,
    max_hot: usize,
    options: FleetOptions,
}

impl Throttles {
    /// At most `max` parameter sets, each keeping at most `max_hot` keys leased here.
    ///
    /// # Errors
    ///
    /// As [`Backend::new`].
    pub(crate) fn new(options: FleetOptions, max: usize, max_hot: usize) -> Result<Self, String> {
        let options = Backend::new(options)?.options;
        Ok(Throttles {
            map: ArcSwap::from_pointee(HashMap::new()),
            max,
            max_hot: max_hot.max(1),
            options,
        })
    }

    /// The fleet rate for `p`, started on first use.
    fn get(&self, p: &Params) -> Result<Arc<KeyedFleet>, String> {
        let id = (p.burst, p.interval_ns);
        if let Some(f) = self.map.load().get(&id) {
            return Ok(Arc::clone(f));
        }
        let full = || {
            format!(
                "Cell error: {} distinct parameter sets are shared through Redis already \
                 (--resp-max-fleet-limits)",
                self.max
            )
        };
        if self.map.load().len() >= self.max {
            return Err(full());
        }
        #[allow(clippy::cast_sign_loss)] // validated positive
        let interval = Duration::from_nanos(p.interval_ns as u64);
        let name = format!(
            "{}cgs-throttle:{}:{}ns",
            self.options.key_prefix, p.burst, p.interval_ns
        );
        let builder = KeyedFleet::rate(&name, 1, interval)
            .burst(u64::from(p.burst))
            .max_wait(self.options.max_wait)
            .max_hot(self.max_hot);
        let built =
            Arc::new(start(builder, &self.options.redis).map_err(|e| format!("Cell error: {e}"))?);
        self.map.rcu(|map| {
            if map.contains_key(&id) || map.len() >= self.max {
                Arc::clone(map)
            } else {
                let mut grown = HashMap::clone(map);
                grown.insert(id, Arc::clone(&built));
                Arc::new(grown)
            }
        });
        self.map.load().get(&id).cloned().ok_or_else(full)
    }

    /// Runs one call: `Err` is the error reply. A look, or a key this process can decide (a
    /// lease), is answered at once; a key that needs Redis comes back as [`Throttled::Wait`],
    /// for the connection to await without holding a thread.
    pub(crate) fn throttle(&self, key: &[u8], p: &Params) -> Result<Throttled, String> {
        let limit = i64::from(p.burst);
        if p.quantity > limit {
            // More than the limit never fits: redis-cell's denial, no wait helps.
            return Ok(Throttled::Now(Reply {
                limited: true,
                limit,
                remaining: 0,
                retry_after: -1,
                reset_after: 0,
            }));
        }
        let fleet = self.get(p)?;
        let key = fleet_key(key);
        #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)] // ≤ burst (u32)
        let n = p.quantity as u32;
        let now = if n == 0 {
            Some(AnyLimiter::<str>::peek_n(&*fleet, &key, 0))
        } else {
            fleet.charge_now(&key, n).map(|r| r.decision())
        };
        Ok(match now {
            Some(d) => Throttled::Now(reply(limit, &d)),
            None => Throttled::Wait(Cold {
                by: Instant::now() + self.options.max_wait,
                fleet,
                key,
                n,
                limit,
            }),
        })
    }

    /// Hands every rate's leases back.
    pub(crate) fn shutdown(&self) {
        for f in self.map.load().values() {
            f.shutdown();
        }
    }
}

/// What a call gets: its reply, or the check that waits for Redis.
#[derive(Debug)]
pub(crate) enum Throttled {
    Now(Reply),
    Wait(Cold),
}

/// A call whose key is cold here: its check goes to Redis, awaited at most until `by` (the
/// outage rules decide past it), as a request's cold limits are.
pub(crate) struct Cold {
    fleet: Arc<KeyedFleet>,
    key: Cow<'static, str>,
    n: u32,
    limit: i64,
    by: Instant,
}

impl std::fmt::Debug for Cold {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cold")
            .field("key", &self.key)
            .field("n", &self.n)
            .finish_non_exhaustive()
    }
}

impl Cold {
    /// The reply, once Redis answered (or the bound passed).
    pub(crate) async fn answer(self) -> Reply {
        let d = self.fleet.check_n_by(&self.key, self.n, self.by).await;
        reply(self.limit, &self.fleet.decision_of(&d))
    }
}

/// The reply for the fleet's decision `d`.
fn reply(limit: i64, d: &Decision) -> Reply {
    let secs = |t: Duration| i64::try_from(t.as_secs()).unwrap_or(i64::MAX);
    let limited = !d.is_allowed();
    let retry_after = if limited {
        d.retry_after().map_or(-1, secs)
    } else {
        -1
    };
    Reply {
        limited,
        limit,
        remaining: i64::from(d.remaining()),
        retry_after,
        reset_after: if limited { retry_after.max(0) } else { 0 },
    }
}

/// A call's key as the fleet's `str` key: `s:` and the key when it is UTF-8, else `x:` and its
/// bytes in hex (two keys never meet).
fn fleet_key(key: &[u8]) -> Cow<'static, str> {
    match std::str::from_utf8(key) {
        Ok(s) => Cow::Owned(format!("s:{s}")),
        Err(_) => {
            let mut out = String::with_capacity(2 + 2 * key.len());
            out.push_str("x:");
            for b in key {
                let _ = write!(out, "{b:02x}");
            }
            Cow::Owned(out)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_never_meet() {
        assert_eq!(fleet_key(b"abc"), "s:abc");
        assert_eq!(fleet_key(&[0xff, 0x00]), "x:ff00");
        assert_ne!(fleet_key(b"x:ff00"), fleet_key(&[0xff, 0x00]));
    }

    #[test]
    fn a_denial_reports_the_wait() {
        let d = Decision::denied(
            16,
            Some(Duration::from_millis(2500)),
            Duration::from_secs(2),
        );
        assert_eq!(
            reply(16, &d),
            Reply {
                limited: true,
                limit: 16,
                remaining: 0,
                retry_after: 2,
                reset_after: 2,
            }
        );
        let ok = Decision::admitted(16, 3, Duration::ZERO);
        assert_eq!(reply(16, &ok).retry_after, -1);
        assert_eq!(reply(16, &ok).remaining, 3);
    }
}
