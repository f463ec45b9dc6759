//! Writing, reading back and sealing a segment; following a growing one.

mod common;

use std::fs;
use std::io::IoSlice;

use common::*;
use spillway_wab::fault::{Fault, FaultKind, FaultyStorage, Op};
use spillway_wab::format::{
    classify, open_name, sealed_name, FileKind, Footer, RecordsCrc, FOOTER_LEN, RECORD_BYTES_MAX,
    RECORD_HEADER_LEN, SEGMENT_HEADER_LEN,
};
use spillway_wab::storage::read_full_at;
use spillway_wab::{
    preallocate, read_shard, recover_shard, seal, shard_dir, ActiveSegment, AppendRecord, End,
    FsStorage, Opened, RecordMeta, SegmentHeader, SegmentReader, Storage, StorageFile,
};

const CAP: u64 = 64 * 1024;

#[test]
fn append_sync_read_seal_round_trip() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    let dir = shard_dir(&data, 7);
    assert!(dir.ends_with("data/shard-007"));
    FsStorage.create_dir_all(&dir).unwrap();
    assert_eq!(mode(&data), 0o700, "data dir mode");
    assert_eq!(mode(&dir), 0o700, "shard dir mode");

    // Preallocation: a zero-filled, 0600 `.open` file, no `.tmp` left.
    let pre = preallocate(&FsStorage, &dir, 5, CAP).unwrap();
    let open_path = dir.join("0000000000000005.open");
    assert_eq!(pre.path, open_path);
    assert_eq!((pre.segment_id, pre.capacity), (5, CAP));
    assert_eq!(names(&dir), vec!["0000000000000005.open"]);
    let bytes = fs::read(&open_path).unwrap();
    assert_eq!(bytes.len() as u64, CAP);
    assert!(
        bytes.iter().all(|&b| b == 0),
        "preallocated segment must be all zeros"
    );
    assert_eq!(mode(&open_path), 0o600);
    assert!(matches!(
        SegmentReader::open(&FsStorage, &open_path).unwrap(),
        Opened::Unused(_)
    ));

    let mut seg = ActiveSegment::start(pre, 7, 1000);
    assert_eq!(seg.next_seq(), 1000);
    assert!(seg.is_empty());
    let sizes = [1usize, 100, 4000, 17, 255, 256, 1, 2048];
    let all = recs(1000, 16, |s| sizes[(s % sizes.len() as u64) as usize]);
    let groups: Vec<&[Rec]> = vec![
        &all[0..1],
        &all[1..4],
        &all[4..11],
        &all[11..13],
        &all[13..16],
    ];

    let mut expect_offset = 0u64;
    for g in &groups {
        let header = if expect_offset == 0 {
            SEGMENT_HEADER_LEN as u64
        } else {
            0
        };
        let needed = header + disk_len(g);
        let payload_bytes: u64 = g.iter().map(|r| r.payload.len() as u64).sum();
        assert_eq!(seg.bytes_needed(payload_bytes, g.len() as u64), needed);
        assert!(seg.fits(payload_bytes, g.len() as u64));
        let durable_before = seg.durable_offset;
        let first = append(&mut seg, g).unwrap();
        assert_eq!(first, g[0].seq);
        expect_offset += needed;
        assert_eq!(seg.write_offset, expect_offset);
        assert_eq!(
            seg.durable_offset, durable_before,
            "append alone must not move the durable offset"
        );
        seg.sync().unwrap();
        assert_eq!(seg.durable_offset, expect_offset);
    }
    assert_eq!(seg.next_seq(), 1016);
    assert_eq!(seg.count, 16);

    // The bytes on disk are exactly header ++ records, then zeros.
    let raw = fs::read(&open_path).unwrap();
    assert_eq!(
        raw.len() as u64,
        CAP,
        "appends inside the preallocation must not grow the file"
    );
    let expected = group_bytes(seg.header.salt(), Some(&seg.header), &all);
    assert_eq!(&raw[..expected.len()], &expected[..]);
    assert!(raw[expected.len()..].iter().all(|&b| b == 0));
    let hdr = SegmentHeader::decode(raw[..64].try_into().unwrap())
        .unwrap()
        .unwrap();
    assert_eq!((hdr.shard, hdr.segment_id, hdr.first_seq), (7, 5, 1000));

    // Read back the unsealed segment: every record, then End::Zeros.
    let (header, got, end, offset) = read_segment(&FsStorage, &open_path);
    assert_eq!(header, seg.header);
    assert_records(&got, &all);
    assert_eq!(end, End::Zeros);
    assert_eq!(offset, seg.write_offset);
    let mut at = SEGMENT_HEADER_LEN as u64;
    for (g, w) in got.iter().zip(&all) {
        assert_eq!(g.offset, at, "record offset of seq {}", w.seq);
        at += (RECORD_HEADER_LEN + w.payload.len()) as u64;
    }
    assert_eq!(
        got[3].meta,
        RecordMeta {
            tier: meta(1003).tier,
            arrival_unix_us: meta(1003).arrival_unix_us
        }
    );

    // Seal: footer, truncate to end + 40, `.sealed`, 0600.
    let end_offset = seg.write_offset;
    let mut crcs = RecordsCrc::new();
    let salt = seg.header.salt();
    for r in &all {
        crcs.add(salt.apply(spillway_wab::format::record_crc(r.meta.pack(), &r.payload)));
    }
    let sealing = seg.into_sealing();
    assert_eq!(
        sealing.footer,
        Footer {
            record_count: 16,
            end_offset,
            last_seq: 1015,
            records_crc: crcs.value()
        }
    );
    let sealed = seal(&FsStorage, &dir, sealing).unwrap();
    assert_eq!(sealed, dir.join("0000000000000005.sealed"));
    assert_eq!(names(&dir), vec!["0000000000000005.sealed"]);
    assert_eq!(
        fs::metadata(&sealed).unwrap().len(),
        end_offset + FOOTER_LEN as u64
    );
    assert_eq!(mode(&sealed), 0o600);
    let (_, got, end, _) = read_segment(&FsStorage, &sealed);
    assert_records(&got, &all);
    assert_eq!(
        end,
        End::Footer(Footer {
            record_count: 16,
            end_offset,
            last_seq: 1015,
            records_crc: crcs.value()
        })
    );
    assert_records(&read_shard(&FsStorage, &dir).unwrap(), &all);

    // Recovery of a clean directory changes nothing.
    let before = snapshot(&dir);
    let rec = recover_shard(&FsStorage, &dir, 7, 0).unwrap();
    assert_eq!(snapshot(&dir), before);
    let r = &rec.report;
    assert_eq!(r.segments.len(), 1);
    assert_eq!(
        (
            r.segments[0].segment_id,
            r.segments[0].first_seq,
            r.segments[0].record_count,
            r.segments[0].bytes
        ),
        (5, 1000, 16, end_offset)
    );
    assert!(r.resealed.is_empty() && r.quarantined.is_empty());
    assert_eq!((r.next_seq, r.next_segment_id), (1016, 6));
    assert!(rec.spares.is_empty());
    // The floor wins when it is higher.
    assert_eq!(
        recover_shard(&FsStorage, &dir, 7, 5000)
            .unwrap()
            .report
            .next_seq,
        5000
    );
}

