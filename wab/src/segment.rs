//! Creating, appending to and sealing segment files.
//!
//! Life of a segment: the sealer [`preallocate`]s it (zero-filled to
//! `segment_bytes_max`, fsynced, renamed from `.open.tmp` to `.open`, directory
//! fsynced) before the flusher needs it, or [`recycle`]s a delivered one
//! (its first page zeroed, its old records left in place); the flusher
//! turns it into an [`ActiveSegment`] and appends record groups to it,
//! writing the header together with the first group and 16 zero bytes
//! after every group; when it is full the sealer [`seal`]s it (footer,
//! truncate, fsync, rename to `.sealed`, directory fsync).
//!
//! Writing into blocks already written means `fdatasync` flushes data only,
//! with no journal commit for a growing file: measured here ~115 µs against
//! ~185 µs for an append (see docs/wab-format.md).

use std::io::{self, IoSlice};
use std::path::{Path, PathBuf};

use crate::format::{
    classify, encode_record_header, now_unix_us, open_name, record_crc, record_crc_from,
    sealed_name, FileKind, Footer, RecordsCrc, Salt, SegmentHeader, FOOTER_LEN, RECORD_BYTES_MAX,
    RECORD_HEADER_LEN, SEGMENT_HEADER_LEN, SEQ_MAX,
};
use crate::storage::{Storage, StorageFile};

/// Zeros are written in pieces of this size when preallocating, and each
/// piece is written out to the disk before the next (`write_out`): the
/// final fsync then finds almost nothing left, rather than 64 MiB of dirty
/// pages that the flusher's next fdatasync would queue behind. Measured
/// with `spillway bench --scenario big_record_fairness` (16 connections of
/// 64 KiB Sync records, a segment filled every ~130 ms): a small Sync
/// producer's p99 went from 20-22 ms to 12-13 ms.
const ZERO_CHUNK: usize = 1024 * 1024;

/// Bytes zeroed at the start of a recycled file: its old header and first
/// record header go, so until the flusher writes the new header the file
/// reads as a spare (an all-zero header with zeros after it).
const RECYCLED_ZEROED: u64 = 4096;

/// Written after every group: the end of an unsealed segment's records,
/// whatever an earlier use of the file left past it.
const END_MARKER: [u8; RECORD_HEADER_LEN] = [0; RECORD_HEADER_LEN];

/// A segment file ready to become the active segment: zero-filled, or a
/// recycled one whose first page is zeros (see [`recycle`]).
pub struct Preallocated<F> {
    pub file: F,
    pub path: PathBuf,
    pub segment_id: u64,
    pub capacity: u64,
}

/// Create `<dir>/<id>.open` filled with `capacity` zero bytes, durably.
/// (The zeros make its blocks written ones; see the module docs.)
///
/// If any step fails (ENOSPC while writing zeros, an fsync error, ...) the
/// partial file is removed before the error is returned: a failed
/// preallocation must never keep filling the disk it ran out of. (After a
/// crash the `.open.tmp` is left; recovery removes it.)
pub fn preallocate<S: Storage>(
    storage: &S,
    dir: &Path,
    segment_id: u64,
    capacity: u64,
) -> io::Result<Preallocated<S::File>> {
    let tmp = clear_partial(storage, dir, segment_id);
    let mut file = storage.create(&tmp)?;
    if let Err(e) = write_zeros(&mut file, 0, capacity) {
        discard(storage, &tmp, segment_id, &e);
        return Err(e);
    }
    finish(storage, dir, file, &tmp, segment_id, capacity)
}

