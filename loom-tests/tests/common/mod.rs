//! Helpers shared by the model files (each `tests/*.rs` is its own crate and includes this
//! module with `mod common;`, so not every helper is used by every file).
#![allow(dead_code)]

use std::collections::BTreeSet;
use std::fmt::Debug;
use std::hash::BuildHasher;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Once, OnceLock};

use cellgate::clock::{Clock, ManualClock};
use cellgate::{Decision, KeyedLimiter, SlidingLog};
use loom::sync::atomic::AtomicU64;

/// Model-checks `f` with a loom builder configured from the environment
/// (`LOOM_MAX_PREEMPTIONS`, `LOOM_MAX_BRANCHES`, `LOOM_CHECKPOINT_FILE`, ...; an unset
/// `LOOM_MAX_PREEMPTIONS` means an exhaustive search), and reports how many interleavings it
/// explored and how long that took.
pub fn model(name: &str, f: impl Fn() + Sync + Send + 'static) {
    let builder = builder();
    let bound = builder.preemption_bound;
    let iterations = Arc::new(AtomicUsize::new(0));
    let counter = Arc::clone(&iterations);
    let start = std::time::Instant::now();
    builder.check(move || {
        counter.fetch_add(1, Ordering::Relaxed);
        f();
    });
    eprintln!(
        "loom model {name}: {} interleavings in {:.2?} (preemption bound {})",
        iterations.load(Ordering::Relaxed),
        start.elapsed(),
        bound.map_or_else(|| "none: exhaustive".to_string(), |b| b.to_string()),
    );
}

/// Runs `f` as a loom model and checks that the outcomes it returns over all interleavings are
/// exactly `expected` (the race went every way it can).
pub fn model_reaching<T>(
    name: &str,
    expected: BTreeSet<T>,
    f: impl Fn() -> T + Sync + Send + 'static,
) where
    T: Ord + std::fmt::Debug + Send + 'static,
{
    let outcomes = std::sync::Arc::new(Mutex::new(BTreeSet::new()));
    let seen = std::sync::Arc::clone(&outcomes);
    model(name, move || {
        let outcome = f();
        seen.lock().unwrap().insert(outcome);
    });
    assert_eq!(
        *outcomes.lock().unwrap(),
        expected,
        "the race went every way"
    );
}

/// A loom builder configured from the environment, with more branches per execution than
/// loom's default (1,000, unless `LOOM_MAX_BRANCHES` says otherwise): a sweep that rebuilds
/// the growing table, with a check and a moving clock beside it, takes more (the exact store's
/// `evict_with_check_behind_the_sweep`). A model that spins forever still fails at the bound.
fn builder() -> loom::model::Builder {
    let mut builder = loom::model::Builder::new();
    if std::env::var_os("LOOM_MAX_BRANCHES").is_none() {
        builder.max_branches = 20_000;
    }
    builder
}

/// Runs single-threaded `f` once inside a loom execution (the limiters' atomics and locks are
/// loom objects under `cfg(loom)` and can only be created and used inside one) and returns what
/// it computed. Used to tabulate serial outcomes before the concurrent model runs, so that each
/// explored interleaving only has to compare against the table.
pub fn serially<R: Send + 'static>(f: impl Fn() -> R + Sync + Send + 'static) -> R {
    let slot = Arc::new(Mutex::new(None));
    let out = Arc::clone(&slot);
    let mut builder = builder();
    // One thread: one execution; never resume from a checkpoint meant for a concurrent model.
    builder.checkpoint_file = None;
    builder.check(move || {
        *out.lock().unwrap() = Some(f());
    });
    let r = slot.lock().unwrap().take();
    r.expect("the serial run produced nothing")
}