#[test]
fn several_segments_read_in_sequence_order() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("shard-000");
    FsStorage.create_dir_all(&dir).unwrap();
    let mut want = Vec::new();
    let mut next = 0u64;
    // Ids deliberately not in seq order on disk listing terms: 0x10, 0x2, 0xa.
    for (id, n) in [(0x2u64, 3u64), (0xa, 5), (0x10, 2)] {
        let mut seg =
            ActiveSegment::start(preallocate(&FsStorage, &dir, id, CAP).unwrap(), 0, next);
        let g = recs(next, n, |s| 10 + s as usize * 3);
        append(&mut seg, &g).unwrap();
        seg.sync().unwrap();
        next += n;
        want.extend(g);
        if id != 0x10 {
            seal(&FsStorage, &dir, seg.into_sealing()).unwrap();
        }
    }
    assert_records(&read_shard(&FsStorage, &dir).unwrap(), &want);
    let rec = recover_shard(&FsStorage, &dir, 0, 0).unwrap();
    let firsts: Vec<(u64, u64, u64)> = rec
        .report
        .segments
        .iter()
        .map(|s| (s.segment_id, s.first_seq, s.record_count))
        .collect();
    assert_eq!(firsts, vec![(0x2, 0, 3), (0xa, 3, 5), (0x10, 8, 2)]);
    assert_eq!(rec.report.resealed, vec![(0x10, 2, 0)]);
    assert_eq!(
        (rec.report.next_seq, rec.report.next_segment_id),
        (10, 0x11)
    );
    assert_records(&read_shard(&FsStorage, &dir).unwrap(), &want);
    assert_eq!(
        names(&dir),
        vec![
            "0000000000000002.sealed",
            "000000000000000a.sealed",
            "0000000000000010.sealed"
        ]
    );
    for n in names(&dir) {
        assert!(matches!(classify(&n), Some(FileKind::Sealed(_))));
    }
    assert_eq!(open_name(0x10), "0000000000000010.open");
    assert_eq!(sealed_name(0x10), "0000000000000010.sealed");
}

