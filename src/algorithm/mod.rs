//! The pure algorithms: `(state word, now, n) -> (Decision, Option<new word>)`.
//!
//! Nothing in here touches an atomic, reads a clock or allocates. [`crate::sync::cell::Cell`]
//! applies a step atomically; the tests, property tests and fuzz targets check the steps
//! against simple reference models.

pub(crate) mod fixed_window;
pub(crate) mod gcra;
pub(crate) mod sliding_log;
pub(crate) mod sliding_window;
pub(crate) mod steps;
pub(crate) mod stock;
pub(crate) mod warm_up;
pub(crate) mod window;

use crate::decision::Decision;
use crate::error::ConfigError;
use crate::reservation::Reservation;

pub(crate) use fixed_window::FixedWindow;
pub(crate) use gcra::Gcra;
pub(crate) use sliding_window::SlidingWindow;
pub(crate) use steps::Steps;
pub(crate) use stock::Stock;
pub(crate) use warm_up::WarmUp;

/// What a step gives: its decision, and the word to write (`None`: the state stays as it is).
pub(crate) type Step = (Decision, Option<u64>);

/// Test helper for the algorithms' unit tests: applies one step's write to `word`, checking
/// that a step writes exactly when it admits units, and returns its decision.
#[cfg(test)]
pub(crate) fn apply_step(step: Step, word: &mut u64, n: u32) -> Decision {
    let (decision, write) = step;
    assert_eq!(
        decision.is_allowed() && n > 0,
        write.is_some(),
        "writes iff admitted units"
    );
    if let Some(w) = write {
        *word = w;
    }
    decision
}

/// Test helper: an algorithm's check step, so that one [`run`] serves every algorithm's unit
/// tests.
#[cfg(test)]
pub(crate) trait CheckStep {
    fn check_step(&self, word: u64, now: u64, n: u32) -> Step;
}

#[cfg(test)]
macro_rules! check_step {
    ($($algorithm:ty),*) => {$(
        impl CheckStep for $algorithm {
            fn check_step(&self, word: u64, now: u64, n: u32) -> Step {
                self.step(word, now, n)
            }
        }
    )*};
}

#[cfg(test)]
check_step!(Gcra, FixedWindow, SlidingWindow, Stock, WarmUp);

/// Test helper: a check of `n` units at `now` by `algorithm` on `word`, its write applied (see
/// [`apply_step`]); returns the decision.
#[cfg(test)]
pub(crate) fn run<A: CheckStep>(algorithm: &A, word: &mut u64, now: u64, n: u32) -> Decision {
    apply_step(algorithm.check_step(*word, now, n), word, n)
}

/// Every algorithm a limiter can run, dispatched by one predictable branch.
///
/// An enum rather than a type parameter keeps the public types to `Limiter<C>` and
/// `KeyedLimiter<K, C>`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Algorithm {
    /// Generic cell rate algorithm (token bucket / leaky bucket as a meter).
    Gcra(Gcra),
    /// Fixed window counter.
    FixedWindow(FixedWindow),
    /// Sliding window counter (two-window estimate).
    SlidingWindow(SlidingWindow),
    /// Units that only go down (flash-sale inventory).
    Stock(Stock),
    /// Guava's `SmoothWarmingUp`: slow after idling, ramping up to a stable rate.
    WarmUp(WarmUp),
}

impl Algorithm {
    /// The word of a key that has never been seen.
    pub(crate) const FRESH: u64 = 0;

    /// Decides a request for `n` units at `now` on state `word`.
    // `inline(always)`: out of line, the call costs more than the whole GCRA step (the decision
    // round-trips through memory). GCRA is tested first with a plain branch and inlined; the
    // other algorithms go through one out-of-line call, which keeps every CAS loop small.
    #[inline(always)]
    pub(crate) fn step(&self, word: u64, now: u64, n: u32) -> Step {
        if let Algorithm::Gcra(g) = self {
            return g.step(word, now, n);
        }
        self.step_other(word, now, n)
    }

