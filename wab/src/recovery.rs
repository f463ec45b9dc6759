//! Crash recovery of one shard directory, run before the shard accepts writes.
//!
//! - `*.open.tmp`: a preallocation that never finished; it never held a
//!   record, so it is removed.
//! - `*.sealed`: verified end to end (header, every record CRC, footer);
//!   a segment that fails is moved to `quarantine/`, never deleted.
//! - `*.open` with an all-zero header: a spare preallocated segment, kept for
//!   reuse if it is newer than every used segment.
//! - `*.open` with a bad header: quarantined.
//! - `*.open` with a good header: read up to the first record that fails its
//!   check (a torn write: a group whose fdatasync never returned, so it was
//!   never acked). Non-zero bytes past that point are copied to
//!   `quarantine/` first; then the segment is sealed at the cut.
//!
//! - `*.open` whose records run past the first seq of a newer segment: the
//!   overlap was written by an append that failed (the writer abandoned the
//!   segment and reused those seqs in the next one); it is cut the same way.
//! - a segment file that is only a footer (sealed before its first record,
//!   so it never got a header) holds nothing and is removed.
//!
//! Segments in `quarantine/` still count: `next_seq` is past every sequence
//! number their header, intact records or footer show, and
//! `next_segment_id` past their ids, so neither is ever reused.
//!
//! Every step is idempotent: a crash during recovery followed by another
//! recovery gives the same directory.

use std::io::{self, IoSlice};
use std::path::{Path, PathBuf};

use crate::format::{classify, FileKind, Footer, FOOTER_LEN};
use crate::reader::{End, Opened, SegmentReader};
use crate::segment::{seal, Preallocated, Sealing};
use crate::storage::{create_dir_durable, read_full_at, Storage, StorageFile};

/// Name of the folder (inside each shard directory) untrusted files go to.
pub const QUARANTINE_DIR: &str = "quarantine";

/// A sealed, verified segment, in sequence order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SegmentInfo {
    pub path: PathBuf,
    pub segment_id: u64,
    pub first_seq: u64,
    pub record_count: u64,
    /// Bytes of header and records (the file is this plus the footer);
    /// what the segment counts against `wab_bytes_max`.
    pub bytes: u64,
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
    /// The sequence number the next record will get.
    pub next_seq: u64,
    /// The id the next preallocated segment will get.
    pub next_segment_id: u64,
}

impl RecoveryReport {
    pub fn record_count(&self) -> u64 {
        self.segments.iter().map(|s| s.record_count).sum()
    }

    pub fn bytes(&self) -> u64 {
        self.segments.iter().map(|s| s.bytes).sum()
    }
}

/// A recovered shard: the report plus spare preallocated segments to reuse.
pub struct Recovered<F> {
    pub report: RecoveryReport,
    pub spares: Vec<Preallocated<F>>,
}

