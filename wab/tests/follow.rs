//! `ShardFollower`: reads a live shard up to the durable tail and no
//! further, moves on to the next segment once the writer has, starts at the
//! checkpoint, reads an abandoned segment only to its acknowledged end, and
//! removes a finished segment only once everything in it is confirmed.

mod common;

use std::path::{Path, PathBuf};

use common::*;
use spillway_wab::follow::{Cut, Removed, ShardFollower, Tail};
use spillway_wab::format::{open_name, sealed_name};
use spillway_wab::storage::FsFile;
use spillway_wab::{preallocate, seal, ActiveSegment, FsStorage, Storage, StorageFile};

const SHARD: u32 = 3;
const CAP: u64 = 16 * 1024;

fn start_segment(
    dir: &Path,
    id: u64,
    first_seq: u64,
) -> ActiveSegment<<FsStorage as Storage>::File> {
    let pre = preallocate(&FsStorage, dir, id, CAP).unwrap();
    ActiveSegment::start(pre, SHARD, first_seq)
}

fn tail_of<F: StorageFile>(id: u64, seg: &ActiveSegment<F>) -> Tail {
    Tail::checked(id, seg.durable_offset)
}

/// Every record the follower gives now, by sequence number.
fn drain_now(
    f: &mut ShardFollower<FsStorage>,
    tail: Tail,
    cut: impl Fn(u64) -> Option<Cut> + Copy,
) -> Vec<u64> {
    let mut seqs = Vec::new();
    while let Some(rec) = f.next(tail, cut).unwrap() {
        seqs.push(rec.seq);
    }
    seqs
}

fn no_cut(_: u64) -> Option<Cut> {
    None
}

#[test]
fn follows_the_durable_tail_across_a_rotation_and_removes_only_what_is_confirmed() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("shard-003");
    FsStorage.create_dir_all(&dir).unwrap();
    let mut seg0 = start_segment(&dir, 0, 0);
    append(&mut seg0, &recs(0, 5, |_| 20)).unwrap();
    seg0.sync().unwrap();
    let mut f = ShardFollower::new(FsStorage, dir.clone(), 0);
    assert_eq!(
        drain_now(&mut f, tail_of(0, &seg0), no_cut),
        vec![0, 1, 2, 3, 4]
    );

    // Written but not yet durable: not read.
    append(&mut seg0, &recs(5, 3, |_| 20)).unwrap();
    let not_synced = Tail::checked(0, seg0.durable_offset);
    assert_eq!(drain_now(&mut f, not_synced, no_cut), Vec::<u64>::new());
    seg0.sync().unwrap();
    assert_eq!(drain_now(&mut f, tail_of(0, &seg0), no_cut), vec![5, 6, 7]);
    assert!(
        f.oldest_finished().is_none(),
        "the active segment is not finished"
    );

    // Rotation: segment 0 sealed, segment 1 active.
    seal(&FsStorage, &dir, seg0.into_sealing()).unwrap();
    let mut seg1 = start_segment(&dir, 1, 8);
    append(&mut seg1, &recs(8, 2, |_| 20)).unwrap();
    seg1.sync().unwrap();
    assert_eq!(drain_now(&mut f, tail_of(1, &seg1), no_cut), vec![8, 9]);
    let done = *f.oldest_finished().expect("segment 0 finished");
    assert_eq!((done.segment_id, done.end_seq), (0, 8));
    assert!(done.bytes > 0);

    // Not everything in segment 0 confirmed: it stays.
    assert_eq!(f.remove_oldest_finished(7, false).unwrap(), None);
    assert!(dir.join(sealed_name(0)).exists());
    let (gone, how) = f.remove_oldest_finished(8, false).unwrap().unwrap();
    assert_eq!((gone, how), (done, Removed::Sealed));
    assert!(!dir.join(sealed_name(0)).exists());
    assert!(f.oldest_finished().is_none());
}