#[test]
fn invalid_payloads_are_refused_before_anything_is_written() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let mut seg = ActiveSegment::start(preallocate(&FsStorage, dir, 0, CAP).unwrap(), 0, 0);
    let path = seg.path.clone();
    let err = seg
        .append(&[AppendRecord {
            payload: b"",
            meta: 0,
            payload_crc: None,
        }])
        .unwrap_err();
    assert_eq!(err.kind(), std::io::ErrorKind::InvalidInput);
    assert_eq!((seg.write_offset, seg.count, seg.next_seq()), (0, 0, 0));
    assert!(
        fs::read(&path).unwrap().iter().all(|&b| b == 0),
        "nothing may be written"
    );

    let good = recs(0, 2, |_| 50);
    append(&mut seg, &good).unwrap();
    seg.sync().unwrap();
    let offset = seg.write_offset;
    // A group with one bad record is refused whole.
    let p = payload(9, 30);
    let err = seg
        .append(&[
            AppendRecord {
                payload: &p,
                meta: 1,
                payload_crc: None,
            },
            AppendRecord {
                payload: &[],
                meta: 1,
                payload_crc: None,
            },
        ])
        .unwrap_err();
    assert_eq!(err.kind(), std::io::ErrorKind::InvalidInput);
    let big = vec![1u8; RECORD_BYTES_MAX as usize + 1];
    let err = seg
        .append(&[AppendRecord {
            payload: &big,
            meta: 1,
            payload_crc: None,
        }])
        .unwrap_err();
    assert_eq!(err.kind(), std::io::ErrorKind::InvalidInput);
    assert_eq!(
        (seg.write_offset, seg.count, seg.durable_offset),
        (offset, 2, offset)
    );
    let raw = fs::read(&path).unwrap();
    assert!(
        raw[offset as usize..].iter().all(|&b| b == 0),
        "nothing may be written past the last good group"
    );
    // The segment is still fine to use.
    let more = recs(2, 1, |_| 7);
    append(&mut seg, &more).unwrap();
    seg.sync().unwrap();
    let (_, got, end, _) = read_segment(&FsStorage, &path);
    assert_records(&got, &[good, more].concat());
    assert_eq!(end, End::Zeros);
}

