//! The serving thread: a current-thread tokio runtime that accepts
//! connections, lets hyper speak HTTP/1.1 on each (keep-alive, pipelining,
//! `Content-Length` and chunked bodies) and answers every request through
//! the handler. One thread is enough: the handler never blocks, a request
//! held at the gate costs no thread, and a delayed reply sleeps on a thread
//! of tokio's blocking pool (see `wait`).

use std::convert::Infallible;
use std::io;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::header::{HeaderName, HeaderValue, CONNECTION, CONTENT_LENGTH};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Response, StatusCode};
use hyper_util::rt::TokioIo;
use sink_sdk::units::{KIB, MIB};
use tokio::net::TcpListener;
use tokio::sync::{oneshot, watch};

use crate::exchange::{Handler, Reply, Request};

/// What the serving thread and the test share.
pub(crate) struct Shared {
    pub(crate) handler: Box<dyn Handler>,
    /// Every request in arrival order, when kept; a request's `status` is
    /// filled in when it is answered.
    pub(crate) log: Option<Mutex<Vec<Request>>>,
    /// `true` = open. While closed, requests wait after their body was
    /// read, before the handler sees them.
    pub(crate) gate: watch::Sender<bool>,
    pub(crate) connections: AtomicUsize,
    /// Requests handed to the handler.
    pub(crate) requests: AtomicU64,
    /// Requests between the handler and the end of their reply's delay.
    pub(crate) in_flight: AtomicUsize,
    pub(crate) in_flight_max: AtomicUsize,
    /// Requests not understood (answered 4xx by hyper, or 413 for a body
    /// over `serve::BODY_BYTES_MAX`); their connections are closed.
    pub(crate) refused: AtomicU64,
}

impl Shared {
    pub(crate) fn log(&self) -> Option<MutexGuard<'_, Vec<Request>>> {
        let log = self.log.as_ref()?;
        Some(log.lock().unwrap_or_else(|poisoned| poisoned.into_inner()))
    }
}

/// A request head (request line and headers) longer than this is refused
/// with 431.
const HEAD_BYTES_MAX: usize = (64 * KIB) as usize;
/// A body longer than this is refused with 413 (the sink's batches are a
/// few MiB at most; a record is at most 16 MiB).
pub(crate) const BODY_BYTES_MAX: usize = (128 * MIB) as usize;
/// After a failed `accept()` (EMFILE, say), wait this long before the next.
const ACCEPT_RETRY: Duration = Duration::from_millis(10);

/// Starts the thread serving `listener` until `stop` fires or is dropped.
pub(crate) fn spawn(
    listener: std::net::TcpListener,
    shared: Arc<Shared>,
    stop: oneshot::Receiver<()>,
) -> io::Result<JoinHandle<()>> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .enable_time()
        .build()?;
    listener.set_nonblocking(true)?;
    let listener = {
        let _context = runtime.enter();
        TcpListener::from_std(listener)?
    };
    std::thread::Builder::new()
        .name("test-http".into())
        .spawn(move || {
            runtime.block_on(accept_loop(listener, shared, stop));
            // Drops every connection task now; a thread still sleeping out
            // a reply's delay ends by itself, answering no one.
            runtime.shutdown_background();
        })
}

async fn accept_loop(listener: TcpListener, shared: Arc<Shared>, mut stop: oneshot::Receiver<()>) {
    let mut http = http1::Builder::new();
    // No `Date` header: an answer is only what the handler said (and its
    // `Content-Length`), a few bytes less per request for the bench.
    http.max_header_size(HEAD_BYTES_MAX).auto_date_header(false);
    loop {
        let accepted = tokio::select! {
            _ = &mut stop => return,
            accepted = listener.accept() => accepted,
        };
        let Ok((stream, _)) = accepted else {
            tokio::time::sleep(ACCEPT_RETRY).await;
            continue;
        };
        let _ = stream.set_nodelay(true);
        let connection = shared.connections.fetch_add(1, Ordering::AcqRel);
        let for_requests = shared.clone();
        let served = http.serve_connection(
            TokioIo::new(stream),
            service_fn(move |request| answer(for_requests.clone(), connection, request)),
        );
        let shared = shared.clone();
        tokio::spawn(async move {
            if let Err(e) = served.await {
                if e.is_parse() {
                    shared.refused.fetch_add(1, Ordering::AcqRel);
                }
            }
        });
    }
}

