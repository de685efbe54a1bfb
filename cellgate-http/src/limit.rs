//! One limit of a layer: a name, a key extractor and a limiter, with their types erased so
//! that one layer holds limits of any key and limiter types. Erased, a limit is a limiter of
//! request heads (`AnyLimiter<Parts>`): each operation extracts the key from the head and
//! runs the limiter's operation on it, so that the layer hands its limits and the head to
//! `cellgate::check_all_reserving` as they are, with no key boxed and no adapter between.

use std::fmt;
use std::hash::{Hash, Hasher};
use std::sync::Arc;
use std::time::Duration;

use cellgate::{AnyLimiter, Decision, Policy, Reservation, Stats};
use http::request::Parts;

use crate::key::{KeyExtractor, Rejection};
use crate::partition::PartitionSecret;

/// One limit a request must pass: a name (for headers, the 429 and metrics), how to find the
/// key, the limiter, and how many units a request costs (1 by default).
///
/// Any [`AnyLimiter`] over the extractor's key type works, through that trait alone:
/// `KeyedLimiter<IpAddr>` for [`PeerIp`](crate::PeerIp), `KeyedLimiter<String>` (a
/// `AnyLimiter<str>`) for [`HeaderKey`](crate::HeaderKey), a direct `Limiter` or a
/// `StripedLimiter` for [`Global`](crate::Global), a `SlidingLog`, the fleet limiters of
/// `cellgate-redis`, or a limiter of your own; pass an `Arc` to keep a handle on the limiter.
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
        L: AnyLimiter<E::Key> + Send + Sync + 'static,
    {
        Self {
            name: name.into().into(),
            cost: 1,
            imp: Arc::new(Typed { extractor, limiter }),
            partition_key: None,
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

    /// The counters of the limiter's key store (keys held, refusals, evictions), read through
    /// [`AnyLimiter::store_stats`]: `None` for a limiter without one (a direct limiter). The
    /// metrics (feature `metrics`) publish them.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::net::IpAddr;
    /// use cellgate::{KeyedLimiter, Limiter, Quota};
    /// use cellgate_http::{Global, Limit, PeerIp};
    ///
    /// let per_ip = Limit::new("per-ip", PeerIp::new(), KeyedLimiter::<IpAddr>::gcra(Quota::per_second(5)).build()?);
    /// assert_eq!(per_ip.stats().map(|s| s.keys), Some(0));
    /// let global = Limit::new("global", Global, Limiter::gcra(Quota::per_second(5)).build()?);
    /// assert_eq!(global.stats(), None);
    /// # Ok::<(), cellgate::ConfigError>(())
    /// ```
    #[must_use]
    pub fn stats(&self) -> Option<Stats> {
        self.imp.store_stats()
    }

    /// The policy the limiter enforces now.
    #[must_use]
    pub fn policy(&self) -> Policy {
        self.imp.policy()
    }
}

/// What the layer keeps of a request's key for one limit: its fingerprint (to give a charge
/// back only to the key that was charged) and, for a limit that writes one, its partition
/// key.
#[derive(Clone, Copy)]
pub(crate) struct Mark {
    pub(crate) fingerprint: u64,
    pub(crate) partition: Option<u64>,
}

/// A limit with its key and limiter types erased, so one layer holds limits of any types: a
/// limiter of request heads (each operation finds the key in the head), plus what the layer
/// needs beside the operations.
pub(crate) trait ErasedLimit: AnyLimiter<Parts> + Send + Sync {
    /// This limit as the limiter of request heads that `check_all_reserving` takes.
    fn limiter(&self) -> &dyn AnyLimiter<Parts>;
    /// The key's [`Mark`] (its partition key hashed under `secret` if given), or why the
    /// request has no key.
    fn mark(&self, parts: &Parts, secret: Option<&PartitionSecret>) -> Result<Mark, Rejection>;
    /// Gives `reservation` back to the key found in `parts` if it is the key that was charged
    /// (the same `fingerprint`); an inner layer's denial hands the head back to the layers
    /// around it, and what ran in between may have changed it: then nothing is given back.
    fn give_back(&self, parts: &Parts, fingerprint: u64, reservation: Reservation) -> bool;
}

struct Typed<E, L> {
    extractor: E,
    limiter: L,
}

/// A request whose key an extractor found once and not again (an extractor that is not a
/// function of the head): refused, charging nothing.
const NO_KEY: Decision = Decision::NONE;

impl<E, L> AnyLimiter<Parts> for Typed<E, L>
where
    E: KeyExtractor,
    L: AnyLimiter<E::Key>,
{
    fn check_n(&self, parts: &Parts, n: u32) -> Decision {
        match self.extractor.extract(parts) {
            Ok(key) => self.limiter.check_n(&key, n),
            Err(_) => NO_KEY,
        }
    }

    fn peek_n(&self, parts: &Parts, n: u32) -> Decision {
        match self.extractor.extract(parts) {
            Ok(key) => self.limiter.peek_n(&key, n),
            Err(_) => NO_KEY,
        }
    }

    fn charge(&self, parts: &Parts, n: u32) -> Reservation {
        match self.extractor.extract(parts) {
            Ok(key) => self.limiter.charge(&key, n),
            Err(_) => Reservation::unheld(NO_KEY),
        }
    }

    fn charge_into(&self, parts: &Parts, n: u32, slot: &mut Option<Reservation>) -> bool {
        match self.extractor.extract(parts) {
            Ok(key) => self.limiter.charge_into(&key, n, slot),
            Err(_) => slot.insert(Reservation::unheld(NO_KEY)).is_allowed(),
        }
    }

    fn cancel(&self, parts: &Parts, reservation: Reservation) -> bool {
        match self.extractor.extract(parts) {
            Ok(key) => self.limiter.cancel(&key, reservation),
            Err(_) => false,
        }
    }

    fn reserve(&self, parts: &Parts, n: u32, max_wait: Duration) -> Reservation {
        match self.extractor.extract(parts) {
            Ok(key) => self.limiter.reserve(&key, n, max_wait),
            Err(_) => Reservation::unheld(NO_KEY),
        }
    }

    fn policy(&self) -> Policy {
        self.limiter.policy()
    }

    fn store_stats(&self) -> Option<Stats> {
        self.limiter.store_stats()
    }
}

impl<E, L> ErasedLimit for Typed<E, L>
where
    E: KeyExtractor,
    E::Key: Hash,
    L: AnyLimiter<E::Key> + Send + Sync,
{
    fn limiter(&self) -> &dyn AnyLimiter<Parts> {
        self
    }

    fn mark(&self, parts: &Parts, secret: Option<&PartitionSecret>) -> Result<Mark, Rejection> {
        let key = self.extractor.extract(parts)?;
        Ok(Mark {
            fingerprint: fingerprint(&*key),
            partition: secret.map(|s| s.hash_one(&*key)),
        })
    }

    fn give_back(&self, parts: &Parts, fingerprint_was: u64, reservation: Reservation) -> bool {
        match self.extractor.extract(parts) {
            Ok(key) if fingerprint(&*key) == fingerprint_was => {
                self.limiter.cancel(&key, reservation)
            }
            _ => false,
        }
    }
}

/// A 64-bit FNV-1a hash of what `key`'s `Hash` writes: cheap, and only ever compared with
/// another fingerprint of a key of the same limit (no table is built on it, so it needs no
/// secret against flooding).
fn fingerprint<K: Hash + ?Sized>(key: &K) -> u64 {
    let mut h = Fnv(0xcbf2_9ce4_8422_2325);
    key.hash(&mut h);
    h.0
}

struct Fnv(u64);

impl Hasher for Fnv {
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0 ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
        }
    }

    fn finish(&self) -> u64 {
        self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::key::tests::parts;
    use crate::{HeaderKey, PeerIp};
    use cellgate::{KeyedLimiter, Quota};

    #[test]
    fn a_charge_goes_back_only_to_the_key_that_was_charged() {
        let l = Arc::new(
            KeyedLimiter::<String>::gcra(Quota::per_minute(5))
                .build()
                .unwrap(),
        );
        let limit = Limit::new("per-user", HeaderKey::new("x-user-id"), l.clone());
        let alice = parts(None, &[("x-user-id", "alice")]);
        let bob = parts(None, &[("x-user-id", "bob")]);
        let mark = limit.imp.mark(&alice, None).unwrap();
        let r = limit.imp.charge(&alice, 2);
        assert_eq!(l.peek("alice").remaining(), 3);
        // The head came back with another key: nothing goes to bob, alice stays charged.
        assert!(!limit.imp.give_back(&bob, mark.fingerprint, r.clone()));
        assert_eq!(
            (l.peek("alice").remaining(), l.peek("bob").remaining()),
            (3, 5)
        );
        // With no key at all: nothing either.
        assert!(!limit
            .imp
            .give_back(&parts(None, &[]), mark.fingerprint, r.clone()));
        assert!(limit.imp.give_back(&alice, mark.fingerprint, r));
        assert_eq!(l.peek("alice").remaining(), 5);
    }

    #[test]
    fn a_head_without_a_key_is_refused_and_charges_nothing() {
        let l = Arc::new(
            KeyedLimiter::<std::net::IpAddr>::gcra(Quota::per_minute(5))
                .build()
                .unwrap(),
        );
        let limit = Limit::new("per-ip", PeerIp::new(), l.clone());
        let head = parts(None, &[]);
        assert!(!limit.imp.charge(&head, 1).is_allowed());
        assert!(!limit.imp.check_n(&head, 1).is_allowed());
        let mut slot = None;
        assert!(!limit.imp.charge_into(&head, 1, &mut slot));
        assert_eq!(
            slot.as_ref().map(Reservation::units),
            Some(0),
            "nothing to give back"
        );
        assert_eq!(l.len(), 0);
        // With a key, what `check_all` writes is a reservation that gives the units back.
        let alice = parts(Some("10.0.0.1:4000"), &[]);
        assert!(limit.imp.charge_into(&alice, 2, &mut slot));
        assert_eq!(slot.as_ref().map(Reservation::units), Some(2));
        assert!(slot.is_some_and(|r| limit.imp.cancel(&alice, r)));
        assert_eq!(l.peek(&crate::key::tests::ip("10.0.0.1")).remaining(), 5);
    }
}
