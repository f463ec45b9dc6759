//! The Drain: one per shard. Its OS thread follows the shard's durable tail,
//! forms batches, hands them to the sink through the [`SinkHost`], and on
//! commit advances the shard's checkpoint and deletes fully confirmed
//! sealed segments (releasing their bytes from the WAB budget, so
//! backpressure lifts when delivery catches up).
//!
//! - Reads only durable records: up to the flusher's [`Watermark`], in the
//!   active segment too (delivery does not wait for a seal).
//! - One batch in flight per shard; order within the shard is preserved.
//! - Batches close at `max_records`, `max_bytes` (the smaller of the config
//!   and the sink's limits) or `linger` after their first record was read.
//! - Transient failures retry forever by default, with exponential backoff
//!   and full jitter capped at `retry_max`, honouring the sink's
//!   retry-after; with `max_retry_duration` set, a batch failing that long is
//!   dead-lettered. Permanent rejections go to the dead-letter store (fsynced
//!   before the checkpoint moves past them).
//!
//! The actor half exists for supervision, like the flusher's.

use std::collections::VecDeque;
use std::io;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use actix::prelude::*;
use sink_sdk::{Batch, Health, Outcome, Record, RecordOutcome, Sink};
use spillway_wab::deadletter::{DeadLetter, DeadLetterStore};
use spillway_wab::format::{classify, now_unix_us, open_name, sealed_name, FileKind};
use spillway_wab::{
    load_checkpoint, write_checkpoint, End, Opened, SegmentReader, Storage, StoredRecord,
};

use crate::shard::{ShardQueue, WabBudget, Watermark};

/// Creates a sink instance for a shard. Called at start, after a panic,
/// and after a reload.
pub type SinkMaker = Arc<dyn Fn(u32) -> Result<Box<dyn Sink>, String> + Send + Sync>;

/// Batching and retry settings of the drain (from `[sink]`).
#[derive(Debug, Clone, PartialEq)]
pub struct DrainSettings {
    pub max_records: usize,
    pub max_bytes: usize,
    pub linger: Duration,
    pub retry_initial: Duration,
    pub retry_max: Duration,
    /// `None`: retry transient failures forever.
    pub max_retry_duration: Option<Duration>,
}

/// The current sink of the daemon, shared by every drain. A reload stores
/// a new maker and bumps `epoch`; each drain switches at its next batch
/// boundary.
pub struct SinkSlot {
    inner: Mutex<(SinkMaker, DrainSettings, String)>,
    epoch: AtomicU64,
}

impl SinkSlot {
    pub fn new(maker: SinkMaker, settings: DrainSettings, description: String) -> Arc<Self> {
        Arc::new(SinkSlot {
            inner: Mutex::new((maker, settings, description)),
            epoch: AtomicU64::new(1),
        })
    }

    /// Install a new sink; drains pick it up between batches.
    pub fn replace(&self, maker: SinkMaker, settings: DrainSettings, description: String) {
        *self.inner.lock().unwrap() = (maker, settings, description);
        self.epoch.fetch_add(1, Ordering::Release);
    }

    pub fn epoch(&self) -> u64 {
        self.epoch.load(Ordering::Acquire)
    }

    pub fn current(&self) -> (SinkMaker, DrainSettings, String) {
        self.inner.lock().unwrap().clone()
    }
}

/// Counters of one shard's delivery.
#[derive(Debug, Default)]
pub struct DrainStats {
    pub delivered_records: AtomicU64,
    pub delivered_batches: AtomicU64,
    pub retries: AtomicU64,
    pub dead_lettered: AtomicU64,
    pub sink_restarts: AtomicU64,
    pub segments_deleted: AtomicU64,
    /// Every record below this sequence number is confirmed.
    pub checkpoint: AtomicU64,
}

/// Runs the sink for one shard: creates the instance, catches its panics,
/// recreates it with backoff, and switches to a reloaded sink between batches.
pub struct SinkHost {
    shard: u32,
    slot: Arc<SinkSlot>,
    epoch: u64,
    maker: SinkMaker,
    settings: DrainSettings,
    instance: Option<Box<dyn Sink>>,
    /// Failures (panics, creation errors) in a row; drives the backoff.
    failures: u32,
    not_before: Option<Instant>,
    stats: Arc<DrainStats>,
}

/// Longest wait before re-creating a failed sink instance.
const SINK_RESTART_BACKOFF_MAX: Duration = Duration::from_secs(30);

