//! The running server: binds the listeners, serves them until shutdown, then drains.

pub(crate) mod conn;
pub(crate) mod service;
mod statsd;
pub(crate) mod tls;

use std::future::Future;
use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::config::{self, Config, ConfigError};
use crate::engine::{Engine, EngineOptions};
use crate::metrics::Metrics;
use conn::CappedListener;
pub use service::HeaderNames;
use service::Service;
pub use statsd::Statsd;
pub use tls::GrpcTls;

/// Bounds on what clients can make the server hold; each has a flag.
///
/// # Examples
///
/// ```
/// use cellgate_server::server::Limits;
/// assert!(Limits::default().max_request_bytes >= 4096);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Bytes of one gRPC message or one HTTP body.
    pub max_request_bytes: usize,
    /// Connections held open per listener.
    pub max_connections: usize,
    /// Concurrent HTTP/2 streams (requests in flight) per gRPC connection.
    pub max_streams_per_connection: u32,
    /// Time a connection may stay silent (nothing read or written) before it is closed.
    pub idle_timeout: Duration,
    /// Time to answer one request (gRPC: `CANCELLED`, as tonic reports it; HTTP: 408).
    pub request_timeout: Duration,
    /// Distinct descriptor metric series (past it, hits are counted as dropped).
    pub max_metric_series: usize,
    /// A gRPC connection open this long is asked to close (HTTP/2 GOAWAY), so that clients
    /// spread over servers added since (`None`: never).
    pub max_connection_age: Option<Duration>,
    /// How long a gRPC connection asked to close may finish its requests before it is cut
    /// (`None`: until they are done).
    pub max_connection_age_grace: Option<Duration>,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_request_bytes: 64 * 1024,
            max_connections: 1024,
            max_streams_per_connection: 128,
            idle_timeout: Duration::from_secs(120),
            request_timeout: Duration::from_secs(5),
            max_metric_series: 10_000,
            max_connection_age: Some(Duration::from_secs(24 * 3600)),
            max_connection_age_grace: Some(Duration::from_secs(3600)),
        }
    }
}

/// Everything the server runs with (the binary builds it from its flags and environment).
///
/// # Examples
///
/// ```
/// use cellgate_server::server::Settings;
/// let s = Settings::default();
/// assert!(s.grpc.is_none() && s.config.is_none());
/// ```
#[derive(Clone, Debug, Default)]
pub struct Settings {
    /// The configuration file or directory (none: no domain is configured).
    pub config: Option<PathBuf>,
    /// The files of one domain add up to one domain (ratelimit's `MERGE_DOMAIN_CONFIG`)
    /// instead of being refused.
    pub merge_domains: bool,
    /// The gRPC listener's address (`None`: off).
    pub grpc: Option<String>,
    /// The HTTP listener's address (`None`: off).
    pub http: Option<String>,
    /// The engine's options.
    pub engine: EngineOptions,
    /// Bounds on input.
    pub limits: Limits,
    /// Response header names, when ratelimit's headers are enabled.
    pub headers: Option<HeaderNames>,
    /// Fleet mode: every limit shared through Redis (`None`: limits in this process).
    pub fleet: Option<crate::fleet::FleetOptions>,
    /// `GET /healthcheck` answers 503 (rather than 200 naming the state) while Redis does not
    /// answer for some limit.
    pub health_strict: bool,
    /// `ratelimit_service_response_time_seconds` in milliseconds (ratelimit's
    /// `PROMETHEUS_RESPONSE_TIME_AS_MILLISECONDS`), its name unchanged.
    pub response_time_as_milliseconds: bool,
    /// gRPC over TLS (`None`: plaintext); needs the `tls` feature.
    pub grpc_tls: Option<GrpcTls>,
    /// gRPC on this Unix domain socket instead of `grpc`'s TCP address (ratelimit's
    /// `GRPC_UDS`); a stale socket file there is replaced, and removed at exit.
    pub grpc_uds: Option<PathBuf>,
    /// Health checks fail until a configuration with a domain is in force (ratelimit's
    /// `HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED`).
    pub health_needs_config: bool,
    /// ratelimit's statsd counters sent to this server (`USE_STATSD`); `None`: not sent.
    pub statsd: Option<Statsd>,
    /// The metrics on a listener of their own too (ratelimit's `USE_PROMETHEUS`); `None`:
    /// only on the HTTP listener's `/metrics`.
    pub prometheus: Option<MetricsListener>,
}

