//! Reload on change: a file rewritten, a ConfigMap's `..data` symlink swapped, an invalid
//! config refused (the old one stays, the error counter moves) while requests are answered.

use crate::common;

use std::cell::Cell;
use std::path::Path;

use common::{curl, eventually, has, need, post_json, Server};

fn config(limit: u32) -> String {
    format!(
        "domain: shop\ndescriptors:\n  - key: remote_address\n    rate_limit: {{unit: year, requests_per_unit: {limit}}}\n"
    )
}

const INVALID: &str = "domain: shop\ndescriptors:\n  - key: remote_address\n    rate_limit: {unit: fortnight, requests_per_unit: 1}\n";

thread_local! {
    static NEXT: Cell<u32> = const { Cell::new(0) };
}

/// The limit a fresh address is answered with (each call uses a new address, so the answers
/// are never over the limit).
fn limit_in_force(s: &Server) -> u64 {
    let n = NEXT.with(|c| {
        c.set(c.get() + 1);
        c.get()
    });
    let body = format!(
        r#"{{"domain":"shop","descriptors":[{{"entries":[{{"key":"remote_address","value":"10.9.{}.{}"}}]}}]}}"#,
        n / 250,
        n % 250
    );
    let r = post_json(s, &body);
    assert_eq!(r.status, 200, "{}", r.body);
    let v: serde_json::Value = serde_json::from_str(&r.body).expect("JSON");
    v["statuses"][0]["currentLimit"]["requestsPerUnit"]
        .as_u64()
        .unwrap_or(0)
}

fn counter(s: &Server, name: &str) -> u64 {
    let m = curl(&[&s.url("/metrics")]);
    m.body
        .lines()
        .find(|l| l.split(' ').next() == Some(name))
        .and_then(|l| l.rsplit(' ').next()?.parse().ok())
        .unwrap_or(0)
}

/// Writes `text` to `path` as editors do: a new file renamed over the old one.
fn replace(path: &Path, text: &str) {
    let tmp = path.with_extension("tmp~");
    std::fs::write(&tmp, text).expect("write");
    std::fs::rename(&tmp, path).expect("rename");
}

#[test]
fn a_rewritten_file_is_reloaded_and_an_invalid_one_is_refused() {
    if !need(has("curl"), "curl") {
        return;
    }
    let s = Server::start(&config(3), &[], &[]);
    assert_eq!(limit_in_force(&s), 3);

    std::fs::write(s.config_file(), config(5)).expect("write in place");
    eventually("the rewritten config in force", || limit_in_force(&s) == 5);

    replace(&s.config_file(), &config(7));
    eventually("the renamed-over config in force", || {
        limit_in_force(&s) == 7
    });
    assert!(counter(&s, "ratelimit_service_config_load_success") >= 3);

    replace(&s.config_file(), INVALID);
    eventually("the invalid config counted", || {
        counter(&s, "ratelimit_service_config_load_error") >= 1
    });
    assert_eq!(limit_in_force(&s), 7, "the previous config stays in force");
    assert_eq!(curl(&[&s.url("/healthcheck")]).status, 200);
}

#[test]
fn a_configmap_symlink_swap_is_reloaded() {
    if !need(has("curl"), "curl") {
        return;
    }
    // A ConfigMap volume: DIR/shop.yaml -> ..data/shop.yaml, ..data -> ..v1.
    let dir = tempfile::tempdir().expect("temp dir");
    let root = dir.path().to_owned();
    let version = |name: &str, text: &str| {
        std::fs::create_dir(root.join(name)).expect("mkdir");
        std::fs::write(root.join(name).join("shop.yaml"), text).expect("write");
    };
    let swap = |name: &str| {
        std::os::unix::fs::symlink(name, root.join("..data_tmp")).expect("symlink");
        std::fs::rename(root.join("..data_tmp"), root.join("..data")).expect("swap ..data");
    };
    version("..v1", &config(3));
    std::os::unix::fs::symlink("..v1", root.join("..data")).expect("symlink");
    std::os::unix::fs::symlink("..data/shop.yaml", root.join("shop.yaml")).expect("symlink");

    let s = Server::start_in(dir, &root, &[], &[]);
    assert_eq!(limit_in_force(&s), 3);

    version("..v2", &config(4));
    swap("..v2");
    eventually("the swapped-in config in force", || limit_in_force(&s) == 4);

    version("..v3", INVALID);
    swap("..v3");
    eventually("the invalid config counted", || {
        counter(&s, "ratelimit_service_config_load_error") >= 1
    });
    assert_eq!(limit_in_force(&s), 4, "the previous config stays in force");
}
