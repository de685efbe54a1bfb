//! Test certificates made with the `openssl` command (feature `tls`): an authority and
//! certificates it signs, in a directory of the test's.

use std::path::Path;
use std::process::{Command, Stdio};

/// Whether `openssl version` runs (it has no `--version`).
pub fn openssl_found() -> bool {
    Command::new("openssl")
        .arg("version")
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Runs `openssl args` in `dir`, failing the test when it fails.
pub fn openssl(dir: &Path, args: &[&str]) {
    let out = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .stdin(Stdio::null())
        .output()
        .expect("run openssl");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "openssl {args:?}: {err}");
}

/// The key options of every certificate here: EC P-256, no passphrase.
const EC: [&str; 5] = [
    "-newkey",
    "ec",
    "-pkeyopt",
    "ec_paramgen_curve:prime256v1",
    "-nodes",
];

/// A test authority in `dir`: `ca.pem`, `ca.key` (valid one day).
pub fn authority(dir: &Path) {
    let mut ca = vec![
        "req",
        "-x509",
        "-days",
        "1",
        "-subj",
        "/CN=cellgate test CA",
    ];
    ca.extend(EC);
    ca.extend(["-keyout", "ca.key", "-out", "ca.pem"]);
    openssl(dir, &ca);
}

/// A certificate `name` (`name.pem`, `name.key`) signed by `dir`'s authority, with the
/// extensions `ext` (`subjectAltName=...`, `extendedKeyUsage=...`, one a line).
pub fn signed(dir: &Path, name: &str, ext: &str) {
    let (key, csr, pem, extfile) = (
        format!("{name}.key"),
        format!("{name}.csr"),
        format!("{name}.pem"),
        format!("{name}.ext"),
    );
    let subject = format!("/CN={name}");
    let mut req = vec!["req", "-subj", subject.as_str()];
    req.extend(EC);
    req.extend(["-keyout", key.as_str(), "-out", csr.as_str()]);
    openssl(dir, &req);
    std::fs::write(dir.join(&extfile), ext).expect("write extensions");
    let mut sign = vec![
        "x509",
        "-req",
        "-in",
        csr.as_str(),
        "-CA",
        "ca.pem",
        "-CAkey",
    ];
    sign.extend(["ca.key", "-CAcreateserial", "-days", "1"]);
    sign.extend(["-extfile", extfile.as_str(), "-out", pem.as_str()]);
    openssl(dir, &sign);
}