    /// The word [`step`](Self::step) would write, without its decision: what the checks'
    /// compare-and-swap loops run, and only the admission's outcome decides after the swap.
    /// Equal to `self.step(word, now, n).1` (tested below); the window counters compute only
    /// the new count, not the remaining units, reset or retry a decision reports.
    #[inline(always)]
    pub(crate) fn next_word(&self, word: u64, now: u64, n: u32) -> Option<u64> {
        if let Algorithm::Gcra(g) = self {
            return g.next_word(word, now, n);
        }
        self.next_word_other(word, now, n)
    }

    /// [`next_word`](Self::next_word) of every algorithm but GCRA: out of line, so that GCRA's
    /// compare-and-swap loops stay as small as they are, and a dispatch only. Each arm is a
    /// tail call of a leaf function with this one's arguments (an arm with another signature,
    /// such as a step returning its decision, made every arm shuffle its arguments around it).
    #[inline(never)]
    fn next_word_other(&self, word: u64, now: u64, n: u32) -> Option<u64> {
        match self {
            Algorithm::FixedWindow(f) => f.next_word(word, now, n),
            Algorithm::SlidingWindow(s) => s.next_word(word, now, n),
            other => other.next_word_rest(word, now, n),
        }
    }

    /// [`next_word`](Self::next_word) of the algorithms with no step of their own for it.
    #[inline(never)]
    fn next_word_rest(&self, word: u64, now: u64, n: u32) -> Option<u64> {
        self.step_other(word, now, n).1
    }

    #[inline(never)]
    fn step_other(&self, word: u64, now: u64, n: u32) -> Step {
        match self {
            Algorithm::Gcra(g) => g.step(word, now, n),
            Algorithm::FixedWindow(f) => f.step(word, now, n),
            Algorithm::SlidingWindow(s) => s.step(word, now, n),
            Algorithm::Stock(s) => s.step(word, now, n),
            Algorithm::WarmUp(w) => w.step(word, now, n),
        }
    }

    /// A reservation: like [`step`](Self::step), but a GCRA request that must wait up to
    /// `max_wait_ns` for its turn is admitted with that delay (and holds its place). Algorithms
    /// that cannot schedule ahead (windows, stock) decide as `step`, with no delay.
    #[inline]
    pub(crate) fn step_within(&self, word: u64, now: u64, n: u32, max_wait_ns: u64) -> Step {
        match self {
            Algorithm::Gcra(g) => g.step_within(word, now, n, g.reserve_ceiling(max_wait_ns)),
            Algorithm::WarmUp(w) => w.step_within(word, now, n, max_wait_ns),
            other => other.step(word, now, n),
        }
    }

    /// Gives `n` units back to `word` at `now` (admitted work that did not happen), never
    /// beyond a fresh key's budget (a stock: its configured stock). `None`: nothing to give back (never `Some(word)`).
    pub(crate) fn refund(&self, word: u64, now: u64, n: u32) -> Option<u64> {
        self.refund_step(word, now, n).filter(|&w| w != word)
    }

    fn refund_step(&self, word: u64, now: u64, n: u32) -> Option<u64> {
        match self {
            Algorithm::Gcra(g) => g.refund(word, now, n),
            Algorithm::FixedWindow(f) => f.refund(word, now, n),
            Algorithm::SlidingWindow(s) => s.refund(word, now, n),
            Algorithm::Stock(s) => s.refund(word, n),
            // Guava has no refunds; a warm-up state has no "units" to hand back.
            Algorithm::WarmUp(_) => None,
        }
    }

