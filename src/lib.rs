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
//! | a state per key | [`KeyedLimiter`]: [`gcra`](KeyedLimiter::gcra), [`fixed_window`](KeyedLimiter::fixed_window), [`sliding_window`](KeyedLimiter::sliding_window), [`stock`](KeyedLimiter::stock); by default a lock-free table that grows and shrinks with the live keys; a ceiling ([`KeyedBuilder::max_keys`]), a table allocated up front ([`KeyedBuilder::fixed_capacity`]) or an exact map ([`KeyedBuilder::exact_keys`]) |
//! | exact "never more than N in any window" | [`SlidingLog`], built by [`KeyedLimiter::sliding_log`] (not one cell: O(limit) per key) |
//! | warm-up | [`Limiter::warm_up`], [`KeyedLimiter::warm_up`] (Guava's `SmoothWarmingUp`) |
//! | many keys at once | [`KeyedLimiter::check_many`]: one instant for the batch, cache misses overlapped on the bounded table |
//! | the answer | [`Decision`]: allowed, limit, remaining, retry_after, reset_after, delay |
//! | delay instead of reject | [`Quota::with_queue`], [`KeyedLimiter::reserve`] → [`Reservation`], [`KeyedLimiter::cancel`] |
//! | waiting | [`KeyedLimiter::acquire`] (blocking), `until_ready` → `UntilReady` (feature `async`) |
//! | giving back | [`KeyedLimiter::refund`], [`KeyedLimiter::cancel`] |
//! | all-or-nothing across limiters | [`check_all`], [`Gate`], [`KeyedLimiter::gate`], [`MultiDecision`] |
//! | quotas per call and at runtime | [`KeyedLimiter::check_with`], [`KeyedLimiter::set_quota`] (and on [`Limiter`]) |
//! | inventory operations | [`KeyedLimiter::restock`], [`KeyedLimiter::set_stock`] (and on [`Limiter`]) |
//! | memory | [`KeyedLimiter::evict_idle`], [`KeyedLimiter::spawn_sweeper`] → [`Sweeper`], [`KeyedLimiter::len`], [`KeyedLimiter::refused`], [`KeyedLimiter::evicted`] |
//! | time | [`clock::Clock`], [`clock::QuantaClock`] (default), [`clock::CoarseClock`], [`clock::StdClock`], [`clock::ManualClock`] |
//! | bad configuration | [`ConfigError`], returned by every `build()` |
//! | nginx `limit_req` notation | [`nginx::LimitReq`]: `"rate=10r/s burst=20 delay=8"` to a [`Quota`] that decides like nginx |
//!
//! ## Quick start
//!
//! ```
//! use std::time::Duration;
//! use cellgate::{KeyedLimiter, Limiter, Quota};
//!
//! // 30 requests a minute per user, at most 16 at once.
//! // Nothing to size: the store grows with the users that are live and reclaims idle ones.
//! let users = KeyedLimiter::<u64>::gcra(Quota::new(30, Duration::from_secs(60)).with_burst(16))
//!     .build()?;
//! // 10k requests a second in total.
//! let global = Limiter::gcra(Quota::per_second(10_000)).build()?;
//!
//! let d = users.check(&42);
//! if d.is_allowed() && global.check().is_allowed() {
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
//! Clocks may go backwards; no algorithm gives extra credit when they do, and none panics.
//! A stale `now` (the coarse clock) only makes decisions stricter.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod algorithm;
mod cell;
pub mod clock;
mod decision;
mod error;
mod exact_map;
mod grow_table;
mod keyed;
mod limiter;
mod multi;
pub mod nginx;
mod policy;
mod quota;
mod rate_limiter;
mod reservation;
mod setting;
mod sliding_log;
mod striped;
mod sweep;
mod sweeper;
mod sync;
mod sync_grow;
mod table;
mod wait;

pub use algorithm::sliding_log::MAX_LOG_LIMIT;
pub use algorithm::warm_up::MAX_PERMITS as MAX_WARM_UP_PERMITS;
pub use decision::Decision;
pub use error::ConfigError;
pub use keyed::{KeyGate, KeyedBuilder, KeyedLimiter, WhenFull, MAX_TABLE_KEYS};
pub use limiter::{Limiter, LimiterBuilder};
pub use multi::{check_all, check_all_in, Gate, MultiDecision};
pub use policy::{Policy, PolicyKind};
pub use quota::Quota;
pub use rate_limiter::{Bound, RateLimiter};
pub use reservation::Reservation;
pub use sliding_log::{SlidingLog, SlidingLogBuilder};
pub use striped::{StripedBuilder, StripedLimiter, MAX_STRIPES};
pub use sweeper::Sweeper;
#[cfg(feature = "async")]
pub use wait::UntilReady;

/// The README's examples, compiled and run as doctests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
