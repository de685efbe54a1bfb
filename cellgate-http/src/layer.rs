//! The builder, the tower [`Layer`] and its [`Service`]: the service hands each request head to
//! the admission (`admit.rs`), then either answers with what it built (a 429, a 400) or calls
//! the inner service and adds the RateLimit fields to its response.

use std::fmt;
use std::future::Future;
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll};

use bytes::Bytes;
use cellgate::{KeyedLimiter, Quota};
use http::{Method, Request, Response};
use pin_project_lite::pin_project;
use tower_layer::Layer;
use tower_service::Service;

use crate::admit::{Admission, Config, ExtraHeaders, Shared};
use crate::body::LimitBody;
use crate::stack::{register, Charges, Denied, GiveBack};

use crate::headers::{valid_policy_name, HeaderDraft};
use crate::key::PeerIp;
use crate::limit::Limit;

/// What is wrong with a layer's configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum BuildError {
    /// A limit's name is empty or not printable ASCII (it goes into header values).
    BadName(String),
    /// Two limits have the same name (the headers could not tell them apart).
    DuplicateName(String),
}

impl fmt::Display for BuildError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BuildError::BadName(n) => {
                write!(f, "limit name {n:?} must be non-empty printable ASCII")
            }
            BuildError::DuplicateName(n) => write!(f, "two limits are named {n:?}"),
        }
    }
}

impl std::error::Error for BuildError {}

/// Configures a [`RateLimitLayer`]; from [`RateLimitLayer::builder`].
#[derive(Debug, Clone)]
pub struct RateLimitBuilder {
    pub(crate) config: Config,
}

impl RateLimitBuilder {
    /// Whether to count decisions for [`RateLimitLayer::metrics`] (feature `metrics`; on by
    /// default). Off, a check pays a test and a few instructions.
    #[cfg(feature = "metrics")]
    #[must_use]
    pub fn metrics(mut self, on: bool) -> Self {
        self.config.metrics = on;
        self
    }

    /// Adds a limit. A request is admitted only if every limit admits it, and then charged on
    /// every one; a denial by one charges none (`cellgate::check_all_in`). Put the limit most
    /// likely to deny first: the others are then not charged and rolled back.
    #[must_use]
    pub fn limit(mut self, limit: Limit) -> Self {
        self.config.limits.push(limit);
        self
    }

    /// Whether `OPTIONS` requests (CORS preflights) pass without a check; `true` by default.
    #[must_use]
    pub fn skip_options(mut self, skip: bool) -> Self {
        self.config.skip_options = skip;
        self
    }

    /// Which revision of the IETF fields to write; `None` writes none of them. Default:
    /// [`HeaderDraft::Ietf11`].
    #[must_use]
    pub fn draft(mut self, draft: Option<HeaderDraft>) -> Self {
        self.config.draft = draft;
        self
    }

    /// Also write `X-RateLimit-Limit`, `X-RateLimit-Remaining` and `X-RateLimit-Reset`
    /// (seconds) for the tightest limit: the one that denied, else the one with the fewest
    /// units remaining. Off by default.
    #[must_use]
    pub fn legacy_headers(mut self, on: bool) -> Self {
        self.config.legacy = on;
        self
    }

    /// Answer 429s and key rejections with an `application/problem+json` body (RFC 9457)
    /// instead of `text/plain`. Off by default.
    #[must_use]
    pub fn problem_json(mut self, on: bool) -> Self {
        self.config.problem_json = on;
        self
    }

    /// Whether gRPC calls (`content-type: application/grpc`, its `+proto`-style subtypes and
    /// gRPC-Web) are answered the gRPC way; `true` by default. A denial is then a
    /// "trailers-only" response: HTTP 200, `grpc-status: 8` (RESOURCE_EXHAUSTED), a
    /// percent-encoded `grpc-message` naming the policy, the RateLimit fields and
    /// `Retry-After` as on a 429, and no body. A key extractor's rejection maps its status
    /// (400 → 3 INVALID_ARGUMENT, 401 → 16 UNAUTHENTICATED, 403 → 7 PERMISSION_DENIED,
    /// 404 → 5 NOT_FOUND, 429 → 8, 503 → 14 UNAVAILABLE, others → 2 UNKNOWN). gRPC clients
    /// read an HTTP 429 as UNAVAILABLE, which many of them retry at once.
    ///
    /// # Examples
    ///
    /// ```
    /// use cellgate::{Limiter, Quota};
    /// use cellgate_http::{Global, Limit, RateLimitLayer};
    ///
    /// let layer = RateLimitLayer::builder()
    ///     .limit(Limit::new("global", Global, Limiter::gcra(Quota::per_second(100)).build()?))
    ///     .grpc(false) // gRPC calls get the plain 429 too
    ///     .build()?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    #[must_use]
    pub fn grpc(mut self, on: bool) -> Self {
        self.config.grpc = on;
        self
    }