fn panic_message(p: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = p.downcast_ref::<&str>() {
        s.to_string()
    } else if let Some(s) = p.downcast_ref::<String>() {
        s.clone()
    } else {
        "non-string panic payload".into()
    }
}

impl SinkHost {
    pub fn new(shard: u32, slot: Arc<SinkSlot>, stats: Arc<DrainStats>) -> Self {
        let epoch = slot.epoch();
        let (maker, settings, _) = slot.current();
        SinkHost {
            shard,
            slot,
            epoch,
            maker,
            settings,
            instance: None,
            failures: 0,
            not_before: None,
            stats,
        }
    }

    pub fn settings(&self) -> &DrainSettings {
        &self.settings
    }

    /// Switch to a reloaded sink if there is one (call between batches).
    pub fn check_reload(&mut self) {
        let epoch = self.slot.epoch();
        if epoch == self.epoch {
            return;
        }
        let (maker, settings, description) = self.slot.current();
        tracing::info!(shard = self.shard, sink = %description, "switching to the reloaded sink at a batch boundary");
        self.epoch = epoch;
        self.maker = maker;
        self.settings = settings;
        self.instance = None;
        self.failures = 0;
        self.not_before = None;
    }

    /// The effective (max_records, max_bytes) for the next batch.
    pub fn batch_limits(&mut self) -> (usize, usize) {
        let (r, b) = (self.settings.max_records, self.settings.max_bytes);
        match self.instance.as_ref() {
            Some(i) => {
                let l = i.limits();
                (r.min(l.max_records.max(1)), b.min(l.max_bytes.max(1)))
            }
            None => (r, b),
        }
    }

    fn ensure_instance(&mut self) -> Result<(), String> {
        if self.instance.is_some() {
            return Ok(());
        }
        if let Some(t) = self.not_before {
            let now = Instant::now();
            if now < t {
                thread::sleep(t - now);
            }
        }
        let maker = self.maker.clone();
        let shard = self.shard;
        match catch_unwind(AssertUnwindSafe(|| maker(shard))) {
            Ok(Ok(mut inst)) => {
                if let Ok(Health::Unhealthy(why)) =
                    catch_unwind(AssertUnwindSafe(|| inst.health_check()))
                {
                    tracing::warn!(shard, sink = inst.name(), reason = %why, "sink reports unhealthy; delivering anyway (failures will be retried)");
                }
                self.instance = Some(inst);
                Ok(())
            }
            Ok(Err(e)) => Err(self.failed(format!("creating the sink failed: {e}"))),
            Err(p) => Err(self.failed(format!(
                "creating the sink panicked: {}",
                panic_message(&*p)
            ))),
        }
    }

    fn failed(&mut self, reason: String) -> String {
        self.failures += 1;
        self.stats.sink_restarts.fetch_add(1, Ordering::Relaxed);
        let backoff = Duration::from_millis(100)
            .saturating_mul(1 << (self.failures - 1).min(10))
            .min(SINK_RESTART_BACKOFF_MAX);
        self.not_before = Some(Instant::now() + backoff);
        tracing::error!(shard = self.shard, reason = %reason, restart_in_ms = backoff.as_millis() as u64, "sink instance failed; it will be re-created");
        reason
    }

    /// Whether the sink answers its health check now (a cheap probe while
    /// backing off: an HTTP sink only opens a TCP connection). False when
    /// there is no instance or the check panics.
    pub fn probe(&mut self) -> bool {
        let Some(inst) = self.instance.as_mut() else {
            return false;
        };
        matches!(
            catch_unwind(AssertUnwindSafe(|| inst.health_check())),
            Ok(Health::Healthy)
        )
    }

    /// Deliver one batch; a panic becomes a Retry and a restart of the instance.
    pub fn deliver(&mut self, batch: &Batch<'_>) -> Outcome {
        if let Err(reason) = self.ensure_instance() {
            return Outcome::Retry {
                after: None,
                reason,
            };
        }
        let inst = self.instance.as_mut().unwrap();
        match catch_unwind(AssertUnwindSafe(|| inst.deliver(batch))) {
            Ok(outcome) => {
                self.failures = 0;
                outcome
            }
            Err(p) => {
                let name = inst.name().to_string();
                self.instance = None;
                let reason = self.failed(format!("sink {name} panicked: {}", panic_message(&*p)));
                Outcome::Retry {
                    after: None,
                    reason,
                }
            }
        }
    }
}

