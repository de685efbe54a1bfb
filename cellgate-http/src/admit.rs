//! What the layer does with a request head: extract each limit's key, admit on every limit or
//! on none, and compute the response fields (or the whole 429) from the decisions.

use std::cell::RefCell;

use bytes::Bytes;
use cellgate::{check_all_reserving, AnyLimiter, Decision, Policy, PolicyKind, Reservation};
use http::header::{CACHE_CONTROL, CONTENT_TYPE, RETRY_AFTER};
use http::request::Parts;
use http::{HeaderName, HeaderValue, Response, StatusCode};

use crate::headers::{
    push_policy, push_state, retry_after_of, state_prefix, HeaderDraft, StateParams,
};
use crate::key::Rejection;
use crate::limit::{Limit, Mark};
use crate::stack::{Charges, GiveBack, Registration, INLINE};

pub(crate) struct Shared {
    /// This layer's place in the list the give-back looks layers up in (see `stack.rs`).
    pub(crate) registration: Registration,
    pub(crate) limits: Vec<Limit>,
    pub(crate) skip_options: bool,
    names: Option<crate::headers::FieldNames>,
    legacy: bool,
    problem_json: bool,
    /// Per limit, its `RateLimit` member up to the remaining count (`"name";r=`).
    state_prefixes: Vec<Vec<u8>>,
    /// `;t=` and `;pk=:` in the draft's words.
    state_params: StateParams,
    /// The policies when the layer was built, and their `RateLimit-Policy` value: reused as
    /// long as every limiter still reports the same policy.
    policies_at_build: Vec<Policy>,
    policy_value: Option<HeaderValue>,
    /// Per limit, the 429 body when waiting helps and when it does not.
    deny_bodies: Vec<[Bytes; 2]>,
    content_type: HeaderValue,
    /// Whether gRPC requests get gRPC answers, and per limit the `grpc-message` of a denial
    /// when waiting helps and when it does not.
    grpc: bool,
    grpc_messages: Vec<[HeaderValue; 2]>,
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
    pub(crate) fn apply(self, out: &mut http::HeaderMap) {
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

/// What a layer was configured with (kept by [`RateLimitBuilder`](crate::RateLimitBuilder),
/// turned into the layer's [`Shared`] state when it is built).
#[derive(Debug, Clone)]
pub(crate) struct Config {
    pub(crate) limits: Vec<Limit>,
    pub(crate) skip_options: bool,
    pub(crate) draft: Option<HeaderDraft>,
    pub(crate) legacy: bool,
    pub(crate) problem_json: bool,
    pub(crate) grpc: bool,
    #[cfg(feature = "metrics")]
    pub(crate) metrics: bool,
}

/// How a request fared.
// The admitted variant carries its charges inline (up to eight limits) on purpose: an admitted
// request allocates nothing in the layer (tests/no_alloc.rs); the value moves once, into the
// response future.
#[allow(clippy::large_enum_variant)]
pub(crate) enum Admission {
    /// Admitted: the fields for the response, and what was charged (to give back if a layer
    /// inside this one denies the request).
    Admitted(ExtraHeaders, Charges),
    /// Denied by a limit: the 429 (or gRPC answer).
    Denied(Response<Bytes>),
    /// Answered otherwise (a key extractor's rejection).
    Answered(Response<Bytes>),
}

impl GiveBack for Shared {
    fn give_back(&self, head: &Parts, mut charges: Charges) {
        for (l, c) in self.limits.iter().zip(charges.slots()).rev() {
            if let Some((fingerprint, r)) = c.take() {
                l.imp.give_back(head, fingerprint, r);
            }
        }
    }
}

#[cfg(feature = "metrics")]
impl crate::metrics::Source for Shared {
    fn registry(&self) -> &crate::metrics::Registry {
        &self.metrics
    }

    fn limits(&self) -> &[Limit] {
        &self.limits
    }
}

thread_local! {
    /// The `RateLimit` field's value being written: reused, so that writing it allocates
    /// nothing but the value itself.
    static STATE: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

impl Shared {
    pub(crate) fn new(b: Config, registration: Registration) -> Self {
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
        let state_params = StateParams::new(names.as_ref().unwrap_or(&HeaderDraft::Ietf11.names()));
        let denials: Vec<[String; 2]> = b
            .limits
            .iter()
            .map(|l| {
                [
                    format!("rate limited by policy \"{}\"; see Retry-After", l.name),
                    format!("denied by policy \"{}\"; waiting will not help", l.name),
                ]
            })
            .collect();
        let status = StatusCode::TOO_MANY_REQUESTS;
        let deny_bodies = b
            .limits
            .iter()
            .zip(&denials)
            .map(|(l, texts)| {
                texts
                    .each_ref()
                    .map(|t| leak(body(b.problem_json, status, t, Some(&l.name)).to_vec()))
            })
            .collect();
        let grpc_messages = denials
            .iter()
            .map(|texts| texts.each_ref().map(|t| grpc_message(t)))
            .collect();
        Shared {
            registration,
            #[cfg(feature = "metrics")]
            metrics: crate::metrics::Registry::new(b.limits.len(), b.metrics),
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
            state_params,
            grpc: b.grpc,
            grpc_messages,
            policies_at_build,
            policy_value,
            deny_bodies,
            limits: b.limits,
        }
    }

    /// Admits the request on every limit of this layer or on none. The limits whose keys were
    /// extracted are checked even when another limit's key was not (the request is then
    /// answered with that rejection if they admit it, and stays charged on the rate limits: a
    /// request that has no user id still meets its per-IP limit; a stock takes nothing for a
    /// request it does not serve). An admitted request's charges come back with the
    /// admission, for the response future to keep (see `stack.rs`).
    ///
    /// Up to [`INLINE`] limits, nothing here is allocated: the keys are looked up in the head
    /// (borrowed where the extractor lends them), and the marks, decisions and reservations
    /// are arrays on the stack.
    pub(crate) fn admit(&self, parts: &Parts) -> Admission {
        let n = self.limits.len();
        if n == 0 {
            return Admission::Admitted(self.rate_limit_headers(&[], None, &[]), Charges::new(0));
        }
        if n <= INLINE {
            let mut marks = [None; INLINE];
            let mut decisions = [Decision::NONE; INLINE];
            let mut taken = [const { None }; INLINE];
            let mut keyed = [(self.limits[0].imp.limiter(), 0); INLINE];
            let mut index = [0; INLINE];
            self.admit_in(
                parts,
                Scratch {
                    marks: &mut marks[..n],
                    decisions: &mut decisions[..n],
                    taken: &mut taken[..n],
                    keyed: &mut keyed[..n],
                    index: &mut index[..n],
                },
            )
        } else {
            let (mut marks, mut decisions, mut taken) =
                (vec![None; n], vec![Decision::NONE; n], vec![None; n]);
            let (mut keyed, mut index) = (vec![(self.limits[0].imp.limiter(), 0); n], vec![0; n]);
            self.admit_in(
                parts,
                Scratch {
                    marks: &mut marks,
                    decisions: &mut decisions,
                    taken: &mut taken,
                    keyed: &mut keyed,
                    index: &mut index,
                },
            )
        }
    }

    fn admit_in<'a>(&'a self, parts: &Parts, s: Scratch<'_, 'a>) -> Admission {
        let Scratch {
            marks,
            decisions,
            taken,
            keyed,
            index,
        } = s;
        let mut rejection = None;
        // The limits with a key, in the layer's order: `keyed[..m]`, limit `index[j]` for the
        // `j`-th of them.
        let mut m = 0;
        for (i, l) in self.limits.iter().enumerate() {
            match l.imp.mark(parts, l.partition_key.as_ref()) {
                Ok(mark) => {
                    marks[i] = Some(mark);
                    keyed[m] = (l.imp.limiter(), l.cost);
                    index[m] = i;
                    m += 1;
                }
                Err(r) => {
                    rejection.get_or_insert(r);
                }
            }
        }
        let (keyed, index) = (&keyed[..m], &index[..m]);
        let denied = check_all_reserving(keyed, parts, &mut decisions[..m], &mut taken[..m])
            .map(|j| index[j]);
        if let Some(r) = rejection {
            #[cfg(feature = "metrics")]
            if denied.is_some() {
                self.metrics.record(&decisions[..m], denied);
            }
            if let Some(i) = denied {
                // The fields describe every limit; this request has no key for some.
                return self.deny(parts, i, &decisions[..m], ExtraHeaders::default());
            }
            // Rates count the rejected request (a flood of them is limited); a stock is goods,
            // and a request that is not served takes none.
            for (&(limiter, _), r) in keyed.iter().zip(taken.iter_mut()) {
                if limiter.policy().kind() == PolicyKind::Stock {
                    if let Some(r) = r.take() {
                        limiter.cancel(parts, r);
                    }
                }
            }
            return self.rejected(parts, &r);
        }
        // Every limit has its key: `decisions`, `taken` and `marks` are in the layer's order.
        let headers = self.rate_limit_headers(decisions, denied, marks);
        if let Some(i) = denied {
            #[cfg(feature = "metrics")]
            self.metrics.record(decisions, denied);
            return self.deny(parts, i, decisions, headers);
        }
        #[cfg(feature = "metrics")]
        match &decisions[..] {
            [d] => self.metrics.record_one(d),
            all => self.metrics.record(all, None),
        }
        let mut charges = Charges::new(self.limits.len());
        for ((slot, mark), r) in charges.slots().iter_mut().zip(&*marks).zip(taken) {
            if let (Some(mark), Some(r)) = (mark, r.take()) {
                if r.units() > 0 {
                    *slot = Some((mark.fingerprint, r));
                }
            }
        }
        Admission::Admitted(headers, charges)
    }

    /// The answer to a request limit `i` denied: a 429 (or a gRPC answer) with `headers` and
    /// `Retry-After` from `decisions`.
    fn deny(
        &self,
        parts: &Parts,
        i: usize,
        decisions: &[Decision],
        headers: ExtraHeaders,
    ) -> Admission {
        let retry = retry_after_of(decisions);
        let no_help = usize::from(retry.is_none());
        let mut resp = match self.grpc_content_type(parts) {
            Some(ct) => grpc_answer(
                ct,
                GRPC_RESOURCE_EXHAUSTED,
                self.grpc_messages[i][no_help].clone(),
            ),
            None => {
                let mut resp = Response::new(self.deny_bodies[i][no_help].clone());
                *resp.status_mut() = StatusCode::TOO_MANY_REQUESTS;
                let h = resp.headers_mut();
                h.insert(CONTENT_TYPE, self.content_type.clone());
                h.insert(CACHE_CONTROL, HeaderValue::from_static("no-store"));
                resp
            }
        };
        let h = resp.headers_mut();
        headers.apply(h);
        if let Some(secs) = retry {
            h.insert(RETRY_AFTER, HeaderValue::from(secs));
        }
        Admission::Denied(resp)
    }

    fn rejected(&self, parts: &Parts, r: &Rejection) -> Admission {
        #[cfg(feature = "metrics")]
        self.metrics.rejected();
        if let Some(ct) = self.grpc_content_type(parts) {
            let code = grpc_code_of(r.status());
            return Admission::Answered(grpc_answer(ct, code, grpc_message(r.reason())));
        }
        let mut resp = Response::new(body(self.problem_json, r.status(), r.reason(), None));
        *resp.status_mut() = r.status();
        resp.headers_mut()
            .insert(CONTENT_TYPE, self.content_type.clone());
        Admission::Answered(resp)
    }

    /// The request's content type if it is a gRPC call (`application/grpc`, `+proto` and other
    /// subtypes, gRPC-Web) and gRPC answers are on.
    fn grpc_content_type<'p>(&self, parts: &'p Parts) -> Option<&'p HeaderValue> {
        const GRPC: &[u8] = b"application/grpc";
        let ct = parts.headers.get(CONTENT_TYPE).filter(|_| self.grpc)?;
        let v = ct.as_bytes();
        let grpc = v.len() >= GRPC.len()
            && v[..GRPC.len()].eq_ignore_ascii_case(GRPC)
            && matches!(v.get(GRPC.len()), None | Some(b'+' | b'-' | b';'));
        grpc.then_some(ct)
    }

