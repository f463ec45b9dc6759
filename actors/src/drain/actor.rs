//! The supervised actor owning a shard's drain thread, and the thread's
//! main loop: follow the durable tail, batch, deliver (`delivery`), retry
//! (`retry`), confirm, write the checkpoint, remove finished segments.

use std::collections::VecDeque;
use std::io;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use actix::prelude::*;
use spillway_wab::deadletter::DeadLetterStore;
use spillway_wab::follow::{is_headerless, remove_segment, ShardFollower};
use spillway_wab::format::now_unix_us;
use spillway_wab::{load_checkpoint, write_checkpoint, Storage, StoredRecord};

use super::retry::RetryState;
use super::sink_host::{SinkHost, SinkSlot};
use super::DrainStats;
use crate::clock::Clock;
use crate::shard::{ShardQueue, Watermark};

/// Longest the on-disk checkpoint lags the confirmed point while busy.
const CHECKPOINT_EVERY: Duration = Duration::from_millis(200);
/// How long an idle drain sleeps before looking again (it is woken by new
/// durable records anyway).
const IDLE_WAIT: Duration = Duration::from_millis(500);
/// Pause after a failed read of the segments or a failed checkpoint write
/// before the drain tries again.
const IO_ERROR_PAUSE: Duration = Duration::from_secs(1);
/// How often the actor checks that its thread is alive.
const LIVENESS_CHECK_EVERY: Duration = Duration::from_millis(200);
/// How often a stopping actor looks whether its thread has finished.
const JOIN_POLL: Duration = Duration::from_millis(5);
/// How long a dropped (not stopped) drain waits for its thread.
const DROP_STOP_TIMEOUT: Duration = Duration::from_secs(5);
/// Longest a drain sleeps without looking at its stop flag.
const SLEEP_SLICE: Duration = Duration::from_millis(50);

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
    /// For the `sink` field of the actor's own log lines.
    slot: Arc<SinkSlot>,
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
        slot: Arc<SinkSlot>,
        dead_letters: Arc<Mutex<DeadLetterStore<S>>>,
        stats: Arc<DrainStats>,
    ) -> io::Result<Drain> {
        let shard = cfg.shard;
        let worker = DrainCore::new(
            storage,
            cfg,
            queue.clone(),
            slot.clone(),
            dead_letters,
            stats.clone(),
            Clock::system(),
            now_unix_us() | 1,
        )?;
        let stop = worker.stop.clone();
        let thread = thread::Builder::new()
            .name(format!("drain-{shard}"))
            .spawn(move || worker.run())?;
        Ok(Drain {
            shard,
            stop,
            queue,
            slot,
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
            thread::sleep(JOIN_POLL);
        }
        if t.is_finished() {
            let _ = t.join();
        } else {
            tracing::warn!(shard = self.shard, sink = %self.slot.description(), timeout_ms = timeout.as_millis() as u64, "sink batch still in flight at shutdown; abandoning it (it is delivered again after restart)");
        }
    }
}

impl Actor for Drain {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        ctx.run_interval(LIVENESS_CHECK_EVERY, |act, ctx| {
            let dead = act.thread.as_ref().is_none_or(|t| t.is_finished());
            if dead && !act.stop.load(Ordering::Acquire) {
                tracing::error!(
                    shard = act.shard,
                    sink = %act.slot.description(),
                    "drain thread died; stopping it for the supervisor"
                );
                ctx.stop();
            }
        });
    }
}

