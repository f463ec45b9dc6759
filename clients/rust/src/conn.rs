//! The connection shared by `Client` and `Pipeline`: the socket, reusable
//! read/write buffers, and the bookkeeping that keeps responses matched to
//! requests after timeouts, abandoned pipelines and failed writes.

use std::io::{self, ErrorKind, Read, Write};

use spillway_protocol::{
    decode_response, push_batch_frame_len, BytesMut, Response, HEADER_LEN, PAYLOAD_BYTES_HARD_MAX,
    TRAILER_LEN,
};

use crate::stream::Stream;
use crate::Error;

/// Bytes requested from the socket per read: many pipelined responses
/// (20–24 bytes each) arrive in one call.
const READ_CHUNK: usize = 8 * 1024;

/// A connected socket and its buffers.
#[derive(Debug)]
pub(crate) struct Conn {
    pub(crate) stream: Stream,
    /// Bytes read but not yet decoded; reused for the connection's lifetime.
    read_buf: BytesMut,
    /// Encoded requests not yet written; reused for the connection's lifetime.
    pub(crate) write_buf: BytesMut,
    /// Responses the daemon still owes for requests whose caller gave up on
    /// them (a read timed out, a pipeline was dropped). They are read and
    /// discarded before any later response, so answers stay matched.
    pub(crate) stale: usize,
    /// A write failed, possibly part-way through a frame: the byte stream is
    /// out of frame and nothing more may be sent on it.
    write_failed: bool,
    /// Largest payload sent (the daemon's cap, at most the protocol's).
    payload_bytes_max: u32,
}

impl Conn {
    pub(crate) fn new(stream: Stream, payload_bytes_max: u32) -> Self {
        Self {
            payload_bytes_max: payload_bytes_max.min(PAYLOAD_BYTES_HARD_MAX),
            stream,
            read_buf: BytesMut::with_capacity(READ_CHUNK),
            write_buf: BytesMut::with_capacity(READ_CHUNK),
            stale: 0,
            write_failed: false,
        }
    }

    /// Writes the whole write buffer with one `write_all` and clears it.
    ///
    /// A failure poisons the connection for writing: part of a frame may be
    /// on the wire already.
    pub(crate) fn send(&mut self) -> io::Result<()> {
        if self.write_failed {
            self.write_buf.clear();
            // Not a "closed" kind: the daemon may be fine, the stream is not.
            return Err(io::Error::new(
                ErrorKind::NotConnected,
                "an earlier write failed part-way through a frame; reconnect",
            ));
        }
        let result = self.stream.write_all(&self.write_buf);
        self.write_buf.clear();
        if result.is_err() {
            self.write_failed = true;
        }
        result
    }

    /// The next response owed to the current caller, reading as needed.
    pub(crate) fn read_response(&mut self) -> Result<Response, Error> {
        loop {
            if let Some(response) = self.buffered_response()? {
                return Ok(response);
            }
            self.fill()?;
        }
    }

    /// A response already sitting in the read buffer, skipping stale ones.
    pub(crate) fn buffered_response(&mut self) -> Result<Option<Response>, Error> {
        loop {
            let Some(response) = decode_response(&mut self.read_buf)? else {
                return Ok(None);
            };
            if self.stale == 0 {
                return Ok(Some(response));
            }
            self.stale -= 1;
        }
    }

    /// One blocking read into the spare end of the read buffer.
    fn fill(&mut self) -> Result<(), Error> {
        let start = self.read_buf.len();
        // Reuses the allocation: decoded frames were `advance`d away, so
        // `resize` slides the (short) remainder to the front instead of growing.
        self.read_buf.resize(start + READ_CHUNK, 0);
        let result = loop {
            match self.stream.read(&mut self.read_buf[start..]) {
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                other => break other,
            }
        };
        let n = *result.as_ref().unwrap_or(&0);
        self.read_buf.truncate(start + n);
        match result {
            Ok(0) => Err(Error::Closed),
            Ok(_) => Ok(()),
            Err(e) if is_closed(&e) => Err(Error::Closed),
            Err(e) => Err(Error::Io(e)),
        }
    }

    /// After a failed write, pulls in whatever the daemon sent before it hung
    /// up, without blocking: typically the nack that explains the close.
    pub(crate) fn salvage_after_write_error(&mut self) {
        if self.stream.set_nonblocking(true).is_err() {
            return;
        }
        // EOF, WouldBlock and errors all end the salvage; only data matters.
        while matches!(self.fill(), Ok(())) {}
        let _ = self.stream.set_nonblocking(false);
    }

    /// Maps a failed single-request write to the most useful error: the
    /// daemon's nack if it sent one before closing, else `Closed` or the I/O error.
    pub(crate) fn explain_write_error(&mut self, e: io::Error) -> Error {
        if !is_closed(&e) {
            return Error::Io(e);
        }
        self.salvage_after_write_error();
        match self.buffered_response() {
            Ok(Some(Response::Nack(reason))) => Error::Nack(reason),
            _ => Error::Closed,
        }
    }
}

/// Errors that mean the daemon has gone away rather than a local failure.
fn is_closed(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        ErrorKind::BrokenPipe | ErrorKind::ConnectionReset | ErrorKind::ConnectionAborted
    )
}

impl Conn {
    /// Refuses a push the daemon would nack anyway (or that cannot be framed).
    pub(crate) fn check_push(&self, payload: &[u8]) -> Result<(), Error> {
        if payload.is_empty() {
            return Err(Error::InvalidRequest(
                "push with an empty payload (a record has at least one byte)".into(),
            ));
        }
        self.check_payload_size(payload.len(), "record")
    }

    /// Refuses a batch the daemon would nack anyway (or that cannot be framed).
    pub(crate) fn check_batch<R: AsRef<[u8]>>(&self, records: &[R]) -> Result<(), Error> {
        if records.is_empty() {
            return Err(Error::InvalidRequest("push_batch with no records".into()));
        }
        if let Some(i) = records.iter().position(|r| r.as_ref().is_empty()) {
            return Err(Error::InvalidRequest(format!(
                "record {} of {} is empty (a record has at least one byte)",
                i + 1,
                records.len()
            )));
        }
        let frame_len = push_batch_frame_len(records.iter().map(|r| r.as_ref().len()));
        self.check_payload_size(frame_len - HEADER_LEN - TRAILER_LEN, "batch payload")
    }

    fn check_payload_size(&self, len: usize, what: &str) -> Result<(), Error> {
        if len > self.payload_bytes_max as usize {
            return Err(Error::InvalidRequest(format!(
                "{what} of {len} bytes exceeds the payload cap of {} bytes",
                self.payload_bytes_max
            )));
        }
        Ok(())
    }
}
