//! Loading the config: files, directories, Kubernetes ConfigMap mounts, the dump, and every
//! validation error with its file, place and message.

use std::path::{Path, PathBuf};

use cellgate_server::config::{load, load_merging, ConfigError};

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures")
}

fn invalid(name: &str) -> ConfigError {
    let file = fixtures().join("invalid").join(format!("{name}.yaml"));
    match load(&file) {
        Ok(_) => panic!("{name} was accepted"),
        Err(e) => {
            assert_eq!(e.file, file.display().to_string(), "{name}");
            e
        }
    }
}

#[test]
fn every_validation_error_names_its_place_and_says_what_is_wrong() {
    let cases: &[(&str, &str, &str)] = &[
        (
            "unknown_key",
            "line 4 column 5",
            "unknown field `rate_limt`",
        ),
        ("unknown_key_in_limit", "line 4", "unknown field `burts`"),
        (
            "duplicate_key",
            "descriptors[1]",
            "duplicate descriptor composite key 'd.k_v'",
        ),
        (
            "bad_unit",
            "descriptors[1].rate_limit.unit",
            "invalid rate limit unit 'fortnight'",
        ),
        (
            "zero_in_rate_limits",
            "descriptors[0].rate_limits[1].requests_per_unit",
            "only allowed in rate_limit, not in rate_limits",
        ),
        (
            "missing_requests",
            "descriptors[0].rate_limit.requests_per_unit",
            "requests_per_unit is missing",
        ),
        (
            "missing_domain",
            "domain",
            "config file cannot have empty domain",
        ),
        (
            "empty_key",
            "descriptors[0].key",
            "descriptor has empty key",
        ),
        (
            "unlimited_with_unit",
            "descriptors[0].rate_limit.unit",
            "should not specify rate limit unit when unlimited",
        ),
        (
            "empty_replaces",
            "descriptors[0].rate_limit.replaces[0].name",
            "should not have an empty replaces entry",
        ),
        (
            "replaces_itself",
            "descriptors[0].rate_limit.replaces[0].name",
            "replaces should not contain name of same descriptor",
        ),
        (
            "bad_algorithm",
            "descriptors[0].rate_limit.algorithm",
            "invalid algorithm 'leaky'",
        ),
        (
            "bad_period",
            "descriptors[0].rate_limit.period",
            "invalid period '5 minutes'",
        ),
        (
            "burst_without_gcra",
            "descriptors[0].rate_limit.burst",
            "burst is only for algorithm gcra",
        ),
        (
            "both_rate_limit_forms",
            "descriptors[0]",
            "rate_limit and rate_limits are exclusive",
        ),
        (
            "stock_with_unit",
            "descriptors[0].rate_limit.unit",
            "a stock has no unit or period",
        ),
        (
            "unit_and_period",
            "descriptors[0].rate_limit.period",
            "give unit or period, not both",
        ),
        (
            "nested_error",
            "descriptors[0].descriptors[0].rate_limits[1].unit",
            "invalid rate limit unit 'sec'",
        ),
        ("limit_too_large", "descriptors[0].rate_limit", "limit"),
        (
            "share_threshold_without_wildcard",
            "descriptors[0].share_threshold",
            "share_threshold can only be used with wildcard values (containing '*'), but found \
             key 'files_report.pdf'",
        ),
        ("not_yaml", "line", "error loading config file"),
    ];
    for (name, place, message) in cases {
        let e = invalid(name);
        assert!(e.place.starts_with(place), "{name}: place {:?}", e.place);
        assert!(
            e.message.contains(message),
            "{name}: message {:?}",
            e.message
        );
    }
    let listed = std::fs::read_dir(fixtures().join("invalid"))
        .unwrap()
        .count();
    assert_eq!(listed, cases.len(), "every invalid fixture has a case");
}

#[test]
fn a_directory_loads_its_yaml_files_in_name_order() {
    let c = load(&fixtures().join("two_files")).unwrap();
    assert_eq!(c.domains().collect::<Vec<_>>(), ["a", "b"]);
    assert_eq!(
        c.dump(),
        "a.k: unit=SECOND requests_per_unit=1, shadow_mode: false, quota_mode: false\n\
         b.k: unit=HOUR requests_per_unit=2, shadow_mode: false, quota_mode: false\n"
    );
}

#[test]
fn one_domain_in_two_files_is_refused_naming_both() {
    let dir = fixtures().join("duplicate_domain");
    let e = load(&dir).unwrap_err();
    assert_eq!(e.file, dir.join("2.yaml").display().to_string());
    assert!(e.message.contains("duplicate domain 'a'"), "{e}");
    assert!(
        e.message
            .contains(&dir.join("1.yaml").display().to_string()),
        "{e}"
    );
}

