//! Byte layout of a segment file: header, record frames, footer.
//!
//! ```text
//! segment  := header(64) record* (end | footer)
//! header   := magic "SPILLSEG" | format u32 | shard u32 | segment_id u64
//!             | first_seq u64 | created_unix_us u64 | reserved[20] | crc u32
//! record   := len u32 (1..=16 MiB) | crc u32 | meta u64 | payload[len]
//!             crc  = CRC-32 of meta (LE bytes) ++ payload, xor salt
//!             meta = arrival_unix_us (low 56 bits) | tier (high 8 bits)
//! gap      := 0xFFFF_FFFE u32 | crc u32 | skip_bytes u32 | lost_records u32
//!             crc = CRC-32 of bytes 8..16, xor salt; written by recovery
//!             over damaged records, followed by skip_bytes damaged bytes
//!             left in place
//! end      := a record header of 16 zero bytes, or end of file
//! footer   := 0xFFFF_FFFF u32 | "SEAL" | record_count u64 | end_offset u64
//!             | last_seq u64 | records_crc u32 | crc u32      (40 bytes)
//!             records_crc = CRC-32 of every record's (and gap's) stored
//!             crc (LE) in order; crc = CRC-32 of bytes 0..36, xor salt
//! salt     := 0 in format 1; in format 2 a function of the segment id
//!             ([`Salt`]), so that frames an earlier use of a recycled file
//!             left fail every check of the new one
//! ```
//! All integers little-endian. The writer puts 16 zero bytes after every
//! group it appends, so the first all-zero record header marks the end of
//! an unsealed segment. See docs/wab-format.md for the reasoning.

use thiserror::Error;

pub const SEGMENT_MAGIC: [u8; 8] = *b"SPILLSEG";
/// The format this build writes: 2, with salted CRCs (see [`Salt`]).
pub const FORMAT_VERSION: u32 = 2;
/// The first format (CRCs unsalted, files zero-filled before every use):
/// still read, never written.
pub const FORMAT_1: u32 = 1;
/// The formats this build reads, in the order a file whose header cannot
/// say its format is tried: this build's first.
pub const FORMATS_READ: [u32; 2] = [FORMAT_VERSION, FORMAT_1];
pub const SEGMENT_HEADER_LEN: usize = 64;
pub const RECORD_HEADER_LEN: usize = 16;
pub const FOOTER_LEN: usize = 40;
/// The `len` value that announces a footer instead of a record.
pub const FOOTER_MARKER: u32 = u32::MAX;
pub const FOOTER_MAGIC: [u8; 4] = *b"SEAL";
/// The `len` value that announces a GAP frame: damaged records recovery
/// replaced in place (see [`GapFrame`]).
pub const GAP_MARKER: u32 = u32::MAX - 1;
pub const GAP_FRAME_LEN: usize = 16;
/// No record can be larger than the protocol's hard payload cap.
pub const RECORD_BYTES_MAX: u32 = 16 * 1024 * 1024;
const ARRIVAL_MASK: u64 = (1 << 56) - 1;

/// Something in a segment failed its check.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum FormatError {
    #[error("segment header: magic is {0:02x?}, expected \"SPILLSEG\"")]
    BadMagic([u8; 8]),
    #[error(
        "segment header: format version {0}, this build reads {FORMAT_1} and {FORMAT_VERSION}"
    )]
    BadVersion(u32),
    #[error("segment header: CRC mismatch (stored {stored:#010x}, computed {computed:#010x})")]
    BadHeaderCrc { stored: u32, computed: u32 },
    #[error("footer: {0}")]
    BadFooter(String),
    #[error(
        "segment header: first_seq {0} is past {SEQ_MAX}, the last sequence number spillway writes"
    )]
    SeqOutOfRange(u64),
    #[error("segment header: {skipped} numbers skipped before first_seq {first_seq}, more than there are")]
    SkippedPastZero { skipped: u64, first_seq: u64 },
    /// 64 zero bytes where the header goes, but a record after them: not a
    /// spare (the writer puts the header and the first records down in one
    /// write), a header wiped over records.
    #[error("segment header: all 64 bytes are zero, but record bytes follow it")]
    ZeroedOverRecords,
}

