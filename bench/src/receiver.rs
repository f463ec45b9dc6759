//! A loopback HTTP/1.1 receiver for the end-to-end scenarios: the `[sink]`
//! of a bench daemon points at it.
//!
//! `std::net::TcpListener` on `127.0.0.1:0`, one thread per connection,
//! keep-alive, `Content-Length` bodies only (what the HTTP sink sends).
//! Each request is answered `200` after an optional fixed delay (a database
//! commit, say). A body is split into NDJSON lines (a `per_record` body is
//! one record: its payload holds no newline); each line is one record.
//!
//! Records are [stamped](stamp) by the bench's producers with their send
//! time (µs since an epoch `Instant` shared with the receiver) and an id, so
//! the receiver computes push→arrival latency per record and, on request,
//! remembers which ids arrived. A record counts as arrived when its request
//! body has been read (before the delay and the answer).
//!
//! A closed *gate* holds every request (after its body was read) until it
//! is opened: the daemon's drains then block on their first batch and a
//! backlog builds up, whose delivery can be timed.

use std::collections::HashMap;
use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;

use super::report::new_histogram;

/// Bytes of a stamp: send time and id, 16 hex digits each.
pub const STAMP_BYTES: usize = 32;
/// How often a blocked connection thread looks at the stop flag.
const POLL: Duration = Duration::from_millis(100);
const HEAD_BYTES_MAX: usize = 64 * 1024;
const BODY_BYTES_MAX: usize = 128 * 1024 * 1024;
const OK_RESPONSE: &[u8] = b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n";

fn put_hex(out: &mut [u8], value: u64) {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    for (i, byte) in out.iter_mut().enumerate() {
        *byte = DIGITS[((value >> (60 - 4 * i)) & 0xf) as usize];
    }
}

fn get_hex(text: &[u8]) -> Option<u64> {
    text.iter().try_fold(0u64, |acc, &b| {
        Some(acc << 4 | (b as char).to_digit(16)? as u64)
    })
}

/// Fills `buf` (at least [`STAMP_BYTES`] long) with a stamped payload: the
/// send time in µs since the shared epoch and the record's id, as hex, then
/// `.` up to the end. No newline, so it is one NDJSON line.
pub fn stamp(buf: &mut [u8], sent_us: u64, id: u64) {
    assert!(
        buf.len() >= STAMP_BYTES,
        "a stamped payload needs {STAMP_BYTES} bytes"
    );
    put_hex(&mut buf[..16], sent_us);
    put_hex(&mut buf[16..32], id);
    buf[STAMP_BYTES..].fill(b'.');
}

/// `(sent_us, id)` of a stamped payload; `None` for any other payload.
pub fn parse_stamp(payload: &[u8]) -> Option<(u64, u64)> {
    if payload.len() < STAMP_BYTES {
        return None;
    }
    Some((get_hex(&payload[..16])?, get_hex(&payload[16..32])?))
}

/// µs since `epoch`.
pub fn micros_since(epoch: Instant) -> u64 {
    epoch.elapsed().as_micros() as u64
}

/// When a record was sent and when it arrived, µs since the epoch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Arrival {
    pub sent_us: u64,
    pub arrived_us: u64,
}

/// What the receiver remembers per record.
struct Tally {
    /// Records sent before this (µs since the epoch) stay out of `latency`.
    measure_from_us: u64,
    /// Push→arrival, ns.
    latency: Histogram<u64>,
    unstamped: u64,
    last_arrival: Option<Instant>,
    /// id → (send, arrival) in µs since the epoch, when ids are kept.
    ids: HashMap<u64, Arrival>,
    duplicates: u64,
}

struct Shared {
    epoch: Instant,
    delay: Duration,
    keep_ids: bool,
    stop: AtomicBool,
    gate_open: Mutex<bool>,
    gate: Condvar,
    requests: AtomicU64,
    records: AtomicU64,
    bad_requests: AtomicU64,
    tally: Mutex<Tally>,
}

