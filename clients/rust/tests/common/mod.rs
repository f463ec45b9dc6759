//! A tiny fake daemon for the client tests: one Unix-socket connection in a
//! tempdir, served by a test-supplied script on its own thread.

#![allow(dead_code)] // each test binary uses a different subset

use std::io::{Read, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::PathBuf;
use std::thread::JoinHandle;

use spillway_protocol::{decode_request, encode_response, BytesMut, Request, Response};

/// The server side of the one accepted connection.
pub struct Peer {
    pub stream: UnixStream,
    buf: BytesMut,
}

impl Peer {
    /// Next request, or `None` once the client has hung up.
    pub fn recv(&mut self) -> Option<Request> {
        loop {
            if let Some(r) =
                decode_request(&mut self.buf, 1 << 24).expect("client sent a bad frame")
            {
                return Some(r);
            }
            if self.read_more() == 0 {
                return None;
            }
        }
    }

    /// Reads at least `n` raw bytes (for tests that look at the wire).
    pub fn recv_raw(&mut self, n: usize) -> Vec<u8> {
        while self.buf.len() < n {
            assert!(self.read_more() > 0, "client hung up early");
        }
        self.buf.split_to(n).to_vec()
    }

    fn read_more(&mut self) -> usize {
        let mut chunk = [0u8; 16 * 1024];
        let n = self.stream.read(&mut chunk).unwrap_or(0);
        self.buf.extend_from_slice(&chunk[..n]);
        n
    }

    pub fn send(&mut self, response: Response) {
        let mut out = BytesMut::new();
        encode_response(response, &mut out);
        self.send_raw(&out);
    }

    pub fn send_raw(&mut self, bytes: &[u8]) {
        self.stream.write_all(bytes).expect("client went away");
    }

    /// Answers every request correctly until the client hangs up; returns
    /// how many requests were served.
    pub fn serve_all(&mut self) -> usize {
        let mut served = 0;
        while let Some(request) = self.recv() {
            self.send(correct_answer(&request));
            served += 1;
        }
        served
    }
}

/// What a healthy daemon answers.
pub fn correct_answer(request: &Request) -> Response {
    match request {
        Request::Push { .. } => Response::Ack,
        Request::PushBatch { records, .. } => Response::AckBatch {
            count: records.len() as u32,
        },
        Request::HealthCheck => Response::HealthCheckResponse,
    }
}

/// A fake daemon; keep it alive for as long as the socket is needed.
pub struct Fake<T> {
    _dir: tempfile::TempDir,
    pub path: PathBuf,
    handle: Option<JoinHandle<T>>,
}

impl<T> Fake<T> {
    /// Waits for the script to finish and returns what it returned.
    pub fn join(mut self) -> T {
        self.handle
            .take()
            .unwrap()
            .join()
            .expect("fake daemon panicked")
    }
}

/// Starts a fake daemon that runs `script` on the first connection.
pub fn serve<T: Send + 'static>(script: impl FnOnce(&mut Peer) -> T + Send + 'static) -> Fake<T> {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("spillway.sock");
    let listener = UnixListener::bind(&path).unwrap();
    let handle = std::thread::spawn(move || {
        let (stream, _) = listener.accept().unwrap();
        script(&mut Peer {
            stream,
            buf: BytesMut::new(),
        })
    });
    Fake {
        _dir: dir,
        path,
        handle: Some(handle),
    }
}
