//! Where a limit's state lives: in this process (a cellgate keyed limiter), or, in fleet mode,
//! in Redis through cellgate-redis (see `crate::fleet`). The engine sees both as one
//! `AnyLimiter<str>`.

use std::sync::Arc;
use std::time::Duration;

use cellgate::clock::Clock;
use cellgate::{AnyLimiter, Decision, Policy, Reservation, Stats};

use crate::config::{build, LocalLim, RuleSpec};

/// A limit's keyed state.
pub(crate) enum Lim {
    /// In this process.
    Local(LocalLim),
    /// Shared by the fleet through Redis.
    #[cfg(feature = "server")]
    Fleet(crate::fleet::FleetLim),
}

impl Lim {
    /// Keys held in this process (a fleet limit: its hot keys).
    pub(crate) fn len(&self) -> usize {
        match self {
            Lim::Local(l) => l.len(),
            #[cfg(feature = "server")]
            Lim::Fleet(f) => f.len(),
        }
    }
}

/// Forwards every method to the limiter inside.
macro_rules! each {
    ($self:ident, $l:ident => $e:expr) => {
        match $self {
            Lim::Local($l) => $e,
            #[cfg(feature = "server")]
            Lim::Fleet(f) => {
                let $l = f.fleet();
                $e
            }
        }
    };
}

impl AnyLimiter<str> for Lim {
    fn check_n(&self, key: &str, n: u32) -> Decision {
        each!(self, l => AnyLimiter::<str>::check_n(l, key, n))
    }

    fn peek_n(&self, key: &str, n: u32) -> Decision {
        each!(self, l => AnyLimiter::<str>::peek_n(l, key, n))
    }

    fn charge(&self, key: &str, n: u32) -> Reservation {
        each!(self, l => AnyLimiter::<str>::charge(l, key, n))
    }

    fn charge_into(&self, key: &str, n: u32, slot: &mut Option<Reservation>) -> bool {
        each!(self, l => AnyLimiter::<str>::charge_into(l, key, n, slot))
    }

    fn cancel(&self, key: &str, reservation: Reservation) -> bool {
        each!(self, l => AnyLimiter::<str>::cancel(l, key, reservation))
    }

    fn reserve(&self, key: &str, n: u32, max_wait: Duration) -> Reservation {
        each!(self, l => AnyLimiter::<str>::reserve(l, key, n, max_wait))
    }

    fn policy(&self) -> Policy {
        each!(self, l => AnyLimiter::<str>::policy(l))
    }

    fn store_stats(&self) -> Option<Stats> {
        each!(self, l => AnyLimiter::<str>::store_stats(l))
    }
}

/// Builds the limiters of an engine: local, or shared through Redis.
#[derive(Clone)]
pub(crate) enum Backend {
    Local,
    #[cfg(feature = "server")]
    Fleet(Arc<crate::fleet::Backend>),
}

impl Backend {
    /// The limiter for `spec`, holding at most `max_keys` keys in this process.
    pub(crate) fn build(
        &self,
        spec: &RuleSpec,
        clock: &Arc<dyn Clock>,
        max_keys: usize,
    ) -> Result<Lim, String> {
        match self {
            Backend::Local => build(spec, Arc::clone(clock), max_keys)
                .map(Lim::Local)
                .map_err(|e| e.to_string()),
            #[cfg(feature = "server")]
            Backend::Fleet(b) => b
                .build(spec, max_keys)
                .map(Lim::Fleet)
                .map_err(|e| e.to_string()),
        }
    }
}

/// The item and the check within it that a gate belongs to.
pub(crate) type Owner = (usize, usize);

/// How a run's fleet checks meet Redis.
#[derive(Clone, Copy)]
pub(crate) enum Mode<'a> {
    /// A cold key's check waits for Redis on this thread (at most the request's bound).
    Wait,
    /// A check whose owner has an answer here takes it (Redis already decided it); another
    /// that would wait gives up, and the run ends as [`Ran::Wait`](super::decide::Ran::Wait) with nothing charged.
    /// (Fleet mode's: without the `server` feature nothing builds it.)
    #[cfg_attr(not(feature = "server"), allow(dead_code))]
    Answers(&'a [(Owner, Decision)]),
}

