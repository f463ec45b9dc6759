//! One sink's cursor over one shard: where it has read, the records it
//! holds for its next batch, what it has confirmed (its own checkpoint
//! file, `cursor-<sink>`), its retry state and its sink instance. One step
//! of its loop at a time ([`Cursor::step`]): the daemon's drain thread runs
//! the steps back to back, the simulation calls them itself.
//!
//! A cursor never deletes anything: it reports its checkpoint and the
//! segments it has read to their end to the shard's [`Retention`], which
//! deletes a segment once every sink's cursor has passed it. Cursors of
//! different sinks share nothing else, so a sink that is down, slow or
//! rejecting holds only its own cursor.

use std::collections::VecDeque;
use std::io;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use sink_sdk::{Batch, Outcome, Record, RecordOutcome};
use spillway_wab::checkpoint::cursor_file;
use spillway_wab::deadletter::DeadLetterStore;
use spillway_wab::follow::{append_line_durable, oldest_first_seq, ShardFollower};
use spillway_wab::format::RECORD_HEADER_LEN;
use spillway_wab::storage::is_no_space;
use spillway_wab::{CheckpointWriter, Storage, StoredRecord};

use super::control::{CursorControl, RewindTo};
use super::in_flight::{read_learned, Flights, Lanes, Limiter};
use super::requeue::Requeue;
use super::retention::{Membership, Retention};
use super::retry::{self, AfterFailure, RetryState, Waiting};
use super::sink_host::{SinkHost, SinkSlot};
use super::DrainStats;
use crate::clock::Clock;
use crate::shard::{ShardQueue, Until, Watermark};
use sink_sdk::delivery::StartAt;

/// How long an idle cursor sleeps before looking again (it is woken by
/// new durable records anyway).
pub(super) const IDLE_WAIT: Duration = Duration::from_millis(500);
/// Pause after a failed read of the segments or a failed checkpoint write
/// before the cursor tries again.
const IO_ERROR_PAUSE: Duration = Duration::from_secs(1);
/// How often a paused cursor looks whether it was resumed.
const PAUSED_POLL: Duration = Duration::from_millis(100);
/// Longest a drain sleeps without looking at its stop flag.
const SLEEP_SLICE: Duration = Duration::from_millis(50);
/// How long a stopping cursor waits for the answers of its batches still
/// on worker threads, so it can confirm them (what it does not get is
/// delivered again after the restart).
const FINISH_WAIT: Duration = Duration::from_secs(10);

/// Which sink and shard a cursor serves.
pub struct CursorConfig {
    /// The sink's name (`[sinks.NAME]`; `default` for `[sink]`).
    pub sink: String,
    pub shard: u32,
    /// The shard's folder.
    pub dir: PathBuf,
    /// The file that records every range this sink skipped (`on_lag =
    /// "skip"`), one JSON line each.
    pub skipped_file: PathBuf,
    /// Where an adaptive limit on batches in flight is kept between runs
    /// (`None`: it starts at 1 every time).
    pub learned_file: Option<PathBuf>,
}

/// What a drain waits for after a [`Cursor::step`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DrainWait {
    /// Go on at once.
    Now,
    /// Records durable past `seen` as `until` says, an answer, or
    /// `timeout` (idle, or lingering for a fuller batch).
    Durable {
        seen: Watermark,
        until: Until,
        timeout: Duration,
    },
    /// Nothing to do for this long: backing off a failing sink (probing it
    /// between pauses), waiting to re-create a failed instance, or pausing
    /// after an I/O error.
    Pause(Duration),
}

