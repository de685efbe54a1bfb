//! Load generator and comparison servers for Envoy's RLS v3 over gRPC.
//!
//! ```text
//! rls_load serve --handler empty|redis-pipeline [--listen ADDR] [--redis URL]
//!     [--redis-connections N] [--threads N]
//! rls_load load --addr ADDR [--connections N] [--in-flight M] [--descriptors 1|3]
//!     [--keys K] [--seconds S] [--rate R] [--tick-us T] [--distinct N] [--label L] [--csv]
//!     [--threads N]
//! ```
//!
//! `serve` runs one of the two servers cellgate-server is compared with, each a separate
//! process on the same gRPC stack (tonic) with the same settings as cellgate-server's
//! listener, so that the one client drives all three alike:
//! - `--handler empty`: answers OK at once and decides nothing (the transport's ceiling);
//! - `--handler redis-pipeline`: envoyproxy/ratelimit's design, one Redis pipeline of
//!   `INCRBY` + `EXPIRE` per descriptor, a fixed window aligned to Unix time, the answer
//!   computed from the counts (see `serve.rs` for the limits).
//!
//! It prints `listening grpc ADDR` once it accepts connections.
//!
//! `load` sends requests in the sample config's `edge` domain: `remote_address` (one key per
//! client address, `--keys` of them), and with `--descriptors 3` also
//! `destination_cluster=payments` and `path=/api/N`. Closed loop by default (`--in-flight`
//! requests always outstanding over `--connections` HTTP/2 connections); `--rate R` makes it
//! open loop (see `load.rs`). `--distinct N` sends N requests, each with a key not sent
//! before, and stops (a key flood, for memory per key). It prints one line:
//! `label: ... req/s ... p50 ... p99 ... p99.9 ...`, latencies in microseconds (with `--csv`:
//! `rps,p50_us,p99_us,p999_us,over_limit,errors,late`).
//!
//! ```text
//! cargo build --release -p cellgate-server --bins --examples
//! target/release/cellgate-server --config cellgate-server/config --resp off --http off &
//! target/release/examples/rls_load load --addr 127.0.0.1:8081 --descriptors 3 --keys 1000000
//! ```

mod load;
mod serve;

/// The allocator cellgate-server runs on, so that the servers compared with it (and the
/// client) run on the same.
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

const USAGE: &str = "usage: rls_load serve --handler empty|redis-pipeline [--listen ADDR] \
[--redis URL] [--redis-connections N] [--threads N]\n       rls_load load --addr ADDR \
[--connections N] [--in-flight M] [--descriptors 1|3] [--keys K] [--seconds S] [--rate R] \
[--distinct N] [--label L] [--csv] [--threads N]";

/// The value of a flag, or an error naming it.
pub(crate) fn value(flag: &str, it: &mut impl Iterator<Item = String>) -> Result<String, String> {
    it.next().ok_or(format!("{flag} needs a value"))
}

/// A number flag's value.
pub(crate) fn number(flag: &str, it: &mut impl Iterator<Item = String>) -> Result<u64, String> {
    let v = value(flag, it)?;
    v.parse::<u64>().map_err(|e| format!("{flag} {v}: {e}"))
}

/// A runtime with `threads` workers (0: one per core, as cellgate-server's).
fn runtime(threads: usize) -> std::io::Result<tokio::runtime::Runtime> {
    let mut b = tokio::runtime::Builder::new_multi_thread();
    if threads > 0 {
        b.worker_threads(threads);
    }
    b.enable_all().build()
}

fn main() -> std::process::ExitCode {
    match run() {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("{e}");
            std::process::ExitCode::from(2)
        }
    }
}

fn run() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    match args.next().as_deref() {
        Some("serve") => {
            let a = serve::Args::parse(args).map_err(|e| format!("{e}\n{USAGE}"))?;
            runtime(a.threads)?.block_on(serve::run(a))
        }
        Some("load") => {
            let a = load::Args::parse(args).map_err(|e| format!("{e}\n{USAGE}"))?;
            runtime(a.threads)?.block_on(load::run(a))
        }
        _ => Err(USAGE.into()),
    }
}
