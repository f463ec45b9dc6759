//! Reading a segment back, record by record, checking every CRC.
//!
//! One reader serves recovery, the drain (which follows the durable tail of
//! the active segment by raising [`SegmentReader::set_limit`]), `spillway ctl`
//! and the tests. Payloads are `Bytes` slices of a read-ahead chunk, so a
//! batch of small records costs one read, not one allocation per record.

use std::io;
use std::path::Path;

use bytes::{Bytes, BytesMut};

use crate::format::{
    record_crc, u32_at, u64_at, Footer, FormatError, GapFrame, RecordMeta, RecordsCrc, Salt,
    SegmentHeader, FOOTER_LEN, FOOTER_MARKER, GAP_MARKER, RECORD_BYTES_MAX, RECORD_HEADER_LEN,
    SEGMENT_HEADER_LEN,
};
use crate::storage::{read_full_at, Storage, StorageFile};

/// Read-ahead size: large enough that a batch of small records is one read.
const CHUNK_BYTES: usize = 256 * 1024;

/// Read-ahead chunks kept after the reader moved past them, while records
/// read from them may still be held (a batch in delivery): one whose
/// records are all gone is read into again. A new chunk is zeroed and
/// faulted in page by page; in a profile of the drain at 500 MiB/s that
/// was most of its CPU, more than the read itself. 40 chunks (10 MiB)
/// cover two default batches (`batch_bytes_max` 4 MiB; records straddle chunks,
/// so a batch of 64 KiB records spans about 17): the one in delivery and
/// the one being read. A follower hands them on from one segment's reader
/// to the next (`SegmentReader::into_spares`) and lets go of them when
/// idle (`ShardFollower::release_chunks`). With 16 kept and none handed
/// on, 1 MiB PushBatches through the noop sink cost the drain 319-336
/// page faults per MiB; now about 2.
const SPARE_CHUNKS: usize = 40;

/// Read-ahead chunks handed from a finished segment's reader to the next
/// one's (see [`SPARE_CHUNKS`]).
#[derive(Debug, Default)]
pub(crate) struct SpareChunks(std::collections::VecDeque<Bytes>);

/// A record as read back from a segment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredRecord {
    /// Identity within the shard; assigned when written, stable across restarts.
    pub seq: u64,
    pub meta: RecordMeta,
    pub payload: Bytes,
    /// Offset of the record header in the segment file.
    pub offset: u64,
}

/// A GAP frame the reader stepped over: records recovery found damaged and
/// replaced in place (see [`GapFrame`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PassedGap {
    /// Offset of the frame (where the damaged bytes started).
    pub offset: u64,
    /// Sequence number of the first lost record.
    pub first_seq: u64,
    pub lost_records: u64,
    /// Bytes from the frame to the next record (frame + damaged bytes).
    pub span: u64,
}

/// Why a reader stopped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum End {
    /// An all-zero record header: the end of an unsealed segment.
    Zeros,
    /// The file ended on a record boundary.
    EndOfFile,
    /// A valid footer that matches the records read.
    Footer(Footer),
    /// The first bytes that failed a check; everything before `offset` is good.
    Corrupt { offset: u64, detail: String },
    /// Frames an earlier use of a recycled file left (they check out under
    /// an older [`Salt`], and so does the one after them): the end of an
    /// unsealed segment's records, as zeros would be. Everything before
    /// `offset` is good.
    Stale { offset: u64 },
}

/// What opening a segment file found.
pub enum Opened<F> {
    /// An all-zero header: a preallocated segment that never held a record.
    Unused(F),
    /// The header failed its check.
    BadHeader(FormatError),
    Reader(SegmentReader<F>),
}

