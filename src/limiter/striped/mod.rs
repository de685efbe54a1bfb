//! Hot-key mode: one limit split over several cache-padded cells, so that the threads checking
//! a single very hot key (a flash-sale SKU, a global API rate) do not all serialise on one
//! cache line.
//!
//! See [`StripedLimiter`] for how the limit is split, which stripe a check takes and what
//! striping costs.

use std::num::NonZeroU64;

use crossbeam_utils::CachePadded;

use crate::algorithm::Algorithm;
use crate::clock::{Clock, DefaultClock};
use crate::decision::Decision;
use crate::policy::Policy;
use crate::sync::cell::Cell;
use crate::sync::high_water::{HighWater, Stamp};

mod builder;
mod ops;

pub use builder::{StripedLimiterBuilder, MAX_STRIPES};

/// A limit for one very hot key, split over several cache-padded cells.
///
/// # How the limit is split
///
/// A [`StripedLimiter`] with `s` stripes holds `s` independent cells, each with its own share of
/// the limit, each updated by the same compare-and-swap as a [`Limiter`](crate::Limiter):
///
/// * **stock** of `u` units: stripe `i` holds `u / s` units, plus one for the first `u % s`
///   stripes. Every unit is in exactly one stripe and leaves it by one CAS, so **exactly `u`
///   units are ever admitted** (plus any restocked), under any concurrency, never one more.
/// * **GCRA** with emission interval `T` and burst `b` (and queue `q`): stripe `i` runs GCRA with
///   interval `s * T` and burst `b / s` (plus one for the first `b % s` stripes; the queue is
///   split the same way). In any stretch of time `t`, GCRA admits at most its burst (plus its
///   queue) and one more per interval elapsed, so all stripes together admit at most
///   `sum(b_i + q_i) + s * t / (s * T) = b + q + t / T`: **the same ceiling as one GCRA cell**
///   with the whole quota.
///
/// # Which stripe a check takes
///
/// Each thread starts at its own stripe (threads take tickets in the order of their first
/// check of any striped limiter and start at `ticket % s`, so any `s` consecutive threads start
/// on different stripes), or at the stripe a caller
/// names ([`check_n_from`](StripedLimiter::check_n_from), e.g. a worker index). If that stripe
/// denies, the check tries every other stripe in turn, at the same instant, before it denies:
/// a request is refused only when no stripe could admit it. A refused check reads the other
/// stripes and writes nothing, so the sold-out rush of a flash sale costs reads of lines that
/// nobody writes any more.
///
/// # What striping costs
///
/// * A request for `n` units is admitted from one stripe. A **GCRA** request can therefore
///   take at most the largest stripe's burst, `ceil(b / s)`; larger ones are refused with no
///   `retry_after`. Pick fewer stripes (or a plain [`Limiter`](crate::Limiter)) where requests
///   carry many units. A **stock** request that no single stripe can fill gathers units from
///   several stripes, one CAS each, and gives them all back if it cannot gather `n`: all or
///   nothing, still never more than the stock. While a gathering request holds units it may
///   go on to give back, a concurrent request can be refused for want of them (stricter, never
///   looser).
/// * Time is split too: each stripe refills at `1 / (s * T)`. A drained limiter admits again
///   when some stripe has refilled a whole unit, which can take up to `s * T` where one cell
///   takes `T` (each stripe holds a fraction meanwhile); the long-run rate is the quota's.
/// * A decision's [`limit`](Decision::limit) is the whole limiter's; its
///   [`remaining`](Decision::remaining) is what the stripe that decided has left, a lower
///   bound of the total (reading every stripe would touch every core's line on every check).
///   [`remaining`](StripedLimiter::remaining) sums all stripes.
/// * A stock is restocked ([`restock`](StripedLimiter::restock)) stripe by stripe, each share by
///   its own CAS; there is no `set_stock`, which could not set all stripes at one instant.
/// * Time (GCRA): the stripes share what time it is through one word on its own line, which an
///   admission writes only when its time is more than a lag ahead of it (see the next
///   section): about once per lag, not once per admission, so a hot key scales with cores.
///
/// # A clock that steps back
///
/// One cell keeps a clock that goes backwards from giving credit because its TAT never moves
/// back. A stripe's TAT never moves back either, but a stripe only knows its own checks: a
/// stripe that had credit at 10 s, reached by a check whose clock now reads 9 s, would take
/// 9 s at face value, and count the second up to 10 s as refill a second time. (A stock reads
/// no clock: nothing here applies to it.) Three modes answer this; the default keeps one cell's
/// ceiling to within a lag and writes nothing shared on most admissions.
///
/// **The high-water mark.** The limiter keeps a mark (one word on its own cache line): every
/// check decides at the later of its clock reading and the mark. An admitted check may raise
/// the mark to the time it decided at (`fetch_max`), and then a check that starts after that
/// admission has ended decides at that admission's time or later, whichever stripes the two
/// take. **The stamps.** Each stripe keeps a stamp: the latest time at which a check that
/// *started* at it was admitted (by it, or by another stripe after it refused), on the stripe's
/// own cache line, the line such a check has just read or written. A check whose first stripe
/// refuses it reads that stripe's stamp: if the stamp is later than the check's clock reading,
/// the check goes on at the stamp's time, from its first stripe again, and raises the mark to
/// it.
///
/// * **The default: stamps, and a mark that lags by less than `L`**, where `L` is the larger of
///   the whole quota's interval `T` and 16,384 ns: an admission raises its start stripe's
///   stamp, and raises the mark only if it decided more than `L` after the mark. So the mark is
///   always within `L` of the latest admission that has ended, and is written about once per
///   `L` of clock time (once per racing thread at most), whatever the rate. Guarantees, with
///   `U` the units admitted by a run of checks and `A` the latest reading of an admitted check
///   so far (reservations and rollbacks aside):
///   * from any stripes, under any clock: `U <= burst + queue + (A_end - A_start + L) / T`:
///     at most **one unit** beyond one cell's ceiling for quotas of up to 61,035 a second
///     (`T >= L`), at most `16,384 ns` of the rate beyond it for faster ones, however far the
///     clock steps back;
///   * one cell's ceiling exactly, `U <= burst + queue + (A_end - A_start) / T`, when the checks
///     start at one stripe (one thread calling [`check`](Self::check), or one `hint`) and no
///     request is larger than that stripe's share of the burst, and over any run that starts at
///     the latest reading so far and in which the clock does not go back (a clock that reads
///     the same on every core and never steps back: no error at all).
/// * **[`strict_clock`](StripedLimiterBuilder::strict_clock)**: every admission raises the mark to its
///   time, and the stripes keep **one cell's ceiling under any clock** from any stripes:
///   `U <= burst + queue + (A_end - A_start) / T`. (Why: order the admissions by the times they
///   were decided at; every admission of a run decides at a time `t` with `A_start <= t <=
///   A_end`; a stripe with interval `s * T` and burst `b_i` that admits `k_i` of the run's units
///   holds a TAT of at least `A_start + k_i * s * T` after its last one and, having admitted
///   it, at most `A_end + b_i * s * T` (plus its queue's share); summing `k_i <= b_i + (A_end -
///   A_start) / (s * T)` over the `s` stripes gives the bound. The default's bound is the same
///   argument with `A_start - L` for `A_start`.) The price is a write of the mark's shared line
///   by every admission later than the mark: each one, on a precise clock, which stops a hot
///   limiter from scaling past a few cores (BENCHMARKS.md). With
///   [`CoarseClock`] the reading moves once a millisecond, and the mark is written about once
///   per millisecond per thread.
/// * **[`relaxed_clock`](StripedLimiterBuilder::relaxed_clock)**: stamps only; admissions never
///   write the mark. One cell's ceiling when the checks start at one stripe, and over runs in
///   which the clock does not go back, as the default; over any run of checks from any
///   stripes, `U <= burst + queue + (latest - earliest) / T`, where `latest` is the latest
///   reading up to the run's end and `earliest` the earliest in it: a clock that steps back by
///   `d` gives at most `d / T` units beyond one cell's ceiling (the example on
///   [`relaxed_clock`](StripedLimiterBuilder::relaxed_clock) shows it).
///
/// A refused check raises nothing, as one cell stores nothing for it. A decision's durations
/// count from the time it was made at. Which to choose: the default almost always; strict where
/// every unit counts under a clock that may step back and the limiter is not hot on many
/// cores; relaxed only to drop the default's write once per lag.
///
/// [`CoarseClock`]: crate::clock::CoarseClock
///
/// # Example
///
/// ```
/// use cellgate::StripedLimiter;
/// // 1000 units of one SKU, split over 4 stripes: exactly 1000 sales, whatever the threads.
/// let sku = StripedLimiter::stock(1000).stripes(4).build()?;
/// let sold = std::thread::scope(|s| {
///     let workers: Vec<_> = (0..4)
///         .map(|_| s.spawn(|| (0..400).filter(|_| sku.check().is_allowed()).count()))
///         .collect();
///     workers.into_iter().map(|w| w.join().unwrap()).sum::<usize>()
/// });
/// assert_eq!(sold, 1000);
/// assert_eq!(sku.remaining(), 0);
/// # Ok::<(), cellgate::ConfigError>(())
/// ```
#[derive(Debug)]
pub struct StripedLimiter<C = DefaultClock> {
    stripes: Box<[CachePadded<Stripe>]>,
    /// The whole limit (burst + queue, or the stock): every decision's `limit`.
    limit: u32,
    /// Stock limiters read no clock. Kept here rather than read off a stripe's algorithm: the
    /// stripes' lines are written by other cores' checks, this one only read.
    uses_time: bool,
    /// `u64::MAX / stripes + 1` (wrapping): [`fast_mod`]'s constant for the stripe count.
    mod_magic: u64,
    /// The whole quota's policy (each stripe's algorithm only knows its share).
    policy: Policy,
    /// GCRA: an instant every check decides at at least: within `lag` of the latest admission
    /// (by default), the latest admission (`strict_clock()`), or the latest found proven by a
    /// stripe's stamp; see "A clock that steps back".
    high: HighWater,
    /// How admissions share their time.
    time: TimeShare,
    /// GCRA by default: how far the latest admission may be ahead of `high` before it lifts it
    /// (the larger of the whole quota's interval `T` and [`MARK_LAG_NS`]).
    lag: u64,
    clock: C,
}

