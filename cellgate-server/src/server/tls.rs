//! gRPC over TLS (feature `tls`), as envoyproxy/ratelimit configures it:
//! `GRPC_SERVER_USE_TLS` with `GRPC_SERVER_TLS_CERT` and `GRPC_SERVER_TLS_KEY` (PEM files),
//! `GRPC_CLIENT_TLS_CACERT` (clients must present a certificate this authority signed, for
//! client authentication) and `GRPC_CLIENT_TLS_SAN` (that certificate must name this DNS name,
//! checked in the handshake).
//!
//! The listener does its own handshakes (rustls, ring), each in a task of its own with a
//! timeout, so that a slow client holds up no other. The files are read at start (a bad one
//! stops the start) and again whenever they change, as ratelimit reloads its certificate
//! (cert-manager and Kubernetes Secrets rotate them in place): a valid set serves every
//! connection made after it, an invalid one is logged, counted and ignored. Connections
//! already made keep the certificate they were made with (`GRPC_MAX_CONNECTION_AGE` ends
//! them in time).

use std::path::PathBuf;
#[cfg(feature = "tls")]
use std::sync::Arc;
use std::time::Duration;

#[cfg(feature = "tls")]
use arc_swap::ArcSwap;

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
    /// A client's certificate must name this DNS name (needs `client_ca`); a client whose
    /// certificate does not is refused in the handshake.
    pub client_san: Option<String>,
}

/// The gRPC listener's TLS: the files' paths and, read from them, the configuration each new
/// connection's handshake takes.
#[cfg(feature = "tls")]
pub(crate) struct Acceptor {
    files: GrpcTls,
    /// Replaced whole by a reload; a handshake takes the one in force when it starts.
    current: ArcSwap<rustls::ServerConfig>,
    handshake_timeout: Duration,
}

/// Without the `tls` feature there is no TLS to configure ([`load`] refuses).
#[cfg(not(feature = "tls"))]
pub(crate) enum Acceptor {}

/// Reads `tls`'s files into the listener's TLS, whose handshakes take at most
/// `handshake_timeout`; a clear error when a file cannot be read or does not parse, or the key
/// is not the certificate's.
#[cfg(feature = "tls")]
pub(crate) fn load(tls: &GrpcTls, handshake_timeout: Duration) -> Result<Acceptor, String> {
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
    Ok(Acceptor {
        current: ArcSwap::from_pointee(read(tls)?),
        files: tls.clone(),
        handshake_timeout,
    })
}

/// See the `tls` build's `load`.
#[cfg(not(feature = "tls"))]
pub(crate) fn load(_: &GrpcTls, _: Duration) -> Result<Acceptor, String> {
    Err("this build has no TLS: build cellgate-server with `--features tls`".into())
}

#[cfg(feature = "tls")]
impl Acceptor {
    /// The files to watch: the certificate, the key, the client authority.
    pub(crate) fn files(&self) -> Vec<PathBuf> {
        let mut files = vec![self.files.cert.clone(), self.files.key.clone()];
        files.extend(self.files.client_ca.clone());
        files
    }

    /// Reads the files again: the connections made from now on use them; on an error (a file
    /// half written, a key that is not the certificate's) the configuration in force stays.
    pub(crate) fn reload(&self) -> Result<(), String> {
        self.current.store(Arc::new(read(&self.files)?));
        Ok(())
    }
}

/// A connection once its handshake is done.
#[cfg(feature = "tls")]
pub(crate) type Stream = tokio_rustls::server::TlsStream<super::conn::Conn>;
/// See the `tls` build's `Stream`.
#[cfg(not(feature = "tls"))]
pub(crate) type Stream = super::conn::Conn;

/// How many finished handshakes may wait for the gRPC server to take them.
#[cfg(feature = "tls")]
const READY: usize = 64;

/// The connections of `conns` once their handshakes are done, each handshake in a task of its
/// own, bounded by the acceptor's timeout; a failed one is counted in `failed` and logged at
/// debug level (a client's mistake, or a scanner's). Accepting stops when the stream returned
/// is dropped.
#[cfg(feature = "tls")]
pub(crate) fn handshakes(
    acceptor: Arc<Acceptor>,
    conns: impl futures_util::Stream<Item = std::io::Result<super::conn::Conn>> + Send + 'static,
    failed: crate::metrics::Count,
) -> impl futures_util::Stream<Item = std::io::Result<Stream>> + Send + 'static {
    use futures_util::StreamExt;
    let (tx, rx) = tokio::sync::mpsc::channel(READY);
    tokio::spawn(async move {
        let mut conns = std::pin::pin!(conns);
        loop {
            let conn = tokio::select! {
                () = tx.closed() => return,
                next = conns.next() => match next {
                    Some(Ok(conn)) => conn,
                    Some(Err(_)) => continue,
                    None => return,
                },
            };
            let tls = tokio_rustls::TlsAcceptor::from(acceptor.current.load_full());
            let (tx, failed, timeout) = (tx.clone(), failed.clone(), acceptor.handshake_timeout);
            tokio::spawn(async move {
                match tokio::time::timeout(timeout, tls.accept(conn)).await {
                    Ok(Ok(stream)) => {
                        let _ = tx.send(Ok(stream)).await;
                    }
                    Ok(Err(e)) => {
                        failed.add(1);
                        tracing::debug!(error = %e, "gRPC TLS handshake failed");
                    }
                    Err(_) => {
                        failed.add(1);
                        tracing::debug!("gRPC TLS handshake timed out");
                    }
                }
            });
        }
    });
    futures_util::stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|s| (s, rx)) })
}

