//! The shard's append queue (the flusher's mailbox), with its health,
//! its durable watermark and its abandoned segments: the part of a shard
//! connections see.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use spillway_protocol::NackReason;

use super::{
    nack_for, Abandoned, AppendBatch, DurableWatch, FreeSegments, GroupBound, ShardHealth,
    ShardStats, Watermark,
};
use crate::shard::budget::{ShardBudget, WabBudget};
use crate::tap::Taps;

/// The part of a shard connections see. Shared by `Arc`; survives flusher
/// restarts, so connections never need a new handle.
pub struct ShardQueue {
    pub shard: u32,
    /// This shard's bytes in the WAB: the one owner of that count.
    pub budget: ShardBudget,
    queue: Mutex<VecDeque<AppendBatch>>,
    /// The last group passed over an oversized batch at the front (see
    /// `take_within`); the next one must take it. Read and written only
    /// under the `queue` lock.
    passed_over: AtomicBool,
    /// Length of `queue`, readable without the lock (the flusher spins on it).
    queued: AtomicUsize,
    /// How long the flusher spins for work before sleeping, microseconds.
    spin_us: AtomicU64,
    wakeup: Condvar,
    health: AtomicU8,
    /// While `Unwritable`: the nack byte pushes get, and why (for health).
    unwritable_nack: AtomicU8,
    unwritable_why: Mutex<String>,
    shutdown: AtomicBool,
    /// How far records are durable, and the readers waiting on it.
    durable: DurableWatch,
    /// A flusher has started on this queue before (see
    /// [`Self::begin_checks`]).
    checks_begun: AtomicBool,
    /// Ids of segments the flusher abandoned after an I/O failure: they are
    /// never sealed while running, so the drain may delete them `.open`
    /// once confirmed. Any other `.open` segment the drain has finished is
    /// being sealed, and is deleted only once sealed.
    abandoned: Mutex<Vec<Abandoned>>,
    /// Set by the drain (0: nothing asked): every record below this is
    /// confirmed on the checkpoint and the WAB budget refuses pushes, so
    /// the flusher seals its active segment if that holds only such
    /// records, and the drain deletes it (see [`Self::want_rotation`]).
    rotation_wanted: AtomicU64,
    /// Delivered segments retention set aside for the sealer to write over.
    pub free: Arc<FreeSegments>,
    pub stats: ShardStats,
    /// `ctl tap`'s watchers of this shard's records.
    pub taps: Taps,
}

/// Default of `wab.flusher_spin_us`: how long the flusher spins on an empty
/// queue before sleeping. A serial producer's next push usually arrives
/// within one socket round trip of its ack; catching it while spinning
/// saves the ~40-50 µs wake of an idle core. Zero disables spinning.
pub const SPIN_BEFORE_SLEEP_DEFAULT: Duration = Duration::from_micros(200);

impl ShardQueue {
    pub fn new(shard: u32, wab: &Arc<WabBudget>) -> Arc<Self> {
        Arc::new(ShardQueue {
            shard,
            budget: ShardBudget::new(wab),
            queue: Mutex::new(VecDeque::new()),
            passed_over: AtomicBool::new(false),
            queued: AtomicUsize::new(0),
            spin_us: AtomicU64::new(SPIN_BEFORE_SLEEP_DEFAULT.as_micros() as u64),
            wakeup: Condvar::new(),
            health: AtomicU8::new(ShardHealth::Starting as u8),
            unwritable_nack: AtomicU8::new(NackReason::InternalError.as_byte()),
            unwritable_why: Mutex::new(String::new()),
            shutdown: AtomicBool::new(false),
            durable: DurableWatch::default(),
            checks_begun: AtomicBool::new(false),
            abandoned: Mutex::new(Vec::new()),
            rotation_wanted: AtomicU64::new(0),
            free: Arc::default(),
            stats: ShardStats::default(),
            taps: Taps::default(),
        })
    }