/// Make `<dir>/<id>.open` out of the delivered segment `free` (a
/// `<old id>.free` file, see [`crate::format::free_name`]) rather than a
/// new file, durably.
///
/// Writing over blocks the file already has allocates nothing, and the
/// segment it replaces is never unlinked: on a file system mounted with
/// `discard`, freeing 64 MiB made the next fdatasync wait for the TRIM
/// (measured with `spillway bench --scenario big_record_fairness`: a small
/// Sync producer's p99 beside 16 connections of 64 KiB records went from
/// 8.5 ms to 2.9 ms; see docs/benchmarks.md).
///
/// The old records are not zeroed (that doubled the bytes a shard writes):
/// only the first page, so the file reads as a spare until its first
/// group, and anything past the old end up to `capacity`. The new use
/// salts its CRCs with its own id ([`Salt`]), so no old frame passes for a
/// new one, and ends every group with 16 zero bytes. If the two ids could
/// share a salt ([`Salt::may_reuse`]), the file is removed and a new one
/// preallocated instead.
///
/// The renames are made durable before the first zero is written: a power
/// cut could otherwise leave the old `.sealed` name on zeroed bytes, which
/// the next start would take for a damaged segment. After a crash the
/// file is a `.free` or an `.open.tmp`, and recovery removes either. On
/// any error the file is removed, as for [`preallocate`].
pub fn recycle<S: Storage>(
    storage: &S,
    dir: &Path,
    free: &Path,
    segment_id: u64,
    capacity: u64,
) -> io::Result<Preallocated<S::File>> {
    let old_id = free
        .file_name()
        .and_then(|n| n.to_str())
        .and_then(classify)
        .and_then(|kind| match kind {
            FileKind::Free(id) => Some(id),
            _ => None,
        });
    if !old_id.is_some_and(|old| Salt::may_reuse(old, segment_id)) {
        tracing::info!(free = %free.display(), segment = segment_id,
            "a delivered segment not written over (its salt could match the new one's); \
             preallocating a new file");
        storage.remove(free)?;
        storage.sync_dir(dir)?;
        return preallocate(storage, dir, segment_id, capacity);
    }
    let tmp = clear_partial(storage, dir, segment_id);
    storage.rename(free, &tmp)?;
    let opened = storage.sync_dir(dir).and_then(|()| storage.open(&tmp));
    let mut file = match opened {
        Ok(file) => file,
        Err(e) => {
            discard(storage, &tmp, segment_id, &e);
            return Err(e);
        }
    };
    let zeroed = (|| {
        let old_len = file.len()?;
        write_zeros(&mut file, 0, RECYCLED_ZEROED.min(capacity))?;
        if old_len > capacity {
            // One oversized first batch made it longer.
            file.set_len(capacity)?;
        }
        write_zeros(&mut file, old_len.max(RECYCLED_ZEROED), capacity)
    })();
    if let Err(e) = zeroed {
        discard(storage, &tmp, segment_id, &e);
        return Err(e);
    }
    finish(storage, dir, file, &tmp, segment_id, capacity)
}

/// `<dir>/<id>.open.tmp`, where a segment is prepared, with a stale one
/// (left by a failed or crashed preparation) removed first.
fn clear_partial<S: Storage>(storage: &S, dir: &Path, segment_id: u64) -> PathBuf {
    let tmp = dir.join(format!("{}.tmp", open_name(segment_id)));
    let _ = storage.remove(&tmp);
    tmp
}

/// The zeros [`write_zeros`] writes, [`ZERO_CHUNK`] at a time from this
/// one static page range: never written, so never resident beyond the
/// kernel's shared zero page. A zeroed buffer allocated per call was 1 MiB
/// faulted in again for every segment recycled (glibc hands a freed block
/// that size back to the system): about 4,000 page faults a second in the
/// sealer at 1 GiB/s of 64 KiB records (`perf record -e page-faults`).
static ZEROS: [u8; ZERO_PIECE] = [0; ZERO_PIECE];
const ZERO_PIECE: usize = 64 * 1024;

