//! Producers of [stamped](super::receiver::stamp) records for the
//! end-to-end scenarios: each record carries its send time and a unique id
//! (`producer << 40 | n`), so the receiver can time push→arrival and tell
//! which records arrived.
//!
//! - [`paced`]: one pipelined connection sending at a fixed rate until told
//!   to stop, counting acks as they come (and optionally their times and
//!   each record's ack latency).
//! - [`push_all`]: one pipelined connection sending a fixed number of
//!   records as fast as the daemon takes them, one per Push or several per
//!   PushBatch.

use std::collections::VecDeque;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use spillway_client::{Client, Error, NackReason, Tier};

use super::load::LoadError;
use super::receiver::{micros_since, stamp};
use super::report::{new_histogram, record};

/// A client call that takes longer than this is a hung daemon, not a figure.
const CLIENT_TIMEOUT: Duration = Duration::from_secs(60);
/// Bits of a record id below the producer number.
const PRODUCER_SHIFT: u32 = 40;

/// The id of record `n` of `producer`.
pub fn record_id(producer: u64, n: u64) -> u64 {
    producer << PRODUCER_SHIFT | n
}

fn connect(socket: &Path) -> Result<Client, LoadError> {
    let mut client = Client::connect(socket).map_err(|e| LoadError::Failed(e.to_string()))?;
    client
        .set_timeout(Some(CLIENT_TIMEOUT))
        .map_err(|e| LoadError::Failed(e.to_string()))?;
    Ok(client)
}

/// One paced producer.
#[derive(Debug, Clone, Copy)]
pub struct Pace {
    pub producer: u64,
    /// Records per second of this producer.
    pub rate: f64,
    /// Payload bytes (at least the stamp's 32).
    pub size: usize,
    /// Most requests in flight.
    pub window: usize,
    pub tier: Tier,
    /// Keep the time of every ack (µs since the epoch).
    pub ack_times: bool,
    /// Time the ack of every record sent at or after this (µs since the
    /// epoch) into [`Sent::ack_latency`]; `None`: time none.
    pub latency_from_us: Option<u64>,
}

/// What a producer saw.
#[derive(Debug)]
pub struct Sent {
    /// Records sent: ids `record_id(producer, 0..sent)`.
    pub sent: u64,
    pub acked: u64,
    pub overloaded: u64,
    /// Other retryable nacks (InternalError).
    pub other_nacks: u64,
    /// Ids of the records that were nacked (never stored).
    pub nacked_ids: Vec<u64>,
    /// µs since the epoch of each ack, in order (with `Pace::ack_times`).
    pub ack_times_us: Vec<u64>,
    /// Send → ack of each acked record, ns (with `Pace::latency_from_us`;
    /// the send time is when the record was encoded for the socket).
    pub ack_latency: Histogram<u64>,
}

impl Default for Sent {
    fn default() -> Sent {
        Sent {
            sent: 0,
            acked: 0,
            overloaded: 0,
            other_nacks: 0,
            nacked_ids: Vec::new(),
            ack_times_us: Vec::new(),
            ack_latency: new_histogram(),
        }
    }
}

impl Sent {
    pub fn merge(&mut self, other: Sent) {
        self.sent += other.sent;
        self.acked += other.acked;
        self.overloaded += other.overloaded;
        self.other_nacks += other.other_nacks;
        self.nacked_ids.extend(other.nacked_ids);
        self.ack_times_us.extend(other.ack_times_us);
        self.ack_latency
            .add(&other.ack_latency)
            .expect("histograms of the same bounds merge");
    }

    /// Books the answer to record `id`.
    fn answer<T>(
        &mut self,
        id: u64,
        result: Result<T, Error>,
        epoch: Instant,
        keep_time: bool,
        acked: &AtomicU64,
        per_request: u64,
    ) -> Result<(), LoadError> {
        match result {
            Ok(_) => {
                self.acked += per_request;
                acked.fetch_add(per_request, Ordering::AcqRel);
                if keep_time {
                    self.ack_times_us.push(micros_since(epoch));
                }
                Ok(())
            }
            Err(e) if e.is_retryable() => {
                if e.nack_reason() == Some(NackReason::Overloaded) {
                    self.overloaded += per_request;
                } else {
                    self.other_nacks += per_request;
                }
                self.nacked_ids.extend(id..id + per_request);
                Ok(())
            }
            Err(e) if e.nack_reason() == Some(NackReason::UnknownMessage) => Err(
                LoadError::Unsupported(format!("the daemon does not support this request ({e})")),
            ),
            Err(e) => Err(LoadError::Failed(e.to_string())),
        }
    }

    /// Books the answer to one Push of [`paced`], timing its ack if asked.
    fn answer_timed<T>(
        &mut self,
        request: InFlight,
        result: Result<T, Error>,
        epoch: Instant,
        keep_time: bool,
        acked: &AtomicU64,
    ) -> Result<(), LoadError> {
        if request.timed && result.is_ok() {
            record(&mut self.ack_latency, request.sent_at.elapsed());
        }
        self.answer(request.id, result, epoch, keep_time, acked, 1)
    }
}

/// One Push of a paced producer awaiting its answer.
struct InFlight {
    id: u64,
    /// When it was encoded for the socket.
    sent_at: Instant,
    /// Its ack goes into [`Sent::ack_latency`].
    timed: bool,
}