/// Sequential reader of one segment.
pub struct SegmentReader<F> {
    file: F,
    header: SegmentHeader,
    /// The header's [`Salt`].
    salt: Salt,
    /// Offset of the next record header.
    offset: u64,
    /// Positions read: records returned plus records lost in GAP frames.
    count: u64,
    records_crc: RecordsCrc,
    gaps: Vec<PassedGap>,
    /// Read-ahead: bytes of the file starting at `chunk_start`.
    chunk: Bytes,
    chunk_start: u64,
    /// Chunks read past, oldest first (see [`SPARE_CHUNKS`]).
    spare: SpareChunks,
    /// Never read at or past this offset (the durable watermark of an
    /// active segment); `u64::MAX` for a closed file.
    limit: u64,
    end: Option<End>,
    /// Set by `next_inner` when it stepped over a GAP frame (not an end).
    gap_passed: bool,
}

enum Frame {
    Record(StoredRecord),
    Gap,
    Stop,
}

impl<F: StorageFile> SegmentReader<F> {
    /// Open `path` and check its header.
    pub fn open<S: Storage<File = F>>(storage: &S, path: &Path) -> io::Result<Opened<F>> {
        let file = storage.open_read(path)?;
        Self::from_file(file)
    }

    /// Check the header of an already open file.
    ///
    /// The header and the first record header are read together (one
    /// read): an all-zero header with record bytes after it is a damaged
    /// header, not a spare.
    pub fn from_file(file: F) -> io::Result<Opened<F>> {
        let mut head = [0u8; SEGMENT_HEADER_LEN + RECORD_HEADER_LEN];
        let n = read_full_at(&file, 0, &mut head)?;
        if n < SEGMENT_HEADER_LEN {
            if head[..n].iter().all(|&b| b == 0) {
                return Ok(Opened::Unused(file));
            }
            return Ok(Opened::BadHeader(FormatError::BadFooter(format!(
                "file is {n} bytes, shorter than the {SEGMENT_HEADER_LEN}-byte header"
            ))));
        }
        let raw: &[u8; SEGMENT_HEADER_LEN] = head[..SEGMENT_HEADER_LEN].try_into().unwrap();
        match SegmentHeader::decode(raw) {
            Ok(None) if head[SEGMENT_HEADER_LEN..n].iter().any(|&b| b != 0) => {
                Ok(Opened::BadHeader(FormatError::ZeroedOverRecords))
            }
            Ok(None) => Ok(Opened::Unused(file)),
            Err(e) => Ok(Opened::BadHeader(e)),
            Ok(Some(header)) => Ok(Opened::Reader(SegmentReader::at_first_record(file, header))),
        }
    }

    /// A reader of a file whose header failed its check, numbering its
    /// records from 0: for counting what the file holds and finding where
    /// its records end, never for handing records out (their sequence
    /// numbers are not known). Recovery uses it to salvage such a file.
    /// Its CRCs are checked under `format` (its salt from `segment_id`,
    /// the file name's id).
    pub(crate) fn unnumbered(file: F, format: u32, segment_id: u64) -> Self {
        let header = SegmentHeader {
            format,
            shard: 0,
            segment_id,
            first_seq: 0,
            created_unix_us: 0,
            skipped: 0,
        };
        SegmentReader::at_first_record(file, header)
    }

    /// A reader of `file` under `header`, before its first record.
    fn at_first_record(file: F, header: SegmentHeader) -> Self {
        SegmentReader {
            file,
            salt: header.salt(),
            header,
            offset: SEGMENT_HEADER_LEN as u64,
            count: 0,
            records_crc: RecordsCrc::new(),
            gaps: Vec::new(),
            chunk: Bytes::new(),
            chunk_start: 0,
            spare: SpareChunks::default(),
            limit: u64::MAX,
            end: None,
            gap_passed: false,
        }
    }

    pub fn header(&self) -> &SegmentHeader {
        &self.header
    }

    /// Offset just past the last good record read.
    pub fn offset(&self) -> u64 {
        self.offset
    }

    /// Positions read so far: records returned plus records the GAP frames
    /// passed say were lost (sequence numbers are positional).
    pub fn count(&self) -> u64 {
        self.count
    }

    /// GAP frames passed so far, in file order.
    pub fn gaps(&self) -> &[PassedGap] {
        &self.gaps
    }