/// One sink's cursor over one shard (see the module documentation).
pub struct Cursor<S: Storage> {
    pub(super) storage: S,
    pub(super) sink: String,
    /// Writes its checkpoint file (`cursor-<sink>` in the shard folder).
    writer: CheckpointWriter,
    pub(super) shard: u32,
    pub(super) dir: PathBuf,
    skipped_file: PathBuf,
    pub(super) queue: Arc<ShardQueue>,
    pub(super) retention: Arc<Mutex<Retention<S>>>,
    /// Its turn in the retention (from [`Retention::join`]).
    membership: Membership,
    /// Set when the sink was removed from the config: at its stop the
    /// cursor leaves the retention (its file goes, it holds nothing).
    retire: Arc<AtomicBool>,
    pub(super) dead_letters: Arc<Mutex<DeadLetterStore<S>>>,
    /// This sink's requeued dead letters, if the daemon gave it a store.
    pub(super) requeue: Option<Arc<Requeue<S>>>,
    /// The requeue store's generation at which it held nothing of this
    /// shard (it is not listed again until that moves).
    pub(super) requeue_seen: Option<u64>,
    pub(super) stats: Arc<DrainStats>,
    /// What the operator asks of this cursor (pause, rewind).
    control: Arc<CursorControl>,
    pub(super) stop: Arc<AtomicBool>,
    pub(super) host: SinkHost,
    /// What linger and the retry backoff read.
    pub(super) clock: Clock,
    /// Reads the shard's durable records in order, across segments.
    pub(super) follower: ShardFollower<S>,
    /// Added to the follower's passed bytes to give the confirmed bytes on
    /// the flusher's running count ([`Watermark::bytes`]): 0 at the
    /// daemon's start (both count from the oldest segment), set again
    /// whenever the cursor has confirmed everything durable, which also
    /// corrects any drift (damaged bytes no record is read from, a drain
    /// restarted without its flusher, a cursor that started past the
    /// oldest record).
    pub(super) bytes_base: u64,
    /// Every record below this is confirmed (by the sink or the dead-letter store).
    pub(super) confirmed: u64,
    /// What the cursor file says (<= `confirmed`): in the page cache at
    /// least, so a crash of the process keeps it; durable (a power cut
    /// keeps it too) once `writer.is_synced()`.
    pub(super) persisted: u64,
    /// When the cursor file was last made durable (the cursor's clock).
    synced_at: Instant,
    /// Read, not yet confirmed, in order.
    pub(super) pending: VecDeque<StoredRecord>,
    pub(super) pending_bytes: usize,
    /// When the oldest pending record was read (linger starts there).
    pub(super) pending_since: Option<Instant>,
    /// The durable tail at which the cursor found nothing pending, and
    /// since when (the follower's read-ahead is let go after [`IDLE_WAIT`]).
    idle_at: Option<(Watermark, Instant)>,
    pub(super) retry: RetryState,
    pub(super) rng: u64,
    /// Batches offered and not yet settled, and the limit on them.
    pub(super) flights: Flights,
}

impl<S: Storage> Cursor<S> {
    /// A cursor of sink `cfg.sink`: it joins the shard's retention, which
    /// says where it starts (its cursor file, or its `start`). `rng_seed`
    /// (non-zero) seeds the retry jitter.
    #[allow(clippy::too_many_arguments)] // each is one collaborator of the cursor
    pub fn new(
        storage: S,
        cfg: CursorConfig,
        start: StartAt,
        queue: Arc<ShardQueue>,
        slot: Arc<SinkSlot>,
        retention: Arc<Mutex<Retention<S>>>,
        dead_letters: Arc<Mutex<DeadLetterStore<S>>>,
        stats: Arc<DrainStats>,
        clock: Clock,
        rng_seed: u64,
    ) -> io::Result<Self> {
        let (membership, start) = retention.lock().unwrap().join(&cfg.sink, start)?;
        stats.checkpoint.store(start, Ordering::Relaxed);
        let mode = slot.current().1.in_flight();
        let learned = cfg
            .learned_file
            .as_deref()
            .and_then(|path| read_learned(&storage, path));
        let flights = Flights::new(Limiter::new(mode, learned), cfg.learned_file.clone());
        let started = clock.now();
        Ok(Cursor {
            follower: ShardFollower::new(storage.clone(), cfg.dir.clone(), start),
            host: SinkHost::new(cfg.shard, slot, stats.clone())
                .named(&cfg.sink)
                .with_clock(clock.clone()),
            writer: CheckpointWriter::new(&cfg.dir, &cursor_file(&cfg.sink)),
            sink: cfg.sink,
            storage,
            shard: cfg.shard,
            dir: cfg.dir,
            skipped_file: cfg.skipped_file,
            queue,
            retention,
            dead_letters,
            requeue: None,
            requeue_seen: None,
            stats,
            control: Arc::default(),
            stop: Arc::new(AtomicBool::new(false)),
            clock,
            confirmed: start,
            persisted: start,
            synced_at: started,
            pending: VecDeque::new(),
            pending_bytes: 0,
            bytes_base: 0,
            pending_since: None,
            idle_at: None,
            retry: RetryState::default(),
            rng: rng_seed.max(1),
            membership,
            retire: Arc::new(AtomicBool::new(false)),
            flights,
        })
    }

