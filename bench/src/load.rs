//! The load generators behind the scenarios: serial pushes, serial batches,
//! a pipelined window, and many concurrent connections. Each warms up, then
//! measures for a fixed duration, timing every request with `Instant` into
//! an hdrhistogram (ns).

use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use spillway_client::{Client, Error, NackReason, Pipeline, Tier};

use super::report::{new_histogram, record, Kind, ReportRow, RATE};

/// The record every scenario pushes: 5 bytes, like weir's load suite.
pub const PAYLOAD: &[u8] = b"spill";

/// A client call that takes longer than this is a hung daemon, not a figure.
const CLIENT_TIMEOUT: Duration = Duration::from_secs(60);

/// Why a measurement stopped early.
#[derive(Debug)]
pub enum LoadError {
    /// The daemon does not speak a request the workload needs (a weir daemon
    /// answers PushBatch with an UnknownMessage nack).
    Unsupported(String),
    Failed(String),
}

impl From<String> for LoadError {
    fn from(message: String) -> LoadError {
        LoadError::Failed(message)
    }
}

impl std::fmt::Display for LoadError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LoadError::Unsupported(m) | LoadError::Failed(m) => f.write_str(m),
        }
    }
}

/// How long to measure and how much to warm up first.
#[derive(Debug, Clone, Copy)]
pub struct Plan {
    pub duration: Duration,
    /// Requests sent (and answered) before measuring starts.
    pub warmup: usize,
}

/// What one measurement saw.
#[derive(Debug)]
pub struct Sample {
    /// Records acked while measuring.
    pub records: u64,
    pub elapsed: Duration,
    /// Per-request latency (a batch is one request), ns.
    pub latency: Histogram<u64>,
    /// Retryable nacks (Overloaded, InternalError): not counted as records.
    pub nacks: u64,
    /// Connecting and warming up, before the measurement (serial loads; the
    /// longest, after [`Sample::append`]).
    pub warmup: Duration,
}

impl Sample {
    fn new() -> Sample {
        Sample {
            records: 0,
            elapsed: Duration::ZERO,
            latency: new_histogram(),
            nacks: 0,
            warmup: Duration::ZERO,
        }
    }

    pub fn rate(&self) -> f64 {
        self.records as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }

    /// Combines concurrent measurements: counts add up, elapsed is the longest.
    pub(crate) fn merge(&mut self, other: Sample) {
        self.records += other.records;
        self.elapsed = self.elapsed.max(other.elapsed);
        self.latency
            .add(&other.latency)
            .expect("histograms with the same bounds");
        self.nacks += other.nacks;
    }

    /// Adds a later measurement of the same load: counts and durations add up.
    pub fn append(&mut self, other: Sample) {
        self.records += other.records;
        self.elapsed += other.elapsed;
        self.latency
            .add(&other.latency)
            .expect("histograms with the same bounds");
        self.nacks += other.nacks;
        self.warmup = self.warmup.max(other.warmup);
    }

    /// The scenario outcome: rate, latency percentiles (µs), counts.
    pub fn to_outcome(&self, name: &str) -> ReportRow {
        let mut o = ReportRow::new(name, Kind::Scenario);
        o.set(RATE, self.rate())
            .set("records", self.records as f64)
            .set("elapsed_s", self.elapsed.as_secs_f64())
            .set("nacks", self.nacks as f64)
            .set_latency("", &self.latency);
        o
    }
}

pub(crate) fn connect(socket: &Path) -> Result<Client, String> {
    let mut client = Client::connect(socket).map_err(|e| e.to_string())?;
    client
        .set_timeout(Some(CLIENT_TIMEOUT))
        .map_err(|e| e.to_string())?;
    Ok(client)
}

/// `Ok(true)` acked, `Ok(false)` a retryable nack, `Err` ends the run.
fn acked<T>(result: Result<T, Error>) -> Result<bool, LoadError> {
    match result {
        Ok(_) => Ok(true),
        Err(e) if e.is_retryable() => Ok(false),
        Err(e) if e.nack_reason() == Some(NackReason::UnknownMessage) => Err(
            LoadError::Unsupported(format!("the daemon does not support this request ({e})")),
        ),
        Err(e) => Err(LoadError::Failed(e.to_string())),
    }
}