/// A segment the reader has finished, waiting for the checkpoint to pass it.
struct Finished {
    segment_id: u64,
    /// Sequence number after its last record.
    end_seq: u64,
    /// Bytes it counts against the WAB budget.
    bytes: u64,
}

/// Reads a shard's records in order, following the durable tail.
struct Cursor<S: Storage> {
    storage: S,
    dir: PathBuf,
    reader: Option<(u64, SegmentReader<S::File>)>,
    /// Where the reader's segment ends once it is no longer written (its
    /// end, or an abandoned segment's acknowledged end): looked up once
    /// per segment, not per record.
    closed_limit: Option<u64>,
    last_done: Option<u64>,
    next_seq: u64,
}

impl<S: Storage> Cursor<S> {
    /// The next durable record at or after `next_seq`, if any yet.
    fn next(
        &mut self,
        wm: Watermark,
        queue: &ShardQueue,
        finished: &mut VecDeque<Finished>,
    ) -> io::Result<Option<StoredRecord>> {
        loop {
            if self.reader.is_none() && !self.open_next(wm)? {
                return Ok(None);
            }
            let (id, reader) = self.reader.as_mut().unwrap();
            let id = *id;
            if id == wm.segment_id {
                reader.set_limit(wm.offset);
            } else if id < wm.segment_id {
                // No longer written: read it to its end (the limit set while
                // it was the active segment would end it early), or, if the
                // flusher abandoned it, to the end of what was acknowledged
                // (the failed group after it was nacked).
                let end = *self.closed_limit.get_or_insert_with(|| {
                    queue.abandoned(id, false).map_or(u64::MAX, |a| a.acked_end)
                });
                reader.set_limit(end);
            } else {
                return Ok(None);
            }
            match reader.next()? {
                Some(rec) if rec.seq < self.next_seq => continue,
                Some(rec) => {
                    self.next_seq = rec.seq + 1;
                    return Ok(Some(rec));
                }
                None if id < wm.segment_id => {
                    if let Some(End::Corrupt { offset, detail }) = reader.end() {
                        tracing::error!(segment = id, offset, detail = %detail, "segment fails its check while draining; the rest of it is skipped (it stays on disk)");
                    }
                    // An abandoned segment ends where the next one starts
                    // (past the nacked records), so it is deleted only once
                    // the checkpoint is there too: no restart in between
                    // can mistake the nacked numbers for a gap.
                    let end_seq = queue
                        .abandoned(id, false)
                        .map_or(reader.next_seq(), |a| a.next_seq.max(reader.next_seq()));
                    finished.push_back(Finished {
                        segment_id: id,
                        end_seq,
                        bytes: reader.offset(),
                    });
                    self.last_done = Some(id);
                    self.reader = None;
                }
                None => return Ok(None),
            }
        }
    }

    /// Open the segment that holds `next_seq` (or the next one after the
    /// last finished). False when there is none yet.
    fn open_next(&mut self, wm: Watermark) -> io::Result<bool> {
        let mut candidates: Vec<(u64, u64, SegmentReader<S::File>)> = Vec::new();
        for path in self.storage.list(&self.dir)? {
            let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
            let id = match classify(name) {
                Some(FileKind::Open(id) | FileKind::Sealed(id)) => id,
                _ => continue,
            };
            if id > wm.segment_id || self.last_done.is_some_and(|d| id <= d) {
                continue;
            }
            let file = match self.storage.open_read(&path) {
                Ok(f) => f,
                Err(e) if e.kind() == io::ErrorKind::NotFound => continue, // renamed by the sealer meanwhile
                Err(e) => return Err(e),
            };
            if let Opened::Reader(r) = SegmentReader::from_file(file)? {
                candidates.push((r.header().first_seq, id, r));
            }
        }
        candidates.sort_by_key(|c| (c.0, c.1));
        let pick = if self.last_done.is_some() {
            0
        } else {
            // First open: the last segment starting at or before next_seq.
            candidates
                .iter()
                .rposition(|c| c.0 <= self.next_seq)
                .unwrap_or(0)
        };
        if candidates.is_empty() {
            return Ok(false);
        }
        let (_, id, reader) = candidates.swap_remove(pick);
        self.reader = Some((id, reader));
        self.closed_limit = None;
        Ok(true)
    }
}

