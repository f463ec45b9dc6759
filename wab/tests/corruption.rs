//! Damaged segments: a sealed segment that fails its check (a damaged
//! record is salvaged, a damaged footer rewritten, a damaged header put
//! back from what proves it, a segment cut short sealed again after its
//! intact records), an unsealed one with a damaged header, a header that
//! nothing proves (quarantined, its records counted), a directory under a
//! segment's name, spare and partial preallocations.

mod common;

use std::fs;
use std::path::{Path, PathBuf};

use common::*;
use spillway_wab::fault::{Fault, FaultKind, FaultyStorage, Op};
use spillway_wab::format::{now_unix_us, SegmentHeader, FOOTER_LEN, SEQ_MAX};
use spillway_wab::{
    check_sealed, open_shard, preallocate, read_shard, recover_shard, recover_shard_with, seal,
    ActiveSegment, FsStorage, HeaderProof, SealedCheck, Storage, QUARANTINE_DIR,
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
    /// Only the header is damaged: put back (its footer and the CRC agree
    /// on the byte), nothing lost.
    HeaderRepaired,
}

/// Where to damage a sealed segment, and a word its `.reason` must
/// contain.
fn spots(len: u64) -> Vec<(&'static str, u64, &'static str, Outcome)> {
    use Outcome::*;
    let outcome = |spot: &str| match spot {
        "first record payload" | "first record length" => SalvageFirst,
        "last record CRC" => SalvageLast,
        s if s.starts_with("footer") => FooterRewritten,
        _ => HeaderRepaired,
    };
    spots_and_words(len)
        .into_iter()
        .map(|(spot, at, word)| (spot, at, word, outcome(spot)))
        .collect()
}

