//! The tower [`Layer`] and [`Service`]: extract each limit's key, admit the request on every
//! limit or on none, answer a denial with a 429, and add the RateLimit fields to what goes out.

use std::fmt;
use std::future::Future;
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll};

use bytes::Bytes;
use cellgate::{
    check_all_in, Decision, Gate, KeyedLimiter, Policy, Quota, RateLimiter, Reservation,
};
use http::header::{CACHE_CONTROL, CONTENT_TYPE, RETRY_AFTER};
use http::request::Parts;
use http::{HeaderName, HeaderValue, Method, Request, Response, StatusCode};
use pin_project_lite::pin_project;
use tower_layer::Layer;
use tower_service::Service;

use crate::body::LimitBody;
use crate::headers::{
    push_policy, push_state, reset_prefix, retry_after_of, state_prefix, valid_policy_name,
    HeaderDraft,
};
use crate::key::{KeyExtractor, PeerIp, Rejection};

/// One limit a request must pass: a name (for headers, the 429 and metrics), how to find the
/// key, the limiter, and how many units a request costs (1 by default).
///
/// Any [`RateLimiter`] over the extractor's key type works: `KeyedLimiter<IpAddr>` for
/// [`PeerIp`], `KeyedLimiter<String>` for [`HeaderKey`](crate::HeaderKey), a direct `Limiter`
/// for [`Global`](crate::Global); pass an `Arc` to keep a handle on the limiter.
///
/// # Examples
///
/// ```
/// use std::net::IpAddr;
/// use cellgate::{KeyedLimiter, Quota};
/// use cellgate_http::{Limit, PeerIp};
///
/// let per_ip = Limit::new("per-ip", PeerIp::new(), KeyedLimiter::<IpAddr>::gcra(Quota::per_second(10)).build()?);
/// let heavy = per_ip.clone().cost(5);
/// assert_eq!(heavy.name(), "per-ip");
/// # Ok::<(), cellgate::ConfigError>(())
/// ```
#[derive(Clone)]
pub struct Limit {
    name: Arc<str>,
    cost: u32,
    imp: Arc<dyn ErasedLimit>,
    #[cfg(feature = "metrics")]
    stats: Option<crate::metrics::StatsFn>,
}

impl fmt::Debug for Limit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Limit")
            .field("name", &self.name)
            .field("cost", &self.cost)
            .field("policy", &self.imp.policy())
            .finish()
    }
}

impl Limit {
    /// A limit called `name` (printable ASCII; checked by [`RateLimitBuilder::build`]) keyed
    /// by `extractor` on `limiter`.
    pub fn new<E, L>(name: impl Into<String>, extractor: E, limiter: L) -> Self
    where
        E: KeyExtractor,
        L: RateLimiter<E::Key> + Send + Sync + 'static,
    {
        Self {
            name: name.into().into(),
            cost: 1,
            imp: Arc::new(Typed { extractor, limiter }),
            #[cfg(feature = "metrics")]
            stats: None,
        }
    }

    /// Each request costs `units` (a check of `n` units).
    #[must_use]
    pub fn cost(mut self, units: u32) -> Self {
        self.cost = units;
        self
    }

    /// The name.
    #[must_use]
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The units each request costs.
    #[must_use]
    pub fn cost_per_request(&self) -> u32 {
        self.cost
    }

    /// Where the metrics read the limiter's keys held, refusals and evictions (feature
    /// `metrics`); read at publish time only.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::{net::IpAddr, sync::Arc};
    /// use cellgate::{KeyedLimiter, Quota};
    /// use cellgate_http::{KeyStats, Limit, PeerIp};
    ///
    /// let l = Arc::new(KeyedLimiter::<IpAddr>::gcra(Quota::per_second(5)).build()?);
    /// let stats = l.clone();
    /// let limit = Limit::new("per-ip", PeerIp::new(), l).stats(move || KeyStats::of(&stats));
    /// # Ok::<(), cellgate::ConfigError>(())
    /// ```
    #[cfg(feature = "metrics")]
    #[must_use]
    pub fn stats(
        mut self,
        f: impl Fn() -> crate::metrics::KeyStats + Send + Sync + 'static,
    ) -> Self {
        self.stats = Some(Arc::new(f));
        self
    }

