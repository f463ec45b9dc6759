//! Property tests: arbitrary records round-trip; arbitrary or damaged bytes
//! never make the reader or recovery panic, and recovery keeps every
//! record wholly before the damage, under its own sequence number, and
//! (salvage) usually the records after it too.

mod common;

use std::fs;

use common::*;
use proptest::collection::vec;
use proptest::prelude::*;
use spillway_wab::format::{
    open_name, sealed_name, FOOTER_LEN, RECORD_HEADER_LEN, SEGMENT_HEADER_LEN,
};
use spillway_wab::{
    preallocate, read_shard, recover_shard, seal, ActiveSegment, End, FsStorage, Opened,
    RecordMeta, SegmentReader,
};

/// Records from generated payloads and metadata, split into groups where
/// `splits` says so.
fn build(payloads: &[Vec<u8>], metas: &[(u8, u64)], first_seq: u64) -> Vec<Rec> {
    payloads
        .iter()
        .zip(metas.iter().cycle())
        .enumerate()
        .map(|(i, (p, &(tier, arrival)))| Rec {
            seq: first_seq + i as u64,
            payload: p.clone(),
            meta: RecordMeta {
                tier,
                arrival_unix_us: arrival,
            },
        })
        .collect()
}

fn groups<'a>(records: &'a [Rec], splits: &[bool]) -> Vec<&'a [Rec]> {
    let mut out = Vec::new();
    let mut start = 0;
    for i in 1..records.len() {
        if splits[i % splits.len()] {
            out.push(&records[start..i]);
            start = i;
        }
    }
    out.push(&records[start..]);
    out
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn records_round_trip_through_append_seal_read(
        payloads in vec(vec(any::<u8>(), 1..2000), 1..50),
        splits in vec(any::<bool>(), 1..50),
        metas in vec((any::<u8>(), 0u64..(1 << 56)), 1..50),
        first_seq in 0u64..(1 << 40),
        small in any::<bool>(),
    ) {
        let records = build(&payloads, &metas, first_seq);
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        // A small preallocation makes big groups grow the file past it.
        let cap = if small { 4096 } else { 128 * 1024 };
        let mut seg = ActiveSegment::start(preallocate(&FsStorage, dir, 1, cap).unwrap(), 5, first_seq);
        let gs = groups(&records, &splits);
        for g in &gs {
            append(&mut seg, g).unwrap();
            seg.sync().unwrap();
        }
        let end_offset = seg.write_offset;
        let body: u64 = SEGMENT_HEADER_LEN as u64 + disk_len(&records);
        prop_assert_eq!(end_offset, body);
        prop_assert_eq!(seg.durable_offset, end_offset);
        let (_, got, end, _) = read_segment(&FsStorage, &seg.path);
        assert_records(&got, &records);
        if end_offset + RECORD_HEADER_LEN as u64 <= cap {
            prop_assert_eq!(end, End::Zeros);
        } else {
            prop_assert!(matches!(end, End::Zeros | End::EndOfFile), "{:?}", end);
        }

        let sealed = seal(&FsStorage, dir, seg.into_sealing()).unwrap();
        prop_assert_eq!(fs::metadata(&sealed).unwrap().len(), end_offset + FOOTER_LEN as u64);
        let (_, got, end, _) = read_segment(&FsStorage, &sealed);
        assert_records(&got, &records);
        prop_assert!(
            matches!(end, End::Footer(f) if f.record_count == records.len() as u64
                && f.end_offset == end_offset && f.last_seq == first_seq + records.len() as u64 - 1),
            "{:?}", end
        );
        let before = snapshot(dir);
        let rec = recover_shard(&FsStorage, dir, 5, 0).unwrap();
        prop_assert_eq!(snapshot(dir), before);
        prop_assert_eq!(rec.report.next_seq, first_seq + records.len() as u64);
        prop_assert_eq!(rec.report.next_segment_id, 2);
        assert_records(&read_shard(&FsStorage, dir).unwrap(), &records);
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    /// Any bytes at all, as an unsealed or a sealed segment: no panic, and
    /// recovery succeeds and is idempotent.
    #[test]
    fn arbitrary_bytes_never_panic(bytes in vec(any::<u8>(), 0..3000), sealed in any::<bool>(), limit in any::<Option<u16>>()) {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        let path = dir.join(if sealed { sealed_name(0) } else { open_name(0) });
        fs::write(&path, &bytes).unwrap();
        if let Opened::Reader(mut r) = SegmentReader::open(&FsStorage, &path).unwrap() {
            if let Some(l) = limit {
                r.set_limit(l as u64);
            }
            let mut n = 0;
            while r.next().unwrap().is_some() {
                n += 1;
                prop_assert!(n <= bytes.len());
            }
        }
        let rec = recover_shard(&FsStorage, dir, 0, 0).unwrap();
        prop_assert!(rec.report.next_segment_id >= 1);
        drop(rec);
        let before = snapshot(dir);
        let again = recover_shard(&FsStorage, dir, 0, 0).unwrap();
        prop_assert_eq!(snapshot(dir), before);
        prop_assert!(again.report.quarantined.is_empty());
    }

    /// Arbitrary bytes after a valid header, so the record parser sees them.
    #[test]
    fn arbitrary_records_after_a_valid_header_never_panic(body in vec(any::<u8>(), 0..3000), first_seq in 0u64..(1 << 40)) {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        let header = spillway_wab::SegmentHeader::new(0, 0, first_seq, 1);
        let mut bytes = header.encode().to_vec();
        bytes.extend_from_slice(&body);
        fs::write(dir.join(open_name(0)), &bytes).unwrap();
        let rec = recover_shard(&FsStorage, dir, 0, 0).unwrap();
        prop_assert!(rec.report.next_seq >= first_seq);
        drop(rec);
        let before = snapshot(dir);
        recover_shard(&FsStorage, dir, 0, 0).unwrap();
        prop_assert_eq!(snapshot(dir), before);
    }
}

