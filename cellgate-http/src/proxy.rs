//! Client addresses behind reverse proxies: `X-Forwarded-For` and `Forwarded` read from the
//! right, and only from peers in the trusted blocks.

use std::net::IpAddr;
use std::sync::Arc;

use http::header::{HeaderName, FORWARDED};
use http::request::Parts;

use crate::ip::{forwarded_for, ip_key, parse_node, split_list, Cidr, CidrError, Hop};
use crate::key::{missing_peer, peer_addr, KeyExtractor, Rejection};

/// Which forwarding header a trusted proxy writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ForwardHeader {
    /// `X-Forwarded-For: client, proxy1, proxy2`.
    XForwardedFor,
    /// `Forwarded: for=client, for=proxy1` (RFC 7239).
    Forwarded,
}

/// Limits by client address behind reverse proxies you run.
///
/// The forwarding header is read **only when the peer is one of the trusted proxies**, and
/// from the right: each proxy appends the address it received the request from, so the
/// right-most address that is not a trusted proxy is the client (the entries left of it are
/// whatever the client chose to send, and are never looked at). A request from a peer outside
/// the trusted blocks is keyed by the peer itself: a spoofed header from the open internet
/// changes nothing.
///
/// - Every hop trusted: the left-most one is the client.
/// - A trusted proxy says `unknown` (or an obfuscated `_name`): the key is that proxy's address.
/// - A trusted proxy that sent no header: the key is the proxy.
/// - A malformed entry reached while walking left: a 400 naming the header and the entry.
///
/// The key is normalised as by [`PeerIp`](crate::PeerIp) (IPv6 /64, IPv4-mapped folded). Missing connect
/// info: a 500 and one line on stderr, as for [`PeerIp`](crate::PeerIp).
///
/// # Examples
///
/// ```
/// use std::net::IpAddr;
/// use cellgate_http::{KeyExtractor, PeerAddr, TrustedProxies};
///
/// let proxies = TrustedProxies::new(["10.0.0.0/8"])?;
/// let mut req = http::Request::builder()
///     .header("x-forwarded-for", "6.6.6.6, 203.0.113.9, 10.0.0.2")
///     .body(()).unwrap();
/// req.extensions_mut().insert(PeerAddr("10.0.0.1:40000".parse().unwrap()));
/// let (parts, ()) = req.into_parts();
/// // 10.0.0.2 is a proxy of ours; 203.0.113.9 is who talked to it; 6.6.6.6 is unverifiable.
/// assert_eq!(*proxies.extract(&parts).unwrap(), "203.0.113.9".parse::<IpAddr>().unwrap());
/// # Ok::<(), cellgate_http::CidrError>(())
/// ```
#[derive(Debug, Clone)]
pub struct TrustedProxies {
    blocks: Arc<[Cidr]>,
    header: ForwardHeader,
    v6_prefix: u8,
}

