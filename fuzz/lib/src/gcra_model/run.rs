//! One input run against the limiters and the model: [`Run`] holds the limiters, the model,
//! the shadow and the conformance lists; each operation is one of its methods, and the checks
//! after every operation and at the end are two more.

use std::collections::HashMap;
use std::time::Duration;

use cellgate::clock::{Clock, ManualClock};
use cellgate::{ConfigError, KeyedLimiter, Limiter, Quota, Reservation};

use super::{
    act, admitted_at, assert_conforms, assert_peeks, cancel, decide, key, quota_of, refund, step,
    validate, Acting, Booked, Expected, Input, KeyedModel, Op, Outstanding, Params, QueueSel,
    Stats, Tier, Wait, EXCUSE_CANCEL_AFTER_SET_QUOTA, HORIZON,
};
use crate::common::{check_pair, Observe};

/// Runs one input: builds both limiters (an invalid quota must be refused with the documented
/// error), applies every operation to them and to the model, and checks the conformance
/// bound at the end.
pub fn run(input: &Input) -> Stats {
    let mut r = match Run::start(input) {
        Ok(r) => r,
        Err(stats) => return stats,
    };
    for (i, op) in input.ops.iter().enumerate() {
        r.at = (i, *op);
        let before = r.now;
        let peeks_after = match r.apply(*op) {
            Flow::Skip => continue,
            Flow::Next(k) => k,
        };
        r.after(before, peeks_after);
    }
    r.finish(input)
}

/// What follows an operation.
enum Flow {
    /// Nothing was done: no checks after it.
    Skip,
    /// The checks after every operation, and the peeks of this key's (and the direct
    /// limiter's) must match the model.
    Next(Option<u8>),
}

/// The limiters under test, the model, and what the run has seen.
struct Run {
    clock: ManualClock,
    direct: Limiter<ManualClock>,
    keyed: KeyedLimiter<u8, ManualClock>,
    params: Params,
    model: KeyedModel,
    direct_tat: Option<u64>,
    /// Lossless eviction: a model that never evicts must agree while no request comes at a
    /// time before the sweep floor.
    shadow: HashMap<u8, u64>,
    shadow_valid: bool,
    outstanding: Vec<Outstanding>,
    /// `set_quota` calls so far.
    epoch: u64,
    /// The conformance bound applies while the clock never goes back and the quota never
    /// changes (and per subject, see `Acting`).
    conform: bool,
    direct_acting: Acting,
    keyed_acting: HashMap<u8, Acting>,
    now: u64,
    stats: Stats,
    /// The operation being applied and its index, for failure messages.
    at: (usize, Op),
}

