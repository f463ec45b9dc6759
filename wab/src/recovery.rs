//! Crash recovery of one shard directory, run before the shard accepts writes.
//!
//! - `*.open.tmp`: a preallocation that never finished; it never held a
//!   record, so it is removed.
//! - `*.free`: a delivered segment retention set aside to be written over
//!   as a later one ([`crate::segment::recycle`]); every record in it is
//!   below the checkpoint, so it is removed.
//! - A segment (`*.sealed` or `*.open`) whose **header** fails its check
//!   (or is all zeros with records after it): see [`crate::damaged_header`].
//!   Its records carry no sequence number of their own (numbering is
//!   positional: `first_seq` + position), so the header is rewritten in
//!   place only from something that proves `first_seq` (the segment's own
//!   footer, or the header itself with its one damaged byte put back),
//!   after the damaged bytes are copied to `quarantine/`; the segment is
//!   then recovered like any other and nothing is lost. With no proof it
//!   is moved to `quarantine/` whole and its records are counted as lost
//!   ([`Unnumbered`]); they are never delivered under a guessed number.
//! - `*.sealed`: verified end to end (header, every record CRC, footer).
//!   Damaged records are salvaged in place (see [`crate::salvage`]): a GAP
//!   frame replaces them, the footer is rewritten, every other record stays
//!   under its own sequence number. A sealed segment that cannot be
//!   salvaged whole (cut short, its footer gone, or damage whose size
//!   nothing counts) keeps the records before the damage, and those after
//!   it whose number is still known, and is sealed again where they end
//!   ([`CutShort`]); the bytes cut go to `quarantine/<id>.cut-at-<offset>`
//!   first. The records lost with its end are counted by
//!   [`crate::shard::open_shard`] as the gap before the next segment, which
//!   starts where this one ended. A segment with no intact record left is
//!   moved to `quarantine/` whole, never deleted.
//! - `*.open` with an all-zero header (and nothing after it): a spare
//!   preallocated segment, kept for reuse if it is newer than every used
//!   segment.
//! - `*.open` with a good header: damage in the middle (valid records after
//!   it) is salvaged like a sealed segment's; a bad record with nothing
//!   valid after it is a torn write (a group whose fdatasync never
//!   returned, so it was never acked): the non-zero bytes from there are
//!   copied to `quarantine/` first, then the segment is sealed at the cut.
//!
//! - `*.open` whose records run past the first seq of a newer segment: the
//!   overlap was written by an append that failed (the writer abandoned the
//!   segment and reused those seqs in the next one); it is cut the same way.
//! - a segment file that is only a footer (sealed before its first record,
//!   so it never got a header) holds nothing and is removed.
//! - anything else under a segment's name (a directory, a FIFO) stops the
//!   start with its path and what it is: it is not spillway's.
//!
//! Segments in `quarantine/` still count: `next_seq` is past every sequence
//! number their header, intact records or footer show, and
//! `next_segment_id` past their ids, so neither is ever reused.
//!
//! Every step is idempotent: a crash during recovery followed by another
//! recovery gives the same directory.
//!
//! Nothing here needs free space to make progress: headers, footers and
//! GAP frames are written in place, sealing truncates, moving a file is a
//! rename (a sealed segment cut exactly at a record boundary grows by its
//! 40-byte footer). The copies and `.reason` files written to `quarantine/`
//! are evidence, not data the shard needs: on ENOSPC they are logged and
//! skipped.

use std::collections::HashMap;
use std::io::{self, IoSlice};
use std::path::{Path, PathBuf};

use crate::damaged_header::{self, HeaderRepair, Unnumbered};
use crate::format::{
    classify, sealed_name, FileKind, Footer, GapFrame, Salt, SegmentHeader, FOOTER_LEN,
    SEGMENT_HEADER_LEN,
};
use crate::quarantine::{quarantine, save_copy, save_copy_once};
use crate::reader::{End, Opened, PassedGap, SegmentReader};
use crate::salvage::{self, footer_like, Hole};
use crate::segment::{seal, Preallocated, Sealing};
use crate::storage::{create_dir_durable, read_full_at, Storage, StorageFile};

pub use crate::quarantine::QUARANTINE_DIR;

/// A sealed, verified segment, in sequence order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SegmentInfo {
    pub path: PathBuf,
    pub segment_id: u64,
    pub first_seq: u64,
    /// Numbers just below `first_seq` the writer skipped on purpose (its
    /// header's `skipped`): never given to a record a reader got, so not a
    /// gap.
    pub skipped: u64,
    /// Positions (sequence numbers) the segment covers: its records plus
    /// the records its GAP frames say were lost.
    pub record_count: u64,
    /// Bytes of header and records (the file is this plus the footer);
    /// what the segment counts against `wab_bytes_max`.
    pub bytes: u64,
    /// Records lost to damage inside the segment (GAP frames), now or in
    /// an earlier recovery. 0 while `checked` is false (not counted yet).
    pub lost_records: u64,
    /// Its records were read and checked by this recovery. False: a
    /// sealed segment taken at its footer's word ([`SealedCheck::Footer`]),
    /// whose records [`check_sealed`] is still to read.
    pub checked: bool,
}

/// Damaged records in a segment replaced in place by a GAP frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Salvaged {
    pub segment_id: u64,
    /// Offset of the damaged bytes (now the GAP frame).
    pub offset: u64,
    /// Length of the damaged stretch, frame included.
    pub damaged_bytes: u64,
    pub lost_records: u64,
    /// First and last sequence number lost (inclusive).
    pub lost_seqs: (u64, u64),
    /// Intact records the segment keeps.
    pub kept_records: u64,
    /// Copy of the damaged bytes in `quarantine/` (`None` if it could not
    /// be written, e.g. for lack of space).
    pub saved_to: Option<PathBuf>,
}

/// Sequence numbers no file holds any more: a segment deleted from outside
/// (between two segments, or between the checkpoint and the oldest one).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SeqGap {
    /// First and last missing sequence number (inclusive).
    pub first: u64,
    pub last: u64,
    /// The `quarantine/gap-<first>-<last>.reason` file (`None` if it could
    /// not be written).
    pub reason_file: Option<PathBuf>,
    /// Found by this start (false: an earlier start reported it already).
    pub new: bool,
}

impl SeqGap {
    pub fn count(&self) -> u64 {
        self.last - self.first + 1
    }
}

/// A sealed segment that could not be salvaged whole (cut short, its
/// footer gone, or damage whose size nothing counts): sealed again after
/// the records whose numbers are still known; the rest is lost.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CutShort {
    pub segment_id: u64,
    /// Where the kept records end (the new footer's offset).
    pub offset: u64,
    /// Intact records kept.
    pub kept_records: u64,
    /// One past the last sequence number kept: the lost records start
    /// here and run to the next segment's first (`open_shard` counts them
    /// as that gap).
    pub end_seq: u64,
    /// One past the last sequence number the segment held, when its old
    /// footer still says (it agrees with the header): the count of what was
    /// lost even with no next segment. `next_seq` is kept past it.
    pub known_end: Option<u64>,
    /// Bytes cut from `offset` to the old end of the file.
    pub cut_bytes: u64,
    /// What was wrong at `offset`.
    pub detail: String,
    /// Copy of the cut bytes in `quarantine/` (`None` if there were none,
    /// or no space for them).
    pub saved_to: Option<PathBuf>,
}

