//! TLS for the network doors (rustls, ring): the server's certificate and
//! key, and optionally a client CA (then every client must present a
//! certificate that chains to it: mutual TLS) and the names a client
//! certificate must carry to be let in.
//!
//! The files are read at start and again at every reload
//! ([`TlsServer::reload`]): a new pair takes effect for new connections,
//! connections already open keep theirs, and a pair that does not load
//! keeps the old one and says why. A server certificate that loads but
//! that every client would refuse (expired, not yet valid, or whose
//! extended key usage leaves out serverAuth) counts as a pair that does
//! not load: taking it would turn a rotation into an outage. One whose
//! names do not cover the door's listen address is only a warning, since
//! clients may connect by a name it does carry. Handshakes that fail are
//! counted by reason ([`HandshakeStats`]) and logged at most one line a
//! second per door, the line counting those not logged since the last.

use std::io;
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use rustls::client::danger::HandshakeSignatureValid;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::server::WebPkiClientVerifier;
use rustls::{
    CertificateError, DigitallySignedStruct, DistinguishedName, RootCertStore, ServerConfig,
    SignatureScheme,
};
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
    /// The address the door listens on: a server certificate whose names
    /// do not cover it gets a warning (none for an unspecified address,
    /// `0.0.0.0` or `[::]`, which clients cannot connect to by that name).
    pub listen: Option<IpAddr>,
}

/// A door's TLS: the acceptor of now, swapped whole at a reload.
pub struct TlsServer {
    files: TlsFiles,
    acceptor: RwLock<TlsAcceptor>,
    /// Longest a handshake may take.
    handshake_timeout: Duration,
    /// One log line a second about refused clients, whatever their number
    /// (a scan or a misconfigured fleet must not flood the log); the line
    /// says how many were not logged since the previous one.
    refusal_log: RateLimiter,
}

impl TlsServer {
    /// Load the files; an error names the key and the file. Warnings
    /// (names that do not cover the listen address) are logged.
    pub fn load(files: TlsFiles, handshake_timeout: Duration) -> Result<Arc<Self>, String> {
        let (config, warnings) = server_config(&files)?;
        for warning in warnings {
            tracing::warn!(door = %files.key_prefix, "{warning}");
        }
        Ok(Arc::new(TlsServer {
            files,
            acceptor: RwLock::new(TlsAcceptor::from(Arc::new(config))),
            handshake_timeout,
            refusal_log: RateLimiter::per_second(1),
        }))
    }

    /// Check that `files` load, without keeping anything (`spillway
    /// check`); `Ok` carries the warnings.
    pub fn check(files: &TlsFiles) -> Result<Vec<String>, String> {
        server_config(files).map(|(_, warnings)| warnings)
    }

    /// Read the files again: new connections get the new pair; on an
    /// error (a pair that does not load, a certificate no client would
    /// take) the old one stays and the error says why. `Ok` carries the
    /// warnings about the new pair.
    pub fn reload(&self) -> Result<Vec<String>, String> {
        let (config, warnings) = server_config(&self.files)?;
        *self.acceptor.write().unwrap() = TlsAcceptor::from(Arc::new(config));
        Ok(warnings)
    }

    /// The config key of this door (`server.http`).
    pub fn key_prefix(&self) -> &str {
        &self.files.key_prefix
    }

