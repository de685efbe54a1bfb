//! ratelimit's JSON encoding of `RateLimitRequest` and `RateLimitResponse` (the protobuf JSON
//! mapping: lowerCamelCase names, the original snake_case names also accepted on input, enums
//! by name, 64-bit integers as strings or numbers, durations as `"1.5s"`).
//!
//! Written by hand because envoy-types' messages carry no JSON support; only the fields of
//! these two messages are needed.

use std::time::Duration;

use serde::{Deserialize, Deserializer, Serialize};

use crate::api::{self, Code, Descriptor, LimitOverride, Unit};
use crate::grpc::{unit_from_i32, unit_to_pb};
use crate::server::service::Answer;

/// `RateLimitRequest` as JSON.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct JsonRequest {
    #[serde(default)]
    domain: String,
    #[serde(default)]
    descriptors: Vec<JsonDescriptor>,
    #[serde(
        default,
        alias = "hits_addend",
        rename = "hitsAddend",
        deserialize_with = "int"
    )]
    hits_addend: u64,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct JsonDescriptor {
    #[serde(default)]
    entries: Vec<JsonEntry>,
    #[serde(default)]
    limit: Option<JsonOverride>,
    #[serde(
        default,
        alias = "hits_addend",
        rename = "hitsAddend",
        deserialize_with = "opt_int"
    )]
    hits_addend: Option<u64>,
    #[serde(default, alias = "is_negative_hits", rename = "isNegativeHits")]
    is_negative_hits: bool,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct JsonEntry {
    #[serde(default)]
    key: String,
    #[serde(default)]
    value: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct JsonOverride {
    #[serde(
        default,
        alias = "requests_per_unit",
        rename = "requestsPerUnit",
        deserialize_with = "int"
    )]
    requests_per_unit: u32,
    #[serde(default = "unknown_unit", deserialize_with = "unit")]
    unit: Unit,
}

/// A protobuf JSON integer: a number or a decimal string.
#[derive(Deserialize)]
#[serde(untagged)]
enum Int {
    Num(u64),
    Str(String),
}

fn int<'de, D: Deserializer<'de>, T: TryFrom<u64>>(d: D) -> Result<T, D::Error> {
    let n = match Int::deserialize(d)? {
        Int::Num(n) => n,
        Int::Str(s) => s.parse().map_err(serde::de::Error::custom)?,
    };
    T::try_from(n).map_err(|_| serde::de::Error::custom("integer out of range"))
}

fn opt_int<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    int(d).map(Some)
}

/// A unit by its enum name (`"MINUTE"`) or number.
fn unit<'de, D: Deserializer<'de>>(d: D) -> Result<Unit, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum U {
        Num(i32),
        Name(String),
    }
    Ok(match U::deserialize(d)? {
        U::Num(n) => unit_from_i32(n),
        U::Name(s) => {
            let n = (0..=7)
                .find(|&n| unit_to_pb(unit_from_i32(n)).as_str_name() == s)
                .ok_or_else(|| serde::de::Error::custom(format!("unknown unit '{s}'")))?;
            unit_from_i32(n)
        }
    })
}

fn unknown_unit() -> Unit {
    Unit::Unknown
}