impl Drop for Drain {
    fn drop(&mut self) {
        self.stop_and_join(Instant::now() + DROP_STOP_TIMEOUT);
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

/// What a drain waits for after a [`DrainCore::step`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DrainWait {
    /// Go on at once.
    Now,
    /// Records durable past `seen`, or `timeout` (idle, or lingering for a
    /// fuller batch).
    Durable { seen: Watermark, timeout: Duration },
    /// Nothing to do for this long: backing off a failing sink (probing it
    /// between pauses), waiting to re-create a failed instance, or pausing
    /// after an I/O error.
    Pause(Duration),
}

/// One shard's drain: its state between batches, and one step of its loop
/// at a time (the daemon's thread runs them back to back; the simulation
/// calls [`DrainCore::step`] itself).
pub struct DrainCore<S: Storage> {
    pub(super) storage: S,
    pub(super) shard: u32,
    pub(super) dir: PathBuf,
    pub(super) queue: Arc<ShardQueue>,
    pub(super) dead_letters: Arc<Mutex<DeadLetterStore<S>>>,
    pub(super) stats: Arc<DrainStats>,
    pub(super) stop: Arc<AtomicBool>,
    pub(super) host: SinkHost,
    /// What linger, the checkpoint's throttle and the retry backoff read.
    pub(super) clock: Clock,
    /// Reads the shard's durable records in order, across segments.
    pub(super) follower: ShardFollower<S>,
    /// Added to the follower's passed bytes to give the confirmed bytes on
    /// the flusher's running count ([`Watermark::bytes`]): 0 at the
    /// daemon's start (both count from the oldest segment), set again
    /// whenever the drain has confirmed everything durable, which also
    /// corrects any drift (damaged bytes no record is read from, a drain
    /// restarted without its flusher).
    pub(super) bytes_base: u64,
    /// Every record below this is confirmed (by the sink or the dead-letter store).
    pub(super) confirmed: u64,
    /// What the checkpoint file on disk says (<= `confirmed`).
    pub(super) persisted: u64,
    pub(super) last_persist: Instant,
    /// Read, not yet confirmed, in order.
    pub(super) pending: VecDeque<StoredRecord>,
    pub(super) pending_bytes: usize,
    /// When the oldest pending record was read (linger starts there).
    pub(super) pending_since: Option<Instant>,
    pub(super) retry: RetryState,
    pub(super) rng: u64,
}

impl<S: Storage> DrainCore<S> {
    /// A drain for a shard that `open_shard` has opened: it starts at the
    /// checkpoint. `rng_seed` (non-zero) seeds the retry jitter.
    #[allow(clippy::too_many_arguments)] // each is one collaborator of the drain
    pub fn new(
        storage: S,
        cfg: DrainConfig,
        queue: Arc<ShardQueue>,
        slot: Arc<SinkSlot>,
        dead_letters: Arc<Mutex<DeadLetterStore<S>>>,
        stats: Arc<DrainStats>,
        clock: Clock,
        rng_seed: u64,
    ) -> io::Result<Self> {
        // The shard was opened first (`open_shard`), which moved an
        // unreadable or untrustworthy checkpoint aside; one that became
        // unreadable since is moved aside here (delivery then restarts at
        // the oldest record: at-least-once).
        let confirmed = load_checkpoint(&storage, &cfg.dir)?.confirmed;
        stats.checkpoint.store(confirmed, Ordering::Relaxed);
        Ok(DrainCore {
            follower: ShardFollower::new(storage.clone(), cfg.dir.clone(), confirmed),
            host: SinkHost::new(cfg.shard, slot, stats.clone()).with_clock(clock.clone()),
            storage,
            shard: cfg.shard,
            dir: cfg.dir,
            queue,
            dead_letters,
            stats,
            stop: Arc::new(AtomicBool::new(false)),
            last_persist: clock.now(),
            clock,
            confirmed,
            persisted: confirmed,
            pending: VecDeque::new(),
            pending_bytes: 0,
            bytes_base: 0,
            pending_since: None,
            retry: RetryState::default(),
            rng: rng_seed.max(1),
        })
    }

    pub(super) fn stopping(&self) -> bool {
        self.stop.load(Ordering::Acquire)
    }

    /// Every record below this is confirmed (what the next checkpoint says).
    pub fn confirmed(&self) -> u64 {
        self.confirmed
    }

    fn run(mut self) {
        while !self.stopping() {
            match self.step() {
                DrainWait::Now => {}
                DrainWait::Durable { seen, timeout } => {
                    self.queue.wait_durable(seen, timeout);
                }
                DrainWait::Pause(d) => self.sleep(d),
            }
        }
        self.finish();
    }

    /// Write the last checkpoint (a clean stop).
    pub fn finish(mut self) {
        if let Err(e) = self.persist() {
            tracing::error!(shard = self.shard, error = %e, "writing the final delivery checkpoint failed; some records will be delivered again");
        }
    }

