//! `open_shard`: loss is never silent. A segment deleted from outside (a
//! gap between segments, or between the checkpoint and the oldest segment)
//! is reported with its range and count and recorded once in quarantine; a
//! checkpoint ahead of the data is moved aside and delivery restarts at the
//! oldest record; sequence numbers are never reused; and the normal states
//! report nothing.

mod common;

use std::fs;
use std::path::{Path, PathBuf};

use common::*;
use spillway_wab::checkpoint::checkpoint_path;
use spillway_wab::fault::{FaultKind, FaultyStorage, Op};
use spillway_wab::format::now_unix_us;
use spillway_wab::SealedCheck;
use spillway_wab::{
    open_shard, open_shard_seen, preallocate, read_checkpoint, seal, write_checkpoint,
    ActiveSegment, FsStorage, RecoveryReport, Storage, QUARANTINE_DIR,
};

const SHARD: u32 = 7;
const CAP: u64 = 16 * 1024;

/// Sealed segments with ids from `first_id`, one per (first_seq, count).
fn sealed(dir: &Path, first_id: u64, ranges: &[(u64, u64)]) -> Vec<(PathBuf, Vec<Rec>)> {
    FsStorage.create_dir_all(dir).unwrap();
    ranges
        .iter()
        .enumerate()
        .map(|(i, &(first, n))| {
            let pre = preallocate(&FsStorage, dir, first_id + i as u64, CAP).unwrap();
            let mut seg = ActiveSegment::start(pre, SHARD, first);
            let r = recs(first, n, |s| 10 + s as usize % 30);
            append(&mut seg, &r).unwrap();
            seg.sync().unwrap();
            (seal(&FsStorage, dir, seg.into_sealing()).unwrap(), r)
        })
        .collect()
}

/// Nothing reported: no gap, no loss, no untrusted checkpoint.
#[track_caller]
fn quiet(r: &RecoveryReport, what: &str) {
    assert!(r.gaps.is_empty(), "{what}: {:?}", r.gaps);
    assert_eq!(r.lost_records, 0, "{what}");
    assert!(r.untrusted_checkpoint.is_none(), "{what}");
    assert!(r.quarantined.is_empty() && r.salvaged.is_empty(), "{what}");
}

#[test]
fn segment_deleted_from_outside_is_reported_as_a_gap() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("shard-007");
    let segs = sealed(&dir, 0, &[(0, 5), (5, 4), (9, 5)]);
    fs::remove_file(&segs[1].0).unwrap();
    let o = open_shard(&FsStorage, &dir, SHARD).unwrap();
    let r = &o.recovered.report;
    assert_eq!(r.gaps.len(), 1);
    let g = &r.gaps[0];
    assert_eq!((g.first, g.last, g.count(), g.new), (5, 8, 4, true));
    assert_eq!(r.lost_records, 4);
    let reason_path = dir.join(QUARANTINE_DIR).join("gap-5-8.reason");
    assert_eq!(g.reason_file.as_deref(), Some(reason_path.as_path()));
    let reason = fs::read_to_string(&reason_path).unwrap();
    assert!(reason.contains("5..=8 (4 records)"), "{reason}");
    assert!(reason.contains("0000000000000000") && reason.contains("0000000000000002"));
    assert_eq!((r.next_seq, o.confirmed), (14, 0));
    // Idempotent: the next start still shows it, but not as new, and
    // writes nothing.
    let before = snapshot(&dir);
    let again = open_shard(&FsStorage, &dir, SHARD).unwrap();
    let r2 = &again.recovered.report;
    assert_eq!(r2.gaps.len(), 1);
    assert_eq!(
        (r2.gaps[0].first, r2.gaps[0].last, r2.gaps[0].new),
        (5, 8, false)
    );
    assert_eq!(r2.lost_records, 4);
    assert_eq!(snapshot(&dir), before);
}

#[test]
fn oldest_segment_deleted_from_outside_is_a_gap_after_the_checkpoint() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("shard-007");
    let segs = sealed(&dir, 0, &[(0, 5), (5, 4)]);
    write_checkpoint(&FsStorage, &dir, 2).unwrap();
    fs::remove_file(&segs[0].0).unwrap();
    let o = open_shard(&FsStorage, &dir, SHARD).unwrap();
    let r = &o.recovered.report;
    let gaps: Vec<(u64, u64, bool)> = r.gaps.iter().map(|g| (g.first, g.last, g.new)).collect();
    assert_eq!(gaps, vec![(2, 4, true)]);
    assert_eq!(r.lost_records, 3);
    assert_eq!(o.confirmed, 2);
    assert!(dir.join(QUARANTINE_DIR).join("gap-2-4.reason").exists());
}

