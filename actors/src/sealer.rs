//! The SegmentSealer: one per shard, on its own OS thread, so rotation never
//! stalls the flusher.
//!
//! It keeps a zero-filled segment ready for the flusher (so the flusher's
//! fdatasync never has to commit file-size metadata), seals full segments
//! (footer, truncate, fsync, rename, directory fsync) and lets go of
//! abandoned ones. Its inputs are [`SealerMsg`]s from the flusher; its only
//! output is the spare-segment channel.

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, Sender, SyncSender};
use std::sync::Arc;
use std::thread::{self, JoinHandle};

use spillway_wab::{preallocate, seal, Preallocated, Sealing, Storage};

/// Work for the sealer, sent by the shard's flusher thread.
pub enum SealerMsg<F> {
    /// Preallocate one more segment and hand it over on the spare channel.
    PrepareSegment,
    /// Seal this full segment.
    SealSegment(Sealing<F>),
    /// The flusher gave up on this segment after a failed write or fsync.
    /// It is left `.open` for recovery to check and cut at the next start;
    /// nothing is written to it again.
    AbandonSegment { path: PathBuf, durable_offset: u64 },
    /// Finish queued work and exit.
    Stop,
}

/// Handle to a running sealer thread.
pub struct SegmentSealer<F> {
    pub tx: Sender<SealerMsg<F>>,
    pub thread: JoinHandle<()>,
}

/// Everything the sealer thread owns.
struct SealerThread<S: Storage> {
    storage: S,
    dir: PathBuf,
    shard: u32,
    segment_bytes: u64,
    next_segment_id: Arc<AtomicU64>,
    spares: SyncSender<std::io::Result<Preallocated<S::File>>>,
    stats: Arc<crate::shard::ShardQueue>,
}

impl<F: spillway_wab::StorageFile> SegmentSealer<F> {
    /// Start the sealer thread for a shard. `spares` is where preallocated
    /// segments go; the flusher holds the receiving end.
    pub fn spawn<S: Storage<File = F>>(
        storage: S,
        dir: PathBuf,
        queue: Arc<crate::shard::ShardQueue>,
        segment_bytes: u64,
        next_segment_id: Arc<AtomicU64>,
        spares: SyncSender<std::io::Result<Preallocated<F>>>,
    ) -> std::io::Result<Self> {
        let (tx, rx) = mpsc::channel();
        let shard = queue.shard;
        let worker = SealerThread {
            storage,
            dir,
            shard,
            segment_bytes,
            next_segment_id,
            spares,
            stats: queue,
        };
        let thread = thread::Builder::new()
            .name(format!("sealer-{shard}"))
            .spawn(move || worker.run(rx))?;
        Ok(SegmentSealer { tx, thread })
    }
}

impl<S: Storage> SealerThread<S> {
    fn run(self, rx: Receiver<SealerMsg<S::File>>) {
        while let Ok(msg) = rx.recv() {
            match msg {
                SealerMsg::PrepareSegment => self.prepare(),
                SealerMsg::SealSegment(s) => self.seal(s),
                SealerMsg::AbandonSegment {
                    path,
                    durable_offset,
                } => {
                    tracing::warn!(shard = self.shard, path = %path.display(), durable_offset, "segment abandoned after an I/O failure; recovery will check it at the next start");
                }
                SealerMsg::Stop => break,
            }
        }
    }

    fn prepare(&self) {
        let id = self.next_segment_id.fetch_add(1, Ordering::Relaxed);
        let result = preallocate(&self.storage, &self.dir, id, self.segment_bytes);
        if let Err(e) = &result {
            // The flusher gets the error at once (rather than waiting for a
            // spare that is not coming), tries inline, and reports it.
            tracing::debug!(shard = self.shard, segment = id, error = %e, "could not preallocate the next segment");
        }
        // The flusher may be gone (shutdown): then a spare stays on disk for next time.
        let _ = self.spares.send(result);
    }

    fn seal(&self, sealing: Sealing<S::File>) {
        let id = sealing.segment_id;
        let records = sealing.footer.record_count;
        match seal(&self.storage, &self.dir, sealing) {
            Ok(path) => {
                self.stats.stats.rotations.fetch_add(1, Ordering::Relaxed);
                tracing::debug!(shard = self.shard, segment = id, records, path = %path.display(), "sealed segment");
            }
            Err(e) => {
                // Its records were fsynced by the flusher before their acks;
                // only the footer is missing, and recovery reseals it.
                tracing::error!(shard = self.shard, segment = id, error = %e, "sealing failed; the segment stays .open for recovery");
            }
        }
    }
}
