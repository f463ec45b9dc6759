//! A segment whose header fails its check: prove its first sequence
//! number and rewrite the header, or count its records as lost.
//!
//! Records carry no sequence number of their own: the n-th record of a
//! segment (from 0) is `first_seq + n`, and only the header says
//! `first_seq`. Everything else in the file is self-describing (each
//! record has its length and CRC), so with the header damaged the records
//! can still be read; what is missing is their numbers. A record delivered
//! under a wrong number is worse than one not delivered (the number is its
//! identity at the sink, and the idempotency key built from it would name
//! another record), so the header is rewritten only from something that
//! proves `first_seq`:
//!
//! 1. **The segment's own footer** (a sealed segment's, or one a crashed
//!    seal left in an `.open` file): CRC-checked, at the offset it names
//!    (right after the records read, or the last 40 bytes of the file),
//!    and, where it follows the records read, counting them and their CRCs.
//!    `first_seq = last_seq + 1 - record_count`. The sealer wrote both
//!    numbers for this file, so the footer binds the numbering to it as
//!    the header did.
//! 2. **The header itself, its one damaged byte put back**
//!    ([`SegmentHeader::repair_one_byte`]): the CRC-32 tells every
//!    single-byte error in the 64 bytes apart, so a single flipped byte is
//!    found and undone; the result must name this file's segment id and
//!    this shard. (When the footer proves a value too, the two must agree,
//!    or the footer's is used.)
//!
//! Either way the value must fit the segments around it (no segment with a
//! lower id starts past it, none with a higher id before it, and no number
//! passes `SEQ_MAX`), and the file must hold at least one intact record.
//! The damaged 64 bytes are copied to `quarantine/<id>.damaged-header`
//! (with a `.reason`) first, then the header is written in place and
//! fsynced: no new space is needed, a rerun after a crash finds the header
//! valid (or does the same again), and recovery then goes on with the
//! segment as with any other. Nothing is lost.
//!
//! **Not used as proof:** the previous segment's end, the next segment's
//! first number and the checkpoint. A segment usually starts where the one
//! before it ends, but not always: a restart may start it higher (past a
//! floor from the checkpoint or the quarantine), after a failed write it
//! starts lower (over the failed records, which are cut from the older
//! segment), a power cut may take the older segment's unsynced tail, and
//! the checkpoint may stand anywhere inside a segment. Alone, none of them
//! fixes the number, and a wrong guess would shift every record.
//!
//! **With no proof** (more than one byte of the header damaged and no
//! footer that counts), the file is moved to `quarantine/` whole and its
//! intact records (those whose own length and CRC check out) are counted as
//! lost: an [`Unnumbered`] in the report. `open_shard` counts them as the
//! gap they leave before a newer segment when there is one (exact: the
//! numbers missing at or past the checkpoint). When the file is the newest,
//! its intact records are the count, as a gap of that many numbers past
//! the clock's floor (µs since the epoch: the writer may have started the
//! file past numbers it skipped after a failed group, so numbers "right
//! after everything the shard shows" could hand one its records carry out
//! again), written into its name in quarantine
//! (`<name>.seqs-<first>-<last>.after-<end>`, a rename: no space needed) so
//! that later starts keep `next_seq` past them, no number its records may
//! carry is handed out again (some may have been delivered already:
//! recovery cannot tell which), and the jump from `<end>` is not counted.

use std::io::{self, IoSlice};
use std::path::{Path, PathBuf};

use crate::format::{Footer, SegmentHeader, FOOTER_LEN, FORMATS_READ, SEGMENT_HEADER_LEN, SEQ_MAX};
use crate::quarantine::{quarantine, save_copy, QUARANTINE_DIR};
use crate::reader::SegmentReader;
use crate::salvage::count_intact;
use crate::storage::{read_full_at, Storage, StorageFile};

