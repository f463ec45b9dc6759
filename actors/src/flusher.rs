//! The ShardFlusher: one per shard. Its OS thread owns the shard's active
//! segment and runs group commit with no timer.
//!
//! Loop: take everything queued, write it with one vectored write, one
//! `fdatasync` if any record in the group is Sync or Batched, then answer
//! every batch; the next group starts as soon as that returns, so a lone
//! producer waits one fsync and under load groups grow by themselves.
//! Buffered records are answered after the write (page cache) and covered by
//! the next fsync, at the latest `buffered_flush_interval` later.
//!
//! After a failed write or fdatasync nothing in that group is acknowledged
//! (InternalError, retryable), the segment is abandoned (never fsynced
//! again: the kernel may have dropped its dirty pages) and a fresh one is
//! started. `fsync_failures_max` failures in a row stop the shard visibly.
//!
//! The actor half runs on an arbiter and exists for supervision: it checks
//! that the thread is alive and stops itself when it is not, which the root
//! supervisor sees.

use std::io;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, RecvTimeoutError, Sender};
use std::sync::Arc;
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use actix::prelude::*;
use spillway_protocol::NackReason;
use spillway_wab::{
    preallocate, recover_shard, ActiveSegment, AppendRecord, Preallocated, RecoveryReport, Storage,
};

use crate::sealer::{SealerMsg, SegmentSealer};
use crate::shard::{AppendBatch, ShardHealth, ShardQueue, WabBudget, Watermark};

/// Settings of one shard's flusher.
#[derive(Debug, Clone)]
pub struct FlusherConfig {
    pub shard: u32,
    pub dir: PathBuf,
    pub segment_bytes_max: u64,
    pub buffered_flush_interval: Duration,
    /// Consecutive failed writes/fsyncs after which the shard stops.
    pub fsync_failures_max: u32,
    /// How long the flusher spins for the next batch before sleeping.
    pub spin: Duration,
}

/// How long the flusher waits for the sealer's spare segment before
/// preallocating one itself.
const SPARE_WAIT: Duration = Duration::from_secs(2);

/// The supervised actor owning a shard's flusher and sealer threads.
pub struct ShardFlusher {
    queue: Arc<ShardQueue>,
    thread: Option<JoinHandle<()>>,
    sealer_thread: Option<JoinHandle<()>>,
}

/// Sent by the supervisor on shutdown: finish the group in progress, answer
/// what is queued with InternalError, and stop. Replies when the thread exited.
#[derive(Message)]
#[rtype(result = "()")]
pub struct StopShard;

impl ShardFlusher {
    /// Recover the shard directory, then start the sealer and flusher
    /// threads. Blocking (recovery reads every segment); call before the
    /// actor starts.
    pub fn open<S: Storage>(
        storage: S,
        cfg: FlusherConfig,
        queue: Arc<ShardQueue>,
        wab: Arc<WabBudget>,
        min_next_seq: u64,
    ) -> io::Result<(ShardFlusher, RecoveryReport)> {
        queue.set_health(ShardHealth::Starting);
        queue.set_spin(cfg.spin);
        let recovered = recover_shard(&storage, &cfg.dir, cfg.shard, min_next_seq)?;
        let report = recovered.report;
        let accounted = report.bytes();
        wab.add(accounted);
        queue.stats.bytes_held.store(accounted, Ordering::Relaxed);

        let next_segment_id = Arc::new(AtomicU64::new(report.next_segment_id));
        let mut spares = recovered.spares.into_iter();
        let first = match spares.next() {
            Some(s) => s,
            None => {
                let id = next_segment_id.fetch_add(1, Ordering::Relaxed);
                preallocate(&storage, &cfg.dir, id, cfg.segment_bytes_max)?
            }
        };
        // Invariant: one spare is either waiting in the channel or being
        // prepared, never more, so the sealer never blocks on a full channel
        // while a seal waits behind it.
        let (spare_tx, spare_rx) = sync_channel(1);
        let have_spare = match spares.next() {
            Some(extra) => spare_tx.try_send(extra).is_ok(),
            None => false,
        };
        for unused in spares {
            storage.remove(&unused.path)?;
        }
        let sealer = SegmentSealer::spawn(
            storage.clone(),
            cfg.dir.clone(),
            queue.clone(),
            cfg.segment_bytes_max,
            next_segment_id.clone(),
            spare_tx,
        )?;
        if !have_spare {
            let _ = sealer.tx.send(SealerMsg::PrepareSegment);
        }
        let active = ActiveSegment::start(first, cfg.shard, report.next_seq);
        queue.publish_durable(Watermark {
            segment_id: active.header.segment_id,
            offset: 0,
            next_seq: report.next_seq,
        });
        let worker = FlusherThread {
            storage,
            cfg: cfg.clone(),
            queue: queue.clone(),
            wab,
            active: Some(active),
            spares: spare_rx,
            sealer: sealer.tx,
            next_segment_id,
            unsynced_since: None,
            failures_in_row: 0,
        };
        queue.clear_shutdown();
        queue.set_health(ShardHealth::Running);
        let thread = thread::Builder::new()
            .name(format!("flusher-{}", cfg.shard))
            .spawn(move || worker.run())?;
        Ok((
            ShardFlusher {
                queue,
                thread: Some(thread),
                sealer_thread: Some(sealer.thread),
            },
            report,
        ))
    }

