//! What the window-family targets share: reading a real decision for comparison with the
//! models (which live in the `cellgate-models` crate, shared with `tests/`), the structured
//! clock moves and unit counts, and the corpus tools.

use std::time::Duration;

use arbitrary::Arbitrary;
use cellgate::clock::{Clock, ManualClock};
use cellgate::{check_all, AnyLimiter, ConfigError, Decision, MultiDecision};

pub use cellgate_models::keyed::{sweep_due, SWEEP_BACKOFF_NS};
pub use cellgate_models::{first_true, index_bits, wait_until, Expect, Invalid, Seen, U64};

/// The `ConfigError` a model's [`Invalid`] stands for (the models know nothing of `cellgate`).
pub fn config_error(e: Invalid) -> ConfigError {
    match e {
        Invalid::Zero { field } => ConfigError::Zero { field },
        Invalid::PeriodTooLong { period } => ConfigError::PeriodTooLong { period },
        Invalid::RateTooFast { count, period } => ConfigError::RateTooFast { count, period },
        Invalid::BurstTooLarge { burst, interval_ns } => {
            ConfigError::BurstTooLarge { burst, interval_ns }
        }
        Invalid::QueueTooLarge {
            burst,
            queue,
            interval_ns,
        } => ConfigError::QueueTooLarge {
            burst,
            queue,
            interval_ns,
        },
        Invalid::WarmUpTooLong { permits, max } => ConfigError::WarmUpTooLong { permits, max },
        Invalid::TooManyStripes { stripes, max } => ConfigError::TooManyStripes { stripes, max },
        Invalid::Unsupported {
            operation,
            algorithm,
        } => ConfigError::Unsupported {
            operation,
            algorithm,
        },
    }
}

/// Reads a real decision into a model's plain struct (the models know nothing of `cellgate`).
pub trait Observe {
    fn of(d: &Decision) -> Self;
}

impl Observe for Seen {
    /// Reads a real decision, checking that its `Duration` accessors agree with the ns ones.
    fn of(d: &Decision) -> Self {
        assert_eq!(
            d.retry_after(),
            d.retry_after_ns().map(Duration::from_nanos),
            "retry_after vs retry_after_ns of {d:?}"
        );
        assert_eq!(
            d.reset_after(),
            Duration::from_nanos(d.reset_after_ns()),
            "reset_after vs reset_after_ns of {d:?}"
        );
        Self {
            allowed: d.is_allowed(),
            limit: d.limit(),
            remaining: d.remaining(),
            retry_after_ns: d.retry_after_ns(),
            reset_after_ns: d.reset_after_ns(),
        }
    }
}

/// Asserts that `got` shows exactly `want`; `ctx` names the subject, operation and time.
#[track_caller]
pub fn assert_decision(got: &Decision, want: &Expect, ctx: &dyn Fn() -> String) {
    let got = Seen::of(got);
    let want = want.seen();
    assert_eq!(got, want, "{}", ctx());
}

/// The largest limit the layout of `window` holds, from the model's `max_limit`; `u64::MAX`
/// for a window that is invalid (zero or past `u64::MAX` ns), where any limit is as good.
pub fn layout_max(window: Duration, max_limit: fn(u64) -> u128) -> u128 {
    u64::try_from(window.as_nanos())
        .ok()
        .filter(|&w| w > 0)
        .map_or(U64, max_limit)
}

/// The window counters' validation (module docs of `src/algorithm/fixed_window.rs` and
/// `sliding_window.rs`): a zero limit, a window longer than `u64::MAX` ns, a zero window, and a
/// limit above the layout's `max_limit` are `ConfigError`s, checked in that order. Returns the
/// limit and the window in ns.
pub fn validate_window(
    limit: u32,
    window: Duration,
    max_limit: fn(u64) -> u128,
) -> Result<(u32, u64), ConfigError> {
    if limit == 0 {
        return Err(ConfigError::Zero { field: "limit" });
    }
    if window.as_nanos() > U64 {
        return Err(ConfigError::WindowTooLong { window });
    }
    if window.is_zero() {
        return Err(ConfigError::Zero { field: "window" });
    }
    let w = u64::try_from(window.as_nanos()).unwrap();
    let max = max_limit(w);
    if u128::from(limit) > max {
        return Err(ConfigError::LimitTooLarge {
            limit,
            max: u64::try_from(max).unwrap(),
            window,
        });
    }
    Ok((limit, w))
}

