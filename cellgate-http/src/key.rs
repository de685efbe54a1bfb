//! Which key a request is limited under: the client's address, a header, one key for all, or
//! anything a closure computes from the request head.

use std::borrow::Cow;
use std::fmt;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;

use http::header::{HeaderName, FORWARDED};
use http::request::Parts;
use http::StatusCode;

use crate::ip::{forwarded_for, ip_key, parse_node, split_list, Cidr, CidrError, Hop};

/// Computes the key a request is limited under from its head, or refuses the request.
///
/// A refusal ([`Rejection`]) is answered as it says (a 400 with its reason, by default) and no
/// limit is charged.
///
/// # Examples
///
/// ```
/// use cellgate_http::{KeyExtractor, Rejection};
/// use http::request::Parts;
///
/// /// The API key, as an owned string.
/// struct ApiKey;
///
/// impl KeyExtractor for ApiKey {
///     type Key = String;
///     fn extract(&self, parts: &Parts) -> Result<String, Rejection> {
///         let v = parts.headers.get("x-api-key").ok_or(Rejection::bad_request("missing x-api-key"))?;
///         let v = v.to_str().map_err(|_| Rejection::bad_request("x-api-key is not ASCII"))?;
///         Ok(v.to_owned())
///     }
/// }
///
/// let (parts, ()) = http::Request::builder().header("x-api-key", "k1").body(()).unwrap().into_parts();
/// assert_eq!(ApiKey.extract(&parts).unwrap(), "k1");
/// ```
pub trait KeyExtractor: Send + Sync + 'static {
    /// The key (owned: it lives as long as the check).
    type Key: Send + 'static;

    /// The key of this request, or why it cannot have one.
    ///
    /// # Errors
    ///
    /// A [`Rejection`] the layer answers instead of calling the service.
    fn extract(&self, parts: &Parts) -> Result<Self::Key, Rejection>;
}

/// Why a request has no key: answered with `status` (400 unless said otherwise) and `reason`.
///
/// # Examples
///
/// ```
/// use cellgate_http::Rejection;
/// use http::StatusCode;
///
/// let r = Rejection::bad_request("missing header x-user-id");
/// assert_eq!(r.status(), StatusCode::BAD_REQUEST);
/// assert_eq!(r.reason(), "missing header x-user-id");
/// let r = Rejection::new(StatusCode::UNAUTHORIZED, "log in first");
/// assert_eq!(r.status().as_u16(), 401);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rejection {
    status: StatusCode,
    reason: Cow<'static, str>,
}

impl Rejection {
    /// A rejection answered with `status`.
    pub fn new(status: StatusCode, reason: impl Into<Cow<'static, str>>) -> Self {
        Self {
            status,
            reason: reason.into(),
        }
    }

    /// A 400 Bad Request.
    pub fn bad_request(reason: impl Into<Cow<'static, str>>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, reason)
    }

    /// The status of the answer.
    #[must_use]
    pub fn status(&self) -> StatusCode {
        self.status
    }

    /// The reason, sent as the body.
    #[must_use]
    pub fn reason(&self) -> &str {
        &self.reason
    }
}

impl fmt::Display for Rejection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.status, self.reason)
    }
}

impl std::error::Error for Rejection {}

/// The peer address of a connection, put into the request's extensions by the server.
///
/// axum's `ConnectInfo<SocketAddr>` (feature `axum`, on by default) and a bare `SocketAddr`
/// extension are read as well; with hyper alone, insert this (or a `SocketAddr`) in the
/// service that accepts the connection.
///
/// # Examples
///
/// ```
/// use cellgate_http::{peer_addr, PeerAddr};
///
/// let mut req = http::Request::new(());
/// req.extensions_mut().insert(PeerAddr("192.0.2.1:5000".parse().unwrap()));
/// let (parts, ()) = req.into_parts();
/// assert_eq!(peer_addr(&parts), Some("192.0.2.1:5000".parse().unwrap()));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PeerAddr(pub SocketAddr);

