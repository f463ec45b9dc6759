//! Fine-grained salvage: damage inside a sealed or unsealed segment costs
//! only the damaged records. Recovery writes a GAP frame over them in place
//! (the records after keep their original sequence numbers), saves the
//! damaged bytes in quarantine, fixes the footer or seals, and reports the
//! exact count lost and kept.

mod common;

use std::fs;
use std::path::{Path, PathBuf};

use common::*;
use spillway_wab::deadletter::{DeadLetter, DeadLetterStore};
use spillway_wab::fault::{Fault, FaultKind, FaultyStorage, Op};
use spillway_wab::format::RECORD_HEADER_LEN;
use spillway_wab::recovery::Salvaged;
use spillway_wab::{
    preallocate, read_shard, recover_shard, seal, ActiveSegment, End, FsStorage, Storage,
    QUARANTINE_DIR,
};

const SHARD: u32 = 5;
const N: u64 = 1_200;
const CAP: u64 = 1024 * 1024;

fn size(s: u64) -> usize {
    20 + (s as usize * 13) % 90
}

/// One segment (id `id`, seqs `first..first + n`) written in groups of 50,
/// sealed or left open (the crash case). Returns its path and records.
fn segment(dir: &Path, id: u64, first: u64, n: u64, sealed: bool) -> (PathBuf, Vec<Rec>) {
    FsStorage.create_dir_all(dir).unwrap();
    let mut seg =
        ActiveSegment::start(preallocate(&FsStorage, dir, id, CAP).unwrap(), SHARD, first);
    let all = recs(first, n, size);
    for g in all.chunks(50) {
        append(&mut seg, g).unwrap();
        seg.sync().unwrap();
    }
    if sealed {
        (seal(&FsStorage, dir, seg.into_sealing()).unwrap(), all)
    } else {
        (seg.path.clone(), all)
    }
}

/// Offset of the record with sequence number `seq` in a segment of `all`.
fn offset_of(all: &[Rec], seq: u64) -> u64 {
    64 + all
        .iter()
        .take_while(|r| r.seq < seq)
        .map(|r| (RECORD_HEADER_LEN + r.payload.len()) as u64)
        .sum::<u64>()
}

fn without(all: &[Rec], lost: &[u64]) -> Vec<Rec> {
    all.iter()
        .filter(|r| !lost.contains(&r.seq))
        .cloned()
        .collect()
}

/// Recover, check the salvage report, the records, the quarantine copy,
/// that the segment is sealed and verified, and that a second recovery
/// changes nothing and reports nothing new.
#[track_caller]
fn check_salvage(dir: &Path, all: &[Rec], lost: &[(u64, u64)], what: &str) -> Vec<Salvaged> {
    let rec = recover_shard(&FsStorage, dir, SHARD, 0).unwrap();
    let r = &rec.report;
    let lost_seqs: Vec<u64> = lost.iter().flat_map(|&(a, b)| a..=b).collect();
    let kept = all.len() as u64 - lost_seqs.len() as u64;
    // Records the segment of `id` keeps (kept_records is per segment).
    let kept_in = |id: u64| {
        let seg = r.segments.iter().find(|s| s.segment_id == id).unwrap();
        all.iter()
            .filter(|x| (seg.first_seq..seg.first_seq + seg.record_count).contains(&x.seq))
            .filter(|x| !lost_seqs.contains(&x.seq))
            .count() as u64
    };
    let got: Vec<(u64, u64, u64)> = r
        .salvaged
        .iter()
        .map(|s| (s.lost_seqs.0, s.lost_seqs.1, s.lost_records))
        .collect();
    let want: Vec<(u64, u64, u64)> = lost.iter().map(|&(a, b)| (a, b, b - a + 1)).collect();
    assert_eq!(got, want, "{what}: salvaged");
    for s in &r.salvaged {
        assert_eq!(s.kept_records, kept_in(s.segment_id), "{what}: kept");
        let copy = s.saved_to.as_ref().expect("damaged bytes saved");
        assert_eq!(fs::metadata(copy).unwrap().len(), s.damaged_bytes, "{what}");
        let reason = fs::read_to_string(format!("{}.reason", copy.display())).unwrap();
        assert!(
            reason.contains(&format!("seqs {}..={}", s.lost_seqs.0, s.lost_seqs.1)),
            "{what}: {reason}"
        );
    }
    assert_eq!(r.lost_records, lost_seqs.len() as u64, "{what}");
    assert_eq!(r.record_count(), kept, "{what}: record_count");
    assert_eq!(r.next_seq, all.last().unwrap().seq + 1, "{what}: next_seq");
    assert!(r.quarantined.is_empty(), "{what}: {:?}", r.quarantined);
    assert_records(
        &read_shard(&FsStorage, dir).unwrap(),
        &without(all, &lost_seqs),
    );
    for s in &r.segments {
        let (_, _, end, _) = read_segment(&FsStorage, &s.path);
        assert!(matches!(end, End::Footer(_)), "{what}: {end:?}");
        assert!(s.path.extension().unwrap() == "sealed");
    }
    let salvaged = r.salvaged.clone();
    let before = snapshot(dir);
    let again = recover_shard(&FsStorage, dir, SHARD, 0).unwrap().report;
    assert_eq!(
        snapshot(dir),
        before,
        "{what}: second recovery changed files"
    );
    assert!(again.salvaged.is_empty(), "{what}: reported again as new");
    assert_eq!(
        again.segments.iter().map(|s| s.lost_records).sum::<u64>(),
        lost_seqs.len() as u64,
        "{what}: the loss stays visible in the segment"
    );
    assert_eq!(again.next_seq, r.next_seq);
    salvaged
}