/// `seal` of a segment that never got a record writes its footer at offset
/// 0 (there is no header yet). Recovery must not treat that as corruption.
#[test]
fn segment_sealed_before_its_first_record_is_not_quarantined() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("shard-001");
    FsStorage.create_dir_all(&dir).unwrap();
    let mut seg = ActiveSegment::start(preallocate(&FsStorage, &dir, 0, CAP).unwrap(), 1, 0);
    let g = recs(0, 4, |_| 64);
    append(&mut seg, &g).unwrap();
    seg.sync().unwrap();
    seal(&FsStorage, &dir, seg.into_sealing()).unwrap();
    // Segment 1 is sealed empty; segment 2 dies mid-seal (after the footer
    // write, before the truncate) while still empty.
    let empty = ActiveSegment::start(preallocate(&FsStorage, &dir, 1, CAP).unwrap(), 1, 4);
    let sealed = seal(&FsStorage, &dir, empty.into_sealing()).unwrap();
    assert_eq!(fs::metadata(&sealed).unwrap().len(), FOOTER_LEN as u64);
    let faulty = FaultyStorage::new(vec![Fault {
        op: Op::SetLen,
        nth: 1,
        kind: FaultKind::Crash,
    }]);
    let empty2 = ActiveSegment::start(preallocate(&faulty, &dir, 2, CAP).unwrap(), 1, 4);
    seal(&faulty, &dir, empty2.into_sealing()).unwrap_err();
    assert!(faulty.crashed());

    let rec = recover_shard(&FsStorage, &dir, 1, 0).unwrap();
    let r = &rec.report;
    assert!(
        r.quarantined.is_empty(),
        "nothing to quarantine: {:?}",
        r.quarantined
    );
    assert!(!dir.join("quarantine").exists());
    assert_eq!(r.segments.len(), 1);
    assert_eq!((r.next_seq, r.next_segment_id), (4, 3));
    assert_eq!(names(&dir), vec!["0000000000000000.sealed"]);
    assert_records(&read_shard(&FsStorage, &dir).unwrap(), &g);
    let again = recover_shard(&FsStorage, &dir, 1, 0).unwrap();
    assert_eq!(again.report.next_seq, 4);

    // An empty segment whose header was written (`append(&[])`) seals into
    // a valid header + footer file that recovery keeps.
    let mut hdr_only = ActiveSegment::start(preallocate(&FsStorage, &dir, 3, CAP).unwrap(), 1, 4);
    assert_eq!(hdr_only.append(&[]).unwrap(), 4);
    let sealed = seal(&FsStorage, &dir, hdr_only.into_sealing()).unwrap();
    assert_eq!(
        fs::metadata(&sealed).unwrap().len(),
        (SEGMENT_HEADER_LEN + FOOTER_LEN) as u64
    );
    let (_, got, end, _) = read_segment(&FsStorage, &sealed);
    assert!(got.is_empty());
    assert!(matches!(
        end,
        End::Footer(Footer {
            record_count: 0,
            end_offset: 64,
            last_seq: 3,
            ..
        })
    ));
    let rec = recover_shard(&FsStorage, &dir, 1, 0).unwrap();
    assert!(rec.report.quarantined.is_empty());
    assert_eq!(rec.report.segments.len(), 2);
    assert_eq!(rec.report.next_seq, 4);
}

