//! The `cellgate-server` binary: parses the command line, then runs the listeners until
//! SIGTERM or SIGINT, and drains.

mod cli;

use std::process::ExitCode;

use clap::Parser;

use cellgate_server::resp;
use cellgate_server::server::{announce, load_config, Server};

/// mimalloc rather than the system allocator: a request allocates and frees many small
/// buffers across the runtime's threads (HTTP/2 frames, protobuf messages, futures), and glibc's
/// arenas spent 12% of the workers' time in malloc and free (`perf record` under load). With
/// mimalloc the server's CPU per request fell 11%, in process and in fleet mode with 1M cold
/// keys, for 8% more memory per key (BENCHMARKS.md, "The server's allocator").
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    let cli = cli::Cli::parse();
    let logs = tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(&cli.log_level)),
        );
    match cli.log_format {
        cli::LogFormat::Json => logs.json().init(),
        cli::LogFormat::Text => logs
            .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
            .init(),
    }
    if cli.validate {
        return match load_config(cli.config_path().as_deref(), cli.merge_domain_config) {
            Ok(_) => {
                println!("OK");
                ExitCode::SUCCESS
            }
            Err(e) => {
                println!("{e}");
                ExitCode::FAILURE
            }
        };
    }
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    runtime.block_on(run(cli))
}

async fn run(cli: cli::Cli) -> ExitCode {
    let stop = shutdown_signal();
    let settings = match cli.settings() {
        Ok(s) => s,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::FAILURE;
        }
    };
    let fleet = settings.fleet.clone();
    let server = match Server::bind(settings).await {
        Ok(s) => s,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::FAILURE;
        }
    };
    let resp = match cli.resp_addr() {
        Some(addr) => match tokio::net::TcpListener::bind(addr).await {
            Ok(listener) => {
                if let Ok(local) = listener.local_addr() {
                    announce("resp", local);
                }
                let signal = server.shutdown_signal();
                let task = match fleet {
                    Some(fleet) => tokio::spawn(resp::serve_fleet(
                        listener,
                        cli.resp_config(),
                        fleet,
                        cli.resp_max_fleet_limits,
                        signal,
                    )),
                    None => tokio::spawn(resp::serve(listener, cli.resp_config(), signal)),
                };
                Some(task)
            }
            Err(e) => {
                eprintln!("error: cannot listen for RESP on {addr}: {e}");
                return ExitCode::FAILURE;
            }
        },
        None => None,
    };
    let engine = server.engine();
    server.serve(stop).await;
    // Fleet mode: leases go back to Redis for the other servers (a blocking join per limit).
    let _ = tokio::task::spawn_blocking(move || engine.shutdown()).await;
    if let Some(task) = resp {
        match task.await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => tracing::error!(error = %e, "RESP listener failed"),
            Err(e) => tracing::error!(error = %e, "RESP listener panicked"),
        }
    }
    tracing::info!("stopped");
    ExitCode::SUCCESS
}

/// Registers for SIGTERM and SIGINT now, and returns a future that completes on either.
/// Registered before any listener is announced: a signal sent the moment the server says it
/// listens (an orchestrator stopping a pod that just started) then starts a drain, instead of
/// the default action, an exit without one.
fn shutdown_signal() -> impl std::future::Future<Output = ()> {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, Signal, SignalKind};
        let term = signal(SignalKind::terminate()).ok();
        let int = signal(SignalKind::interrupt()).ok();
        async fn wait(s: Option<Signal>) {
            match s {
                Some(mut s) => {
                    s.recv().await;
                }
                None => std::future::pending::<()>().await,
            }
        }
        async move {
            tokio::select! {
                () = wait(term) => {},
                () = wait(int) => {},
            }
        }
    }
    #[cfg(not(unix))]
    async {
        let _ = tokio::signal::ctrl_c().await;
    }
}