#[test]
fn flipped_payload_byte_in_a_sealed_segment_loses_only_that_record() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("shard");
    let (path, all) = segment(&dir, 0, 0, N, true);
    let at = offset_of(&all, 500);
    flip(&path, at + 16 + 5);
    let s = check_salvage(&dir, &all, &[(500, 500)], "sealed");
    assert_eq!(s[0].offset, at);
    assert_eq!(s[0].damaged_bytes, 16 + all[500].payload.len() as u64);
    assert_eq!(
        s[0].saved_to.as_deref(),
        Some(
            dir.join(QUARANTINE_DIR)
                .join(format!("0000000000000000.damaged-at-{at}"))
                .as_path()
        )
    );
    assert_eq!(s[0].kept_records, 1_199);
    // The footer is fixed in place: same length, same count.
    assert_eq!(fs::metadata(&path).unwrap().len(), offset_of(&all, N) + 40);
}

#[test]
fn flipped_payload_byte_in_the_open_segment_keeps_the_records_after_it() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("shard");
    let (path, all) = segment(&dir, 0, 0, N, false);
    flip(&path, offset_of(&all, 500) + 16 + 7);
    let s = check_salvage(&dir, &all, &[(500, 500)], "open");
    assert_eq!(s[0].kept_records, 1_199);
    assert!(dir.join("0000000000000000.sealed").exists());
    // The acked records after the damage survived with their seqs.
    let got = read_shard(&FsStorage, &dir).unwrap();
    assert_eq!(got.len(), 1_199);
    assert_eq!(
        (got[499].seq, got[500].seq, got[1198].seq),
        (499, 501, 1_199)
    );
}

#[test]
fn flipped_length_byte_with_a_footer_anchor() {
    // The low byte changes the length to another plausible one; the high
    // byte makes it too large. Either way the next record is found by
    // scanning, and the footer's count says one record was lost.
    for (byte, mask) in [(0u64, 0xffu8), (3, 0x80), (1, 0x01)] {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("shard");
        let (path, all) = segment(&dir, 0, 1_000, N, true);
        let at = offset_of(&all, 1_500);
        let mut b = fs::read(&path).unwrap();
        b[(at + byte) as usize] ^= mask;
        fs::write(&path, b).unwrap();
        check_salvage(
            &dir,
            &all,
            &[(1_500, 1_500)],
            &format!("length byte {byte}"),
        );
    }
}

#[test]
fn flipped_length_byte_in_the_open_segment_uses_the_next_segment_as_anchor() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("shard");
    // Segment 0 (seqs 0..1200) was left unsealed when segment 1 started.
    let (path, all0) = segment(&dir, 0, 0, N, false);
    let (_, all1) = segment(&dir, 1, N, 10, true);
    flip(&path, offset_of(&all0, 700));
    let all = [all0, all1].concat();
    check_salvage(&dir, &all, &[(700, 700)], "open + next segment");
}