/// See the `tls` build's `handshakes`.
#[cfg(not(feature = "tls"))]
pub(crate) fn handshakes(
    acceptor: std::sync::Arc<Acceptor>,
    _: impl futures_util::Stream<Item = std::io::Result<super::conn::Conn>> + Send + 'static,
    _: crate::metrics::Count,
) -> futures_util::stream::Pending<std::io::Result<Stream>> {
    match *acceptor {}
}

/// The TLS configuration `tls`'s files make: the certificate chain and its key; with a client
/// authority, client certificates required and verified (and with a name, checked for it);
/// HTTP/2 offered by ALPN, as gRPC clients ask.
#[cfg(feature = "tls")]
fn read(tls: &GrpcTls) -> Result<rustls::ServerConfig, String> {
    use rustls_pki_types::pem::PemObject;
    use rustls_pki_types::{CertificateDer, PrivateKeyDer};
    let file = |what: &str, path: &PathBuf| {
        std::fs::read(path).map_err(|e| format!("cannot read {what} {}: {e}", path.display()))
    };
    let certs = |what: &str, path: &PathBuf| {
        let pem = file(what, path)?;
        let certs = CertificateDer::pem_slice_iter(&pem)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| format!("{what} {}: {e}", path.display()))?;
        if certs.is_empty() {
            return Err(format!("{what} {}: no certificate", path.display()));
        }
        Ok(certs)
    };
    let chain = certs("GRPC_SERVER_TLS_CERT", &tls.cert)?;
    let key = PrivateKeyDer::from_pem_slice(&file("GRPC_SERVER_TLS_KEY", &tls.key)?)
        .map_err(|e| format!("GRPC_SERVER_TLS_KEY {}: {e}", tls.key.display()))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ServerConfig::builder_with_provider(Arc::clone(&provider))
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?;
    let builder = match &tls.client_ca {
        None => builder.with_no_client_auth(),
        Some(ca) => {
            let mut roots = rustls::RootCertStore::empty();
            for cert in certs("GRPC_CLIENT_TLS_CACERT", ca)? {
                roots
                    .add(cert)
                    .map_err(|e| format!("GRPC_CLIENT_TLS_CACERT {}: {e}", ca.display()))?;
            }
            let verifier =
                rustls::server::WebPkiClientVerifier::builder_with_provider(roots.into(), provider)
                    .build()
                    .map_err(|e| format!("GRPC_CLIENT_TLS_CACERT {}: {e}", ca.display()))?;
            match &tls.client_san {
                None => builder.with_client_cert_verifier(verifier),
                Some(san) => builder.with_client_cert_verifier(Arc::new(Named {
                    inner: verifier,
                    name: rustls_pki_types::ServerName::try_from(san.clone())
                        .map_err(|e| format!("GRPC_CLIENT_TLS_SAN {san:?}: {e}"))?,
                })),
            }
        }
    };
    let mut config = builder
        .with_single_cert(chain, key)
        .map_err(|e| format!("GRPC_SERVER_TLS_CERT / _KEY: {e}"))?;
    config.alpn_protocols = vec![b"h2".to_vec()];
    Ok(config)
}

/// A client verifier that also requires the client certificate to name `name`
/// (`GRPC_CLIENT_TLS_SAN`), as ratelimit's handshake does.
#[cfg(feature = "tls")]
#[derive(Debug)]
struct Named {
    inner: Arc<dyn rustls::server::danger::ClientCertVerifier>,
    name: rustls_pki_types::ServerName<'static>,
}

#[cfg(feature = "tls")]
impl rustls::server::danger::ClientCertVerifier for Named {
    fn root_hint_subjects(&self) -> &[rustls::DistinguishedName] {
        self.inner.root_hint_subjects()
    }

    fn verify_client_cert(
        &self,
        end_entity: &rustls_pki_types::CertificateDer<'_>,
        intermediates: &[rustls_pki_types::CertificateDer<'_>],
        now: rustls_pki_types::UnixTime,
    ) -> Result<rustls::server::danger::ClientCertVerified, rustls::Error> {
        let verified = self
            .inner
            .verify_client_cert(end_entity, intermediates, now)?;
        if names(end_entity, &self.name) {
            Ok(verified)
        } else {
            Err(rustls::Error::InvalidCertificate(
                rustls::CertificateError::NotValidForName,
            ))
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &rustls_pki_types::CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &rustls_pki_types::CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.inner.supported_verify_schemes()
    }
}

/// Whether the client certificate `cert` (verified against the authority) names `name`.
#[cfg(feature = "tls")]
fn names(
    cert: &rustls_pki_types::CertificateDer<'_>,
    name: &rustls_pki_types::ServerName<'_>,
) -> bool {
    webpki::EndEntityCert::try_from(cert)
        .is_ok_and(|c| c.verify_is_valid_for_subject_name(name).is_ok())
}