    /// Records lost in the GAP frames passed so far.
    pub fn lost_records(&self) -> u64 {
        self.gaps.iter().map(|g| g.lost_records).sum()
    }

    /// Sequence number the next record will carry.
    pub fn next_seq(&self) -> u64 {
        self.header.first_seq + self.count
    }

    pub fn records_crc(&self) -> u32 {
        self.records_crc.value()
    }

    /// Why reading stopped, once it has.
    pub fn end(&self) -> Option<&End> {
        self.end.as_ref()
    }

    pub fn file_ref(&self) -> &F {
        &self.file
    }

    pub fn into_file(self) -> F {
        self.file
    }

    /// Read no byte at or past `limit` (exclusive). Raising it lets a reader
    /// follow a segment that is still being written.
    pub fn set_limit(&mut self, limit: u64) {
        if limit < self.limit {
            // Cached bytes past the new limit may not be durable yet: read
            // them again. The chunk is kept to be read into. (Raising the
            // limit keeps the cache: reads are capped at the old limit.)
            self.set_chunk_aside();
        }
        self.limit = limit;
    }

    /// Skip records until `seq` is the next one (used to resume at a checkpoint).
    pub fn skip_to(&mut self, seq: u64) -> io::Result<()> {
        while self.next_seq() < seq {
            if self.next()?.is_none() {
                break;
            }
        }
        Ok(())
    }

    /// The next record, `Ok(None)` at the end (see [`Self::end`]) or at the limit.
    /// GAP frames are stepped over (the sequence numbers they hold are skipped).
    #[allow(clippy::should_implement_trait)] // fallible: io::Result, unlike Iterator::next
    pub fn next(&mut self) -> io::Result<Option<StoredRecord>> {
        loop {
            match self.next_frame()? {
                Frame::Record(r) => return Ok(Some(r)),
                Frame::Gap => continue,
                Frame::Stop => return Ok(None),
            }
        }
    }

    fn next_frame(&mut self) -> io::Result<Frame> {
        match self.next_inner()? {
            Some(r) => Ok(Frame::Record(r)),
            None if self.gap_passed => {
                self.gap_passed = false;
                Ok(Frame::Gap)
            }
            None => Ok(Frame::Stop),
        }
    }

    fn next_inner(&mut self) -> io::Result<Option<StoredRecord>> {
        if self.end.is_some() {
            return Ok(None);
        }
        let at = self.offset;
        if at + RECORD_HEADER_LEN as u64 > self.limit {
            return Ok(None);
        }
        let head = match self.bytes_at(at, RECORD_HEADER_LEN)? {
            Some(h) => h,
            None => {
                // `bytes_at` left the bytes that do exist at `at` in `chunk`:
                // a non-zero partial header is a torn write past the
                // preallocated end, not a clean end of file.
                if self.chunk.iter().any(|&b| b != 0) {
                    let have = self.chunk.len();
                    return self.corrupt(
                        at,
                        format!("file ends {have} bytes into a record header (torn write)"),
                    );
                }
                return self.stop(End::EndOfFile);
            }
        };
        let len = u32_at(&head, 0);
        if len == 0 {
            if head.iter().all(|&b| b == 0) {
                return self.stop(End::Zeros);
            }
            return self.corrupt(at, "record length 0 with non-zero header bytes".into());
        }
        if len == FOOTER_MARKER {
            if at + FOOTER_LEN as u64 > self.limit {
                return Ok(None);
            }
            return self.read_footer(at);
        }
        if len == GAP_MARKER {
            return self.pass_gap(at, &head);
        }
        self.read_record(at, len)
    }