/// The peer address found in `parts`' extensions ([`PeerAddr`], axum's `ConnectInfo`, or a
/// `SocketAddr`), `None` when the server put none there.
#[must_use]
pub fn peer_addr(parts: &Parts) -> Option<SocketAddr> {
    if let Some(PeerAddr(a)) = parts.extensions.get::<PeerAddr>() {
        return Some(*a);
    }
    #[cfg(feature = "axum")]
    if let Some(axum::extract::ConnectInfo(a)) = parts
        .extensions
        .get::<axum::extract::ConnectInfo<SocketAddr>>()
    {
        return Some(*a);
    }
    parts.extensions.get::<SocketAddr>().copied()
}

/// The key of requests whose server gave no peer address: `0.0.0.0`, one shared bucket.
///
/// A server that forgets connect info thus limits all its clients together (safe, and
/// visible as soon as two clients share the limit) instead of failing every request.
pub const UNKNOWN_PEER: IpAddr = IpAddr::V4(Ipv4Addr::UNSPECIFIED);

/// Limits by the connection's peer address: IPv4 as is, IPv6 by /64 (see [`ip_key`]),
/// IPv4-mapped IPv6 folded into IPv4.
///
/// **Missing connect info**: when the server put no peer address into the request (axum
/// without `into_make_service_with_connect_info::<SocketAddr>()`), every such request gets
/// the key [`UNKNOWN_PEER`]: they share one limit. Nothing answers 500.
///
/// Behind a reverse proxy every client has the proxy's address: use [`TrustedProxies`].
///
/// # Examples
///
/// ```
/// use std::net::IpAddr;
/// use cellgate_http::{KeyExtractor, PeerAddr, PeerIp};
///
/// let mut req = http::Request::new(());
/// req.extensions_mut().insert(PeerAddr("[2001:db8::7]:443".parse().unwrap()));
/// let (parts, ()) = req.into_parts();
/// assert_eq!(PeerIp::new().extract(&parts)?, "2001:db8::".parse::<IpAddr>().unwrap());
/// assert_eq!(PeerIp::new().v6_prefix(128).extract(&parts)?, "2001:db8::7".parse::<IpAddr>().unwrap());
/// # Ok::<(), cellgate_http::Rejection>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PeerIp {
    v6_prefix: u8,
}

impl PeerIp {
    /// IPv6 grouped by /64.
    #[must_use]
    pub const fn new() -> Self {
        Self { v6_prefix: 64 }
    }

    /// Groups IPv6 addresses by their first `bits` bits instead (128: one key per address).
    #[must_use]
    pub const fn v6_prefix(mut self, bits: u8) -> Self {
        self.v6_prefix = bits;
        self
    }
}

impl Default for PeerIp {
    fn default() -> Self {
        Self::new()
    }
}

impl KeyExtractor for PeerIp {
    type Key = IpAddr;

