//! `GET /metrics` on `admin.metrics_address`.

use std::rc::Rc;

use tokio::io::{AsyncReadExt, AsyncWriteExt, BufReader};

use super::metrics::prometheus;
use super::AdminState;

/// A request line longer than this is dropped.
const REQUEST_BYTES_MAX: u64 = 8192;
/// A request slower than this to arrive is dropped.
const REQUEST_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

/// Serve `GET /metrics` on a TCP listener (HTTP/1.1, one request per
/// connection). Anything else gets 404; a request over 8 KiB or slower than
/// 5 s is dropped.
pub(super) async fn serve_metrics(stream: tokio::net::TcpStream, state: Rc<AdminState>) {
    use tokio::io::AsyncBufReadExt as _;
    let (rd, mut wr) = stream.into_split();
    let mut reader = BufReader::new(rd.take(REQUEST_BYTES_MAX));
    let mut request_line = String::new();
    let read = tokio::time::timeout(REQUEST_TIMEOUT, reader.read_line(&mut request_line)).await;
    if !matches!(read, Ok(Ok(n)) if n > 0) {
        return;
    }
    let (status, body) = match request_line
        .split_whitespace()
        .collect::<Vec<_>>()
        .as_slice()
    {
        ["GET", "/metrics", ..] => ("200 OK", prometheus(&state)),
        _ => ("404 Not Found", "try GET /metrics\n".to_string()),
    };
    let head = format!(
        "HTTP/1.1 {status}\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    let _ = wr.write_all(head.as_bytes()).await;
    let _ = wr.write_all(body.as_bytes()).await;
    let _ = wr.shutdown().await;
}