impl Shared {
    fn tally(&self) -> MutexGuard<'_, Tally> {
        self.tally.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Blocks while the gate is closed (or until the receiver stops).
    fn pass_gate(&self) {
        let mut open = self.gate_open.lock().unwrap_or_else(|p| p.into_inner());
        while !*open && !self.stop.load(Ordering::Acquire) {
            open = self
                .gate
                .wait_timeout(open, POLL)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
    }

    /// Counts the records of one request body.
    fn arrived(&self, body: &[u8]) {
        let now = Instant::now();
        let now_us = now.duration_since(self.epoch).as_micros() as u64;
        let mut records = 0;
        let mut t = self.tally();
        for line in body.split(|&b| b == b'\n').filter(|l| !l.is_empty()) {
            records += 1;
            let Some((sent_us, id)) = parse_stamp(line) else {
                t.unstamped += 1;
                continue;
            };
            if sent_us >= t.measure_from_us {
                t.latency
                    .saturating_record(now_us.saturating_sub(sent_us).max(1) * 1000);
            }
            if self.keep_ids
                && t.ids
                    .insert(
                        id,
                        Arrival {
                            sent_us,
                            arrived_us: now_us,
                        },
                    )
                    .is_some()
            {
                t.duplicates += 1;
            }
        }
        t.last_arrival = Some(now);
        drop(t);
        self.records.fetch_add(records, Ordering::AcqRel);
        self.requests.fetch_add(1, Ordering::AcqRel);
    }
}

/// The receiver; stopped when dropped.
pub struct Receiver {
    addr: SocketAddr,
    shared: Arc<Shared>,
    accept: Option<JoinHandle<()>>,
}

impl Receiver {
    /// Listens on 127.0.0.1 (a free port). `delay`: how long each request
    /// is held before its `200`; `keep_ids`: remember every record's id.
    pub fn start(epoch: Instant, delay: Duration, keep_ids: bool) -> Result<Receiver, String> {
        let listener = TcpListener::bind("127.0.0.1:0")
            .map_err(|e| format!("receiver: binding 127.0.0.1:0: {e}"))?;
        let addr = listener
            .local_addr()
            .map_err(|e| format!("receiver: {e}"))?;
        let shared = Arc::new(Shared {
            epoch,
            delay,
            keep_ids,
            stop: AtomicBool::new(false),
            gate_open: Mutex::new(true),
            gate: Condvar::new(),
            requests: AtomicU64::new(0),
            records: AtomicU64::new(0),
            bad_requests: AtomicU64::new(0),
            tally: Mutex::new(Tally {
                measure_from_us: 0,
                latency: new_histogram(),
                unstamped: 0,
                last_arrival: None,
                ids: HashMap::new(),
                duplicates: 0,
            }),
        });
        let for_accept = shared.clone();
        let accept = std::thread::Builder::new()
            .name("bench-receiver".into())
            .spawn(move || accept_loop(listener, for_accept))
            .map_err(|e| format!("receiver: starting its thread: {e}"))?;
        Ok(Receiver {
            addr,
            shared,
            accept: Some(accept),
        })
    }

    pub fn url(&self) -> String {
        format!("http://{}/ingest", self.addr)
    }

    /// Requests answered or being answered.
    pub fn requests(&self) -> u64 {
        self.shared.requests.load(Ordering::Acquire)
    }

    /// Records arrived (NDJSON lines, or one per per-record request).
    pub fn records(&self) -> u64 {
        self.shared.records.load(Ordering::Acquire)
    }

    /// Requests that were not understood (answered 4xx, connection closed).
    pub fn bad_requests(&self) -> u64 {
        self.shared.bad_requests.load(Ordering::Acquire)
    }

    pub fn close_gate(&self) {
        *self
            .shared
            .gate_open
            .lock()
            .unwrap_or_else(|p| p.into_inner()) = false;
    }

    pub fn open_gate(&self) {
        *self
            .shared
            .gate_open
            .lock()
            .unwrap_or_else(|p| p.into_inner()) = true;
        self.shared.gate.notify_all();
    }

    /// From now on, only records sent at or after `us` (since the epoch;
    /// at most now) count in the latency; what was counted so far is
    /// forgotten (it arrived, so it was sent, before now).
    pub fn measure_from(&self, us: u64) {
        let mut t = self.shared.tally();
        t.measure_from_us = us;
        t.latency.reset();
    }

