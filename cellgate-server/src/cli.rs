//! The command line: flags beside envoyproxy/ratelimit's environment variables.

use std::path::PathBuf;
use std::time::Duration;

use clap::builder::BoolishValueParser;
use clap::Parser;

use cellgate_server::engine::{EngineOptions, InputLimits};
use cellgate_server::fleet::{FleetOptions, RatelimitRedis};
use cellgate_server::resp::RespConfig;
use cellgate_server::server::{GrpcTls, HeaderNames, Limits, MetricsListener, Settings, Statsd};

// Booleans read as ratelimit reads them (Go's ParseBool): true/false, 1/0, and also yes/no,
// on/off.

/// A rate-limit service: Envoy's RLS v3 over gRPC, ratelimit's JSON over HTTP, redis-cell's
/// CL.THROTTLE over RESP.
#[derive(Parser, Debug)]
#[command(name = "cellgate-server", version)]
pub(crate) struct Cli {
    /// The limits configuration: a YAML file or a directory of them (default:
    /// $RUNTIME_ROOT/$RUNTIME_SUBDIRECTORY/$RUNTIME_APPDIRECTORY when RUNTIME_ROOT is set; else
    /// no domain is configured).
    #[arg(long, value_name = "PATH")]
    pub config: Option<PathBuf>,
    /// gRPC listener, or `off` [default: $GRPC_HOST (127.0.0.1):$GRPC_PORT (8081)].
    #[arg(long, value_name = "ADDR|off")]
    pub grpc: Option<String>,
    /// HTTP listener, or `off` [default: $HOST (127.0.0.1):$PORT (8080)].
    #[arg(long, value_name = "ADDR|off")]
    pub http: Option<String>,
    /// RESP (CL.THROTTLE) listener, or `off`.
    #[arg(long, value_name = "ADDR|off", default_value = "127.0.0.1:6380")]
    pub resp: String,
    /// Fleet mode: every limit shared through this Redis (`redis://`, `redis+unix://`,
    /// `rediss://` with the `tls` feature, or ratelimit's `host:port` or socket path), or these
    /// comma-separated seed nodes of a Redis Cluster.
    #[arg(long, env = "REDIS_URL", value_name = "URL[,URL...]")]
    pub redis: Option<String>,
    /// Fleet mode: `SINGLE` or `CLUSTER`, as ratelimit's variable (default: a cluster when
    /// --redis names several nodes).
    #[arg(long, env = "REDIS_TYPE", value_name = "SINGLE|CLUSTER")]
    pub redis_type: Option<String>,
    /// Fleet mode: how an address without a scheme is reached, `tcp` or `unix`, as
    /// ratelimit's variable (default: `unix` for a path starting with `/`, else `tcp`).
    #[arg(long, env = "REDIS_SOCKET_TYPE", value_name = "tcp|unix")]
    pub redis_socket_type: Option<String>,
    /// Fleet mode: the password, or `user:password`, for addresses without a scheme.
    #[arg(
        long,
        env = "REDIS_AUTH",
        value_name = "[USER:]PASSWORD",
        hide_env_values = true
    )]
    pub redis_auth: Option<String>,
    /// Fleet mode: put before every limit's name in Redis, so that fleets with different
    /// prefixes keep apart in one Redis, as ratelimit's variable.
    #[arg(
        long,
        env = "CACHE_KEY_PREFIX",
        default_value = "",
        value_name = "PREFIX"
    )]
    pub cache_key_prefix: String,
    /// Fleet mode: TLS to addresses without a scheme (`rediss://`), as ratelimit's variable.
    #[arg(long, env = "REDIS_TLS", action = clap::ArgAction::Set, default_value_t = false,
          value_name = "BOOL", value_parser = BoolishValueParser::new())]
    pub redis_tls: bool,
    /// Fleet mode: milliseconds a request waits on Redis in all, its limits together, before
    /// the outage rules decide the limits still waiting.
    #[arg(long, env = "REDIS_MAX_WAIT_MS", default_value_t = 5)]
    pub redis_max_wait_ms: u64,
    /// Fleet mode: checks per second of one key in this server above which the key is
    /// leased (decided here from units Redis granted in advance) instead of checked in Redis.
    #[arg(
        long,
        env = "REDIS_HOT_RATE",
        default_value_t = 10,
        value_name = "PER_SECOND"
    )]
    pub redis_hot_rate: u32,
    /// Fleet mode: /healthcheck answers 503 while Redis does not answer for some limit
    /// (default: 200, naming the state).
    #[arg(long, env = "REDIS_HEALTH_STRICT", action = clap::ArgAction::Set,
          default_value_t = false, value_name = "BOOL", value_parser = BoolishValueParser::new())]
    pub redis_health_strict: bool,
    /// /healthcheck answers 503 (and gRPC health NOT_SERVING) until a configuration with at
    /// least one domain is in force, as ratelimit's variable.
    #[arg(long, env = "HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED", action = clap::ArgAction::Set,
          default_value_t = false, value_name = "BOOL", value_parser = BoolishValueParser::new())]
    pub healthy_with_at_least_one_config_loaded: bool,
    /// The files of one domain add their descriptors to it, as ratelimit's variable (default:
    /// a domain in two files is refused).
    #[arg(long, env = "MERGE_DOMAIN_CONFIG", action = clap::ArgAction::Set,
          default_value_t = false, value_name = "BOOL", value_parser = BoolishValueParser::new())]
    pub merge_domain_config: bool,
    /// Also serve the metrics on a listener of their own, as ratelimit's USE_PROMETHEUS.
    #[arg(long, env = "USE_PROMETHEUS", action = clap::ArgAction::Set, default_value_t = false,
          value_name = "BOOL", value_parser = BoolishValueParser::new())]
    pub prometheus: bool,
    /// The metrics' own listener (ratelimit's `:9090` form: every interface) [default:
    /// 127.0.0.1:9090].
    #[arg(long, env = "PROMETHEUS_ADDR", value_name = "ADDR")]
    pub prometheus_addr: Option<String>,
    /// The path of the metrics on their own listener.
    #[arg(
        long,
        env = "PROMETHEUS_PATH",
        default_value = "/metrics",
        value_name = "PATH"
    )]
    pub prometheus_path: String,
    /// Live limiter keys held at most, over all limits (the oldest are evicted past it).
    #[arg(long, env = "MAX_KEYS", default_value_t = 1_000_000)]
    pub max_keys: usize,
    /// Check the configuration, print OK or the error, and exit (0 or 1).
    #[arg(long)]
    pub validate: bool,
    /// Every limit in shadow mode: counted, never enforced.
    #[arg(long, env = "SHADOW_MODE", action = clap::ArgAction::Set, default_value_t = false,
          value_name = "BOOL", value_parser = BoolishValueParser::new())]
    pub shadow_mode: bool,
    /// Every limit in quota mode, as ratelimit's variable: a request is refused when a limit
    /// outside quota mode is over, or when every quota-mode limit it charges is.
    #[arg(long, env = "QUOTA_MODE", action = clap::ArgAction::Set, default_value_t = false,
          value_name = "BOOL", value_parser = BoolishValueParser::new())]
    pub quota_mode: bool,
    /// The fraction of a limit past which admitted hits count as near_limit.
    #[arg(long, env = "NEAR_LIMIT_RATIO", default_value_t = 0.8)]
    pub near_limit_ratio: f64,
    /// Add ratelimit's RateLimit-Limit/-Remaining/-Reset response headers.
    #[arg(long, env = "LIMIT_RESPONSE_HEADERS_ENABLED", action = clap::ArgAction::Set,
          default_value_t = false, value_name = "BOOL", value_parser = BoolishValueParser::new())]
    pub limit_response_headers_enabled: bool,
    /// Name of the limit header.
    #[arg(long, env = "LIMIT_LIMIT_HEADER", default_value = "RateLimit-Limit")]
    pub limit_limit_header: String,
    /// Name of the remaining header.
    #[arg(
        long,
        env = "LIMIT_REMAINING_HEADER",
        default_value = "RateLimit-Remaining"
    )]
    pub limit_remaining_header: String,
    /// Name of the reset header.
    #[arg(long, env = "LIMIT_RESET_HEADER", default_value = "RateLimit-Reset")]
    pub limit_reset_header: String,
    /// Bytes of one gRPC message or HTTP body.
    #[arg(long, default_value_t = 64 * 1024)]
    pub max_request_bytes: usize,
    /// Connections held open per listener (more wait in the backlog).
    #[arg(long, default_value_t = 1024)]
    pub max_connections: usize,
    /// Requests in flight per gRPC connection (HTTP/2 streams).
    #[arg(long, default_value_t = 128)]
    pub max_streams_per_connection: u32,
    /// Milliseconds a connection may stay silent before it is closed.
    #[arg(long, default_value_t = 120_000)]
    pub idle_timeout_ms: u64,
    /// Milliseconds to answer one request.
    #[arg(long, default_value_t = 5_000)]
    pub request_timeout_ms: u64,
    /// gRPC: a connection open this long is asked to close (an HTTP/2 GOAWAY: its client
    /// reconnects, to any server behind the load balancer), as ratelimit's; Go's duration
    /// syntax (`24h`, `1h30m`, `300s`); 0: never.
    #[arg(long, env = "GRPC_MAX_CONNECTION_AGE", default_value = "24h", value_name = "DURATION",
          value_parser = duration)]
    pub grpc_max_connection_age: Duration,
    /// gRPC: how long a connection asked to close may go on finishing its requests before it
    /// is cut; 0: until they are done.
    #[arg(long, env = "GRPC_MAX_CONNECTION_AGE_GRACE", default_value = "1h",
          value_name = "DURATION", value_parser = duration)]
    pub grpc_max_connection_age_grace: Duration,
    /// Descriptors in one request.
    #[arg(long, default_value_t = InputLimits::default().max_descriptors)]
    pub max_descriptors: usize,
    /// Entries in one descriptor.
    #[arg(long, default_value_t = InputLimits::default().max_entries)]
    pub max_entries: usize,
    /// Bytes of the domain, of one key, of one value.
    #[arg(long, default_value_t = InputLimits::default().max_bytes)]
    pub max_value_bytes: usize,
    /// Distinct rates that requests' `limit` overrides may bring (each holds a limiter).
    #[arg(long, default_value_t = EngineOptions::default().max_override_limits)]
    pub max_override_limits: usize,
    /// Distinct descriptor series in /metrics (detailed_metric values come from requests).
    #[arg(long, default_value_t = 10_000)]
    pub max_metric_series: usize,
    /// RESP: connections served at once (the next gets Redis's "max number of clients").
    #[arg(long, default_value_t = RespConfig::default().max_connections)]
    pub resp_max_connections: usize,
    /// RESP: arguments in one command, its name included.
    #[arg(long, default_value_t = RespConfig::default().max_args)]
    pub resp_max_args: usize,
    /// RESP: bytes of one argument (bulk string), and of an inline command or header line.
    #[arg(long, default_value_t = RespConfig::default().max_bulk_len)]
    pub resp_max_bulk_bytes: usize,
    /// RESP: bytes of unanswered input held per connection.
    #[arg(long, default_value_t = RespConfig::default().max_query_bytes)]
    pub resp_max_query_bytes: usize,
    /// RESP: milliseconds a started command may take to arrive, and a reply to be written.
    #[arg(long, default_value_t = 30_000)]
    pub resp_command_timeout_ms: u64,
    /// RESP in fleet mode: distinct CL.THROTTLE parameter sets (max_burst, count, period)
    /// shared through Redis; a call bringing one more gets an error reply.
    #[arg(long, default_value_t = 64)]
    pub resp_max_fleet_limits: usize,
    /// RESP: milliseconds an idle connection is kept (0: forever, as Redis).
    #[arg(long, default_value_t = 0)]
    pub resp_idle_timeout_ms: u64,
    /// Log level: trace, debug, info, warn or error (ratelimit's warning, fatal and panic are
    /// read as warn, error, error); RUST_LOG, when set, takes precedence, with its full syntax.
    #[arg(long, env = "LOG_LEVEL", default_value = "info", value_name = "LEVEL",
          value_parser = log_level)]
    pub log_level: String,
    /// Log format on standard error: text, or json (one object per line).
    #[arg(long, env = "LOG_FORMAT", value_enum, ignore_case = true, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
    /// gRPC on this Unix domain socket instead of TCP (a stale socket file is replaced).
    #[arg(long, env = "GRPC_UDS", value_name = "PATH")]
    pub grpc_uds: Option<PathBuf>,
    /// gRPC over TLS, with --grpc-tls-cert and --grpc-tls-key (a build with the `tls`
    /// feature).
    #[arg(long, env = "GRPC_SERVER_USE_TLS", action = clap::ArgAction::Set,
          default_value_t = false, value_name = "BOOL", value_parser = BoolishValueParser::new())]
    pub grpc_tls: bool,
    /// gRPC over TLS: the server's certificate chain (PEM).
    #[arg(long, env = "GRPC_SERVER_TLS_CERT", value_name = "PATH")]
    pub grpc_tls_cert: Option<PathBuf>,
    /// gRPC over TLS: the server's private key (PEM).
    #[arg(long, env = "GRPC_SERVER_TLS_KEY", value_name = "PATH")]
    pub grpc_tls_key: Option<PathBuf>,
    /// gRPC over TLS: clients must present a certificate this authority signed (PEM).
    #[arg(long, env = "GRPC_CLIENT_TLS_CACERT", value_name = "PATH")]
    pub grpc_client_ca: Option<PathBuf>,
    /// gRPC over TLS: a client's certificate must name this DNS name.
    #[arg(long, env = "GRPC_CLIENT_TLS_SAN", value_name = "NAME")]
    pub grpc_client_san: Option<String>,
    /// Export ratelimit_service_response_time_seconds in milliseconds, as ratelimit does
    /// with this variable (its name unchanged).
    #[arg(long, env = "PROMETHEUS_RESPONSE_TIME_AS_MILLISECONDS", action = clap::ArgAction::Set,
          default_value_t = false, value_name = "BOOL", value_parser = BoolishValueParser::new())]
    pub prometheus_response_time_as_milliseconds: bool,
    /// Send ratelimit's statsd counters (`ratelimit.service.rate_limit.<key>.total_hits`, ...)
    /// to --statsd-host:--statsd-port every --stats-flush-interval (ratelimit sends them by
    /// default; here they are off unless asked for: `/metrics` serves them).
    #[arg(long, env = "USE_STATSD", action = clap::ArgAction::Set, default_value_t = false,
          value_name = "BOOL", value_parser = BoolishValueParser::new())]
    pub statsd: bool,
    /// The statsd server's host.
    #[arg(
        long,
        env = "STATSD_HOST",
        default_value = "localhost",
        value_name = "HOST"
    )]
    pub statsd_host: String,
    /// The statsd server's UDP port.
    #[arg(long, env = "STATSD_PORT", default_value_t = 8125, value_name = "PORT")]
    pub statsd_port: u16,
    /// How often the statsd counters are sent; Go's duration syntax, more than zero.
    #[arg(long, env = "STATS_FLUSH_INTERVAL", default_value = "10s", value_name = "DURATION",
          value_parser = positive_duration)]
    pub stats_flush_interval: Duration,
}