    pub(super) fn stopping(&self) -> bool {
        self.stop.load(Ordering::Acquire)
    }

    /// The flag that stops [`Cursor::run`].
    pub(super) fn stop_flag(&self) -> Arc<AtomicBool> {
        self.stop.clone()
    }

    /// The flag that makes a stopping cursor leave the retention.
    pub(super) fn retire_flag(&self) -> Arc<AtomicBool> {
        self.retire.clone()
    }

    /// Every record below this is confirmed (what the cursor file says
    /// once written).
    pub fn confirmed(&self) -> u64 {
        self.confirmed
    }

    /// Deliver the records `ctl dead-letter requeue --sink` puts in
    /// `requeue` (this shard's), between batches.
    pub fn with_requeue(mut self, requeue: Arc<Requeue<S>>) -> Self {
        self.requeue = Some(requeue);
        self
    }

    /// Take the operator's requests from `control` (a cursor without one is
    /// never paused or rewound).
    pub fn with_control(mut self, control: Arc<CursorControl>) -> Self {
        self.control = control;
        self
    }

    /// The sink this cursor delivers to.
    pub fn sink(&self) -> &str {
        &self.sink
    }

    /// The simulation's: with more than one batch in flight, offer them on
    /// this thread and hand the answers back out of order, one step at a
    /// time, instead of on worker threads.
    pub fn with_held_answers(mut self) -> Self {
        self.flights.simulated = true;
        self
    }

    /// Batches offered and not yet answered.
    pub fn batches_out(&self) -> usize {
        self.flights.out()
    }

    pub(super) fn run(mut self) {
        while !self.stopping() {
            match self.step() {
                DrainWait::Now => {}
                DrainWait::Durable {
                    seen,
                    until,
                    timeout,
                } => {
                    self.queue
                        .durable_watch()
                        .wait(seen, until, timeout, &self.flights.bell);
                }
                DrainWait::Pause(d) => self.sleep(d),
            }
        }
        self.finish();
    }

    /// Nothing pending at `wm`: once nothing new has been durable for
    /// [`IDLE_WAIT`], let go of the follower's read-ahead chunks.
    fn release_when_idle(&mut self, wm: Watermark) {
        match self.idle_at {
            Some((at, since)) if at == wm => {
                if self.clock.since(since) >= IDLE_WAIT {
                    self.follower.release_chunks();
                    self.idle_at = None;
                }
            }
            _ => self.idle_at = Some((wm, self.clock.now())),
        }
    }

    /// Take the answers of the batches still out (up to [`FINISH_WAIT`])
    /// and confirm what they finish, so a clean stop redelivers as little
    /// as it can.
    fn land_flights(&mut self) {
        let until = Instant::now() + FINISH_WAIT;
        loop {
            if let Lanes::Held(held) = &mut self.flights.lanes {
                self.flights.answers.extend(held.drain(..));
            }
            if let Err(e) = self.absorb() {
                tracing::error!(shard = self.shard, sink = %self.sink, error = %e, "settling the last answers failed; those records will be delivered again");
                return;
            }
            if self.flights.out() == 0 || Instant::now() >= until {
                return;
            }
            let wm = self.queue.durable();
            self.queue
                .durable_watch()
                .wait(wm, Until::Changed, SLEEP_SLICE, &self.flights.bell);
        }
    }

    /// Write the last checkpoint (a clean stop), or, for a sink removed
    /// from the config, leave the retention.
    pub fn finish(mut self) {
        if self.retire.load(Ordering::Acquire) {
            self.leave();
            return;
        }
        self.land_flights();
        self.keep_learned();
        if let Err(e) = self.persist(true) {
            tracing::error!(shard = self.shard, sink = %self.sink, error = %e, "writing the final delivery checkpoint failed; some records will be delivered again");
        }
    }

