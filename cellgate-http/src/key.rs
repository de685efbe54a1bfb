//! Which key a request is limited under: the client's address, a header, one key for all, or
//! anything a closure computes from the request head.

use std::borrow::Cow;
use std::fmt;
use std::net::{IpAddr, SocketAddr};

use http::header::HeaderName;
use http::request::Parts;
use http::StatusCode;

use crate::ip::ip_key;

/// Computes the key a request is limited under from its head, or refuses the request.
///
/// A refusal ([`Rejection`]) is answered as it says (a 400 with its reason, by default), but
/// only once the layer's limits whose keys were extracted admitted the request (and charged
/// it): a request with no user id still meets its per-IP limit, and gets their 429 when they
/// deny it.
///
/// The key is borrowed from the request head where it can be ([`HeaderKey`] lends the
/// header's text: a `KeyedLimiter<String>` is looked up by that `&str`, no allocation), owned
/// where it is computed ([`PeerIp`]'s address). The layer may extract a key more than once
/// for one request (to check, to roll back, to give back after an inner layer's denial), so
/// `extract` must be a function of the head: the same head, the same key.
///
/// # Examples
///
/// ```
/// use std::borrow::Cow;
/// use cellgate_http::{KeyExtractor, Rejection};
/// use http::request::Parts;
///
/// /// The API key, borrowed from its header.
/// struct ApiKey;
///
/// impl KeyExtractor for ApiKey {
///     type Key = str;
///     fn extract<'p>(&self, parts: &'p Parts) -> Result<Cow<'p, str>, Rejection> {
///         let v = parts.headers.get("x-api-key").ok_or(Rejection::bad_request("missing x-api-key"))?;
///         let v = v.to_str().map_err(|_| Rejection::bad_request("x-api-key is not ASCII"))?;
///         Ok(Cow::Borrowed(v))
///     }
/// }
///
/// let (parts, ()) = http::Request::builder().header("x-api-key", "k1").body(()).unwrap().into_parts();
/// assert_eq!(ApiKey.extract(&parts).unwrap(), "k1");
/// ```
pub trait KeyExtractor: Send + Sync + 'static {
    /// What the limiter is looked up by: `IpAddr`, `str` (for a `KeyedLimiter<String>`), `()`
    /// (for a direct limiter), or any type of yours.
    type Key: ?Sized + ToOwned + 'static;

    /// The key of this request, borrowed from `parts` or owned, or why it cannot have one.
    ///
    /// # Errors
    ///
    /// A [`Rejection`] the layer answers instead of calling the service.
    fn extract<'p>(&self, parts: &'p Parts) -> Result<Cow<'p, Self::Key>, Rejection>;
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

/// The answer to a request whose server gave no peer address (axum without
/// `into_make_service_with_connect_info::<SocketAddr>()`): a 500 saying what to fix, and one
/// line on stderr per such request. Never a key: all clients in one shared bucket would look
/// like normal limiting while every client starved every other.
pub(crate) fn missing_peer() -> Rejection {
    const FIX: &str = "no peer address in the request: serve the app with \
        into_make_service_with_connect_info::<SocketAddr>() (axum), or insert PeerAddr in the \
        service that accepts the connection (hyper)";
    eprintln!("cellgate-http: {FIX}; answered 500");
    Rejection::new(
        StatusCode::INTERNAL_SERVER_ERROR,
        "cellgate-http: the server gave no peer address to limit this request by",
    )
}

/// Limits by the connection's peer address: IPv4 as is, IPv6 by /64 (see [`ip_key`]),
/// IPv4-mapped IPv6 folded into IPv4.
///
/// **Missing connect info**: when the server put no peer address into the request (axum
/// without `into_make_service_with_connect_info::<SocketAddr>()`), the request has no key:
/// it is answered `500 Internal Server Error` and one line is written to stderr, never
/// limited in one bucket shared by every client. (The layer's other limits still apply.)
///
/// Behind a reverse proxy every client has the proxy's address: use [`TrustedProxies`](crate::TrustedProxies).
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
/// assert_eq!(*PeerIp::new().extract(&parts)?, "2001:db8::".parse::<IpAddr>().unwrap());
/// assert_eq!(*PeerIp::new().v6_prefix(128).extract(&parts)?, "2001:db8::7".parse::<IpAddr>().unwrap());
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

    fn extract<'p>(&self, parts: &'p Parts) -> Result<Cow<'p, IpAddr>, Rejection> {
        match peer_addr(parts) {
            Some(a) => Ok(Cow::Owned(ip_key(a.ip(), self.v6_prefix))),
            None => Err(missing_peer()),
        }
    }
}

/// Limits by the value of a request header (a user id, an API key): the key is the header's
/// text, borrowed (`str`: use a `KeyedLimiter<String>`, looked up by `&str` without
/// allocating).
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
    type Key = str;

    fn extract<'p>(&self, parts: &'p Parts) -> Result<Cow<'p, str>, Rejection> {
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
        // Checked above: every byte is visible ASCII, so this borrows.
        Ok(String::from_utf8_lossy(bytes))
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
/// assert_eq!(*Global.extract(&parts).unwrap(), ());
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Global;

impl KeyExtractor for Global {
    type Key = ();

    fn extract<'p>(&self, _: &'p Parts) -> Result<Cow<'p, ()>, Rejection> {
        Ok(Cow::Borrowed(&()))
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

/// Keys requests by whatever `f` computes from the request head (an owned key; a
/// [`KeyExtractor`] of your own can lend one from the head instead).
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
/// assert_eq!(*tenant.extract(&parts).unwrap(), "tenant-a");
/// ```
pub fn key_fn<F, K>(f: F) -> KeyFn<F>
where
    F: Fn(&Parts) -> Result<K, Rejection> + Send + Sync + 'static,
    K: Clone + 'static,
{
    KeyFn(f)
}

impl<F, K> KeyExtractor for KeyFn<F>
where
    F: Fn(&Parts) -> Result<K, Rejection> + Send + Sync + 'static,
    K: Clone + 'static,
{
    type Key = K;

    fn extract<'p>(&self, parts: &'p Parts) -> Result<Cow<'p, K>, Rejection> {
        (self.0)(parts).map(Cow::Owned)
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A request head with `headers` and, if given, a peer address (as the connect info).
    pub(crate) fn parts(peer: Option<&str>, headers: &[(&str, &str)]) -> Parts {
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

    pub(crate) fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn peer_ip_folds_mapped_and_groups_v6() {
        let p = PeerIp::new();
        assert_eq!(
            p.extract(&parts(Some("[::ffff:1.2.3.4]:9"), &[])),
            Ok(Cow::Owned(ip("1.2.3.4")))
        );
        assert_eq!(
            p.extract(&parts(Some("[2001:db8::1:2]:9"), &[])),
            Ok(Cow::Owned(ip("2001:db8::")))
        );
        let missing = p.extract(&parts(None, &[])).unwrap_err();
        assert_eq!(missing.status(), StatusCode::INTERNAL_SERVER_ERROR);
    }

    #[test]
    fn header_keys_reject_what_cannot_be_a_key() {
        let k = HeaderKey::new("x-user-id").max_len(4);
        let p = parts(None, &[("x-user-id", "abcd")]);
        assert!(matches!(k.extract(&p), Ok(Cow::Borrowed("abcd"))));
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
}