impl JsonRequest {
    /// The request in the service's types, with the same rules as gRPC's (`hits_addend` 0
    /// means 1 at the request level; `isNegativeHits` is refused).
    pub(crate) fn into_api(self) -> Result<api::RateLimitRequest, String> {
        let descriptors = self
            .descriptors
            .into_iter()
            .enumerate()
            .map(|(i, d)| {
                if d.is_negative_hits {
                    return Err(format!("descriptor {i}: is_negative_hits is not supported"));
                }
                Ok(Descriptor {
                    entries: d.entries.into_iter().map(|e| (e.key, e.value)).collect(),
                    limit: d.limit.map(|l| LimitOverride {
                        requests_per_unit: l.requests_per_unit,
                        unit: l.unit,
                    }),
                    hits_addend: d.hits_addend,
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(api::RateLimitRequest {
            domain: self.domain,
            descriptors,
            hits_addend: self.hits_addend.max(1),
        })
    }
}

/// `RateLimitResponse` as JSON (fields at their default value omitted, as protojson does).
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct JsonResponse {
    overall_code: &'static str,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    statuses: Vec<JsonStatus>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    response_headers_to_add: Vec<JsonHeader>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct JsonStatus {
    code: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    current_limit: Option<JsonLimit>,
    #[serde(skip_serializing_if = "is_zero")]
    limit_remaining: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    duration_until_reset: Option<String>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct JsonLimit {
    #[serde(skip_serializing_if = "String::is_empty")]
    name: String,
    #[serde(skip_serializing_if = "is_zero")]
    requests_per_unit: u32,
    unit: &'static str,
}

#[derive(Serialize)]
struct JsonHeader {
    key: String,
    value: String,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

fn code_name(code: Code) -> &'static str {
    match code {
        Code::Ok => "OK",
        Code::OverLimit => "OVER_LIMIT",
    }
}

/// A duration as protobuf JSON writes it: seconds with 0, 3, 6 or 9 fractional digits.
fn duration(d: Duration) -> String {
    let (s, n) = (d.as_secs(), d.subsec_nanos());
    if n == 0 {
        format!("{s}s")
    } else if n % 1_000_000 == 0 {
        format!("{s}.{:03}s", n / 1_000_000)
    } else if n % 1_000 == 0 {
        format!("{s}.{:06}s", n / 1_000)
    } else {
        format!("{s}.{n:09}s")
    }
}

impl JsonResponse {
    /// The answer as JSON; `over_limit` tells the HTTP status.
    pub(crate) fn new(answer: Answer) -> (Self, bool) {
        let over = answer.response.overall == Code::OverLimit;
        let statuses = answer
            .response
            .statuses
            .into_iter()
            .map(|s| JsonStatus {
                code: code_name(s.code),
                current_limit: s.current_limit.map(|l| JsonLimit {
                    name: l.name.map(|n| n.to_string()).unwrap_or_default(),
                    requests_per_unit: l.requests_per_unit,
                    unit: unit_to_pb(l.unit).as_str_name(),
                }),
                limit_remaining: s.limit_remaining,
                duration_until_reset: s.duration_until_reset.map(duration),
            })
            .collect();
        let headers = answer
            .headers
            .into_iter()
            .map(|(key, value)| JsonHeader { key, value })
            .collect();
        let r = JsonResponse {
            overall_code: code_name(answer.response.overall),
            statuses,
            response_headers_to_add: headers,
        };
        (r, over)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_both_spellings_and_string_integers() {
        let r: JsonRequest = serde_json::from_str(
            r#"{"domain":"d","hits_addend":"3","descriptors":[{"entries":[{"key":"k"}],
               "hitsAddend":0,"limit":{"requestsPerUnit":5,"unit":"HOUR"}}]}"#,
        )
        .unwrap();
        let r = r.into_api().unwrap();
        assert_eq!(r.hits_addend, 3);
        assert_eq!(r.descriptors[0].hits_addend, Some(0));
        assert_eq!(r.descriptors[0].entries[0].1, "");
        assert_eq!(r.descriptors[0].limit.unwrap().unit, Unit::Hour);
    }

    #[test]
    fn refuses_unknown_fields_and_units() {
        assert!(serde_json::from_str::<JsonRequest>(r#"{"domain":"d","x":1}"#).is_err());
        assert!(serde_json::from_str::<JsonRequest>(
            r#"{"descriptors":[{"limit":{"unit":"FORTNIGHT"}}]}"#
        )
        .is_err());
    }

    #[test]
    fn durations_as_protobuf_json() {
        assert_eq!(duration(Duration::from_secs(2)), "2s");
        assert_eq!(duration(Duration::from_millis(1_500)), "1.500s");
        assert_eq!(duration(Duration::from_nanos(7)), "0.000000007s");
    }
}
