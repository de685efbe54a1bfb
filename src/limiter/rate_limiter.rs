//! The one trait every limiter implements, so that code written once (an HTTP layer, the fleet
//! mode, metrics) can drive any of them: check `n` units, peek, charge and give back, and say
//! what policy it enforces.

use std::time::Duration;

use crate::admission::gate::Gate;
use crate::admission::reservation::Reservation;
use crate::decision::Decision;
use crate::limiter::policy::Policy;

/// A limiter of keys `K` (`()` for a direct limiter), as boundary code sees it.
///
/// The trait is object safe: `Arc<dyn RateLimiter<IpAddr> + Send + Sync>` holds any keyed
/// limiter of IP addresses whatever its clock or store, and a `KeyedLimiter<String>` is a
/// `RateLimiter<str>` (looked up by `&str`, no allocation on a hit). Every method is the
/// limiter's own operation of the same name; see them for the exact semantics.
///
/// # Examples
///
/// ```
/// use std::sync::Arc;
/// use cellgate::{KeyedLimiter, Limiter, Quota, RateLimiter};
///
/// let per_user: Arc<dyn RateLimiter<str> + Send + Sync> =
///     Arc::new(KeyedLimiter::<String>::gcra(Quota::per_second(2)).build()?);
/// let global: Arc<dyn RateLimiter + Send + Sync> = Arc::new(Limiter::stock(3).build()?);
///
/// assert!(per_user.check_n("alice", 2).is_allowed());
/// assert!(!per_user.check_n("alice", 1).is_allowed());
/// assert_eq!(global.peek_n(&(), 0).remaining(), 3);
/// assert_eq!(per_user.policy().limit(), 2);
///
/// // Charge, then give back: the stock is whole again.
/// let r = global.charge(&(), 2);
/// assert!(global.cancel(&(), r));
/// assert_eq!(global.peek_n(&(), 0).remaining(), 3);
/// # Ok::<(), cellgate::ConfigError>(())
/// ```
pub trait RateLimiter<K: ?Sized = ()> {
    /// Checks `n` units on `key` and admits them if they fit.
    fn check_n(&self, key: &K, n: u32) -> Decision;

    /// The decision `n` units on `key` would get now, consuming nothing and creating no key.
    fn peek_n(&self, key: &K, n: u32) -> Decision;

    /// A check of `n` units that keeps what [`cancel`](Self::cancel) needs to give them back.
    fn charge(&self, key: &K, n: u32) -> Reservation;

    /// Gives back what is unspent of `reservation` (from [`charge`](Self::charge) or
    /// [`reserve`](Self::reserve) on the same key); returns whether anything came back.
    fn cancel(&self, key: &K, reservation: Reservation) -> bool;

    /// Reserves `n` units if their turn comes within `max_wait` (a place in a GCRA schedule);
    /// limiters that cannot schedule ahead decide as [`charge`](Self::charge).
    fn reserve(&self, key: &K, n: u32, max_wait: Duration) -> Reservation;

    /// The policy this limiter enforces now (after any runtime quota change).
    fn policy(&self) -> Policy;
}

/// A [`RateLimiter`] and one of its keys, as a [`Gate`] for [`check_all`](crate::check_all)
/// and [`check_all_in`](crate::check_all_in).
///
/// # Examples
///
/// ```
/// use cellgate::{check_all, Bound, KeyedLimiter, Limiter, Quota, RateLimiter};
///
/// let per_user = KeyedLimiter::<String>::gcra(Quota::per_minute(1)).build()?;
/// let stock = Limiter::stock(10).build()?;
/// let user: &dyn RateLimiter<str> = &per_user;
/// let d = check_all([(&Bound::new(user, "alice"), 1), (&stock, 1)]);
/// assert!(d.is_allowed());
/// # Ok::<(), cellgate::ConfigError>(())
/// ```
pub struct Bound<'a, L: ?Sized, K: ?Sized> {
    limiter: &'a L,
    key: &'a K,
}

impl<'a, L: ?Sized, K: ?Sized> Bound<'a, L, K> {
    /// `key` of `limiter`.
    pub fn new(limiter: &'a L, key: &'a K) -> Self {
        Self { limiter, key }
    }
}

impl<L: ?Sized, K: ?Sized + std::fmt::Debug> std::fmt::Debug for Bound<'_, L, K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Bound").field("key", &self.key).finish()
    }
}

