//! HTTP support for cellgate (placeholder; see issue 16).
