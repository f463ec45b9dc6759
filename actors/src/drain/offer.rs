//! Batches: offer them to the sink (up to the limit in flight), classify
//! each answer ([`Settlement`]), and settle the finished batches at the
//! head, in order (dead-letter the rejected records, then confirm): the
//! confirmed point moves only over a contiguous prefix of finished
//! batches, however the answers come back.

use std::io;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use sink_sdk::{Batch, Outcome, Record, RecordOutcome};
use spillway_wab::deadletter::DeadLetter;
use spillway_wab::format::now_unix_us;
use spillway_wab::Storage;

use super::cursor::{Cursor, DrainWait, IDLE_WAIT};
use super::in_flight::{sink_record, write_learned, Answer, Flight, FlightState, Lanes, Pool};
use super::retry::RetryState;
use crate::shard::{Until, Watermark};

/// Least time between two writes of an adaptive cursor's learned limit.
const LEARNED_WRITE_EVERY: Duration = Duration::from_secs(1);

/// What a sink's outcome means for the batch at the head of `pending`.
struct Settlement {
    /// Records at the head that are finished (committed or rejected).
    done: usize,
    /// Rejected records among them (index into the batch, the sink's reason).
    rejected: Vec<(usize, String)>,
    /// The rest of the batch must be retried: the sink's retry-after and why.
    retry: Option<(Option<Duration>, String)>,
}

impl Settlement {
    fn finished(done: usize, rejected: Vec<(usize, String)>) -> Self {
        Settlement {
            done,
            rejected,
            retry: None,
        }
    }

    fn retry_from(
        done: usize,
        rejected: Vec<(usize, String)>,
        after: Option<Duration>,
        reason: String,
    ) -> Self {
        Settlement {
            done,
            rejected,
            retry: Some((after, reason)),
        }
    }
}

impl<S: Storage> Cursor<S> {
    /// Offer batches while the limit allows: first those to offer again
    /// (oldest first), then new ones from the records read and not yet
    /// offered, once full or lingered long enough. Says how long to wait
    /// for more records (the linger left, or idle). With one batch at a
    /// time it offers one and says go on.
    pub(super) fn dispatch(&mut self, wm: Watermark) -> io::Result<DrainWait> {
        if !self.flights.lanes_fit() && self.flights.out() == 0 {
            self.refit_lanes();
        }
        let inline = matches!(self.flights.lanes, Lanes::Inline);
        let limit = self.flights.limiter.limit() as usize;
        loop {
            let (max_records, max_bytes) = self.host.batch_limits();
            if inline && self.flights.first_resend().is_some() {
                // One at a time offers the head of what was read again,
                // cut by the limits of now (a reload may have changed
                // them), as before batches in flight.
                self.flights.abandon();
            }
            let resend = self.flights.first_resend();
            if resend.is_none() {
                let unsent = self.pending.len() - self.flights.records;
                if unsent == 0 {
                    break;
                }
                let full =
                    unsent >= max_records || self.pending_bytes - self.flights.bytes >= max_bytes;
                let linger_left = self.pending_since.map_or(Duration::ZERO, |t| {
                    self.host
                        .settings()
                        .linger()
                        .saturating_sub(self.clock.since(t))
                });
                if !full && !linger_left.is_zero() {
                    self.publish_in_flight();
                    return Ok(DrainWait::Durable {
                        seen: wm,
                        until: self.until_fuller(max_records, max_bytes),
                        timeout: linger_left,
                    });
                }
            }
            // A batch is ready: it goes if a slot is free, else the limit
            // learns that the sink, not the records, is what waits. A batch
            // offered again has its slot; a new one needs a slot among the
            // unsettled, so a crash redelivers at most `limit` batches.
            let taken = match resend {
                Some(_) => self.flights.out(),
                None => self.flights.unsettled(),
            };
            if taken >= limit {
                self.flights.limiter.slots_full();
                break;
            }
            match resend {
                Some(idx) => self.send(idx)?,
                None => self.new_flight(max_records, max_bytes)?,
            }
            self.absorb()?;
            // One at a time goes on at the next step; after a failure the
            // backoff comes first.
            if inline || self.retry.backing_off() {
                return Ok(DrainWait::Now);
            }
            self.fill(wm)?;
        }
        self.publish_in_flight();
        let (max_records, max_bytes) = self.host.batch_limits();
        Ok(DrainWait::Durable {
            seen: wm,
            until: self.until_fuller(max_records, max_bytes),
            timeout: IDLE_WAIT,
        })
    }