/// Settings of one shard's drain thread.
pub struct DrainConfig {
    pub shard: u32,
    pub dir: PathBuf,
}

/// The supervised actor owning a shard's drain thread.
pub struct Drain {
    shard: u32,
    stop: Arc<AtomicBool>,
    queue: Arc<ShardQueue>,
    thread: Option<JoinHandle<()>>,
    pub stats: Arc<DrainStats>,
}

/// Sent on shutdown: finish (or give up on) the batch in flight by
/// `deadline`, then stop. Nothing is lost either way: an unconfirmed batch is
/// delivered again after the restart. Every drain gets the same deadline, so
/// a daemon stops within one `shutdown_timeout_ms` however many shards it has.
#[derive(Message)]
#[rtype(result = "()")]
pub struct StopDrain {
    pub deadline: Instant,
    /// False: only raise the stop flag (so every drain starts finishing at
    /// once); true: also wait for the thread until `deadline` and stop the actor.
    pub wait: bool,
}

impl Drain {
    /// Start the drain thread of a shard.
    pub fn spawn<S: Storage>(
        storage: S,
        cfg: DrainConfig,
        queue: Arc<ShardQueue>,
        wab: Arc<WabBudget>,
        slot: Arc<SinkSlot>,
        dead_letters: Arc<Mutex<DeadLetterStore<S>>>,
        stats: Arc<DrainStats>,
    ) -> io::Result<Drain> {
        // The shard was opened first (`open_shard`), which moved an
        // unreadable or untrustworthy checkpoint aside; one that became
        // unreadable since is moved aside here (delivery then restarts at
        // the oldest record: at-least-once).
        let confirmed = load_checkpoint(&storage, &cfg.dir)?.confirmed;
        stats.checkpoint.store(confirmed, Ordering::Relaxed);
        let stop = Arc::new(AtomicBool::new(false));
        let worker = DrainThread {
            cursor: Cursor {
                storage: storage.clone(),
                dir: cfg.dir.clone(),
                reader: None,
                closed_limit: None,
                last_done: None,
                next_seq: confirmed,
            },
            host: SinkHost::new(cfg.shard, slot, stats.clone()),
            storage,
            shard: cfg.shard,
            dir: cfg.dir,
            queue: queue.clone(),
            wab,
            dead_letters,
            stats: stats.clone(),
            stop: stop.clone(),
            confirmed,
            persisted: confirmed,
            last_persist: Instant::now(),
            pending: VecDeque::new(),
            pending_bytes: 0,
            pending_since: None,
            finished: VecDeque::new(),
            retry: RetryState::default(),
            rng: now_unix_us() | 1,
        };
        let thread = thread::Builder::new()
            .name(format!("drain-{}", cfg.shard))
            .spawn(move || worker.run())?;
        Ok(Drain {
            shard: cfg.shard,
            stop,
            queue,
            thread: Some(thread),
            stats,
        })
    }

    /// Ask the thread to stop after its current batch, without waiting.
    pub fn request_stop(&self) {
        self.stop.store(true, Ordering::Release);
        self.queue.wake_durable_waiters();
    }

    fn stop_and_join(&mut self, deadline: Instant) {
        self.request_stop();
        let Some(t) = self.thread.take() else { return };
        let timeout = deadline.saturating_duration_since(Instant::now());
        while !t.is_finished() && Instant::now() < deadline {
            thread::sleep(Duration::from_millis(5));
        }
        if t.is_finished() {
            let _ = t.join();
        } else {
            tracing::warn!(shard = self.shard, timeout_ms = timeout.as_millis() as u64, "sink batch still in flight at shutdown; abandoning it (it is delivered again after restart)");
        }
    }
}

impl Actor for Drain {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        ctx.run_interval(Duration::from_millis(200), |act, ctx| {
            let dead = act.thread.as_ref().is_none_or(|t| t.is_finished());
            if dead && !act.stop.load(Ordering::Acquire) {
                tracing::error!(
                    shard = act.shard,
                    "drain thread died; stopping it for the supervisor"
                );
                ctx.stop();
            }
        });
    }
}

impl Drop for Drain {
    fn drop(&mut self) {
        self.stop_and_join(Instant::now() + Duration::from_secs(5));
    }
}

impl Handler<StopDrain> for Drain {
    type Result = ();
    fn handle(&mut self, msg: StopDrain, ctx: &mut Context<Self>) {
        if !msg.wait {
            self.request_stop();
            return;
        }
        self.stop_and_join(msg.deadline);
        ctx.stop();
    }
}

