//! Opening a shard at start-up: the one place that ties the delivery
//! checkpoint to what the segments hold, so that no loss goes unreported
//! and no sequence number is handed out twice.
//!
//! [`open_shard`] loads the checkpoint ([`load_checkpoint`]: an unreadable
//! one is moved aside), recovers the segments ([`crate::recover_shard`]), and then
//! checks the two against each other:
//!
//! - **Gaps.** Sequence numbers between two consecutive segments, between
//!   a valid checkpoint and the oldest segment, or past the newest segment
//!   up to what a quarantined segment shows, that no kept segment holds
//!   (less those a segment's header says the writer skipped after a
//!   failed group: no record ever had them): a
//!   segment deleted from outside, quarantined whole, or cut short (the
//!   reason says which, as far as the folder shows). Each is logged as an
//!   error with its range and count, listed in [`RecoveryReport::gaps`],
//!   and recorded once in `quarantine/gap-<first>-<last>.reason`; on later
//!   starts it stays in the report (`new: false`) but is not logged as new.
//!   Numbers below a checkpoint that was read are not gaps (delivered), nor
//!   is a jump of `next_seq` this module made on purpose (below).
//! - **Unnumbered records.** A quarantined segment whose header nothing
//!   proves, newer than every segment kept, gets numbers presumed for its
//!   intact records past the clock's floor (below: the writer may have
//!   started it past numbers it skipped after a failed group, which only
//!   the lost header said), written into its name
//!   (`<name>.seqs-<first>-<last>.after-<end>`, `<end>` where everything
//!   else the shard shows ended): it then counts as a gap like any
//!   quarantined segment, `next_seq` stays past it, and the numbers from
//!   `<end>` to `<first>` are a jump, never counted as lost.
//! - **`lost_records`**: the salvaged holes and every gap: each
//!   acknowledged record recovery cannot deliver, counted once.
//! - **A checkpoint ahead of the data.** Segments exist but the checkpoint
//!   says more was confirmed than any of them (or the quarantine) shows:
//!   it cannot be trusted. It is logged, reported
//!   ([`RecoveryReport::untrusted_checkpoint`]), moved aside to
//!   `checkpoint.ahead-<unix_us>.seq-<value>` (emptied: the value is in
//!   the name, and the evidence takes no room), and delivery restarts at the oldest
//!   record kept (at-least-once).
//!
//! Sequence numbers are never reused: `next_seq` is at least every number a
//! segment or quarantined file shows (the numbers presumed in a quarantined
//! file's name included), the checkpoint, every number a gap reason file
//! names, every number of this shard a sink's dead-letter or requeue store
//! holds a record under ([`open_shard_seen`]; those past the data are
//! counted as a gap: each was a durable record once), and every value a
//! checkpoint moved aside as "ahead" held (the
//! sink may have received records under those numbers). When the checkpoint could not be read and
//! no segment is left, nothing shows how far numbering had gone; then
//! `next_seq` is floored at the time (µs since the epoch) in the name of
//! the moved-aside file: numbers are handed out one per record, so a shard
//! would need more than a million records a second for about fifty years
//! to have counted past the clock. Every such floor is a jump that the
//! next segment starts at; it is recorded by the moved-aside file itself,
//! so later starts do not mistake it for a gap.

use std::io;
use std::path::{Path, PathBuf};

use crate::checkpoint::{
    cursor_file, cursor_sinks, load_checkpoint, move_ahead_aside, moved_aside_floors,
    read_checkpoint_file, write_checkpoint, CheckpointLoad, CHECKPOINT_FILE,
};
use crate::format::now_unix_us;
use crate::format::SEGMENT_HEADER_LEN;
use crate::recovery::{
    presumed_jump, recover_shard_with, Recovered, RecoveryReport, SealedCheck, SeqGap,
    UntrustedCheckpoint, QUARANTINE_DIR,
};
use crate::salvage::count_intact;
use crate::storage::{create_dir_durable, is_no_space, Storage, StorageFile};

