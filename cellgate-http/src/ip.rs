//! Client addresses: normalising an address into a rate-limit key, CIDR blocks of trusted
//! proxies, and reading `X-Forwarded-For` / `Forwarded` from the right.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::str::FromStr;

/// Folds an IPv4-mapped IPv6 address (`::ffff:a.b.c.d`) into the IPv4 address it carries, so
/// one client is one key whichever socket family it came in on.
///
/// # Examples
///
/// ```
/// use std::net::IpAddr;
/// use cellgate_http::fold_mapped;
///
/// let mapped: IpAddr = "::ffff:192.0.2.7".parse().unwrap();
/// assert_eq!(fold_mapped(mapped), "192.0.2.7".parse::<IpAddr>().unwrap());
/// ```
#[must_use]
pub fn fold_mapped(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => IpAddr::V6(v6),
        },
        v4 => v4,
    }
}

/// The rate-limit key of a client address: IPv4-mapped addresses folded to IPv4, IPv6
/// addresses cut to their first `v6_prefix` bits (an IPv6 host usually owns a whole /64, so
/// limiting single addresses would let it rotate through 2^64 keys).
///
/// `v6_prefix` above 128 counts as 128.
///
/// # Examples
///
/// ```
/// use std::net::IpAddr;
/// use cellgate_http::ip_key;
///
/// let a: IpAddr = "2001:db8:1:2:aaaa::1".parse().unwrap();
/// let b: IpAddr = "2001:db8:1:2:bbbb::9".parse().unwrap();
/// assert_eq!(ip_key(a, 64), ip_key(b, 64));
/// assert_eq!(ip_key(a, 64), "2001:db8:1:2::".parse::<IpAddr>().unwrap());
/// ```
#[must_use]
pub fn ip_key(ip: IpAddr, v6_prefix: u8) -> IpAddr {
    match fold_mapped(ip) {
        IpAddr::V6(v6) => IpAddr::V6(Ipv6Addr::from(u128::from(v6) & prefix_mask_128(v6_prefix))),
        v4 => v4,
    }
}

fn prefix_mask_128(prefix: u8) -> u128 {
    match prefix {
        0 => 0,
        p if p >= 128 => u128::MAX,
        p => u128::MAX << (128 - u32::from(p)),
    }
}

fn prefix_mask_32(prefix: u8) -> u32 {
    match prefix {
        0 => 0,
        p if p >= 32 => u32::MAX,
        p => u32::MAX << (32 - u32::from(p)),
    }
}

/// A block of addresses, `10.0.0.0/8` or `2001:db8::/32`; a bare address is a block of one.
///
/// IPv4-mapped IPv6 addresses are checked as the IPv4 address they carry.
///
/// # Examples
///
/// ```
/// use cellgate_http::Cidr;
///
/// let block: Cidr = "10.0.0.0/8".parse()?;
/// assert!(block.contains("10.1.2.3".parse().unwrap()));
/// assert!(block.contains("::ffff:10.1.2.3".parse().unwrap()));
/// assert!(!block.contains("11.0.0.1".parse().unwrap()));
/// assert!("10.0.0.0/33".parse::<Cidr>().is_err());
/// # Ok::<(), cellgate_http::CidrError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Cidr {
    network: IpAddr,
    prefix: u8,
}

impl Cidr {
    /// The block of `prefix` leading bits of `addr` (the other bits are ignored).
    ///
    /// # Errors
    ///
    /// [`CidrError`] when `prefix` is longer than the address (32 or 128 bits).
    pub fn new(addr: IpAddr, prefix: u8) -> Result<Self, CidrError> {
        let addr = fold_mapped(addr);
        match addr {
            IpAddr::V4(v4) if prefix <= 32 => Ok(Self {
                network: IpAddr::V4(Ipv4Addr::from(u32::from(v4) & prefix_mask_32(prefix))),
                prefix,
            }),
            IpAddr::V6(v6) if prefix <= 128 => Ok(Self {
                network: IpAddr::V6(Ipv6Addr::from(u128::from(v6) & prefix_mask_128(prefix))),
                prefix,
            }),
            _ => Err(CidrError::new(
                format!("{addr}/{prefix}"),
                "prefix too long",
            )),
        }
    }

    /// Whether `ip` lies in the block.
    #[must_use]
    pub fn contains(&self, ip: IpAddr) -> bool {
        match (self.network, fold_mapped(ip)) {
            (IpAddr::V4(net), IpAddr::V4(ip)) => {
                u32::from(ip) & prefix_mask_32(self.prefix) == u32::from(net)
            }
            (IpAddr::V6(net), IpAddr::V6(ip)) => {
                u128::from(ip) & prefix_mask_128(self.prefix) == u128::from(net)
            }
            _ => false,
        }
    }
}

impl fmt::Display for Cidr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.network, self.prefix)
    }
}

impl FromStr for Cidr {
    type Err = CidrError;

