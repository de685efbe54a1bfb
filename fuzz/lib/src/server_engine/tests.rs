//! The model against the engine on generated inputs, one hand-built case per algorithm (each
//! fails if the engine built or charged that algorithm otherwise), and the loader on bytes.

use super::*;
use arbitrary::Unstructured;

/// A small xorshift generator: the test's inputs are built directly (arbitrary's decoding of
/// random bytes yields mostly empty trees and requests).
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u8 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 % n) as u8
    }

    fn limit(&mut self) -> Limit {
        let algorithm = match self.below(4) {
            0 => Algorithm::FixedWindow {
                written: self.below(2) == 0,
            },
            1 => Algorithm::Gcra {
                burst: (self.below(2) == 0).then(|| 1 + self.below(6)),
            },
            2 => Algorithm::SlidingWindow,
            _ => Algorithm::Stock,
        };
        let period = match self.below(4) {
            0 => Period::Second,
            1 => Period::Minute,
            2 => Period::Seconds(self.below(4)),
            _ => Period::Millis(u16::from(self.below(250)) * 8),
        };
        Limit {
            algorithm,
            // 15: zero requests (every request over the limit), one limit in twelve.
            requests: if self.below(12) == 0 {
                15
            } else {
                self.below(6)
            },
            period,
            name: (self.below(3) == 0).then(|| self.below(3)),
            replaces: (self.below(6) == 0).then(|| self.below(3)),
        }
    }

    fn limits(&mut self) -> Limits {
        match self.below(8) {
            0 | 1 => Limits::None,
            2 => Limits::Unlimited,
            3..=5 => Limits::One(self.limit()),
            _ => Limits::Several((0..1 + self.below(3)).map(|_| self.limit()).collect()),
        }
    }
}

fn generate(rng: &mut Rng) -> Input {
    let tree = (0..1 + rng.below(4))
        .map(|_| Node {
            key: rng.below(3),
            value: rng.below(8),
            limits: rng.limits(),
            shadow: rng.below(6) == 0,
            share: rng.below(10) == 0,
            quota: rng.below(5) == 0,
            children: (0..rng.below(3))
                .map(|_| Leaf {
                    key: rng.below(3),
                    value: rng.below(8),
                    limits: rng.limits(),
                    shadow: rng.below(6) == 0,
                    share: rng.below(10) == 0,
                    quota: rng.below(5) == 0,
                })
                .collect(),
        })
        .collect();
    let steps = (0..30)
        .map(|_| match rng.below(6) {
            0 => Step::Advance(u16::from(rng.below(250)) * 8),
            1 => Step::AdvanceNs(u32::from(rng.below(250)) * 1_000_000 + 777),
            _ => Step::Request {
                descriptors: (0..1 + rng.below(3))
                    .map(|_| {
                        let entries = (0..1 + rng.below(2))
                            .map(|_| (rng.below(3), rng.below(7)))
                            .collect();
                        (entries, (rng.below(4) == 0).then(|| rng.below(4)))
                    })
                    .collect(),
                hits: 1 + rng.below(2),
            },
        })
        .collect();
    Input {
        tree,
        through_yaml: rng.below(2) == 0,
        shadow_all: rng.below(16) == 0,
        quota_all: rng.below(16) == 0,
        steps,
        yaml: Vec::new(),
    }
}

#[test]
fn random_inputs_agree_with_the_model() {
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    let mut total = Coverage::default();
    for _ in 0..3000 {
        total += run(&generate(&mut rng));
    }
    println!("{total:?}");
    assert!(
        total.limited > 5_000 && total.refused > 1_000 && total.several > 500,
        "{total:?}"
    );
    for (name, n) in [
        ("fixed", total.fixed),
        ("gcra", total.gcra),
        ("sliding", total.sliding),
        ("stock", total.stock),
        ("shadow", total.shadow),
        ("look", total.look),
    ] {
        assert!(n > 200, "{name}: {total:?}");
    }
    assert!(total.replaced > 50, "{total:?}");
    assert!(total.zero > 200, "{total:?}");
    assert!(total.quota > 500, "{total:?}");
}

// Hand-built cases: one config descriptor `a` (any value) with `limits`, requests of `a=x`.

fn config(limits: Limits, shadow: bool) -> Vec<Node> {
    vec![Node {
        key: 0,
        value: 0,
        limits,
        shadow,
        share: false,
        children: Vec::new(),
        quota: false,
    }]
}