/// Recover `dir` (created 0700 if missing). `min_next_seq` is a floor for
/// the next sequence number (the drain checkpoint, so sequence numbers are
/// never reused after every segment was deleted).
pub fn recover_shard<S: Storage>(
    storage: &S,
    dir: &Path,
    shard: u32,
    min_next_seq: u64,
) -> io::Result<Recovered<S::File>> {
    // The shard folder (and data_dir if missing) must be a durable name
    // before any record in it is acknowledged.
    create_dir_durable(storage, dir)?;
    let mut report = RecoveryReport {
        shard,
        next_seq: min_next_seq,
        ..Default::default()
    };
    let mut entries: Vec<(FileKind, PathBuf)> = Vec::new();
    for path in storage.list(dir)? {
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
        if let Some(kind) = classify(name) {
            entries.push((kind, path));
        }
    }
    // Where every segment with a valid header starts. The writer starts a
    // segment at the next sequence number it has counted, so a segment
    // starting at X proves that nothing at or past X in an older segment was
    // ever acked (see `recover_open`).
    let mut starts: Vec<(u64, u64)> = Vec::new();
    for (kind, path) in &entries {
        if let FileKind::Open(id) | FileKind::Sealed(id) = *kind {
            if let Opened::Reader(r) = SegmentReader::open(storage, path)? {
                starts.push((id, r.header().first_seq));
            }
        }
    }
    let mut max_id: Option<u64> = None;
    let mut spare_candidates = Vec::new();
    let mut changed_dir = false;
    for (kind, path) in entries {
        match kind {
            FileKind::PartialPrealloc => {
                storage.remove(&path)?;
                report.removed_partial += 1;
                changed_dir = true;
            }
            FileKind::Sealed(id) => {
                max_id = Some(max_id.map_or(id, |m| m.max(id)));
                recover_sealed(storage, dir, &path, id, &mut report)?;
            }
            FileKind::Open(id) => {
                max_id = Some(max_id.map_or(id, |m| m.max(id)));
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
    for (id, floor) in quarantined_segments(storage, dir)? {
        max_id = Some(max_id.map_or(id, |m| m.max(id)));
        report.next_seq = report.next_seq.max(floor);
    }
    report.segments.sort_by_key(|s| s.first_seq);
    let max_used = report.segments.iter().map(|s| s.segment_id).max();
    let mut spares = Vec::new();
    for spare in spare_candidates {
        if max_used.is_some_and(|m| spare.segment_id < m) {
            // Older than a used segment: reusing it would break id order.
            storage.remove(&spare.path)?;
            changed_dir = true;
        } else {
            spares.push(spare);
        }
    }
    spares.sort_by_key(|s| s.segment_id);
    if changed_dir {
        storage.sync_dir(dir)?;
    }
    for s in &report.segments {
        report.next_seq = report.next_seq.max(s.first_seq + s.record_count);
    }
    report.next_segment_id = max_id.map_or(0, |m| m + 1);
    Ok(Recovered { report, spares })
}

fn recover_sealed<S: Storage>(
    storage: &S,
    dir: &Path,
    path: &Path,
    id: u64,
    report: &mut RecoveryReport,
) -> io::Result<()> {
    let mut reader = match SegmentReader::open(storage, path)? {
        Opened::Reader(r) => r,
        Opened::Unused(_) => {
            return quarantine(
                storage,
                dir,
                path,
                "sealed segment has an all-zero header",
                report,
            )
        }
        Opened::BadHeader(e) => {
            if remove_if_empty_seal(storage, dir, path, report)? {
                return Ok(());
            }
            return quarantine(storage, dir, path, &e.to_string(), report);
        }
    };
    while reader.next()?.is_some() {}
    match reader.end() {
        Some(End::Footer(_)) => {
            let bytes = reader.offset();
            report.segments.push(SegmentInfo {
                path: path.to_path_buf(),
                segment_id: id,
                first_seq: reader.header().first_seq,
                record_count: reader.count(),
                bytes,
            });
            Ok(())
        }
        Some(End::Corrupt { offset, detail }) => {
            let reason = format!("sealed segment fails its check at offset {offset}: {detail}");
            quarantine(storage, dir, path, &reason, report)
        }
        other => {
            let reason = format!("sealed segment has no footer (ended with {other:?})");
            quarantine(storage, dir, path, &reason, report)
        }
    }
}

/// Returns the file as a spare if it is an unused preallocated segment.
///
/// `newer_first_seq` is the lowest first_seq of the segments with a higher
/// id. Records of this segment at or past it were written by an append that
/// failed part-way (the writer nacked the group, abandoned this segment and
/// started the next one at the group's first seq): they were never acked,
/// and their sequence numbers belong to the newer segment's records, so
/// they are cut like a torn tail.
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
            if !remove_if_empty_seal(storage, dir, path, report)? {
                quarantine(storage, dir, path, &e.to_string(), report)?;
            }
            return Ok(None);
        }
    };
    while reader.next()?.is_some() {}
    let mut cut = reader.offset();
    let file_len = reader.file_ref().len()?;
    let header = *reader.header();
    let mut count = reader.count();
    let mut records_crc = reader.records_crc();
    // Why the bytes from `cut` on are not kept, if any are not.
    let mut cut_detail = match reader.end() {
        Some(End::Corrupt { detail, .. }) => Some(detail.clone()),
        _ => None,
    };
    let file = reader.into_file();
    if let Some(newer) = newer_first_seq.filter(|&s| s < header.first_seq + count) {
        let keep = newer.saturating_sub(header.first_seq);
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
        cut = again.offset();
        count = again.count();
        records_crc = again.records_crc();
        cut_detail = Some(format!(
            "records from seq {newer} on overlap a newer segment that starts at that seq \
             (written by an append that failed, never acked)"
        ));
    }
    let mut cut_bytes = 0;
    if let Some(detail) = &cut_detail {
        cut_bytes = file_len.saturating_sub(cut);
        save_tail(storage, dir, &file, id, cut, file_len, detail, report)?;
    }
    if count == 0 {
        // Header only (its first group was torn): no record to keep.
        let reason = "unsealed segment holds no intact record";
        quarantine(storage, dir, path, reason, report)?;
        report.next_seq = report.next_seq.max(header.first_seq);
        return Ok(None);
    }
    let footer = Footer {
        record_count: count,
        end_offset: cut,
        last_seq: header.first_seq + count - 1,
        records_crc,
    };
    let sealing = Sealing {
        file,
        path: path.to_path_buf(),
        segment_id: id,
        footer,
    };
    let sealed = seal(storage, dir, sealing)?;
    report.resealed.push((id, count, cut_bytes));
    report.segments.push(SegmentInfo {
        path: sealed,
        segment_id: id,
        first_seq: header.first_seq,
        record_count: count,
        bytes: cut,
    });
    Ok(None)
}