impl Run {
    /// Builds both limiters from the input's quota; `Err` with the stats when the quota (or a
    /// zero key cap) must be refused, and was.
    // The `Err` is the run's final stats, built once per input: its size costs nothing.
    #[allow(clippy::result_large_err)]
    fn start(input: &Input) -> Result<Run, Stats> {
        let mut stats = Stats {
            inputs: 1,
            ..Stats::default()
        };
        let period = input.period.get(input.count);
        let mut quota = Quota::new(input.count, period);
        if let Some(b) = input.burst {
            quota = quota.with_burst(b);
        }
        let queue = input.queue.map(QueueSel::get);
        if let Some(q) = queue {
            quota = quota.with_queue(q);
        }
        let burst = input.burst.unwrap_or(input.count);
        assert_eq!(quota.burst(), burst);
        assert_eq!(quota.queue(), queue.unwrap_or(0));

        let clock = ManualClock::new();
        let direct = Limiter::gcra(quota).clock(clock.clone()).build();
        let mut keyed_builder = KeyedLimiter::<u8>::gcra(quota).clock(clock.clone());
        if let Some(m) = input.max_keys {
            // The model describes `DenyNew` at the ceiling (the default drops light keys
            // instead).
            keyed_builder = keyed_builder
                .max_keys(usize::from(m))
                .when_full(cellgate::WhenFull::DenyNew);
        }
        // The model describes the fixed-capacity table (a bound without `exact_keys`) and the
        // exact store (otherwise), which drops keys only by sweeps and at its bound; the
        // default growing table also reclaims idle keys on inserts, which the model does not
        // describe.
        if input.exact_keys || input.max_keys.is_none() {
            keyed_builder = keyed_builder.exact_keys();
        } else {
            keyed_builder = keyed_builder.fixed_capacity();
        }
        let keyed = keyed_builder.build();

        let params = match validate(input.count, period, burst, queue.unwrap_or(0)) {
            Ok(p) => p,
            Err(want) => {
                assert_eq!(
                    direct.err(),
                    Some(want.clone()),
                    "direct build of {quota:?}"
                );
                assert_eq!(keyed.err(), Some(want), "keyed build of {quota:?}");
                stats.invalid_quota += 1;
                return Err(stats);
            }
        };
        let direct = direct.unwrap_or_else(|e| panic!("valid {quota:?} refused: {e}"));
        if input.max_keys == Some(0) {
            assert_eq!(keyed.err(), Some(ConfigError::Zero { field: "max_keys" }));
            stats.zero_max_keys += 1;
            return Err(stats);
        }
        let keyed = keyed.unwrap_or_else(|e| panic!("valid {quota:?} refused by keyed: {e}"));
        Ok(Run {
            clock,
            direct,
            keyed,
            params,
            model: KeyedModel {
                max_keys: input.max_keys.map(usize::from),
                table: input.max_keys.is_some(),
                last_sweep: u64::MAX,
                ..KeyedModel::default()
            },
            direct_tat: None,
            shadow: HashMap::new(),
            shadow_valid: input.max_keys.is_none(),
            outstanding: Vec::new(),
            epoch: 0,
            conform: true,
            direct_acting: Some(Vec::new()),
            keyed_acting: HashMap::new(),
            now: 0,
            stats,
            at: (0, Op::EvictIdle),
        })
    }

    /// Where a failure happened: the operation, the clock and the parameters.
    fn ctx(&self) -> String {
        let (i, op) = self.at;
        format!("op #{i} {op:?} at now={}, {:?}", self.now, self.params)
    }

    fn apply(&mut self, op: Op) -> Flow {
        match op {
            Op::AdvanceNs(ns) => self.now = self.now.saturating_add(ns),
            Op::AdvanceSmall(ns) => self.now = self.now.saturating_add(u64::from(ns)),
            Op::AdvanceIntervals { k, frac } => {
                let t = self.params.t;
                let ns = u128::from(k) * t + u128::from(frac) * t / 256;
                self.now = self
                    .now
                    .saturating_add(u64::try_from(ns).unwrap_or(u64::MAX));
            }
            Op::SetNs(ns) => self.now = ns,
            Op::Rewind(ns) => self.now = self.now.saturating_sub(u64::from(ns)),
            Op::Check { key: k, n } => self.check(key(k), n.get()),
            Op::Peek { key: k } => self.peek(key(k)),
            Op::EvictIdle => self.evict_idle(),
            Op::Reserve {
                key: k,
                n,
                max_wait,
            } => self.reserve(key(k), n.get(), max_wait),
            Op::Cancel { pick } => return self.cancel(pick),
            Op::CheckAll {
                key: k,
                n,
                m,
                keyed_first,
            } => return self.check_all(key(k), n.get(), m.get(), keyed_first),
            Op::Refund { key: k, n } => return self.refund(key(k), n.get()),
            Op::CheckWith { key: k, n, quota } => return self.check_with(key(k), n.get(), quota),
            Op::SetQuota(tier) => self.set_quota(tier),
        }
        Flow::Next(None)
    }

    /// Whether the keyed limiter's state is still the shadow's: not once a request came at a
    /// time before the sweep floor (eviction is then only promised to give no credit, not to
    /// be invisible).
    fn track_shadow(&mut self) {
        self.shadow_valid &= self.now >= self.model.swept;
    }