/// Sequence numbers stay below this (2^63; at ten million records a second
/// that is 29,000 years of them). A header claiming more is not one this
/// daemon wrote, and refusing it keeps every `first_seq + count` in a
/// segment, a GAP frame or a footer far from overflowing.
pub const SEQ_MAX: u64 = 1 << 63;

/// The fixed header at offset 0 of every segment in use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SegmentHeader {
    /// [`FORMAT_VERSION`] when written by this build; [`FORMAT_1`] for a
    /// segment an older one wrote.
    pub format: u32,
    pub shard: u32,
    pub segment_id: u64,
    /// Sequence number of the segment's first record.
    pub first_seq: u64,
    pub created_unix_us: u64,
    /// Numbers just below `first_seq` that no reader was ever given: the
    /// writer resumed past a group whose write or fdatasync failed
    /// (`first_seq - skipped ..first_seq`, nacked records and Buffered ones
    /// no fsync covered). Recovery does not count them as a gap; 0 for a
    /// segment that follows on from the last durable record (and in every
    /// segment an older build wrote: its reserved bytes are zeros).
    pub skipped: u64,
}

impl SegmentHeader {
    pub fn encode(&self) -> [u8; SEGMENT_HEADER_LEN] {
        let mut b = [0u8; SEGMENT_HEADER_LEN];
        b[0..8].copy_from_slice(&SEGMENT_MAGIC);
        b[8..12].copy_from_slice(&self.format.to_le_bytes());
        b[12..16].copy_from_slice(&self.shard.to_le_bytes());
        b[16..24].copy_from_slice(&self.segment_id.to_le_bytes());
        b[24..32].copy_from_slice(&self.first_seq.to_le_bytes());
        b[32..40].copy_from_slice(&self.created_unix_us.to_le_bytes());
        b[40..48].copy_from_slice(&self.skipped.to_le_bytes());
        let crc = crc32fast::hash(&b[0..60]);
        b[60..64].copy_from_slice(&crc.to_le_bytes());
        b
    }

    /// `Ok(None)` for an all-zero header: a preallocated segment never used.
    pub fn decode(b: &[u8; SEGMENT_HEADER_LEN]) -> Result<Option<Self>, FormatError> {
        if b.iter().all(|&x| x == 0) {
            return Ok(None);
        }
        let magic: [u8; 8] = b[0..8].try_into().unwrap();
        if magic != SEGMENT_MAGIC {
            return Err(FormatError::BadMagic(magic));
        }
        let version = u32_at(b, 8);
        if !FORMATS_READ.contains(&version) {
            return Err(FormatError::BadVersion(version));
        }
        let stored = u32_at(b, 60);
        let computed = crc32fast::hash(&b[0..60]);
        if stored != computed {
            return Err(FormatError::BadHeaderCrc { stored, computed });
        }
        let first_seq = u64_at(b, 24);
        if first_seq > SEQ_MAX {
            return Err(FormatError::SeqOutOfRange(first_seq));
        }
        let skipped = u64_at(b, 40);
        if skipped > first_seq {
            return Err(FormatError::SkippedPastZero { skipped, first_seq });
        }
        Ok(Some(SegmentHeader {
            format: version,
            shard: u32_at(b, 12),
            segment_id: u64_at(b, 16),
            first_seq,
            created_unix_us: u64_at(b, 32),
            skipped,
        }))
    }
}

impl SegmentHeader {
    /// The header this build writes for segment `segment_id`.
    pub fn new(shard: u32, segment_id: u64, first_seq: u64, created_unix_us: u64) -> Self {
        SegmentHeader {
            format: FORMAT_VERSION,
            shard,
            segment_id,
            first_seq,
            created_unix_us,
            skipped: 0,
        }
    }

    /// The salt of this segment's frame CRCs.
    pub fn salt(&self) -> Salt {
        Salt::of_format(self.format, self.segment_id)
    }
}

