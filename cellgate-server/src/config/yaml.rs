//! The YAML documents as written: ratelimit's fields plus cellgate's extensions, every unknown
//! field refused (ratelimit refuses unknown keys too).

use serde::{Deserialize, Serialize};

/// One config file.
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct RawRoot {
    /// The domain the file's descriptors belong to.
    #[serde(default, deserialize_with = "scalar")]
    pub domain: Option<String>,
    /// The top-level descriptors.
    #[serde(default)]
    pub descriptors: Vec<RawDescriptor>,
}

/// One descriptor of the tree.
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct RawDescriptor {
    /// The entry's key.
    #[serde(default, deserialize_with = "scalar")]
    pub key: Option<String>,
    /// The entry's value: absent matches any value, `prefix*` every value starting so.
    #[serde(
        default,
        deserialize_with = "scalar",
        skip_serializing_if = "Option::is_none"
    )]
    pub value: Option<String>,
    /// ratelimit's single limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate_limit: Option<RawRateLimit>,
    /// Extension: several limits, all of which must admit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate_limits: Option<Vec<RawRateLimit>>,
    /// Nested descriptors.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub descriptors: Vec<RawDescriptor>,
    /// Count and report, never refuse.
    #[serde(default, skip_serializing_if = "is_false")]
    pub shadow_mode: bool,
    /// Metric key with the request's values.
    #[serde(default, skip_serializing_if = "is_false")]
    pub detailed_metric: bool,
    /// Metric key with the request's value where the descriptor has none (or a wildcard).
    #[serde(default, skip_serializing_if = "is_false")]
    pub value_to_metric: bool,
    /// A wildcard descriptor: every value it matches shares one limit.
    #[serde(default, skip_serializing_if = "is_false")]
    pub share_threshold: bool,
    /// ratelimit's quota mode: over this limit, a request is refused only when every quota
    /// descriptor it charges is over.
    #[serde(default, skip_serializing_if = "is_false")]
    pub quota_mode: bool,
    /// ratelimit passes it to Envoy; accepted and ignored here.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<serde_yaml::Value>,
}

/// One limit.
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct RawRateLimit {
    /// `second`, `minute`, `hour`, `day`, `week`, `month`, `year` (any case).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unit: Option<String>,
    /// Requests admitted per unit (units sold, for a stock).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requests_per_unit: Option<u32>,
    /// No limit at all.
    #[serde(default, skip_serializing_if = "is_false")]
    pub unlimited: bool,
    /// The name other limits' `replaces` refer to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Limits this one replaces when both match one request.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub replaces: Vec<RawReplaces>,
    /// Extension: `fixed_window` (default), `gcra`, `sliding_window`, `stock`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub algorithm: Option<String>,
    /// Extension: a duration (`500ms`, `30s`, `5m`, `2h`, `1d`) instead of `unit`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub period: Option<String>,
    /// Extension (GCRA only): requests admitted at once; default `requests_per_unit`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub burst: Option<u32>,
}

/// One entry of `replaces`.
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct RawReplaces {
    /// The replaced limit's name.
    #[serde(default)]
    pub name: Option<String>,
}

/// A string field that also takes a number or a boolean as its text (ratelimit's YAML library
/// reads `value: 429` as the string "429").
fn scalar<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    use serde::de::Error;
    match Option::<serde_yaml::Value>::deserialize(d)? {
        None | Some(serde_yaml::Value::Null) => Ok(None),
        Some(serde_yaml::Value::String(s)) => Ok(Some(s)),
        Some(serde_yaml::Value::Number(n)) => Ok(Some(n.to_string())),
        Some(serde_yaml::Value::Bool(b)) => Ok(Some(b.to_string())),
        Some(_) => Err(D::Error::custom("expected a string")),
    }
}

fn is_false(b: &bool) -> bool {
    !*b
}

/// Parses one file's text; an empty document is an empty root (refused later for its missing
/// domain, as ratelimit does).
pub(crate) fn parse(text: &str) -> Result<RawRoot, (String, String)> {
    if text.trim().is_empty() {
        return Ok(RawRoot::default());
    }
    serde_yaml::from_str::<Option<RawRoot>>(text)
        .map(Option::unwrap_or_default)
        .map_err(|e| {
            let place = match e.location() {
                Some(l) => format!("line {} column {}", l.line(), l.column()),
                None => String::new(),
            };
            (place, format!("error loading config file: {e}"))
        })
}
