//! EIO and ENOSPC from the storage: the error reaches the caller (which
//! abandons the segment) and nothing is counted as durable that is not.

mod common;

use std::fs;

use common::*;
use spillway_wab::fault::{Fault, FaultKind, FaultyStorage, Op};
use spillway_wab::{
    preallocate, read_shard, recover_shard, seal, ActiveSegment, FsStorage, Storage,
};

const CAP: u64 = 16 * 1024;

fn errno(kind: FaultKind) -> i32 {
    match kind {
        FaultKind::Eio => libc::EIO,
        FaultKind::Enospc => libc::ENOSPC,
        _ => unreachable!(),
    }
}

#[test]
fn error_at_sync_data_surfaces_and_the_durable_offset_stays() {
    for kind in [FaultKind::Eio, FaultKind::Enospc] {
        for failing_sync in 1..=3u64 {
            let tmp = tempfile::tempdir().unwrap();
            let dir = tmp.path();
            let storage = FaultyStorage::new(vec![]);
            let mut seg = ActiveSegment::start(preallocate(&storage, dir, 0, CAP).unwrap(), 0, 10);
            assert_eq!(
                storage.count(Op::SyncData),
                0,
                "preallocate uses fsync, not fdatasync"
            );
            storage.inject(Fault {
                op: Op::SyncData,
                nth: failing_sync,
                kind,
            });
            let all = recs(10, 8, |s| 5 + s as usize);
            let groups = [&all[0..2], &all[2..5], &all[5..8]];
            let mut durable_recs = 0;
            for (i, g) in groups.iter().enumerate() {
                let before = seg.durable_offset;
                append(&mut seg, g).unwrap();
                let written = seg.write_offset;
                let res = seg.sync();
                if i as u64 + 1 == failing_sync {
                    let err = res.unwrap_err();
                    assert_eq!(err.raw_os_error(), Some(errno(kind)), "{kind:?}");
                    assert_eq!(
                        seg.durable_offset, before,
                        "{kind:?}: durable offset moved on a failed sync"
                    );
                    assert_eq!(seg.write_offset, written);
                    assert!(!storage.crashed(), "an I/O error is not a crash");
                    break;
                }
                res.unwrap();
                assert_eq!(seg.durable_offset, written);
                durable_recs += g.len();
            }
            // What the caller may still ack is what was durable before.
            assert_eq!(seg.durable_offset > 0, durable_recs > 0);
            assert_eq!(durable_recs, [0, 2, 5][failing_sync as usize - 1]);
            // The caller abandons the segment; recovery keeps every acked
            // record (and may keep the unacked group, whose bytes are there).
            drop(seg);
            recover_shard(&FsStorage, dir, 0, 0).unwrap();
            let got = read_shard(&FsStorage, dir).unwrap();
            assert!(got.len() >= durable_recs);
            assert_records(&got, &all[..got.len()]);
        }
    }
}

#[test]
fn error_at_write_surfaces_and_nothing_is_counted() {
    for kind in [FaultKind::Eio, FaultKind::Enospc] {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        let storage = FaultyStorage::new(vec![]);
        let mut seg = ActiveSegment::start(preallocate(&storage, dir, 0, CAP).unwrap(), 0, 0);
        let g1 = recs(0, 3, |_| 21);
        append(&mut seg, &g1).unwrap();
        seg.sync().unwrap();
        let (w, d, c, crc) = (
            seg.write_offset,
            seg.durable_offset,
            seg.count,
            seg.records_crc.value(),
        );
        storage.inject(Fault {
            op: Op::Write,
            nth: storage.count(Op::Write) + 1,
            kind,
        });
        let err = append(&mut seg, &recs(3, 2, |_| 21)).unwrap_err();
        assert_eq!(err.raw_os_error(), Some(errno(kind)));
        assert_eq!(
            (
                seg.write_offset,
                seg.durable_offset,
                seg.count,
                seg.records_crc.value()
            ),
            (w, d, c, crc)
        );
        assert_eq!(seg.next_seq(), 3);
        // The footer of a segment sealed now describes only what was written.
        let sealing = seg.into_sealing();
        assert_eq!(
            (
                sealing.footer.record_count,
                sealing.footer.end_offset,
                sealing.footer.last_seq
            ),
            (3, w, 2)
        );
        seal(&storage, dir, sealing).unwrap();
        recover_shard(&FsStorage, dir, 0, 0).unwrap();
        assert_records(&read_shard(&FsStorage, dir).unwrap(), &g1);
    }
}