#[test]
fn merging_makes_one_domain_of_its_files_descriptors() {
    let dir = fixtures().join("merged_domain");
    let e = load(&dir).unwrap_err();
    assert!(e.message.contains("duplicate domain 'shop'"), "{e}");
    let c = load_merging(&dir, true).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(c.domains().collect::<Vec<_>>(), ["shop"]);
    assert_eq!(
        c.dump(),
        "shop.path_/checkout: unit=MINUTE requests_per_unit=1, shadow_mode: false, quota_mode: false\n\
         shop.path_/search: unit=MINUTE requests_per_unit=2, shadow_mode: false, quota_mode: false\n\
         shop.user.path_/checkout: unit=HOUR requests_per_unit=5, shadow_mode: false, quota_mode: false\n"
    );
}

#[test]
fn merging_refuses_a_composite_key_two_files_give_naming_the_later() {
    let dir = fixtures().join("duplicate_domain");
    let e = load_merging(&dir, true).unwrap_err();
    assert_eq!(e.file, dir.join("2.yaml").display().to_string());
    assert_eq!(e.place, "descriptors[0]");
    assert!(
        e.message
            .contains("duplicate descriptor composite key 'a.k'"),
        "{e}"
    );
}

#[test]
fn the_dump_lists_one_line_per_limit_with_the_extensions() {
    let c = load(&fixtures().join("extensions/config.yaml")).unwrap();
    assert_eq!(
        c.dump(),
        "shop.half: unit=UNKNOWN requests_per_unit=1, shadow_mode: false, quota_mode: false, period: 500ms\n\
         shop.item_iphone: unit=UNKNOWN requests_per_unit=2, shadow_mode: false, quota_mode: false, algorithm: stock\n\
         shop.sku: unit=SECOND requests_per_unit=10, shadow_mode: false, quota_mode: false, algorithm: gcra, burst: 2\n\
         shop.sku: unit=UNKNOWN requests_per_unit=3, shadow_mode: false, quota_mode: false, algorithm: sliding_window, period: 5m\n"
    );
}

/// A scratch directory removed on drop.
struct Scratch(PathBuf);

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[cfg(unix)]
#[test]
fn a_configmap_mount_loads_each_file_once() {
    use std::os::unix::fs::symlink;
    let dir = std::env::temp_dir().join(format!("cellgate-configmap-{}", std::process::id()));
    let scratch = Scratch(dir.clone());
    let _ = std::fs::remove_dir_all(&dir);
    let data = dir.join("..2024_01_01_00_00_00.000000001");
    std::fs::create_dir_all(&data).unwrap();
    std::fs::copy(fixtures().join("two_files/a.yaml"), data.join("a.yaml")).unwrap();
    std::fs::copy(fixtures().join("two_files/b.yml"), data.join("b.yml")).unwrap();
    symlink("..2024_01_01_00_00_00.000000001", dir.join("..data")).unwrap();
    symlink("..data/a.yaml", dir.join("a.yaml")).unwrap();
    symlink("..data/b.yml", dir.join("b.yml")).unwrap();
    // The directory itself reached through a link, as RUNTIME_ROOT often is.
    let outer =
        std::env::temp_dir().join(format!("cellgate-configmap-link-{}", std::process::id()));
    let _ = std::fs::remove_file(&outer);
    symlink(&dir, &outer).unwrap();
    for path in [&dir, &outer] {
        let c = load(path).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(c.domains().collect::<Vec<_>>(), ["a", "b"]);
    }
    let _ = std::fs::remove_file(&outer);
    drop(scratch);
}

#[test]
fn numbers_and_booleans_are_read_as_strings_where_ratelimit_reads_them_so() {
    let c = cellgate_server::config::Config::from_yaml(
        "n.yaml",
        "domain: 42\ndescriptors:\n  - key: status\n    value: 429\n    rate_limit: {unit: second, requests_per_unit: 1}\n  - key: flag\n    value: true\n",
    )
    .unwrap();
    assert_eq!(
        c.dump(),
        "42.status_429: unit=SECOND requests_per_unit=1, shadow_mode: false, quota_mode: false\n"
    );
    let e = cellgate_server::config::Config::from_yaml(
        "n.yaml",
        "domain: d\ndescriptors:\n  - key: [a]\n",
    )
    .unwrap_err();
    assert!(e.message.contains("expected a string"), "{e}");
}
