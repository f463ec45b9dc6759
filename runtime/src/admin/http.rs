//! `GET /metrics` on `admin.metrics_address`: hyper's HTTP/1.1 server, one
//! request per connection. `GET /metrics` gets the Prometheus text;
//! anything else that parses gets 404, and what does not parse gets hyper's
//! 400. A request head over 8 KiB gets 431; a client that takes longer
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

use super::metrics::prometheus;
use super::AdminState;

/// A request head (request line and headers) longer than this gets 431.
/// hyper's smallest read buffer, and 50 times a scraper's head.
const REQUEST_HEAD_BYTES_MAX: usize = (8 * KIB) as usize;
/// A request head slower than this to arrive is dropped.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);
/// A connection still open after this (its answer unread) is dropped.
const EXCHANGE_TIMEOUT: Duration = Duration::from_secs(10);
/// The Prometheus text exposition format.
const CONTENT_TYPE_TEXT: &str = "text/plain; version=0.0.4";

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
    let (status, body) = if request.method() == Method::GET && request.uri() == "/metrics" {
        (StatusCode::OK, prometheus(state))
    } else {
        (StatusCode::NOT_FOUND, "try GET /metrics\n".to_string())
    };
    let mut response = Response::new(Full::new(Bytes::from(body)));
    *response.status_mut() = status;
    let headers = response.headers_mut();
    headers.insert(CONTENT_TYPE, HeaderValue::from_static(CONTENT_TYPE_TEXT));
    headers.insert(CONNECTION, HeaderValue::from_static("close"));
    response
}
