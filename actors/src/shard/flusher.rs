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
//! (InternalError, or Overloaded when the disk is full; both retryable), the
//! segment is abandoned (never fsynced again: the kernel may have dropped
//! its dirty pages) and a fresh one is started for the next push. While no
//! segment can be had (preallocation or rotation refused: a full disk), or
//! after `fsync_failures_max` failures in a row, the shard is `Unwritable`:
//! pushes are refused at once and the flusher retries with backoff (at most
//! [`SEGMENT_RETRY_MAX`] apart), so it writes again by itself once the cause
//! is gone. Health (wire, ctl, metrics) says so meanwhile.
//!
//! A group takes at most `group_bytes_max` payload bytes (one batch always),
//! and batches of other connections may ride past one that does not fit
//! (per-connection order is kept): small records queued behind huge ones
//! wait for one huge write, not for hundreds of MiB.
//!
//! The actor half runs on an arbiter and exists for supervision: it checks
//! that the thread is alive and stops itself when it is not, which the root
//! supervisor sees.

use std::io;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, RecvTimeoutError, Sender, SyncSender};
use std::sync::Arc;
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use actix::prelude::*;
use spillway_protocol::NackReason;
use spillway_wab::format::record_bytes;
use spillway_wab::{
    preallocate, recover_shard, ActiveSegment, AppendRecord, Preallocated, Recovered,
    RecoveryReport, SegmentInfo, Storage,
};

use crate::backoff::{Backoff, NotBefore};
use crate::clock::Clock;
use crate::shard::checker;
use crate::shard::sealer::{sealer_channel, SealerCore, SealerMsg, SegmentSealer};
use crate::shard::{
    nack_for, Abandoned, AppendBatch, GroupBound, ShardHealth, ShardQueue, Watermark,
    GROUP_RECORDS_MAX,
};

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
    /// Payload bytes one group takes at most (one batch is always taken).
    pub group_bytes_max: u64,
}

/// How long the flusher waits for the sealer's spare segment before
/// preallocating one itself.
const SPARE_WAIT: Duration = Duration::from_secs(2);

/// The supervised actor owning a shard's flusher and sealer threads.
pub struct ShardFlusher {
    queue: Arc<ShardQueue>,
    thread: Option<JoinHandle<()>>,
    sealer_thread: Option<JoinHandle<()>>,
    /// The checker of the segments the start did not read (see
    /// [`crate::shard::checker`]); `None` when there were none. Its end is no
    /// failure.
    checker_thread: Option<JoinHandle<()>>,
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
        min_next_seq: u64,
    ) -> io::Result<(ShardFlusher, RecoveryReport)> {
        queue.set_health(ShardHealth::Starting);
        let recovered = recover_shard(&storage, &cfg.dir, cfg.shard, min_next_seq)?;
        Self::open_recovered(storage, cfg, queue, recovered)
    }

    /// Start the sealer and flusher threads on a shard folder that has
    /// already been recovered (the daemon recovers through
    /// `spillway_wab::open_shard`, which also checks the checkpoint).
    pub fn open_recovered<S: Storage>(
        storage: S,
        cfg: FlusherConfig,
        queue: Arc<ShardQueue>,
        recovered: Recovered<S::File>,
    ) -> io::Result<(ShardFlusher, RecoveryReport)> {
        let dir = cfg.dir.clone();
        let parts = FlusherCore::build(
            storage.clone(),
            cfg,
            queue.clone(),
            recovered,
            Clock::system(),
        )?;
        let checker_thread = checker::start(storage, dir, queue.clone(), parts.unchecked)?;
        let sealer = SegmentSealer::start(
            parts.sealer,
            parts.flusher.sealer.clone(),
            parts.sealer_inbox,
        )?;
        let shard = queue.shard;
        let worker = parts.flusher;
        let thread = thread::Builder::new()
            .name(format!("flusher-{shard}"))
            .spawn(move || worker.run())?;
        Ok((
            ShardFlusher {
                queue,
                thread: Some(thread),
                sealer_thread: Some(sealer.thread),
                checker_thread,
            },
            parts.report,
        ))
    }

    /// Ask the shard's threads to stop and wait until they have.
    fn stop_threads(&mut self) {
        self.queue.request_shutdown();
        let threads = [
            self.thread.take(),
            self.sealer_thread.take(),
            self.checker_thread.take(),
        ];
        for t in threads.into_iter().flatten() {
            let _ = t.join();
        }
    }

    /// The flusher and sealer run, and the checker either runs or ended
    /// with every segment checked (one that died, a panic, would leave
    /// delivery waiting at its gate for good).
    fn threads_alive(&self) -> bool {
        let alive = |t: &Option<JoinHandle<()>>| t.as_ref().is_some_and(|t| !t.is_finished());
        let checker_done = self
            .checker_thread
            .as_ref()
            .is_none_or(|t| !t.is_finished())
            || self.queue.unchecked_from() == u64::MAX;
        alive(&self.thread) && alive(&self.sealer_thread) && checker_done
    }
}

