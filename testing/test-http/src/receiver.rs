//! The [`Receiver`] a test or a bench scenario holds: where it listens,
//! what it recorded, its counters and its gate. Dropping it stops the
//! server: the listening socket and every connection are closed before
//! `drop` returns.

use std::io;
use std::net::{SocketAddr, TcpListener};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use tokio::sync::{oneshot, watch};

use crate::exchange::{Handler, Request};
use crate::serve::{self, Shared};

/// How a receiver is started; [`Receiver::start`] takes the defaults.
#[derive(Debug, Clone)]
pub struct Builder {
    keep_requests: bool,
}

impl Builder {
    /// Record every request in full (the default). The bench turns this
    /// off: it counts millions of records and keeps none of them.
    pub fn keep_requests(mut self, keep: bool) -> Builder {
        self.keep_requests = keep;
        self
    }

    /// Listens on 127.0.0.1 (a free port) and serves on a new thread.
    pub fn start(self, handler: impl Handler) -> io::Result<Receiver> {
        let listener = TcpListener::bind("127.0.0.1:0")?;
        let addr = listener.local_addr()?;
        let shared = Arc::new(Shared {
            handler: Box::new(handler),
            log: self.keep_requests.then(|| Mutex::new(Vec::new())),
            gate: watch::Sender::new(true),
            connections: AtomicUsize::new(0),
            requests: AtomicU64::new(0),
            in_flight: AtomicUsize::new(0),
            in_flight_max: AtomicUsize::new(0),
            refused: AtomicU64::new(0),
        });
        let (stop, stopped) = oneshot::channel();
        let thread = serve::spawn(listener, shared.clone(), stopped)?;
        Ok(Receiver {
            addr,
            shared,
            stop: Some(stop),
            thread: Some(thread),
        })
    }
}

/// A running loopback HTTP/1.1 server; stopped when dropped.
pub struct Receiver {
    addr: SocketAddr,
    shared: Arc<Shared>,
    /// Dropped to stop the accept loop.
    stop: Option<oneshot::Sender<()>>,
    /// Owns the runtime; joined on drop, so no connection outlives us.
    thread: Option<JoinHandle<()>>,
}

impl Receiver {
    pub fn builder() -> Builder {
        Builder {
            keep_requests: true,
        }
    }

    /// A receiver that records every request and answers with `handler`.
    /// Panics if it cannot start (tests have no better answer).
    pub fn start(handler: impl Handler) -> Receiver {
        Receiver::builder()
            .start(handler)
            .expect("starting the loopback HTTP receiver")
    }

    /// A receiver that answers every request with `status` at once.
    pub fn replying(status: u16) -> Receiver {
        Receiver::start(move |_: &Request| crate::Reply::status(status))
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://127.0.0.1:PORT{path}`
    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    /// Every request so far, in arrival order. Panics if the receiver was
    /// built with `keep_requests(false)`.
    pub fn requests(&self) -> Vec<Request> {
        self.shared
            .log()
            .expect("this receiver keeps no requests (Builder::keep_requests(false))")
            .clone()
    }

    /// Requests handed to the handler so far (kept or not).
    pub fn request_count(&self) -> u64 {
        self.shared.requests.load(Ordering::Acquire)
    }

    /// TCP connections accepted so far.
    pub fn connections(&self) -> usize {
        self.shared.connections.load(Ordering::Acquire)
    }

    /// Requests handed to the handler and not answered yet (their reply
    /// is being delayed).
    pub fn in_flight(&self) -> usize {
        self.shared.in_flight.load(Ordering::Acquire)
    }

    /// The most requests that were in flight at the same time.
    pub fn in_flight_max(&self) -> usize {
        self.shared.in_flight_max.load(Ordering::Acquire)
    }

    /// Requests that were not understood: malformed (hyper answers 400), a
    /// head over 64 KiB (431) or a body over 128 MiB (413). A malformed
    /// one is counted when hyper gives its connection up, just after the
    /// client saw it close.
    pub fn refused(&self) -> u64 {
        self.shared.refused.load(Ordering::Acquire)
    }

    /// Hold every request after its body was read, until [`open_gate`].
    ///
    /// [`open_gate`]: Receiver::open_gate
    pub fn close_gate(&self) {
        self.shared.gate.send_replace(false);
    }

    pub fn open_gate(&self) {
        self.shared.gate.send_replace(true);
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        drop(self.stop.take());
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}
