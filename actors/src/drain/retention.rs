//! One shard's retention: the only code that deletes the shard's segments.
//!
//! Every sink has its own cursor over the shard (`cursor`), with its own
//! checkpoint file. A segment may go only once **every** cursor's
//! checkpoint file has passed it; then retention writes the shard's own
//! checkpoint (`checkpoint`, the floor: every sink has confirmed every
//! record below it; recovery reads it as "delivered") and only then
//! deletes the segment (or renames it `.free` for the sealer to write over,
//! see `crate::shard::FreeSegments`) and releases its bytes from the
//! shard's WAB budget.
//! So the slowest sink sets the WAB's size, unless it may skip ahead.
//!
//! Invariant, on disk: the floor is at or below every cursor file (a new
//! cursor starts at or above it; a rewind lowers the floor first), and
//! every segment file deleted lies wholly below the floor. A cursor file
//! is fdatasynced only every `checkpoint_interval_ms` while the floor is
//! fdatasynced before each deletion, so after a power cut a cursor file
//! may be behind the floor: that sink starts at the floor (every sink had
//! confirmed everything below it).
//!
//! Retention is passive: cursors report to it (under its mutex) after each
//! checkpoint write and when idle, and it does its work then. It has no
//! thread of its own and no clock, so the simulation drives it through the
//! cursors' steps.

use sink_sdk::delivery::StartAt;
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::io;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use spillway_wab::checkpoint::{cursor_file, cursor_sinks, remove_cursor};
use spillway_wab::follow::{
    is_headerless, oldest_first_seq, remove_segment, set_aside_segment, FinishedSegment,
};
use spillway_wab::format::{classify, open_name, record_bytes, sealed_name, FileKind};
use spillway_wab::storage::is_no_space;
use spillway_wab::{
    load_checkpoint, load_checkpoint_file, write_checkpoint, write_checkpoint_file,
};
use spillway_wab::{Storage, StorageFile};

use crate::shard::{ShardQueue, Watermark};

/// One shard's figures of retention (`ctl stats`, metrics).
#[derive(Debug, Default)]
pub struct RetentionStats {
    pub segments_deleted: AtomicU64,
    /// The floor on disk: every sink has confirmed every record below it.
    pub floor: AtomicU64,
}

/// One sink's turn in a shard's retention, from [`Retention::join`] to
/// [`Retention::leave`]. A sink removed and added again under the same
/// name while its old cursor still finishes gets a new one, so the old
/// cursor's last words (a confirmation, its leave) change nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Membership(u64);

/// One shard's owner of segment deletion (see the module documentation).
pub struct Retention<S: Storage> {
    storage: S,
    shard: u32,
    dir: PathBuf,
    queue: Arc<ShardQueue>,
    /// Each sink's confirmed point as its cursor file says, and the
    /// membership it joined with ([`Membership`]).
    cursors: BTreeMap<String, (Membership, u64)>,
    /// The next membership handed out.
    next_membership: u64,
    /// Segments some cursor has read to their end, by id, not deleted yet,
    /// with the sinks whose readers have. A segment goes only once every
    /// sink's reader has passed it, not only its confirmed point: a reader
    /// that starts past a segment still reads through it (counting its
    /// bytes; the simulation found a backlog gauge that drifted for good
    /// when another sink's confirmation deleted it first).
    finished: BTreeMap<u64, (FinishedSegment, BTreeSet<String>)>,
    /// Every segment up to this id is deleted (a cursor that finishes one
    /// later, its file already gone, is not listened to).
    deleted_through: Option<u64>,
    /// Abandoned segments past `deleted_through` deleted as headerless
    /// ([`Self::delete_headerless_abandoned`]): a reader that had opened
    /// one while its header was still in the page cache finishes it later,
    /// and is not listened to either (deleting it again released its bytes
    /// from the budget twice: the simulation, seed 0xe7738e354adcedb2).
    headerless_deleted: BTreeSet<u64>,
    /// What the shard's checkpoint file says.
    floor: u64,
    /// The highest floor a write was tried for since the start. A write
    /// that failed may still have reached the disk (the page written, its
    /// fdatasync failed), so the file may hold more than `floor`: lowering
    /// the floor compares with this (the simulation, seed
    /// 0xadda249c7b376c02: a sink added at the oldest record kept the
    /// higher floor a failed write had left on disk, and a restart would
    /// have started it there, past records it never got).
    floor_tried: u64,
    /// Record bytes of the segments deleted since the start: a cursor
    /// that reads from the oldest segment again (a rewind) counts its
    /// confirmed bytes from there.
    deleted_record_bytes: u64,
    /// The sinks the shard was opened with: each begins at the floor when
    /// it first joins without a cursor file, whatever its `start`.
    adopting: BTreeSet<String>,
    stats: Arc<RetentionStats>,
}