    #[cfg(feature = "metrics")]
    pub(crate) fn stats_fn(&self) -> Option<&crate::metrics::StatsFn> {
        self.stats.as_ref()
    }

    /// The policy the limiter enforces now.
    #[must_use]
    pub fn policy(&self) -> Policy {
        self.imp.policy()
    }
}

/// A limit with its key and limiter types erased, so one layer can hold limits of any types.
trait ErasedLimit: Send + Sync {
    fn check(&self, parts: &Parts, n: u32) -> Result<Decision, Rejection>;
    fn gate<'a>(&'a self, parts: &Parts) -> Result<Box<dyn Gate + 'a>, Rejection>;
    fn policy(&self) -> Policy;
}

struct Typed<E, L> {
    extractor: E,
    limiter: L,
}

impl<E, L> ErasedLimit for Typed<E, L>
where
    E: KeyExtractor,
    L: RateLimiter<E::Key> + Send + Sync,
{
    fn check(&self, parts: &Parts, n: u32) -> Result<Decision, Rejection> {
        let key = self.extractor.extract(parts)?;
        Ok(self.limiter.check_n(&key, n))
    }

    fn gate<'a>(&'a self, parts: &Parts) -> Result<Box<dyn Gate + 'a>, Rejection> {
        let key = self.extractor.extract(parts)?;
        Ok(Box::new(OwnedKey {
            limiter: &self.limiter,
            key,
        }))
    }

    fn policy(&self) -> Policy {
        self.limiter.policy()
    }
}

/// A limiter and an owned key, as a [`Gate`] (`cellgate::Bound` borrows its key; the key
/// here is computed per request and has to live somewhere).
struct OwnedKey<'a, L: ?Sized, K> {
    limiter: &'a L,
    key: K,
}

impl<L: RateLimiter<K> + ?Sized, K> Gate for OwnedKey<'_, L, K> {
    fn charge(&self, n: u32) -> Reservation {
        self.limiter.charge(&self.key, n)
    }

    fn cancel(&self, reservation: Reservation) -> bool {
        self.limiter.cancel(&self.key, reservation)
    }

    fn peek_n(&self, n: u32) -> Decision {
        self.limiter.peek_n(&self.key, n)
    }

    fn reserve(&self, n: u32, max_wait: std::time::Duration) -> Reservation {
        self.limiter.reserve(&self.key, n, max_wait)
    }
}

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
    limits: Vec<Limit>,
    skip_options: bool,
    draft: Option<HeaderDraft>,
    legacy: bool,
    problem_json: bool,
    #[cfg(feature = "metrics")]
    metrics: bool,
}

impl RateLimitBuilder {
    /// Whether to count decisions for [`RateLimitLayer::metrics`] (feature `metrics`; on by
    /// default). Off, a check pays one branch.
    #[cfg(feature = "metrics")]
    #[must_use]
    pub fn metrics(mut self, on: bool) -> Self {
        self.metrics = on;
        self
    }

    /// Adds a limit. A request is admitted only if every limit admits it, and then charged on
    /// every one; a denial by one charges none (`cellgate::check_all_in`). Put the limit most
    /// likely to deny first: the others are then not charged and rolled back.
    #[must_use]
    pub fn limit(mut self, limit: Limit) -> Self {
        self.limits.push(limit);
        self
    }

    /// Whether `OPTIONS` requests (CORS preflights) pass without a check; `true` by default.
    #[must_use]
    pub fn skip_options(mut self, skip: bool) -> Self {
        self.skip_options = skip;
        self
    }

    /// Which revision of the IETF fields to write; `None` writes none of them. Default:
    /// [`HeaderDraft::Ietf11`].
    #[must_use]
    pub fn draft(mut self, draft: Option<HeaderDraft>) -> Self {
        self.draft = draft;
        self
    }

    /// Also write `X-RateLimit-Limit`, `X-RateLimit-Remaining` and `X-RateLimit-Reset`
    /// (seconds) for the tightest limit: the one that denied, else the one with the fewest
    /// units remaining. Off by default.
    #[must_use]
    pub fn legacy_headers(mut self, on: bool) -> Self {
        self.legacy = on;
        self
    }

    /// Answer 429s and key rejections with an `application/problem+json` body (RFC 9457)
    /// instead of `text/plain`. Off by default.
    #[must_use]
    pub fn problem_json(mut self, on: bool) -> Self {
        self.problem_json = on;
        self
    }