    /// One turn of the loop: pick up a reload, wait out a backoff, read
    /// what is durable, and deliver a batch once it is full or has lingered
    /// long enough; when idle, make sure the checkpoint is written and tell
    /// retention. Says what to wait for before the next turn.
    pub fn step(&mut self) -> DrainWait {
        if let Some(to) = self.control.take_rewind() {
            if let Err(e) = self.rewind(to) {
                tracing::error!(shard = self.shard, sink = %self.sink, error = %e, "rewinding the sink's cursor failed; it stays where it was");
            }
        }
        if self.host.check_reload() {
            // A new sink (or new settings) gets its first try at once.
            self.retry.end_backoff();
            self.flights
                .limiter
                .reconfigure(self.host.settings().in_flight());
        }
        // Read first, whatever else holds delivery (a pause, a backoff, a
        // failed instance): up to one batch, so the backlog this cursor
        // publishes counts from where it stands (a shard's other cursors
        // may delete segments meanwhile), and a skip sees an exact backlog.
        let wm = self.queue.durable();
        if let Err(e) = self.fill(wm) {
            tracing::error!(shard = self.shard, sink = %self.sink, error = %e, "reading segments for delivery failed; retrying");
            return DrainWait::Pause(IO_ERROR_PAUSE);
        }
        if let Err(e) = self.absorb() {
            tracing::error!(shard = self.shard, sink = %self.sink, error = %e, "recording delivery progress failed; will retry");
            return DrainWait::Pause(IO_ERROR_PAUSE);
        }
        if (self.persisted != self.confirmed || !self.writer.is_synced()) && self.sync_due() {
            // Confirmations left in the page cache by checkpoint_interval_ms
            // are made durable once it has passed, whatever holds delivery
            // now; a failed write is tried again here, at the next
            // confirmation or when idle.
            self.confirm(self.confirmed);
        }
        if let Some(wait) = self.skip_check() {
            return wait;
        }
        if self.hold_while_paused() {
            return DrainWait::Pause(PAUSED_POLL);
        }
        if let Some(wait) = self.backing_off() {
            return wait;
        }
        if let Some(left) = self.host.restart_wait() {
            return DrainWait::Pause(left);
        }
        if let Some(wait) = self.deliver_requeued() {
            return wait;
        }
        if self.pending.is_empty() {
            self.release_when_idle(wm);
            match self.persist(self.sync_due()) {
                Ok(()) => self.report(self.persisted, true),
                Err(e) if is_no_space(&e) => self.report(self.confirmed, true),
                Err(e) => {
                    tracing::error!(shard = self.shard, sink = %self.sink, error = %e, "writing the delivery checkpoint failed; will retry");
                }
            }
            self.publish_in_flight();
            // A cursor file left in the page cache is made durable when
            // its interval is up, even if nothing more comes.
            let timeout = if self.writer.is_synced() {
                IDLE_WAIT
            } else {
                self.sync_wait().min(IDLE_WAIT)
            };
            return DrainWait::Durable {
                seen: wm,
                until: Until::Changed,
                timeout,
            };
        }
        match self.dispatch(wm) {
            Ok(wait) => wait,
            Err(e) => {
                tracing::error!(shard = self.shard, sink = %self.sink, error = %e, "offering a batch to the sink failed; will retry");
                DrainWait::Pause(IO_ERROR_PAUSE)
            }
        }
    }

