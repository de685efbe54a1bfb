//! ratelimit's matching: for each entry in order, the child of the same key and value, else
//! the first child of that key whose wildcard value (`*` anywhere, any number of times) the
//! entry's value matches, else the child of that key alone; the limit is the one of the node the
//! last entry lands on (a descriptor with more entries than the tree has levels matches nothing).

use crate::config::{LimitDef, Node};

/// How one entry of a descriptor found its node.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Via<'c> {
    /// The node of its key and value.
    Value,
    /// A wildcard node: its value as configured.
    Pattern(&'c str),
    /// The node of its key alone.
    Key,
}

/// What a descriptor's entries lead to.
#[derive(Debug)]
pub(crate) struct Found<'c> {
    pub(crate) def: &'c LimitDef,
    /// Whether a node on the way has `value_to_metric` or `share_threshold`: then [`path`]
    /// tells how each entry matched (walked again only for such descriptors).
    pub(crate) flagged: bool,
}

/// The limit of the node `entries` lead to, if any.
pub(crate) fn find<'c>(root: &'c Node, entries: &[(String, String)]) -> Option<Found<'c>> {
    let mut flagged = false;
    let def = walk(root, entries, |node, _| {
        flagged |= node.value_to_metric || node.share_threshold;
    })?;
    Some(Found { def, flagged })
}

/// The node each entry of `entries` matched and how, in order (for a descriptor [`find`] found).
pub(crate) fn path<'c>(root: &'c Node, entries: &[(String, String)]) -> Vec<(&'c Node, Via<'c>)> {
    let mut steps = Vec::with_capacity(entries.len());
    walk(root, entries, |node, via| steps.push((node, via)));
    steps
}

/// Walks `entries` down from `root`, calling `each` on every node matched; the limit of the
/// last one.
fn walk<'c>(
    root: &'c Node,
    entries: &[(String, String)],
    mut each: impl FnMut(&'c Node, Via<'c>),
) -> Option<&'c LimitDef> {
    let mut node = root;
    let last = entries.len().checked_sub(1)?;
    for (i, (key, value)) in entries.iter().enumerate() {
        let children = node.children.get(key)?;
        let (next, via) = match children.exact.get(value) {
            Some(n) => (n, Via::Value),
            None => match children.wildcards.iter().find(|(p, _)| p.matches(value)) {
                Some((p, n)) => (n, Via::Pattern(p.text.as_str())),
                None => (children.any.as_deref()?, Via::Key),
            },
        };
        each(next, via);
        if i == last {
            return next.limit.as_ref();
        }
        node = next;
    }
    None
}

/// The limiter key and the metric key of a descriptor found through a flagged node
/// ([`Found::flagged`]), from its entries and [`path`]'s `steps`, as ratelimit builds them:
/// - the limiter key takes a `share_threshold` node's pattern in place of the value it matched,
///   so every value that pattern matches shares one limit;
/// - the metric key (`domain.key_value...`): under `detailed`, the request's keys and values,
///   but a shared entry's pattern; otherwise each entry as configured (its key, its value, or its
///   pattern), but the request's value where the node has `value_to_metric` (a shared entry
///   keeps its pattern).
pub(crate) fn flagged_keys(
    domain: &str,
    entries: &[(String, String)],
    steps: &[(&Node, Via<'_>)],
    detailed: bool,
) -> (String, String) {
    let shared = |i: usize| match steps.get(i) {
        Some((node, Via::Pattern(p))) if node.share_threshold => Some(*p),
        _ => None,
    };
    let key = super::decide::values_key(
        (0..entries.len()).map(|i| shared(i).unwrap_or(entries[i].1.as_str())),
    );
    let mut stat = String::from(domain);
    for (i, (k, v)) in entries.iter().enumerate() {
        let value = match (shared(i), steps.get(i)) {
            (Some(p), _) => Some(p),
            _ if detailed => Some(v.as_str()),
            (None, Some((node, via))) => match via {
                Via::Value => Some(v.as_str()),
                _ if node.value_to_metric => Some(v.as_str()),
                Via::Pattern(p) => Some(*p),
                Via::Key => None,
            },
            (None, None) => None,
        };
        stat.push('.');
        stat.push_str(k);
        if let Some(value) = value.filter(|v| !v.is_empty()) {
            stat.push('_');
            stat.push_str(value);
        }
    }
    (key, stat)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;

    fn entries(e: &[(&str, &str)]) -> Vec<(String, String)> {
        e.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn exact_then_wildcard_then_key_only_and_only_at_the_last_entry() {
        let c = Config::from_yaml(
            "t.yaml",
            r#"
domain: d
descriptors:
  - key: k
    value: exact
    rate_limit: {unit: second, requests_per_unit: 1}
  - key: k
    value: "ex*"
    rate_limit: {unit: second, requests_per_unit: 2}
  - key: k
    rate_limit: {unit: second, requests_per_unit: 3}
    descriptors:
      - key: sub
        rate_limit: {unit: second, requests_per_unit: 4}
"#,
        )
        .unwrap();
        let root = &c.domains["d"].root;
        let rpu =
            |e: &[(&str, &str)]| find(root, &entries(e)).map(|f| f.def.rules[0].requests_per_unit);
        assert_eq!(rpu(&[("k", "exact")]), Some(1));
        assert_eq!(rpu(&[("k", "extra")]), Some(2));
        assert_eq!(rpu(&[("k", "other")]), Some(3));
        assert_eq!(rpu(&[("k", "other"), ("sub", "x")]), Some(4));
        assert_eq!(rpu(&[("k", "exact"), ("sub", "x")]), None);
        assert_eq!(rpu(&[("k", "other"), ("sub", "x"), ("deeper", "y")]), None);
        assert_eq!(rpu(&[("nope", "x")]), None);
        assert_eq!(rpu(&[]), None);
    }

    #[test]
    fn a_star_matches_any_run_anywhere_without_overlaps() {
        use crate::config::Pattern;
        let m = |p: &str, v: &str| Pattern::new(p).expect("a wildcard").matches(v);
        assert!(m("*", "") && m("*", "anything") && m("**", "x"));
        assert!(m("files/*", "files/") && m("files/*", "files/a.pdf") && !m("files/*", "file"));
        assert!(m("*.pdf", "a.pdf") && !m("*.pdf", "a.pdfx"));
        assert!(m("/api/*/orders", "/api/v1/orders") && m("/api/*/orders", "/api//orders"));
        // The first and last parts may not share characters: "ab" is not "a*b*b".
        assert!(!m("/api/*/orders", "/api/orders") && !m("a*b*b", "ab") && m("a*b*b", "abb"));
        assert!(m("a*b*c", "a-b-c") && m("a*b*c", "abc") && !m("a*b*c", "acb"));
        assert!(m("a**b", "ab") && !m("a*b", "ba"));
        assert!(Pattern::new("plain").is_none());
    }
}
