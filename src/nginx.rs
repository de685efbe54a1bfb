//! nginx's `limit_req`, read from its own notation and run as GCRA.
//!
//! [`LimitReq`] reads the parameters of nginx's `limit_req_zone` and `limit_req` directives
//! (`rate=10r/s burst=20 delay=8`) and turns them into a [`Quota`] that makes the same
//! decisions, with the same delays, as nginx does for one key: a request nginx passes at once
//! is allowed with a zero [`delay`](crate::Decision::delay), one nginx delays is allowed with
//! the delay nginx would wait, and one nginx rejects (503) is denied, up to the rounding
//! differences [listed below](#where-decisions-differ-from-nginx).
//!
//! ```
//! use cellgate::nginx::LimitReq;
//! use cellgate::KeyedLimiter;
//!
//! let limit = LimitReq::parse("rate=10r/s burst=20 delay=8")?;
//! let clients = KeyedLimiter::<std::net::IpAddr>::gcra(limit.quota()).build()?;
//!
//! let d = clients.check(&"192.0.2.7".parse().unwrap());
//! if !d.is_allowed() {
//!     // nginx: 503
//! } else if !d.delay().is_zero() {
//!     // nginx: wait d.delay(), then serve
//! } else {
//!     // nginx: serve at once
//! }
//! # Ok::<(), cellgate::ConfigError>(())
//! ```
//!
//! # The mapping
//!
//! nginx keeps, per key, an *excess* `e` counted in thousandths of a request and the time
//! `last` (in milliseconds) it was stored. With the zone's rate `r` (thousandths of a request
//! per second), a request at `now` computes
//!
//! ```text
//! e' = max(e - r * (now - last) / 1000 + 1000, 0)        (integer arithmetic)
//! ```
//!
//! and is rejected if `e' > 1000 * burst` (nothing is stored), else stores `e'` and `now` and
//! is delayed by `(e' - 1000 * delay) * 1000 / r` milliseconds if `e' > 1000 * delay`, or
//! passed at once. A key nginx has no node for gets `e' = 0`. `nodelay` means `delay = burst`;
//! neither means `delay = 0`. The rate `Nr/s` is `r = 1000 N`, and `Nr/m` is
//! `r = 1000 N / 60`, rounded down.
//!
//! The excess is GCRA in other units. Counted in requests (`x = e' / 1000`), and with the
//! emission interval `T = 1 / rate`, the request leaves the theoretical arrival time
//! `ahead = (x + 1) T` in front of `now`: the requests in excess, plus the one being served.
//! nginx's tests become cellgate's:
//!
//! | nginx | cellgate |
//! |---|---|
//! | rejected iff `x > burst` | denied iff `ahead > (burst + 1) T`, the ceiling |
//! | delayed iff `x > delay`, by `(x - delay) T` | delayed by `ahead - (delay + 1) T`, the part beyond the tolerance |
//! | a new node: `x = 0`, passed | a fresh key: `ahead = T`, allowed at once |
//!
//! So `rate=N… burst=B delay=D` is
//! `Quota::new(N, 1 s or 60 s).with_burst(D + 1).with_queue(B - D)`: what [`LimitReq::quota`]
//! returns. The `+ 1` is the request being served, which nginx's excess does not count: a
//! fresh key gets `D + 1` requests at once and `B + 1` in all, and `burst=5 nodelay` is
//! cellgate's burst 6, not 5.
//!
//! ## A worked example
//!
//! nginx's two-stage rate limiting example, `rate=5r/s burst=12 delay=8`, is `T = 200 ms`, burst 9,
//! queue 4. Fourteen requests at once on a fresh key: the first nine pass at once (nginx's
//! excess 0 to 8), the next four wait 200, 400, 600 and 800 ms (excess 9 to 12), and the
//! fourteenth is rejected (excess 13 > 12). A second later the key has earned back five
//! requests: the next one has excess `12 - 5 + 1 = 8` and passes at once.
//!
//! ```
//! use std::time::Duration;
//! use cellgate::nginx::LimitReq;
//! use cellgate::Limiter;
//! use cellgate::clock::ManualClock;
//!
//! let clock = ManualClock::new();
//! let limit = LimitReq::parse("rate=5r/s burst=12 delay=8")?;
//! let l = Limiter::gcra(limit.quota()).clock(clock.clone()).build()?;
//!
//! let ms = |d: Duration| d.as_millis();
//! let got: Vec<_> = (0..14).map(|_| l.check()).map(|d| d.is_allowed().then(|| ms(d.delay()))).collect();
//! assert_eq!(got[..9], [Some(0); 9]);
//! assert_eq!(got[9..], [Some(200), Some(400), Some(600), Some(800), None]);
//!
//! clock.advance(Duration::from_secs(1));
//! assert_eq!(l.check().delay(), Duration::ZERO);
//! assert_eq!(l.check().delay(), Duration::from_millis(200));
//! # Ok::<(), cellgate::ConfigError>(())
//! ```
//!
//! # Where decisions differ from nginx
//!
//! nginx counts time in whole milliseconds and requests in whole thousandths; cellgate counts
//! nanoseconds, with `T = period / N` nanoseconds (rounded down). `tests/nginx.rs` runs a
//! model of nginx's arithmetic beside cellgate on request timelines and pins each difference
//! below, with its direction and size.
//!
//! - **Exact cases agree exactly.** For `r/s` rates whose interval is a whole number of
//!   nanoseconds (`N` divides 10⁹: 1, 2, 4, 5, 8, 10, 16, 20, 25, …) and requests at whole
//!   milliseconds, every decision is the same and nginx's delay is cellgate's rounded down to
//!   the millisecond (a property test checks this on random configurations and timelines).
//! - **Delays are whole milliseconds in nginx, rounded down.** cellgate returns the exact
//!   delay, up to 1 ms longer: at `16r/s` (`T = 62.5 ms`) a second request at once with
//!   `burst=1` waits 62.5 ms in cellgate and 62 ms in nginx.
//! - **nginx's clock is in milliseconds** (and cached: it reads the time once per event loop
//!   iteration). In the exact cases nginx decides exactly as cellgate would on a clock rounded
//!   down to the millisecond, so the elapsed time it sees can be up to 1 ms longer or shorter
//!   than the real one, and either side can be the stricter. At `10r/s`, requests at 0.9 ms
//!   and 100.1 ms: nginx sees 100 ms elapsed and passes the second; cellgate sees 99.2 ms and
//!   denies it (retry after 0.8 ms). At `16r/s`, requests at 0 and 62.7 ms: nginx sees 62 ms
//!   and rejects; cellgate sees 62.7 ≥ 62.5 ms and allows.
//! - **`r/m` rates: nginx is stricter.** nginx stores `1000 N / 60` thousandths of a request
//!   per second, rounded down, so unless 3 divides `N` it refills more slowly than `N` a
//!   minute: `7r/m` is 116 thousandths a second (6.96 a minute; an interval of 8620.7 ms
//!   against cellgate's 8571.4 ms), and `1r/m` is 16 (0.96 a minute; 62.5 s against 60 s).
//!   After a request on a fresh `7r/m` key, nginx rejects the next one until 8621 ms have
//!   passed, cellgate allows it from 8572 ms on: 49 ms earlier. Delays are longer in nginx by
//!   the same ratio (8620 ms against 8571.43 ms for the first delayed request).
//! - **`r/m` rates: nginx drops fractions of what a key earns back.** Each time it stores a
//!   key, nginx credits `r * elapsed / 1000` thousandths, rounded down, and forgets the
//!   remainder: at `r/m` rates (where `r` is not a multiple of 1000) a key loses up to one
//!   thousandth of a request per admitted request. With `rate=6r/m burst=1 nodelay`
//!   (`T = 10 s`), requests at 0, 5 ms and 10 004 ms: nginx rejects the third (excess 1.001
//!   requests), cellgate allows it (19.996 s ahead, within the 20 s ceiling).
//!
//!   On any timeline of whole milliseconds, these two effects (and cellgate's rounding of `T`
//!   down to a nanosecond, for `r/s` rates that do not divide 10⁹) only ever make nginx the
//!   stricter: until the first decision where the two differ, nginx's delay is at least
//!   cellgate's rounded down to the millisecond, and that first difference is always a request
//!   nginx rejects and cellgate allows. (After it, their states differ, and either may admit
//!   what the other rejects.) A property test checks this for random `r/s` and `r/m`
//!   configurations.
//! - **A clock that goes backwards.** Neither gives credit for it, but nginx treats a step back
//!   of up to 60 s as no time elapsed and keeps measuring from its later `last`, while cellgate
//!   measures from the earlier time, so it is stricter by the size of the step until the clock
//!   catches up: at `10r/s burst=5`, after three requests at 1000 ms a fourth at 900 ms is
//!   delayed 300 ms by nginx and 400 ms by cellgate; back at 1000 ms they agree again. A step
//!   back of more than 60 s nginx counts as 1 ms elapsed and then measures from the new time,
//!   forgetting the step; cellgate keeps the key's schedule and denies until the clock is back
//!   where it was. (Older nginx versions counted a step back as time elapsed.)
//! - **The first request on a new node** passes in nginx with excess 0, and so does
//!   cellgate's on a fresh key (`ahead = T`): the same schedule. But a node can become new
//!   again in nginx while its key still has a backlog. When it creates a node, nginx's zone
//!   drops up to two nodes that have been idle for 60 s and whose stored excess has decayed
//!   to 0; the next request on such a node would still have had up to one request of excess
//!   (its predecessor's), which nginx then forgives. That needs a backlog of about a minute's
//!   worth of requests, so it matters at rates of a request or two a minute, or with bursts
//!   that large. And when the zone is full, nginx drops the least recently used node whatever
//!   it holds, forgiving up to the whole burst. Both make nginx more permissive, depending on
//!   other keys' traffic, so the reference model leaves them out. cellgate only drops keys
//!   whose state is equivalent to a fresh key's, and with
//!   [`max_keys`](crate::KeyedLimiterBuilder::max_keys) it refuses new keys rather than forget live
//!   ones.
//!
//! Beyond a single limit: nginx applies several `limit_req` directives together and charges
//! none of them when one rejects; checking several cellgate limiters one after another charges
//! the earlier ones. nginx has no weighted requests (`check_n`).
//!
//! # The notation
//!
//! [`LimitReq::parse`] reads whitespace-separated parameters, in any order, with an optional
//! trailing `;`:
//!
//! | parameter | meaning | default |
//! |---|---|---|
//! | `rate=Nr/s`, `rate=Nr/m` (or just `Nr/s`, `Nr/m`) | `N` requests a second or a minute; required | |
//! | `burst=N` | requests in excess that are delayed or passed rather than rejected | 0 |
//! | `delay=N` | of those, how many pass at once | 0 |
//! | `nodelay` | all of them pass at once (`delay = burst`) | |
//!
//! Numbers are decimal, digits only. As in nginx, `rate=N` without a unit is `Nr/s`, `burst`
//! and `delay` must be at least 1 when given, and the rate at least 1. Stricter than nginx
//! (which silently keeps the last one, or treats the delay as `nodelay`): a parameter given
//! twice, `delay` together with `nodelay`, and a `delay` above the `burst` are errors. nginx's
//! `zone=` has no counterpart: a [`LimitReq`] carries the zone's rate itself.

