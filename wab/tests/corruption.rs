//! Damaged segments: a sealed segment that fails its check (a damaged
//! record is salvaged, a damaged footer rewritten, a damaged header
//! quarantines the segment), an unsealed one with a bad header, spare and
//! partial preallocations.

mod common;

use std::fs;
use std::path::{Path, PathBuf};

use common::*;
use spillway_wab::fault::{Fault, FaultKind, FaultyStorage, Op};
use spillway_wab::format::{SegmentHeader, FOOTER_LEN, SEQ_MAX};
use spillway_wab::{
    preallocate, read_shard, recover_shard, seal, ActiveSegment, FsStorage, Storage, QUARANTINE_DIR,
};

const CAP: u64 = 16 * 1024;
const SHARD: u32 = 2;

/// Three sealed segments (ids 0, 1, 2; seqs 0..5, 5..9, 9..14), each
/// written in two groups. Returns each segment's path and records.
fn three_sealed(dir: &Path) -> Vec<(PathBuf, Vec<Rec>)> {
    FsStorage.create_dir_all(dir).unwrap();
    let mut out = Vec::new();
    let mut seq = 0;
    for (id, n) in [(0u64, 5u64), (1, 4), (2, 5)] {
        let mut seg =
            ActiveSegment::start(preallocate(&FsStorage, dir, id, CAP).unwrap(), SHARD, seq);
        let r = recs(seq, n, |s| 20 + s as usize * 11);
        append(&mut seg, &r[..2]).unwrap();
        append(&mut seg, &r[2..]).unwrap();
        seg.sync().unwrap();
        out.push((seal(&FsStorage, dir, seg.into_sealing()).unwrap(), r));
        seq += n;
    }
    out
}

/// What recovery does about damage at a spot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Outcome {
    /// The damaged record is replaced by a GAP frame (the first or last
    /// record of the segment is lost); the rest is kept.
    SalvageFirst,
    SalvageLast,
    /// Only the footer is damaged: rewritten from the records.
    FooterRewritten,
    /// The header is needed to number the records: quarantined whole.
    Quarantined,
}

/// Where to damage a sealed segment, and a word its quarantine reason must
/// contain.
fn spots(len: u64) -> Vec<(&'static str, u64, &'static str, Outcome)> {
    use Outcome::*;
    let outcome = |spot: &str| match spot {
        "first record payload" | "first record length" => SalvageFirst,
        "last record CRC" => SalvageLast,
        s if s.starts_with("footer") => FooterRewritten,
        _ => Quarantined,
    };
    spots_and_words(len)
        .into_iter()
        .map(|(spot, at, word)| (spot, at, word, outcome(spot)))
        .collect()
}

fn spots_and_words(len: u64) -> Vec<(&'static str, u64, &'static str)> {
    vec![
        ("first record payload", 64 + 16 + 3, "record CRC mismatch"),
        ("first record length", 64, "offset 64"),
        ("last record CRC", len - 40 - 16 - 40, "offset"),
        ("footer record_count", len - 40 + 8, "footer"),
        ("footer CRC", len - 1, "footer"),
        ("footer marker", len - 40, "offset"),
        ("header magic", 0, "magic"),
        ("header version", 8, "format version"),
        ("header first_seq", 24, "CRC mismatch"),
        ("header CRC", 61, "CRC mismatch"),
    ]
}