/// ratelimit's Prometheus listener (`USE_PROMETHEUS`, `PROMETHEUS_ADDR`, `PROMETHEUS_PATH`):
/// the metrics of `GET /metrics`, alone, at `path` on `addr`.
///
/// # Examples
///
/// ```
/// use cellgate_server::server::{MetricsListener, Settings};
/// let settings = Settings {
///     prometheus: Some(MetricsListener { addr: "127.0.0.1:9090".into(), path: "/metrics".into() }),
///     ..Settings::default()
/// };
/// assert!(settings.prometheus.is_some());
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MetricsListener {
    /// The address to listen on.
    pub addr: String,
    /// The path the metrics are served at: `/` then letters, digits and `/-._~`.
    pub path: String,
}

impl MetricsListener {
    /// Whether `path` can be served: `/` then letters, digits and `/-._~` (no route
    /// parameters, no query).
    ///
    /// # Examples
    ///
    /// ```
    /// use cellgate_server::server::MetricsListener;
    /// assert!(MetricsListener::valid_path("/stats/prometheus"));
    /// assert!(!MetricsListener::valid_path("metrics") && !MetricsListener::valid_path("/{x}"));
    /// ```
    pub fn valid_path(path: &str) -> bool {
        path.starts_with('/')
            && path
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"/-._~".contains(&b))
    }
}

/// Why the server could not start.
///
/// # Examples
///
/// ```
/// use cellgate_server::server::StartError;
/// let e = StartError::Bind { what: "grpc", addr: "x".into(), error: std::io::Error::other("no") };
/// assert!(e.to_string().contains("grpc"));
/// ```
#[derive(Debug)]
#[non_exhaustive]
pub enum StartError {
    /// The configuration is invalid.
    Config(ConfigError),
    /// Fleet mode cannot start (an invalid Redis URL, a limit Redis cannot hold).
    Fleet(String),
    /// gRPC over TLS cannot start (a file unread or unparsed, a build without `tls`).
    Tls(String),
    /// The statsd address does not resolve, or no socket can be bound for it.
    Statsd(String),
    /// The metrics' own listener cannot serve the path asked for.
    Prometheus(String),
    /// A listener could not be bound.
    Bind {
        /// Which listener.
        what: &'static str,
        /// The address asked for.
        addr: String,
        /// Why.
        error: std::io::Error,
    },
}

impl std::fmt::Display for StartError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StartError::Config(e) => write!(f, "invalid configuration: {e}"),
            StartError::Fleet(e) => write!(f, "fleet mode (--redis): {e}"),
            StartError::Tls(e) => write!(f, "gRPC over TLS: {e}"),
            StartError::Statsd(e) => write!(f, "{e}"),
            StartError::Prometheus(e) => write!(f, "USE_PROMETHEUS: {e}"),
            StartError::Bind { what, addr, error } => {
                write!(f, "cannot listen ({what}) on {addr}: {error}")
            }
        }
    }
}

impl std::error::Error for StartError {}

