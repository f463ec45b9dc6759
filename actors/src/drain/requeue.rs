//! Requeued dead letters of one sink: `ctl dead-letter requeue --sink NAME`
//! moves them from the sink's dead-letter store into its requeue store
//! (`sinks/NAME/requeue/`, the same format), and each of that sink's
//! cursors delivers its shard's between two batches: to that sink alone,
//! never through the WAB that every sink reads. A requeued record the sink
//! takes leaves the store; one it rejects again goes back to the
//! dead-letter store with the new reason.

use std::collections::BTreeSet;
use std::io;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;

use sink_sdk::{Batch, Outcome, Record, RecordOutcome};
use spillway_wab::deadletter::{DeadLetter, DeadLetterStore};
use spillway_wab::format::now_unix_us;
use spillway_wab::Storage;

use super::cursor::{Cursor, DrainWait};

/// One sink's requeue store, shared by its cursors and the admin side.
pub struct Requeue<S: Storage> {
    pub store: Mutex<DeadLetterStore<S>>,
    /// Set when records were requeued; cleared once the store is empty,
    /// so cursors look at it only while it holds something.
    waiting: AtomicBool,
    /// Bumped by every [`Requeue::add`]: a cursor that found nothing of
    /// its shard looks again only once this moved.
    generation: AtomicU64,
}

impl<S: Storage> Requeue<S> {
    pub fn new(store: DeadLetterStore<S>) -> Self {
        let waiting = store.list().map(|l| !l.is_empty()).unwrap_or(true);
        Requeue {
            store: Mutex::new(store),
            waiting: AtomicBool::new(waiting),
            generation: AtomicU64::new(0),
        }
    }

    /// Add records for the sink's cursors to deliver (fsynced).
    pub fn add(&self, letters: &[DeadLetter]) -> io::Result<()> {
        self.store.lock().unwrap().append(letters)?;
        self.generation.fetch_add(1, Ordering::AcqRel);
        self.waiting.store(true, Ordering::Release);
        Ok(())
    }
}

impl<S: Storage> Cursor<S> {
    /// Deliver this shard's requeued records, if any wait, as one batch.
    /// `None`: nothing to do here.
    pub(super) fn deliver_requeued(&mut self) -> Option<DrainWait> {
        let requeue = self.requeue.clone()?;
        if !requeue.waiting.load(Ordering::Acquire) {
            return None;
        }
        // Read before the list: an add after it makes the next step look.
        let generation = requeue.generation.load(Ordering::Acquire);
        if self.requeue_seen == Some(generation) {
            // Nothing of this shard was there, and nothing came since.
            return None;
        }
        let (max_records, _) = self.host.batch_limits();
        let all = match requeue.store.lock().unwrap().list() {
            Ok(all) => all,
            Err(e) => {
                tracing::error!(shard = self.shard, sink = %self.sink, error = %e, "reading the requeued records failed; will retry");
                return None;
            }
        };
        if all.is_empty() {
            requeue.waiting.store(false, Ordering::Release);
            return None;
        }
        let mine: Vec<DeadLetter> = all
            .into_iter()
            .filter(|l| l.shard == self.shard)
            .take(max_records)
            .collect();
        if mine.is_empty() {
            self.requeue_seen = Some(generation);
            return None;
        }
        let records: Vec<Record<'_>> = mine
            .iter()
            .map(|l| Record {
                shard: self.shard,
                seq: l.seq,
                tier: l.tier,
                arrival_unix_us: l.arrival_unix_us,
                payload: &l.payload,
            })
            .collect();
        let call = self.stats.sink_call();
        let outcome = self.host.deliver(&Batch::new(self.shard, &records));
        drop(call);
        drop(records);
        let (done, rejected): (Vec<usize>, Vec<(usize, String)>) = match outcome {
            Outcome::Committed => ((0..mine.len()).collect(), Vec::new()),
            Outcome::Retry { .. } => {
                return Some(DrainWait::Pause(self.host.settings().retry_initial));
            }
            Outcome::Split(v) if v.len() == mine.len() => {
                let mut done = Vec::new();
                let mut rejected = Vec::new();
                for (i, o) in v.into_iter().enumerate() {
                    match o {
                        RecordOutcome::Committed => done.push(i),
                        RecordOutcome::Rejected(why) => rejected.push((i, why)),
                        RecordOutcome::Retry => {}
                    }
                }
                (done, rejected)
            }
            Outcome::Split(_) => return Some(DrainWait::Pause(self.host.settings().retry_initial)),
        };
        if let Err(e) = self.settle_requeued(&requeue, &mine, &done, &rejected) {
            tracing::error!(shard = self.shard, sink = %self.sink, error = %e, "settling requeued records failed; they are offered again");
            return Some(DrainWait::Pause(self.host.settings().retry_initial));
        }
        Some(DrainWait::Now)
    }

    /// Rejected ones back to the dead-letter store (fsynced), then every
    /// finished one out of the requeue store.
    fn settle_requeued(
        &mut self,
        requeue: &Requeue<S>,
        mine: &[DeadLetter],
        done: &[usize],
        rejected: &[(usize, String)],
    ) -> io::Result<()> {
        if !rejected.is_empty() {
            let now = now_unix_us();
            let again: Vec<DeadLetter> = rejected
                .iter()
                .map(|(i, why)| DeadLetter {
                    dead_lettered_unix_us: now,
                    reason: why.clone(),
                    ..mine[*i].clone()
                })
                .collect();
            self.dead_letters.lock().unwrap().append(&again)?;
            self.stats
                .dead_lettered
                .fetch_add(again.len() as u64, std::sync::atomic::Ordering::Relaxed);
        }
        let finished: BTreeSet<(u32, u64)> = done
            .iter()
            .copied()
            .chain(rejected.iter().map(|(i, _)| *i))
            .map(|i| (mine[i].shard, mine[i].seq))
            .collect();
        requeue
            .store
            .lock()
            .unwrap()
            .remove_where(|l| finished.contains(&(l.shard, l.seq)))?;
        self.stats
            .delivered_records
            .fetch_add(done.len() as u64, std::sync::atomic::Ordering::Relaxed);
        tracing::info!(shard = self.shard, sink = %self.sink, delivered = done.len(), rejected = rejected.len(), "requeued records delivered to this sink");
        Ok(())
    }
}