    /// Read durable records until those not yet offered make a full
    /// batch. One batch at a time reads no further than that batch, as
    /// before batches in flight (nothing would use what it read ahead).
    pub(super) fn fill(&mut self, wm: Watermark) -> io::Result<()> {
        let (max_records, max_bytes) = self.host.batch_limits();
        let mut at_tail = false;
        let ahead = !matches!(self.flights.lanes, Lanes::Inline);
        let (held, held_bytes) = if ahead {
            (self.flights.records, self.flights.bytes)
        } else {
            (0, 0)
        };
        while self.pending.len() - held < max_records && self.pending_bytes - held_bytes < max_bytes
        {
            let queue = &self.queue;
            let next = self
                .follower
                .next(wm.tail(), |id| queue.abandoned(id, false).map(|a| a.cut()))?;
            match next {
                Some(rec) => {
                    // Readers see only what is durable (DESIGN promise 6):
                    // a record at or past the watermark's next number was
                    // never covered by an fdatasync that succeeded.
                    assert!(
                        rec.seq < wm.next_seq,
                        "shard {}: sink {} was handed seq {} past the durable watermark {wm:?}",
                        self.shard,
                        self.sink,
                        rec.seq,
                    );
                    if self.pending.len() == self.flights.records {
                        self.pending_since = Some(self.clock.now());
                    }
                    self.pending_bytes += rec.payload.len();
                    self.pending.push_back(rec);
                }
                None => {
                    at_tail = true;
                    break;
                }
            }
        }
        // At the checker's gate the follower stops short of the durable
        // tail (segments the start did not read wait for their check): not
        // caught up, so the counts stand.
        let caught_up = at_tail && wm.unchecked_from == u64::MAX;
        if caught_up && self.pending.is_empty() {
            // Everything durable is read and confirmed: nothing is pending,
            // whatever the counts said.
            self.bytes_base = wm.bytes.wrapping_sub(self.follower.passed_bytes());
        }
        if self.pending.is_empty() && self.follower.next_seq() > self.confirmed {
            // The follower passed records below where this cursor started
            // (a segment delivered before a restart and not yet deleted):
            // confirm past them, so the segment goes and the backlog says
            // 0. The follower never passes numbers no durable record backs
            // (an abandoned segment ends at its last durable record), so
            // this never puts the cursor ahead of what a restart finds.
            self.confirm(self.follower.next_seq());
        }
        self.publish_backlog();
        Ok(())
    }

    /// Move the confirmed point and write it to the cursor file before the
    /// next batch is offered, so a crash of the process redelivers at most
    /// the batches in flight; it is fdatasynced when `checkpoint_interval`
    /// has passed since the last time (at once with 0), so a power cut
    /// may also redeliver what was confirmed since. A failed write does
    /// not undo the confirmation: the sink has the records (or the
    /// dead-letter store does), so they leave `pending` all the same, and
    /// the write is tried again at the next confirmation or when idle;
    /// only retention waits for it (it goes by what the file says).
    /// Treating the failure as the batch's moved the
    /// confirmed point back when the batch was offered again and split.
    pub(super) fn confirm(&mut self, next_seq: u64) {
        debug_assert!(
            next_seq >= self.confirmed,
            "the confirmed point moves forward only"
        );
        self.confirmed = next_seq;
        match self.persist(self.sync_due()) {
            Ok(()) => self.report(self.persisted, false),
            // No room to make the cursor file: retention may still let
            // segments go, writing the shard's floor (which needs no new
            // space) at this point first: the sink restarts there.
            Err(e) if is_no_space(&e) => {
                tracing::warn!(shard = self.shard, sink = %self.sink, error = %e, "no space to write the delivery checkpoint; the shard's checkpoint holds this sink's place");
                self.report(self.confirmed, false);
            }
            Err(e) => {
                tracing::error!(shard = self.shard, sink = %self.sink, error = %e, "writing the delivery checkpoint failed; will retry (records confirmed since the last checkpoint would be delivered again after a crash)");
            }
        }
    }

    /// Whether the cursor file should be made durable now: always with
    /// `checkpoint_interval` zero, else once that long has passed since it
    /// last was.
    fn sync_due(&self) -> bool {
        self.sync_wait().is_zero()
    }

    /// How long until [`Self::sync_due`].
    fn sync_wait(&self) -> Duration {
        let every = self.host.settings().checkpoint_interval();
        every.saturating_sub(self.clock.now().saturating_duration_since(self.synced_at))
    }

