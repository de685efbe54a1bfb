//! `GET /rlconfig`'s text.

use std::fmt::Write;
use std::time::Duration;

use super::{Algorithm, Config, Node};
use crate::api::Unit;

pub(crate) fn dump(config: &Config) -> String {
    let mut out = String::new();
    for domain in config.domains.values() {
        node(config, &domain.root, &mut out);
    }
    out
}

fn node(config: &Config, n: &Node, out: &mut String) {
    if let Some(limit) = &n.limit {
        if limit.unlimited {
            let _ = writeln!(
                out,
                "{}: unit=UNKNOWN requests_per_unit=0, shadow_mode: {}, quota_mode: {}, \
                 unlimited: true",
                limit.stat_key, limit.shadow_mode, limit.quota_mode
            );
        }
        for rule in &limit.rules {
            let _ = write!(
                out,
                "{}: unit={} requests_per_unit={}, shadow_mode: {}, quota_mode: {}",
                limit.stat_key,
                unit_name(rule.unit),
                rule.requests_per_unit,
                limit.shadow_mode,
                limit.quota_mode
            );
            if let Some(spec) = rule.slot.and_then(|slot| config.slots.get(slot)) {
                match spec.algorithm {
                    Algorithm::FixedWindow => {}
                    Algorithm::Gcra { burst } => {
                        let _ = write!(out, ", algorithm: gcra, burst: {burst}");
                    }
                    Algorithm::SlidingWindow => out.push_str(", algorithm: sliding_window"),
                    Algorithm::Stock => out.push_str(", algorithm: stock"),
                }
                if rule.unit == Unit::Unknown && spec.algorithm != Algorithm::Stock {
                    let _ = write!(out, ", period: {}", period_text(spec.period));
                }
            }
            if let Some(name) = &rule.name {
                let _ = write!(out, ", name: {name}");
            }
            out.push('\n');
        }
    }
    let mut keys: Vec<_> = n.children.iter().collect();
    keys.sort_by(|a, b| a.0.cmp(b.0));
    for (_, children) in keys {
        let mut exact: Vec<_> = children.exact.iter().collect();
        exact.sort_by(|a, b| a.0.cmp(b.0));
        for (_, child) in exact {
            node(config, child, out);
        }
        for (_, child) in &children.wildcards {
            node(config, child, out);
        }
        if let Some(child) = &children.any {
            node(config, child, out);
        }
    }
}

/// RLS v3's unit names, as ratelimit prints them.
pub(crate) fn unit_name(unit: Unit) -> &'static str {
    match unit {
        Unit::Unknown => "UNKNOWN",
        Unit::Second => "SECOND",
        Unit::Minute => "MINUTE",
        Unit::Hour => "HOUR",
        Unit::Day => "DAY",
        Unit::Week => "WEEK",
        Unit::Month => "MONTH",
        Unit::Year => "YEAR",
    }
}

/// A period in the largest suffix that writes it exactly.
fn period_text(period: Duration) -> String {
    let ms = period.as_millis();
    for (per, suffix) in [
        (86_400_000, "d"),
        (3_600_000, "h"),
        (60_000, "m"),
        (1_000, "s"),
    ] {
        if ms.is_multiple_of(per) {
            return format!("{}{suffix}", ms / per);
        }
    }
    format!("{ms}ms")
}
