//! The drivers: operations applied to the limiters under test and to the models, every
//! decision compared; eviction's losslessness and a clock behind a sweep.

use super::*;

fn fail(step: usize, now: u64, what: &str, detail: String) -> TestCaseError {
    TestCaseError::fail(format!("step {step} at t={now}: {what}: {detail}"))
}

/// Applies `steps` to every subject (all reading `clock`) and to a model state per subject and
/// key, comparing every field of every decision (and every restock's result).
pub fn drive<M: Model>(
    model: &M,
    window: u64,
    config: u32,
    clock: &ManualClock,
    subjects: &[&dyn Subject],
    steps: &[Step],
    monotone: bool,
) -> Result<(), TestCaseError> {
    let mut states: Vec<HashMap<u8, M::State>> = vec![HashMap::new(); subjects.len()];
    let mut t = 0u64;
    clock.set_ns(t);
    for (i, step) in steps.iter().enumerate() {
        t = step.time.apply(t, window, monotone);
        clock.set_ns(t);
        for (s, subject) in subjects.iter().enumerate() {
            let key = if subject.keyed() {
                step.action.key()
            } else {
                0
            };
            let label = if subject.keyed() { "keyed" } else { "direct" };
            let st = states[s].entry(key).or_insert_with(|| model.fresh());
            let what = format!("{label} {:?} key {key}", step.action);
            match step.action {
                Action::Check { n, .. } => {
                    let n = n.resolve(config);
                    let d = subject.decide(key, n);
                    let e = model.step(st, t, n);
                    check(&e, &d).map_err(|m| fail(i, t, &format!("{what} n={n}"), m))?;
                }
                Action::Peek { .. } => {
                    let d = subject.look(key);
                    let e = model.step(st, t, 0);
                    check(&e, &d).map_err(|m| fail(i, t, &what, m))?;
                }
                Action::Restock { units, .. } => {
                    let units = units.resolve(config);
                    let got = subject.add_stock(key, units);
                    let want = model.restock(st, units).expect("a stock model");
                    if got != Ok(want) {
                        return Err(fail(i, t, &what, format!("got {got:?}, want {want}")));
                    }
                }
                Action::SetStock { units, .. } => {
                    let units = units.resolve(config);
                    let got = subject.put_stock(key, units);
                    model.set_stock(st, units).expect("a stock model");
                    if got != Ok(()) {
                        return Err(fail(i, t, &what, format!("got {got:?}")));
                    }
                }
            }
        }
    }
    Ok(())
}

/// `evict_idle` is lossless: `a` evicts after every step, `b` never does; they must make the
/// same decisions (and both match the model). After each eviction `a` holds exactly the keys
/// the model says are not idle.
///
/// Lossless means "no decision at the sweep's time or later changes", so time only moves
/// forwards here unless `monotone` is false (for a stock, where time plays no part); see
/// [`evict_then_earlier_clock`] for a clock behind the sweep.
#[allow(clippy::too_many_arguments)]
pub fn drive_evicting<M: Model>(
    model: &M,
    window: u64,
    config: u32,
    clock: &ManualClock,
    a: &dyn Subject,
    b: &dyn Subject,
    steps: &[Step],
    monotone: bool,
) -> Result<usize, TestCaseError> {
    let mut states: HashMap<u8, M::State> = HashMap::new();
    let mut t = 0u64;
    let mut evicted = 0usize;
    clock.set_ns(t);
    for (i, step) in steps.iter().enumerate() {
        t = step.time.apply(t, window, monotone);
        clock.set_ns(t);
        let what = format!("{:?}", step.action);
        match step.action {
            Action::Check { key, n } => {
                let n = n.resolve(config);
                let (da, db) = (a.decide(key, n), b.decide(key, n));
                let e = model.step(states.entry(key).or_insert_with(|| model.fresh()), t, n);
                prop_assert_eq!(fields(&da), fields(&db), "step {} at t={}: {}", i, t, what);
                check(&e, &db).map_err(|m| fail(i, t, &what, m))?;
            }
            Action::Peek { key } => {
                let (da, db) = (a.look(key), b.look(key));
                let e = model.step(states.entry(key).or_insert_with(|| model.fresh()), t, 0);
                prop_assert_eq!(fields(&da), fields(&db), "step {} at t={}: {}", i, t, what);
                check(&e, &db).map_err(|m| fail(i, t, &what, m))?;
            }
            Action::Restock { key, units } => {
                let units = units.resolve(config);
                let (ra, rb) = (a.add_stock(key, units), b.add_stock(key, units));
                let want = model
                    .restock(states.entry(key).or_insert_with(|| model.fresh()), units)
                    .expect("a stock model");
                prop_assert_eq!(&ra, &rb, "step {}: {}", i, what);
                prop_assert_eq!(ra, Ok(want), "step {}: {}", i, what);
            }
            Action::SetStock { key, units } => {
                let units = units.resolve(config);
                prop_assert_eq!(a.put_stock(key, units), Ok(()));
                prop_assert_eq!(b.put_stock(key, units), Ok(()));
                model
                    .set_stock(states.entry(key).or_insert_with(|| model.fresh()), units)
                    .expect("a stock model");
            }
        }
        let before = a.held();
        let removed = a.sweep();
        evicted += removed;
        let live = states.values().filter(|s| !model.is_idle(s, t)).count();
        prop_assert_eq!(before - removed, a.held(), "step {}: evict_idle's count", i);
        prop_assert_eq!(
            a.held(),
            live,
            "step {} at t={}: keys held after evict_idle vs keys the model says are live",
            i,
            t
        );
    }
    Ok(evicted)
}

/// Eviction gives no credit back to a clock behind the sweep: `a` and `b` see the same history
/// (time moving forwards), then `a` evicts its idle keys at the final time `s`, and the clock is
/// set back to `s * back_milli / 1000`. There, for every key (held, evicted or never seen),
/// `a` must be at least as strict as `b`: no more `remaining`, and a request for `n >= 1` units
/// that `a` admits is admitted by `b` too.
#[allow(clippy::too_many_arguments)]
pub fn evict_then_earlier_clock(
    window: u64,
    config: u32,
    clock: &ManualClock,
    a: &dyn Subject,
    b: &dyn Subject,
    history: &[Step],
    back_milli: u16,
    n: u32,
) -> Result<(), TestCaseError> {
    let mut t = 0u64;
    clock.set_ns(t);
    for step in history {
        t = step.time.apply(t, window, true);
        clock.set_ns(t);
        let (da, db) = match step.action {
            Action::Check { key, n } => {
                let n = n.resolve(config);
                (a.decide(key, n), b.decide(key, n))
            }
            Action::Peek { key } => (a.look(key), b.look(key)),
            _ => unreachable!("checks and peeks only"),
        };
        prop_assert_eq!(fields(&da), fields(&db));
    }
    a.sweep();
    let earlier = u64::try_from(u128::from(t) * u128::from(back_milli) / 1000).unwrap();
    clock.set_ns(earlier);
    for key in 0..4u8 {
        let (pa, pb) = (a.look(key), b.look(key));
        prop_assert!(
            pa.remaining() <= pb.remaining(),
            "key {}: swept at {} then peeked at {}: {:?} vs never swept {:?}",
            key,
            t,
            earlier,
            pa,
            pb
        );
        if n >= 1 {
            let (da, db) = (a.decide(key, n), b.decide(key, n));
            prop_assert!(
                !da.is_allowed() || db.is_allowed(),
                "key {}: swept at {} then n={} at {}: admitted, but denied without the sweep: {:?}",
                key,
                t,
                n,
                earlier,
                db
            );
        }
    }
    Ok(())
}
