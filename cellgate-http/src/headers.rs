//! The response fields: `RateLimit-Policy` and `RateLimit` (draft-ietf-httpapi-ratelimit-headers),
//! `Retry-After`, and the legacy `X-RateLimit-*` trio.

use std::fmt::Write as _;
use std::time::Duration;

use cellgate::{Decision, Policy};
use http::HeaderName;

/// Which revision of the IETF RateLimit fields to write.
///
/// The field and parameter names live in one place ([`HeaderDraft::names`]), so following a
/// rename in a later draft is one new variant and one line.
///
/// # Examples
///
/// ```
/// use cellgate_http::HeaderDraft;
///
/// let n = HeaderDraft::Ietf11.names();
/// assert_eq!((n.remaining, n.reset, n.partition_key), ("r", "t", "pk"));
/// assert_eq!(n.policy_field.as_str(), "ratelimit-policy");
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum HeaderDraft {
    /// draft-ietf-httpapi-ratelimit-headers-11: `RateLimit-Policy: "name";q=..;w=..` and
    /// `RateLimit: "name";r=..;t=..`.
    #[default]
    Ietf11,
}

/// The names a [`HeaderDraft`] uses.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct FieldNames {
    /// The field describing each policy.
    pub policy_field: HeaderName,
    /// The field giving each policy's current state.
    pub state_field: HeaderName,
    /// The quota parameter of the policy field.
    pub quota: &'static str,
    /// The window parameter of the policy field (seconds).
    pub window: &'static str,
    /// The remaining-units parameter of the state field.
    pub remaining: &'static str,
    /// The seconds-until-reset parameter of the state field.
    pub reset: &'static str,
    /// The partition-key parameter of the state field (a structured-field byte sequence).
    pub partition_key: &'static str,
}

impl HeaderDraft {
    /// The field and parameter names of this revision.
    #[must_use]
    pub fn names(self) -> FieldNames {
        match self {
            HeaderDraft::Ietf11 => FieldNames {
                policy_field: HeaderName::from_static("ratelimit-policy"),
                state_field: HeaderName::from_static("ratelimit"),
                quota: "q",
                window: "w",
                remaining: "r",
                reset: "t",
                partition_key: "pk",
            },
        }
    }
}

/// `d` in whole seconds, rounded up (0 only for zero).
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use cellgate_http::ceil_secs;
///
/// assert_eq!(ceil_secs(Duration::ZERO), 0);
/// assert_eq!(ceil_secs(Duration::from_nanos(1)), 1);
/// assert_eq!(ceil_secs(Duration::from_millis(1000)), 1);
/// assert_eq!(ceil_secs(Duration::from_millis(1001)), 2);
/// ```
#[must_use]
pub fn ceil_secs(d: Duration) -> u64 {
    d.as_secs() + u64::from(d.subsec_nanos() > 0)
}

/// The `Retry-After` seconds for a wait: rounded up, and at least 1 (a `Retry-After: 0` invites
/// an immediate retry that would be denied again).
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use cellgate_http::retry_after_secs;
///
/// assert_eq!(retry_after_secs(Duration::from_millis(1)), 1);
/// assert_eq!(retry_after_secs(Duration::ZERO), 1);
/// assert_eq!(retry_after_secs(Duration::from_millis(2500)), 3);
/// ```
#[must_use]
pub fn retry_after_secs(wait: Duration) -> u64 {
    ceil_secs(wait).max(1)
}

/// Whether `name` can be a policy name: printable ASCII (quotes and backslashes are escaped).
pub(crate) fn valid_policy_name(name: &str) -> bool {
    !name.is_empty() && name.bytes().all(|b| (0x20..=0x7e).contains(&b))
}

/// Writes `name` as a structured-field string.
fn push_sf_string(out: &mut String, name: &str) {
    out.push('"');
    for c in name.chars() {
        if c == '"' || c == '\\' {
            out.push('\\');
        }
        out.push(c);
    }
    out.push('"');
}

fn separate(out: &mut String) {
    if !out.is_empty() {
        out.push_str(", ");
    }
}

/// Appends `"name";q=<limit>;w=<window secs>` (no `w` for a policy that never refills).
pub(crate) fn push_policy(out: &mut String, names: &FieldNames, name: &str, policy: &Policy) {
    separate(out);
    push_sf_string(out, name);
    let _ = write!(out, ";{}={}", names.quota, policy.limit());
    if let Some(w) = policy.window() {
        // A window shorter than a second is still a window: say 1, not 0.
        let _ = write!(out, ";{}={}", names.window, ceil_secs(w).max(1));
    }
}