/// Asserts that a concurrent run's results and final state are those of one of the `serial`
/// runs `(label, results, state)`, and returns that run's label (the first, if several match).
/// Several serial runs may give the same results and different states (for example, the same
/// decision computed at different instants), so both are matched together.
pub fn assert_serial<L, G, S>(serial: &[(L, G, S)], got: &G, state: &S) -> L
where
    L: Clone + Debug,
    G: PartialEq + Debug,
    S: PartialEq + Debug,
{
    if let Some((label, _, _)) = serial.iter().find(|(_, g, s)| g == got && s == state) {
        return label.clone();
    }
    let same: Vec<_> = serial.iter().filter(|(_, g, _)| g == got).collect();
    if same.is_empty() {
        panic!("no serial run gives the results {got:#?}\n(final state {state:#?})");
    }
    let labels: Vec<_> = same.iter().map(|(l, _, _)| l).collect();
    let states: Vec<_> = same.iter().map(|(_, _, s)| s).collect();
    panic!(
        "the results match the serial runs {labels:?}, but the final state\n{state:#?}\n\
         is none of theirs:\n{states:#?}"
    );
}

/// All orderings of `0..n`.
pub fn permutations(n: usize) -> Vec<Vec<usize>> {
    fn go(prefix: &mut Vec<usize>, n: usize, out: &mut Vec<Vec<usize>>) {
        if prefix.len() == n {
            out.push(prefix.clone());
            return;
        }
        for i in 0..n {
            if !prefix.contains(&i) {
                prefix.push(i);
                go(prefix, n, out);
                prefix.pop();
            }
        }
    }
    let mut out = Vec::new();
    go(&mut Vec::new(), n, &mut out);
    out
}

/// A peek, then unit checks until the first denial (at most `most + 1` of them): what a key's
/// state looks like to the public API. Two cells that drain alike hold the same state (a
/// peek's `reset_after` is `TAT - now` while `TAT > now`, and the checks count what is left).
pub fn drain(
    peek: impl Fn() -> Decision,
    check: impl Fn() -> Decision,
    most: u32,
) -> Vec<Decision> {
    let mut seen = vec![peek()];
    for _ in 0..=most {
        let d = check();
        seen.push(d);
        if !d.is_allowed() {
            break;
        }
    }
    seen
}

/// What a model thread gets back from a keyed limiter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Got {
    Decision(Decision),
    Evicted(usize),
    Refunded(bool),
}

impl Got {
    pub fn admitted(&self) -> bool {
        matches!(self, Got::Decision(d) if d.is_allowed())
    }
}

/// Requests admitted among the threads' results.
pub fn admitted(got: &[Got]) -> usize {
    got.iter().filter(|g| g.admitted()).count()
}

/// Checks admitted in one key's observation (after the leading peek, which admits nothing).
pub fn drained(seen: &[Decision]) -> usize {
    seen[1..].iter().filter(|d| d.is_allowed()).count()
}

/// The keyed limiters the models observe (`KeyedLimiter` in either store, `SlidingLog`), with
/// `u64` keys, as [`observe_keys`] and [`observe_at`] read them.
pub trait Keyed {
    fn check_key(&self, key: u64) -> Decision;
    fn peek_key(&self, key: u64) -> Decision;
    /// Keys held.
    fn held(&self) -> usize;
    /// New keys refused at the bound.
    fn refused_keys(&self) -> u64;
    /// Keys dropped as idle, where the limiter counts them.
    fn evicted_keys(&self) -> Option<u64>;
    /// `evict_idle()`.
    fn sweep(&self) -> usize;
    /// `refund(key, n)`, where the limiter has it.
    fn refund_key(&self, key: u64, n: u32) -> bool;
}

/// A `u64` by another name: a key type that is not an integer, so that `exact_keys()` keeps
/// each key beside its slot (the key column) instead of taking it as its fingerprint.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Word(pub u64);

impl From<u64> for Word {
    fn from(key: u64) -> Self {
        Word(key)
    }
}