/// A damaged header rewritten in place from what proves it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeaderRepair {
    pub segment_id: u64,
    /// What failed the check.
    pub damage: String,
    /// Where the first sequence number came from.
    pub proof: HeaderProof,
    pub first_seq: u64,
    /// Intact records the segment holds, all kept under their numbers.
    pub records: u64,
    /// Copy of the damaged 64 bytes in `quarantine/` (`None` if it could
    /// not be written, e.g. for lack of space).
    pub saved_to: Option<PathBuf>,
}

/// What proved a damaged header's first sequence number.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HeaderProof {
    /// The segment's footer (`last_seq + 1 - record_count`).
    Footer,
    /// The header with the byte at `offset` put back.
    OneByte { offset: usize },
    /// Both, agreeing.
    FooterAndOneByte { offset: usize },
}

impl std::fmt::Display for HeaderProof {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            HeaderProof::Footer => write!(f, "its footer"),
            HeaderProof::OneByte { offset } => {
                write!(f, "the header itself, its damaged byte {offset} put back")
            }
            HeaderProof::FooterAndOneByte { offset } => write!(
                f,
                "its footer and the header itself (damaged byte {offset} put back), which agree"
            ),
        }
    }
}

/// A segment whose header is damaged beyond proof, moved to `quarantine/`
/// whole: its records cannot be numbered, so they are lost.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unnumbered {
    pub segment_id: u64,
    /// Intact records in it (their own length and CRC check out).
    pub records: u64,
    /// Where it now is.
    pub path: PathBuf,
    /// Counted by `open_shard` as a gap (`records` is then not added to
    /// `lost_records` again): the one they leave before a newer segment
    /// (kept, or in quarantine with a known range), or, for the newest, a
    /// gap of `records` numbers right after everything the shard shows,
    /// which `next_seq` then passes.
    pub counted_by_gap: bool,
}

/// Rewrite the damaged header of segment `id` at `path` if its footer or
/// the header itself proves `first_seq` (see the module docs); what was
/// done (with the proven `first_seq`), or `None` (the file is left as it
/// is, for the caller to quarantine). `starts` holds the (id, first_seq) of the segments whose
/// header is valid.
#[allow(clippy::too_many_arguments)]
pub(crate) fn repair<S: Storage>(
    storage: &S,
    dir: &Path,
    path: &Path,
    id: u64,
    shard: u32,
    damage: &str,
    starts: &[(u64, u64)],
) -> io::Result<Option<HeaderRepair>> {
    // Read-write: the header is rewritten in place.
    let file = storage.open(path)?;
    let mut raw = [0u8; SEGMENT_HEADER_LEN];
    if read_full_at(&file, 0, &mut raw)? < SEGMENT_HEADER_LEN {
        return Ok(None);
    }
    let Some(walked) = walk_unnumbered(file, id)? else {
        // Nothing to number (a torn first write, or nothing but damage).
        return Ok(None);
    };
    let Some((header, proof)) = proven_header(&walked, &raw, id, shard)? else {
        return Ok(None);
    };
    let Walked { walk, records, .. } = walked;
    if !fits(starts, id, header.first_seq, walk.count()) {
        tracing::warn!(segment = id, path = %path.display(), first_seq = header.first_seq, %proof,
            "a damaged header's repair does not fit the segments around it; not used");
        return Ok(None);
    }
    let file_name = path.file_name().and_then(|n| n.to_str()).unwrap_or("?");
    let reason = format!(
        "the header of segment {id} ({file_name}) failed its check: {damage}; rewritten in place \
         from {proof}: first_seq {}, {records} record(s) kept under their numbers, none lost",
        header.first_seq
    );
    let mut file = walk.into_file();
    let name = format!("{id:016x}.damaged-header");
    let saved_to = save_copy(
        storage,
        dir,
        &file,
        &name,
        0,
        SEGMENT_HEADER_LEN as u64,
        &reason,
    )?;
    file.write_all_at(0, &[IoSlice::new(&header.encode())])?;
    file.sync_all()?;
    tracing::error!(
        segment = id,
        path = %path.display(),
        first_seq = header.first_seq,
        records,
        damage,
        %proof,
        "rewrote the damaged header of a segment from what proves its first sequence number; no record lost"
    );
    Ok(Some(HeaderRepair {
        segment_id: id,
        damage: damage.to_string(),
        proof,
        first_seq: header.first_seq,
        records,
        saved_to,
    }))
}