/// The first record returned is the one at the checkpoint; a segment
/// wholly below it (delivered before a restart, its deletion lost to the
/// crash) is read through without returning its records, so it is
/// finished and removed like any other instead of staying on disk for good.
#[test]
fn starts_at_the_checkpoint_and_finishes_the_segments_below_it() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("shard-003");
    FsStorage.create_dir_all(&dir).unwrap();
    let mut seg0 = start_segment(&dir, 0, 0);
    append(&mut seg0, &recs(0, 4, |_| 10)).unwrap();
    seg0.sync().unwrap();
    seal(&FsStorage, &dir, seg0.into_sealing()).unwrap();
    let mut seg1 = start_segment(&dir, 1, 4);
    append(&mut seg1, &recs(4, 4, |_| 10)).unwrap();
    seg1.sync().unwrap();
    let mut f = ShardFollower::new(FsStorage, dir.clone(), 6);
    assert_eq!(drain_now(&mut f, tail_of(1, &seg1), no_cut), vec![6, 7]);
    let done = *f
        .oldest_finished()
        .expect("segment 0, below the checkpoint, is finished");
    assert_eq!((done.segment_id, done.end_seq), (0, 4));
    assert!(done.bytes > 0, "its bytes are released when it goes");
    let (gone, how) = f.remove_oldest_finished(6, false).unwrap().unwrap();
    assert_eq!((gone, how), (done, Removed::Sealed));
    assert!(!dir.join(sealed_name(0)).exists());
}

/// An abandoned segment 0 (records 0..=2 fsynced, then records 3 and 4
/// written; `sync_tail` says whether they were fsynced too) and segment 1
/// starting at 5, as the flusher leaves them after giving up on segment 0.
/// Returns the folder, segment 1, and segment 0's durable end (after 2)
/// and write end (after 4).
fn abandoned_then_next(
    tmp: &tempfile::TempDir,
    sync_tail: bool,
) -> (PathBuf, ActiveSegment<FsFile>, u64, u64) {
    let dir = tmp.path().join("shard-003");
    FsStorage.create_dir_all(&dir).unwrap();
    let mut seg0 = start_segment(&dir, 0, 0);
    append(&mut seg0, &recs(0, 3, |_| 10)).unwrap();
    seg0.sync().unwrap();
    let after_2 = seg0.durable_offset;
    append(&mut seg0, &recs(3, 2, |_| 10)).unwrap();
    if sync_tail {
        seg0.sync().unwrap();
    }
    let after_4 = seg0.write_offset;
    drop(seg0);
    let mut seg1 = start_segment(&dir, 1, 5);
    append(&mut seg1, &recs(5, 1, |_| 10)).unwrap();
    seg1.sync().unwrap();
    (dir, seg1, after_2, after_4)
}

#[test]
fn an_abandoned_segment_is_read_to_its_acknowledged_end_and_removed_unsealed() {
    let tmp = tempfile::tempdir().unwrap();
    // Records 3 and 4 were a group that was written, then nacked (its
    // fsync failed): the acknowledged records end after 2.
    let (dir, seg1, acked_end, _) = abandoned_then_next(&tmp, true);
    let cut = |id: u64| {
        (id == 0).then_some(Cut {
            acked_end,
            durable_end: acked_end,
            durable_seq: 3,
        })
    };
    let mut f = ShardFollower::new(FsStorage, dir.clone(), 0);
    assert_eq!(drain_now(&mut f, tail_of(1, &seg1), cut), vec![0, 1, 2, 5]);
    let done = *f.oldest_finished().unwrap();
    assert_eq!(
        (done.segment_id, done.end_seq),
        (0, 3),
        "ends at its last durable record: no reader passes the nacked numbers (issue 39)"
    );
    // Not marked abandoned: an unsealed segment is left for the sealer.
    assert!(f.remove_oldest_finished(5, false).is_err());
    assert!(dir.join(open_name(0)).exists());
    let (_, how) = f.remove_oldest_finished(5, true).unwrap().unwrap();
    assert_eq!(how, Removed::Unsealed);
    assert!(!dir.join(open_name(0)).exists());
}

