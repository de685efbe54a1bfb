//! `cellgate-server`: serves the RESP listener (`--resp ADDR`, default 127.0.0.1:6380).
//!
//! Flags read here: `--resp ADDR|off`, `--max-keys N`; other flags are accepted and ignored.
//! After binding it prints `listening resp ADDR` and exits 0 on SIGTERM or SIGINT.

use std::io::Write;
use std::process::ExitCode;

use cellgate_server::resp::{serve, RespConfig};

fn main() -> ExitCode {
    let mut resp = String::from("127.0.0.1:6380");
    let mut config = RespConfig::default();
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let (flag, inline) = match arg.split_once('=') {
            Some((f, v)) => (f.to_owned(), Some(v.to_owned())),
            None => (arg.clone(), None),
        };
        let mut value = || inline.clone().or_else(|| args.next());
        match flag.as_str() {
            "--resp" => resp = value().unwrap_or_default(),
            "--max-keys" => match value().and_then(|v| v.parse().ok()) {
                Some(n) => config.max_keys = n,
                None => return fail("--max-keys takes a positive integer"),
            },
            "--grpc" | "--http" | "--config" | "--redis" => {
                let _ = value();
            }
            _ => {}
        }
    }
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => return fail(&format!("runtime: {e}")),
    };
    match runtime.block_on(run(resp, config)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => fail(&e.to_string()),
    }
}

async fn run(resp: String, config: RespConfig) -> std::io::Result<()> {
    if resp == "off" {
        return shutdown_signal().await;
    }
    let listener = tokio::net::TcpListener::bind(&resp).await?;
    let mut stdout = std::io::stdout();
    writeln!(stdout, "listening resp {}", listener.local_addr()?)?;
    stdout.flush()?;
    serve(listener, config, async {
        let _ = shutdown_signal().await;
    })
    .await
}

async fn shutdown_signal() -> std::io::Result<()> {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    tokio::select! {
        _ = term.recv() => {}
        r = tokio::signal::ctrl_c() => r?,
    }
    Ok(())
}

fn fail(message: &str) -> ExitCode {
    eprintln!("cellgate-server: {message}");
    ExitCode::FAILURE
}