/// A shard ready to start.
pub struct OpenedShard<F> {
    /// The recovery report (with `gaps`, `lost_records`,
    /// `untrusted_checkpoint` filled in, and `next_seq` floored as above)
    /// and the spare segments.
    pub recovered: Recovered<F>,
    /// Deliver from this sequence number: the checkpoint, or the oldest
    /// record kept when the checkpoint was unreadable or ahead of the data.
    pub confirmed: u64,
    /// What loading the checkpoint found (`corrupt`, `moved_aside`).
    pub checkpoint: CheckpointLoad,
}

/// Open shard folder `dir` (created durably if missing): load the
/// checkpoint, recover the segments, report gaps and an untrusted
/// checkpoint, and floor `next_seq`. See the module documentation. Every
/// record of every segment is checked ([`SealedCheck::Records`]).
pub fn open_shard<S: Storage>(
    storage: &S,
    dir: &Path,
    shard: u32,
) -> io::Result<OpenedShard<S::File>> {
    open_shard_with(storage, dir, shard, SealedCheck::Records)
}

/// [`open_shard`], with sealed segments treated as `check` says (the
/// daemon's start takes intact footers at their word and checks the
/// records behind them in the background).
pub fn open_shard_with<S: Storage>(
    storage: &S,
    dir: &Path,
    shard: u32,
    check: SealedCheck,
) -> io::Result<OpenedShard<S::File>> {
    open_shard_seen(storage, dir, shard, check, 0)
}

/// [`open_shard_with`], where `seen` is one past the highest sequence
/// number of this shard that anything outside the shard folder holds (the
/// sinks' dead-letter and requeue stores): no record is numbered below it,
/// and the numbers between what the segments show and `seen` were issued
/// (a record was durable under each, or no store would hold it), so those
/// missing are counted as a gap.
pub fn open_shard_seen<S: Storage>(
    storage: &S,
    dir: &Path,
    shard: u32,
    check: SealedCheck,
    seen: u64,
) -> io::Result<OpenedShard<S::File>> {
    create_dir_durable(storage, dir)?;
    let checkpoint = load_checkpoint(storage, dir)?;
    // Floor 0: next_seq then says how far the files themselves go.
    let mut recovered = recover_shard_with(storage, dir, shard, 0, check)?;
    let data_end = recovered.report.next_seq;
    let report = &mut recovered.report;
    let mut confirmed =
        distrust_checkpoint_ahead(storage, dir, shard, report, checkpoint.confirmed, data_end)?;
    // A cursor past what the files show and a checkpoint that is trusted
    // is ahead (one ahead of an untrusted checkpoint too: a second start
    // then finds what the first did).
    move_cursors_ahead_aside(storage, dir, shard, data_end.max(confirmed))?;
    // Listed after the moves above, so this start's own jumps are included.
    let (ahead, corrupt) = moved_aside_floors(storage, dir)?;
    report.next_seq = floored_next_seq(
        report,
        data_end.max(checkpoint.confirmed).max(seen),
        &ahead,
        &corrupt,
    );
    let before_unnumbered = report.next_seq;
    number_the_unnumbered(storage, dir, report)?;
    // No number a record, a checkpoint or a store outside showed is handed
    // out again.
    assert!(
        report.next_seq >= before_unnumbered
            && before_unnumbered >= data_end.max(checkpoint.confirmed).max(seen),
        "shard {shard}: recovery would number from {} below a number in use",
        report.next_seq
    );

    let trusted = checkpoint.found && report.untrusted_checkpoint.is_none();
    let mut candidates = gaps_up_to_newest(report, trusted, confirmed);
    // Past the newest segment kept, from where it ends (or, with none,
    // from a checkpoint that was read, or from where the fresh checkpoint
    // written below says: later starts read it and count from there too).
    let delivered_below = if trusted { confirmed } else { 0 };
    let low = match report.segments.last() {
        Some(s) => (s.first_seq + s.record_count).max(delivered_below),
        None if trusted => confirmed,
        None => before_unnumbered,
    };
    candidates.extend(gaps_past_newest(report, low, seen));
    recorded_gaps_past(report, low, &mut candidates);
    let jumps: Vec<u64> = ahead.iter().chain(&corrupt).copied().collect();
    report_gaps(storage, dir, shard, report, candidates, &jumps)?;
    report.lost_records = lost_records(report);
    if !checkpoint.found || checkpoint.corrupt || report.untrusted_checkpoint.is_some() {
        // (Not past the numbers presumed for unnumbered records: they were
        // not delivered, and later starts count that gap as long as the
        // checkpoint is below it.)
        confirmed = report
            .segments
            .first()
            .map_or(before_unnumbered, |s| s.first_seq);
        write_fresh_checkpoint(storage, dir, shard, confirmed)?;
    }
    Ok(OpenedShard {
        recovered,
        confirmed,
        checkpoint,
    })
}

