//! The loopback HTTP receiver for the end-to-end scenarios: the `[sink]`
//! of a bench daemon points at it.
//!
//! A [`spillway_test_http::Receiver`] (hyper on one thread of its own, on
//! `127.0.0.1:0`) that keeps no requests: each is answered `200` after an
//! optional fixed delay (a database commit, say), and its body is split
//! into NDJSON lines (a `per_record` body is one record: its payload holds
//! no newline); each line is one record.
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
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use spillway_test_http::{Reply, Request};

use super::report::new_histogram;

/// Bytes of a stamp: send time and id, 16 hex digits each.
pub const STAMP_BYTES: usize = 32;

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

/// What the handler (on the receiver's thread) and the scenario share.
struct Shared {
    epoch: Instant,
    delay: Duration,
    keep_ids: bool,
    records: AtomicU64,
    tally: Mutex<Tally>,
}

impl Shared {
    fn tally(&self) -> MutexGuard<'_, Tally> {
        self.tally.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Counts the records of one request body.
    fn arrived(&self, request: &Request) {
        let now_us = request.at.duration_since(self.epoch).as_micros() as u64;
        let mut records = 0;
        let mut t = self.tally();
        for line in request
            .body
            .split(|&b| b == b'\n')
            .filter(|l| !l.is_empty())
        {
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
        t.last_arrival = Some(request.at);
        drop(t);
        self.records.fetch_add(records, Ordering::AcqRel);
    }
}

/// The receiver; stopped when dropped.
pub struct Receiver {
    http: spillway_test_http::Receiver,
    shared: Arc<Shared>,
}

impl Receiver {
    /// Listens on 127.0.0.1 (a free port). `delay`: how long each request
    /// is held before its `200`; `keep_ids`: remember every record's id.
    pub fn start(epoch: Instant, delay: Duration, keep_ids: bool) -> Result<Receiver, String> {
        let shared = Arc::new(Shared {
            epoch,
            delay,
            keep_ids,
            records: AtomicU64::new(0),
            tally: Mutex::new(Tally {
                measure_from_us: 0,
                latency: new_histogram(),
                unstamped: 0,
                last_arrival: None,
                ids: HashMap::new(),
                duplicates: 0,
            }),
        });
        let for_handler = shared.clone();
        let http = spillway_test_http::Receiver::builder()
            .keep_requests(false)
            .start(move |request: &Request| {
                for_handler.arrived(request);
                Reply::status(200).after(for_handler.delay)
            })
            .map_err(|e| format!("receiver: starting on 127.0.0.1:0: {e}"))?;
        Ok(Receiver { http, shared })
    }

    pub fn url(&self) -> String {
        self.http.url("/ingest")
    }

    /// Requests answered or being answered.
    pub fn requests(&self) -> u64 {
        self.http.request_count()
    }

    /// Records arrived (NDJSON lines, or one per per-record request).
    pub fn records(&self) -> u64 {
        self.shared.records.load(Ordering::Acquire)
    }

    /// Requests that were not understood (answered 4xx, connection closed).
    pub fn bad_requests(&self) -> u64 {
        self.http.refused()
    }

    pub fn close_gate(&self) {
        self.http.close_gate();
    }

    pub fn open_gate(&self) {
        self.http.open_gate();
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{self, BufRead, Read, Write};
    use std::net::TcpStream;

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
    fn closes_when_asked_and_counts_what_it_cannot_parse() {
        let r = Receiver::start(Instant::now(), Duration::ZERO, false).unwrap();
        let mut stream = TcpStream::connect(r.http.addr()).unwrap();
        stream
            .write_all(b"POST /ingest HTTP/1.1\r\ncontent-length: 12\r\nConnection: close\r\n\r\nspill\nspill\n")
            .unwrap();
        let mut reply = String::new();
        stream.read_to_string(&mut reply).unwrap();
        assert!(reply.starts_with("HTTP/1.1 200 OK\r\n"), "{reply}");
        assert_eq!((r.requests(), r.records(), r.bad_requests()), (1, 2, 0));

        let mut stream = TcpStream::connect(r.http.addr()).unwrap();
        stream
            .write_all(b"POST /ingest HTTP/1.1\r\nContent-Length: twelve\r\n\r\n")
            .unwrap();
        reply.clear();
        stream.read_to_string(&mut reply).unwrap();
        assert!(reply.starts_with("HTTP/1.1 400 Bad Request\r\n"), "{reply}");
        // Counted once the server gave the connection up, just after closing it.
        let deadline = Instant::now() + Duration::from_secs(5);
        while r.bad_requests() == 0 && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
        assert_eq!((r.requests(), r.bad_requests()), (1, 1));
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
        let mut stream = TcpStream::connect(r.http.addr()).unwrap();
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
        let mut stream = TcpStream::connect(r.http.addr()).unwrap();
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