/// How a striped GCRA limiter's admissions share their time (see "A clock that steps back" on
/// [`StripedLimiter`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum TimeShare {
    /// The default: each admission stamps its start stripe, and lifts the high-water mark when
    /// it is more than the lag ahead of it.
    Lagged,
    /// `strict_clock()`: every admission lifts the mark to its time.
    Strict,
    /// `relaxed_clock()`: stamps only.
    Relaxed,
}

/// The least lag of the default high-water mark, ns: admissions lift the shared mark about once
/// per this much clock time (per racing thread at most), whatever their rate. A clock that
/// steps back can then lend at most this much time's worth of the rate beyond one cell's
/// ceiling (one unit for quotas whose interval is longer).
pub(crate) const MARK_LAG_NS: u64 = 16_384;

/// One share of the limit: its cell and the algorithm with its share's parameters, side by
/// side (the algorithm is only read; it shares the line the stripe's checks write anyway).
#[derive(Debug)]
struct Stripe {
    cell: Cell,
    algorithm: Algorithm,
    /// GCRA: the latest time at which a check that started at this stripe was admitted (by
    /// this stripe or, falling back, by another).
    stamp: Stamp,
}

thread_local! {
    // Threads take tickets in the order they first check a striped limiter, and start at
    // stripe `ticket % stripes`, so any `stripes` consecutive threads start on distinct stripes.
    static TICKET: u32 = crate::sync::next_ticket();
}