    /// Undoes the admission `r` (from a check or reservation on this key), now that the key
    /// holds `word`. If nothing happened since, the word goes back to what it was (as if the
    /// admission never was); otherwise each algorithm gives back what provably remains unspent
    /// (see [`Gcra::cancel`]). `None`: nothing to give back.
    pub(crate) fn cancel(&self, word: u64, now: u64, r: &Reservation) -> Option<u64> {
        // A time-based state that is already as good as fresh has nothing left to give back
        // (and a key dropped by a sweep, which is exactly such a state, must answer the same).
        if self.uses_time() && self.is_idle(word, now) {
            return None;
        }
        self.cancel_step(word, now, r).filter(|&w| w != word)
    }

    fn cancel_step(&self, word: u64, now: u64, r: &Reservation) -> Option<u64> {
        let (n, before, after) = (r.n, r.before, r.after);
        match self {
            Algorithm::Gcra(g) => g.cancel(word, now, n, (before, after, r.admitted_at())),
            _ if word == after => Some(before),
            Algorithm::FixedWindow(f) => f.cancel(word, now, n, after),
            Algorithm::SlidingWindow(s) => s.cancel(word, now, n, after),
            Algorithm::Stock(s) => s.restock(word, u64::from(n)).1,
            // Only the last admission can be undone (exactly, above): its `next_free` only ever
            // grows, so a later admission's place depends on ours.
            Algorithm::WarmUp(_) => None,
        }
    }

    /// The GCRA configuration, or an error naming `operation` for other algorithms.
    pub(crate) fn gcra(&self, operation: &'static str) -> Result<&Gcra, ConfigError> {
        match self {
            Algorithm::Gcra(g) => Ok(g),
            other => Err(ConfigError::Unsupported {
                operation,
                algorithm: other.name(),
            }),
        }
    }

    /// The decision for `n` units at `now` taken on `word`: the first half of
    /// [`step`](Self::step). Hot paths run the compare-and-swap loop on the word alone and build
    /// the decision once at the end with this; moving a finished 40-byte decision through the
    /// loop made the CPU's store-to-load forwarding fail and doubled the cost of a check.
    #[inline(always)]
    pub(crate) fn decide(&self, word: u64, now: u64, n: u32) -> Decision {
        self.step(word, now, n).0
    }

    /// The decision a request for `n` would get, without consuming anything.
    #[inline]
    pub(crate) fn peek(&self, word: u64, now: u64) -> Decision {
        self.step(word, now, 0).0
    }

    /// The most conservative word a key could have held if a sweep at time `swept` found it idle
    /// and dropped it. A key created at `now >= swept` from this word decides exactly as from
    /// [`FRESH`](Self::FRESH); at an earlier `now` (a clock behind the sweeper's) it decides as
    /// strictly as the dropped key could have, so eviction never gives credit back.
    #[inline]
    pub(crate) fn swept_word(&self, swept: u64) -> u64 {
        match self {
            Algorithm::Gcra(_) => swept,
            Algorithm::FixedWindow(f) => f.swept_word(swept),
            Algorithm::SlidingWindow(s) => s.swept_word(swept),
            // Time plays no part; an idle stock key is exactly the fresh one.
            Algorithm::Stock(_) => Self::FRESH,
            Algorithm::WarmUp(w) => w.swept_word(swept),
        }
    }

    /// Whether decisions depend on the time (every algorithm but stock). A limiter skips the
    /// clock read when they do not.
    #[inline(always)]
    pub(crate) fn uses_time(&self) -> bool {
        !matches!(self, Algorithm::Stock(_))
    }

    /// The policy this algorithm enforces, as the public [`crate::Policy`] describes it.
    pub(crate) fn policy(&self) -> crate::policy::Policy {
        match self {
            Algorithm::Gcra(g) => g.policy(),
            Algorithm::FixedWindow(f) => f.policy(),
            Algorithm::SlidingWindow(s) => s.policy(),
            Algorithm::Stock(s) => s.policy(),
            Algorithm::WarmUp(w) => w.policy(),
        }
    }