/// Where delivery restarts: the checkpoint's value `confirmed`, unless
/// segments exist and it is past everything they hold (`data_end`); such a
/// checkpoint cannot be trusted: it is moved aside, logged and reported,
/// and delivery restarts at the oldest record kept (at-least-once).
fn distrust_checkpoint_ahead<S: Storage>(
    storage: &S,
    dir: &Path,
    shard: u32,
    report: &mut RecoveryReport,
    confirmed: u64,
    data_end: u64,
) -> io::Result<u64> {
    let Some(oldest) = report.segments.first().map(|s| s.first_seq) else {
        return Ok(confirmed);
    };
    if confirmed <= data_end {
        return Ok(confirmed);
    }
    let moved_to = move_ahead_aside(storage, dir, CHECKPOINT_FILE, confirmed)?;
    tracing::error!(
        shard,
        checkpoint = confirmed,
        data_end,
        moved_to = %moved_to.display(),
        "delivery checkpoint is ahead of every segment and cannot be trusted; moved it \
         aside and will redeliver from the oldest record kept (at-least-once)"
    );
    report.untrusted_checkpoint = Some(UntrustedCheckpoint {
        value: confirmed,
        data_end,
        moved_to,
    });
    Ok(oldest)
}

/// `next_seq` above every number handed out: `from` (the data's end, the
/// checkpoint and what the stores outside hold), every floor a
/// checkpoint or cursor moved aside as ahead held, every gap an earlier
/// start recorded (those numbers were acknowledged once), and, with no
/// segment left, every value a corrupt checkpoint was moved aside at.
fn floored_next_seq(report: &RecoveryReport, from: u64, ahead: &[u64], corrupt: &[u64]) -> u64 {
    let mut next_seq = from.max(ahead.iter().copied().max().unwrap_or(0));
    let recorded = report.recorded_gaps.iter().map(|&(_, last)| last + 1);
    next_seq = next_seq.max(recorded.max().unwrap_or(0));
    if report.segments.is_empty() {
        next_seq = next_seq.max(corrupt.iter().copied().max().unwrap_or(0));
    }
    next_seq
}

/// The records of an unnumbered segment (its header damaged beyond proof)
/// older than a segment whose numbers are known lie inside a gap counted
/// later (or below the checkpoint, delivered). The newest such segment
/// gets numbers presumed for its intact records, right after everything
/// the shard shows (where the writer started it, unless a floor it knew of
/// is gone), written into its name in quarantine/ (a rename: no space
/// needed): from then on it is a quarantined segment with a range, counted
/// as a gap, and no number its records may carry is handed out again.
fn number_the_unnumbered<S: Storage>(
    storage: &S,
    dir: &Path,
    report: &mut RecoveryReport,
) -> io::Result<()> {
    let qdir = dir.join(QUARANTINE_DIR);
    let mut nameless: Vec<(u64, String)> = report
        .in_quarantine
        .iter()
        .filter(|q| q.range.is_none())
        .map(|q| (q.segment_id, q.name.clone()))
        .collect();
    // (Also one a start that crashed moved there and left unnamed.)
    nameless.sort();
    for (id, name) in nameless {
        let followed = report.segments.iter().any(|s| s.segment_id > id)
            || report
                .in_quarantine
                .iter()
                .any(|q| q.segment_id > id && q.range.is_some());
        if followed {
            continue;
        }
        let path = qdir.join(&name);
        let records = count_intact(&storage.open_read(&path)?, SEGMENT_HEADER_LEN as u64, id)?;
        if records == 0 {
            continue;
        }
        // The writer may have started it past the data's end (numbers it
        // skipped after a failed group, recorded in the header that is
        // gone), so its records may carry any number up to the clock's:
        // presume them past the same floor as an unreadable checkpoint's,
        // and record where the data ended, so the numbers between are
        // never counted as a gap.
        let after = report.next_seq;
        let first = after.max(now_unix_us());
        let end = first + records;
        let to = presume_numbers(storage, dir, &path, after, first, end)?;
        let new_name = to.file_name().unwrap_or_default().to_string_lossy();
        for q in &mut report.in_quarantine {
            if q.segment_id == id && q.name == name {
                q.name = new_name.to_string();
                q.range = Some((first, end));
            }
        }
        for u in &mut report.unnumbered {
            if u.segment_id == id {
                u.path = to.clone();
            }
        }
        report.next_seq = end;
    }
    for u in &mut report.unnumbered {
        u.counted_by_gap = true;
    }
    Ok(())
}

