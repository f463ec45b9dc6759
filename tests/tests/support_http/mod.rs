//! A small, real HTTP/1.1 receiver for delivery tests.
//!
//! It listens on `127.0.0.1:0`, serves each connection on its own thread
//! (keep-alive, `Content-Length` or chunked bodies), records every request
//! (method, path, headers, body, arrival time, the status it got) and
//! answers according to a [`Behaviour`] the test can change at any moment:
//! a status, an optional `Retry-After`, a delay before answering, and
//! "answer 400 when the body contains X".
//!
//! On top of the raw requests it decodes what spillway's HTTP sink sends
//! into [`Received`] records with their identity `(shard, seq)`, taken from
//! the `Spillway-Shard`, `Spillway-Seq-First` and `Spillway-Seqs` headers,
//! and offers waits ("until these payloads were accepted") that panic with
//! a summary of what did arrive.

#![allow(dead_code)]

use std::collections::{BTreeMap, HashMap, HashSet};
use std::io::{self, BufRead, BufReader, ErrorKind, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

/// How the receiver answers the next requests.
#[derive(Debug, Clone)]
pub struct Behaviour {
    /// Status of every answer (unless a rejection rule matches).
    pub status: u16,
    /// `Retry-After` value sent with non-2xx answers, verbatim.
    pub retry_after: Option<String>,
    /// Wait this long after reading a request before answering it.
    pub delay: Duration,
    /// Answer 400 to a request whose body contains these bytes.
    pub reject_containing: Option<Vec<u8>>,
}

impl Default for Behaviour {
    fn default() -> Self {
        Behaviour {
            status: 200,
            retry_after: None,
            delay: Duration::ZERO,
            reject_containing: None,
        }
    }
}

/// One request as the receiver saw it.
#[derive(Debug, Clone)]
pub struct Request {
    pub method: String,
    pub path: String,
    /// Header names in lower case, values as sent, in order.
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
    /// When the request was completely read.
    pub at: Instant,
    /// The status it was answered with; `None` while it is being delayed.
    pub status: Option<u16>,
    /// Which TCP connection (in accept order) carried it.
    pub connection: usize,
}

impl Request {
    /// The first value of header `name` (case-insensitive).
    pub fn header(&self, name: &str) -> Option<&str> {
        let name = name.to_ascii_lowercase();
        self.headers
            .iter()
            .find(|(k, _)| *k == name)
            .map(|(_, v)| v.as_str())
    }

    /// Answered with a 2xx status.
    pub fn accepted(&self) -> bool {
        self.status.is_some_and(|s| (200..300).contains(&s))
    }
}

/// One record decoded from a request spillway sent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Received {
    pub shard: u32,
    pub seq: u64,
    pub payload: Vec<u8>,
    /// Index of the request (in arrival order) that carried it.
    pub request: usize,
    pub at: Instant,
}

impl Received {
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.payload).into_owned()
    }

    pub fn id(&self) -> (u32, u64) {
        (self.shard, self.seq)
    }
}

struct Shared {
    requests: Mutex<Vec<Request>>,
    behaviour: Mutex<Behaviour>,
    stop: AtomicBool,
    connections: AtomicUsize,
}

/// The running receiver. Dropping it stops accepting and lets the
/// connection threads finish.
pub struct HttpReceiver {
    addr: SocketAddr,
    shared: Arc<Shared>,
    acceptor: Option<thread::JoinHandle<()>>,
}

impl HttpReceiver {
    /// Start a receiver answering 200 at once.
    pub fn start() -> HttpReceiver {
        HttpReceiver::with(Behaviour::default())
    }

    pub fn with(behaviour: Behaviour) -> HttpReceiver {
        let listener = TcpListener::bind("127.0.0.1:0").expect("binding the test HTTP receiver");
        let addr = listener.local_addr().unwrap();
        let shared = Arc::new(Shared {
            requests: Mutex::new(Vec::new()),
            behaviour: Mutex::new(behaviour),
            stop: AtomicBool::new(false),
            connections: AtomicUsize::new(0),
        });
        let for_thread = shared.clone();
        let acceptor = thread::Builder::new()
            .name("http-receiver".into())
            .spawn(move || accept_loop(listener, for_thread))
            .unwrap();
        HttpReceiver {
            addr,
            shared,
            acceptor: Some(acceptor),
        }
    }