#[test]
fn checkpoint_ahead_of_the_data_is_moved_aside_and_delivery_restarts_at_the_oldest() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("shard-007");
    sealed(&dir, 0, &[(3, 5), (8, 6)]);
    write_checkpoint(&FsStorage, &dir, 100).unwrap();
    let o = open_shard(&FsStorage, &dir, SHARD).unwrap();
    let r = &o.recovered.report;
    let u = r.untrusted_checkpoint.as_ref().expect("reported");
    assert_eq!((u.value, u.data_end), (100, 14));
    assert!(u
        .moved_to
        .file_name()
        .unwrap()
        .to_str()
        .unwrap()
        .starts_with("checkpoint.ahead-"));
    // The evidence takes no room (issue 39: its 8 KiB kept a tight disk
    // refusing pushes for good): emptied, its value in its name.
    let name = u
        .moved_to
        .file_name()
        .unwrap()
        .to_str()
        .unwrap()
        .to_string();
    assert!(name.ends_with(".seq-100"), "{name}");
    assert_eq!(std::fs::metadata(&u.moved_to).unwrap().len(), 0, "{name}");
    // A fresh checkpoint records the restart point (the oldest record), so
    // the next start need not guess again and the disk need not have space
    // for it later.
    assert_eq!(read_checkpoint(&FsStorage, &dir).unwrap(), 3);
    // Deliver from the oldest record; never reuse a seq the sink may have
    // seen under the untrusted checkpoint.
    assert_eq!(o.confirmed, 3);
    assert_eq!(r.next_seq, 100);
    assert!(r.gaps.is_empty(), "{:?}", r.gaps);
    // The next start reads the floor from the name alone.
    let again = open_shard(&FsStorage, &dir, SHARD).unwrap();
    assert_eq!(again.recovered.report.next_seq, 100);
    assert!(again.recovered.report.gaps.is_empty());

    // The writer starts its next segment at 100; the jump is not a gap on
    // the next start, and the floor stays.
    sealed(&dir, 2, &[(100, 2)]);
    let again = open_shard(&FsStorage, &dir, SHARD).unwrap();
    let r = &again.recovered.report;
    quiet(r, "after the jump");
    assert_eq!((again.confirmed, r.next_seq), (3, 102));
}

#[test]
fn corrupt_checkpoint_with_no_segment_floors_next_seq_at_the_clock() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("shard-007");
    FsStorage.create_dir_all(&dir).unwrap();
    write_checkpoint(&FsStorage, &dir, 50).unwrap();
    let p = checkpoint_path(&dir);
    let mut raw = fs::read(&p).unwrap();
    raw[20] ^= 0xff;
    fs::write(&p, raw).unwrap();
    let before = now_unix_us();
    let o = open_shard(&FsStorage, &dir, SHARD).unwrap();
    assert!(o.checkpoint.corrupt);
    let r = &o.recovered.report;
    quiet(r, "corrupt, no segment");
    let floor = r.next_seq;
    assert!(floor >= before, "next_seq {floor} below the clock {before}");
    // Nothing to deliver: the fresh checkpoint says so.
    assert_eq!(o.confirmed, floor);
    assert_eq!(read_checkpoint(&FsStorage, &dir).unwrap(), floor);
    // Records written from the floor on. The next start neither reports a
    // gap nor lowers the numbering.
    sealed(&dir, 0, &[(floor, 3)]);
    let again = open_shard(&FsStorage, &dir, SHARD).unwrap();
    quiet(&again.recovered.report, "after the floor");
    assert_eq!(again.recovered.report.next_seq, floor + 3);
}

#[test]
fn corrupt_checkpoint_with_segments_redelivers_from_the_oldest() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("shard-007");
    sealed(&dir, 0, &[(20, 5), (25, 4)]);
    write_checkpoint(&FsStorage, &dir, 22).unwrap();
    fs::write(checkpoint_path(&dir), b"garbage").unwrap();
    let o = open_shard(&FsStorage, &dir, SHARD).unwrap();
    assert!(o.checkpoint.corrupt && o.checkpoint.moved_aside.is_some());
    // Redeliver from the oldest record kept, and record that durably.
    assert_eq!(o.confirmed, 20);
    assert_eq!(read_checkpoint(&FsStorage, &dir).unwrap(), 20);
    let r = &o.recovered.report;
    // Seqs before 20 were delivered and deleted, or never existed: not a
    // loss anyone can see, so not reported as one.
    quiet(r, "corrupt with segments");
    assert_eq!(r.next_seq, 29);
}