    /// What the records read and not offered yet wait for: as many more
    /// durable records (or bytes) as fill a batch. Fewer would not change
    /// what is offered, only wake the cursor (every group commit did,
    /// thousands of times a second per sink). A full batch waits for a
    /// slot, which only an answer (the cursor's bell) frees. `fill` read up
    /// to `seen` unless the batch was full, so the counts start there.
    fn until_fuller(&self, max_records: usize, max_bytes: usize) -> Until {
        let unsent = self.pending.len() - self.flights.records;
        let unsent_bytes = self.pending_bytes - self.flights.bytes;
        if unsent >= max_records || unsent_bytes >= max_bytes {
            return Until::Grown {
                records: u64::MAX,
                bytes: u64::MAX,
            };
        }
        Until::Grown {
            records: (max_records - unsent) as u64,
            bytes: (max_bytes - unsent_bytes) as u64,
        }
    }

    /// Make the next batch from the records not yet offered, and offer it.
    fn new_flight(&mut self, max_records: usize, max_bytes: usize) -> io::Result<()> {
        let mut n = 0;
        let mut bytes = 0;
        for rec in self.pending.iter().skip(self.flights.records) {
            if n > 0 && (n >= max_records || bytes + rec.payload.len() > max_bytes) {
                break;
            }
            n += 1;
            bytes += rec.payload.len();
        }
        let idx = self.flights.push(n, bytes);
        let unsent = self.pending.len() - self.flights.records;
        self.pending_since = (unsent > 0).then(|| self.clock.now());
        self.send(idx)
    }

    /// Offer flight `idx` (new, or to be offered again).
    fn send(&mut self, idx: usize) -> io::Result<()> {
        let id = self.flights.next_id();
        let off = self.flights.offset_of(idx);
        let len = self.flights.list[idx].len;
        let shard = self.shard;
        let range = self.pending.range(off..off + len);
        match &mut self.flights.lanes {
            Lanes::Inline | Lanes::Held(_) => {
                let records: Vec<Record<'_>> = range.map(|r| sink_record(shard, r)).collect();
                let started = Instant::now();
                let call = self.stats.sink_call();
                let outcome = self.host.deliver(&Batch::new(shard, &records));
                drop(call);
                let answer = Answer {
                    id,
                    outcome,
                    rtt: started.elapsed(),
                };
                match &mut self.flights.lanes {
                    Lanes::Held(held) => held.push(answer),
                    _ => self.flights.answers.push_back(answer),
                }
            }
            Lanes::Pool(pool) => pool.submit(id, range.cloned().collect())?,
        }
        let f = &mut self.flights.list[idx];
        f.id = id;
        f.state = FlightState::Out;
        f.sent_unix_ms = now_unix_us() / 1000;
        Ok(())
    }

    /// Take the answers that came back (in the simulation, some of those
    /// held, in an order its random stream picks), apply them, and settle
    /// the finished flights at the head.
    pub(super) fn absorb(&mut self) -> io::Result<()> {
        match &mut self.flights.lanes {
            Lanes::Inline => {}
            Lanes::Pool(pool) => pool.take(&mut self.flights.answers),
            Lanes::Held(_) => self.release_held(),
        }
        while let Some(a) = self.flights.answers.pop_front() {
            self.apply(a)?;
        }
        // A failed dead-letter write leaves the flight finished at the
        // head: the next step tries the write again.
        while let Some(Flight {
            state: FlightState::Finished(rejected),
            len,
            ..
        }) = self.flights.list.front()
        {
            let (len, rejected) = (*len, rejected.clone());
            self.settle(len, &rejected)?;
            self.flights.pop_front();
        }
        Ok(())
    }

    /// The simulation's out-of-order completion: each held answer comes
    /// back now or later, at random, but at least one per look once every
    /// slot is taken.
    fn release_held(&mut self) {
        let Lanes::Held(held) = &mut self.flights.lanes else {
            return;
        };
        let mut held = std::mem::take(held);
        let mut i = 0;
        let mut released = 0;
        while i < held.len() {
            if self.random().is_multiple_of(2) {
                self.flights.answers.push_back(held.swap_remove(i));
                released += 1;
            } else {
                i += 1;
            }
        }
        let full = held.len() >= self.flights.limiter.limit() as usize;
        if released == 0 && full {
            let pick = (self.random() % held.len() as u64) as usize;
            self.flights.answers.push_back(held.swap_remove(pick));
        }
        if let Lanes::Held(h) = &mut self.flights.lanes {
            *h = held;
        }
    }