/// How a window length is chosen: every layout regime, plus invalid ones.
#[derive(Arbitrary, Debug, Clone, Copy)]
pub enum WindowSel {
    /// Any nanosecond count (0 included: `Zero { field: "window" }`).
    Ns(u64),
    /// `1 + x` ns: a few ns leave few count bits; windows roll over often.
    Tiny(u8),
    /// `1 + x` ns.
    Small(u16),
    /// `2^(x % 64)` ns.
    Pow2(u8),
    /// `u64::MAX / (1 + x)`: one- or two-bit indexes.
    DivMax(u16),
    /// `u64::MAX - x` ns.
    NearMax(u16),
    /// `secs` s + `nanos % 1e9` ns: may exceed `u64::MAX` ns (`WindowTooLong`).
    Long {
        secs: u64,
        nanos: u32,
    },
    DurationMax,
}

impl WindowSel {
    pub fn get(self) -> Duration {
        match self {
            WindowSel::Ns(ns) => Duration::from_nanos(ns),
            WindowSel::Tiny(x) => Duration::from_nanos(1 + u64::from(x)),
            WindowSel::Small(x) => Duration::from_nanos(1 + u64::from(x)),
            WindowSel::Pow2(x) => Duration::from_nanos(1u64 << (x % 64)),
            WindowSel::DivMax(x) => Duration::from_nanos(u64::MAX / (1 + u64::from(x))),
            WindowSel::NearMax(x) => Duration::from_nanos(u64::MAX - u64::from(x)),
            WindowSel::Long { secs, nanos } => {
                Duration::from_secs(secs) + Duration::from_nanos(u64::from(nanos % 1_000_000_000))
            }
            WindowSel::DurationMax => Duration::MAX,
        }
    }
}

/// How a limit is chosen, relative to the largest the layout holds (`max`, from the model).
#[derive(Arbitrary, Debug, Clone, Copy)]
pub enum LimitSel {
    /// `0..8`: zero is `Zero { field: "limit" }`.
    Small(u8),
    /// The layout maximum plus `delta` (clamped into `u32`): both sides of `LimitTooLarge`.
    AtMax(i8),
    Any(u32),
}

impl LimitSel {
    pub fn get(self, max: u128) -> u32 {
        match self {
            LimitSel::Small(x) => u32::from(x % 8),
            LimitSel::AtMax(d) => {
                let v = i128::try_from(max).unwrap_or(i128::MAX) + i128::from(d);
                u32::try_from(v.clamp(0, i128::from(u32::MAX))).unwrap()
            }
            LimitSel::Any(x) => x,
        }
    }
}

/// Units requested by a check, relative to the limit: 0 and above the limit included.
#[derive(Arbitrary, Debug, Clone, Copy)]
pub enum Units {
    /// `0..8`.
    Small(u8),
    Limit,
    Half,
    /// `limit + 1..=4`, saturating.
    Above(u8),
    Any(u32),
}

impl Units {
    pub fn get(self, limit: u32) -> u32 {
        match self {
            Units::Small(n) => u32::from(n % 8),
            Units::Limit => limit,
            Units::Half => limit / 2,
            Units::Above(d) => limit.saturating_add(1 + u32::from(d % 4)),
            Units::Any(n) => n,
        }
    }
}

/// Units of a restock or `set_stock`, relative to the configured stock.
#[derive(Arbitrary, Debug, Clone, Copy)]
pub enum Amount {
    /// `0..8`.
    Small(u8),
    /// Exactly the configured stock (a key set to it is fresh again).
    Stock,
    /// `stock + 1..=4`.
    Above(u8),
    /// `u64::MAX - 0..=3`: saturation.
    NearMax(u8),
    Any(u64),
}