/// A segment file in `quarantine/`, as far as its bytes still say.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QuarantinedSegment {
    pub segment_id: u64,
    /// Its file name in `quarantine/`.
    pub name: String,
    /// The sequence numbers `[first, end)` it is known to cover (possibly
    /// none): from a valid header (`first_seq` up to its last intact
    /// record) or, without one, from a valid footer at the end of the file.
    /// `None` when neither says (its records cannot be numbered).
    pub range: Option<(u64, u64)>,
}

/// A checkpoint that claimed more than the data holds (see `open_shard`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UntrustedCheckpoint {
    /// The value it held, kept as a floor for new sequence numbers.
    pub value: u64,
    /// One past the highest sequence number any segment shows.
    pub data_end: u64,
    pub moved_to: PathBuf,
}

/// What recovery found and did; logged at start-up.
#[derive(Debug, Default)]
pub struct RecoveryReport {
    pub shard: u32,
    /// Every verified segment, ordered by first sequence number.
    pub segments: Vec<SegmentInfo>,
    /// Unsealed segments that were cut at their first bad record and sealed:
    /// (segment id, records kept, bytes cut).
    pub resealed: Vec<(u64, u64, u64)>,
    /// Files moved aside: (new path, reason).
    pub quarantined: Vec<(PathBuf, String)>,
    /// Unfinished preallocations removed.
    pub removed_partial: usize,
    /// Delivered segments that were waiting to be written over (`.free`)
    /// removed: a start does not carry them over.
    pub removed_free: usize,
    /// Damaged records replaced by GAP frames (this start, or an earlier
    /// one that crashed before the segment's footer or seal was written).
    pub salvaged: Vec<Salvaged>,
    /// Sealed segments whose footer alone was damaged and has been
    /// rewritten from the (intact) records: (segment id, what was wrong).
    pub footers_repaired: Vec<(u64, String)>,
    /// Segments whose damaged header was rewritten from what proves it
    /// (nothing lost).
    pub headers_repaired: Vec<HeaderRepair>,
    /// Segments whose header is damaged beyond proof: quarantined whole,
    /// their records lost.
    pub unnumbered: Vec<Unnumbered>,
    /// Sealed segments sealed again short of their old end.
    pub cut_short: Vec<CutShort>,
    /// Every segment file in `quarantine/` (moved now or earlier).
    pub in_quarantine: Vec<QuarantinedSegment>,
    /// The ranges `quarantine/gap-<first>-<last>.reason` files record
    /// (first, last): numbers an earlier start found lost, never handed
    /// out again.
    pub recorded_gaps: Vec<(u64, u64)>,
    /// Sequence ranges no file holds (filled by `open_shard`).
    pub gaps: Vec<SeqGap>,
    /// Records known lost: every salvaged hole, the records of every
    /// unnumbered segment, and every gap above (`open_shard` leaves out
    /// the unnumbered records that a gap already counts).
    pub lost_records: u64,
    /// Set when the checkpoint was ahead of the data (by `open_shard`).
    pub untrusted_checkpoint: Option<UntrustedCheckpoint>,
    /// The sequence number the next record will get.
    pub next_seq: u64,
    /// The id the next preallocated segment will get.
    pub next_segment_id: u64,
}

impl RecoveryReport {
    /// Records held (positions minus records lost inside segments).
    pub fn record_count(&self) -> u64 {
        self.segments
            .iter()
            .map(|s| s.record_count - s.lost_records)
            .sum()
    }

    /// How many of the records kept lie below `seq` (at a start: below
    /// the shard's checkpoint, so every sink has them and they only wait
    /// for their segment to be deleted). Records lost to damage count
    /// against the part of their segment above `seq` first.
    pub fn records_below(&self, seq: u64) -> u64 {
        self.segments
            .iter()
            .map(|s| {
                let below = seq.saturating_sub(s.first_seq).min(s.record_count);
                let kept = s.record_count - s.lost_records;
                below.min(kept)
            })
            .sum()
    }

    pub fn bytes(&self) -> u64 {
        self.segments.iter().map(|s| s.bytes).sum()
    }

    /// The segments taken at their footer's word, whose records
    /// [`check_sealed`] is still to read, in id order (the order to check
    /// them in).
    pub fn unchecked(&self) -> Vec<&SegmentInfo> {
        let mut found: Vec<&SegmentInfo> = self.segments.iter().filter(|s| !s.checked).collect();
        found.sort_unstable_by_key(|s| s.segment_id);
        found
    }

    /// Records this start found lost (an ERROR at start-up): the salvaged
    /// holes, the unnumbered records no gap counts, and the gaps not
    /// reported by an earlier start. (`lost_records` also keeps counting
    /// gaps an earlier start reported.)
    pub fn new_losses(&self) -> u64 {
        self.salvaged.iter().map(|s| s.lost_records).sum::<u64>()
            + self
                .unnumbered
                .iter()
                .filter(|u| !u.counted_by_gap)
                .map(|u| u.records)
                .sum::<u64>()
            + self
                .gaps
                .iter()
                .filter(|g| g.new)
                .map(|g| g.count())
                .sum::<u64>()
    }
}

/// A recovered shard: the report plus spare preallocated segments to reuse.
pub struct Recovered<F> {
    pub report: RecoveryReport,
    pub spares: Vec<Preallocated<F>>,
}

/// How recovery treats a sealed segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SealedCheck {
    /// Read and check every record now, and salvage what is damaged: the
    /// time recovery takes grows with the backlog.
    #[default]
    Records,
    /// Take a segment whose footer is intact, agrees with its header and
    /// ends the file at the footer's word: its header and footer are read,
    /// not its records, so a start costs the open segment plus a constant
    /// per sealed one. Its [`SegmentInfo::checked`] is false, and the
    /// caller must run [`check_sealed`] on it before any reader opens it
    /// (the daemon does so in the background, in id order, and holds its
    /// drains behind). Any other sealed segment is checked in full.
    Footer,
}

/// Recover `dir` (created 0700 if missing). `min_next_seq` is a floor for
/// the next sequence number (the drain checkpoint, so sequence numbers are
/// never reused after every segment was deleted). Every record of every
/// segment is checked ([`SealedCheck::Records`]).
pub fn recover_shard<S: Storage>(
    storage: &S,
    dir: &Path,
    shard: u32,
    min_next_seq: u64,
) -> io::Result<Recovered<S::File>> {
    recover_shard_with(storage, dir, shard, min_next_seq, SealedCheck::Records)
}