use std::fmt;
use std::hash::{Hash, Hasher};
use std::str::FromStr;
use std::time::Duration;

use crate::error::ConfigError;
use crate::quota::Quota;

/// The largest burst: `burst + 1` must fit in a `u32`.
const MAX_BURST: u32 = u32::MAX - 1;

/// The unit of a rate.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Unit {
    /// `r/s`.
    Second,
    /// `r/m`.
    Minute,
}

impl Unit {
    const fn period(self) -> Duration {
        match self {
            Unit::Second => Duration::from_secs(1),
            Unit::Minute => Duration::from_secs(60),
        }
    }

    const fn seconds(self) -> u64 {
        match self {
            Unit::Second => 1,
            Unit::Minute => 60,
        }
    }

    const fn notation(self) -> &'static str {
        match self {
            Unit::Second => "r/s",
            Unit::Minute => "r/m",
        }
    }
}

/// Which requests within the burst pass at once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Delay {
    /// `delay=N` (0 when not given): the first `N` in excess pass at once.
    After(u32),
    /// `nodelay`: all of them do.
    Never,
}

/// nginx's `limit_req` parameters for one zone: a rate, a burst, and which requests in the
/// burst are delayed.
///
/// Read one from nginx's notation with [`parse`](LimitReq::parse) (or [`str::parse`]), or
/// build one with [`per_second`](LimitReq::per_second) / [`per_minute`](LimitReq::per_minute)
/// and [`burst`](LimitReq::burst), [`delay`](LimitReq::delay), [`nodelay`](LimitReq::nodelay).
/// [`quota`](LimitReq::quota) gives the GCRA quota that decides like nginx, and
/// [`Display`](fmt::Display) writes the notation back. See the [module docs](self) for the
/// mapping and where it differs from nginx.
///
/// A `delay` above the `burst` counts as the burst (it then acts as `nodelay`, as in nginx):
/// `burst(2).delay(5)` equals `burst(2).delay(2)`, and is written as `delay=2`.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use cellgate::nginx::LimitReq;
/// use cellgate::Quota;
///
/// let limit: LimitReq = "rate=6r/m burst=5 nodelay;".parse()?;
/// assert_eq!(limit, LimitReq::per_minute(6).burst(5).nodelay());
/// assert_eq!(limit.to_string(), "rate=6r/m burst=5 nodelay");
/// assert_eq!(limit.quota(), Quota::new(6, Duration::from_secs(60)).with_burst(6).with_queue(0));
/// # Ok::<(), cellgate::ConfigError>(())
/// ```
#[derive(Debug, Clone, Copy)]
pub struct LimitReq {
    rate: u32,
    unit: Unit,
    burst: u32,
    delay: Delay,
}