/// A segment read with no header to trust.
struct Walked<F> {
    /// The reader, at the end of the records.
    walk: SegmentReader<F>,
    /// The format the records check out under.
    format: u32,
    /// Intact records read.
    records: u64,
    /// The first record's arrival time.
    first_arrival: Option<u64>,
}

/// Reads the records of segment `id` with no header to trust. The header
/// cannot say the format: the records are read under this build's first,
/// under format 1 if none checks out that way. `None` when no intact record
/// checks out under any.
fn walk_unnumbered<F: StorageFile>(file: F, id: u64) -> io::Result<Option<Walked<F>>> {
    let mut file = Some(file);
    for format in FORMATS_READ {
        let mut walk = SegmentReader::unnumbered(file.take().expect("put back below"), format, id);
        let mut first_arrival = None;
        while let Some(r) = walk.next()? {
            first_arrival.get_or_insert(r.meta.arrival_unix_us);
        }
        let records = walk.count() - walk.lost_records();
        if records > 0 {
            return Ok(Some(Walked {
                walk,
                format,
                records,
                first_arrival,
            }));
        }
        file = Some(walk.into_file());
    }
    Ok(None)
}

/// The header of segment `id` of `shard` (whose damaged bytes are `raw`)
/// as what survives proves it, with the proof: the footer's count, one
/// changed byte, or both agreeing. `None` when nothing proves it.
fn proven_header<F: StorageFile>(
    walked: &Walked<F>,
    raw: &[u8; SEGMENT_HEADER_LEN],
    id: u64,
    shard: u32,
) -> io::Result<Option<(SegmentHeader, HeaderProof)>> {
    let format = walked.format;
    let from_footer = footer_proof(&walked.walk)?;
    let one_byte = SegmentHeader::repair_one_byte(raw)
        .filter(|h| h.segment_id == id && h.shard == shard && h.format == format)
        .map(|h| (h, changed_byte(raw, &h.encode())));
    Ok(match (from_footer, one_byte) {
        (Some(first), Some((h, offset))) if h.first_seq == first => {
            Some((h, HeaderProof::FooterAndOneByte { offset }))
        }
        (Some(first), _) => Some((
            SegmentHeader {
                format,
                shard,
                segment_id: id,
                first_seq: first,
                // Not known any more; the first record's arrival is the
                // closest the file still shows (nothing reads it).
                created_unix_us: walked.first_arrival.unwrap_or(0),
                // Not known either: numbers the writer skipped before this
                // segment then show as a gap (counted, never reused).
                skipped: 0,
            },
            HeaderProof::Footer,
        )),
        (None, Some((h, offset))) => Some((h, HeaderProof::OneByte { offset })),
        (None, None) => None,
    })
}

/// Move segment `id` at `path`, whose header failed its check (`damage`)
/// and could not be repaired, to `quarantine/` whole, and count its intact
/// records as lost (see the module docs): the [`Unnumbered`] to count,
/// `None` when it held no intact record. The move is listed in
/// `quarantined`.
pub(crate) fn quarantine_unnumbered<S: Storage>(
    storage: &S,
    dir: &Path,
    path: &Path,
    id: u64,
    damage: &str,
    quarantined: &mut Vec<(PathBuf, String)>,
) -> io::Result<Option<Unnumbered>> {
    let records = count_intact(&storage.open_read(path)?, SEGMENT_HEADER_LEN as u64, id)?;
    if records == 0 {
        quarantine(storage, dir, path, damage, quarantined)?;
        return Ok(None);
    }
    let reason = format!(
        "{damage}; nothing proves the segment's first sequence number (no footer that counts \
         its records, more than one byte of the header damaged), so its {records} intact \
         record(s) cannot be numbered: they are lost (counted in records_lost), never delivered \
         under a guessed number"
    );
    quarantine(storage, dir, path, &reason, quarantined)?;
    let name = path.file_name().unwrap_or_default();
    let moved = dir.join(QUARANTINE_DIR).join(name);
    tracing::error!(
        segment = id,
        path = %moved.display(),
        lost_records = records,
        damage,
        "a segment's header is damaged and nothing proves its first sequence number: its intact \
         records cannot be numbered and are lost (the file is kept in quarantine)"
    );
    Ok(Some(Unnumbered {
        segment_id: id,
        records,
        path: moved,
        counted_by_gap: false,
    }))
}