/// [`recover_shard`], with sealed segments treated as `check` says.
pub fn recover_shard_with<S: Storage>(
    storage: &S,
    dir: &Path,
    shard: u32,
    min_next_seq: u64,
    check: SealedCheck,
) -> io::Result<Recovered<S::File>> {
    // The shard folder (and data_dir if missing) must be a durable name
    // before any record in it is acknowledged.
    create_dir_durable(storage, dir)?;
    let mut report = RecoveryReport {
        shard,
        next_seq: min_next_seq,
        ..Default::default()
    };
    let entries = segment_files(storage, dir)?;
    let Headers {
        mut starts,
        damaged,
        mut trusted,
    } = read_headers(storage, dir, &entries, check)?;
    // Damaged headers are rewritten first, from what proves them, so that
    // every other step sees the segment as it was written.
    for (id, path, damage) in damaged {
        if let Some(repaired) =
            damaged_header::repair(storage, dir, &path, id, shard, &damage, &starts)?
        {
            starts.push((id, repaired.first_seq));
            report.headers_repaired.push(repaired);
        }
    }
    let mut max_id: Option<u64> = None;
    let mut spare_candidates = Vec::new();
    for (kind, path) in entries {
        if let FileKind::Free(id) | FileKind::Sealed(id) | FileKind::Open(id) = kind {
            // Ids only ever grow: a freed segment's id still counts.
            max_id = Some(max_id.map_or(id, |m| m.max(id)));
        }
        match kind {
            FileKind::PartialPrealloc => {
                storage.remove(&path)?;
                report.removed_partial += 1;
            }
            FileKind::Free(_) => {
                // Every record in it is below the checkpoint (retention
                // renamed it only after writing that): nothing to keep.
                storage.remove(&path)?;
                report.removed_free += 1;
            }
            FileKind::Sealed(id) => match trusted.remove(&id) {
                Some(info) => report.segments.push(info),
                None => recover_sealed(storage, dir, &path, id, &mut report)?,
            },
            FileKind::Open(id) => {
                let newer_first_seq = starts
                    .iter()
                    .filter(|(i, _)| *i > id)
                    .map(|(_, first)| *first)
                    .min();
                if let Some(spare) =
                    recover_open(storage, dir, &path, id, newer_first_seq, &mut report)?
                {
                    spare_candidates.push(spare);
                }
            }
        }
    }
    // Segments in quarantine/ (moved there now or by an earlier recovery)
    // may hold records that were acknowledged and delivered: their
    // sequence numbers and ids must never be handed out again. Looking at
    // the quarantine itself, rather than only at what this run moved there,
    // keeps that true across restarts and after a crash mid-recovery.
    let (in_quarantine, recorded_gaps) = scan_quarantine(storage, dir)?;
    for (q, floor) in in_quarantine {
        max_id = Some(max_id.map_or(q.segment_id, |m| m.max(q.segment_id)));
        report.next_seq = report.next_seq.max(floor);
        report.in_quarantine.push(q);
    }
    report.recorded_gaps = recorded_gaps;
    report.segments.sort_by_key(|s| s.first_seq);
    let spares = usable_spares(storage, &report, spare_candidates)?;
    // Always, not only after a change here: the last run may have died
    // (a process crash keeps the page cache) between a rename or create
    // and its folder's fsync. A spare found that way would be written and
    // fdatasynced while its name was never durable, and a power cut would
    // then take acknowledged records with the name. One fsync at start
    // makes every name recovery trusts durable.
    storage.sync_dir(dir)?;
    for s in &report.segments {
        report.next_seq = report.next_seq.max(s.first_seq + s.record_count);
    }
    for c in &report.cut_short {
        report.next_seq = report.next_seq.max(c.known_end.unwrap_or(0));
    }
    report.next_segment_id = max_id.map_or(0, |m| m + 1);
    report.lost_records = report.salvaged.iter().map(|s| s.lost_records).sum::<u64>()
        + report.unnumbered.iter().map(|u| u.records).sum::<u64>();
    Ok(Recovered { report, spares })
}

/// The files of shard folder `dir` that are segments (or were to be), in
/// name order (= id order): reports and logs come out the same way on
/// every run.
fn segment_files<S: Storage>(storage: &S, dir: &Path) -> io::Result<Vec<(FileKind, PathBuf)>> {
    let mut entries: Vec<(FileKind, PathBuf)> = Vec::new();
    for path in storage.list(dir)? {
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
        if let Some(kind) = classify(name) {
            entries.push((kind, path));
        }
    }
    entries.sort_by(|a, b| a.1.cmp(&b.1));
    Ok(entries)
}

/// What the segments' headers say, read before anything changes.
struct Headers {
    /// Where every segment with a valid header starts: `(id, first_seq)`.
    /// The writer starts a segment at the next sequence number it has
    /// counted, so a segment starting at X proves that nothing at or past
    /// X in an older segment was ever acked (see `recover_open`).
    starts: Vec<(u64, u64)>,
    /// Segments whose header is damaged: `(id, path, what is wrong)`.
    damaged: Vec<(u64, PathBuf, String)>,
    /// Sealed segments taken at their footer's word
    /// ([`SealedCheck::Footer`]), read while their header is: one open per
    /// segment.
    trusted: HashMap<u64, SegmentInfo>,
}

/// Reads every segment's header (and, with [`SealedCheck::Footer`], a
/// sealed one's footer); refuses a file under a segment's name that
/// spillway did not write before anything changes.
fn read_headers<S: Storage>(
    storage: &S,
    dir: &Path,
    entries: &[(FileKind, PathBuf)],
    check: SealedCheck,
) -> io::Result<Headers> {
    let mut headers = Headers {
        starts: Vec::new(),
        damaged: Vec::new(),
        trusted: HashMap::new(),
    };
    for (kind, path) in entries {
        if matches!(kind, FileKind::PartialPrealloc | FileKind::Free(_)) {
            // Opened only to refuse what is not a file before anything changes.
            storage.open_read(path).map_err(|e| not_ours(dir, e))?;
        }
        let (FileKind::Open(id) | FileKind::Sealed(id)) = *kind else {
            continue;
        };
        let sealed = matches!(kind, FileKind::Sealed(_));
        match SegmentReader::open(storage, path).map_err(|e| not_ours(dir, e))? {
            Opened::Reader(r) => {
                headers.starts.push((id, r.header().first_seq));
                if check == SealedCheck::Footer && sealed {
                    headers
                        .trusted
                        .extend(trust_footer(r, path, id)?.map(|t| (id, t)));
                }
            }
            Opened::BadHeader(e) => headers.damaged.push((id, path.clone(), e.to_string())),
            Opened::Unused(_) if sealed => headers.damaged.push((
                id,
                path.clone(),
                "sealed segment has an all-zero header".to_string(),
            )),
            Opened::Unused(_) => {}
        }
    }
    Ok(headers)
}

/// The spare segments recovery found that may be written next, in id
/// order; one older than a segment in use is removed (reusing it would
/// break id order).
fn usable_spares<S: Storage>(
    storage: &S,
    report: &RecoveryReport,
    candidates: Vec<Preallocated<S::File>>,
) -> io::Result<Vec<Preallocated<S::File>>> {
    let max_used = report.segments.iter().map(|s| s.segment_id).max();
    let mut spares = Vec::new();
    for spare in candidates {
        if max_used.is_some_and(|m| spare.segment_id < m) {
            storage.remove(&spare.path)?;
        } else {
            spares.push(spare);
        }
    }
    spares.sort_by_key(|s| s.segment_id);
    Ok(spares)
}

/// A file under a segment's name that spillway did not write (a directory,
/// a FIFO): the start stops and says what to do.
fn not_ours(dir: &Path, e: io::Error) -> io::Error {
    if !matches!(
        e.kind(),
        io::ErrorKind::InvalidInput | io::ErrorKind::IsADirectory
    ) {
        return e;
    }
    io::Error::new(
        e.kind(),
        format!(
            "{e}; it is named like a write-ahead buffer file but is not one: move it out of {} and start again",
            dir.display()
        ),
    )
}