    /// The handshake, then the name check; `None` (counted, logged at most
    /// one line a second) when either refuses the client.
    pub async fn accept(
        &self,
        tcp: TcpStream,
        peer: SocketAddr,
        stats: &HandshakeStats,
    ) -> Option<TlsStream<TcpStream>> {
        let acceptor = self.acceptor.read().unwrap().clone();
        let refused = |reason: &str, detail: String| {
            stats.count(reason);
            if let Some(not_logged) = self.refusal_log.allow_counting() {
                tracing::warn!(%peer, reason, detail = %detail, door = %self.files.key_prefix, not_logged, "TLS client refused ({not_logged} more refused since the last such line, counted by reason in the stats)");
            }
        };
        let stream = match tokio::time::timeout(self.handshake_timeout, acceptor.accept(tcp)).await
        {
            Ok(Ok(s)) => s,
            Ok(Err(e)) => {
                let reason = failure_reason(&e);
                // The names a certificate refused by `allowed_names`
                // carried: the verifier (run in this same poll, on this
                // thread) left them here.
                let detail = match REFUSED_NAMES.take() {
                    Some(names) if reason == "name_not_allowed" => format!(
                        "the client certificate's names {names} are none of allowed_names {:?} (the client was sent alert access_denied)",
                        self.files.allowed_names
                    ),
                    _ => e.to_string(),
                };
                refused(reason, detail);
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
        Some(stream)
    }
}

thread_local! {
    /// What [`NamedClients`] refused last on this thread, for the log line.
    static REFUSED_NAMES: std::cell::Cell<Option<String>> = const { std::cell::Cell::new(None) };
}

/// The client CA's verifier, then `allowed_names`: a certificate that
/// chains but carries none of them fails the handshake with the alert
/// `access_denied`, so the client hears why (a check after the handshake
/// could only close the connection).
#[derive(Debug)]
struct NamedClients {
    inner: Arc<dyn ClientCertVerifier>,
    allowed: Vec<String>,
}

impl ClientCertVerifier for NamedClients {
    fn offer_client_auth(&self) -> bool {
        self.inner.offer_client_auth()
    }

    fn client_auth_mandatory(&self) -> bool {
        self.inner.client_auth_mandatory()
    }

    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        self.inner.root_hint_subjects()
    }

    fn verify_client_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        now: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        let verified = self
            .inner
            .verify_client_cert(end_entity, intermediates, now)?;
        if carries_one_of(end_entity, &self.allowed) {
            return Ok(verified);
        }
        let names: Vec<String> = webpki::EndEntityCert::try_from(end_entity)
            .map(|ee| ee.valid_dns_names().map(str::to_string).collect())
            .unwrap_or_default();
        REFUSED_NAMES.set(Some(if names.is_empty() {
            "(no DNS name; IP addresses not shown)".to_string()
        } else {
            format!("{names:?}")
        }));
        Err(rustls::Error::InvalidCertificate(
            CertificateError::ApplicationVerificationFailure,
        ))
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.inner.supported_verify_schemes()
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
            CertificateError::ApplicationVerificationFailure => "name_not_allowed",
            _ => "bad_certificate",
        },
        _ => "other",
    }
}

/// Why a server certificate would be refused by every client now, if it
/// would: expired, not yet valid, an extended key usage without
/// serverAuth. The message names the key, the file and the problem.
///
/// webpki checks these (in this order, before it looks for an issuer)
/// when it verifies a chain; verified against no trust anchor at all, a
/// certificate with none of these problems fails only for want of an
/// issuer, and that failure, like a CA certificate used as a server's
/// (which some clients accept), is not ours to judge here.
fn unusable_server_cert(
    key: &str,
    file: &Path,
    cert: &CertificateDer<'_>,
    now: UnixTime,
) -> Result<(), String> {
    let why = |problem: String| format!("{key}: {}: {problem}", file.display());
    let ee = webpki::EndEntityCert::try_from(cert).map_err(|e| {
        why(format!(
            "the first certificate does not parse as X.509 ({e})"
        ))
    })?;
    let verified = ee.verify_for_usage(
        webpki::ALL_VERIFICATION_ALGS,
        &[],
        &[],
        now,
        webpki::KeyUsage::server_auth(),
        None,
        None,
    );
    let date = |t: UnixTime| {
        humantime::format_rfc3339_seconds(std::time::UNIX_EPOCH + Duration::from_secs(t.as_secs()))
            .to_string()
    };
    match verified {
        Err(webpki::Error::CertExpired { not_after, .. }) => Err(why(format!(
            "the certificate expired on {}: no client would accept it",
            date(not_after)
        ))),
        Err(webpki::Error::CertNotValidYet { not_before, .. }) => Err(why(format!(
            "the certificate is not valid until {}: no client would accept it before then",
            date(not_before)
        ))),
        Err(webpki::Error::InvalidCertValidity) => Err(why(
            "the certificate's validity ends before it begins: no client would accept it".into(),
        )),
        Err(webpki::Error::RequiredEkuNotFoundContext(ctx)) => Err(why(format!(
            "the certificate's extended key usage leaves out serverAuth (it has {}): clients refuse it for a server",
            ctx.present
                .iter()
                .map(|oid| key_purpose_name(oid))
                .collect::<Vec<_>>()
                .join(", ")
        ))),
        Err(webpki::Error::EmptyEkuExtension) => Err(why(
            "the certificate's extended key usage leaves out serverAuth: clients refuse it for a server".into(),
        )),
        _ => Ok(()),
    }
}

