//! A delivered segment written over as a later one: set aside as `.free`
//! by retention, then its first page zeroed and renamed by the sealer
//! ([`spillway_wab::recycle`]), its old records left in place. A process
//! crash or a power cut at any step leaves a folder recovery reads without
//! a loss, a quarantine or a leftover, and with the active segment's
//! records intact; and no old record is ever read back as a new one, after
//! a clean crash or a torn group.

mod common;

use std::path::Path;

use common::*;
use spillway_wab::fault::{Fault, FaultKind, FaultyStorage, Op};
use spillway_wab::follow::set_aside_segment;
use spillway_wab::format::{
    encode_record_header, free_name, open_name, record_crc, sealed_name, Footer, RecordsCrc,
    SegmentHeader, FORMAT_1, RECORD_HEADER_LEN,
};
use spillway_wab::{
    preallocate, read_shard, recover_shard, recycle, seal, write_checkpoint, ActiveSegment,
    FsStorage, Storage, QUARANTINE_DIR,
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

/// Segment 0 sealed full of records 0..40 (300 bytes each, most of the
/// file), all delivered; segment 1 open with records 40..44, synced.
/// Returns segment 1's records and segment 0's bytes.
fn full_and_delivered(dir: &Path) -> (Vec<Rec>, Vec<u8>) {
    FsStorage.create_dir_all(dir).unwrap();
    let old = recs(0, 40, |_| 300);
    let active = recs(40, 4, |s| 90 + s as usize);
    let mut a = ActiveSegment::start(preallocate(&FsStorage, dir, 0, CAP).unwrap(), SHARD, 0);
    append(&mut a, &old).unwrap();
    a.sync().unwrap();
    let mut b = ActiveSegment::start(preallocate(&FsStorage, dir, 1, CAP).unwrap(), SHARD, 40);
    seal(&FsStorage, dir, a.into_sealing()).unwrap();
    append(&mut b, &active).unwrap();
    b.sync().unwrap();
    write_checkpoint(&FsStorage, dir, 40).unwrap();
    let bytes = std::fs::read(dir.join(sealed_name(0))).unwrap();
    (active, bytes)
}

#[test]
fn a_recycled_segment_keeps_its_old_records_past_the_first_page_and_never_serves_them() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let (active, old) = full_and_delivered(dir);
    assert!(old.len() > 3 * 4096, "segment 0 fills most of the file");
    let free = set_aside_segment(&FsStorage, dir, 0).unwrap();
    assert_eq!(free, dir.join(free_name(0)));
    assert!(!dir.join(sealed_name(0)).exists());
    let pre = recycle(&FsStorage, dir, &free, 2, CAP).unwrap();
    assert_eq!(pre.path, dir.join(open_name(2)));
    assert_eq!(pre.segment_id, 2);
    assert!(!free.exists());
    assert!(!dir.join(format!("{}.tmp", open_name(2))).exists());
    // Only the first page and the space past the old end are written.
    let bytes = std::fs::read(&pre.path).unwrap();
    assert_eq!(bytes.len() as u64, CAP);
    assert!(bytes[..4096].iter().all(|&b| b == 0), "first page zeroed");
    assert_eq!(&bytes[4096..old.len()], &old[4096..], "old records left");
    assert!(bytes[old.len()..].iter().all(|&b| b == 0));
    drop(pre);

    // Before its first group it is a spare.
    let mut rec = recover_shard(&FsStorage, dir, SHARD, 0).unwrap();
    assert!(rec.report.quarantined.is_empty());
    assert_eq!(rec.spares.len(), 1);
    assert_eq!(rec.spares[0].segment_id, 2);
    assert_records(&read_shard(&FsStorage, dir).unwrap(), &active);

    // Written and then crashed (no seal): recovery ends its records at the
    // 16 zero bytes after the last group, not at the old records past it.
    let mut c = ActiveSegment::start(rec.spares.remove(0), SHARD, 44);
    // Past the first page: the old records follow the new ones.
    let third = recs(44, 3, |_| 1500);
    let fourth = recs(47, 2, |_| 7);
    append(&mut c, &third).unwrap();
    c.sync().unwrap();
    append(&mut c, &fourth).unwrap();
    c.sync().unwrap();
    let end = c.write_offset;
    assert!(end > 4096 && end < old.len() as u64);
    drop(c);
    let rec = recover_shard(&FsStorage, dir, SHARD, 0).unwrap();
    let r = &rec.report;
    assert!(r.quarantined.is_empty(), "{:?}", r.quarantined);
    assert_eq!(r.lost_records, 0);
    assert_eq!(r.resealed, vec![(2, 5, 0)], "sealed where its records end");
    assert_eq!(r.next_seq, 49);
    assert_records(
        &read_shard(&FsStorage, dir).unwrap(),
        &[&active[..], &third[..], &fourth[..]].concat(),
    );
    let sealed = std::fs::metadata(dir.join(sealed_name(2))).unwrap().len();
    assert_eq!(sealed, end + 40);
}

