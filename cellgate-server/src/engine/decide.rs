//! One request's decision: every descriptor's limits charged together or not at all, then one
//! status per descriptor in request order.
//!
//! Implementation details: the limits of every descriptor that is not in shadow mode and
//! charges at least one unit go through one `check_all_in` (each keyed limiter's key as a
//! gate): the first limit that refuses makes the core give back what the others took (in
//! quota mode, the limits outside it with one quota descriptor's at a time: see [`run`]). Then,
//! if the request was admitted, each shadow-mode descriptor is charged on its own, all or
//! nothing within it (its refusal is reported, never enforced); in a run that may not wait, a
//! shadow descriptor whose charge needs Redis is charged again on its own once Redis has
//! answered (see [`shadow`]), the others' charges being final. When the request is refused,
//! every status is read with `peek` (nothing charged): a descriptor is over its limit when its
//! own charge would not fit, so that a client sees each limit that refused, as ratelimit
//! reports them.

use std::sync::Arc;

use cellgate::{check_all_in, AnyLimiter, Decision};

use super::backend::{Bound, Gate, Mode, Owner};
use super::limiters::Lim;
use crate::api::{Code, CurrentLimit, DescriptorStatus, StatHits, Unit};

/// One limit to check for a descriptor.
pub(crate) struct Check<'a> {
    pub(crate) lim: &'a Lim,
    pub(crate) name: Option<Arc<str>>,
    pub(crate) requests_per_unit: u32,
    pub(crate) unit: Unit,
}

/// What a descriptor matched.
pub(crate) enum Kind {
    /// No limit applies.
    Nothing,
    /// ratelimit's `unlimited`.
    Unlimited,
    /// `checks` apply.
    Limited,
    /// Zero requests per unit (an override, or a configured limit, with its name): always
    /// over the limit.
    Zero(Unit, Option<Arc<str>>),
}

/// One descriptor, resolved.
pub(crate) struct Item<'a> {
    pub(crate) kind: Kind,
    pub(crate) checks: Vec<Check<'a>>,
    /// The limiters' key (the descriptor's values, length-prefixed).
    pub(crate) key: String,
    pub(crate) stat_key: Arc<str>,
    pub(crate) hits: u32,
    pub(crate) shadow: bool,
    /// ratelimit's quota mode (see [`run`]).
    pub(crate) quota: bool,
    /// The names this descriptor's limits replace.
    pub(crate) replaces: Vec<Arc<str>>,
}

/// What happened to one check.
#[derive(Clone, Copy)]
struct Outcome {
    decision: Decision,
    over: bool,
}

/// How a run ended.
pub(crate) enum Ran {
    /// Decided: one status per item.
    Done(Vec<DescriptorStatus>),
    /// Nothing charged: this check needs Redis's answer first.
    Wait(#[cfg_attr(not(feature = "server"), allow(dead_code))] Owner),
    /// Decided and charged, but for the shadow descriptors listed (item, and its check that
    /// needs Redis's answer first), of which nothing was charged: their statuses are
    /// placeholders until [`shadow`] charges each on its own.
    #[cfg_attr(not(feature = "server"), allow(dead_code))]
    Shadowed(Vec<DescriptorStatus>, Vec<(usize, Owner)>),
}

/// Whether the item's limits are charged (not in shadow mode, hits above 0).
fn enforced(it: &Item<'_>) -> bool {
    !it.shadow && it.hits > 0
}

/// Whether the item is charged through its limiters.
fn charges(it: &Item<'_>) -> bool {
    enforced(it) && matches!(it.kind, Kind::Limited)
}

/// Whether the item is a quota-mode descriptor whose limit is charged (a zero limit included).
fn charged_quota(it: &Item<'_>) -> bool {
    enforced(it) && it.quota && matches!(it.kind, Kind::Limited | Kind::Zero(..))
}

/// One all-or-nothing charge of some items' limits.
struct Attempt<'a> {
    /// Each limit charged, with its item and check, in charge order.
    gates: Vec<Gate<'a>>,
    decisions: Vec<Decision>,
    /// The check whose charge failed (then nothing was charged).
    denier: Option<Owner>,
}