/// Every damage spot of every segment of [`three_sealed`]: (which segment,
/// spot, offset, word, outcome).
fn every_spot() -> Vec<(usize, &'static str, u64, &'static str, Outcome)> {
    let probe = tempfile::tempdir().unwrap();
    let segs = three_sealed(probe.path());
    (0..segs.len())
        .flat_map(|target| {
            let len = fs::metadata(&segs[target].0).unwrap().len();
            spots(len)
                .into_iter()
                .map(move |(spot, at, word, outcome)| (target, spot, at, word, outcome))
        })
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
fn corrupt_sealed_segment_is_salvaged_and_its_seqs_never_reused() {
    for (target, spot, at, word, outcome) in every_spot() {
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
        let other_bytes: Vec<Vec<u8>> = others.iter().map(|(p, _)| fs::read(p).unwrap()).collect();

        let rec = recover_shard(&FsStorage, &dir, SHARD, 0).unwrap();
        let r = &rec.report;
        let qdir = dir.join(QUARANTINE_DIR);
        // The others are untouched and still verified.
        for ((p, _), b) in others.iter().zip(&other_bytes) {
            assert_eq!(&fs::read(p).unwrap(), b, "{what}: {} changed", p.display());
        }
        assert!(r.quarantined.is_empty(), "{what}: {:?}", r.quarantined);
        assert!(r.unnumbered.is_empty() && r.cut_short.is_empty(), "{what}");
        match outcome {
            Outcome::HeaderRepaired => {
                // Put back byte for byte; the damaged 64 bytes are kept.
                assert_eq!(fs::read(bad_path).unwrap(), orig_bytes, "{what}");
                assert!(r.salvaged.is_empty() && r.footers_repaired.is_empty());
                assert_eq!(r.headers_repaired.len(), 1, "{what}");
                let h = &r.headers_repaired[0];
                assert_eq!(
                    (h.segment_id, h.first_seq, h.records, h.proof),
                    (
                        target as u64,
                        bad_recs[0].seq,
                        bad_recs.len() as u64,
                        HeaderProof::FooterAndOneByte {
                            offset: at as usize
                        }
                    ),
                    "{what}"
                );
                let copy = format!("{target:016x}.damaged-header");
                assert_eq!(names(&qdir), vec![copy.clone(), format!("{copy}.reason")]);
                assert_eq!(h.saved_to, Some(qdir.join(&copy)));
                assert_eq!(fs::read(qdir.join(&copy)).unwrap(), bad_bytes[..64]);
                let reason = fs::read_to_string(qdir.join(format!("{copy}.reason"))).unwrap();
                assert!(
                    reason.contains(word) && reason.contains("none lost"),
                    "{what}: reason {reason:?}"
                );
                assert_eq!(mode(&qdir), 0o700);
                assert_eq!(r.lost_records, 0);
                let want: Vec<Rec> = segs.iter().flat_map(|(_, r)| r.clone()).collect();
                assert_records(&read_shard(&FsStorage, &dir).unwrap(), &want);
            }
            Outcome::SalvageFirst | Outcome::SalvageLast => {
                let lost = if outcome == Outcome::SalvageFirst {
                    bad_recs[0].seq
                } else {
                    bad_recs.last().unwrap().seq
                };
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
                assert!(
                    r.salvaged.is_empty() && r.headers_repaired.is_empty(),
                    "{what}"
                );
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

        // Idempotent.
        let before = snapshot(&dir);
        let again = recover_shard(&FsStorage, &dir, SHARD, 0).unwrap();
        assert_eq!(snapshot(&dir), before, "{what}");
        assert!(again.report.quarantined.is_empty());
        assert!(again.report.salvaged.is_empty() && again.report.footers_repaired.is_empty());
        assert!(again.report.headers_repaired.is_empty());
        assert_eq!(
            (again.report.next_seq, again.report.next_segment_id),
            (14, 3),
            "{what}: on restart"
        );
    }
}

/// Crash the recovery at each of its storage steps, then recover again:
/// the folder must end as an uninterrupted recovery leaves it (and
/// next_seq past every number the damaged segment held).
fn crash_at_every_step_then_recover_again(damage: impl Fn(&[(PathBuf, Vec<Rec>)]), what: &str) {
    let tmp = tempfile::tempdir().unwrap();
    let state = tmp.path().join("state");
    let segs = three_sealed(&state);
    damage(&segs);
    let base_dir = tmp.path().join("base");
    copy_dir(&state, &base_dir);
    let base = recover_shard(&FsStorage, &base_dir, SHARD, 0)
        .unwrap()
        .report;
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
            assert_eq!(snapshot(&dir), base_files, "{what}: crash at {op:?} #{n}");
            assert_eq!(
                (r.next_seq, r.next_segment_id),
                (base.next_seq, base.next_segment_id),
                "{what}: crash at {op:?} #{n}"
            );
            points += 1;
        }
    }
    assert!(points >= 10, "{what}: {points}");
}

/// A damaged header is put back (copy first, then the header, then an
/// fsync); a crash at any step and a rerun end the same.
#[test]
fn crash_while_repairing_a_header_then_recover_again() {
    crash_at_every_step_then_recover_again(|segs| flip(&segs[2].0, 30), "header flip");
}

/// A header nothing proves (two bytes damaged, the footer cut off): the
/// segment is quarantined whole (reason first, then the rename).
#[test]
fn crash_while_quarantining_then_recover_again() {
    crash_at_every_step_then_recover_again(
        |segs| {
            let p = &segs[2].0;
            flip(p, 24);
            flip(p, 40);
            let b = fs::read(p).unwrap();
            fs::write(p, &b[..b.len() - FOOTER_LEN]).unwrap();
        },
        "header beyond proof",
    );
}

/// A sealed segment cut short: the cut bytes are copied, the footer
/// written, the file cut to it, fsynced.
#[test]
fn crash_while_sealing_a_segment_cut_short_then_recover_again() {
    crash_at_every_step_then_recover_again(
        |segs| {
            let p = &segs[1].0;
            let b = fs::read(p).unwrap();
            fs::write(p, &b[..b.len() / 2]).unwrap();
        },
        "cut in half",
    );
}

/// A sealed segment that lost its end keeps the records before the damage
/// and is sealed again there; with no intact record it is quarantined
/// whole. A zeroed header is rewritten from the footer.
#[test]
fn sealed_segment_cut_short_keeps_its_intact_records() {
    type Damage = fn(&Path);
    // Segment 2 holds seqs 9..14 in records of 16 + 119, 130, 141, 152,
    // 163 bytes: 64 + 785 + 40 = 889 bytes. Half of it (444) holds two
    // whole records (ending at offsets 199 and 345).
    // (description, damage, records kept)
    let cases: [(&str, Damage, u64); 5] = [
        (
            "footer cut off",
            |p| {
                let b = fs::read(p).unwrap();
                fs::write(p, &b[..b.len() - FOOTER_LEN]).unwrap();
            },
            5,
        ),
        (
            "cut mid-footer",
            |p| {
                let b = fs::read(p).unwrap();
                fs::write(p, &b[..b.len() - 7]).unwrap();
            },
            5,
        ),
        (
            "cut in half",
            |p| {
                let b = fs::read(p).unwrap();
                fs::write(p, &b[..b.len() / 2]).unwrap();
            },
            2,
        ),
        (
            "cut mid-record",
            |p| {
                let b = fs::read(p).unwrap();
                fs::write(p, &b[..100]).unwrap();
            },
            0,
        ),
        (
            "header zeroed",
            |p| {
                let mut b = fs::read(p).unwrap();
                b[..64].fill(0);
                fs::write(p, &b).unwrap();
            },
            5,
        ),
    ];
    for (what, damage, kept) in cases {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().to_path_buf();
        let segs = three_sealed(&dir);
        let victim = &segs[2].0;
        assert_eq!(fs::metadata(victim).unwrap().len(), 889, "{what}");
        let damaged = fs::read({
            damage(victim);
            victim
        })
        .unwrap();
        let r = recover_shard(&FsStorage, &dir, SHARD, 0).unwrap().report;
        let want: Vec<Rec> = segs[2].1[..kept as usize].to_vec();
        assert_records(
            &read_shard(&FsStorage, &dir).unwrap(),
            &[segs[0].1.clone(), segs[1].1.clone(), want.clone()].concat(),
        );
        let qdir = dir.join(QUARANTINE_DIR);
        match what {
            "cut mid-record" => {
                // Nothing left to keep: quarantined whole.
                assert!(r.cut_short.is_empty(), "{what}");
                assert_eq!(r.quarantined.len(), 1, "{what}");
                assert!(r.quarantined[0].1.contains("no intact record"), "{what}");
                assert_eq!(
                    fs::read(qdir.join("0000000000000002.sealed")).unwrap(),
                    damaged
                );
            }
            "header zeroed" => {
                assert!(r.cut_short.is_empty() && r.quarantined.is_empty(), "{what}");
                let h = &r.headers_repaired[0];
                assert_eq!(
                    (h.first_seq, h.records, h.proof),
                    (9, 5, HeaderProof::Footer)
                );
                assert_eq!(
                    names(&qdir),
                    vec![
                        "0000000000000002.damaged-header",
                        "0000000000000002.damaged-header.reason"
                    ]
                );
            }
            _ => {
                assert!(r.quarantined.is_empty(), "{what}: {:?}", r.quarantined);
                assert_eq!(r.cut_short.len(), 1, "{what}");
                let c = &r.cut_short[0];
                let end = 64 + disk_len(&want);
                assert_eq!(
                    (c.segment_id, c.offset, c.kept_records, c.end_seq),
                    (2, end, kept, 9 + kept),
                    "{what}"
                );
                assert_eq!(c.cut_bytes, damaged.len() as u64 - end, "{what}");
                let sealed = fs::read(victim).unwrap();
                assert_eq!(sealed.len() as u64, end + FOOTER_LEN as u64, "{what}");
                assert_eq!(sealed[..end as usize], damaged[..end as usize], "{what}");
                if c.cut_bytes > 0 {
                    let copy = qdir.join(format!("0000000000000002.cut-at-{end}"));
                    assert_eq!(c.saved_to.as_ref(), Some(&copy), "{what}");
                    assert_eq!(fs::read(&copy).unwrap(), damaged[end as usize..], "{what}");
                    let reason = fs::read_to_string(format!("{}.reason", copy.display())).unwrap();
                    assert!(
                        reason.contains(&format!("from seq {} on", 9 + kept)),
                        "{what}: {reason}"
                    );
                } else {
                    assert_eq!(c.saved_to, None, "{what}");
                }
                // recover_shard alone cannot count what went with the end
                // (open_shard counts it against a next segment).
                assert_eq!(r.lost_records, 0, "{what}");
            }
        }
        // The seqs the file still proves are not reused.
        assert_eq!(r.next_seq, 9 + kept, "{what}");
        assert_eq!(r.next_segment_id, 3);
        let before = snapshot(&dir);
        let again = recover_shard(&FsStorage, &dir, SHARD, 0).unwrap().report;
        assert_eq!(snapshot(&dir), before, "{what}: a second recovery");
        assert_eq!(again.next_seq, r.next_seq, "{what}: on restart");
    }
}

/// Damage that runs to a sealed segment's footer in fewer bytes than a
/// GAP frame needs (found by fuzzing: writing the frame failed the whole
/// recovery): the footer counts the lost record, but it cannot be framed,
/// so the segment is cut short before the damage.
#[test]
fn damage_too_short_for_a_gap_frame_before_the_footer_cuts_the_segment_short() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("shard-002");
    FsStorage.create_dir_all(&dir).unwrap();
    let header = SegmentHeader::new(SHARD, 0, 40, 1);
    let kept = recs(40, 1, |_| 30);
    let mut bytes = group_bytes(header.salt(), Some(&header), &kept);
    let end = bytes.len() as u64;
    bytes.extend_from_slice(&[0, 0, 0, 0, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7]);
    let footer = spillway_wab::format::Footer {
        record_count: 2,
        end_offset: end + 15,
        last_seq: 41,
        records_crc: 0,
    };
    bytes.extend_from_slice(&footer.encode(header.salt()));
    fs::write(dir.join("0000000000000000.sealed"), &bytes).unwrap();

    let o = open_shard(&FsStorage, &dir, SHARD).unwrap();
    let r = &o.recovered.report;
    assert_eq!(r.cut_short.len(), 1, "{r:?}");
    let c = &r.cut_short[0];
    assert_eq!(
        (c.offset, c.kept_records, c.end_seq, c.known_end),
        (end, 1, 41, Some(42))
    );
    assert!(r.quarantined.is_empty() && r.salvaged.is_empty());
    assert_records(&read_shard(&FsStorage, &dir).unwrap(), &kept);
    // The old footer counts what went (no next segment does): seq 41.
    assert_eq!(r.gaps.len(), 1, "{:?}", r.gaps);
    assert_eq!((r.gaps[0].first, r.gaps[0].last), (41, 41));
    let reason = fs::read_to_string(r.gaps[0].reason_file.as_ref().unwrap()).unwrap();
    assert!(reason.contains("cut short"), "{reason}");
    assert_eq!((r.lost_records, r.new_losses(), r.next_seq), (1, 1, 42));
    let before = snapshot(&dir);
    let again = open_shard(&FsStorage, &dir, SHARD).unwrap();
    assert_eq!(snapshot(&dir), before);
    let r = &again.recovered.report;
    assert_eq!((r.lost_records, r.new_losses(), r.next_seq), (1, 0, 42));
}

