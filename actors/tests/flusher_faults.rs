//! The flusher under storage faults, through the storage seam: a failed
//! fdatasync is never acknowledged (its group gets InternalError), the
//! segment is abandoned for a fresh one, acknowledged records survive in
//! recovery, and `fsync_failures_max` failures in a row stop the shard
//! visibly while a healthy shard keeps working.

use std::sync::mpsc;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use spillway_actors::{
    AppendBatch, CommitTarget, FlusherConfig, PendingRecord, ShardFlusher, ShardHealth, ShardQueue,
    WabBudget,
};
use spillway_protocol::NackReason;
use spillway_wab::fault::{Fault, FaultKind, FaultyStorage, Op};
use spillway_wab::{read_shard, recover_shard, FsStorage, RecordMeta};

/// Sends each commit result to the test.
struct Collect(mpsc::Sender<(u64, Result<u64, NackReason>)>);

impl CommitTarget for Collect {
    fn committed(&self, token: u64, result: Result<u64, NackReason>) {
        let _ = self.0.send((token, result));
    }
}

fn config(dir: &std::path::Path, fsync_failures_max: u32) -> FlusherConfig {
    FlusherConfig {
        shard: 0,
        dir: dir.to_path_buf(),
        segment_bytes_max: 1 << 20,
        buffered_flush_interval: Duration::from_millis(50),
        fsync_failures_max,
        spin: Duration::ZERO,
    }
}

/// Push one Sync record as its own batch and wait for the answer.
fn push(
    queue: &ShardQueue,
    target: &Arc<Collect>,
    rx: &mpsc::Receiver<(u64, Result<u64, NackReason>)>,
    token: u64,
    payload: &str,
) -> Result<u64, NackReason> {
    let meta = RecordMeta {
        tier: 1,
        arrival_unix_us: 1,
    }
    .pack();
    let records = vec![PendingRecord {
        payload: Bytes::from(payload.to_string()),
        meta,
    }];
    queue.push(AppendBatch::new(
        records,
        payload.len() as u64,
        true,
        token,
        target.clone(),
    ));
    let (got, result) = rx
        .recv_timeout(Duration::from_secs(10))
        .expect("the flusher answers");
    assert_eq!(got, token);
    result
}

#[test]
fn a_failed_fdatasync_is_nacked_the_segment_abandoned_and_acked_records_survive() {
    let dir = tempfile::tempdir().unwrap();
    // The 3rd fdatasync fails with EIO.
    let storage = FaultyStorage::new(vec![Fault {
        op: Op::SyncData,
        nth: 3,
        kind: FaultKind::Eio,
    }]);
    let queue = ShardQueue::new(0);
    let wab = WabBudget::new(1 << 30, 0);
    let (flusher, _) =
        ShardFlusher::open(storage, config(dir.path(), 3), queue.clone(), wab, 0).unwrap();
    let (tx, rx) = mpsc::channel();
    let target = Arc::new(Collect(tx));

    assert!(push(&queue, &target, &rx, 1, "a").is_ok());
    assert!(push(&queue, &target, &rx, 2, "b").is_ok());
    assert_eq!(
        push(&queue, &target, &rx, 3, "lost-fsync"),
        Err(NackReason::InternalError),
        "a record whose fsync failed must not be acked"
    );
    // The flusher moved to a fresh segment and goes on.
    assert!(push(&queue, &target, &rx, 4, "c").is_ok());
    assert!(push(&queue, &target, &rx, 5, "d").is_ok());
    assert_eq!(queue.health(), ShardHealth::Running);
    assert_eq!(
        queue
            .stats
            .fsync_failures
            .load(std::sync::atomic::Ordering::Relaxed),
        1
    );
    drop(flusher);

    // Every acked record is there after recovery, in order; the nacked one
    // may be there too (at-least-once), but never reorders the others.
    recover_shard(&FsStorage, dir.path(), 0, 0).unwrap();
    let got: Vec<String> = read_shard(&FsStorage, dir.path())
        .unwrap()
        .into_iter()
        .map(|r| String::from_utf8(r.payload.to_vec()).unwrap())
        .filter(|p| p != "lost-fsync")
        .collect();
    assert_eq!(got, ["a", "b", "c", "d"]);
}