impl LimitReq {
    /// `rate=Nr/s`: `n` requests a second, no burst.
    ///
    /// A rate of 0 is accepted here and reported by the limiter's `build()`
    /// ([`ConfigError::Zero`]).
    ///
    /// # Examples
    ///
    /// ```
    /// use cellgate::nginx::LimitReq;
    ///
    /// assert_eq!(LimitReq::per_second(10).to_string(), "rate=10r/s");
    /// ```
    #[must_use]
    pub const fn per_second(n: u32) -> Self {
        Self {
            rate: n,
            unit: Unit::Second,
            burst: 0,
            delay: Delay::After(0),
        }
    }

    /// `rate=Nr/m`: `n` requests a minute, no burst.
    ///
    /// # Examples
    ///
    /// ```
    /// use cellgate::nginx::LimitReq;
    ///
    /// assert_eq!(LimitReq::per_minute(30).to_string(), "rate=30r/m");
    /// ```
    #[must_use]
    pub const fn per_minute(n: u32) -> Self {
        Self {
            rate: n,
            unit: Unit::Minute,
            burst: 0,
            delay: Delay::After(0),
        }
    }

    /// `burst=N`: up to `b` requests beyond the rate are delayed (or passed, see
    /// [`delay`](Self::delay)) instead of rejected. Values above 4 294 967 294 are taken as
    /// that.
    ///
    /// # Examples
    ///
    /// ```
    /// use cellgate::nginx::LimitReq;
    ///
    /// assert_eq!(LimitReq::per_second(10).burst(20).max_burst(), 20);
    /// ```
    #[must_use]
    pub const fn burst(mut self, b: u32) -> Self {
        self.burst = if b > MAX_BURST { MAX_BURST } else { b };
        self
    }