/// A sealed segment cut in half between two others: its first records are
/// delivered, and `open_shard` counts the rest exactly (the next segment
/// starts where it ended) as a gap with a reason file that says so.
#[test]
fn a_sealed_segment_cut_in_half_counts_what_it_lost_against_the_next_segment() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("shard-002");
    let segs = three_sealed(&dir);
    let victim = &segs[1].0;
    let b = fs::read(victim).unwrap();
    // Segment 1 holds seqs 5..9 (records of 16 + 75, 86, 97, 108 bytes):
    // the first two end at offset 64 + 91 + 102 = 257, the third at 370.
    fs::write(victim, &b[..300]).unwrap();
    let o = open_shard(&FsStorage, &dir, SHARD).unwrap();
    let r = &o.recovered.report;
    assert_eq!(r.cut_short.len(), 1);
    assert_eq!(
        (r.cut_short[0].kept_records, r.cut_short[0].end_seq),
        (2, 7)
    );
    assert_eq!(r.gaps.len(), 1, "{:?}", r.gaps);
    let g = &r.gaps[0];
    assert_eq!((g.first, g.last, g.new), (7, 8, true));
    assert_eq!(r.lost_records, 2);
    assert_eq!(r.new_losses(), 2);
    let reason = fs::read_to_string(g.reason_file.as_ref().unwrap()).unwrap();
    assert!(
        reason.contains("0000000000000001 before them was cut short")
            && reason.contains("0000000000000001.cut-at-257"),
        "{reason}"
    );
    let want: Vec<Rec> = segs
        .iter()
        .flat_map(|(_, r)| r.clone())
        .filter(|r| !(7..9).contains(&r.seq))
        .collect();
    assert_records(&read_shard(&FsStorage, &dir).unwrap(), &want);
    // Later starts still count it (a known gap), and report nothing new.
    let again = open_shard(&FsStorage, &dir, SHARD).unwrap();
    let r = &again.recovered.report;
    assert_eq!((r.lost_records, r.new_losses()), (2, 0));
    assert!(!r.gaps[0].new);
}

