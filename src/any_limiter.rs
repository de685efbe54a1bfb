//! The one trait every limiter implements, so that code written once (`check_all`, an HTTP
//! layer, the fleet mode, metrics) can drive any of them: check `n` units, peek, charge and
//! give back, reserve, and say what policy it enforces and what its store holds.

use std::time::Duration;

use crate::decision::Decision;
use crate::policy::Policy;
use crate::reservation::Reservation;
use crate::store::stats::Stats;

/// A limiter of keys `K` (`()` for a direct limiter), as code written for any limiter sees it.
///
/// The trait is object safe: `Arc<dyn AnyLimiter<IpAddr> + Send + Sync>` holds any keyed
/// limiter of IP addresses whatever its clock or store, and a `KeyedLimiter<String>` is a
/// `AnyLimiter<str>` (looked up by `&str`, no allocation on a hit). Every method is the
/// limiter's own operation of the same name (see them for the exact semantics), but
/// [`charge_into`](Self::charge_into): `charge` written into the caller's slot. Every limiter
/// implements it: [`Limiter`](crate::Limiter), [`StripedLimiter`](crate::StripedLimiter),
/// [`KeyedLimiter`](crate::KeyedLimiter), [`SlidingLog`](crate::SlidingLog), and the fleet
/// limiters of `cellgate-redis`.
///
/// **One key of a limiter is a limiter too.** A limiter and one of its keys, the pair
/// `(&limiter, &key)`, is a `AnyLimiter` of no key (`AnyLimiter<()>`): that is what
/// [`check_all`](crate::check_all) takes, so that one call mixes limiters of any key and clock
/// types with no allocation (`check_all([(&(&per_user, "alice"), 1), (&global, 1)])`;
/// [`KeyedLimiter::gate`](crate::KeyedLimiter::gate) writes the pair for you).
///
/// # Examples
///
/// ```
/// use std::sync::Arc;
/// use cellgate::{AnyLimiter, KeyedLimiter, Limiter, Quota};
///
/// let per_user: Arc<dyn AnyLimiter<str> + Send + Sync> =
///     Arc::new(KeyedLimiter::<String>::gcra(Quota::per_second(2)).build()?);
/// let global: Arc<dyn AnyLimiter + Send + Sync> = Arc::new(Limiter::stock(3).build()?);
///
/// assert!(per_user.check_n("alice", 2).is_allowed());
/// assert!(!per_user.check_n("alice", 1).is_allowed());
/// assert_eq!(global.peek_n(&(), 0).remaining(), 3);
/// assert_eq!(per_user.policy().limit(), 2);
/// assert_eq!(per_user.store_stats().map(|s| s.keys), Some(1)); // a keyed store's counters
/// assert_eq!(global.store_stats(), None); // one cell: no store
///
/// // Charge, then give back: the stock is whole again.
/// let r = global.charge(&(), 2);
/// assert!(global.cancel(&(), r));
/// assert_eq!(global.peek_n(&(), 0).remaining(), 3);
///
/// // One key of a limiter is a limiter of no key.
/// let alice: &dyn AnyLimiter = &(&*per_user, "alice");
/// assert!(!alice.check_n(&(), 1).is_allowed());
/// # Ok::<(), cellgate::ConfigError>(())
/// ```
pub trait AnyLimiter<K: ?Sized = ()> {
    /// Checks `n` units on `key` and admits them if they fit.
    fn check_n(&self, key: &K, n: u32) -> Decision;

    /// The decision `n` units on `key` would get now, consuming nothing and creating no key.
    fn peek_n(&self, key: &K, n: u32) -> Decision;

    /// A check of `n` units that keeps what [`cancel`](Self::cancel) needs to give them back.
    fn charge(&self, key: &K, n: u32) -> Reservation;