#[test]
fn normal_states_report_nothing() {
    // An empty fresh folder (and its parent) made durably.
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("data").join("shard-007");
    let o = open_shard(&FsStorage, &dir, SHARD).unwrap();
    quiet(&o.recovered.report, "fresh");
    assert_eq!((o.confirmed, o.recovered.report.next_seq), (0, 0));
    assert_eq!(mode(&dir), 0o700);

    // Checkpoint inside the segments, at the end of one, at the data end,
    // past segments not deleted yet.
    for cp in [0u64, 2, 5, 7, 9, 14] {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("shard-007");
        sealed(&dir, 0, &[(0, 5), (5, 4), (9, 5)]);
        write_checkpoint(&FsStorage, &dir, cp).unwrap();
        let o = open_shard(&FsStorage, &dir, SHARD).unwrap();
        quiet(&o.recovered.report, &format!("checkpoint {cp}"));
        assert_eq!((o.confirmed, o.recovered.report.next_seq), (cp, 14));
        assert_eq!(read_checkpoint(&FsStorage, &dir).unwrap(), cp);
    }

    // Every segment delivered and deleted: the checkpoint is the floor.
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("shard-007");
    let segs = sealed(&dir, 0, &[(0, 5), (5, 4)]);
    write_checkpoint(&FsStorage, &dir, 9).unwrap();
    for (p, _) in &segs {
        fs::remove_file(p).unwrap();
    }
    let o = open_shard(&FsStorage, &dir, SHARD).unwrap();
    quiet(&o.recovered.report, "all deleted");
    assert_eq!((o.confirmed, o.recovered.report.next_seq), (9, 9));
    // ... and the next segment starts there, after the checkpoint.
    sealed(&dir, 2, &[(9, 3)]);
    let o = open_shard(&FsStorage, &dir, SHARD).unwrap();
    quiet(&o.recovered.report, "next segment");
    assert_eq!(o.recovered.report.next_seq, 12);
}

/// A segment quarantined whole (its header damaged beyond proof, its
/// footer cut off) takes its records with it: the hole it leaves between
/// its neighbours is counted once, as a gap whose reason names the file;
/// later starts still count it, as a known gap.
#[test]
fn a_segment_quarantined_whole_is_counted_as_the_gap_it_leaves() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("shard-007");
    let segs = sealed(&dir, 0, &[(0, 5), (5, 4), (9, 5)]);
    let p = &segs[1].0;
    flip(p, 24);
    flip(p, 33);
    let b = fs::read(p).unwrap();
    fs::write(p, &b[..b.len() - 40]).unwrap();
    let o = open_shard(&FsStorage, &dir, SHARD).unwrap();
    let r = &o.recovered.report;
    assert_eq!(r.quarantined.len(), 1);
    assert_eq!(r.unnumbered.len(), 1);
    assert_eq!(
        (r.unnumbered[0].records, r.unnumbered[0].counted_by_gap),
        (4, true)
    );
    assert_eq!(r.gaps.len(), 1, "{:?}", r.gaps);
    assert_eq!(
        (r.gaps[0].first, r.gaps[0].last, r.gaps[0].new),
        (5, 8, true)
    );
    assert_eq!((r.lost_records, r.new_losses()), (4, 4));
    let reason = fs::read_to_string(r.gaps[0].reason_file.as_ref().unwrap()).unwrap();
    assert!(
        reason.contains("quarantine/ holds 0000000000000001.sealed"),
        "{reason}"
    );
    assert_eq!(r.next_seq, 14);
    let again = open_shard(&FsStorage, &dir, SHARD).unwrap();
    let r = &again.recovered.report;
    assert_eq!((r.lost_records, r.new_losses()), (4, 0));
    assert!(!r.gaps[0].new);
}

/// A segment an earlier start moved to quarantine whole with its header
/// intact (what a sealed segment cut short used to get) covers numbers no
/// kept segment holds: they are lost and counted, not explained away. Its
/// records below the checkpoint were delivered and are not.
#[test]
fn numbers_only_a_quarantined_segment_holds_are_counted_past_the_checkpoint() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("shard-007");
    let segs = sealed(&dir, 0, &[(0, 5), (5, 4), (9, 5)]);
    let qdir = dir.join(QUARANTINE_DIR);
    fs::create_dir(&qdir).unwrap();
    fs::rename(&segs[1].0, qdir.join("0000000000000001.sealed")).unwrap();
    fs::rename(&segs[2].0, qdir.join("0000000000000002.sealed")).unwrap();
    write_checkpoint(&FsStorage, &dir, 7).unwrap();
    let o = open_shard(&FsStorage, &dir, SHARD).unwrap();
    let r = &o.recovered.report;
    // Past the newest segment kept (0..5): 7..=13 (5 and 6 were delivered).
    assert_eq!(r.gaps.len(), 1, "{:?}", r.gaps);
    assert_eq!((r.gaps[0].first, r.gaps[0].last), (7, 13));
    assert_eq!(r.lost_records, 7);
    let reason = fs::read_to_string(r.gaps[0].reason_file.as_ref().unwrap()).unwrap();
    assert!(
        reason.contains("0000000000000001.sealed, 0000000000000002.sealed"),
        "{reason}"
    );
    assert_eq!(r.next_seq, 14);
}