/// [`fast_mod`]'s constant for divisor `d >= 1`.
const fn mod_magic(d: usize) -> u64 {
    (u64::MAX / d as u64).wrapping_add(1)
}

/// `a % d` for a 32-bit `a` and `1 <= d <= 2^32`, given `magic = mod_magic(d)`, by two
/// multiplications instead of a division (Lemire, Kaser and Kurz, "Faster remainder by direct
/// computation", 2019: exact for all 32-bit numerators).
#[inline(always)]
fn fast_mod(a: u32, magic: u64, d: usize) -> usize {
    let low = magic.wrapping_mul(u64::from(a));
    ((u128::from(low) * d as u128) >> 64) as usize
}

impl<C: Clock> StripedLimiter<C> {
    /// Checks one request, starting at this thread's stripe.
    ///
    /// ```
    /// use cellgate::StripedLimiter;
    /// let l = StripedLimiter::stock(1).stripes(8).build()?;
    /// assert!(l.check().is_allowed());
    /// assert!(!l.check().is_allowed());
    /// # Ok::<(), cellgate::ConfigError>(())
    /// ```
    #[inline]
    pub fn check(&self) -> Decision {
        self.check_n(1)
    }

    /// Checks a request for `n` units, starting at this thread's stripe: all are admitted or
    /// none (see [`StripedLimiter`] for how many units one request can take).
    ///
    /// ```
    /// use cellgate::StripedLimiter;
    /// let l = StripedLimiter::stock(10).stripes(2).build()?;
    /// assert!(l.check_n(7).is_allowed());
    /// assert!(!l.check_n(4).is_allowed());
    /// assert_eq!(l.remaining(), 3); // a refused request takes nothing
    /// # Ok::<(), cellgate::ConfigError>(())
    /// ```
    #[inline]
    pub fn check_n(&self, n: u32) -> Decision {
        let ticket = TICKET.with(|t| *t);
        self.check_from(fast_mod(ticket, self.mod_magic, self.stripes.len()), n)
    }