    fn check(&mut self, k: u8, n: u32) {
        let now = self.now;
        self.track_shadow();
        // Direct limiter: one cell for every request.
        let (want, w) = step(&self.params, self.direct_tat, now, n);
        self.direct_tat = w.or(self.direct_tat);
        assert_eq!(
            Expected::of(&self.direct.check_n(n)),
            want,
            "direct {}",
            self.ctx()
        );
        if w.is_some() {
            act(&mut self.direct_acting, now + want.delay_ns, n);
        }
        // Keyed limiter.
        let p = self.params;
        let (want, swept, _, w) = self.model.admit(&p, &p, k, now, n, p.ceiling);
        let got = Expected::of(&self.keyed.check_n(&k, n));
        assert_eq!(got, want, "keyed {} held={:?}", self.ctx(), self.model.tats);
        if w.is_some() {
            let list = self
                .keyed_acting
                .entry(k)
                .or_insert_with(|| Some(Vec::new()));
            act(list, now + want.delay_ns, n);
        }
        let stats = &mut self.stats;
        stats.checks += 1;
        stats.keys_evicted += swept as u64;
        stats.queued += u64::from(want.allowed && want.delay_ns > 0);
        match (want.allowed, want.retry_after_ns) {
            (true, _) => stats.allowed += 1,
            (false, Some(_)) => stats.denied_with_retry += 1,
            (false, None) if n > p.burst => stats.denied_n_above_burst += 1,
            (false, None) if self.keyed.stats().refused > stats.refused_by_cap => {
                stats.refused_by_cap += 1;
            }
            (false, None) => stats.denied_at_horizon += 1,
        }
        if self.shadow_valid {
            let (want_shadow, w) = step(&p, self.shadow.get(&k).copied(), now, n);
            if let Some(w) = w {
                self.shadow.insert(k, w);
            }
            assert_eq!(
                got,
                want_shadow,
                "eviction changed a decision: {}",
                self.ctx()
            );
            self.stats.shadow_checks += 1;
        }
    }

    fn peek(&mut self, k: u8) {
        let now = self.now;
        self.track_shadow();
        let p = &self.params;
        let want = step(p, self.direct_tat, now, 0).0;
        assert_eq!(
            Expected::of(&self.direct.peek()),
            want,
            "direct peek {}",
            self.ctx()
        );
        assert_eq!(
            Expected::of(&self.direct.check_n(0)),
            want,
            "direct check_n(0) {}",
            self.ctx()
        );
        let want = self.model.peek(p, k, now);
        let got = Expected::of(&self.keyed.peek(&k));
        assert_eq!(got, want, "keyed peek {}", self.ctx());
        // A peek is `n = 0` without a write: the same as check_n(0).
        assert_eq!(
            Expected::of(&self.keyed.check_n(&k, 0)),
            want,
            "check_n(0) {}",
            self.ctx()
        );
        if self.shadow_valid {
            let want_shadow = step(p, self.shadow.get(&k).copied(), now, 0).0;
            assert_eq!(got, want_shadow, "eviction changed a peek: {}", self.ctx());
        }
    }

    fn evict_idle(&mut self) {
        let want = self.model.evict_idle(self.now);
        assert_eq!(self.keyed.evict_idle(), want, "evict_idle {}", self.ctx());
        self.stats.keys_evicted += want as u64;
    }

