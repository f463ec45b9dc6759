//! [`RawConn`]: a bare socket for crafted frames, reading exactly one
//! response frame at a time and telling end-of-file apart from silence.

use std::io::{self, ErrorKind, Read, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::Duration;

use bytes::BytesMut;

use crate::*;

/// What a read from a raw connection found.
#[derive(Debug)]
pub enum ReadOutcome {
    /// One complete response frame.
    Frame(Vec<u8>),
    /// End of file (or a reset) before any byte of a frame.
    Closed,
    /// Nothing arrived within the timeout.
    TimedOut,
}

/// A bare Unix socket to the daemon for crafted frames.
pub struct RawConn {
    pub stream: UnixStream,
}

impl RawConn {
    pub fn connect(path: &Path) -> RawConn {
        let stream = UnixStream::connect(path)
            .unwrap_or_else(|e| panic!("connecting to {}: {e}", path.display()));
        stream.set_read_timeout(Some(IO_TIMEOUT)).unwrap();
        stream.set_write_timeout(Some(IO_TIMEOUT)).unwrap();
        RawConn { stream }
    }

    /// Write all of `bytes`.
    pub fn send(&mut self, bytes: &[u8]) {
        self.stream.write_all(bytes).expect("writing to the daemon");
    }

    /// Write all of `bytes`, returning the error instead of panicking.
    pub fn try_send(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.stream.write_all(bytes)
    }

    /// Read one response frame (header, then exactly the payload and
    /// trailer it announces), EOF, or nothing within `timeout`.
    pub fn read_frame_within(&mut self, timeout: Duration) -> ReadOutcome {
        self.stream.set_read_timeout(Some(timeout)).unwrap();
        let mut header = [0u8; 16];
        let outcome = match read_exact_or_eof(&mut self.stream, &mut header) {
            Ok(false) => ReadOutcome::Closed,
            Ok(true) => {
                let len = u32::from_le_bytes(header[8..12].try_into().unwrap()) as usize;
                assert!(
                    len <= 64,
                    "response header announces a {len}-byte payload: {header:02x?}"
                );
                let mut rest = vec![0u8; len + 4];
                match read_exact_or_eof(&mut self.stream, &mut rest) {
                    Ok(true) => {
                        let mut f = header.to_vec();
                        f.extend_from_slice(&rest);
                        ReadOutcome::Frame(f)
                    }
                    Ok(false) => {
                        panic!("connection closed in the middle of a response frame: {header:02x?}")
                    }
                    Err(e) => panic!("reading the rest of a response frame: {e}"),
                }
            }
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                ReadOutcome::TimedOut
            }
            Err(e)
                if matches!(
                    e.kind(),
                    ErrorKind::ConnectionReset
                        | ErrorKind::ConnectionAborted
                        | ErrorKind::BrokenPipe
                ) =>
            {
                ReadOutcome::Closed
            }
            Err(e) => panic!("reading a response: {e}"),
        };
        self.stream.set_read_timeout(Some(IO_TIMEOUT)).unwrap();
        outcome
    }

    /// Read one response frame; panics on EOF or timeout.
    pub fn read_frame(&mut self) -> Vec<u8> {
        match self.read_frame_within(IO_TIMEOUT) {
            ReadOutcome::Frame(f) => f,
            other => panic!("expected a response frame, got {other:?}"),
        }
    }

    /// Read one response and decode it with the protocol crate.
    pub fn read_response(&mut self) -> Response {
        let mut buf = BytesMut::from(&self.read_frame()[..]);
        let r = decode_response(&mut buf)
            .expect("a valid response frame")
            .expect("a complete frame");
        assert!(buf.is_empty());
        r
    }

    /// Assert that the daemon closes the connection (EOF or reset) within
    /// `timeout` without sending anything more.
    pub fn expect_closed_within(&mut self, timeout: Duration) {
        match self.read_frame_within(timeout) {
            ReadOutcome::Closed => {}
            ReadOutcome::Frame(f) => {
                panic!("expected the connection to be closed, got another frame {f:02x?}")
            }
            ReadOutcome::TimedOut => panic!(
                "expected the connection to be closed, but it is still open after {timeout:?}"
            ),
        }
    }

    /// Assert that the daemon closes the connection.
    pub fn expect_closed(&mut self) {
        self.expect_closed_within(IO_TIMEOUT)
    }

    /// Assert the next frame is exactly `expected`.
    pub fn expect_frame(&mut self, expected: &[u8], what: &str) {
        let got = self.read_frame();
        assert_eq!(
            got, expected,
            "{what}: got {got:02x?}, expected {expected:02x?}"
        );
    }

    /// Send a health check and assert it is answered exactly.
    pub fn expect_health(&mut self) {
        self.send(&health_frame());
        self.expect_frame(&expected_health_response(), "health check response");
    }
}

/// `Ok(true)` = filled, `Ok(false)` = EOF before the first byte. EOF in
/// the middle is an `UnexpectedEof` error.
fn read_exact_or_eof(stream: &mut UnixStream, buf: &mut [u8]) -> io::Result<bool> {
    let mut at = 0;
    while at < buf.len() {
        match stream.read(&mut buf[at..]) {
            Ok(0) if at == 0 => return Ok(false),
            Ok(0) => {
                return Err(io::Error::new(
                    ErrorKind::UnexpectedEof,
                    format!("EOF after {at} of {} bytes", buf.len()),
                ))
            }
            Ok(n) => at += n,
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(true)
}