    /// `delay=N`: the first `d` requests in excess pass at once, the rest of the burst is
    /// delayed. Replaces an earlier [`nodelay`](Self::nodelay).
    ///
    /// # Examples
    ///
    /// ```
    /// use cellgate::nginx::LimitReq;
    ///
    /// let limit = LimitReq::per_second(5).burst(12).delay(8);
    /// assert_eq!(limit.to_string(), "rate=5r/s burst=12 delay=8");
    /// assert_eq!(limit.delay_limit(), 8);
    /// ```
    #[must_use]
    pub const fn delay(mut self, d: u32) -> Self {
        self.delay = Delay::After(d);
        self
    }

    /// `nodelay`: every request within the burst passes at once. Replaces an earlier
    /// [`delay`](Self::delay).
    ///
    /// # Examples
    ///
    /// ```
    /// use cellgate::nginx::LimitReq;
    ///
    /// let limit = LimitReq::per_second(10).burst(5).nodelay();
    /// assert!(limit.is_nodelay());
    /// assert_eq!(limit.delay_limit(), 5);
    /// ```
    #[must_use]
    pub const fn nodelay(mut self) -> Self {
        self.delay = Delay::Never;
        self
    }

    /// The `N` of `Nr/s` or `Nr/m`.
    ///
    /// # Examples
    ///
    /// ```
    /// use cellgate::nginx::LimitReq;
    ///
    /// assert_eq!(LimitReq::parse("rate=7r/m")?.rate(), 7);
    /// # Ok::<(), cellgate::ConfigError>(())
    /// ```
    #[must_use]
    pub const fn rate(&self) -> u32 {
        self.rate
    }