/// A server whose listeners are bound, not yet serving.
///
/// # Examples
///
/// ```no_run
/// use cellgate_server::server::{Server, Settings};
/// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
/// let settings = Settings { grpc: Some("127.0.0.1:0".into()), ..Settings::default() };
/// let server = Server::bind(settings).await?;
/// server.serve(async { let _ = tokio::signal::ctrl_c().await; }).await;
/// # Ok(()) }
/// ```
pub struct Server {
    settings: Settings,
    service: Arc<Service>,
    grpc: Option<conn::Listener>,
    grpc_tls: Option<Arc<tls::Acceptor>>,
    http: Option<TcpListener>,
    /// The metrics' own listener, and their path.
    prometheus: Option<(TcpListener, String)>,
    shutdown_tx: watch::Sender<bool>,
    /// The statsd counters' client, when they are sent (`serve` runs the sending).
    statsd: Option<cadence::StatsdClient>,
}

/// Loads the configuration at `path` (none: no domain), the files of one domain merged when
/// `merge_domains` (ratelimit's `MERGE_DOMAIN_CONFIG`; see [`config::load_merging`]).
///
/// # Errors
///
/// The configuration's first problem.
///
/// # Examples
///
/// ```
/// assert!(cellgate_server::server::load_config(None, false).is_ok());
/// ```
pub fn load_config(
    path: Option<&std::path::Path>,
    merge_domains: bool,
) -> Result<Config, ConfigError> {
    match path {
        Some(p) => config::load_merging(p, merge_domains),
        None => Ok(Config::default()),
    }
}

async fn bind(
    what: &'static str,
    addr: &Option<String>,
) -> Result<Option<TcpListener>, StartError> {
    let Some(addr) = addr else {
        return Ok(None);
    };
    let l = TcpListener::bind(addr.as_str())
        .await
        .map_err(|error| StartError::Bind {
            what,
            addr: addr.clone(),
            error,
        })?;
    Ok(Some(l))
}

/// Prints `listening WHAT ADDR` on stdout and flushes it (tests and scripts read these lines to
/// find ephemeral ports).
///
/// # Examples
///
/// ```
/// cellgate_server::server::announce("grpc", "127.0.0.1:8081".parse().unwrap());
/// ```
pub fn announce(what: &str, addr: SocketAddr) {
    announce_at(what, &addr);
}

/// [`announce`] for any address (`unix:PATH` for a Unix domain socket).
fn announce_at(what: &str, addr: &dyn std::fmt::Display) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "listening {what} {addr}");
    let _ = out.flush();
}

/// Binds the Unix domain socket at `path`, replacing a stale socket file left there (a file
/// that is not a socket is an error, never removed).
fn bind_unix(path: &std::path::Path) -> Result<tokio::net::UnixListener, StartError> {
    use std::os::unix::fs::FileTypeExt;
    let error = |error| StartError::Bind {
        what: "grpc",
        addr: format!("unix:{}", path.display()),
        error,
    };
    if let Ok(meta) = std::fs::symlink_metadata(path) {
        if !meta.file_type().is_socket() {
            return Err(error(std::io::Error::new(
                std::io::ErrorKind::AlreadyExists,
                "the path exists and is not a socket",
            )));
        }
        std::fs::remove_file(path).map_err(error)?;
    }
    tokio::net::UnixListener::bind(path).map_err(error)
}