impl<S: Storage> Retention<S> {
    /// Opens the shard's retention for the sinks configured now (their
    /// cursors [`Retention::join`] when they start). A cursor file of a
    /// sink no longer configured is removed (its hold on segments goes
    /// with it), with a log line.
    pub fn open(
        storage: S,
        shard: u32,
        dir: PathBuf,
        queue: Arc<ShardQueue>,
        sinks: &[String],
        stats: Arc<RetentionStats>,
    ) -> io::Result<Self> {
        let floor = load_checkpoint(&storage, &dir)?.confirmed;
        let existing = cursor_sinks(&storage, &dir)?;
        for stale in existing.iter().filter(|s| !sinks.contains(s)) {
            remove_cursor(&storage, &dir, stale)?;
            tracing::info!(shard, sink = %stale, "sink no longer configured: its cursor is removed and it holds no records any more");
        }
        stats.floor.store(floor, Ordering::Relaxed);
        // A sink configured at the start that has no cursor file starts at
        // the floor, whatever its `start`: a new data folder, one written
        // by a single-sink release (its checkpoint is what its one sink
        // confirmed), a sink added while the daemon was stopped, or a
        // cursor file a power cut took before its creation was durable
        // (the simulation found that starting such a sink at the end
        // skipped records). `start` is for sinks a reload adds.
        let adopting = sinks.iter().cloned().collect();
        Ok(Retention {
            storage,
            shard,
            dir,
            queue,
            cursors: BTreeMap::new(),
            next_membership: 1,
            finished: BTreeMap::new(),
            deleted_through: None,
            headerless_deleted: BTreeSet::new(),
            floor,
            floor_tried: floor,
            deleted_record_bytes: 0,
            adopting,
            stats,
        })
    }

