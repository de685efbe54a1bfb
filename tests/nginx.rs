//! `cellgate::nginx` against a reference model of nginx's `limit_req` arithmetic.
//!
//! The model ([`Nginx`]) is written from nginx's description of `limit_req`: per key an
//! excess in thousandths of a request and the millisecond it was stored, integer arithmetic
//! throughout. For a clock that goes backwards it follows nginx's source (a step back of up
//! to 60 s counts as no time, a larger one as 1 ms, and `last` only moves when time passed).
//! It leaves out what depends on other keys (the zone dropping idle nodes).
//!
//! The tables give, for each request of a timeline, nginx's decision and delay in ms and
//! cellgate's decision and exact delay in ns, side by side; every row is checked against both
//! the model and a real limiter on a `ManualClock`. Where the arithmetic is exact the two must
//! agree row by row; where it is not, dedicated tests pin the difference the module docs
//! describe (which side is stricter, and by how much). Property tests then check the same
//! claims on random configurations and timelines.

use std::time::Duration;

use cellgate::clock::ManualClock;
use cellgate::nginx::LimitReq;
use cellgate::{ConfigError, KeyedLimiter, Limiter, Quota};
use proptest::prelude::*;

const MS: u64 = 1_000_000;

// ---------------------------------------------------------------------------------------------
// The reference model
// ---------------------------------------------------------------------------------------------

/// nginx's state for one key, and its parameters, in nginx's own units.
#[derive(Debug, Clone)]
struct Nginx {
    /// Thousandths of a request per second: `1000 N` for `Nr/s`, `1000 N / 60` for `Nr/m`.
    rate: i64,
    /// `burst * 1000`.
    burst: i64,
    /// `delay * 1000`; `nodelay` is a delay no excess reaches.
    delay: i64,
    /// `(excess, last)`: thousandths of a request, and the millisecond they were stored.
    node: Option<(i64, i64)>,
}

impl Nginx {
    /// The model for `limit`, with the numbers worked out here rather than taken from
    /// `rate_milli()`.
    fn new(limit: &LimitReq) -> Self {
        let per_second = match limit.period().as_secs() {
            1 => 1,
            60 => 60,
            other => panic!("nginx has no {other} s period"),
        };
        Nginx {
            rate: i64::from(limit.rate()) * 1000 / per_second,
            burst: i64::from(limit.max_burst()) * 1000,
            delay: if limit.is_nodelay() {
                i64::MAX
            } else {
                i64::from(limit.delay_limit()) * 1000
            },
            node: None,
        }
    }

    /// One request at `now` ms: `Some(delay in ms)` when passed, `None` when rejected.
    fn request(&mut self, now: i64) -> Option<u64> {
        let Some((stored, last)) = self.node else {
            // A new node: excess 0, passed at once.
            self.node = Some((0, now));
            return Some(0);
        };
        let elapsed = match now - last {
            ms if ms < -60_000 => 1,
            ms if ms < 0 => 0,
            ms => ms,
        };
        let excess = (stored - self.rate * elapsed / 1000 + 1000).max(0);
        if excess > self.burst {
            return None;
        }
        self.node = Some((excess, if elapsed != 0 { now } else { last }));
        if excess > self.delay {
            Some(u64::try_from((excess - self.delay) * 1000 / self.rate).unwrap())
        } else {
            Some(0)
        }
    }
}

/// A cellgate limiter built from the notation, on its own manual clock.
struct Cellgate {
    clock: ManualClock,
    limiter: Limiter<ManualClock>,
}

impl Cellgate {
    fn new(limit: &LimitReq) -> Self {
        let clock = ManualClock::new();
        let limiter = Limiter::gcra(limit.quota())
            .clock(clock.clone())
            .build()
            .unwrap();
        Cellgate { clock, limiter }
    }

    /// One request at `now_ns`: `Some(delay in ns)` when allowed, `None` when denied.
    fn request(&self, now_ns: u64) -> Option<u64> {
        self.clock.set_ns(now_ns);
        let d = self.limiter.check();
        d.is_allowed().then(|| d.delay_ns())
    }
}

