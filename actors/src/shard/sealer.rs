//! The SegmentSealer: one per shard, on its own OS thread, so rotation never
//! stalls the flusher.
//!
//! It keeps a segment ready for the flusher, its blocks already written
//! (so the flusher's fdatasync never has to commit file-size metadata):
//! a delivered one written over when retention set one aside
//! ([`FreeSegments`]), else a zero-filled new file. It seals full segments
//! (footer, truncate, fsync, rename, directory fsync) and lets go of
//! abandoned ones. Its inputs are [`SealerMsg`]s from the flusher; its only
//! output is the spare-segment channel.

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, Sender, SyncSender};
use std::sync::Arc;
use std::thread::{self, JoinHandle};

use spillway_wab::format::Footer;
use spillway_wab::{preallocate, recycle, seal, Preallocated, Sealing, Storage};

use crate::shard::{Abandoned, FreeSegments};

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

/// Everything the sealer owns: the daemon runs it on its own thread
/// ([`SegmentSealer::start`]); the simulation calls [`SealerCore::handle`]
/// itself, one message at a time.
pub struct SealerCore<S: Storage> {
    storage: S,
    dir: PathBuf,
    shard: u32,
    segment_bytes: u64,
    next_segment_id: Arc<AtomicU64>,
    spares: SyncSender<std::io::Result<Preallocated<S::File>>>,
    reports: Arc<dyn SealReports>,
    /// Delivered segments to write over rather than create a file.
    free: Arc<FreeSegments>,
}

/// All the sealer tells its shard: a segment was sealed (a rotation), or
/// its seal failed and it is abandoned (never written again; the drain
/// deletes it `.open` once delivered).
pub trait SealReports: Send + Sync {
    fn sealed(&self);
    fn seal_failed(&self, segment: Abandoned);
}

impl SealReports for crate::shard::ShardQueue {
    fn sealed(&self) {
        self.stats.rotations.fetch_add(1, Ordering::Relaxed);
    }

    fn seal_failed(&self, segment: Abandoned) {
        self.mark_abandoned(segment);
    }
}

/// The channel the flusher sends its [`SealerMsg`]s on.
pub fn sealer_channel<F>() -> (Sender<SealerMsg<F>>, Receiver<SealerMsg<F>>) {
    mpsc::channel()
}

impl<F: spillway_wab::StorageFile> SegmentSealer<F> {
    /// Run `core` on its own thread, taking its work from `rx` (the
    /// receiving end of `tx`).
    pub fn start<S: Storage<File = F>>(
        core: SealerCore<S>,
        tx: Sender<SealerMsg<F>>,
        rx: Receiver<SealerMsg<F>>,
    ) -> std::io::Result<Self> {
        let thread = thread::Builder::new()
            .name(format!("sealer-{}", core.shard))
            .spawn(move || core.run(rx))?;
        Ok(SegmentSealer { tx, thread })
    }
}

impl<S: Storage> SealerCore<S> {
    /// A sealer for `shard`. `spares` is where preallocated segments go;
    /// the flusher holds the receiving end. `reports` hears of every seal;
    /// `free` holds the delivered segments it writes over when it can.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        storage: S,
        dir: PathBuf,
        shard: u32,
        reports: Arc<dyn SealReports>,
        free: Arc<FreeSegments>,
        segment_bytes: u64,
        next_segment_id: Arc<AtomicU64>,
        spares: SyncSender<std::io::Result<Preallocated<S::File>>>,
    ) -> Self {
        SealerCore {
            storage,
            dir,
            shard,
            segment_bytes,
            next_segment_id,
            spares,
            reports,
            free,
        }
    }

    fn run(self, rx: Receiver<SealerMsg<S::File>>) {
        while let Ok(msg) = rx.recv() {
            if !self.handle(msg) {
                break;
            }
        }
    }

    /// Do one piece of work; false once told to stop.
    pub fn handle(&self, msg: SealerMsg<S::File>) -> bool {
        match msg {
            SealerMsg::PrepareSegment => self.prepare(),
            SealerMsg::SealSegment(s) => self.seal(s),
            SealerMsg::AbandonSegment {
                path,
                durable_offset,
            } => {
                tracing::warn!(shard = self.shard, path = %path.display(), durable_offset, "segment abandoned after an I/O failure; recovery will check it at the next start");
            }
            SealerMsg::Stop => return false,
        }
        true
    }

    fn prepare(&self) {
        self.free.remove_failed(&self.storage, &self.dir);
        let id = self.next_segment_id.fetch_add(1, Ordering::Relaxed);
        let result = self.make_segment(id);
        if let Err(e) = &result {
            self.free.note_failed(id);
            // The flusher gets the error at once (rather than waiting for a
            // spare that is not coming), tries inline, and reports it.
            tracing::debug!(shard = self.shard, segment = id, error = %e, "could not preallocate the next segment");
        }
        // The flusher may be gone (shutdown): then a spare stays on disk for next time.
        let _ = self.spares.send(result);
    }

    /// Segment `id`: written over a delivered segment if one waits, else a
    /// new, zero-filled file.
    fn make_segment(&self, id: u64) -> std::io::Result<Preallocated<S::File>> {
        if let Some(free) = self.free.take() {
            match recycle(&self.storage, &self.dir, &free, id, self.segment_bytes) {
                Ok(pre) => {
                    self.free.count_recycled();
                    tracing::debug!(shard = self.shard, segment = id, from = %free.display(), "wrote a delivered segment over as the next one");
                    return Ok(pre);
                }
                Err(e) => {
                    // recycle removed it if it got as far as its new name.
                    let _ = self.storage.remove(&free);
                    tracing::warn!(shard = self.shard, segment = id, path = %free.display(), error = %e, "could not write over a delivered segment; creating a new file instead");
                }
            }
        }
        preallocate(&self.storage, &self.dir, id, self.segment_bytes)
    }

    fn seal(&self, sealing: Sealing<S::File>) {
        let id = sealing.segment_id;
        let footer: Footer = sealing.footer;
        match seal(&self.storage, &self.dir, sealing) {
            Ok(path) => {
                self.reports.sealed();
                tracing::debug!(shard = self.shard, segment = id, records = footer.record_count, path = %path.display(), "sealed segment");
            }
            Err(e) => {
                // Its records were fsynced by the flusher before their acks;
                // only the footer is missing, and recovery reseals it. Till
                // then it counts as abandoned (never written again), so the
                // drain deletes it `.open` once delivered: waiting for a
                // seal that is not coming kept it, and on a disk with room
                // for one segment every later one, out for good.
                let next_seq = footer.last_seq.wrapping_add(1);
                self.reports.seal_failed(Abandoned {
                    segment_id: id,
                    first_seq: next_seq.wrapping_sub(footer.record_count),
                    acked_end: footer.end_offset,
                    durable_end: footer.end_offset,
                    durable_seq: next_seq,
                });
                tracing::error!(shard = self.shard, segment = id, error = %e, "sealing failed; the segment stays .open (recovery reseals it at the next start) and is deleted as it is once delivered");
            }
        }
    }
}