/// A key purpose by its usual name, or its OID.
fn key_purpose_name(oid: &[usize]) -> String {
    let name = match oid {
        [1, 3, 6, 1, 5, 5, 7, 3, 1] => "serverAuth",
        [1, 3, 6, 1, 5, 5, 7, 3, 2] => "clientAuth",
        [1, 3, 6, 1, 5, 5, 7, 3, 3] => "codeSigning",
        [1, 3, 6, 1, 5, 5, 7, 3, 4] => "emailProtection",
        [1, 3, 6, 1, 5, 5, 7, 3, 8] => "timeStamping",
        [1, 3, 6, 1, 5, 5, 7, 3, 9] => "OCSPSigning",
        _ => {
            return oid
                .iter()
                .map(usize::to_string)
                .collect::<Vec<_>>()
                .join(".")
        }
    };
    name.to_string()
}

/// A warning when `cert` is not valid for the door's listen address
/// (clients that connect by that address would refuse it); none for an
/// unspecified address, or no address.
fn names_warning(
    key: &str,
    file: &Path,
    cert: &CertificateDer<'_>,
    listen: Option<IpAddr>,
) -> Option<String> {
    let ip = listen.filter(|ip| !ip.is_unspecified())?;
    let ee = webpki::EndEntityCert::try_from(cert).ok()?;
    let name = ServerName::IpAddress(ip.into());
    if ee.verify_is_valid_for_subject_name(&name).is_ok() {
        return None;
    }
    let dns: Vec<&str> = ee.valid_dns_names().collect();
    Some(format!(
        "{key}: {}: the certificate's subject alternative names do not include the listen address {ip}; clients that connect by {ip} will refuse it (fine if they connect by a name it carries{})",
        file.display(),
        if dns.is_empty() {
            String::from(": it carries no DNS name")
        } else {
            format!(": {}", dns.join(", "))
        }
    ))
}

/// The server config of `files`, and warnings about it.
fn server_config(files: &TlsFiles) -> Result<(ServerConfig, Vec<String>), String> {
    let p = &files.key_prefix;
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(&files.cert)
        .and_then(|it| it.collect::<Result<_, _>>())
        .map_err(|e| format!("{p}.cert_file: {}: {e}", files.cert.display()))?;
    if certs.is_empty() {
        return Err(format!(
            "{p}.cert_file: {}: no PEM certificate in it",
            files.cert.display()
        ));
    }
    let cert_key = format!("{p}.cert_file");
    unusable_server_cert(&cert_key, &files.cert, &certs[0], UnixTime::now())?;
    let warnings: Vec<String> = names_warning(&cert_key, &files.cert, &certs[0], files.listen)
        .into_iter()
        .collect();
    let key = PrivateKeyDer::from_pem_file(&files.key)
        .map_err(|e| format!("{p}.key_file: {}: {e}", files.key.display()))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("{p}: {e}"))?;
    let builder = match &files.client_ca {
        // (The config refuses this too: there would be no certificate to
        // check the names of.)
        None if !files.allowed_names.is_empty() => {
            return Err(format!("{p}.allowed_names needs {p}.ca_file"))
        }
        None => builder.with_no_client_auth(),
        Some(ca) => {
            let mut roots = RootCertStore::empty();
            let cas: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(ca)
                .and_then(|it| it.collect::<Result<_, _>>())
                .map_err(|e| format!("{p}.ca_file: {}: {e}", ca.display()))?;
            for c in cas {
                roots
                    .add(c)
                    .map_err(|e| format!("{p}.ca_file: {}: {e}", ca.display()))?;
            }
            if roots.is_empty() {
                return Err(format!(
                    "{p}.ca_file: {}: no PEM certificate in it",
                    ca.display()
                ));
            }
            let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
                .build()
                .map_err(|e| format!("{p}.ca_file: {}: {e}", ca.display()))?;
            if files.allowed_names.is_empty() {
                builder.with_client_cert_verifier(verifier)
            } else {
                builder.with_client_cert_verifier(Arc::new(NamedClients {
                    inner: verifier,
                    allowed: files.allowed_names.clone(),
                }))
            }
        }
    };
    let config = builder.with_single_cert(certs, key).map_err(|e| {
        format!(
            "{p}.cert_file / {p}.key_file: {} and {} do not make a usable pair: {e}",
            files.cert.display(),
            files.key.display()
        )
    })?;
    Ok((config, warnings))
}

