//! What the gRPC and HTTP front ends share: ask the engine, apply ratelimit's rules the engine
//! does not own (an unknown domain is no error), count the metrics, build the response headers.

use std::sync::Arc;

use crate::api::{Code, DescriptorStatus, RateLimitRequest, RateLimitResponse, RequestError};
use crate::engine::{Awaited, Engine};
use crate::metrics::Metrics;

/// The names of the response headers ratelimit adds when `LIMIT_RESPONSE_HEADERS_ENABLED` is
/// true (its defaults; `LIMIT_LIMIT_HEADER`, `LIMIT_REMAINING_HEADER`, `LIMIT_RESET_HEADER`
/// rename them).
///
/// # Examples
///
/// ```
/// use cellgate_server::server::HeaderNames;
/// assert_eq!(HeaderNames::default().limit, "RateLimit-Limit");
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HeaderNames {
    /// The header carrying the deciding limit's `requests_per_unit`.
    pub limit: String,
    /// The header carrying its `limit_remaining`.
    pub remaining: String,
    /// The header carrying the seconds until it resets.
    pub reset: String,
}

impl Default for HeaderNames {
    fn default() -> Self {
        HeaderNames {
            limit: "RateLimit-Limit".into(),
            remaining: "RateLimit-Remaining".into(),
            reset: "RateLimit-Reset".into(),
        }
    }
}

/// A decision and the headers to add to the client's response.
pub(crate) struct Answer {
    pub(crate) response: RateLimitResponse,
    pub(crate) headers: Vec<(String, String)>,
}

/// The engine, the metrics, and the header setting, shared by every listener.
pub(crate) struct Service {
    pub(crate) engine: Arc<Engine>,
    pub(crate) metrics: Arc<Metrics>,
    pub(crate) headers: Option<HeaderNames>,
    /// Health answers 503 while Redis does not answer for some fleet limit.
    pub(crate) health_strict: bool,
    /// Health answers 503 until a configuration with a domain is in force.
    pub(crate) health_needs_config: bool,
}

impl Service {
    /// Whether health checks should call the server healthy (see [`Self::healthy_given`]).
    pub(crate) fn healthy(&self) -> bool {
        self.healthy_given(self.engine.fleet_report().as_ref())
    }

    /// Whether health checks should call the server healthy, given the fleet's `report`
    /// (`None` outside fleet mode): yes, unless it runs with `--redis-health-strict` and Redis
    /// does not answer for some limit, or waits for its first domain
    /// ([`awaiting_config`](Self::awaiting_config)).
    pub(crate) fn healthy_given(&self, report: Option<&crate::fleet::Report>) -> bool {
        let redis_out = report.is_some_and(|r| r.out() > 0);
        !(self.awaiting_config() || self.health_strict && redis_out)
    }

    /// Whether the server runs with `HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED` and no domain is
    /// configured yet (an empty or absent configuration, until a reload brings one).
    pub(crate) fn awaiting_config(&self) -> bool {
        self.health_needs_config && self.engine.config().domains.is_empty()
    }

    /// The engine's decision. In fleet mode a check that needs Redis is awaited (see
    /// `Engine::decide_async`); a request the engine could not decide that way (none does:
    /// see `Awaited::Blocking`) would wait on a thread marked as blocking (`fleet::blocking`).
    async fn engine_decide(
        &self,
        req: &RateLimitRequest,
    ) -> Result<RateLimitResponse, RequestError> {
        if !self.engine.is_fleet() {
            return self.engine.decide(req);
        }
        match self.engine.decide_async(req).await? {
            Awaited::Decided { response, waited } => {
                if waited {
                    self.metrics.fleet_waited.add(1);
                }
                Ok(response)
            }
            Awaited::Blocking => {
                self.metrics.fleet_waited.add(1);
                crate::fleet::blocking(|| self.engine.decide(req))
            }
        }
    }

    /// Decides `req`, counts it, and builds the headers.
    ///
    /// An unknown domain answers OK with no limit for every descriptor, as ratelimit does (it
    /// finds no limit for the descriptors, and an absent limit admits).
    pub(crate) async fn decide(&self, req: &RateLimitRequest) -> Result<Answer, RequestError> {
        let response = match self.engine_decide(req).await {
            Ok(r) => r,
            Err(RequestError::UnknownDomain(_)) => RateLimitResponse {
                overall: Code::Ok,
                statuses: req
                    .descriptors
                    .iter()
                    .map(|_| DescriptorStatus::unlimited())
                    .collect(),
            },
            Err(e) => {
                self.metrics.request_error();
                return Err(e);
            }
        };
        for status in &response.statuses {
            if let Some(stats) = &status.stats {
                self.metrics.record(&req.domain, stats);
            }
        }
        let headers = match &self.headers {
            Some(names) => headers(names, &response.statuses),
            None => Vec::new(),
        };
        Ok(Answer { response, headers })
    }
}

/// ratelimit's headers: those of the descriptor closest to its limit (an over-limit one if
/// any), among those a limit applies to; none when no limit applies.
fn headers(names: &HeaderNames, statuses: &[DescriptorStatus]) -> Vec<(String, String)> {
    let mut chosen: Option<&DescriptorStatus> = None;
    for s in statuses.iter().filter(|s| s.current_limit.is_some()) {
        let closer = match chosen {
            None => true,
            Some(c) => {
                c.code != Code::OverLimit
                    && (s.code == Code::OverLimit || s.limit_remaining < c.limit_remaining)
            }
        };
        if closer {
            chosen = Some(s);
        }
    }
    let Some(s) = chosen else {
        return Vec::new();
    };
    let limit = s.current_limit.as_ref().map_or(0, |l| l.requests_per_unit);
    // Whole seconds, rounded up: a client that waits that long finds the limit reset.
    let reset = s
        .duration_until_reset
        .map_or(0, |d| d.as_secs() + u64::from(d.subsec_nanos() > 0));
    vec![
        (names.limit.clone(), limit.to_string()),
        (names.remaining.clone(), s.limit_remaining.to_string()),
        (names.reset.clone(), reset.to_string()),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{CurrentLimit, Unit};
    use std::time::Duration;

    fn status(code: Code, remaining: u32, limit: u32) -> DescriptorStatus {
        DescriptorStatus {
            code,
            current_limit: Some(CurrentLimit {
                name: None,
                requests_per_unit: limit,
                unit: Unit::Minute,
            }),
            limit_remaining: remaining,
            duration_until_reset: Some(Duration::from_millis(1_500)),
            stats: None,
        }
    }

    #[test]
    fn headers_name_the_closest_limit_and_prefer_an_over_limit_one() {
        let names = HeaderNames::default();
        let h = headers(
            &names,
            &[
                status(Code::Ok, 5, 10),
                status(Code::Ok, 2, 20),
                DescriptorStatus::unlimited(),
            ],
        );
        assert_eq!(h[0].1, "20");
        assert_eq!(h[1].1, "2");
        assert_eq!(h[2].1, "2");
        let h = headers(
            &names,
            &[status(Code::OverLimit, 0, 7), status(Code::Ok, 0, 9)],
        );
        assert_eq!(h[0].1, "7");
        assert!(headers(&names, &[DescriptorStatus::unlimited()]).is_empty());
    }
}