/// How log lines are written.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line (ratelimit's `LOG_FORMAT=json`).
    Json,
}

/// A duration in Go's syntax, as ratelimit's variables hold them (`24h`, `1h30m`, `1.5h`,
/// `300ms`).
fn positive_duration(s: &str) -> Result<Duration, String> {
    match duration(s)? {
        d if d.is_zero() => Err("must be more than zero".into()),
        d => Ok(d),
    }
}

fn duration(s: &str) -> Result<Duration, String> {
    humantime::parse_duration(s.trim()).map_err(|e| format!("{e} (expected e.g. 24h, 1h30m, 300s)"))
}

/// A log level as `tracing`'s filter reads it, from ratelimit's (logrus') names or its own,
/// in any case.
fn log_level(s: &str) -> Result<String, String> {
    match s.to_ascii_lowercase().as_str() {
        l @ ("trace" | "debug" | "info" | "warn" | "error") => Ok(l.to_owned()),
        "warning" => Ok("warn".to_owned()),
        "fatal" | "panic" => Ok("error".to_owned()),
        _ => Err("expected trace, debug, info, warn or error".to_owned()),
    }
}

fn env(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.is_empty())
}

/// `flag` if given (`off` disables), else `$host_var:$port_var` with the defaults.
fn listener(flag: &Option<String>, host_var: &str, port_var: &str, port: u16) -> Option<String> {
    match flag.as_deref() {
        Some("off") => None,
        Some(a) => Some(a.to_owned()),
        None => {
            let host = env(host_var).unwrap_or_else(|| "127.0.0.1".into());
            let port = env(port_var).unwrap_or_else(|| port.to_string());
            Some(format!("{host}:{port}"))
        }
    }
}