/// `Keyed` for a limiter type with the same-named inherent methods, on keys of type `$key`
/// (made from the models' `u64` keys by `From`); `$evicted` reads its eviction count, if it
/// keeps one.
macro_rules! keyed {
    ($limiter:ident < $key:ty >, $evicted:expr, $refund:expr) => {
        impl<C: Clock> Keyed for $limiter<$key, C> {
            fn check_key(&self, key: u64) -> Decision {
                self.check(&<$key>::from(key))
            }
            fn peek_key(&self, key: u64) -> Decision {
                self.peek(&<$key>::from(key))
            }
            fn held(&self) -> usize {
                self.len()
            }
            fn refused_keys(&self) -> u64 {
                self.stats().refused
            }
            fn evicted_keys(&self) -> Option<u64> {
                let evicted: fn(&Self) -> Option<u64> = $evicted;
                evicted(self)
            }
            fn sweep(&self) -> usize {
                self.evict_idle()
            }
            fn refund_key(&self, key: u64, n: u32) -> bool {
                let refund: fn(&Self, $key, u32) -> bool = $refund;
                refund(self, <$key>::from(key), n)
            }
        }
    };
}

keyed!(
    KeyedLimiter<u64>,
    |l| Some(l.stats().evicted),
    |l, key, n| l.refund(&key, n)
);
keyed!(
    KeyedLimiter<Word>,
    |l| Some(l.stats().evicted),
    |l, key, n| l.refund(&key, n)
);
keyed!(SlidingLog<u64>, |_| None, |_, _, _| unreachable!(
    "a sliding log has no refund"
));

/// A GCRA quota of `burst` requests per `burst * t` ns with burst `burst`: emission interval
/// exactly `t`.
pub fn burst_quota(burst: u32, t: u64) -> cellgate::Quota {
    let period = std::time::Duration::from_nanos(t * u64::from(burst));
    cellgate::Quota::new(burst, period).with_burst(burst)
}

/// What one thread does to a keyed limiter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyedOp {
    Check(u64),
    EvictIdle,
    Peek(u64),
    Refund(u64, u32),
}

/// A scenario on a keyed limiter (the table, the exact map, the sliding log): each model file
/// describes its limiter and setup, and the blanket [`Scenario`] impl runs the operations and
/// observes every key with [`observe_keys`].
pub trait KeyedScenario: Clone + Send + Sync + 'static {
    type Limiter: Keyed + Send + Sync + 'static;

    /// How far the observation moves the clock for its second look (an interval, a window).
    const LATER_NS: u64;
    /// Whether `evicted()` is part of the observed state.
    const OBSERVE_EVICTED: bool = true;

    /// The model's instant.
    const NOW: u64;

    /// A fresh limiter on `clock` (already at the model's instant), with the setup applied.
    fn limiter(&self, clock: &ManualClock) -> Self::Limiter;

    fn parts(&self) -> Parts<'_>;
}

/// A GCRA scenario on the bounded table or the exact map (`table.rs`, `exact_map.rs`): the
/// burst, the store's bound (of each file's own type `B`), a setup (`S`, run on the main thread
/// before the threads are spawned, and before each serial run), the keys whose final state is
/// observed, and one operation per thread. Each file implements [`KeyedScenario`] for its own.
#[derive(Clone)]
pub struct StoreScenario<B, S> {
    pub burst: u32,
    pub max_keys: B,
    pub setup: S,
    pub keys: Vec<u64>,
    pub ops: Vec<KeyedOp>,
}

impl<B, S> StoreScenario<B, S> {
    /// Its [`KeyedScenario::parts`]: the operations, the keys, and the burst as the most a key
    /// admits.
    pub fn store_parts(&self) -> Parts<'_> {
        Parts {
            ops: &self.ops,
            keys: &self.keys,
            most: self.burst,
        }
    }
}

/// What a [`KeyedScenario`] runs and observes.
pub struct Parts<'a> {
    /// One operation per thread.
    pub ops: &'a [KeyedOp],
    /// The keys whose state is observed.
    pub keys: &'a [u64],
    /// The most checks a key can admit (its burst or limit).
    pub most: u32,
}

impl<K: KeyedScenario> Scenario for K {
    type Subject = K::Limiter;
    type Clock = ManualClock;
    type Op = KeyedOp;
    type Got = Got;
    type Observed = KeyedObserved;

    fn ops(&self) -> &[KeyedOp] {
        self.parts().ops
    }

    fn start(&self) -> (K::Limiter, ManualClock) {
        let clock = ManualClock::new();
        clock.set_ns(K::NOW);
        (self.limiter(&clock), clock)
    }

