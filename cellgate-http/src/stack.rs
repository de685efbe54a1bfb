//! Stacked cellgate layers, all or nothing, at no cost to an admitted request.
//!
//! A layer that admits a request keeps what it charged (per limit, the key's fingerprint and
//! the reservation: [`Charges`], in place for up to [`INLINE`] limits) in the request's
//! response future, and nothing anywhere else. A layer that denies a request puts the request
//! head in its 429's extensions ([`Denied`]). On the way out, each layer around it finds that
//! marker on the response and gives back its own charges, to the keys it finds in that head
//! (checked against the fingerprints, so that a head changed in between gets nothing).
//!
//! The future needs the layer's limits to give back, but holding a clone of the layer's
//! `Arc` would write one shared reference count per request. It holds the layer's id instead,
//! and only a give-back looks the layer up: in its thread's list of layers seen, else in the
//! process's list (a lock), whose entry the layer removes when it is dropped.

use std::cell::RefCell;
use std::sync::{Arc, Weak};

use cellgate::Reservation;
use http::request::Parts;

use crate::sync::registry::Registry;

/// Limits per layer whose charges an admitted request keeps in place (more: on the heap).
pub(crate) const INLINE: usize = 8;

/// The marker on a cellgate layer's denial: the head of the request it denied.
#[derive(Clone)]
pub(crate) struct Denied(pub(crate) Parts);

/// What one limit charged for a request: the key's fingerprint and the reservation.
pub(crate) type Charge = Option<(u64, Reservation)>;

/// What a layer charged for one request, per limit (in the layer's order): inline up to
/// eight limits, so that an admitted request allocates nothing (the size is the point).
#[allow(clippy::large_enum_variant)]
pub(crate) enum Charges {
    Inline([Charge; INLINE]),
    Heap(Vec<Charge>),
}

impl Charges {
    /// Room for `limits` charges, none made.
    pub(crate) fn new(limits: usize) -> Self {
        if limits <= INLINE {
            Charges::Inline([const { None }; INLINE])
        } else {
            Charges::Heap(vec![None; limits])
        }
    }

    pub(crate) fn slots(&mut self) -> &mut [Charge] {
        match self {
            Charges::Inline(a) => a,
            Charges::Heap(v) => v,
        }
    }
}

/// A layer as the give-back sees it.
pub(crate) trait GiveBack: Send + Sync {
    /// Gives back `charges` (this layer's, for the request whose head is `head`).
    fn give_back(&self, head: &Parts, charges: Charges);
}

type Entry = (u64, Weak<dyn GiveBack>);

/// The live layers of the process, under their ids.
static LAYERS: Registry<Weak<dyn GiveBack>> = Registry::new();

thread_local! {
    /// The layers this thread has given back to.
    static SEEN: RefCell<Vec<Entry>> = const { RefCell::new(Vec::new()) };
}

/// A layer's place in the process's list; dropping it (with the layer) takes it out.
pub(crate) struct Registration(pub(crate) u64);

/// Puts `layer` in the process's list.
pub(crate) fn register(layer: Weak<dyn GiveBack>) -> Registration {
    Registration(LAYERS.insert(layer))
}

impl Drop for Registration {
    fn drop(&mut self) {
        LAYERS.remove(self.0);
    }
}

/// The layer `id`, if it still lives.
pub(crate) fn find(id: u64) -> Option<Arc<dyn GiveBack>> {
    SEEN.with(|seen| {
        let mut seen = seen.borrow_mut();
        if let Some((_, w)) = seen.iter().find(|(i, _)| *i == id) {
            if let Some(layer) = w.upgrade() {
                return Some(layer);
            }
        }
        // Not seen here yet, or gone: forget the dropped layers, ask the process's list.
        seen.retain(|(_, w)| w.strong_count() > 0);
        let weak = LAYERS.get(id)?;
        let layer = weak.upgrade()?;
        seen.push((id, weak));
        Some(layer)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    struct Counting(AtomicUsize);

    impl GiveBack for Counting {
        fn give_back(&self, _: &Parts, _: Charges) {
            self.0.fetch_add(1, Ordering::Relaxed);
        }
    }

    #[test]
    fn a_layer_is_found_while_it_lives_and_not_after() {
        let layer = Arc::new(Counting(AtomicUsize::new(0)));
        let weak: Weak<dyn GiveBack> = Arc::downgrade(&layer) as Weak<dyn GiveBack>;
        let reg = register(weak);
        let id = reg.0;
        let head = http::Request::new(()).into_parts().0;
        for _ in 0..2 {
            find(id)
                .expect("a live layer")
                .give_back(&head, Charges::new(1));
        }
        // From another thread too (its own list starts empty).
        std::thread::scope(|s| {
            s.spawn(|| {
                find(id)
                    .expect("a live layer")
                    .give_back(&head, Charges::new(9));
            });
        });
        assert_eq!(layer.0.load(Ordering::Relaxed), 3);
        drop(layer);
        assert!(find(id).is_none());
        drop(reg);
        assert!(find(id).is_none());
    }
}