/// One request's terms with Redis, shared by its fleet checks.
// Read by fleet limits only, which need the `server` feature (the fuzz build has none).
#[cfg_attr(not(feature = "server"), allow(dead_code))]
pub(crate) struct Bound<'a> {
    /// The request's first fleet check that could wait: every one waits at most until then
    /// plus the bound (set then, so that local limits need no clock read).
    start: std::cell::OnceCell<std::time::Instant>,
    mode: Mode<'a>,
    /// Set when a check that may not wait would have: it answered a refusal instead.
    pending: std::cell::Cell<Option<Owner>>,
}

impl<'a> Bound<'a> {
    /// A request's terms with Redis.
    pub(crate) fn new(mode: Mode<'a>) -> Bound<'a> {
        Bound {
            start: std::cell::OnceCell::new(),
            mode,
            pending: std::cell::Cell::new(None),
        }
    }

    /// The check that gave up because it would have waited, if one did.
    pub(crate) fn pending(&self) -> Option<Owner> {
        self.pending.get()
    }

    /// As [`pending`](Self::pending), clearing it.
    pub(crate) fn take_pending(&self) -> Option<Owner> {
        self.pending.take()
    }
}

/// A limiter and the key it is checked for, within a request's `bound`: a fleet limit's cold
/// check waits at most what is left of the request's bound on Redis, or not at all.
pub(crate) struct Gate<'a> {
    pub(crate) lim: &'a Lim,
    pub(crate) key: &'a str,
    #[cfg_attr(not(feature = "server"), allow(dead_code))]
    pub(crate) owner: Owner,
    #[cfg_attr(not(feature = "server"), allow(dead_code))]
    pub(crate) bound: &'a Bound<'a>,
}

impl Gate<'_> {
    /// A fleet limit's charge as the request's mode says.
    #[cfg(feature = "server")]
    fn fleet_charge(&self, f: &crate::fleet::FleetLim, n: u32) -> Reservation {
        let answers = match self.bound.mode {
            Mode::Wait => {
                let start = *self.bound.start.get_or_init(std::time::Instant::now);
                return f.charge_within(self.key, n, start);
            }
            Mode::Answers(answers) => answers,
        };
        if let Some((_, d)) = answers.iter().find(|(o, _)| *o == self.owner) {
            // Redis decided this check already (and charged it there when it admitted).
            return Reservation::unheld(*d);
        }
        f.charge_now(self.key, n).unwrap_or_else(|| {
            // A refusal ends the all-or-nothing charge here, and the core gives back what the
            // request's other limits took: the request is run again once Redis has answered.
            self.bound.pending.set(Some(self.owner));
            let limit = self.lim.policy().limit();
            Reservation::unheld(Decision::denied(limit, None, Duration::ZERO))
        })
    }
}

impl AnyLimiter for Gate<'_> {
    fn check_n(&self, _key: &(), n: u32) -> Decision {
        AnyLimiter::charge(self, &(), n).decision()
    }

    fn peek_n(&self, _key: &(), n: u32) -> Decision {
        self.lim.peek_n(self.key, n)
    }

    fn charge(&self, _key: &(), n: u32) -> Reservation {
        match self.lim {
            Lim::Local(l) => AnyLimiter::<str>::charge(l, self.key, n),
            #[cfg(feature = "server")]
            Lim::Fleet(f) => self.fleet_charge(f, n),
        }
    }

    fn charge_into(&self, _key: &(), n: u32, slot: &mut Option<Reservation>) -> bool {
        match self.lim {
            Lim::Local(l) => AnyLimiter::<str>::charge_into(l, self.key, n, slot),
            #[cfg(feature = "server")]
            Lim::Fleet(_) => slot.insert(AnyLimiter::charge(self, &(), n)).is_allowed(),
        }
    }

    fn cancel(&self, _key: &(), reservation: Reservation) -> bool {
        self.lim.cancel(self.key, reservation)
    }

    fn reserve(&self, _key: &(), n: u32, _max_wait: Duration) -> Reservation {
        AnyLimiter::charge(self, &(), n)
    }

    fn policy(&self) -> Policy {
        self.lim.policy()
    }
}