/// Calls `op` until `duration` has passed, timing each call.
pub(crate) fn measure(
    duration: Duration,
    per_request: u64,
    mut op: impl FnMut() -> Result<bool, LoadError>,
) -> Result<Sample, LoadError> {
    let mut sample = Sample::new();
    let start = Instant::now();
    let deadline = start + duration;
    let mut now = start;
    while now < deadline {
        let sent = now;
        let ok = op()?;
        now = Instant::now();
        if ok {
            record(&mut sample.latency, now - sent);
            sample.records += per_request;
        } else {
            sample.nacks += 1;
        }
    }
    sample.elapsed = now - start;
    Ok(sample)
}

/// Warm-up then measurement of one serial request type on one connection.
fn serial(
    socket: &Path,
    plan: Plan,
    per_request: u64,
    op: impl FnMut(&mut Client) -> Result<(), Error>,
) -> Result<Sample, LoadError> {
    let started = Instant::now();
    let client = connect(socket)?;
    serial_on(client, started, plan, per_request, op)
}

/// [`serial`] on a client already connected (`started`: when connecting
/// began, counted in the warm-up).
pub fn serial_on(
    mut client: Client,
    started: Instant,
    plan: Plan,
    per_request: u64,
    mut op: impl FnMut(&mut Client) -> Result<(), Error>,
) -> Result<Sample, LoadError> {
    for _ in 0..plan.warmup {
        acked(op(&mut client))?;
    }
    let warmup = started.elapsed();
    let mut sample = measure(plan.duration, per_request, || acked(op(&mut client)))?;
    sample.warmup = warmup;
    Ok(sample)
}

/// One connection, one Push of [`PAYLOAD`] at a time.
pub fn serial_push(socket: &Path, tier: Tier, plan: Plan) -> Result<Sample, LoadError> {
    serial_push_of(socket, tier, PAYLOAD, plan)
}

/// One connection, one Push of `payload` at a time.
pub fn serial_push_of(
    socket: &Path,
    tier: Tier,
    payload: &[u8],
    plan: Plan,
) -> Result<Sample, LoadError> {
    serial(socket, plan, 1, |c| c.push(tier, payload))
}

/// One connection, one PushBatch of `n` × [`PAYLOAD`] at a time.
pub fn serial_batch(socket: &Path, tier: Tier, n: usize, plan: Plan) -> Result<Sample, LoadError> {
    serial_batch_of(socket, tier, PAYLOAD, n, plan)
}

/// One connection, one PushBatch of `n` × `payload` at a time.
pub fn serial_batch_of(
    socket: &Path,
    tier: Tier,
    payload: &[u8],
    n: usize,
    plan: Plan,
) -> Result<Sample, LoadError> {
    let records = vec![payload; n];
    serial(socket, plan, n as u64, |c| {
        c.push_batch(tier, &records).map(drop)
    })
}

/// A pipeline kept between `window - refill` and `window` requests deep;
/// remembers when each request was queued. Each request is a Push of
/// `records[0]`, or with `batch` a PushBatch of all of `records`.
struct Window<'a, 'r> {
    pipe: Pipeline<'a>,
    queued_at: VecDeque<Instant>,
    tier: Tier,
    records: &'r [&'r [u8]],
    batch: bool,
    window: usize,
    refill: usize,
}

impl Window<'_, '_> {
    /// Tops the window up in one write once `refill` slots are free.
    fn top_up(&mut self) -> Result<(), LoadError> {
        if self.pipe.outstanding() + self.refill > self.window {
            return Ok(());
        }
        while self.pipe.outstanding() < self.window {
            self.queued_at.push_back(Instant::now());
            let queued = if self.batch {
                self.pipe.push_batch(self.tier, self.records)
            } else {
                self.pipe.push(self.tier, self.records[0])
            };
            queued.map_err(|e| e.to_string())?;
        }
        Ok(self.pipe.flush().map_err(|e| e.to_string())?)
    }