/// A request of `a=x` charging `hits`.
fn hit(hits: u8) -> Step {
    Step::Request {
        descriptors: vec![(vec![(0, 0)], None)],
        hits,
    }
}

fn ms(ms: u16) -> Step {
    Step::Advance(ms)
}

fn limit(algorithm: Algorithm, requests: u32, period: Period) -> Limit {
    Limit {
        algorithm,
        requests: u8::try_from(requests - 1).unwrap(),
        period,
        name: None,
        replaces: None,
    }
}

/// Runs the case both ways (values and YAML): the engine agrees with the model, and
/// `requests` were decided of which `refused` were refused.
fn case(tree: Vec<Node>, steps: Vec<Step>, requests: u64, refused: u64) {
    for through_yaml in [false, true] {
        let input = Input {
            tree: tree.clone(),
            through_yaml,
            shadow_all: false,
            quota_all: false,
            steps: steps.clone(),
            yaml: Vec::new(),
        };
        let seen = run(&input);
        assert_eq!(
            (seen.requests, seen.refused),
            (requests, refused),
            "{seen:?}"
        );
    }
}

#[test]
fn gcra_admits_its_burst_at_once_then_one_per_interval() {
    // 2 per second (T = 500 ms) with a burst of 3: three at once, then one per 500 ms.
    let gcra = limit(Algorithm::Gcra { burst: Some(3) }, 2, Period::Second);
    let steps = vec![
        hit(1),
        hit(1),
        hit(1),
        hit(1),
        ms(499),
        hit(1),
        ms(1),
        hit(1),
        hit(1),
    ];
    case(config(Limits::One(gcra), false), steps, 7, 3);
    // The default burst is requests_per_unit; T = 1500 ms / 3.
    let gcra = limit(Algorithm::Gcra { burst: None }, 3, Period::Millis(1400));
    let steps = vec![hit(3), hit(1), ms(499), hit(1), ms(1), hit(1), hit(1)];
    case(config(Limits::One(gcra), false), steps, 5, 3);
}

#[test]
fn sliding_window_weighs_the_previous_window() {
    // 3 per second: 3 in window 0; at 1.5 s the previous window weighs 1.5, so one more fits
    // and a second does not; at 1.75 s it weighs 0.75: one more fits (2.75).
    let sliding = limit(Algorithm::SlidingWindow, 3, Period::Second);
    let steps = vec![
        ms(500),
        hit(3),
        hit(1),
        ms(1000),
        hit(1),
        hit(1),
        ms(250),
        hit(1),
        hit(1),
    ];
    case(config(Limits::One(sliding), false), steps, 6, 3);
}

#[test]
fn a_stock_is_never_refilled() {
    let stock = limit(Algorithm::Stock, 2, Period::Second);
    let steps = vec![
        hit(1),
        hit(1),
        hit(1),
        ms(60_000),
        ms(60_000),
        hit(1),
        hit(0),
    ];
    case(config(Limits::One(stock), false), steps, 5, 2);
}

#[test]
fn fixed_windows_of_any_period_start_at_multiples_of_it() {
    // 1 per 1500 ms: windows [0, 1.5 s), [1.5 s, 3 s).
    let fixed = limit(
        Algorithm::FixedWindow { written: true },
        1,
        Period::Millis(1400),
    );
    let steps = vec![hit(1), ms(1000), hit(1), ms(499), hit(1), ms(1), hit(1)];
    case(config(Limits::One(fixed), false), steps, 4, 2);
    // 2 per 2 s, by `period: 2s`.
    let fixed = limit(
        Algorithm::FixedWindow { written: false },
        2,
        Period::Seconds(1),
    );
    let steps = vec![hit(2), ms(1999), hit(1), ms(1), hit(2)];
    case(config(Limits::One(fixed), false), steps, 3, 1);
}

#[test]
fn several_limits_all_admit_or_none_is_charged() {
    // 3 per second and a stock of 4: a request of 3 after one of 2 is refused by the window
    // and takes nothing from the stock, which still sells 2 in the next second, then 0.
    let list = vec![
        limit(Algorithm::FixedWindow { written: false }, 3, Period::Second),
        limit(Algorithm::Stock, 4, Period::Second),
    ];
    let steps = vec![hit(2), hit(3), ms(1000), hit(2), hit(1), ms(1000), hit(1)];
    case(config(Limits::Several(list), false), steps, 5, 3);
}