    /// Write the cursor file if it lags (one 4 KiB overwrite in the page
    /// cache) and, with `sync`, make it durable (an fdatasync that needs no
    /// new block, see `spillway_wab::checkpoint`). The fdatasync is what
    /// costs: a flush of the disk's cache that the flusher's own fdatasync
    /// would wait behind.
    pub(super) fn persist(&mut self, sync: bool) -> io::Result<()> {
        // A removed sink's cursor no longer owns the file: the sink may
        // have been added again under its name, with a cursor of its own.
        if self.retire.load(Ordering::Acquire) {
            return Ok(());
        }
        if self.persisted != self.confirmed {
            if sync {
                self.writer.write(&self.storage, self.confirmed)?;
            } else {
                self.writer.write_unsynced(&self.storage, self.confirmed)?;
            }
            self.persisted = self.confirmed;
            self.stats
                .checkpoint
                .store(self.confirmed, Ordering::Relaxed);
        } else if sync {
            self.writer.sync(&self.storage)?;
        }
        if sync {
            self.synced_at = self.clock.now();
        }
        Ok(())
    }

    /// The sink was removed: its cursor file goes and it holds nothing.
    pub fn leave(self) {
        let left = self
            .retention
            .lock()
            .unwrap()
            .leave(&self.sink, self.membership);
        match left {
            Ok(()) => {
                tracing::info!(shard = self.shard, sink = %self.sink, "removed sink's cursor is gone; it holds no records any more")
            }
            Err(e) => {
                tracing::error!(shard = self.shard, sink = %self.sink, error = %e, "removing a removed sink's cursor failed; it is removed at the next start")
            }
        }
    }

    /// Tell retention how far this sink has confirmed (`at`: its cursor
    /// file, or past it when a full disk keeps the file from being made)
    /// and which segments the follower has read to their end; it deletes
    /// what every sink passed.
    fn report(&mut self, at: u64, idle: bool) {
        let finished = self.follower.take_finished();
        let wm = self.queue.durable();
        self.retention.lock().unwrap().confirmed(
            &self.sink,
            self.membership,
            at,
            finished,
            wm,
            idle,
        );
    }

    /// Whether the operator holds this cursor; keeps its health saying so.
    fn hold_while_paused(&mut self) -> bool {
        let paused = self.control.paused();
        let mut health = self.stats.sink.lock().unwrap();
        if paused != (health.state == super::SinkState::Paused) {
            health.paused(paused);
            tracing::info!(shard = self.shard, sink = %self.sink, paused, "sink delivery {}", if paused { "paused by the operator" } else { "resumed" });
        }
        paused
    }

    /// Move the cursor back to `to` over records the shard still holds
    /// (never forward: that is what skipping is for). Under the retention's
    /// lock, so nothing it needs is deleted meanwhile; the floor is
    /// lowered first, then the cursor file; what was read is dropped and
    /// reading starts again there.
    fn rewind(&mut self, to: RewindTo) -> io::Result<()> {
        let retention = self.retention.clone();
        let mut r = retention.lock().unwrap();
        let Some(oldest) = oldest_first_seq(&self.storage, &self.dir)? else {
            tracing::info!(shard = self.shard, sink = %self.sink, "rewind: the shard holds no record; nothing to replay");
            return Ok(());
        };
        let target = match to {
            RewindTo::Oldest => oldest,
            RewindTo::Seq(seq) => seq.max(oldest),
        };
        if target >= self.confirmed {
            tracing::info!(shard = self.shard, sink = %self.sink, target, confirmed = self.confirmed, "rewind: the cursor is not past that point; nothing to replay");
            return Ok(());
        }
        r.rewind(&self.sink, self.membership, target)?;
        let bytes_base = r.deleted_record_bytes();
        drop(r);
        self.writer.write(&self.storage, target)?;
        tracing::warn!(shard = self.shard, sink = %self.sink, from = self.confirmed, to = target, "sink rewound by the operator: records from here are delivered to it again");
        self.confirmed = target;
        self.persisted = target;
        self.stats.checkpoint.store(target, Ordering::Relaxed);
        self.restart_reader_with(bytes_base);
        Ok(())
    }

    /// Drop what was read and read again from the confirmed point.
    fn restart_reader(&mut self) {
        let bytes_base = self.retention.lock().unwrap().deleted_record_bytes();
        self.restart_reader_with(bytes_base);
    }

    /// [`Cursor::restart_reader`], with the record bytes of the segments
    /// deleted since the start (a new reader counts from the oldest
    /// segment left).
    fn restart_reader_with(&mut self, bytes_base: u64) {
        self.flights.abandon();
        self.pending.clear();
        self.pending_bytes = 0;
        self.pending_since = None;
        self.retry = RetryState::default();
        self.follower = ShardFollower::new(self.storage.clone(), self.dir.clone(), self.confirmed);
        self.bytes_base = bytes_base;
    }

