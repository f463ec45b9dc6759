//! What a [`Handler`] sees and what it answers: a [`Request`] (read in
//! full, with when and on which connection it arrived) and a [`Reply`]
//! (status, headers, body, and how long to wait before sending it).

use std::time::{Duration, Instant};

use hyper::HeaderMap;

/// Decides the answer to each request. Called on the receiver's thread once
/// the body is read (and the gate is open), so it must not block: a slow
/// server is a [`Reply::after`], not a sleep.
pub trait Handler: Fn(&Request) -> Reply + Send + Sync + 'static {}

impl<F: Fn(&Request) -> Reply + Send + Sync + 'static> Handler for F {}

/// One request as the receiver read it.
#[derive(Debug, Clone)]
pub struct Request {
    pub method: String,
    /// The request target as sent (path and query).
    pub path: String,
    /// Names in lower case; distinct names in arrival order, the values of
    /// a repeated name together.
    pub headers: HeaderMap,
    /// Decoded from `Content-Length` or chunked framing; not decompressed.
    pub body: Vec<u8>,
    /// When the handler got it: the body read in full and, if the gate was
    /// closed, the gate opened.
    pub at: Instant,
    /// Which TCP connection (in accept order, from 0) carried it.
    pub connection: usize,
    /// The status it was answered with. `None` while its reply is being
    /// delayed, and in the handler's own view (nothing is answered yet).
    pub status: Option<u16>,
}

impl Request {
    /// The first value of header `name` (any case); `None` when absent or
    /// not visible ASCII.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name)?.to_str().ok()
    }

    /// Answered with a 2xx status.
    pub fn accepted(&self) -> bool {
        self.status.is_some_and(|s| (200..300).contains(&s))
    }
}

/// The answer to one request. `Content-Length` is set from the body; a
/// `Connection: close` header closes the connection after the answer.
#[derive(Debug, Clone)]
pub struct Reply {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
    /// Held this long before it is sent (as exactly as a thread's sleep);
    /// the request counts as in flight meanwhile.
    pub delay: Duration,
}

impl Reply {
    pub fn status(status: u16) -> Reply {
        Reply {
            status,
            headers: Vec::new(),
            body: Vec::new(),
            delay: Duration::ZERO,
        }
    }

    pub fn header(mut self, name: &str, value: &str) -> Reply {
        self.headers.push((name.into(), value.into()));
        self
    }

    pub fn body(mut self, body: &[u8]) -> Reply {
        self.body = body.to_vec();
        self
    }

    pub fn after(mut self, delay: Duration) -> Reply {
        self.delay = delay;
        self
    }
}