#[derive(Default)]
struct RetryState {
    attempts: u32,
    first_failure: Option<Instant>,
    last_log: Option<Instant>,
}

/// How often a backing-off drain checks whether the sink is back.
const PROBE_EVERY: Duration = Duration::from_secs(1);
/// How often a shard logs a still-failing sink at warn level.
const RETRY_LOG_EVERY: Duration = Duration::from_secs(10);
/// Longest the on-disk checkpoint lags the confirmed point while busy.
const CHECKPOINT_EVERY: Duration = Duration::from_millis(200);
/// How long an idle drain sleeps before looking again (it is woken by new
/// durable records anyway).
const IDLE_WAIT: Duration = Duration::from_millis(500);

struct DrainThread<S: Storage> {
    storage: S,
    shard: u32,
    dir: PathBuf,
    queue: Arc<ShardQueue>,
    wab: Arc<WabBudget>,
    dead_letters: Arc<Mutex<DeadLetterStore<S>>>,
    stats: Arc<DrainStats>,
    stop: Arc<AtomicBool>,
    host: SinkHost,
    cursor: Cursor<S>,
    /// Every record below this is confirmed (by the sink or the dead-letter store).
    confirmed: u64,
    /// What the checkpoint file on disk says (<= `confirmed`).
    persisted: u64,
    last_persist: Instant,
    /// Read, not yet confirmed, in order.
    pending: VecDeque<StoredRecord>,
    pending_bytes: usize,
    /// When the oldest pending record was read (linger starts there).
    pending_since: Option<Instant>,
    finished: VecDeque<Finished>,
    retry: RetryState,
    rng: u64,
}

impl<S: Storage> DrainThread<S> {
    fn stopping(&self) -> bool {
        self.stop.load(Ordering::Acquire)
    }

    fn run(mut self) {
        self.deliver_until_stopped();
        if let Err(e) = self.persist() {
            tracing::error!(shard = self.shard, error = %e, "writing the final delivery checkpoint failed; some records will be delivered again");
        }
    }

    fn deliver_until_stopped(&mut self) {
        while !self.stopping() {
            self.host.check_reload();
            let wm = self.queue.durable();
            if let Err(e) = self.fill(wm) {
                tracing::error!(shard = self.shard, error = %e, "reading segments for delivery failed; retrying");
                self.sleep(Duration::from_secs(1));
                continue;
            }
            if self.pending.is_empty() {
                if let Err(e) = self.persist() {
                    tracing::error!(shard = self.shard, error = %e, "writing the delivery checkpoint failed; will retry");
                }
                self.delete_confirmed_segments();
                self.queue.wait_durable(wm, IDLE_WAIT);
                continue;
            }
            let (max_records, max_bytes) = self.host.batch_limits();
            let full = self.pending.len() >= max_records || self.pending_bytes >= max_bytes;
            let linger_left = self.pending_since.map_or(Duration::ZERO, |t| {
                self.host.settings().linger.saturating_sub(t.elapsed())
            });
            if !full && !linger_left.is_zero() {
                self.queue.wait_durable(wm, linger_left);
                continue;
            }
            if let Err(e) = self.deliver_one(max_records, max_bytes) {
                tracing::error!(shard = self.shard, error = %e, "recording delivery progress failed; the batch will be delivered again");
                self.sleep(Duration::from_secs(1));
            }
        }
    }

    /// Read durable records until the batch limits are reached.
    fn fill(&mut self, wm: Watermark) -> io::Result<()> {
        let (max_records, max_bytes) = self.host.batch_limits();
        while self.pending.len() < max_records && self.pending_bytes < max_bytes {
            match self.cursor.next(wm, &self.queue, &mut self.finished)? {
                Some(rec) => {
                    if self.pending.is_empty() {
                        self.pending_since = Some(Instant::now());
                    }
                    self.pending_bytes += rec.payload.len();
                    self.pending.push_back(rec);
                }
                None => break,
            }
        }
        Ok(())
    }