impl<'a> Attempt<'a> {
    /// Charges the limits of the items `take` picks, in request order, all or nothing.
    fn run(items: &'a [Item<'a>], take: impl Fn(usize) -> bool, start: &'a Bound<'a>) -> Self {
        let gates: Vec<Gate<'a>> = (items.iter().enumerate())
            .filter(|&(i, _)| take(i))
            .flat_map(|(i, it)| {
                let key = it.key.as_str();
                (it.checks.iter().enumerate()).map(move |(j, c)| Gate {
                    lim: c.lim,
                    key,
                    owner: (i, j),
                    bound: start,
                })
            })
            .collect();
        let list: Vec<(&dyn AnyLimiter, u32)> = gates
            .iter()
            .map(|g| (g as &dyn AnyLimiter, items[g.owner.0].hits))
            .collect();
        let mut decisions = vec![Decision::NONE; list.len()];
        let denier =
            check_all_in(&list, &mut decisions).and_then(|g| gates.get(g).map(|g| g.owner));
        Attempt {
            gates,
            decisions,
            denier,
        }
    }

    /// The decisions of item `i`'s checks, when this attempt charged it.
    fn of(&self, i: usize) -> Option<&[Decision]> {
        let from = self.gates.iter().position(|g| g.owner.0 == i)?;
        let len = (self.gates[from..].iter())
            .take_while(|g| g.owner.0 == i)
            .count();
        self.decisions.get(from..from + len)
    }
}

