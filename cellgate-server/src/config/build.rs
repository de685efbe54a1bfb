//! From parsed documents to a validated [`Config`]: each check names the file and the place
//! (`descriptors[1].rate_limit.unit`); messages are ratelimit's where ratelimit has the check.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use super::yaml::{self, RawDescriptor, RawRateLimit, RawRoot};
use super::{
    period, Algorithm, Config, ConfigError, Domain, LimitDef, Node, Pattern, Rule, RuleSpec,
};
use crate::api::Unit;

/// Collects files into one config.
#[derive(Default)]
pub(crate) struct Builder {
    domains: BTreeMap<String, Domain>,
    slots: Vec<RuleSpec>,
    /// A domain met again adds its descriptors (`MERGE_DOMAIN_CONFIG`) instead of being refused.
    merge: bool,
}

/// Where a check is made: the file and the place in it.
struct At<'a> {
    file: &'a str,
    place: String,
}

impl At<'_> {
    fn error(&self, field: &str, message: impl Into<String>) -> ConfigError {
        let place = match (self.place.is_empty(), field.is_empty()) {
            (_, true) => self.place.clone(),
            (true, false) => field.to_owned(),
            (false, false) => format!("{}.{field}", self.place),
        };
        ConfigError {
            file: self.file.to_owned(),
            place,
            message: message.into(),
        }
    }

    fn child(&self, field: &str) -> At<'_> {
        let place = if self.place.is_empty() {
            field.to_owned()
        } else {
            format!("{}.{field}", self.place)
        };
        At {
            file: self.file,
            place,
        }
    }
}

impl Builder {
    pub(crate) fn merging(merge: bool) -> Builder {
        Builder {
            merge,
            ..Builder::default()
        }
    }

    pub(crate) fn add_text(&mut self, file: &str, text: &str) -> Result<(), ConfigError> {
        let root = yaml::parse(text).map_err(|(place, message)| ConfigError {
            file: file.to_owned(),
            place,
            message,
        })?;
        self.add_root(file, root)
    }

    pub(crate) fn add_root(&mut self, file: &str, root: RawRoot) -> Result<(), ConfigError> {
        let at = At {
            file,
            place: String::new(),
        };
        let domain = root.domain.unwrap_or_default();
        if domain.is_empty() {
            return Err(at.error("domain", "config file cannot have empty domain"));
        }
        // A domain met again (merging) starts from the descriptors its earlier files gave, so
        // that a composite key in both is found taken.
        let (first, mut tree) = match self.domains.remove(&domain) {
            Some(d) if self.merge => (d.file, d.root),
            Some(d) => {
                return Err(at.error(
                    "domain",
                    format!(
                        "duplicate domain '{domain}' in config file (also in {})",
                        d.file
                    ),
                ))
            }
            None => (file.to_owned(), Node::default()),
        };
        let path = vec![(domain.clone(), None)];
        self.level(
            &at,
            &mut tree,
            &root.descriptors,
            &path,
            &format!("{domain}."),
        )?;
        self.domains.insert(
            domain,
            Domain {
                file: first,
                root: tree,
            },
        );
        Ok(())
    }

    pub(crate) fn finish(self) -> Config {
        Config {
            domains: self.domains,
            slots: self.slots,
        }
    }

    fn level(
        &mut self,
        at: &At<'_>,
        node: &mut Node,
        descriptors: &[RawDescriptor],
        path: &[(String, Option<String>)],
        stat_prefix: &str,
    ) -> Result<(), ConfigError> {
        for (i, d) in descriptors.iter().enumerate() {
            let here = at.child(&format!("descriptors[{i}]"));
            let key = d.key.clone().unwrap_or_default();
            if key.is_empty() {
                return Err(here.error("key", "descriptor has empty key"));
            }
            // ratelimit treats an empty value as no value.
            let value = d.value.clone().filter(|v| !v.is_empty());
            let stat_key = match &value {
                Some(v) => format!("{stat_prefix}{key}_{v}"),
                None => format!("{stat_prefix}{key}"),
            };
            let mut child_path = path.to_vec();
            child_path.push((key.clone(), value.clone()));
            let pattern = value.as_deref().and_then(Pattern::new);
            if d.share_threshold && pattern.is_none() {
                return Err(here.error(
                    "share_threshold",
                    format!(
                        "share_threshold can only be used with wildcard values (containing \
                         '*'), but found key '{}'",
                        match &value {
                            Some(v) => format!("{key}_{v}"),
                            None => key.clone(),
                        }
                    ),
                ));
            }
            let mut child = Node {
                limit: self.limit(&here, d, &child_path, &stat_key)?,
                value_to_metric: d.value_to_metric,
                share_threshold: d.share_threshold,
                ..Node::default()
            };
            self.level(
                &here,
                &mut child,
                &d.descriptors,
                &child_path,
                &format!("{stat_key}."),
            )?;
            let siblings = node.children.entry(key).or_default();
            let taken = match (&value, &pattern) {
                (None, _) => siblings.any.is_some(),
                (Some(_), Some(p)) => siblings.wildcards.iter().any(|(q, _)| q.text == p.text),
                (Some(v), None) => siblings.exact.contains_key(v),
            };
            if taken {
                return Err(here.error(
                    "",
                    format!("duplicate descriptor composite key '{stat_key}'"),
                ));
            }
            match (value, pattern) {
                (None, _) => siblings.any = Some(Box::new(child)),
                (Some(_), Some(p)) => siblings.wildcards.push((p, child)),
                (Some(v), None) => {
                    siblings.exact.insert(v, child);
                }
            }
        }
        Ok(())
    }

