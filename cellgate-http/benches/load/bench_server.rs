//! The server `benches/load/http_load.sh` measures: one axum app, a plain handler behind no
//! limiter, cellgate-http's layer, or tower_governor's, each set to admit everything or to
//! deny everything, keyed by peer IP.
//!
//! ```sh
//! cargo run --release -p cellgate-http --example bench_server -- MODE 127.0.0.1:PORT
//! ```
//!
//! MODE: `plain`, `plain-429`, `cellgate-admit`, `cellgate-deny`, `governor-admit`,
//! `governor-deny`; with `-bare` after a cellgate mode, the layer writes no `RateLimit-Policy`
//! and `RateLimit` headers (as tower_governor by default writes no `x-ratelimit-*` headers);
//! with `-headers` after a governor mode, tower_governor's `use_headers()` writes its
//! `x-ratelimit-limit` and `x-ratelimit-remaining` on every response.
//! Prints `listening on ADDR` once it accepts connections; serves on one worker thread, so
//! that the load generator has the other core of a two-core machine.

use std::net::{IpAddr, SocketAddr};
use std::process::ExitCode;
use std::sync::Arc;

use axum::routing::get;
use axum::Router;
use cellgate::{KeyedLimiter, Quota};
use cellgate_http::{HeaderDraft, Limit, PeerIp, RateLimitLayer};
use tower_governor::governor::GovernorConfigBuilder;
use tower_governor::GovernorLayer;

fn cellgate(admit: bool, headers: bool) -> Result<RateLimitLayer, Box<dyn std::error::Error>> {
    let quota = if admit {
        // One unit a nanosecond: never denies at any load a machine can generate.
        Quota::new(1_000_000_000, std::time::Duration::from_secs(1))
    } else {
        Quota::per_hour(1)
    };
    let limiter = KeyedLimiter::<IpAddr>::gcra(quota).build()?;
    Ok(RateLimitLayer::builder()
        .limit(Limit::new("per-ip", PeerIp::new(), limiter))
        .draft(headers.then_some(HeaderDraft::Ietf11))
        .build()?)
}

/// Sets tower_governor's quota on builder `$b`: admitting everything (one unit a nanosecond)
/// or nothing after the first request (one an hour). A macro: `use_headers()` changes the
/// builder's type.
macro_rules! governor_quota {
    ($b:expr, $admit:expr) => {
        if $admit {
            $b.per_nanosecond(1).burst_size(1_000_000_000);
        } else {
            $b.per_second(3_600).burst_size(1);
        }
    };
}

fn app(mode: &str) -> Result<Router, Box<dyn std::error::Error>> {
    let plain = Router::new().route("/", get(|| async { "ok" }));
    Ok(match mode {
        "plain" => plain,
        // A handler that answers 429 itself, with a body of the layer's size: what a 429
        // costs the server and the client without any limiter.
        "plain-429" => Router::new().route(
            "/",
            get(|| async {
                (
                    axum::http::StatusCode::TOO_MANY_REQUESTS,
                    "rate limited by policy \"per-ip\"; see Retry-After\n",
                )
            }),
        ),
        "cellgate-admit" => plain.layer(cellgate(true, true)?),
        "cellgate-deny" => plain.layer(cellgate(false, true)?),
        "cellgate-admit-bare" => plain.layer(cellgate(true, false)?),
        "cellgate-deny-bare" => plain.layer(cellgate(false, false)?),
        "governor-admit" | "governor-deny" => {
            let mut b = GovernorConfigBuilder::default();
            governor_quota!(b, mode == "governor-admit");
            let config = Arc::new(b.finish().ok_or("invalid governor config")?);
            plain.layer(GovernorLayer::new(config))
        }
        "governor-admit-headers" | "governor-deny-headers" => {
            let mut b = GovernorConfigBuilder::default().use_headers();
            governor_quota!(b, mode == "governor-admit-headers");
            let config = Arc::new(b.finish().ok_or("invalid governor config")?);
            plain.layer(GovernorLayer::new(config))
        }
        other => return Err(format!("unknown mode {other:?}").into()),
    })
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (Some(mode), Some(addr)) = (args.first(), args.get(1)) else {
        eprintln!("usage: bench_server MODE HOST:PORT");
        return ExitCode::from(2);
    };
    let addr: SocketAddr = match addr.parse() {
        Ok(a) => a,
        Err(_) => {
            eprintln!("{addr:?} is not HOST:PORT");
            return ExitCode::from(2);
        }
    };
    let app = match app(mode) {
        Ok(a) => a,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(2);
        }
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("a tokio runtime");
    rt.block_on(async move {
        let listener = tokio::net::TcpListener::bind(addr).await.expect("bind");
        println!(
            "listening on {}",
            listener.local_addr().expect("local address")
        );
        axum::serve(
            listener,
            app.into_make_service_with_connect_info::<SocketAddr>(),
        )
        .await
        .expect("serve");
    });
    ExitCode::SUCCESS
}