/// Where a gap could be up to the newest segment kept: between a
/// checkpoint that was read (`trusted`, at `confirmed`) and the oldest
/// segment, and between two segments. (Numbers the writer skipped before
/// a segment, after a failed group, were never any record's: not a gap.)
fn gaps_up_to_newest(report: &RecoveryReport, trusted: bool, confirmed: u64) -> Vec<Candidate> {
    let mut candidates = Vec::new();
    if let Some(oldest) = report.segments.first() {
        // Only a checkpoint that was read says where delivery stood; with
        // none (or an unreadable one) the missing numbers may well have
        // been delivered and deleted.
        let numbered_from = oldest.first_seq - oldest.skipped;
        if trusted && confirmed < numbered_from {
            candidates.push(Candidate {
                first: confirmed,
                last: numbered_from - 1,
                place: format!(
                    "between the delivery checkpoint ({confirmed}) and the oldest segment \
                     ({:016x}, first seq {})",
                    oldest.segment_id, oldest.first_seq
                ),
                before: None,
                after: Some(oldest.segment_id),
            });
        }
    }
    // Below a checkpoint that was read, a hole between segments is a
    // segment delivered and deleted while an older one stayed (a crash
    // between the checkpoint write and the deletion, or a deletion a power
    // cut undid): nothing there is lost. Only the part at or past the
    // checkpoint is.
    let delivered_below = if trusted { confirmed } else { 0 };
    for w in report.segments.windows(2) {
        let seg_end = w[0].first_seq + w[0].record_count;
        let end = seg_end.max(delivered_below);
        let numbered_from = w[1].first_seq - w[1].skipped;
        if numbered_from > end {
            candidates.push(Candidate {
                first: end,
                last: numbered_from - 1,
                place: format!(
                    "between segment {:016x} (ends before seq {seg_end}) and segment {:016x} \
                     (first seq {})",
                    w[0].segment_id, w[1].segment_id, w[1].first_seq
                ),
                before: Some(w[0].segment_id),
                after: Some(w[1].segment_id),
            });
        }
    }
    candidates
}

/// Where a gap could be past the newest segment kept (from `low`): the
/// numbers segments in quarantine show were used, and those the old footer
/// of the newest segment, cut short, says it held, and those below `seen`
/// a store outside holds. Numbers none of them shows are not counted.
fn gaps_past_newest(report: &RecoveryReport, low: u64, seen: u64) -> Vec<Candidate> {
    let newest = report.segments.last();
    let mut used: Vec<(u64, u64)> = report
        .in_quarantine
        .iter()
        .filter_map(|q| q.range)
        .chain(
            report
                .cut_short
                .iter()
                .filter_map(|c| c.known_end.map(|e| (c.end_seq, e))),
        )
        // Numbers a dead-letter or requeue store holds a record under:
        // each was durable once (only what is durable is read), so
        // those past the data are records gone from it (a tail cut or
        // deleted from outside). (A checkpoint or cursor ahead of the
        // data floors the numbering but is not counted: a restored
        // backup or a copied file cannot be told from a cut tail.)
        .chain([(low, seen)])
        .map(|(from, to)| (from.max(low), to))
        .filter(|(from, to)| from < to)
        .collect();
    used.sort_unstable();
    let mut merged: Vec<(u64, u64)> = Vec::new();
    for (from, to) in used {
        match merged.last_mut() {
            Some(last) if from <= last.1 => last.1 = last.1.max(to),
            _ => merged.push((from, to)),
        }
    }
    merged
        .into_iter()
        .map(|(from, to)| Candidate {
            first: from,
            last: to - 1,
            place: match newest {
                Some(s) => format!(
                    "after the newest segment kept ({:016x}, ends before seq {})",
                    s.segment_id,
                    s.first_seq + s.record_count
                ),
                None => format!("from seq {low} on, with no segment kept"),
            },
            before: newest.map(|s| s.segment_id),
            after: None,
        })
        .collect()
}