    fn threads_alive(&self) -> bool {
        let alive = |t: &Option<JoinHandle<()>>| t.as_ref().is_some_and(|t| !t.is_finished());
        alive(&self.thread) && alive(&self.sealer_thread)
    }
}

impl Actor for ShardFlusher {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        ctx.run_interval(Duration::from_millis(200), |act, ctx| {
            if !act.threads_alive() && !act.queue.shutdown_requested() {
                tracing::error!(
                    shard = act.queue.shard,
                    "flusher or sealer thread died; stopping the shard for the supervisor"
                );
                ctx.stop();
            }
        });
    }
}

impl Drop for ShardFlusher {
    /// However the actor goes (stopped, or dropped after a panic), its
    /// threads go with it, so a restarted shard never shares its directory
    /// with a leftover thread.
    fn drop(&mut self) {
        self.queue.request_shutdown();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        if let Some(t) = self.sealer_thread.take() {
            let _ = t.join();
        }
    }
}

impl Handler<StopShard> for ShardFlusher {
    type Result = ();

    fn handle(&mut self, _: StopShard, ctx: &mut Context<Self>) {
        self.queue.request_shutdown();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        if let Some(t) = self.sealer_thread.take() {
            let _ = t.join();
        }
        ctx.stop();
    }
}

/// State owned by the flusher's OS thread.
struct FlusherThread<S: Storage> {
    storage: S,
    cfg: FlusherConfig,
    queue: Arc<ShardQueue>,
    wab: Arc<WabBudget>,
    /// `None` only while a rotation is in progress.
    active: Option<ActiveSegment<S::File>>,
    spares: Receiver<Preallocated<S::File>>,
    sealer: Sender<SealerMsg<S::File>>,
    next_segment_id: Arc<AtomicU64>,
    /// When the oldest write not yet covered by an fsync happened.
    unsynced_since: Option<Instant>,
    failures_in_row: u32,
}

impl<S: Storage> FlusherThread<S> {
    fn run(mut self) {
        let mut group: Vec<AppendBatch> = Vec::new();
        loop {
            let deadline = self
                .unsynced_since
                .map(|t| t + self.cfg.buffered_flush_interval);
            self.queue.take_all(deadline, &mut group);
            if group.is_empty() {
                if self.queue.shutdown_requested() {
                    break;
                }
                self.flush_buffered();
                continue;
            }
            if self.queue.health() == ShardHealth::Failed {
                for b in group.drain(..) {
                    b.complete(Err(NackReason::InternalError));
                }
                continue;
            }
            self.commit(&mut group);
        }
        self.flush_buffered();
        self.queue.fail_queued(NackReason::InternalError);
        if let Some(active) = self.active.take() {
            // Not sealed: the next start's recovery seals it at its last record.
            drop(active);
        }
        let _ = self.sealer.send(SealerMsg::Stop);
    }

    /// Write one group, fsync if needed, answer every batch.
    fn commit(&mut self, group: &mut Vec<AppendBatch>) {
        let records: u64 = group.iter().map(|b| b.records.len() as u64).sum();
        let payload: u64 = group.iter().map(|b| b.bytes).sum();
        let needs_fsync = group.iter().any(|b| b.needs_fsync);
        if !self.active().fits(payload, records) && !self.active().is_empty() {
            if let Err(e) = self.rotate() {
                self.fail_group(group, "rotating to a new segment", &e);
                return;
            }
        }
        let mut slices: Vec<AppendRecord<'_>> = Vec::with_capacity(records as usize);
        for b in group.iter() {
            for r in &b.records {
                slices.push(AppendRecord {
                    payload: &r.payload,
                    meta: r.meta,
                });
            }
        }
        let before = self.active().write_offset;
        let written = self.active.as_mut().unwrap().append(&slices);
        drop(slices);
        let first_seq = match written {
            Ok(seq) => seq,
            Err(e) => {
                self.queue
                    .stats
                    .write_failures
                    .fetch_add(1, Ordering::Relaxed);
                self.fail_group(group, "writing a group", &e);
                return;
            }
        };
        let disk_bytes = self.active().write_offset - before;
        self.wab.add(disk_bytes);
        self.queue
            .stats
            .bytes_held
            .fetch_add(disk_bytes, Ordering::Relaxed);
        if self.unsynced_since.is_none() {
            self.unsynced_since = Some(Instant::now());
        }
        let due = self
            .unsynced_since
            .is_some_and(|t| t.elapsed() >= self.cfg.buffered_flush_interval);
        if needs_fsync || due {
            if let Err(e) = self.sync() {
                self.fail_group(group, "fdatasync", &e);
                return;
            }
        }
        self.failures_in_row = 0;
        let stats = &self.queue.stats;
        stats.groups.fetch_add(1, Ordering::Relaxed);
        stats.records.fetch_add(records, Ordering::Relaxed);
        stats.bytes.fetch_add(payload, Ordering::Relaxed);
        let mut seq = first_seq;
        for b in group.drain(..) {
            let n = b.records.len() as u64;
            b.complete(Ok(seq));
            seq += n;
        }
    }

