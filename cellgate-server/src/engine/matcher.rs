//! ratelimit's matching: for each entry in order, the child of the same key and value, else
//! the first child of that key whose `prefix*` value the entry's value starts with, else the
//! child of that key alone; the limit is the one of the node the last entry lands on (a
//! descriptor with more entries than the tree has levels matches nothing).

use crate::config::{LimitDef, Node};

/// The limit of the node `entries` lead to, if any.
pub(crate) fn find<'c>(root: &'c Node, entries: &[(String, String)]) -> Option<&'c LimitDef> {
    let mut node = root;
    let last = entries.len().checked_sub(1)?;
    for (i, (key, value)) in entries.iter().enumerate() {
        let children = node.children.get(key)?;
        let next = children
            .exact
            .get(value)
            .or_else(|| {
                children
                    .wildcards
                    .iter()
                    .find(|(prefix, _)| value.starts_with(prefix.as_str()))
                    .map(|(_, n)| n)
            })
            .or(children.any.as_deref())?;
        if i == last {
            return next.limit.as_ref();
        }
        node = next;
    }
    None
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
            |e: &[(&str, &str)]| find(root, &entries(e)).map(|l| l.rules[0].requests_per_unit);
        assert_eq!(rpu(&[("k", "exact")]), Some(1));
        assert_eq!(rpu(&[("k", "extra")]), Some(2));
        assert_eq!(rpu(&[("k", "other")]), Some(3));
        assert_eq!(rpu(&[("k", "other"), ("sub", "x")]), Some(4));
        assert_eq!(rpu(&[("k", "exact"), ("sub", "x")]), None);
        assert_eq!(rpu(&[("k", "other"), ("sub", "x"), ("deeper", "y")]), None);
        assert_eq!(rpu(&[("nope", "x")]), None);
        assert_eq!(rpu(&[]), None);
    }
}
