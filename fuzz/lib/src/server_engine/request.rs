//! The model of one request (from the engine's `decide` docs and the README's server
//! contract): every limit of every descriptor that charges (not in shadow mode, hits above 0)
//! is charged in request order, all or nothing; then each descriptor's status, in request
//! order, where a shadow descriptor of an admitted request is charged on its own (all or
//! nothing within it, a refusal reported as over the limit but answered OK) and a descriptor
//! of no hits looks without charging.
//!
//! Before anything is charged, a named limit that another limit matched by the request
//! `replaces` is dropped (ratelimit's `replaces`).
//!
//! A status reports the deciding limit of its descriptor: the first one over the limit, else
//! the one with the fewest units remaining (the first of equals). A refused request reports,
//! from the state it left (nothing charged), each descriptor whose own charge would not fit
//! and the one whose charge failed.

use std::collections::HashMap;
use std::time::Duration;

use cellgate_server::api::{Code, Descriptor, DescriptorStatus, RateLimitRequest, Unit};

use super::limit::{Cell, Family, Said, Spec};
use super::tree::{find, Desc, Limits};
use super::Coverage;

/// A state: (config descriptor's path, index in its limits, the request's values).
pub(crate) type StateKey = (Vec<usize>, usize, Vec<String>);
/// Every key's state under every limit.
pub(crate) type States = HashMap<StateKey, Cell>;

/// One request descriptor, resolved.
struct Item {
    kind: Kind,
    hits: u32,
    shadow: bool,
    /// ratelimit's quota mode.
    quota: bool,
}

enum Kind {
    Nothing,
    Unlimited,
    Limited(Vec<Check>),
    /// `requests_per_unit: 0`: every request that charges it is refused, and it keeps no
    /// state.
    Zero {
        name: Option<&'static str>,
        replaces: Option<&'static str>,
        unit: Unit,
    },
}

/// One limit of a descriptor.
#[derive(Clone)]
struct Check {
    key: StateKey,
    spec: Spec,
    name: Option<&'static str>,
    replaces: Option<&'static str>,
}

impl Item {
    /// Whether the descriptor's limits are charged with the request's, all or nothing.
    fn charges(&self) -> bool {
        !self.shadow && self.hits > 0 && matches!(self.kind, Kind::Limited(_))
    }

    /// Whether its status is over whatever the state (a zero limit it charges).
    fn forces_refusal(&self) -> bool {
        !self.shadow && self.hits > 0 && matches!(self.kind, Kind::Zero { .. })
    }

    /// Whether it is a quota descriptor that charges (a zero limit included).
    fn charged_quota(&self) -> bool {
        self.quota
            && !self.shadow
            && self.hits > 0
            && matches!(self.kind, Kind::Limited(_) | Kind::Zero { .. })
    }

    /// Whether its limits are charged with those of the others outside quota mode.
    fn together(&self) -> bool {
        self.charges() && !self.quota
    }
}

/// What the model says of one descriptor.
#[derive(Debug, PartialEq)]
struct Status {
    code: Code,
    /// `(name, requests_per_unit, unit)` of the deciding limit.
    limit: Option<(Option<String>, u32, Unit)>,
    remaining: u32,
    reset: Option<Duration>,
    /// `(total_hits, over_limit, within_limit, near_limit, shadow_mode)`.
    stats: Option<(u64, u64, u64, u64, u64)>,
}

impl Status {
    fn of(s: &DescriptorStatus) -> Status {
        Status {
            code: s.code,
            limit: s.current_limit.as_ref().map(|l| {
                (
                    l.name.as_deref().map(Into::into),
                    l.requests_per_unit,
                    l.unit,
                )
            }),
            remaining: s.limit_remaining,
            reset: s.duration_until_reset,
            stats: s.stats.as_ref().map(|h| {
                let n = (h.total_hits, h.over_limit, h.within_limit);
                (n.0, n.1, n.2, h.near_limit, h.shadow_mode)
            }),
        }
    }

    fn plain(remaining: u32) -> Status {
        Status {
            code: Code::Ok,
            limit: None,
            remaining,
            reset: None,
            stats: None,
        }
    }
}