#[test]
fn the_model_follows_the_documented_examples() {
    // rate=1r/s burst=5: six requests at once pass (one at once, five delayed 1..5 s), the
    // seventh is rejected.
    let mut m = Nginx::new(&LimitReq::per_second(1).burst(5));
    let got: Vec<_> = (0..7).map(|_| m.request(0)).collect();
    let want = [0, 1000, 2000, 3000, 4000, 5000].map(Some);
    assert_eq!(got[..6], want);
    assert_eq!(got[6], None);
    // rate=10r/s, no burst: one request per 100 ms.
    let mut m = Nginx::new(&LimitReq::per_second(10));
    assert_eq!(m.request(0), Some(0));
    assert_eq!(m.request(99), None);
    assert_eq!(m.request(100), Some(0));
    // A rejection stores nothing.
    let mut m = Nginx::new(&LimitReq::per_second(10));
    m.request(0);
    let before = m.node;
    assert_eq!(m.request(10), None);
    assert_eq!(m.node, before);
}

// ---------------------------------------------------------------------------------------------
// The tables
// ---------------------------------------------------------------------------------------------

/// One request: its time, nginx's answer (delay in ms) and cellgate's (delay in ns).
/// `None` is a rejection.
type Row = (u64, Option<u64>, Option<u64>);

struct Case {
    conf: &'static str,
    /// Nanoseconds per unit of the rows' times.
    unit: u64,
    /// Whether nginx and cellgate must agree on every row.
    agree: bool,
    rows: &'static [Row],
}

/// Times in milliseconds.
const fn ms(conf: &'static str, agree: bool, rows: &'static [Row]) -> Case {
    Case {
        conf,
        unit: MS,
        agree,
        rows,
    }
}

const N: Option<u64> = None;

/// A row on which nginx and cellgate agree: at `t`, both admit after `delay_ms`.
const fn a(t: u64, delay_ms: u64) -> Row {
    (t, Some(delay_ms), Some(delay_ms * MS))
}

/// A row on which both reject the request at `t`.
const fn no(t: u64) -> Row {
    (t, N, N)
}

/// Timelines on whole milliseconds.
#[rustfmt::skip]
const CASES: &[Case] = &[
    // No burst: one request every T = 100 ms, the rest rejected.
    ms(
        "rate=10r/s",
        true,
        &[
            a(0, 0), no(0), no(50), a(100, 0), no(150), no(199), a(200, 0), a(1000, 0),
            no(1000),
        ],
    ),
    // burst=5: five delayed behind the first, by 100 ms each, the seventh rejected.
    ms(
        "rate=10r/s burst=5",
        true,
        &[
            a(0, 0), a(0, 100), a(0, 200), a(0, 300), a(0, 400), a(0, 500), no(0), a(250, 350),
            a(1000, 0),
        ],
    ),
    // nodelay: the same six pass at once.
    ms(
        "rate=10r/s burst=5 nodelay",
        true,
        &[
            a(0, 0), a(0, 0), a(0, 0), a(0, 0), a(0, 0), a(0, 0), no(0), a(100, 0), no(150),
            a(300, 0),
        ],
    ),
    // nginx's two-stage example: 9 at once, 4 delayed, then rejected.
    ms(
        "rate=5r/s burst=12 delay=8",
        true,
        &[
            a(0, 0), a(0, 0), a(0, 0), a(0, 0), a(0, 0), a(0, 0), a(0, 0), a(0, 0), a(0, 0),
            a(0, 200), a(0, 400), a(0, 600), a(0, 800), no(0), a(1000, 0), a(1000, 200),
            a(1100, 300),
        ],
    ),
    // A per-minute rate that nginx holds exactly (100 thousandths a second), on times that
    // are multiples of 10 ms: T = 10 s.
    ms(
        "rate=6r/m burst=2",
        true,
        &[
            a(0, 0), a(0, 10_000), a(0, 20_000), no(0), no(5_000), a(10_000, 20_000),
            a(40_000, 0),
        ],
    ),
    // Idle gaps: after 10 s the key is fresh again; partial refills in between.
    ms(
        "rate=2r/s burst=3 delay=1",
        true,
        &[
            a(0, 0), a(0, 0), a(0, 500), a(0, 1000), no(0), a(10_000, 0), a(10_000, 0),
            a(10_000, 500), a(10_250, 750), a(10_999, 501), a(12_345, 0), a(60_000, 0),
        ],
    ),
    // T = 62.5 ms: nginx's delay is cellgate's rounded down to the millisecond.
    ms(
        "rate=16r/s burst=1",
        true,
        &[
            a(0, 0), (0, Some(62), Some(62_500_000)), no(0), a(125, 0),
        ],
    ),
    // 7r/m: nginx keeps 116 thousandths a second (T = 8620.7 ms); cellgate T = 8571.43 ms.
    // nginx is the stricter: it rejects at 8600 ms what cellgate allows. From there their
    // states differ (cellgate spent a request that nginx did not).
    ms(
        "rate=7r/m",
        false,
        &[
            a(0, 0), (8_600, N, Some(0)), (8_621, Some(0), N), no(8_622),
        ],
    ),
    // ...and its delays are longer, by 48.6, 98.1 and 147.7 ms.
    ms(
        "rate=7r/m burst=3",
        false,
        &[
            a(0, 0), (0, Some(8_620), Some(8_571_428_571)),
            (0, Some(17_241), Some(17_142_857_142)), (0, Some(25_862), Some(25_714_285_713)),
            no(0),
        ],
    ),
    // 6r/m decays 100 thousandths a second: nginx credits 5 ms as 0 thousandths (rounded
    // down from 0.5) and forgets the rest when it stores the key, so at 10 004 ms its excess
    // is 1001 > 1000; cellgate's exact schedule is 19.996 s ahead, within its 20 s ceiling.
    ms(
        "rate=6r/m burst=1 nodelay",
        false,
        &[
            a(0, 0), a(5, 0), (10_004, N, Some(0)), (10_005, Some(0), N),
        ],
    ),
    // The clock steps back 100 ms: nginx counts no time and keeps measuring from 1000 ms;
    // cellgate measures from 900 ms, so its delay is 100 ms longer. Both add the request to
    // the same schedule, and once the clock is back they agree again.
    ms(
        "rate=10r/s burst=5",
        false,
        &[
            a(1000, 0), a(1000, 100), a(1000, 200), (900, Some(300), Some(400 * MS)),
            a(1000, 400), a(1100, 400),
        ],
    ),
    // The clock steps back 61 s: nginx counts 1 ms and measures from the new time from then
    // on; cellgate keeps the key's schedule (200 ms after 100 s) and denies until then.
    ms(
        "rate=10r/s burst=5",
        false,
        &[
            a(100_000, 0), a(100_000, 100), (39_000, Some(199), N), (39_000, Some(299), N),
            (100_000, Some(0), Some(200 * MS)),
        ],
    ),
];

