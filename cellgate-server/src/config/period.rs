//! Duration strings of the `period` extension: an integer and a unit, `500ms`, `30s`, `5m`,
//! `2h`, `1d`. Hand-written because the grammar is five suffixes: a crate for it would accept
//! forms (`1h 30m`, fractions) that the docs do not promise.

use std::time::Duration;

/// Parses `text`; `None` when it is not an integer followed by `ms`, `s`, `m`, `h` or `d`, is
/// zero, or overflows.
pub(crate) fn parse(text: &str) -> Option<Duration> {
    let text = text.trim();
    let digits = text.bytes().take_while(u8::is_ascii_digit).count();
    let (number, suffix) = text.split_at(digits);
    let n: u64 = number.parse().ok()?;
    let ms_per = match suffix {
        "ms" => 1,
        "s" => 1_000,
        "m" => 60_000,
        "h" => 3_600_000,
        "d" => 86_400_000,
        _ => return None,
    };
    let ms = n.checked_mul(ms_per)?;
    (ms > 0).then(|| Duration::from_millis(ms))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_each_suffix_and_refuses_the_rest() {
        assert_eq!(parse("500ms"), Some(Duration::from_millis(500)));
        assert_eq!(parse("30s"), Some(Duration::from_secs(30)));
        assert_eq!(parse("5m"), Some(Duration::from_secs(300)));
        assert_eq!(parse("2h"), Some(Duration::from_secs(7200)));
        assert_eq!(parse("1d"), Some(Duration::from_secs(86_400)));
        for bad in [
            "",
            "0s",
            "s",
            "1",
            "1.5s",
            "-1s",
            "1w",
            "1 s x",
            "99999999999999999999d",
        ] {
            assert_eq!(parse(bad), None, "{bad}");
        }
    }
}