fn resolve(descs: &[Desc], req: &RateLimitRequest, d: &Descriptor, all: Modes) -> Item {
    let hits = u32::try_from(d.hits_addend.unwrap_or(req.hits_addend)).unwrap_or(u32::MAX);
    let mut item = Item {
        kind: Kind::Nothing,
        hits,
        shadow: all.shadow,
        quota: all.quota,
    };
    let Some(found) = find(descs, &d.entries) else {
        return item;
    };
    let (path, desc) = (found.path, found.desc.expect("found at the last entry"));
    let list = match &desc.limits {
        Limits::None => return item,
        Limits::Unlimited => {
            item.kind = Kind::Unlimited;
            return item;
        }
        Limits::One(l) => std::slice::from_ref(l),
        Limits::Several(list) => list.as_slice(),
    };
    // A shared wildcard's pattern stands for the value: every value it matches, one state.
    let values: Vec<String> = (d.entries.iter().zip(&found.shared))
        .map(|((_, v), shared)| shared.map_or_else(|| v.clone(), str::to_owned))
        .collect();
    item.shadow |= desc.shadow;
    item.quota |= desc.quota;
    if let [l] = list {
        if l.requests() == 0 {
            item.kind = Kind::Zero {
                name: l.name(),
                replaces: l.replaces(),
                unit: l.unit(),
            };
            return item;
        }
    }
    item.kind = Kind::Limited(
        list.iter()
            .enumerate()
            .map(|(j, l)| Check {
                key: (path.clone(), j, values.clone()),
                spec: l.spec(),
                name: l.name(),
                replaces: l.replaces(),
            })
            .collect(),
    );
    item
}

/// ratelimit's `replaces`: a named limit that a limit matched by the same request replaces is
/// dropped; a descriptor left with no limit is one no limit applies to.
fn drop_replaced(items: &mut [Item], seen: &mut Coverage) {
    let replaced: Vec<&str> = (items.iter())
        .flat_map(|it| match &it.kind {
            Kind::Limited(checks) => checks.iter().filter_map(|c| c.replaces).collect(),
            Kind::Zero { replaces, .. } => replaces.iter().copied().collect(),
            _ => Vec::new(),
        })
        .collect();
    for it in items.iter_mut() {
        if let Kind::Zero { name: Some(n), .. } = it.kind {
            if replaced.contains(&n) {
                seen.replaced += 1;
                it.kind = Kind::Nothing;
            }
        }
        if let Kind::Limited(checks) = &mut it.kind {
            let before = checks.len();
            checks.retain(|c| c.name.is_none_or(|n| !replaced.contains(&n)));
            seen.replaced += (before - checks.len()) as u64;
            if checks.is_empty() {
                it.kind = Kind::Nothing;
            }
        }
    }
}

/// Charges `checks` in order with `n` units each on `states`, all or nothing: the decisions
/// up to the first refusal, and its index (then nothing is charged).
fn charge(states: &mut States, checks: &[Check], now: u64, n: u32) -> (Vec<Said>, Option<usize>) {
    let mut trial: Vec<(&StateKey, Cell)> = Vec::new();
    let mut said = Vec::new();
    for (j, Check { key, spec, .. }) in checks.iter().enumerate() {
        // The latest trial state of this key (an earlier check of the same request may have
        // charged it), else the committed one.
        let cell = match trial.iter().rev().find(|(k, _)| *k == key) {
            Some((_, c)) => c.clone(),
            None => states.get(key).cloned().unwrap_or_else(|| spec.fresh()),
        };
        let mut cell = cell;
        let s = spec.step(&mut cell, now, n);
        said.push(s);
        if !s.allowed {
            return (said, Some(j));
        }
        trial.push((key, cell));
    }
    for (key, cell) in trial {
        states.insert(key.clone(), cell);
    }
    (said, None)
}

/// The engine's shadow and quota modes for every limit.
#[derive(Clone, Copy)]
pub(crate) struct Modes {
    pub(crate) shadow: bool,
    pub(crate) quota: bool,
}

/// A charge's place (item, check).
type Place = (usize, usize);

/// How the enforced charges went: the charges made (their place and decision), when the
/// request was admitted, and each (item, check) whose charge failed.
struct Charged {
    admitted: Option<Vec<(Place, Said)>>,
    failed: Vec<Place>,
}

