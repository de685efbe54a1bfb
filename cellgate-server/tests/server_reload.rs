//! Reload on change: a file rewritten, a ConfigMap's `..data` symlink swapped, an invalid
//! config refused (the old one stays, the error counter moves) while requests are answered;
//! all of it again while a load runs, an unchanged limit keeping its state throughout.

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

/// A ConfigMap volume holding `first`: DIR/shop.yaml -> ..data/shop.yaml, ..data -> ..v1.
fn configmap(first: &str) -> (tempfile::TempDir, std::path::PathBuf) {
    let dir = tempfile::tempdir().expect("temp dir");
    let root = dir.path().to_owned();
    version(&root, "..v1", first);
    std::os::unix::fs::symlink("..v1", root.join("..data")).expect("symlink");
    std::os::unix::fs::symlink("..data/shop.yaml", root.join("shop.yaml")).expect("symlink");
    (dir, root)
}

/// A new version `name` of the ConfigMap at `root`, not yet in force.
fn version(root: &Path, name: &str, text: &str) {
    std::fs::create_dir(root.join(name)).expect("mkdir");
    std::fs::write(root.join(name).join("shop.yaml"), text).expect("write");
}

/// Puts version `name` in force as Kubernetes does: `..data` swapped by a rename.
fn swap(root: &Path, name: &str) {
    std::os::unix::fs::symlink(name, root.join("..data_tmp")).expect("symlink");
    std::fs::rename(root.join("..data_tmp"), root.join("..data")).expect("swap ..data");
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
fn a_domain_merged_from_two_files_reloads_merged() {
    if !need(has("curl"), "curl") {
        return;
    }
    let dir = tempfile::tempdir().expect("temp dir");
    let (a, b) = (dir.path().join("a.yaml"), dir.path().join("b.yaml"));
    std::fs::write(&a, config(3)).expect("write");
    std::fs::write(
        &b,
        "domain: shop\ndescriptors:\n  - key: path\n    rate_limit: {unit: second, requests_per_unit: 9}\n",
    )
    .expect("write");
    let root = dir.path().to_owned();
    let s = Server::start_in(dir, &root, &[], &[("MERGE_DOMAIN_CONFIG", "true")]);
    assert_eq!(limit_in_force(&s), 3);
    // Reloaded as at start: merged (else the second file of `shop` would be refused and the
    // limit stay at 3).
    replace(&a, &config(5));
    eventually("the rewritten part of the domain in force", || {
        limit_in_force(&s) == 5
    });
    assert_eq!(counter(&s, "ratelimit_service_config_load_error"), 0);
}

#[test]
fn a_configmap_symlink_swap_is_reloaded() {
    if !need(has("curl"), "curl") {
        return;
    }
    let (dir, root) = configmap(&config(3));
    let version = |name: &str, text: &str| version(&root, name, text);
    let swap = |name: &str| swap(&root, name);

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

/// `config(limit)` with a stock of 40 that no reload changes.
fn config_with_stock(limit: u32) -> String {
    format!(
        "{}  - key: item\n    rate_limit: {{algorithm: stock, requests_per_unit: 40}}\n",
        config(limit)
    )
}

/// Sends the item request `n` times on one connection: (answered 200, answered 429); any
/// other answer fails the test.
fn sell(url: &str, n: usize) -> (u64, u64) {
    let body = r#"{"domain":"shop","descriptors":[{"entries":[{"key":"item","value":"sku"}]}]}"#;
    common::send_to(url, body, n)
}

#[test]
fn reloads_while_a_load_runs_answer_every_request_and_keep_the_unchanged_limits_state() {
    if !need(has("curl"), "curl") {
        return;
    }
    let (dir, root) = configmap(&config_with_stock(3));
    let version = |name: &str, text: &str| version(&root, name, text);
    let swap = |name: &str| swap(&root, name);
    let s = Server::start_in(dir, &root, &[], &[]);
    let url = s.url("/json");

    // The load: the stock's item requested in batches until told to stop (bounded).
    let stop = std::sync::atomic::AtomicBool::new(false);
    let totals = std::thread::scope(|scope| {
        let load = scope.spawn(|| {
            let mut t = (0, 0);
            for _ in 0..500 {
                let (ok, over) = sell(&url, 10);
                t = (t.0 + ok, t.1 + over);
                if stop.load(std::sync::atomic::Ordering::Relaxed) && t.0 + t.1 >= 100 {
                    break;
                }
            }
            t
        });
        // Swapped in, a broken one refused, swapped in again, then rewritten in place.
        version("..v2", &config_with_stock(4));
        swap("..v2");
        eventually("v2 in force", || limit_in_force(&s) == 4);
        version("..v3", INVALID);
        swap("..v3");
        eventually("the invalid config counted", || {
            counter(&s, "ratelimit_service_config_load_error") >= 1
        });
        assert_eq!(limit_in_force(&s), 4, "the previous config stays in force");
        version("..v4", &config_with_stock(6));
        swap("..v4");
        eventually("v4 in force", || limit_in_force(&s) == 6);
        std::fs::write(root.join("..v4").join("shop.yaml"), config_with_stock(8))
            .expect("rewrite in place");
        eventually("the rewritten v4 in force", || limit_in_force(&s) == 8);
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        load.join().expect("load thread")
    });
    // Every request was answered 200 or 429 (`sell` fails the test otherwise).
    let (sold, refused) = totals;
    // The stock's limit never changed: its state survived every reload, sold exactly once.
    assert_eq!(sold, 40, "sold {sold} (refused {refused}) of a stock of 40");
    assert!(counter(&s, "ratelimit_service_config_load_success") >= 4);
}