    /// Offer the head of `pending` to the sink and apply the outcome.
    fn deliver_one(&mut self, max_records: usize, max_bytes: usize) -> io::Result<()> {
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
        let outcome = self.host.deliver(&Batch::new(self.shard, &records));
        drop(records);
        let (done, rejected, retry) = self.classify(outcome, n);
        if done == 0 {
            let (after, reason) = retry.unwrap_or((None, "sink asked to retry".into()));
            return self.after_transient(n, after, reason);
        }
        self.retry = RetryState::default();
        self.dead_letter(&rejected)?;
        let last = self.pending[done - 1].seq;
        self.confirm(last + 1)?;
        let committed = done - rejected.len();
        self.stats
            .delivered_records
            .fetch_add(committed as u64, Ordering::Relaxed);
        self.stats.delivered_batches.fetch_add(1, Ordering::Relaxed);
        for _ in 0..done {
            let r = self.pending.pop_front().unwrap();
            self.pending_bytes -= r.payload.len();
        }
        self.pending_since = if self.pending.is_empty() {
            None
        } else {
            Some(Instant::now())
        };
        if let Some((after, reason)) = retry {
            // Part of the batch must be retried: back off before the rest.
            self.after_transient(self.pending.len().min(n - done), after, reason)?;
        }
        Ok(())
    }