/// Gaps an earlier start recorded past everything kept (from `low`: the
/// numbers of an unnumbered segment, or of a quarantined one, that was the
/// newest) stay listed and counted, as those between segments do.
fn recorded_gaps_past(report: &RecoveryReport, low: u64, candidates: &mut Vec<Candidate>) {
    let newest = report.segments.last();
    for &(first, last) in &report.recorded_gaps {
        if first >= low
            && !candidates
                .iter()
                .any(|c| (c.first, c.last) == (first, last))
        {
            candidates.push(Candidate {
                first,
                last,
                place: "past the newest segment kept (recorded by an earlier start)".into(),
                before: newest.map(|s| s.segment_id),
                after: None,
            });
        }
    }
}

/// Reports each candidate that is a gap (logged, recorded, listed in
/// `report.gaps`): not the numbers left unused when an unnumbered
/// segment's were presumed past a floor, nor one that ends right where a
/// deliberate jump of next_seq (`jumps`: the floors moved-aside files
/// record) started the next segment.
fn report_gaps<S: Storage>(
    storage: &S,
    dir: &Path,
    shard: u32,
    report: &mut RecoveryReport,
    candidates: Vec<Candidate>,
    jumps: &[u64],
) -> io::Result<()> {
    let presumed_jumps: Vec<(u64, u64)> = report
        .in_quarantine
        .iter()
        .filter_map(|q| presumed_jump(&q.name))
        .collect();
    let candidates = candidates
        .into_iter()
        .flat_map(|c| without_jumps(c, &presumed_jumps));
    for c in candidates {
        if jumps.contains(&(c.last + 1)) {
            continue;
        }
        let cause = cause_of(storage, dir, report, &c)?;
        let gap = report_gap(storage, dir, shard, c.first, c.last, &c.place, &cause)?;
        report.gaps.push(gap);
    }
    Ok(())
}

/// Every acknowledged record recovery cannot deliver, counted once: the
/// salvaged holes, the unnumbered records no gap counts, and every gap.
fn lost_records(report: &RecoveryReport) -> u64 {
    report.salvaged.iter().map(|s| s.lost_records).sum::<u64>()
        + report
            .unnumbered
            .iter()
            .filter(|u| !u.counted_by_gap)
            .map(|u| u.records)
            .sum::<u64>()
        + report.gaps.iter().map(|g| g.count()).sum::<u64>()
}

/// Leaves a checkpoint that says where delivery restarts (`confirmed`),
/// written now while there is space: later updates go in place and need
/// none, so a disk that fills before the first delivery cannot block every
/// confirmation (and with it every deletion). A later start then reads
/// this one instead of guessing again.
fn write_fresh_checkpoint<S: Storage>(
    storage: &S,
    dir: &Path,
    shard: u32,
    confirmed: u64,
) -> io::Result<()> {
    match write_checkpoint(storage, dir, confirmed) {
        Err(e) if !is_no_space(&e) => Err(e),
        Err(e) => {
            tracing::warn!(shard, error = %e, "no space to create the delivery checkpoint yet; it is created at the first delivery");
            Ok(())
        }
        Ok(()) => Ok(()),
    }
}