impl Server {
    /// Loads the configuration and binds the listeners, announcing each.
    ///
    /// # Errors
    ///
    /// An invalid configuration or an address that cannot be bound.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use cellgate_server::server::{Server, Settings};
    /// # async fn f() -> Result<(), cellgate_server::server::StartError> {
    /// let s = Server::bind(Settings { http: Some("127.0.0.1:0".into()), ..Settings::default() })
    ///     .await?;
    /// # Ok(()) }
    /// ```
    pub async fn bind(settings: Settings) -> Result<Server, StartError> {
        let config = load_config(settings.config.as_deref(), settings.merge_domains)
            .map_err(StartError::Config)?;
        // A handshake that takes longer is dropped (the connection cap bounds how many wait).
        let handshake = settings.limits.idle_timeout.min(Duration::from_secs(10));
        let grpc_tls = settings
            .grpc_tls
            .as_ref()
            .map(|t| tls::load(t, handshake).map(Arc::new))
            .transpose()
            .map_err(StartError::Tls)?;
        let metrics = Arc::new(Metrics::new(
            settings.limits.max_metric_series,
            settings.response_time_as_milliseconds,
            settings.statsd.is_some(),
        ));
        if settings.config.is_some() {
            metrics.config_load_success.add(1);
        }
        let engine = match &settings.fleet {
            Some(fleet) => Engine::with_fleet(config, settings.engine, fleet.clone())
                .map_err(StartError::Fleet)?,
            None => Engine::new(config, settings.engine),
        };
        let service = Arc::new(Service {
            engine: Arc::new(engine),
            metrics,
            headers: settings.headers.clone(),
            health_strict: settings.health_strict,
            health_needs_config: settings.health_needs_config,
        });
        let grpc = match &settings.grpc_uds {
            Some(path) => Some(conn::Listener::Unix(bind_unix(path)?)),
            None => bind("grpc", &settings.grpc).await?.map(conn::Listener::Tcp),
        };
        let http = bind("http", &settings.http).await?;
        let prometheus = match &settings.prometheus {
            Some(p) if !MetricsListener::valid_path(&p.path) => {
                return Err(StartError::Prometheus(format!(
                    "the metrics' path {:?} is not / then letters, digits and /-._~",
                    p.path
                )))
            }
            Some(p) => bind("prometheus", &Some(p.addr.clone()))
                .await?
                .map(|l| (l, p.path.clone())),
            None => None,
        };
        let (shutdown_tx, _) = watch::channel(false);
        // Watching starts before the listeners are announced, so that no change made after a
        // client sees them is missed.
        if let Some(path) = settings.config.clone() {
            let r = crate::reload::spawn(
                path,
                settings.merge_domains,
                Arc::clone(&service.engine),
                Arc::clone(&service.metrics),
                shutdown_tx.subscribe(),
            );
            if let Err(e) = r {
                tracing::warn!(error = %e, "cannot watch the configuration; reloads are off");
            }
        }
        let statsd = (settings.statsd.as_ref())
            .map(statsd::client)
            .transpose()
            .map_err(StartError::Statsd)?;
        if let Some(acceptor) = &grpc_tls {
            service.metrics.tls_load_success.add(1);
            watch_certificates(acceptor, &service.metrics, shutdown_tx.subscribe());
        }
        match (&grpc, &settings.grpc_uds) {
            (Some(conn::Listener::Unix(_)), Some(path)) => {
                announce_at("grpc", &format!("unix:{}", path.display()));
            }
            (Some(conn::Listener::Tcp(l)), _) => {
                if let Ok(addr) = l.local_addr() {
                    announce("grpc", addr);
                }
            }
            _ => {}
        }
        if let Some(addr) = http.as_ref().and_then(|l| l.local_addr().ok()) {
            announce("http", addr);
        }
        if let Some(addr) = prometheus.as_ref().and_then(|(l, _)| l.local_addr().ok()) {
            announce("prometheus", addr);
        }
        Ok(Server {
            settings,
            service,
            grpc,
            grpc_tls,
            http,
            prometheus,
            shutdown_tx,
            statsd,
        })
    }

    /// The engine every listener asks (for another listener, such as RESP, to share).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn f(s: cellgate_server::server::Server) { let _ = s.engine().len(); }
    /// ```
    pub fn engine(&self) -> Arc<Engine> {
        Arc::clone(&self.service.engine)
    }