/// The seconds a client should read as `t` for `d`: the wait before a denied request fits,
/// else the time until the key is fresh again; `None` when no time helps (sold out, or a
/// request larger than the limit) or the policy never refills.
pub(crate) fn reset_secs(d: &Decision, policy: &Policy) -> Option<u64> {
    if d.is_allowed() {
        policy.window()?;
        Some(ceil_secs(d.reset_after()))
    } else {
        d.retry_after().map(retry_after_secs)
    }
}

/// The start of a limit's state member, up to its remaining count: `"name";r=`.
pub(crate) fn state_prefix(names: &FieldNames, name: &str) -> Vec<u8> {
    let mut s = String::new();
    push_sf_string(&mut s, name);
    let _ = write!(s, ";{}=", names.remaining);
    s.into_bytes()
}

/// The starts of the state member's parameters after the remaining count: `;t=` and `;pk=:`.
pub(crate) struct StateParams {
    reset: Vec<u8>,
    partition_key: Vec<u8>,
}

impl StateParams {
    pub(crate) fn new(names: &FieldNames) -> Self {
        Self {
            reset: format!(";{}=", names.reset).into_bytes(),
            partition_key: format!(";{}=:", names.partition_key).into_bytes(),
        }
    }
}

/// Appends a state member, `"name";r=<remaining>;t=<secs>;pk=:<base64>:` (no `t` when `reset`
/// is `None`, no `pk` when `partition_key` is), from its [`state_prefix`].
pub(crate) fn push_state(
    out: &mut Vec<u8>,
    prefix: &[u8],
    remaining: u32,
    params: &StateParams,
    reset: Option<u64>,
    partition_key: Option<u64>,
) {
    if !out.is_empty() {
        out.extend_from_slice(b", ");
    }
    out.extend_from_slice(prefix);
    push_u64(out, u64::from(remaining));
    if let Some(t) = reset {
        out.extend_from_slice(&params.reset);
        push_u64(out, t);
    }
    if let Some(pk) = partition_key {
        out.extend_from_slice(&params.partition_key);
        push_base64(out, &pk.to_be_bytes());
        out.push(b':');
    }
}

/// Appends `bytes` in base64 with padding (RFC 4648, section 4), as a structured-field byte
/// sequence carries them.
fn push_base64(out: &mut Vec<u8>, bytes: &[u8]) {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            chunk.get(1).copied().unwrap_or(0),
            chunk.get(2).copied().unwrap_or(0),
        ];
        let n = u32::from(b[0]) << 16 | u32::from(b[1]) << 8 | u32::from(b[2]);
        for (i, shift) in [18, 12, 6, 0].into_iter().enumerate() {
            // `i` counts the sextets; a chunk of `len` bytes fills `len + 1` of them.
            if i <= chunk.len() {
                out.push(ALPHABET[(n >> shift) as usize & 63]);
            } else {
                out.push(b'=');
            }
        }
    }
}