impl Cli {
    /// The configuration path: the flag, else ratelimit's runtime directory.
    pub(crate) fn config_path(&self) -> Option<PathBuf> {
        if let Some(p) = &self.config {
            return Some(p.clone());
        }
        let root = env("RUNTIME_ROOT")?;
        let mut p = PathBuf::from(root);
        if let Some(sub) = env("RUNTIME_SUBDIRECTORY") {
            p.push(sub);
        }
        p.push(env("RUNTIME_APPDIRECTORY").unwrap_or_else(|| "config".into()));
        Some(p)
    }

    /// The RESP listener's bounds.
    pub(crate) fn resp_config(&self) -> RespConfig {
        RespConfig {
            max_connections: self.resp_max_connections,
            max_args: self.resp_max_args,
            max_bulk_len: self.resp_max_bulk_bytes,
            max_inline_len: self.resp_max_bulk_bytes,
            max_query_bytes: self.resp_max_query_bytes,
            command_timeout: Duration::from_millis(self.resp_command_timeout_ms),
            idle_timeout: (self.resp_idle_timeout_ms > 0)
                .then(|| Duration::from_millis(self.resp_idle_timeout_ms)),
            max_keys: self.max_keys,
        }
    }

    /// The RESP listener's address (`None`: off).
    pub(crate) fn resp_addr(&self) -> Option<&str> {
        (self.resp != "off").then_some(self.resp.as_str())
    }

