//! What the alternating benchmarks (`metrics_overhead`, `record_check`) share: pairs of timed
//! runs, the order within a pair alternating, summarised by the quartiles of the differences.

/// Runs `pairs` pairs of timed runs of `base` and `other` (each returns nanoseconds per
/// operation of one run), `base` first in even pairs and `other` first in odd ones, so that a
/// drift in the machine's load weighs on both alike; returns the quartiles `[q1, median, q3]`
/// of `other - base` over the pairs.
pub fn quartiles_of_differences(
    pairs: usize,
    base: impl FnMut() -> f64,
    other: impl FnMut() -> f64,
) -> [f64; 3] {
    quartiles_of_pairs(pairs, base, other, |b, o| o - b)
}

/// As [`quartiles_of_differences`], of `compare(base, other)` for each pair.
pub fn quartiles_of_pairs(
    pairs: usize,
    mut base: impl FnMut() -> f64,
    mut other: impl FnMut() -> f64,
    compare: impl Fn(f64, f64) -> f64,
) -> [f64; 3] {
    let mut diffs: Vec<f64> = (0..pairs)
        .map(|i| {
            if i % 2 == 0 {
                let first = base();
                compare(first, other())
            } else {
                let first = other();
                compare(base(), first)
            }
        })
        .collect();
    diffs.sort_by(f64::total_cmp);
    [0.25, 0.5, 0.75].map(|f| diffs[((diffs.len() - 1) as f64 * f) as usize])
}