/// Odd, so that multiplying by it is a bijection of `u32`.
const SALT_MULTIPLIER: u32 = 0x9E37_79B1;
/// `SALT_MULTIPLIER`'s inverse modulo 2^32 (checked by a unit test).
const SALT_INVERSE: u32 = 0x0E8B_2F51;

/// What every frame CRC of a format-2 segment is xored with: a bijection
/// of the low 32 bits of the segment id.
///
/// A delivered segment is written over as a later one without zeroing it
/// first ([`crate::segment::recycle`]), so past the new records lie the old
/// ones, with CRCs that were right in the file's earlier use. Salted by
/// another id, they fail every check of the new use; and since the salt
/// gives back the id it was made from, a frame that checks out under an
/// *older* salt is known for what it is, bytes an earlier use left (see
/// [`Salt::is_earlier`]), rather than damage. (PostgreSQL recycles its WAL
/// files the same way, each page header naming the address it was
/// written for.)
///
/// Two ids share a salt only if they differ by a multiple of 2^32, and
/// [`crate::segment::recycle`] refuses that pair (and the one id whose salt
/// is 0, a format-1 file's).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Salt(u32);

impl Salt {
    /// Format 1: CRCs as computed.
    pub const NONE: Salt = Salt(0);

    pub fn of_segment(segment_id: u64) -> Salt {
        Salt(
            (segment_id as u32)
                .wrapping_add(1)
                .wrapping_mul(SALT_MULTIPLIER),
        )
    }

    /// The CRC stored for a frame whose content has CRC `crc`.
    pub fn apply(self, crc: u32) -> u32 {
        crc ^ self.0
    }

    /// The salt a frame was written under, from its stored CRC and the CRC
    /// of its content.
    pub fn found(stored: u32, computed: u32) -> Salt {
        Salt(stored ^ computed)
    }

    /// Low 32 bits of the id this salt was made from.
    fn id(self) -> u32 {
        self.0.wrapping_mul(SALT_INVERSE).wrapping_sub(1)
    }

    /// Whether a frame written under `found` comes from an earlier use of
    /// a file now salted by `self`: a format-1 use (salt 0), or a segment
    /// with a smaller id. Always false in a format-1 file, where no earlier
    /// use can be told from damage.
    pub fn is_earlier(self, found: Salt) -> bool {
        if self == Salt::NONE || found == self {
            return false;
        }
        found == Salt::NONE || found.id() < self.id()
    }

    /// The salt of segment `segment_id` written in `format`.
    pub fn of_format(format: u32, segment_id: u64) -> Salt {
        if format == FORMAT_1 {
            Salt::NONE
        } else {
            Salt::of_segment(segment_id)
        }
    }

    /// The salts a file named for segment `segment_id` may use, when its
    /// header cannot say which format it is, in [`FORMATS_READ`] order.
    pub fn candidates(segment_id: u64) -> [Salt; 2] {
        FORMATS_READ.map(|format| Salt::of_format(format, segment_id))
    }

    /// Whether a file that held segment `old` may be written over as
    /// segment `new` without zeroing it: their salts differ, and neither is
    /// a format-1 file's.
    pub fn may_reuse(old: u64, new: u64) -> bool {
        let (a, b) = (Salt::of_segment(old), Salt::of_segment(new));
        a != b && a != Salt::NONE && b != Salt::NONE && (old as u32) < (new as u32)
    }
}

