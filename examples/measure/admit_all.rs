//! What the throughput harnesses share (included with `mod admit_all;`: `throughput`, `shapes`):
//! the quota under which every check is admitted, in both libraries, the machine line each
//! report starts with, and the reading of their command lines.

// Each program uses what it needs.
#![allow(dead_code)]

use std::num::NonZeroU32;

use cellgate::Quota;

/// One unit per nanosecond: faster than any check, so every check is allowed.
pub const RATE: u32 = 1_000_000_000;
pub const BURST: u32 = 10_000_000;

/// cellgate's quota: [`RATE`] a second, burst [`BURST`].
pub fn cellgate_quota() -> Quota {
    Quota::per_second(RATE).with_burst(BURST)
}

/// The same quota for governor.
pub fn governor_quota() -> governor::Quota {
    let nz = |v| NonZeroU32::new(v).expect("non-zero constant");
    governor::Quota::per_second(nz(RATE)).allow_burst(nz(BURST))
}

/// Prints the CPU model, the CPUs this process may use, a warning for a debug build, and the
/// command line.
pub fn print_machine() {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let model = cpuinfo
        .lines()
        .find(|l| l.starts_with("model name") || l.starts_with("Model") || l.starts_with("cpu\t"))
        .and_then(|l| l.split_once(':'))
        .map_or("unknown CPU", |(_, v)| v.trim())
        .to_string();
    let logical = cpuinfo
        .lines()
        .filter(|l| l.starts_with("processor"))
        .count();
    let usable = std::thread::available_parallelism().map_or(0, |n| n.get());
    println!("machine: {model}; {logical} logical CPUs, {usable} available to this process");
    if cfg!(debug_assertions) {
        println!("WARNING: debug build; run with --release for meaningful figures");
    }
    println!(
        "command: {}",
        std::env::args().collect::<Vec<_>>().join(" ")
    );
}

/// Reads the command line: hands each argument to `option` with a reader of its value (the
/// next argument); `option` answers whether it knows the name. `Err`: what to print before the
/// usage (nothing for `-h` or `--help`).
pub fn read_options(
    mut option: impl FnMut(&str, &mut dyn FnMut() -> Result<String, String>) -> Result<bool, String>,
) -> Result<(), String> {
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        if arg == "-h" || arg == "--help" {
            return Err(String::new());
        }
        let mut value = || args.next().ok_or(format!("{arg} needs a value"));
        if !option(&arg, &mut value)? {
            return Err(format!("unknown argument {arg:?}"));
        }
    }
    Ok(())
}

/// `s` as a `T`, or the message that it is not one.
pub fn parse<T: std::str::FromStr>(s: &str) -> Result<T, String> {
    s.parse().map_err(|_| format!("cannot parse {s:?}"))
}

/// `--seconds`, checked: positive (and less than a million).
pub fn check_seconds(seconds: f64) -> Result<(), String> {
    if seconds > 0.0 && seconds < 1e6 {
        Ok(())
    } else {
        Err("--seconds must be positive".into())
    }
}

/// The options `parse_args` read, or (on an error or a request for help) the exit code, after
/// printing the error, if any, and `usage`.
pub fn options_or_usage<O>(
    parsed: Result<O, String>,
    usage: &str,
) -> Result<O, std::process::ExitCode> {
    parsed.map_err(|e| {
        if !e.is_empty() {
            eprintln!("error: {e}");
        }
        eprintln!("{usage}");
        std::process::ExitCode::from(2)
    })
}
