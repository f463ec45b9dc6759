//! Opening a shard at start-up: the one place that ties the delivery
//! checkpoint to what the segments hold, so that no loss goes unreported
//! and no sequence number is handed out twice.
//!
//! [`open_shard`] loads the checkpoint ([`load_checkpoint`]: an unreadable
//! one is moved aside), recovers the segments ([`recover_shard`]), and then
//! checks the two against each other:
//!
//! - **Gaps.** Sequence numbers between two consecutive segments, or
//!   between a valid checkpoint and the oldest segment, that no file holds
//!   (a segment deleted from outside). Each is logged as an error with its
//!   range and count, listed in [`RecoveryReport::gaps`], and recorded once
//!   in `quarantine/gap-<first>-<last>.reason`; on later starts it stays in
//!   the report (`new: false`) but is not logged as new. Ranges a
//!   quarantined segment covers are not gaps (the quarantine reported
//!   them), nor is a jump of `next_seq` this module made on purpose (below).
//! - **A checkpoint ahead of the data.** Segments exist but the checkpoint
//!   says more was confirmed than any of them (or the quarantine) shows:
//!   it cannot be trusted. It is logged, reported
//!   ([`RecoveryReport::untrusted_checkpoint`]), moved aside to
//!   `checkpoint.ahead-<unix_us>`, and delivery restarts at the oldest
//!   record kept (at-least-once).
//!
//! Sequence numbers are never reused: `next_seq` is at least every number a
//! segment or quarantined file shows, the checkpoint, and every value a
//! checkpoint moved aside as "ahead" held (the sink may have received
//! records under those numbers). When the checkpoint could not be read and
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
    load_checkpoint, move_aside, moved_aside_floors, write_checkpoint, CheckpointLoad, AHEAD_PREFIX,
};
use crate::recovery::{
    quarantined_ranges, recover_shard, Recovered, SeqGap, UntrustedCheckpoint, QUARANTINE_DIR,
};
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
/// checkpoint, and floor `next_seq`. See the module documentation.
pub fn open_shard<S: Storage>(
    storage: &S,
    dir: &Path,
    shard: u32,
) -> io::Result<OpenedShard<S::File>> {
    create_dir_durable(storage, dir)?;
    let checkpoint = load_checkpoint(storage, dir)?;
    // Floor 0: next_seq then says how far the files themselves go.
    let mut recovered = recover_shard(storage, dir, shard, 0)?;
    let data_end = recovered.report.next_seq;
    let report = &mut recovered.report;
    let mut confirmed = checkpoint.confirmed;
    if let Some(oldest) = report.segments.first().map(|s| s.first_seq) {
        if confirmed > data_end {
            let moved_to = move_aside(storage, dir, AHEAD_PREFIX)?;
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
            confirmed = oldest;
        }
    }
    // Listed after the move above, so this start's own jump is included.
    let (ahead, corrupt) = moved_aside_floors(storage, dir)?;
    let mut next_seq = data_end.max(checkpoint.confirmed);
    next_seq = next_seq.max(ahead.iter().copied().max().unwrap_or(0));
    if report.segments.is_empty() {
        next_seq = next_seq.max(corrupt.iter().copied().max().unwrap_or(0));
    }
    report.next_seq = next_seq;

    // Where a gap could be: (first missing, last missing, where).
    let mut candidates: Vec<(u64, u64, String)> = Vec::new();
    if let Some(oldest) = report.segments.first() {
        // Only a checkpoint that was read says where delivery stood; with
        // none (or an unreadable one) the missing numbers may well have
        // been delivered and deleted.
        if checkpoint.found && report.untrusted_checkpoint.is_none() && confirmed < oldest.first_seq
        {
            candidates.push((
                confirmed,
                oldest.first_seq - 1,
                format!(
                    "between the delivery checkpoint ({confirmed}) and the oldest segment \
                     ({:016x}, first seq {})",
                    oldest.segment_id, oldest.first_seq
                ),
            ));
        }
    }
    // Below a checkpoint that was read, a hole between segments is a
    // segment delivered and deleted while an older one stayed (a crash
    // between the checkpoint write and the deletion, or a deletion a power
    // cut undid): nothing there is lost. Only the part at or past the
    // checkpoint is.
    let delivered_below = if checkpoint.found && report.untrusted_checkpoint.is_none() {
        confirmed
    } else {
        0
    };
    for w in report.segments.windows(2) {
        let seg_end = w[0].first_seq + w[0].record_count;
        let end = seg_end.max(delivered_below);
        if w[1].first_seq > end {
            candidates.push((
                end,
                w[1].first_seq - 1,
                format!(
                    "between segment {:016x} (ends before seq {seg_end}) and segment {:016x} \
                     (first seq {})",
                    w[0].segment_id, w[1].segment_id, w[1].first_seq
                ),
            ));
        }
    }
    if !candidates.is_empty() {
        let jumps: Vec<u64> = ahead.iter().chain(&corrupt).copied().collect();
        let covered = quarantined_ranges(storage, dir)?;
        for (first, last, place) in candidates {
            // A deliberate jump of next_seq: the next segment started at
            // a floor a moved-aside checkpoint records.
            if jumps.contains(&(last + 1)) {
                continue;
            }
            for (first, last) in uncovered(first, last, &covered) {
                let gap = report_gap(storage, dir, shard, first, last, &place)?;
                report.gaps.push(gap);
            }
        }
    }
    report.lost_records += report.gaps.iter().map(|g| g.count()).sum::<u64>();
    if !checkpoint.found || checkpoint.corrupt || report.untrusted_checkpoint.is_some() {
        // Leave a checkpoint that says where delivery restarts (the oldest
        // record kept, or nothing to deliver), written now while there is
        // space: later updates go in place and need none, so a disk that
        // fills before the first delivery cannot block every confirmation
        // (and with it every deletion). A later start then reads this one
        // instead of guessing again.
        confirmed = report
            .segments
            .first()
            .map_or(report.next_seq, |s| s.first_seq);
        if let Err(e) = write_checkpoint(storage, dir, confirmed) {
            if !is_no_space(&e) {
                return Err(e);
            }
            tracing::warn!(shard, error = %e, "no space to create the delivery checkpoint yet; it is created at the first delivery");
        }
    }
    Ok(OpenedShard {
        recovered,
        confirmed,
        checkpoint,
    })
}