impl<L: RateLimiter<K> + ?Sized, K: ?Sized> Gate for Bound<'_, L, K> {
    fn charge(&self, n: u32) -> Reservation {
        self.limiter.charge(self.key, n)
    }

    fn cancel(&self, reservation: Reservation) -> bool {
        self.limiter.cancel(self.key, reservation)
    }

    fn peek_n(&self, n: u32) -> Decision {
        self.limiter.peek_n(self.key, n)
    }

    fn reserve(&self, n: u32, max_wait: Duration) -> Reservation {
        self.limiter.reserve(self.key, n, max_wait)
    }
}

/// `RateLimiter` for a pointer to a limiter: every method forwards to the pointee.
macro_rules! forward_through {
    ($($pointer:tt)*) => {
        impl<L: RateLimiter<K> + ?Sized, K: ?Sized> RateLimiter<K> for $($pointer)* {
            fn check_n(&self, key: &K, n: u32) -> Decision {
                (**self).check_n(key, n)
            }

            fn peek_n(&self, key: &K, n: u32) -> Decision {
                (**self).peek_n(key, n)
            }

            fn charge(&self, key: &K, n: u32) -> Reservation {
                (**self).charge(key, n)
            }

            fn cancel(&self, key: &K, reservation: Reservation) -> bool {
                (**self).cancel(key, reservation)
            }

            fn reserve(&self, key: &K, n: u32, max_wait: Duration) -> Reservation {
                (**self).reserve(key, n, max_wait)
            }

            fn policy(&self) -> Policy {
                (**self).policy()
            }
        }
    };
}

forward_through!(&L);
forward_through!(std::sync::Arc<L>);

/// A direct limiter's (`$limiter<C>`, no key) `RateLimiter` and `Gate`: each method is the
/// limiter's inherent operation of the same name.
macro_rules! direct_limiter_traits {
    ($limiter:ident) => {
        impl<C: $crate::clock::Clock> $crate::RateLimiter for $limiter<C> {
            fn check_n(&self, _key: &(), n: u32) -> $crate::Decision {
                $limiter::check_n(self, n)
            }

            fn peek_n(&self, _key: &(), n: u32) -> $crate::Decision {
                $limiter::peek_n(self, n)
            }

            fn charge(&self, _key: &(), n: u32) -> $crate::Reservation {
                $limiter::charge(self, n)
            }

            fn cancel(&self, _key: &(), reservation: $crate::Reservation) -> bool {
                $limiter::cancel(self, reservation)
            }

            fn reserve(
                &self,
                _key: &(),
                n: u32,
                max_wait: std::time::Duration,
            ) -> $crate::Reservation {
                $limiter::reserve(self, n, max_wait)
            }

            fn policy(&self) -> $crate::Policy {
                $limiter::policy(self)
            }
        }

        impl<C: $crate::clock::Clock> $crate::Gate for $limiter<C> {
            fn charge(&self, n: u32) -> $crate::Reservation {
                $limiter::charge(self, n)
            }

            fn cancel(&self, reservation: $crate::Reservation) -> bool {
                $limiter::cancel(self, reservation)
            }

            fn peek_n(&self, n: u32) -> $crate::Decision {
                $limiter::peek_n(self, n)
            }

            fn reserve(&self, n: u32, max_wait: std::time::Duration) -> $crate::Reservation {
                $limiter::reserve(self, n, max_wait)
            }
        }
    };
}
pub(crate) use direct_limiter_traits;

/// A keyed limiter's (`$limiter<K, C>`, looked up by any `&Q` that `K` borrows as)
/// `RateLimiter<Q>`: each method is the limiter's inherent operation of the same name.
macro_rules! keyed_limiter_traits {
    ($limiter:ident) => {
        impl<K, Q, C> $crate::RateLimiter<Q> for $limiter<K, C>
        where
            K: std::hash::Hash + Eq + std::borrow::Borrow<Q>,
            Q: std::hash::Hash + Eq + ToOwned<Owned = K> + ?Sized,
            C: $crate::clock::Clock,
        {
            fn check_n(&self, key: &Q, n: u32) -> $crate::Decision {
                $limiter::check_n(self, key, n)
            }

            fn peek_n(&self, key: &Q, n: u32) -> $crate::Decision {
                $limiter::peek_n(self, key, n)
            }

            fn charge(&self, key: &Q, n: u32) -> $crate::Reservation {
                $limiter::charge(self, key, n)
            }

            fn cancel(&self, key: &Q, reservation: $crate::Reservation) -> bool {
                $limiter::cancel(self, key, reservation)
            }

            fn reserve(
                &self,
                key: &Q,
                n: u32,
                max_wait: std::time::Duration,
            ) -> $crate::Reservation {
                $limiter::reserve(self, key, n, max_wait)
            }

            fn policy(&self) -> $crate::Policy {
                $limiter::policy(self)
            }
        }
    };
}
pub(crate) use keyed_limiter_traits;