impl Actor for ShardFlusher {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        ctx.run_interval(Duration::from_millis(200), |act, ctx| {
            if !act.threads_alive() && !act.queue.shutdown_requested() {
                tracing::error!(
                    shard = act.queue.shard,
                    "flusher, sealer or checker thread died; stopping the shard for the supervisor"
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
        self.stop_threads();
    }
}

impl Handler<StopShard> for ShardFlusher {
    type Result = ();

    fn handle(&mut self, _: StopShard, ctx: &mut Context<Self>) {
        self.stop_threads();
        ctx.stop();
    }
}

/// Records per vectored write of a group. The per-record bookkeeping of a
/// write (payload slice, record header, two iovecs: ~90 bytes) then costs
/// about 1.5 MB per chunk, however many records the group holds: a PushBatch
/// of 3 million 1-byte records no longer needs hundreds of MB to be written.
const WRITE_CHUNK_RECORDS: usize = 16 * 1024;

/// The wait before trying again to get a segment after a failure
/// (preallocation or rotation refused, or `fsync_failures_max` failed
/// writes/fsyncs in a row): 50 ms, doubled per failure up to
/// [`SEGMENT_RETRY_MAX`].
const SEGMENT_RETRY: Backoff = Backoff::new(Duration::from_millis(50), SEGMENT_RETRY_MAX);
/// Longest wait between attempts, so a shard is writable again within about
/// this long after its disk has space (or works) again.
const SEGMENT_RETRY_MAX: Duration = Duration::from_secs(1);

/// Why a shard refuses pushes while no segment fits on the disk (health).
const NO_ROOM: &str =
    "no room on the disk for a new segment, waiting for delivery (or other files) to free space";

/// A shard's flusher: the state its OS thread owns, and each step of its
/// loop (`run`), which the simulation calls one at a time.
pub struct FlusherCore<S: Storage> {
    storage: S,
    cfg: FlusherConfig,
    queue: Arc<ShardQueue>,
    /// What the backoff and the periodic fsync of Buffered records read.
    clock: Clock,
    /// `None` while the shard has no segment to write: after a failure,
    /// until a fresh one is ready (see [`Self::ensure_segment`]).
    active: Option<ActiveSegment<S::File>>,
    /// The sealer's preallocated segments, or why it could not make one.
    spares: Receiver<io::Result<Preallocated<S::File>>>,
    /// Spares asked of the sealer and not yet received (0 or 1), so the
    /// sealer never blocks on a full channel while a seal waits behind it.
    spares_requested: u32,
    /// How long to wait for the sealer's spare before preallocating inline.
    spare_wait: Duration,
    sealer: Sender<SealerMsg<S::File>>,
    next_segment_id: Arc<AtomicU64>,
    /// The id of the last segment this flusher started writing. A new one
    /// must be higher: readers (which go on at the next id after the one
    /// they finished) and recovery take id order for write order.
    last_segment_id: Option<u64>,
    /// When the oldest write not yet covered by an fsync happened.
    unsynced_since: Option<Instant>,
    /// Failed segment writes and fdatasyncs in a row (a success resets it).
    failures_in_row: u32,
    /// No attempt to get a segment before this (backoff after a failure).
    retry_at: NotBefore,
    /// Backoffs since the last fresh segment: the step of the next one.
    retry_step: u32,
    /// First sequence number of the next fresh segment: past every record
    /// written to the abandoned one (a failed fsync does not prove those
    /// bytes absent; Buffered records among them were acknowledged), or to
    /// the full one sealed without a successor.
    resume_seq: u64,
    /// The number after the shard's last durable record: what the
    /// watermark says (`Watermark::next_seq`). Never past a number no
    /// durable record or header backs, so a cursor that reaches it can
    /// never be ahead of what recovery finds. The numbers from here up to
    /// `resume_seq` no reader may get are written into the fresh
    /// segment's header (`skipped`), so the jump is durable with the first
    /// record that uses it: until then readers stop at the durable end,
    /// and a restart numbers on from there.
    durable_next_seq: u64,
    /// Record bytes made durable so far (published as `Watermark::bytes`).
    durable_bytes: u64,
}

/// A shard's flusher and sealer, built on a recovered folder but not yet
/// running: the daemon gives each its own thread
/// ([`ShardFlusher::open_recovered`]); the simulation drives both from one.
pub struct FlusherParts<S: Storage> {
    pub flusher: FlusherCore<S>,
    pub sealer: SealerCore<S>,
    /// The sealer's work, sent by the flusher.
    pub sealer_inbox: Receiver<SealerMsg<S::File>>,
    pub report: RecoveryReport,
    /// The sealed segments the shard's checker must read before readers
    /// open them, in id order (see [`crate::shard::checker`]).
    pub unchecked: Vec<SegmentInfo>,
}

impl<S: Storage> FlusherCore<S> {
    /// Set up the flusher and sealer of a recovered shard: charge the
    /// recovered bytes to the budget, take the first segment (a spare
    /// recovery kept, or a new one), hand one spare to the sealer's channel
    /// or ask it for one, and publish the starting watermark.
    pub fn build(
        storage: S,
        cfg: FlusherConfig,
        queue: Arc<ShardQueue>,
        recovered: Recovered<S::File>,
        clock: Clock,
    ) -> io::Result<FlusherParts<S>> {
        queue.set_health(ShardHealth::Starting);
        queue.set_spin(cfg.spin);
        let report = recovered.report;
        let (unchecked, durable_bytes) = account_recovery(&queue, &report);
        let next_segment_id = Arc::new(AtomicU64::new(report.next_segment_id));
        // Invariant: one spare is either waiting in the channel or being
        // prepared, never more, so the sealer never blocks on a full channel
        // while a seal waits behind it.
        let (spare_tx, spare_rx) = sync_channel(1);
        let (first, have_spare) = Self::first_segment(
            &storage,
            &cfg,
            &queue,
            recovered.spares,
            &next_segment_id,
            &spare_tx,
        )?;
        let sealer = SealerCore::new(
            storage.clone(),
            cfg.dir.clone(),
            queue.shard,
            queue.clone(),
            queue.free.clone(),
            cfg.segment_bytes_max,
            next_segment_id.clone(),
            spare_tx,
        );
        let (sealer_tx, sealer_inbox) = sealer_channel();
        let mut spares_requested = 1;
        if !have_spare && first.is_ok() {
            let _ = sealer_tx.send(SealerMsg::PrepareSegment);
        } else if !have_spare {
            spares_requested = 0;
        }
        let active = match first {
            Ok(pre) => Some(ActiveSegment::start(pre, cfg.shard, report.next_seq)),
            Err(e) => {
                tracing::error!(shard = cfg.shard, error = %e, "cannot preallocate a segment at start; the shard refuses pushes until it can (retrying with backoff)");
                queue.set_unwritable(&e, "no segment to write");
                None
            }
        };
        queue.publish_durable(Watermark {
            segment_id: active
                .as_ref()
                .map_or(next_segment_id.load(Ordering::Relaxed), |a| {
                    a.header.segment_id
                }),
            offset: 0,
            next_seq: report.next_seq,
            bytes: durable_bytes,
            ..Watermark::default()
        });
        let writable = active.is_some();
        let last_segment_id = active.as_ref().map(|a| a.header.segment_id);
        let flusher = FlusherCore {
            storage,
            cfg: cfg.clone(),
            queue: queue.clone(),
            spare_wait: spare_wait_on(&clock),
            clock,
            active,
            spares: spare_rx,
            spares_requested,
            sealer: sealer_tx,
            next_segment_id,
            last_segment_id,
            unsynced_since: None,
            failures_in_row: 0,
            retry_at: NotBefore::default(),
            retry_step: 0,
            resume_seq: report.next_seq,
            durable_next_seq: report.next_seq,
            durable_bytes,
        };
        queue.clear_shutdown();
        if writable {
            queue.set_writable();
        }
        Ok(FlusherParts {
            flusher,
            sealer,
            sealer_inbox,
            report,
            unchecked,
        })
    }

    /// The first segment to write: a spare recovery kept, or a new one
    /// (an error when none can be preallocated: a shard on a full disk
    /// still starts, refuses pushes (Overloaded) and retries, while its
    /// drain delivers and frees space). A second spare recovery kept goes
    /// into the sealer's `spare_tx` (whether it did is returned), and any
    /// further ones are removed.
    fn first_segment(
        storage: &S,
        cfg: &FlusherConfig,
        queue: &ShardQueue,
        spares: Vec<Preallocated<S::File>>,
        next_segment_id: &AtomicU64,
        spare_tx: &SyncSender<io::Result<Preallocated<S::File>>>,
    ) -> io::Result<(io::Result<Preallocated<S::File>>, bool)> {
        let mut spares = spares.into_iter();
        let first = match spares.next() {
            Some(s) => Ok(s),
            None => {
                let id = next_segment_id.fetch_add(1, Ordering::Relaxed);
                preallocate(storage, &cfg.dir, id, cfg.segment_bytes_max)
                    .inspect_err(|_| queue.free.note_failed(id))
            }
        };
        let have_spare = match spares.next() {
            Some(extra) => spare_tx.try_send(Ok(extra)).is_ok(),
            None => false,
        };
        for unused in spares {
            storage.remove(&unused.path)?;
        }
        // Recovery removed every `.free` file a running shard set aside.
        queue.free.forget();
        Ok((first, have_spare))
    }
}

/// How long the flusher waits for the sealer's spare when its segment is
/// full: a manual clock (the simulation) runs the sealer only when told
/// to, so waiting for its spare would wait for nothing.
fn spare_wait_on(clock: &Clock) -> Duration {
    if clock.is_manual() {
        Duration::ZERO
    } else {
        SPARE_WAIT
    }
}

/// Publishes what recovery found (records lost and recovered, files
/// quarantined), charges its bytes to the budget and closes the readers'
/// gate on the sealed segments taken at their footer's word. Returns those
/// segments (the checker's work, in id order) and the running count of
/// durable record bytes: a flusher restarted within the process carries on
/// from the last one's (the drain's count of confirmed bytes goes on from
/// there too); at the daemon's start it is what recovery found.
fn account_recovery(queue: &ShardQueue, report: &RecoveryReport) -> (Vec<SegmentInfo>, u64) {
    let stats = &queue.stats;
    stats
        .records_lost
        .store(report.lost_records, Ordering::Relaxed);
    let found: u64 = report.segments.iter().map(|s| s.record_count).sum();
    stats.recovered_records.store(
        found.saturating_sub(report.segments.iter().map(|s| s.lost_records).sum()),
        Ordering::Relaxed,
    );
    stats
        .quarantined_files
        .store(report.quarantined.len() as u64, Ordering::Relaxed);
    queue.budget.charge(report.bytes());
    let found = report.unchecked();
    let ids: Vec<u64> = found.iter().map(|s| s.segment_id).collect();
    let todo = queue.begin_checks(&ids);
    let unchecked: Vec<SegmentInfo> = found
        .into_iter()
        .filter(|s| todo.binary_search(&s.segment_id).is_ok())
        .cloned()
        .collect();
    let durable_bytes = match queue.durable().bytes {
        0 => report.segments.iter().map(|s| record_bytes(s.bytes)).sum(),
        carried => carried,
    };
    (unchecked, durable_bytes)
}

impl<S: Storage> FlusherCore<S> {
    fn run(mut self) {
        let mut group: Vec<AppendBatch> = Vec::new();
        loop {
            let deadline = self.wake_deadline();
            self.queue
                .take_group(deadline, self.group_bound(), &mut group);
            if group.is_empty() {
                if self.queue.shutdown_requested() {
                    break;
                }
                self.idle();
                continue;
            }
            self.handle_group(&mut group);
        }
        self.finish();
    }

    /// How much one group takes at most (see [`ShardQueue::take_group`]).
    pub fn group_bound(&self) -> GroupBound {
        GroupBound {
            bytes: self.cfg.group_bytes_max,
            records: GROUP_RECORDS_MAX,
        }
    }

    /// Nothing was queued by the deadline: fsync Buffered records that are
    /// due, and keep trying to get a segment. Nobody pushes while the shard
    /// is unwritable (it refuses pushes at the door), so this is how it
    /// writes again by itself once the disk has recovered.
    pub fn idle(&mut self) {
        self.flush_buffered();
        let wanted = self.queue.take_rotation_wanted();
        if self.active.is_none() {
            let _ = self.ensure_segment();
        } else if let Some(confirmed) = wanted {
            self.rotate_delivered(confirmed);
        }
    }

    /// The drain asked (the WAB budget refuses pushes, and every record
    /// below `confirmed` is delivered): if that covers every record of the
    /// active segment, seal it now so the drain can delete it and release
    /// its bytes. Pushes refused at the budget never reach the flusher, so
    /// no full segment would ever make it rotate.
    fn rotate_delivered(&mut self, confirmed: u64) {
        let active = self.active();
        if active.is_empty() || active.next_seq() > confirmed {
            return;
        }
        tracing::info!(
            shard = self.cfg.shard,
            segment = active.header.segment_id,
            "pushes are refused at wab.wab_bytes_max and every record of the active segment is delivered: sealing it early so it can be deleted"
        );
        let _ = self.rotate();
    }

    /// Write, fsync and answer one group taken from the queue.
    pub fn handle_group(&mut self, group: &mut Vec<AppendBatch>) {
        if self.queue.health() == ShardHealth::Failed {
            for b in group.drain(..) {
                b.complete(Err(NackReason::InternalError));
            }
            return;
        }
        if let Err(reason) = self.ensure_segment() {
            for b in group.drain(..) {
                b.complete(Err(reason));
            }
            return;
        }
        self.commit(group);
    }

    /// A clean stop: fsync what is Buffered, nack what is queued, hand the
    /// active segment to the sealer to seal (or leave it for recovery) and
    /// tell the sealer to stop.
    pub fn finish(mut self) {
        self.flush_buffered();
        self.queue.fail_queued(NackReason::InternalError);
        if let Some(active) = self.active.take() {
            if active.is_empty() || self.unsynced_since.is_some() {
                // Empty: it stays a spare for the next start. Unsynced (the
                // last fsync failed just now): recovery checks it.
                drop(active);
            } else {
                // A clean stop leaves only sealed segments, so the next
                // start has nothing to repair (and says nothing about it).
                let _ = self
                    .sealer
                    .send(SealerMsg::SealSegment(active.into_sealing()));
            }
        }
        let _ = self.sealer.send(SealerMsg::Stop);
    }

    /// When the thread must wake even if nothing is pushed: the periodic
    /// fsync of Buffered records, or the next attempt to get a segment.
    pub fn wake_deadline(&self) -> Option<Instant> {
        let flush = self
            .unsynced_since
            .map(|t| t + self.cfg.buffered_flush_interval);
        let retry = if self.active.is_none() {
            Some(self.retry_at.at().unwrap_or_else(|| self.clock.now()))
        } else {
            None
        };
        match (flush, retry) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Make sure there is a segment to write, starting a fresh one if the
    /// last was abandoned. While none can be had (and during the backoff
    /// between attempts) the answer is the nack every push gets: Overloaded
    /// when the disk is full (retryable: delivery frees space), else
    /// InternalError.
    fn ensure_segment(&mut self) -> Result<(), NackReason> {
        if self.active.is_some() {
            return Ok(());
        }
        if self.retry_at.wait(self.clock.now()).is_some() {
            return Err(self.queue.unwritable_nack());
        }
        match self.next_spare() {
            Ok(pre) => {
                self.last_segment_id = Some(pre.segment_id);
                // Numbering goes on above every number a reader may have
                // seen (the durable floor): never below it.
                assert!(
                    self.resume_seq >= self.durable_next_seq,
                    "shard {}: a fresh segment would number from {} below the durable next seq {}",
                    self.cfg.shard,
                    self.resume_seq,
                    self.durable_next_seq
                );
                let mut active = ActiveSegment::start(pre, self.cfg.shard, self.resume_seq);
                active.header.skipped = self.resume_seq - self.durable_next_seq;
                tracing::info!(
                    shard = self.cfg.shard,
                    segment = active.header.segment_id,
                    "writing again in a fresh segment"
                );
                self.active = Some(active);
                // Tell the drain the abandoned segment is closed: it then
                // reads it to the end of what was acknowledged. Without
                // this the watermark stayed inside the abandoned segment
                // until the next fsync, and Buffered records acknowledged
                // there waited for a Sync push that might never come.
                self.publish();
                self.retry_at.clear();
                self.retry_step = 0;
                self.queue.set_writable();
                Ok(())
            }
            Err(e) => {
                let wait = self.back_off();
                let why = if spillway_wab::storage::is_no_space(&e) {
                    NO_ROOM
                } else {
                    "no segment to write"
                };
                self.queue.set_unwritable(&e, why);
                if self.queue.stats.log_segment_failure() {
                    tracing::error!(shard = self.cfg.shard, error = %e, retry_in_ms = wait.as_millis() as u64, "cannot start a segment; pushes are refused until one can be started (retrying with backoff)");
                }
                Err(self.queue.unwritable_nack())
            }
        }
    }

    /// No attempt to get a segment for the next wait; returns it.
    fn back_off(&mut self) -> Duration {
        let wait = SEGMENT_RETRY.delay(self.retry_step);
        self.retry_at.set(self.clock.now(), wait);
        self.retry_step += 1;
        wait
    }

    /// Write one group, fsync if needed, answer every batch.
    fn commit(&mut self, group: &mut Vec<AppendBatch>) {
        let records: u64 = group.iter().map(|b| b.records.len() as u64).sum();
        let payload: u64 = group.iter().map(|b| b.bytes).sum();
        let needs_fsync = group.iter().any(|b| b.needs_fsync);
        let full = !self.active().fits(payload, records) && !self.active().is_empty();
        if full && self.rotate().is_err() {
            // No next segment (or the fsync before sealing failed): the
            // full one is sealed (or abandoned), and the shard refuses
            // pushes until a fresh segment can be had.
            let reason = self.queue.unwritable_nack();
            for b in group.drain(..) {
                b.complete(Err(reason));
            }
            return;
        }
        let before = self.active().write_offset;
        let started = Instant::now();
        let written = self.write_group(group, records as usize);
        let first_seq = match written {
            Ok(seq) => seq,
            Err(e) => {
                self.queue
                    .stats
                    .write_failures
                    .fetch_add(1, Ordering::Relaxed);
                self.fail_group(group, "writing a group", &e, before);
                return;
            }
        };
        let disk_bytes = self.active().write_offset - before;
        if self.unsynced_since.is_none() {
            self.unsynced_since = Some(self.clock.now());
        }
        let due = self
            .unsynced_since
            .is_some_and(|t| self.clock.since(t) >= self.cfg.buffered_flush_interval);
        if needs_fsync || due {
            if let Err(e) = self.sync() {
                self.queue
                    .stats
                    .fsync_failures
                    .fetch_add(1, Ordering::Relaxed);
                // Not charged: the segment is abandoned with these bytes
                // past its acknowledged end, and deleting it releases only
                // up to there (charging them leaked them for good).
                self.fail_group(group, "fdatasync", &e, before);
                return;
            }
        }
        self.queue.budget.charge(disk_bytes);
        self.failures_in_row = 0;
        let stats = &self.queue.stats;
        stats.groups.fetch_add(1, Ordering::Relaxed);
        stats.records.fetch_add(records, Ordering::Relaxed);
        stats
            .commit_us
            .observe(started.elapsed().as_micros() as u64);
        stats.group_records.observe(records);
        stats.bytes.fetch_add(payload, Ordering::Relaxed);
        self.queue
            .taps
            .acknowledged(self.cfg.shard, first_seq, group);
        let mut seq = first_seq;
        for b in group.drain(..) {
            let n = b.records.len() as u64;
            b.complete(Ok(seq));
            seq += n;
        }
    }

    /// Append every record of the group, [`WRITE_CHUNK_RECORDS`] per
    /// vectored write; returns the first record's sequence number. On error
    /// the caller abandons the segment, so a chunk written before the
    /// failing one is never acknowledged (and its seqs are not reused).
    fn write_group(&mut self, group: &[AppendBatch], records: usize) -> io::Result<u64> {
        let mut first_seq = None;
        let mut chunk: Vec<AppendRecord<'_>> = Vec::with_capacity(records.min(WRITE_CHUNK_RECORDS));
        for b in group {
            for (payload, meta, payload_crc) in b.records.iter() {
                chunk.push(AppendRecord {
                    payload,
                    meta,
                    payload_crc,
                });
                if chunk.len() == WRITE_CHUNK_RECORDS {
                    self.append_chunk(&mut chunk, &mut first_seq)?;
                }
            }
        }
        if !chunk.is_empty() {
            self.append_chunk(&mut chunk, &mut first_seq)?;
        }
        Ok(first_seq.unwrap_or_else(|| self.active().next_seq()))
    }

    fn append_chunk(
        &mut self,
        chunk: &mut Vec<AppendRecord<'_>>,
        first_seq: &mut Option<u64>,
    ) -> io::Result<()> {
        let seq = self.active.as_mut().unwrap().append(chunk)?;
        first_seq.get_or_insert(seq);
        chunk.clear();
        Ok(())
    }

    fn active(&self) -> &ActiveSegment<S::File> {
        self.active
            .as_ref()
            .expect("active segment present (ensure_segment ran)")
    }

    fn sync(&mut self) -> io::Result<()> {
        let start = Instant::now();
        let a = self.active.as_mut().unwrap();
        let newly = record_bytes(a.write_offset) - record_bytes(a.durable_offset);
        let result = a.sync();
        let us = start.elapsed().as_micros() as u64;
        self.queue.stats.record_fsync(us);
        if result.is_ok() {
            self.durable_bytes += newly;
            self.unsynced_since = None;
            self.publish();
        }
        result
    }

    /// Publish the active segment's durable end. Its numbers count only
    /// once something durable backs them: a fresh segment after a failed
    /// group whose header is not yet durable leaves `next_seq` at the last
    /// durable record, below the numbers it skips.
    fn publish(&mut self) {
        let a = self.active.as_ref().expect("an active segment to publish");
        if a.durable_offset > 0 {
            debug_assert_eq!(
                a.durable_offset, a.write_offset,
                "published right after a sync"
            );
            self.durable_next_seq = a.next_seq();
        }
        self.queue.publish_durable(Watermark {
            segment_id: a.header.segment_id,
            offset: a.durable_offset,
            next_seq: self.durable_next_seq,
            bytes: self.durable_bytes,
            ..Watermark::default()
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
            self.after_failure(&e, None);
        }
    }

    /// Nack the group and abandon the segment (see [`Self::after_failure`]).
    fn fail_group(
        &mut self,
        group: &mut Vec<AppendBatch>,
        what: &str,
        e: &io::Error,
        group_offset: u64,
    ) {
        tracing::error!(shard = self.cfg.shard, error = %e, records = group.iter().map(|b| b.records.len()).sum::<usize>(), "{what} failed; the group is nacked and the segment abandoned (never written or fsynced again)");
        // Abandon first, so the state a client sees after its nack already
        // reflects the failure.
        self.after_failure(e, Some(group_offset));
        let reason = nack_for(e);
        for b in group.drain(..) {
            b.complete(Err(reason));
        }
    }

    /// After a failed write or fdatasync: the segment is abandoned (the
    /// kernel may have dropped its dirty pages, so it is never fsynced
    /// again; recovery checks it at the next start) and the next push
    /// starts a fresh one. After `fsync_failures_max` failures in a row the
    /// shard stops trying on every push and backs off instead (up to
    /// [`SEGMENT_RETRY_MAX`] between attempts) until a write and fsync
    /// succeed again; it never stops for good on its own.
    ///
    /// `acked_end`: where the records that were nacked start (the failed
    /// group's offset); `None` when every record written was acknowledged
    /// (a failed fsync of Buffered records).
    fn after_failure(&mut self, e: &io::Error, acked_end: Option<u64>) {
        self.failures_in_row += 1;
        self.unsynced_since = None;
        if let Some(old) = self.active.take() {
            self.resume_seq = old.next_seq();
            let acked_end = acked_end.unwrap_or(old.write_offset);
            if acked_end > old.durable_offset {
                // Buffered records acknowledged since the last fsync: the
                // segment is never fsynced again, so they are not
                // delivered (the tier allows losing them to a failed
                // fsync; their pages may already be gone).
                tracing::error!(
                    shard = self.cfg.shard,
                    segment = old.header.segment_id,
                    bytes = acked_end - old.durable_offset,
                    "Buffered records acknowledged since the last fdatasync are lost with the abandoned segment (never fsynced, not delivered)"
                );
            }
            self.queue.mark_abandoned(Abandoned {
                segment_id: old.header.segment_id,
                first_seq: old.header.first_seq,
                acked_end,
                durable_end: old.durable_offset,
                durable_seq: self.durable_next_seq,
            });
            let _ = self.sealer.send(SealerMsg::AbandonSegment {
                path: old.path.clone(),
                durable_offset: old.durable_offset,
            });
            // The drain may finish (and, once confirmed, delete) it now,
            // not only once a fresh segment starts: on a disk with room for
            // one segment, none can start before this one goes.
            self.publish_closed(old.header.segment_id);
        }
        self.queue
            .set_unwritable(e, "the last write or fsync failed");
        if self.failures_in_row >= self.cfg.fsync_failures_max {
            let wait = self.back_off();
            tracing::error!(
                shard = self.cfg.shard,
                failures_in_row = self.failures_in_row,
                retry_in_ms = wait.as_millis() as u64,
                "repeated storage failures: pushes to this shard are refused until a fresh segment can be written (retrying with backoff)"
            );
        } else {
            self.retry_at.clear();
        }
    }

    /// Hand the full segment to the sealer and continue in a preallocated
    /// one. When there is no next segment (a full disk), the full one is
    /// sealed all the same and the shard waits for a fresh one
    /// ([`Self::seal_without_successor`]); either way the active segment
    /// is gone on `Err`.
    fn rotate(&mut self) -> io::Result<()> {
        if self.active().write_offset > self.active().durable_offset {
            // Buffered records not yet covered: make them durable (and
            // visible to the drain) before the segment leaves this thread.
            if let Err(e) = self.sync() {
                self.queue
                    .stats
                    .fsync_failures
                    .fetch_add(1, Ordering::Relaxed);
                self.after_failure(&e, None);
                return Err(e);
            }
        }
        let pre = match self.next_spare() {
            Ok(pre) => pre,
            Err(e) => {
                self.seal_without_successor(&e);
                return Err(e);
            }
        };
        let old = self.active.take().unwrap();
        let next_seq = old.next_seq();
        self.last_segment_id = Some(pre.segment_id);
        self.active = Some(ActiveSegment::start(pre, self.cfg.shard, next_seq));
        let _ = self.sealer.send(SealerMsg::SealSegment(old.into_sealing()));
        // The old segment is closed for the drain now, not at the next
        // fsync: after an early rotation no push may come until it is gone.
        self.publish();
        Ok(())
    }

    /// The active segment is full and no next one can be had (no room on
    /// the disk for another preallocated segment). Keeping it active kept
    /// it on disk for good: the drain deletes only segments it has read to
    /// their end, and it never finishes the one being written, so a disk
    /// with room for one segment stayed full (every push Overloaded) until
    /// a restart even after the sink had confirmed everything. So it is
    /// sealed like any full segment, the drain is told it is closed, and
    /// once delivery has confirmed it the drain deletes it; the flusher
    /// meanwhile retries a fresh segment with backoff and refuses pushes.
    fn seal_without_successor(&mut self, e: &io::Error) {
        let old = self.active.take().unwrap();
        self.resume_seq = old.next_seq();
        self.unsynced_since = None;
        self.publish_closed(old.header.segment_id);
        let (segment, next_seq) = (old.header.segment_id, old.next_seq());
        let _ = self.sealer.send(SealerMsg::SealSegment(old.into_sealing()));
        self.queue
            .stats
            .sealed_without_successor
            .fetch_add(1, Ordering::Relaxed);
        self.back_off();
        self.queue.set_unwritable(e, NO_ROOM);
        if self.queue.stats.log_segment_failure() {
            tracing::warn!(
                shard = self.cfg.shard,
                segment,
                next_seq,
                error = %e,
                segment_bytes_max = self.cfg.segment_bytes_max,
                "no room for the next segment: the full one is sealed and deleted once delivered; pushes get Overloaded until a fresh segment fits (rotating without a pause needs room for two segments per shard, see docs/operations.md)"
            );
        }
    }

    /// Tell the drain that segment `id` is no longer written (it was
    /// sealed without a successor, or abandoned) while there is no active
    /// segment: the watermark moves to the start of the next id, which no
    /// segment has passed yet (every later segment gets a higher id), so
    /// the drain reads `id` to its end, finishes it and, once it is
    /// confirmed, deletes it, freeing its room for the next segment.
    fn publish_closed(&self, id: u64) {
        self.queue.publish_durable(Watermark {
            segment_id: id + 1,
            offset: 0,
            next_seq: self.durable_next_seq,
            bytes: self.durable_bytes,
            ..Watermark::default()
        });
    }

    /// The sealer's next preallocated segment, or one preallocated here if
    /// the sealer is late or could not make one; asks the sealer for the
    /// next spare either way.
    fn next_spare(&mut self) -> io::Result<Preallocated<S::File>> {
        if self.spares_requested == 0 {
            let _ = self.sealer.send(SealerMsg::PrepareSegment);
            self.spares_requested = 1;
        }
        let result = match self.spares.recv_timeout(self.spare_wait) {
            Ok(got) => {
                self.spares_requested = 0;
                match got {
                    Ok(pre) => Ok(pre),
                    Err(e) => {
                        tracing::debug!(shard = self.cfg.shard, error = %e, "the sealer could not preallocate; trying inline");
                        self.preallocate_inline()
                    }
                }
            }
            Err(RecvTimeoutError::Timeout | RecvTimeoutError::Disconnected) => {
                tracing::warn!(
                    shard = self.cfg.shard,
                    "sealer late with a spare segment; preallocating inline"
                );
                self.preallocate_inline()
            }
        };
        // A spare the sealer finished after a late one was replaced inline
        // has a lower id than the segment written since. Writing it next
        // put ids out of write order, and every reader that had finished
        // the newer id skipped it whole, its records never delivered (the
        // power-cut test lost acknowledged records so under load). It is
        // unused: it goes, and a newer one is made.
        let result = match result {
            Ok(pre)
                if self
                    .last_segment_id
                    .is_some_and(|last| pre.segment_id <= last) =>
            {
                tracing::info!(
                    shard = self.cfg.shard,
                    segment = pre.segment_id,
                    last_written = self.last_segment_id,
                    "a spare the sealer made late is older than the segment written since; removing it and preallocating a newer one"
                );
                if let Err(e) = self.storage.remove(&pre.path) {
                    tracing::warn!(shard = self.cfg.shard, path = %pre.path.display(), error = %e, "could not remove an unused spare segment (recovery removes it at the next start)");
                }
                self.preallocate_inline()
            }
            other => other,
        };
        if result.is_ok() && self.spares_requested == 0 {
            let _ = self.sealer.send(SealerMsg::PrepareSegment);
            self.spares_requested = 1;
        }
        if let (Ok(pre), Some(last)) = (&result, self.last_segment_id) {
            assert!(
                pre.segment_id > last,
                "segment ids must follow write order: {} after {last}",
                pre.segment_id
            );
        }
        result
    }

    fn preallocate_inline(&self) -> io::Result<Preallocated<S::File>> {
        let free = &self.queue.free;
        free.remove_failed(&self.storage, &self.cfg.dir);
        let id = self.next_segment_id.fetch_add(1, Ordering::Relaxed);
        let made = preallocate(&self.storage, &self.cfg.dir, id, self.cfg.segment_bytes_max);
        if made.is_err() {
            free.note_failed(id);
        }
        made
    }
}
