//! gRPC over TLS (feature `tls`), as envoyproxy/ratelimit configures it:
//! `GRPC_SERVER_USE_TLS` with `GRPC_SERVER_TLS_CERT` and `GRPC_SERVER_TLS_KEY` (PEM files),
//! `GRPC_CLIENT_TLS_CACERT` (clients must present a certificate this authority signed, for
//! client authentication) and `GRPC_CLIENT_TLS_SAN` (that certificate must name this DNS name).
//!
//! The handshake is tonic's (rustls, ring); the files are read once, at start: a certificate
//! rotated on disk takes effect at the next start (ratelimit reloads it).

use std::path::PathBuf;
use std::time::Duration;

/// TLS for the gRPC listener.
///
/// # Examples
///
/// ```
/// use cellgate_server::server::{GrpcTls, Settings};
/// let settings = Settings {
///     grpc_tls: Some(GrpcTls {
///         cert: "server.pem".into(),
///         key: "server.key".into(),
///         client_ca: None,
///         client_san: None,
///     }),
///     ..Settings::default()
/// };
/// assert!(settings.grpc_tls.is_some());
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GrpcTls {
    /// The server's certificate chain (PEM).
    pub cert: PathBuf,
    /// The server's private key (PEM).
    pub key: PathBuf,
    /// Clients must present a certificate signed by this authority (PEM); `None`: no client
    /// certificate is asked for.
    pub client_ca: Option<PathBuf>,
    /// A client's certificate must name this DNS name (needs `client_ca`); a request from one
    /// that does not is refused `UNAUTHENTICATED`.
    pub client_san: Option<String>,
}

/// The listener's TLS, read and checked at start.
#[cfg(feature = "tls")]
pub(crate) type Config = tonic::transport::ServerTlsConfig;

/// Without the `tls` feature there is no TLS to configure ([`load`] refuses).
#[cfg(not(feature = "tls"))]
#[derive(Clone, Debug)]
pub(crate) enum Config {}

/// Reads `tls`'s files into the listener's configuration, whose handshakes take at most
/// `handshake_timeout`; a clear error when a file cannot be read or does not parse.
#[cfg(feature = "tls")]
pub(crate) fn load(tls: &GrpcTls, handshake_timeout: Duration) -> Result<Config, String> {
    use tonic::transport::{Certificate, Identity};
    let read = |what: &str, path: &PathBuf| {
        std::fs::read(path).map_err(|e| format!("cannot read {what} {}: {e}", path.display()))
    };
    if tls.cert.as_os_str().is_empty() || tls.key.as_os_str().is_empty() {
        return Err(
            "GRPC_SERVER_USE_TLS needs GRPC_SERVER_TLS_CERT and GRPC_SERVER_TLS_KEY".into(),
        );
    }
    if tls.client_san.is_some() && tls.client_ca.is_none() {
        return Err(
            "GRPC_CLIENT_TLS_SAN needs GRPC_CLIENT_TLS_CACERT (a client certificate \
                    is only asked for with an authority to check it against)"
                .into(),
        );
    }
    let identity = Identity::from_pem(
        read("GRPC_SERVER_TLS_CERT", &tls.cert)?,
        read("GRPC_SERVER_TLS_KEY", &tls.key)?,
    );
    let mut config = Config::new().identity(identity).timeout(handshake_timeout);
    if let Some(ca) = &tls.client_ca {
        let ca = read("GRPC_CLIENT_TLS_CACERT", ca)?;
        config = config.client_ca_root(Certificate::from_pem(ca));
    }
    // Parses the files now, so that a bad certificate or key stops the start, not the listener.
    tonic::transport::Server::builder()
        .tls_config(config.clone())
        .map_err(|e| format!("GRPC_SERVER_TLS_CERT / _KEY: {e}"))?;
    Ok(config)
}

/// See the `tls` build's `load`.
#[cfg(not(feature = "tls"))]
pub(crate) fn load(_: &GrpcTls, _: Duration) -> Result<Config, String> {
    Err("this build has no TLS: build cellgate-server with `--features tls`".into())
}

/// Applies `config` to the gRPC server `builder`.
#[cfg(feature = "tls")]
pub(crate) fn apply(
    builder: tonic::transport::Server,
    config: Config,
) -> Result<tonic::transport::Server, tonic::transport::Error> {
    builder.tls_config(config)
}

/// See the `tls` build's `apply`.
#[cfg(not(feature = "tls"))]
pub(crate) fn apply(
    _: tonic::transport::Server,
    config: Config,
) -> Result<tonic::transport::Server, tonic::transport::Error> {
    match config {}
}

/// Whether the client certificate of a request (the first of `certs`, which the handshake
/// verified against `GRPC_CLIENT_TLS_CACERT`) names the DNS name `san`.
#[cfg(feature = "tls")]
pub(crate) fn names<'a>(certs: Option<&[rustls_pki_types::CertificateDer<'a>]>, san: &str) -> bool {
    let Some(cert) = certs.and_then(<[_]>::first) else {
        return false;
    };
    let Ok(name) = rustls_pki_types::ServerName::try_from(san) else {
        return false;
    };
    webpki::EndEntityCert::try_from(cert)
        .is_ok_and(|c| c.verify_is_valid_for_subject_name(&name).is_ok())
}