#[test]
fn one_flipped_byte_in_an_unsealed_segments_header_is_put_back() {
    for at in [0u64, 9, 17, 24, 30, 63] {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().to_path_buf();
        let (first, second) = sealed_then_open(&dir);
        let path = dir.join("0000000000000001.open");
        let orig = fs::read(&path).unwrap();
        flip(&path, at);

        let o = open_shard(&FsStorage, &dir, SHARD).unwrap();
        let r = &o.recovered.report;
        assert_eq!(r.headers_repaired.len(), 1, "byte {at}");
        let h = &r.headers_repaired[0];
        assert_eq!(
            (h.segment_id, h.first_seq, h.records, h.proof),
            (
                1,
                5,
                3,
                HeaderProof::OneByte {
                    offset: at as usize
                }
            ),
            "byte {at}"
        );
        assert!(
            r.quarantined.is_empty() && r.unnumbered.is_empty(),
            "byte {at}"
        );
        assert_eq!((r.lost_records, r.new_losses()), (0, 0), "byte {at}");
        // Sealed as any unsealed segment is at start, with its header back.
        let sealed = fs::read(dir.join("0000000000000001.sealed")).unwrap();
        assert_eq!(sealed[..64], orig[..64], "byte {at}");
        assert_records(
            &read_shard(&FsStorage, &dir).unwrap(),
            &[first.clone(), second.clone()].concat(),
        );
        assert_eq!(r.next_seq, 8);
        let before = snapshot(&dir);
        open_shard(&FsStorage, &dir, SHARD).unwrap();
        assert_eq!(snapshot(&dir), before, "byte {at}: a second recovery");
    }
}