    /// The period of the rate: one second (`r/s`) or one minute (`r/m`).
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use cellgate::nginx::LimitReq;
    ///
    /// assert_eq!(LimitReq::parse("rate=7r/m")?.period(), Duration::from_secs(60));
    /// # Ok::<(), cellgate::ConfigError>(())
    /// ```
    #[must_use]
    pub const fn period(&self) -> Duration {
        self.unit.period()
    }

    /// The rate as nginx stores it: thousandths of a request per second, `1000 N` for `Nr/s`
    /// and `1000 N / 60` rounded down for `Nr/m`.
    ///
    /// # Examples
    ///
    /// ```
    /// use cellgate::nginx::LimitReq;
    ///
    /// assert_eq!(LimitReq::per_second(10).rate_milli(), 10_000);
    /// assert_eq!(LimitReq::per_minute(7).rate_milli(), 116); // not 116.67
    /// ```
    #[must_use]
    pub const fn rate_milli(&self) -> u64 {
        self.rate as u64 * 1000 / self.unit.seconds()
    }

    /// `burst=N`: how many requests beyond the rate are delayed or passed rather than
    /// rejected (0 when not given).
    ///
    /// # Examples
    ///
    /// ```
    /// use cellgate::nginx::LimitReq;
    ///
    /// assert_eq!(LimitReq::parse("rate=1r/s burst=5")?.max_burst(), 5);
    /// assert_eq!(LimitReq::parse("rate=1r/s")?.max_burst(), 0);
    /// # Ok::<(), cellgate::ConfigError>(())
    /// ```
    #[must_use]
    pub const fn max_burst(&self) -> u32 {
        self.burst
    }

    /// How many requests in excess pass at once: `delay=N` (0 when not given), or the whole
    /// burst with `nodelay`. Never more than the burst.
    ///
    /// # Examples
    ///
    /// ```
    /// use cellgate::nginx::LimitReq;
    ///
    /// assert_eq!(LimitReq::parse("rate=1r/s burst=5 delay=2")?.delay_limit(), 2);
    /// assert_eq!(LimitReq::parse("rate=1r/s burst=5 nodelay")?.delay_limit(), 5);
    /// assert_eq!(LimitReq::parse("rate=1r/s burst=5")?.delay_limit(), 0);
    /// # Ok::<(), cellgate::ConfigError>(())
    /// ```
    #[must_use]
    pub const fn delay_limit(&self) -> u32 {
        match self.delay {
            Delay::Never => self.burst,
            Delay::After(d) if d < self.burst => d,
            Delay::After(_) => self.burst,
        }
    }