    /// A sink (re)joins: where its cursor starts. Its cursor file if it
    /// has one (never below the floor: an unreadable one is moved aside
    /// and it starts at the floor); a sink the shard was opened with, or
    /// one whose file is an empty marker, starts at the floor; only a sink
    /// a reload adds goes by `start`. The file is written now, so a crash
    /// before its first delivery does not move its start.
    pub fn join(&mut self, sink: &str, start: StartAt) -> io::Result<(Membership, u64)> {
        let file = cursor_file(sink);
        // An empty cursor file is a marker: the sink is a member but its
        // position could not be written (a full disk); the floor holds it.
        let marker = self.is_marker(&file);
        let loaded = if marker {
            Default::default()
        } else {
            load_checkpoint_file(&self.storage, &self.dir, &file)?
        };
        // The promise recovery keeps (issue 39): the shard numbers its next
        // record past every cursor, so no record takes a number a sink has
        // passed (and would never be given). Not recoverable here: stop.
        let numbered = self.queue.durable().next_seq;
        assert!(
            !loaded.found || loaded.confirmed <= numbered,
            "shard {}: sink {sink}'s cursor is at {} but the shard's next record is numbered {numbered}: \
             records would take numbers that sink has passed",
            self.shard,
            loaded.confirmed,
        );
        let adopted = self.adopting.remove(sink);
        let known = self.cursors.get(sink).map(|(_, at)| *at);
        // A sink a reload adds now. Its cursor file, if there is one, is
        // what an earlier join of this run left when it failed (an I/O
        // error after the file was made, before it joined): not a place
        // it ever delivered from, so it goes by `start` (the simulation,
        // seed 0x1c7b9597ed0c2fb9: the file a failed join left put the
        // retry at the floor, past records `oldest` must give it).
        let fresh = !adopted && known.is_none();
        let at = if loaded.found && !fresh {
            loaded.confirmed.max(self.floor)
        } else if let Some(at) = known {
            // Joined before in this run, its file not written yet (a full
            // disk): where it stood.
            at.max(self.floor)
        } else if !fresh && (adopted || loaded.corrupt || marker) {
            // (An unreadable cursor was moved aside: the sink had a
            // position, so it starts again at the floor, never past
            // records it may not have.)
            self.floor
        } else {
            match start {
                StartAt::End => self.queue.durable().next_seq.max(self.floor),
                // Every record the shard still holds, those every other
                // sink confirmed included: the floor comes down to the
                // oldest segment's first record first (as a rewind does),
                // so none of them is deleted before this sink has them.
                StartAt::Oldest => {
                    let oldest = oldest_first_seq(&self.storage, &self.dir)?
                        .map_or(self.floor, |o| o.min(self.floor));
                    self.lower_floor(oldest)?;
                    oldest
                }
            }
        };
        if !loaded.found || at != loaded.confirmed {
            match write_checkpoint_file(&self.storage, &self.dir, &file, at) {
                Ok(()) => {}
                // A full disk: the file is made at the first confirmation
                // (then it overwrites in place and needs no space); until
                // then the marker below makes a restart start it at the
                // floor.
                Err(e) if is_no_space(&e) => {
                    // An empty file needs no data block: it says "a member,
                    // at the floor" until the real one can be made.
                    if !marker {
                        let _ = self.storage.create(&self.dir.join(&file));
                        let _ = self.storage.sync_dir(&self.dir);
                    }
                    tracing::warn!(shard = self.shard, sink, error = %e, "no space to create the sink's cursor file yet; the shard's checkpoint holds its place until it can be")
                }
                Err(e) => return Err(e),
            }
        }
        if fresh {
            tracing::info!(
                shard = self.shard,
                sink,
                start_seq = at,
                ?start,
                "sink added: its cursor starts here"
            );
        }
        let membership = Membership(self.next_membership);
        self.next_membership += 1;
        self.cursors.insert(sink.to_string(), (membership, at));
        Ok((membership, at))
    }

    /// A sink was removed from the config: its cursor file goes and it
    /// holds nothing any more.
    pub fn leave(&mut self, sink: &str, membership: Membership) -> io::Result<()> {
        self.adopting.remove(sink);
        if !self.is_member(sink, membership) {
            return Ok(());
        }
        remove_cursor(&self.storage, &self.dir, sink)?;
        self.cursors.remove(sink);
        self.collect(self.queue.durable(), false);
        Ok(())
    }

    /// Whether `file` is an empty cursor file (see [`Retention::join`]).
    fn is_marker(&self, file: &str) -> bool {
        self.storage
            .open_read(&self.dir.join(file))
            .and_then(|f| f.len())
            .is_ok_and(|n| n == 0)
    }

    fn is_member(&self, sink: &str, membership: Membership) -> bool {
        self.cursors
            .get(sink)
            .is_some_and(|(m, _)| *m == membership)
    }

    /// Move sink `sink`'s place back to `to` (a rewind, which the cursor
    /// applies under this retention's lock, so nothing it needs is deleted
    /// meanwhile): the floor on disk is lowered first if `to` is below it,
    /// so the floor stays at or below every cursor file.
    pub fn rewind(&mut self, sink: &str, membership: Membership, to: u64) -> io::Result<()> {
        if !self.is_member(sink, membership) {
            return Err(io::Error::other(format!(
                "sink {sink} is not delivering from this shard"
            )));
        }
        self.lower_floor(to)?;
        self.cursors.insert(sink.to_string(), (membership, to));
        Ok(())
    }

    /// Record bytes of the segments deleted since the start.
    pub fn deleted_record_bytes(&self) -> u64 {
        self.deleted_record_bytes
    }

    /// Bring the floor on disk down to `to` if it is (or may be) above:
    /// before a cursor is placed below it (a rewind, a sink added at the
    /// oldest record), so the floor stays at or below every cursor file.
    fn lower_floor(&mut self, to: u64) -> io::Result<()> {
        if to < self.floor_tried {
            write_checkpoint(&self.storage, &self.dir, to)?;
            self.floor = to;
            self.floor_tried = to;
            self.stats.floor.store(to, Ordering::Relaxed);
        }
        Ok(())
    }