    fn extract(&self, parts: &Parts) -> Result<IpAddr, Rejection> {
        Ok(match peer_addr(parts) {
            Some(a) => ip_key(a.ip(), self.v6_prefix),
            None => UNKNOWN_PEER,
        })
    }
}

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
/// The key is normalised as by [`PeerIp`] (IPv6 /64, IPv4-mapped folded). Missing connect
/// info: the key is [`UNKNOWN_PEER`], as for [`PeerIp`].
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
/// assert_eq!(proxies.extract(&parts).unwrap(), "203.0.113.9".parse::<IpAddr>().unwrap());
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
    /// A 400 [`Rejection`] when a trusted proxy's header is malformed where it is read.
    pub fn client_ip(&self, parts: &Parts) -> Result<IpAddr, Rejection> {
        let Some(peer) = peer_addr(parts) else {
            return Ok(UNKNOWN_PEER);
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

    fn extract(&self, parts: &Parts) -> Result<IpAddr, Rejection> {
        Ok(ip_key(self.client_ip(parts)?, self.v6_prefix))
    }
}

/// Limits by the value of a request header (a user id, an API key), as a `String`.
///
/// A missing header, one that is not visible ASCII, empty, or longer than the maximum length
/// (128 bytes by default) is a 400 naming the header.
///
/// # Examples
///
/// ```
/// use cellgate_http::{HeaderKey, KeyExtractor};
///
/// let key = HeaderKey::new("x-user-id");
/// let (parts, ()) = http::Request::builder().header("x-user-id", "u42").body(()).unwrap().into_parts();
/// assert_eq!(key.extract(&parts).unwrap(), "u42");
/// let (parts, ()) = http::Request::new(()).into_parts();
/// assert_eq!(key.extract(&parts).unwrap_err().reason(), "missing header x-user-id");
/// ```
#[derive(Debug, Clone)]
pub struct HeaderKey {
    name: HeaderName,
    max_len: usize,
}

impl HeaderKey {
    /// Keys by header `name`.
    ///
    /// # Panics
    ///
    /// If `name` is not a valid header name (a programming error, like a bad literal); use
    /// [`HeaderKey::from_name`] with a parsed name to handle that case.
    #[must_use]
    pub fn new(name: &str) -> Self {
        Self::from_name(HeaderName::from_bytes(name.as_bytes()).expect("a valid header name"))
    }

    /// Keys by header `name`.
    #[must_use]
    pub fn from_name(name: HeaderName) -> Self {
        Self { name, max_len: 128 }
    }

    /// Rejects values longer than `bytes` (each distinct value is a key held in memory).
    #[must_use]
    pub fn max_len(mut self, bytes: usize) -> Self {
        self.max_len = bytes;
        self
    }
}

impl KeyExtractor for HeaderKey {
    type Key = String;

    fn extract(&self, parts: &Parts) -> Result<String, Rejection> {
        let name = &self.name;
        let v = parts
            .headers
            .get(name)
            .ok_or_else(|| Rejection::bad_request(format!("missing header {name}")))?;
        let bytes = v.as_bytes();
        if bytes.is_empty() {
            return Err(Rejection::bad_request(format!("empty header {name}")));
        }
        if bytes.len() > self.max_len {
            return Err(Rejection::bad_request(format!(
                "header {name} longer than {} bytes",
                self.max_len
            )));
        }
        if !bytes.iter().all(|b| b.is_ascii_graphic()) {
            return Err(Rejection::bad_request(format!(
                "header {name} must be visible ASCII without spaces"
            )));
        }
        // Checked above: every byte is visible ASCII.
        Ok(String::from_utf8_lossy(bytes).into_owned())
    }
}

/// One key for every request: a limit on the whole route or service.
///
/// # Examples
///
/// ```
/// use cellgate_http::{Global, KeyExtractor};
///
/// let (parts, ()) = http::Request::new(()).into_parts();
/// assert_eq!(Global.extract(&parts), Ok(()));
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Global;

impl KeyExtractor for Global {
    type Key = ();

    fn extract(&self, _: &Parts) -> Result<(), Rejection> {
        Ok(())
    }
}

/// A closure as a [`KeyExtractor`]; see [`key_fn`].
#[derive(Clone)]
pub struct KeyFn<F>(F);

impl<F> fmt::Debug for KeyFn<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("KeyFn")
    }
}

/// Keys requests by whatever `f` computes from the request head.
///
/// # Examples
///
/// ```
/// use cellgate_http::{key_fn, KeyExtractor, Rejection};
///
/// // Limit by the first path segment ("/tenant-a/orders" -> "tenant-a").
/// let tenant = key_fn(|parts: &http::request::Parts| {
///     let seg = parts.uri.path().trim_start_matches('/').split('/').next().unwrap_or("");
///     if seg.is_empty() { Err(Rejection::bad_request("no tenant in path")) } else { Ok(seg.to_owned()) }
/// });
/// let (parts, ()) = http::Request::builder().uri("/tenant-a/orders").body(()).unwrap().into_parts();
/// assert_eq!(tenant.extract(&parts).unwrap(), "tenant-a");
/// ```
pub fn key_fn<F, K>(f: F) -> KeyFn<F>
where
    F: Fn(&Parts) -> Result<K, Rejection> + Send + Sync + 'static,
    K: Send + 'static,
{
    KeyFn(f)
}

