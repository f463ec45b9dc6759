//! TLS for the network doors (rustls, ring): the server's certificate and
//! key, and optionally a client CA (then every client must present a
//! certificate that chains to it: mutual TLS) and the names a client
//! certificate must carry to be let in.
//!
//! The files are read at start and again at every reload
//! ([`TlsServer::reload`]): a new pair takes effect for new connections,
//! connections already open keep theirs, and a pair that does not load
//! keeps the old one and says why. Handshakes that fail are counted by
//! reason ([`HandshakeStats`]) and logged at most once a second.

use std::io;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use rustls::server::WebPkiClientVerifier;
use rustls::{CertificateError, RootCertStore, ServerConfig};
use tokio::net::TcpStream;
use tokio_rustls::server::TlsStream;
use tokio_rustls::TlsAcceptor;

use crate::stats::{HandshakeStats, RateLimiter};

/// The files and names of one door's TLS, and the config key they come
/// from (`server.http`), for error messages.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsFiles {
    pub key_prefix: String,
    /// PEM certificate chain, the server's own first.
    pub cert: PathBuf,
    /// PEM private key (PKCS#8, PKCS#1 or SEC1).
    pub key: PathBuf,
    /// PEM certificates of the CA(s) client certificates must chain to.
    pub client_ca: Option<PathBuf>,
    /// DNS names or IP addresses of which a client certificate must carry
    /// one among its subject alternative names (empty: any it chains).
    pub allowed_names: Vec<String>,
}

/// A door's TLS: the acceptor of now, swapped whole at a reload.
pub struct TlsServer {
    files: TlsFiles,
    acceptor: RwLock<TlsAcceptor>,
    /// Longest a handshake may take.
    handshake_timeout: Duration,
}

impl TlsServer {
    /// Load the files; an error names the key and the file.
    pub fn load(files: TlsFiles, handshake_timeout: Duration) -> Result<Arc<Self>, String> {
        let config = server_config(&files)?;
        Ok(Arc::new(TlsServer {
            files,
            acceptor: RwLock::new(TlsAcceptor::from(Arc::new(config))),
            handshake_timeout,
        }))
    }

    /// Check that `files` load, without keeping anything (`spillway check`).
    pub fn check(files: &TlsFiles) -> Result<(), String> {
        server_config(files).map(|_| ())
    }

    /// Read the files again: new connections get the new pair; on an
    /// error the old one stays and the error says why.
    pub fn reload(&self) -> Result<(), String> {
        let config = server_config(&self.files)?;
        *self.acceptor.write().unwrap() = TlsAcceptor::from(Arc::new(config));
        Ok(())
    }

    /// The config key of this door (`server.http`).
    pub fn key_prefix(&self) -> &str {
        &self.files.key_prefix
    }

    /// The handshake, then the name check; `None` (counted, logged at most
    /// once a second) when either refuses the client.
    pub async fn accept(
        &self,
        tcp: TcpStream,
        peer: SocketAddr,
        stats: &HandshakeStats,
        log: &RateLimiter,
    ) -> Option<TlsStream<TcpStream>> {
        let acceptor = self.acceptor.read().unwrap().clone();
        let refused = |reason: &str, detail: String| {
            stats.count(reason);
            if log.allow() {
                tracing::warn!(%peer, reason, detail = %detail, door = %self.files.key_prefix, "TLS client refused");
            }
        };
        let stream = match tokio::time::timeout(self.handshake_timeout, acceptor.accept(tcp)).await
        {
            Ok(Ok(s)) => s,
            Ok(Err(e)) => {
                let reason = failure_reason(&e);
                refused(reason, e.to_string());
                return None;
            }
            Err(_) => {
                refused(
                    "other",
                    format!("handshake took longer than {:?}", self.handshake_timeout),
                );
                return None;
            }
        };
        if !self.files.allowed_names.is_empty() {
            let (_, conn) = stream.get_ref();
            let ok = conn
                .peer_certificates()
                .and_then(|c| c.first())
                .is_some_and(|cert| carries_one_of(cert, &self.files.allowed_names));
            if !ok {
                refused(
                    "name_not_allowed",
                    format!(
                        "the client certificate carries none of allowed_names {:?} among its subject alternative names",
                        self.files.allowed_names
                    ),
                );
                return None;
            }
        }
        Some(stream)
    }
}

/// Whether `cert` is valid for one of `names` (its DNS or IP subject
/// alternative names).
fn carries_one_of(cert: &CertificateDer<'_>, names: &[String]) -> bool {
    let Ok(ee) = webpki::EndEntityCert::try_from(cert) else {
        return false;
    };
    names.iter().any(|n| {
        ServerName::try_from(n.as_str())
            .is_ok_and(|name| ee.verify_is_valid_for_subject_name(&name).is_ok())
    })
}

/// The counted reason of a failed handshake.
fn failure_reason(e: &io::Error) -> &'static str {
    let Some(tls) = e.get_ref().and_then(|i| i.downcast_ref::<rustls::Error>()) else {
        return "other";
    };
    match tls {
        rustls::Error::NoCertificatesPresented => "no_client_certificate",
        rustls::Error::InvalidCertificate(c) => match c {
            CertificateError::UnknownIssuer => "unknown_ca",
            CertificateError::Expired | CertificateError::ExpiredContext { .. } => "expired",
            _ => "bad_certificate",
        },
        _ => "other",
    }
}

fn server_config(files: &TlsFiles) -> Result<ServerConfig, String> {
    let p = &files.key_prefix;
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(&files.cert)
        .and_then(|it| it.collect::<Result<_, _>>())
        .map_err(|e| format!("{p}.cert: {}: {e}", files.cert.display()))?;
    if certs.is_empty() {
        return Err(format!(
            "{p}.cert: {}: no PEM certificate in it",
            files.cert.display()
        ));
    }
    let key = PrivateKeyDer::from_pem_file(&files.key)
        .map_err(|e| format!("{p}.key: {}: {e}", files.key.display()))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("{p}: {e}"))?;
    let builder = match &files.client_ca {
        None => builder.with_no_client_auth(),
        Some(ca) => {
            let mut roots = RootCertStore::empty();
            let cas: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(ca)
                .and_then(|it| it.collect::<Result<_, _>>())
                .map_err(|e| format!("{p}.client_ca: {}: {e}", ca.display()))?;
            for c in cas {
                roots
                    .add(c)
                    .map_err(|e| format!("{p}.client_ca: {}: {e}", ca.display()))?;
            }
            if roots.is_empty() {
                return Err(format!(
                    "{p}.client_ca: {}: no PEM certificate in it",
                    ca.display()
                ));
            }
            let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
                .build()
                .map_err(|e| format!("{p}.client_ca: {}: {e}", ca.display()))?;
            builder.with_client_cert_verifier(verifier)
        }
    };
    builder.with_single_cert(certs, key).map_err(|e| {
        format!(
            "{p}.cert / {p}.key: {} and {} do not make a usable pair: {e}",
            files.cert.display(),
            files.key.display()
        )
    })
}