    /// `http://127.0.0.1:PORT/ingest`
    pub fn url(&self) -> String {
        format!("http://{}/ingest", self.addr)
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    pub fn set_status(&self, status: u16) {
        self.shared.behaviour.lock().unwrap().status = status;
    }

    pub fn set_retry_after(&self, value: Option<&str>) {
        self.shared.behaviour.lock().unwrap().retry_after = value.map(str::to_string);
    }

    pub fn set_delay(&self, delay: Duration) {
        self.shared.behaviour.lock().unwrap().delay = delay;
    }

    pub fn reject_containing(&self, needle: Option<&[u8]>) {
        self.shared.behaviour.lock().unwrap().reject_containing = needle.map(<[u8]>::to_vec);
    }

    /// TCP connections accepted so far.
    pub fn connections(&self) -> usize {
        self.shared.connections.load(Ordering::Relaxed)
    }

    /// Every request so far, in arrival order.
    pub fn requests(&self) -> Vec<Request> {
        self.shared.requests.lock().unwrap().clone()
    }

    pub fn request_count(&self) -> usize {
        self.shared.requests.lock().unwrap().len()
    }

    /// Requests read but not answered yet (being delayed).
    pub fn in_flight(&self) -> usize {
        self.shared
            .requests
            .lock()
            .unwrap()
            .iter()
            .filter(|r| r.status.is_none())
            .count()
    }

    /// Records of every request answered 2xx, in arrival order (request
    /// order, then body order). Panics if a request is malformed.
    pub fn accepted_records(&self) -> Vec<Received> {
        let reqs = self.requests();
        let mut out = Vec::new();
        for (i, r) in reqs.iter().enumerate() {
            if r.accepted() {
                out.extend(
                    decode_request(r, i).unwrap_or_else(|e| {
                        panic!("request #{i} is malformed: {e}\n{}", describe(r))
                    }),
                );
            }
        }
        out
    }

    /// Wait until at least `n` distinct identities `(shard, seq)` were
    /// accepted; panics after `timeout` with a summary.
    pub fn wait_distinct(&self, n: usize, timeout: Duration) -> Vec<Received> {
        let deadline = Instant::now() + timeout;
        loop {
            let recs = self.accepted_records();
            let distinct: HashSet<(u32, u64)> = recs.iter().map(Received::id).collect();
            if distinct.len() >= n {
                return recs;
            }
            if Instant::now() >= deadline {
                panic!(
                    "waited {timeout:?} for {n} distinct records, got {}:\n{}",
                    distinct.len(),
                    self.summary()
                );
            }
            thread::sleep(Duration::from_millis(10));
        }
    }

    /// Wait until every payload of `expected` was accepted at least once;
    /// panics after `timeout` naming (some of) the missing ones.
    pub fn wait_for_payloads<S: AsRef<[u8]>>(
        &self,
        expected: &[S],
        timeout: Duration,
    ) -> Vec<Received> {
        let deadline = Instant::now() + timeout;
        loop {
            let recs = self.accepted_records();
            let have: HashSet<&[u8]> = recs.iter().map(|r| r.payload.as_slice()).collect();
            let missing: Vec<String> = expected
                .iter()
                .filter(|e| !have.contains(e.as_ref()))
                .map(|e| preview(e.as_ref()))
                .collect();
            if missing.is_empty() {
                return recs;
            }
            if Instant::now() >= deadline {
                panic!(
                    "waited {timeout:?} for {} payloads; {} never arrived (first: {:?});\n{}",
                    expected.len(),
                    missing.len(),
                    &missing[..missing.len().min(10)],
                    self.summary()
                );
            }
            thread::sleep(Duration::from_millis(10));
        }
    }

    /// A readable account of the traffic so far (for panic messages).
    pub fn summary(&self) -> String {
        let reqs = self.requests();
        let mut by_status: BTreeMap<String, usize> = BTreeMap::new();
        for r in &reqs {
            *by_status
                .entry(r.status.map_or("pending".to_string(), |s| s.to_string()))
                .or_default() += 1;
        }
        let mut out = format!(
            "{} requests over {} connections, by status {by_status:?}\n",
            reqs.len(),
            self.connections()
        );
        let skip = reqs.len().saturating_sub(8);
        for (i, r) in reqs.iter().enumerate().skip(skip) {
            out.push_str(&format!("  #{i}: {}\n", one_line(r)));
        }
        let mut per_shard: BTreeMap<u32, (usize, u64, u64)> = BTreeMap::new();
        let mut malformed = 0;
        for (i, r) in reqs.iter().enumerate().filter(|(_, r)| r.accepted()) {
            match decode_request(r, i) {
                Ok(recs) => {
                    for r in &recs {
                        let e = per_shard.entry(r.shard).or_insert((0, u64::MAX, 0));
                        e.0 += 1;
                        e.1 = e.1.min(r.seq);
                        e.2 = e.2.max(r.seq);
                    }
                }
                Err(_) => malformed += 1,
            }
        }
        out.push_str(&format!(
            "accepted records per shard (count, min seq, max seq): {per_shard:?}; malformed accepted requests: {malformed}\n"
        ));
        out
    }
}

impl Drop for HttpReceiver {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::Release);
        // Unblock accept().
        let _ = TcpStream::connect_timeout(&self.addr, Duration::from_secs(1));
        if let Some(t) = self.acceptor.take() {
            let _ = t.join();
        }
    }
}