    /// With `on_lag = "skip"`: skip ahead if the backlog passed the limit
    /// (before a backoff is waited out, and after reading); `Some` when the
    /// step must pause after an I/O error.
    fn skip_check(&mut self) -> Option<DrainWait> {
        let lag_max = self.host.settings().skip_lag_bytes()?;
        match self.skip_if_lagging(lag_max) {
            Ok(()) => None,
            Err(e) => {
                tracing::error!(shard = self.shard, sink = %self.sink, error = %e, "skipping ahead of a lagging sink failed; will retry");
                Some(DrainWait::Pause(IO_ERROR_PAUSE))
            }
        }
    }

    /// `on_lag = "skip"`: when this sink's backlog (durable bytes it has
    /// not confirmed) passes `lag_max`, its cursor jumps ahead until the
    /// backlog is half of that (so it does not skip one record at a time).
    /// The backlog is exact only once the reader has passed a record at or
    /// after the cursor (the bytes below it count from then), so this
    /// looks only while it holds a record. The skipped records are never
    /// delivered to this sink: their range and count go to its `skipped`
    /// file (fsynced), an error line and a counter before the cursor moves
    /// past them.
    fn skip_if_lagging(&mut self, lag_max: u64) -> io::Result<()> {
        let wm = self.queue.durable();
        let backlog = |c: &Self| wm.bytes.saturating_sub(c.confirmed_bytes());
        if self.pending.is_empty() || backlog(self) <= lag_max {
            return Ok(());
        }
        // Batches out are given up: their answers find no flight.
        self.flights.abandon();
        let first = self.confirmed;
        let goal = lag_max / 2;
        let mut records = 0u64;
        while backlog(self) > goal {
            if let Some(r) = self.pending.pop_front() {
                self.pending_bytes -= r.payload.len();
                records += 1;
                continue;
            }
            let queue = &self.queue;
            let next = self
                .follower
                .next(wm.tail(), |id| queue.abandoned(id, false).map(|a| a.cut()))?;
            let Some(rec) = next else { break };
            self.pending_bytes += rec.payload.len();
            self.pending.push_back(rec);
        }
        let end = self
            .pending
            .front()
            .map_or(self.follower.next_seq(), |r| r.seq);
        let line = format!(
            "{{\"at_unix_ms\":{},\"shard\":{},\"first_seq\":{first},\"end_seq\":{end},\"records\":{records},\"lag_bytes_max\":{lag_max}}}\n",
            spillway_wab::format::now_unix_us() / 1000,
            self.shard
        );
        if let Err(e) = append_line_durable(&self.storage, &self.skipped_file, &line) {
            // Nothing was skipped: read again from the confirmed point.
            self.restart_reader();
            return Err(e);
        }
        self.stats
            .records_skipped
            .fetch_add(records, Ordering::Relaxed);
        tracing::error!(shard = self.shard, sink = %self.sink, first_seq = first, end_seq = end, records, lag_bytes_max = lag_max, file = %self.skipped_file.display(), "sink's backlog passed lag_bytes_max: skipped records it will never get (on_lag = \"skip\")");
        self.retry = RetryState::default();
        self.pending_since = (!self.pending.is_empty()).then(|| self.clock.now());
        self.confirm(end);
        self.publish_backlog();
        Ok(())
    }

    /// Record bytes confirmed on the flusher's running count (see
    /// `bytes_base`): every byte the follower passed, less what is pending.
    pub(super) fn confirmed_bytes(&self) -> u64 {
        let unconfirmed = (self.pending_bytes + self.pending.len() * RECORD_HEADER_LEN) as u64;
        self.bytes_base
            .wrapping_add(self.follower.passed_bytes())
            .wrapping_sub(unconfirmed)
    }