/// A sealed segment, its header read by `reader`, whose footer is
/// intact, agrees with the header (`first_seq + record_count == last_seq
/// + 1`) and ends the file: its info from the footer alone, unchecked
/// ([`SealedCheck::Footer`]). `None`: anything else, for the full check.
fn trust_footer<F: StorageFile>(
    reader: SegmentReader<F>,
    path: &Path,
    id: u64,
) -> io::Result<Option<SegmentInfo>> {
    let first_seq = reader.header().first_seq;
    let skipped = reader.header().skipped;
    let salt = reader.header().salt();
    let file = reader.into_file();
    let len = file.len()?;
    if len < (SEGMENT_HEADER_LEN + FOOTER_LEN) as u64 {
        return Ok(None);
    }
    let mut raw = [0u8; FOOTER_LEN];
    if read_full_at(&file, len - FOOTER_LEN as u64, &mut raw)? < FOOTER_LEN {
        return Ok(None);
    }
    let Ok(footer) = Footer::decode(&raw, salt) else {
        return Ok(None);
    };
    let agrees = footer.end_offset == len - FOOTER_LEN as u64
        && footer.end_offset >= SEGMENT_HEADER_LEN as u64
        && first_seq.checked_add(footer.record_count) == footer.last_seq.checked_add(1);
    Ok(agrees.then(|| SegmentInfo {
        path: path.to_path_buf(),
        segment_id: id,
        first_seq,
        skipped,
        record_count: footer.record_count,
        bytes: footer.end_offset,
        lost_records: 0,
        checked: false,
    }))
}

/// Read and check every record of sealed segment `id` of the shard in
/// `dir`, one that recovery took at its footer's word
/// ([`SealedCheck::Footer`]), and salvage, cut short or quarantine what is
/// damaged exactly as recovery does at a start. No reader may have the
/// segment open meanwhile. The report holds what was found: the segment
/// in `segments` (checked, with its `lost_records`) unless it was
/// quarantined whole, and any `salvaged`, `cut_short`, `quarantined`,
/// `unnumbered` or `footers_repaired`; `lost_records` sums the salvaged
/// holes and unnumbered records (what a cut short loses is
/// [`CutShort::known_end`] past its `end_seq`).
pub fn check_sealed<S: Storage>(
    storage: &S,
    dir: &Path,
    shard: u32,
    id: u64,
) -> io::Result<RecoveryReport> {
    let mut report = RecoveryReport {
        shard,
        ..Default::default()
    };
    let path = dir.join(sealed_name(id));
    recover_sealed(storage, dir, &path, id, &mut report)?;
    report.lost_records = report.salvaged.iter().map(|s| s.lost_records).sum::<u64>()
        + report.unnumbered.iter().map(|u| u.records).sum::<u64>();
    let intact = report.segments.iter().all(|s| s.lost_records == 0)
        && report.salvaged.is_empty()
        && report.cut_short.is_empty()
        && report.quarantined.is_empty()
        && report.unnumbered.is_empty()
        && report.footers_repaired.is_empty();
    if !intact {
        // A file moved to quarantine/ (or a copy made there) is a name
        // change in this folder: durable before delivery goes on.
        storage.sync_dir(dir)?;
    }
    Ok(report)
}

fn recover_sealed<S: Storage>(
    storage: &S,
    dir: &Path,
    path: &Path,
    id: u64,
    report: &mut RecoveryReport,
) -> io::Result<()> {
    // Read-write: a damaged segment is salvaged in place.
    let mut reader = match SegmentReader::from_file(storage.open(path)?)? {
        Opened::Reader(r) => r,
        // A damaged header that could not be repaired (see `recover_shard`).
        Opened::Unused(_) => {
            let damage = "sealed segment has an all-zero header";
            return quarantine_unnumbered(storage, dir, path, id, damage, report);
        }
        Opened::BadHeader(e) => {
            if remove_if_empty_seal(storage, dir, path, id, report)? {
                return Ok(());
            }
            let damage = e.to_string();
            return quarantine_unnumbered(storage, dir, path, id, &damage, report);
        }
    };
    while reader.next()?.is_some() {}
    match reader.end().cloned() {
        Some(End::Footer(footer)) => {
            let info = SegmentInfo {
                path: path.to_path_buf(),
                segment_id: id,
                first_seq: reader.header().first_seq,
                skipped: reader.header().skipped,
                record_count: reader.count(),
                bytes: reader.offset(),
                lost_records: reader.lost_records(),
                checked: true,
            };
            trim_after_footer(storage, dir, path, id, reader.into_file(), &footer)?;
            report.segments.push(info);
            Ok(())
        }
        Some(End::Corrupt { offset, detail }) => {
            salvage_sealed(storage, dir, path, id, reader, offset, &detail, report)
        }
        other => {
            let why = format!(
                "sealed segment has no footer: its records end at offset {} with {}",
                reader.offset(),
                match other {
                    Some(End::Zeros) => "16 zero bytes",
                    Some(End::Stale { .. }) => "frames an earlier use of the file left",
                    _ => "the end of the file",
                }
            );
            drop(reader);
            cut_short(storage, dir, path, id, &why, report)
        }
    }
}

/// A sealed segment whose file goes on past its footer: left by a
/// recovery that wrote a new footer ([`cut_short`]) and crashed before
/// cutting the file there, or damage. The bytes past the footer are copied
/// to quarantine (unless that recovery did already), then cut, so that a
/// rerun ends where an uninterrupted recovery does.
fn trim_after_footer<S: Storage>(
    storage: &S,
    dir: &Path,
    path: &Path,
    id: u64,
    mut file: S::File,
    footer: &Footer,
) -> io::Result<()> {
    let end = footer.end_offset + FOOTER_LEN as u64;
    let len = file.len()?;
    if len <= end {
        return Ok(());
    }
    let name = format!("{id:016x}.cut-at-{}", footer.end_offset);
    let reason = format!(
        "{} bytes after the footer (offset {}) of sealed segment {id}; cut",
        len - end,
        footer.end_offset
    );
    save_copy_once(storage, dir, &file, &name, end, len, &reason)?;
    file.set_len(end)?;
    file.sync_all()?;
    tracing::warn!(segment = id, path = %path.display(), bytes = len - end,
        "cut bytes after a sealed segment's footer (copied to quarantine)");
    Ok(())
}

