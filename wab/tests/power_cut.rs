//! Power cuts: a simulated power loss ([`FaultyStorage::power_cut`]) drops
//! every directory entry whose folder was not fsynced after it appeared.
//! Every record acknowledged before the cut (appended and `sync`ed) must be
//! there after recovery with the real file system: at first start (the data
//! folder and shard folder are new) and across rotations (preallocate,
//! seal, next segment), with the power cut after every step.
//!
//! A SIGKILL keeps the page cache, so only this seam can catch a missing
//! directory fsync; `a_folder_made_without_parent_fsync_is_lost_in_a_power_cut`
//! shows the seam does catch one.

mod common;

use std::path::Path;

use common::*;
use spillway_wab::deadletter::{DeadLetter, DeadLetterStore};
use spillway_wab::fault::FaultyStorage;
use spillway_wab::storage::create_dir_durable;
use spillway_wab::{
    preallocate, read_checkpoint, read_shard, recover_shard, seal, shard_dir, write_checkpoint,
    ActiveSegment, FsStorage, Storage,
};

const SHARD: u32 = 0;
const CAP: u64 = 8 * 1024;

/// Counts the steps of a workload and cuts the power after step `at`.
struct Cutter<'a> {
    storage: &'a FaultyStorage,
    done: usize,
    at: usize,
}

impl Cutter<'_> {
    /// Call after each step; true once the power has been cut.
    fn step(&mut self) -> bool {
        self.done += 1;
        if self.done == self.at {
            self.storage.power_cut().unwrap();
            return true;
        }
        false
    }
}

/// What survived and what had been acknowledged when the power went.
struct Run {
    acked: Vec<Rec>,
    checkpoint: u64,
    cut: bool,
}

/// The writer's life from a missing data folder: recover, preallocate,
/// groups acked (append + fdatasync), a checkpoint, rotations (seal the
/// full segment, start the preallocated next one). Power cut after step
/// `cut_at` (never if it is past the last step).
fn life(data: &Path, cut_at: usize) -> Run {
    let storage = FaultyStorage::new(vec![]);
    let dir = shard_dir(data, SHARD);
    let mut c = Cutter {
        storage: &storage,
        done: 0,
        at: cut_at,
    };
    let mut run = Run {
        acked: Vec::new(),
        checkpoint: 0,
        cut: false,
    };
    macro_rules! step {
        () => {
            if c.step() {
                run.cut = true;
                return run;
            }
        };
    }
    let rec = recover_shard(&storage, &dir, SHARD, 0).unwrap();
    step!();
    let mut next_id = rec.report.next_segment_id;
    let mut seq = rec.report.next_seq;
    let pre = preallocate(&storage, &dir, next_id, CAP).unwrap();
    next_id += 1;
    step!();
    let mut seg = ActiveSegment::start(pre, SHARD, seq);
    for rotation in 0..3u64 {
        for g in 0..2u64 {
            let group = recs(seq, 2 + g, |s| 40 + (s as usize * 7) % 60);
            append(&mut seg, &group).unwrap();
            seg.sync().unwrap();
            seq += group.len() as u64;
            run.acked.extend(group);
            step!();
        }
        if rotation == 0 {
            // The first checkpoint creates its file: that name must be
            // durable too.
            write_checkpoint(&storage, &dir, 2).unwrap();
            run.checkpoint = 2;
            step!();
        }
        let pre = preallocate(&storage, &dir, next_id, CAP).unwrap();
        next_id += 1;
        step!();
        let fresh = ActiveSegment::start(pre, SHARD, seq);
        let full = std::mem::replace(&mut seg, fresh);
        seal(&storage, &dir, full.into_sealing()).unwrap();
        step!();
    }
    run
}

#[test]
fn power_cut_at_every_step_keeps_every_acked_record() {
    let mut cuts = 0;
    for cut_at in 1.. {
        let tmp = tempfile::tempdir().unwrap();
        let data = tmp.path().join("data");
        let run = life(&data, cut_at);
        if !run.cut {
            break;
        }
        cuts += 1;
        let dir = shard_dir(&data, SHARD);
        let what = format!("power cut after step {cut_at}");
        recover_shard(&FsStorage, &dir, SHARD, 0)
            .unwrap_or_else(|e| panic!("{what}: recovery failed: {e}"));
        let got = read_shard(&FsStorage, &dir).unwrap();
        assert_records(&got, &run.acked);
        assert_eq!(
            read_checkpoint(&FsStorage, &dir).unwrap(),
            run.checkpoint,
            "{what}: checkpoint"
        );
    }
    assert!(cuts >= 10, "only {cuts} steps");
}

