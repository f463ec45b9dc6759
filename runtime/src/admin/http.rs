//! The HTTP listener on `admin.metrics_address`: hyper's HTTP/1.1 server,
//! one request per connection. `GET /metrics` gets the Prometheus text,
//! `GET /health` 200 while the process serves (liveness), `GET /ready` 200
//! when every shard runs and every sink delivers, else 503, both with a
//! JSON body; anything else that parses gets 404, and what does not parse
//! gets hyper's 400. A request head over 8 KiB gets 431; a client that takes longer
//! than 5 s to send its head, or 10 s for the whole exchange (a scraper
//! that never reads its answer), is dropped.

use std::convert::Infallible;
use std::rc::Rc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::header::{HeaderValue, CONNECTION, CONTENT_TYPE};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use sink_sdk::units::KIB;

use super::metrics::{prometheus, CONTENT_TYPE as CONTENT_TYPE_METRICS};
use super::{health, AdminState};

/// A request head (request line and headers) longer than this gets 431.
/// hyper's smallest read buffer, and 50 times a scraper's head.
const REQUEST_HEAD_BYTES_MAX: usize = (8 * KIB) as usize;
/// A request head slower than this to arrive is dropped.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);
/// A connection still open after this (its answer unread) is dropped.
const EXCHANGE_TIMEOUT: Duration = Duration::from_secs(10);
const CONTENT_TYPE_TEXT: &str = "text/plain; charset=utf-8";
const CONTENT_TYPE_JSON: &str = "application/json";

/// Serves one connection of the metrics listener.
pub(super) async fn serve_metrics(stream: tokio::net::TcpStream, state: Rc<AdminState>) {
    let mut http = http1::Builder::new();
    http.keep_alive(false)
        .max_buf_size(REQUEST_HEAD_BYTES_MAX)
        .timer(TokioTimer::new())
        .header_read_timeout(REQUEST_TIMEOUT);
    let served = http.serve_connection(
        TokioIo::new(stream),
        service_fn(move |request| {
            let response = answer(&request, &state);
            async move { Ok::<_, Infallible>(response) }
        }),
    );
    // A failed exchange (a client gone, a bad request hyper answered) has
    // nothing left to do; the socket is closed either way.
    let _ = tokio::time::timeout(EXCHANGE_TIMEOUT, served).await;
}

fn answer(request: &Request<Incoming>, state: &AdminState) -> Response<Full<Bytes>> {
    let get = request.method() == Method::GET;
    // The whole target: a query string is not one of ours (404).
    let target = request.uri().path_and_query().map_or("", |p| p.as_str());
    let (status, content_type, body) = match target {
        "/metrics" if get => (StatusCode::OK, CONTENT_TYPE_METRICS, prometheus(state)),
        "/health" if get => (
            StatusCode::OK,
            CONTENT_TYPE_JSON,
            "{\"status\":\"ok\"}\n".to_string(),
        ),
        "/ready" if get => {
            let (ready, body) = health::ready(state);
            let status = if ready {
                StatusCode::OK
            } else {
                StatusCode::SERVICE_UNAVAILABLE
            };
            (status, CONTENT_TYPE_JSON, body)
        }
        _ => (
            StatusCode::NOT_FOUND,
            CONTENT_TYPE_TEXT,
            "try GET /metrics, /health or /ready\n".to_string(),
        ),
    };
    let mut response = Response::new(Full::new(Bytes::from(body)));
    *response.status_mut() = status;
    let headers = response.headers_mut();
    headers.insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
    headers.insert(CONNECTION, HeaderValue::from_static("close"));
    response
}