    /// [`charge`](Self::charge), with the reservation written into `slot` (replacing what it
    /// held); returns whether the units were admitted.
    ///
    /// [`check_all`](crate::check_all) charges this way: the limiter writes the reservation
    /// where the caller keeps it, rather than returning it for the caller to copy (a copy of a
    /// 72-byte value the callee has just written waits for those writes to reach the cache, once
    /// per limiter). The default calls `charge`; a wrapper around another limiter forwards it.
    ///
    /// ```
    /// use cellgate::{AnyLimiter, Limiter, Reservation};
    ///
    /// let stock = Limiter::stock(1).build()?;
    /// let mut slot: Option<Reservation> = None;
    /// assert!(stock.charge_into(&(), 1, &mut slot));
    /// assert!(!stock.charge_into(&(), 1, &mut None)); // sold out
    /// if let Some(r) = slot.take() {
    ///     assert!(stock.cancel(r)); // the unit is back
    /// }
    /// assert_eq!(stock.peek().remaining(), 1);
    /// # Ok::<(), cellgate::ConfigError>(())
    /// ```
    fn charge_into(&self, key: &K, n: u32, slot: &mut Option<Reservation>) -> bool {
        slot.insert(self.charge(key, n)).is_allowed()
    }

    /// Gives back what is unspent of `reservation` (from [`charge`](Self::charge) or
    /// [`reserve`](Self::reserve) on the same key); returns whether anything came back.
    fn cancel(&self, key: &K, reservation: Reservation) -> bool;

    /// Reserves `n` units if their turn comes within `max_wait` (a place in a GCRA schedule);
    /// limiters that cannot schedule ahead decide as [`charge`](Self::charge).
    fn reserve(&self, key: &K, n: u32, max_wait: Duration) -> Reservation;

    /// The policy this limiter enforces now (after any runtime quota change).
    fn policy(&self) -> Policy;

    /// The counters of the limiter's key store (keys held, refusals, evictions) for the
    /// limiters that keep one ([`KeyedLimiter`](crate::KeyedLimiter),
    /// [`SlidingLog`](crate::SlidingLog)); `None` (the default) for the others.
    fn store_stats(&self) -> Option<Stats> {
        None
    }
}

/// One key of a limiter, `(&limiter, &key)`, as a limiter of no key: every method is the
/// limiter's on that key. [`check_all`](crate::check_all) takes limiters this way.
impl<L: AnyLimiter<Q> + ?Sized, Q: ?Sized> AnyLimiter for (&L, &Q) {
    #[inline]
    fn check_n(&self, _key: &(), n: u32) -> Decision {
        self.0.check_n(self.1, n)
    }

    #[inline]
    fn peek_n(&self, _key: &(), n: u32) -> Decision {
        self.0.peek_n(self.1, n)
    }

    #[inline]
    fn charge(&self, _key: &(), n: u32) -> Reservation {
        self.0.charge(self.1, n)
    }

    #[inline]
    fn charge_into(&self, _key: &(), n: u32, slot: &mut Option<Reservation>) -> bool {
        self.0.charge_into(self.1, n, slot)
    }

    #[inline]
    fn cancel(&self, _key: &(), reservation: Reservation) -> bool {
        self.0.cancel(self.1, reservation)
    }

    #[inline]
    fn reserve(&self, _key: &(), n: u32, max_wait: Duration) -> Reservation {
        self.0.reserve(self.1, n, max_wait)
    }

    fn policy(&self) -> Policy {
        self.0.policy()
    }

    fn store_stats(&self) -> Option<Stats> {
        self.0.store_stats()
    }
}

/// The reservation a keyed limiter's `charge_into` wrote (it always writes one): their
/// `charge` is their `charge_into`, so that the check's code is instantiated once.
#[inline]
pub(crate) fn filled(slot: Option<Reservation>) -> Reservation {
    slot.unwrap_or_else(|| Reservation::unheld(Decision::NONE))
}

/// `AnyLimiter` for a pointer to a limiter: every method forwards to the pointee.
macro_rules! forward_through {
    ($($pointer:tt)*) => {
        impl<L: AnyLimiter<K> + ?Sized, K: ?Sized> AnyLimiter<K> for $($pointer)* {
            #[inline]
            fn check_n(&self, key: &K, n: u32) -> Decision {
                (**self).check_n(key, n)
            }

            #[inline]
            fn peek_n(&self, key: &K, n: u32) -> Decision {
                (**self).peek_n(key, n)
            }

            #[inline]
            fn charge(&self, key: &K, n: u32) -> Reservation {
                (**self).charge(key, n)
            }

            #[inline]
            fn charge_into(&self, key: &K, n: u32, slot: &mut Option<Reservation>) -> bool {
                (**self).charge_into(key, n, slot)
            }

            #[inline]
            fn cancel(&self, key: &K, reservation: Reservation) -> bool {
                (**self).cancel(key, reservation)
            }

            #[inline]
            fn reserve(&self, key: &K, n: u32, max_wait: Duration) -> Reservation {
                (**self).reserve(key, n, max_wait)
            }

            fn policy(&self) -> Policy {
                (**self).policy()
            }

            fn store_stats(&self) -> Option<Stats> {
                (**self).store_stats()
            }
        }
    };
}

