//! One limit of a layer: a name, a key extractor and a limiter, with their types erased so
//! that one layer holds limits of any key and limiter types.

use std::any::Any;
use std::fmt;
use std::hash::Hash;
use std::sync::Arc;

use cellgate::{Decision, Gate, Policy, RateLimiter, Reservation};
use http::request::Parts;

use crate::key::{KeyExtractor, Rejection};
use crate::partition::PartitionSecret;

/// One limit a request must pass: a name (for headers, the 429 and metrics), how to find the
/// key, the limiter, and how many units a request costs (1 by default).
///
/// Any [`RateLimiter`] over the extractor's key type works: `KeyedLimiter<IpAddr>` for
/// [`PeerIp`](crate::PeerIp), `KeyedLimiter<String>` for [`HeaderKey`](crate::HeaderKey), a direct `Limiter`
/// for [`Global`](crate::Global); pass an `Arc` to keep a handle on the limiter.
///
/// # Examples
///
/// ```
/// use std::net::IpAddr;
/// use cellgate::{KeyedLimiter, Quota};
/// use cellgate_http::{Limit, PeerIp};
///
/// let per_ip = Limit::new("per-ip", PeerIp::new(), KeyedLimiter::<IpAddr>::gcra(Quota::per_second(10)).build()?);
/// let heavy = per_ip.clone().cost(5);
/// assert_eq!(heavy.name(), "per-ip");
/// # Ok::<(), cellgate::ConfigError>(())
/// ```
#[derive(Clone)]
pub struct Limit {
    pub(crate) name: Arc<str>,
    pub(crate) cost: u32,
    pub(crate) imp: Arc<dyn ErasedLimit>,
    /// The secret the partition key is hashed with; `None`: no partition key in the headers.
    pub(crate) partition_key: Option<PartitionSecret>,
    #[cfg(feature = "metrics")]
    stats: Option<crate::metrics::StatsFn>,
}

impl fmt::Debug for Limit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Limit")
            .field("name", &self.name)
            .field("cost", &self.cost)
            .field("partition_key", &self.partition_key.is_some())
            .field("policy", &self.imp.policy())
            .finish()
    }
}

impl Limit {
    /// A limit called `name` (printable ASCII; checked by [`RateLimitBuilder::build`](crate::RateLimitBuilder::build)) keyed
    /// by `extractor` on `limiter`. The key is hashed only for
    /// [`partition_key`](Self::partition_key).
    pub fn new<E, L>(name: impl Into<String>, extractor: E, limiter: L) -> Self
    where
        E: KeyExtractor,
        E::Key: Hash,
        L: RateLimiter<E::Key> + Send + Sync + 'static,
    {
        Self {
            name: name.into().into(),
            cost: 1,
            imp: Arc::new(Typed { extractor, limiter }),
            partition_key: None,
            #[cfg(feature = "metrics")]
            stats: None,
        }
    }

    /// Adds the partition key to this limit's `RateLimit` member: `"name";r=..;t=..;pk=:..:`,
    /// so that a client can tell which of its requests share a quota (the draft's `pk`).
    ///
    /// The value is not the key itself but 8 bytes of a keyed hash of it (SipHash-2-4 of what
    /// the key's `Hash` writes, under a random 128-bit secret drawn here and shared by the
    /// clones of this limit), as a structured-field byte sequence. Keys are client addresses
    /// and user ids: written raw, they would reach logs, caches and proxies along the way, and
    /// an unkeyed hash of an IPv4 address is reversed by trying all 2^32 of them. The value is
    /// stable for as long as the limit lives, which is as long as the partition's state does
    /// (an in-process limit starts afresh on restart); two instances of a service give
    /// different values for the same key, as their limits are different partitions. For a
    /// limit shared across instances (a fleet limit), use
    /// [`partition_key_secret`](Self::partition_key_secret). Off by default; it costs a hash
    /// of the key per request.
    ///
    /// # Examples
    ///
    /// ```
    /// use cellgate::{KeyedLimiter, Quota};
    /// use cellgate_http::{HeaderKey, Limit};
    ///
    /// let per_user = Limit::new(
    ///     "per-user",
    ///     HeaderKey::new("x-user-id"),
    ///     KeyedLimiter::<String>::gcra(Quota::per_second(5)).build()?,
    /// )
    /// .partition_key();
    /// // Responses then carry e.g. `ratelimit: "per-user";r=4;t=1;pk=:o2Vc1x3nN0k=:`.
    /// # Ok::<(), cellgate::ConfigError>(())
    /// ```
    #[must_use]
    pub fn partition_key(mut self) -> Self {
        self.partition_key = Some(PartitionSecret::random());
        self
    }

    /// [`partition_key`](Self::partition_key) under a secret of your own: the same key gets
    /// the same `pk` in every process built with the same secret and the same Rust release
    /// (what a key's `Hash` writes may change between releases), as a limit shared by a
    /// fleet of instances should. Keep the secret as secret as the keys: with it, a key
    /// from a small space (an IPv4 address) is found from its `pk` by trying them all.
    ///
    /// # Examples
    ///
    /// ```
    /// use cellgate::{KeyedLimiter, Quota};
    /// use cellgate_http::{HeaderKey, Limit};
    ///
    /// let secret: [u8; 16] = *b"load me from env"; // e.g. from your secret store
    /// let per_user = Limit::new(
    ///     "per-user",
    ///     HeaderKey::new("x-user-id"),
    ///     KeyedLimiter::<String>::gcra(Quota::per_second(5)).build()?,
    /// )
    /// .partition_key_secret(secret);
    /// # Ok::<(), cellgate::ConfigError>(())
    /// ```
    #[must_use]
    pub fn partition_key_secret(mut self, secret: [u8; 16]) -> Self {
        self.partition_key = Some(PartitionSecret::from_bytes(secret));
        self
    }