    /// The algorithm's name, for error messages.
    pub(crate) fn name(&self) -> &'static str {
        match self {
            Algorithm::Gcra(_) => "gcra",
            Algorithm::FixedWindow(_) => "fixed_window",
            Algorithm::SlidingWindow(_) => "sliding_window",
            Algorithm::Stock(_) => "stock",
            Algorithm::WarmUp(_) => "warm_up",
        }
    }

    /// The stock configuration, or an error naming `operation` for other algorithms.
    pub(crate) fn stock(&self, operation: &'static str) -> Result<&Stock, ConfigError> {
        match self {
            Algorithm::Stock(s) => Ok(s),
            other => Err(ConfigError::Unsupported {
                operation,
                algorithm: other.name(),
            }),
        }
    }

    /// Whether a key holding `word` is *light* at `now`: dropping it, and re-creating it later
    /// from the swept word of a floor at `floor` (`>= now`), gives it at most one unit, whatever
    /// the clock does afterwards. It is when `word` with one unit given back at `floor` is idle
    /// there (dropping an idle key is lossless: the swept word decides exactly like it from the
    /// floor on, and at least as strictly before), and it still has a unit left at `now` (so a
    /// drop never turns the key's denial at `now` into an admission: with a burst of one, no key
    /// that was used is light). A state later than the floor (a window the clock has not reached
    /// again) is never light. Stock keys never are (their state is configuration), nor are
    /// warm-up keys until they are idle (warm-up has no units to give back).
    pub(crate) fn is_light(&self, word: u64, now: u64, floor: u64) -> bool {
        self.uses_time()
            && self.is_idle(self.refund(word, floor, 1).unwrap_or(word), floor)
            && self.peek(word, now).remaining() >= 1
    }

    /// Whether `word` is equivalent to [`FRESH`](Self::FRESH) at `now`: dropping it changes no
    /// future decision made at `now` or later.
    #[inline]
    pub(crate) fn is_idle(&self, word: u64, now: u64) -> bool {
        match self {
            Algorithm::Gcra(g) => g.is_idle(word, now),
            Algorithm::FixedWindow(f) => f.is_idle(word, now),
            Algorithm::SlidingWindow(s) => s.is_idle(word, now),
            Algorithm::Stock(s) => s.is_idle(word),
            Algorithm::WarmUp(w) => w.is_idle(word, now),
        }
    }
}

/// The decision of a check of `n` units at `now` whose step, run on `word`, asked to write
/// `next`: what [`Algorithm::decide`] gives on `word`, without running a GCRA admission's step
/// a second time (the checks' compare-and-swap loops carry only the words; see
/// `Algorithm::decide`). GCRA's shortcut only: this serves the charges (`check_all`) and the
/// direct limiter, whose checks grew with the window counters' shortcut too (`probe all3_1k`);
/// the keyed check takes an [`Outcome`], which has both.
#[inline(always)]
pub(crate) fn decision_after(
    algorithm: &Algorithm,
    word: u64,
    next: Option<u64>,
    now: u64,
    n: u32,
) -> Decision {
    match (algorithm, next) {
        (Algorithm::Gcra(g), Some(new_tat)) => g.admitted(new_tat, now),
        _ => algorithm.decide(word, now, n),
    }
}

/// What a keyed check needs of its step to decide, in 16 bytes: the word to decide on (the word
/// an admission of GCRA or a window counter wrote, otherwise the word the step was run on) and
/// whether it is such a written word. The growing table's check carries this out of its probe
/// instead of the word and the step's `Option<u64>`: small enough to come back in two
/// registers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Outcome {
    word: u64,
    written: bool,
}

impl Outcome {
    /// The outcome of a step run on `word` that asked to write `next`.
    #[inline(always)]
    pub(crate) fn of(algorithm: &Algorithm, word: u64, next: Option<u64>) -> Self {
        match (algorithm, next) {
            (
                Algorithm::Gcra(_) | Algorithm::FixedWindow(_) | Algorithm::SlidingWindow(_),
                Some(written),
            ) => Self {
                word: written,
                written: true,
            },
            _ => Self {
                word,
                written: false,
            },
        }
    }