forward_through!(&L);
forward_through!(Box<L>);
forward_through!(std::sync::Arc<L>);

/// A direct limiter's (`$limiter<C>`, no key) `AnyLimiter`: each method is the limiter's
/// inherent operation of the same name (`charge_into` is the trait's default: a direct
/// limiter's charge is small enough to be inlined into it, writing the slot in place).
macro_rules! direct_limiter_traits {
    ($limiter:ident) => {
        impl<C: $crate::clock::Clock> $crate::any_limiter::AnyLimiter for $limiter<C> {
            fn check_n(&self, _key: &(), n: u32) -> $crate::decision::Decision {
                $limiter::check_n(self, n)
            }

            fn peek_n(&self, _key: &(), n: u32) -> $crate::decision::Decision {
                $limiter::peek_n(self, n)
            }

            fn charge(&self, _key: &(), n: u32) -> $crate::reservation::Reservation {
                $limiter::charge(self, n)
            }

            fn cancel(&self, _key: &(), reservation: $crate::reservation::Reservation) -> bool {
                $limiter::cancel(self, reservation)
            }

            fn reserve(
                &self,
                _key: &(),
                n: u32,
                max_wait: std::time::Duration,
            ) -> $crate::reservation::Reservation {
                $limiter::reserve(self, n, max_wait)
            }

            fn policy(&self) -> $crate::policy::Policy {
                $limiter::policy(self)
            }
        }
    };
}
pub(crate) use direct_limiter_traits;

/// A keyed limiter's (`$limiter<K, C>`, looked up by any `&Q` that `K` borrows as)
/// `AnyLimiter<Q>`: each method is the limiter's inherent operation of the same name (`charge`
/// through `charge_into`, which calls the inherent `charge`).
macro_rules! keyed_limiter_traits {
    ($limiter:ident) => {
        impl<K, Q, C> $crate::any_limiter::AnyLimiter<Q> for $limiter<K, C>
        where
            K: std::hash::Hash + Eq + std::borrow::Borrow<Q> + 'static,
            Q: std::hash::Hash + Eq + ToOwned<Owned = K> + ?Sized,
            C: $crate::clock::Clock,
        {
            fn check_n(&self, key: &Q, n: u32) -> $crate::decision::Decision {
                $limiter::check_n(self, key, n)
            }

            fn peek_n(&self, key: &Q, n: u32) -> $crate::decision::Decision {
                $limiter::peek_n(self, key, n)
            }

            fn charge(&self, key: &Q, n: u32) -> $crate::reservation::Reservation {
                let mut slot = None;
                self.charge_into(key, n, &mut slot);
                $crate::any_limiter::filled(slot)
            }

            // Out of line, with the whole check inlined in it: the reservation is written into
            // `slot` by the check itself (see `check_all`), and `charge` above shares this one
            // copy of the check's code.
            #[inline(never)]
            fn charge_into(
                &self,
                key: &Q,
                n: u32,
                slot: &mut Option<$crate::reservation::Reservation>,
            ) -> bool {
                slot.insert($limiter::charge(self, key, n)).is_allowed()
            }

            fn cancel(&self, key: &Q, reservation: $crate::reservation::Reservation) -> bool {
                $limiter::cancel(self, key, reservation)
            }

            fn reserve(
                &self,
                key: &Q,
                n: u32,
                max_wait: std::time::Duration,
            ) -> $crate::reservation::Reservation {
                $limiter::reserve(self, key, n, max_wait)
            }

            fn policy(&self) -> $crate::policy::Policy {
                $limiter::policy(self)
            }

            fn store_stats(&self) -> Option<$crate::store::stats::Stats> {
                Some($limiter::stats(self))
            }
        }
    };
}
pub(crate) use keyed_limiter_traits;