    /// A reservation's decision checked against the model's, and what a cancel needs to know
    /// of it.
    fn booked(
        &self,
        r: Reservation,
        want: &Expected,
        (before, w): (Option<u64>, Option<u64>),
        (k, n, wait): (u8, u32, Duration),
    ) -> Booked {
        assert_eq!(
            Expected::of(&r.decision()),
            *want,
            "reserve(&{k}, {n}, {wait:?}) {}",
            self.ctx()
        );
        assert_eq!(r.is_allowed(), want.allowed);
        assert_eq!(r.delay(), Duration::from_nanos(want.delay_ns));
        let holds = w.is_some();
        assert_eq!(r.units(), if holds { n } else { 0 }, "units of {r:?}");
        let after: u64 = w.unwrap_or(0);
        let start = before.unwrap_or(0).max(self.now);
        Booked {
            reservation: r,
            holds,
            before: before.unwrap_or(0),
            after,
            took: u128::from(after.saturating_sub(start)),
            acting: None,
        }
    }

    fn reserve(&mut self, k: u8, n: u32, max_wait: Wait) {
        let now = self.now;
        self.track_shadow();
        let p = self.params;
        let wait = max_wait.get(p.t);
        // Admitted iff its delay, `ahead - DVT`, is at most the wait; the ceiling
        // `DVT + max_wait` saturates at `u64::MAX` ns (a request that needs a TAT further
        // ahead than that is denied as beyond the ceiling, not as beyond the horizon:
        // `remaining` then counts what is left, see the README's notes).
        // A quota with a queue bounds reservations by it (the wait only narrows it).
        let mut ceiling = (p.dvt + wait.as_nanos()).min(HORIZON);
        if p.ceiling > p.dvt {
            ceiling = ceiling.min(p.ceiling);
        }
        let (want, w) = decide(&p, self.direct_tat, now, n, ceiling);
        let r = self.direct.reserve(n, wait);
        let mut d = self.booked(r, &want, (self.direct_tat, w), (k, n, wait));
        self.direct_tat = w.or(self.direct_tat);
        if w.is_some() {
            d.acting = act(&mut self.direct_acting, now + want.delay_ns, n);
        }
        let (want, swept, before_k, w) = self.model.admit(&p, &p, k, now, n, ceiling);
        let r = self.keyed.reserve(&k, n, wait);
        let mut kb = self.booked(r.clone(), &want, (before_k, w), (k, n, wait));
        if w.is_some() {
            let list = self
                .keyed_acting
                .entry(k)
                .or_insert_with(|| Some(Vec::new()));
            kb.acting = act(list, now + want.delay_ns, n);
        }
        self.stats.keys_evicted += swept as u64;
        self.stats.reserves += u64::from(kb.holds);
        self.stats.reserves_delayed += u64::from(kb.holds && want.delay_ns > 0);
        if self.shadow_valid {
            let (want_shadow, w) = decide(&p, self.shadow.get(&k).copied(), now, n, ceiling);
            if let Some(w) = w {
                self.shadow.insert(k, w);
            }
            assert_eq!(
                Expected::of(&r.decision()),
                want_shadow,
                "eviction changed a reservation: {}",
                self.ctx()
            );
            self.stats.shadow_checks += 1;
        }
        self.outstanding.push(Outstanding {
            key: k,
            epoch: self.epoch,
            direct: d,
            keyed: kb,
        });
    }

    /// A cancel moved a TAT from `old` back to `new`: never further back than the state
    /// before the reservation (and, while the clock has not gone back since, never more than
    /// the reservation moved it forward).
    fn check_took(&mut self, o: &Outstanding, keyed: bool, (old, new): (u64, u64)) {
        let (b, what) = if keyed {
            (&o.keyed, "keyed")
        } else {
            (&o.direct, "direct")
        };
        let back = u128::from(old - new);
        // A rollback gives back at most what its reservation took (out of order too: the TAT
        // may then end below the reservation's `before`).
        if back <= b.took || self.now < old.saturating_sub(b.took as u64) {
            return;
        }
        if EXCUSE_CANCEL_AFTER_SET_QUOTA && o.epoch != self.epoch {
            self.stats.excused_cancel_after_set_quota += 1;
            return;
        }
        panic!(
            "Inv: {what} cancel moved the TAT back {back} ns to {new}, its reservation \
             moved it forward {} ns from {}: {o:?} {}",
            b.took,
            b.before,
            self.ctx()
        );
    }