    /// Sleep, waking early on shutdown.
    pub(super) fn sleep(&self, d: Duration) {
        let until = Instant::now() + d;
        while !self.stopping() {
            let now = Instant::now();
            if now >= until {
                break;
            }
            thread::sleep((until - now).min(SLEEP_SLICE));
        }
    }
}
/// Retries and requeued records: the state is theirs
/// ([`RetryState`], [`Requeue`]); the cursor counts, logs, probes and
/// delivers.
impl<S: Storage> Cursor<S> {
    /// A transient failure of a batch of `n` records: back off, or, once
    /// the sink has failed for longer than `retry_duration_max_ms`, give the
    /// batch up: the reason to dead-letter its records with.
    pub(super) fn after_transient(
        &mut self,
        n: usize,
        after: Option<Duration>,
        reason: String,
    ) -> Option<String> {
        let now = self.clock.now();
        self.stats.retries.fetch_add(1, Ordering::Relaxed);
        self.stats
            .sink
            .lock()
            .unwrap()
            .failing(super::SinkState::Retrying, &reason);
        let settings = self.host.settings().clone();
        let rng = &mut self.rng;
        match self
            .retry
            .failed(now, &settings, n, after, &reason, || retry::random(rng))
        {
            AfterFailure::GiveUp(why) => Some(why),
            AfterFailure::Wait {
                delay,
                attempts,
                loud,
            } => {
                if loud {
                    tracing::warn!(shard = self.shard, sink = %self.sink, target = %self.host.description(), attempts, records = n, retry_in_ms = delay.as_millis() as u64, reason = %reason, "delivery failed (transient); retrying");
                } else {
                    tracing::debug!(shard = self.shard, sink = %self.sink, attempts, reason = %reason, "delivery retry");
                }
                None
            }
        }
    }

    /// While a backoff runs: how long to pause before looking again, after
    /// probing the sink if a probe is due (one health check a second,
    /// which does not hammer a sink that is still down). `None` once the
    /// next attempt may go.
    pub(super) fn backing_off(&mut self) -> Option<DrainWait> {
        let now = self.clock.now();
        let (stats, host) = (&self.stats, &mut self.host);
        let probe = || {
            let call = stats.sink_call();
            let answers = host.probe();
            drop(call);
            answers
        };
        match self.retry.step(now, probe)? {
            Waiting::Pause(d) => Some(DrainWait::Pause(d)),
            Waiting::Over => None,
            Waiting::Answered(waited) => {
                tracing::info!(
                    shard = self.shard,
                    sink = %self.sink,
                    waited_ms = waited.as_millis() as u64,
                    "the sink answers its health check again; retrying now"
                );
                None
            }
        }
    }

    /// xorshift64 on the cursor's seed: jitter, and the simulation's
    /// choices among held answers.
    pub(super) fn random(&mut self) -> u64 {
        retry::random(&mut self.rng)
    }

    /// Deliver this shard's requeued records, if any wait, as one batch.
    /// `None`: nothing to do here.
    pub(super) fn deliver_requeued(&mut self) -> Option<DrainWait> {
        let requeue = self.requeue.clone()?;
        let (max_records, _) = self.host.batch_limits();
        let mine = match requeue.take(self.shard, max_records, &mut self.requeue_seen) {
            Ok(mine) => mine?,
            Err(e) => {
                tracing::error!(shard = self.shard, sink = %self.sink, error = %e, "reading the requeued records failed; will retry");
                return None;
            }
        };
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
        let retry_later = DrainWait::Pause(self.host.settings().retry_initial());
        let (done, rejected): (Vec<usize>, Vec<(usize, String)>) = match outcome {
            Outcome::Committed => ((0..mine.len()).collect(), Vec::new()),
            Outcome::Retry { .. } => return Some(retry_later),
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
            Outcome::Split(_) => return Some(retry_later),
        };
        let stats = &self.stats;
        let settled = requeue.settle(&self.dead_letters, &mine, &done, &rejected, |n| {
            stats.dead_lettered.fetch_add(n, Ordering::Relaxed);
        });
        if let Err(e) = settled {
            tracing::error!(shard = self.shard, sink = %self.sink, error = %e, "settling requeued records failed; they are offered again");
            return Some(retry_later);
        }
        self.stats
            .delivered_records
            .fetch_add(done.len() as u64, Ordering::Relaxed);
        tracing::info!(shard = self.shard, sink = %self.sink, delivered = done.len(), rejected = rejected.len(), "requeued records delivered to this sink");
        Some(DrainWait::Now)
    }
}