/// Appends `n` in decimal (the fmt machinery costs more than this whole header).
fn push_u64(out: &mut Vec<u8>, mut n: u64) {
    let mut digits = [0u8; 20];
    let mut i = digits.len();
    loop {
        i -= 1;
        // `n % 10` is below 10: the cast cannot truncate.
        digits[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    out.extend_from_slice(&digits[i..]);
}

/// The `Retry-After` of a denial: the longest wait among the policies that deny, rounded up;
/// `None` when one of them can never be satisfied by waiting.
pub(crate) fn retry_after_of(decisions: &[Decision]) -> Option<u64> {
    let mut secs = 1;
    for d in decisions.iter().filter(|d| !d.is_allowed()) {
        secs = secs.max(retry_after_secs(d.retry_after()?));
    }
    Some(secs)
}

#[cfg(test)]
mod tests {
    use super::*;
    use cellgate::clock::ManualClock;
    use cellgate::{AnyLimiter, KeyedLimiter, Limiter, Quota};
    use proptest::prelude::*;

    /// `out` with the state member of `d` appended.
    fn state(out: &str, names: &FieldNames, name: &str, d: &Decision, p: &Policy) -> String {
        let mut v = out.as_bytes().to_vec();
        let t = reset_secs(d, p);
        push_state(
            &mut v,
            &state_prefix(names, name),
            d.remaining(),
            &StateParams::new(names),
            t,
            None,
        );
        String::from_utf8(v).unwrap()
    }

    #[test]
    fn numbers_are_written_in_decimal() {
        for n in [0, 7, 10, 99, 1_000_000, u64::MAX] {
            let mut v = Vec::new();
            push_u64(&mut v, n);
            assert_eq!(String::from_utf8(v).unwrap(), n.to_string());
        }
    }

    #[test]
    fn base64_is_rfc_4648_with_padding() {
        // RFC 4648, section 10.
        for (plain, encoded) in [
            ("", ""),
            ("f", "Zg=="),
            ("fo", "Zm8="),
            ("foo", "Zm9v"),
            ("foob", "Zm9vYg=="),
            ("fooba", "Zm9vYmE="),
            ("foobar", "Zm9vYmFy"),
        ] {
            let mut v = Vec::new();
            push_base64(&mut v, plain.as_bytes());
            assert_eq!(String::from_utf8(v).unwrap(), encoded);
        }
        let mut v = Vec::new();
        push_base64(&mut v, &[0xfb, 0xff, 0xbf, 0x00, 0x01, 0x02, 0x03, 0xfe]);
        assert_eq!(String::from_utf8(v).unwrap(), "+/+/AAECA/4=");
    }

    #[test]
    fn the_partition_key_is_a_byte_sequence_after_t() {
        let names = HeaderDraft::Ietf11.names();
        let params = StateParams::new(&names);
        let mut v = Vec::new();
        let prefix = state_prefix(&names, "per-user");
        push_state(
            &mut v,
            &prefix,
            4,
            &params,
            Some(2),
            Some(0x0102_0304_0506_0708),
        );
        push_state(&mut v, &prefix, 0, &params, None, Some(u64::MAX));
        assert_eq!(
            String::from_utf8(v).unwrap(),
            "\"per-user\";r=4;t=2;pk=:AQIDBAUGBwg=:, \"per-user\";r=0;pk=://////////8=:"
        );
    }

    #[test]
    fn policy_and_state_members_are_formatted_per_draft_11() {
        let clock = ManualClock::new();
        let l = Limiter::gcra(Quota::per_minute(60).with_burst(10))
            .clock(clock.clone())
            .build()
            .unwrap();
        let p = AnyLimiter::policy(&l);
        let names = HeaderDraft::Ietf11.names();
        let mut out = String::new();
        push_policy(&mut out, &names, "per-ip", &p);
        assert_eq!(out, "\"per-ip\";q=10;w=10");
        let d = l.check_n(3);
        assert_eq!(state("", &names, "per-ip", &d, &p), "\"per-ip\";r=7;t=3");
        // Drained: the denial's t is its wait, rounded up.
        l.check_n(7);
        clock.advance(Duration::from_millis(300));
        let d = l.check();
        assert!(!d.is_allowed());
        let out = state("\"x\";q=1", &names, "a\"b\\", &d, &p);
        assert_eq!(out, "\"x\";q=1, \"a\\\"b\\\\\";r=0;t=1");
        assert_eq!(retry_after_of(&[d]), Some(1));
    }

    #[test]
    fn stock_has_no_window_and_a_sold_out_stock_no_reset() {
        let s = KeyedLimiter::<u32>::stock(1).build().unwrap();
        let p = AnyLimiter::<u32>::policy(&s);
        let names = HeaderDraft::Ietf11.names();
        let mut out = String::new();
        push_policy(&mut out, &names, "stock", &p);
        assert_eq!(out, "\"stock\";q=1");
        let ok = s.check(&1);
        let sold_out = s.check(&1);
        let out = state("", &names, "stock", &ok, &p);
        let out = state(&out, &names, "stock", &sold_out, &p);
        assert_eq!(out, "\"stock\";r=0, \"stock\";r=0");
        assert_eq!(retry_after_of(&[ok, sold_out]), None);
    }

    #[test]
    fn policy_names_must_be_printable_ascii() {
        assert!(valid_policy_name("per-ip v2 \"x\""));
        assert!(!valid_policy_name(""));
        assert!(!valid_policy_name("tab\there"));
        assert!(!valid_policy_name("café"));
    }

    proptest! {
        #[test]
        fn retry_after_is_the_wait_rounded_up_and_never_zero(ns in 0u64..10_000_000_000_000) {
            let wait = Duration::from_nanos(ns);
            let s = retry_after_secs(wait);
            prop_assert!(s >= 1);
            prop_assert!(Duration::from_secs(s) >= wait);
            prop_assert!(Duration::from_secs(s - 1) < wait || s == 1);
        }

        #[test]
        fn retry_after_is_never_earlier_than_any_denying_t(
            retries in proptest::collection::vec(1u64..5_000_000_000, 1..5),
        ) {
            // Real denials from drained GCRA limiters with various waits.
            let clock = ManualClock::new();
            let mut ds = Vec::new();
            for r in &retries {
                let l = Limiter::gcra(Quota::new(1, Duration::from_nanos(*r)))
                    .clock(clock.clone()).build().unwrap();
                l.check();
                ds.push(l.check());
            }
            let ra = retry_after_of(&ds).unwrap();
            for d in &ds {
                let p = Policy::clone(&AnyLimiter::policy(&Limiter::stock(1).build().unwrap()));
                prop_assert!(reset_secs(d, &p).unwrap() <= ra);
            }
        }
    }
}
