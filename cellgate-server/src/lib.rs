//! cellgate-server: a rate-limit service for every language.
#![forbid(unsafe_code)]