    /// Push→arrival latency of the measured records, ns.
    pub fn latency(&self) -> Histogram<u64> {
        self.shared.tally().latency.clone()
    }

    pub fn last_arrival(&self) -> Option<Instant> {
        self.shared.tally().last_arrival
    }

    /// Records whose payload carried no stamp.
    pub fn unstamped(&self) -> u64 {
        self.shared.tally().unstamped
    }

    /// Ids that arrived more than once (with `keep_ids`).
    pub fn duplicates(&self) -> u64 {
        self.shared.tally().duplicates
    }

    /// Every id that arrived, with its send and (last) arrival time (with `keep_ids`).
    pub fn ids(&self) -> HashMap<u64, Arrival> {
        self.shared.tally().ids.clone()
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::Release);
        self.shared.gate.notify_all();
        // Wake the blocking accept.
        let _ = TcpStream::connect_timeout(&self.addr, Duration::from_secs(1));
        if let Some(handle) = self.accept.take() {
            let _ = handle.join();
        }
    }
}

fn accept_loop(listener: TcpListener, shared: Arc<Shared>) {
    for stream in listener.incoming() {
        if shared.stop.load(Ordering::Acquire) {
            return;
        }
        let Ok(stream) = stream else { continue };
        let shared = shared.clone();
        let spawned = std::thread::Builder::new()
            .name("bench-receiver-conn".into())
            .spawn(move || serve(stream, &shared));
        if let Err(e) = spawned {
            eprintln!("bench: receiver: starting a connection thread: {e}");
        }
    }
}

/// Appends what the socket has to `buf`; false at EOF, on an error, or when
/// the receiver stops.
fn fill(stream: &mut TcpStream, buf: &mut Vec<u8>, chunk: &mut [u8], shared: &Shared) -> bool {
    loop {
        match stream.read(chunk) {
            Ok(0) => return false,
            Ok(n) => {
                buf.extend_from_slice(&chunk[..n]);
                return true;
            }
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) =>
            {
                if shared.stop.load(Ordering::Acquire) {
                    return false;
                }
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(_) => return false,
        }
    }
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

/// What the request head says about the body and the connection.
#[derive(Debug, PartialEq)]
struct Head {
    content_length: usize,
    close: bool,
}

/// `Err` with the status line to answer for a request this receiver does
/// not take (chunked bodies, a bad length).
fn parse_head(head: &[u8]) -> Result<Head, &'static str> {
    let text = String::from_utf8_lossy(head);
    let mut parsed = Head {
        content_length: 0,
        close: false,
    };
    for line in text.split("\r\n").skip(1) {
        let Some((name, value)) = line.split_once(':') else {
            continue;
        };
        let (name, value) = (name.trim(), value.trim());
        if name.eq_ignore_ascii_case("content-length") {
            parsed.content_length = value.parse().map_err(|_| "400 Bad Request")?;
        } else if name.eq_ignore_ascii_case("transfer-encoding") {
            return Err("411 Length Required");
        } else if name.eq_ignore_ascii_case("connection") && value.eq_ignore_ascii_case("close") {
            parsed.close = true;
        }
    }
    if parsed.content_length > BODY_BYTES_MAX {
        return Err("413 Content Too Large");
    }
    Ok(parsed)
}

fn refuse(stream: &mut TcpStream, shared: &Shared, status: &str) {
    shared.bad_requests.fetch_add(1, Ordering::AcqRel);
    let _ = stream.write_all(
        format!("HTTP/1.1 {status}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n").as_bytes(),
    );
}