impl Amount {
    pub fn get(self, stock: u32) -> u64 {
        match self {
            Amount::Small(n) => u64::from(n % 8),
            Amount::Stock => u64::from(stock),
            Amount::Above(d) => u64::from(stock) + 1 + u64::from(d % 4),
            Amount::NearMax(d) => u64::MAX - u64::from(d % 4),
            Amount::Any(n) => n,
        }
    }
}

/// One step of a scenario: a clock move, or an operation on the limiters.
#[derive(Arbitrary, Debug, Clone, Copy)]
pub enum Op {
    /// `ManualClock::advance_ns`, saturating.
    AdvanceNs(u64),
    AdvanceSmall(u16),
    /// Forward by `k % 4` windows plus `frac / 256` of one.
    AdvanceWindows {
        k: u8,
        frac: u8,
    },
    /// `set_ns` to the start of the window `ahead % 3` windows after the current one, or 1 ns
    /// before it (`ahead % 3 == 0` with `minus_one` goes back 1 ns before the current window).
    Boundary {
        ahead: u8,
        minus_one: bool,
    },
    /// Forward by the keyed stores' sweep back-off, 10 ms, plus `x % 5 - 2` ns: both sides of
    /// the automatic sweep's throttle.
    AdvanceBackoff(u8),
    /// `set_ns` anywhere, backwards included.
    SetNs(u64),
    /// `set_ns` back by up to `u32::MAX` ns (saturating at 0).
    Rewind(u32),
    /// `set_ns` back by `k % 4` windows plus `frac / 256` of one.
    RewindWindows {
        k: u8,
        frac: u8,
    },
    Check {
        key: u8,
        n: Units,
    },
    /// The same as `Check`: weighs checks higher in the derived choice.
    Check2 {
        key: u8,
        n: Units,
    },
    Peek {
        key: u8,
    },
    EvictIdle,
    /// Stock only (others must answer `ConfigError::Unsupported`).
    Restock {
        key: u8,
        units: Amount,
    },
    /// Stock only (others must answer `ConfigError::Unsupported`).
    SetStock {
        key: u8,
        units: Amount,
    },
    /// `refund(n)` / `refund(&key, n)`: admitted work that did not happen. Not on a sliding log.
    Refund {
        key: u8,
        n: Units,
    },
    /// `reserve(n, max_wait)` / `reserve(&key, n, max_wait)` (`max_wait` in ns): on a window
    /// or a stock, exactly a check; the reservation joins the outstanding ones. Not on a
    /// sliding log.
    Reserve {
        key: u8,
        n: Units,
        max_wait: u64,
    },
    /// `cancel` of the outstanding reservation `pick % outstanding` (each is cancelled at most
    /// once, as its docs intend); nothing if none is outstanding. Not on a sliding log.
    Cancel {
        pick: u8,
    },
    /// `check_all([(direct, n), (map gate of key, m)])`, or the keyed gate first: all or
    /// nothing, the earlier charge cancelled when the later gate denies. Not on a sliding log.
    CheckAll {
        key: u8,
        n: Units,
        m: Units,
        keyed_first: bool,
    },
}

/// Keys used: few enough that they collide and exceed small caps.
pub fn key(k: u8) -> u8 {
    k % 16
}