    fn limit(
        &mut self,
        at: &At<'_>,
        d: &RawDescriptor,
        path: &[(String, Option<String>)],
        stat_key: &str,
    ) -> Result<Option<LimitDef>, ConfigError> {
        let raws: Vec<(At<'_>, &RawRateLimit)> = match (&d.rate_limit, &d.rate_limits) {
            (Some(_), Some(_)) => {
                return Err(at.error("", "rate_limit and rate_limits are exclusive: give one"))
            }
            (None, None) => return Ok(None),
            (Some(r), None) => vec![(at.child("rate_limit"), r)],
            (None, Some(list)) if list.is_empty() => {
                return Err(at.error("rate_limits", "rate_limits must not be empty"))
            }
            (None, Some(list)) => list
                .iter()
                .enumerate()
                .map(|(j, r)| (at.child(&format!("rate_limits[{j}]")), r))
                .collect(),
        };
        let several = d.rate_limits.is_some();
        let mut rules = Vec::with_capacity(raws.len());
        let mut unlimited = false;
        for (index, (here, raw)) in raws.iter().enumerate() {
            check_names(here, raw)?;
            if raw.unlimited {
                check_unlimited(here, raw, several)?;
                unlimited = true;
                continue;
            }
            let (algorithm, rpu, period, unit) = rate(here, raw)?;
            let name = raw.name.as_deref().filter(|n| !n.is_empty()).map(Arc::from);
            let replaces = (raw.replaces.iter())
                .filter_map(|r| r.name.as_deref().map(Arc::from))
                .collect();
            if rpu == 0 {
                // ratelimit's "banned" limit: every request over it, no state to keep.
                if several {
                    return Err(here.error(
                        "requests_per_unit",
                        "requests_per_unit 0 (every request over the limit) is only allowed in \
                         rate_limit, not in rate_limits",
                    ));
                }
                rules.push(Rule {
                    slot: None,
                    requests_per_unit: 0,
                    unit,
                    name,
                    replaces,
                });
                continue;
            }
            let spec = RuleSpec {
                path: path.to_vec(),
                index,
                algorithm,
                requests_per_unit: rpu,
                period,
            };
            super::check_spec(&spec).map_err(|e| here.error("", e.to_string()))?;
            self.slots.push(spec);
            rules.push(Rule {
                slot: Some(self.slots.len() - 1),
                requests_per_unit: rpu,
                unit,
                name,
                replaces,
            });
        }
        Ok(Some(LimitDef {
            unlimited,
            shadow_mode: d.shadow_mode,
            quota_mode: d.quota_mode,
            detailed_metric: d.detailed_metric,
            stat_key: Arc::from(stat_key),
            rules,
        }))
    }
}

fn check_names(at: &At<'_>, raw: &RawRateLimit) -> Result<(), ConfigError> {
    for (k, r) in raw.replaces.iter().enumerate() {
        let name = r.name.as_deref().unwrap_or_default();
        if name.is_empty() {
            return Err(at.error(
                &format!("replaces[{k}].name"),
                "should not have an empty replaces entry",
            ));
        }
        if raw.name.as_deref() == Some(name) {
            return Err(at.error(
                &format!("replaces[{k}].name"),
                "replaces should not contain name of same descriptor",
            ));
        }
    }
    Ok(())
}

fn check_unlimited(at: &At<'_>, raw: &RawRateLimit, several: bool) -> Result<(), ConfigError> {
    if several {
        return Err(at.error(
            "unlimited",
            "unlimited is only allowed in rate_limit, not in rate_limits",
        ));
    }
    if raw.unit.as_deref().and_then(parse_unit).is_some() {
        return Err(at.error("unit", "should not specify rate limit unit when unlimited"));
    }
    for (field, given) in [
        ("period", raw.period.is_some()),
        ("algorithm", raw.algorithm.is_some()),
        ("burst", raw.burst.is_some()),
    ] {
        if given {
            return Err(at.error(field, format!("should not specify {field} when unlimited")));
        }
    }
    Ok(())
}

