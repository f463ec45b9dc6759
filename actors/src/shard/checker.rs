//! A shard's checker: reads the records of the sealed segments the start
//! took at their footer's word ([`SealedCheck::Footer`]), oldest first, on
//! a thread of its own, while the shard already takes pushes.
//!
//! A start then costs the open segment plus a header and a footer per
//! sealed segment, however long the backlog; the backlog's records are
//! still read and checked once before any of them is delivered, as a full
//! start did, only after the shard is ready instead of before. Readers
//! (the drains) open no segment at or past the gate
//! ([`Watermark::unchecked_from`]); each segment checked moves it to the
//! next, and the last opens it fully. So delivery of the backlog begins as
//! soon as its oldest segment is checked, and damage is salvaged, cut or
//! quarantined by the same code a full start runs
//! ([`spillway_wab::check_sealed`]) while no reader has the segment open.
//!
//! A check that fails (an I/O error) is logged and tried again every
//! [`RETRY_WAIT`]; delivery from the shard waits at that segment, pushes
//! go on. The thread ends with the shard's flusher (its shutdown flag).
//!
//! [`SealedCheck::Footer`]: spillway_wab::SealedCheck::Footer
//! [`Watermark::unchecked_from`]: crate::shard::Watermark::unchecked_from

use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use spillway_wab::{check_sealed, RecoveryReport, SegmentInfo, Storage};

use crate::shard::ShardQueue;

/// How long a check that failed waits before it is tried again.
pub const RETRY_WAIT: Duration = Duration::from_secs(1);

/// Start the checker of `todo` (unchecked segments, in id order; see
/// [`ShardQueue::begin_checks`]). `None` when there is nothing to check.
pub fn start<S: Storage>(
    storage: S,
    dir: PathBuf,
    queue: Arc<ShardQueue>,
    todo: Vec<SegmentInfo>,
) -> io::Result<Option<JoinHandle<()>>> {
    queue
        .stats
        .unchecked_segments
        .store(todo.len() as u64, Ordering::Relaxed);
    if todo.is_empty() {
        return Ok(None);
    }
    let shard = queue.shard;
    thread::Builder::new()
        .name(format!("checker-{shard}"))
        .spawn(move || run(&storage, &dir, &queue, &todo))
        .map(Some)
}

fn run<S: Storage>(storage: &S, dir: &Path, queue: &ShardQueue, todo: &[SegmentInfo]) {
    let shard = queue.shard;
    let started = Instant::now();
    for i in 0..todo.len() {
        loop {
            if queue.shutdown_requested() {
                return;
            }
            match check_one(storage, dir, queue, todo, i) {
                Ok(_) => break,
                Err(e) => {
                    tracing::error!(shard, segment = todo[i].segment_id, error = %e, retry_in = ?RETRY_WAIT,
                        "checking a sealed segment's records failed; delivery from this shard waits here, pushes go on");
                    let until = Instant::now() + RETRY_WAIT;
                    while Instant::now() < until && !queue.shutdown_requested() {
                        thread::sleep(Duration::from_millis(50));
                    }
                }
            }
        }
    }
    tracing::info!(
        shard,
        segments = todo.len(),
        seconds = started.elapsed().as_secs_f64(),
        "checked the records of every sealed segment found at the start"
    );
}

/// Check `todo[i]` (the ones before it are checked), count and log what
/// it found, and move the gate to the next one (or open it): one step of
/// the checker, which the simulation takes as one of its turns. The
/// acknowledged records the check found lost; `Err` leaves the gate where
/// it is (try again).
pub fn check_one<S: Storage>(
    storage: &S,
    dir: &Path,
    queue: &ShardQueue,
    todo: &[SegmentInfo],
    i: usize,
) -> io::Result<u64> {
    let seg = &todo[i];
    let lost = match check_sealed(storage, dir, queue.shard, seg.segment_id) {
        Ok(found) => account(queue, seg, &found),
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            tracing::warn!(shard = queue.shard, segment = seg.segment_id, "a sealed segment was gone before its check (removed from outside?); its records cannot be delivered");
            // Nothing of it is kept: its bytes and records leave the counts.
            account(queue, seg, &RecoveryReport::default())
        }
        Err(e) => return Err(e),
    };
    queue.set_unchecked_from(todo.get(i + 1).map_or(u64::MAX, |s| s.segment_id));
    queue
        .stats
        .unchecked_segments
        .store((todo.len() - i - 1) as u64, Ordering::Relaxed);
    Ok(lost)
}

/// What a check found, into the shard's figures and its log; the
/// acknowledged records it found lost.
fn account(queue: &ShardQueue, seg: &SegmentInfo, found: &RecoveryReport) -> u64 {
    let stats = &queue.stats;
    // A cut loses the records from its end to where the old footer said
    // the segment ended.
    let cut: u64 = found
        .cut_short
        .iter()
        .map(|c| c.known_end.map_or(0, |end| end - c.end_seq))
        .sum();
    let lost = found.lost_records + cut;
    // The start counted every position the footer names as a record; the
    // check knows which of them hold one (not those an earlier salvage's
    // GAP frames stand for, nor those lost now).
    let held: u64 = found
        .segments
        .iter()
        .map(|s| s.record_count - s.lost_records)
        .sum();
    let _ = stats
        .recovered_records
        .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| {
            Some(n.saturating_sub(seg.record_count.saturating_sub(held)))
        });
    if lost > 0 {
        stats.records_lost.fetch_add(lost, Ordering::Relaxed);
        tracing::error!(
            shard = queue.shard,
            segment = seg.segment_id,
            lost_records = lost,
            "acknowledged records are damaged in a sealed segment (found by its check after the start; see the lines above and quarantine/*.reason); every other record is delivered"
        );
    }
    stats
        .quarantined_files
        .fetch_add(found.quarantined.len() as u64, Ordering::Relaxed);
    // Charged at the start from the footer; what is left is released by
    // the drain when it removes the segment.
    let kept = found.segments.iter().map(|s| s.bytes).sum::<u64>();
    if kept < seg.bytes {
        queue.budget.release(seg.bytes - kept);
    }
    lost
}