#[derive(Debug, Clone)]
enum Damage {
    /// XOR one byte (at a position scaled to the file) with a non-zero mask.
    Flip(f64, u8),
    /// Cut the file at a position scaled to its length.
    Truncate(f64),
    /// Overwrite from a scaled position with arbitrary bytes.
    Overwrite(f64, Vec<u8>),
    /// Add arbitrary bytes after the end of the file.
    Append(Vec<u8>),
}

fn damage() -> impl Strategy<Value = Damage> {
    prop_oneof![
        (0.0..1.0f64, 1u8..=255).prop_map(|(p, m)| Damage::Flip(p, m)),
        (0.0..1.0f64).prop_map(Damage::Truncate),
        (0.0..1.0f64, vec(any::<u8>(), 1..64)).prop_map(|(p, b)| Damage::Overwrite(p, b)),
        vec(any::<u8>(), 1..64).prop_map(Damage::Append),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 192, ..ProptestConfig::default() })]

    /// Damage a real segment. Recovery keeps a subset of the records, each
    /// under its own sequence number, that includes every record wholly
    /// before the first damaged byte; one changed byte in a sealed segment
    /// costs at most one record (the footer's count is the anchor), and
    /// none in the header (the byte is put back); a sealed segment cut
    /// short keeps exactly the records before the cut; and next_seq never
    /// falls below a sequence number the damaged file still proves.
    #[test]
    fn damaged_segment_recovers_the_intact_prefix(
        payloads in vec(vec(any::<u8>(), 1..300), 1..20),
        first_seq in 0u64..(1 << 40),
        sealed in any::<bool>(),
        dmg in damage(),
    ) {
        let records = build(&payloads, &[(1, 1000)], first_seq);
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        let mut seg = ActiveSegment::start(preallocate(&FsStorage, dir, 0, 8192).unwrap(), 0, first_seq);
        append(&mut seg, &records).unwrap();
        seg.sync().unwrap();
        let path = if sealed { seal(&FsStorage, dir, seg.into_sealing()).unwrap() } else { seg.path.clone() };
        let orig = fs::read(&path).unwrap();
        let mut b = orig.clone();
        let at = |p: f64| ((p * b.len() as f64) as usize).min(b.len().saturating_sub(1));
        match &dmg {
            Damage::Flip(p, m) => { let i = at(*p); b[i] ^= m; }
            Damage::Truncate(p) => { let i = at(*p); b.truncate(i); }
            Damage::Overwrite(p, bytes) => {
                let i = at(*p);
                let n = bytes.len().min(b.len() - i);
                b[i..i + n].copy_from_slice(&bytes[..n]);
            }
            Damage::Append(bytes) => b.extend_from_slice(bytes),
        }
        fs::write(&path, &b).unwrap();
        // First byte that differs (a truncation "differs" where it cuts).
        let first_diff = orig.iter().zip(&b).position(|(x, y)| x != y)
            .unwrap_or(orig.len().min(b.len())) as u64;
        let changed_within = first_diff < orig.len() as u64;
        // Records wholly before the first damaged byte.
        let mut intact = 0;
        let mut off = SEGMENT_HEADER_LEN as u64;
        for r in &records {
            off += (RECORD_HEADER_LEN + r.payload.len()) as u64;
            if off <= first_diff { intact += 1; }
        }
        let header_ok = first_diff >= SEGMENT_HEADER_LEN as u64;

        let rec = recover_shard(&FsStorage, dir, 0, 0).unwrap();
        let got = read_shard(&FsStorage, dir).unwrap();
        // A subset, in order, each record under its own seq.
        let picked: Vec<Rec> = got.iter()
            .map(|g| records[(g.seq - first_seq) as usize].clone())
            .collect();
        assert_records(&got, &picked);
        prop_assert!(got.windows(2).all(|w| w[0].seq < w[1].seq));
        let r = &rec.report;
        // (A segment whose header nothing proves, or with no intact record
        // left, is quarantined whole: its records cannot be numbered.)
        let whole_quarantine = r.quarantined.iter().any(|(p, _)| {
            p.file_name() == path.file_name()
        });
        if !whole_quarantine {
            prop_assert!(got.iter().take(intact).map(|g| g.seq).eq(first_seq..first_seq + intact as u64),
                "a record before the damage is missing ({:?})", dmg);
        }
        if sealed {
            if !changed_within {
                prop_assert_eq!(got.len(), records.len());
            } else if !header_ok {
                if matches!(dmg, Damage::Flip(..)) {
                    // One flipped header byte is put back: nothing lost.
                    prop_assert_eq!(r.headers_repaired.len(), 1, "{:?}", dmg);
                    prop_assert_eq!(got.len(), records.len(), "{:?}", dmg);
                } else if r.headers_repaired.is_empty() {
                    // Nothing proves the numbers: quarantined whole.
                    prop_assert!(got.is_empty(), "{:?}", dmg);
                    prop_assert_eq!(r.quarantined.len(), 1);
                }
            } else if whole_quarantine {
                prop_assert!(got.is_empty(), "{:?}", dmg);
            } else if !r.cut_short.is_empty() {
                // Sealed again after the records before the damage; the
                // rest went with its end (counted against a next segment,
                // by open_shard).
                prop_assert!(!matches!(dmg, Damage::Flip(..)), "{:?}", dmg);
                prop_assert!(r.quarantined.is_empty(), "{:?}", dmg);
                prop_assert!(got.len() as u64 + r.lost_records <= records.len() as u64, "{:?}", dmg);
                if matches!(dmg, Damage::Truncate(_)) {
                    prop_assert_eq!(got.len(), intact, "{:?}", dmg);
                }
            } else {
                prop_assert!(r.quarantined.is_empty(), "{:?}", dmg);
                prop_assert_eq!(got.len() as u64 + r.lost_records, records.len() as u64, "{:?}", dmg);
                if matches!(dmg, Damage::Flip(..)) {
                    // One changed byte: at most one record lost.
                    prop_assert!(r.lost_records <= 1, "{:?}: lost {}", dmg, r.lost_records);
                }
            }
            if changed_within {
                // The footer (if intact) or the header and intact records
                // still prove these seqs were used.
                let footer_ok = b.len() == orig.len() && b[b.len() - FOOTER_LEN..] == orig[orig.len() - FOOTER_LEN..];
                if footer_ok || (header_ok && intact == records.len()) {
                    prop_assert_eq!(r.next_seq, first_seq + records.len() as u64, "{:?}", dmg);
                } else if header_ok {
                    prop_assert!(r.next_seq >= first_seq + intact as u64, "{:?}", dmg);
                }
            }
        } else if header_ok {
            prop_assert!(got.len() >= intact, "kept {} < {} intact ({:?})", got.len(), intact, dmg);
            if matches!(dmg, Damage::Truncate(_)) {
                prop_assert_eq!(got.len(), intact, "{:?}", dmg);
            }
            if matches!(dmg, Damage::Flip(..)) {
                // One changed byte costs at most the record it hit; with
                // no anchor, damage of unknown size cuts the rest (as a
                // torn tail would be).
                prop_assert!(r.lost_records <= 1, "{:?}", dmg);
            }
            let last = got.last().map_or(first_seq, |g| g.seq + 1);
            prop_assert!(r.next_seq >= last);
        } else if matches!(dmg, Damage::Flip(..)) {
            // One flipped header byte is put back: nothing lost.
            prop_assert_eq!(r.headers_repaired.len(), 1, "{:?}", dmg);
            prop_assert_eq!(got.len(), records.len(), "{:?}", dmg);
        } else if r.headers_repaired.is_empty() {
            prop_assert!(got.is_empty());
        }
        drop(rec);
        let before = snapshot(dir);
        let again = recover_shard(&FsStorage, dir, 0, 0).unwrap();
        prop_assert_eq!(snapshot(dir), before);
        prop_assert!(again.report.quarantined.is_empty() && again.report.resealed.is_empty());
        prop_assert!(again.report.salvaged.is_empty() && again.report.footers_repaired.is_empty());
        prop_assert!(again.report.headers_repaired.is_empty() && again.report.cut_short.is_empty());
    }
}