    /// (records done, rejected among them, retry request for the rest).
    #[allow(clippy::type_complexity)]
    fn classify(
        &self,
        outcome: Outcome,
        n: usize,
    ) -> (
        usize,
        Vec<(usize, String)>,
        Option<(Option<Duration>, String)>,
    ) {
        match outcome {
            Outcome::Committed => (n, Vec::new(), None),
            Outcome::Retry { after, reason } => (0, Vec::new(), Some((after, reason))),
            Outcome::Split(v) if v.len() != n => {
                let reason = format!(
                    "sink answered {} record outcomes for a batch of {n}",
                    v.len()
                );
                tracing::error!(shard = self.shard, "{reason}; retrying the batch");
                (0, Vec::new(), Some((None, reason)))
            }
            Outcome::Split(v) => {
                let mut rejected = Vec::new();
                for (i, o) in v.into_iter().enumerate() {
                    match o {
                        RecordOutcome::Committed => {}
                        RecordOutcome::Rejected(why) => rejected.push((i, why)),
                        RecordOutcome::Retry => {
                            return (
                                i,
                                rejected,
                                Some((None, "sink asked to retry part of the batch".into())),
                            )
                        }
                    }
                }
                (n, rejected, None)
            }
        }
    }

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
            tracing::warn!(shard = self.shard, seq = l.seq, reason = %l.reason, "record rejected by the sink; moved to the dead-letter store");
        }
        Ok(())
    }

    /// Move the confirmed point; persist it when due.
    fn confirm(&mut self, next_seq: u64) -> io::Result<()> {
        self.confirmed = next_seq;
        let segment_freed = self.finished.front().is_some_and(|f| f.end_seq <= next_seq);
        if segment_freed || self.last_persist.elapsed() >= CHECKPOINT_EVERY {
            self.persist()?;
        }
        self.delete_confirmed_segments();
        Ok(())
    }

    /// Write the checkpoint if it lags. A checkpoint write costs an fdatasync
    /// on the disk the flusher fsyncs too, so they are throttled to one per
    /// [`CHECKPOINT_EVERY`] (and forced before a segment is deleted, when
    /// idle, and at shutdown): a crash redelivers at most that much, which
    /// at-least-once delivery allows.
    fn persist(&mut self) -> io::Result<()> {
        if self.persisted == self.confirmed {
            return Ok(());
        }
        write_checkpoint(&self.storage, &self.dir, self.confirmed)?;
        self.persisted = self.confirmed;
        self.last_persist = Instant::now();
        self.stats
            .checkpoint
            .store(self.confirmed, Ordering::Relaxed);
        Ok(())
    }

    fn delete_confirmed_segments(&mut self) {
        while let Some(f) = self.finished.front() {
            if f.end_seq > self.persisted {
                break;
            }
            let path = self.dir.join(sealed_name(f.segment_id));
            let mut removed = self.storage.remove(&path);
            if removed
                .as_ref()
                .is_err_and(|e| e.kind() == io::ErrorKind::NotFound)
                && self.queue.abandoned(f.segment_id, false).is_some()
            {
                // Never sealed: the flusher abandoned it after an I/O error.
                // The reader finished it, so the flusher no longer writes it
                // and every record in it is confirmed: it can go as it is.
                // (Any other unsealed segment is being sealed: wait for it.)
                removed = self.storage.remove(&self.dir.join(open_name(f.segment_id)));
                if removed.is_ok() {
                    self.queue.abandoned(f.segment_id, true);
                }
            }
            match removed {
                Ok(()) => {
                    self.wab.release(f.bytes);
                    let _ = self.queue.stats.bytes_held.fetch_update(
                        Ordering::Relaxed,
                        Ordering::Relaxed,
                        |v| Some(v.saturating_sub(f.bytes)),
                    );
                    self.stats.segments_deleted.fetch_add(1, Ordering::Relaxed);
                    self.finished.pop_front();
                }
                Err(e) => {
                    tracing::debug!(shard = self.shard, segment = f.segment_id, error = %e, "confirmed segment not deleted yet; will retry");
                    break;
                }
            }
        }
    }

    /// A transient failure of `n` records: dead-letter them if they have
    /// failed for too long, else back off.
    fn after_transient(
        &mut self,
        n: usize,
        after: Option<Duration>,
        reason: String,
    ) -> io::Result<()> {
        let now = Instant::now();
        let first = *self.retry.first_failure.get_or_insert(now);
        self.retry.attempts += 1;
        self.stats.retries.fetch_add(1, Ordering::Relaxed);
        let settings = self.host.settings().clone();
        if let Some(limit) = settings.max_retry_duration {
            if now.duration_since(first) >= limit && n > 0 {
                let why = format!(
                    "gave up after {} s of transient failures: {reason}",
                    limit.as_secs()
                );
                let rejected: Vec<(usize, String)> = (0..n).map(|i| (i, why.clone())).collect();
                self.dead_letter(&rejected)?;
                let last = self.pending[n - 1].seq;
                self.confirm(last + 1)?;
                for _ in 0..n {
                    let r = self.pending.pop_front().unwrap();
                    self.pending_bytes -= r.payload.len();
                }
                self.retry = RetryState::default();
                return Ok(());
            }
        }
        let cap = settings
            .retry_initial
            .saturating_mul(1u32 << self.retry.attempts.min(20))
            .min(settings.retry_max);
        let jittered = Duration::from_micros(self.random() % (cap.as_micros() as u64 + 1));
        // The sink's retry-after is honoured, up to retry_max like any delay.
        let delay = after
            .map_or(jittered, |a| a.max(jittered))
            .min(settings.retry_max);
        let loud = self
            .retry
            .last_log
            .is_none_or(|t| now.duration_since(t) >= RETRY_LOG_EVERY);
        if loud {
            self.retry.last_log = Some(now);
            tracing::warn!(shard = self.shard, attempts = self.retry.attempts, records = n, retry_in_ms = delay.as_millis() as u64, reason = %reason, "delivery failed (transient); retrying");
        } else {
            tracing::debug!(shard = self.shard, attempts = self.retry.attempts, reason = %reason, "delivery retry");
        }
        self.back_off(delay, after.unwrap_or(Duration::ZERO));
        Ok(())
    }

    /// Wait `delay` before the next attempt, but probe the sink every
    /// [`PROBE_EVERY`] meanwhile and retry as soon as it answers: the
    /// backoff grows while the sink is down (up to `retry_max`), and without
    /// probes delivery resumed up to 5 s after a 5 s outage ended, 19.5 s
    /// after a 12 s one. A probe is one health check per second, which
    /// does not hammer a sink that is still down. A retry-after the sink
    /// asked for (`honour`) is waited out before any probe.
    fn back_off(&mut self, delay: Duration, honour: Duration) {
        let start = Instant::now();
        self.sleep(honour.min(delay));
        loop {
            let elapsed = start.elapsed();
            if self.stopping() || elapsed >= delay {
                return;
            }
            self.sleep((delay - elapsed).min(PROBE_EVERY));
            if self.stopping() || start.elapsed() >= delay {
                return;
            }
            if self.host.probe() {
                tracing::info!(
                    shard = self.shard,
                    waited_ms = start.elapsed().as_millis() as u64,
                    "the sink answers its health check again; retrying now"
                );
                return;
            }
        }
    }

    /// xorshift64: jitter needs spread, not cryptographic quality.
    fn random(&mut self) -> u64 {
        let mut x = self.rng;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.rng = x;
        x
    }

    /// Sleep, waking early on shutdown.
    fn sleep(&self, d: Duration) {
        let until = Instant::now() + d;
        while !self.stopping() {
            let now = Instant::now();
            if now >= until {
                break;
            }
            thread::sleep((until - now).min(Duration::from_millis(50)));
        }
    }
}