impl SegmentHeader {
    /// The header `raw` was before one of its 64 bytes was damaged: the
    /// one header that a change of a single byte makes pass every check
    /// (magic, version, CRC, `first_seq` in range), or `None` if no single
    /// byte does, or more than one would (then the damage was not one byte
    /// and the CRC cannot say which).
    ///
    /// A CRC-32 tells every single-byte error in these 64 bytes apart
    /// (each gives its own syndrome, stored CRC xor computed CRC; the unit
    /// test below checks all 16,320), so one damaged byte is always found
    /// and put back. Damage of more bytes matches some single-byte syndrome
    /// with odds of about 16,320 in 2^32 (4 in a million), and the caller
    /// checks the result against what else it knows (the file name's id,
    /// the shard, the neighbouring segments).
    pub fn repair_one_byte(raw: &[u8; SEGMENT_HEADER_LEN]) -> Option<Self> {
        let mut found = None;
        for at in 0..SEGMENT_HEADER_LEN {
            let mut b = *raw;
            for value in 0..=u8::MAX {
                if value == raw[at] {
                    continue;
                }
                b[at] = value;
                if let Ok(Some(h)) = SegmentHeader::decode(&b) {
                    if found.is_some() {
                        return None;
                    }
                    found = Some(h);
                }
            }
        }
        found
    }
}

/// Per-record metadata stored beside the payload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecordMeta {
    /// Wire tier byte the record was pushed at (1 Sync, 2 Batched, 3 Buffered).
    pub tier: u8,
    /// When the daemon accepted the record, microseconds since the Unix epoch.
    pub arrival_unix_us: u64,
}

impl RecordMeta {
    pub fn pack(&self) -> u64 {
        (self.arrival_unix_us & ARRIVAL_MASK) | ((self.tier as u64) << 56)
    }

    pub fn unpack(v: u64) -> Self {
        RecordMeta {
            tier: (v >> 56) as u8,
            arrival_unix_us: v & ARRIVAL_MASK,
        }
    }
}

/// CRC of a record: covers the metadata and the payload.
pub fn record_crc(meta: u64, payload: &[u8]) -> u32 {
    PAYLOAD_HASHED.with(|c| c.set(c.get() + payload.len() as u64));
    let mut h = crc32fast::Hasher::new();
    h.update(&meta.to_le_bytes());
    h.update(payload);
    h.finalize()
}

/// [`record_crc`] of a payload of `len` bytes whose own CRC-32 is
/// `payload_crc` (computed by the wire check): the payload is not read
/// again, the CRC of the metadata is extended by the payload's.
pub fn record_crc_from(meta: u64, payload_crc: u32, len: u64) -> u32 {
    let mut h = crc32fast::Hasher::new();
    h.update(&meta.to_le_bytes());
    h.combine(&crc32fast::Hasher::new_with_initial_len(payload_crc, len));
    h.finalize()
}

thread_local! {
    static PAYLOAD_HASHED: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// Payload bytes [`record_crc`] has hashed on this thread so far (the test
/// that counts touches per byte reads it).
pub fn payload_bytes_hashed() -> u64 {
    PAYLOAD_HASHED.with(std::cell::Cell::get)
}

/// Bytes of record frames (headers and payloads, GAP frames included)
/// before `offset` in a segment file: everything past the segment header.
pub fn record_bytes(offset: u64) -> u64 {
    offset.saturating_sub(SEGMENT_HEADER_LEN as u64)
}

/// Encode a record header (the payload follows it on disk).
pub fn encode_record_header(len: u32, crc: u32, meta: u64) -> [u8; RECORD_HEADER_LEN] {
    debug_assert!(len > 0 && len <= RECORD_BYTES_MAX);
    let mut b = [0u8; RECORD_HEADER_LEN];
    b[0..4].copy_from_slice(&len.to_le_bytes());
    b[4..8].copy_from_slice(&crc.to_le_bytes());
    b[8..16].copy_from_slice(&meta.to_le_bytes());
    b
}

/// Running CRC over record CRCs, kept by the writer and checked by the footer.
#[derive(Debug, Clone, Default)]
pub struct RecordsCrc(crc32fast::Hasher);

impl RecordsCrc {
    pub fn new() -> Self {
        Self::default()
    }
    pub fn add(&mut self, record_crc: u32) {
        self.0.update(&record_crc.to_le_bytes());
    }
    pub fn value(&self) -> u32 {
        self.0.clone().finalize()
    }
}

/// A GAP frame: recovery writes it in place over damaged records so that
/// the records after them keep their positional sequence numbers.
///
/// ```text
/// 0..4   marker       u32 0xFFFF_FFFE (where a record's len would be)
/// 4..8   crc          u32, CRC-32 of bytes 8..16
/// 8..12  skip_bytes   u32, damaged bytes after the frame, left in place
/// 12..16 lost_records u32, positions (sequence numbers) the damage took
/// ```
/// A reader skips `16 + skip_bytes` bytes, counts `lost_records` positions
/// and adds `crc` to the running records CRC (so a footer written after
/// the salvage checks). The CRC is salted like a record's (see [`Salt`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GapFrame {
    pub skip_bytes: u32,
    pub lost_records: u32,
}

