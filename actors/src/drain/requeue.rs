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

use spillway_wab::deadletter::{DeadLetter, DeadLetterStore};
use spillway_wab::format::now_unix_us;
use spillway_wab::Storage;

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

impl<S: Storage> Requeue<S> {
    /// Up to `batch_records_max` of `shard`'s requeued records, when some wait.
    /// `seen`: the store's generation at which it held nothing of this
    /// shard (nothing is read again until an add moves it).
    pub(super) fn take(
        &self,
        shard: u32,
        max_records: usize,
        seen: &mut Option<u64>,
    ) -> io::Result<Option<Vec<DeadLetter>>> {
        if !self.waiting.load(Ordering::Acquire) {
            return Ok(None);
        }
        // Read before the list: an add after it makes the next step look.
        let generation = self.generation.load(Ordering::Acquire);
        if *seen == Some(generation) {
            // Nothing of this shard was there, and nothing came since.
            return Ok(None);
        }
        let all = self.store.lock().unwrap().list()?;
        if all.is_empty() {
            self.waiting.store(false, Ordering::Release);
            return Ok(None);
        }
        let mine: Vec<DeadLetter> = all
            .into_iter()
            .filter(|l| l.shard == shard)
            .take(max_records)
            .collect();
        if mine.is_empty() {
            *seen = Some(generation);
            return Ok(None);
        }
        Ok(Some(mine))
    }

    /// After a delivery of `mine`: the `rejected` ones back to
    /// `dead_letters` with their new reason (fsynced; `dead_lettered` is
    /// told how many once they are), then every finished one (`done` and
    /// rejected) out of this store.
    pub(super) fn settle(
        &self,
        dead_letters: &Mutex<DeadLetterStore<S>>,
        mine: &[DeadLetter],
        done: &[usize],
        rejected: &[(usize, String)],
        dead_lettered: impl FnOnce(u64),
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
            dead_letters.lock().unwrap().append(&again)?;
            dead_lettered(again.len() as u64);
        }
        let finished: BTreeSet<(u32, u64)> = done
            .iter()
            .copied()
            .chain(rejected.iter().map(|(i, _)| *i))
            .map(|i| (mine[i].shard, mine[i].seq))
            .collect();
        self.store
            .lock()
            .unwrap()
            .remove_where(|l| finished.contains(&(l.shard, l.seq)))?;
        Ok(())
    }
}