    /// Checks a request for `n` units, starting at stripe `hint % stripes` (for example a
    /// worker thread's index, where the caller has one).
    ///
    /// ```
    /// use cellgate::StripedLimiter;
    /// let l = StripedLimiter::stock(4).stripes(4).build()?;
    /// assert_eq!(l.check_n_from(2, 1).remaining(), 0); // stripe 2 held one unit
    /// assert!(l.check_n_from(2, 1).is_allowed()); // taken from another stripe
    /// # Ok::<(), cellgate::ConfigError>(())
    /// ```
    #[inline]
    pub fn check_n_from(&self, hint: usize, n: u32) -> Decision {
        self.check_from(hint % self.stripes.len(), n)
    }

    #[inline]
    fn check_from(&self, start: usize, n: u32) -> Decision {
        let now = self.now();
        let stripe = &self.stripes[start];
        let first = stripe.check(now, n);
        if first.is_allowed() {
            self.admitted(start, now);
            return first.with_limit(self.limit);
        }
        if stripe.stamp.get() > now {
            // A check that started here was admitted at a later time than this clock reads
            // (never for a stock, whose stamps stay 0).
            return self.check_behind(start, now, n);
        }
        self.check_others(start, now, n, first)
    }

    /// The rest of a check whose first stripe refused it (its clock not behind that stripe's
    /// stamp): every other stripe in turn, then (stock only) a gathering of units from several
    /// stripes.
    #[cold]
    #[inline(never)]
    fn check_others(&self, start: usize, now: u64, n: u32, first: Decision) -> Decision {
        let len = self.stripes.len();
        let mut denied = first;
        for k in 1..len {
            let d = self.stripes[(start + k) % len].check(now, n);
            if d.is_allowed() {
                // The start stripe's stamp covers the checks that start there, wherever they
                // were admitted.
                self.admitted(start, now);
                return d.with_limit(self.limit);
            }
            // Report the soonest retry any stripe offers (`None` only if none offers one).
            if let Some(ns) = d.retry_after_ns() {
                if denied.retry_after_ns().is_none_or(|best| ns < best) {
                    denied = d;
                }
            }
        }
        if n > 1 && !self.uses_time {
            if let Some(d) = self.gather(start, n) {
                return d;
            }
        }
        denied.with_limit(self.limit)
    }

    /// A GCRA check whose clock is behind its start stripe's stamp: every stripe from the start
    /// on, at the stamp's time, which also raises the high-water mark.
    #[cold]
    #[inline(never)]
    fn check_behind(&self, start: usize, now: u64, n: u32) -> Decision {
        // The start stripe's stamp, or a later mark another check raised.
        let now = self.catch_up(start, now, true).unwrap_or(now);
        let stripe = &self.stripes[start];
        let first = stripe.check(now, n);
        if first.is_allowed() {
            self.admitted(start, now);
            return first.with_limit(self.limit);
        }
        self.check_others(start, now, n, first)
    }