    /// One turn of the loop: pick up a reload, wait out a backoff, read
    /// what is durable, and deliver a batch once it is full or has lingered
    /// long enough; when idle, write the checkpoint and remove finished
    /// segments. Says what to wait for before the next turn.
    pub fn step(&mut self) -> DrainWait {
        if self.host.check_reload() {
            // A new sink (or new settings) gets its first try at once.
            self.retry.end_backoff();
        }
        if let Some(wait) = self.backing_off() {
            return wait;
        }
        if let Some(left) = self.host.restart_wait() {
            return DrainWait::Pause(left);
        }
        let wm = self.queue.durable();
        if let Err(e) = self.fill(wm) {
            tracing::error!(shard = self.shard, error = %e, "reading segments for delivery failed; retrying");
            return DrainWait::Pause(IO_ERROR_PAUSE);
        }
        if self.pending.is_empty() {
            if let Err(e) = self.persist() {
                tracing::error!(shard = self.shard, error = %e, "writing the delivery checkpoint failed; will retry");
            }
            self.pass_headerless_abandoned(wm);
            self.delete_confirmed_segments();
            self.free_delivered_active(wm);
            return DrainWait::Durable {
                seen: wm,
                timeout: IDLE_WAIT,
            };
        }
        let (max_records, max_bytes) = self.host.batch_limits();
        let full = self.pending.len() >= max_records || self.pending_bytes >= max_bytes;
        let linger_left = self.pending_since.map_or(Duration::ZERO, |t| {
            self.host
                .settings()
                .linger
                .saturating_sub(self.clock.since(t))
        });
        if !full && !linger_left.is_zero() {
            return DrainWait::Durable {
                seen: wm,
                timeout: linger_left,
            };
        }
        if let Err(e) = self.deliver_one(max_records, max_bytes) {
            tracing::error!(shard = self.shard, error = %e, "recording delivery progress failed; the batch will be delivered again");
            return DrainWait::Pause(IO_ERROR_PAUSE);
        }
        DrainWait::Now
    }