#[cfg(test)]
mod tests {
    use rcgen::{CertificateParams, ExtendedKeyUsagePurpose, KeyPair};

    use super::*;

    fn cert(sans: &[&str], edit: impl FnOnce(&mut CertificateParams)) -> CertificateDer<'static> {
        let mut p =
            CertificateParams::new(sans.iter().map(|s| s.to_string()).collect::<Vec<_>>()).unwrap();
        edit(&mut p);
        p.self_signed(&KeyPair::generate().unwrap())
            .unwrap()
            .der()
            .clone()
    }

    fn judge(c: &CertificateDer<'_>) -> Result<(), String> {
        unusable_server_cert(
            "server.http.cert_file",
            Path::new("/tls/s.crt"),
            c,
            UnixTime::now(),
        )
    }

    #[test]
    fn a_certificate_no_client_would_take_is_refused_saying_why() {
        let sans = ["localhost"];
        assert_eq!(judge(&cert(&sans, |_| {})), Ok(()));
        assert_eq!(
            judge(&cert(&sans, |p| {
                p.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
            })),
            Ok(())
        );
        for (says, c) in [
            (
                "expired on 2020-12-31T00:00:00Z",
                cert(&sans, |p| {
                    p.not_before = rcgen::date_time_ymd(2020, 1, 1);
                    p.not_after = rcgen::date_time_ymd(2020, 12, 31);
                }),
            ),
            (
                "not valid until 2099-01-01T00:00:00Z",
                cert(&sans, |p| {
                    p.not_before = rcgen::date_time_ymd(2099, 1, 1);
                    p.not_after = rcgen::date_time_ymd(2100, 1, 1);
                }),
            ),
            (
                "leaves out serverAuth (it has clientAuth, codeSigning)",
                cert(&sans, |p| {
                    p.extended_key_usages = vec![
                        ExtendedKeyUsagePurpose::ClientAuth,
                        ExtendedKeyUsagePurpose::CodeSigning,
                    ];
                }),
            ),
        ] {
            let e = judge(&c).unwrap_err();
            assert!(
                e.starts_with("server.http.cert_file: /tls/s.crt: ") && e.contains(says),
                "{says}: {e}"
            );
        }
    }

    #[test]
    fn names_that_leave_out_the_listen_address_are_a_warning() {
        let c = cert(&["localhost", "10.0.0.7"], |_| {});
        let warn = |ip: &str| {
            names_warning(
                "server.tcp.cert_file",
                Path::new("s.crt"),
                &c,
                Some(ip.parse().unwrap()),
            )
        };
        assert_eq!(warn("10.0.0.7"), None);
        assert_eq!(warn("0.0.0.0"), None, "no name to compare with");
        let w = warn("127.0.0.1").expect("a warning");
        assert!(
            w.contains("server.tcp.cert_file: s.crt:")
                && w.contains("listen address 127.0.0.1")
                && w.contains(": localhost)"),
            "{w}"
        );
    }
}