/// Timelines in microseconds: nginx sees them rounded down to the millisecond.
const SUB_MS_CASES: &[Case] = &[
    // nginx sees 100 ms elapsed and passes; cellgate sees 99.2 ms and denies.
    Case {
        conf: "rate=10r/s",
        unit: 1_000,
        agree: false,
        rows: &[(900, Some(0), Some(0)), (100_100, Some(0), N)],
    },
    // nginx sees 62 ms elapsed and rejects; cellgate sees 62.7 >= 62.5 ms and allows.
    Case {
        conf: "rate=16r/s",
        unit: 1_000,
        agree: false,
        rows: &[(0, Some(0), Some(0)), (62_700, N, Some(0))],
    },
    // Sub-millisecond times that do not cross a boundary decide alike.
    Case {
        conf: "rate=10r/s burst=2",
        unit: 1_000,
        agree: true,
        rows: &[
            (300, Some(0), Some(0)),
            (300, Some(100), Some(100 * MS)),
            (300, Some(200), Some(200 * MS)),
            (300, N, N),
            (400_300, Some(0), Some(0)),
        ],
    },
];

/// Runs one case through the model and a limiter: both columns must be exactly as written,
/// and in an `agree` case nginx's must be cellgate's with delays rounded down to the ms.
fn check_case(case: &Case) {
    let limit = LimitReq::parse(case.conf).unwrap();
    let mut nginx = Nginx::new(&limit);
    let cellgate = Cellgate::new(&limit);
    for (i, &(t, want_nginx, want_cellgate)) in case.rows.iter().enumerate() {
        let now_ns = t * case.unit;
        let got_nginx = nginx.request(i64::try_from(now_ns / MS).unwrap());
        let got_cellgate = cellgate.request(now_ns);
        let at = format!("{:?}, row {i} (t = {t})", case.conf);
        assert_eq!(got_nginx, want_nginx, "nginx column, {at}");
        assert_eq!(got_cellgate, want_cellgate, "cellgate column, {at}");
        if case.agree {
            assert_eq!(
                want_nginx,
                want_cellgate.map(|ns| ns / MS),
                "nginx and cellgate disagree, {at}"
            );
        }
    }
}

#[test]
fn table_of_whole_millisecond_timelines() {
    for case in CASES {
        check_case(case);
    }
}

#[test]
fn table_of_sub_millisecond_timelines() {
    for case in SUB_MS_CASES {
        check_case(case);
    }
    // The denial in the first case: retry after the 0.8 ms cellgate's clock has not reached.
    let c = Cellgate::new(&LimitReq::per_second(10));
    c.request(900_000);
    c.clock.set_ns(100_100_000);
    assert_eq!(c.limiter.check().retry_after_ns(), Some(800_000));
}