/// A group torn by a crash in a recycled segment: what was acked is kept,
/// records of the torn group that reached the file whole may be kept too
/// (never acked, delivered at least once), no old record comes back, and
/// the bytes saved to quarantine are the torn group's, not the rest of the
/// old segment.
#[test]
fn a_torn_group_in_a_recycled_segment_keeps_the_acked_records_and_saves_only_its_own_bytes() {
    // The torn group: a 500-byte record, then a 40-byte one. Every keep
    // below 516 tears the first (mid length, CRC, meta, payload); 530
    // leaves it whole and tears the second.
    let torn = [recs(47, 1, |_| 500), recs(48, 1, |_| 40)].concat();
    // Acked records of 80 bytes end inside the zeroed first page; of 1,500
    // bytes, past it, amid the old records.
    let cases = [1usize, 4, 15, 16, 17, 100, 515, 516, 530]
        .into_iter()
        .flat_map(|keep| [(keep, 80usize), (keep, 1500)]);
    for (keep, acked_len) in cases {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        let (active, _) = full_and_delivered(dir);
        let s = FaultyStorage::new(vec![]);
        let free = set_aside_segment(&s, dir, 0).unwrap();
        let mut c = ActiveSegment::start(recycle(&s, dir, &free, 2, CAP).unwrap(), SHARD, 44);
        let acked = recs(44, 3, |_| acked_len);
        append(&mut c, &acked).unwrap();
        c.sync().unwrap();
        let at = c.write_offset;
        s.inject(Fault {
            op: Op::Write,
            nth: s.count(Op::Write) + 1,
            kind: FaultKind::TornWrite { keep },
        });
        append(&mut c, &torn).unwrap_err();
        assert!(s.crashed());
        drop(c);

        let rec = recover_shard(&FsStorage, dir, SHARD, 0).unwrap();
        let r = &rec.report;
        let whole = if keep >= RECORD_HEADER_LEN + 500 {
            1
        } else {
            0
        };
        let want = [&active[..], &acked[..], &torn[..whole]].concat();
        assert_eq!(r.lost_records, 0, "keep {keep} after {acked_len}");
        assert_records(&read_shard(&FsStorage, dir).unwrap(), &want);
        assert_eq!(r.next_seq, 47 + whole as u64, "keep {keep}");
        // At most a tail copy: the torn bytes, the zeros of the first page
        // after them, and the rest of the one old record they ended in.
        let qdir = dir.join(QUARANTINE_DIR);
        for (path, why) in &r.quarantined {
            assert!(
                path.file_name()
                    .unwrap()
                    .to_str()
                    .unwrap()
                    .contains(".tail-at-"),
                "keep {keep}: quarantined {path:?}: {why}"
            );
            let len = std::fs::metadata(path).unwrap().len() as usize;
            let zeros = 4096usize.saturating_sub(at as usize + keep);
            assert!(
                len <= keep + zeros + RECORD_HEADER_LEN + 300,
                "keep {keep}: saved {len} bytes from offset {at}"
            );
        }
        if r.quarantined.is_empty() {
            assert!(!qdir.exists() || names(&qdir).is_empty(), "keep {keep}");
        }
        // A second recovery changes nothing.
        let before = snapshot(dir);
        recover_shard(&FsStorage, dir, SHARD, 0).unwrap();
        assert_eq!(snapshot(dir), before, "keep {keep}");
    }
}

/// Segment 0 as a build before format 2 wrote it (CRCs unsalted) holding
/// `old` from seq 0: sealed (with its footer), or open (zeros up to the
/// segment size after its records).
fn format_1_segment(old: &[Rec], sealed: bool) -> Vec<u8> {
    let header = SegmentHeader {
        format: FORMAT_1,
        ..SegmentHeader::new(SHARD, 0, 0, 1)
    };
    let mut bytes = header.encode().to_vec();
    let mut crcs = RecordsCrc::new();
    for r in old {
        let m = r.meta.pack();
        let crc = record_crc(m, &r.payload);
        crcs.add(crc);
        bytes.extend_from_slice(&encode_record_header(r.payload.len() as u32, crc, m));
        bytes.extend_from_slice(&r.payload);
    }
    if sealed {
        let footer = Footer {
            record_count: old.len() as u64,
            end_offset: bytes.len() as u64,
            last_seq: old.len() as u64 - 1,
            records_crc: crcs.value(),
        };
        bytes.extend_from_slice(&footer.encode(header.salt()));
    } else {
        bytes.resize(CAP as usize, 0);
    }
    bytes
}

