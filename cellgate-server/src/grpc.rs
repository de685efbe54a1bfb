//! Envoy's rate-limit service (RLS v3, `envoy.service.ratelimit.v3.RateLimitService`) over
//! gRPC: converts its messages to and from [`crate::api`] and asks the shared service.
//!
//! Malformed requests (empty domain, no descriptors, an empty descriptor, over an input limit,
//! `is_negative_hits`) are answered `INVALID_ARGUMENT`. An unknown domain is no error: every
//! descriptor is answered OK with no limit, as ratelimit answers it.

use std::sync::Arc;
use std::time::Duration;

use envoy_types::pb::envoy::config::core::v3::HeaderValue;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::service::ratelimit::v3 as pb;
use envoy_types::pb::google::protobuf::Duration as PbDuration;
use pb::rate_limit_response::{rate_limit::Unit as PbUnit, Code as PbCode, DescriptorStatus};
use pb::rate_limit_service_server::{RateLimitService, RateLimitServiceServer};
use tonic::{Request, Response, Status};

use crate::api::{self, Code, Descriptor, LimitOverride, Unit};
use crate::server::service::{Answer, Service};

/// The tonic service.
pub(crate) struct Rls {
    service: Arc<Service>,
}

impl Rls {
    /// The gRPC server for `service`, decoding messages of at most `max_message_bytes`.
    pub(crate) fn server(
        service: Arc<Service>,
        max_message_bytes: usize,
    ) -> RateLimitServiceServer<Rls> {
        RateLimitServiceServer::new(Rls { service }).max_decoding_message_size(max_message_bytes)
    }
}

#[tonic::async_trait]
impl RateLimitService for Rls {
    async fn should_rate_limit(
        &self,
        request: Request<pb::RateLimitRequest>,
    ) -> Result<Response<pb::RateLimitResponse>, Status> {
        let _timer = self.service.metrics.time_request();
        let req = from_proto(request.into_inner())
            .inspect_err(|_| self.service.metrics.request_error())?;
        match self.service.decide(&req).await {
            Ok(answer) => Ok(Response::new(to_proto(answer))),
            Err(e) => Err(Status::invalid_argument(e.to_string())),
        }
    }
}

/// The request in the service's types. Request-level `hits_addend` 0 means 1 (as in ratelimit);
/// a descriptor's `hits_addend`, when present, is used as is (0 looks without charging).
pub(crate) fn from_proto(req: pb::RateLimitRequest) -> Result<api::RateLimitRequest, Status> {
    let descriptors = req
        .descriptors
        .into_iter()
        .enumerate()
        .map(|(i, d)| descriptor(i, d))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(api::RateLimitRequest {
        domain: req.domain,
        descriptors,
        hits_addend: u64::from(req.hits_addend.max(1)),
    })
}

fn descriptor(index: usize, d: RateLimitDescriptor) -> Result<Descriptor, Status> {
    if d.is_negative_hits {
        return Err(Status::invalid_argument(format!(
            "descriptor {index}: is_negative_hits is not supported"
        )));
    }
    Ok(Descriptor {
        entries: d.entries.into_iter().map(|e| (e.key, e.value)).collect(),
        limit: d.limit.map(|l| LimitOverride {
            requests_per_unit: l.requests_per_unit,
            unit: unit_from_i32(l.unit),
        }),
        hits_addend: d.hits_addend.map(|h| h.value),
    })
}

/// RLS's unit numbers (the same in `RateLimitUnit` and `RateLimitResponse.RateLimit.Unit`).
pub(crate) fn unit_from_i32(unit: i32) -> Unit {
    match PbUnit::try_from(unit) {
        Ok(PbUnit::Second) => Unit::Second,
        Ok(PbUnit::Minute) => Unit::Minute,
        Ok(PbUnit::Hour) => Unit::Hour,
        Ok(PbUnit::Day) => Unit::Day,
        Ok(PbUnit::Week) => Unit::Week,
        Ok(PbUnit::Month) => Unit::Month,
        Ok(PbUnit::Year) => Unit::Year,
        Ok(PbUnit::Unknown) | Err(_) => Unit::Unknown,
    }
}

pub(crate) fn unit_to_pb(unit: Unit) -> PbUnit {
    match unit {
        Unit::Unknown => PbUnit::Unknown,
        Unit::Second => PbUnit::Second,
        Unit::Minute => PbUnit::Minute,
        Unit::Hour => PbUnit::Hour,
        Unit::Day => PbUnit::Day,
        Unit::Week => PbUnit::Week,
        Unit::Month => PbUnit::Month,
        Unit::Year => PbUnit::Year,
    }
}

pub(crate) fn code_to_pb(code: Code) -> PbCode {
    match code {
        Code::Ok => PbCode::Ok,
        Code::OverLimit => PbCode::OverLimit,
    }
}

fn duration_to_pb(d: Duration) -> PbDuration {
    PbDuration {
        seconds: i64::try_from(d.as_secs()).unwrap_or(i64::MAX),
        nanos: i32::try_from(d.subsec_nanos()).unwrap_or(0),
    }
}

/// The answer as RLS's message.
pub(crate) fn to_proto(answer: Answer) -> pb::RateLimitResponse {
    pb::RateLimitResponse {
        overall_code: code_to_pb(answer.response.overall) as i32,
        statuses: answer
            .response
            .statuses
            .into_iter()
            .map(|s| DescriptorStatus {
                code: code_to_pb(s.code) as i32,
                current_limit: s.current_limit.map(|l| pb::rate_limit_response::RateLimit {
                    name: l.name.map(|n| n.to_string()).unwrap_or_default(),
                    requests_per_unit: l.requests_per_unit,
                    unit: unit_to_pb(l.unit) as i32,
                }),
                limit_remaining: s.limit_remaining,
                duration_until_reset: s.duration_until_reset.map(duration_to_pb),
                quota: None,
            })
            .collect(),
        response_headers_to_add: answer
            .headers
            .into_iter()
            .map(|(key, value)| HeaderValue {
                key,
                value,
                raw_value: Vec::new(),
            })
            .collect(),
        ..pb::RateLimitResponse::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::{
        Entry, RateLimitOverride,
    };
    use envoy_types::pb::google::protobuf::UInt64Value;

    #[test]
    fn hits_addend_zero_means_one_but_a_descriptors_zero_stays() {
        let req = pb::RateLimitRequest {
            domain: "d".into(),
            descriptors: vec![RateLimitDescriptor {
                entries: vec![Entry {
                    key: "k".into(),
                    value: "v".into(),
                }],
                limit: Some(RateLimitOverride {
                    requests_per_unit: 3,
                    unit: 7,
                }),
                hits_addend: Some(UInt64Value { value: 0 }),
                is_negative_hits: false,
            }],
            hits_addend: 0,
        };
        let r = from_proto(req).unwrap();
        assert_eq!(r.hits_addend, 1);
        assert_eq!(r.descriptors[0].hits_addend, Some(0));
        assert_eq!(r.descriptors[0].limit.unwrap().unit, Unit::Week);
    }

    #[test]
    fn units_round_trip() {
        for n in 0..=7 {
            assert_eq!(unit_to_pb(unit_from_i32(n)) as i32, n);
        }
        assert_eq!(unit_from_i32(99), Unit::Unknown);
    }
}