    /// A future that completes when the server begins shutting down (for other listeners).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn f(s: cellgate_server::server::Server) { tokio::spawn(s.shutdown_signal()); }
    /// ```
    pub fn shutdown_signal(&self) -> impl Future<Output = ()> + Send + 'static + use<> {
        let mut rx = self.shutdown_tx.subscribe();
        async move {
            let _ = rx.wait_for(|&stop| stop).await;
        }
    }

    /// Serves until `signal` completes, then stops accepting, finishes the requests in flight,
    /// and returns.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use cellgate_server::server::{Server, Settings};
    /// # async fn f() -> Result<(), cellgate_server::server::StartError> {
    /// let s = Server::bind(Settings { grpc: Some("127.0.0.1:0".into()), ..Settings::default() })
    ///     .await?;
    /// s.serve(async {
    ///     let _ = tokio::signal::ctrl_c().await;
    /// })
    /// .await;
    /// # Ok(()) }
    /// ```
    pub async fn serve(self, signal: impl Future<Output = ()>) {
        let Server {
            settings,
            service,
            grpc,
            grpc_tls,
            http,
            prometheus,
            shutdown_tx,
            statsd,
        } = self;
        // Sends until the requests in flight are drained, then once more: every count made.
        let (drained, statsd_stop) = tokio::sync::oneshot::channel::<()>();
        let statsd = statsd.zip(settings.statsd.as_ref()).map(|(client, s)| {
            tokio::spawn(statsd::run(
                client,
                Arc::clone(&service.metrics),
                s.flush_interval,
                async move {
                    let _ = statsd_stop.await;
                },
            ))
        });
        let limits = settings.limits;
        let mut tasks: Vec<JoinHandle<()>> = Vec::new();
        if let Some(l) = grpc {
            tasks.push(tokio::spawn(serve_grpc(
                l,
                grpc_tls,
                Arc::clone(&service),
                limits,
                stopped(&shutdown_tx),
                stopped(&shutdown_tx),
            )));
        }
        if let Some(l) = http {
            let router = crate::http::router(
                Arc::clone(&service),
                limits.max_request_bytes,
                limits.request_timeout,
            );
            tasks.push(tokio::spawn(serve_http(
                l,
                router,
                limits,
                stopped(&shutdown_tx),
            )));
        }
        if let Some((l, path)) = prometheus {
            let router =
                crate::http::metrics_router(Arc::clone(&service), &path, limits.request_timeout);
            tasks.push(tokio::spawn(serve_http(
                l,
                router,
                limits,
                stopped(&shutdown_tx),
            )));
        }
        signal.await;
        tracing::info!("shutting down: draining requests in flight");
        shutdown_tx.send_replace(true);
        for t in tasks {
            let _ = t.await;
        }
        let _ = drained.send(());
        if let Some(t) = statsd {
            let _ = t.await;
        }
        if let Some(path) = &settings.grpc_uds {
            let _ = std::fs::remove_file(path);
        }
    }
}

fn stopped(tx: &watch::Sender<bool>) -> impl Future<Output = ()> + Send + 'static + use<> {
    let mut rx = tx.subscribe();
    async move {
        let _ = rx.wait_for(|&stop| stop).await;
    }
}

/// The names grpc.health.v1 answers for: the whole server (""), ratelimit's ("ratelimit"),
/// and the RLS service's full name.
const HEALTH_NAMES: [&str; 3] = [
    "",
    "ratelimit",
    "envoy.service.ratelimit.v3.RateLimitService",
];

/// How often the gRPC health service's status is brought in step with [`Service::healthy`].
const HEALTH_POLL: Duration = Duration::from_secs(1);

/// Sets every name of [`HEALTH_NAMES`] to `serving` or not.
async fn set_health(reporter: &tonic_health::server::HealthReporter, serving: bool) {
    let status = if serving {
        tonic_health::ServingStatus::Serving
    } else {
        tonic_health::ServingStatus::NotServing
    };
    for name in HEALTH_NAMES {
        reporter.set_service_status(name, status).await;
    }
}

/// Keeps the gRPC health service's answers in step with `/healthcheck`: SERVING while the
/// server decides, NOT_SERVING while (with `--redis-health-strict`) Redis does not answer for
/// some limit (seen within [`HEALTH_POLL`]), and from the moment the server begins to drain.
/// `last`: what was set before.
async fn report_health(
    reporter: tonic_health::server::HealthReporter,
    service: Arc<Service>,
    mut last: bool,
    stop: impl Future<Output = ()>,
) {
    tokio::pin!(stop);
    loop {
        tokio::select! {
            () = &mut stop => break,
            () = tokio::time::sleep(HEALTH_POLL) => {}
        }
        let healthy = service.healthy();
        if healthy != last {
            set_health(&reporter, healthy).await;
            last = healthy;
        }
    }
    set_health(&reporter, false).await;
}