#[test]
fn corrupt_sealed_segment_is_salvaged_or_quarantined_and_its_seqs_never_reused() {
    for target in 0..3usize {
        let probe = tempfile::tempdir().unwrap();
        let len = fs::metadata(&three_sealed(probe.path())[target].0)
            .unwrap()
            .len();
        for (spot, at, word, outcome) in spots(len) {
            let what = format!("segment {target}, {spot}");
            let tmp = tempfile::tempdir().unwrap();
            let dir = tmp.path().join("shard-002");
            let segs = three_sealed(&dir);
            let (bad_path, bad_recs) = &segs[target];
            let orig_bytes = fs::read(bad_path).unwrap();
            flip(bad_path, at);
            let bad_bytes = fs::read(bad_path).unwrap();
            let others: Vec<&(PathBuf, Vec<Rec>)> = segs
                .iter()
                .enumerate()
                .filter(|(i, _)| *i != target)
                .map(|(_, s)| s)
                .collect();
            let other_bytes: Vec<Vec<u8>> =
                others.iter().map(|(p, _)| fs::read(p).unwrap()).collect();

            let rec = recover_shard(&FsStorage, &dir, SHARD, 0).unwrap();
            let r = &rec.report;
            let name = bad_path.file_name().unwrap().to_str().unwrap().to_string();
            let qdir = dir.join(QUARANTINE_DIR);
            let qpath = qdir.join(&name);
            // The others are untouched and still verified.
            for ((p, _), b) in others.iter().zip(&other_bytes) {
                assert_eq!(&fs::read(p).unwrap(), b, "{what}: {} changed", p.display());
            }
            match outcome {
                Outcome::Quarantined => {
                    // Moved, byte for byte, with a reason beside it.
                    assert!(!bad_path.exists(), "{what}");
                    assert_eq!(fs::read(&qpath).unwrap(), bad_bytes, "{what}");
                    assert_eq!(
                        names(&qdir),
                        vec![name.clone(), format!("{name}.reason")],
                        "{what}"
                    );
                    let reason = fs::read_to_string(qdir.join(format!("{name}.reason"))).unwrap();
                    assert!(
                        reason.contains(word) && reason.ends_with('\n'),
                        "{what}: reason {reason:?}"
                    );
                    assert_eq!(
                        r.quarantined,
                        vec![(qpath.clone(), reason.trim_end().to_string())],
                        "{what}"
                    );
                    assert_eq!(mode(&qdir), 0o700);
                    assert_eq!(mode(&qpath), 0o600);
                    let seg_ids: Vec<u64> = r.segments.iter().map(|s| s.segment_id).collect();
                    let want_ids: Vec<u64> = (0..3).filter(|i| *i != target as u64).collect();
                    assert_eq!(seg_ids, want_ids, "{what}");
                    let want_records: Vec<Rec> =
                        others.iter().flat_map(|(_, r)| r.clone()).collect();
                    assert_records(&read_shard(&FsStorage, &dir).unwrap(), &want_records);
                }
                Outcome::SalvageFirst | Outcome::SalvageLast => {
                    let lost = if outcome == Outcome::SalvageFirst {
                        bad_recs[0].seq
                    } else {
                        bad_recs.last().unwrap().seq
                    };
                    assert!(r.quarantined.is_empty(), "{what}: {:?}", r.quarantined);
                    assert_eq!(r.salvaged.len(), 1, "{what}");
                    let s = &r.salvaged[0];
                    assert_eq!(
                        (s.segment_id, s.lost_records, s.lost_seqs),
                        (target as u64, 1, (lost, lost)),
                        "{what}"
                    );
                    assert_eq!(s.kept_records, bad_recs.len() as u64 - 1, "{what}");
                    let reason = fs::read_to_string(format!(
                        "{}.reason",
                        s.saved_to.as_ref().unwrap().display()
                    ))
                    .unwrap();
                    assert!(reason.contains(word), "{what}: reason {reason:?}");
                    assert_eq!(mode(&qdir), 0o700);
                    assert!(bad_path.exists(), "{what}: still in place");
                    assert_eq!(r.segments.len(), 3, "{what}");
                    let want: Vec<Rec> = segs
                        .iter()
                        .flat_map(|(_, r)| r.clone())
                        .filter(|r| r.seq != lost)
                        .collect();
                    assert_records(&read_shard(&FsStorage, &dir).unwrap(), &want);
                }
                Outcome::FooterRewritten => {
                    assert!(r.quarantined.is_empty() && r.salvaged.is_empty(), "{what}");
                    assert_eq!(r.footers_repaired.len(), 1, "{what}");
                    assert_eq!(r.footers_repaired[0].0, target as u64);
                    assert!(!qdir.exists(), "{what}");
                    assert_eq!(fs::read(bad_path).unwrap(), orig_bytes, "{what}");
                    let want: Vec<Rec> = segs.iter().flat_map(|(_, r)| r.clone()).collect();
                    assert_records(&read_shard(&FsStorage, &dir).unwrap(), &want);
                }
            }
            // The damaged segment's seqs (up to 13) and id are never reused.
            assert_eq!((r.next_seq, r.next_segment_id), (14, 3), "{what}");

            // Idempotent, and the quarantined seqs still count on the next start.
            let before = snapshot(&dir);
            let again = recover_shard(&FsStorage, &dir, SHARD, 0).unwrap();
            assert_eq!(snapshot(&dir), before, "{what}");
            assert!(again.report.quarantined.is_empty());
            assert!(again.report.salvaged.is_empty() && again.report.footers_repaired.is_empty());
            assert_eq!(
                (again.report.next_seq, again.report.next_segment_id),
                (14, 3),
                "{what}: on restart"
            );
        }
    }
}