/// On a full disk the evidence copy of a damaged header cannot be made:
/// it is skipped (logged), and the header is still put back in place
/// (that needs no space), nothing lost.
#[test]
fn a_damaged_header_is_put_back_on_a_full_disk() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("shard-002");
    let segs = three_sealed(&dir);
    let orig = fs::read(&segs[1].0).unwrap();
    flip(&segs[1].0, 27);
    let storage = FaultyStorage::new(vec![]);
    storage.fail_every(Op::Create, FaultKind::Enospc);
    let r = recover_shard(&storage, &dir, SHARD, 0).unwrap().report;
    assert_eq!(r.headers_repaired.len(), 1);
    assert_eq!(r.headers_repaired[0].saved_to, None);
    assert_eq!(fs::read(&segs[1].0).unwrap(), orig);
    let want: Vec<Rec> = segs.iter().flat_map(|(_, r)| r.clone()).collect();
    assert_records(&read_shard(&FsStorage, &dir).unwrap(), &want);
}

/// Segment 0 sealed (seqs 0..5), segment 1 unsealed (5..8), 40-byte
/// payloads.
fn sealed_then_open(dir: &Path) -> (Vec<Rec>, Vec<Rec>) {
    let mut seg = ActiveSegment::start(preallocate(&FsStorage, dir, 0, CAP).unwrap(), SHARD, 0);
    let first = recs(0, 5, |_| 40);
    append(&mut seg, &first).unwrap();
    seg.sync().unwrap();
    seal(&FsStorage, dir, seg.into_sealing()).unwrap();
    let mut seg = ActiveSegment::start(preallocate(&FsStorage, dir, 1, CAP).unwrap(), SHARD, 5);
    let second = recs(5, 3, |_| 40);
    append(&mut seg, &second).unwrap();
    seg.sync().unwrap();
    (first, second)
}