    fn rate_limit_headers(
        &self,
        decisions: &[Decision],
        denied_by: Option<usize>,
        marks: &[Option<Mark>],
    ) -> ExtraHeaders {
        let mut out = ExtraHeaders::default();
        if self.names.is_none() && !self.legacy {
            return out;
        }
        STATE.with(|state| {
            let mut state = state.borrow_mut();
            state.clear();
            self.fill_headers(&mut out, &mut state, decisions, denied_by, marks);
        });
        out
    }

    /// [`rate_limit_headers`](Self::rate_limit_headers) with `state` to write the `RateLimit`
    /// value in.
    fn fill_headers(
        &self,
        out: &mut ExtraHeaders,
        state: &mut Vec<u8>,
        decisions: &[Decision],
        denied_by: Option<usize>,
        marks: &[Option<Mark>],
    ) {
        let mut same_policies = true;
        let mut tightest: Option<(u32, usize)> = None;
        for (i, (l, d)) in self.limits.iter().zip(decisions).enumerate() {
            let p = l.policy();
            same_policies &= p == self.policies_at_build[i];
            let remaining = remaining_now(l, d, i, denied_by);
            let t = crate::headers::reset_secs(d, &p);
            if self.names.is_some() {
                push_state(
                    state,
                    &self.state_prefixes[i],
                    remaining,
                    &self.state_params,
                    t,
                    marks.get(i).copied().flatten().and_then(|m| m.partition),
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
            // Printable ASCII names, digits and punctuation: always a valid value. Copied out
            // of the reused buffer: one allocation, of the value's size.
            out.state = HeaderValue::from_bytes(state)
                .ok()
                .map(|v| (names.state_field.clone(), v));
        }
    }
}

/// Room for [`Shared::admit_in`] to work in: per limit, its key's mark, and per limit with
/// a key, its decision, reservation, limiter and cost, and index.
struct Scratch<'s, 'a> {
    marks: &'s mut [Option<Mark>],
    decisions: &'s mut [Decision],
    taken: &'s mut [Option<Reservation>],
    keyed: &'s mut [(&'a dyn AnyLimiter<Parts>, u32)],
    index: &'s mut [usize],
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

/// gRPC's status code for a rate-limited call.
const GRPC_RESOURCE_EXHAUSTED: u8 = 8;

/// The gRPC status code for a key extractor's rejection with HTTP status `status`.
fn grpc_code_of(status: StatusCode) -> u8 {
    match status.as_u16() {
        400 => 3,  // INVALID_ARGUMENT
        401 => 16, // UNAUTHENTICATED
        403 => 7,  // PERMISSION_DENIED
        404 => 5,  // NOT_FOUND
        429 => GRPC_RESOURCE_EXHAUSTED,
        503 => 14, // UNAVAILABLE
        _ => 2,    // UNKNOWN
    }
}

/// A gRPC "trailers-only" answer: HTTP 200, the request's content type, `grpc-status` and
/// `grpc-message` in the headers, and no body (over HTTP/2, one HEADERS frame that ends the
/// stream).
fn grpc_answer(content_type: &HeaderValue, code: u8, message: HeaderValue) -> Response<Bytes> {
    let mut resp = Response::new(Bytes::new());
    let h = resp.headers_mut();
    h.insert(CONTENT_TYPE, content_type.clone());
    h.insert(
        HeaderName::from_static("grpc-status"),
        HeaderValue::from(u16::from(code)),
    );
    h.insert(HeaderName::from_static("grpc-message"), message);
    resp
}

/// `text` as a `grpc-message` value: percent-encoded as the gRPC HTTP/2 protocol says (bytes
/// outside space to `~`, and `%` itself, as `%XX`).
fn grpc_message(text: &str) -> HeaderValue {
    let mut v = String::with_capacity(text.len());
    for b in text.bytes() {
        if (0x20..=0x7e).contains(&b) && b != b'%' {
            v.push(char::from(b));
        } else {
            v.push_str(&format!("%{b:02X}"));
        }
    }
    // Only printable ASCII is left: always a valid value.
    HeaderValue::try_from(v).unwrap_or_else(|_| HeaderValue::from_static("rate limited"))
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grpc_messages_are_percent_encoded() {
        assert_eq!(grpc_message("plain \"text\"; ok~"), "plain \"text\"; ok~");
        assert_eq!(grpc_message("50% é\n"), "50%25 %C3%A9%0A");
    }

    #[test]
    fn rejection_statuses_map_to_grpc_codes() {
        let code = |s: u16| grpc_code_of(StatusCode::from_u16(s).unwrap());
        assert_eq!(
            [400, 401, 403, 404, 429, 503, 500, 418].map(code),
            [3, 16, 7, 5, 8, 14, 2, 2]
        );
    }
}