/// Crash the recovery that quarantines the newest sealed segment (a
/// damaged header) at each of its steps; the rerun must end the same (in
/// particular: next_seq past the quarantined records even when the crash
/// came right after the move). A damaged record is salvaged instead; the
/// same crash test for salvage is in salvage.rs.
#[test]
fn crash_while_quarantining_then_recover_again() {
    let tmp = tempfile::tempdir().unwrap();
    let state = tmp.path().join("state");
    let segs = three_sealed(&state);
    flip(&segs[2].0, 30);
    let base_dir = tmp.path().join("base");
    copy_dir(&state, &base_dir);
    let base = recover_shard(&FsStorage, &base_dir, SHARD, 0)
        .unwrap()
        .report;
    assert_eq!((base.next_seq, base.next_segment_id), (14, 3));
    let base_files = snapshot(&base_dir);
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
            assert_eq!(
                (r.next_seq, r.next_segment_id),
                (14, 3),
                "crash at {op:?} #{n}"
            );
            points += 1;
        }
    }
    assert!(points >= 10, "{points}");
}

#[test]
fn sealed_segment_cut_short_or_zeroed_is_quarantined() {
    // (description, damage, expected reason fragment)
    type Damage = fn(&Path);
    let cases: [(&str, Damage, &str); 4] = [
        (
            "footer cut off",
            |p| {
                let b = fs::read(p).unwrap();
                fs::write(p, &b[..b.len() - FOOTER_LEN]).unwrap();
            },
            "no footer",
        ),
        (
            "cut mid-footer",
            |p| {
                let b = fs::read(p).unwrap();
                fs::write(p, &b[..b.len() - 7]).unwrap();
            },
            "footer runs past the end",
        ),
        (
            "cut mid-record",
            |p| {
                let b = fs::read(p).unwrap();
                fs::write(p, &b[..100]).unwrap();
            },
            "torn write",
        ),
        (
            "header zeroed",
            |p| {
                let mut b = fs::read(p).unwrap();
                b[..64].fill(0);
                fs::write(p, &b).unwrap();
            },
            "all-zero header",
        ),
    ];
    for (what, damage, word) in cases {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().to_path_buf();
        let segs = three_sealed(&dir);
        damage(&segs[2].0);
        let r = recover_shard(&FsStorage, &dir, SHARD, 0).unwrap().report;
        assert_eq!(r.quarantined.len(), 1, "{what}");
        assert!(
            r.quarantined[0].1.contains(word),
            "{what}: {:?}",
            r.quarantined[0].1
        );
        assert!(dir
            .join(QUARANTINE_DIR)
            .join("0000000000000002.sealed.reason")
            .exists());
        assert_records(
            &read_shard(&FsStorage, &dir).unwrap(),
            &[segs[0].1.clone(), segs[1].1.clone()].concat(),
        );
        // Cut off / zeroed header: the seqs known from what is left (the
        // header and intact records, or the footer) are not reused.
        let floor = match what {
            // The file ends inside its first record (64 + 16 + 119 bytes):
            // the header says the segment starts at seq 9.
            "cut mid-record" => 9,
            _ => 14,
        };
        assert_eq!(r.next_seq, floor, "{what}");
        assert_eq!(r.next_segment_id, 3);
        let again = recover_shard(&FsStorage, &dir, SHARD, 0).unwrap().report;
        assert_eq!(again.next_seq, floor, "{what}: on restart");
    }
}

