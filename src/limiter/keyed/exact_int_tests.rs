//! The store of integer keys (`src/store/int_key.rs`) seen from the limiter: the keys of the
//! fingerprints the tables reserve, in the exact and the default store, and which key types
//! take it.

use crate::clock::ManualClock;
use crate::store::keys::Store;
use crate::{KeyedLimiter, Quota};

/// The keys whose mixes are the reserved fingerprints 0 and 1 and the two keys whose
/// mixes are the fingerprints the tables would turn 0 and 1 into (2 and 3) are four keys,
/// each with its own budget: in the exact store and in the default one.
#[test]
fn the_keys_of_the_reserved_fingerprints_keep_their_own_budgets() {
    for exact in [true, false] {
        let b = KeyedLimiter::<u64>::gcra(Quota::per_second(1)).clock(ManualClock::new());
        let l = if exact { b.exact_keys() } else { b }
            .build()
            .expect("valid");
        let Store::Int(tables) = &l.store else {
            panic!("integer keys take the integer store (exact: {exact})");
        };
        let keys: Vec<u64> = (0..4).map(|h| tables.mix.unmix(h)).collect();
        for k in &keys {
            assert!(l.check(k).is_allowed(), "key {k}'s first request");
        }
        for k in &keys {
            assert!(!l.check(k).is_allowed(), "key {k}'s second request");
        }
        assert_eq!(l.len(), 4);
        assert_eq!((tables.ints.len(), tables.rest.table.len()), (2, 2));
        assert_eq!(l.evict_idle(), 0, "all four keys are in debt");
    }
}

#[test]
fn string_keys_keep_the_key_column_or_their_hash() {
    let b = KeyedLimiter::<String>::gcra(Quota::per_second(1));
    assert!(matches!(
        b.clone().exact_keys().build().expect("valid").store,
        Store::Exact(..)
    ));
    assert!(matches!(b.build().expect("valid").store, Store::Grow(..)));
}