    /// Apply the sink's answer to the flight it belongs to (none: the
    /// cursor gave that offer up).
    fn apply(&mut self, a: Answer) -> io::Result<()> {
        let Some(idx) = self
            .flights
            .list
            .iter()
            .position(|f| f.id == a.id && matches!(f.state, FlightState::Out))
        else {
            return Ok(());
        };
        self.stats.sink_request_us.observe(a.rtt.as_micros() as u64);
        let n = self.flights.list[idx].len;
        let Settlement {
            done,
            rejected,
            retry,
        } = self.classify(a.outcome, n);
        if self
            .flights
            .limiter
            .answered(a.rtt, retry.is_some() || done == 0)
        {
            self.limit_changed();
        }
        if done > 0 {
            self.retry = RetryState::default();
            self.stats.sink.lock().unwrap().delivered();
            let committed = done - rejected.len();
            self.stats
                .delivered_records
                .fetch_add(committed as u64, Ordering::Relaxed);
            self.stats.delivered_batches.fetch_add(1, Ordering::Relaxed);
        }
        if done == n {
            self.flights.list[idx].state = FlightState::Finished(rejected);
            return Ok(());
        }
        // The rest of the batch, from `done` on, is offered again after
        // the backoff, as a flight of its own.
        let idx = if done > 0 {
            let off = self.flights.offset_of(idx);
            let head_bytes: usize = self
                .pending
                .range(off..off + done)
                .map(|r| r.payload.len())
                .sum();
            let f = &mut self.flights.list[idx];
            let rest = Flight {
                id: 0,
                len: f.len - done,
                bytes: f.bytes - head_bytes,
                state: FlightState::Resend,
                sent_unix_ms: 0,
            };
            f.len = done;
            f.bytes = head_bytes;
            f.state = FlightState::Finished(rejected);
            self.flights.list.insert(idx + 1, rest);
            idx + 1
        } else {
            self.flights.list[idx].state = FlightState::Resend;
            idx
        };
        let (after, reason) = retry.unwrap_or((None, "sink asked to retry".into()));
        let len = self.flights.list[idx].len;
        if let Some(why) = self.after_transient(len, after, reason) {
            // Failing for longer than max_retry_duration: dead-lettered.
            let rejected = (0..len).map(|i| (i, why.clone())).collect();
            self.flights.list[idx].state = FlightState::Finished(rejected);
        }
        Ok(())
    }

    /// The adaptive limit moved: publish it, and keep it for the next run
    /// (at most once a second; the last one at the stop).
    fn limit_changed(&mut self) {
        let limit = self.flights.limiter.limit();
        tracing::debug!(shard = self.shard, sink = %self.sink, limit, "batches in flight limit changed");
        self.publish_in_flight();
        let due = self
            .flights
            .learned_written
            .is_none_or(|(_, at)| at.elapsed() >= LEARNED_WRITE_EVERY);
        if due {
            self.keep_learned();
        }
    }

    /// Write the learned limit to its file, if it is adaptive and changed.
    pub(super) fn keep_learned(&mut self) {
        let limit = self.flights.limiter.limit();
        let Some(path) = self.flights.learned_file.as_ref() else {
            return;
        };
        if !self.flights.limiter.adaptive()
            || self
                .flights
                .learned_written
                .is_some_and(|(l, _)| l == limit)
        {
            return;
        }
        match write_learned(&self.storage, path, limit) {
            Ok(()) => self.flights.learned_written = Some((limit, Instant::now())),
            Err(e) => {
                tracing::debug!(shard = self.shard, sink = %self.sink, error = %e, "keeping the learned batches-in-flight limit failed; the next run starts at 1")
            }
        }
    }

    /// Publish the limit, the batches out and, with workers, when the
    /// oldest of them was offered (`GET /ready`'s hung-sink check).
    pub(super) fn publish_in_flight(&self) {
        let out = self.flights.out() as u64;
        self.stats.in_flight.store(out, Ordering::Relaxed);
        self.stats
            .in_flight_limit
            .store(self.flights.limiter.limit() as u64, Ordering::Relaxed);
        if matches!(self.flights.lanes, Lanes::Pool(_)) {
            let oldest = self
                .flights
                .list
                .iter()
                .filter(|f| matches!(f.state, FlightState::Out))
                .map(|f| f.sent_unix_ms)
                .min()
                .unwrap_or(0);
            self.stats
                .sink_call_since_unix_ms
                .store(oldest, Ordering::Relaxed);
        }
    }