    fn apply(&self, lim: &K::Limiter, op: KeyedOp) -> Got {
        match op {
            KeyedOp::Check(key) => Got::Decision(lim.check_key(key)),
            KeyedOp::EvictIdle => Got::Evicted(lim.sweep()),
            KeyedOp::Peek(key) => Got::Decision(lim.peek_key(key)),
            KeyedOp::Refund(key, n) => Got::Refunded(lim.refund_key(key, n)),
        }
    }

    fn observe(&self, lim: &K::Limiter, clock: &ManualClock) -> KeyedObserved {
        let Parts { keys, most, .. } = self.parts();
        let seen = observe_keys(lim, keys, most, || clock.advance_ns(K::LATER_NS));
        KeyedObserved {
            evicted: seen.evicted.filter(|_| K::OBSERVE_EVICTED),
            ..seen
        }
    }
}

/// [`check_behind_the_sweep`] for a keyed limiter with a limit of 1 per `interval` ns: `make`
/// builds it on the clock, `key` is admitted at `now` and the clock set to `before`; the
/// thread's check and the sweep race while the main thread moves the clock to `after`; the
/// state is observed at `after` and one interval later ([`observe_at`]).
pub fn keyed_check_behind_the_sweep<L: Keyed + Send + Sync + 'static>(
    name: &str,
    key: u64,
    [now, before, after, interval]: [u64; 4],
    make: impl Fn(&LoomClock) -> L + Send + Sync + 'static,
    assert_run: impl Fn(&(Decision, usize), &(usize, Vec<Decision>)) + Send + Sync + 'static,
) -> BTreeSet<String> {
    check_behind_the_sweep(
        name,
        [before, after],
        move |clock| {
            let lim = make(clock);
            clock.set(now);
            assert!(lim.check_key(key).is_allowed());
            clock.set(before);
            lim
        },
        move |lim: &L| lim.check_key(key),
        |lim: &L| lim.sweep(),
        move |lim: &L, clock| observe_at(lim, clock, key, [after, after + interval], 1),
        assert_run,
    )
}

/// The assertions of the insert-race models (two checks of one new key with a burst or limit
/// of 1): exactly one admitted, one entry for the key, nothing left now (no admission lost)
/// and exactly one more after the observation's later instant.
pub fn assert_one_admission_one_entry(got: &[Got], seen: &KeyedObserved) {
    assert_eq!(admitted(got), 1, "exactly one admitted: {got:#?}");
    assert_eq!(seen.len, 1, "exactly one entry for the key: {seen:#?}");
    assert_eq!(drained(&seen.now[0]), 0, "an admission was lost: {seen:#?}");
    assert_eq!(drained(&seen.later[0]), 1, "{seen:#?}");
}

/// The assertion of the GCRA behind-the-sweep models (burst 1, emission interval `t`): the
/// check may be admitted only a whole interval after the admission at the model's start, so
/// its TAT, seen by the first peek of [`observe_at`], is at least `t` ahead.
pub fn admitted_a_whole_interval_later(
    t: u64,
) -> impl Fn(&(Decision, usize), &(usize, Vec<Decision>)) + Send + Sync + 'static {
    move |got, seen| {
        if got.0.is_allowed() {
            assert!(
                seen.1[0].reset_after_ns() >= t,
                "admitted less than one interval after the previous admission: {got:#?} {seen:#?}"
            );
        }
    }
}

/// The assertions of the `evict_idle_races_check` models (`ops = [check(k), evict_idle()]`
/// on an idle key `k` with a burst or limit of 1): the check is admitted, `evict_idle()`
/// returns 0 or 1, and the admission is never lost to a removed entry (a further check at the
/// same instant is denied); `k` is held exactly once.
pub fn assert_eviction_kept_the_admission(got: &[Got], seen: &KeyedObserved) {
    assert!(
        got[0].admitted(),
        "the idle key has its whole burst: {got:#?}"
    );
    assert!(matches!(got[1], Got::Evicted(0 | 1)), "{got:#?}");
    assert_eq!(
        drained(&seen.now[0]),
        0,
        "the admission was lost: a further check at the same instant was admitted: {seen:#?}"
    );
    assert_eq!(seen.len, 1, "the key is held exactly once: {seen:#?}");
}

