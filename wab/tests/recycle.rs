//! A delivered segment written over as a later one: set aside as `.free`
//! by retention, then zero-filled and renamed by the sealer
//! ([`spillway_wab::recycle`]). A process crash or a power cut at any step
//! leaves a folder recovery reads without a loss, a quarantine or a
//! leftover, and with the active segment's records intact.

mod common;

use std::path::Path;

use common::*;
use spillway_wab::fault::{Fault, FaultKind, FaultyStorage, Op};
use spillway_wab::follow::set_aside_segment;
use spillway_wab::format::{free_name, open_name, sealed_name};
use spillway_wab::{
    preallocate, read_shard, recover_shard, recycle, seal, write_checkpoint, ActiveSegment,
    FsStorage, Storage,
};

const CAP: u64 = 16 * 1024;
const SHARD: u32 = 3;

/// Segment 0 sealed with records 0..6, all delivered (the checkpoint is at
/// 6); segment 1 open with records 6..10, synced. Returns every record.
fn delivered_and_active(dir: &Path) -> Vec<Rec> {
    FsStorage.create_dir_all(dir).unwrap();
    let first = recs(0, 6, |s| 200 + s as usize * 37);
    let second = recs(6, 4, |s| 90 + s as usize * 11);
    let mut a = ActiveSegment::start(preallocate(&FsStorage, dir, 0, CAP).unwrap(), SHARD, 0);
    append(&mut a, &first).unwrap();
    a.sync().unwrap();
    let mut b = ActiveSegment::start(
        preallocate(&FsStorage, dir, 1, CAP).unwrap(),
        SHARD,
        a.next_seq(),
    );
    seal(&FsStorage, dir, a.into_sealing()).unwrap();
    append(&mut b, &second).unwrap();
    b.sync().unwrap();
    write_checkpoint(&FsStorage, dir, 6).unwrap();
    [first, second].concat()
}

/// What retention then the sealer do with segment 0.
fn set_aside_and_recycle<S: Storage>(s: &S, dir: &Path) -> std::io::Result<()> {
    let free = set_aside_segment(s, dir, 0)?;
    recycle(s, dir, &free, 2, CAP).map(drop)
}

#[test]
fn a_recycled_segment_is_all_zeros_at_its_new_name_and_the_old_names_are_gone() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let all = delivered_and_active(dir);
    let free = set_aside_segment(&FsStorage, dir, 0).unwrap();
    assert_eq!(free, dir.join(free_name(0)));
    assert!(!dir.join(sealed_name(0)).exists());
    let pre = recycle(&FsStorage, dir, &free, 2, CAP).unwrap();
    assert_eq!(pre.path, dir.join(open_name(2)));
    assert_eq!(pre.segment_id, 2);
    let bytes = std::fs::read(&pre.path).unwrap();
    assert_eq!(bytes.len() as u64, CAP);
    assert!(bytes.iter().all(|&b| b == 0), "stale bytes left");
    assert!(!free.exists());
    assert!(!dir.join(format!("{}.tmp", open_name(2))).exists());
    // The new segment takes records like a preallocated one.
    let mut c = ActiveSegment::start(pre, SHARD, 10);
    let third = recs(10, 3, |s| 50 + s as usize);
    append(&mut c, &third).unwrap();
    c.sync().unwrap();
    let rec = recover_shard(&FsStorage, dir, SHARD, 0).unwrap();
    assert!(rec.report.quarantined.is_empty());
    assert_eq!(rec.report.lost_records, 0);
    assert_records(
        &read_shard(&FsStorage, dir).unwrap(),
        &[&all[6..], &third[..]].concat(),
    );
}

/// A recycled file longer than a segment (it held one oversized first
/// batch) is cut to the segment size.
#[test]
fn a_longer_file_is_cut_to_the_segment_size() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let free = dir.join(free_name(0));
    std::fs::write(&free, vec![0xA5u8; 3 * CAP as usize]).unwrap();
    let pre = recycle(&FsStorage, dir, &free, 1, CAP).unwrap();
    let bytes = std::fs::read(&pre.path).unwrap();
    assert_eq!(bytes.len() as u64, CAP);
    assert!(bytes.iter().all(|&b| b == 0));
}