/// Without an anchor, damage of unknown size in the open segment is cut
/// there, as before, and the reason says why the records after it could
/// not be kept.
#[test]
fn flipped_length_byte_in_the_last_open_segment_is_cut_and_says_so() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("shard");
    let (path, all) = segment(&dir, 0, 0, N, false);
    let at = offset_of(&all, 700);
    flip(&path, at);
    let r = recover_shard(&FsStorage, &dir, SHARD, 0).unwrap().report;
    assert!(r.salvaged.is_empty());
    assert_eq!(r.resealed.len(), 1);
    assert_eq!((r.resealed[0].0, r.resealed[0].1), (0, 700));
    assert_records(&read_shard(&FsStorage, &dir).unwrap(), &all[..700]);
    let name = format!("0000000000000000.tail-at-{at}");
    let reason =
        fs::read_to_string(dir.join(QUARANTINE_DIR).join(format!("{name}.reason"))).unwrap();
    assert!(reason.contains("cannot be numbered"), "{reason}");
    // The seqs of the cut records are not reused: they are in quarantine
    // only as a tail with no header, so nothing proves them, and the next
    // seq is 700 (as before this change; the caller's checkpoint floor
    // protects delivered ones).
    assert_eq!(r.next_seq, 700);
}

#[test]
fn several_damaged_records_in_one_sealed_segment() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("shard");
    let (path, all) = segment(&dir, 0, 0, N, true);
    // 100 and 101 are neighbours: 100's own length points at damaged bytes,
    // so the scan finds 102 and the footer counts the two. 900 alone.
    for seq in [100u64, 101, 900] {
        flip(&path, offset_of(&all, seq) + 16 + 2);
    }
    check_salvage(&dir, &all, &[(100, 101), (900, 900)], "three records");
}

/// A sealed segment whose footer alone is damaged keeps every record: the
/// footer is rewritten from the records.
#[test]
fn flipped_footer_byte_rewrites_the_footer() {
    for from_end in [1u64, 8, 20, 32, 38, 40] {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("shard");
        let (path, all) = segment(&dir, 0, 0, 100, true);
        let orig = fs::read(&path).unwrap();
        let len = orig.len() as u64;
        flip(&path, len - from_end);
        let r = recover_shard(&FsStorage, &dir, SHARD, 0).unwrap().report;
        assert_eq!(r.footers_repaired.len(), 1, "byte {from_end} from the end");
        assert!(r.salvaged.is_empty() && r.quarantined.is_empty());
        assert_eq!(fs::read(&path).unwrap(), orig, "footer restored exactly");
        assert_records(&read_shard(&FsStorage, &dir).unwrap(), &all);
    }
}

/// Crash the salvage at every storage operation; the rerun must end with
/// exactly the files an uninterrupted salvage leaves, and report the loss.
#[test]
fn crash_during_salvage_then_recover_again() {
    for sealed in [true, false] {
        let tmp = tempfile::tempdir().unwrap();
        let state = tmp.path().join("state");
        let (path, mut all) = segment(&state, 0, 0, 300, sealed);
        if !sealed {
            // The next segment is the anchor for the damaged length below.
            all.extend(segment(&state, 1, 300, 5, true).1);
        }
        flip(&path, offset_of(&all, 120) + 16 + 3);
        flip(&path, offset_of(&all, 200)); // a length byte: found by scanning
        let base = tmp.path().join("base");
        copy_dir(&state, &base);
        recover_shard(&FsStorage, &base, SHARD, 0).unwrap();
        let base_files = snapshot(&base);
        let counter = FaultyStorage::new(vec![]);
        let count_dir = tmp.path().join("count");
        copy_dir(&state, &count_dir);
        recover_shard(&counter, &count_dir, SHARD, 0).unwrap();
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
        ] {
            for n in 1..=counter.count(op) {
                let what = format!("sealed {sealed}, crash at {op:?} #{n}");
                let dir = tmp.path().join(format!("{sealed}-{op:?}-{n}"));
                copy_dir(&state, &dir);
                let faulty = FaultyStorage::new(vec![Fault {
                    op,
                    nth: n,
                    kind: FaultKind::Crash,
                }]);
                assert!(recover_shard(&faulty, &dir, SHARD, 0).is_err(), "{what}");
                let r = recover_shard(&FsStorage, &dir, SHARD, 0).unwrap().report;
                assert_eq!(snapshot(&dir), base_files, "{what}");
                let lost: u64 = r.segments.iter().map(|s| s.lost_records).sum();
                assert_eq!(lost, 2, "{what}");
                assert_records(
                    &read_shard(&FsStorage, &dir).unwrap(),
                    &without(&all, &[120, 200]),
                );
                points += 1;
            }
        }
        assert!(points >= 8, "{points}");
    }
}