#[test]
fn unsealed_segment_with_a_bad_header_is_quarantined() {
    for (at, word) in [
        (0u64, "magic"),
        (9, "format version"),
        (30, "CRC mismatch"),
        (63, "CRC mismatch"),
    ] {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().to_path_buf();
        let mut seg =
            ActiveSegment::start(preallocate(&FsStorage, &dir, 0, CAP).unwrap(), SHARD, 0);
        let first = recs(0, 5, |_| 40);
        append(&mut seg, &first).unwrap();
        seg.sync().unwrap();
        seal(&FsStorage, &dir, seg.into_sealing()).unwrap();
        let mut seg =
            ActiveSegment::start(preallocate(&FsStorage, &dir, 1, CAP).unwrap(), SHARD, 5);
        append(&mut seg, &recs(5, 3, |_| 40)).unwrap();
        seg.sync().unwrap();
        let path = seg.path.clone();
        drop(seg);
        flip(&path, at);
        let bytes = fs::read(&path).unwrap();

        let rec = recover_shard(&FsStorage, &dir, SHARD, 0).unwrap();
        let r = &rec.report;
        let qdir = dir.join(QUARANTINE_DIR);
        assert_eq!(
            names(&qdir),
            vec!["0000000000000001.open", "0000000000000001.open.reason"]
        );
        assert_eq!(
            fs::read(qdir.join("0000000000000001.open")).unwrap(),
            bytes,
            "moved byte for byte"
        );
        let reason = fs::read_to_string(qdir.join("0000000000000001.open.reason")).unwrap();
        assert!(reason.contains(word), "byte {at}: {reason:?}");
        assert_eq!(names(&dir), vec!["0000000000000000.sealed", QUARANTINE_DIR]);
        assert!(r.resealed.is_empty() && rec.spares.is_empty());
        assert_records(&read_shard(&FsStorage, &dir).unwrap(), &first);
        // Without a trustworthy header the segment's first_seq is unknown:
        // next_seq comes from the other segments (and the caller's floor).
        assert!(r.next_seq >= 5);
        assert_eq!(r.next_segment_id, 2);
        let floor = recover_shard(&FsStorage, &dir, SHARD, 1_000)
            .unwrap()
            .report;
        assert_eq!(floor.next_seq, 1_000);
        let before = snapshot(&dir);
        recover_shard(&FsStorage, &dir, SHARD, 0).unwrap();
        assert_eq!(snapshot(&dir), before);
    }
}

/// A header whose CRC checks but whose first_seq is past what spillway
/// ever writes (2^63) is not trusted: quarantined with the reason, and the
/// next sequence number is not pushed up to it (it would have wrapped).
#[test]
fn a_header_with_first_seq_near_2_pow_64_is_quarantined_not_believed() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().to_path_buf();
    let mut seg = ActiveSegment::start(preallocate(&FsStorage, &dir, 0, CAP).unwrap(), SHARD, 0);
    let first = recs(0, 5, |_| 40);
    append(&mut seg, &first).unwrap();
    seg.sync().unwrap();
    seal(&FsStorage, &dir, seg.into_sealing()).unwrap();
    let header = SegmentHeader {
        shard: SHARD,
        segment_id: 1,
        first_seq: u64::MAX - 2,
        created_unix_us: 1,
    };
    let path = dir.join("0000000000000001.open");
    let mut bytes = header.encode().to_vec();
    bytes.resize(4096, 0);
    fs::write(&path, &bytes).unwrap();

    let rec = recover_shard(&FsStorage, &dir, SHARD, 0).unwrap();
    let qdir = dir.join(QUARANTINE_DIR);
    assert_eq!(
        names(&qdir),
        vec!["0000000000000001.open", "0000000000000001.open.reason"]
    );
    let reason = fs::read_to_string(qdir.join("0000000000000001.open.reason")).unwrap();
    assert!(
        reason.contains("first_seq 18446744073709551613 is past"),
        "{reason:?}"
    );
    assert_eq!(rec.report.next_seq, 5);
    assert_records(&read_shard(&FsStorage, &dir).unwrap(), &first);
}

/// The writer never reaches a number the reader would refuse.
#[test]
fn appending_past_the_last_sequence_number_is_refused_and_writes_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().to_path_buf();
    let pre = preallocate(&FsStorage, &dir, 0, CAP).unwrap();
    let mut seg = ActiveSegment::start(pre, SHARD, SEQ_MAX - 1);
    let err = append(&mut seg, &recs(SEQ_MAX - 1, 2, |_| 8)).unwrap_err();
    assert!(
        err.to_string().contains("sequence numbers exhausted"),
        "{err}"
    );
    assert_eq!(seg.write_offset, 0);
    append(&mut seg, &recs(SEQ_MAX - 1, 1, |_| 8)).unwrap();
    assert_eq!(seg.next_seq(), SEQ_MAX);
}

