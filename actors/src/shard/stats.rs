//! The counters a shard exports (metrics, `ctl stats`, the bench).

use std::sync::atomic::{AtomicU64, Ordering};

use crate::histogram::{CommitMicros, FsyncMicros, GroupRecords, Histogram};

/// Counters a shard exports (metrics, `ctl stats`, bench).
#[derive(Debug, Default)]
pub struct ShardStats {
    pub groups: AtomicU64,
    pub records: AtomicU64,
    pub bytes: AtomicU64,
    pub fsyncs: AtomicU64,
    pub fsync_failures: AtomicU64,
    pub write_failures: AtomicU64,
    pub fsync_us_max: AtomicU64,
    /// fdatasync latency (µs; its sum gives the mean). Exported as a
    /// Prometheus histogram: fsync cost can grow several-fold under
    /// sustained load, and an operator must see it.
    pub fsync_us: Histogram<FsyncMicros>,
    /// Write plus fdatasync of one group commit (µs).
    pub commit_us: Histogram<CommitMicros>,
    /// Records per group commit.
    pub group_records: Histogram<GroupRecords>,
    pub rotations: AtomicU64,
    /// Full segments sealed with no next segment to write (no room on the
    /// disk for one): the shard waits for delivery to free the full one.
    pub sealed_without_successor: AtomicU64,
    pub restarts: AtomicU64,
    /// Acknowledged records recovery found missing or damaged at the last
    /// start (sequence gaps, salvaged records, records of a segment whose
    /// header nothing proves): each also logged as an ERROR and kept in
    /// `quarantine/` with a `.reason`.
    pub records_lost: AtomicU64,
    /// Records recovery found in the shard's segments at the last start
    /// (what was replayed for delivery, delivered ones included).
    pub recovered_records: AtomicU64,
    /// Files recovery moved to `quarantine/` at the last start.
    pub quarantined_files: AtomicU64,
    /// Sealed segments found at the last start whose records the shard's
    /// checker has not read yet (`crate::shard::checker`): delivery from the
    /// shard waits at the first of them.
    pub unchecked_segments: AtomicU64,
    /// Times the shard became unwritable (no segment could be started, or
    /// a write/fsync failed).
    pub unwritable_events: AtomicU64,
    /// When the last "cannot start a segment" error was logged (µs since
    /// the Unix epoch), so a full disk logs one line per interval, not one
    /// per retry.
    segment_failure_logged_us: AtomicU64,
}

/// At most one "cannot start a segment" line per shard per this interval.
const SEGMENT_FAILURE_LOG_EVERY_US: u64 = 10_000_000;

impl ShardStats {
    /// Whether to log a failed segment start now (rate-limited).
    pub fn log_segment_failure(&self) -> bool {
        let now = spillway_wab::format::now_unix_us();
        let last = self.segment_failure_logged_us.load(Ordering::Relaxed);
        if last != 0 && now.saturating_sub(last) < SEGMENT_FAILURE_LOG_EVERY_US {
            return false;
        }
        self.segment_failure_logged_us
            .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
            .is_ok()
    }

    /// Count one fdatasync that took `us` microseconds.
    pub fn record_fsync(&self, us: u64) {
        self.fsyncs.fetch_add(1, Ordering::Relaxed);
        self.fsync_us_max.fetch_max(us, Ordering::Relaxed);
        self.fsync_us.observe(us);
    }
}