    /// Whether a push of `records` records with `payload_bytes` in all may
    /// be queued, on top of `pending_disk_bytes` this caller admitted but
    /// has not queued yet: the disk bytes it will take, or the retryable
    /// nack it gets (the shard's refusal while it cannot write, else
    /// Overloaded at `wab.wab_bytes_max`). Producers' pushes and requeued
    /// dead letters both come through here.
    pub fn admit(
        &self,
        payload_bytes: u64,
        records: usize,
        pending_disk_bytes: u64,
    ) -> Result<u64, NackReason> {
        if let Some(reason) = self.refusal() {
            return Err(reason);
        }
        let disk_bytes = ShardBudget::disk_bytes(payload_bytes, records);
        if !self.budget.admit(pending_disk_bytes + disk_bytes) {
            return Err(NackReason::Overloaded);
        }
        Ok(disk_bytes)
    }

    pub fn set_spin(&self, spin: Duration) {
        self.spin_us
            .store(spin.as_micros() as u64, Ordering::Relaxed);
    }

    pub fn health(&self) -> ShardHealth {
        match self.health.load(Ordering::Acquire) {
            0 => ShardHealth::Starting,
            1 => ShardHealth::Running,
            3 => ShardHealth::Unwritable,
            _ => ShardHealth::Failed,
        }
    }

    pub fn set_health(&self, h: ShardHealth) {
        self.health.store(h as u8, Ordering::Release);
    }

    /// The shard cannot write (flusher thread): record why, and the nack
    /// pushes get meanwhile (Overloaded for a full disk).
    pub fn set_unwritable(&self, error: &std::io::Error, context: &str) {
        let nack = nack_for(error);
        self.unwritable_nack
            .store(nack.as_byte(), Ordering::Release);
        *self.unwritable_why.lock().unwrap() = format!("{context}: {error}");
        if self.health() != ShardHealth::Unwritable {
            self.stats.unwritable_events.fetch_add(1, Ordering::Relaxed);
        }
        // A shard the supervisor stopped for good stays Failed.
        self.transition(
            &[ShardHealth::Running, ShardHealth::Starting],
            ShardHealth::Unwritable,
        );
    }

    /// The shard writes again (flusher thread).
    pub fn set_writable(&self) {
        self.transition(
            &[ShardHealth::Unwritable, ShardHealth::Starting],
            ShardHealth::Running,
        );
        self.unwritable_why.lock().unwrap().clear();
    }

    /// Move the health to `to` if it is one of `from` (so the flusher never
    /// overrides a `Failed` the supervisor set).
    fn transition(&self, from: &[ShardHealth], to: ShardHealth) {
        for f in from {
            let moved = self.health.compare_exchange(
                *f as u8,
                to as u8,
                Ordering::AcqRel,
                Ordering::Acquire,
            );
            if moved.is_ok() {
                return;
            }
        }
    }

    /// The nack a push gets while the shard is `Unwritable`.
    pub fn unwritable_nack(&self) -> NackReason {
        NackReason::from_byte(self.unwritable_nack.load(Ordering::Acquire))
            .unwrap_or(NackReason::InternalError)
    }

    /// Why the shard cannot write (empty when it can).
    pub fn unwritable_why(&self) -> String {
        self.unwritable_why.lock().unwrap().clone()
    }

    /// The nack a push (or a health check) gets now, if the shard cannot
    /// take records: `None` while it is running or (re)starting.
    pub fn refusal(&self) -> Option<NackReason> {
        match self.health() {
            ShardHealth::Running | ShardHealth::Starting => None,
            ShardHealth::Unwritable => Some(self.unwritable_nack()),
            ShardHealth::Failed => Some(NackReason::InternalError),
        }
    }

    /// Publish a new durable watermark (flusher thread); wakes the
    /// readers it is enough for.
    pub fn publish_durable(&self, w: Watermark) {
        let shard = self.shard;
        self.durable.update(|durable| {
            // Readers go on from where they stopped: a watermark that moved
            // back would make them read records that are not durable, or skip.
            assert!(
                (w.segment_id, w.offset) >= (durable.segment_id, durable.offset)
                    && w.next_seq >= durable.next_seq
                    && w.bytes >= durable.bytes,
                "shard {shard}: the durable watermark moved back from {durable:?} to {w:?}",
            );
            *durable = Watermark {
                unchecked_from: durable.unchecked_from,
                ..w
            };
        });
    }