impl<F, K> KeyExtractor for KeyFn<F>
where
    F: Fn(&Parts) -> Result<K, Rejection> + Send + Sync + 'static,
    K: Send + 'static,
{
    type Key = K;

    fn extract(&self, parts: &Parts) -> Result<K, Rejection> {
        (self.0)(parts)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn parts(peer: Option<&str>, headers: &[(&str, &str)]) -> Parts {
        let mut b = http::Request::builder();
        for (k, v) in headers {
            b = b.header(*k, *v);
        }
        let mut req = b.body(()).unwrap();
        if let Some(p) = peer {
            req.extensions_mut().insert(PeerAddr(p.parse().unwrap()));
        }
        req.into_parts().0
    }

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn peer_ip_folds_mapped_and_groups_v6() {
        let p = PeerIp::new();
        assert_eq!(
            p.extract(&parts(Some("[::ffff:1.2.3.4]:9"), &[])),
            Ok(ip("1.2.3.4"))
        );
        assert_eq!(
            p.extract(&parts(Some("[2001:db8::1:2]:9"), &[])),
            Ok(ip("2001:db8::"))
        );
        assert_eq!(p.extract(&parts(None, &[])), Ok(UNKNOWN_PEER));
    }

    #[test]
    fn forwarded_headers_from_untrusted_peers_are_ignored() {
        let t = TrustedProxies::new(["10.0.0.0/8"]).unwrap();
        let p = parts(Some("198.51.100.1:1"), &[("x-forwarded-for", "1.1.1.1")]);
        assert_eq!(t.extract(&p), Ok(ip("198.51.100.1")));
        // Not even parsed: garbage from an untrusted peer is no error either.
        let p = parts(Some("198.51.100.1:1"), &[("x-forwarded-for", "garbage")]);
        assert_eq!(t.extract(&p), Ok(ip("198.51.100.1")));
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
        assert_eq!(t.extract(&p), Ok(ip("203.0.113.5")));
        // Every hop trusted: the left-most.
        let p = parts(
            Some("10.0.0.1:1"),
            &[("x-forwarded-for", "10.9.9.9, 192.168.1.1")],
        );
        assert_eq!(t.extract(&p), Ok(ip("10.9.9.9")));
        // A trusted proxy without the header: the proxy.
        assert_eq!(
            t.extract(&parts(Some("10.0.0.1:1"), &[])),
            Ok(ip("10.0.0.1"))
        );
        // `unknown` behind a trusted proxy: that proxy.
        let p = parts(
            Some("10.0.0.1:1"),
            &[("x-forwarded-for", "1.2.3.4, unknown, 10.0.0.7")],
        );
        assert_eq!(t.extract(&p), Ok(ip("10.0.0.7")));
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
        assert_eq!(t.extract(&p), Ok(ip("2001:db8::")));
        let p = parts(Some("10.0.0.1:1"), &[("forwarded", "for")]);
        assert!(t.extract(&p).is_err());
    }

    #[test]
    fn header_keys_reject_what_cannot_be_a_key() {
        let k = HeaderKey::new("x-user-id").max_len(4);
        assert_eq!(
            k.extract(&parts(None, &[("x-user-id", "abcd")])),
            Ok("abcd".into())
        );
        for (v, why) in [
            ("abcde", "header x-user-id longer than 4 bytes"),
            (
                "a b",
                "header x-user-id must be visible ASCII without spaces",
            ),
            ("", "empty header x-user-id"),
        ] {
            let e = k.extract(&parts(None, &[("x-user-id", v)])).unwrap_err();
            assert_eq!(e.reason(), why);
        }
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
