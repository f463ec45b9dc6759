//! A throw-away CA and a server certificate for 127.0.0.1, made with the
//! `openssl` command, for the servers the tests run with TLS (the NATS and
//! Kafka clusters). Kafka reads the PEM files as they are
//! (`ssl.keystore.type=PEM`), no Java keystore.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

/// A server certificate (for 127.0.0.1) and the CA that signed it.
#[derive(Debug, Clone)]
pub struct TlsFiles {
    /// The CA a client trusts (`ssl.ca.location`).
    pub ca: PathBuf,
    pub cert: PathBuf,
    /// The server's private key, unencrypted PKCS#8 (what Kafka's PEM
    /// key store reads).
    pub key: PathBuf,
    /// The key and then the certificate in one file: Kafka's PEM key store
    /// (`ssl.keystore.location`) wants both in the same file.
    pub key_and_cert: PathBuf,
}

impl TlsFiles {
    /// A throw-away CA and a server certificate for `IP:127.0.0.1`
    /// signed by it (P-256 keys), written into `dir`.
    pub fn make(dir: &Path) -> Result<TlsFiles, String> {
        let run = |args: &[&str]| -> Result<(), String> {
            let out = Command::new("openssl")
                .args(args)
                .current_dir(dir)
                .output()
                .map_err(|e| format!("openssl: {e}"))?;
            if out.status.success() {
                Ok(())
            } else {
                Err(format!(
                    "openssl {args:?}: {}",
                    String::from_utf8_lossy(&out.stderr).trim()
                ))
            }
        };
        let ec = [
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
        ];
        let mut ca = vec![
            "req",
            "-x509",
            "-days",
            "2",
            "-subj",
            "/CN=spillway test CA",
        ];
        ca.extend(ec);
        ca.extend(["-keyout", "ca.key", "-out", "ca.pem"]);
        run(&ca)?;
        let mut csr = vec!["req", "-subj", "/CN=127.0.0.1"];
        csr.extend(ec);
        csr.extend(["-keyout", "server.key", "-out", "server.csr"]);
        run(&csr)?;
        fs::write(dir.join("san.ext"), "subjectAltName=IP:127.0.0.1\n")
            .map_err(|e| e.to_string())?;
        run(&[
            "x509",
            "-req",
            "-in",
            "server.csr",
            "-CA",
            "ca.pem",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-days",
            "2",
            "-extfile",
            "san.ext",
            "-out",
            "server.pem",
        ])?;
        let read = |name: &str| fs::read_to_string(dir.join(name)).map_err(|e| e.to_string());
        let both = format!("{}{}", read("server.key")?, read("server.pem")?);
        fs::write(dir.join("server-key-and-cert.pem"), both).map_err(|e| e.to_string())?;
        Ok(TlsFiles {
            ca: dir.join("ca.pem"),
            cert: dir.join("server.pem"),
            key: dir.join("server.key"),
            key_and_cert: dir.join("server-key-and-cert.pem"),
        })
    }
}