    /// Read durable records until the batch limits are reached.
    fn fill(&mut self, wm: Watermark) -> io::Result<()> {
        let (max_records, max_bytes) = self.host.batch_limits();
        let mut at_tail = false;
        while self.pending.len() < max_records && self.pending_bytes < max_bytes {
            let queue = &self.queue;
            let next = self
                .follower
                .next(wm.tail(), |id| queue.abandoned(id, false).map(|a| a.cut()))?;
            match next {
                Some(rec) => {
                    if self.pending.is_empty() {
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
        if at_tail && self.pending.is_empty() {
            // Everything durable is read and confirmed: nothing is pending,
            // whatever the counts said.
            self.bytes_base = wm.bytes.wrapping_sub(self.follower.passed_bytes());
        }
        if self.pending.is_empty() && self.follower.next_seq() > self.confirmed {
            // The follower passed numbers no record will ever be read at
            // (the end of an abandoned segment: nacked records, or Buffered
            // ones no fsync covered): confirm past them, so the segment
            // goes and the backlog says 0, without waiting for a later
            // record to be delivered.
            self.confirm(self.follower.next_seq());
        }
        self.publish_backlog();
        Ok(())
    }

    /// Move the confirmed point; persist it when due. A failed checkpoint
    /// write does not undo the confirmation: the sink has the records (or
    /// the dead-letter store does), so they leave `pending` all the same,
    /// and the write is tried again at the next confirmation or when idle.
    /// Only deletion waits for it (it goes by what is on disk). Treating the
    /// failure as the batch's moved the confirmed point back when the batch
    /// was offered again and split.
    pub(super) fn confirm(&mut self, next_seq: u64) {
        debug_assert!(
            next_seq >= self.confirmed,
            "the confirmed point moves forward only"
        );
        self.confirmed = next_seq;
        let segment_freed = self
            .follower
            .oldest_finished()
            .is_some_and(|f| f.end_seq <= next_seq);
        if segment_freed || self.clock.since(self.last_persist) >= CHECKPOINT_EVERY {
            if let Err(e) = self.persist() {
                tracing::error!(shard = self.shard, error = %e, "writing the delivery checkpoint failed; will retry (records confirmed since the last checkpoint would be delivered again after a crash)");
            }
        }
        self.delete_confirmed_segments();
    }

    /// Write the checkpoint if it lags. A checkpoint write costs an fdatasync
    /// on the disk the flusher fsyncs too, so they are throttled to one per
    /// [`CHECKPOINT_EVERY`] (and forced before a segment is deleted, when
    /// idle, and at shutdown): a crash redelivers at most that much, which
    /// at-least-once delivery allows.
    pub(super) fn persist(&mut self) -> io::Result<()> {
        if self.persisted == self.confirmed {
            return Ok(());
        }
        write_checkpoint(&self.storage, &self.dir, self.confirmed)?;
        self.persisted = self.confirmed;
        self.last_persist = self.clock.now();
        self.stats
            .checkpoint
            .store(self.confirmed, Ordering::Relaxed);
        Ok(())
    }

    /// An abandoned segment whose header never reached the disk is never
    /// opened by the follower (so never finished nor deleted), and
    /// nothing in it was made durable: once every record before it is
    /// confirmed, confirm past its numbers (as the follower does for an
    /// abandoned segment's unacknowledged end), and delete it once the
    /// checkpoint says so. Its Buffered records, if any were acknowledged,
    /// were never durable: the tier allows losing them.
    fn pass_headerless_abandoned(&mut self, wm: Watermark) {
        for a in self.queue.abandoned_segments() {
            let before_confirmed =
                self.confirmed >= a.first_seq && self.follower.next_seq() >= a.first_seq;
            if a.segment_id >= wm.segment_id || !before_confirmed {
                continue;
            }
            match is_headerless(&self.storage, &self.dir, a.segment_id) {
                Ok(true) => {}
                Ok(false) => continue,
                Err(e) => {
                    tracing::debug!(shard = self.shard, segment = a.segment_id, error = %e, "abandoned segment not checked yet; will retry");
                    continue;
                }
            }
            if a.next_seq > self.confirmed {
                self.confirm(a.next_seq);
            }
            if let Err(e) = self.persist() {
                tracing::debug!(shard = self.shard, error = %e, "checkpoint not written; an abandoned segment waits");
                return;
            }
            match remove_segment(&self.storage, &self.dir, a.segment_id, true) {
                Ok(_) => {}
                Err(e) => {
                    tracing::debug!(shard = self.shard, segment = a.segment_id, error = %e, "abandoned segment not deleted yet; will retry");
                    continue;
                }
            }
            self.queue.abandoned(a.segment_id, true);
            self.queue.budget.release(a.acked_end);
            self.stats.segments_deleted.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Everything durable is delivered and on the checkpoint, the active
    /// segment holds some of it (the watermark is past its start), and the
    /// WAB budget refuses pushes: ask the flusher to seal that segment, so
    /// it can be deleted and its bytes released (see
    /// `ShardQueue::want_rotation`).
    fn free_delivered_active(&self, wm: Watermark) {
        if self.persisted >= wm.next_seq && wm.offset > 0 && self.queue.budget.refused() {
            self.queue.want_rotation(self.persisted);
        }
    }

    /// Remove every finished segment whose records are all behind the
    /// on-disk checkpoint, releasing its bytes from the WAB budget.
    fn delete_confirmed_segments(&mut self) {
        loop {
            // Nothing to remove until the checkpoint on disk is past it
            // (checked here too, so a busy drain does not look up the
            // abandoned list after every batch).
            let Some(id) = self
                .follower
                .oldest_finished()
                .filter(|f| f.end_seq <= self.persisted)
                .map(|f| f.segment_id)
            else {
                return;
            };
            // Never sealed: the flusher abandoned it after an I/O error. The
            // follower finished it, so the flusher no longer writes it and,
            // once confirmed, it can go as it is. (Any other unsealed
            // segment is being sealed: wait for it.)
            let abandoned = self.queue.abandoned(id, false).is_some();
            match self
                .follower
                .remove_oldest_finished(self.persisted, abandoned)
            {
                Ok(None) => return,
                Ok(Some((f, _))) => {
                    if abandoned {
                        // Whichever file went (a failed seal may have got as far as the rename).
                        self.queue.abandoned(id, true);
                    }
                    self.queue.budget.release(f.bytes);
                    self.stats.segments_deleted.fetch_add(1, Ordering::Relaxed);
                }
                Err(e) => {
                    tracing::debug!(shard = self.shard, segment = id, error = %e, "confirmed segment not deleted yet; will retry");
                    return;
                }
            }
        }
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