#[test]
fn spares_are_kept_stale_and_partial_preallocations_removed() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("shard-002");
    FsStorage.create_dir_all(&dir).unwrap();
    // 0: sealed. 1: zero-filled but older than a used segment (stale).
    // 2: used, unsealed. 3, 4: spares. 5: a preallocation that never
    // finished (`.open.tmp`).
    let mut seg = ActiveSegment::start(preallocate(&FsStorage, &dir, 0, CAP).unwrap(), SHARD, 0);
    let a = recs(0, 3, |_| 10);
    append(&mut seg, &a).unwrap();
    seg.sync().unwrap();
    seal(&FsStorage, &dir, seg.into_sealing()).unwrap();
    preallocate(&FsStorage, &dir, 1, CAP).unwrap();
    let mut seg = ActiveSegment::start(preallocate(&FsStorage, &dir, 2, CAP).unwrap(), SHARD, 3);
    let b = recs(3, 2, |_| 10);
    append(&mut seg, &b).unwrap();
    seg.sync().unwrap();
    drop(seg);
    preallocate(&FsStorage, &dir, 3, CAP).unwrap();
    preallocate(&FsStorage, &dir, 4, 2 * CAP).unwrap();
    let faulty = FaultyStorage::new(vec![Fault {
        op: Op::SyncAll,
        nth: 1,
        kind: FaultKind::Crash,
    }]);
    assert!(preallocate(&faulty, &dir, 5, CAP).is_err());
    assert!(dir.join("0000000000000005.open.tmp").exists());
    assert!(!dir.join("0000000000000005.open").exists());

    let rec = recover_shard(&FsStorage, &dir, SHARD, 0).unwrap();
    let r = &rec.report;
    assert_eq!(r.removed_partial, 1);
    assert_eq!(r.resealed, vec![(2, 2, 0)]);
    assert!(r.quarantined.is_empty());
    let spares: Vec<(u64, u64, PathBuf)> = rec
        .spares
        .iter()
        .map(|s| (s.segment_id, s.capacity, s.path.clone()))
        .collect();
    assert_eq!(
        spares,
        vec![
            (3, CAP, dir.join("0000000000000003.open")),
            (4, 2 * CAP, dir.join("0000000000000004.open"))
        ]
    );
    assert_eq!(
        names(&dir),
        vec![
            "0000000000000000.sealed",
            "0000000000000002.sealed",
            "0000000000000003.open",
            "0000000000000004.open"
        ]
    );
    assert_eq!((r.next_seq, r.next_segment_id), (5, 5));
    assert_records(
        &read_shard(&FsStorage, &dir).unwrap(),
        &[a.clone(), b.clone()].concat(),
    );

    // A spare is ready to use: the daemon starts its next segment in it.
    let mut spares = rec.spares;
    let mut seg = ActiveSegment::start(spares.remove(0), SHARD, r.next_seq);
    let c = recs(5, 4, |_| 99);
    append(&mut seg, &c).unwrap();
    seg.sync().unwrap();
    drop(seg);
    drop(spares);
    let rec = recover_shard(&FsStorage, &dir, SHARD, 0).unwrap();
    assert_eq!(rec.report.resealed, vec![(3, 4, 0)]);
    assert_eq!(
        rec.spares.iter().map(|s| s.segment_id).collect::<Vec<_>>(),
        vec![4]
    );
    assert_eq!((rec.report.next_seq, rec.report.next_segment_id), (9, 5));
    assert_records(&read_shard(&FsStorage, &dir).unwrap(), &[a, b, c].concat());
}

/// A fresh directory: created 0700, nothing in it, ids and seqs from zero
/// (or the caller's floor).
#[test]
fn empty_and_missing_directories() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("data").join("shard-009");
    let rec = recover_shard(&FsStorage, &dir, 9, 0).unwrap();
    assert_eq!(mode(&dir), 0o700);
    assert_eq!(mode(&tmp.path().join("data")), 0o700);
    assert!(rec.report.segments.is_empty() && rec.spares.is_empty());
    assert_eq!(
        (
            rec.report.next_seq,
            rec.report.next_segment_id,
            rec.report.shard
        ),
        (0, 0, 9)
    );
    assert_eq!(
        recover_shard(&FsStorage, &dir, 9, 77)
            .unwrap()
            .report
            .next_seq,
        77
    );
    // Unrelated files are left alone.
    fs::write(dir.join("README"), b"x").unwrap();
    fs::write(dir.join("0000000000000001.bak"), b"x").unwrap();
    recover_shard(&FsStorage, &dir, 9, 0).unwrap();
    assert_eq!(names(&dir), vec!["0000000000000001.bak", "README"]);
}