/// Write zeros over `[from, to)` of `file`, a piece at a time, each piece
/// written out to the disk before the next (see [`ZERO_CHUNK`]).
fn write_zeros<F: StorageFile>(file: &mut F, from: u64, to: u64) -> io::Result<()> {
    let mut offset = from;
    while offset < to {
        let n = (to - offset).min(ZERO_CHUNK as u64) as usize;
        let (whole, part) = (n / ZERO_PIECE, n % ZERO_PIECE);
        let mut bufs = vec![IoSlice::new(&ZEROS); whole];
        if part > 0 {
            bufs.push(IoSlice::new(&ZEROS[..part]));
        }
        file.write_all_at(offset, &bufs)?;
        // Pacing only: if the file system refuses it, the caller's fsync
        // still decides (and reports any write the disk refused).
        let _ = file.write_out(offset, n as u64);
        offset += n as u64;
    }
    Ok(())
}

/// fsync the prepared `file` at `tmp` and rename it to `<id>.open`,
/// durably; on any error it is removed.
fn finish<S: Storage>(
    storage: &S,
    dir: &Path,
    mut file: S::File,
    tmp: &Path,
    segment_id: u64,
    capacity: u64,
) -> io::Result<Preallocated<S::File>> {
    let path = dir.join(open_name(segment_id));
    let done = file.sync_all().and_then(|()| storage.rename(tmp, &path));
    if let Err(e) = done {
        discard(storage, tmp, segment_id, &e);
        return Err(e);
    }
    // Renamed: the file is complete. If the rename cannot be made durable
    // the caller gets an error and will not use the file, so it goes too.
    if let Err(e) = storage.sync_dir(dir) {
        discard(storage, &path, segment_id, &e);
        return Err(e);
    }
    Ok(Preallocated {
        file,
        path,
        segment_id,
        capacity,
    })
}