    /// The first segment readers may not open yet (see
    /// [`Watermark::unchecked_from`]).
    pub fn unchecked_from(&self) -> u64 {
        self.durable.get().unchecked_from
    }

    /// The checker: readers may open every segment below `id` now (or
    /// every one, `u64::MAX`). Wakes the readers waiting on the watermark.
    pub fn set_unchecked_from(&self, id: u64) {
        self.durable.update(|durable| durable.unchecked_from = id);
    }

    /// The sealed segments of `found` (ids, in id order) the shard's
    /// checker must read before readers open them, and the gate closed in
    /// front of the first. At the first start that is all of them; a
    /// flusher started again within the process leaves out those an
    /// earlier checker finished (only the gate's segment and newer ones are
    /// still unchecked), so the gate never moves back in front of a reader.
    pub fn begin_checks(&self, found: &[u64]) -> Vec<u64> {
        self.durable.update(|durable| {
            let first = !self.checks_begun.swap(true, Ordering::AcqRel);
            let todo: Vec<u64> = found
                .iter()
                .copied()
                .filter(|&id| first || id >= durable.unchecked_from)
                .collect();
            debug_assert!(todo.windows(2).all(|w| w[0] < w[1]), "in id order");
            durable.unchecked_from = todo.first().copied().unwrap_or(u64::MAX);
            todo
        })
    }

    pub fn durable(&self) -> Watermark {
        self.durable.get()
    }

    /// The watermark with its sleepers: where readers wait for it (see
    /// [`DurableWatch::wait`]).
    pub fn durable_watch(&self) -> &DurableWatch {
        &self.durable
    }

    /// The flusher gave up on a segment (it stays `.open`, unsealed).
    pub fn mark_abandoned(&self, segment: Abandoned) {
        self.abandoned.lock().unwrap().push(segment);
    }

    /// Every segment the flusher abandoned that the drain has not deleted.
    pub fn abandoned_segments(&self) -> Vec<Abandoned> {
        self.abandoned.lock().unwrap().clone()
    }

    /// The abandoned segment `id`, if it is one; `forget` drops it from
    /// the list (the drain deleted it).
    pub fn abandoned(&self, id: u64, forget: bool) -> Option<Abandoned> {
        let mut list = self.abandoned.lock().unwrap();
        let found = list.iter().position(|a| a.segment_id == id)?;
        let a = list[found];
        if forget {
            list.swap_remove(found);
        }
        Some(a)
    }

    /// The drain: everything below `confirmed` is delivered and on the
    /// checkpoint, and the WAB budget refuses pushes. Without this a shard
    /// whose active segment held the budget's last bytes stayed refused for
    /// good once they were delivered: pushes never reached the flusher (so
    /// it never rotated) and the drain deletes only segments no longer
    /// written. Wakes the flusher.
    pub fn want_rotation(&self, confirmed: u64) {
        debug_assert!(confirmed > 0, "0 means nothing asked");
        if self.rotation_wanted.swap(confirmed, Ordering::AcqRel) == 0 {
            let _q = self.queue.lock().unwrap();
            self.wakeup.notify_all();
        }
    }

    /// The flusher: what [`Self::want_rotation`] asked, if anything.
    pub fn take_rotation_wanted(&self) -> Option<u64> {
        match self.rotation_wanted.swap(0, Ordering::AcqRel) {
            0 => None,
            confirmed => Some(confirmed),
        }
    }

    /// Queue a batch for the next group commit.
    pub fn push(&self, batch: AppendBatch) {
        let mut q = self.queue.lock().unwrap();
        q.push_back(batch);
        self.queued.store(q.len(), Ordering::Release);
        drop(q);
        self.wakeup.notify_one();
    }

