//! Per-client-IP limits on an axum app behind a reverse proxy you run.
//!
//! ```sh
//! cargo run -p cellgate-http --example axum_per_ip -- 127.0.0.1:3000
//! curl -i 127.0.0.1:3000/                                    # keyed by 127.0.0.1 (the "proxy")
//! curl -i -H 'x-forwarded-for: 203.0.113.7' 127.0.0.1:3000/  # keyed by 203.0.113.7
//! ```
//!
//! The loopback address stands for the proxy here: requests from it are keyed by the
//! right-most address in `X-Forwarded-For` that is not itself a proxy; requests from anywhere
//! else are keyed by their own address, whatever header they send.
//!
//! Two limits, all or nothing: 5 requests a second per client (burst 10), and 1,000 a second
//! for the whole app. `/health` is not limited.

use std::net::{IpAddr, SocketAddr};
use std::process::ExitCode;

use axum::routing::get;
use axum::Router;
use cellgate::{KeyedLimiter, Limiter, Quota};
use cellgate_http::{Global, Limit, RateLimitLayer, TrustedProxies};

const USAGE: &str = "\
axum_per_ip: an axum app behind a reverse proxy, limited per client IP (5 a second, burst 10)
and as a whole (1,000 a second), all or nothing; /health is not limited. Requests from
127.0.0.0/8 and 10.0.0.0/8 (the proxies) are keyed by X-Forwarded-For.

USAGE: cargo run -p cellgate-http --example axum_per_ip -- [ADDR]

  ADDR     the address to listen on  [default: 127.0.0.1:3000]
  --help   print this and exit";

#[tokio::main]
async fn main() -> Result<ExitCode, Box<dyn std::error::Error>> {
    let arg = std::env::args().nth(1);
    if matches!(arg.as_deref(), Some("--help" | "-h")) {
        println!("{USAGE}");
        return Ok(ExitCode::SUCCESS);
    }
    let addr: SocketAddr = match arg.unwrap_or_else(|| "127.0.0.1:3000".to_owned()).parse() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("axum_per_ip: {e}\n\n{USAGE}");
            return Ok(ExitCode::from(2));
        }
    };

    // Your proxies' addresses: a load balancer's subnet, a sidecar on loopback.
    let client_ip = TrustedProxies::new(["127.0.0.0/8", "10.0.0.0/8"])?;
    let per_client = KeyedLimiter::<IpAddr>::gcra(Quota::per_second(5).with_burst(10))
        .max_keys(1_000_000)
        .build()?;
    let whole_app = Limiter::gcra(Quota::per_second(1_000)).build()?;
    let limits = RateLimitLayer::builder()
        .limit(Limit::new("per-client", client_ip, per_client))
        .limit(Limit::new("app", Global, whole_app))
        .build()?;

    let app = Router::new()
        .route("/", get(|| async { "hello\n" }))
        .route(
            "/items/{id}",
            get(|id: axum::extract::Path<u32>| async move { format!("item {}\n", id.0) }),
        )
        .layer(limits)
        .route("/health", get(|| async { "ok\n" }));

    let listener = tokio::net::TcpListener::bind(addr).await?;
    println!("listening on {}", listener.local_addr()?);
    // `with_connect_info` gives the layer each connection's peer address.
    axum::serve(
        listener,
        app.into_make_service_with_connect_info::<SocketAddr>(),
    )
    .await?;
    Ok(ExitCode::SUCCESS)
}
