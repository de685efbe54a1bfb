//! The fleet builders' plain setters, written once: each takes a value, stores it (or a value
//! made from it) in one field, and hands the builder back.

/// Builder methods `name(arg: T) -> Self` that set `field = value` (an expression of `arg`),
/// each with its own docs.
macro_rules! setters {
    ($($(#[$attr:meta])* $name:ident($arg:ident: $ty:ty) => $field:ident = $value:expr;)*) => {
        $(
            $(#[$attr])*
            pub fn $name(mut self, $arg: $ty) -> Self {
                self.$field = $value;
                self
            }
        )*
    };
}

pub(crate) use setters;