#[test]
fn shadow_mode_counts_and_answers_ok() {
    // Over the limit in shadow mode: answered OK, still charged while it fits.
    let fixed = limit(Algorithm::FixedWindow { written: false }, 1, Period::Minute);
    let steps = vec![hit(1), hit(1), hit(0)];
    case(config(Limits::One(fixed), true), steps, 3, 0);
}

#[test]
fn a_refusal_reports_every_limit_that_would_refuse() {
    // `a` and `b`, one per minute each: the second request of both is refused at `a`, and
    // `b`, whose own charge would not fit either, is reported over its limit too; a third
    // descriptor `c` that only looks is answered from the state the refusal left.
    let fixed = limit(Algorithm::FixedWindow { written: false }, 1, Period::Minute);
    let node = |key| Node {
        key,
        value: 0,
        limits: Limits::One(fixed),
        shadow: false,
        share: false,
        children: Vec::new(),
        quota: false,
    };
    let both = Step::Request {
        descriptors: vec![
            (vec![(0, 0)], None),
            (vec![(1, 0)], None),
            (vec![(2, 0)], Some(0)),
        ],
        hits: 1,
    };
    case(
        vec![node(0), node(1), node(2)],
        vec![both.clone(), both],
        2,
        1,
    );
}

/// A config descriptor `key` (any value) with one limit.
fn one(key: u8, limit: Limit) -> Node {
    Node {
        key,
        value: 0,
        limits: Limits::One(limit),
        shadow: false,
        share: false,
        children: Vec::new(),
        quota: false,
    }
}

#[test]
fn a_named_limit_is_dropped_when_a_matched_limit_replaces_it() {
    // `a`: one per minute, named n0; `b`: five per minute, replacing n0. With `b` in the
    // request, `a` is not limited; alone, it is.
    let named = Limit {
        name: Some(0),
        ..limit(Algorithm::FixedWindow { written: false }, 1, Period::Minute)
    };
    let replacing = Limit {
        replaces: Some(0),
        ..limit(Algorithm::SlidingWindow, 5, Period::Minute)
    };
    let both = Step::Request {
        descriptors: vec![(vec![(0, 0)], None), (vec![(1, 0)], None)],
        hits: 1,
    };
    let steps = vec![both.clone(), both, hit(1), hit(1)];
    case(vec![one(0, named), one(1, replacing)], steps, 4, 1);
}

#[test]
fn a_zero_limit_refuses_every_charge_and_no_other_limit_is_charged() {
    // `a`: zero requests, named n0; `b`: two per minute. A request of both is refused and
    // charges `b` nothing (it still admits two alone); `c` replaces n0, so with `c` in the
    // request `a` no longer refuses; `a` looked at (no hits) is not refused.
    let zero = Limit {
        requests: 15,
        name: Some(0),
        ..limit(Algorithm::FixedWindow { written: false }, 1, Period::Minute)
    };
    let two = limit(Algorithm::Gcra { burst: None }, 2, Period::Minute);
    let replacing = Limit {
        replaces: Some(0),
        ..limit(Algorithm::Stock, 5, Period::Minute)
    };
    let of = |keys: &[u8]| Step::Request {
        descriptors: keys.iter().map(|&k| (vec![(k, 0)], None)).collect(),
        hits: 1,
    };
    let steps = vec![
        of(&[0, 1]),
        of(&[0, 1]),
        of(&[1]),
        of(&[1]),
        of(&[1]),
        of(&[0, 2]),
        hit(0),
    ];
    let tree = vec![one(0, zero), one(1, two), one(2, replacing)];
    case(tree, steps, 7, 3);
}

#[test]
fn arbitrary_bytes_never_panic_the_loader() {
    let mut rng = Rng(7);
    for _ in 0..2000 {
        let len = rng.below(200);
        let bytes: Vec<u8> = (0..len).map(|_| rng.below(256)).collect();
        let input = Input::arbitrary(&mut Unstructured::new(&bytes));
        if let Ok(input) = input {
            let _ = run(&input);
        }
    }
    for text in [
        "",
        "domain: [",
        "- - -",
        "domain: d\ndescriptors: 7",
        "{a: *b}",
    ] {
        let _ = Config::from_yaml("t.yaml", text);
    }
}

crate::corpus_tests!("server_engine", run);
