//! Following a shard's segments while they are written: the reader the
//! drain delivers from, and the removal of segments it has finished.
//!
//! [`read_shard`](crate::read_shard) reads a quiet shard once; a
//! [`ShardFollower`] reads a live one record by record, up to the writer's
//! durable [`Tail`], from the segment that holds its next sequence number
//! into the ones after it as they appear. It finds segments by listing the
//! shard folder and reading their headers (a segment's name says its id,
//! its header its first sequence number), so callers never build file
//! names or scan folders themselves.
//!
//! A segment the writer gave up on after an I/O error (it stays `.open`,
//! never sealed) is read only up to what was acknowledged: the caller says
//! which segments those are, and where they end, through [`Cut`].

use std::collections::VecDeque;
use std::io;
use std::path::{Path, PathBuf};

use crate::format::{classify, free_name, open_name, record_bytes, sealed_name, FileKind};
use crate::reader::{End, Opened, SegmentReader, SpareChunks, StoredRecord};
use crate::storage::{Storage, StorageFile};

/// How far the writer has made records durable: every record before
/// `offset` in segment `segment_id` (and every record of earlier segments).
/// And how far readers may go: no segment with an id at or past
/// `unchecked_from` is opened (a sealed segment the start took at its
/// footer's word, whose records are not checked yet; see
/// [`crate::SealedCheck::Footer`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tail {
    pub segment_id: u64,
    pub offset: u64,
    /// `u64::MAX` when every segment is checked.
    pub unchecked_from: u64,
}

impl Tail {
    /// Durable up to `offset` in `segment_id`, every segment checked.
    pub fn checked(segment_id: u64, offset: u64) -> Tail {
        Tail {
            segment_id,
            offset,
            unchecked_from: u64::MAX,
        }
    }
}

/// Where a segment the writer abandoned ends for its readers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cut {
    /// Every record before this offset was acknowledged; none after it was.
    /// What the segment was charged against the budget, and releases.
    pub acked_end: u64,
    /// Where the last successful fdatasync left it: delivery stops here.
    /// Records between this and `acked_end` (Buffered, acknowledged from
    /// the page cache) can never be made durable (the segment is never
    /// fsynced again), so they are not delivered: a power cut could take
    /// them from the disk after the sink had them, and their sequence
    /// numbers would then name other records.
    pub durable_end: u64,
    /// The number after the shard's last durable record when the segment
    /// was abandoned: no reader passes it here. (A fresh segment abandoned
    /// before its first fdatasync has a header in the page cache whose
    /// `first_seq` is past numbers nothing durable backs.)
    pub durable_seq: u64,
}

/// A segment the follower has read to its end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FinishedSegment {
    pub segment_id: u64,
    /// Sequence number after its last record: once everything before it is
    /// confirmed, the segment may be removed.
    pub end_seq: u64,
    /// Bytes of the segment file that were read (what it holds of the WAB).
    pub bytes: u64,
}

/// Reads one shard's records in sequence order, following the durable tail.
pub struct ShardFollower<S: Storage> {
    storage: S,
    dir: PathBuf,
    reader: Option<(u64, SegmentReader<S::File>)>,
    /// The last finished reader's read-ahead chunks, for the next one.
    spares: SpareChunks,
    /// Where the reader's segment ends once it is no longer written (its
    /// end, or an abandoned segment's acknowledged end): looked up once
    /// per segment, not per record.
    closed_limit: Option<u64>,
    last_done: Option<u64>,
    next_seq: u64,
    /// Segments read to their end, oldest first, until the caller removes them.
    finished: VecDeque<FinishedSegment>,
    /// Record bytes of the segments read to their end so far (see
    /// [`Self::passed_bytes`]).
    finished_bytes: u64,
}

impl<S: Storage> ShardFollower<S> {
    /// A follower of the shard in `dir` whose first record is the one at or
    /// after `next_seq` (the delivery checkpoint).
    pub fn new(storage: S, dir: PathBuf, next_seq: u64) -> Self {
        ShardFollower {
            storage,
            dir,
            reader: None,
            spares: SpareChunks::default(),
            closed_limit: None,
            last_done: None,
            next_seq,
            finished: VecDeque::new(),
            finished_bytes: 0,
        }
    }