/// The parts of `first..=last` no range in `covered` (`[from, to)`) holds.
fn uncovered(first: u64, last: u64, covered: &[(u64, u64)]) -> Vec<(u64, u64)> {
    let mut pieces = vec![(first, last)];
    for &(from, to) in covered {
        let mut next = Vec::new();
        for (a, b) in pieces {
            if to <= a || from > b {
                next.push((a, b));
                continue;
            }
            if from > a {
                next.push((a, from - 1));
            }
            if to <= b {
                next.push((to, b));
            }
        }
        pieces = next;
    }
    pieces
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
        "sequence numbers missing from the shard: no segment holds them (a segment deleted from \
         outside?); these records are lost unless they had been delivered"
    );
    let text = format!(
        "sequence numbers {first}..={last} ({count} records) are in no segment: {place}. \
         They were accepted and are lost unless the sink had received them; a segment file was \
         probably deleted from outside the daemon.\n"
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

#[cfg(test)]
mod tests {
    use super::uncovered;

    #[test]
    fn uncovered_subtracts_half_open_ranges() {
        assert_eq!(uncovered(5, 8, &[]), vec![(5, 8)]);
        assert_eq!(uncovered(5, 8, &[(5, 9)]), vec![]);
        assert_eq!(uncovered(5, 8, &[(6, 8)]), vec![(5, 5), (8, 8)]);
        assert_eq!(uncovered(5, 8, &[(0, 6), (8, 20)]), vec![(6, 7)]);
        assert_eq!(uncovered(5, 8, &[(9, 20), (0, 5)]), vec![(5, 8)]);
    }
}