    fn active(&self) -> &ActiveSegment<S::File> {
        self.active
            .as_ref()
            .expect("active segment present outside rotation")
    }

    fn sync(&mut self) -> io::Result<()> {
        let start = Instant::now();
        let result = self.active.as_mut().unwrap().sync();
        let us = start.elapsed().as_micros() as u64;
        self.queue.stats.record_fsync(us);
        if result.is_ok() {
            self.unsynced_since = None;
            self.publish();
        }
        result
    }

    fn publish(&self) {
        let a = self.active();
        self.queue.publish_durable(Watermark {
            segment_id: a.header.segment_id,
            offset: a.durable_offset,
            next_seq: a.next_seq(),
        });
    }

    /// The periodic fsync covering Buffered records (already acknowledged).
    fn flush_buffered(&mut self) {
        if self.unsynced_since.is_none() || self.active.is_none() {
            return;
        }
        if let Err(e) = self.sync() {
            self.queue
                .stats
                .fsync_failures
                .fetch_add(1, Ordering::Relaxed);
            tracing::error!(shard = self.cfg.shard, error = %e, "fdatasync of buffered records failed; abandoning the segment");
            self.after_failure();
        }
    }

    /// Nack the group, abandon the segment, start a new one; stop the shard
    /// after too many failures in a row.
    fn fail_group(&mut self, group: &mut Vec<AppendBatch>, what: &str, e: &io::Error) {
        if what == "fdatasync" {
            self.queue
                .stats
                .fsync_failures
                .fetch_add(1, Ordering::Relaxed);
        }
        tracing::error!(shard = self.cfg.shard, error = %e, records = group.iter().map(|b| b.records.len()).sum::<usize>(), "{what} failed; the group is nacked (InternalError) and the segment abandoned");
        // Abandon (and maybe stop the shard) first, so the state a client
        // sees after its nack already reflects the failure.
        self.after_failure();
        for b in group.drain(..) {
            b.complete(Err(NackReason::InternalError));
        }
    }

    fn after_failure(&mut self) {
        self.failures_in_row += 1;
        self.unsynced_since = None;
        if let Some(old) = self.active.take() {
            let next_seq = old.next_seq();
            let _ = self.sealer.send(SealerMsg::AbandonSegment {
                path: old.path.clone(),
                durable_offset: old.durable_offset,
            });
            drop(old);
            if self.failures_in_row < self.cfg.fsync_failures_max {
                match self.next_spare() {
                    Ok(pre) => {
                        self.active = Some(ActiveSegment::start(pre, self.cfg.shard, next_seq));
                        return;
                    }
                    Err(e) => {
                        tracing::error!(shard = self.cfg.shard, error = %e, "no new segment after a failure")
                    }
                }
            }
        }
        tracing::error!(
            shard = self.cfg.shard,
            failures_in_row = self.failures_in_row,
            "shard stopped after repeated storage failures; its pushes get InternalError until the daemon is restarted"
        );
        self.queue.set_health(ShardHealth::Failed);
    }

    /// Hand the full segment to the sealer and continue in a preallocated one.
    fn rotate(&mut self) -> io::Result<()> {
        if self.active().write_offset > self.active().durable_offset {
            // Buffered records not yet covered: make them durable (and
            // visible to the drain) before the segment leaves this thread.
            self.sync()?;
        }
        let pre = self.next_spare()?;
        let old = self.active.take().unwrap();
        let next_seq = old.next_seq();
        self.active = Some(ActiveSegment::start(pre, self.cfg.shard, next_seq));
        let _ = self.sealer.send(SealerMsg::SealSegment(old.into_sealing()));
        Ok(())
    }

    /// The sealer's next preallocated segment (asking for another), or one
    /// preallocated here if the sealer is late.
    fn next_spare(&mut self) -> io::Result<Preallocated<S::File>> {
        let _ = self.sealer.send(SealerMsg::PrepareSegment);
        match self.spares.recv_timeout(SPARE_WAIT) {
            Ok(pre) => Ok(pre),
            Err(RecvTimeoutError::Timeout | RecvTimeoutError::Disconnected) => {
                tracing::warn!(
                    shard = self.cfg.shard,
                    "sealer late with a spare segment; preallocating inline"
                );
                let id = self.next_segment_id.fetch_add(1, Ordering::Relaxed);
                preallocate(&self.storage, &self.cfg.dir, id, self.cfg.segment_bytes_max)
            }
        }
    }
}