/// Charges `items` all or nothing and answers their statuses; `ratio` is the near-limit ratio.
///
/// Quota mode (ratelimit's): the limits outside quota mode are charged together with one
/// quota descriptor's, each quota descriptor that charges tried in request order until one
/// fits with them. The request is refused when a limit outside quota mode refuses, or when
/// every quota descriptor does (a zero limit always does). Once it is admitted, the quota
/// descriptors not tried are charged each on its own, as shadow ones are: a refusal is
/// reported as over the limit, and does not change the request's answer (see [`overall`]).
pub(crate) fn run(items: &[Item<'_>], ratio: f64, mode: Mode<'_>) -> Ran {
    // One bound on Redis for the whole request (see `Bound`).
    let bound = Bound::new(mode);
    let start = &bound;
    let together = |i: usize| charges(&items[i]) && !items[i].quota;
    let forced =
        (items.iter()).any(|it| enforced(it) && !it.quota && matches!(it.kind, Kind::Zero(..)));
    let any_quota = items.iter().any(charged_quota);
    // The attempt that admitted the request; the check outside quota mode whose charge
    // failed; each quota descriptor's check whose charge failed (quota mode only: a refusal
    // outside it allocates nothing).
    let mut admitted: Option<Attempt> = None;
    let mut denier: Option<Owner> = None;
    let mut quota_failed: Vec<Owner> = Vec::new();
    if !forced && !any_quota {
        let a = Attempt::run(items, together, start);
        if let Some(owner) = bound.pending() {
            return Ran::Wait(owner);
        }
        match a.denier {
            None => admitted = Some(a),
            Some(o) => denier = Some(o),
        }
    } else if !forced {
        for q in (0..items.len()).filter(|&i| charged_quota(&items[i]) && charges(&items[i])) {
            let a = Attempt::run(items, |i| together(i) || i == q, start);
            if let Some(owner) = bound.pending() {
                return Ran::Wait(owner);
            }
            match a.denier {
                None => {
                    admitted = Some(a);
                    break;
                }
                // A limit outside quota mode refused: no quota descriptor can help.
                Some(o) if o.0 != q => {
                    denier = Some(o);
                    break;
                }
                Some(o) => quota_failed.push(o),
            }
        }
    }
    let mut waiting = Vec::new();
    let statuses = items
        .iter()
        .enumerate()
        .map(|(i, it)| {
            let mine = (denier.iter().chain(&quota_failed)).find_map(|o| (o.0 == i).then_some(o.1));
            let verdict = match (&admitted, mine) {
                (None, denier) => Verdict::Refused { denier },
                // A quota descriptor tried before the one that fitted: over its limit.
                (Some(_), Some(j)) => Verdict::Refused { denier: Some(j) },
                (Some(a), None) => a.of(i).map_or(Verdict::Admitted, Verdict::Charged),
            };
            let status = fixed_status(it).unwrap_or_else(|| limited(i, it, verdict, ratio, start));
            // Only a descriptor charged on its own (shadow, or a quota descriptor not tried)
            // comes here wanting Redis (the others' did above): nothing of it was charged, and
            // the rest of the request stands.
            if let Some(owner) = start.take_pending() {
                waiting.push((i, owner));
            }
            status
        })
        .collect::<Vec<_>>();
    if waiting.is_empty() {
        Ran::Done(statuses)
    } else {
        Ran::Shadowed(statuses, waiting)
    }
}

/// The request's answer from its statuses, as ratelimit decides it: over the limit when a
/// descriptor outside quota mode is, or when every quota-mode descriptor charged is.
pub(crate) fn overall(items: &[Item<'_>], statuses: &[DescriptorStatus]) -> Code {
    let over = |i: usize| statuses.get(i).is_some_and(|s| s.code == Code::OverLimit);
    let outside = (0..items.len()).any(|i| !items[i].quota && over(i));
    let mut quotas = (0..items.len())
        .filter(|&i| charged_quota(&items[i]))
        .peekable();
    let quotas_over = quotas.peek().is_some() && quotas.all(over);
    if outside || quotas_over {
        Code::OverLimit
    } else {
        Code::Ok
    }
}

/// Charges shadow descriptor `items[i]` on its own, after the request was decided (its other
/// descriptors' charges are final), in a run that takes Redis's `answers`: its status, or the
/// check that needs Redis's answer first (nothing of the descriptor charged).
#[cfg(feature = "server")]
pub(crate) fn shadow(
    items: &[Item<'_>],
    i: usize,
    ratio: f64,
    answers: &[(Owner, Decision)],
) -> Result<DescriptorStatus, Owner> {
    let bound = Bound::new(Mode::Answers(answers));
    let it = &items[i];
    let status =
        fixed_status(it).unwrap_or_else(|| limited(i, it, Verdict::Admitted, ratio, &bound));
    match bound.take_pending() {
        Some(owner) => Err(owner),
        None => Ok(status),
    }
}

/// What happened to the request, as one descriptor sees it.
#[derive(Clone, Copy)]
enum Verdict<'d> {
    /// Admitted, and this descriptor's limits charged with these decisions.
    Charged(&'d [Decision]),
    /// Admitted; this descriptor was not charged with the others (shadow mode, or no hits).
    Admitted,
    /// Refused: nothing charged; `denier` is this descriptor's check whose charge failed, if
    /// the refusal came from it.
    Refused { denier: Option<usize> },
}

/// The status of an item whose answer does not depend on any limiter's state (`None` for a
/// limited one).
fn fixed_status(it: &Item<'_>) -> Option<DescriptorStatus> {
    Some(match it.kind {
        Kind::Nothing => DescriptorStatus::unlimited(),
        Kind::Unlimited => DescriptorStatus {
            limit_remaining: u32::MAX,
            ..DescriptorStatus::unlimited()
        },
        Kind::Zero(unit, ref name) => DescriptorStatus {
            code: if it.shadow || it.hits == 0 {
                Code::Ok
            } else {
                Code::OverLimit
            },
            current_limit: Some(CurrentLimit {
                name: name.clone(),
                requests_per_unit: 0,
                unit,
            }),
            limit_remaining: 0,
            duration_until_reset: None,
            stats: Some(over_stats(it)),
        },
        Kind::Limited => return None,
    })
}

/// The status of limited item `items[i]` once the enforced charges are made (`start`: when
/// the request's bound on Redis began).
fn limited(
    i: usize,
    it: &Item<'_>,
    verdict: Verdict<'_>,
    ratio: f64,
    start: &Bound<'_>,
) -> DescriptorStatus {
    let n = it.hits;
    let outcomes: Vec<Outcome> = match verdict {
        Verdict::Charged(decisions) => decisions
            .iter()
            .map(|&decision| Outcome {
                decision,
                over: false,
            })
            .collect(),
        // A shadow descriptor of an admitted request is charged on its own.
        Verdict::Admitted if n > 0 => charge_alone(i, it, start),
        Verdict::Admitted => look(it, false, None),
        Verdict::Refused { denier } => look(it, n > 0, denier),
    };
    let charged = n > 0 && !matches!(verdict, Verdict::Refused { .. });
    let admitted = charged && !outcomes.iter().any(|o| o.over);
    let decide = outcomes
        .iter()
        .position(|o| o.over)
        .or_else(|| (0..outcomes.len()).min_by_key(|&i| outcomes[i].decision.remaining()))
        .unwrap_or(0);
    let (Some(check), Some(outcome)) = (it.checks.get(decide), outcomes.get(decide)) else {
        return DescriptorStatus::unlimited();
    };
    let over = outcomes.iter().any(|o| o.over);
    let mut stats = StatHits {
        key: Arc::clone(&it.stat_key),
        total_hits: u64::from(n),
        ..StatHits::default()
    };
    if over {
        stats.over_limit = u64::from(n);
        if it.shadow {
            stats.shadow_mode = u64::from(n);
        }
    } else if admitted {
        stats.within_limit = u64::from(n);
        stats.near_limit = near_limit(&outcome.decision, n, ratio);
    }
    DescriptorStatus {
        code: if over && !it.shadow {
            Code::OverLimit
        } else {
            Code::Ok
        },
        current_limit: Some(CurrentLimit {
            name: check.name.clone(),
            requests_per_unit: check.requests_per_unit,
            unit: check.unit,
        }),
        limit_remaining: outcome.decision.remaining(),
        duration_until_reset: outcome.decision.resets_after(),
        stats: Some(stats),
    }
}

/// The limits' state without a charge; with `judge`, whether each charge alone would fail
/// (and the check `denier` did fail, whatever the state says now).
fn look(it: &Item<'_>, judge: bool, denier: Option<usize>) -> Vec<Outcome> {
    it.checks
        .iter()
        .enumerate()
        .map(|(j, c)| {
            let decision = c.lim.peek_n(it.key.as_str(), 0);
            let over = denier == Some(j)
                || (judge && !c.lim.peek_n(it.key.as_str(), it.hits).is_allowed());
            Outcome { decision, over }
        })
        .collect()
}

/// A shadow descriptor's own charge (`items[i]`): its limits all or nothing, a refusal only
/// reported.
fn charge_alone(i: usize, it: &Item<'_>, start: &Bound<'_>) -> Vec<Outcome> {
    let gates: Vec<Gate<'_>> = (it.checks.iter())
        .enumerate()
        .map(|(j, c)| Gate {
            lim: c.lim,
            key: it.key.as_str(),
            owner: (i, j),
            bound: start,
        })
        .collect();
    let list: Vec<(&dyn AnyLimiter, u32)> = gates
        .iter()
        .map(|g| (g as &dyn AnyLimiter, it.hits))
        .collect();
    let mut decisions = vec![Decision::NONE; list.len()];
    let denied = check_all_in(&list, &mut decisions);
    decisions
        .into_iter()
        .enumerate()
        .map(|(i, decision)| Outcome {
            decision,
            over: denied == Some(i),
        })
        .collect()
}

/// The stats of a descriptor always over its limit.
fn over_stats(it: &Item<'_>) -> StatHits {
    let n = u64::from(it.hits);
    StatHits {
        key: Arc::clone(&it.stat_key),
        total_hits: n,
        over_limit: n,
        shadow_mode: if it.shadow { n } else { 0 },
        ..StatHits::default()
    }
}

/// ratelimit's near-limit count: of the `n` units just admitted, those past
/// `floor(limit * ratio)`.
pub(crate) fn near_limit(d: &Decision, n: u32, ratio: f64) -> u64 {
    let limit = u64::from(d.limit());
    let threshold = (limit as f64 * ratio).floor().max(0.0) as u64;
    let after = limit.saturating_sub(u64::from(d.remaining()));
    let before = after.saturating_sub(u64::from(n));
    if after <= threshold {
        0
    } else if before >= threshold {
        u64::from(n)
    } else {
        after - threshold
    }
}

/// The limiters' key for a descriptor: its values, each prefixed with its length so that no
/// two value lists write the same key.
///
/// Built once per descriptor of every request: sized up front and written without the
/// formatting machinery, which costs more than the limiter's own check.
pub(crate) fn values_key<'e, I>(parts: I) -> String
where
    I: IntoIterator<Item = &'e str>,
    I::IntoIter: Clone,
{
    let parts = parts.into_iter();
    // A length takes at most 20 digits; most take one to three.
    let size: usize = parts.clone().map(|p| p.len() + 4).sum();
    let mut key = String::with_capacity(size);
    let mut digits = itoa::Buffer::new();
    for part in parts {
        key.push_str(digits.format(part.len()));
        key.push(':');
        key.push_str(part);
    }
    key
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn after(limit: u32, used: u32) -> Decision {
        Decision::admitted(limit, limit - used, Duration::from_secs(1))
    }

    #[test]
    fn near_limit_counts_only_the_units_past_the_threshold() {
        // limit 10, ratio 0.8: the threshold is 8.
        assert_eq!(near_limit(&after(10, 8), 8, 0.8), 0);
        assert_eq!(near_limit(&after(10, 9), 3, 0.8), 1);
        assert_eq!(near_limit(&after(10, 10), 1, 0.8), 1);
        assert_eq!(near_limit(&after(10, 10), 10, 0.8), 2);
        assert_eq!(near_limit(&after(10, 10), 10, 0.0), 10);
        assert_eq!(near_limit(&after(10, 10), 10, 1.0), 0);
    }

    #[test]
    fn value_keys_are_unambiguous() {
        assert_ne!(values_key(["ab", "c"]), values_key(["a", "bc"]));
        assert_ne!(values_key(["1:a"]), values_key(["1", "a"]));
        assert_eq!(values_key(["x", ""]), "1:x0:");
    }
}
