//! One batch: offer the head of the pending records to the sink, classify
//! its outcome ([`Settlement`]), and settle what is finished (dead-letter the
//! rejected records, then confirm).

use std::io;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use sink_sdk::{Batch, Outcome, Record, RecordOutcome};
use spillway_wab::deadletter::DeadLetter;
use spillway_wab::format::now_unix_us;
use spillway_wab::Storage;

use super::cursor::Cursor;
use super::retry::RetryState;

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
    /// Offer the head of `pending` to the sink and apply the outcome.
    pub(super) fn deliver_one(&mut self, max_records: usize, max_bytes: usize) -> io::Result<()> {
        let mut n = 0;
        let mut bytes = 0;
        for rec in &self.pending {
            if n > 0 && (n >= max_records || bytes + rec.payload.len() > max_bytes) {
                break;
            }
            n += 1;
            bytes += rec.payload.len();
        }
        let records: Vec<Record<'_>> = self
            .pending
            .iter()
            .take(n)
            .map(|r| Record {
                shard: self.shard,
                seq: r.seq,
                tier: r.meta.tier,
                arrival_unix_us: r.meta.arrival_unix_us,
                payload: &r.payload,
            })
            .collect();
        let started = Instant::now();
        let call = self.stats.sink_call();
        let outcome = self.host.deliver(&Batch::new(self.shard, &records));
        drop(call);
        self.stats
            .sink_request_us
            .observe(started.elapsed().as_micros() as u64);
        drop(records);
        let Settlement {
            done,
            rejected,
            retry,
        } = self.classify(outcome, n);
        if done == 0 {
            let (after, reason) = retry.unwrap_or((None, "sink asked to retry".into()));
            return self.after_transient(n, after, reason);
        }
        self.retry = RetryState::default();
        self.stats.sink.lock().unwrap().delivered();
        self.settle(done, &rejected)?;
        let committed = done - rejected.len();
        self.stats
            .delivered_records
            .fetch_add(committed as u64, Ordering::Relaxed);
        self.stats.delivered_batches.fetch_add(1, Ordering::Relaxed);
        self.pending_since = if self.pending.is_empty() {
            None
        } else {
            Some(self.clock.now())
        };
        if let Some((after, reason)) = retry {
            // Part of the batch must be retried: back off before the rest.
            self.after_transient(self.pending.len().min(n - done), after, reason)?;
        }
        Ok(())
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