/// The drain follows the active segment by raising the limit to the durable
/// offset: it must see records only below the limit, all of them once the
/// limit is raised, and never stop early on bytes it read before they were
/// written.
#[test]
fn reader_follows_a_growing_segment() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let cap = 4 * 1024 * 1024;
    let mut seg = ActiveSegment::start(preallocate(&FsStorage, dir, 9, cap).unwrap(), 2, 500);
    let path = seg.path.clone();
    // Sizes chosen so groups straddle the reader's 256 KiB read-ahead.
    let sizes = [40_000usize, 3, 100_000, 700, 90_000, 1, 250_000, 12];
    let all = recs(500, 40, |s| sizes[(s % sizes.len() as u64) as usize]);
    let groups: Vec<&[Rec]> = vec![
        &all[0..1],
        &all[1..5],
        &all[5..6],
        &all[6..14],
        &all[14..15],
        &all[15..30],
        &all[30..40],
    ];

    let first = &groups[0];
    append(&mut seg, first).unwrap();
    seg.sync().unwrap();
    let mut reader = match SegmentReader::open(&FsStorage, &path).unwrap() {
        Opened::Reader(r) => r,
        _ => panic!("header written with the first group"),
    };
    reader.set_limit(seg.durable_offset);
    let mut seen = Vec::new();
    let drain = |reader: &mut SegmentReader<_>, seen: &mut Vec<_>| {
        while let Some(r) = reader.next().unwrap() {
            seen.push(r);
        }
        assert_eq!(
            reader.end(),
            None,
            "a followed segment must not end at the limit"
        );
    };
    drain(&mut reader, &mut seen);
    assert_records(&seen, first);

    let mut acked = first.len();
    for g in &groups[1..] {
        append(&mut seg, g).unwrap();
        // Written but not synced: the limit has not moved, nothing new.
        reader.set_limit(seg.durable_offset);
        drain(&mut reader, &mut seen);
        assert_eq!(seen.len(), acked);
        seg.sync().unwrap();
        // Raise the limit in two steps: first into the middle of the group's
        // last record, then to the durable end.
        let last_start =
            seg.durable_offset - (RECORD_HEADER_LEN + g.last().unwrap().payload.len()) as u64;
        reader.set_limit(last_start + 10);
        drain(&mut reader, &mut seen);
        assert_records(&seen, &all[..acked + g.len() - 1]);
        assert_eq!(reader.offset(), last_start);
        reader.set_limit(seg.durable_offset);
        drain(&mut reader, &mut seen);
        acked += g.len();
        assert_records(&seen, &all[..acked]);
        assert_eq!(reader.offset(), seg.durable_offset);
    }

    // Sealing while followed: a limit that covers only part of the footer
    // must not read it (here its first 16 bytes are on disk and the rest is
    // not yet).
    let end_offset = seg.write_offset;
    let footer = seg.into_sealing();
    let footer_bytes = footer.footer.encode(footer.salt);
    let mut f = FsStorage.open(&path).unwrap();
    f.write_all_at(end_offset, &[IoSlice::new(&footer_bytes[..16])])
        .unwrap();
    reader.set_limit(end_offset + 16);
    assert!(reader.next().unwrap().is_none());
    assert_eq!(
        reader.end(),
        None,
        "the footer is past the limit: the reader must wait, not judge it"
    );
    let footer_salt = footer.salt;
    let sealed = seal(&FsStorage, dir, footer).unwrap();
    reader.set_limit(end_offset + FOOTER_LEN as u64);
    assert!(reader.next().unwrap().is_none());
    assert_eq!(
        reader.end(),
        Some(&End::Footer(footer_bytes_decode(
            &footer_bytes,
            footer_salt
        )))
    );
    assert_records(&seen, &all);
    let (_, got, _, _) = read_segment(&FsStorage, &sealed);
    assert_records(&got, &all);
}

fn footer_bytes_decode(b: &[u8; FOOTER_LEN], salt: spillway_wab::format::Salt) -> Footer {
    Footer::decode(b, salt).unwrap()
}

/// A reader opened before a group is written must not keep serving the
/// zeros it read then.
#[test]
fn no_stale_zeros_after_the_limit_is_raised() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let mut seg = ActiveSegment::start(preallocate(&FsStorage, dir, 0, CAP).unwrap(), 0, 0);
    let path = seg.path.clone();
    let g1 = recs(0, 2, |_| 100);
    append(&mut seg, &g1).unwrap();
    seg.sync().unwrap();
    let Opened::Reader(mut reader) = SegmentReader::open(&FsStorage, &path).unwrap() else {
        panic!()
    };
    reader.set_limit(seg.durable_offset);
    let mut seen = Vec::new();
    while let Some(r) = reader.next().unwrap() {
        seen.push(r);
    }
    // Repeatedly ask at the limit while nothing is there yet.
    for _ in 0..3 {
        assert!(reader.next().unwrap().is_none());
    }
    let mut all = g1.clone();
    for i in 0..20u64 {
        let g = recs(2 + i * 3, 3, |s| 1 + (s as usize * 37) % 300);
        append(&mut seg, &g).unwrap();
        seg.sync().unwrap();
        all.extend(g);
        reader.set_limit(seg.durable_offset);
        while let Some(r) = reader.next().unwrap() {
            seen.push(r);
        }
        assert_eq!(reader.end(), None);
        assert_records(&seen, &all);
    }
    // Bytes past the durable offset (written, not yet synced) stay invisible.
    let g = recs(62, 1, |_| 10);
    append(&mut seg, &g).unwrap();
    assert!(reader.next().unwrap().is_none());
    assert_eq!(reader.end(), None);
    // With no limit the reader ends at the zeros after the last record.
    let Opened::Reader(mut whole) = SegmentReader::open(&FsStorage, &path).unwrap() else {
        panic!()
    };
    let mut n = 0;
    while whole.next().unwrap().is_some() {
        n += 1;
    }
    assert_eq!(n, all.len() + 1);
    assert_eq!(whole.end(), Some(&End::Zeros));
    let mut buf = [0u8; 16];
    assert_eq!(
        read_full_at(whole.file_ref(), whole.offset(), &mut buf).unwrap(),
        16
    );
    assert_eq!(buf, [0u8; 16]);
}