/// Two damaged bytes, or a header wiped to zeros over records, and no
/// footer: nothing proves the first sequence number (segment 0's end is
/// where it usually starts, not where it must: after a failed group the
/// writer starts past the numbers it skipped, which only the header
/// said). The file is moved to quarantine byte for byte, never reused as a
/// spare, and its 3 intact records are counted as lost, as a gap of 3
/// numbers presumed past the clock's floor (µs since the epoch), so that
/// none of the numbers they may carry is handed out again; the numbers
/// between segment 0's end and that floor are never counted as lost, then
/// or when later starts find a newer segment after the jump. No record is
/// delivered under a guess.
#[test]
fn an_unsealed_segment_whose_header_nothing_proves_is_quarantined_and_counted() {
    type Damage = fn(&Path);
    let cases: [(&str, Damage, &str); 3] = [
        (
            "two bytes",
            |p| {
                flip(p, 24);
                flip(p, 33);
            },
            "CRC mismatch",
        ),
        (
            "magic and first_seq",
            |p| {
                flip(p, 0);
                flip(p, 26);
            },
            "magic",
        ),
        (
            "zeroed over records",
            |p| {
                let mut b = fs::read(p).unwrap();
                b[..64].fill(0);
                fs::write(p, &b).unwrap();
            },
            "all 64 bytes are zero",
        ),
    ];
    for (what, damage, word) in cases {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().to_path_buf();
        let (first, _) = sealed_then_open(&dir);
        let path = dir.join("0000000000000001.open");
        damage(&path);
        let bytes = fs::read(&path).unwrap();

        let before_us = now_unix_us();
        let o = open_shard(&FsStorage, &dir, SHARD).unwrap();
        let after_us = now_unix_us();
        let rec = &o.recovered;
        let r = &rec.report;
        let qdir = dir.join(QUARANTINE_DIR);
        // Its name records the numbers presumed for its records and where
        // the data ended: `.seqs-<f>-<f + 2>.after-5`, f the clock's floor.
        let gap_name = names(&qdir)
            .into_iter()
            .find(|n| n.starts_with("gap-"))
            .unwrap_or_else(|| panic!("{what}: no gap reason file"));
        let f: u64 = gap_name["gap-".len()..]
            .split('-')
            .next()
            .unwrap()
            .parse()
            .unwrap();
        assert!(
            (before_us..=after_us).contains(&f),
            "{what}: presumed from {f}, the clock read {before_us}..={after_us}"
        );
        let seqs = format!("0000000000000001.open.seqs-{f}-{}.after-5", f + 2);
        let moved = qdir.join(&seqs);
        assert_eq!(
            names(&qdir),
            vec![
                seqs.clone(),
                format!("{seqs}.reason"),
                format!("gap-{f}-{}.reason", f + 2)
            ],
            "{what}"
        );
        assert_eq!(
            fs::read(&moved).unwrap(),
            bytes,
            "{what}: moved byte for byte"
        );
        let reason = fs::read_to_string(qdir.join(format!("{seqs}.reason"))).unwrap();
        assert!(
            reason.contains(word) && reason.contains("3 intact record(s) cannot be numbered"),
            "{what}: {reason:?}"
        );
        assert!(r.headers_repaired.is_empty(), "{what}");
        assert_eq!(r.unnumbered.len(), 1, "{what}");
        let u = &r.unnumbered[0];
        assert_eq!(
            (u.segment_id, u.records, &u.path, u.counted_by_gap),
            (1, 3, &moved, true),
            "{what}"
        );
        // The newest segment: counted by its intact records, as a gap of 3
        // numbers past the floor.
        assert_eq!((r.lost_records, r.new_losses()), (3, 3), "{what}");
        assert_eq!(r.gaps.len(), 1, "{what}: {:?}", r.gaps);
        assert_eq!((r.gaps[0].first, r.gaps[0].last), (f, f + 2), "{what}");
        let gap = fs::read_to_string(qdir.join(&gap_name)).unwrap();
        assert!(gap.contains(&seqs), "{what}: {gap}");
        assert_eq!(
            r.next_seq,
            f + 3,
            "{what}: the presumed numbers are never handed out"
        );
        assert_eq!(
            names(&dir),
            vec!["0000000000000000.sealed", "checkpoint", QUARANTINE_DIR]
        );
        assert!(r.resealed.is_empty() && rec.spares.is_empty(), "{what}");
        assert_records(&read_shard(&FsStorage, &dir).unwrap(), &first);
        assert_eq!(r.next_segment_id, 2);
        let before = snapshot(&dir);
        let again = open_shard(&FsStorage, &dir, SHARD).unwrap();
        assert_eq!(snapshot(&dir), before, "{what}: a second recovery");
        let r = &again.recovered.report;
        assert!(r.unnumbered.is_empty(), "{what}");
        assert_eq!(
            (r.lost_records, r.new_losses(), r.next_seq),
            (3, 0, f + 3),
            "{what}: later starts still count the gap, as a known one"
        );
        // The writer goes on past the jump: a later start counts the 3
        // presumed numbers between the two segments kept, not the jump.
        let mut seg =
            ActiveSegment::start(preallocate(&FsStorage, &dir, 2, CAP).unwrap(), SHARD, f + 3);
        append(&mut seg, &recs(f + 3, 2, |_| 40)).unwrap();
        seg.sync().unwrap();
        drop(seg);
        let later = open_shard(&FsStorage, &dir, SHARD).unwrap();
        let r = &later.recovered.report;
        assert_eq!(
            (r.lost_records, r.new_losses(), r.next_seq),
            (3, 0, f + 5),
            "{what}: {:?}",
            r.gaps
        );
        assert_eq!(r.gaps.len(), 1, "{what}: {:?}", r.gaps);
        assert_eq!((r.gaps[0].first, r.gaps[0].last), (f, f + 2), "{what}");
    }
}