/// A sealed segment that cannot be salvaged whole (see the module docs):
/// keep the records before its first damage, and those after it that a
/// hole of known size leaves numbered, and seal it again where they end;
/// the bytes from there on are copied to `quarantine/<id>.cut-at-<offset>`
/// first. With no intact record left it is quarantined whole. The records
/// lost with its end are counted by `open_shard` (the gap before the next
/// segment).
fn cut_short<S: Storage>(
    storage: &S,
    dir: &Path,
    path: &Path,
    id: u64,
    why: &str,
    report: &mut RecoveryReport,
) -> io::Result<()> {
    let mut reader = match SegmentReader::from_file(storage.open(path)?)? {
        Opened::Reader(r) => r,
        _ => return Err(changed(path)),
    };
    while reader.next()?.is_some() {}
    let header = *reader.header();
    let earlier_gaps = reader.gaps().to_vec();
    let earlier_lost = reader.lost_records();
    let positions = reader.count();
    let stop = reader.end().cloned();
    let walked_to = reader.offset();
    let mut file = reader.into_file();
    let len = file.len()?;
    let (holes, end, kept_positions, gap_positions, detail) = match stop {
        Some(End::Corrupt { offset, detail }) => {
            plan_cut(&file, &header, offset, detail, positions, len)?
        }
        _ => (
            Vec::new(),
            walked_to,
            positions,
            0,
            "no footer after the records".to_string(),
        ),
    };
    let lost_in_holes: u64 = holes.iter().map(|h| h.lost.unwrap_or(0)).sum();
    let kept = kept_positions - earlier_lost - gap_positions - lost_in_holes;
    let known_end = old_footer_end(&file, len, &header)?;
    let file_name = path.file_name().and_then(|n| n.to_str()).unwrap_or("?");
    let end_seq = header.first_seq + kept_positions;
    if kept == 0 {
        let reason = format!("{why}; no intact record before the damage at offset {end}: {detail}");
        return quarantine(storage, dir, path, &reason, &mut report.quarantined);
    }
    let reason = format!(
        "{why}. Sealed segment {id} ({file_name}) cannot be salvaged whole: at offset {end}, \
         {detail}. The {kept} intact record(s) before it (seqs {}..{end_seq}) were kept and the \
         segment sealed again there; these bytes (from offset {end}) held its records from seq \
         {end_seq} on, which are lost: the gap up to the next segment's first seq counts them",
        header.first_seq
    );
    let saved_to = if len > end {
        let name = format!("{id:016x}.cut-at-{end}");
        save_copy_once(storage, dir, &file, &name, end, len, &reason)?
    } else {
        None
    };
    let first = report.salvaged.len();
    write_gap_frames(storage, dir, &mut file, path, &header, &holes, report)?;
    let (footer, lost) = read_back(storage, path, &header, end, kept_positions, "a cut")?;
    // The footer first: a rerun that finds it trims what is past it
    // (`trim_after_footer`); one that does not walks to the same cut.
    file.write_all_at(end, &[IoSlice::new(&footer.encode(header.salt()))])?;
    file.set_len(end + FOOTER_LEN as u64)?;
    file.sync_all()?;
    account_salvage(dir, path, id, &earlier_gaps, first, kept, report);
    tracing::error!(
        segment = id,
        path = %path.display(),
        kept_records = kept,
        lost_from_seq = end_seq,
        offset = end,
        cut_bytes = len.saturating_sub(end),
        reason = %detail,
        "a sealed segment cannot be salvaged whole: kept its intact records before the damage and \
         sealed it again there; its records from lost_from_seq on are lost (counted as the gap up \
         to the next segment)"
    );
    report.cut_short.push(CutShort {
        segment_id: id,
        offset: end,
        kept_records: kept,
        end_seq,
        known_end: known_end.filter(|&e| e > end_seq),
        cut_bytes: len.saturating_sub(end),
        detail,
        saved_to,
    });
    report.segments.push(SegmentInfo {
        path: path.to_path_buf(),
        segment_id: id,
        first_seq: header.first_seq,
        skipped: header.skipped,
        record_count: kept_positions,
        bytes: end,
        lost_records: lost,
        checked: true,
    });
    Ok(())
}

/// Where a sealed segment damaged at `offset` (`detail`) is cut, walked as
/// an unsealed segment with no anchor: a hole whose size its own length
/// proves is framed, and the walk stops at the first one of unknown size
/// (its records could not be numbered), at zeros or at the end of the
/// file. Returns the holes to frame, the offset of the cut, the records
/// before it, the GAP frames among them and why the rest is cut.
fn plan_cut<F: StorageFile>(
    file: &F,
    header: &SegmentHeader,
    offset: u64,
    detail: String,
    positions: u64,
    len: u64,
) -> io::Result<(Vec<salvage::Hole>, u64, u64, u64, String)> {
    Ok(
        match salvage::plan(file, header.salt(), offset, positions, len, false, None)? {
            Ok(p) => {
                // What the reader found says more than the walk's second
                // look at the same bytes.
                let detail = match &p.cut {
                    Some((at, why)) if *at != offset => why.clone(),
                    _ => detail,
                };
                (p.holes, p.end, p.positions, p.gap_positions, detail)
            }
            Err(e) => (Vec::new(), offset, positions, 0, format!("{detail}; {e}")),
        },
    )
}

/// One past the last sequence number the footer at the end of a sealed
/// file names, if it decodes, sits where it says and agrees with the
/// header.
fn old_footer_end<F: StorageFile>(
    file: &F,
    len: u64,
    header: &SegmentHeader,
) -> io::Result<Option<u64>> {
    let Some(at) = len.checked_sub(FOOTER_LEN as u64) else {
        return Ok(None);
    };
    let mut raw = [0u8; FOOTER_LEN];
    if at < crate::format::SEGMENT_HEADER_LEN as u64
        || read_full_at(file, at, &mut raw)? < FOOTER_LEN
    {
        return Ok(None);
    }
    Ok(match Footer::decode(&raw, header.salt()) {
        Ok(f)
            if f.end_offset == at
                && f.last_seq.wrapping_add(1).checked_sub(f.record_count)
                    == Some(header.first_seq) =>
        {
            Some(f.last_seq.wrapping_add(1))
        }
        _ => None,
    })
}

/// A sealed segment failed its check at `offset`. Salvage it in place if
/// its footer (the anchor that says how many records it holds) or at least
/// the footer's position survives; otherwise quarantine it whole.
#[allow(clippy::too_many_arguments)]
fn salvage_sealed<S: Storage>(
    storage: &S,
    dir: &Path,
    path: &Path,
    id: u64,
    reader: SegmentReader<S::File>,
    offset: u64,
    detail: &str,
    report: &mut RecoveryReport,
) -> io::Result<()> {
    let header = *reader.header();
    let positions = reader.count();
    let earlier_gaps = reader.gaps().to_vec();
    let mut file = reader.into_file();
    let why = format!("sealed segment fails its check at offset {offset}: {detail}");
    let len = file.len()?;
    let min_len = (crate::format::SEGMENT_HEADER_LEN + FOOTER_LEN) as u64;
    if len < min_len {
        drop(file);
        return cut_short(storage, dir, path, id, &why, report);
    }
    let footer_at = len - FOOTER_LEN as u64;
    let mut raw = [0u8; FOOTER_LEN];
    if read_full_at(&file, footer_at, &mut raw)? < FOOTER_LEN || offset > footer_at {
        drop(file);
        return cut_short(storage, dir, path, id, &why, report);
    }
    // The footer's count is the anchor, if the footer is whole and agrees
    // with the header and its own position.
    let anchor = match Footer::decode(&raw, header.salt()) {
        Ok(f)
            if f.end_offset == footer_at
                && f.last_seq
                    == header
                        .first_seq
                        .wrapping_add(f.record_count)
                        .wrapping_sub(1) =>
        {
            Some(f.record_count)
        }
        _ => None,
    };
    if anchor.is_none() && !footer_like(&raw) {
        // Cut short or overwritten at the end: where its records end is
        // not known.
        drop(file);
        return cut_short(storage, dir, path, id, &why, report);
    }
    let plan = match salvage::plan(
        &file,
        header.salt(),
        offset,
        positions,
        footer_at,
        true,
        anchor,
    )? {
        Ok(p) => p,
        Err(cannot) => {
            let why = format!("{why}; the footer does not count the damage: {cannot}");
            drop(file);
            return cut_short(storage, dir, path, id, &why, report);
        }
    };
    let first = report.salvaged.len();
    write_gap_frames(storage, dir, &mut file, path, &header, &plan.holes, report)?;
    // The footer is rewritten from the records as they now read (GAP
    // frames fold their CRC into the running records CRC).
    let (footer, lost) = read_back(storage, path, &header, footer_at, plan.positions, "salvage")?;
    file.write_all_at(footer_at, &[IoSlice::new(&footer.encode(header.salt()))])?;
    file.sync_all()?;
    let kept = footer.record_count - lost;
    // Frames an earlier recovery wrote before crashing (its footer was not
    // rewritten yet) are this salvage too.
    if !account_salvage(dir, path, id, &earlier_gaps, first, kept, report) {
        tracing::error!(segment = id, path = %path.display(), reason = %why,
            "rewrote the damaged footer of a sealed segment from its intact records; no record lost");
        report.footers_repaired.push((id, why));
    }
    report.segments.push(SegmentInfo {
        path: path.to_path_buf(),
        segment_id: id,
        first_seq: header.first_seq,
        skipped: header.skipped,
        record_count: footer.record_count,
        bytes: footer_at,
        lost_records: lost,
        checked: true,
    });
    Ok(())
}