    /// Fleet mode's options, from --redis and ratelimit's other Redis variables (`None`: no
    /// fleet).
    ///
    /// # Errors
    ///
    /// Redis settings that cannot be honoured, named (and what to do instead).
    fn fleet(&self) -> Result<Option<FleetOptions>, String> {
        if let Some(b) = env("BACKEND_TYPE").filter(|b| !b.eq_ignore_ascii_case("redis")) {
            return Err(format!(
                "BACKEND_TYPE={b} is not supported: limits are shared through Redis (REDIS_URL, \
                 --redis) or kept in each server (BACKEND_TYPE unset)"
            ));
        }
        let Some(url) = self.redis.as_deref().filter(|u| !u.is_empty()) else {
            return Ok(None);
        };
        for (var, instead) in [
            (
                "REDIS_TLS_CACERT",
                "give the CA bundle in SSL_CERT_FILE, which the fleet's TLS reads",
            ),
            (
                "REDIS_TLS_CLIENT_CERT",
                "client certificates to Redis are not supported",
            ),
            (
                "REDIS_TLS_CLIENT_KEY",
                "client certificates to Redis are not supported",
            ),
        ] {
            if env(var).is_some() {
                return Err(format!("{var} is not read: {instead}"));
            }
        }
        if env("REDIS_TLS_SKIP_HOSTNAME_VERIFICATION").is_some_and(|v| truthy(&v)) {
            return Err(
                "REDIS_TLS_SKIP_HOSTNAME_VERIFICATION is not supported: the fleet \
                        checks Redis's certificate and its name"
                    .to_owned(),
            );
        }
        if env("REDIS_PERSECOND").is_some_and(|v| truthy(&v)) {
            tracing::warn!(
                "REDIS_PERSECOND is not read: per-second limits are leased like the others, \
                 through REDIS_URL's Redis"
            );
        }
        let redis = RatelimitRedis {
            url,
            redis_type: self.redis_type.as_deref().filter(|v| !v.is_empty()),
            socket_type: self.redis_socket_type.as_deref().filter(|v| !v.is_empty()),
            auth: self.redis_auth.as_deref().filter(|v| !v.is_empty()),
            tls: self.redis_tls,
        }
        .fleet_url()?;
        Ok(Some(FleetOptions {
            redis,
            max_wait: Duration::from_millis(self.redis_max_wait_ms),
            hot_rate: self.redis_hot_rate,
            key_prefix: self.cache_key_prefix.clone(),
        }))
    }