/// A preallocation that fails part-way (ENOSPC on the k-th zero write, at
/// the fsync or at the rename) removes its `.open.tmp` and returns the
/// error: it must not keep filling the disk that ran out of space.
#[test]
fn enospc_while_preallocating_removes_the_partial_file() {
    let mib = 1024 * 1024;
    for (op, nth) in [
        (Op::Write, 2),
        (Op::Write, 3),
        (Op::Write, 6),
        (Op::SyncAll, 2),
        (Op::Rename, 2),
    ] {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        let storage = FaultyStorage::new(vec![Fault {
            op,
            nth,
            kind: FaultKind::Enospc,
        }]);
        // Segment 0 takes one write; segment 1 is five 1 MiB chunks, so
        // Write #k fails its (k-1)-th chunk.
        preallocate(&storage, dir, 0, CAP).unwrap();
        let err = preallocate(&storage, dir, 1, 5 * mib)
            .err()
            .expect("preallocate must fail");
        let what = format!("{op:?} #{nth}");
        assert_eq!(err.raw_os_error(), Some(libc::ENOSPC), "{what}");
        assert_eq!(
            names(dir),
            vec!["0000000000000000.open"],
            "{what}: the partial file must be gone"
        );
        let rec = recover_shard(&FsStorage, dir, 0, 0).unwrap();
        assert_eq!(rec.report.removed_partial, 0);
        assert_eq!(
            rec.spares.iter().map(|s| s.segment_id).collect::<Vec<_>>(),
            vec![0]
        );
        assert_eq!(names(dir), vec!["0000000000000000.open"]);
    }
    // A crash (not an error) leaves the `.open.tmp` for recovery to remove.
    let tmp = tempfile::tempdir().unwrap();
    let storage = FaultyStorage::new(vec![Fault {
        op: Op::Write,
        nth: 2,
        kind: FaultKind::Crash,
    }]);
    assert!(preallocate(&storage, tmp.path(), 0, 2 * mib).is_err());
    assert!(tmp.path().join("0000000000000000.open.tmp").exists());
    let rec = recover_shard(&FsStorage, tmp.path(), 0, 0).unwrap();
    assert_eq!(rec.report.removed_partial, 1);
}

#[test]
fn error_while_sealing_leaves_a_segment_recovery_reseals() {
    for op in [Op::Write, Op::SetLen, Op::SyncAll, Op::Rename, Op::SyncDir] {
        for kind in [FaultKind::Eio, FaultKind::Enospc] {
            let tmp = tempfile::tempdir().unwrap();
            let dir = tmp.path();
            let storage = FaultyStorage::new(vec![]);
            let mut seg = ActiveSegment::start(preallocate(&storage, dir, 0, CAP).unwrap(), 0, 0);
            let g = recs(0, 4, |_| 64);
            append(&mut seg, &g).unwrap();
            seg.sync().unwrap();
            // The next operation of this kind is seal's.
            storage.inject(Fault {
                op,
                nth: storage.count(op) + 1,
                kind,
            });
            let res = seal(&storage, dir, seg.into_sealing());
            assert_eq!(res.unwrap_err().raw_os_error(), Some(errno(kind)), "{op:?}");
            let rec = recover_shard(&FsStorage, dir, 0, 0).unwrap();
            assert_eq!(rec.report.segments.len(), 1);
            assert_eq!(names(dir), vec!["0000000000000000.sealed"], "{op:?}");
            assert_eq!(
                fs::metadata(dir.join("0000000000000000.sealed"))
                    .unwrap()
                    .len(),
                64 + 4 * 80 + 40
            );
            assert_records(&read_shard(&FsStorage, dir).unwrap(), &g);
        }
    }
}

#[test]
fn error_listing_or_creating_the_directory_fails_recovery() {
    for op in [Op::Create, Op::SyncDir, Op::Read] {
        let tmp = tempfile::tempdir().unwrap();
        // Listing needs an existing folder; creating needs a missing one.
        let dir = tmp.path().join("shard-000");
        if op == Op::Read {
            FsStorage.create_dir_all(&dir).unwrap();
        }
        let storage = FaultyStorage::new(vec![Fault {
            op,
            nth: 1,
            kind: FaultKind::Eio,
        }]);
        let err = recover_shard(&storage, &dir, 0, 0)
            .err()
            .expect("recovery must fail");
        assert_eq!(err.raw_os_error(), Some(libc::EIO), "{op:?}");
    }
}