    /// The shard's floor on disk.
    pub fn floor(&self) -> u64 {
        self.floor
    }

    /// The lowest confirmed point of any sink (on their cursor files).
    pub fn lowest_cursor(&self) -> Option<u64> {
        self.cursors.values().map(|(_, at)| *at).min()
    }

    /// Sink `sink` has confirmed everything below `persisted`: on its
    /// cursor file, or, when a full disk kept that file from being made,
    /// only in memory (the floor, written before any deletion, then holds
    /// its place on disk: at a restart it starts at the floor).
    /// `finished` are the segments its reader has read to their end since
    /// it last said; `idle`: it has nothing to deliver (the floor is
    /// brought up to date then). Deletes what every sink has passed.
    pub fn confirmed(
        &mut self,
        sink: &str,
        membership: Membership,
        persisted: u64,
        finished: VecDeque<FinishedSegment>,
        wm: Watermark,
        idle: bool,
    ) {
        match self.cursors.get_mut(sink) {
            Some((m, at)) if *m == membership => *at = persisted,
            _ => return, // left (or replaced): it holds nothing
        }
        for f in finished {
            if self.deleted_through.is_none_or(|d| f.segment_id > d)
                && !self.headerless_deleted.contains(&f.segment_id)
            {
                let (_, readers) = self
                    .finished
                    .entry(f.segment_id)
                    .or_insert_with(|| (f, BTreeSet::new()));
                readers.insert(sink.to_string());
            }
        }
        self.collect(wm, idle);
    }

    /// Delete every finished segment below the lowest cursor (the floor
    /// written first), abandoned segments whose header never reached the
    /// disk once every sink passed them, and ask the flusher to seal a
    /// delivered active segment while the budget refuses pushes.
    fn collect(&mut self, wm: Watermark, idle: bool) {
        // A sink the shard was opened with that has not joined yet starts
        // at the floor: raising the floor (or deleting) before it joins
        // would skip it past records it never got. At the start the sinks
        // join one after another and each drain runs as soon as it has
        // joined, so the first could otherwise confirm, raise the floor
        // and delete segments a later one still needed.
        if !self.adopting.is_empty() {
            return;
        }
        let Some(lowest) = self.lowest_cursor() else {
            return; // no sink: keep everything
        };
        // When idle, the floor follows the lowest cursor even with nothing
        // to delete (`inspect` and `ctl stats` read it); while busy it is
        // written only before a deletion, so it costs no fdatasync per batch.
        if idle {
            self.raise_floor(lowest);
        }
        self.delete_finished(lowest);
        self.delete_headerless_abandoned(lowest, wm);
        if lowest >= wm.next_seq && wm.offset > 0 && self.queue.budget.refused() {
            self.queue.want_rotation(lowest);
        }
    }

    /// Raise the floor on disk to `to` (at most the lowest cursor) if it
    /// is below. False when the write failed (nothing may be deleted).
    fn raise_floor(&mut self, to: u64) -> bool {
        if self.floor >= to {
            return true;
        }
        // The floor is where a sink with no cursor file restarts: past a
        // cursor, it would skip that sink over records it never got.
        assert!(
            self.lowest_cursor().is_none_or(|lowest| to <= lowest),
            "shard {}: the floor would pass a sink's cursor ({to} > {:?})",
            self.shard,
            self.lowest_cursor()
        );
        self.floor_tried = self.floor_tried.max(to);
        if let Err(e) = write_checkpoint(&self.storage, &self.dir, to) {
            tracing::error!(shard = self.shard, error = %e, "writing the shard's checkpoint failed; confirmed segments are kept until it can be written");
            return false;
        }
        self.floor = to;
        self.stats.floor.store(to, Ordering::Relaxed);
        true
    }