#[test]
fn flipped_byte_in_a_dead_letter_segment_keeps_every_other_letter() {
    for sealed in [false, true] {
        let tmp = tempfile::tempdir().unwrap();
        let dl = tmp.path().join("dead-letter");
        let letters: Vec<DeadLetter> = (0..10u64)
            .map(|i| DeadLetter {
                shard: 2,
                seq: 1_000 + i,
                tier: 1,
                arrival_unix_us: 5,
                dead_lettered_unix_us: 10 + i,
                reason: format!("HTTP 422 for record {i}"),
                payload: payload(i, 200).into(),
            })
            .collect();
        let mut store = DeadLetterStore::open(FsStorage, &dl).unwrap();
        for l in &letters {
            store.append(std::slice::from_ref(l)).unwrap();
        }
        if sealed {
            // remove_where rewrites the survivors into a sealed segment.
            store.remove_where(|_| false).unwrap();
            store.append(&[]).unwrap();
        }
        drop(store);
        let seg = fs::read_dir(&dl)
            .unwrap()
            .map(|e| e.unwrap().path())
            .find(|p| p.to_string_lossy().ends_with(".open"))
            .unwrap();
        // Record 5's payload: 64-byte header, 5 records before it.
        let (_, recs_before, _, _) = read_segment(&FsStorage, &seg);
        let at = recs_before[5].offset + 16 + 60;
        flip(&seg, at);
        let store = DeadLetterStore::open(FsStorage, &dl).unwrap();
        let listed = store.list().unwrap();
        let want: Vec<DeadLetter> = letters.iter().filter(|l| l.seq != 1_005).cloned().collect();
        assert_eq!(listed, want);
    }
}

/// A full disk: every file creation fails with ENOSPC. Recovery of a folder
/// that needs salvage and a reseal still succeeds: frames, footers and
/// seals are written in place; only the quarantine copies are skipped.
#[test]
fn enospc_recovery_needing_salvage_and_reseal_succeeds() {
    for qdir_exists in [false, true] {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("shard");
        let (p0, all0) = segment(&dir, 0, 0, 300, true);
        let (p1, all1) = segment(&dir, 1, 300, 300, false);
        flip(&p0, offset_of(&all0, 10) + 16);
        flip(&p1, offset_of(&all1, 450) + 17);
        // And a torn tail after the open segment's last record.
        let end = offset_of(&all1, 600);
        let mut b = fs::read(&p1).unwrap();
        b[end as usize..end as usize + 9].copy_from_slice(&[7; 9]);
        fs::write(&p1, b).unwrap();
        if qdir_exists {
            fs::create_dir(dir.join(QUARANTINE_DIR)).unwrap();
        }
        let storage = FaultyStorage::new(vec![]);
        storage.fail_every(Op::Create, FaultKind::Enospc);
        let r = recover_shard(&storage, &dir, SHARD, 0).unwrap().report;
        let lost: Vec<(u64, u64)> = r.salvaged.iter().map(|s| s.lost_seqs).collect();
        assert_eq!(lost, vec![(10, 10), (450, 450)]);
        assert!(r.salvaged.iter().all(|s| s.saved_to.is_none()));
        assert_eq!(r.resealed.len(), 1);
        assert_records(
            &read_shard(&FsStorage, &dir).unwrap(),
            &without(&[all0, all1].concat(), &[10, 450]),
        );
        assert_eq!(
            names(&dir),
            if qdir_exists {
                vec![
                    "0000000000000000.sealed",
                    "0000000000000001.sealed",
                    QUARANTINE_DIR,
                ]
            } else {
                vec!["0000000000000000.sealed", "0000000000000001.sealed"]
            }
        );
        if qdir_exists {
            assert!(names(&dir.join(QUARANTINE_DIR)).is_empty());
        }
        assert!(storage.count(Op::Create) > 0, "the full disk was hit");
    }
}