    fn cancel(&mut self, pick: u8) -> Flow {
        if self.outstanding.is_empty() {
            return Flow::Skip;
        }
        let now = self.now;
        let p = self.params;
        let o = self
            .outstanding
            .remove(usize::from(pick) % self.outstanding.len());
        let k = o.key;
        let want = if o.direct.holds {
            cancel(
                &p,
                self.direct_tat,
                now,
                o.direct.reservation.units(),
                (o.direct.before, o.direct.after, admitted_at(&o.direct)),
            )
        } else {
            None
        };
        assert_eq!(
            self.direct.cancel(o.direct.reservation.clone()),
            want.is_some(),
            "direct cancel of {o:?} on TAT {:?}: {}",
            self.direct_tat,
            self.ctx()
        );
        if let Some(new) = want {
            self.check_took(&o, false, (self.direct_tat.unwrap_or(0), new));
            self.direct_tat = Some(new);
            if let (Some(v), Some(j)) = (self.direct_acting.as_mut(), o.direct.acting) {
                v[j].2 = false;
            }
        }
        let held = self.model.tats.contains_key(&k);
        let want = if o.keyed.holds {
            self.model.on_held(k, |tat| {
                cancel(
                    &p,
                    Some(tat),
                    now,
                    o.keyed.reservation.units(),
                    (o.keyed.before, o.keyed.after, admitted_at(&o.keyed)),
                )
            })
        } else {
            None
        };
        assert_eq!(
            self.keyed.cancel(&k, o.keyed.reservation.clone()),
            want.is_some(),
            "keyed cancel of {o:?}, held={:?}: {}",
            self.model.tats,
            self.ctx()
        );
        if let Some((old, new)) = want {
            self.check_took(&o, true, (old, new));
            if let (Some(Some(v)), Some(j)) = (self.keyed_acting.get_mut(&k), o.keyed.acting) {
                v[j].2 = false;
            }
            self.stats.cancels += 1;
            self.stats.cancels_partial += u64::from(u128::from(old - new) < o.keyed.took);
        } else {
            self.stats.cancels_nothing += u64::from(o.keyed.holds);
        }
        // The shadow cancels where the keyed limiter held the key.
        if let (true, true, Some(tat)) = (held, o.keyed.holds, self.shadow.get_mut(&k)) {
            let at = admitted_at(&o.keyed);
            let r = (o.keyed.before, o.keyed.after, at);
            let units = o.keyed.reservation.units();
            if let Some(new) = cancel(&p, Some(*tat), now, units, r) {
                *tat = new;
            }
        }
        Flow::Next(Some(k))
    }