    /// Lanes for the limit's mode: workers for more than one batch at a
    /// time, else the cursor's own thread.
    fn refit_lanes(&mut self) {
        let (shard, sink) = (self.shard, self.sink.clone());
        let (slot, stats) = (self.host.slot(), self.stats.clone());
        let bell = self.flights.bell.clone();
        self.flights
            .refit(|ceiling| Pool::new(shard, &sink, slot, stats, bell, ceiling));
    }

    /// What the sink's `outcome` for the first `n` pending records means.
    fn classify(&self, outcome: Outcome, n: usize) -> Settlement {
        match outcome {
            Outcome::Committed => Settlement::finished(n, Vec::new()),
            Outcome::Retry { after, reason } => {
                Settlement::retry_from(0, Vec::new(), after, reason)
            }
            Outcome::Split(v) if v.len() != n => {
                let reason = format!(
                    "sink answered {} record outcomes for a batch of {n}",
                    v.len()
                );
                tracing::error!(shard = self.shard, sink = %self.sink, target = %self.host.description(), "{reason}; retrying the batch");
                Settlement::retry_from(0, Vec::new(), None, reason)
            }
            Outcome::Split(v) => {
                let mut rejected = Vec::new();
                for (i, o) in v.into_iter().enumerate() {
                    match o {
                        RecordOutcome::Committed => {}
                        RecordOutcome::Rejected(why) => rejected.push((i, why)),
                        RecordOutcome::Retry => {
                            return Settlement::retry_from(
                                i,
                                rejected,
                                None,
                                "sink asked to retry part of the batch".into(),
                            )
                        }
                    }
                }
                Settlement::finished(n, rejected)
            }
        }
    }

    /// The first `done` pending records are finished: the `rejected` among
    /// them go to the dead-letter store, then the confirmed point moves past
    /// all of them and they leave `pending`. The one path from a sink's (or
    /// the retry limit's) verdict to the checkpoint.
    pub(super) fn settle(&mut self, done: usize, rejected: &[(usize, String)]) -> io::Result<()> {
        self.dead_letter(rejected)?;
        let last = self.pending[done - 1].seq;
        self.confirm(last + 1);
        for _ in 0..done {
            let r = self.pending.pop_front().unwrap();
            self.pending_bytes -= r.payload.len();
        }
        self.publish_backlog();
        Ok(())
    }

    /// Publish the arrival time of the oldest record still pending and the
    /// running count of confirmed record bytes: every byte the follower has
    /// passed, less the frames still pending (read, not yet confirmed).
    pub(super) fn publish_backlog(&self) {
        let us = self.pending.front().map_or(0, |r| r.meta.arrival_unix_us);
        self.stats
            .oldest_pending_arrival_us
            .store(us, Ordering::Relaxed);
        let confirmed = self.confirmed_bytes();
        self.stats
            .confirmed_bytes
            .store(confirmed, Ordering::Relaxed);
        self.stats.backlog_measured.store(true, Ordering::Relaxed);
    }

    /// Append the rejected records (indices into `pending`) to the
    /// dead-letter store, fsynced, before anything confirms past them.
    fn dead_letter(&mut self, rejected: &[(usize, String)]) -> io::Result<()> {
        if rejected.is_empty() {
            return Ok(());
        }
        let now = now_unix_us();
        let letters: Vec<DeadLetter> = rejected
            .iter()
            .map(|(i, why)| {
                let r = &self.pending[*i];
                DeadLetter {
                    shard: self.shard,
                    seq: r.seq,
                    tier: r.meta.tier,
                    arrival_unix_us: r.meta.arrival_unix_us,
                    dead_lettered_unix_us: now,
                    reason: why.clone(),
                    payload: r.payload.clone(),
                }
            })
            .collect();
        self.dead_letters.lock().unwrap().append(&letters)?;
        self.stats
            .dead_lettered
            .fetch_add(letters.len() as u64, Ordering::Relaxed);
        for l in &letters {
            tracing::warn!(shard = self.shard, sink = %self.sink, target = %self.host.description(), seq = l.seq, reason = %l.reason, "record rejected by the sink; moved to the dead-letter store");
        }
        Ok(())
    }
}