    /// Take the next group: everything queued, up to `bytes_max` payload
    /// bytes, waiting until something arrives, `deadline` passes or
    /// shutdown is requested. Empty result = deadline or shutdown.
    ///
    /// The first batch is always taken, however large, and the batches
    /// after it may add up to `bytes_max` more. A later batch that would
    /// pass that stays queued, and so does every later batch of
    /// the same connection (its order must hold), but batches of other
    /// connections behind it still ride this group: a small producer queued
    /// behind a 16 MiB record waits for one such write, not for all of them.
    pub fn take_group(
        &self,
        deadline: Option<Instant>,
        bound: GroupBound,
        into: &mut Vec<AppendBatch>,
    ) {
        self.spin_for_work(deadline);
        let start = into.len();
        let mut q = self.queue.lock().unwrap();
        loop {
            if !q.is_empty() {
                let bytes: u64 = q.iter().map(|b| b.bytes).sum();
                let records: usize = q.iter().map(|b| b.records.len()).sum();
                if bytes <= bound.bytes && records <= bound.records {
                    into.extend(q.drain(..));
                } else {
                    self.take_within(&mut q, bound, into);
                }
                self.queued.store(q.len(), Ordering::Release);
                drop(q);
                // The first batch rides whole; the rest stay in the bound.
                let rest = into.get(start + 1..).unwrap_or_default();
                assert!(
                    rest.iter().map(|b| b.bytes).sum::<u64>() <= bound.bytes
                        && rest.iter().map(|b| b.records.len()).sum::<usize>() <= bound.records,
                    "shard {}: a group passed its bound {bound:?}",
                    self.shard
                );
                return;
            }
            if self.shutdown.load(Ordering::Acquire)
                || self.rotation_wanted.load(Ordering::Acquire) != 0
            {
                return;
            }
            let now = Instant::now();
            q = match deadline {
                Some(d) if now >= d => return,
                Some(d) => self.wakeup.wait_timeout(q, d - now).unwrap().0,
                None => self.wakeup.wait(q).unwrap(),
            };
        }
    }

    /// The bounded, order-keeping selection of [`Self::take_group`].
    ///
    /// A batch larger than the bound at the front of the queue is passed
    /// over once: if batches of other connections fit, they form this group
    /// on their own and the large one leads the next. A small Sync push
    /// then waits for at most one large write and fsync (the one in
    /// progress), not two, and the large batch is delayed by at most one
    /// small group, so neither starves.
    fn take_within(
        &self,
        q: &mut VecDeque<AppendBatch>,
        bound: GroupBound,
        into: &mut Vec<AppendBatch>,
    ) {
        let oversized = q
            .front()
            .is_some_and(|b| b.bytes > bound.bytes || b.records.len() > bound.records);
        if oversized && !self.passed_over.load(Ordering::Relaxed) {
            let front_sender = q.front().map(AppendBatch::sender_id);
            Self::select(q, bound, false, front_sender, into);
            if !into.is_empty() {
                self.passed_over.store(true, Ordering::Relaxed);
                return;
            }
        }
        self.passed_over.store(false, Ordering::Relaxed);
        Self::select(q, bound, true, None, into);
    }

    /// Move the batches that fit `bound` from `q` into `into`, keeping each
    /// connection's order: once one of a connection's batches stays, so do
    /// its later ones (`held` starts with that connection, if given). With
    /// `first_free` the first batch taken is not counted against the bound.
    fn select(
        q: &mut VecDeque<AppendBatch>,
        bound: GroupBound,
        first_free: bool,
        held: Option<usize>,
        into: &mut Vec<AppendBatch>,
    ) {
        let mut taken_bytes = 0u64;
        let mut taken_records = 0usize;
        let mut held_back: Vec<usize> = held.into_iter().collect();
        let mut kept = VecDeque::with_capacity(q.len());
        for b in q.drain(..) {
            let sender = b.sender_id();
            let free = first_free && into.is_empty();
            let fits = taken_bytes.saturating_add(b.bytes) <= bound.bytes
                && taken_records + b.records.len() <= bound.records;
            if (free || fits) && !held_back.contains(&sender) {
                if !free {
                    taken_bytes += b.bytes;
                    taken_records += b.records.len();
                }
                into.push(b);
            } else {
                held_back.push(sender);
                kept.push_back(b);
            }
        }
        *q = kept;
    }