/// The final state of a keyed limiter as far as the public API can tell.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyedObserved {
    pub len: usize,
    /// New keys refused because the store was full of live keys.
    pub refused: u64,
    /// Keys dropped as idle (by `evict_idle` or by a sweep at the bound), where counted.
    pub evicted: Option<u64>,
    /// Per key: a peek now, then checks until the first denial.
    pub now: Vec<Vec<Decision>>,
    /// The same per key after `later` moved the clock.
    pub later: Vec<Vec<Decision>>,
}

/// Observes `lim`: its counters, then every key of `keys` drained ([`drain`], at most
/// `most + 1` checks) now and again after `later` (which moves the clock on). Equal
/// observations mean equal states for every key (`peek().reset_after()` is `TAT - now` while
/// `TAT > now`, and the checks count what is left).
pub fn observe_keys(
    lim: &impl Keyed,
    keys: &[u64],
    most: u32,
    later: impl FnOnce(),
) -> KeyedObserved {
    let (len, refused, evicted) = (lim.held(), lim.refused_keys(), lim.evicted_keys());
    let drain_all = || {
        keys.iter()
            .map(|&k| drain(|| lim.peek_key(k), || lim.check_key(k), most))
            .collect()
    };
    let now = drain_all();
    later();
    KeyedObserved {
        len,
        refused,
        evicted,
        now,
        later: drain_all(),
    }
}

/// The observation of the behind-the-sweep models: keys held, then at each of `instants` a peek
/// of `key` and checks until the first denial (at most `most + 1`).
pub fn observe_at(
    lim: &impl Keyed,
    clock: &LoomClock,
    key: u64,
    instants: [u64; 2],
    most: u32,
) -> (usize, Vec<Decision>) {
    let mut seen = Vec::new();
    for t in instants {
        clock.set(t);
        seen.extend(drain(|| lim.peek_key(key), || lim.check_key(key), most));
    }
    (lim.held(), seen)
}

/// A linearizability scenario: a subject (a limiter) built fresh for every run, one operation
/// per thread, and an observation of the state the run leaves behind.
///
/// [`check_linearizable`] model-checks it: every explored execution's results and final state
/// must be those of running the same operations one after another, in some order
/// ([`serial_outcomes`]), on a fresh subject.
pub trait Scenario: Clone + Send + Sync + 'static {
    type Subject: Send + Sync + 'static;
    /// What [`Scenario::observe`] needs besides the subject (the clock it reads, to move it).
    type Clock: 'static;
    type Op: Copy + Debug + Send + Sync + 'static;
    type Got: Clone + PartialEq + Debug + Send + Sync + 'static;
    type Observed: Clone + PartialEq + Debug + Send + Sync + 'static;

    /// Whether the last operation runs on the main thread (one thread fewer to spawn), or on a
    /// spawned thread like the others.
    const LAST_ON_MAIN: bool = true;

    /// One operation per thread.
    fn ops(&self) -> &[Self::Op];

    /// A fresh subject with the scenario's setup applied, and its clock.
    fn start(&self) -> (Self::Subject, Self::Clock);

    fn apply(&self, subject: &Self::Subject, op: Self::Op) -> Self::Got;

    /// The final state as far as the public API can tell (may move the clock).
    fn observe(&self, subject: &Self::Subject, clock: &Self::Clock) -> Self::Observed;
}

/// One run of a scenario: the order its operations ran in (indices into `ops`), the results
/// (indexed like `ops`) and the final state.
pub type Outcome<S> = (
    Vec<usize>,
    Vec<<S as Scenario>::Got>,
    <S as Scenario>::Observed,
);

/// Every serial order's outcome, tabulated once (in a one-thread loom execution, see
/// [`serially`]) before the concurrent exploration.
pub fn serial_outcomes<S: Scenario>(s: &S) -> Vec<Outcome<S>> {
    let s = s.clone();
    serially(move || {
        permutations(s.ops().len())
            .into_iter()
            .map(|order| {
                let (subject, clock) = s.start();
                let mut got = vec![None; s.ops().len()];
                for &i in &order {
                    got[i] = Some(s.apply(&subject, s.ops()[i]));
                }
                let got = got.into_iter().map(Option::unwrap).collect();
                let seen = s.observe(&subject, &clock);
                (order, got, seen)
            })
            .collect()
    })
}

