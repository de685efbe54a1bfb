//! # cellgate
//!
//! Lock-free, in-process rate limiting for hot paths and flash-sale admission. Each key's whole
//! limiter state is **one `AtomicU64`**, updated by compare-and-swap; keyed limiters keep those
//! cells in a sharded map.
//!
//! ## The API by category
//!
//! | what | items |
//! |---|---|
//! | rates | [`Quota`] |
//! | one state for everything | [`Limiter`]: [`gcra`](Limiter::gcra), [`fixed_window`](Limiter::fixed_window), [`sliding_window`](Limiter::sliding_window), [`stock`](Limiter::stock) |
//! | a state per key | [`KeyedLimiter`]: [`gcra`](KeyedLimiter::gcra), [`fixed_window`](KeyedLimiter::fixed_window), [`sliding_window`](KeyedLimiter::sliding_window), [`stock`](KeyedLimiter::stock); by default a lock-free table that grows and shrinks with the live keys; a ceiling ([`KeyedLimiterBuilder::max_keys`]), a table allocated up front ([`KeyedLimiterBuilder::fixed_capacity`]) or exact keys ([`KeyedLimiterBuilder::exact_keys`]) |
//! | exact "never more than N in any window" | [`SlidingLog`], built by [`KeyedLimiter::sliding_log`] (not one cell: O(limit) per key) |
//! | warm-up | [`Limiter::warm_up`], [`KeyedLimiter::warm_up`] (Guava's `SmoothWarmingUp`) |
//! | many keys at once | [`KeyedLimiter::check_many`]: one instant for the batch, cache misses overlapped on the fingerprint tables |
//! | the answer | [`Decision`]: allowed, limit, remaining, retry_after, reset_after ([`Decision::resets_after`]: `None` = never), delay, and why a denial ([`Denial`]) |
//! | delay instead of reject | [`Quota::with_queue`], [`KeyedLimiter::reserve`] → [`Reservation`], [`KeyedLimiter::cancel`] |
//! | waiting | [`KeyedLimiter::acquire`] (blocking), `until_ready` → `UntilReady` (feature `async`) |
//! | giving back | [`KeyedLimiter::refund`], [`KeyedLimiter::cancel`] |
//! | all-or-nothing across limiters | [`check_all`], [`check_all_in`] (exact rollback), [`check_all_reserving`] (the admissions, to give back later), over any [`AnyLimiter`] of no key: a [`Limiter`], a [`StripedLimiter`], one key of a keyed limiter as `(&limiter, &key)` ([`KeyedLimiter::gate`]); [`MultiDecision`] |
//! | one interface over every limiter | [`AnyLimiter`] (object safe: check, peek, charge, cancel, reserve, [`Policy`], store [`Stats`]) |
//! | one hot key from many threads | [`StripedLimiter`] |
//! | quotas per call and at runtime | [`KeyedLimiter::check_with`], [`KeyedLimiter::set_quota`] (and on [`Limiter`]) |
//! | inventory operations | [`KeyedLimiter::restock`], [`KeyedLimiter::set_stock`] (and on [`Limiter`]) |
//! | memory | [`KeyedLimiter::evict_idle`], [`KeyedLimiter::spawn_sweeper`] → [`Sweeper`], [`KeyedLimiter::len`], [`KeyedLimiter::stats`] → [`Stats`] |
//! | time | [`clock::Clock`], [`clock::QuantaClock`] (default), [`clock::CoarseClock`], [`clock::StdClock`], [`clock::ManualClock`] |
//! | bad configuration | [`ConfigError`], returned by every `build()` |
//! | nginx `limit_req` notation | [`nginx::LimitReq`]: `"rate=10r/s burst=20 delay=8"` to a [`Quota`] that decides like nginx |
//!
//! ## Which limiter for which job
//!
//! | job | limiter |
//! |---|---|
//! | one budget for the whole process (an upstream's rate, a global cap) | [`Limiter`] |
//! | a budget per user, IP, API key, tenant | [`KeyedLimiter`] (by default a table that grows with the live keys; a ceiling with [`KeyedLimiterBuilder::max_keys`]; exact keys with [`KeyedLimiterBuilder::exact_keys`]) |
//! | one budget hammered by many threads at once (a flash sale's stock, a hot tenant) | [`StripedLimiter`]: the quota split over cells, exact in total |
//! | "never more than N in any window", exactly, for small N | [`SlidingLog`] |
//! | N units of inventory, not a rate | the `stock` constructors ([`Limiter::stock`], [`KeyedLimiter::stock`]) |
//! | several limits that must all pass (per user *and* global) | [`check_all`] over their gates |
//!
//! ## Quick start
//!
//! ```
//! use std::time::Duration;
//! use cellgate::{check_all, KeyedLimiter, Limiter, Quota};
//!
//! // 30 requests a minute per user, at most 16 at once.
//! // Nothing to size: the store grows with the users that are live and reclaims idle ones.
//! let users = KeyedLimiter::<u64>::gcra(Quota::new(30, Duration::from_secs(60)).with_burst(16))
//!     .build()?;
//! // 10k requests a second in total.
//! let global = Limiter::gcra(Quota::per_second(10_000)).build()?;
//!
//! // Both limits or neither: a denial by one gives back what the other took.
//! let d = check_all([(&users.gate(&42), 1), (&global, 1)]);
//! if d.is_allowed() {
//!     // serve
//! } else if let Some(wait) = d.retry_after() {
//!     println!("slow down, retry in {wait:?}");
//! }
//! # Ok::<(), cellgate::ConfigError>(())
//! ```
//!
//! ## How it works
//!
//! A check reads the clock once, then applies a pure *step* function to the key's word through
//! one compare-and-swap loop: `(word, now, n) -> (Decision, Option<new word>)`. A denial writes
//! nothing. Admissions on one cell are totally ordered by the word's modification order, so no
//! unit of capacity is ever spent twice, whatever the interleaving; `loom-tests/` model-checks
//! that loop and `fuzz/` checks the steps against simple reference models.
//!
//! ### The layers
//!
//! - `src/algorithm/`: the pure steps, one per algorithm, each owning its packed word's layout;
//!   no atomics, no clock, no allocation.
//! - `src/sync/`: everything concurrent, and the only place naming an atomic, an ordering or a
//!   lock: the cell and its compare-and-swap loop, the tables' slots (the fixed table's 16-byte
//!   word; the growing table's two 64-bit words and its swappable arrays), the seqlock behind
//!   runtime quota changes, counters, the poison-free lock, the sliding log's map (loom stand-ins under
//!   `cfg(loom)`).
//! - `src/store/`: where keyed limiters keep their words: the growing fingerprint table (the
//!   default: rebuilt per shard to fit its live keys), the fixed fingerprint table (probe,
//!   insert, sweep, eviction, compaction), statistics ([`Stats`]) and the background sweeper.
//! - `src/limiter/`: the public limiters as facades over the cells and stores, the
//!   [`AnyLimiter`] trait and [`Policy`], and the runtime-replaceable algorithm.
//! - `src/admission/`: what combines or waits on limiters: [`check_all`],
//!   [`Reservation`], blocking and async waiting.
//! - `src/clock.rs`, `src/quota.rs`, `src/decision.rs`, `src/error.rs`, `src/nginx.rs`: time,
//!   rates, answers, configuration errors, nginx notation.
//!
//! ### GCRA
//!
//! For `Quota::new(count, period).with_burst(b)`: emission interval `T = period / count`
//! (integer nanoseconds), tolerance `DVT = T * b`. The word is the theoretical arrival time
//! (TAT) in nanoseconds since the clock's origin. A request for `n` at `now` is allowed iff
//! `max(tat, now) + n*T - now <= DVT`, and then `tat := max(tat, now) + n*T`. This makes the
//! same decisions as `governor` with the same interval and burst, and redis-cell's
//! `CL.THROTTLE key (b-1) count period n` before its rounding to seconds.
//!
//! Limits: the TAT is a `u64` of nanoseconds, so the limiter's horizon is about 584 years after
//! its clock's origin; past it every request is denied (no wrap-around). Quotas whose interval
//! is below 1 ns, or whose tolerance overflows `u64` nanoseconds, are a [`ConfigError`].
//!
//! ### Windows and stock
//!
//! Fixed and sliding window counters pack the window index and their counts into the word; the
//! index field is as wide as the largest index a `u64` time can have, so it never wraps, and
//! limits the layout cannot hold are a [`ConfigError::LimitTooLarge`] (see
//! [`KeyedLimiter::fixed_window`] and [`KeyedLimiter::sliding_window`] for the bounds). Stock
//! keeps `remaining XOR stock`, so a fresh key is the word 0 and restocks can go above the
//! configured level.
//!
//! ## Time
//!
//! Clocks may go backwards; no algorithm gives extra credit when they do, and none panics. The
//! one exception is bounded and documented: a [`StripedLimiter`] (the hot-key mode) shares its
//! time across stripes through a mark it writes once per lag rather than once per admission, so
//! a clock that steps back can lend it at most one unit (16 µs of the rate for quotas faster
//! than 61,035 a second) beyond one cell's ceiling; `strict_clock()` makes it exact at the
//! price of a shared write per admission, `relaxed_clock()` drops the mark (its docs give
//! both bounds).
//! A stale `now` (the coarse clock) only makes decisions stricter.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod admission;
mod algorithm;
mod any_limiter;
pub mod clock;
mod decision;
mod error;
mod limiter;
pub mod nginx;
mod policy;
mod quota;
mod reservation;
mod store;
mod sync;

pub use admission::gate::{check_all, check_all_in, check_all_reserving, MultiDecision};
#[cfg(feature = "async")]
pub use admission::wait::UntilReady;
pub use algorithm::sliding_log::MAX_SLIDING_LOG_LIMIT;
pub use algorithm::warm_up::MAX_PERMITS as MAX_WARM_UP_PERMITS;
pub use any_limiter::AnyLimiter;
pub use decision::{Decision, Denial};
pub use error::ConfigError;
pub use limiter::direct::{Limiter, LimiterBuilder};
pub use limiter::keyed::{KeyedLimiter, KeyedLimiterBuilder, WhenFull, MAX_TABLE_KEYS};
pub use limiter::sliding_log::{SlidingLog, SlidingLogBuilder};
pub use limiter::striped::{StripedLimiter, StripedLimiterBuilder, MAX_STRIPES};
pub use policy::{Policy, PolicyKind};
pub use quota::Quota;
pub use reservation::Reservation;
pub use store::stats::Stats;
pub use store::sweeper::Sweeper;

/// The README's examples, compiled and run as doctests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