    fn from_str(s: &str) -> Result<Self, CidrError> {
        let bad = |why: &'static str| CidrError::new(s.to_owned(), why);
        let (addr, prefix) = match s.split_once('/') {
            Some((a, p)) => (a, Some(p)),
            None => (s, None),
        };
        let addr: IpAddr = addr.trim().parse().map_err(|_| bad("not an IP address"))?;
        let max = if fold_mapped(addr).is_ipv4() { 32 } else { 128 };
        let prefix = match prefix {
            // Only plain decimal digits: `u8::from_str` would also take a leading `+`.
            Some(p) if !p.is_empty() && p.len() <= 3 && p.bytes().all(|b| b.is_ascii_digit()) => {
                p.parse::<u8>().map_err(|_| bad("prefix too long"))?
            }
            Some(_) => return Err(bad("prefix is not a number")),
            None => max,
        };
        if prefix > max {
            return Err(bad("prefix too long"));
        }
        Cidr::new(addr, prefix)
    }
}

/// A CIDR block that did not parse.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CidrError {
    input: String,
    why: &'static str,
}

impl CidrError {
    fn new(input: String, why: &'static str) -> Self {
        Self { input, why }
    }
}

impl fmt::Display for CidrError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "invalid CIDR block {:?}: {}", self.input, self.why)
    }
}

impl std::error::Error for CidrError {}

/// One hop of a forwarding chain as a proxy wrote it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Hop {
    /// An address (any port dropped).
    Ip(IpAddr),
    /// `unknown` or an obfuscated identifier (`_hidden`, RFC 7239): the proxy does not say.
    Unnamed,
}

/// A hop that is neither an address nor an RFC 7239 identifier.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct BadHop(pub(crate) String);

/// Parses one node as found in `X-Forwarded-For` or in a `Forwarded` `for=` parameter (quotes
/// already removed): `a.b.c.d`, `a.b.c.d:port`, an IPv6 address, `[v6]` or `[v6]:port`,
/// `unknown` or `_obfuscated`.
pub(crate) fn parse_node(node: &str) -> Result<Hop, BadHop> {
    let node = node.trim();
    let bad = || BadHop(node.chars().take(64).collect());
    if node.eq_ignore_ascii_case("unknown") {
        return Ok(Hop::Unnamed);
    }
    if let Some(rest) = node.strip_prefix('_') {
        let ok = !rest.is_empty()
            && rest
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
        return if ok { Ok(Hop::Unnamed) } else { Err(bad()) };
    }
    if let Some(rest) = node.strip_prefix('[') {
        let (inside, after) = rest.split_once(']').ok_or_else(bad)?;
        if !(after.is_empty() || is_port(after)) {
            return Err(bad());
        }
        let v6: Ipv6Addr = inside.parse().map_err(|_| bad())?;
        return Ok(Hop::Ip(IpAddr::V6(v6)));
    }
    if let Ok(ip) = node.parse::<IpAddr>() {
        return Ok(Hop::Ip(ip));
    }
    // `a.b.c.d:port` (an IPv6 address with a port must be bracketed).
    match node.parse::<SocketAddr>() {
        Ok(SocketAddr::V4(sa)) => Ok(Hop::Ip(IpAddr::V4(*sa.ip()))),
        _ => Err(bad()),
    }
}

fn is_port(s: &str) -> bool {
    s.strip_prefix(':')
        .is_some_and(|p| !p.is_empty() && p.len() <= 5 && p.bytes().all(|b| b.is_ascii_digit()))
}