/// A segment written by a build before format 2 (CRCs unsalted), sealed
/// or still open (zeros after its records) at the upgrade, is still read,
/// and once delivered it is recycled like any other: its records are
/// never read back in the new use either.
#[test]
fn a_format_1_segment_is_read_and_then_recycled() {
    for sealed in [true, false] {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        FsStorage.create_dir_all(dir).unwrap();
        let old = recs(0, 30, |_| 300);
        let name = if sealed { sealed_name(0) } else { open_name(0) };
        std::fs::write(dir.join(name), format_1_segment(&old, sealed)).unwrap();
        let rec = recover_shard(&FsStorage, dir, SHARD, 0).unwrap();
        assert!(rec.report.quarantined.is_empty(), "sealed {sealed}");
        assert_eq!(rec.report.next_seq, 30);
        // Sealed again, if it was open, as format 1.
        assert_records(&read_shard(&FsStorage, dir).unwrap(), &old);
        let again = recover_shard(&FsStorage, dir, SHARD, 0).unwrap();
        assert!(again.report.quarantined.is_empty() && again.report.resealed.is_empty());

        write_checkpoint(&FsStorage, dir, 30).unwrap();
        let free = set_aside_segment(&FsStorage, dir, 0).unwrap();
        let pre = recycle(&FsStorage, dir, &free, 1, CAP).unwrap();
        let mut c = ActiveSegment::start(pre, SHARD, 30);
        let new = recs(30, 2, |_| 20);
        append(&mut c, &new).unwrap();
        c.sync().unwrap();
        drop(c);
        let rec = recover_shard(&FsStorage, dir, SHARD, 0).unwrap();
        assert!(rec.report.quarantined.is_empty(), "sealed {sealed}");
        assert_eq!(rec.report.lost_records, 0);
        assert_records(&read_shard(&FsStorage, dir).unwrap(), &new);
    }
}

/// A recycled file whose header is then damaged beyond repair (two bytes,
/// no footer): its intact records are counted (as lost, unnumbered) under
/// the new segment's salt, not as the old format-1 records past them,
/// which also check out under format 1's.
#[test]
fn a_damaged_header_on_a_file_recycled_from_format_1_counts_only_the_new_records() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    FsStorage.create_dir_all(dir).unwrap();
    let old = recs(0, 30, |_| 300);
    std::fs::write(dir.join(sealed_name(0)), format_1_segment(&old, true)).unwrap();
    write_checkpoint(&FsStorage, dir, 30).unwrap();
    let free = set_aside_segment(&FsStorage, dir, 0).unwrap();
    let mut c = ActiveSegment::start(recycle(&FsStorage, dir, &free, 1, CAP).unwrap(), SHARD, 30);
    // Past the zeroed first page, so the old records follow the new ones.
    append(&mut c, &recs(30, 3, |_| 1500)).unwrap();
    c.sync().unwrap();
    drop(c);
    let path = dir.join(open_name(1));
    flip(&path, 24);
    flip(&path, 33);

    let rec = recover_shard(&FsStorage, dir, SHARD, 0).unwrap();
    let r = &rec.report;
    assert_eq!(r.unnumbered.len(), 1, "{r:?}");
    assert_eq!(r.unnumbered[0].records, 3, "the new records, not the old");
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
    assert!(bytes[..4096].iter().all(|&b| b == 0));
}

/// Two ids whose salts could match are never the old and new use of one
/// file: the free one is removed and a new file preallocated.
#[test]
fn a_free_segment_whose_salt_could_match_is_not_written_over() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let old_id = 5u64;
    let new_id = old_id + (1 << 32);
    let free = dir.join(free_name(old_id));
    std::fs::write(&free, vec![0xA5u8; CAP as usize]).unwrap();
    let pre = recycle(&FsStorage, dir, &free, new_id, CAP).unwrap();
    assert!(!free.exists());
    let bytes = std::fs::read(&pre.path).unwrap();
    assert_eq!(bytes.len() as u64, CAP);
    assert!(bytes.iter().all(|&b| b == 0), "a new, zero-filled file");
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