/// Runs `ops[i]` on thread `i` (the last one on the main thread if [`Scenario::LAST_ON_MAIN`]),
/// all on one subject; returns the results (indexed like `ops`), the subject (every thread
/// joined: all writes visible) and its clock.
pub fn run_concurrently<S: Scenario>(s: &S) -> (Vec<S::Got>, S::Subject, S::Clock) {
    let (subject, clock) = s.start();
    let subject = loom::sync::Arc::new(subject);
    let (spawned, mine) = match s.ops().split_last() {
        Some((&last, rest)) if S::LAST_ON_MAIN => (rest, Some(last)),
        _ => (s.ops(), None),
    };
    let handles: Vec<_> = spawned
        .iter()
        .map(|&op| {
            let (s, subject) = (s.clone(), loom::sync::Arc::clone(&subject));
            loom::thread::spawn(move || s.apply(&subject, op))
        })
        .collect();
    let mine = mine.map(|op| s.apply(&subject, op));
    let mut got: Vec<S::Got> = handles
        .into_iter()
        .map(|h| h.join().expect("model thread panicked"))
        .collect();
    got.extend(mine);
    let subject = loom::sync::Arc::try_unwrap(subject)
        .unwrap_or_else(|_| panic!("threads still hold the limiter"));
    (got, subject, clock)
}

/// Model-checks `s`: every explored execution's results and final state must be one of
/// `accepted` (the serial outcomes, plus whatever the model documents; see [`assert_serial`]),
/// and `each` (the scenario's own assertions) must hold on it. Returns the labels of the
/// accepted outcomes the executions matched (also printed).
pub fn check_linearizable<S, L>(
    name: &str,
    s: &S,
    accepted: Vec<(L, Vec<S::Got>, S::Observed)>,
    each: impl Fn(&[S::Got], &S::Observed) + Send + Sync + 'static,
) -> BTreeSet<L>
where
    S: Scenario,
    L: Clone + Debug + Ord + Send + Sync + 'static,
{
    let s = s.clone();
    let matched = Arc::new(Mutex::new(BTreeSet::new()));
    let seen_labels = Arc::clone(&matched);
    model(name, move || {
        let (got, subject, clock) = run_concurrently(&s);
        let seen = s.observe(&subject, &clock);
        each(&got, &seen);
        let label = assert_serial(&accepted, &got, &seen);
        seen_labels.lock().unwrap().insert(label);
    });
    let matched = matched.lock().unwrap().clone();
    eprintln!("  {name}: outcomes matched {matched:?}");
    matched
}

/// How many distinct outcomes (results and state) `outcomes` holds, and how many of them the
/// labels in `matched` reach. [`assert_serial`] names the first matching outcome, so distinct
/// labels matched are distinct outcomes reached.
pub fn coverage<L: Ord, G: Debug, O: Debug>(
    outcomes: &[(L, G, O)],
    matched: &BTreeSet<L>,
) -> (usize, usize) {
    let key = |(_, g, s): &(L, G, O)| format!("{g:?}{s:?}");
    let distinct: BTreeSet<String> = outcomes.iter().map(key).collect();
    let reached: BTreeSet<String> = outcomes
        .iter()
        .filter(|o| matched.contains(&o.0))
        .map(key)
        .collect();
    (distinct.len(), reached.len())
}

/// Where the serial runs have two different outcomes, loom reached at least two (the race was
/// explored both ways).
pub fn assert_race_went_both_ways<L: Ord + Debug, G: Debug, O: Debug>(
    name: &str,
    outcomes: &[(L, G, O)],
    matched: &BTreeSet<L>,
) {
    let (distinct, reached) = coverage(outcomes, matched);
    if distinct > 1 {
        assert!(
            reached > 1,
            "{name}: the race was explored one way only: {matched:?}"
        );
    }
}