    /// Spin (yielding the core to anything runnable) for up to
    /// the configured spin time waiting for a batch, without the lock.
    fn spin_for_work(&self, deadline: Option<Instant>) {
        let start = Instant::now();
        let mut until = start + Duration::from_micros(self.spin_us.load(Ordering::Relaxed));
        if let Some(d) = deadline {
            until = until.min(d);
        }
        while self.queued.load(Ordering::Acquire) == 0 && !self.shutdown.load(Ordering::Relaxed) {
            if Instant::now() >= until {
                return;
            }
            std::thread::yield_now();
        }
    }

    /// Ask the flusher thread to finish its current group and exit.
    pub fn request_shutdown(&self) {
        self.shutdown.store(true, Ordering::Release);
        let _q = self.queue.lock().unwrap();
        self.wakeup.notify_all();
    }

    pub fn shutdown_requested(&self) -> bool {
        self.shutdown.load(Ordering::Acquire)
    }

    /// Clear a shutdown request (a restarted flusher runs again).
    pub fn clear_shutdown(&self) {
        self.shutdown.store(false, Ordering::Release);
    }

    /// Answer everything queued with `reason` (shard failed or shutting down).
    pub fn fail_queued(&self, reason: NackReason) {
        let drained: Vec<AppendBatch> = {
            let mut q = self.queue.lock().unwrap();
            self.queued.store(0, Ordering::Release);
            q.drain(..).collect()
        };
        for b in drained {
            b.complete(Err(reason));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::shard::{CommitTarget, PendingRecord, GROUP_RECORDS_MAX};
    use bytes::Bytes;

    struct Nobody;
    impl CommitTarget for Nobody {
        fn committed(&self, _: u64, _: Result<u64, NackReason>) {}
    }

    fn batch(from: &Arc<dyn CommitTarget>, token: u64, bytes: u64) -> AppendBatch {
        AppendBatch::new(Vec::new(), bytes, true, token, from.clone())
    }

    fn bound(bytes: u64) -> GroupBound {
        GroupBound {
            bytes,
            records: GROUP_RECORDS_MAX,
        }
    }

    fn tokens(group: &[AppendBatch]) -> Vec<u64> {
        group.iter().map(|b| b.token).collect()
    }

    /// The gate in front of unchecked segments: closed before the first of
    /// them at the first start, never moved back by a flusher started again
    /// (the segments an earlier checker finished are not checked again),
    /// kept by every published watermark, open when nothing is left.
    #[test]
    fn the_unchecked_gate_starts_at_the_first_unchecked_segment_and_never_moves_back() {
        let q = ShardQueue::new(0, &WabBudget::new(u64::MAX));
        assert_eq!(
            q.unchecked_from(),
            u64::MAX,
            "a new queue holds no reader back"
        );
        assert_eq!(q.begin_checks(&[3, 4, 7]), vec![3, 4, 7]);
        assert_eq!(q.unchecked_from(), 3);
        q.publish_durable(Watermark {
            segment_id: 9,
            ..Watermark::default()
        });
        assert_eq!(
            q.durable().unchecked_from,
            3,
            "the flusher's watermark keeps the gate"
        );
        assert_eq!(q.durable().tail().unchecked_from, 3);
        q.set_unchecked_from(4);
        // Started again (its checker stopped at 4): 3 is not checked again.
        assert_eq!(q.begin_checks(&[3, 4, 7]), vec![4, 7]);
        assert_eq!(q.unchecked_from(), 4);
        q.set_unchecked_from(u64::MAX);
        assert_eq!(q.begin_checks(&[3, 4, 7, 10]), Vec::<u64>::new());
        assert_eq!(q.unchecked_from(), u64::MAX);
        let fresh = ShardQueue::new(1, &WabBudget::new(u64::MAX));
        assert_eq!(fresh.begin_checks(&[]), Vec::<u64>::new());
        assert_eq!(fresh.unchecked_from(), u64::MAX);
    }

    #[test]
    fn a_group_is_bounded_and_small_batches_ride_past_a_huge_one_in_order() {
        use sink_sdk::units::MIB;
        let q = ShardQueue::new(0, &WabBudget::new(u64::MAX));
        q.set_spin(Duration::ZERO);
        let huge: Arc<dyn CommitTarget> = Arc::new(Nobody);
        let small: Arc<dyn CommitTarget> = Arc::new(Nobody);
        // Queue: huge 1, huge 2, small 10, huge 3, small 11.
        q.push(batch(&huge, 1, 16 * MIB));
        q.push(batch(&huge, 2, 16 * MIB));
        q.push(batch(&small, 10, 100));
        q.push(batch(&huge, 3, 16 * MIB));
        q.push(batch(&small, 11, 100));
        let mut group = Vec::new();
        q.take_group(None, bound(4 * MIB), &mut group);
        // The huge batch at the front is passed over once: the small
        // producer's batches go first, on their own.
        assert_eq!(tokens(&group), [10, 11]);
        group.clear();
        // Then the huge ones, in order, each leading its own group.
        q.take_group(None, bound(4 * MIB), &mut group);
        assert_eq!(tokens(&group), [1]);
        group.clear();
        q.take_group(None, bound(4 * MIB), &mut group);
        assert_eq!(tokens(&group), [2]);
        group.clear();
        q.take_group(None, bound(4 * MIB), &mut group);
        assert_eq!(tokens(&group), [3]);
        for b in group.drain(..) {
            b.complete(Ok(0));
        }
    }

    #[test]
    fn a_group_is_bounded_in_records_too() {
        let q = ShardQueue::new(0, &WabBudget::new(u64::MAX));
        q.set_spin(Duration::ZERO);
        let a: Arc<dyn CommitTarget> = Arc::new(Nobody);
        let b: Arc<dyn CommitTarget> = Arc::new(Nobody);
        let rec = |n: usize| -> Vec<PendingRecord> {
            (0..n)
                .map(|_| PendingRecord {
                    payload: Bytes::from_static(b"x"),
                    meta: 0,
                })
                .collect()
        };
        q.push(AppendBatch::new(rec(5), 5, true, 1, a.clone()));
        q.push(AppendBatch::new(rec(8), 8, true, 2, b.clone()));
        q.push(AppendBatch::new(rec(8), 8, true, 3, a.clone()));
        let bound = GroupBound {
            bytes: 1 << 20,
            records: 10,
        };
        let mut group = Vec::new();
        q.take_group(None, bound, &mut group);
        // The first batch rides free; b's 8 records fit the bound of 10;
        // a's second batch (8 more) does not and waits.
        assert_eq!(tokens(&group), [1, 2]);
        group.clear();
        q.take_group(None, bound, &mut group);
        assert_eq!(tokens(&group), [3]);
    }

    #[test]
    fn a_connection_whose_batch_waits_keeps_its_later_batches_behind_it() {
        let q = ShardQueue::new(0, &WabBudget::new(u64::MAX));
        q.set_spin(Duration::ZERO);
        let a: Arc<dyn CommitTarget> = Arc::new(Nobody);
        let b: Arc<dyn CommitTarget> = Arc::new(Nobody);
        q.push(batch(&a, 1, 900));
        q.push(batch(&b, 2, 1500)); // does not fit: b is held back
        q.push(batch(&b, 3, 10)); // fits, but must not pass b's batch 2
        q.push(batch(&a, 4, 10));
        let mut group = Vec::new();
        q.take_group(None, bound(1000), &mut group);
        assert_eq!(tokens(&group), [1, 4]);
        group.clear();
        q.take_group(None, bound(1000), &mut group);
        assert_eq!(tokens(&group), [2, 3]);
    }
}