#[test]
fn repeated_fsync_failures_stop_the_shard_and_its_pushes_get_internal_error() {
    let dir = tempfile::tempdir().unwrap();
    let faults = (1..=10)
        .map(|nth| Fault {
            op: Op::SyncData,
            nth,
            kind: FaultKind::Eio,
        })
        .collect();
    let storage = FaultyStorage::new(faults);
    let queue = ShardQueue::new(0);
    let wab = WabBudget::new(1 << 30, 0);
    let (flusher, _) = ShardFlusher::open(
        storage,
        config(dir.path(), 2),
        queue.clone(),
        wab.clone(),
        0,
    )
    .unwrap();
    let (tx, rx) = mpsc::channel();
    let target = Arc::new(Collect(tx));
    assert_eq!(
        push(&queue, &target, &rx, 1, "x"),
        Err(NackReason::InternalError)
    );
    assert_eq!(
        push(&queue, &target, &rx, 2, "y"),
        Err(NackReason::InternalError)
    );
    assert_eq!(
        queue.health(),
        ShardHealth::Failed,
        "two failures in a row with fsync_failures_max = 2 stop the shard"
    );
    assert_eq!(
        push(&queue, &target, &rx, 3, "z"),
        Err(NackReason::InternalError)
    );

    // Another shard on healthy storage is unaffected.
    let other_dir = tempfile::tempdir().unwrap();
    let other = ShardQueue::new(1);
    let (other_flusher, _) = ShardFlusher::open(
        FsStorage,
        config(other_dir.path(), 2),
        other.clone(),
        wab,
        0,
    )
    .unwrap();
    assert!(push(&other, &target, &rx, 4, "fine").is_ok());
    assert_eq!(other.health(), ShardHealth::Running);
    drop(flusher);
    drop(other_flusher);
}

#[test]
fn a_failed_write_is_nacked_and_the_next_push_lands_in_a_fresh_segment() {
    let dir = tempfile::tempdir().unwrap();
    let storage = FaultyStorage::new(Vec::new());
    let queue = ShardQueue::new(0);
    let wab = WabBudget::new(1 << 30, 0);
    let (flusher, _) = ShardFlusher::open(
        storage.clone(),
        config(dir.path(), 3),
        queue.clone(),
        wab,
        0,
    )
    .unwrap();
    // Start-up preallocates two 1 MiB segments, one write each (inline and
    // the sealer's spare); wait for both so the next write is a push's.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while storage.count(Op::Write) < 2 {
        assert!(
            std::time::Instant::now() < deadline,
            "the sealer never preallocated its spare"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    let (tx, rx) = mpsc::channel();
    let target = Arc::new(Collect(tx));
    assert!(push(&queue, &target, &rx, 1, "one").is_ok());
    let next = storage.count(Op::Write) + 1;
    storage.inject(Fault {
        op: Op::Write,
        nth: next,
        kind: FaultKind::Enospc,
    });
    assert_eq!(
        push(&queue, &target, &rx, 2, "two"),
        Err(NackReason::InternalError),
        "a group whose write failed is not acked"
    );
    assert!(push(&queue, &target, &rx, 3, "three").is_ok());
    assert_eq!(
        queue
            .stats
            .write_failures
            .load(std::sync::atomic::Ordering::Relaxed),
        1
    );
    drop(flusher);
    recover_shard(&FsStorage, dir.path(), 0, 0).unwrap();
    let got: Vec<String> = read_shard(&FsStorage, dir.path())
        .unwrap()
        .into_iter()
        .map(|r| String::from_utf8(r.payload.to_vec()).unwrap())
        .collect();
    assert_eq!(got, ["one", "three"]);
}