impl TrustedProxies {
    /// Trusts the proxies in `blocks` (`"10.0.0.0/8"`, `"::1"`, ...), reading
    /// `X-Forwarded-For`.
    ///
    /// # Errors
    ///
    /// [`CidrError`] naming the first block that does not parse.
    pub fn new<I, S>(blocks: I) -> Result<Self, CidrError>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        let blocks = blocks
            .into_iter()
            .map(|b| b.as_ref().parse::<Cidr>())
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Self::from_blocks(blocks))
    }

    /// Trusts the proxies in `blocks`, reading `X-Forwarded-For`.
    pub fn from_blocks(blocks: impl IntoIterator<Item = Cidr>) -> Self {
        Self {
            blocks: blocks.into_iter().collect(),
            header: ForwardHeader::XForwardedFor,
            v6_prefix: 64,
        }
    }

    /// Reads `header` instead of `X-Forwarded-For`.
    #[must_use]
    pub fn header(mut self, header: ForwardHeader) -> Self {
        self.header = header;
        self
    }

    /// Groups IPv6 clients by their first `bits` bits (64 by default).
    #[must_use]
    pub fn v6_prefix(mut self, bits: u8) -> Self {
        self.v6_prefix = bits;
        self
    }

    fn trusted(&self, ip: IpAddr) -> bool {
        self.blocks.iter().any(|b| b.contains(ip))
    }

    /// The client address of `parts` (not yet grouped into a key).
    ///
    /// # Errors
    ///
    /// A 400 [`Rejection`] when a trusted proxy's header is malformed where it is read; a
    /// 500 when the server gave no peer address.
    pub fn client_ip(&self, parts: &Parts) -> Result<IpAddr, Rejection> {
        let Some(peer) = peer_addr(parts) else {
            return Err(missing_peer());
        };
        let mut client = peer.ip();
        if !self.trusted(client) {
            return Ok(client);
        }
        let name: HeaderName = match self.header {
            ForwardHeader::XForwardedFor => HeaderName::from_static("x-forwarded-for"),
            ForwardHeader::Forwarded => FORWARDED,
        };
        // Several header lines form one list, in order; walk it from the last entry.
        let lines: Vec<&http::HeaderValue> = parts.headers.get_all(&name).iter().collect();
        for line in lines.into_iter().rev() {
            let Ok(line) = line.to_str() else {
                return Err(Rejection::bad_request(format!(
                    "malformed {name} header: not visible ASCII"
                )));
            };
            let entries: Vec<&str> = split_list(line).collect();
            for entry in entries.into_iter().rev() {
                let node = match self.header {
                    ForwardHeader::XForwardedFor => entry,
                    ForwardHeader::Forwarded => match forwarded_for(entry) {
                        Ok(Some(node)) => node,
                        // An element without `for` says nothing about the client.
                        Ok(None) => continue,
                        Err(bad) => return Err(malformed(&name, &bad.0)),
                    },
                };
                match parse_node(node) {
                    Ok(Hop::Ip(ip)) => {
                        client = ip;
                        if !self.trusted(ip) {
                            return Ok(client);
                        }
                    }
                    Ok(Hop::Unnamed) => return Ok(client),
                    Err(bad) => return Err(malformed(&name, &bad.0)),
                }
            }
        }
        Ok(client)
    }
}

fn malformed(name: &HeaderName, entry: &str) -> Rejection {
    Rejection::bad_request(format!(
        "malformed {name} header: {entry:?} is not an IP address"
    ))
}

impl KeyExtractor for TrustedProxies {
    type Key = IpAddr;