impl GapFrame {
    pub fn encode(&self, salt: Salt) -> [u8; GAP_FRAME_LEN] {
        let mut b = [0u8; GAP_FRAME_LEN];
        b[0..4].copy_from_slice(&GAP_MARKER.to_le_bytes());
        b[8..12].copy_from_slice(&self.skip_bytes.to_le_bytes());
        b[12..16].copy_from_slice(&self.lost_records.to_le_bytes());
        let crc = salt.apply(crc32fast::hash(&b[8..16]));
        b[4..8].copy_from_slice(&crc.to_le_bytes());
        b
    }

    /// The frame and its stored CRC, or `None` if `b` is not a valid GAP
    /// frame under `salt`.
    pub fn decode(b: &[u8], salt: Salt) -> Option<(GapFrame, u32)> {
        if b.len() < GAP_FRAME_LEN || u32_at(b, 0) != GAP_MARKER {
            return None;
        }
        let crc = u32_at(b, 4);
        if salt.apply(crc32fast::hash(&b[8..16])) != crc {
            return None;
        }
        Some((
            GapFrame {
                skip_bytes: u32_at(b, 8),
                lost_records: u32_at(b, 12),
            },
            crc,
        ))
    }

    /// Bytes from the frame's offset to the next record.
    pub fn span(&self) -> u64 {
        GAP_FRAME_LEN as u64 + self.skip_bytes as u64
    }

    /// The CRC stored in (and folded into the records CRC for) this frame.
    pub fn crc(&self, salt: Salt) -> u32 {
        u32_at(&self.encode(salt), 4)
    }
}

/// Written when a segment is sealed, right after its last record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Footer {
    pub record_count: u64,
    /// Offset of the footer itself: the end of the last record.
    pub end_offset: u64,
    /// Sequence number of the last record (first_seq - 1 when empty).
    pub last_seq: u64,
    pub records_crc: u32,
}

/// The footer's own CRC is salted like a record's (see [`Salt`]).
impl Footer {
    pub fn encode(&self, salt: Salt) -> [u8; FOOTER_LEN] {
        let mut b = [0u8; FOOTER_LEN];
        b[0..4].copy_from_slice(&FOOTER_MARKER.to_le_bytes());
        b[4..8].copy_from_slice(&FOOTER_MAGIC);
        b[8..16].copy_from_slice(&self.record_count.to_le_bytes());
        b[16..24].copy_from_slice(&self.end_offset.to_le_bytes());
        b[24..32].copy_from_slice(&self.last_seq.to_le_bytes());
        b[32..36].copy_from_slice(&self.records_crc.to_le_bytes());
        let crc = salt.apply(crc32fast::hash(&b[0..36]));
        b[36..40].copy_from_slice(&crc.to_le_bytes());
        b
    }