/// The algorithm, requests per unit, period and reported unit of a limit.
fn rate(at: &At<'_>, raw: &RawRateLimit) -> Result<(Algorithm, u32, Duration, Unit), ConfigError> {
    let rpu = raw.requests_per_unit.unwrap_or(0);
    let algorithm = match raw.algorithm.as_deref() {
        None | Some("fixed_window") => Algorithm::FixedWindow,
        Some("gcra") => Algorithm::Gcra {
            burst: raw.burst.unwrap_or(rpu),
        },
        Some("sliding_window") => Algorithm::SlidingWindow,
        Some("stock") => Algorithm::Stock,
        Some(other) => {
            return Err(at.error(
                "algorithm",
                format!(
                    "invalid algorithm '{other}' (expected fixed_window, gcra, sliding_window or stock)"
                ),
            ))
        }
    };
    match raw.burst {
        Some(_) if !matches!(algorithm, Algorithm::Gcra { .. }) => {
            return Err(at.error("burst", "burst is only for algorithm gcra"))
        }
        Some(0) => return Err(at.error("burst", "burst must be positive")),
        _ => {}
    }
    if raw.requests_per_unit.is_none() {
        return Err(at.error(
            "requests_per_unit",
            "requests_per_unit is missing (0 refuses every request; unlimited: true for no limit)",
        ));
    }
    if algorithm == Algorithm::Stock {
        for (field, given) in [
            ("unit", raw.unit.is_some()),
            ("period", raw.period.is_some()),
        ] {
            if given {
                return Err(at.error(field, "a stock has no unit or period: it is never refilled"));
            }
        }
        return Ok((algorithm, rpu, Duration::ZERO, Unit::Unknown));
    }
    let (period, unit) = match (&raw.unit, &raw.period) {
        (Some(_), Some(_)) => return Err(at.error("period", "give unit or period, not both")),
        (Some(u), None) => match parse_unit(u) {
            Some(unit) => (Duration::from_secs(unit.seconds().unwrap_or(1)), unit),
            None => return Err(at.error("unit", format!("invalid rate limit unit '{u}'"))),
        },
        (None, Some(p)) => match period::parse(p) {
            Some(d) => (d, unit_of(d)),
            None => {
                return Err(at.error(
                    "period",
                    format!(
                    "invalid period '{p}' (expected an integer and ms, s, m, h or d, such as 30s)"
                ),
                ))
            }
        },
        (None, None) => return Err(at.error("unit", "invalid rate limit unit ''")),
    };
    Ok((algorithm, rpu, period, unit))
}

/// ratelimit's unit names, in any case; `unknown` is not a unit.
pub(crate) fn parse_unit(text: &str) -> Option<Unit> {
    Some(match text.to_ascii_lowercase().as_str() {
        "second" => Unit::Second,
        "minute" => Unit::Minute,
        "hour" => Unit::Hour,
        "day" => Unit::Day,
        "week" => Unit::Week,
        "month" => Unit::Month,
        "year" => Unit::Year,
        _ => return None,
    })
}

/// The unit a period is exactly, else [`Unit::Unknown`].
pub(crate) fn unit_of(period: Duration) -> Unit {
    let units = [
        Unit::Second,
        Unit::Minute,
        Unit::Hour,
        Unit::Day,
        Unit::Week,
        Unit::Month,
        Unit::Year,
    ];
    units
        .into_iter()
        .find(|u| u.seconds().map(Duration::from_secs) == Some(period))
        .unwrap_or(Unit::Unknown)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn units_read_in_any_case_and_periods_report_the_unit_they_are() {
        assert_eq!(parse_unit("MINUTE"), Some(Unit::Minute));
        assert_eq!(parse_unit("Second"), Some(Unit::Second));
        assert_eq!(parse_unit("unknown"), None);
        assert_eq!(unit_of(Duration::from_secs(3_600)), Unit::Hour);
        assert_eq!(unit_of(Duration::from_secs(30 * 86_400)), Unit::Month);
        assert_eq!(unit_of(Duration::from_millis(1_500)), Unit::Unknown);
    }

    #[test]
    fn an_empty_value_is_no_value_as_in_ratelimit() {
        let c = Config::from_yaml(
            "t.yaml",
            "domain: d\ndescriptors:\n  - key: k\n    value: \"\"\n    rate_limit: {unit: second, requests_per_unit: 1}\n",
        )
        .unwrap();
        assert!(c.domains["d"].root.children["k"].any.is_some());
    }
}