    fn delete_finished(&mut self, lowest: u64) {
        while let Some((&id, (f, readers))) = self.finished.iter().next() {
            let f = *f;
            let all_read = self.cursors.keys().all(|sink| readers.contains(sink));
            if f.end_seq > lowest || !all_read || !self.raise_floor(lowest) {
                return;
            }
            // Never sealed: the flusher abandoned it after an I/O error; it
            // is finished, so the flusher no longer writes it and it can go
            // as it is. (Any other unsealed segment is being sealed: wait.)
            let abandoned = self.queue.abandoned(id, false).is_some();
            // A sealed one is set aside for the sealer to write over, while
            // one waits at most (`FreeSegments`); the rest are unlinked.
            let gone = if !abandoned && self.queue.free.has_room() {
                set_aside_segment(&self.storage, &self.dir, id).map(|p| self.queue.free.put(p))
            } else {
                remove_segment(&self.storage, &self.dir, id, abandoned).map(drop)
            };
            match gone {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::NotFound && !self.on_disk(id) => {
                    // Neither sealed nor open: removed from outside after
                    // every sink had it. Waiting for it held every later
                    // segment (and the budget they count) for good.
                    tracing::warn!(
                        shard = self.shard,
                        segment = id,
                        "a delivered segment was removed from outside spillway before retention deleted it; counting it as deleted"
                    );
                }
                Err(e) => {
                    tracing::debug!(shard = self.shard, segment = id, error = %e, "confirmed segment not deleted yet; will retry");
                    return;
                }
            }
            if abandoned {
                self.queue.abandoned(id, true);
            }
            self.finished.remove(&id);
            self.deleted_through = Some(id);
            self.headerless_deleted.retain(|&h| h > id);
            self.queue.budget.release(f.bytes);
            self.deleted_record_bytes += record_bytes(f.bytes);
            self.stats.segments_deleted.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Whether a segment older than `id` has a file (sealed or open). An
    /// error listing the folder counts as "yes".
    fn older_segment_on_disk(&self, id: u64) -> bool {
        let Ok(paths) = self.storage.list(&self.dir) else {
            return true;
        };
        paths.iter().any(|p| {
            let name = p.file_name().and_then(|n| n.to_str()).unwrap_or("");
            matches!(classify(name), Some(FileKind::Open(i) | FileKind::Sealed(i)) if i < id)
        })
    }

    /// Whether segment `id` still has a file, sealed or open (an open one is
    /// being sealed). An error other than NotFound counts as "yes": only a
    /// file known to be gone is counted as deleted.
    fn on_disk(&self, id: u64) -> bool {
        [sealed_name(id), open_name(id)].iter().any(|name| {
            !matches!(
                self.storage.open_read(&self.dir.join(name)),
                Err(e) if e.kind() == io::ErrorKind::NotFound
            )
        })
    }

    /// An abandoned segment whose header never reached the disk is never
    /// opened by a reader (so never finished), and holds nothing durable:
    /// once every cursor has confirmed the records durable before it, it
    /// is deleted here. (Or once no older segment is left: a cursor never
    /// passes numbers no durable record backs, and after a start that
    /// floored the numbering (an unnumbered segment presumed past the
    /// clock) none may reach `durable_seq` before a record is written past
    /// it, which on a disk with room for one segment needed this one's
    /// room: pushes were refused for good, small-disk seed
    /// 0xdc14ab36bcc89bbd.)
    fn delete_headerless_abandoned(&mut self, lowest: u64, wm: Watermark) {
        for a in self.queue.abandoned_segments() {
            if a.segment_id >= wm.segment_id {
                continue;
            }
            if lowest < a.durable_seq && self.older_segment_on_disk(a.segment_id) {
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
            if !self.raise_floor(lowest) {
                return;
            }
            if let Err(e) = remove_segment(&self.storage, &self.dir, a.segment_id, true) {
                tracing::debug!(shard = self.shard, segment = a.segment_id, error = %e, "abandoned segment not deleted yet; will retry");
                continue;
            }
            self.queue.abandoned(a.segment_id, true);
            self.finished.remove(&a.segment_id);
            self.headerless_deleted.insert(a.segment_id);
            self.queue.budget.release(a.acked_end);
            self.stats.segments_deleted.fetch_add(1, Ordering::Relaxed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::shard::budget::WabBudget;
    use spillway_wab::FsStorage;

    /// The start: the first sink joins and runs (confirms, goes idle)
    /// before the second joins. Raising the floor then put the second past
    /// records its cursor file said it never got (it starts at the floor
    /// when the floor is above its file).
    #[test]
    fn a_sink_that_has_not_joined_yet_keeps_the_floor_where_it_was() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("shard-000");
        std::fs::create_dir(&dir).unwrap();
        for sink in ["a", "b"] {
            write_checkpoint_file(&FsStorage, &dir, &cursor_file(sink), 40).unwrap();
        }
        let queue = ShardQueue::new(0, &WabBudget::new(1 << 30));
        // (Recovery numbers on past every cursor.)
        queue.publish_durable(Watermark {
            next_seq: 100,
            ..Watermark::default()
        });
        let sinks = ["a".to_string(), "b".to_string()];
        let stats = Arc::new(RetentionStats::default());
        let mut r = Retention::open(FsStorage, 0, dir.clone(), queue, &sinks, stats).unwrap();
        let (a, at) = r.join("a", StartAt::End).unwrap();
        assert_eq!(at, 40);
        let finished = VecDeque::from([FinishedSegment {
            segment_id: 0,
            end_seq: 100,
            bytes: 4096,
        }]);
        let wm = Watermark {
            segment_id: 1,
            offset: 0,
            next_seq: 100,
            bytes: 0,
            ..Watermark::default()
        };
        r.confirmed("a", a, 100, finished, wm, true);
        assert_eq!(r.floor(), 0, "the floor moved before every sink joined");
        let (b, at) = r.join("b", StartAt::End).unwrap();
        assert_eq!(at, 40, "b starts where its cursor file says");
        r.confirmed("b", b, 100, VecDeque::new(), wm, true);
        assert_eq!(r.floor(), 100, "every sink has confirmed up to 100");
    }

    /// A write of the floor whose fdatasync failed may still be on disk
    /// (the page was written): a sink added at the oldest record must
    /// bring the floor on disk down to its start even though the floor in
    /// memory already is there, or a restart starts it at the higher one
    /// (the simulation, seed 0xadda249c7b376c02).
    #[test]
    fn a_sink_added_at_the_oldest_lowers_a_floor_a_failed_write_left_on_disk() {
        use spillway_wab::fault::{Fault, FaultKind, FaultyStorage, Op};
        use spillway_wab::read_checkpoint;
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("shard-000");
        std::fs::create_dir(&dir).unwrap();
        write_checkpoint(&FsStorage, &dir, 0).unwrap();
        let queue = ShardQueue::new(0, &WabBudget::new(1 << 30));
        let wm = Watermark {
            next_seq: 250,
            ..Watermark::default()
        };
        queue.publish_durable(wm);
        let storage = FaultyStorage::default();
        let stats = Arc::new(RetentionStats::default());
        let sinks = ["a".to_string()];
        let mut r = Retention::open(storage.clone(), 0, dir.clone(), queue, &sinks, stats).unwrap();
        let (a, _) = r.join("a", StartAt::End).unwrap();
        storage.inject(Fault {
            op: Op::SyncData,
            nth: storage.count(Op::SyncData) + 1,
            kind: FaultKind::Eio,
        });
        r.confirmed("a", a, 250, VecDeque::new(), wm, true);
        assert_eq!(r.floor(), 0, "the write failed: the floor in memory stays");
        assert_eq!(
            read_checkpoint(&FsStorage, &dir).unwrap(),
            250,
            "the test needs the failed write's bytes on disk"
        );
        let (_, at) = r.join("b", StartAt::Oldest).unwrap();
        assert_eq!(at, 0);
        assert_eq!(
            read_checkpoint(&FsStorage, &dir).unwrap(),
            0,
            "the floor on disk is above the new sink's cursor"
        );
    }

    /// One sink, three delivered sealed segments in `dir` (ids 0..3, 100
    /// records each, 4096 bytes charged each), its cursor at 0.
    fn three_delivered(
        dir: &std::path::Path,
    ) -> (
        Retention<FsStorage>,
        Membership,
        Arc<ShardQueue>,
        Arc<RetentionStats>,
    ) {
        std::fs::create_dir(dir).unwrap();
        for id in 0..3 {
            std::fs::write(dir.join(sealed_name(id)), b"records").unwrap();
        }
        let queue = ShardQueue::new(0, &WabBudget::new(1 << 30));
        queue.budget.charge(3 * 4096);
        let stats = Arc::new(RetentionStats::default());
        let sinks = ["a".to_string()];
        let mut r = Retention::open(
            FsStorage,
            0,
            dir.to_path_buf(),
            queue.clone(),
            &sinks,
            stats.clone(),
        )
        .unwrap();
        let (a, _) = r.join("a", StartAt::Oldest).unwrap();
        (r, a, queue, stats)
    }

    fn finished_all() -> (VecDeque<FinishedSegment>, Watermark) {
        let finished = (0..3)
            .map(|id| FinishedSegment {
                segment_id: id,
                end_seq: (id + 1) * 100,
                bytes: 4096,
            })
            .collect();
        let wm = Watermark {
            segment_id: 3,
            offset: 0,
            next_seq: 300,
            bytes: 0,
            ..Watermark::default()
        };
        (finished, wm)
    }

    /// The oldest delivered segment is set aside (`.free`, for the sealer
    /// to write over) while none waits; the others are unlinked. Every one
    /// counts as deleted and releases its bytes.
    #[test]
    fn one_delivered_segment_is_set_aside_and_the_rest_unlinked() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("shard-000");
        let (mut r, a, queue, stats) = three_delivered(&dir);
        let (finished, wm) = finished_all();
        r.confirmed("a", a, 300, finished, wm, false);
        let mut names: Vec<String> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| !n.starts_with("checkpoint") && !n.starts_with("cursor"))
            .collect();
        names.sort();
        assert_eq!(names, vec![spillway_wab::format::free_name(0)]);
        assert_eq!(
            queue.free.take(),
            Some(dir.join(spillway_wab::format::free_name(0)))
        );
        assert_eq!(stats.segments_deleted.load(Ordering::Relaxed), 3);
        assert_eq!(queue.budget.held(), 0);
    }

    /// A delivered segment removed from outside before retention got to it
    /// is counted as deleted: the segments after it still go, and the
    /// budget is released (waiting for it held them for good).
    #[test]
    fn a_delivered_segment_removed_from_outside_does_not_hold_the_later_ones() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("shard-000");
        let (mut r, a, queue, stats) = three_delivered(&dir);
        std::fs::remove_file(dir.join(sealed_name(0))).unwrap();
        let (finished, wm) = finished_all();
        r.confirmed("a", a, 300, finished, wm, false);
        assert!(!dir.join(sealed_name(1)).exists() && !dir.join(sealed_name(2)).exists());
        assert_eq!(stats.segments_deleted.load(Ordering::Relaxed), 3);
        assert_eq!(queue.budget.held(), 0);
    }

    /// One still being sealed (its `.open` file is there) is waited for.
    #[test]
    fn a_delivered_segment_still_being_sealed_is_waited_for() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("shard-000");
        let (mut r, a, _queue, stats) = three_delivered(&dir);
        std::fs::rename(dir.join(sealed_name(0)), dir.join(open_name(0))).unwrap();
        let (finished, wm) = finished_all();
        r.confirmed("a", a, 300, finished, wm, false);
        assert!(dir.join(open_name(0)).exists() && dir.join(sealed_name(1)).exists());
        assert_eq!(stats.segments_deleted.load(Ordering::Relaxed), 0);
    }

    /// An abandoned segment whose header a failed fsync took (Buffered
    /// records only, nothing durable) is deleted as headerless; readers
    /// that had opened it while its header was still in the page cache
    /// finish it afterwards. Its bytes are released once (the simulation,
    /// seed 0xe7738e354adcedb2: released twice, the budget drifted below
    /// what the disk held), and the next segment is not held up by it.
    #[test]
    fn a_headerless_abandoned_segment_readers_finish_later_is_released_once() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("shard-000");
        std::fs::create_dir(&dir).unwrap();
        // Its header never reached the disk: the file reads as zeros.
        std::fs::write(dir.join(open_name(5)), [0u8; 4096]).unwrap();
        std::fs::write(dir.join(sealed_name(6)), b"records").unwrap();
        let queue = ShardQueue::new(0, &WabBudget::new(1 << 30));
        // Segment 5's acknowledged bytes, 6 and the one written now.
        queue.budget.charge(174 + 4096 + 4096);
        queue.mark_abandoned(crate::shard::Abandoned {
            segment_id: 5,
            first_seq: 225,
            acked_end: 174,
            durable_end: 0,
            durable_seq: 225,
        });
        let stats = Arc::new(RetentionStats::default());
        let sinks = ["a".to_string(), "b".to_string()];
        let mut r = Retention::open(
            FsStorage,
            0,
            dir.clone(),
            queue.clone(),
            &sinks,
            stats.clone(),
        )
        .unwrap();
        let (a, _) = r.join("a", StartAt::Oldest).unwrap();
        let (b, _) = r.join("b", StartAt::Oldest).unwrap();
        let wm = Watermark {
            segment_id: 7,
            offset: 0,
            next_seq: 325,
            bytes: 0,
            ..Watermark::default()
        };
        r.confirmed("a", a, 225, VecDeque::new(), wm, true);
        r.confirmed("b", b, 225, VecDeque::new(), wm, true);
        assert!(!dir.join(open_name(5)).exists(), "deleted as headerless");
        assert_eq!(queue.budget.held(), 2 * 4096);
        // Both readers had it open; they finish it, then segment 6.
        let finished = VecDeque::from([
            FinishedSegment {
                segment_id: 5,
                end_seq: 225,
                bytes: 174,
            },
            FinishedSegment {
                segment_id: 6,
                end_seq: 325,
                bytes: 4096,
            },
        ]);
        r.confirmed("a", a, 325, finished.clone(), wm, true);
        r.confirmed("b", b, 325, finished, wm, true);
        assert!(!dir.join(sealed_name(6)).exists(), "segment 6 was held up");
        assert_eq!(
            queue.budget.held(),
            4096,
            "segment 5's bytes were released twice"
        );
        assert_eq!(stats.segments_deleted.load(Ordering::Relaxed), 2);
    }