fn accept_loop(listener: TcpListener, shared: Arc<Shared>) {
    for stream in listener.incoming() {
        if shared.stop.load(Ordering::Acquire) {
            return;
        }
        let Ok(stream) = stream else { continue };
        let id = shared.connections.fetch_add(1, Ordering::Relaxed);
        let shared = shared.clone();
        let _ = thread::Builder::new()
            .name(format!("http-conn-{id}"))
            .spawn(move || {
                let _ = serve(stream, id, shared);
            });
    }
}

/// Read one line (ending in CRLF or LF), polling the stop flag while idle.
/// `Ok(None)` = the peer closed (or we are stopping) between requests.
fn read_line(
    reader: &mut BufReader<TcpStream>,
    shared: &Shared,
    idle: bool,
) -> io::Result<Option<String>> {
    let mut line = Vec::new();
    loop {
        match reader.read_until(b'\n', &mut line) {
            Ok(0) if line.is_empty() => return Ok(None),
            Ok(0) => {
                return Err(io::Error::new(
                    ErrorKind::UnexpectedEof,
                    "EOF in the middle of a line",
                ))
            }
            Ok(_) if line.ends_with(b"\n") => break,
            Ok(_) => continue,
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                if shared.stop.load(Ordering::Acquire) && idle && line.is_empty() {
                    return Ok(None);
                }
            }
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    while matches!(line.last(), Some(b'\n' | b'\r')) {
        line.pop();
    }
    String::from_utf8(line)
        .map(Some)
        .map_err(|e| io::Error::new(ErrorKind::InvalidData, e))
}

fn read_exact_patiently(reader: &mut BufReader<TcpStream>, buf: &mut [u8]) -> io::Result<()> {
    let mut at = 0;
    while at < buf.len() {
        match reader.read(&mut buf[at..]) {
            Ok(0) => return Err(io::Error::new(ErrorKind::UnexpectedEof, "EOF in a body")),
            Ok(n) => at += n,
            Err(e)
                if matches!(
                    e.kind(),
                    ErrorKind::WouldBlock | ErrorKind::TimedOut | ErrorKind::Interrupted
                ) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

fn serve(stream: TcpStream, connection: usize, shared: Arc<Shared>) -> io::Result<()> {
    stream.set_read_timeout(Some(Duration::from_millis(200)))?;
    stream.set_nodelay(true)?;
    let mut writer = stream.try_clone()?;
    let mut reader = BufReader::new(stream);
    loop {
        // Request line (skipping stray empty lines between requests).
        let request_line = loop {
            match read_line(&mut reader, &shared, true)? {
                None => return Ok(()),
                Some(l) if l.is_empty() => continue,
                Some(l) => break l,
            }
        };
        let mut parts = request_line.split_whitespace();
        let method = parts.next().unwrap_or_default().to_string();
        let path = parts.next().unwrap_or_default().to_string();
        let version = parts.next().unwrap_or_default().to_string();
        let mut headers = Vec::new();
        loop {
            let Some(line) = read_line(&mut reader, &shared, false)? else {
                return Err(io::Error::new(
                    ErrorKind::UnexpectedEof,
                    "EOF in the headers",
                ));
            };
            if line.is_empty() {
                break;
            }
            let (k, v) = line.split_once(':').ok_or_else(|| {
                io::Error::new(ErrorKind::InvalidData, format!("bad header line {line:?}"))
            })?;
            headers.push((k.trim().to_ascii_lowercase(), v.trim().to_string()));
        }
        let get = |name: &str| {
            headers
                .iter()
                .find(|(k, _)| k == name)
                .map(|(_, v)| v.clone())
        };
        let mut body = Vec::new();
        if get("transfer-encoding").is_some_and(|v| v.to_ascii_lowercase().contains("chunked")) {
            loop {
                let size_line = read_line(&mut reader, &shared, false)?.unwrap_or_default();
                let size =
                    usize::from_str_radix(size_line.split(';').next().unwrap_or("").trim(), 16)
                        .map_err(|_| {
                            io::Error::new(
                                ErrorKind::InvalidData,
                                format!("bad chunk size {size_line:?}"),
                            )
                        })?;
                if size == 0 {
                    // Trailers until an empty line.
                    while !read_line(&mut reader, &shared, false)?
                        .unwrap_or_default()
                        .is_empty()
                    {}
                    break;
                }
                let start = body.len();
                body.resize(start + size, 0);
                read_exact_patiently(&mut reader, &mut body[start..])?;
                let _ = read_line(&mut reader, &shared, false)?;
            }
        } else if let Some(len) = get("content-length") {
            let len: usize = len
                .parse()
                .map_err(|_| io::Error::new(ErrorKind::InvalidData, "bad Content-Length"))?;
            body.resize(len, 0);
            read_exact_patiently(&mut reader, &mut body)?;
        }
        let close = get("connection").is_some_and(|v| v.eq_ignore_ascii_case("close"))
            || version == "HTTP/1.0";
        let behaviour = shared.behaviour.lock().unwrap().clone();
        let index = {
            let mut reqs = shared.requests.lock().unwrap();
            reqs.push(Request {
                method,
                path,
                headers,
                body: body.clone(),
                at: Instant::now(),
                status: None,
                connection,
            });
            reqs.len() - 1
        };
        if !behaviour.delay.is_zero() {
            thread::sleep(behaviour.delay);
        }
        let rejected = behaviour
            .reject_containing
            .as_deref()
            .is_some_and(|needle| {
                !needle.is_empty() && body.windows(needle.len()).any(|w| w == needle)
            });
        let (status, reason, text) = if rejected {
            (
                400u16,
                "Bad Request",
                "rejected by the test receiver: poisoned record".to_string(),
            )
        } else {
            let s = behaviour.status;
            (
                s,
                reason_phrase(s),
                if (200..300).contains(&s) {
                    String::new()
                } else {
                    format!("test receiver answers {s}")
                },
            )
        };
        let mut response = format!(
            "HTTP/1.1 {status} {reason}\r\nContent-Type: text/plain\r\nContent-Length: {}\r\n",
            text.len()
        );
        if !(200..300).contains(&status) {
            if let Some(ra) = &behaviour.retry_after {
                response.push_str(&format!("Retry-After: {ra}\r\n"));
            }
        }
        if close {
            response.push_str("Connection: close\r\n");
        }
        response.push_str("\r\n");
        response.push_str(&text);
        shared.requests.lock().unwrap()[index].status = Some(status);
        writer.write_all(response.as_bytes())?;
        writer.flush()?;
        if close {
            let _ = writer.shutdown(Shutdown::Both);
            return Ok(());
        }
    }
}

fn reason_phrase(status: u16) -> &'static str {
    match status {
        200 => "OK",
        204 => "No Content",
        400 => "Bad Request",
        408 => "Request Timeout",
        429 => "Too Many Requests",
        500 => "Internal Server Error",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        _ => "Status",
    }
}

/// Expand `Spillway-Seqs` runs (`10-14,16`) into seqs.
pub fn parse_seq_runs(s: &str) -> Result<Vec<u64>, String> {
    let mut out = Vec::new();
    for part in s.split(',') {
        let part = part.trim();
        let parse = |x: &str| {
            x.trim()
                .parse::<u64>()
                .map_err(|_| format!("bad seq {x:?} in Spillway-Seqs {s:?}"))
        };
        match part.split_once('-') {
            Some((a, b)) => {
                let (a, b) = (parse(a)?, parse(b)?);
                if a > b {
                    return Err(format!("descending run {part:?} in Spillway-Seqs {s:?}"));
                }
                out.extend(a..=b);
            }
            None => out.push(parse(part)?),
        }
    }
    Ok(out)
}

/// The records of one request spillway's HTTP sink sent, with their
/// identities, checking that the headers and the body agree.
pub fn decode_request(r: &Request, index: usize) -> Result<Vec<Received>, String> {
    let num = |name: &str| -> Result<u64, String> {
        r.header(name)
            .ok_or_else(|| format!("missing {name}"))?
            .parse::<u64>()
            .map_err(|_| format!("{name} is not a number: {:?}", r.header(name)))
    };
    let shard = num("spillway-shard")? as u32;
    let first = num("spillway-seq-first")?;
    let last = num("spillway-seq-last")?;
    let count = num("spillway-record-count")? as usize;
    let content_type = r.header("content-type").unwrap_or("");
    let payloads: Vec<Vec<u8>> = match content_type {
        "application/x-ndjson" => {
            if !r.body.is_empty() && !r.body.ends_with(b"\n") {
                return Err("NDJSON body does not end with a newline".into());
            }
            let mut lines: Vec<Vec<u8>> =
                r.body.split(|b| *b == b'\n').map(<[u8]>::to_vec).collect();
            lines.pop(); // after the final newline
            lines
        }
        "application/octet-stream" => vec![r.body.clone()],
        other => return Err(format!("unexpected Content-Type {other:?}")),
    };
    if payloads.len() != count {
        return Err(format!(
            "Spillway-Record-Count {count} but the body holds {} records",
            payloads.len()
        ));
    }
    let seqs: Vec<u64> = match r.header("spillway-seqs") {
        Some(runs) => parse_seq_runs(runs)?,
        None => (first..first + count as u64).collect(),
    };
    if seqs.len() != count {
        return Err(format!("{} seqs for {count} records", seqs.len()));
    }
    if seqs.first() != Some(&first) || seqs.last() != Some(&last) {
        return Err(format!(
            "seqs {seqs:?} disagree with Seq-First {first} / Seq-Last {last}"
        ));
    }
    if seqs.windows(2).any(|w| w[0] >= w[1]) {
        return Err(format!("seqs not increasing: {seqs:?}"));
    }
    Ok(seqs
        .into_iter()
        .zip(payloads)
        .map(|(seq, payload)| Received {
            shard,
            seq,
            payload,
            request: index,
            at: r.at,
        })
        .collect())
}

/// Identities received more than once (redeliveries), with their counts.
pub fn duplicates(recs: &[Received]) -> HashMap<(u32, u64), usize> {
    let mut counts: HashMap<(u32, u64), usize> = HashMap::new();
    for r in recs {
        *counts.entry(r.id()).or_default() += 1;
    }
    counts.retain(|_, n| *n > 1);
    counts
}

fn preview(b: &[u8]) -> String {
    let s = String::from_utf8_lossy(b);
    if s.chars().count() > 40 {
        format!("{}…", s.chars().take(40).collect::<String>())
    } else {
        s.into_owned()
    }
}

fn one_line(r: &Request) -> String {
    format!(
        "{} {} status={:?} conn={} key={:?} shard={:?} seqs={:?}..{:?} count={:?} body={} bytes",
        r.method,
        r.path,
        r.status,
        r.connection,
        r.header("idempotency-key"),
        r.header("spillway-shard"),
        r.header("spillway-seq-first"),
        r.header("spillway-seq-last"),
        r.header("spillway-record-count"),
        r.body.len()
    )
}

/// A request in full (headers and a body preview), for panic messages.
pub fn describe(r: &Request) -> String {
    let mut out = format!("{} {}\n", r.method, r.path);
    for (k, v) in &r.headers {
        out.push_str(&format!("{k}: {v}\n"));
    }
    out.push_str(&format!("\n{}\n", preview(&r.body)));
    out
}