    /// `check_all` of the direct limiter (`n`) and key `k`'s gate (`m`). The model: a charge
    /// is a check (ceiling CEIL); a later gate's denial cancels the earlier charge at the same
    /// instant (`at` = now), by the cancel rules.
    fn check_all(&mut self, k: u8, n: u32, m: u32, keyed_first: bool) -> Flow {
        let now = self.now;
        let p = self.params;
        self.track_shadow();
        let gate = self.keyed.gate(&k);
        let d = check_pair(keyed_first, (&self.direct, n), (&gate, m));
        // Each gate charged in order, until one denies.
        let (mut keyed_got, mut direct_got) = (None, None);
        let mut denied_by = None;
        let order = if keyed_first {
            [true, false]
        } else {
            [false, true]
        };
        for (i, is_keyed) in order.into_iter().enumerate() {
            let ok = if is_keyed {
                let (kw, swept, before_k, w) = self.model.admit(&p, &p, k, now, m, p.ceiling);
                self.stats.keys_evicted += swept as u64;
                if self.shadow_valid && kw.allowed {
                    let (_, w) = step(&p, self.shadow.get(&k).copied(), now, m);
                    if let Some(w) = w {
                        self.shadow.insert(k, w);
                    }
                }
                keyed_got = Some((kw.allowed, kw.delay_ns, before_k.unwrap_or(0), w));
                kw.allowed
            } else {
                let before = self.direct_tat;
                let (dw, w) = step(&p, before, now, n);
                self.direct_tat = w.or(before);
                direct_got = Some((dw.allowed, dw.delay_ns, before.unwrap_or(0), w));
                dw.allowed
            };
            if !ok {
                denied_by = Some(i);
                break;
            }
        }
        let allowed = denied_by.is_none();
        match (denied_by, keyed_got, direct_got) {
            (None, Some((_, kdelay, _, kw)), Some((_, ddelay, _, dw))) => {
                // Both admitted: their units count in the conformance bound.
                if kw.is_some() {
                    let list = self
                        .keyed_acting
                        .entry(k)
                        .or_insert_with(|| Some(Vec::new()));
                    act(list, now + kdelay, m);
                }
                if dw.is_some() {
                    act(&mut self.direct_acting, now + ddelay, n);
                }
            }
            (Some(1), Some((_, _, before, Some(after))), _) if keyed_first && m > 0 => {
                // Roll back the keyed charge (and the shadow's, where the key is held).
                let r = (before, after, now);
                let held = self
                    .model
                    .on_held(k, |tat| cancel(&p, Some(tat), now, m, r));
                if let (true, true, Some(tat)) =
                    (self.shadow_valid, held.is_some(), self.shadow.get_mut(&k))
                {
                    if let Some(new) = cancel(&p, Some(*tat), now, m, r) {
                        *tat = new;
                    }
                }
            }
            (Some(1), _, Some((_, _, before, Some(after)))) if !keyed_first && n > 0 => {
                // Roll back the direct charge.
                if let Some(new) = cancel(&p, self.direct_tat, now, n, (before, after, now)) {
                    self.direct_tat = Some(new);
                }
            }
            _ => {}
        }
        assert_eq!(
            (d.is_allowed(), d.denied_by()),
            (allowed, denied_by),
            "check_all(direct {n}, key {k} {m}, keyed first {keyed_first}) {}",
            self.ctx()
        );
        if allowed {
            self.stats.gates_allowed += 1;
        } else if denied_by == Some(1) {
            self.stats.gates_rolled_back += 1;
        }
        // Whatever was rolled back, both limiters now decide as the model.
        Flow::Next(Some(k))
    }

    fn refund(&mut self, k: u8, n: u32) -> Flow {
        let now = self.now;
        let p = self.params;
        let want = refund(&p, self.direct_tat, now, n);
        assert_eq!(
            self.direct.refund(n),
            want.is_some(),
            "direct refund on {:?}: {}",
            self.direct_tat,
            self.ctx()
        );
        if want.is_some() {
            self.direct_tat = want;
            self.direct_acting = None;
        }
        let held = self.model.tats.contains_key(&k);
        let want = self.model.on_held(k, |tat| refund(&p, Some(tat), now, n));
        assert_eq!(
            self.keyed.refund(&k, n),
            want.is_some(),
            "keyed refund, held={:?}: {}",
            self.model.tats,
            self.ctx()
        );
        if want.is_some() {
            self.keyed_acting.insert(k, None);
            self.stats.refunds += 1;
        }
        if let (true, Some(tat)) = (held, self.shadow.get_mut(&k)) {
            if let Some(new) = refund(&p, Some(*tat), now, n) {
                *tat = new;
            }
        }
        Flow::Next(Some(k))
    }