    pub fn decode(b: &[u8; FOOTER_LEN], salt: Salt) -> Result<Self, FormatError> {
        if u32_at(b, 0) != FOOTER_MARKER || b[4..8] != FOOTER_MAGIC {
            return Err(FormatError::BadFooter(
                "missing marker or \"SEAL\" magic".into(),
            ));
        }
        let stored = u32_at(b, 36);
        let computed = salt.apply(crc32fast::hash(&b[0..36]));
        if stored != computed {
            return Err(FormatError::BadFooter(format!(
                "CRC mismatch (stored {stored:#010x}, computed {computed:#010x})"
            )));
        }
        let last_seq = u64_at(b, 24);
        // As for a header's first_seq: the writer never goes past SEQ_MAX,
        // so a CRC-valid footer claiming more was not written by spillway
        // (or was damaged before its CRC was taken). Trusted, it floored
        // next_seq past the end of the numbering, and the checkpoint
        // written from it was refused by the next start. An empty segment
        // at seq 0 stores last_seq = u64::MAX (0 - 1), which is allowed.
        if last_seq.wrapping_add(1) > SEQ_MAX {
            return Err(FormatError::BadFooter(format!(
                "last_seq {last_seq} is past {SEQ_MAX}, the last sequence number spillway writes"
            )));
        }
        Ok(Footer {
            record_count: u64_at(b, 8),
            end_offset: u64_at(b, 16),
            last_seq,
            records_crc: u32_at(b, 32),
        })
    }
}

pub(crate) fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().unwrap())
}

pub(crate) fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().unwrap())
}

/// File name of an unsealed (active or preallocated) segment.
pub fn open_name(segment_id: u64) -> String {
    format!("{segment_id:016x}.open")
}

/// File name of a sealed segment.
pub fn sealed_name(segment_id: u64) -> String {
    format!("{segment_id:016x}.sealed")
}

/// File name of a delivered segment kept to be written over as a later
/// segment (see [`crate::segment::recycle`]): no longer a segment.
pub fn free_name(segment_id: u64) -> String {
    format!("{segment_id:016x}.free")
}

/// Kind and id of a WAB file, from its name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileKind {
    Open(u64),
    Sealed(u64),
    /// A preallocation that did not finish (`<id>.open.tmp`); never held records.
    PartialPrealloc,
    /// A delivered segment waiting to be written over (`<id>.free`): its
    /// records are all below the shard's checkpoint, and nothing reads it.
    Free(u64),
}

pub fn classify(name: &str) -> Option<FileKind> {
    if name.ends_with(".open.tmp") {
        return Some(FileKind::PartialPrealloc);
    }
    let (stem, ext) = name.split_once('.')?;
    if stem.len() != 16 {
        return None;
    }
    let id = u64::from_str_radix(stem, 16).ok()?;
    match ext {
        "open" => Some(FileKind::Open(id)),
        "sealed" => Some(FileKind::Sealed(id)),
        "free" => Some(FileKind::Free(id)),
        _ => None,
    }
}