/// The same life without a power cut, for comparison: nothing undurable is
/// left behind at the end but the seam notices every pending name.
#[test]
fn power_cut_seam_tracks_names_until_their_folder_is_fsynced() {
    let tmp = tempfile::tempdir().unwrap();
    let storage = FaultyStorage::new(vec![]);
    let dir = tmp.path().join("a").join("b");
    storage.create_dir_all(&dir).unwrap();
    assert_eq!(
        storage.undurable(),
        vec![tmp.path().join("a"), tmp.path().join("a").join("b")]
    );
    storage.sync_dir(tmp.path()).unwrap();
    storage.sync_dir(&tmp.path().join("a")).unwrap();
    assert!(storage.undurable().is_empty());
    let f = dir.join("f");
    drop(storage.create(&f).unwrap());
    storage.rename(&f, &dir.join("g")).unwrap();
    assert_eq!(storage.undurable(), vec![dir.join("g")]);
    storage.sync_dir(&dir).unwrap();
    assert!(storage.undurable().is_empty());
    // A durable file renamed without a folder fsync gets its old name back.
    storage.rename(&dir.join("g"), &dir.join("h")).unwrap();
    storage.power_cut().unwrap();
    assert_eq!(names(&dir), vec!["g"]);
    assert!(storage.create(&dir.join("x")).is_err(), "crashed");
}

/// Shows the test above can fail: a shard folder made the old way (plain
/// `create_dir_all`, no fsync of its parent) vanishes in a power cut with
/// every acked record inside it.
#[test]
fn a_folder_made_without_parent_fsync_is_lost_in_a_power_cut() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    let dir = shard_dir(&data, SHARD);
    let storage = FaultyStorage::new(vec![]);
    storage.create_dir_all(&dir).unwrap();
    let mut seg = ActiveSegment::start(preallocate(&storage, &dir, 0, CAP).unwrap(), SHARD, 0);
    let g = recs(0, 3, |_| 50);
    append(&mut seg, &g).unwrap();
    seg.sync().unwrap(); // acked
    storage.power_cut().unwrap();
    assert!(!data.exists(), "the undurable data folder survived");
    let rec = recover_shard(&FsStorage, &dir, SHARD, 0).unwrap();
    assert_eq!(rec.report.record_count(), 0, "acked records lost");

    // The same with the durable creation keeps them.
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    let dir = shard_dir(&data, SHARD);
    let storage = FaultyStorage::new(vec![]);
    create_dir_durable(&storage, &dir).unwrap();
    assert!(storage.undurable().is_empty());
    let mut seg = ActiveSegment::start(preallocate(&storage, &dir, 0, CAP).unwrap(), SHARD, 0);
    append(&mut seg, &g).unwrap();
    seg.sync().unwrap();
    storage.power_cut().unwrap();
    recover_shard(&FsStorage, &dir, SHARD, 0).unwrap();
    assert_records(&read_shard(&FsStorage, &dir).unwrap(), &g);
    assert_eq!(mode(&data), 0o700);
    assert_eq!(mode(&dir), 0o700);
}

/// Dead letters are acked to the drain once `append` returns: their folder
/// (new at first start) and segments must survive a power cut too.
#[test]
fn power_cut_after_a_dead_letter_append_keeps_it() {
    for letters in [1usize, 40] {
        let tmp = tempfile::tempdir().unwrap();
        let dl = tmp.path().join("data").join("dead-letter");
        let storage = FaultyStorage::new(vec![]);
        let mut store = DeadLetterStore::open(storage.clone(), &dl).unwrap();
        let want: Vec<DeadLetter> = (0..letters as u64)
            .map(|i| DeadLetter {
                shard: 1,
                seq: i,
                tier: 1,
                arrival_unix_us: 7,
                dead_lettered_unix_us: 100 + i,
                reason: format!("HTTP 400 #{i}"),
                // 40 letters of ~30 KiB roll over several 1 MiB segments.
                payload: payload(i, 30_000).into(),
            })
            .collect();
        for l in &want {
            store.append(std::slice::from_ref(l)).unwrap();
        }
        storage.power_cut().unwrap();
        drop(store);
        let store = DeadLetterStore::open(FsStorage, &dl).unwrap();
        assert_eq!(store.list().unwrap(), want, "{letters} letters");
    }
}