    fn check_with(&mut self, k: u8, n: u32, quota: Tier) -> Flow {
        let now = self.now;
        let p = self.params;
        self.track_shadow();
        let (q, (count, period, burst, queue)) = quota.quota();
        let got_direct = self.direct.check_with(&q, n);
        let got_keyed = self.keyed.check_with(&k, &q, n);
        let with = match validate(count, period, burst, queue) {
            Ok(p) => p,
            Err(e) => {
                assert_eq!(got_direct.err(), Some(e.clone()), "direct check_with {q:?}");
                assert_eq!(got_keyed.err(), Some(e), "keyed check_with {q:?}");
                self.stats.quota_errors += 1;
                return Flow::Skip;
            }
        };
        let (want, w) = step(&with, self.direct_tat, now, n);
        self.direct_tat = w.or(self.direct_tat);
        let got = got_direct.unwrap_or_else(|e| panic!("check_with {q:?}: {e}"));
        assert_eq!(
            Expected::of(&got),
            want,
            "direct check_with {q:?} {}",
            self.ctx()
        );
        if w.is_some() {
            self.direct_acting = None;
        }
        let (want, swept, _, w) = self.model.admit(&with, &p, k, now, n, with.ceiling);
        let got = got_keyed.unwrap_or_else(|e| panic!("check_with {q:?}: {e}"));
        let got = Expected::of(&got);
        assert_eq!(
            got,
            want,
            "keyed check_with {q:?} {} held={:?}",
            self.ctx(),
            self.model.tats
        );
        if w.is_some() {
            self.keyed_acting.insert(k, None);
        }
        self.stats.keys_evicted += swept as u64;
        self.stats.checks_with += 1;
        if self.shadow_valid {
            let (want_shadow, w) = step(&with, self.shadow.get(&k).copied(), now, n);
            if let Some(w) = w {
                self.shadow.insert(k, w);
            }
            assert_eq!(
                got,
                want_shadow,
                "eviction changed a check_with: {}",
                self.ctx()
            );
            self.stats.shadow_checks += 1;
        }
        Flow::Next(None)
    }

    fn set_quota(&mut self, tier: Tier) {
        let (q, (count, period, burst, queue)) = quota_of(tier);
        let got = (self.direct.set_quota(q), self.keyed.set_quota(q));
        match validate(count, period, burst, queue) {
            Ok(p) => {
                assert_eq!(got, (Ok(()), Ok(())), "set_quota {q:?}");
                self.params = p;
                self.epoch += 1;
                self.conform = false;
                self.stats.quota_changes += 1;
            }
            Err(e) => {
                assert_eq!(got, (Err(e.clone()), Err(e)), "set_quota {q:?}");
                self.stats.quota_errors += 1;
            }
        }
    }

    /// After every operation: the clock moved to `now` (from `before`), the peeks of key
    /// `peeks_after` match the model, and the keyed store's size and counters are the
    /// model's.
    fn after(&mut self, before: u64, peeks_after: Option<u8>) {
        let now = self.now;
        self.stats.clock_backwards += u64::from(now < before);
        self.conform &= now >= before;
        self.clock.set_ns(now);
        assert_eq!(self.clock.now(), now);
        if let Some(k) = peeks_after {
            assert_peeks(
                &self.params,
                &self.direct,
                self.direct_tat,
                &self.keyed,
                &self.model,
                k,
                now,
                &|| self.ctx(),
            );
        }
        assert_eq!(
            self.keyed.len(),
            self.model.tats.len(),
            "len after {}",
            self.ctx()
        );
        assert_eq!(self.keyed.is_empty(), self.model.tats.is_empty());
        assert_eq!(
            self.keyed.stats().refused,
            self.model.refused,
            "refused after {}",
            self.ctx()
        );
        assert_eq!(
            self.keyed.stats().evicted,
            self.model.evicted,
            "evicted after {}",
            self.ctx()
        );
    }

    /// At the end: the conformance bound, where it applies.
    fn finish(mut self, input: &Input) -> Stats {
        if self.conform {
            let what = |subject: String| move || format!("{subject}: {:?}", input);
            self.stats.conformance_checked +=
                assert_conforms(&self.direct_acting, &self.params, &what("direct".into()));
            for (k, list) in &self.keyed_acting {
                self.stats.conformance_checked +=
                    assert_conforms(list, &self.params, &what(format!("keyed key {k}")));
            }
        }
        self.stats
    }
}
