//! `ingest_http_door`: the HTTP ingest door (`[server.http]`, in the clear
//! on loopback) against the Unix socket, on one daemon in one run, the
//! order alternating by round:
//!
//! - 8 keep-alive connections each POSTing NDJSON bodies of 256 records at
//!   Sync, against the socket's `batch_durable_n256` (one connection, one
//!   PushBatch of 256 at a time): the rate ratio (target ≥ 0.40);
//! - one connection POSTing one record at a time at Sync, against the
//!   socket's serial Sync push: both p50s.
//!
//! The client is a minimal HTTP/1.1 writer and reader over a std socket
//! (one write per request, the answer read by its Content-Length), so the
//! figure is the daemon's, not a client library's.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::{Arc, Barrier};
use std::thread;
use std::time::Duration;

use spillway_client::Tier;

use super::context::Ctx;
use super::daemon::Overrides;
use super::load::{self, LoadError, Sample, PAYLOAD};
use super::report::ReportRow;

/// Concurrent keep-alive connections of the batch load.
const CONNECTIONS: usize = 8;
/// Records per body of the batch load.
const RECORDS: usize = 256;

/// One keep-alive connection to the door.
struct HttpConn {
    writer: TcpStream,
    reader: BufReader<TcpStream>,
    head: String,
}

impl HttpConn {
    fn connect(addr: SocketAddr) -> Result<HttpConn, String> {
        let s = TcpStream::connect(addr).map_err(|e| format!("connecting to {addr}: {e}"))?;
        s.set_nodelay(true).map_err(|e| e.to_string())?;
        s.set_read_timeout(Some(Duration::from_secs(60)))
            .map_err(|e| e.to_string())?;
        Ok(HttpConn {
            reader: BufReader::new(s.try_clone().map_err(|e| e.to_string())?),
            writer: s,
            head: String::new(),
        })
    }

    /// POST `body` at Sync; true on a 200, false on a 429/503 (retryable).
    fn post(&mut self, body: &[u8]) -> Result<bool, LoadError> {
        let mut request = format!(
            "POST /v1/records?tier=sync HTTP/1.1\r\nHost: bench\r\nContent-Length: {}\r\n\r\n",
            body.len()
        )
        .into_bytes();
        request.extend_from_slice(body);
        self.writer
            .write_all(&request)
            .map_err(|e| LoadError::Failed(format!("HTTP door: {e}")))?;
        let status = self
            .read_answer()
            .map_err(|e| LoadError::Failed(format!("HTTP door: {e}")))?;
        match status {
            200 => Ok(true),
            429 | 503 => Ok(false),
            other => Err(LoadError::Failed(format!("HTTP door answered {other}"))),
        }
    }

    fn read_answer(&mut self) -> std::io::Result<u16> {
        self.head.clear();
        self.reader.read_line(&mut self.head)?;
        let status = self
            .head
            .split_whitespace()
            .nth(1)
            .and_then(|c| c.parse().ok())
            .ok_or_else(|| std::io::Error::other(format!("not a status line: {:?}", self.head)))?;
        let mut len = 0usize;
        loop {
            self.head.clear();
            self.reader.read_line(&mut self.head)?;
            let line = self.head.trim_end();
            if line.is_empty() {
                break;
            }
            if let Some((n, v)) = line.split_once(':') {
                if n.eq_ignore_ascii_case("content-length") {
                    len = v.trim().parse().unwrap_or(0);
                }
            }
        }
        let mut body = vec![0; len];
        self.reader.read_exact(&mut body)?;
        Ok(status)
    }
}

/// Warm-up, then POST `body` back to back for the plan's duration.
fn serial_posts(
    addr: SocketAddr,
    body: &[u8],
    records: u64,
    ctx: &Ctx,
) -> Result<Sample, LoadError> {
    let mut conn = HttpConn::connect(addr)?;
    for _ in 0..ctx.plan.warmup {
        conn.post(body)?;
    }
    load::measure(ctx.plan.duration, records, || conn.post(body))
}

/// `CONNECTIONS` threads of [`serial_posts`], started together.
fn concurrent_posts(addr: SocketAddr, body: &[u8], ctx: &Ctx) -> Result<Sample, LoadError> {
    let barrier = Arc::new(Barrier::new(CONNECTIONS));
    let plan = ctx.plan;
    let handles: Vec<_> = (0..CONNECTIONS)
        .map(|_| {
            let (barrier, body) = (barrier.clone(), body.to_vec());
            thread::spawn(move || -> Result<Sample, LoadError> {
                let mut conn = HttpConn::connect(addr)?;
                for _ in 0..plan.warmup.min(50) {
                    conn.post(&body)?;
                }
                barrier.wait();
                load::measure(plan.duration, RECORDS as u64, || conn.post(&body))
            })
        })
        .collect();
    let mut total: Option<Sample> = None;
    for h in handles {
        let s = h
            .join()
            .map_err(|_| LoadError::Failed("an HTTP load thread panicked".into()))??;
        match &mut total {
            None => total = Some(s),
            Some(t) => t.merge(s),
        }
    }
    Ok(total.expect("at least one connection"))
}

pub fn ingest_http_door(ctx: &Ctx) -> Result<Vec<ReportRow>, LoadError> {
    let launcher = super::e2e::launcher(ctx)?;
    let addr = super::e2e::free_loopback_addr();
    let daemon = launcher
        .start(
            "http-door",
            &Overrides {
                http_listen: Some(addr.to_string()),
                ..Overrides::default()
            },
        )
        .map_err(|e| LoadError::Failed(format!("starting the HTTP door daemon: {e}")))?;
    let mut ndjson = Vec::with_capacity(RECORDS * (PAYLOAD.len() + 1));
    for _ in 0..RECORDS {
        ndjson.extend_from_slice(PAYLOAD);
        ndjson.push(b'\n');
    }
    let socket = daemon.socket().to_path_buf();
    let unix_batch = || load::serial_batch(&socket, Tier::Sync, RECORDS, ctx.plan);
    let http_batch = || concurrent_posts(addr, &ndjson, ctx);
    let unix_serial = || load::serial_push(&socket, Tier::Sync, ctx.plan);
    let http_serial = || serial_posts(addr, PAYLOAD, 1, ctx);
    let (hb, ub, hs, us) = if ctx.round.is_multiple_of(2) {
        let hb = http_batch()?;
        let ub = unix_batch()?;
        let hs = http_serial()?;
        (hb, ub, hs, unix_serial()?)
    } else {
        let ub = unix_batch()?;
        let hb = http_batch()?;
        let us = unix_serial()?;
        (hb, ub, http_serial()?, us)
    };
    let p50_us = |s: &Sample| s.latency.value_at_quantile(0.5) as f64 / 1000.0;
    let mut o = hb.to_outcome("ingest_http_door");
    o.set("unix_batch256_records_per_s", ub.rate())
        .set("ratio_to_unix_batch256", hb.rate() / ub.rate().max(1e-9))
        .set("http_serial_p50_us", p50_us(&hs))
        .set("unix_serial_p50_us", p50_us(&us))
        .set("http_serial_records_per_s", hs.rate())
        .set("unix_serial_records_per_s", us.rate());
    super::e2e::stop_daemon(daemon, "http-door")?;
    Ok(vec![o])
}