/// One request: read the body, pass the gate, ask the handler, wait out
/// the reply's delay, answer.
async fn answer(
    shared: Arc<Shared>,
    connection: usize,
    request: hyper::Request<Incoming>,
) -> Result<Response<Full<Bytes>>, Infallible> {
    let (parts, body) = request.into_parts();
    let body = match read_body(body, &parts.headers).await {
        Ok(body) => body,
        Err(BodyError::TooLarge) => {
            shared.refused.fetch_add(1, Ordering::AcqRel);
            return Ok(refusal(StatusCode::PAYLOAD_TOO_LARGE));
        }
        // The peer went away mid-body: nobody reads this answer.
        Err(BodyError::Read) => return Ok(refusal(StatusCode::BAD_REQUEST)),
    };
    pass_gate(&shared).await;
    let request = Request {
        method: parts.method.as_str().to_owned(),
        path: parts.uri.to_string(),
        headers: parts.headers,
        body,
        at: Instant::now(),
        connection,
        status: None,
    };
    let mut in_flight = InFlight::new(&shared, &request);
    let reply = (shared.handler)(&request);
    if !reply.delay.is_zero() {
        wait(reply.delay).await;
    }
    // Reached only if hyper still wants the answer: a client that went away
    // during the delay never got one, so its request stays unanswered.
    in_flight.status = Some(reply.status);
    drop(in_flight);
    Ok(response(reply))
}

enum BodyError {
    TooLarge,
    Read,
}

async fn read_body(mut body: Incoming, headers: &hyper::HeaderMap) -> Result<Vec<u8>, BodyError> {
    let declared = headers
        .get(CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok()?.parse::<usize>().ok())
        .unwrap_or(0);
    if declared > BODY_BYTES_MAX {
        return Err(BodyError::TooLarge);
    }
    let mut out = Vec::with_capacity(declared);
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|_| BodyError::Read)?;
        if let Ok(data) = frame.into_data() {
            if out.len() + data.len() > BODY_BYTES_MAX {
                return Err(BodyError::TooLarge);
            }
            out.extend_from_slice(&data);
        }
    }
    Ok(out)
}

/// Waits `delay` as exactly as a thread's sleep does. tokio's timer
/// rounds a deadline up to its next millisecond tick: a 5 ms hold took
/// 5-6 ms, and e2e_slow_downstream's push->arrival p50 rose by ~0.5 ms.
/// A sleeping thread from the blocking pool is precise; delayed requests
/// are few (a test's, or the bench's ~200/s), so threads are cheap here.
async fn wait(delay: Duration) {
    let _ = tokio::task::spawn_blocking(move || std::thread::sleep(delay)).await;
}

/// Waits while the gate is closed.
async fn pass_gate(shared: &Shared) {
    if *shared.gate.borrow() {
        return;
    }
    let mut gate = shared.gate.subscribe();
    // The sender lives in `shared`, so this only ends with the gate open.
    let _ = gate.wait_for(|open| *open).await;
}

/// A request between the handler and its answer: counted in flight, and
/// (when requests are kept) logged with no status until then. Dropped when
/// the answer is ready (its status is then recorded), or with the request
/// if hyper gives up on it because the client went away during the delay:
/// that request keeps no status, since no client ever saw an answer (a sink
/// that timed out must not count as delivered).
struct InFlight<'a> {
    shared: &'a Shared,
    /// Where the request sits in the log.
    index: Option<usize>,
    status: Option<u16>,
}

impl<'a> InFlight<'a> {
    fn new(shared: &'a Shared, request: &Request) -> InFlight<'a> {
        let now = shared.in_flight.fetch_add(1, Ordering::AcqRel) + 1;
        shared.in_flight_max.fetch_max(now, Ordering::AcqRel);
        shared.requests.fetch_add(1, Ordering::AcqRel);
        let index = shared.log().map(|mut log| {
            log.push(request.clone());
            log.len() - 1
        });
        InFlight {
            shared,
            index,
            status: None,
        }
    }
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        if let (Some(index), Some(mut log)) = (self.index, self.shared.log()) {
            log[index].status = self.status;
        }
        self.shared.in_flight.fetch_sub(1, Ordering::AcqRel);
    }
}

fn response(reply: Reply) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from(reply.body)));
    *response.status_mut() = StatusCode::from_u16(reply.status)
        .unwrap_or_else(|_| panic!("reply status {} is not 100..=999", reply.status));
    for (name, value) in reply.headers {
        let header = HeaderName::try_from(name.as_str())
            .ok()
            .zip(HeaderValue::try_from(value.as_str()).ok());
        let (name, value) =
            header.unwrap_or_else(|| panic!("reply header {name:?}: {value:?} is not valid"));
        response.headers_mut().append(name, value);
    }
    response
}

/// An empty answer that closes the connection.
fn refusal(status: StatusCode) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::new()));
    *response.status_mut() = status;
    response
        .headers_mut()
        .insert(CONNECTION, HeaderValue::from_static("close"));
    response
}