/// Rename `quarantine/<name>` (an unnumbered segment) to
/// `quarantine/<name>.seqs-<first>-<last>`, its `.reason` with it (that
/// first, so a rerun after a crash between the two finds the segment still
/// unnumbered and does the same): the numbers presumed for its records,
/// recorded where no space is needed. Returns the new path.
fn presume_numbers<S: Storage>(
    storage: &S,
    dir: &Path,
    path: &Path,
    after: u64,
    first: u64,
    end: u64,
) -> io::Result<PathBuf> {
    let qdir = dir.join(QUARANTINE_DIR);
    let name = path.file_name().unwrap_or_default().to_string_lossy();
    let mut new_name = format!("{name}.seqs-{first}-{}", end - 1);
    if after < first {
        new_name.push_str(&format!(".after-{after}"));
    }
    let reason = qdir.join(format!("{name}.reason"));
    match storage.rename(&reason, &qdir.join(format!("{new_name}.reason"))) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
        _ => {}
    }
    let to = qdir.join(&new_name);
    storage.rename(path, &to)?;
    storage.sync_dir(&qdir)?;
    Ok(to)
}

/// `c` less the numbers in `jumps` (`[from, to)` each): none, one or
/// several candidates.
fn without_jumps(c: Candidate, jumps: &[(u64, u64)]) -> Vec<Candidate> {
    let mut pieces = vec![c];
    for &(from, to) in jumps {
        pieces = pieces
            .into_iter()
            .flat_map(|c| {
                if to <= c.first || from > c.last {
                    return vec![c];
                }
                let mut out = Vec::new();
                if c.first < from {
                    out.push(Candidate {
                        last: from - 1,
                        place: c.place.clone(),
                        ..c
                    });
                }
                if to <= c.last {
                    out.push(Candidate { first: to, ..c });
                }
                out
            })
            .collect();
    }
    pieces
}

/// Sequence numbers that may be missing, and where.
struct Candidate {
    first: u64,
    last: u64,
    place: String,
    /// Ids of the kept segments before and after the hole, if any.
    before: Option<u64>,
    after: Option<u64>,
}

/// Why the numbers of `c` are in no segment, as far as the folder says:
/// segment files in quarantine that cover them or sit between the segments
/// around them, the segment before them cut short (its
/// `quarantine/<id>.cut-at-<end>` copy), or else a segment deleted from
/// outside.
fn cause_of<S: Storage>(
    storage: &S,
    dir: &Path,
    report: &RecoveryReport,
    c: &Candidate,
) -> io::Result<String> {
    let between = |id: u64| c.before.is_none_or(|b| id > b) && c.after.is_none_or(|a| id < a);
    let held: Vec<&str> = report
        .in_quarantine
        .iter()
        .filter(|q| match q.range {
            Some((from, to)) => (from <= c.last && to > c.first) || between(q.segment_id),
            None => between(q.segment_id),
        })
        .map(|q| q.name.as_str())
        .collect();
    if !held.is_empty() {
        return Ok(format!(
            "quarantine/ holds {} from here, which recovery could not trust or number (see the \
             .reason beside each)",
            held.join(", ")
        ));
    }
    if let Some(before) = c
        .before
        .and_then(|id| report.segments.iter().find(|s| s.segment_id == id))
    {
        let name = format!("{:016x}.cut-at-{}", before.segment_id, before.bytes);
        let reason = dir.join(QUARANTINE_DIR).join(format!("{name}.reason"));
        if storage.open_read(&reason).is_ok() {
            return Ok(format!(
                "segment {:016x} before them was cut short and they went with its end (see \
                 quarantine/{name}.reason)",
                before.segment_id
            ));
        }
    }
    Ok("a segment file was probably deleted from outside the daemon".to_string())
}

