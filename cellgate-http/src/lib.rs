//! # cellgate-http
//!
//! A [tower](https://docs.rs/tower) layer that puts [cellgate] limits in front of HTTP
//! handlers (axum 0.8, hyper 1, anything tower): per client IP behind your proxies, per user,
//! per route, a flash-sale stock, several at once, all or nothing, with the IETF `RateLimit`
//! fields on every response.
//!
//! | what | items |
//! |---|---|
//! | the layer | [`RateLimitLayer`] ([`per_ip`](RateLimitLayer::per_ip), [`builder`](RateLimitLayer::builder)), [`Limit`], [`RateLimit`] (the service), [`LimitBody`] |
//! | keys | [`KeyExtractor`], [`Rejection`]; [`PeerIp`], [`TrustedProxies`], [`HeaderKey`], [`Global`], [`key_fn`] |
//! | addresses | [`PeerAddr`], [`peer_addr`], [`Cidr`], [`ip_key`], [`fold_mapped`] |
//! | headers | [`HeaderDraft`], [`ceil_secs`], [`retry_after_secs`] |
//! | metrics (feature `metrics`) | `MetricsHandle` from `RateLimitLayer::metrics` |
//!
//! ## Quick start: per-IP limits on an axum app
//!
//! ```no_run
//! use std::net::SocketAddr;
//! use axum::{routing::get, Router};
//! use cellgate::Quota;
//! use cellgate_http::RateLimitLayer;
//!
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! let app = Router::new()
//!     .route("/", get(|| async { "hello" }))
//!     .layer(RateLimitLayer::per_ip(Quota::per_second(10))?);
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:3000").await?;
//! axum::serve(listener, app.into_make_service_with_connect_info::<SocketAddr>()).await?;
//! # Ok(()) }
//! ```
//!
//! Without `into_make_service_with_connect_info`, no request has a peer address: each is
//! answered 500 with one line on stderr saying what to fix, never limited in one bucket shared
//! by every client (see [`PeerIp`]); behind a reverse proxy use [`TrustedProxies`].
//!
//! ## What a response says
//!
//! ```text
//! HTTP/1.1 429 Too Many Requests
//! ratelimit-policy: "per-ip";q=10;w=1
//! ratelimit: "per-ip";r=0;t=1
//! retry-after: 1
//! cache-control: no-store
//!
//! rate limited by policy "per-ip"; see Retry-After
//! ```
//!
//! `t` of a denying policy is its wait rounded up, `Retry-After` the longest of those (so never
//! earlier than any `t`), at least 1 for any wait, and absent when no wait helps (a sold-out
//! stock, a request larger than the limit). For an admitted request `t` is the time until the
//! key is back to a fresh state; a stock, which never refills, has no `w` and no `t`.
//! [`Limit::partition_key`] adds `pk=:..:` (a keyed hash of the key, never the key itself).
//!
//! A gRPC call (`content-type: application/grpc...`) that is denied gets a gRPC answer instead
//! of the 429: HTTP 200 with `grpc-status: 8` (RESOURCE_EXHAUSTED), `grpc-message`, the same
//! fields, and no body ([`RateLimitBuilder::grpc`]).
#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod admit;
mod body;
mod headers;
mod ip;
mod key;
mod layer;
mod limit;
#[cfg(feature = "metrics")]
mod metrics;
mod partition;
mod proxy;
mod stack;
mod sync;

pub use body::LimitBody;
pub use headers::{ceil_secs, retry_after_secs, FieldNames, HeaderDraft};
pub use ip::{fold_mapped, ip_key, Cidr, CidrError};
pub use key::{
    key_fn, peer_addr, Global, HeaderKey, KeyExtractor, KeyFn, PeerAddr, PeerIp, Rejection,
};
pub use layer::{BuildError, RateLimit, RateLimitBuilder, RateLimitLayer, ResponseFuture};
pub use limit::Limit;
#[cfg(feature = "metrics")]
#[doc(hidden)]
pub use metrics::BenchRecording;
#[cfg(feature = "metrics")]
pub use metrics::MetricsHandle;
pub use proxy::{ForwardHeader, TrustedProxies};

/// The README's examples, compiled as doctests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