    /// The layer.
    ///
    /// # Errors
    ///
    /// [`BuildError`] for a bad or repeated limit name.
    pub fn build(self) -> Result<RateLimitLayer, BuildError> {
        for (i, l) in self.limits.iter().enumerate() {
            if !valid_policy_name(&l.name) {
                return Err(BuildError::BadName(l.name.to_string()));
            }
            if self.limits[..i].iter().any(|o| o.name == l.name) {
                return Err(BuildError::DuplicateName(l.name.to_string()));
            }
        }
        Ok(RateLimitLayer {
            shared: Arc::new(Shared::new(self)),
        })
    }
}

/// The tower layer: wraps a service so that each request passes its limits first.
///
/// - A denial is a `429 Too Many Requests` *response* (never an error) with `Retry-After`
///   (the wait rounded up to whole seconds, at least 1; absent when waiting cannot help),
///   `Cache-Control: no-store`, and a body naming the limit that denied.
/// - Every response of a limited request, admitted or not, carries `RateLimit-Policy` and
///   `RateLimit` for every limit (draft-ietf-httpapi-ratelimit-headers-11).
/// - A key extractor's [`Rejection`] is answered with its status and reason; nothing is charged.
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
    shared: Arc<Shared>,
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
            limits: Vec::new(),
            skip_options: true,
            draft: Some(HeaderDraft::Ietf11),
            legacy: false,
            problem_json: false,
            #[cfg(feature = "metrics")]
            metrics: true,
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

pub(crate) struct Shared {
    pub(crate) limits: Vec<Limit>,
    skip_options: bool,
    names: Option<crate::headers::FieldNames>,
    legacy: bool,
    problem_json: bool,
    /// Per limit, its `RateLimit` member up to the remaining count (`"name";r=`).
    state_prefixes: Vec<Vec<u8>>,
    /// `;t=` in the draft's words.
    reset_prefix: Vec<u8>,
    /// The policies when the layer was built, and their `RateLimit-Policy` value: reused as
    /// long as every limiter still reports the same policy.
    policies_at_build: Vec<Policy>,
    policy_value: Option<HeaderValue>,
    /// Per limit, the 429 body when waiting helps and when it does not.
    deny_bodies: Vec<[Bytes; 2]>,
    content_type: HeaderValue,
    #[cfg(feature = "metrics")]
    pub(crate) metrics: crate::metrics::Registry,
}

/// The fields a limited request's response gets, computed before the inner service runs.
#[derive(Default)]
pub(crate) struct ExtraHeaders {
    policy: Option<(HeaderName, HeaderValue)>,
    state: Option<(HeaderName, HeaderValue)>,
    /// `X-RateLimit-Limit`, `-Remaining`, `-Reset`.
    legacy: Option<(u32, u32, Option<u64>)>,
}

impl ExtraHeaders {
    fn apply(self, out: &mut http::HeaderMap) {
        if let Some((k, v)) = self.policy {
            out.append(k, v);
        }
        if let Some((k, v)) = self.state {
            out.append(k, v);
        }
        if let Some((limit, remaining, reset)) = self.legacy {
            out.append(HeaderName::from_static("x-ratelimit-limit"), limit.into());
            out.append(
                HeaderName::from_static("x-ratelimit-remaining"),
                remaining.into(),
            );
            if let Some(t) = reset {
                out.append(HeaderName::from_static("x-ratelimit-reset"), t.into());
            }
        }
    }
}

/// How a request fared.
enum Admission {
    Admitted(ExtraHeaders),
    Answered(Response<Bytes>),
}