fn changed(path: &Path) -> io::Error {
    io::Error::other(format!(
        "{}: header changed during recovery",
        path.display()
    ))
}

/// Copy each hole's bytes to quarantine (best effort), then write its GAP
/// frame over it, in place. Pushes one [`Salvaged`] per hole (kept_records
/// filled in by the caller).
fn write_gap_frames<S: Storage>(
    storage: &S,
    dir: &Path,
    file: &mut S::File,
    path: &Path,
    header: &SegmentHeader,
    holes: &[Hole],
    report: &mut RecoveryReport,
) -> io::Result<()> {
    let id = header.segment_id;
    for h in holes {
        let lost = h
            .lost
            .ok_or_else(|| io::Error::other("salvage left a hole uncounted"))?;
        let span = h.end - h.start;
        let (Ok(skip), Ok(lost32)) = (
            u32::try_from(span - crate::format::GAP_FRAME_LEN as u64),
            u32::try_from(lost),
        ) else {
            return Err(io::Error::other(format!(
                "{}: damaged stretch of {span} bytes / {lost} records at offset {} is too large for a GAP frame",
                path.display(),
                h.start
            )));
        };
        let first_seq = header.first_seq + h.first_position;
        let last_seq = first_seq + lost - 1;
        // The file name, not the path: the text must not change when the
        // data folder moves (a rerun after a crash rewrites it identically).
        let file_name = path.file_name().and_then(|n| n.to_str()).unwrap_or("?");
        let reason = format!(
            "damaged bytes at offset {}..{} of segment {id} ({file_name}): {}; {lost} record(s) lost, \
             seqs {first_seq}..={last_seq}; replaced in place by a GAP frame, every other record kept",
            h.start, h.end, h.detail
        );
        let name = format!("{id:016x}.damaged-at-{}", h.start);
        let saved_to = save_copy(storage, dir, file, &name, h.start, h.end, &reason)?;
        let frame = GapFrame {
            skip_bytes: skip,
            lost_records: lost32,
        };
        file.write_all_at(h.start, &[IoSlice::new(&frame.encode(header.salt()))])?;
        report.salvaged.push(Salvaged {
            segment_id: id,
            offset: h.start,
            damaged_bytes: span,
            lost_records: lost,
            lost_seqs: (first_seq, last_seq),
            kept_records: 0,
            saved_to,
        });
    }
    Ok(())
}

/// Report GAP frames found in a segment this recovery finishes (an earlier
/// recovery wrote them and crashed before sealing or fixing the footer),
/// before the entries from index `from` on.
fn report_earlier_gaps(
    dir: &Path,
    id: u64,
    gaps: &[PassedGap],
    report: &mut RecoveryReport,
    from: usize,
) {
    let earlier: Vec<Salvaged> = gaps
        .iter()
        .map(|g| {
            let copy = dir
                .join(QUARANTINE_DIR)
                .join(format!("{id:016x}.damaged-at-{}", g.offset));
            Salvaged {
                segment_id: id,
                offset: g.offset,
                damaged_bytes: g.span,
                lost_records: g.lost_records,
                lost_seqs: (g.first_seq, g.first_seq + g.lost_records.max(1) - 1),
                kept_records: 0,
                saved_to: copy.exists().then_some(copy),
            }
        })
        .collect();
    report.salvaged.splice(from..from, earlier);
}

fn log_salvage(path: &Path, id: u64, holes: &[Salvaged], kept: u64) {
    let lost: u64 = holes.iter().map(|h| h.lost_records).sum();
    let seqs: Vec<String> = holes
        .iter()
        .map(|h| format!("{}..={}", h.lost_seqs.0, h.lost_seqs.1))
        .collect();
    tracing::error!(
        segment = id,
        path = %path.display(),
        lost_records = lost,
        kept_records = kept,
        lost_seqs = %seqs.join(", "),
        "damaged records in a segment: replaced in place by GAP frames; these acknowledged records \
         are lost (copies of the damaged bytes are in quarantine), every other record is kept"
    );
}

/// Reports the holes salvaged in segment `id` (at `path` in shard folder
/// `dir`) from `report.salvaged[first..]`
/// on (with the GAP frames an earlier recovery wrote, `earlier_gaps`),
/// each with the `kept` records beside it, and logs them. Returns whether
/// there were any.
fn account_salvage(
    dir: &Path,
    path: &Path,
    id: u64,
    earlier_gaps: &[PassedGap],
    first: usize,
    kept: u64,
    report: &mut RecoveryReport,
) -> bool {
    report_earlier_gaps(dir, id, earlier_gaps, report, first);
    for s in &mut report.salvaged[first..] {
        s.kept_records = kept;
    }
    let any = report.salvaged.len() > first;
    if any {
        log_salvage(path, id, &report.salvaged[first..], kept);
    }
    any
}

/// Reads segment `path` again up to `end`, once its GAP frames are
/// written, and checks that it holds the `positions` records `what` (a
/// salvage, a cut) planned. Returns the footer for `end` and the records
/// lost in it.
fn read_back<S: Storage>(
    storage: &S,
    path: &Path,
    header: &SegmentHeader,
    end: u64,
    positions: u64,
    what: &str,
) -> io::Result<(Footer, u64)> {
    let mut again = match SegmentReader::from_file(storage.open_read(path)?)? {
        Opened::Reader(r) => r,
        _ => return Err(changed(path)),
    };
    again.set_limit(end);
    while again.next()?.is_some() {}
    if again.offset() != end || again.count() != positions {
        return Err(io::Error::other(format!(
            "{}: {what} planned {positions} records up to offset {end}, reading back gives {} up to {}",
            path.display(),
            again.count(),
            again.offset()
        )));
    }
    let footer = Footer {
        record_count: again.count(),
        end_offset: end,
        last_seq: header.first_seq.wrapping_add(again.count()).wrapping_sub(1),
        records_crc: again.records_crc(),
    };
    Ok((footer, again.lost_records()))
}