/// The same damage with a newer segment after it: the numbers it held are
/// the gap before that segment, counted exactly once, with a reason file
/// that names the quarantined file.
#[test]
fn a_header_nothing_proves_between_two_segments_is_counted_as_the_gap() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().to_path_buf();
    let (first, _) = sealed_then_open(&dir);
    let path = dir.join("0000000000000001.open");
    flip(&path, 24);
    flip(&path, 33);
    let mut seg = ActiveSegment::start(preallocate(&FsStorage, &dir, 2, CAP).unwrap(), SHARD, 8);
    let third = recs(8, 2, |_| 40);
    append(&mut seg, &third).unwrap();
    seg.sync().unwrap();
    drop(seg);
    spillway_wab::write_checkpoint(&FsStorage, &dir, 2).unwrap();

    let o = open_shard(&FsStorage, &dir, SHARD).unwrap();
    let r = &o.recovered.report;
    assert_eq!(r.unnumbered.len(), 1);
    assert!(r.unnumbered[0].counted_by_gap);
    assert_eq!(r.gaps.len(), 1, "{:?}", r.gaps);
    assert_eq!((r.gaps[0].first, r.gaps[0].last), (5, 7));
    assert_eq!((r.lost_records, r.new_losses()), (3, 3));
    let reason = fs::read_to_string(r.gaps[0].reason_file.as_ref().unwrap()).unwrap();
    assert!(reason.contains("0000000000000001.open"), "{reason}");
    assert_records(
        &read_shard(&FsStorage, &dir).unwrap(),
        &[first, third].concat(),
    );
    // On later starts the gap stays counted, as a known one.
    let again = open_shard(&FsStorage, &dir, SHARD).unwrap();
    let r = &again.recovered.report;
    assert_eq!((r.lost_records, r.new_losses()), (3, 0));
}