    /// The outcome of a step that always writes when it admits (a window counter's): `next`
    /// if it wrote, otherwise `word`.
    #[inline(always)]
    pub(crate) fn written(word: u64, next: Option<u64>) -> Self {
        match next {
            Some(written) => Self {
                word: written,
                written: true,
            },
            None => Self {
                word,
                written: false,
            },
        }
    }

    /// The word an admission wrote, or `None` when the step wrote nothing.
    #[inline(always)]
    pub(crate) fn admitted(self) -> Option<u64> {
        self.written.then_some(self.word)
    }

    /// The word to decide on (see the type's docs).
    #[inline(always)]
    pub(crate) fn word(self) -> u64 {
        self.word
    }

    /// The decision after the step, as [`decision_after`] gives it. An admission's decision
    /// comes from the word it wrote, in a few instructions; the window counters' out of line,
    /// so that GCRA's check stays as it was laid out.
    #[inline(always)]
    pub(crate) fn decision(self, algorithm: &Algorithm, now: u64, n: u32) -> Decision {
        match algorithm {
            Algorithm::Gcra(g) if self.written => g.admitted(self.word, now),
            Algorithm::FixedWindow(f) if self.written => f.admitted(self.word, now),
            Algorithm::SlidingWindow(s) if self.written => s.admitted(self.word, now),
            _ => algorithm.decide(self.word, now, n),
        }
    }
}

/// An admission's decision from the word it wrote equals the step's own, for every algorithm
/// whose [`Outcome`] takes that shortcut.
#[cfg(test)]
mod decision_props {
    use super::*;
    use proptest::prelude::*;
    use std::time::Duration;

    fn algorithm(kind: u8, limit: u32, window_ns: u64) -> Algorithm {
        let w = Duration::from_nanos(window_ns);
        match kind {
            0 => FixedWindow::new(limit, w).map(Algorithm::FixedWindow),
            1 => SlidingWindow::new(limit, w).map(Algorithm::SlidingWindow),
            // A queue: admissions that wait, whose decisions carry a delay.
            3 => crate::Quota::new(limit, w)
                .with_queue(limit)
                .gcra_params()
                .map(|p| Algorithm::Gcra(Gcra::new(p))),
            _ => crate::Quota::new(limit, w)
                .gcra_params()
                .map(|p| Algorithm::Gcra(Gcra::new(p))),
        }
        // A configuration the generated values do not make: one unit per window, the window
        // at least 2 ns (a 1 ns fixed window leaves no bits for its count).
        .unwrap_or_else(|_| {
            let w = w.max(Duration::from_nanos(2));
            Algorithm::FixedWindow(FixedWindow::new(1, w).unwrap())
        })
    }