/// Whether the exploration must reach every serial outcome: at a preemption bound of 2 or more
/// (the CI bound is 3) or with none (exhaustive). At a bound of 1 loom cannot reach some of the
/// three-thread models' outcomes.
pub fn coverage_required() -> bool {
    !matches!(loom::model::Builder::new().preemption_bound, Some(b) if b < 2)
}

/// A constant per-instance seed for aHash.
struct FixedSeed;

impl ahash::random_state::RandomSource for FixedSeed {
    fn gen_hasher_seed(&self) -> usize {
        0x5eed_cafe
    }
}

/// Makes every `ahash::RandomState::new()` in this process hash identically.
///
/// The keyed limiter's table hashes keys with `ahash::RandomState::new()`, which by default
/// differs per *instance* (a process-wide counter is mixed in). A loom model builds a fresh
/// limiter in every execution, so keys would land in different slots from one execution to the
/// next, probe runs would have different lengths, and the model would not be deterministic
/// (loom replays a schedule by position and requires the same program on every execution).
/// With a constant per-instance seed the layout is fixed for the whole process; the
/// process-wide keys still come from the OS, so the layout varies between runs of the suite,
/// which is why the models pick their keys by hash with [`colliding_keys`] and
/// [`distant_keys`], so that the layout is the same in every run.
///
/// Must run before any `RandomState` is created: every model calls it first.
pub fn deterministic_hashing() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        ahash::random_state::set_random_source(FixedSeed)
            .expect("aHash's random source was chosen before the models could fix it");
    });
}

/// The hash the limiter's table computes for `key` (same hasher, same seeds).
pub fn hash(key: u64) -> u64 {
    deterministic_hashing();
    // `BuildHasher::hash_one`, as the table calls it (on a `&u64`, which hashes as the `u64`).
    BuildHasher::hash_one(&ahash::RandomState::new(), key)
}

/// The first `count` keys (from 0 up) whose hashes' low 32 bits lie in
/// `[base, base + 2^20)`, with distinct fingerprints.
///
/// The home slot of a key is a multiply-shift of those 32 bits onto the shard's slots,
/// `(low32 * slots) >> 32`; for every shard of fewer than 4096 slots the whole interval maps to
/// the same home (`floor(base * slots / 2^32)`), so these keys share one home slot, and it is the
/// same slot in every run of the suite, whatever the process's hash keys. (A tiny table has one
/// shard, so the shard, chosen by the top bits, is the same too.) About 4 096 hashes per key.
fn keys_near(base: u32, count: usize) -> Vec<u64> {
    const WIDTH: u32 = 1 << 20;
    let mut keys: Vec<u64> = Vec::new();
    for key in 0u64.. {
        let h = hash(key);
        if (h as u32).wrapping_sub(base) < WIDTH {
            assert!(
                keys.iter().all(|&k| hash(k) != h),
                "a full 64-bit hash collision"
            );
            keys.push(key);
            if keys.len() == count {
                break;
            }
        }
    }
    keys
}

/// Two distinct keys with the same home slot (a quarter into the shard) and different
/// fingerprints: the second one inserted sits one slot after the first, on its probe run.
pub fn colliding_keys() -> [u64; 2] {
    static KEYS: OnceLock<[u64; 2]> = OnceLock::new();
    *KEYS.get_or_init(|| {
        let k = keys_near(1 << 30, 2);
        [k[0], k[1]]
    })
}

/// Two keys whose home slots are half a shard apart (a quarter and three quarters into it).
pub fn distant_keys() -> [u64; 2] {
    static KEYS: OnceLock<[u64; 2]> = OnceLock::new();
    *KEYS.get_or_init(|| [keys_near(1 << 30, 1)[0], keys_near(3 << 30, 1)[0]])
}

/// A clock loom can see: `now()` is a relaxed load of a loom atomic, so a thread may read the
/// time from before or after another thread moved it, as with `ManualClock` or `CoarseClock`
/// (both relaxed atomics) on real hardware.
#[derive(Debug, Clone)]
pub struct LoomClock(loom::sync::Arc<AtomicU64>);