#[test]
fn skip_to_resumes_at_a_sequence_number() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let mut seg = ActiveSegment::start(preallocate(&FsStorage, dir, 0, CAP).unwrap(), 0, 100);
    let all = recs(100, 10, |s| s as usize);
    append(&mut seg, &all).unwrap();
    seg.sync().unwrap();
    let Opened::Reader(mut r) = SegmentReader::open(&FsStorage, &seg.path).unwrap() else {
        panic!()
    };
    r.skip_to(106).unwrap();
    assert_eq!(r.next_seq(), 106);
    let mut rest = Vec::new();
    while let Some(x) = r.next().unwrap() {
        rest.push(x);
    }
    assert_records(&rest, &all[6..]);
}

/// A record that comes with its payload CRC (the wire check computed it) is
/// written without its bytes being hashed again, and reads back whole: the
/// stored CRC derived from the payload's is the one the reader computes.
/// Reading hashes each byte once (the check a read needs).
#[test]
fn a_record_with_its_payload_crc_is_hashed_once_and_reads_back() {
    use spillway_wab::format::payload_bytes_hashed;
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let mut seg = ActiveSegment::start(preallocate(&FsStorage, dir, 0, 1 << 20).unwrap(), 0, 0);
    let sizes = [64 * 1024usize, 4096, 5, 100_003];
    let all = recs(0, sizes.len() as u64, |s| sizes[s as usize]);
    let large: u64 = all
        .iter()
        .filter(|r| r.payload.len() >= 4096)
        .map(|r| r.payload.len() as u64)
        .sum();
    let small: u64 = all
        .iter()
        .filter(|r| r.payload.len() < 4096)
        .map(|r| r.payload.len() as u64)
        .sum();
    let before = payload_bytes_hashed();
    append(&mut seg, &all).unwrap();
    assert_eq!(
        payload_bytes_hashed() - before,
        small,
        "only the records that came without a CRC are hashed when written"
    );
    seg.sync().unwrap();
    let before = payload_bytes_hashed();
    let (_, back, _, _) = read_segment(&FsStorage, &seg.path);
    assert_eq!(payload_bytes_hashed() - before, large + small);
    assert_records(&back, &all);
}

/// The reader reads into a chunk again once none of its records is held:
/// records still held keep their bytes however far the reader goes on, and
/// every record read into a reused chunk is whole (sizes that straddle
/// chunks, and records larger than a chunk, included).
#[test]
fn records_held_keep_their_bytes_while_the_reader_reuses_chunks() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let mut seg = ActiveSegment::start(preallocate(&FsStorage, dir, 0, 16 << 20).unwrap(), 0, 0);
    let sizes = [100usize, 70_000, 5, 300_000, 4096, 1];
    let all = recs(0, 120, |s| {
        sizes[(s % sizes.len() as u64) as usize] + s as usize
    });
    for g in all.chunks(10) {
        append(&mut seg, g).unwrap();
    }
    seg.sync().unwrap();
    let Opened::Reader(mut r) = SegmentReader::open(&FsStorage, &seg.path).unwrap() else {
        panic!("segment did not open");
    };
    let mut held = Vec::new();
    let mut want = all.iter();
    while let Some(rec) = r.next().unwrap() {
        let w = want.next().expect("more records read than written");
        assert_eq!((rec.seq, &rec.payload[..]), (w.seq, &w.payload[..]));
        if rec.seq % 7 == 0 {
            held.push((rec, w));
        }
    }
    assert!(want.next().is_none(), "records missing");
    for (rec, w) in held {
        assert_eq!(
            &rec.payload[..],
            &w.payload[..],
            "held record {} changed",
            w.seq
        );
    }
}