/// Returns the file as a spare if it is an unused preallocated segment.
///
/// `newer_first_seq` is the lowest first_seq of the segments with a higher
/// id. Records of this segment at or past it were written by an append that
/// failed part-way (the writer nacked the group, abandoned this segment and
/// started the next one at the group's first seq): they were never acked,
/// and their sequence numbers belong to the newer segment's records, so
/// they are cut like a torn tail.
///
/// A segment with no record to keep (header only: its first group was
/// torn; or nothing but damage) is quarantined; records lost to damage
/// there are counted by `open_shard`, as numbers the quarantined file
/// covers and no kept segment holds. One whose header is damaged and could
/// not be repaired (see `recover_shard`) is quarantined whole.
fn recover_open<S: Storage>(
    storage: &S,
    dir: &Path,
    path: &Path,
    id: u64,
    newer_first_seq: Option<u64>,
    report: &mut RecoveryReport,
) -> io::Result<Option<Preallocated<S::File>>> {
    let mut reader = match SegmentReader::from_file(storage.open(path)?)? {
        Opened::Reader(r) => r,
        Opened::Unused(file) => {
            let capacity = file.len()?;
            return Ok(Some(Preallocated {
                file,
                path: path.to_path_buf(),
                segment_id: id,
                capacity,
            }));
        }
        Opened::BadHeader(e) => {
            if !remove_if_empty_seal(storage, dir, path, id, report)? {
                let damage = e.to_string();
                quarantine_unnumbered(storage, dir, path, id, &damage, report)?;
            }
            return Ok(None);
        }
    };
    while reader.next()?.is_some() {}
    let header = *reader.header();
    let earlier_gaps = reader.gaps().to_vec();
    let first_salvaged = report.salvaged.len();
    // Damage with valid records after it is salvaged in place (GAP frames);
    // then the segment is read again and what is left to cut is a torn
    // tail (or damage that could not be counted, `plan.cut`).
    let mut salvaged = None;
    if let Some(End::Corrupt { offset, .. }) = reader.end().cloned() {
        let (again, plan) =
            salvage_open(storage, dir, reader, path, offset, newer_first_seq, report)?;
        reader = again;
        salvaged = Some(plan);
    }
    let file_len = reader.file_ref().len()?;
    let mut kept = Kept::read(&reader, salvaged.as_ref());
    let file = reader.into_file();
    if let Some(newer) = newer_first_seq.filter(|&s| s < header.first_seq + kept.count) {
        kept = Kept::before_newer(storage, path, header.first_seq, newer)?;
    }
    let mut cut_bytes = 0;
    if let Some(detail) = &kept.cut_detail {
        // What an earlier use of the file left is not this segment's.
        let stale_at = salvaged.as_ref().and_then(|p| p.stale_at);
        let tail_end = stale_at.filter(|&s| s >= kept.cut).unwrap_or(file_len);
        cut_bytes = tail_end.saturating_sub(kept.cut);
        save_tail(storage, dir, &file, id, kept.cut, tail_end, detail, report)?;
    }
    if kept.count == kept.lost {
        // No record to keep (see above): not counted as salvaged.
        report.salvaged.truncate(first_salvaged);
        let reason = "unsealed segment holds no intact record";
        quarantine(storage, dir, path, reason, &mut report.quarantined)?;
        report.next_seq = report.next_seq.max(header.first_seq);
        return Ok(None);
    }
    let sealing = Sealing {
        file,
        path: path.to_path_buf(),
        segment_id: id,
        footer: Footer {
            record_count: kept.count,
            end_offset: kept.cut,
            last_seq: header.first_seq + kept.count - 1,
            records_crc: kept.records_crc,
        },
        salt: header.salt(),
    };
    let sealed = seal(storage, dir, sealing)?;
    let survivors = kept.count - kept.lost;
    account_salvage(
        dir,
        path,
        id,
        &earlier_gaps,
        first_salvaged,
        survivors,
        report,
    );
    report.resealed.push((id, kept.count, cut_bytes));
    report.segments.push(SegmentInfo {
        path: sealed,
        segment_id: id,
        first_seq: header.first_seq,
        skipped: header.skipped,
        record_count: kept.count,
        bytes: kept.cut,
        lost_records: kept.lost,
        checked: true,
    });
    Ok(None)
}

/// Salvages the damage `reader` (read to its end) found at `offset` of
/// open segment `path` in place (GAP frames), and reads the segment again.
/// A record at or past `newer_first_seq` anchors the count (its numbers
/// are a newer segment's).
fn salvage_open<S: Storage>(
    storage: &S,
    dir: &Path,
    reader: SegmentReader<S::File>,
    path: &Path,
    offset: u64,
    newer_first_seq: Option<u64>,
    report: &mut RecoveryReport,
) -> io::Result<(SegmentReader<S::File>, salvage::Plan)> {
    let header = *reader.header();
    let positions = reader.count();
    let mut file = reader.into_file();
    let file_len = file.len()?;
    let anchor = newer_first_seq
        .filter(|&n| n >= header.first_seq)
        .map(|n| n - header.first_seq);
    let plan = salvage::plan(
        &file,
        header.salt(),
        offset,
        positions,
        file_len,
        false,
        anchor,
    )?
    .map_err(|why| io::Error::other(format!("{}: {why}", path.display())))?;
    write_gap_frames(storage, dir, &mut file, path, &header, &plan.holes, report)?;
    let mut reader = match SegmentReader::from_file(file)? {
        Opened::Reader(r) => r,
        _ => return Err(changed(path)),
    };
    while reader.next()?.is_some() {}
    Ok((reader, plan))
}

/// The records of an open segment that recovery keeps.
struct Kept {
    /// Where they end: the bytes from here on are cut.
    cut: u64,
    /// Records kept (a GAP frame's lost records included).
    count: u64,
    records_crc: u32,
    /// Records among `count` lost to damage.
    lost: u64,
    /// Why the bytes from `cut` on are not kept, if any are not.
    cut_detail: Option<String>,
}

impl Kept {
    /// What `reader`, read to its end after the damage was salvaged (by
    /// `plan`, if any was), keeps.
    fn read<F: StorageFile>(reader: &SegmentReader<F>, plan: Option<&salvage::Plan>) -> Kept {
        let footer_at = plan.and_then(|p| p.footer_at);
        let forced_cut = plan.and_then(|p| p.cut.as_ref());
        let cut_detail = match reader.end() {
            // A footer a crashed seal left, now stale (the GAP frames
            // changed the records CRC): sealing again overwrites it;
            // nothing to cut.
            Some(End::Corrupt { offset, .. }) if Some(*offset) == footer_at => None,
            Some(End::Corrupt { offset, detail }) => Some(match forced_cut {
                Some((at, why)) if at == offset => why.clone(),
                _ => detail.clone(),
            }),
            _ => None,
        };
        Kept {
            cut: reader.offset(),
            count: reader.count(),
            records_crc: reader.records_crc(),
            lost: reader.lost_records(),
            cut_detail,
        }
    }

    /// The records of segment `path` (starting at `first_seq`) before
    /// `newer`, where a newer segment starts: those from there on were
    /// written by an append that failed and were never acked.
    fn before_newer<S: Storage>(
        storage: &S,
        path: &Path,
        first_seq: u64,
        newer: u64,
    ) -> io::Result<Kept> {
        let keep = newer.saturating_sub(first_seq);
        let mut again = match SegmentReader::from_file(storage.open_read(path)?)? {
            Opened::Reader(r) => r,
            _ => {
                return Err(io::Error::other(format!(
                    "{}: header changed during recovery",
                    path.display()
                )))
            }
        };
        while again.count() < keep && again.next()?.is_some() {}
        Ok(Kept {
            cut: again.offset(),
            count: again.count(),
            records_crc: again.records_crc(),
            lost: again.lost_records(),
            cut_detail: Some(format!(
                "records from seq {newer} on overlap a newer segment that starts at that seq \
                 (written by an append that failed, never acked)"
            )),
        })
    }
}

/// A segment sealed before its first record was written has no header:
/// [`seal`] put the footer (record_count 0, end_offset 0) at offset 0. It
/// holds nothing, so it is removed rather than quarantined (its sequence
/// numbers were never used). Returns whether `path` (segment `id`) was
/// such a file.
fn remove_if_empty_seal<S: Storage>(
    storage: &S,
    dir: &Path,
    path: &Path,
    id: u64,
    report: &mut RecoveryReport,
) -> io::Result<bool> {
    let file = storage.open_read(path)?;
    let mut raw = [0u8; FOOTER_LEN];
    if read_full_at(&file, 0, &mut raw)? < FOOTER_LEN {
        return Ok(false);
    }
    let footer = match footer_of_either_format(&raw, id) {
        Some(f) if f.record_count == 0 && f.end_offset == 0 => f,
        _ => return Ok(false),
    };
    drop(file);
    storage.remove(path)?;
    storage.sync_dir(dir)?;
    report.next_seq = report.next_seq.max(footer.last_seq.wrapping_add(1));
    tracing::info!(path = %path.display(), "removed a segment sealed before its first record");
    Ok(true)
}