/// Applies a clock move to `clock` and returns the new time, or `None` if `op` is not a clock
/// move. `w` is the window (or any nominal length) that window-relative moves use.
pub fn apply_time(op: &Op, clock: &ManualClock, w: u64) -> Option<u64> {
    let now = clock.now();
    let (now128, w128) = (u128::from(now), u128::from(w));
    let clamp = |v: u128| u64::try_from(v.min(U64)).unwrap();
    let windows = |k: u8, frac: u8| u128::from(k % 4) * w128 + u128::from(frac) * w128 / 256;
    match *op {
        Op::AdvanceNs(ns) => clock.advance_ns(ns),
        Op::AdvanceSmall(ns) => clock.advance_ns(u64::from(ns)),
        Op::AdvanceWindows { k, frac } => clock.advance_ns(clamp(windows(k, frac))),
        Op::Boundary { ahead, minus_one } => {
            let start = (now128 / w128 + u128::from(ahead % 3)) * w128;
            clock.set_ns(clamp(start.saturating_sub(u128::from(minus_one))));
        }
        Op::AdvanceBackoff(x) => clock.advance_ns(SWEEP_BACKOFF_NS - 2 + u64::from(x % 5)),
        Op::SetNs(ns) => clock.set_ns(ns),
        Op::Rewind(ns) => clock.set_ns(now.saturating_sub(u64::from(ns))),
        Op::RewindWindows { k, frac } => {
            clock.set_ns(clamp(now128.saturating_sub(windows(k, frac))))
        }
        _ => return None,
    }
    Some(clock.now())
}

/// The model of [`apply_time`], written independently: where the clock must be afterwards.
pub fn model_time(op: &Op, now: u64, w: u64) -> Option<u64> {
    let windows = |k: u8, frac: u8| {
        let ns = u128::from(k % 4) * u128::from(w) + u128::from(frac) * u128::from(w) / 256;
        u64::try_from(ns).unwrap_or(u64::MAX)
    };
    Some(match *op {
        Op::AdvanceNs(ns) => now.saturating_add(ns),
        Op::AdvanceSmall(ns) => now.saturating_add(u64::from(ns)),
        Op::AdvanceWindows { k, frac } => now.saturating_add(windows(k, frac)),
        Op::Boundary { ahead, minus_one } => {
            let start = (u128::from(now / w) + u128::from(ahead % 3)) * u128::from(w);
            let t = start.saturating_sub(u128::from(minus_one));
            u64::try_from(t).unwrap_or(u64::MAX)
        }
        Op::AdvanceBackoff(x) => now.saturating_add(9_999_998 + u64::from(x % 5)),
        Op::SetNs(ns) => ns,
        Op::Rewind(ns) => now.saturating_sub(u64::from(ns)),
        Op::RewindWindows { k, frac } => now.saturating_sub(windows(k, frac)),
        _ => return None,
    })
}

crate::counters! {
    /// What one input exercised: summed over a corpus it shows which paths the fuzzer reaches
    /// (`cargo test --release corpus_stats -- --ignored --nocapture`).
    pub struct Stats {
        pub invalid_config: u64,
        pub checks: u64,
        pub allowed: u64,
        pub denied_with_retry: u64,
        pub denied_no_retry: u64,
        pub refused_by_cap: u64,
        pub keys_evicted: u64,
        pub clock_backwards: u64,
        /// Checks and peeks of a key not held while the clock is behind the latest sweep.
        pub behind_sweep: u64,
        pub shadow_checks: u64,
        pub restocks: u64,
        /// Automatic sweeps exactly 10 ms after the previous one (the back-off's boundary) that
        /// dropped a key.
        pub sweeps_at_backoff: u64,
        /// Refunds that gave something back.
        pub refunds: u64,
        /// Reservations admitted (units held).
        pub reserves: u64,
        /// Cancels that gave something back.
        pub cancels: u64,
        /// Cancels of a holding reservation that gave nothing back (its window is over, its key
        /// was dropped, ...).
        pub cancels_nothing: u64,
        /// Sweeps that dropped a zero count in a window later than the clock, let through by
        /// `keyed_model::EXCUSE_ZERO_COUNT_AHEAD` (the lossless-eviction comparison ends there).
        pub excused_zero_count_ahead: u64,
        /// `refund(0)` answers `true`, let through by `keyed_model::EXCUSE_REFUND_ZERO`.
        pub excused_refund_zero: u64,
        /// `check_all`s admitted whole, and those whose earlier charge was rolled back.
        pub gates_allowed: u64,
        pub gates_rolled_back: u64,
    }
}

