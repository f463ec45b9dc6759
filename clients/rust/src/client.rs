//! `Client`: one request at a time — write the frame, wait for its answer.

use std::net::{TcpStream, ToSocketAddrs};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::Duration;

use spillway_protocol::{
    encode_health_check, encode_push, encode_push_batch, Tier, PAYLOAD_BYTES_HARD_MAX,
};

use crate::conn::Conn;
use crate::reply::{Expect, Reply};
use crate::stream::Stream;
use crate::{Error, Pipeline};

/// How a [`Client`] connects and the limits it checks before sending.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Options {
    /// Read and write timeout of every call (`None` = block forever, which
    /// a producer should not do: a stuck daemon would hang it). Default 10 s.
    pub timeout: Option<Duration>,
    /// The daemon's `server.payload_bytes_max`: a record (or a batch's
    /// payload) larger than this is refused locally, before anything is
    /// sent. Default and ceiling: the protocol's 16 MiB.
    pub payload_bytes_max: u32,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            timeout: Some(DEFAULT_TIMEOUT),
            payload_bytes_max: PAYLOAD_BYTES_HARD_MAX,
        }
    }
}

/// The default read and write timeout.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);

/// A blocking connection to a spillway (or weir v1) daemon's Unix socket.
///
/// Each call sends one request and waits for its response. For throughput,
/// use [`Client::pipeline`] to keep several requests in flight.
#[derive(Debug)]
pub struct Client {
    conn: Conn,
}

impl Client {
    /// Connects to the daemon listening at `path`, with the default
    /// [`Options`] (10 s timeout, 16 MiB payload cap).
    pub fn connect(path: impl AsRef<Path>) -> Result<Client, Error> {
        Self::connect_with(path, Options::default())
    }

    /// Connects to the daemon listening at `path` with `options`.
    pub fn connect_with(path: impl AsRef<Path>, options: Options) -> Result<Client, Error> {
        let path = path.as_ref();
        let stream = UnixStream::connect(path).map_err(|source| Error::Connect {
            path: path.to_path_buf(),
            source,
        })?;
        Client::over(Stream::Unix(stream), options)
    }

    /// Connects to the daemon's TCP door (`[server.tcp]` with `tls =
    /// false`, which it serves on a loopback address only).
    pub fn connect_tcp(addr: impl ToSocketAddrs, options: Options) -> Result<Client, Error> {
        let stream = tcp(addr)?;
        Client::over(Stream::Tcp(stream), options)
    }

    /// Connects to the daemon's TCP door over TLS: `server_name` is the
    /// name its certificate must carry, `config` says whom to trust and,
    /// for mutual TLS, which certificate to present ([`tls_config`]). The
    /// handshake completes here, so a refused certificate is an error of
    /// this call.
    #[cfg(feature = "tls")]
    pub fn connect_tls(
        addr: impl ToSocketAddrs,
        server_name: &str,
        config: std::sync::Arc<rustls::ClientConfig>,
        options: Options,
    ) -> Result<Client, Error> {
        let name = rustls::pki_types::ServerName::try_from(server_name.to_string())
            .map_err(|e| Error::Tls(format!("{server_name:?} is not a server name: {e}")))?;
        let conn =
            rustls::ClientConnection::new(config, name).map_err(|e| Error::Tls(e.to_string()))?;
        let socket = tcp(addr)?;
        socket.set_read_timeout(options.timeout)?;
        socket.set_write_timeout(options.timeout)?;
        let mut tls = rustls::StreamOwned::new(conn, socket);
        while tls.conn.is_handshaking() {
            tls.conn
                .complete_io(&mut tls.sock)
                .map_err(|e| Error::Tls(format!("TLS handshake: {e}")))?;
        }
        Client::over(Stream::Tls(Box::new(tls)), options)
    }

    fn over(stream: Stream, options: Options) -> Result<Client, Error> {
        let mut client = Client {
            conn: Conn::new(stream, options.payload_bytes_max),
        };
        client.set_timeout(options.timeout)?;
        Ok(client)
    }

    /// Sets both the read and the write timeout (`None` = block forever).
    ///
    /// A timed-out call returns [`Error::Io`]; the request may still be
    /// stored. The late response is discarded when it arrives, so later calls
    /// stay matched to their own answers.
    pub fn set_timeout(&mut self, timeout: Option<Duration>) -> Result<(), Error> {
        self.conn.stream.set_timeouts(timeout)?;
        Ok(())
    }

    /// Stores one record at `tier`; returns once the daemon has acked it.
    pub fn push(&mut self, tier: Tier, payload: &[u8]) -> Result<(), Error> {
        self.conn.check_push(payload)?;
        encode_push(tier, payload, &mut self.conn.write_buf);
        self.round_trip(Expect::Ack).map(drop)
    }