/// The limits of the items `take` picks, charged in request order, all or nothing (each
/// with its own descriptor's hits): the decisions with their places, or the place that
/// refused.
fn attempt(
    items: &[Item],
    take: impl Fn(usize) -> bool,
    states: &mut States,
    now: u64,
) -> Result<Vec<(Place, Said)>, Place> {
    let mut places = Vec::new();
    let mut all = Vec::new();
    for (i, it) in items.iter().enumerate().filter(|&(i, _)| take(i)) {
        if let Kind::Limited(checks) = &it.kind {
            for (j, c) in checks.iter().enumerate() {
                places.push((i, j, it.hits));
                all.push(c.clone());
            }
        }
    }
    match charge_each(states, &all, &places, now) {
        (said, None) => Ok(places.iter().map(|p| (p.0, p.1)).zip(said).collect()),
        (_, Some(g)) => Err((places[g].0, places[g].1)),
    }
}

/// The request's enforced charges: the limits outside quota mode together, with one quota
/// descriptor's, each quota descriptor tried in request order until one fits; refused when a
/// limit outside quota mode refuses, when every quota descriptor does, or when a zero limit
/// outside quota mode is charged.
fn enforce(items: &[Item], states: &mut States, now: u64) -> Charged {
    let mut out = Charged {
        admitted: None,
        failed: Vec::new(),
    };
    let forced = items.iter().any(|it| it.forces_refusal() && !it.quota);
    if forced {
        return out;
    }
    if !items.iter().any(Item::charged_quota) {
        match attempt(items, |i| items[i].together(), states, now) {
            Ok(said) => out.admitted = Some(said),
            Err(place) => out.failed.push(place),
        }
        return out;
    }
    for q in (0..items.len()).filter(|&i| items[i].charged_quota() && items[i].charges()) {
        match attempt(items, |i| items[i].together() || i == q, states, now) {
            Ok(said) => {
                out.admitted = Some(said);
                break;
            }
            Err(place) => {
                out.failed.push(place);
                if place.0 != q {
                    break;
                }
            }
        }
    }
    out
}

/// What the engine must answer for `req` at `now`; updates `states` as the engine must.
/// Panics on any difference with `answer`'s statuses.
pub(crate) fn check(
    descs: &[Desc],
    all: Modes,
    states: &mut States,
    now: u64,
    req: &RateLimitRequest,
    answer: &[DescriptorStatus],
    seen: &mut Coverage,
) -> bool {
    let mut items: Vec<Item> = (req.descriptors.iter())
        .map(|d| resolve(descs, req, d, all))
        .collect();
    drop_replaced(&mut items, seen);
    seen.quota += u64::from(items.iter().any(Item::charged_quota));
    let charged = enforce(&items, states, now);
    let admitted = charged.admitted.is_some();
    assert_eq!(answer.len(), items.len(), "one status per descriptor");
    for (i, (it, got)) in items.iter().zip(answer).enumerate() {
        let expected = match &it.kind {
            Kind::Nothing => Status::plain(0),
            Kind::Unlimited => Status::plain(u32::MAX),
            Kind::Zero { name, unit, .. } => {
                seen.zero += 1;
                let n = u64::from(it.hits);
                Status {
                    code: if it.forces_refusal() {
                        Code::OverLimit
                    } else {
                        Code::Ok
                    },
                    limit: Some((name.map(Into::into), 0, *unit)),
                    remaining: 0,
                    reset: None,
                    stats: Some((n, n, 0, 0, if it.shadow { n } else { 0 })),
                }
            }
            Kind::Limited(checks) => {
                let mine = (charged.failed.iter()).find_map(|&(d, j)| (d == i).then_some(j));
                let taken: Vec<(Said, bool)> = (charged.admitted.iter().flatten())
                    .filter(|((d, _), _)| *d == i)
                    .map(|(_, s)| (*s, false))
                    .collect();
                let outcomes: Vec<(Said, bool)> = if !admitted || mine.is_some() {
                    // Refused, or a quota descriptor tried before the one that fitted.
                    look(states, checks, now, it.hits, mine)
                } else if !taken.is_empty() {
                    taken
                } else if it.hits > 0 {
                    // Charged on its own: shadow, or a quota descriptor not tried.
                    let (said, denied) = charge(states, checks, now, it.hits);
                    (said.into_iter().enumerate())
                        .map(|(j, s)| (s, denied == Some(j)))
                        .collect()
                } else {
                    look(states, checks, now, 0, None)
                };
                count(seen, it, checks, &outcomes);
                limited(it, checks, &outcomes, admitted)
            }
        };
        assert_eq!(
            Status::of(got),
            expected,
            "descriptor {i} of {req:?}\nanswer {answer:?}"
        );
    }
    admitted
}