/// A directory (or a FIFO) under a segment's name is not spillway's: the
/// start stops with its path, what it is and what to do, and nothing in
/// the folder changes.
#[test]
fn a_directory_named_like_a_segment_stops_the_start_with_its_path() {
    for name in [
        "0000000000000005.open",
        "0000000000000005.sealed",
        "0000000000000005.open.tmp",
    ] {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("shard-002");
        FsStorage.create_dir_all(&dir).unwrap();
        sealed_then_open(&dir);
        let odd = dir.join(name);
        fs::create_dir(&odd).unwrap();
        let before = snapshot(&dir);
        let err = match open_shard(&FsStorage, &dir, SHARD) {
            Ok(_) => panic!("{name}: a directory under a segment's name was accepted"),
            Err(e) => e.to_string(),
        };
        assert!(
            err.contains(&odd.display().to_string())
                && err.contains("directory")
                && err.contains("move it out of"),
            "{name}: {err}"
        );
        assert_eq!(snapshot(&dir), before, "{name}");
    }
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("shard-002");
    FsStorage.create_dir_all(&dir).unwrap();
    let fifo = dir.join("0000000000000000.open");
    let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    let err = recover_shard(&FsStorage, &dir, SHARD, 0)
        .err()
        .unwrap()
        .to_string();
    assert!(
        err.contains(&fifo.display().to_string()) && err.contains("a FIFO"),
        "{err}"
    );
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
    let header = SegmentHeader::new(SHARD, 1, u64::MAX - 2, 1);
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

/// A start that takes intact footers at their word
/// (`SealedCheck::Footer`), followed by `check_sealed` on each segment it
/// did not check, in id order, ends exactly where a start that checks
/// every record ends: the same segment files, the same quarantine, the same
/// records read back, the same losses counted and the same next numbers.
/// Damage behind an intact footer is left for the check; damage to the
/// footer itself is checked in full at the start.
#[test]
fn a_start_that_trusts_footers_then_checks_each_segment_ends_as_a_full_start() {
    for (target, spot, at, _, _) in every_spot() {
        let what = format!("segment {target}, {spot}");
        let tmp = tempfile::tempdir().unwrap();
        let full_dir = tmp.path().join("full").join("shard-002");
        let lazy_dir = tmp.path().join("lazy").join("shard-002");
        let segs = three_sealed(&full_dir);
        flip(&segs[target].0, at);
        copy_dir(&full_dir, &lazy_dir);
        let damaged = fs::read(lazy_dir.join(segs[target].0.file_name().unwrap())).unwrap();

        let full = recover_shard(&FsStorage, &full_dir, SHARD, 0)
            .unwrap()
            .report;
        let lazy = recover_shard_with(&FsStorage, &lazy_dir, SHARD, 0, SealedCheck::Footer)
            .unwrap()
            .report;
        let unchecked: Vec<u64> = lazy
            .segments
            .iter()
            .filter(|s| !s.checked)
            .map(|s| s.segment_id)
            .collect();
        let behind_footer = !spot.starts_with("footer") && !spot.starts_with("header");
        let bad = target as u64;
        if behind_footer {
            // Only the header and footer were read: nothing found, the
            // damaged file untouched until its check.
            assert!(unchecked.contains(&bad), "{what}: {unchecked:?}");
            assert!(lazy.salvaged.is_empty() && lazy.lost_records == 0, "{what}");
            let name = segs[target].0.file_name().unwrap();
            assert_eq!(fs::read(lazy_dir.join(name)).unwrap(), damaged, "{what}");
        } else if spot.starts_with("footer") {
            assert!(
                !unchecked.contains(&bad),
                "{what}: a bad footer is checked at the start"
            );
        }
        assert_eq!(
            (lazy.next_seq, lazy.next_segment_id),
            (full.next_seq, full.next_segment_id),
            "{what}: the start alone already knows the next numbers"
        );
        let mut lost = lazy.lost_records;
        let mut salvaged = lazy.salvaged.len();
        let mut footers = lazy.footers_repaired.len();
        for id in unchecked {
            let found = check_sealed(&FsStorage, &lazy_dir, SHARD, id).unwrap();
            assert!(found.segments.iter().all(|s| s.checked), "{what}");
            lost += found.lost_records;
            salvaged += found.salvaged.len();
            footers += found.footers_repaired.len();
        }
        assert_eq!(lost, full.lost_records, "{what}: losses counted");
        assert_eq!(salvaged, full.salvaged.len(), "{what}: salvaged holes");
        assert_eq!(
            footers,
            full.footers_repaired.len(),
            "{what}: footers rewritten"
        );
        // The same files: segment bytes alike, quarantine names alike
        // (a `.reason` names its folder, so only its name is compared).
        let files = |d: &Path| -> Vec<(String, Option<Vec<u8>>)> {
            snapshot(d)
                .into_iter()
                .map(|(name, bytes)| {
                    let keep = !name.ends_with(".reason");
                    (name, bytes.filter(|_| keep))
                })
                .collect()
        };
        assert_eq!(
            files(&lazy_dir),
            files(&full_dir),
            "{what}: the folders differ"
        );
        assert_records(
            &read_shard(&FsStorage, &lazy_dir).unwrap(),
            &read_shard(&FsStorage, &full_dir)
                .unwrap()
                .iter()
                .map(|r| Rec {
                    seq: r.seq,
                    payload: r.payload.to_vec(),
                    meta: r.meta,
                })
                .collect::<Vec<_>>(),
        );
    }
}

/// A start that takes footers at their word opens each sealed segment once
/// and reads two small pieces of it (header, footer), whatever its size:
/// each segment more costs exactly one open and two reads.
#[test]
fn a_start_that_trusts_footers_reads_a_header_and_a_footer_per_sealed_segment() {
    use spillway_wab::fault::{FaultyStorage, Op};
    let start = |segments: u64| {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("shard-002");
        FsStorage.create_dir_all(&dir).unwrap();
        for id in 0..segments {
            let mut seg = ActiveSegment::start(
                preallocate(&FsStorage, &dir, id, CAP).unwrap(),
                SHARD,
                id * 20,
            );
            append(&mut seg, &recs(id * 20, 20, |s| 100 + s as usize)).unwrap();
            seg.sync().unwrap();
            seal(&FsStorage, &dir, seg.into_sealing()).unwrap();
        }
        let lazy = FaultyStorage::new(Vec::new());
        let report = recover_shard_with(&lazy, &dir, SHARD, 0, SealedCheck::Footer)
            .unwrap()
            .report;
        assert_eq!(report.segments.len() as u64, segments);
        assert!(report.segments.iter().all(|s| !s.checked));
        let full = FaultyStorage::new(Vec::new());
        recover_shard(&full, &dir, SHARD, 0).unwrap();
        (
            lazy.count(Op::Open),
            lazy.count(Op::Read),
            full.count(Op::Read),
        )
    };
    let (opens_3, reads_3, full_3) = start(3);
    let (opens_9, reads_9, full_9) = start(9);
    assert_eq!(opens_9 - opens_3, 6, "one open per sealed segment");
    assert_eq!(
        reads_9 - reads_3,
        12,
        "a header and a footer per sealed segment"
    );
    assert!(
        full_9 - full_3 > 12,
        "a full start reads the records too ({full_3} and {full_9} reads)"
    );
}