pub fn now_unix_us() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_micros() as u64)
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue 17, proptest cc 01f58bc3: a CRC-valid footer whose last_seq
    /// lies past SEQ_MAX floored next_seq there; the checkpoint written
    /// from it was refused by the next start, so a second recovery changed
    /// the folder. Such a footer is damaged; the empty segment at seq 0
    /// (last_seq = 0 - 1) is not.
    #[test]
    fn a_footer_past_the_last_sequence_number_is_refused() {
        let footer = |last_seq| Footer {
            record_count: 0,
            end_offset: 64,
            last_seq,
            records_crc: 0,
        };
        for ok in [u64::MAX, 0, SEQ_MAX - 1] {
            assert_eq!(
                Footer::decode(&footer(ok).encode(Salt::NONE), Salt::NONE)
                    .unwrap()
                    .last_seq,
                ok
            );
        }
        for bad in [SEQ_MAX, 0x80ff_ffff_ffff_ffff, u64::MAX - 1] {
            let err = Footer::decode(&footer(bad).encode(Salt::NONE), Salt::NONE).unwrap_err();
            assert!(err.to_string().contains("past"), "{err}");
        }
    }

    #[test]
    fn header_round_trip_and_zero_header() {
        let h = SegmentHeader {
            format: FORMAT_VERSION,
            shard: 3,
            segment_id: 42,
            first_seq: 1000,
            created_unix_us: 7,
            skipped: 0,
        };
        assert_eq!(SegmentHeader::decode(&h.encode()).unwrap(), Some(h));
        assert_eq!(SegmentHeader::decode(&[0u8; 64]).unwrap(), None);
        let mut bad = h.encode();
        bad[20] ^= 1;
        assert!(matches!(
            SegmentHeader::decode(&bad),
            Err(FormatError::BadHeaderCrc { .. })
        ));
        bad = h.encode();
        bad[0] = b'X';
        assert!(matches!(
            SegmentHeader::decode(&bad),
            Err(FormatError::BadMagic(_))
        ));
    }

    /// Why [`SegmentHeader::repair_one_byte`] can trust what it finds: the
    /// CRC syndrome of a single-byte error depends only on the error (the
    /// CRC is linear), and no two of the 64 × 255 possible single-byte
    /// errors share one, so exactly one single-byte change undoes a
    /// single damaged byte.
    #[test]
    fn every_single_byte_error_in_a_header_has_its_own_crc_syndrome() {
        let h = SegmentHeader {
            format: FORMAT_VERSION,
            shard: 3,
            segment_id: 42,
            first_seq: 1000,
            created_unix_us: 7,
            skipped: 0,
        }
        .encode();
        let mut seen = std::collections::HashSet::new();
        for at in 0..SEGMENT_HEADER_LEN {
            for delta in 1..=u8::MAX {
                let mut b = h;
                b[at] ^= delta;
                let syndrome = u32_at(&b, 60) ^ crc32fast::hash(&b[0..60]);
                assert_ne!(syndrome, 0, "byte {at} ^ {delta:#04x} goes unnoticed");
                assert!(
                    seen.insert(syndrome),
                    "byte {at} ^ {delta:#04x} shares a syndrome"
                );
            }
        }
        assert_eq!(seen.len(), SEGMENT_HEADER_LEN * 255);
    }

    #[test]
    fn one_damaged_header_byte_is_put_back_and_two_are_not_guessed() {
        let h = SegmentHeader {
            format: FORMAT_VERSION,
            shard: 3,
            segment_id: 42,
            first_seq: 1_000_000,
            created_unix_us: 1_780_000_000_000_000,
            skipped: 0,
        };
        let good = h.encode();
        for at in [0, 7, 8, 12, 16, 24, 25, 31, 32, 45, 59, 60, 63] {
            for value in [0x00, 0x5A, 0xFF] {
                let mut bad = good;
                if bad[at] == value {
                    continue;
                }
                bad[at] = value;
                assert!(SegmentHeader::decode(&bad).is_err(), "byte {at}");
                assert_eq!(
                    SegmentHeader::repair_one_byte(&bad),
                    Some(h),
                    "byte {at} = {value}"
                );
            }
        }
        assert_eq!(
            SegmentHeader::repair_one_byte(&good),
            None,
            "nothing to repair"
        );
        // Two damaged bytes: no single change makes it valid (here), and
        // nothing is made up.
        let mut two = good;
        two[24] ^= 0x01;
        two[33] ^= 0x80;
        assert_eq!(SegmentHeader::repair_one_byte(&two), None);
        assert_eq!(SegmentHeader::repair_one_byte(&[0u8; 64]), None);
    }

    #[test]
    fn a_record_crc_from_the_payload_crc_is_the_record_crc() {
        for len in [1usize, 5, 4095, 4096, 65536, 100_003] {
            let payload: Vec<u8> = (0..len).map(|i| (i * 7 + len) as u8).collect();
            let meta = 0x0123_4567_89ab_cdefu64 ^ len as u64;
            assert_eq!(
                record_crc_from(meta, crc32fast::hash(&payload), len as u64),
                record_crc(meta, &payload),
                "len {len}"
            );
        }
    }

    #[test]
    fn footer_round_trip() {
        let f = Footer {
            record_count: 9,
            end_offset: 4096,
            last_seq: 77,
            records_crc: 0xdead,
        };
        let salt = Salt::of_segment(5);
        assert_eq!(Footer::decode(&f.encode(salt), salt).unwrap(), f);
        assert_eq!(
            Footer::decode(&f.encode(Salt::NONE), Salt::NONE).unwrap(),
            f
        );
        let mut bad = f.encode(salt);
        bad[9] ^= 0x80;
        assert!(Footer::decode(&bad, salt).is_err());
        // Another use's footer fails this one's check.
        assert!(Footer::decode(&f.encode(Salt::of_segment(4)), salt).is_err());
        assert!(Footer::decode(&f.encode(Salt::NONE), salt).is_err());
    }

    #[test]
    fn gap_frame_round_trip_and_crc() {
        let g = GapFrame {
            skip_bytes: 1234,
            lost_records: 3,
        };
        let salt = Salt::of_segment(9);
        let b = g.encode(salt);
        assert_eq!(GapFrame::decode(&b, salt), Some((g, g.crc(salt))));
        assert_eq!(GapFrame::decode(&b, Salt::NONE), None);
        assert_eq!(GapFrame::decode(&b, Salt::of_segment(8)), None);
        for i in 0..GAP_FRAME_LEN {
            let mut bad = b;
            bad[i] ^= 0x10;
            assert_eq!(GapFrame::decode(&bad, salt), None, "byte {i}");
        }
    }

    #[test]
    fn a_salt_names_its_segment_and_tells_earlier_uses_apart() {
        assert_eq!(SALT_MULTIPLIER.wrapping_mul(SALT_INVERSE), 1);
        for id in [0u64, 1, 2, 77, 1 << 20, u32::MAX as u64 - 2000] {
            let salt = Salt::of_segment(id);
            assert_ne!(salt, Salt::NONE, "id {id}");
            assert_eq!(salt.id() as u64, id, "id {id}");
            assert!(!salt.is_earlier(salt));
            assert!(salt.is_earlier(Salt::NONE), "a format-1 use came earlier");
            if id > 0 {
                assert!(salt.is_earlier(Salt::of_segment(id - 1)));
                assert!(salt.is_earlier(Salt::of_segment(0)));
            }
            assert!(!salt.is_earlier(Salt::of_segment(id + 1)), "a later id");
            // A syndrome that is no salt of an id below this one: damage.
            assert!(!salt.is_earlier(Salt(Salt::of_segment(id + 1000).0)));
        }
        // Format 1 tells nothing apart.
        assert!(!Salt::NONE.is_earlier(Salt::of_segment(3)));
        // The one id whose salt is 0, and ids 2^32 apart, are never reused.
        assert_eq!(Salt::of_segment(u32::MAX as u64), Salt::NONE);
        assert!(!Salt::may_reuse(3, u32::MAX as u64));
        assert!(!Salt::may_reuse(3, 3 + (1 << 32)));
        assert!(!Salt::may_reuse(9, 4), "an older id");
        assert!(Salt::may_reuse(4, 9));
    }

    #[test]
    fn format_1_headers_are_still_read() {
        let mut h = SegmentHeader::new(1, 2, 3, 4);
        assert_eq!(h.format, FORMAT_VERSION);
        assert_eq!(h.salt(), Salt::of_segment(2));
        h.format = FORMAT_1;
        let back = SegmentHeader::decode(&h.encode()).unwrap().unwrap();
        assert_eq!(back, h);
        assert_eq!(back.salt(), Salt::NONE);
        h.format = 3;
        assert!(matches!(
            SegmentHeader::decode(&h.encode()),
            Err(FormatError::BadVersion(3))
        ));
    }

    #[test]
    fn meta_packs_tier_and_time() {
        let m = RecordMeta {
            tier: 3,
            arrival_unix_us: 1_780_000_000_000_000,
        };
        assert_eq!(RecordMeta::unpack(m.pack()), m);
    }

    #[test]
    fn names_classify() {
        assert_eq!(classify(&open_name(5)), Some(FileKind::Open(5)));
        assert_eq!(classify(&sealed_name(255)), Some(FileKind::Sealed(255)));
        assert_eq!(
            classify("0000000000000005.open.tmp"),
            Some(FileKind::PartialPrealloc)
        );
        assert_eq!(classify(&free_name(7)), Some(FileKind::Free(7)));
        assert_eq!(classify("checkpoint"), None);
    }
}