    /// The next durable record at or after the last one returned, if there
    /// is one yet. `cut` says whether a segment was abandoned by the writer
    /// and where it ends.
    pub fn next(
        &mut self,
        tail: Tail,
        cut: impl Fn(u64) -> Option<Cut>,
    ) -> io::Result<Option<StoredRecord>> {
        loop {
            if self.reader.is_none() && !self.open_next(tail)? {
                return Ok(None);
            }
            let (id, reader) = self.reader.as_mut().unwrap();
            let id = *id;
            if id == tail.segment_id {
                reader.set_limit(tail.offset);
            } else if id < tail.segment_id {
                // No longer written: read it to its end (the limit set while
                // it was the active segment would end it early), or, if the
                // writer abandoned it, to the end of what was acknowledged.
                let end = *self.closed_limit.get_or_insert_with(|| {
                    cut(id).map_or(u64::MAX, |c| c.durable_end.min(c.acked_end))
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
                None if id < tail.segment_id => {
                    if let Some(End::Corrupt { offset, detail }) = reader.end() {
                        tracing::error!(segment = id, offset, detail = %detail, "segment fails its check while draining; the rest of it is skipped (it stays on disk)");
                    }
                    // An abandoned segment ends at its last durable record:
                    // the numbers the writer skipped after it (nacked, or
                    // never made durable) are passed by no reader, so no
                    // cursor is ever ahead of what a restart finds (the
                    // next segment's header records the jump).
                    let end_seq =
                        cut(id).map_or(reader.next_seq(), |c| c.durable_seq.min(reader.next_seq()));
                    // What the segment was charged: for one the writer
                    // abandoned, everything up to its acknowledged end,
                    // readable or not (a failed fdatasync may have taken
                    // pages the budget counted; none at all when it was
                    // abandoned before its first group); otherwise its
                    // header and records.
                    let bytes = match cut(id) {
                        Some(c) => c.acked_end,
                        None if reader.count() == 0 && reader.gaps().is_empty() => 0,
                        None => reader.offset(),
                    };
                    self.finished_bytes += record_bytes(reader.offset());
                    self.finished.push_back(FinishedSegment {
                        segment_id: id,
                        end_seq,
                        bytes,
                    });
                    self.next_seq = self.next_seq.max(end_seq);
                    self.last_done = Some(id);
                    if let Some((_, done)) = self.reader.take() {
                        self.spares = done.into_spares();
                    }
                }
                None => return Ok(None),
            }
        }
    }

    /// Let go of the read-ahead chunks (nothing new to read for a while):
    /// up to `SPARE_CHUNKS` of them, a few MiB, would otherwise stay
    /// resident for as long as the shard is idle.
    pub fn release_chunks(&mut self) {
        self.spares = SpareChunks::default();
        if let Some((_, reader)) = self.reader.as_mut() {
            reader.release_chunks();
        }
    }

    /// Record bytes (frames, GAP frames included) this follower has moved
    /// past: those it returned and those it skipped below its first
    /// sequence number, over every segment it has read.
    pub fn passed_bytes(&self) -> u64 {
        let current = self
            .reader
            .as_ref()
            .map_or(0, |(_, r)| record_bytes(r.offset()));
        self.finished_bytes + current
    }

    /// No record below this will be returned (any more).
    pub fn next_seq(&self) -> u64 {
        self.next_seq
    }

    /// The oldest segment read to its end and not yet removed.
    pub fn oldest_finished(&self) -> Option<&FinishedSegment> {
        self.finished.front()
    }

    /// Every segment read to its end since the last call, oldest first,
    /// handed to whoever removes them (a shard with several readers has
    /// one owner of removal, which removes a segment only once every
    /// reader's confirmed point has passed it).
    pub fn take_finished(&mut self) -> VecDeque<FinishedSegment> {
        std::mem::take(&mut self.finished)
    }

    /// Remove the oldest finished segment's file, if every record in it is
    /// below `confirmed_end`. `abandoned`: the writer gave up on it, so it
    /// may still be `.open` (any other unsealed segment is being sealed and
    /// is left for a later call). `Ok(None)`: nothing to remove (yet).
    pub fn remove_oldest_finished(
        &mut self,
        confirmed_end: u64,
        abandoned: bool,
    ) -> io::Result<Option<(FinishedSegment, Removed)>> {
        let Some(&f) = self.finished.front() else {
            return Ok(None);
        };
        if f.end_seq > confirmed_end {
            return Ok(None);
        }
        let removed = remove_segment(&self.storage, &self.dir, f.segment_id, abandoned)?;
        self.finished.pop_front();
        Ok(Some((f, removed)))
    }

    /// Open the segment that holds `next_seq` (or the next one after the
    /// last finished). False when there is none yet.
    fn open_next(&mut self, tail: Tail) -> io::Result<bool> {
        let last_done = self.last_done;
        // The oldest, at the first open too: a segment wholly below
        // `next_seq` (delivered before a restart, not yet deleted) is read
        // through, its records skipped, so it is finished and deleted like
        // any other. Starting at the segment holding `next_seq` left such a
        // segment on disk for good, its bytes held against the budget.
        let Some((id, reader)) = open_oldest(&self.storage, &self.dir, |id| {
            id <= tail.segment_id && last_done.is_none_or(|d| id > d)
        })?
        else {
            return Ok(false);
        };
        if id >= tail.unchecked_from {
            // Not checked yet: wait here rather than pass it (the newer
            // segments after it must wait their turn too).
            return Ok(false);
        }
        let spares = std::mem::take(&mut self.spares);
        self.reader = Some((id, reader.with_spares(spares)));
        self.closed_limit = None;
        Ok(true)
    }
}

/// How many times [`open_segments`] or [`open_oldest`] lists a folder
/// again because a file it listed was gone when opened.
const RELISTS: usize = 8;

/// A reader of every segment file in `dir` whose id `wanted` takes and
/// whose header can be read, in no particular order.
///
/// The sealer renames `N.open` to `N.sealed` at any moment, so a file
/// listed may be gone when it is opened. Skipping it skipped a whole
/// segment: a drain that opened its next segment just as the sealer
/// renamed it went on at the one after, and its sink never got the
/// records between (the crash loop lost acknowledged records so, about
/// one run in 8). So the folder is listed again until every file listed
/// opens: a renamed segment is found under its new name, a deleted one is
/// no longer listed. A file listed again and again that cannot be found
/// is an error, never a silent skip.
pub(crate) fn open_segments<S: Storage>(
    storage: &S,
    dir: &Path,
    wanted: impl Fn(u64) -> bool,
) -> io::Result<Vec<(u64, SegmentReader<S::File>)>> {
    let mut tries = 0;
    'list: loop {
        let mut readers = Vec::new();
        for (id, path) in segment_files(storage, dir)? {
            if !wanted(id) {
                continue;
            }
            let Some(file) = open_listed(storage, &path, &mut tries)? else {
                continue 'list;
            };
            if let Opened::Reader(r) = SegmentReader::from_file(file)? {
                readers.push((id, r));
            }
        }
        return Ok(readers);
    }
}

/// Open segment file `path`, just listed, for reading. `Ok(None)`: it is
/// gone (renamed or removed since the listing) and the folder must be
/// listed again; after [`RELISTS`] such times in one call (`tries`) that
/// is an error, never a silent skip.
fn open_listed<S: Storage>(
    storage: &S,
    path: &Path,
    tries: &mut usize,
) -> io::Result<Option<S::File>> {
    match storage.open_read(path) {
        Ok(f) => Ok(Some(f)),
        Err(e) if e.kind() == io::ErrorKind::NotFound && *tries < RELISTS => {
            *tries += 1;
            Ok(None)
        }
        Err(e) => Err(io::Error::new(
            e.kind(),
            format!(
                "segment {} is listed but cannot be opened: {e}",
                path.display()
            ),
        )),
    }
}

/// The oldest segment file in `dir` whose id `wanted` takes and whose
/// header can be read, with its reader.
///
/// Ids follow write order (every new segment gets a higher id than the
/// last, and starts past its numbers), so the oldest is the lowest id that
/// opens: files are opened in id order until one does, one open per call
/// in the usual case however many segments wait. Opening every candidate
/// to compare headers made a drain through a backlog of N segments open
/// about N²/2 files. A file gone when opened (renamed by the sealer,
/// removed) is handled as [`open_segments`] does: the folder is listed
/// again.
pub(crate) fn open_oldest<S: Storage>(
    storage: &S,
    dir: &Path,
    wanted: impl Fn(u64) -> bool,
) -> io::Result<Option<(u64, SegmentReader<S::File>)>> {
    let mut tries = 0;
    'list: loop {
        let mut files: Vec<(u64, PathBuf)> = segment_files(storage, dir)?
            .into_iter()
            .filter(|(id, _)| wanted(*id))
            .collect();
        files.sort_unstable_by_key(|(id, _)| *id);
        for (id, path) in files {
            let Some(file) = open_listed(storage, &path, &mut tries)? else {
                continue 'list;
            };
            if let Opened::Reader(r) = SegmentReader::from_file(file)? {
                return Ok(Some((id, r)));
            }
        }
        return Ok(None);
    }
}