    /// The layer.
    ///
    /// # Errors
    ///
    /// [`BuildError`] for a bad or repeated limit name.
    pub fn build(self) -> Result<RateLimitLayer, BuildError> {
        for (i, l) in self.config.limits.iter().enumerate() {
            if !valid_policy_name(&l.name) {
                return Err(BuildError::BadName(l.name.to_string()));
            }
            if self.config.limits[..i].iter().any(|o| o.name == l.name) {
                return Err(BuildError::DuplicateName(l.name.to_string()));
            }
        }
        let shared = Arc::new_cyclic(|me: &std::sync::Weak<Shared>| {
            let me: std::sync::Weak<dyn GiveBack> = me.clone();
            Shared::new(self.config, register(me))
        });
        Ok(RateLimitLayer { shared })
    }
}

/// The tower layer: wraps a service so that each request passes its limits first.
///
/// - A denial is a `429 Too Many Requests` *response* (never an error) with `Retry-After`
///   (the wait rounded up to whole seconds, at least 1; absent when waiting cannot help),
///   `Cache-Control: no-store`, and a body naming the limit that denied. A gRPC call gets a
///   trailers-only `grpc-status: 8` instead ([`RateLimitBuilder::grpc`]).
/// - Every response of a limited request, admitted or not, carries `RateLimit-Policy` and
///   `RateLimit` for every limit (draft-ietf-httpapi-ratelimit-headers-11).
/// - A key extractor's [`Rejection`](crate::Rejection) is answered with its status and reason
///   once the limits whose keys were extracted admitted the request (they are charged: a
///   flood of requests without a user id still meets the per-IP limit); if one of them
///   denies, the answer is its 429 (without the RateLimit fields, as the request has no key
///   for every policy).
/// - Stacked cellgate layers (a router's around a route's) are all or nothing too: a layer
///   that denies a request marks its 429 with the request's head, and each cellgate layer
///   around it, seeing the mark on the way out, gives back what it charged for the request
///   (to the keys it finds in that head, if they are still the keys it charged). (A layer's
///   RateLimit fields on such a 429 still show what it had left when it admitted the
///   request.) A layer that answers with a key rejection leaves the outer charges in place:
///   the request was answered. Middleware between the layers that drops the response's
///   extensions leaves them in place too.
/// - Up to 8 limits, an admitted request costs the layer no heap allocation and no write to
///   memory shared with other requests but the limiters' own compare-and-swaps, except the
///   `RateLimit` field's value (one allocation: its digits change per request) and the
///   legacy `X-RateLimit-*` fields when on (`tests/no_alloc.rs` counts them).
/// - Without a peer address (axum served without `into_make_service_with_connect_info`),
///   [`PeerIp`] and [`TrustedProxies`](crate::TrustedProxies) answer 500 and write one line to
///   stderr per request, never one bucket shared by every client.
/// - `OPTIONS` requests pass unchecked unless [`RateLimitBuilder::skip_options`] says otherwise.
/// - The service is `Clone`, and ready whenever the inner service is.
///
/// Limits with a queue (`Quota::with_queue`) are admitted at once: the layer does not wait
/// out a queued admission's delay.
///
/// # Examples
///
/// ```
/// use std::net::IpAddr;
/// use axum::{routing::get, Router};
/// use cellgate::{KeyedLimiter, Limiter, Quota};
/// use cellgate_http::{Global, Limit, PeerIp, RateLimitLayer};
///
/// let layer = RateLimitLayer::builder()
///     .limit(Limit::new("per-ip", PeerIp::new(), KeyedLimiter::<IpAddr>::gcra(Quota::per_second(10)).build()?))
///     .limit(Limit::new("global", Global, Limiter::gcra(Quota::per_second(1_000)).build()?))
///     .build()?;
/// let app: Router = Router::new().route("/", get(|| async { "hi" })).layer(layer);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone)]
pub struct RateLimitLayer {
    pub(crate) shared: Arc<Shared>,
}

impl fmt::Debug for RateLimitLayer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RateLimitLayer")
            .field("limits", &self.shared.limits)
            .finish_non_exhaustive()
    }
}

impl RateLimitLayer {
    /// A builder with no limits, OPTIONS skipped, draft-11 headers, plain-text bodies.
    #[must_use]
    pub fn builder() -> RateLimitBuilder {
        RateLimitBuilder {
            config: Config {
                limits: Vec::new(),
                skip_options: true,
                draft: Some(HeaderDraft::Ietf11),
                legacy: false,
                problem_json: false,
                grpc: true,
                #[cfg(feature = "metrics")]
                metrics: true,
            },
        }
    }