/// `first_seq` from the footer of a segment read (headerless) by `walk`:
/// one right where its records end that counts them, or, a sealed
/// segment's, the last 40 bytes of the file. `None` when neither decodes
/// and sits at the offset it names.
fn footer_proof<F: StorageFile>(walk: &SegmentReader<F>) -> io::Result<Option<u64>> {
    let file = walk.file_ref();
    let len = file.len()?;
    let end = walk.offset();
    let mut candidates = vec![end];
    if let Some(last) = len.checked_sub(FOOTER_LEN as u64) {
        if last != end {
            candidates.push(last);
        }
    }
    for at in candidates {
        if at < SEGMENT_HEADER_LEN as u64 || at + FOOTER_LEN as u64 > len {
            continue;
        }
        let mut raw = [0u8; FOOTER_LEN];
        if read_full_at(file, at, &mut raw)? < FOOTER_LEN {
            continue;
        }
        let Ok(f) = Footer::decode(&raw, walk.header().salt()) else {
            continue;
        };
        if f.end_offset != at {
            continue;
        }
        // Right after the records read, it must count them; at the end of
        // a file whose records stop earlier (damage the segment's salvage
        // handles next), it must count at least them.
        let counts = if at == end {
            f.record_count == walk.count() && f.records_crc == walk.records_crc()
        } else {
            f.record_count >= walk.count()
        };
        if !counts {
            continue;
        }
        if let Some(first) = f.last_seq.wrapping_add(1).checked_sub(f.record_count) {
            return Ok(Some(first));
        }
    }
    Ok(None)
}

/// Whether a segment with id `id` starting at `first` and holding
/// `positions` numbers fits the segments whose header is valid: sequence
/// numbers grow with ids (a newer segment starts at or past an older one's
/// first number), and none passes `SEQ_MAX`.
fn fits(starts: &[(u64, u64)], id: u64, first: u64, positions: u64) -> bool {
    let in_range = first
        .checked_add(positions)
        .is_some_and(|end| end <= SEQ_MAX);
    in_range
        && starts.iter().all(|&(other, start)| {
            (other >= id || start <= first) && (other <= id || start >= first)
        })
}

/// The offset of the one byte in which `a` and `b` differ.
fn changed_byte(a: &[u8; SEGMENT_HEADER_LEN], b: &[u8; SEGMENT_HEADER_LEN]) -> usize {
    (0..SEGMENT_HEADER_LEN).find(|&i| a[i] != b[i]).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::fits;

    #[test]
    fn a_repaired_first_seq_must_fit_its_neighbours() {
        let starts = [(1, 100), (3, 300)];
        assert!(fits(&starts, 2, 100, 10));
        assert!(fits(&starts, 2, 200, 10));
        assert!(fits(&starts, 2, 300, 10));
        assert!(!fits(&starts, 2, 99, 10), "below an older segment's start");
        assert!(!fits(&starts, 2, 301, 10), "past a newer segment's start");
        assert!(fits(&starts, 4, 300, 10));
        assert!(!fits(&[], 0, super::SEQ_MAX, 1), "past SEQ_MAX");
        assert!(!fits(&[], 0, u64::MAX, 1), "overflows");
    }
}