/// A segment sealed before its first record was written has no header:
/// [`seal`] put the footer (record_count 0, end_offset 0) at offset 0. It
/// holds nothing, so it is removed rather than quarantined (its sequence
/// numbers were never used). Returns whether `path` was such a file.
fn remove_if_empty_seal<S: Storage>(
    storage: &S,
    dir: &Path,
    path: &Path,
    report: &mut RecoveryReport,
) -> io::Result<bool> {
    let file = storage.open_read(path)?;
    let mut raw = [0u8; FOOTER_LEN];
    if read_full_at(&file, 0, &mut raw)? < FOOTER_LEN {
        return Ok(false);
    }
    let footer = match Footer::decode(&raw) {
        Ok(f) if f.record_count == 0 && f.end_offset == 0 => f,
        _ => return Ok(false),
    };
    drop(file);
    storage.remove(path)?;
    storage.sync_dir(dir)?;
    report.next_seq = report.next_seq.max(footer.last_seq.wrapping_add(1));
    tracing::info!(path = %path.display(), "removed a segment sealed before its first record");
    Ok(true)
}

/// Segment files in `<dir>/quarantine/`: (segment id, one past the highest
/// sequence number the file shows evidence of).
fn quarantined_segments<S: Storage>(storage: &S, dir: &Path) -> io::Result<Vec<(u64, u64)>> {
    let paths = match storage.list(&dir.join(QUARANTINE_DIR)) {
        Ok(p) => p,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    let mut out = Vec::new();
    for path in paths {
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
        if let Some(FileKind::Open(id) | FileKind::Sealed(id)) = classify(name) {
            out.push((id, seq_floor(storage, &path)?));
        }
    }
    Ok(out)
}

/// One past the highest sequence number a (possibly damaged) segment file
/// shows evidence of: a valid header's `first_seq` plus the records that
/// pass their check, and a valid footer's `last_seq + 1` at the end of the
/// file. 0 when neither header nor footer can be trusted.
fn seq_floor<S: Storage>(storage: &S, path: &Path) -> io::Result<u64> {
    let file = storage.open_read(path)?;
    let mut floor = 0;
    let len = file.len()?;
    if len >= FOOTER_LEN as u64 {
        let mut raw = [0u8; FOOTER_LEN];
        if read_full_at(&file, len - FOOTER_LEN as u64, &mut raw)? == FOOTER_LEN {
            if let Ok(f) = Footer::decode(&raw) {
                floor = f.last_seq.wrapping_add(1);
            }
        }
    }
    if let Opened::Reader(mut r) = SegmentReader::from_file(file)? {
        while r.next()?.is_some() {}
        floor = floor.max(r.next_seq());
    }
    Ok(floor)
}

/// Copy the non-zero bytes past a cut into quarantine, so nothing that
/// cannot be trusted is silently destroyed.
#[allow(clippy::too_many_arguments)]
fn save_tail<S: Storage>(
    storage: &S,
    dir: &Path,
    file: &S::File,
    id: u64,
    from: u64,
    file_len: u64,
    detail: &str,
    report: &mut RecoveryReport,
) -> io::Result<()> {
    let mut buf = vec![0u8; 1024 * 1024];
    let mut last_nonzero_end = from;
    let mut at = from;
    while at < file_len {
        let n = read_full_at(file, at, &mut buf)?;
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
    let qdir = dir.join(QUARANTINE_DIR);
    create_dir_durable(storage, &qdir)?;
    let target = qdir.join(format!("{id:016x}.tail-at-{from}"));
    let _ = storage.remove(&target);
    let mut out = storage.create(&target)?;
    let mut at = from;
    while at < last_nonzero_end {
        let want = ((last_nonzero_end - at) as usize).min(buf.len());
        let n = read_full_at(file, at, &mut buf[..want])?;
        out.write_all_at(at - from, &[IoSlice::new(&buf[..n])])?;
        at += n as u64;
    }
    out.sync_all()?;
    write_reason(
        storage,
        &qdir,
        &target,
        &format!("bytes cut from an unsealed segment at offset {from}: {detail}"),
    )?;
    storage.sync_dir(&qdir)?;
    tracing::warn!(segment = id, offset = from, bytes = last_nonzero_end - from, reason = detail, path = %target.display(), "cut a torn tail; saved the cut bytes in quarantine");
    report.quarantined.push((target, detail.to_string()));
    Ok(())
}

/// Move `path` into `<dir>/quarantine/` with a `.reason` file beside it.
pub fn quarantine<S: Storage>(
    storage: &S,
    dir: &Path,
    path: &Path,
    reason: &str,
    report: &mut RecoveryReport,
) -> io::Result<()> {
    let qdir = dir.join(QUARANTINE_DIR);
    create_dir_durable(storage, &qdir)?;
    let name = path
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or("segment");
    let target = qdir.join(name);
    write_reason(storage, &qdir, &target, reason)?;
    storage.rename(path, &target)?;
    storage.sync_dir(&qdir)?;
    storage.sync_dir(dir)?;
    tracing::error!(path = %path.display(), moved_to = %target.display(), reason, "quarantined a segment that cannot be trusted");
    report.quarantined.push((target, reason.to_string()));
    Ok(())
}

fn write_reason<S: Storage>(
    storage: &S,
    _qdir: &Path,
    target: &Path,
    reason: &str,
) -> io::Result<()> {
    let mut reason_path = target.as_os_str().to_owned();
    reason_path.push(".reason");
    let reason_path = PathBuf::from(reason_path);
    let _ = storage.remove(&reason_path);
    let mut f = storage.create(&reason_path)?;
    let text = format!("{reason}\n");
    f.write_all_at(0, &[IoSlice::new(text.as_bytes())])?;
    f.sync_all()
}