    /// ratelimit's Prometheus listener: `PROMETHEUS_ADDR`'s `:PORT` is every interface, as in
    /// Go; unset, 127.0.0.1:9090 (this server binds loopback unless told otherwise).
    fn metrics_listener(&self) -> MetricsListener {
        if env("PROMETHEUS_MAPPER_YAML").is_some() {
            tracing::warn!(
                "PROMETHEUS_MAPPER_YAML is not read: the metrics keep the names of ratelimit's \
                 default mapping"
            );
        }
        let addr = match self.prometheus_addr.as_deref().filter(|a| !a.is_empty()) {
            None => "127.0.0.1:9090".to_owned(),
            Some(a) if a.starts_with(':') => format!("0.0.0.0{a}"),
            Some(a) => a.to_owned(),
        };
        MetricsListener {
            addr,
            path: self.prometheus_path.clone(),
        }
    }

    /// The server's settings.
    ///
    /// # Errors
    ///
    /// Fleet settings that cannot be honoured (see `fleet`).
    pub(crate) fn settings(&self) -> Result<Settings, String> {
        Ok(Settings {
            config: self.config_path(),
            merge_domains: self.merge_domain_config,
            grpc: listener(&self.grpc, "GRPC_HOST", "GRPC_PORT", 8081),
            http: listener(&self.http, "HOST", "PORT", 8080),
            engine: EngineOptions {
                max_keys: self.max_keys,
                shadow_mode: self.shadow_mode,
                quota_mode: self.quota_mode,
                near_limit_ratio: self.near_limit_ratio,
                input: InputLimits {
                    max_descriptors: self.max_descriptors,
                    max_entries: self.max_entries,
                    max_bytes: self.max_value_bytes,
                },
                max_override_limits: self.max_override_limits,
            },
            limits: Limits {
                max_request_bytes: self.max_request_bytes,
                max_connections: self.max_connections,
                max_streams_per_connection: self.max_streams_per_connection,
                idle_timeout: Duration::from_millis(self.idle_timeout_ms),
                request_timeout: Duration::from_millis(self.request_timeout_ms),
                max_connection_age: (!self.grpc_max_connection_age.is_zero())
                    .then_some(self.grpc_max_connection_age),
                max_connection_age_grace: (!self.grpc_max_connection_age_grace.is_zero())
                    .then_some(self.grpc_max_connection_age_grace),
                max_metric_series: self.max_metric_series,
            },
            fleet: self.fleet()?,
            health_strict: self.redis_health_strict,
            response_time_as_milliseconds: self.prometheus_response_time_as_milliseconds,
            grpc_uds: self.grpc_uds.clone().filter(|p| !p.as_os_str().is_empty()),
            health_needs_config: self.healthy_with_at_least_one_config_loaded,
            grpc_tls: self.grpc_tls.then(|| {
                let path = |p: &Option<PathBuf>| p.clone().filter(|p| !p.as_os_str().is_empty());
                GrpcTls {
                    cert: path(&self.grpc_tls_cert).unwrap_or_default(),
                    key: path(&self.grpc_tls_key).unwrap_or_default(),
                    client_ca: path(&self.grpc_client_ca),
                    client_san: self.grpc_client_san.clone().filter(|s| !s.is_empty()),
                }
            }),
            statsd: self.statsd.then(|| Statsd {
                addr: if self.statsd_host.contains(':') && !self.statsd_host.starts_with('[') {
                    format!("[{}]:{}", self.statsd_host, self.statsd_port)
                } else {
                    format!("{}:{}", self.statsd_host, self.statsd_port)
                },
                flush_interval: self.stats_flush_interval,
            }),
            prometheus: self.prometheus.then(|| self.metrics_listener()),
            headers: self.limit_response_headers_enabled.then(|| HeaderNames {
                limit: self.limit_limit_header.clone(),
                remaining: self.limit_remaining_header.clone(),
                reset: self.limit_reset_header.clone(),
            }),
        })
    }
}

/// A boolean as ratelimit reads one (Go's `ParseBool`, plus yes/on).
fn truthy(v: &str) -> bool {
    matches!(
        v.to_ascii_lowercase().as_str(),
        "1" | "t" | "true" | "yes" | "on"
    )
}