impl Stats {
    /// Counts one check and how the model decided it.
    pub fn count_check(&mut self, want: &Expect) {
        self.checks += 1;
        match (want.allowed, want.retry_ns) {
            (true, _) => self.allowed += 1,
            (false, Some(_)) => self.denied_with_retry += 1,
            (false, None) => self.denied_no_retry += 1,
        }
    }
}

/// The two gates of a `CheckAll` op through `check_all`, in the order the op picked: `b`
/// first if `b_first`, else `a` first (each with its units). The decision lists them in the
/// order they were checked in.
pub fn check_pair(
    b_first: bool,
    a: (&dyn AnyLimiter, u32),
    b: (&dyn AnyLimiter, u32),
) -> MultiDecision<2> {
    if b_first {
        check_all([b, a])
    } else {
        check_all([a, b])
    }
}

/// Named counters of what an input exercised, for corpus statistics and seed picking.
pub trait Counters: Default + std::ops::AddAssign {
    /// Every counter with its name (`inputs` first).
    fn fields(&self) -> Vec<(&'static str, u64)>;
}

/// Replays every file of `dir` through `run` (seeds must decode and pass); returns the sum of
/// their stats. Panics if the directory holds no file.
pub fn replay_dir<I: for<'a> Arbitrary<'a>, S: Counters>(dir: &str, run: impl Fn(&I) -> S) -> S {
    let mut total = S::default();
    let mut seen = 0;
    for entry in std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{dir}: {e}")) {
        let bytes = std::fs::read(entry.unwrap().path()).unwrap();
        // The same decoding libfuzzer-sys applies to a typed `fuzz_target!` input.
        let input = I::arbitrary_take_rest(arbitrary::Unstructured::new(&bytes))
            .expect("a seed that no longer decodes");
        total += run(&input);
        seen += 1;
    }
    assert!(seen > 0, "no inputs in {dir}");
    total
}

/// Seed picking (a maintenance tool, see `fuzz/README.md`): for every counter of [`Stats`] that
/// some input of `dir` exercises, the smallest such input; and the input that exercises the
/// most counters at once. Returns `(counter, path)` pairs, one path possibly under several
/// names.
pub fn pick_seeds<I: for<'a> Arbitrary<'a>, S: Counters>(
    dir: &str,
    run: impl Fn(&I) -> S,
) -> Vec<(&'static str, std::path::PathBuf)> {
    let mut best: Vec<(&'static str, usize, std::path::PathBuf)> = Vec::new();
    let mut widest: Option<(usize, usize, std::path::PathBuf)> = None;
    for entry in std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{dir}: {e}")) {
        let path = entry.unwrap().path();
        let bytes = std::fs::read(&path).unwrap();
        let Ok(input) = I::arbitrary_take_rest(arbitrary::Unstructured::new(&bytes)) else {
            continue;
        };
        let stats = run(&input);
        let mut kinds = 0;
        for (name, count) in stats.fields() {
            if count == 0 || name == "inputs" {
                continue;
            }
            kinds += 1;
            match best.iter_mut().find(|b| b.0 == name) {
                Some(b) if b.1 <= bytes.len() => {}
                Some(b) => *b = (name, bytes.len(), path.clone()),
                None => best.push((name, bytes.len(), path.clone())),
            }
        }
        let wider = widest
            .as_ref()
            .is_none_or(|w| (kinds, usize::MAX - bytes.len()) > (w.0, usize::MAX - w.1));
        if wider {
            widest = Some((kinds, bytes.len(), path.clone()));
        }
    }
    let mut picks: Vec<_> = best.into_iter().map(|(n, _, p)| (n, p)).collect();
    if let Some((_, _, p)) = widest {
        picks.push(("widest", p));
    }
    picks
}