/// Reads the gRPC listener's certificate files again whenever they change (see [`tls`]).
#[cfg(feature = "tls")]
fn watch_certificates(
    acceptor: &Arc<tls::Acceptor>,
    metrics: &Arc<Metrics>,
    shutdown: watch::Receiver<bool>,
) {
    let (a, m) = (Arc::clone(acceptor), Arc::clone(metrics));
    let r = crate::reload::on_change(&acceptor.files(), shutdown, move || match a.reload() {
        Ok(()) => {
            m.tls_load_success.add(1);
            tracing::info!("gRPC TLS certificate files reloaded");
        }
        Err(e) => {
            m.tls_load_error.add(1);
            tracing::error!(error = %e, "gRPC TLS certificate files refused; the previous ones stay in force");
        }
    });
    if let Err(e) = r {
        tracing::warn!(error = %e, "cannot watch the gRPC TLS certificate files; reloads are off");
    }
}

/// See the `tls` build's `watch_certificates`.
#[cfg(not(feature = "tls"))]
fn watch_certificates(acceptor: &Arc<tls::Acceptor>, _: &Arc<Metrics>, _: watch::Receiver<bool>) {
    match **acceptor {}
}

async fn serve_grpc(
    listener: conn::Listener,
    tls: Option<Arc<tls::Acceptor>>,
    service: Arc<Service>,
    limits: Limits,
    stop: impl Future<Output = ()>,
    draining: impl Future<Output = ()> + Send + 'static,
) {
    let (reporter, health) = tonic_health::server::health_reporter();
    // Set before the first connection is served, so that no check finds a name unknown.
    let healthy = service.healthy();
    set_health(&reporter, healthy).await;
    tokio::spawn(report_health(
        reporter,
        Arc::clone(&service),
        healthy,
        draining,
    ));
    let incoming =
        CappedListener::new(listener, limits.max_connections, limits.idle_timeout).into_stream();
    let mut builder = tonic::transport::Server::builder();
    if let Some(age) = limits.max_connection_age {
        builder = builder.max_connection_age(age);
    }
    if let Some(grace) = limits.max_connection_age_grace {
        builder = builder.max_connection_age_grace(grace);
    }
    let failed_handshakes = service.metrics.tls_handshake_errors.clone();
    let router = builder
        .concurrency_limit_per_connection(limits.max_streams_per_connection as usize)
        .max_concurrent_streams(limits.max_streams_per_connection)
        .timeout(limits.request_timeout)
        .http2_keepalive_interval(Some(Duration::from_secs(30)))
        .add_service(health)
        .add_service(crate::grpc::Rls::server(service, limits.max_request_bytes));
    let r = match tls {
        Some(acceptor) => {
            let incoming = tls::handshakes(acceptor, incoming, failed_handshakes);
            router.serve_with_incoming_shutdown(incoming, stop).await
        }
        None => router.serve_with_incoming_shutdown(incoming, stop).await,
    };
    if let Err(e) = r {
        tracing::error!(error = %e, "gRPC listener failed");
    }
}

async fn serve_http(
    listener: TcpListener,
    router: axum::Router,
    limits: Limits,
    stop: impl Future<Output = ()> + Send + 'static,
) {
    let listener = CappedListener::new(
        conn::Listener::Tcp(listener),
        limits.max_connections,
        limits.idle_timeout,
    );
    if let Err(e) = axum::serve(listener, router)
        .with_graceful_shutdown(stop)
        .await
    {
        tracing::error!(error = %e, "HTTP listener failed");
    }
}