impl Shared {
    fn new(b: RateLimitBuilder) -> Self {
        let names = b.draft.map(HeaderDraft::names);
        let policies_at_build: Vec<Policy> = b.limits.iter().map(Limit::policy).collect();
        let policy_value = names
            .as_ref()
            .and_then(|n| policy_value(n, &b.limits, &policies_at_build));
        let state_prefixes = b
            .limits
            .iter()
            .map(|l| {
                names
                    .as_ref()
                    .map_or_else(Vec::new, |n| state_prefix(n, &l.name))
            })
            .collect();
        let reset_prefix = names.as_ref().map_or_else(Vec::new, reset_prefix);
        let deny_bodies = b
            .limits
            .iter()
            .map(|l| {
                let helps = format!("rate limited by policy \"{}\"; see Retry-After", l.name);
                let no_help = format!("denied by policy \"{}\"; waiting will not help", l.name);
                let status = StatusCode::TOO_MANY_REQUESTS;
                [
                    leak(body(b.problem_json, status, &helps, Some(&l.name)).to_vec()),
                    leak(body(b.problem_json, status, &no_help, Some(&l.name)).to_vec()),
                ]
            })
            .collect();
        Shared {
            #[cfg(feature = "metrics")]
            metrics: crate::metrics::Registry::new(&b.limits, b.metrics),
            skip_options: b.skip_options,
            legacy: b.legacy,
            problem_json: b.problem_json,
            content_type: HeaderValue::from_static(if b.problem_json {
                "application/problem+json"
            } else {
                "text/plain; charset=utf-8"
            }),
            names,
            state_prefixes,
            reset_prefix,
            policies_at_build,
            policy_value,
            deny_bodies,
            limits: b.limits,
        }
    }

    fn admit(&self, parts: &Parts) -> Admission {
        let mut one = [Decision::NONE];
        let mut many = Vec::new();
        let (decisions, denied_by): (&[Decision], _) = if let [l] = &self.limits[..] {
            // One limit (the common case): a plain check, no gate to box.
            match l.imp.check(parts, l.cost) {
                Ok(d) => {
                    one[0] = d;
                    (&one, (!d.is_allowed()).then_some(0))
                }
                Err(r) => return self.rejected(&r),
            }
        } else {
            let mut gates: Vec<Box<dyn Gate + '_>> = Vec::with_capacity(self.limits.len());
            for l in &self.limits {
                match l.imp.gate(parts) {
                    Ok(g) => gates.push(g),
                    Err(r) => return self.rejected(&r),
                }
            }
            let pairs: Vec<(&dyn Gate, u32)> = gates
                .iter()
                .zip(&self.limits)
                .map(|(g, l)| (&**g as &dyn Gate, l.cost))
                .collect();
            many.resize(pairs.len(), Decision::NONE);
            let denied_by = check_all_in(&pairs, &mut many);
            (&many, denied_by)
        };
        #[cfg(feature = "metrics")]
        self.metrics.record(&self.limits, decisions, denied_by);
        let headers = self.rate_limit_headers(decisions, denied_by);
        let Some(i) = denied_by else {
            return Admission::Admitted(headers);
        };
        let retry = retry_after_of(decisions);
        let body = self.deny_bodies[i][usize::from(retry.is_none())].clone();
        let mut resp = Response::new(body);
        *resp.status_mut() = StatusCode::TOO_MANY_REQUESTS;
        let h = resp.headers_mut();
        h.insert(CONTENT_TYPE, self.content_type.clone());
        headers.apply(h);
        if let Some(secs) = retry {
            h.insert(RETRY_AFTER, HeaderValue::from(secs));
        }
        h.insert(CACHE_CONTROL, HeaderValue::from_static("no-store"));
        Admission::Answered(resp)
    }

    fn rejected(&self, r: &Rejection) -> Admission {
        #[cfg(feature = "metrics")]
        self.metrics.rejected();
        let mut resp = Response::new(body(self.problem_json, r.status(), r.reason(), None));
        *resp.status_mut() = r.status();
        resp.headers_mut()
            .insert(CONTENT_TYPE, self.content_type.clone());
        Admission::Answered(resp)
    }

