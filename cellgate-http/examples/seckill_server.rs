//! A flash-sale (seckill) HTTP server: a stock of units, at most N per buyer, all or nothing.
//!
//! ```sh
//! cargo run --release -p cellgate-http --example seckill_server -- \
//!     --addr 127.0.0.1:8080 --stock 100 --per-user 1 --ip-rate 50
//! ```
//!
//! It prints `listening on 127.0.0.1:PORT` once it accepts connections (`--addr` with port 0
//! picks a free port, and the line says which).
//!
//! - Every route is limited per client IP to `--ip-rate` requests a second with a burst of as
//!   many (a router-level layer): the buyer id is the client's word, so without it one client
//!   could buy the whole stock under made-up ids.
//! - `POST /seckill/{sku}` with header `x-user-id`: 200 for a sale, 429 otherwise. Two more
//!   limits, all or nothing with the per-IP one: the buyer's own stock of `--per-user` units,
//!   then the sale's stock of `--stock` units in all (whatever the SKU in the path). A request
//!   denied by the second gives the buyer's unit back (and its client IP's), so exactly
//!   `--stock` units are sold, each buyer at most `--per-user`. A missing or malformed
//!   `x-user-id` is a 400 that says so (and counts against the client IP).
//! - `GET /ping`: 200 `pong`.
//!
//! Every response of both routes carries `RateLimit-Policy` and `RateLimit`; a 429 carries
//! `Retry-After` when waiting helps (never for a sold-out stock) and `Cache-Control: no-store`.

use std::net::{IpAddr, SocketAddr};
use std::process::ExitCode;

use axum::extract::Path;
use axum::http::HeaderMap;
use axum::routing::{get, post};
use axum::Router;
use cellgate::{KeyedLimiter, Quota, StripedLimiter};
use cellgate_http::{Global, HeaderKey, Limit, PeerIp, RateLimitLayer};

struct Args {
    addr: SocketAddr,
    stock: u32,
    per_user: u32,
    ip_rate: u32,
}

const USAGE: &str =
    "usage: seckill_server [--addr HOST:PORT] [--stock UNITS] [--per-user N] [--ip-rate R]";

fn parse_args() -> Result<Args, String> {
    let mut args = Args {
        addr: SocketAddr::from(([127, 0, 0, 1], 8080)),
        stock: 100,
        per_user: 1,
        ip_rate: 100,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        if flag == "--help" || flag == "-h" {
            println!("{USAGE}");
            std::process::exit(0);
        }
        let value = it
            .next()
            .ok_or_else(|| format!("{flag} needs a value\n{USAGE}"))?;
        let num = |v: &str| {
            v.parse::<u32>()
                .map_err(|_| format!("{flag}: {v:?} is not a whole number\n{USAGE}"))
        };
        match flag.as_str() {
            "--addr" => {
                args.addr = value
                    .parse()
                    .map_err(|_| format!("--addr: {value:?} is not HOST:PORT\n{USAGE}"))?;
            }
            "--stock" => args.stock = num(&value)?,
            "--per-user" => args.per_user = num(&value)?,
            "--ip-rate" => args.ip_rate = num(&value)?,
            _ => return Err(format!("unknown flag {flag}\n{USAGE}")),
        }
    }
    Ok(args)
}

fn app(args: &Args) -> Result<Router, Box<dyn std::error::Error>> {
    // The buyer's limit first: if the shared stock then says no, only the buyer's own unit
    // is given back, and the stock (the one contended key) is never charged and rolled back.
    let seckill = RateLimitLayer::builder()
        .limit(Limit::new(
            "per-user",
            HeaderKey::new("x-user-id"),
            KeyedLimiter::<String>::stock(args.per_user).build()?,
        ))
        // The stock is the one key every buyer hits: in hot-key mode it is split over
        // cache-padded stripes (one per core), still exactly `--stock` units in all.
        .limit(Limit::new(
            "stock",
            Global,
            StripedLimiter::stock(args.stock).build()?,
        ))
        .build()?;
    // Around every route: a buy the inner layer denies gives this charge back (stacked
    // cellgate layers are all or nothing), so only sales and answered requests count per IP.
    let per_ip = RateLimitLayer::builder()
        .limit(Limit::new(
            "per-ip",
            PeerIp::new(),
            KeyedLimiter::<IpAddr>::gcra(Quota::per_second(args.ip_rate))
                .max_keys(1_000_000)
                .build()?,
        ))
        .build()?;
    Ok(Router::new()
        .route("/seckill/{sku}", post(sell).layer(seckill))
        .route("/ping", get(|| async { "pong" }))
        .layer(per_ip))
}

async fn sell(Path(sku): Path<String>, headers: HeaderMap) -> String {
    // The layer has already checked the header: it is there and visible ASCII.
    let user = headers
        .get("x-user-id")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("?");
    format!("sold 1 of {sku} to {user}\n")
}

fn main() -> ExitCode {
    let args = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(2);
        }
    };
    let app = match app(&args) {
        Ok(a) => a,
        Err(e) => {
            eprintln!("invalid configuration: {e}");
            return ExitCode::from(2);
        }
    };
    let rt = match tokio::runtime::Runtime::new() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    rt.block_on(async move {
        let listener = match tokio::net::TcpListener::bind(args.addr).await {
            Ok(l) => l,
            Err(e) => {
                eprintln!("cannot listen on {}: {e}", args.addr);
                return ExitCode::FAILURE;
            }
        };
        let local = listener.local_addr().unwrap_or(args.addr);
        // Bound and listening: connections queue from here on, so the line is not early.
        println!("listening on {local}");
        let service = app.into_make_service_with_connect_info::<SocketAddr>();
        match axum::serve(listener, service).await {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("server error: {e}");
                ExitCode::FAILURE
            }
        }
    })
}