/// The request's charges in order, each with its own units, all or nothing.
fn charge_each(
    states: &mut States,
    all: &[Check],
    places: &[(usize, usize, u32)],
    now: u64,
) -> (Vec<Said>, Option<usize>) {
    let mut trial = states.clone();
    let mut said = Vec::with_capacity(all.len());
    for (g, (Check { key, spec, .. }, &(_, _, n))) in all.iter().zip(places).enumerate() {
        let cell = trial.entry(key.clone()).or_insert_with(|| spec.fresh());
        let s = spec.step(cell, now, n);
        if !s.allowed {
            return (Vec::new(), Some(g));
        }
        said.push(s);
    }
    *states = trial;
    (said, None)
}

/// The limits' state without a charge, and whether each charge of `n` alone would fail (or
/// is the one that failed: `denier`).
fn look(
    states: &States,
    checks: &[Check],
    now: u64,
    n: u32,
    denier: Option<usize>,
) -> Vec<(Said, bool)> {
    (checks.iter().enumerate())
        .map(|(j, Check { key, spec, .. })| {
            let cell = states.get(key);
            let over = denier == Some(j) || (n > 0 && !spec.peek(cell, now, n).allowed);
            (spec.peek(cell, now, 0), over)
        })
        .collect()
}

/// A limited descriptor's status from its checks' outcomes.
fn limited(it: &Item, checks: &[Check], outcomes: &[(Said, bool)], admitted: bool) -> Status {
    let over = outcomes.iter().any(|o| o.1);
    let decide = outcomes.iter().position(|o| o.1).unwrap_or_else(|| {
        let least = outcomes.iter().map(|o| o.0.remaining).min().unwrap_or(0);
        (outcomes.iter().position(|o| o.0.remaining == least)).unwrap_or(0)
    });
    let (said, check) = (outcomes[decide].0, &checks[decide]);
    let n = u64::from(it.hits);
    let charged = n > 0 && admitted;
    let stats = (
        n,
        if over { n } else { 0 },
        if charged && !over { n } else { 0 },
        if charged && !over {
            near_limit(&said, n)
        } else {
            0
        },
        if over && it.shadow { n } else { 0 },
    );
    Status {
        code: if over && !it.shadow {
            Code::OverLimit
        } else {
            Code::Ok
        },
        limit: Some((
            check.name.map(Into::into),
            check.spec.requests_per_unit,
            check.spec.unit,
        )),
        remaining: said.remaining,
        reset: said.reset(),
        stats: Some(stats),
    }
}

/// ratelimit's near-limit count at the engine's default ratio (0.8): of the `n` units just
/// admitted, those past `floor(limit * 4 / 5)` used.
fn near_limit(said: &Said, n: u64) -> u64 {
    let limit = u64::from(said.limit);
    let threshold = limit * 4 / 5;
    let used = limit.saturating_sub(u64::from(said.remaining));
    let before = used.saturating_sub(n);
    used.saturating_sub(threshold.max(before)).min(n)
}

fn count(seen: &mut Coverage, it: &Item, checks: &[Check], outcomes: &[(Said, bool)]) {
    seen.limited += 1;
    seen.several += u64::from(checks.len() > 1);
    seen.shadow += u64::from(it.shadow);
    seen.look += u64::from(it.hits == 0);
    seen.over += u64::from(outcomes.iter().any(|o| o.1));
    for check in checks {
        match check.spec.family() {
            Family::Fixed => seen.fixed += 1,
            Family::Gcra => seen.gcra += 1,
            Family::Sliding => seen.sliding += 1,
            Family::Stock => seen.stock += 1,
        }
    }
}