    /// The next answer: its latency if acked, `None` after a retryable nack.
    fn recv(&mut self) -> Result<Option<Duration>, LoadError> {
        let result = self.pipe.recv();
        let queued = self
            .queued_at
            .pop_front()
            .expect("an answer for a queued request");
        Ok(acked(result)?.then(|| queued.elapsed()))
    }

    fn drain(&mut self) -> Result<(), LoadError> {
        while self.pipe.outstanding() > 0 {
            self.recv()?;
        }
        Ok(())
    }
}

/// One connection, Pushes of [`PAYLOAD`] pipelined `window` deep
/// (refilled in 1/16ths).
pub fn pipelined_push(
    socket: &Path,
    tier: Tier,
    window: usize,
    plan: Plan,
) -> Result<Sample, LoadError> {
    pipelined_of(socket, tier, (&[PAYLOAD], false), window, plan)
}

/// One connection, PushBatches of `n` × `payload` pipelined `window` deep.
pub fn pipelined_batch_of(
    socket: &Path,
    tier: Tier,
    payload: &[u8],
    n: usize,
    window: usize,
    plan: Plan,
) -> Result<Sample, LoadError> {
    pipelined_of(socket, tier, (&vec![payload; n], true), window, plan)
}

/// The records of each request, and whether it is a PushBatch (else a
/// Push of the first).
fn pipelined_of(
    socket: &Path,
    tier: Tier,
    (records, batch): (&[&[u8]], bool),
    window: usize,
    plan: Plan,
) -> Result<Sample, LoadError> {
    let mut client = connect(socket)?;
    let pipe = client.pipeline(window);
    let per_request = if batch { records.len() as u64 } else { 1 };
    let mut w = Window {
        pipe,
        queued_at: VecDeque::new(),
        tier,
        records,
        batch,
        window,
        refill: (window / 16).max(1),
    };
    for _ in 0..plan.warmup.max(window) {
        w.top_up()?;
        w.recv()?;
    }
    w.drain()?;
    let mut sample = Sample::new();
    let start = Instant::now();
    while start.elapsed() < plan.duration {
        w.top_up()?;
        match w.recv()? {
            Some(latency) => {
                record(&mut sample.latency, latency);
                sample.records += per_request;
            }
            None => sample.nacks += 1,
        }
    }
    sample.elapsed = start.elapsed();
    w.drain()?;
    Ok(sample)
}

/// One member of a herd: connect and warm up, wait for the others, measure.
fn herd_member(
    socket: &Path,
    tier: Tier,
    plan: Plan,
    barrier: &Barrier,
) -> Result<Sample, LoadError> {
    let warmup = (plan.warmup / 10).max(10);
    let ready = connect(socket).map_err(LoadError::from).and_then(|mut c| {
        (0..warmup).try_for_each(|_| acked(c.push(tier, PAYLOAD)).map(drop))?;
        Ok(c)
    });
    // Everyone reaches the barrier, even after a failure, so nobody waits forever.
    barrier.wait();
    let mut client = ready?;
    measure(plan.duration, 1, || acked(client.push(tier, PAYLOAD)))
}

/// `connections` threads, each with its own connection pushing serially.
pub fn herd(
    socket: &Path,
    tier: Tier,
    connections: usize,
    plan: Plan,
) -> Result<Sample, LoadError> {
    let barrier = Arc::new(Barrier::new(connections));
    let handles: Vec<_> = (0..connections)
        .map(|_| {
            let (barrier, socket): (_, PathBuf) = (barrier.clone(), socket.to_path_buf());
            std::thread::spawn(move || herd_member(&socket, tier, plan, &barrier))
        })
        .collect();
    let mut total = Sample::new();
    let mut first_error = None;
    for handle in handles {
        match handle.join() {
            Ok(Ok(sample)) => total.merge(sample),
            Ok(Err(e)) => first_error = first_error.or(Some(e)),
            Err(_) => {
                first_error =
                    first_error.or(Some(LoadError::Failed("a herd thread panicked".into())))
            }
        }
    }
    first_error.map_or(Ok(total), Err)
}