/// Sends stamped records at `pace.rate` on one pipelined connection until
/// `stop` is raised, then waits for the outstanding answers. A late record
/// (the connection was blocked reading an answer) is sent as soon as
/// possible; its stamp is the time it was actually sent. `acked` is raised
/// as acks arrive, for the caller to sample.
pub fn paced(
    socket: &Path,
    pace: Pace,
    epoch: Instant,
    stop: &AtomicBool,
    acked: &AtomicU64,
) -> Result<Sent, LoadError> {
    let mut client = connect(socket)?;
    let mut pipe = client.pipeline(pace.window);
    let mut out = Sent::default();
    let mut in_flight: VecDeque<InFlight> = VecDeque::new();
    let mut buf = vec![0u8; pace.size];
    let start = Instant::now();
    while !stop.load(Ordering::Acquire) {
        let due = (start.elapsed().as_secs_f64() * pace.rate) as u64 + 1;
        let mut queued = false;
        while out.sent < due && in_flight.len() < pace.window {
            let id = record_id(pace.producer, out.sent);
            let (sent_at, sent_us) = (Instant::now(), micros_since(epoch));
            stamp(&mut buf, sent_us, id);
            pipe.push(pace.tier, &buf)
                .map_err(|e| LoadError::Failed(e.to_string()))?;
            let timed = pace.latency_from_us.is_some_and(|from| sent_us >= from);
            in_flight.push_back(InFlight { id, sent_at, timed });
            out.sent += 1;
            queued = true;
        }
        if queued {
            pipe.flush().map_err(|e| LoadError::Failed(e.to_string()))?;
        }
        if let Some(request) = in_flight.pop_front() {
            let result = pipe.recv();
            out.answer_timed(request, result, epoch, pace.ack_times, acked)?;
        } else {
            let next = start + Duration::from_secs_f64(out.sent as f64 / pace.rate);
            std::thread::sleep(
                next.saturating_duration_since(Instant::now())
                    .min(Duration::from_millis(10)),
            );
        }
    }
    while let Some(request) = in_flight.pop_front() {
        let result = pipe.recv();
        out.answer_timed(request, result, epoch, pace.ack_times, acked)?;
    }
    Ok(out)
}

/// A fixed number of records pushed as fast as the daemon takes them.
#[derive(Debug, Clone, Copy)]
pub struct Burst {
    pub producer: u64,
    pub count: u64,
    /// Payload bytes (at least the stamp's 32).
    pub size: usize,
    /// Records per request: 1 = Push, more = PushBatch.
    pub per_frame: usize,
    /// Most requests in flight.
    pub window: usize,
}

/// Sends `burst.count` stamped records on one pipelined connection.
pub fn push_all(
    socket: &Path,
    burst: Burst,
    epoch: Instant,
    acked: &AtomicU64,
) -> Result<Sent, LoadError> {
    let Burst {
        producer,
        count,
        size,
        per_frame,
        window,
    } = burst;
    let mut client = connect(socket)?;
    let mut pipe = client.pipeline(window);
    let mut out = Sent::default();
    let mut in_flight: VecDeque<(u64, u64)> = VecDeque::new();
    let mut frame: Vec<Vec<u8>> = vec![vec![0u8; size]; per_frame.max(1)];
    while out.sent < count || !in_flight.is_empty() {
        let mut queued = false;
        while out.sent < count && in_flight.len() < window {
            let n = (count - out.sent).min(frame.len() as u64);
            let first = record_id(producer, out.sent);
            let now = micros_since(epoch);
            for (i, rec) in frame.iter_mut().take(n as usize).enumerate() {
                stamp(rec, now, first + i as u64);
            }
            let sent = if per_frame <= 1 {
                pipe.push(Tier::Sync, &frame[0])
            } else {
                pipe.push_batch(Tier::Sync, &frame[..n as usize])
            };
            sent.map_err(|e| LoadError::Failed(e.to_string()))?;
            in_flight.push_back((first, n));
            out.sent += n;
            queued = true;
        }
        if queued {
            pipe.flush().map_err(|e| LoadError::Failed(e.to_string()))?;
        }
        if let Some((first, n)) = in_flight.pop_front() {
            let result = pipe.recv();
            out.answer(first, result, epoch, false, acked, n)?;
        }
    }
    Ok(out)
}

/// Raises the flag when dropped (also when unwinding).
struct RaiseOnDrop<'a>(&'a AtomicBool);

impl Drop for RaiseOnDrop<'_> {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Release);
    }
}

/// Runs `producer(i)` on `n` threads while `meanwhile` runs on this one;
/// raises `stop` when `meanwhile` returns (and as soon as a producer fails,
/// so `meanwhile` can watch `stop` to end early). The producers' merged
/// results, or the first error, and what `meanwhile` returned.
pub fn with_producers<F, G, R>(
    n: usize,
    stop: &AtomicBool,
    producer: F,
    meanwhile: G,
) -> (Result<Sent, LoadError>, R)
where
    F: Fn(usize) -> Result<Sent, LoadError> + Sync,
    G: FnOnce() -> R,
{
    let producer = &producer;
    std::thread::scope(|scope| {
        let handles: Vec<_> = (0..n)
            .map(|i| {
                scope.spawn(move || {
                    let result = producer(i);
                    if result.is_err() {
                        stop.store(true, Ordering::Release);
                    }
                    result
                })
            })
            .collect();
        let during = {
            let _raise = RaiseOnDrop(stop);
            meanwhile()
        };
        let mut total = Sent::default();
        let mut first_error = None;
        for handle in handles {
            match handle.join() {
                Ok(Ok(sent)) => total.merge(sent),
                Ok(Err(e)) => first_error = first_error.or(Some(e)),
                Err(_) => {
                    first_error =
                        first_error.or(Some(LoadError::Failed("a producer thread panicked".into())))
                }
            }
        }
        (first_error.map_or(Ok(total), Err), during)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_unique_per_producer() {
        assert_ne!(record_id(1, 0), record_id(0, 1));
        assert_eq!(record_id(2, 5) >> PRODUCER_SHIFT, 2);
    }
}
