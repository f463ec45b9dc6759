//! `Client`: one request at a time — write the frame, wait for its answer.

use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::Duration;

use spillway_protocol::{
    encode_health_check, encode_push, encode_push_batch, Tier, PAYLOAD_BYTES_HARD_MAX,
};

use crate::conn::Conn;
use crate::reply::{Expect, Reply};
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
        self.conn.stream.set_read_timeout(timeout)?;
        self.conn.stream.set_write_timeout(timeout)?;
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

    /// Gives up the client and returns its socket (an escape hatch for
    /// tests). Bytes already read from the socket but not decoded are lost.
    pub fn into_stream(self) -> UnixStream {
        self.conn.stream
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