    /// A check's decision and write through `counter`'s own [`Steps`], as its loop runs them
    /// (the word to write, then the decision from the outcome and from `after`).
    fn steps_of(counter: &impl Steps, word: u64, now: u64, n: u32) -> Step {
        let next = counter.next_word(word, now, n);
        let decision = counter.decision(counter.outcome(word, next), now, n);
        assert_eq!(counter.after(word, next, now, n), decision);
        if next.is_none() {
            assert_eq!(counter.decide(word, now, n), decision);
        }
        (decision, next)
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2_000))]
        #[test]
        fn an_admissions_decision_is_the_steps(
            kind in 0u8..4,
            limit in prop_oneof![1u32..8, 1u32..1_000_000],
            window_ns in prop_oneof![1u64..10_000, 1_000u64..1_000_000_000_000, 1u64..],
            swept in prop_oneof![Just(None), any::<u64>().prop_map(Some)],
            start in prop_oneof![0u64..1_000_000, any::<u64>()],
            moves in proptest::collection::vec((-1_000i64..100_000, 0u32..4), 1..40),
        ) {
            let a = algorithm(kind, limit, window_ns);
            // A fresh key, or one back from a sweep (the words a store starts a key from).
            let mut word = swept.map_or(Algorithm::FRESH, |at| a.swept_word(at));
            let mut now = start;
            for (dt, n) in moves {
                now = now.saturating_add_signed(dt);
                let (decision, next) = a.step(word, now, n);
                prop_assert_eq!(a.next_word(word, now, n), next);
                prop_assert_eq!(decision_after(&a, word, next, now, n), decision);
                prop_assert_eq!(Outcome::of(&a, word, next).decision(&a, now, n), decision);
                // The check laid out for the kind alone (its own `Steps`) decides the same,
                // and so does every kind's through `Algorithm`'s.
                let own = match &a {
                    Algorithm::Gcra(g) => steps_of(g, word, now, n),
                    Algorithm::FixedWindow(f) => steps_of(f, word, now, n),
                    Algorithm::SlidingWindow(s) => steps_of(s, word, now, n),
                    other => steps_of(other, word, now, n),
                };
                prop_assert_eq!(own, (decision, next));
                prop_assert_eq!(steps_of(&a, word, now, n), (decision, next));
                if let Some(w) = next {
                    word = w;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// Light: one unit given back at the floor leaves the word idle there, and a unit is left
    /// at `now`. Judged at the floor, not at a clock that went back behind the word's state.
    #[test]
    fn light_is_one_unit_from_idle_at_the_floor() {
        let w = Duration::from_nanos(100);
        let fixed = Algorithm::FixedWindow(FixedWindow::new(8, w).unwrap());
        let used_once = |a: &Algorithm, at: u64| a.step(Algorithm::FRESH, at, 1).1.unwrap();
        // One unit in window 5: light in window 5, not once the clock is back in window 2
        // and the word is ahead of the floor there.
        let word = used_once(&fixed, 550);
        assert!(fixed.is_light(word, 550, 550));
        assert!(!fixed.is_light(word, 250, 250));
        // Judged at a later floor (window 5) from a clock in window 2: light again.
        assert!(fixed.is_light(word, 250, 550));
        // GCRA, T = 10: a TAT one interval past the floor is light, one and a half is not.
        let g = Algorithm::Gcra(Gcra::new(
            crate::quota::Quota::new(10, Duration::from_nanos(100))
                .gcra_params()
                .unwrap(),
        ));
        assert!(g.is_light(1010, 1000, 1000));
        assert!(!g.is_light(1015, 995, 1000));
        assert!(g.is_light(1015, 995, 1005));
        // Sliding window: one unit in the current window is not light; in the previous one,
        // it is.
        let sw = Algorithm::SlidingWindow(SlidingWindow::new(8, w).unwrap());
        let word = used_once(&sw, 550);
        assert!(!sw.is_light(word, 590, 590));
        assert!(sw.is_light(word, 650, 650));
        // A stock never is.
        let stock = Algorithm::Stock(Stock::new(8));
        assert!(!stock.is_light(used_once(&stock, 0), 0, 0));
    }

    #[test]
    fn refunding_or_cancelling_nothing_writes_nothing() {
        let sw =
            Algorithm::SlidingWindow(SlidingWindow::new(5, Duration::from_nanos(100)).unwrap());
        // Stored window 2 holds 3; at now = 350 (window 3) it is the previous window.
        let mut word = 0;
        if let (_, Some(w)) = sw.step(word, 250, 3) {
            word = w;
        }
        assert_eq!(
            sw.refund(word, 350, 0),
            None,
            "refund(0) gives nothing back"
        );
        assert!(sw.refund(word, 350, 1).is_some());
        let r = Reservation::new(Decision::NONE, 0, 0, Some(1));
        assert_eq!(sw.cancel(word, 350, &r), None);
        let g = Algorithm::Gcra(Gcra::new(
            crate::quota::Quota::per_second(1).gcra_params().unwrap(),
        ));
        assert_eq!(
            g.refund(5, 10, 3),
            None,
            "an idle TAT has nothing to give back"
        );
    }
}
