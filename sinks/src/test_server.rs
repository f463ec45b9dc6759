//! A small HTTP/1.1 server on loopback for the HTTP sink's tests: it
//! records every request exactly as received (method, path, headers, body)
//! and answers with what the test's responder says, optionally after a
//! delay. Keep-alive; `Content-Length` bodies only (the sink never chunks).

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

/// Any connection idle this long is closed, so no test thread hangs.
const IDLE_TIMEOUT: Duration = Duration::from_secs(10);
const BODY_BYTES_MAX: usize = 64 << 20;

#[derive(Debug, Clone)]
pub(crate) struct Received {
    pub method: String,
    pub path: String,
    /// Names lower-cased, in arrival order.
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Received {
    pub fn header(&self, name: &str) -> Option<&str> {
        let name = name.to_ascii_lowercase();
        self.headers
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, v)| v.as_str())
    }
}

#[derive(Debug, Clone)]
pub(crate) struct Reply {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
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

type Responder = dyn Fn(&Received) -> Reply + Send + Sync;

struct Shared {
    received: Mutex<Vec<Received>>,
    respond: Box<Responder>,
    in_flight: AtomicUsize,
    in_flight_max: AtomicUsize,
    connections: AtomicUsize,
    stop: AtomicBool,
}

pub(crate) struct TestServer {
    addr: SocketAddr,
    shared: Arc<Shared>,
    acceptor: Option<JoinHandle<()>>,
}

impl TestServer {
    pub fn start(respond: impl Fn(&Received) -> Reply + Send + Sync + 'static) -> TestServer {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind loopback");
        let addr = listener.local_addr().unwrap();
        let shared = Arc::new(Shared {
            received: Mutex::new(Vec::new()),
            respond: Box::new(respond),
            in_flight: AtomicUsize::new(0),
            in_flight_max: AtomicUsize::new(0),
            connections: AtomicUsize::new(0),
            stop: AtomicBool::new(false),
        });
        let accept_shared = Arc::clone(&shared);
        let acceptor = std::thread::spawn(move || {
            for stream in listener.incoming() {
                if accept_shared.stop.load(Ordering::SeqCst) {
                    break;
                }
                let Ok(stream) = stream else { continue };
                accept_shared.connections.fetch_add(1, Ordering::SeqCst);
                let conn_shared = Arc::clone(&accept_shared);
                std::thread::spawn(move || serve(stream, &conn_shared));
            }
        });
        TestServer {
            addr,
            shared,
            acceptor: Some(acceptor),
        }
    }

    /// A server that answers every request with `status`.
    pub fn replying(status: u16) -> TestServer {
        TestServer::start(move |_| Reply::status(status))
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    pub fn received(&self) -> Vec<Received> {
        self.shared.received.lock().unwrap().clone()
    }

    /// TCP connections accepted so far.
    pub fn connections(&self) -> usize {
        self.shared.connections.load(Ordering::SeqCst)
    }

    /// The most requests that were being answered at the same time.
    pub fn in_flight_max(&self) -> usize {
        self.shared.in_flight_max.load(Ordering::SeqCst)
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        let _ = TcpStream::connect(self.addr); // wakes the acceptor
        if let Some(acceptor) = self.acceptor.take() {
            let _ = acceptor.join();
        }
    }
}

fn serve(stream: TcpStream, shared: &Shared) {
    stream.set_read_timeout(Some(IDLE_TIMEOUT)).unwrap();
    let mut writer = stream.try_clone().unwrap();
    let mut reader = BufReader::new(stream);
    while let Some(request) = read_request(&mut reader) {
        let now = shared.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
        shared.in_flight_max.fetch_max(now, Ordering::SeqCst);
        shared.received.lock().unwrap().push(request.clone());
        let reply = (shared.respond)(&request);
        std::thread::sleep(reply.delay);
        shared.in_flight.fetch_sub(1, Ordering::SeqCst);
        if writer.write_all(&encode_reply(&reply)).is_err() {
            return;
        }
    }
}

/// `None` at end of stream or on anything malformed.
fn read_request(reader: &mut BufReader<TcpStream>) -> Option<Received> {
    let mut line = String::new();
    if reader.read_line(&mut line).ok()? == 0 {
        return None;
    }
    let mut parts = line.split_whitespace();
    let method = parts.next()?.to_string();
    let path = parts.next()?.to_string();
    let mut headers = Vec::new();
    loop {
        let mut header = String::new();
        reader.read_line(&mut header).ok()?;
        let header = header.trim_end_matches(['\r', '\n']);
        if header.is_empty() {
            break;
        }
        let (name, value) = header.split_once(':')?;
        headers.push((name.trim().to_ascii_lowercase(), value.trim().to_string()));
    }
    let length: usize = headers
        .iter()
        .find(|(n, _)| n == "content-length")
        .map_or(Some(0), |(_, v)| v.parse().ok())?;
    if length > BODY_BYTES_MAX {
        return None;
    }
    let mut body = vec![0; length];
    reader.read_exact(&mut body).ok()?;
    Some(Received {
        method,
        path,
        headers,
        body,
    })
}

fn encode_reply(reply: &Reply) -> Vec<u8> {
    let mut out = format!(
        "HTTP/1.1 {} {}\r\n",
        reply.status,
        reason_phrase(reply.status)
    );
    for (name, value) in &reply.headers {
        out.push_str(&format!("{name}: {value}\r\n"));
    }
    out.push_str(&format!("Content-Length: {}\r\n\r\n", reply.body.len()));
    let mut bytes = out.into_bytes();
    bytes.extend_from_slice(&reply.body);
    bytes
}

fn reason_phrase(status: u16) -> &'static str {
    match status {
        200 => "OK",
        204 => "No Content",
        301 => "Moved Permanently",
        400 => "Bad Request",
        404 => "Not Found",
        408 => "Request Timeout",
        429 => "Too Many Requests",
        500 => "Internal Server Error",
        503 => "Service Unavailable",
        _ => "Whatever",
    }
}