/// The `pick_seeds` tool of every target: picks from `$CORPUS` (default `corpus/<target>`) as
/// [`pick_seeds`] does and copies the picks into `corpus/seed_<target>/<counter>`, replacing
/// the seeds there.
pub fn refresh_seeds<I: for<'a> Arbitrary<'a>, S: Counters>(target: &str, run: impl Fn(&I) -> S) {
    // The corpus lives beside the fuzz targets, one directory up from this library.
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/..");
    let dir = std::env::var("CORPUS").unwrap_or_else(|_| format!("{root}/corpus/{target}"));
    let picks = pick_seeds(&dir, run);
    assert!(!picks.is_empty(), "nothing to pick from {dir}");
    let seeds = format!("{root}/corpus/seed_{target}");
    let _ = std::fs::remove_dir_all(&seeds);
    std::fs::create_dir_all(&seeds).unwrap();
    // One file per distinct input, named after everything it was picked for.
    let mut files: Vec<(String, std::path::PathBuf)> = Vec::new();
    for (name, path) in picks {
        match files.iter_mut().find(|f| f.1 == path) {
            Some(f) => f.0 = format!("{}+{name}", f.0),
            None => files.push((name.to_string(), path)),
        }
    }
    for (name, path) in files {
        std::fs::copy(&path, format!("{seeds}/{name}")).unwrap();
        println!("{name}: {}", path.display());
    }
}

/// The corpus tests of a target whose input replays with `$run`: `seeds_replay` (every seed of
/// `corpus/seed_<target>` decodes and passes), and the two tools of `fuzz/README.md`,
/// `corpus_stats` (`CORPUS=corpus/<target> cargo test --release <target>::tests::corpus_stats
/// -- --ignored --nocapture` sums the counters over a corpus, the seeds by default) and
/// `pick_seeds` (replaces the seeds with picks from a grown corpus, see [`refresh_seeds`]).
#[macro_export]
macro_rules! corpus_tests {
    ($target:literal, $run:path) => {
        #[test]
        fn seeds_replay() {
            $crate::common::replay_dir(
                concat!(env!("CARGO_MANIFEST_DIR"), "/../corpus/seed_", $target),
                $run,
            );
        }

        $crate::corpus_tools!($target, $run);
    };
}

/// The two corpus tools of [`corpus_tests!`] alone, for a target with its own `seeds_replay`.
#[macro_export]
macro_rules! corpus_tools {
    ($target:literal, $run:path) => {
        #[test]
        #[ignore = "reporting tool, not a check"]
        fn corpus_stats() {
            let dir = std::env::var("CORPUS").unwrap_or_else(|_| {
                concat!(env!("CARGO_MANIFEST_DIR"), "/../corpus/seed_", $target).to_string()
            });
            println!("{dir}: {:#?}", $crate::common::replay_dir(&dir, $run));
        }

        #[test]
        #[ignore = "maintenance tool, not a check"]
        fn pick_seeds() {
            $crate::common::refresh_seeds($target, $run);
        }
    };
}

/// Declares a statistics struct of `u64` counters with its `AddAssign` (summing a corpus) and
/// its [`Counters`] (each counter by name, in declaration order), so that the three are written
/// once. Every such struct starts with the counter `inputs` (1 for one run, so a corpus's sum
/// counts its inputs), which the macro declares: [`Counters::fields`] lists it first, and
/// [`pick_seeds`] passes over it.
#[macro_export]
macro_rules! counters {
    (
        $(#[$meta:meta])*
        pub struct $name:ident {
            $( $(#[$fmeta:meta])* pub $field:ident: u64, )*
        }
    ) => {
        $(#[$meta])*
        #[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
        pub struct $name {
            /// Inputs run: 1 for one run.
            pub inputs: u64,
            $( $(#[$fmeta])* pub $field: u64, )*
        }

        impl std::ops::AddAssign for $name {
            fn add_assign(&mut self, o: Self) {
                self.inputs += o.inputs;
                $( self.$field += o.$field; )*
            }
        }

        impl $crate::common::Counters for $name {
            fn fields(&self) -> Vec<(&'static str, u64)> {
                vec![("inputs", self.inputs), $( (stringify!($field), self.$field), )*]
            }
        }
    };
}