    /// A stock request that no single stripe could fill: takes what each stripe has, one CAS
    /// each, until `n` units are held; if the stripes run out first, gives every taken unit
    /// back and returns `None`.
    fn gather(&self, start: usize, n: u32) -> Option<Decision> {
        let len = self.stripes.len();
        let mut need = n;
        let mut taken: Vec<(usize, u32)> = Vec::new();
        for k in 0..len {
            let i = (start + k) % len;
            let stripe = &self.stripes[i];
            let Algorithm::Stock(stock) = stripe.algorithm else {
                return None;
            };
            let (got, left) = stripe.cell.update(|w| {
                let have = stock.remaining(w);
                let got = have.min(u64::from(need));
                ((got, have - got), (got > 0).then(|| stock.word(have - got)))
            });
            if got > 0 {
                // `got <= need`, a u32.
                let got = got as u32;
                taken.push((i, got));
                need -= got;
                if need == 0 {
                    return Some(Decision::allow(
                        self.limit,
                        left,
                        NonZeroU64::MIN,
                        crate::algorithm::stock::NEVER,
                    ));
                }
            }
        }
        for (i, got) in taken {
            let stripe = &self.stripes[i];
            if let Algorithm::Stock(stock) = stripe.algorithm {
                stripe.cell.update(|w| {
                    let back = stock.remaining(w).saturating_add(u64::from(got));
                    ((), Some(stock.word(back)))
                });
            }
        }
        None
    }

    /// Where a check whose first stripe (`start`) refused it at `now` goes on: `None`, on at
    /// the next stripe at `now`; or (GCRA), when the start stripe's stamp is later than `now`
    /// (a check that started there was admitted at a later time), `Some` time to go on at,
    /// from the start stripe again. With `publish`, that time also raises the limiter's
    /// high-water mark, which every later check decides at at least, and is the mark (later
    /// than the stamp if another check raised it meanwhile).
    #[inline]
    fn catch_up(&self, start: usize, now: u64, publish: bool) -> Option<u64> {
        let proven = self.stripes[start].stamp.get();
        if proven <= now {
            // Always so for a stock: its stamps stay 0.
            return None;
        }
        Some(if publish {
            self.high.raise(proven)
        } else {
            proven
        })
    }

    /// The stripe this thread starts at.
    #[inline(always)]
    fn start(&self) -> usize {
        let ticket = TICKET.with(|t| *t);
        fast_mod(ticket, self.mod_magic, self.stripes.len())
    }

    /// The time a check decides at: the clock's reading, or the high-water mark when that is
    /// later (see "A clock that steps back"); 0 for a stock.
    #[inline(always)]
    fn now(&self) -> u64 {
        if self.uses_time {
            self.clock.now().max(self.high.get())
        } else {
            0
        }
    }

    /// Records that a check which started at stripe `start` was admitted at `now`: on the
    /// start stripe's stamp, and (by default) on the high-water mark if `now` is more than the
    /// lag ahead of it; strict, always on the mark; relaxed, on the stamp only. Nothing for a
    /// stock, which reads no clock.
    #[inline(always)]
    fn admitted(&self, start: usize, now: u64) {
        if !self.uses_time {
            // A stock decides at 0: nothing to record, and no line of another core to read.
            return;
        }
        match self.time {
            TimeShare::Lagged => {
                self.stripes[start].stamp.raise(now);
                self.high.lift_lagged(now, self.lag);
            }
            TimeShare::Strict => self.high.lift(now),
            TimeShare::Relaxed => self.stripes[start].stamp.raise(now),
        }
    }
}

/// Of two denials, the one with the soonest retry (`None` only if neither offers one).
#[inline]
fn sooner(best: Option<Decision>, d: Decision) -> Decision {
    match (best, d.retry_after_ns()) {
        (None, _) => d,
        (Some(b), Some(ns)) if b.retry_after_ns().is_none_or(|bn| ns < bn) => d,
        (Some(b), _) => b,
    }
}

crate::any_limiter::direct_limiter_traits!(StripedLimiter);

impl Stripe {
    /// One CAS loop on this stripe's cell, as [`Limiter`](crate::Limiter)'s check.
    #[inline(always)]
    fn check(&self, now: u64, n: u32) -> Decision {
        self.cell.check(&self.algorithm, now, n)
    }
}

#[cfg(all(test, not(loom)))]
mod tests;