    /// Each request costs `units` (a check of `n` units).
    #[must_use]
    pub fn cost(mut self, units: u32) -> Self {
        self.cost = units;
        self
    }

    /// The name.
    #[must_use]
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The units each request costs.
    #[must_use]
    pub fn cost_per_request(&self) -> u32 {
        self.cost
    }

    /// Where the metrics read the limiter's keys held, refusals and evictions (feature
    /// `metrics`); read at publish time only.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::{net::IpAddr, sync::Arc};
    /// use cellgate::{KeyedLimiter, Quota};
    /// use cellgate_http::{KeyStats, Limit, PeerIp};
    ///
    /// let l = Arc::new(KeyedLimiter::<IpAddr>::gcra(Quota::per_second(5)).build()?);
    /// let stats = l.clone();
    /// let limit = Limit::new("per-ip", PeerIp::new(), l).stats(move || KeyStats::of(&stats));
    /// # Ok::<(), cellgate::ConfigError>(())
    /// ```
    #[cfg(feature = "metrics")]
    #[must_use]
    pub fn stats(
        mut self,
        f: impl Fn() -> crate::metrics::KeyStats + Send + Sync + 'static,
    ) -> Self {
        self.stats = Some(Arc::new(f));
        self
    }

    #[cfg(feature = "metrics")]
    pub(crate) fn stats_fn(&self) -> Option<&crate::metrics::StatsFn> {
        self.stats.as_ref()
    }

    /// The policy the limiter enforces now.
    #[must_use]
    pub fn policy(&self) -> Policy {
        self.imp.policy()
    }
}

/// A key one limit extracted from a request, its type erased: kept with the request's
/// admission (see `admit::Admitted`) so that an inner layer's denial can give the charge back.
pub(crate) type AnyKey = Box<dyn Any + Send + Sync>;

/// A limit with its key and limiter types erased, so one layer can hold limits of any types.
/// The key-taking methods are given only keys that this limit's own [`key`](Self::key)
/// extracted.
pub(crate) trait ErasedLimit: Send + Sync {
    fn key(&self, parts: &Parts) -> Result<AnyKey, Rejection>;
    /// The key hashed under the partition key's secret, for limits that write one.
    fn hash_key(&self, key: &AnyKey, secret: &PartitionSecret) -> u64;
    fn charge(&self, key: &AnyKey, n: u32) -> Reservation;
    fn cancel(&self, key: &AnyKey, reservation: Reservation) -> bool;
    fn peek_n(&self, key: &AnyKey, n: u32) -> Decision;
    fn reserve(&self, key: &AnyKey, n: u32, max_wait: std::time::Duration) -> Reservation;
    fn policy(&self) -> Policy;
}

struct Typed<E, L> {
    extractor: E,
    limiter: L,
}

impl<E: KeyExtractor, L> Typed<E, L> {
    /// `key` as this limit's key type.
    fn typed(key: &AnyKey) -> &E::Key {
        // Every key given here came from this limit's `key` (see `ErasedLimit`).
        key.downcast_ref()
            .expect("a key extracted by this limit's own extractor")
    }
}

impl<E, L> ErasedLimit for Typed<E, L>
where
    E: KeyExtractor,
    E::Key: Hash,
    L: RateLimiter<E::Key> + Send + Sync,
{
    fn key(&self, parts: &Parts) -> Result<AnyKey, Rejection> {
        Ok(Box::new(self.extractor.extract(parts)?))
    }

    fn hash_key(&self, key: &AnyKey, secret: &PartitionSecret) -> u64 {
        secret.hash_one(Self::typed(key))
    }

    fn charge(&self, key: &AnyKey, n: u32) -> Reservation {
        self.limiter.charge(Self::typed(key), n)
    }

    fn cancel(&self, key: &AnyKey, reservation: Reservation) -> bool {
        self.limiter.cancel(Self::typed(key), reservation)
    }

    fn peek_n(&self, key: &AnyKey, n: u32) -> Decision {
        self.limiter.peek_n(Self::typed(key), n)
    }

    fn reserve(&self, key: &AnyKey, n: u32, max_wait: std::time::Duration) -> Reservation {
        self.limiter.reserve(Self::typed(key), n, max_wait)
    }

    fn policy(&self) -> Policy {
        self.limiter.policy()
    }
}

/// One limit and the key a request has for it, as a [`Gate`].
pub(crate) struct KeyGate<'a> {
    pub(crate) limit: &'a dyn ErasedLimit,
    pub(crate) key: &'a AnyKey,
}

impl Gate for KeyGate<'_> {
    fn charge(&self, n: u32) -> Reservation {
        self.limit.charge(self.key, n)
    }

    fn cancel(&self, reservation: Reservation) -> bool {
        self.limit.cancel(self.key, reservation)
    }

    fn peek_n(&self, n: u32) -> Decision {
        self.limit.peek_n(self.key, n)
    }

    fn reserve(&self, n: u32, max_wait: std::time::Duration) -> Reservation {
        self.limit.reserve(self.key, n, max_wait)
    }
}