    fn rate_limit_headers(&self, decisions: &[Decision], denied_by: Option<usize>) -> ExtraHeaders {
        let mut out = ExtraHeaders::default();
        if self.names.is_none() && !self.legacy {
            return out;
        }
        let mut state = Vec::with_capacity(self.state_prefixes.iter().map(|p| p.len() + 24).sum());
        let mut same_policies = true;
        let mut tightest: Option<(u32, usize)> = None;
        for (i, (l, d)) in self.limits.iter().zip(decisions).enumerate() {
            let p = l.policy();
            same_policies &= p == self.policies_at_build[i];
            let remaining = remaining_now(l, d, i, denied_by);
            let t = crate::headers::reset_secs(d, &p);
            if self.names.is_some() {
                push_state(
                    &mut state,
                    &self.state_prefixes[i],
                    remaining,
                    &self.reset_prefix,
                    t,
                );
            }
            let tighter = match (denied_by, tightest) {
                (Some(j), _) => i == j,
                (None, None) => true,
                (None, Some((r, _))) => remaining < r,
            };
            if self.legacy && tighter {
                tightest = Some((remaining, i));
                out.legacy = Some((d.limit(), remaining, t));
            }
        }
        if let Some(names) = &self.names {
            let policy = if same_policies {
                self.policy_value.clone()
            } else {
                let now: Vec<Policy> = self.limits.iter().map(Limit::policy).collect();
                policy_value(names, &self.limits, &now)
            };
            out.policy = policy.map(|v| (names.policy_field.clone(), v));
            // Printable ASCII names, digits and punctuation: always a valid value.
            out.state = HeaderValue::from_maybe_shared(Bytes::from(state))
                .ok()
                .map(|v| (names.state_field.clone(), v));
        }
        out
    }
}

/// The `RateLimit-Policy` value for `policies`.
fn policy_value(
    names: &crate::headers::FieldNames,
    limits: &[Limit],
    policies: &[Policy],
) -> Option<HeaderValue> {
    let mut v = String::new();
    for (l, p) in limits.iter().zip(policies) {
        push_policy(&mut v, names, &l.name, p);
    }
    HeaderValue::try_from(v).ok()
}

/// `s` as `Bytes` that clone without touching a shared reference count.
///
/// Values made once per layer and sent with every response (the policy field, the 429
/// bodies) would otherwise bump one atomic counter per response from every thread: they are
/// leaked instead, a few hundred bytes per layer built, which lives as long as the process's
/// services do anyway.
fn leak(s: Vec<u8>) -> Bytes {
    Bytes::from_static(Box::leak(s.into_boxed_slice()))
}

/// A short answer's body: the text and a newline, or an RFC 9457 problem.
fn body(problem_json: bool, status: StatusCode, detail: &str, policy: Option<&str>) -> Bytes {
    if !problem_json {
        return Bytes::from(format!("{detail}\n"));
    }
    let mut b = String::from("{\"type\":\"about:blank\",\"title\":");
    json_string(&mut b, status.canonical_reason().unwrap_or("Error"));
    b.push_str(&format!(",\"status\":{},\"detail\":", status.as_u16()));
    json_string(&mut b, detail);
    if let Some(p) = policy {
        b.push_str(",\"policy\":");
        json_string(&mut b, p);
    }
    b.push_str("}\n");
    Bytes::from(b)
}

/// What a limit has left after this request. An admitted decision reports what is left after
/// its charge; on a denied request that charge was rolled back (the limits before the one
/// that denied) or never made (the ones after it, which were only peeked), so its units count
/// as left.
fn remaining_now(l: &Limit, d: &Decision, i: usize, denied_by: Option<usize>) -> u32 {
    match denied_by {
        Some(j) if j != i && d.is_allowed() => d.remaining().saturating_add(l.cost).min(d.limit()),
        _ => d.remaining(),
    }
}

/// Writes `s` as a JSON string.
fn json_string(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
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
            return ResponseFuture::call(self.inner.call(req), None);
        }
        let (parts, body) = req.into_parts();
        match self.shared.admit(&parts) {
            Admission::Admitted(headers) => ResponseFuture::call(
                self.inner.call(Request::from_parts(parts, body)),
                Some(headers),
            ),
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
        Call { #[pin] fut: F, headers: Option<ExtraHeaders> },
        Answer { response: Option<Response<LimitBody<B>>> },
    }
}

impl<F, B> ResponseFuture<F, B> {
    fn call(fut: F, headers: Option<ExtraHeaders>) -> Self {
        Self {
            state: State::Call { fut, headers },
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
            StateProj::Call { fut, headers } => {
                let mut resp = ready!(fut.poll(cx))?.map(LimitBody::inner);
                if let Some(h) = headers.take() {
                    h.apply(resp.headers_mut());
                }
                Poll::Ready(Ok(resp))
            }
            StateProj::Answer { response } => Poll::Ready(Ok(response
                .take()
                .expect("ResponseFuture polled after it completed"))),
        }
    }
}