    /// The one-liner: `quota` per client IP ([`PeerIp`]: IPv6 by /64), named `"per-ip"`, on a
    /// table of at most a million addresses.
    ///
    /// # Errors
    ///
    /// The [`cellgate::ConfigError`] of an invalid quota.
    ///
    /// # Examples
    ///
    /// ```
    /// use cellgate::Quota;
    /// use cellgate_http::RateLimitLayer;
    ///
    /// let layer = RateLimitLayer::per_ip(Quota::per_second(20))?;
    /// # Ok::<(), cellgate::ConfigError>(())
    /// ```
    pub fn per_ip(quota: Quota) -> Result<Self, cellgate::ConfigError> {
        let limiter = KeyedLimiter::<IpAddr>::gcra(quota)
            .max_keys(1_000_000)
            .build()?;
        Ok(Self::builder()
            .limit(Limit::new("per-ip", PeerIp::new(), limiter))
            .build()
            .expect("the name \"per-ip\" is valid"))
    }

    /// The metrics of this layer (feature `metrics`): publish them at scrape time, or once a
    /// second from a thread.
    #[cfg(feature = "metrics")]
    #[must_use]
    pub fn metrics(&self) -> crate::metrics::MetricsHandle {
        crate::metrics::MetricsHandle::new(&self.shared)
    }
}

impl<S> Layer<S> for RateLimitLayer {
    type Service = RateLimit<S>;

    fn layer(&self, inner: S) -> RateLimit<S> {
        RateLimit {
            inner,
            shared: self.shared.clone(),
        }
    }
}

/// The service of a [`RateLimitLayer`] around `S`.
#[derive(Clone)]
pub struct RateLimit<S> {
    inner: S,
    shared: Arc<Shared>,
}

impl<S: fmt::Debug> fmt::Debug for RateLimit<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RateLimit")
            .field("inner", &self.inner)
            .finish_non_exhaustive()
    }
}

impl<S, ReqBody, ResBody> Service<Request<ReqBody>> for RateLimit<S>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>>,
    ResBody: http_body::Body<Data = Bytes>,
{
    type Response = Response<LimitBody<ResBody>>;
    type Error = S::Error;
    type Future = ResponseFuture<S::Future, ResBody>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<ReqBody>) -> Self::Future {
        if self.shared.skip_options && req.method() == Method::OPTIONS {
            return ResponseFuture::call(self.inner.call(req), None, None);
        }
        let (parts, body) = req.into_parts();
        match self.shared.admit(&parts) {
            Admission::Admitted(headers, charges) => ResponseFuture::call(
                self.inner.call(Request::from_parts(parts, body)),
                Some(headers),
                Some(Held {
                    layer: self.shared.registration.0,
                    charges,
                }),
            ),
            Admission::Denied(mut resp) => {
                // All or nothing across stacked layers: the cellgate layers around this one
                // charged this request; it is not served, so they give it back when they see
                // this mark on the way out.
                resp.extensions_mut().insert(Denied(parts));
                ResponseFuture::answer(resp.map(LimitBody::full))
            }
            Admission::Answered(resp) => ResponseFuture::answer(resp.map(LimitBody::full)),
        }
    }
}

pin_project! {
    /// The future of [`RateLimit`]: the inner service's, with the RateLimit fields added, or
    /// the layer's own answer.
    pub struct ResponseFuture<F, B> {
        #[pin]
        state: State<F, B>,
    }
}

pin_project! {
    #[project = StateProj]
    enum State<F, B> {
        Call { #[pin] fut: F, headers: Option<ExtraHeaders>, held: Option<Held> },
        Answer { response: Option<Response<LimitBody<B>>> },
    }
}

/// What an admitted request's future keeps to give its charges back: the layer's id (not the
/// layer: a clone of its `Arc` per request would write a shared count) and the charges.
struct Held {
    layer: u64,
    charges: Charges,
}

impl<F, B> ResponseFuture<F, B> {
    fn call(fut: F, headers: Option<ExtraHeaders>, held: Option<Held>) -> Self {
        Self {
            state: State::Call { fut, headers, held },
        }
    }

    fn answer(response: Response<LimitBody<B>>) -> Self {
        Self {
            state: State::Answer {
                response: Some(response),
            },
        }
    }
}

impl<F, B> fmt::Debug for ResponseFuture<F, B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ResponseFuture")
    }
}

impl<F, B, E> Future for ResponseFuture<F, B>
where
    F: Future<Output = Result<Response<B>, E>>,
{
    type Output = Result<Response<LimitBody<B>>, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.project().state.project() {
            StateProj::Call { fut, headers, held } => {
                let mut resp = ready!(fut.poll(cx))?.map(LimitBody::inner);
                if let Some(h) = headers.take() {
                    h.apply(resp.headers_mut());
                }
                if let (Some(held), Some(Denied(head))) = (held.take(), resp.extensions().get()) {
                    // A cellgate layer inside this one denied the request.
                    if let Some(layer) = crate::stack::find(held.layer) {
                        layer.give_back(head, held.charges);
                    }
                }
                Poll::Ready(Ok(resp))
            }
            StateProj::Answer { response } => Poll::Ready(Ok(response
                .take()
                .expect("ResponseFuture polled after it completed"))),
        }
    }
}