/// Buffered records acknowledged after an abandoned segment's last fsync
/// are not delivered (the segment is never fsynced again, and a power cut
/// could take them after the sink had them), but the segment releases
/// everything it was charged for.
#[test]
fn an_abandoned_segment_is_delivered_only_up_to_its_last_fsync() {
    let tmp = tempfile::tempdir().unwrap();
    // Records 3 and 4 were Buffered, acknowledged from the page cache.
    let (dir, seg1, durable_end, acked_end) = abandoned_then_next(&tmp, false);
    let cut = |id: u64| {
        (id == 0).then_some(Cut {
            acked_end,
            durable_end,
            durable_seq: 3,
        })
    };
    let mut f = ShardFollower::new(FsStorage, dir.clone(), 0);
    assert_eq!(drain_now(&mut f, tail_of(1, &seg1), cut), vec![0, 1, 2, 5]);
    let done = *f.oldest_finished().unwrap();
    assert_eq!(
        (done.segment_id, done.end_seq, done.bytes),
        (0, 3, acked_end)
    );
}

/// The file system, except that the first listing of a folder is followed,
/// before its caller can open anything, by the rename `from` -> `to`: the
/// sealer renaming a segment between a follower's listing and its open.
#[derive(Clone)]
struct RenamedAfterListing {
    rename: std::sync::Arc<std::sync::Mutex<Option<(PathBuf, PathBuf)>>>,
}

impl Storage for RenamedAfterListing {
    type File = FsFile;
    fn create(&self, path: &Path) -> std::io::Result<FsFile> {
        FsStorage.create(path)
    }
    fn open(&self, path: &Path) -> std::io::Result<FsFile> {
        FsStorage.open(path)
    }
    fn open_read(&self, path: &Path) -> std::io::Result<FsFile> {
        FsStorage.open_read(path)
    }
    fn rename(&self, from: &Path, to: &Path) -> std::io::Result<()> {
        FsStorage.rename(from, to)
    }
    fn sync_dir(&self, dir: &Path) -> std::io::Result<()> {
        FsStorage.sync_dir(dir)
    }
    fn remove(&self, path: &Path) -> std::io::Result<()> {
        FsStorage.remove(path)
    }
    fn create_dir_all(&self, dir: &Path) -> std::io::Result<()> {
        FsStorage.create_dir_all(dir)
    }
    fn list(&self, dir: &Path) -> std::io::Result<Vec<PathBuf>> {
        let listed = FsStorage.list(dir)?;
        if let Some((from, to)) = self.rename.lock().unwrap().take() {
            std::fs::rename(from, to)?;
        }
        Ok(listed)
    }
}

/// Segment 0 full, its footer written and about to be renamed `.sealed`,
/// segment 1 active: a follower lists both, then the sealer renames
/// segment 0 before the follower opens it. The follower skipped the file
/// it could not find and read segment 1 first, so its sink never got
/// segment 0's records (the crash loop's acknowledged records lost about
/// one run in 8); it must find segment 0 under its new name.
#[test]
fn a_segment_renamed_by_the_sealer_between_listing_and_open_is_not_skipped() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("shard-003");
    FsStorage.create_dir_all(&dir).unwrap();
    let mut seg0 = start_segment(&dir, 0, 0);
    append(&mut seg0, &recs(0, 4, |_| 20)).unwrap();
    seg0.sync().unwrap();
    // Sealed, then put back as `.open`: its last moment before the rename.
    seal(&FsStorage, &dir, seg0.into_sealing()).unwrap();
    std::fs::rename(dir.join(sealed_name(0)), dir.join(open_name(0))).unwrap();
    let mut seg1 = start_segment(&dir, 1, 4);
    append(&mut seg1, &recs(4, 3, |_| 20)).unwrap();
    seg1.sync().unwrap();

    let storage = RenamedAfterListing {
        rename: std::sync::Arc::new(std::sync::Mutex::new(Some((
            dir.join(open_name(0)),
            dir.join(sealed_name(0)),
        )))),
    };
    let mut f = ShardFollower::new(storage.clone(), dir.clone(), 0);
    let mut seqs = Vec::new();
    while let Some(rec) = f.next(tail_of(1, &seg1), no_cut).unwrap() {
        seqs.push(rec.seq);
    }
    assert!(
        storage.rename.lock().unwrap().is_none(),
        "the rename happened"
    );
    assert_eq!(seqs, (0..7).collect::<Vec<u64>>());
    assert_eq!(
        spillway_wab::follow::oldest_first_seq(&storage, &dir).unwrap(),
        Some(0)
    );
}