/// Record a gap: its reason file (written once), and a log line (an error
/// when new, a warning when an earlier start already reported it).
fn report_gap<S: Storage>(
    storage: &S,
    dir: &Path,
    shard: u32,
    first: u64,
    last: u64,
    place: &str,
    cause: &str,
) -> io::Result<SeqGap> {
    let count = last - first + 1;
    let qdir = dir.join(QUARANTINE_DIR);
    let path = qdir.join(format!("gap-{first}-{last}.reason"));
    let known = storage.open_read(&path).is_ok();
    if known {
        tracing::warn!(shard, first_seq = first, last_seq = last, lost_records = count, reason_file = %path.display(),
            "known gap in the shard's sequence numbers (reported at an earlier start)");
        return Ok(SeqGap {
            first,
            last,
            reason_file: Some(path),
            new: false,
        });
    }
    tracing::error!(
        shard,
        first_seq = first,
        last_seq = last,
        lost_records = count,
        place,
        cause,
        "sequence numbers missing from the shard: no segment holds them; these records are lost \
         unless they had been delivered"
    );
    let text = format!(
        "sequence numbers {first}..={last} ({count} records) are in no segment: {place}. \
         They were accepted and are lost unless the sink had received them; {cause}.\n"
    );
    let written = write_once(storage, &qdir, &path, text.as_bytes());
    let reason_file = match written {
        Ok(()) => Some(path),
        Err(e) if is_no_space(&e) => {
            tracing::error!(path = %path.display(), error = %e,
                "no space to write the gap's reason file; carrying on without it");
            let _ = storage.remove(&path);
            None
        }
        Err(e) => return Err(e),
    };
    Ok(SeqGap {
        first,
        last,
        reason_file,
        new: true,
    })
}

/// Write a small file durably under a name that did not exist (written to
/// `<name>.tmp` first, so a crash never leaves a half-written reason that a
/// later start would take as "already reported").
fn write_once<S: Storage>(storage: &S, qdir: &Path, path: &Path, bytes: &[u8]) -> io::Result<()> {
    create_dir_durable(storage, qdir)?;
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    let tmp = PathBuf::from(tmp);
    let _ = storage.remove(&tmp);
    let mut f = storage.create(&tmp)?;
    let done = f
        .write_all_at(0, &[std::io::IoSlice::new(bytes)])
        .and_then(|()| f.sync_all())
        .and_then(|()| storage.rename(&tmp, path));
    if let Err(e) = done {
        let _ = storage.remove(&tmp);
        return Err(e);
    }
    storage.sync_dir(qdir)
}

/// A sink's cursor past every number the shard shows (`end`: the data's
/// end, or the shard's checkpoint if higher) cannot be trusted either: it
/// is moved aside as a `checkpoint.ahead-` file, so it floors `next_seq`
/// like an untrusted checkpoint (the sink may hold records under those
/// numbers) and later starts know the jump, and the sink starts again at
/// the shard's checkpoint (at-least-once). A cursor with no valid slot is
/// left to the sink's own load, which moves it aside; one that cannot be
/// read at all (an I/O error) fails the start: ignoring it once let new
/// records take numbers a sink's cursor had passed (issue 39).
fn move_cursors_ahead_aside<S: Storage>(
    storage: &S,
    dir: &Path,
    shard: u32,
    end: u64,
) -> io::Result<()> {
    for sink in cursor_sinks(storage, dir)? {
        let file = cursor_file(&sink);
        let value = match read_checkpoint_file(storage, dir, &file) {
            Ok(value) => value,
            // No valid slot: the sink's own load moves it aside and starts
            // it at the shard's checkpoint, below anything it passed.
            Err(e) if e.kind() == io::ErrorKind::InvalidData => continue,
            // Anything else (EIO) says nothing about the value: the cursor
            // may be ahead of the data (past nacked numbers an abandoned
            // segment ended with), and numbering from the data's end would
            // give those numbers to new records the sink then never gets.
            // The start fails and is tried again.
            Err(e) => {
                return Err(io::Error::new(
                    e.kind(),
                    format!("reading sink {sink}'s cursor in {}: {e}", dir.display()),
                ))
            }
        };
        if value <= end {
            continue;
        }
        let moved_to = move_ahead_aside(storage, dir, &file, value)?;
        // An empty cursor file in its place: the sink is still a member and
        // starts at the shard's checkpoint (not where a new sink would).
        // It needs no data block, so a full disk cannot stop it.
        storage.create(&dir.join(&file))?;
        storage.sync_dir(dir)?;
        tracing::error!(
            shard,
            sink = %sink,
            cursor = value,
            data_end = end,
            moved_to = %moved_to.display(),
            "a sink's cursor is ahead of every segment and cannot be trusted; moved it aside \
             and the sink starts again at the shard's checkpoint (at-least-once)"
        );
    }
    Ok(())
}