    /// Passes the GAP frame whose header `head` is at `at`: its lost
    /// records are counted (and numbered) as if read, and the damaged bytes
    /// it covers are skipped.
    fn pass_gap(&mut self, at: u64, head: &[u8]) -> io::Result<Option<StoredRecord>> {
        let Some((gap, crc)) = GapFrame::decode(head, self.salt) else {
            return self.damage_or_stale(at, "GAP frame fails its CRC".into());
        };
        let next = at + gap.span();
        if next > self.limit {
            return Ok(None);
        }
        // The damaged bytes stay in place: the frame must not point
        // past the end of the file.
        if next > self.file.len()? {
            return self.corrupt(
                at,
                format!(
                    "GAP frame skips {} bytes past the end of the file",
                    gap.skip_bytes
                ),
            );
        }
        self.gaps.push(PassedGap {
            offset: at,
            first_seq: self.next_seq(),
            lost_records: gap.lost_records as u64,
            span: gap.span(),
        });
        self.records_crc.add(crc);
        self.count += gap.lost_records as u64;
        self.offset = next;
        self.gap_passed = true;
        Ok(None)
    }

    /// Reads the record of `len` payload bytes at `at`, checked against its
    /// CRC.
    fn read_record(&mut self, at: u64, len: u32) -> io::Result<Option<StoredRecord>> {
        if len > RECORD_BYTES_MAX {
            return self.corrupt(
                at,
                format!("record length {len} exceeds the {RECORD_BYTES_MAX}-byte maximum"),
            );
        }
        let total = RECORD_HEADER_LEN + len as usize;
        if at + total as u64 > self.limit {
            return Ok(None);
        }
        let whole = match self.bytes_at(at, total)? {
            Some(w) => w,
            None => {
                return self.corrupt(
                    at,
                    format!("record of {len} bytes runs past the end of the file (torn write)"),
                )
            }
        };
        let stored_crc = u32_at(&whole, 4);
        let meta = u64_at(&whole, 8);
        let payload = whole.slice(RECORD_HEADER_LEN..);
        let computed = self.salt.apply(record_crc(meta, &payload));
        if stored_crc != computed {
            return self.damage_or_stale(
                at,
                format!(
                    "record CRC mismatch (stored {stored_crc:#010x}, computed {computed:#010x})"
                ),
            );
        }
        let record = StoredRecord {
            seq: self.next_seq(),
            meta: RecordMeta::unpack(meta),
            payload,
            offset: at,
        };
        self.records_crc.add(stored_crc);
        self.count += 1;
        self.offset = at + total as u64;
        Ok(Some(record))
    }

    fn read_footer(&mut self, at: u64) -> io::Result<Option<StoredRecord>> {
        let raw = match self.bytes_at(at, FOOTER_LEN)? {
            Some(r) => r,
            None => return self.corrupt(at, "footer runs past the end of the file".into()),
        };
        let footer = match Footer::decode(raw[..].try_into().unwrap(), self.salt) {
            Ok(f) => f,
            Err(e) => return self.damage_or_stale(at, e.to_string()),
        };
        let expected = Footer {
            record_count: self.count,
            end_offset: at,
            last_seq: self.next_seq().wrapping_sub(1),
            records_crc: self.records_crc.value(),
        };
        if footer != expected {
            return self.corrupt(
                at,
                format!("footer {footer:?} does not match the records read {expected:?}"),
            );
        }
        self.stop(End::Footer(footer))
    }

    fn stop(&mut self, end: End) -> io::Result<Option<StoredRecord>> {
        self.end = Some(end);
        Ok(None)
    }

    fn corrupt(&mut self, offset: u64, detail: String) -> io::Result<Option<StoredRecord>> {
        self.stop(End::Corrupt { offset, detail })
    }

    /// A frame at `offset` failed its CRC (`detail`): [`End::Stale`] if an
    /// earlier use of the file left it, else damage. Only ever read past
    /// the last group of an unsealed segment, so not on any hot path.
    fn damage_or_stale(&mut self, offset: u64, detail: String) -> io::Result<Option<StoredRecord>> {
        let region_end = self.file.len()?.min(self.limit);
        if crate::salvage::left_by_earlier_use(&self.file, offset, region_end, self.salt)? {
            return self.stop(End::Stale { offset });
        }
        self.corrupt(offset, detail)
    }