    fn extract<'p>(&self, parts: &'p Parts) -> Result<std::borrow::Cow<'p, IpAddr>, Rejection> {
        Ok(std::borrow::Cow::Owned(ip_key(
            self.client_ip(parts)?,
            self.v6_prefix,
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::key::tests::{ip, parts};
    use http::StatusCode;
    use proptest::prelude::*;
    use std::net::Ipv4Addr;

    #[test]
    fn forwarded_headers_from_untrusted_peers_are_ignored() {
        let t = TrustedProxies::new(["10.0.0.0/8"]).unwrap();
        let p = parts(Some("198.51.100.1:1"), &[("x-forwarded-for", "1.1.1.1")]);
        assert_eq!(t.extract(&p).map(|k| *k), Ok(ip("198.51.100.1")));
        // Not even parsed: garbage from an untrusted peer is no error either.
        let p = parts(Some("198.51.100.1:1"), &[("x-forwarded-for", "garbage")]);
        assert_eq!(t.extract(&p).map(|k| *k), Ok(ip("198.51.100.1")));
    }

    #[test]
    fn the_rightmost_untrusted_hop_is_the_client() {
        let t = TrustedProxies::new(["10.0.0.0/8", "192.168.0.0/16"]).unwrap();
        let p = parts(
            Some("10.0.0.1:1"),
            &[
                ("x-forwarded-for", "garbage, 7.7.7.7"),
                ("x-forwarded-for", "203.0.113.5, 192.168.1.1"),
            ],
        );
        assert_eq!(t.extract(&p).map(|k| *k), Ok(ip("203.0.113.5")));
        // Every hop trusted: the left-most.
        let p = parts(
            Some("10.0.0.1:1"),
            &[("x-forwarded-for", "10.9.9.9, 192.168.1.1")],
        );
        assert_eq!(t.extract(&p).map(|k| *k), Ok(ip("10.9.9.9")));
        // A trusted proxy without the header: the proxy.
        assert_eq!(
            t.extract(&parts(Some("10.0.0.1:1"), &[])).map(|k| *k),
            Ok(ip("10.0.0.1"))
        );
        // `unknown` behind a trusted proxy: that proxy.
        let p = parts(
            Some("10.0.0.1:1"),
            &[("x-forwarded-for", "1.2.3.4, unknown, 10.0.0.7")],
        );
        assert_eq!(t.extract(&p).map(|k| *k), Ok(ip("10.0.0.7")));
    }

    #[test]
    fn malformed_trusted_headers_are_a_400_naming_the_entry() {
        let t = TrustedProxies::new(["10.0.0.0/8"]).unwrap();
        let p = parts(
            Some("10.0.0.1:1"),
            &[("x-forwarded-for", "1.2.3.4, nonsense")],
        );
        let e = t.extract(&p).unwrap_err();
        assert_eq!(e.status(), StatusCode::BAD_REQUEST);
        assert_eq!(
            e.reason(),
            "malformed x-forwarded-for header: \"nonsense\" is not an IP address"
        );
    }

    #[test]
    fn the_forwarded_header_is_read_by_its_for_parameter() {
        let t = TrustedProxies::new(["10.0.0.0/8"])
            .unwrap()
            .header(ForwardHeader::Forwarded);
        let p = parts(
            Some("10.0.0.1:1"),
            &[(
                "forwarded",
                "for=9.9.9.9, for=\"[2001:db8::5]:80\";proto=https, proto=http;for=10.1.1.1",
            )],
        );
        assert_eq!(t.extract(&p).map(|k| *k), Ok(ip("2001:db8::")));
        let p = parts(Some("10.0.0.1:1"), &[("forwarded", "for")]);
        assert!(t.extract(&p).is_err());
    }

    proptest! {
        /// Against a model: with a trusted peer, the client is the right-most hop outside the
        /// trusted block (the left-most hop when all are inside); with an untrusted peer, the
        /// peer, whatever the header says. Hops are split over header lines at random.
        #[test]
        fn the_forwarded_walk_agrees_with_the_model(
            hops in proptest::collection::vec((any::<bool>(), any::<u32>()), 0..8),
            peer_trusted: bool,
            split in 0usize..8,
        ) {
            let t = TrustedProxies::new(["10.0.0.0/8"]).unwrap();
            // `true`: a proxy address inside 10/8; `false`: outside it.
            let ips: Vec<IpAddr> = hops
                .iter()
                .map(|&(inside, n)| {
                    let n = if inside { 0x0a00_0000 | (n & 0x00ff_ffff) } else { 0x0b00_0000 | (n & 0x00ff_ffff) };
                    IpAddr::V4(Ipv4Addr::from(n))
                })
                .collect();
            let peer = if peer_trusted { "10.0.0.1:1" } else { "192.0.2.1:1" };
            let texts: Vec<String> = ips.iter().map(ToString::to_string).collect();
            let cut = split.min(texts.len());
            let lines = [texts[..cut].join(", "), texts[cut..].join(", ")];
            let headers: Vec<(&str, &str)> = lines
                .iter()
                .filter(|l| !l.is_empty())
                .map(|l| ("x-forwarded-for", l.as_str()))
                .collect();
            let expected = if !peer_trusted {
                ip("192.0.2.1")
            } else {
                ips.iter()
                    .rev()
                    .find(|a| !Cidr::new(ip("10.0.0.0"), 8).unwrap().contains(**a))
                    .or(ips.first())
                    .copied()
                    .unwrap_or(ip("10.0.0.1"))
            };
            prop_assert_eq!(t.client_ip(&parts(Some(peer), &headers)), Ok(expected));
        }
    }
}