    /// After a start that floored the numbering (an unnumbered segment's
    /// numbers presumed past the clock), the cursor stays below the
    /// floor until a record is written past it: no durable record backs
    /// the numbers between. A headerless abandoned segment (its only
    /// group's fdatasync failed) then goes once no older segment is left,
    /// not only once the cursor reaches its `durable_seq`: on a disk with
    /// room for one segment it held that room for good (small-disk seed
    /// 0xdc14ab36bcc89bbd). With an older segment still on disk, it waits.
    #[test]
    fn a_headerless_abandoned_segment_with_no_older_one_goes_below_the_floor() {
        for older in [false, true] {
            let tmp = tempfile::tempdir().unwrap();
            let dir = tmp.path().join("shard-000");
            std::fs::create_dir(&dir).unwrap();
            if older {
                std::fs::write(dir.join(sealed_name(1)), b"records").unwrap();
            }
            std::fs::write(dir.join(open_name(2)), [0u8; 4096]).unwrap();
            let queue = ShardQueue::new(0, &WabBudget::new(1 << 30));
            queue.budget.charge(100);
            let floor = 1_796_551_339_752_763;
            queue.mark_abandoned(crate::shard::Abandoned {
                segment_id: 2,
                first_seq: floor,
                acked_end: 100,
                durable_end: 0,
                durable_seq: floor,
            });
            write_checkpoint_file(&FsStorage, &dir, &cursor_file("a"), 47).unwrap();
            let wm = Watermark {
                segment_id: 3,
                offset: 0,
                next_seq: floor,
                bytes: 0,
                ..Watermark::default()
            };
            queue.publish_durable(wm);
            let stats = Arc::new(RetentionStats::default());
            let sinks = ["a".to_string()];
            let mut r =
                Retention::open(FsStorage, 0, dir.clone(), queue.clone(), &sinks, stats).unwrap();
            let (a, at) = r.join("a", StartAt::End).unwrap();
            assert_eq!(at, 47);
            r.confirmed("a", a, 47, VecDeque::new(), wm, true);
            assert_eq!(
                dir.join(open_name(2)).exists(),
                older,
                "older segment on disk: {older}"
            );
            assert_eq!(queue.budget.held(), if older { 100 } else { 0 });
        }
    }
}
