//! A write that fails part-way can leave whole records of the failed group
//! in the file. The writer nacks the group, abandons the segment and starts
//! the next one at the group's first sequence number, so after a restart
//! those records must not come back under sequence numbers the next
//! segment's records now carry.

mod common;

use std::fs;
use std::io::IoSlice;
use std::path::Path;

use common::*;
use spillway_wab::fault::{Fault, FaultKind, FaultyStorage, Op};
use spillway_wab::format::Salt;
use spillway_wab::{
    preallocate, read_shard, recover_shard, seal, ActiveSegment, FsStorage, Storage, StorageFile,
    QUARANTINE_DIR,
};

const CAP: u64 = 16 * 1024;
const SHARD: u32 = 6;

/// Segment 0: `acked` (synced), then the bytes of `failed` written behind
/// the segment's back (what a pwritev that failed after writing part of the
/// group leaves), `landed` bytes of them. Segment 1 starts at the failed
/// group's first seq with `next` (synced), sealed if `seal_next`.
fn abandoned_state(
    dir: &Path,
    acked: &[Rec],
    failed: &[Rec],
    landed: usize,
    next: &[Rec],
    seal_next: bool,
) -> u64 {
    FsStorage.create_dir_all(dir).unwrap();
    let mut a = ActiveSegment::start(
        preallocate(&FsStorage, dir, 0, CAP).unwrap(),
        SHARD,
        acked[0].seq,
    );
    append(&mut a, acked).unwrap();
    a.sync().unwrap();
    let at = a.write_offset;
    let bytes = group_bytes(a.header.salt(), None, failed);
    let mut f = FsStorage.open(&a.path).unwrap();
    f.write_all_at(at, &[IoSlice::new(&bytes[..landed])])
        .unwrap();
    // The flusher: nack, abandon, continue in a new segment at next_seq().
    assert_eq!(a.next_seq(), failed[0].seq);
    let mut b = ActiveSegment::start(
        preallocate(&FsStorage, dir, 1, CAP).unwrap(),
        SHARD,
        a.next_seq(),
    );
    append(&mut b, next).unwrap();
    b.sync().unwrap();
    if seal_next {
        seal(&FsStorage, dir, b.into_sealing()).unwrap();
    }
    at
}

#[test]
fn records_of_a_failed_append_do_not_reuse_the_next_segments_seqs() {
    let acked = recs(0, 3, |_| 40);
    let failed: Vec<Rec> = recs(3, 3, |_| 70)
        .into_iter()
        .map(|mut r| {
            r.payload[0] ^= 0x55; // not the records the next segment holds
            r
        })
        .collect();
    let next = recs(3, 2, |_| 70);
    let full = disk_len(&failed) as usize;
    // All of the failed group landed; two records and a half; one record.
    for (landed, seal_next) in [
        (full, false),
        (full, true),
        (86 * 2 + 30, false),
        (86, true),
    ] {
        let what = format!("landed {landed}, next sealed {seal_next}");
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("shard-006");
        let at = abandoned_state(&dir, &acked, &failed, landed, &next, seal_next);

        let rec = recover_shard(&FsStorage, &dir, SHARD, 0).unwrap();
        let r = &rec.report;
        let got = read_shard(&FsStorage, &dir).unwrap();
        assert_records(&got, &[acked.clone(), next.clone()].concat());
        assert_eq!(r.next_seq, 5, "{what}");
        assert_eq!(r.next_segment_id, 2);
        assert!(
            r.resealed.contains(&(0, 3, CAP - at)),
            "{what}: {:?}",
            r.resealed
        );
        // The cut records are kept in quarantine, not destroyed.
        let qdir = dir.join(QUARANTINE_DIR);
        let tail = format!("0000000000000000.tail-at-{at}");
        assert_eq!(
            names(&qdir),
            vec![tail.clone(), format!("{tail}.reason")],
            "{what}"
        );
        assert_eq!(
            fs::read(qdir.join(&tail)).unwrap(),
            group_bytes(Salt::of_segment(0), None, &failed)[..landed].to_vec(),
            "{what}"
        );
        let reason = fs::read_to_string(qdir.join(format!("{tail}.reason"))).unwrap();
        assert!(
            reason.contains("overlap a newer segment"),
            "{what}: {reason:?}"
        );
        assert_eq!(
            names(&dir),
            vec![
                "0000000000000000.sealed",
                "0000000000000001.sealed",
                QUARANTINE_DIR
            ],
            "{what}"
        );
        let before = snapshot(&dir);
        let again = recover_shard(&FsStorage, &dir, SHARD, 0).unwrap();
        assert_eq!(snapshot(&dir), before, "{what}: not idempotent");
        assert!(again.report.quarantined.is_empty() && again.report.resealed.is_empty());
    }
}

/// The same state, recovery crashed at each step and rerun: the same end.
#[test]
fn crash_while_cutting_an_overlap_then_recover_again() {
    let tmp = tempfile::tempdir().unwrap();
    let state = tmp.path().join("state");
    let acked = recs(10, 2, |_| 25);
    let failed: Vec<Rec> = recs(12, 2, |_| 25)
        .into_iter()
        .map(|mut r| {
            r.payload[1] ^= 0x0f;
            r
        })
        .collect();
    let full = disk_len(&failed) as usize;
    abandoned_state(&state, &acked, &failed, full, &recs(12, 3, |_| 25), false);
    let base_dir = tmp.path().join("base");
    copy_dir(&state, &base_dir);
    let base = recover_shard(&FsStorage, &base_dir, SHARD, 0)
        .unwrap()
        .report;
    assert_eq!(base.next_seq, 15);
    let base_files = snapshot(&base_dir);
    let counter = FaultyStorage::new(vec![]);
    let count_dir = tmp.path().join("count");
    copy_dir(&state, &count_dir);
    recover_shard(&counter, &count_dir, SHARD, 0).unwrap();
    assert_eq!(snapshot(&count_dir), base_files);
    let mut points = 0;
    for op in [
        Op::Create,
        Op::Open,
        Op::Write,
        Op::SyncAll,
        Op::SetLen,
        Op::Rename,
        Op::SyncDir,
        Op::Remove,
        Op::Read,
    ] {
        for n in 1..=counter.count(op) {
            let dir = tmp.path().join(format!("{op:?}-{n}"));
            copy_dir(&state, &dir);
            let faulty = FaultyStorage::new(vec![Fault {
                op,
                nth: n,
                kind: FaultKind::Crash,
            }]);
            assert!(recover_shard(&faulty, &dir, SHARD, 0).is_err());
            let r = recover_shard(&FsStorage, &dir, SHARD, 0).unwrap().report;
            assert_eq!(snapshot(&dir), base_files, "crash at {op:?} #{n}");
            assert_eq!(r.next_seq, 15);
            points += 1;
        }
    }
    assert!(points > 15, "{points}");
}