impl LoomClock {
    pub fn at(ns: u64) -> Self {
        Self(loom::sync::Arc::new(AtomicU64::new(ns)))
    }

    pub fn set(&self, ns: u64) {
        // Relaxed: as `ManualClock::set_ns`; the limiter publishes nothing through the clock.
        self.0.store(ns, Ordering::Relaxed);
    }
}

impl Clock for LoomClock {
    fn now(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

/// The "check behind the sweep" model shared by the keyed stores: a limiter built on a
/// [`LoomClock`] (`build` leaves the clock at `before`), one thread runs `check` on it, another
/// `evict` (its `evict_idle()`), while the main thread moves the clock to `after`.
///
/// First tabulates the serial runs of {check, evict}: both orders, each operation at either
/// instant (a check that lands after the sweep may still have read the earlier time: that is the
/// race these models are about), each labelled `order [i, j] at [t_check, t_evict]`, with
/// `observe`'s view of the state afterwards. Then model-checks the concurrent run: `assert_run`
/// gets its results `(check, evicted)` and the observed state for the model's own assertions,
/// and the run must be one of the serial ones ([`assert_serial`]). Returns the labels of the
/// serial runs the concurrent runs matched (also printed).
pub fn check_behind_the_sweep<L, D, O>(
    name: &str,
    [before, after]: [u64; 2],
    build: impl Fn(&LoomClock) -> L + Send + Sync + 'static,
    check: impl Fn(&L) -> D + Send + Sync + 'static,
    evict: impl Fn(&L) -> usize + Send + Sync + 'static,
    observe: impl Fn(&L, &LoomClock) -> O + Send + Sync + 'static,
    assert_run: impl Fn(&(D, usize), &O) + Send + Sync + 'static,
) -> BTreeSet<String>
where
    L: Send + Sync + 'static,
    D: PartialEq + Debug + Send + Sync + 'static,
    O: PartialEq + Debug + Send + Sync + 'static,
{
    let (build, check, evict, observe) = (
        Arc::new(build),
        Arc::new(check),
        Arc::new(evict),
        Arc::new(observe),
    );
    let serial = {
        let (build, check, evict, observe) = (
            Arc::clone(&build),
            Arc::clone(&check),
            Arc::clone(&evict),
            Arc::clone(&observe),
        );
        serially(move || {
            let mut out = Vec::new();
            for times in [
                [before, before],
                [before, after],
                [after, before],
                [after, after],
            ] {
                for order in permutations(2) {
                    let clock = LoomClock::at(0);
                    let lim = build(&clock);
                    let mut got = (None, None);
                    for &i in &order {
                        clock.set(times[i]);
                        match i {
                            0 => got.0 = Some(check(&lim)),
                            _ => got.1 = Some(evict(&lim)),
                        }
                    }
                    let got = (got.0.unwrap(), got.1.unwrap());
                    out.push((
                        format!("order {order:?} at {times:?}"),
                        got,
                        observe(&lim, &clock),
                    ));
                }
            }
            out
        })
    };
    let matched = Arc::new(Mutex::new(BTreeSet::new()));
    let seen_labels = Arc::clone(&matched);
    model(name, move || {
        let clock = LoomClock::at(0);
        let lim = loom::sync::Arc::new(build(&clock));
        let checker = {
            let lim = loom::sync::Arc::clone(&lim);
            let check = Arc::clone(&check);
            loom::thread::spawn(move || check(&lim))
        };
        let sweeper = {
            let lim = loom::sync::Arc::clone(&lim);
            let evict = Arc::clone(&evict);
            loom::thread::spawn(move || evict(&lim))
        };
        clock.set(after);
        let got = (checker.join().unwrap(), sweeper.join().unwrap());
        let lim = loom::sync::Arc::try_unwrap(lim)
            .unwrap_or_else(|_| panic!("threads still hold the limiter"));
        let seen = observe(&lim, &clock);
        assert_run(&got, &seen);
        let label = assert_serial(&serial, &got, &seen);
        seen_labels.lock().unwrap().insert(label);
    });
    let matched = matched.lock().unwrap().clone();
    eprintln!("  {name}: outcomes matched {matched:?}");
    matched
}
