//! Certificates made on the fly (rcgen: a CA, leaves it signs, expired or
//! otherwise unusable ones) and a blocking rustls client, for the TLS doors' tests. Nothing is
//! checked in.

use std::net::TcpStream;
use std::sync::Arc;
use std::time::Duration;

use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, KeyPair};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer, ServerName};

pub use rustls::ClientConfig;

/// A CA and the certificates it signs, as PEM files in `dir`.
pub struct Ca {
    pub cert: rcgen::Certificate,
    key: KeyPair,
}

impl Ca {
    pub fn new(name: &str) -> Ca {
        let mut p = CertificateParams::new(Vec::<String>::new()).unwrap();
        p.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        p.distinguished_name.push(DnType::CommonName, name);
        let key = KeyPair::generate().unwrap();
        Ca {
            cert: p.self_signed(&key).unwrap(),
            key,
        }
    }

    /// A leaf with these SANs; `expired`: valid only in 2020.
    pub fn leaf(&self, cn: &str, sans: &[&str], expired: bool) -> Leaf {
        self.leaf_with(cn, sans, |p| {
            if expired {
                p.not_before = rcgen::date_time_ymd(2020, 1, 1);
                p.not_after = rcgen::date_time_ymd(2020, 12, 31);
            }
        })
    }

    /// A leaf with these SANs and whatever `edit` changes (validity,
    /// extended key usage...).
    pub fn leaf_with(
        &self,
        cn: &str,
        sans: &[&str],
        edit: impl FnOnce(&mut CertificateParams),
    ) -> Leaf {
        let mut p =
            CertificateParams::new(sans.iter().map(|s| s.to_string()).collect::<Vec<_>>()).unwrap();
        p.distinguished_name.push(DnType::CommonName, cn);
        edit(&mut p);
        let key = KeyPair::generate().unwrap();
        let cert = p.signed_by(&key, &self.cert, &self.key).unwrap();
        Leaf { cert, key }
    }

    pub fn der(&self) -> CertificateDer<'static> {
        self.cert.der().clone()
    }
}

pub struct Leaf {
    cert: rcgen::Certificate,
    key: KeyPair,
}

impl Leaf {
    pub fn write(
        &self,
        dir: &std::path::Path,
        name: &str,
    ) -> (std::path::PathBuf, std::path::PathBuf) {
        let (c, k) = (
            dir.join(format!("{name}.crt")),
            dir.join(format!("{name}.key")),
        );
        std::fs::write(&c, self.cert.pem()).unwrap();
        std::fs::write(&k, self.key.serialize_pem()).unwrap();
        (c, k)
    }

    pub fn identity(&self) -> (Vec<CertificateDer<'static>>, PrivateKeyDer<'static>) {
        (
            vec![self.cert.der().clone()],
            PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(self.key.serialize_der())),
        )
    }
}

pub type Tls = rustls::StreamOwned<rustls::ClientConnection, TcpStream>;

/// A TLS connection to the door trusting `server_ca`, presenting `client`.
/// A client config trusting `server_ca`, presenting `client` if given.
pub fn client_config(server_ca: &Ca, client: Option<&Leaf>) -> Arc<ClientConfig> {
    let mut roots = rustls::RootCertStore::empty();
    roots.add(server_ca.der()).unwrap();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots);
    Arc::new(match client {
        Some(leaf) => {
            let (chain, key) = leaf.identity();
            builder.with_client_auth_cert(chain, key).unwrap()
        }
        None => builder.with_no_client_auth(),
    })
}

/// A TLS connection to the door at `port` trusting `server_ca`,
/// presenting `client` (the handshake happens at the first read or write).
pub fn tls_connect(port: u16, server_ca: &Ca, client: Option<&Leaf>) -> Tls {
    let conn = rustls::ClientConnection::new(
        client_config(server_ca, client),
        ServerName::try_from("localhost").unwrap(),
    )
    .unwrap();
    let sock = TcpStream::connect(("127.0.0.1", port)).unwrap();
    sock.set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    rustls::StreamOwned::new(conn, sock)
}
