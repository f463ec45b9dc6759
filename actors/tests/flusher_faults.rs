//! The flusher under storage faults, through the storage seam: a failed
//! fdatasync is never acknowledged (its group gets InternalError), the
//! segment is abandoned for a fresh one, acknowledged records survive in
//! recovery; `fsync_failures_max` failures in a row make the shard
//! visibly unwritable (pushes refused at once, retried with backoff) until a
//! fresh segment works again, while a healthy shard keeps working; a full
//! disk (ENOSPC on a write, a preallocation or a rotation) gives Overloaded
//! and heals by itself once space is back.

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
        group_bytes_max: 4 << 20,
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
    let wab = WabBudget::new(1 << 30);
    let queue = ShardQueue::new(0, &wab);
    let (flusher, _) =
        ShardFlusher::open(storage, config(dir.path(), 3), queue.clone(), 0).unwrap();
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
fn repeated_fsync_failures_make_the_shard_unwritable_until_a_fresh_segment_works() {
    let dir = tempfile::tempdir().unwrap();
    // fdatasyncs 1..=4 fail: the disk misbehaves for a while, then recovers.
    let faults = (1..=4)
        .map(|nth| Fault {
            op: Op::SyncData,
            nth,
            kind: FaultKind::Eio,
        })
        .collect();
    let storage = FaultyStorage::new(faults);
    let wab = WabBudget::new(1 << 30);
    let queue = ShardQueue::new(0, &wab);
    let (flusher, _) =
        ShardFlusher::open(storage.clone(), config(dir.path(), 2), queue.clone(), 0).unwrap();
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
        ShardHealth::Unwritable,
        "two failures in a row with fsync_failures_max = 2 make the shard unwritable"
    );
    assert!(
        queue.unwritable_why().contains("Input/output error"),
        "{}",
        queue.unwritable_why()
    );
    assert_eq!(queue.refusal(), Some(NackReason::InternalError));

    // Pushes keep being retried (each on a fresh segment, never on the one
    // whose fsync failed) until the disk works again: then the shard is
    // Running again without a restart.
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    let mut token = 3;
    let acked = loop {
        assert!(
            std::time::Instant::now() < deadline,
            "the shard never wrote again after the faults ended"
        );
        token += 1;
        if let Ok(seq) = push(&queue, &target, &rx, token, "after") {
            break seq;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(queue.health(), ShardHealth::Running);
    assert!(queue.refusal().is_none());
    assert!(push(&queue, &target, &rx, token + 1, "more").is_ok());
    assert!(storage.count(Op::SyncData) >= 6);
    assert!(
        queue
            .stats
            .unwritable_events
            .load(std::sync::atomic::Ordering::Relaxed)
            >= 1
    );

    // Another shard on healthy storage is unaffected.
    let other_dir = tempfile::tempdir().unwrap();
    let other = ShardQueue::new(1, &wab);
    let (other_flusher, _) =
        ShardFlusher::open(FsStorage, config(other_dir.path(), 2), other.clone(), 0).unwrap();
    assert!(push(&other, &target, &rx, 1000, "fine").is_ok());
    assert_eq!(other.health(), ShardHealth::Running);
    drop(flusher);
    drop(other_flusher);

    // The acked records survive recovery, and no acked record was written
    // to a segment after its fsync failed.
    recover_shard(&FsStorage, dir.path(), 0, 0).unwrap();
    let got: Vec<(u64, String)> = read_shard(&FsStorage, dir.path())
        .unwrap()
        .into_iter()
        .map(|r| (r.seq, String::from_utf8(r.payload.to_vec()).unwrap()))
        .filter(|(_, p)| p != "x" && p != "y")
        .collect();
    let after: Vec<&(u64, String)> = got.iter().filter(|(_, p)| p == "after").collect();
    assert!(after.iter().any(|(seq, _)| *seq == acked), "{got:?}");
    assert!(got.iter().any(|(_, p)| p == "more"), "{got:?}");
}

/// Wait (bounded) until the storage has done at least `n` writes.
fn wait_writes(storage: &FaultyStorage, n: u64) {
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while storage.count(Op::Write) < n {
        assert!(
            std::time::Instant::now() < deadline,
            "the sealer never preallocated its spare"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn a_full_disk_at_start_gives_overloaded_and_heals_without_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    // The first preallocations fail: the disk is full when the daemon starts.
    let faults = (1..=3)
        .map(|nth| Fault {
            op: Op::Write,
            nth,
            kind: FaultKind::Enospc,
        })
        .collect();
    let storage = FaultyStorage::new(faults);
    let wab = WabBudget::new(1 << 30);
    let queue = ShardQueue::new(0, &wab);
    let (flusher, _) = ShardFlusher::open(storage.clone(), config(dir.path(), 3), queue.clone(), 0)
        .expect("a full disk does not stop the shard from starting");
    assert_eq!(queue.health(), ShardHealth::Unwritable);
    assert_eq!(queue.refusal(), Some(NackReason::Overloaded));
    let (tx, rx) = mpsc::channel();
    let target = Arc::new(Collect(tx));
    assert_eq!(
        push(&queue, &target, &rx, 1, "early"),
        Err(NackReason::Overloaded),
        "a push while the disk is full is refused as Overloaded (retryable)"
    );
    // No partial preallocation is left filling the disk.
    let leftovers: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().ends_with(".tmp"))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
    // Space is back after the injected failures: the shard heals by itself.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while queue.health() != ShardHealth::Running {
        assert!(
            std::time::Instant::now() < deadline,
            "the shard did not start a segment by itself once space was back"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(push(&queue, &target, &rx, 2, "later").is_ok());
    drop(flusher);
    let got: Vec<String> = read_shard(&FsStorage, dir.path())
        .unwrap()
        .into_iter()
        .map(|r| String::from_utf8(r.payload.to_vec()).unwrap())
        .collect();
    assert_eq!(got, ["later"]);
}

#[test]
fn a_refused_rotation_keeps_the_full_segment_and_retries() {
    let dir = tempfile::tempdir().unwrap();
    let storage = FaultyStorage::new(Vec::new());
    let wab = WabBudget::new(1 << 30);
    let queue = ShardQueue::new(0, &wab);
    let (flusher, _) =
        ShardFlusher::open(storage.clone(), config(dir.path(), 3), queue.clone(), 0).unwrap();
    wait_writes(&storage, 2);
    let (tx, rx) = mpsc::channel();
    let target = Arc::new(Collect(tx));
    // Fill most of the 1 MiB segment.
    let big = "b".repeat(700 * 1024);
    assert!(push(&queue, &target, &rx, 1, &big).is_ok());
    // The next group needs a rotation; the spare was taken, and the
    // preallocation of the one after it fails for lack of space (every
    // write fails for a while).
    let next = storage.count(Op::Write) + 1;
    for k in 0..6 {
        storage.inject(Fault {
            op: Op::Write,
            nth: next + k,
            kind: FaultKind::Enospc,
        });
    }
    let mut token = 2;
    let mut refused = 0;
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        assert!(std::time::Instant::now() < deadline, "never wrote again");
        token += 1;
        match push(&queue, &target, &rx, token, &big) {
            Ok(_) => break,
            Err(r) => {
                assert_eq!(r, NackReason::Overloaded, "a full disk is Overloaded");
                refused += 1;
            }
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(refused >= 1, "the fault was never hit");
    assert_eq!(queue.health(), ShardHealth::Running);
    drop(flusher);
    recover_shard(&FsStorage, dir.path(), 0, 0).unwrap();
    let got = read_shard(&FsStorage, dir.path()).unwrap();
    assert_eq!(
        got.len(),
        2,
        "the first record and the one acked after the retry"
    );
}

#[test]
fn a_failed_write_is_nacked_and_the_next_push_lands_in_a_fresh_segment() {
    let dir = tempfile::tempdir().unwrap();
    let storage = FaultyStorage::new(Vec::new());
    let wab = WabBudget::new(1 << 30);
    let queue = ShardQueue::new(0, &wab);
    let (flusher, _) =
        ShardFlusher::open(storage.clone(), config(dir.path(), 3), queue.clone(), 0).unwrap();
    // Start-up preallocates two 1 MiB segments, one write each (inline and
    // the sealer's spare); wait for both so the next write is a push's.
    wait_writes(&storage, 2);
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
        Err(NackReason::Overloaded),
        "a group whose write failed for lack of space is not acked (Overloaded: retryable)"
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