/// A case not marked `agree` must differ somewhere (in a decision, or in a delay beyond
/// nginx's rounding), or it documents nothing. (`check_case` checks the `agree` ones.)
#[test]
fn differing_cases_differ() {
    for case in CASES.iter().chain(SUB_MS_CASES).filter(|c| !c.agree) {
        assert!(
            case.rows.iter().any(|&(_, n, c)| n != c.map(|ns| ns / MS)),
            "{:?} is marked as differing but agrees",
            case.conf
        );
    }
}

// ---------------------------------------------------------------------------------------------
// The documented differences, measured
// ---------------------------------------------------------------------------------------------

/// The first whole millisecond `g` at which a request after a fresh one at 0 is admitted.
fn first_admitting_gap(conf: &str, range: std::ops::Range<u64>) -> (u64, u64) {
    let limit = LimitReq::parse(conf).unwrap();
    let mut nginx_first = None;
    let mut cellgate_first = None;
    for g in range {
        let mut nginx = Nginx::new(&limit);
        let cellgate = Cellgate::new(&limit);
        assert_eq!(nginx.request(0), Some(0));
        assert_eq!(cellgate.request(0), Some(0));
        let n = nginx.request(i64::try_from(g).unwrap()).is_some();
        let c = cellgate.request(g * MS).is_some();
        // Once admitted, admitted for every longer gap.
        assert!(n || nginx_first.is_none(), "nginx, gap {g}");
        assert!(c || cellgate_first.is_none(), "cellgate, gap {g}");
        if n && nginx_first.is_none() {
            nginx_first = Some(g);
        }
        if c && cellgate_first.is_none() {
            cellgate_first = Some(g);
        }
    }
    (nginx_first.unwrap(), cellgate_first.unwrap())
}

#[test]
fn per_minute_rates_that_do_not_divide_are_stricter_in_nginx() {
    // 7r/m: nginx's 116 thousandths a second need 1_000_000 / 116 = 8620.69 ms for a request:
    // the first whole ms is 8621. cellgate's T = 60 s / 7 = 8_571_428_571 ns: 8572 ms.
    assert_eq!(LimitReq::per_minute(7).rate_milli(), 116);
    assert_eq!(
        first_admitting_gap("rate=7r/m", 8_000..9_000),
        (8_621, 8_572)
    );
    // 1r/m: 16 thousandths a second, so 62.5 s against 60 s.
    assert_eq!(
        first_admitting_gap("rate=1r/m", 59_000..63_000),
        (62_500, 60_000)
    );
    // 6r/m divides (100 thousandths a second) and 10r/s is exact: no difference.
    assert_eq!(
        first_admitting_gap("rate=6r/m", 9_000..11_000),
        (10_000, 10_000)
    );
    assert_eq!(first_admitting_gap("rate=10r/s", 0..200), (100, 100));

    // The delays of rate=7r/m burst=3 (the table) are longer in nginx, by the ratio of the
    // intervals: k * 1_000_000 / 116 ms against k * 8_571_428_571 ns.
    let case = CASES
        .iter()
        .find(|c| c.conf == "rate=7r/m burst=3")
        .unwrap();
    for (k, &(_, n, c)) in case.rows[..4].iter().enumerate() {
        let k = k as u64;
        assert_eq!(n, Some(k * 1_000_000 / 116));
        assert_eq!(c, Some(k * 8_571_428_571));
    }
    // nginx's delay, although rounded down, is longer: by 48.6, 98.1 and 147.7 ms.
    let longer: Vec<u64> = case.rows[1..4]
        .iter()
        .map(|&(_, n, c)| n.unwrap() * MS - c.unwrap())
        .collect();
    assert_eq!(longer, [48_571_429, 98_142_858, 147_714_287]);
}

#[test]
fn nginx_delays_are_cellgate_delays_rounded_down() {
    // T = 62.5 ms: each delay in the queue is k * 62.5 ms; nginx's is k * 62 or so.
    let limit = LimitReq::parse("rate=16r/s burst=4").unwrap();
    let mut nginx = Nginx::new(&limit);
    let cellgate = Cellgate::new(&limit);
    for k in 0..5u64 {
        let c = cellgate.request(0).unwrap();
        let n = nginx.request(0).unwrap();
        assert_eq!(c, k * 62_500_000);
        assert_eq!(n, c / MS);
        assert!(c - n * MS < MS);
    }
}