    /// Stores `records` at `tier` in one frame (spillway's PushBatch
    /// extension); returns the number of records acked, which is always
    /// `records.len()` (any other count is [`Error::UnexpectedResponse`]).
    ///
    /// A plain weir daemon answers with an UnknownMessage nack.
    pub fn push_batch<R: AsRef<[u8]>>(&mut self, tier: Tier, records: &[R]) -> Result<u32, Error> {
        self.conn.check_batch(records)?;
        encode_push_batch(tier, records, &mut self.conn.write_buf);
        let sent = u32::try_from(records.len()).expect("bounded by the payload size check");
        match self.round_trip(Expect::AckBatch(sent))? {
            Reply::AckBatch(count) => Ok(count),
            _ => unreachable!("Expect::AckBatch only accepts an AckBatch"),
        }
    }

    /// Asks the daemon whether it is alive.
    pub fn health(&mut self) -> Result<(), Error> {
        encode_health_check(&mut self.conn.write_buf);
        self.round_trip(Expect::HealthCheckResponse).map(drop)
    }

    /// A pipelined sender that keeps up to `window` requests outstanding
    /// (a `window` of 0 is treated as 1).
    pub fn pipeline(&mut self, window: usize) -> Pipeline<'_> {
        Pipeline::new(&mut self.conn, window)
    }

    /// Gives up the client and returns its Unix socket (an escape hatch
    /// for tests; `None` over TCP or TLS). Bytes already read from the
    /// socket but not decoded are lost.
    pub fn into_stream(self) -> Option<UnixStream> {
        match self.conn.stream {
            Stream::Unix(s) => Some(s),
            _ => None,
        }
    }

    /// Sends the one request in the write buffer and waits for its answer.
    fn round_trip(&mut self, expect: Expect) -> Result<Reply, Error> {
        if let Err(e) = self.conn.send() {
            return Err(self.conn.explain_write_error(e));
        }
        match self.conn.read_response() {
            Ok(response) => expect.check(response),
            Err(e) => {
                // The answer may still come; it belongs to no later request.
                self.conn.stale += 1;
                Err(e)
            }
        }
    }
}

/// A TCP connection to `addr`, without Nagle's delay (a frame is one
/// write and waits for its answer).
fn tcp(addr: impl ToSocketAddrs) -> Result<TcpStream, Error> {
    let addrs: Vec<_> = addr
        .to_socket_addrs()
        .map_err(|source| Error::ConnectAddr {
            addr: "(unresolved)".into(),
            source,
        })?
        .collect();
    let mut last = None;
    for a in &addrs {
        match TcpStream::connect(a) {
            Ok(s) => {
                s.set_nodelay(true)?;
                return Ok(s);
            }
            Err(e) => last = Some((a.to_string(), e)),
        }
    }
    let (addr, source) = last.unwrap_or_else(|| {
        (
            "(no address)".into(),
            std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                "the address resolved to nothing",
            ),
        )
    });
    Err(Error::ConnectAddr { addr, source })
}

/// A rustls client config for [`Client::connect_tls`]: trust the CA
/// certificates in `ca_pem` (a PEM file), and with `identity` (a PEM
/// certificate chain and its key) present it for mutual TLS.
#[cfg(feature = "tls")]
pub fn tls_config(
    ca_pem: impl AsRef<Path>,
    identity: Option<(&Path, &Path)>,
) -> Result<std::sync::Arc<rustls::ClientConfig>, Error> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let ca_pem = ca_pem.as_ref();
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_file_iter(ca_pem)
        .map_err(|e| Error::Tls(format!("{}: {e}", ca_pem.display())))?
    {
        let cert = cert.map_err(|e| Error::Tls(format!("{}: {e}", ca_pem.display())))?;
        roots
            .add(cert)
            .map_err(|e| Error::Tls(format!("{}: {e}", ca_pem.display())))?;
    }
    let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| Error::Tls(e.to_string()))?
        .with_root_certificates(roots);
    let config = match identity {
        None => builder.with_no_client_auth(),
        Some((cert, key)) => {
            let chain = CertificateDer::pem_file_iter(cert)
                .and_then(|it| it.collect::<Result<Vec<_>, _>>())
                .map_err(|e| Error::Tls(format!("{}: {e}", cert.display())))?;
            let key = PrivateKeyDer::from_pem_file(key)
                .map_err(|e| Error::Tls(format!("{}: {e}", key.display())))?;
            builder
                .with_client_auth_cert(chain, key)
                .map_err(|e| Error::Tls(e.to_string()))?
        }
    };
    Ok(std::sync::Arc::new(config))
}