/// The footer in `raw`, of a file named for segment `id` whose header
/// cannot say its format: checked under either salt its name allows.
fn footer_of_either_format(raw: &[u8; FOOTER_LEN], id: u64) -> Option<Footer> {
    Salt::candidates(id)
        .into_iter()
        .find_map(|salt| Footer::decode(raw, salt).ok())
}

/// What `<dir>/quarantine/` holds that recovery reads: the segment files,
/// each with one past the highest sequence number it shows evidence of
/// (see [`seq_evidence`]), and the ranges of the gap reason files.
#[allow(clippy::type_complexity)]
fn scan_quarantine<S: Storage>(
    storage: &S,
    dir: &Path,
) -> io::Result<(Vec<(QuarantinedSegment, u64)>, Vec<(u64, u64)>)> {
    let paths = match storage.list(&dir.join(QUARANTINE_DIR)) {
        Ok(p) => p,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok((Vec::new(), Vec::new())),
        Err(e) => return Err(e),
    };
    let mut out = Vec::new();
    let mut gaps = Vec::new();
    for path in paths {
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
        if let Some(range) = gap_file_range(name) {
            gaps.push(range);
        }
        if let Some((id, first, last)) = presumed_name(name) {
            let q = QuarantinedSegment {
                segment_id: id,
                name: name.to_string(),
                range: Some((first, last + 1)),
            };
            out.push((q, last + 1));
            continue;
        }
        if let Some(FileKind::Open(id) | FileKind::Sealed(id)) = classify(name) {
            let (first, floor) = seq_evidence(storage, &path, id)?;
            let range = first.map(|f| (f, floor.max(f)));
            let q = QuarantinedSegment {
                segment_id: id,
                name: name.to_string(),
                range,
            };
            out.push((q, floor));
        }
    }
    out.sort_by(|a, b| a.0.name.cmp(&b.0.name));
    gaps.sort_unstable();
    Ok((out, gaps))
}

/// (segment id, first, last) of an unnumbered segment's name once
/// `open_shard` has presumed numbers for its records:
/// `<id>.<open|sealed>.seqs-<first>-<last>`, with `.after-<end>` when the
/// numbers were presumed past a floor (see [`presumed_jump`]).
fn presumed_name(name: &str) -> Option<(u64, u64, u64)> {
    let (id, first, last, _) = parse_presumed(name)?;
    Some((id, first, last))
}

/// The numbers `open_shard` left unused on purpose when it presumed an
/// unnumbered segment's numbers past a floor: `(end, first)`, from where
/// everything the shard showed ended to the first presumed number (the
/// `.after-<end>` of the name). None were any record's: not a gap.
pub(crate) fn presumed_jump(name: &str) -> Option<(u64, u64)> {
    let (_, first, _, after) = parse_presumed(name)?;
    after.filter(|&end| end < first).map(|end| (end, first))
}

fn parse_presumed(name: &str) -> Option<(u64, u64, u64, Option<u64>)> {
    let (segment, seqs) = name.split_once(".seqs-")?;
    let Some(FileKind::Open(id) | FileKind::Sealed(id)) = classify(segment) else {
        return None;
    };
    let (seqs, after) = match seqs.split_once(".after-") {
        Some((seqs, after)) => (seqs, Some(after.parse().ok()?)),
        None => (seqs, None),
    };
    let (first, last) = seqs.split_once('-')?;
    let (first, last) = (first.parse().ok()?, last.parse().ok()?);
    (first <= last).then_some((id, first, last, after))
}

/// (first, last) of a `gap-<first>-<last>.reason` file name.
fn gap_file_range(name: &str) -> Option<(u64, u64)> {
    let (first, last) = name
        .strip_prefix("gap-")?
        .strip_suffix(".reason")?
        .split_once('-')?;
    let (first, last) = (first.parse().ok()?, last.parse().ok()?);
    (first <= last).then_some((first, last))
}

/// What a (possibly damaged) segment file still proves about its sequence
/// numbers: where they start (a valid header's `first_seq`, or without one
/// a valid footer's `last_seq + 1 - record_count` at the end of the file),
/// and one past the highest it shows (the header's `first_seq` plus the
/// records that pass their check, and the footer's `last_seq + 1`; 0 when
/// neither header nor footer can be trusted).
fn seq_evidence<S: Storage>(storage: &S, path: &Path, id: u64) -> io::Result<(Option<u64>, u64)> {
    let file = storage.open_read(path)?;
    let mut floor = 0;
    let mut footer_first = None;
    let len = file.len()?;
    if len >= FOOTER_LEN as u64 {
        let mut raw = [0u8; FOOTER_LEN];
        if read_full_at(&file, len - FOOTER_LEN as u64, &mut raw)? == FOOTER_LEN {
            if let Some(f) = footer_of_either_format(&raw, id) {
                floor = f.last_seq.wrapping_add(1);
                footer_first = Some(floor.saturating_sub(f.record_count));
            }
        }
    }
    if let Opened::Reader(mut r) = SegmentReader::from_file(file)? {
        while r.next()?.is_some() {}
        floor = floor.max(r.next_seq());
        return Ok((Some(r.header().first_seq), floor));
    }
    Ok((footer_first, floor))
}

/// Copy the non-zero bytes in `[from, tail_end)` (past a cut, up to where
/// an earlier use's frames begin) into quarantine, so nothing that cannot
/// be trusted is silently destroyed.
#[allow(clippy::too_many_arguments)]
fn save_tail<S: Storage>(
    storage: &S,
    dir: &Path,
    file: &S::File,
    id: u64,
    from: u64,
    tail_end: u64,
    detail: &str,
    report: &mut RecoveryReport,
) -> io::Result<()> {
    let file_len = tail_end;
    let mut buf = vec![0u8; 1024 * 1024];
    let mut last_nonzero_end = from;
    let mut at = from;
    while at < file_len {
        let want = buf.len().min((file_len - at) as usize);
        let n = read_full_at(file, at, &mut buf[..want])?;
        if n == 0 {
            break;
        }
        if let Some(p) = buf[..n].iter().rposition(|&b| b != 0) {
            last_nonzero_end = at + p as u64 + 1;
        }
        at += n as u64;
    }
    if last_nonzero_end == from {
        return Ok(());
    }
    let name = format!("{id:016x}.tail-at-{from}");
    let reason = format!("bytes cut from an unsealed segment at offset {from}: {detail}");
    let Some(target) = save_copy(storage, dir, file, &name, from, last_nonzero_end, &reason)?
    else {
        return Ok(());
    };
    tracing::warn!(segment = id, offset = from, bytes = last_nonzero_end - from, reason = detail, path = %target.display(), "cut a torn tail; saved the cut bytes in quarantine");
    report.quarantined.push((target, detail.to_string()));
    Ok(())
}

/// [`damaged_header::quarantine_unnumbered`], its records counted in `report`.
fn quarantine_unnumbered<S: Storage>(
    storage: &S,
    dir: &Path,
    path: &Path,
    id: u64,
    damage: &str,
    report: &mut RecoveryReport,
) -> io::Result<()> {
    let unnumbered = damaged_header::quarantine_unnumbered(
        storage,
        dir,
        path,
        id,
        damage,
        &mut report.quarantined,
    )?;
    report.unnumbered.extend(unnumbered);
    Ok(())
}