    /// Whether `nodelay` was given.
    ///
    /// # Examples
    ///
    /// ```
    /// use cellgate::nginx::LimitReq;
    ///
    /// assert!(LimitReq::parse("10r/s burst=5 nodelay")?.is_nodelay());
    /// assert!(!LimitReq::parse("10r/s burst=5 delay=5")?.is_nodelay());
    /// # Ok::<(), cellgate::ConfigError>(())
    /// ```
    #[must_use]
    pub const fn is_nodelay(&self) -> bool {
        matches!(self.delay, Delay::Never)
    }

    /// The quota that decides like nginx: `Quota::new(N, period)`, burst `delay + 1`, queue
    /// `burst - delay` (see the [module docs](self)).
    ///
    /// The quota is checked by the limiter's `build()`: a zero rate, or a burst too large for
    /// the rate's interval in `u64` nanoseconds, is a [`ConfigError`] there.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use cellgate::nginx::LimitReq;
    /// use cellgate::Quota;
    ///
    /// let q = LimitReq::parse("rate=10r/s burst=20 delay=8")?.quota();
    /// assert_eq!(q, Quota::per_second(10).with_burst(9).with_queue(12));
    /// assert_eq!(LimitReq::per_second(10).quota(), Quota::per_second(10).with_burst(1));
    /// # Ok::<(), cellgate::ConfigError>(())
    /// ```
    #[must_use]
    pub const fn quota(&self) -> Quota {
        let d = self.delay_limit();
        // d <= burst <= MAX_BURST, so neither overflows.
        Quota::new(self.rate, self.period())
            .with_burst(d + 1)
            .with_queue(self.burst - d)
    }

    /// Reads nginx's notation: `rate=Nr/s` or `rate=Nr/m` (the `rate=` may be left out),
    /// optionally `burst=N` and one of `delay=N` or `nodelay`, separated by whitespace, with an
    /// optional trailing `;`.
    ///
    /// # Errors
    ///
    /// [`ConfigError::Parse`], with the whole input and a reason naming the offending
    /// parameter, when the text is empty, has a parameter it does not know or one given twice,
    /// has no rate, a rate unit other than `r/s` or `r/m`, a number that is not plain decimal
    /// digits or does not fit, a zero rate, burst or delay, `delay` together with `nodelay`,
    /// or a `delay` above the `burst`. See the [module docs](self#the-notation).
    ///
    /// # Examples
    ///
    /// ```
    /// use cellgate::nginx::LimitReq;
    /// use cellgate::ConfigError;
    ///
    /// let limit = LimitReq::parse("rate=10r/s burst=20 delay=8;")?;
    /// assert_eq!(limit, LimitReq::per_second(10).burst(20).delay(8));
    ///
    /// let err = LimitReq::parse("rate=10r/h").unwrap_err();
    /// assert!(matches!(err, ConfigError::Parse { .. }));
    /// assert!(err.to_string().contains("r/h"));
    /// # Ok::<(), cellgate::ConfigError>(())
    /// ```
    pub fn parse(s: &str) -> Result<LimitReq, ConfigError> {
        parse(s).map_err(|reason| ConfigError::Parse {
            input: s.to_owned(),
            reason,
        })
    }

    /// Equal values are those that decide alike and are written alike.
    fn canonical(&self) -> (u32, Unit, u32, u32, bool) {
        (
            self.rate,
            self.unit,
            self.burst,
            self.delay_limit(),
            self.is_nodelay(),
        )
    }
}

impl PartialEq for LimitReq {
    fn eq(&self, other: &Self) -> bool {
        self.canonical() == other.canonical()
    }
}

impl Eq for LimitReq {}

impl Hash for LimitReq {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.canonical().hash(state);
    }
}

impl FromStr for LimitReq {
    type Err = ConfigError;

    /// Same as [`LimitReq::parse`].
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        LimitReq::parse(s)
    }
}