/// Splits a header value at the commas that are not inside a quoted string.
pub(crate) fn split_list(value: &str) -> impl Iterator<Item = &str> {
    let mut start = 0;
    let mut quoted = false;
    let mut escaped = false;
    let mut cuts = Vec::new();
    for (i, b) in value.bytes().enumerate() {
        if escaped {
            escaped = false;
            continue;
        }
        match b {
            b'\\' if quoted => escaped = true,
            b'"' => quoted = !quoted,
            b',' if !quoted => {
                cuts.push(&value[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    cuts.push(&value[start..]);
    cuts.into_iter()
}

/// The `for=` node of one `Forwarded` element (`for=192.0.2.1;proto=https`), unquoted;
/// `Ok(None)` when the element has no `for`.
pub(crate) fn forwarded_for(element: &str) -> Result<Option<&str>, BadHop> {
    for pair in element.split(';') {
        let pair = pair.trim();
        if pair.is_empty() {
            continue;
        }
        let (name, value) = pair
            .split_once('=')
            .ok_or_else(|| BadHop(pair.chars().take(64).collect()))?;
        if name.trim().eq_ignore_ascii_case("for") {
            let value = value.trim();
            let value = match value.strip_prefix('"') {
                Some(rest) => rest
                    .strip_suffix('"')
                    .ok_or_else(|| BadHop(value.chars().take(64).collect()))?,
                None => value,
            };
            return Ok(Some(value));
        }
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn cidr_parses_blocks_and_bare_addresses() {
        let c: Cidr = "192.168.0.0/16".parse().unwrap();
        assert!(c.contains(ip("192.168.255.1")));
        assert!(!c.contains(ip("192.169.0.1")));
        let host: Cidr = "127.0.0.1".parse().unwrap();
        assert!(host.contains(ip("127.0.0.1")));
        assert!(!host.contains(ip("127.0.0.2")));
        let v6: Cidr = "2001:db8::/32".parse().unwrap();
        assert!(v6.contains(ip("2001:db8:ffff::1")));
        assert!(!v6.contains(ip("2001:db9::1")));
        assert!(!v6.contains(ip("10.0.0.1")));
        let all: Cidr = "0.0.0.0/0".parse().unwrap();
        assert!(all.contains(ip("8.8.8.8")));
        assert!(!all.contains(ip("::1")));
        assert_eq!(c.to_string(), "192.168.0.0/16");
    }

    #[test]
    fn cidr_rejects_bad_input_with_a_reason() {
        for bad in [
            "",
            "/8",
            "10.0.0.0/",
            "10.0.0.0/33",
            "::/129",
            "10.0.0.0/+8",
            "10.0.0/8",
            "x/8",
            "10.0.0.0/8/8",
            "10.0.0.0/0008",
        ] {
            let e = bad.parse::<Cidr>().unwrap_err();
            assert!(e.to_string().contains("invalid CIDR block"), "{bad}: {e}");
        }
    }

    #[test]
    fn nodes_parse_in_every_form_proxies_write() {
        assert_eq!(parse_node("192.0.2.1"), Ok(Hop::Ip(ip("192.0.2.1"))));
        assert_eq!(parse_node(" 192.0.2.1:8080 "), Ok(Hop::Ip(ip("192.0.2.1"))));
        assert_eq!(parse_node("2001:db8::1"), Ok(Hop::Ip(ip("2001:db8::1"))));
        assert_eq!(parse_node("[2001:db8::1]"), Ok(Hop::Ip(ip("2001:db8::1"))));
        assert_eq!(
            parse_node("[2001:db8::1]:443"),
            Ok(Hop::Ip(ip("2001:db8::1")))
        );
        assert_eq!(parse_node("unknown"), Ok(Hop::Unnamed));
        assert_eq!(parse_node("_hidden-1"), Ok(Hop::Unnamed));
        for bad in [
            "",
            "evil",
            "1.2.3",
            "[::1",
            "[::1]x",
            "[::1]:",
            "_",
            "_a b",
            "1.2.3.4:x",
        ] {
            assert!(parse_node(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn forwarded_elements_give_their_for_node() {
        assert_eq!(
            forwarded_for("for=192.0.2.60;proto=http;by=203.0.113.43"),
            Ok(Some("192.0.2.60"))
        );
        assert_eq!(
            forwarded_for("proto=https; For=\"[2001:db8:cafe::17]:4711\""),
            Ok(Some("[2001:db8:cafe::17]:4711"))
        );
        assert_eq!(forwarded_for("proto=https"), Ok(None));
        assert!(forwarded_for("for").is_err());
        assert!(forwarded_for("for=\"1.2.3.4").is_err());
        let parts: Vec<&str> = split_list("for=\"a,b\", for=1.2.3.4").collect();
        assert_eq!(parts, ["for=\"a,b\"", " for=1.2.3.4"]);
    }

    proptest! {
        #[test]
        fn cidr_contains_agrees_with_prefix_comparison(a: u32, b: u32, prefix in 0u8..=32) {
            let c = Cidr::new(IpAddr::V4(Ipv4Addr::from(a)), prefix).unwrap();
            let same = prefix == 0 || (a >> (32 - u32::from(prefix))) == (b >> (32 - u32::from(prefix)));
            prop_assert_eq!(c.contains(IpAddr::V4(Ipv4Addr::from(b))), same);
        }

        #[test]
        fn v6_keys_are_the_prefix(a: u128, b: u128, prefix in 0u8..=128) {
            let (ka, kb) = (ip_key(IpAddr::V6(a.into()), prefix), ip_key(IpAddr::V6(b.into()), prefix));
            let fa = fold_mapped(IpAddr::V6(a.into()));
            let fb = fold_mapped(IpAddr::V6(b.into()));
            if fa.is_ipv6() && fb.is_ipv6() {
                let same = prefix == 0
                    || (a >> (128 - u32::from(prefix))) == (b >> (128 - u32::from(prefix)));
                prop_assert_eq!(ka == kb, same);
                prop_assert!(Cidr::new(ka, prefix).unwrap().contains(IpAddr::V6(a.into())));
            }
        }

        #[test]
        fn cidr_display_parses_back(a: u128, prefix in 0u8..=128) {
            prop_assume!(fold_mapped(IpAddr::V6(a.into())).is_ipv6());
            let c = Cidr::new(IpAddr::V6(a.into()), prefix).unwrap();
            prop_assert_eq!(c.to_string().parse::<Cidr>().unwrap(), c);
        }

        #[test]
        fn parse_node_never_panics(s in ".{0,40}") {
            let _ = parse_node(&s);
            let _ = forwarded_for(&s);
            let _ = split_list(&s).count();
        }
    }
}
