//! The delivery tests' HTTP receiver: spillway-test-http's [`Receiver`]
//! with a [`Behaviour`] the test can change at any moment (a status, an
//! optional `Retry-After`, a delay before answering, and "answer 400 when
//! the body contains X"), and an understanding of what spillway's HTTP
//! sink sends.
//!
//! The receiver records every request (method, path, headers, body,
//! arrival time, connection, the status it got). On top of those this
//! decodes the sink's requests into [`Received`] records with their
//! identity `(shard, seq)`, taken from the `Spillway-Shard`,
//! `Spillway-Seq-First` and `Spillway-Seqs` headers, and offers waits
//! ("until these payloads were accepted") that panic with a summary of
//! what did arrive.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use spillway_test_http::{Receiver, Reply};

/// One request as the receiver saw it.
pub use spillway_test_http::Request;

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
    /// Answer this status (a 5xx: try again) to every request whose body
    /// contains these bytes, for ever: a poison record.
    pub fail_containing: Option<(Vec<u8>, u16)>,
    /// Answer 429 at once to a request that finds this many being
    /// delayed already (a downstream that takes so many at a time).
    pub cap_in_flight: Option<usize>,
    /// The next request whose body contains these bytes is answered
    /// after this long instead (once).
    pub hold_next: Option<(Vec<u8>, Duration)>,
    /// When each request being delayed will be answered.
    answering_until: Vec<Instant>,
}

impl Default for Behaviour {
    fn default() -> Self {
        Behaviour {
            status: 200,
            retry_after: None,
            delay: Duration::ZERO,
            reject_containing: None,
            fail_containing: None,
            cap_in_flight: None,
            hold_next: None,
            answering_until: Vec::new(),
        }
    }
}

impl Behaviour {
    /// The answer to `request` (decided when it arrives, sent after the
    /// delay).
    fn reply(&mut self, request: &Request) -> Reply {
        let now = Instant::now();
        self.answering_until.retain(|t| *t > now);
        if self
            .cap_in_flight
            .is_some_and(|cap| self.answering_until.len() >= cap)
        {
            return Reply::status(429)
                .header("Content-Type", "text/plain")
                .body(b"test receiver: too many requests at once");
        }
        let contains = |needle: &[u8]| {
            !needle.is_empty() && request.body.windows(needle.len()).any(|w| w == needle)
        };
        let delay = match self.hold_next.take() {
            Some((needle, hold)) if contains(&needle) => hold,
            other => {
                self.hold_next = other;
                self.delay
            }
        };
        self.answering_until.push(now + delay);
        let rejected = self.reject_containing.as_deref().is_some_and(|needle| {
            !needle.is_empty() && request.body.windows(needle.len()).any(|w| w == needle)
        });
        let failed = self
            .fail_containing
            .as_ref()
            .filter(|(needle, _)| contains(needle))
            .map(|(_, status)| *status);
        let (status, text) = if rejected {
            (
                400,
                "rejected by the test receiver: poisoned record".to_string(),
            )
        } else if let Some(status) = failed {
            (
                status,
                format!("test receiver answers {status} to a poison record"),
            )
        } else if (200..300).contains(&self.status) {
            (self.status, String::new())
        } else {
            (
                self.status,
                format!("test receiver answers {}", self.status),
            )
        };
        let mut reply = Reply::status(status)
            .header("Content-Type", "text/plain")
            .body(text.as_bytes())
            .after(delay);
        if !(200..300).contains(&status) {
            if let Some(retry_after) = &self.retry_after {
                reply = reply.header("Retry-After", retry_after);
            }
        }
        reply
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

/// The running receiver. Dropping it stops the server and closes its
/// connections.
pub struct HttpReceiver {
    receiver: Receiver,
    behaviour: Arc<Mutex<Behaviour>>,
}

impl HttpReceiver {
    /// Start a receiver answering 200 at once.
    pub fn start() -> HttpReceiver {
        HttpReceiver::with(Behaviour::default())
    }

    pub fn with(behaviour: Behaviour) -> HttpReceiver {
        let behaviour = Arc::new(Mutex::new(behaviour));
        let for_replies = behaviour.clone();
        let receiver =
            Receiver::start(move |request: &Request| for_replies.lock().unwrap().reply(request));
        HttpReceiver {
            receiver,
            behaviour,
        }
    }

    /// `http://127.0.0.1:PORT/ingest`
    pub fn url(&self) -> String {
        self.receiver.url("/ingest")
    }

    pub fn addr(&self) -> SocketAddr {
        self.receiver.addr()
    }

    pub fn set_status(&self, status: u16) {
        self.behaviour.lock().unwrap().status = status;
    }

    pub fn set_retry_after(&self, value: Option<&str>) {
        self.behaviour.lock().unwrap().retry_after = value.map(str::to_string);
    }

    pub fn set_delay(&self, delay: Duration) {
        self.behaviour.lock().unwrap().delay = delay;
    }

    pub fn reject_containing(&self, needle: Option<&[u8]>) {
        self.behaviour.lock().unwrap().reject_containing = needle.map(<[u8]>::to_vec);
    }

    /// Answer `status` to every request holding `needle`, for ever
    /// (`None`: stop).
    pub fn fail_containing(&self, rule: Option<(&[u8], u16)>) {
        self.behaviour.lock().unwrap().fail_containing = rule.map(|(n, s)| (n.to_vec(), s));
    }

    /// Answer 429 to requests past `cap` at once (`None`: take them all).
    pub fn set_cap_in_flight(&self, cap: Option<usize>) {
        self.behaviour.lock().unwrap().cap_in_flight = cap;
    }

    /// Answer the next request containing `needle` only after `hold`.
    pub fn hold_next(&self, needle: &[u8], hold: Duration) {
        self.behaviour.lock().unwrap().hold_next = Some((needle.to_vec(), hold));
    }

    /// The most requests it was answering at once so far.
    pub fn in_flight_max(&self) -> usize {
        self.receiver.in_flight_max()
    }

    /// TCP connections accepted so far.
    pub fn connections(&self) -> usize {
        self.receiver.connections()
    }

    /// Every request so far, in arrival order.
    pub fn requests(&self) -> Vec<Request> {
        self.receiver.requests()
    }

    pub fn request_count(&self) -> usize {
        self.receiver.request_count() as usize
    }

    /// Requests read but not answered yet (being delayed).
    pub fn in_flight(&self) -> usize {
        self.receiver.in_flight()
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
        out.push_str(&format!("{k}: {}\n", String::from_utf8_lossy(v.as_bytes())));
    }
    out.push_str(&format!("\n{}\n", preview(&r.body)));
    out
}