/// The first sequence number of the oldest segment in `dir` whose header
/// can be read: the oldest record the shard holds. `None`: no segment.
pub fn oldest_first_seq<S: Storage>(storage: &S, dir: &Path) -> io::Result<Option<u64>> {
    Ok(open_oldest(storage, dir, |_| true)?.map(|(_, r)| r.header().first_seq))
}

/// Appends one line to the file at `path` (made if missing) and makes it
/// durable (fdatasync; the folder too when the file is new): a log that a
/// crash cannot cut short of a line already reported.
pub fn append_line_durable<S: Storage>(storage: &S, path: &Path, line: &str) -> io::Result<()> {
    let (mut file, new) = match storage.open(path) {
        Ok(f) => (f, false),
        Err(e) if e.kind() == io::ErrorKind::NotFound => (storage.create(path)?, true),
        Err(e) => return Err(e),
    };
    let at = file.len()?;
    file.write_all_at(at, &[std::io::IoSlice::new(line.as_bytes())])?;
    file.sync_data()?;
    if new {
        if let Some(dir) = path.parent() {
            storage.sync_dir(dir)?;
        }
    }
    Ok(())
}

/// The segment files (sealed or still open) in `dir`, with their ids, in
/// no particular order.
pub(crate) fn segment_files<S: Storage>(
    storage: &S,
    dir: &Path,
) -> io::Result<Vec<(u64, PathBuf)>> {
    Ok(storage
        .list(dir)?
        .into_iter()
        .filter_map(|path| {
            let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
            match classify(name) {
                Some(FileKind::Open(id) | FileKind::Sealed(id)) => Some((id, path)),
                _ => None,
            }
        })
        .collect())
}

