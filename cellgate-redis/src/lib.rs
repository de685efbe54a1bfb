//! Fleet mode for cellgate (placeholder; see issue 17).