/// On a full disk the gap's reason file cannot be written: the start-up
/// goes on and the gap is still reported (and written on a later start).
#[test]
fn enospc_gap_reason_is_skipped_not_fatal() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("shard-007");
    let segs = sealed(&dir, 0, &[(0, 5), (5, 4), (9, 5)]);
    fs::remove_file(&segs[1].0).unwrap();
    let storage = FaultyStorage::new(vec![]);
    storage.fail_every(Op::Create, FaultKind::Enospc);
    let o = open_shard(&storage, &dir, SHARD).unwrap();
    let g = &o.recovered.report.gaps;
    assert_eq!((g[0].first, g[0].last, g[0].new), (5, 8, true));
    assert!(g[0].reason_file.is_none());
    assert!(!dir.join(QUARANTINE_DIR).exists());
    let later = open_shard(&FsStorage, &dir, SHARD).unwrap();
    assert!(later.recovered.report.gaps[0].new);
    assert!(dir.join(QUARANTINE_DIR).join("gap-5-8.reason").exists());
}

/// A hole below the checkpoint is a segment delivered and deleted while an
/// older one stayed (a crash between the checkpoint write and the deletion,
/// or a deletion a power cut undid): nothing is lost there, and only the
/// part of a hole at or past the checkpoint is reported.
#[test]
fn a_hole_below_the_checkpoint_is_not_a_loss() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("shard-007");
    let segs = sealed(&dir, 0, &[(0, 5), (5, 4), (9, 5)]);
    fs::remove_file(&segs[1].0).unwrap();
    write_checkpoint(&FsStorage, &dir, 9).unwrap();
    let o = open_shard(&FsStorage, &dir, SHARD).unwrap();
    quiet(&o.recovered.report, "hole 5..=8 wholly below checkpoint 9");
    assert_eq!(o.confirmed, 9);

    // The checkpoint inside the hole: 7 and 8 were never confirmed.
    write_checkpoint(&FsStorage, &dir, 7).unwrap();
    let o = open_shard(&FsStorage, &dir, SHARD).unwrap();
    let r = &o.recovered.report;
    assert_eq!(r.gaps.len(), 1, "{:?}", r.gaps);
    assert_eq!((r.gaps[0].first, r.gaps[0].last), (7, 8));
    assert_eq!(r.lost_records, 2);
}

/// Issue 39: the open segment's tail cut from outside took records a sink
/// had dead-lettered. The store holding them is proof they were issued:
/// no new record takes their numbers, and the ones gone are counted, once.
#[test]
fn numbers_a_dead_letter_store_holds_past_the_data_are_counted_and_never_reused() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("shard-007");
    sealed(&dir, 0, &[(0, 14)]);
    write_checkpoint(&FsStorage, &dir, 14).unwrap();
    // A store outside the folder held seqs up to 19 of this shard.
    let o = open_shard_seen(&FsStorage, &dir, SHARD, SealedCheck::Records, 20).unwrap();
    let r = &o.recovered.report;
    assert_eq!(r.next_seq, 20, "numbering goes on past what the store saw");
    assert_eq!(r.lost_records, 6, "{:?}", r.gaps);
    assert_eq!(
        r.gaps
            .iter()
            .map(|g| (g.first, g.last, g.new))
            .collect::<Vec<_>>(),
        vec![(14, 19, true)]
    );
    // Known at the next start: still counted, not new, and the floor stays
    // even with the store emptied since (`ctl dead-letter drop`).
    let again = open_shard_seen(&FsStorage, &dir, SHARD, SealedCheck::Records, 0).unwrap();
    let r = &again.recovered.report;
    assert_eq!(r.next_seq, 20);
    assert_eq!(r.lost_records, 6);
    assert!(r.gaps.iter().all(|g| !g.new), "{:?}", r.gaps);
    // Nothing past the data: nothing counted.
    let quiet_dir = tmp.path().join("shard-008");
    sealed(&quiet_dir, 0, &[(0, 14)]);
    let o = open_shard_seen(&FsStorage, &quiet_dir, SHARD, SealedCheck::Records, 10).unwrap();
    assert_eq!(o.recovered.report.next_seq, 14);
    quiet(&o.recovered.report, "a store below the data's end");
}