/// Whether segment `id`'s `.open` file, which the writer abandoned, has no
/// segment header that can be read (all zeros, or a header that fails its
/// check: its first write failed, or a failed fdatasync took its pages).
/// A follower never opens such a file, so it never finishes it: the
/// caller passes and removes it ([`remove_segment`]) itself once every
/// number before it is confirmed. On a disk with room for one segment it
/// otherwise kept every later segment out. False when it has a readable
/// header or is no longer `.open` (sealed after all): a follower finishes
/// and removes it.
pub fn is_headerless<S: Storage>(storage: &S, dir: &Path, id: u64) -> io::Result<bool> {
    match SegmentReader::open(storage, &dir.join(open_name(id))) {
        Ok(Opened::Reader(_)) => Ok(false),
        Ok(Opened::Unused(_) | Opened::BadHeader(_)) => Ok(true),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(e),
    }
}

/// Set sealed segment `id` of the shard in `dir` aside to be written over
/// as a later one: renamed to `<id>.free`, which no reader opens and a
/// start removes. Not durable by itself: [`crate::segment::recycle`] makes
/// the name durable before it writes over the bytes. Returns the new path.
pub fn set_aside_segment<S: Storage>(storage: &S, dir: &Path, id: u64) -> io::Result<PathBuf> {
    let free = dir.join(free_name(id));
    storage.rename(&dir.join(sealed_name(id)), &free)?;
    Ok(free)
}

/// Which file [`remove_segment`] removed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Removed {
    Sealed,
    /// The `.open` file of a segment that was never sealed.
    Unsealed,
}

/// Remove segment `id` of the shard in `dir`: its sealed file, or, when
/// `unsealed_too` and there is no sealed one, its `.open` file. An error
/// (NotFound included) leaves both in place.
pub fn remove_segment<S: Storage>(
    storage: &S,
    dir: &Path,
    id: u64,
    unsealed_too: bool,
) -> io::Result<Removed> {
    match storage.remove(&dir.join(sealed_name(id))) {
        Ok(()) => Ok(Removed::Sealed),
        Err(e) if e.kind() == io::ErrorKind::NotFound && unsealed_too => {
            storage.remove(&dir.join(open_name(id)))?;
            Ok(Removed::Unsealed)
        }
        Err(e) => Err(e),
    }
}