/// A segment at or past `unchecked_from` is not opened (its records are
/// not checked yet), nor is anything after it, even the active segment:
/// the follower waits there and goes on, in order, once the gate moves.
#[test]
fn waits_at_the_first_unchecked_segment_until_the_gate_moves() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("shard-003");
    FsStorage.create_dir_all(&dir).unwrap();
    let mut seq = 0;
    for id in 0..2 {
        let mut seg = start_segment(&dir, id, seq);
        append(&mut seg, &recs(seq, 3, |_| 10)).unwrap();
        seg.sync().unwrap();
        seal(&FsStorage, &dir, seg.into_sealing()).unwrap();
        seq += 3;
    }
    let mut active = start_segment(&dir, 2, seq);
    append(&mut active, &recs(seq, 2, |_| 10)).unwrap();
    active.sync().unwrap();
    let mut f = ShardFollower::new(FsStorage, dir.clone(), 0);
    let gated = |from| Tail {
        unchecked_from: from,
        ..tail_of(2, &active)
    };
    assert_eq!(drain_now(&mut f, gated(0), no_cut), Vec::<u64>::new());
    assert_eq!(drain_now(&mut f, gated(1), no_cut), vec![0, 1, 2]);
    assert_eq!(
        drain_now(&mut f, gated(1), no_cut),
        Vec::<u64>::new(),
        "segment 1 is not opened while unchecked, nor the active one after it"
    );
    assert_eq!(drain_now(&mut f, gated(2), no_cut), vec![3, 4, 5]);
    assert_eq!(drain_now(&mut f, gated(u64::MAX), no_cut), vec![6, 7]);
}

/// Reading through a backlog opens each segment about once: the oldest
/// segment is found by opening files in id order until one opens, not by
/// opening every candidate (about N²/2 opens for N segments).
#[test]
fn a_backlog_of_segments_is_read_with_one_open_per_segment() {
    use spillway_wab::fault::{FaultyStorage, Op};
    const SEGMENTS: u64 = 60;
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("shard-003");
    FsStorage.create_dir_all(&dir).unwrap();
    for id in 0..SEGMENTS {
        let mut seg = start_segment(&dir, id, id * 2);
        append(&mut seg, &recs(id * 2, 2, |_| 10)).unwrap();
        seg.sync().unwrap();
        seal(&FsStorage, &dir, seg.into_sealing()).unwrap();
    }
    let storage = FaultyStorage::new(Vec::new());
    assert_eq!(
        spillway_wab::follow::oldest_first_seq(&storage, &dir).unwrap(),
        Some(0)
    );
    assert_eq!(
        storage.count(Op::Open),
        1,
        "the oldest is the first that opens"
    );
    let mut f = ShardFollower::new(storage.clone(), dir.clone(), 0);
    let mut seen = 0;
    while let Some(rec) = f.next(Tail::checked(SEGMENTS, 0), no_cut).unwrap() {
        assert_eq!(rec.seq, seen);
        seen += 1;
    }
    assert_eq!(seen, SEGMENTS * 2);
    let opens = storage.count(Op::Open) - 1;
    assert!(
        opens <= SEGMENTS + 1,
        "{opens} opens to read {SEGMENTS} segments"
    );
}