/// One keep-alive connection: requests in order until EOF.
fn serve(mut stream: TcpStream, shared: &Shared) {
    let _ = stream.set_nodelay(true);
    let _ = stream.set_read_timeout(Some(POLL));
    let mut buf: Vec<u8> = Vec::with_capacity(256 * 1024);
    let mut chunk = vec![0u8; 256 * 1024];
    loop {
        let head_end = loop {
            if let Some(p) = find(&buf, b"\r\n\r\n") {
                break p + 4;
            }
            if buf.len() > HEAD_BYTES_MAX {
                return refuse(&mut stream, shared, "431 Request Header Fields Too Large");
            }
            if !fill(&mut stream, &mut buf, &mut chunk, shared) {
                return;
            }
        };
        let head = match parse_head(&buf[..head_end]) {
            Ok(h) => h,
            Err(status) => return refuse(&mut stream, shared, status),
        };
        let end = head_end + head.content_length;
        while buf.len() < end {
            if !fill(&mut stream, &mut buf, &mut chunk, shared) {
                return;
            }
        }
        shared.pass_gate();
        shared.arrived(&buf[head_end..end]);
        if !shared.delay.is_zero() {
            std::thread::sleep(shared.delay);
        }
        if stream.write_all(OK_RESPONSE).is_err() {
            return;
        }
        buf.drain(..end);
        if head.close {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::BufRead;

    #[test]
    fn stamps_round_trip() {
        let mut buf = [0u8; 40];
        stamp(&mut buf, 123_456_789, 0xabc);
        assert_eq!(&buf[..32], b"00000000075bcd150000000000000abc");
        assert_eq!(&buf[32..], b"........");
        assert_eq!(parse_stamp(&buf), Some((123_456_789, 0xabc)));
        assert_eq!(parse_stamp(b"spill"), None);
        assert_eq!(parse_stamp(&[b'z'; 40]), None);
    }

    #[test]
    fn heads() {
        let h =
            parse_head(b"POST /ingest HTTP/1.1\r\ncontent-length: 12\r\nConnection: close\r\n\r\n")
                .unwrap();
        assert_eq!(
            h,
            Head {
                content_length: 12,
                close: true
            }
        );
        assert_eq!(
            parse_head(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n").unwrap(),
            Head {
                content_length: 0,
                close: false
            }
        );
        assert!(parse_head(b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n").is_err());
    }

    fn post(stream: &mut TcpStream, body: &[u8]) {
        let head = format!(
            "POST /ingest HTTP/1.1\r\nHost: x\r\nContent-Length: {}\r\n\r\n",
            body.len()
        );
        stream.write_all(head.as_bytes()).unwrap();
        stream.write_all(body).unwrap();
    }

    #[test]
    fn counts_records_over_keep_alive() {
        let epoch = Instant::now();
        let r = Receiver::start(epoch, Duration::ZERO, true).unwrap();
        let mut stream = TcpStream::connect(r.addr).unwrap();
        let mut reader = io::BufReader::new(stream.try_clone().unwrap());
        let mut body = Vec::new();
        for id in 0..3 {
            let mut rec = [0u8; 64];
            stamp(&mut rec, micros_since(epoch), id);
            body.extend_from_slice(&rec);
            body.push(b'\n');
        }
        post(&mut stream, &body);
        post(&mut stream, b"spill");
        for _ in 0..2 {
            let mut line = String::new();
            reader.read_line(&mut line).unwrap();
            assert_eq!(line, "HTTP/1.1 200 OK\r\n");
            reader.read_line(&mut line).unwrap();
            line.clear();
            reader.read_line(&mut line).unwrap();
            assert_eq!(line, "\r\n");
        }
        assert_eq!((r.requests(), r.records(), r.unstamped()), (2, 4, 1));
        assert_eq!(r.latency().len(), 3);
        assert_eq!(r.ids().len(), 3);
        assert_eq!(r.duplicates(), 0);
    }

    #[test]
    fn a_closed_gate_holds_requests() {
        let r = Receiver::start(Instant::now(), Duration::ZERO, false).unwrap();
        r.close_gate();
        let mut stream = TcpStream::connect(r.addr).unwrap();
        post(&mut stream, b"a\nb\n");
        std::thread::sleep(Duration::from_millis(50));
        assert_eq!(r.records(), 0);
        r.open_gate();
        let mut status = [0u8; 15];
        stream.read_exact(&mut status).unwrap();
        assert_eq!(&status, b"HTTP/1.1 200 OK");
        assert_eq!((r.requests(), r.records()), (1, 2));
    }
}