    /// A buffer of `len` bytes to read the next chunk into: a spare chunk
    /// none of whose records is held any more (its old bytes are read
    /// over), else a new one. The chunk being replaced becomes a spare.
    fn fresh_chunk(&mut self, len: usize) -> BytesMut {
        self.set_chunk_aside();
        self.spare
            .take(len)
            .unwrap_or_else(|| BytesMut::zeroed(len))
    }

    /// This reader's read-ahead chunks, the current one too, for the
    /// reader of the next segment ([`Self::with_spares`]): records read
    /// from them may still be in delivery, and a chunk they let go of is
    /// read into again rather than a new one zeroed and faulted in.
    pub(crate) fn into_spares(mut self) -> SpareChunks {
        self.set_chunk_aside();
        std::mem::take(&mut self.spare)
    }

    /// Stop reading from the current chunk and keep it among the spares,
    /// to be read into again once its records are gone.
    fn set_chunk_aside(&mut self) {
        let chunk = std::mem::take(&mut self.chunk);
        self.spare.keep(chunk);
    }

    /// Read ahead into `spares` (another segment's, see [`Self::into_spares`]).
    pub(crate) fn with_spares(mut self, spares: SpareChunks) -> Self {
        debug_assert!(self.spare.0.is_empty(), "a reader already reading");
        self.spare = spares;
        self
    }

    /// Let go of the read-ahead (the follower is idle): records read from
    /// it keep their bytes; the next read starts a new chunk.
    pub(crate) fn release_chunks(&mut self) {
        self.chunk = Bytes::new();
        self.chunk_start = 0;
        self.spare = SpareChunks::default();
    }

    /// `len` bytes at `at`, or `None` if the file (or limit) ends first.
    fn bytes_at(&mut self, at: u64, len: usize) -> io::Result<Option<Bytes>> {
        let cached_end = self.chunk_start + self.chunk.len() as u64;
        if at >= self.chunk_start && at + len as u64 <= cached_end {
            let from = (at - self.chunk_start) as usize;
            return Ok(Some(self.chunk.slice(from..from + len)));
        }
        let mut want = len.max(CHUNK_BYTES) as u64;
        if self.limit != u64::MAX {
            want = want.min(self.limit.saturating_sub(at)).max(len as u64);
        }
        // No more than the file holds from `at`, plus one byte (so the
        // read that fills it stops at the end of the file, as a read into
        // a larger chunk does): a small file (a dead-letter or requeue
        // store's, a spare) is not read into CHUNK_BYTES zeroed first.
        let end = self.file.len()?;
        want = want.min(end.saturating_sub(at) + 1).max(len as u64);
        let mut buf = self.fresh_chunk(want as usize);
        let n = read_full_at(&self.file, at, &mut buf)?;
        buf.truncate(n);
        self.chunk = buf.freeze();
        self.chunk_start = at;
        if n < len {
            return Ok(None);
        }
        Ok(Some(self.chunk.slice(0..len)))
    }
}

impl SpareChunks {
    /// Keep `chunk` (read past) for a later read, dropping the oldest kept
    /// one past [`SPARE_CHUNKS`]; an empty or oversized chunk is not kept.
    fn keep(&mut self, chunk: Bytes) {
        if chunk.is_empty() || chunk.len() > CHUNK_BYTES {
            return;
        }
        if self.0.len() == SPARE_CHUNKS {
            self.0.pop_front();
        }
        self.0.push_back(chunk);
    }

    /// A kept chunk none of whose records is held any more, as a buffer of
    /// `len` bytes (its old bytes, to be read over); `None` if there is none.
    fn take(&mut self, len: usize) -> Option<BytesMut> {
        while let Some(at) = self.0.iter().position(Bytes::is_unique) {
            let free = self.0.remove(at)?;
            match free.try_into_mut() {
                Ok(mut buf) if buf.capacity() >= len => {
                    if buf.len() < len {
                        buf.resize(len, 0);
                    } else {
                        buf.truncate(len);
                    }
                    return Some(buf);
                }
                // Too small for this read, or shared after all: let it go.
                _ => continue,
            }
        }
        None
    }
}