/// Remove what a failed preallocation of segment `segment_id` may have
/// left (`<id>.open.tmp`, `<id>.open`), if anything: its caller got an
/// error and never uses the file. Without this a leftover that its own
/// cleanup could not remove (a second fault) stayed until the next start,
/// and on a disk with room for one segment it was that room: pushes were
/// refused for good (simulation seed `0x63b5f0bb635730ef`, small disk).
pub fn remove_failed_preallocation<S: Storage>(
    storage: &S,
    dir: &Path,
    segment_id: u64,
) -> io::Result<()> {
    let open = dir.join(open_name(segment_id));
    let tmp = dir.join(format!("{}.tmp", open_name(segment_id)));
    for path in [tmp, open] {
        match storage.remove(&path) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Remove what a failed preallocation left; a failure to do so is only
/// logged (the caller reports the first error, and recovery removes a
/// leftover `.open.tmp` or reuses a zero `.open` as a spare).
fn discard<S: Storage>(storage: &S, path: &Path, segment_id: u64, cause: &io::Error) {
    if let Err(e) = storage.remove(path) {
        tracing::warn!(path = %path.display(), segment = segment_id, cause = %cause, error = %e,
            "preallocation failed and its partial file could not be removed");
    }
}

/// One record to append: its payload and packed [`crate::RecordMeta`].
#[derive(Debug, Clone, Copy)]
pub struct AppendRecord<'a> {
    pub payload: &'a [u8],
    pub meta: u64,
    /// The CRC-32 of `payload`, when the wire check already computed it:
    /// the record's CRC is then derived from it ([`record_crc_from`])
    /// rather than by hashing the payload again.
    pub payload_crc: Option<u32>,
}

/// The segment the flusher is writing. Only the flusher's thread touches it.
pub struct ActiveSegment<F> {
    pub file: F,
    pub path: PathBuf,
    pub header: SegmentHeader,
    /// Size the file was preallocated to; appends past it grow the file.
    pub capacity: u64,
    /// Where the next record goes.
    pub write_offset: u64,
    /// Everything before this offset has been covered by a successful fdatasync.
    pub durable_offset: u64,
    pub count: u64,
    pub records_crc: RecordsCrc,
    /// The bytes of a group that are not big payloads (see
    /// [`COPIED_PAYLOAD_MAX`]), kept from group to group.
    staging: Vec<u8>,
}

/// Payloads up to this size are copied next to their record headers, so a
/// run of small records is one piece of the vectored write; larger ones
/// are written from the received bytes as they are. The kernel takes each
/// piece of a `pwritev` on its own (about 30 ns here, against a few ns to
/// copy 512 bytes): 256 records of 5 bytes as 512 pieces took 21 µs, as
/// one piece 5.5 µs (`pwritev` against `pwrite` of the same bytes, 20,000
/// calls each).
pub const COPIED_PAYLOAD_MAX: usize = 512;

/// A staging buffer larger than this (a group of many records up to
/// [`COPIED_PAYLOAD_MAX`]) is freed after its write rather than kept.
const STAGING_KEPT_MAX: usize = 256 * 1024;

/// One piece of a group's vectored write.
enum Piece<'a> {
    /// A range of the staging buffer.
    Staged(usize, usize),
    /// A payload as received.
    Payload(&'a [u8]),
}

impl<F: StorageFile> ActiveSegment<F> {
    /// Start using a preallocated file; its first record will be `first_seq`.
    pub fn start(pre: Preallocated<F>, shard: u32, first_seq: u64) -> Self {
        ActiveSegment {
            file: pre.file,
            path: pre.path,
            header: SegmentHeader::new(shard, pre.segment_id, first_seq, now_unix_us()),
            capacity: pre.capacity,
            write_offset: 0,
            durable_offset: 0,
            count: 0,
            records_crc: RecordsCrc::new(),
            staging: Vec::new(),
        }
    }

    pub fn next_seq(&self) -> u64 {
        self.header.first_seq + self.count
    }

    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// Bytes a group of records takes on disk (plus the header if it is first).
    pub fn bytes_needed(&self, payload_bytes: u64, records: u64) -> u64 {
        let header = if self.write_offset == 0 {
            SEGMENT_HEADER_LEN as u64
        } else {
            0
        };
        header + payload_bytes + records * RECORD_HEADER_LEN as u64
    }

    /// Whether a group fits before the preallocated end (leaving room for the footer).
    pub fn fits(&self, payload_bytes: u64, records: u64) -> bool {
        self.write_offset + self.bytes_needed(payload_bytes, records) + FOOTER_LEN as u64
            <= self.capacity
    }

    /// Append `records` with one vectored write (header first if the segment
    /// is new, 16 zero bytes after the last record). Returns the sequence number of the first record. On error
    /// nothing is counted as written; the caller abandons the segment.
    /// A payload that is empty or longer than [`RECORD_BYTES_MAX`] is
    /// refused (`InvalidInput`) before anything is written.
    pub fn append(&mut self, records: &[AppendRecord<'_>]) -> io::Result<u64> {
        if let Some(r) = records
            .iter()
            .find(|r| r.payload.is_empty() || r.payload.len() > RECORD_BYTES_MAX as usize)
        {
            // A zero length is the end marker and a longer one fails the
            // reader's check: either would make every later record unreadable.
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "record payload of {} bytes (must be 1..={RECORD_BYTES_MAX})",
                    r.payload.len()
                ),
            ));
        }
        let first_seq = self.next_seq();
        if SEQ_MAX - first_seq.min(SEQ_MAX) < records.len() as u64 {
            // Unreachable in practice (see SEQ_MAX); a header past it would
            // not be read back, so nothing is written.
            return Err(io::Error::other(format!(
                "sequence numbers exhausted: {first_seq} + {} records passes {SEQ_MAX}",
                records.len()
            )));
        }
        let salt = self.header.salt();
        let starting = self.write_offset == 0;
        let mut crcs = RecordsCrc::clone(&self.records_crc);
        let mut staging = std::mem::take(&mut self.staging);
        staging.clear();
        if starting {
            staging.extend_from_slice(&self.header.encode());
        }
        let mut pieces: Vec<Piece<'_>> = Vec::new();
        let mut run = 0;
        let mut payload_bytes = 0u64;
        // Payload bytes written from the received buffers, not staged.
        let mut unstaged = 0u64;
        for r in records {
            let crc = match r.payload_crc {
                Some(known) => {
                    debug_assert_eq!(known, crc32fast::hash(r.payload), "a wrong payload CRC");
                    record_crc_from(r.meta, known, r.payload.len() as u64)
                }
                None => record_crc(r.meta, r.payload),
            };
            let crc = salt.apply(crc);
            crcs.add(crc);
            staging.extend_from_slice(&encode_record_header(r.payload.len() as u32, crc, r.meta));
            if r.payload.len() <= COPIED_PAYLOAD_MAX {
                staging.extend_from_slice(r.payload);
            } else {
                pieces.push(Piece::Staged(run, staging.len()));
                pieces.push(Piece::Payload(r.payload));
                unstaged += r.payload.len() as u64;
                run = staging.len();
            }
            payload_bytes += r.payload.len() as u64;
        }
        let total = staging.len() as u64 + unstaged;
        // What `fits` and the WAB budget count is what is written.
        assert_eq!(
            total,
            self.bytes_needed(payload_bytes, records.len() as u64),
            "segment {}: the bytes written differ from the bytes counted",
            self.header.segment_id
        );
        // Not counted: the next group writes over it (`fits` leaves room
        // for the footer, which is longer). A group too large for the
        // segment grows the file, and the end of the file is its end.
        if self.write_offset + total + END_MARKER.len() as u64 <= self.capacity {
            staging.extend_from_slice(&END_MARKER);
        }
        pieces.push(Piece::Staged(run, staging.len()));
        let iov: Vec<IoSlice<'_>> = pieces
            .iter()
            .map(|p| match *p {
                Piece::Staged(from, to) => IoSlice::new(&staging[from..to]),
                Piece::Payload(b) => IoSlice::new(b),
            })
            .filter(|s| !s.is_empty())
            .collect();
        let written = self.file.write_all_at(self.write_offset, &iov);
        drop(iov);
        drop(pieces);
        if staging.capacity() <= STAGING_KEPT_MAX {
            self.staging = staging;
        }
        written?;
        self.write_offset += total;
        self.count += records.len() as u64;
        self.records_crc = crcs;
        Ok(first_seq)
    }

    /// fdatasync everything written so far.
    pub fn sync(&mut self) -> io::Result<()> {
        self.file.sync_data()?;
        self.durable_offset = self.write_offset;
        Ok(())
    }

    /// What the sealer needs to seal this segment at its durable end.
    pub fn into_sealing(self) -> Sealing<F> {
        Sealing {
            footer: Footer {
                record_count: self.count,
                end_offset: self.write_offset,
                last_seq: self.next_seq().wrapping_sub(1),
                records_crc: self.records_crc.value(),
            },
            file: self.file,
            path: self.path,
            segment_id: self.header.segment_id,
            salt: self.header.salt(),
        }
    }
}

/// A full (or recovered) segment handed to [`seal`].
pub struct Sealing<F> {
    pub file: F,
    pub path: PathBuf,
    pub segment_id: u64,
    pub footer: Footer,
    /// The segment's [`Salt`] (its header's).
    pub salt: Salt,
}

/// Write the footer, cut the unused preallocated tail, fsync, rename to
/// `.sealed` and fsync the directory. Returns the sealed path.
///
/// Each step is safe to crash after: recovery finds either an `.open` file
/// whose records end in zeros or in this footer (and seals it again), or the
/// `.sealed` file.
pub fn seal<S: Storage>(storage: &S, dir: &Path, mut s: Sealing<S::File>) -> io::Result<PathBuf> {
    let footer = s.footer.encode(s.salt);
    s.file
        .write_all_at(s.footer.end_offset, &[IoSlice::new(&footer)])?;
    s.file.set_len(s.footer.end_offset + FOOTER_LEN as u64)?;
    s.file.sync_all()?;
    let sealed = dir.join(sealed_name(s.segment_id));
    storage.rename(&s.path, &sealed)?;
    storage.sync_dir(dir)?;
    Ok(sealed)
}