impl fmt::Display for LimitReq {
    /// nginx's notation, which [`LimitReq::parse`] reads back: `rate=…`, then `burst=N` unless
    /// it is 0, then `nodelay`, or `delay=N` unless it is 0.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "rate={}{}", self.rate, self.unit.notation())?;
        if self.burst > 0 {
            write!(f, " burst={}", self.burst)?;
        }
        match self.delay {
            Delay::Never => f.write_str(" nodelay"),
            Delay::After(_) => match self.delay_limit() {
                0 => Ok(()),
                d => write!(f, " delay={d}"),
            },
        }
    }
}

/// The parser proper; the error is the reason.
fn parse(s: &str) -> Result<LimitReq, String> {
    let mut text = s.trim();
    if let Some(rest) = text.strip_suffix(';') {
        text = rest.trim_end();
    }
    if text.is_empty() {
        return Err(
            "no parameters: expected at least a rate, such as \"rate=10r/s burst=20 nodelay\""
                .to_owned(),
        );
    }
    if text.contains(';') {
        return Err("';' may only end the parameters".to_owned());
    }
    let mut rate: Option<(u32, Unit)> = None;
    let mut burst: Option<u32> = None;
    let mut delay: Option<u32> = None;
    let mut nodelay = false;
    for token in text.split_whitespace() {
        if let Some(value) = token.strip_prefix("rate=") {
            once(&rate, "rate", token)?;
            rate = Some(parse_rate(value, token, true)?);
        } else if token.starts_with(|c: char| c.is_ascii_digit()) {
            once(&rate, "rate", token)?;
            rate = Some(parse_rate(token, token, false)?);
        } else if let Some(value) = token.strip_prefix("burst=") {
            once(&burst, "burst", token)?;
            let b = parse_count(value, "burst", token)?;
            if b > MAX_BURST {
                return Err(format!("\"{token}\": burst is at most {MAX_BURST}"));
            }
            burst = Some(b);
        } else if let Some(value) = token.strip_prefix("delay=") {
            once(&delay, "delay", token)?;
            delay = Some(parse_count(value, "delay", token)?);
        } else if token == "nodelay" {
            if nodelay {
                return Err("\"nodelay\" is given twice".to_owned());
            }
            nodelay = true;
        } else if token.starts_with("zone=") {
            return Err(format!(
                "\"{token}\": cellgate has no shared zones; give the zone's rate= here instead"
            ));
        } else {
            return Err(format!(
                "unknown parameter \"{token}\": expected rate=, burst=, delay= or nodelay"
            ));
        }
    }
    let Some((n, unit)) = rate else {
        return Err("no rate: expected rate=Nr/s or rate=Nr/m, such as rate=10r/s".to_owned());
    };
    let burst = burst.unwrap_or(0);
    let delay = match (delay, nodelay) {
        (Some(_), true) => {
            return Err(
                "delay= and nodelay are both given: give one (nginx would keep \
                        whichever comes last)"
                    .to_owned(),
            )
        }
        (Some(d), false) if d > burst => {
            return Err(format!(
                "delay={d} is above burst={burst}: the delay counts requests within the burst \
                 (nginx would treat it as nodelay)"
            ))
        }
        (Some(d), false) => Delay::After(d),
        (None, true) => Delay::Never,
        (None, false) => Delay::After(0),
    };
    Ok(LimitReq {
        rate: n,
        unit,
        burst,
        delay,
    })
}

/// An error if `slot` is already filled.
fn once<T>(slot: &Option<T>, name: &str, token: &str) -> Result<(), String> {
    match slot {
        Some(_) => Err(format!("\"{token}\": {name} is given twice")),
        None => Ok(()),
    }
}