/// A start removes a set-aside segment, and its id is never handed out
/// again.
#[test]
fn a_start_removes_a_free_segment_and_counts_its_id() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    delivered_and_active(dir);
    // Segment 1 is delivered and gone too, and an older run left a free
    // segment 5: the newest id on disk is a free one.
    std::fs::remove_file(dir.join(open_name(1))).unwrap();
    write_checkpoint(&FsStorage, dir, 10).unwrap();
    set_aside_segment(&FsStorage, dir, 0).unwrap();
    std::fs::write(dir.join(free_name(5)), b"old records").unwrap();
    let rec = recover_shard(&FsStorage, dir, SHARD, 10).unwrap();
    assert_eq!(rec.report.removed_free, 2);
    assert!(
        rec.report.next_segment_id > 5,
        "{}",
        rec.report.next_segment_id
    );
    assert!(
        names(dir).iter().all(|n| !n.ends_with(".free")),
        "{:?}",
        names(dir)
    );
    assert!(read_shard(&FsStorage, dir).unwrap().is_empty());
}

/// Crash (and, separately, cut the power) before every storage operation of
/// setting aside and recycling: recovery then keeps the active segment's
/// records, loses nothing, quarantines nothing and leaves no `.free` or
/// `.open.tmp` behind; segment 0 is either back whole (its rename undone)
/// or gone, never half zeroed under its old name.
#[test]
fn a_crash_or_power_cut_at_any_step_of_recycling_loses_nothing() {
    let root = tempfile::tempdir().unwrap();
    let counter = FaultyStorage::new(vec![]);
    let clean = root.path().join("clean");
    delivered_and_active(&clean);
    set_aside_and_recycle(&counter, &clean).unwrap();
    let mut faults = counter.crash_points(&[
        Op::Open,
        Op::Write,
        Op::SyncAll,
        Op::SetLen,
        Op::Rename,
        Op::SyncDir,
        Op::Remove,
    ]);
    for nth in 1..=counter.count(Op::Write) {
        faults.push(Fault {
            op: Op::Write,
            nth,
            kind: FaultKind::TornWrite { keep: 7 },
        });
    }
    assert!(faults.len() >= 8, "only {} crash points", faults.len());
    let mut cases = 0;
    for (i, f) in faults.into_iter().enumerate() {
        for power in [false, true] {
            let what = format!("{f:?}, power cut: {power}");
            let dir = root.path().join(format!("state-{i}-{power}"));
            let all = delivered_and_active(&dir);
            let s = FaultyStorage::new(vec![f]);
            assert!(
                set_aside_and_recycle(&s, &dir).is_err(),
                "{what}: never fired"
            );
            if power {
                s.power_cut().unwrap();
            }
            let rec = recover_shard(&FsStorage, &dir, SHARD, 0)
                .unwrap_or_else(|e| panic!("{what}: recovery failed: {e}"));
            let r = &rec.report;
            assert!(
                r.quarantined.is_empty(),
                "{what}: quarantined {:?}",
                r.quarantined
            );
            assert_eq!(r.lost_records, 0, "{what}: records counted lost");
            let left = names(&dir);
            assert!(
                left.iter()
                    .all(|n| !n.ends_with(".free") && !n.ends_with(".tmp")),
                "{what}: leftovers {left:?}"
            );
            let records = read_shard(&FsStorage, &dir).unwrap();
            let want = if dir.join(sealed_name(0)).exists() {
                &all[..]
            } else {
                &all[6..]
            };
            assert_records(&records, want);
            assert_eq!(r.next_seq, 10, "{what}");
            cases += 1;
        }
    }
    assert!(cases >= 16);
}
