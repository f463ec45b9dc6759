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
use spillway_wab::format::now_unix_us;
use spillway_wab::storage::is_no_space;
use spillway_wab::{CheckpointWriter, Storage};

use super::control::{CursorControl, RewindTo};
use super::in_flight::{
    read_learned, sink_record, Answer, FlightState, Flights, Lanes, Limiter, Pool,
};
use super::pending::{Pending, Settlement};
use super::poison::{Attempt, Verdict};
use super::requeue::Requeue;
use super::retention::{Membership, Retention};
use super::retry::{self, AfterFailure, RetryState, Waiting};
use super::sink_host::{SinkHost, SinkSlot};
use super::DrainStats;
use crate::clock::Clock;
use crate::shard::{Doorbell, ShardQueue, Until, Watermark};
use sink_sdk::delivery::StartAt;

/// How long an idle cursor sleeps before looking again (it is woken by
/// new durable records anyway).
const IDLE_WAIT: Duration = Duration::from_millis(500);
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
    storage: S,
    pub(super) sink: String,
    /// Writes its checkpoint file (`cursor-<sink>` in the shard folder).
    writer: CheckpointWriter,
    pub(super) shard: u32,
    dir: PathBuf,
    skipped_file: PathBuf,
    queue: Arc<ShardQueue>,
    retention: Arc<Mutex<Retention<S>>>,
    /// Its turn in the retention (from [`Retention::join`]).
    membership: Membership,
    /// Set when the sink was removed from the config: at its stop the
    /// cursor leaves the retention (its file goes, it holds nothing).
    retire: Arc<AtomicBool>,
    dead_letters: Arc<Mutex<DeadLetterStore<S>>>,
    /// This sink's requeued dead letters, if the daemon gave it a store.
    requeue: Option<Arc<Requeue<S>>>,
    /// The requeue store's generation at which it held nothing of this
    /// shard (it is not listed again until that moves).
    requeue_seen: Option<u64>,
    pub(super) stats: Arc<DrainStats>,
    /// What the operator asks of this cursor (pause, rewind).
    control: Arc<CursorControl>,
    stop: Arc<AtomicBool>,
    host: SinkHost,
    /// What linger and the retry backoff read.
    clock: Clock,
    /// Reads the shard's durable records in order, across segments.
    follower: ShardFollower<S>,
    /// Added to the follower's passed bytes to give the confirmed bytes on
    /// the flusher's running count ([`Watermark::bytes`]): 0 at the
    /// daemon's start (both count from the oldest segment), set again
    /// whenever the cursor has confirmed everything durable, which also
    /// corrects any drift (damaged bytes no record is read from, a drain
    /// restarted without its flusher, a cursor that started past the
    /// oldest record).
    bytes_base: u64,
    /// Every record below this is confirmed (by the sink or the dead-letter store).
    confirmed: u64,
    /// What the cursor file says (<= `confirmed`): in the page cache at
    /// least, so a crash of the process keeps it; durable (a power cut
    /// keeps it too) once `writer.is_synced()`.
    persisted: u64,
    /// When the cursor file was last made durable (the cursor's clock).
    synced_at: Instant,
    /// Read, not yet confirmed, in order, with the batches offered over
    /// their head and the limit on them.
    pending: Pending,
    /// The durable tail at which the cursor found nothing pending, and
    /// since when (the follower's read-ahead is let go after [`IDLE_WAIT`]).
    idle_at: Option<(Watermark, Instant)>,
    retry: RetryState,
    /// Answers that finished records (committed or rejected): a sink that
    /// takes other records while one keeps failing is up, and that record
    /// is poison (see `poison`).
    commits: u64,
    rng: u64,
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
            pending: Pending::new(flights),
            bytes_base: 0,
            idle_at: None,
            retry: RetryState::default(),
            commits: 0,
            rng: rng_seed.max(1),
            membership,
            retire: Arc::new(AtomicBool::new(false)),
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
        self.pending.flights.simulated = true;
        self
    }

    /// Rung by a worker with every answer, and by a stop: ends the
    /// cursor's wait.
    pub(super) fn bell(&self) -> Arc<Doorbell> {
        self.pending.flights.bell.clone()
    }

    /// Batches offered and not yet answered.
    pub fn batches_out(&self) -> usize {
        self.pending.flights.out()
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
                    self.queue.durable_watch().wait(
                        seen,
                        until,
                        timeout,
                        &self.pending.flights.bell,
                    );
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
            if let Lanes::Held(held) = &mut self.pending.flights.lanes {
                self.pending.flights.answers.extend(held.drain(..));
            }
            if let Err(e) = self.absorb() {
                tracing::error!(shard = self.shard, sink = %self.sink, error = %e, "settling the last answers failed; those records will be delivered again");
                return;
            }
            if self.pending.flights.out() == 0 || Instant::now() >= until {
                return;
            }
            let wm = self.queue.durable();
            self.queue.durable_watch().wait(
                wm,
                Until::Changed,
                SLEEP_SLICE,
                &self.pending.flights.bell,
            );
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
            self.pending
                .flights
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
    fn fill(&mut self, wm: Watermark) -> io::Result<()> {
        let (max_records, max_bytes) = self.host.batch_limits();
        let mut at_tail = false;
        let ahead = !matches!(self.pending.flights.lanes, Lanes::Inline);
        loop {
            let (held, held_bytes) = self.pending.held(ahead);
            if held >= max_records || held_bytes >= max_bytes {
                break;
            }
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
                    self.pending.push(rec, || self.clock.now());
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
    fn confirm(&mut self, next_seq: u64) {
        // A checkpoint never passes a record still pending (read, and not
        // yet confirmed by the sink or the dead-letter store), and never
        // moves back (a rewind sets it apart).
        assert!(
            next_seq >= self.confirmed,
            "shard {}: sink {}'s confirmed point would move back from {} to {next_seq}",
            self.shard,
            self.sink,
            self.confirmed
        );
        if let Some(head) = self.pending.front() {
            assert!(
                next_seq <= head.seq,
                "shard {}: sink {}'s checkpoint would pass seq {}, still unconfirmed, to {next_seq}",
                self.shard,
                self.sink,
                head.seq
            );
        }
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
    fn persist(&mut self, sync: bool) -> io::Result<()> {
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
        self.pending.clear();
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
        self.pending.flights.abandon();
        let first = self.confirmed;
        let goal = lag_max / 2;
        let mut records = 0u64;
        while backlog(self) > goal {
            if self.pending.drop_front().is_some() {
                records += 1;
                continue;
            }
            let queue = &self.queue;
            let next = self
                .follower
                .next(wm.tail(), |id| queue.abandoned(id, false).map(|a| a.cut()))?;
            let Some(rec) = next else { break };
            self.pending.push(rec, || self.clock.now());
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
        self.pending.restart_linger(self.clock.now());
        self.confirm(end);
        self.publish_backlog();
        Ok(())
    }

    /// Record bytes confirmed on the flusher's running count (see
    /// `bytes_base`): every byte the follower passed, less what is pending.
    fn confirmed_bytes(&self) -> u64 {
        self.bytes_base
            .wrapping_add(self.follower.passed_bytes())
            .wrapping_sub(self.pending.frame_bytes())
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
/// Batches: offer them to the sink (up to the limit in flight), apply
/// each answer ([`Settlement`]), and settle the finished batches at the
/// head, in order (dead-letter the rejected records, then confirm). The
/// records and flights are [`Pending`]'s; the cursor offers, counts, logs
/// and confirms.
impl<S: Storage> Cursor<S> {
    /// Offer batches while the limit allows: first those to offer again
    /// (oldest first), then new ones from the records read and not yet
    /// offered, once full or lingered long enough. Says how long to wait
    /// for more records (the linger left, or idle). With one batch at a
    /// time it offers one and says go on.
    fn dispatch(&mut self, wm: Watermark) -> io::Result<DrainWait> {
        if !self.pending.flights.lanes_fit() && self.pending.flights.out() == 0 {
            self.refit_lanes();
        }
        let inline = matches!(self.pending.flights.lanes, Lanes::Inline);
        let limit = self.pending.flights.limiter.limit() as usize;
        loop {
            let (max_records, max_bytes) = self.host.batch_limits();
            if inline && self.pending.flights.resend_over(max_records, max_bytes) {
                // One at a time offers the head of what was read again,
                // cut by the limits of now (a reload shrank them).
                self.pending.flights.abandon();
            }
            // With batches in flight a suspect waits for a witness (see
            // `poison`); one at a time keeps the order, and asks the
            // sink's health check instead.
            let (mut resend, waiting) = self.pending.flights.resends(self.commits, !inline);
            if resend.is_none() {
                let (unsent, unsent_bytes) = self.pending.unsent();
                if unsent == 0 && waiting.is_none() {
                    break;
                }
                let full = unsent >= max_records || unsent_bytes >= max_bytes;
                let linger = self.host.settings().linger();
                let linger_left = self.pending.linger_left(linger, |t| self.clock.since(t));
                if unsent > 0 && !full && !linger_left.is_zero() {
                    self.publish_in_flight();
                    return Ok(DrainWait::Durable {
                        seen: wm,
                        until: self.pending.until_fuller(max_records, max_bytes),
                        timeout: linger_left,
                    });
                }
                // A suspect waiting for a witness goes again itself when
                // no new batch can be its witness.
                let witness = usize::from(waiting.is_some());
                if unsent == 0 || self.pending.flights.unsettled() - witness >= limit {
                    resend = waiting;
                }
            }
            // A batch is ready: it goes if a slot is free, else the limit
            // learns that the sink, not the records, is what waits. A batch
            // offered again has its slot; a new one needs a slot among the
            // unsettled, so a crash redelivers at most `limit` batches (one
            // more, the witness, while a suspect waits).
            let taken = match resend {
                Some(_) => self.pending.flights.out(),
                None => self.pending.flights.unsettled(),
            };
            if taken >= limit + usize::from(waiting.is_some() && resend.is_none()) {
                self.pending.flights.limiter.slots_full();
                break;
            }
            let idx = match resend {
                Some(idx) => idx,
                None => {
                    let now = self.clock.now();
                    self.pending.new_flight(max_records, max_bytes, now)
                }
            };
            self.send(idx)?;
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
            until: self.pending.until_fuller(max_records, max_bytes),
            timeout: IDLE_WAIT,
        })
    }

    /// Offer flight `idx` (new, or to be offered again).
    fn send(&mut self, idx: usize) -> io::Result<()> {
        let id = self.pending.flights.next_id();
        let shard = self.shard;
        if matches!(self.pending.flights.lanes, Lanes::Pool(_)) {
            let records = self.pending.batch(idx).cloned().collect();
            if let Lanes::Pool(pool) = &mut self.pending.flights.lanes {
                pool.submit(id, records)?;
            }
        } else {
            let records: Vec<Record<'_>> = self
                .pending
                .batch(idx)
                .map(|r| sink_record(shard, r))
                .collect();
            let started = Instant::now();
            let call = self.stats.sink_call();
            let outcome = self.host.deliver(&Batch::new(shard, &records));
            drop(call);
            drop(records);
            self.pending.flights.answered_here(Answer {
                id,
                outcome,
                rtt: started.elapsed(),
                panicked: self.host.panicked().map(str::to_string),
            });
        }
        self.pending.flights.offered(idx, id, now_unix_us() / 1000);
        Ok(())
    }

    /// Take the answers that came back (in the simulation, some of those
    /// held, in an order its random stream picks), apply them, and settle
    /// the finished flights at the head.
    fn absorb(&mut self) -> io::Result<()> {
        match &mut self.pending.flights.lanes {
            Lanes::Inline => {}
            Lanes::Pool(pool) => pool.take(&mut self.pending.flights.answers),
            Lanes::Held(_) => {
                let rng = &mut self.rng;
                self.pending.flights.release_held(|| retry::random(rng));
            }
        }
        while let Some(a) = self.pending.flights.answers.pop_front() {
            self.apply(a);
        }
        // A failed dead-letter write leaves the flight finished at the
        // head: the next step tries the write again.
        while let Some((len, rejected)) = self.pending.settled_head() {
            self.settle(len, &rejected)?;
            self.pending.flights.pop_front();
        }
        Ok(())
    }

    /// Apply the sink's answer to the flight it belongs to (none: the
    /// cursor gave that offer up).
    fn apply(&mut self, a: Answer) {
        let Some(idx) = self.pending.flights.answered_out(a.id) else {
            return;
        };
        self.stats.sink_request_us.observe(a.rtt.as_micros() as u64);
        let n = self.pending.flights.list[idx].len;
        let Settlement {
            done,
            rejected,
            retry,
        } = Settlement::of(a.outcome, n).unwrap_or_else(|reason| {
            tracing::error!(shard = self.shard, sink = %self.sink, target = %self.host.description(), "{reason}; retrying the batch");
            Settlement::retry_all(reason)
        });
        if self
            .pending
            .flights
            .limiter
            .answered(a.rtt, retry.is_some() || done == 0)
        {
            self.limit_changed();
        }
        if done > 0 {
            self.commits += 1;
            self.retry = RetryState::default();
            self.stats.sink.lock().unwrap().delivered();
            let committed = done - rejected.len();
            self.stats
                .delivered_records
                .fetch_add(committed as u64, Ordering::Relaxed);
            self.stats.delivered_batches.fetch_add(1, Ordering::Relaxed);
        }
        let Some(idx) = self.pending.answered(idx, done, rejected) else {
            return;
        };
        let (after, reason) = retry.unwrap_or((None, "sink asked to retry".into()));
        let len = self.pending.flights.list[idx].len;
        // A panic was logged once where it was caught, at error level.
        self.after_transient(len, after, &reason, a.panicked.is_none());
        match a.panicked {
            Some(panic) => self.judge(idx, &panic, true),
            None => self.judge(idx, &reason, false),
        }
    }

    /// Flight `idx` failed again for `reason` (`panicked`: the sink
    /// panicked on it, `reason` is the panic's message):
    /// offer it again, halve it, or give it up (see `poison`); giving up
    /// in an outage past `retry_duration_max_ms` takes every flight in the
    /// same state.
    fn judge(&mut self, idx: usize, reason: &str, panicked: bool) {
        let now = self.clock.now();
        let limit = self.host.settings().retry_duration_max();
        let (commits, len) = (self.commits, self.pending.flights.list[idx].len);
        let first_seq = self.pending.first_seq_of(idx);
        let witness = !matches!(self.pending.flights.lanes, Lanes::Inline);
        let host = &mut self.host;
        let attempt = Attempt {
            len,
            now,
            reason,
            panicked,
            commits,
            limit,
            witness,
        };
        let verdict = self.pending.flights.list[idx]
            .failures
            .failed(attempt, || host.healthy_now());
        match verdict {
            Verdict::Again => {}
            Verdict::Split => {
                // Each half is a new try: the backoff starts afresh, so a
                // batch of 1,000 is down to its failing record in seconds.
                self.retry = RetryState::default();
                self.pending.split(idx);
                self.stats.batch_splits.fetch_add(1, Ordering::Relaxed);
                tracing::debug!(shard = self.shard, sink = %self.sink, first_seq, records = len, reason, "a batch failed again: halved, each half offered on its own");
            }
            Verdict::Stuck => {
                let failures = &mut self.pending.flights.list[idx].failures;
                if !failures.warned {
                    failures.warned = true;
                    let until = limit.map_or(
                        "for ever: retry_duration_max_ms = 0 (set it to dead-letter such a record)"
                            .to_string(),
                        |l| {
                            format!(
                                "until retry_duration_max_ms ({} s) has passed, then dead-lettered",
                                l.as_secs()
                            )
                        },
                    );
                    tracing::warn!(shard = self.shard, sink = %self.sink, target = %self.host.description(), seq = first_seq, reason, "the sink keeps asking to retry one record while it takes others; it is retried {until}, and holds this sink's progress on the shard meanwhile");
                }
            }
            Verdict::GiveUp {
                reason,
                poison,
                outage,
            } => {
                let mut give_up = vec![(idx, reason)];
                if let (true, Some(limit)) = (outage, limit) {
                    for (j, f) in self.pending.flights.list.iter().enumerate() {
                        if j != idx
                            && matches!(f.state, FlightState::Resend)
                            && f.failures.no_commit_since_first(commits)
                            && f.failures.expired(now, Some(limit))
                        {
                            give_up.push((j, f.failures.expired_reason(limit)));
                        }
                    }
                }
                for (j, why) in give_up {
                    let f = &mut self.pending.flights.list[j];
                    f.state = FlightState::Finished((0..f.len).map(|i| (i, why.clone())).collect());
                }
                if poison {
                    self.stats.poison_records.fetch_add(1, Ordering::Relaxed);
                }
            }
        }
    }

    /// The adaptive limit moved: publish it, and keep it for the next run
    /// (at most once a second; the last one at the stop).
    fn limit_changed(&mut self) {
        let limit = self.pending.flights.limiter.limit();
        tracing::debug!(shard = self.shard, sink = %self.sink, limit, "batches in flight limit changed");
        self.publish_in_flight();
        if self.pending.flights.learned_due() {
            self.keep_learned();
        }
    }

    /// Write the learned limit to its file, if it is adaptive and changed.
    fn keep_learned(&mut self) {
        if let Err(e) = self.pending.flights.keep_learned(&self.storage) {
            tracing::debug!(shard = self.shard, sink = %self.sink, error = %e, "keeping the learned batches-in-flight limit failed; the next run starts at 1")
        }
    }

    /// Publish the limit, the batches out and, with workers, when the
    /// oldest of them was offered (`GET /ready`'s hung-sink check).
    fn publish_in_flight(&self) {
        self.pending.flights.publish(&self.stats);
    }

    /// Lanes for the limit's mode: workers for more than one batch at a
    /// time, else the cursor's own thread.
    fn refit_lanes(&mut self) {
        let (shard, sink) = (self.shard, self.sink.clone());
        let (slot, stats) = (self.host.slot(), self.stats.clone());
        let bell = self.pending.flights.bell.clone();
        self.pending
            .flights
            .refit(|ceiling| Pool::new(shard, &sink, slot, stats, bell, ceiling));
    }

    /// The first `done` pending records are finished: the `rejected` among
    /// them go to the dead-letter store, then the confirmed point moves past
    /// all of them and they leave `pending`. The one path from a sink's (or
    /// the retry limit's) verdict to the checkpoint.
    fn settle(&mut self, done: usize, rejected: &[(usize, String)]) -> io::Result<()> {
        self.dead_letter(rejected)?;
        if self.queue.taps.watched() {
            let delivered = self
                .pending
                .first(done)
                .enumerate()
                .filter(|(i, _)| !rejected.iter().any(|(r, _)| r == i))
                .map(|(_, r)| r);
            self.queue.taps.confirmed(self.shard, &self.sink, delivered);
        }
        let end = self.pending.take(done);
        self.confirm(end);
        self.publish_backlog();
        Ok(())
    }

    /// Publish the arrival time of the oldest record still pending and the
    /// running count of confirmed record bytes: every byte the follower has
    /// passed, less the frames still pending (read, not yet confirmed).
    fn publish_backlog(&self) {
        self.stats
            .oldest_pending_arrival_us
            .store(self.pending.oldest_arrival_us(), Ordering::Relaxed);
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
        let letters = self
            .pending
            .dead_letters(self.shard, rejected, now_unix_us());
        self.dead_letters.lock().unwrap().append(&letters)?;
        self.stats
            .dead_lettered
            .fetch_add(letters.len() as u64, Ordering::Relaxed);
        for l in &letters {
            tracing::debug!(shard = self.shard, sink = %self.sink, seq = l.seq, reason = %l.reason, "record moved to the dead-letter store");
        }
        let (first, last) = (&letters[0], &letters[letters.len() - 1]);
        let reasons = {
            let mut r: Vec<&str> = letters.iter().map(|l| l.reason.as_str()).collect();
            r.sort_unstable();
            r.dedup();
            r.len()
        };
        tracing::warn!(shard = self.shard, sink = %self.sink, target = %self.host.description(), records = letters.len(), first_seq = first.seq, last_seq = last.seq, reason = %first.reason, other_reasons = reasons - 1, "records moved to the dead-letter store (`spillway ctl dead-letter list` shows each with its reason)");
        Ok(())
    }
}

/// Retries and requeued records: the state is theirs
/// ([`RetryState`], [`Requeue`]); the cursor counts, logs, probes and
/// delivers.
impl<S: Storage> Cursor<S> {
    /// A transient failure of a batch of `n` records: count it, say so
    /// (at warn level when `loud` allows: a panic was logged already), and
    /// back off (whether the batch is given up is `judge`'s).
    fn after_transient(&mut self, n: usize, after: Option<Duration>, reason: &str, loud: bool) {
        let now = self.clock.now();
        self.stats.retries.fetch_add(1, Ordering::Relaxed);
        self.stats
            .sink
            .lock()
            .unwrap()
            .failing(super::SinkState::Retrying, reason);
        let settings = self.host.settings().clone();
        let rng = &mut self.rng;
        let allowed = loud;
        let AfterFailure {
            delay,
            attempts,
            loud,
        } = self
            .retry
            .failed(now, &settings, after, || retry::random(rng));
        if loud && allowed {
            tracing::warn!(shard = self.shard, sink = %self.sink, target = %self.host.description(), attempts, records = n, retry_in_ms = delay.as_millis() as u64, reason = %reason, "delivery failed (transient); retrying");
        } else {
            tracing::debug!(shard = self.shard, sink = %self.sink, attempts, reason = %reason, "delivery retry");
        }
    }

    /// While a backoff runs: how long to pause before looking again, after
    /// probing the sink if a probe is due (one health check a second,
    /// which does not hammer a sink that is still down). `None` once the
    /// next attempt may go.
    fn backing_off(&mut self) -> Option<DrainWait> {
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

    /// Deliver this shard's requeued records, if any wait, as one batch.
    /// `None`: nothing to do here.
    fn deliver_requeued(&mut self) -> Option<DrainWait> {
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