/// `Nr/s`, `Nr/m`, or (after `rate=`, as nginx reads it) a bare `N` meaning `Nr/s`.
fn parse_rate(value: &str, token: &str, unit_optional: bool) -> Result<(u32, Unit), String> {
    // `find` returns the start of a char, so the split is on a char boundary.
    let digits_end = value
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(value.len());
    let (digits, unit) = value.split_at(digits_end);
    if digits.is_empty() {
        return Err(format!(
            "\"{token}\": a rate is a decimal number of requests (digits only, no sign) and \
             r/s or r/m, such as rate=10r/s"
        ));
    }
    let unit = match unit {
        "r/s" => Unit::Second,
        "r/m" => Unit::Minute,
        "" if unit_optional => Unit::Second,
        "" => {
            return Err(format!(
                "\"{token}\": a rate needs its unit, r/s or r/m (\"{digits}r/s\")"
            ))
        }
        other => {
            return Err(format!(
                "\"{token}\": unknown rate unit \"{other}\": nginx rates are r/s or r/m"
            ))
        }
    };
    let n = digits
        .parse::<u32>()
        .map_err(|_| format!("\"{token}\": the rate is at most {}", u32::MAX))?;
    if n == 0 {
        return Err(format!(
            "\"{token}\": the rate must be at least 1 (nginx rejects a zero rate)"
        ));
    }
    Ok((n, unit))
}

/// The `N` of `burst=N` or `delay=N`: decimal digits, at least 1.
fn parse_count(value: &str, name: &str, token: &str) -> Result<u32, String> {
    if value.is_empty() || !value.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!(
            "\"{token}\": {name} is a decimal number (digits only, no sign)"
        ));
    }
    let n = value
        .parse::<u32>()
        .map_err(|_| format!("\"{token}\": {name} is at most {}", u32::MAX))?;
    if n == 0 {
        return Err(format!(
            "\"{token}\": {name} must be at least 1 (nginx rejects {name}=0); leave it out \
             for none"
        ));
    }
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quota_follows_the_mapping() {
        let q = LimitReq::per_second(5).burst(12).delay(8).quota();
        assert_eq!(q, Quota::per_second(5).with_burst(9).with_queue(4));
        let q = LimitReq::per_minute(6).burst(2).quota();
        assert_eq!(q, Quota::per_minute(6).with_burst(1).with_queue(2));
        let q = LimitReq::per_minute(6).burst(2).nodelay().quota();
        assert_eq!(q, Quota::per_minute(6).with_burst(3).with_queue(0));
        // The largest burst still maps without overflow.
        let q = LimitReq::per_second(1).burst(u32::MAX).nodelay().quota();
        assert_eq!(q.burst(), u32::MAX);
        assert_eq!(q.queue(), 0);
    }

    #[test]
    fn a_delay_above_the_burst_is_nodelay_in_effect() {
        let a = LimitReq::per_second(1).burst(2).delay(5);
        let b = LimitReq::per_second(1).burst(2).delay(2);
        assert_eq!(a, b);
        assert_eq!(a.quota(), b.quota());
        assert_eq!(
            a.quota(),
            LimitReq::per_second(1).burst(2).nodelay().quota()
        );
        assert_eq!(a.to_string(), "rate=1r/s burst=2 delay=2");
        // Order of builder calls does not matter for delay and burst.
        assert_eq!(
            LimitReq::per_second(1).delay(1).burst(3),
            LimitReq::per_second(1).burst(3).delay(1)
        );
        // The last of delay / nodelay wins.
        assert!(LimitReq::per_second(1).delay(1).nodelay().is_nodelay());
        assert!(!LimitReq::per_second(1).nodelay().delay(1).is_nodelay());
        // nodelay and delay=burst decide alike but are written differently: not equal.
        assert_ne!(
            LimitReq::per_second(1).burst(2).nodelay(),
            LimitReq::per_second(1).burst(2).delay(2)
        );
    }

    #[test]
    fn rate_milli_rounds_down() {
        assert_eq!(LimitReq::per_minute(1).rate_milli(), 16);
        assert_eq!(LimitReq::per_minute(60).rate_milli(), 1000);
        assert_eq!(
            LimitReq::per_second(u32::MAX).rate_milli(),
            u64::from(u32::MAX) * 1000
        );
    }
}