#[test]
fn the_first_request_on_a_new_node_is_a_fresh_key() {
    // nginx passes a new node's first request with excess 0; cellgate's fresh key has the
    // same schedule: with burst B and delay D, D + 1 pass at once and B + 1 in all.
    for (conf, at_once, in_all) in [
        ("rate=10r/s", 1, 1),
        ("rate=10r/s burst=5", 1, 6),
        ("rate=10r/s burst=5 nodelay", 6, 6),
        ("rate=5r/s burst=12 delay=8", 9, 13),
    ] {
        let limit = LimitReq::parse(conf).unwrap();
        let mut nginx = Nginx::new(&limit);
        let cellgate = Cellgate::new(&limit);
        let n: Vec<_> = (0..20).map(|_| nginx.request(7)).collect();
        let c: Vec<_> = (0..20).map(|_| cellgate.request(7 * MS)).collect();
        for got in [&n, &c] {
            assert_eq!(
                got.iter().filter(|d| **d == Some(0)).count(),
                at_once,
                "{conf}"
            );
            assert_eq!(got.iter().filter(|d| d.is_some()).count(), in_all, "{conf}");
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Properties
// ---------------------------------------------------------------------------------------------

/// `Nr/s` rates whose interval is a whole number of ns: N = 2^a 5^b, up to 100 000.
fn exact_rates() -> impl Strategy<Value = u32> {
    (0u32..=9, 0u32..=9)
        .prop_map(|(a, b)| 2u32.pow(a) * 5u32.pow(b))
        .prop_filter("at most 100 000 r/s", |n| *n <= 100_000)
}

/// Burst, then the delay: none, `delay=D` (1..=burst) or `nodelay`. Small bursts are common,
/// so that timelines reach the rejections.
fn burst_and_delay(base: LimitReq) -> impl Strategy<Value = LimitReq> {
    (
        prop_oneof![0u32..=3, 0u32..=30],
        0u32..=2,
        any::<prop::sample::Index>(),
    )
        .prop_map(move |(b, mode, d)| {
            let l = base.burst(b);
            match mode {
                1 if b > 0 => l.delay(1 + d.index(b as usize) as u32),
                2 => l.nodelay(),
                _ => l,
            }
        })
}

fn exact_limits() -> impl Strategy<Value = LimitReq> {
    exact_rates().prop_flat_map(|n| burst_and_delay(LimitReq::per_second(n)))
}

/// Any rate: `r/s` up to 2000 (most not dividing 10^9) or `r/m` up to 600.
fn any_limits() -> impl Strategy<Value = LimitReq> {
    prop_oneof![
        (1u32..=2000).prop_map(LimitReq::per_second),
        (1u32..=600).prop_map(LimitReq::per_minute),
    ]
    .prop_flat_map(burst_and_delay)
}

/// How the clock moves before a request.
#[derive(Debug, Clone, Copy)]
enum Step {
    /// Forward by this many ns.
    Wait(u64),
    /// Forward to the first instant (a whole ms on whole-ms timelines) at which cellgate
    /// would admit the key's next request: where the two are most likely to part.
    ToBoundary,
}

/// Clock steps scaled to the limit's interval `T` (at least 1 ms) so that timelines keep
/// meeting its boundaries: often none, mostly up to `2T` (in thousandths of `T`), sometimes
/// an idle stretch of up to `40T`, often straight to cellgate's next boundary.
fn steps(limit: LimitReq) -> impl Strategy<Value = Vec<Step>> {
    let t = (limit.period().as_nanos() as u64 / u64::from(limit.rate())).max(MS);
    prop::collection::vec(
        prop_oneof![
            3 => Just(Step::Wait(0)),
            5 => (0u64..=2000).prop_map(move |k| Step::Wait(t / 1000 * k)),
            1 => (0u64..=40_000).prop_map(move |k| Step::Wait(t / 1000 * k)),
            3 => Just(Step::ToBoundary),
        ],
        1..80,
    )
}

/// A limit with a timeline for it.
fn scenario(
    limits: impl Strategy<Value = LimitReq>,
) -> impl Strategy<Value = (LimitReq, Vec<Step>)> {
    limits.prop_flat_map(|l| (Just(l), steps(l)))
}

/// The time after `now` at which cellgate admits the next request, from a `peek`: the
/// backlog `reset_after` must have shrunk to `burst * T` (nginx's `burst`, cellgate's
/// `ceiling - T`). Rounded up to a whole ms when `whole_ms`.
fn boundary(limit: &LimitReq, now: u64, reset_after_ns: u64, whole_ms: bool) -> u64 {
    let t = limit.period().as_nanos() as u64 / u64::from(limit.rate());
    let at = now + reset_after_ns.saturating_sub(u64::from(limit.max_burst()) * t);
    if whole_ms {
        at.div_ceil(MS) * MS
    } else {
        at
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    /// Exact configurations on whole-ms timelines, two keys interleaved on a keyed limiter:
    /// the same decisions, and nginx's delay is cellgate's rounded down to the ms.
    #[test]
    fn exact_configurations_agree(
        (limit, steps) in scenario(exact_limits()),
        keys in prop::collection::vec(0u8..2, 80),
    ) {
        let clock = ManualClock::new();
        let limiter = KeyedLimiter::<u8>::gcra(limit.quota())
            .clock(clock.clone())
            .build()
            .unwrap();
        let mut models = [Nginx::new(&limit), Nginx::new(&limit)];
        let mut now = 0u64;
        for (i, (&step, &key)) in steps.iter().zip(&keys).enumerate() {
            now = match step {
                Step::Wait(ns) => (now + ns) / MS * MS,
                Step::ToBoundary => boundary(&limit, now, limiter.peek(&key).reset_after_ns(), true),
            };
            clock.set_ns(now);
            let d = limiter.check(&key);
            let cellgate = d.is_allowed().then(|| d.delay_ns() / MS);
            let nginx = models[usize::from(key)].request(i64::try_from(now / MS).unwrap());
            prop_assert_eq!(nginx, cellgate, "{} request {} key {} at {} ns", limit, i, key, now);
        }
    }

    /// Exact configurations on timelines with sub-ms times: nginx decides exactly as cellgate
    /// does on the same clock rounded down to the millisecond.
    #[test]
    fn nginx_is_cellgate_on_a_millisecond_clock((limit, steps) in scenario(exact_limits())) {
        let mut nginx = Nginx::new(&limit);
        let floored = Cellgate::new(&limit);
        let exact = Cellgate::new(&limit);
        let mut now = 0u64;
        for (i, &step) in steps.iter().enumerate() {
            now = match step {
                Step::Wait(ns) => now + ns,
                Step::ToBoundary => {
                    exact.clock.set_ns(now);
                    boundary(&limit, now, exact.limiter.peek().reset_after_ns(), false)
                }
            };
            let want = nginx.request(i64::try_from(now / MS).unwrap());
            let got = floored.request(now / MS * MS).map(|ns| ns / MS);
            prop_assert_eq!(want, got, "{} request {} at {} ns", limit, i, now);
            // The unrounded clock may decide either way; it must only decide.
            let _ = exact.request(now);
        }
    }

    /// Any configuration on whole-ms timelines: nginx is never the more permissive. Until the
    /// first decision where they differ, nginx's delay is at least cellgate's rounded down,
    /// and that first difference is a request nginx rejects and cellgate allows.
    #[test]
    fn nginx_is_the_stricter_until_they_part((limit, steps) in scenario(any_limits())) {
        let mut nginx = Nginx::new(&limit);
        let cellgate = Cellgate::new(&limit);
        let mut now = 0u64;
        for (i, &step) in steps.iter().enumerate() {
            now = match step {
                Step::Wait(ns) => (now + ns) / MS * MS,
                Step::ToBoundary => {
                    cellgate.clock.set_ns(now);
                    boundary(&limit, now, cellgate.limiter.peek().reset_after_ns(), true)
                }
            };
            let n = nginx.request(i64::try_from(now / MS).unwrap());
            let c = cellgate.request(now);
            match (n, c) {
                (Some(n), Some(c)) => prop_assert!(
                    n >= c / MS,
                    "{} request {} at {} ns: nginx delay {} ms < cellgate {} ns", limit, i, now, n, c
                ),
                (None, None) => {}
                (None, Some(_)) => break,
                (Some(_), None) => prop_assert!(
                    false,
                    "{} request {} at {} ns: nginx passed what cellgate denied", limit, i, now
                ),
            }
        }
    }

    /// Whatever the builder calls, the notation reads back as the same value and quota.
    #[test]
    fn display_round_trips(
        limit in any_limits(),
        extra in prop_oneof![Just(None), (0u32..=40).prop_map(Some)],
    ) {
        // `extra`: a delay set regardless of the burst (above it acts as nodelay).
        let limit = match extra { Some(d) => limit.delay(d), None => limit };
        let text = limit.to_string();
        let back = LimitReq::parse(&text);
        prop_assert_eq!(back.as_ref(), Ok(&limit), "{}", text);
        prop_assert_eq!(back.unwrap().quota(), limit.quota());
    }

    /// Arbitrary text never panics, and whatever parses writes itself back.
    #[test]
    fn parse_never_panics(text in prop_oneof![
        any::<String>(),
        prop::collection::vec(
            prop_oneof![
                Just("rate="), Just("burst="), Just("delay="), Just("nodelay"), Just(";"),
                Just(" "), Just("\t"), Just("r/s"), Just("r/m"), Just("r/"), Just("0"),
                Just("7"), Just("42"), Just("4294967295"), Just("-"), Just("+"), Just("é"),
            ],
            0..12,
        ).prop_map(|parts| parts.concat()),
    ]) {
        if let Ok(limit) = LimitReq::parse(&text) {
            prop_assert_eq!(LimitReq::parse(&limit.to_string()), Ok(limit));
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The notation
// ---------------------------------------------------------------------------------------------

#[test]
fn parse_reads_nginx_notation() {
    let cases = [
        ("rate=10r/s", LimitReq::per_second(10)),
        ("10r/s", LimitReq::per_second(10)),
        ("rate=10", LimitReq::per_second(10)),
        (
            "rate=6r/m burst=5 nodelay",
            LimitReq::per_minute(6).burst(5).nodelay(),
        ),
        (
            "rate=10r/s burst=20 delay=8",
            LimitReq::per_second(10).burst(20).delay(8),
        ),
        (
            "delay=8 burst=20 rate=10r/s",
            LimitReq::per_second(10).burst(20).delay(8),
        ),
        ("  rate=1r/m\tburst=3\n ;", LimitReq::per_minute(1).burst(3)),
        ("rate=1r/s nodelay;", LimitReq::per_second(1).nodelay()),
        ("rate=007r/s burst=01", LimitReq::per_second(7).burst(1)),
        ("rate=4294967295r/s", LimitReq::per_second(u32::MAX)),
        (
            "rate=1r/s burst=4294967294 nodelay",
            LimitReq::per_second(1).burst(u32::MAX - 1).nodelay(),
        ),
        (
            "rate=1r/s burst=5 delay=5",
            LimitReq::per_second(1).burst(5).delay(5),
        ),
    ];
    for (text, want) in cases {
        assert_eq!(LimitReq::parse(text), Ok(want), "{text:?}");
        assert_eq!(text.parse::<LimitReq>(), Ok(want), "{text:?}");
    }
    // Every getter of a parsed configuration.
    let fields = |l: &LimitReq| {
        let (rate, period, burst) = (l.rate(), l.period(), l.max_burst());
        (rate, period, burst, l.delay_limit(), l.is_nodelay())
    };
    let l = LimitReq::parse("rate=10r/s burst=20 delay=8").unwrap();
    assert_eq!(fields(&l), (10, Duration::from_secs(1), 20, 8, false));
    assert_eq!(l.rate_milli(), 10_000);
    assert_eq!(
        l.quota(),
        Quota::new(10, Duration::from_secs(1))
            .with_burst(9)
            .with_queue(12)
    );
    let l = LimitReq::parse("rate=6r/m burst=5 nodelay").unwrap();
    assert_eq!(fields(&l), (6, Duration::from_secs(60), 5, 5, true));
    assert_eq!(
        l.quota(),
        Quota::new(6, Duration::from_secs(60))
            .with_burst(6)
            .with_queue(0)
    );
}

#[test]
fn parse_errors_name_the_problem() {
    let cases: &[(&str, &str)] = &[
        ("", "no parameters"),
        ("   ", "no parameters"),
        (";", "no parameters"),
        ("rate=10r/s;;", "';' may only end"),
        ("rate=10r/s; burst=5", "';' may only end"),
        ("burst=5", "no rate"),
        ("burst=5 nodelay", "no rate"),
        ("rate=10r/h", "unknown rate unit \"r/h\""),
        ("rate=10r/sec", "unknown rate unit \"r/sec\""),
        ("10r/h", "unknown rate unit \"r/h\""),
        ("10", "needs its unit"),
        ("rate=r/s", "decimal number of requests"),
        ("rate=", "decimal number of requests"),
        ("rate=-1r/s", "decimal number of requests"),
        ("rate=+1r/s", "decimal number of requests"),
        ("rate=1.5r/s", "unknown rate unit \".5r/s\""),
        ("rate=0r/s", "at least 1"),
        ("rate=0r/m", "at least 1"),
        ("rate=4294967296r/s", "at most 4294967295"),
        ("rate=99999999999999999999r/s", "at most 4294967295"),
        ("rate=1r/s rate=2r/s", "rate is given twice"),
        ("rate=1r/s 2r/s", "rate is given twice"),
        ("rate=1r/s burst=2 burst=3", "burst is given twice"),
        ("rate=1r/s burst=3 delay=1 delay=2", "delay is given twice"),
        (
            "rate=1r/s burst=3 nodelay nodelay",
            "nodelay\" is given twice",
        ),
        ("rate=1r/s burst=", "burst is a decimal number"),
        ("rate=1r/s burst=-1", "burst is a decimal number"),
        ("rate=1r/s burst=+1", "burst is a decimal number"),
        ("rate=1r/s burst=1e3", "burst is a decimal number"),
        ("rate=1r/s burst=0", "burst must be at least 1"),
        ("rate=1r/s burst=4294967295", "burst is at most 4294967294"),
        ("rate=1r/s burst=4294967296", "burst is at most 4294967295"),
        ("rate=1r/s burst=5 delay=x", "delay is a decimal number"),
        ("rate=1r/s burst=5 delay=0", "delay must be at least 1"),
        (
            "rate=1r/s burst=5 delay=99999999999",
            "delay is at most 4294967295",
        ),
        ("rate=1r/s burst=5 delay=6", "delay=6 is above burst=5"),
        ("rate=1r/s delay=1", "delay=1 is above burst=0"),
        ("rate=1r/s burst=5 delay=2 nodelay", "both given"),
        ("rate=1r/s burst=5 nodelay delay=2", "both given"),
        ("rate=1r/s burst=5 NODELAY", "unknown parameter \"NODELAY\""),
        ("Rate=1r/s", "unknown parameter \"Rate=1r/s\""),
        ("rate=1r/s burst = 5", "unknown parameter \"burst\""),
        ("rate=1r/s zone=one", "no shared zones"),
        (
            "limit_req zone=one burst=5",
            "unknown parameter \"limit_req\"",
        ),
        ("rate=1r/s é", "unknown parameter \"é\""),
    ];
    for &(text, reason) in cases {
        match LimitReq::parse(text) {
            Err(ConfigError::Parse { input, reason: got }) => {
                assert_eq!(input, text);
                assert!(
                    got.contains(reason),
                    "{text:?}: reason {got:?} does not contain {reason:?}"
                );
                // The Display text carries both.
                let shown = LimitReq::parse(text).unwrap_err().to_string();
                assert!(shown.contains(&got), "{shown}");
            }
            other => panic!("{text:?}: expected a parse error, got {other:?}"),
        }
    }
}

#[test]
fn display_writes_nginx_notation() {
    for (limit, text) in [
        (LimitReq::per_second(10), "rate=10r/s"),
        (LimitReq::per_minute(6).burst(5), "rate=6r/m burst=5"),
        (
            LimitReq::per_second(5).burst(12).delay(8),
            "rate=5r/s burst=12 delay=8",
        ),
        (
            LimitReq::per_second(1).burst(3).nodelay(),
            "rate=1r/s burst=3 nodelay",
        ),
        (LimitReq::per_second(1).nodelay(), "rate=1r/s nodelay"),
        // A delay above the burst is written as what it does.
        (
            LimitReq::per_second(1).burst(2).delay(9),
            "rate=1r/s burst=2 delay=2",
        ),
        (LimitReq::per_second(1).delay(9), "rate=1r/s"),
    ] {
        assert_eq!(limit.to_string(), text);
        assert_eq!(LimitReq::parse(text), Ok(limit), "{text}");
    }
    // Everything parse accepts in the table above writes itself back in canonical form.
    for text in ["10r/s", "rate=10", "rate=010r/s burst=20 delay=8 ;"] {
        let limit = LimitReq::parse(text).unwrap();
        assert_eq!(LimitReq::parse(&limit.to_string()), Ok(limit));
    }
}

#[test]
fn quotas_too_large_for_nanoseconds_are_reported_by_build() {
    // 1r/m is T = 60 s; a burst of four billion does not fit in u64 ns.
    let limit = LimitReq::parse("rate=1r/m burst=4000000000 nodelay").unwrap();
    assert!(Limiter::gcra(limit.quota()).build().is_err());
    // A zero rate from the builder is reported the same way.
    assert_eq!(
        Limiter::gcra(LimitReq::per_second(0).quota())
            .build()
            .unwrap_err(),
        ConfigError::Zero { field: "count" }
    );
}
