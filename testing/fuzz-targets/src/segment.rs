//! Segment files, read and recovered: whatever is on the disk, recovery
//! must not panic, must keep every record a reader could read (or move the
//! file to quarantine whole), and must leave a folder that a second
//! recovery does not change.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use spillway_wab::format::{
    open_name, record_crc, sealed_name, Footer, GapFrame, RecordsCrc, Salt, FOOTER_LEN,
    FOOTER_MARKER, FORMAT_1, FORMAT_VERSION, GAP_FRAME_LEN, GAP_MARKER, RECORD_BYTES_MAX,
    RECORD_HEADER_LEN, SEGMENT_HEADER_LEN, SEGMENT_MAGIC,
};
use spillway_wab::{
    check_sealed, open_shard, open_shard_with, read_shard, FsStorage, OpenedShard, SealedCheck,
    StoredRecord,
};

use crate::scratch::{put, scratch_dir, snapshot};

/// Shard number of the scratch shards. Recovery compares it with a header
/// only to repair a damaged one (a header put back must name this shard);
/// the proptests write 7, so one damaged byte there is put back.
const SHARD: u32 = 7;

/// Control bits (the first input byte).
const FIX_HEADER: u8 = 0x01;
const FIX_RECORDS: u8 = 0x02;
const FIX_FOOTER: u8 = 0x04;
const TWO_SEGMENTS: u8 = 0x08;

/// Input: a control byte, then a segment file's bytes.
///
/// Control bits: `0x01` makes the header's magic, version and CRC right;
/// `0x02` recomputes every record's and GAP frame's CRC, except that of
/// record number `(control >> 4) - 1` when the high nibble is not 0 (one
/// damaged record amid good ones, which recovery salvages); `0x04` makes a
/// footer where the records end say what they hold (count, offset, last
/// seq, records CRC) with a right CRC; `0x08` also runs a shard of two
/// segments, this one and a copy starting one seq later (records that
/// overlap a newer segment are cut). A valid header's first seq is kept
/// below 2^62 (see [`keep_seqs_far_from_the_end`]).
///
/// The bytes are written as a sealed segment, and again as an `.open` one,
/// each in a shard folder of its own; then `read_shard`, `open_shard`
/// (recovery and the checkpoint check), `read_shard`, `open_shard`,
/// `read_shard`. Checks: nothing panics or fails; the records read before
/// recovery are the first ones read after it (or the file was moved to
/// quarantine whole); the second recovery finds nothing to do and leaves
/// every file as it was.
pub fn segment(data: &[u8]) {
    let Some((&control, rest)) = data.split_first() else {
        return;
    };
    let bytes = fixed(control, rest);
    shard(&[(sealed_name(1), &bytes)], true);
    shard(&[(open_name(1), &bytes)], true);
    if control & TWO_SEGMENTS != 0 {
        let later = starting_later(&bytes);
        shard(&[(open_name(1), &bytes), (open_name(2), &later)], false);
    }
}

/// The file bytes with the CRCs the control byte asks for made right.
fn fixed(control: u8, rest: &[u8]) -> Vec<u8> {
    let mut b = rest.to_vec();
    if control & FIX_HEADER != 0 {
        if b.len() < SEGMENT_HEADER_LEN {
            b.resize(SEGMENT_HEADER_LEN, 0);
        }
        fix_header(&mut b);
    }
    if b.len() < SEGMENT_HEADER_LEN {
        return b;
    }
    keep_seqs_far_from_the_end(&mut b);
    let damaged = match control >> 4 {
        0 => None,
        n => Some(n as u64 - 1),
    };
    let fix_records = control & FIX_RECORDS != 0;
    let first_seq = u64_at(&b, 24);
    // The salt a reader takes from the header (format 1 unsalted).
    let salt = match u32_at(&b, 8) {
        FORMAT_1 => Salt::NONE,
        _ => Salt::of_segment(u64_at(&b, 16)),
    };
    let mut at = SEGMENT_HEADER_LEN;
    let mut positions = 0u64;
    let mut record = 0u64;
    let mut records_crc = RecordsCrc::new();
    while at + RECORD_HEADER_LEN <= b.len() {
        let len = u32_at(&b, at);
        if len == 0 {
            break;
        }
        if len == FOOTER_MARKER {
            if control & FIX_FOOTER != 0 && at + FOOTER_LEN <= b.len() {
                let footer = Footer {
                    record_count: positions,
                    end_offset: at as u64,
                    last_seq: first_seq.wrapping_add(positions).wrapping_sub(1),
                    records_crc: records_crc.value(),
                };
                b[at..at + FOOTER_LEN].copy_from_slice(&footer.encode(salt));
            }
            break;
        }
        if len == GAP_MARKER {
            if fix_records {
                let crc = salt.apply(crc32fast::hash(&b[at + 8..at + GAP_FRAME_LEN]));
                b[at + 4..at + 8].copy_from_slice(&crc.to_le_bytes());
            }
            let Some((gap, crc)) = GapFrame::decode(&b[at..], salt) else {
                break;
            };
            records_crc.add(crc);
            positions += gap.lost_records as u64;
            at += gap.span() as usize;
            continue;
        }
        let end = at + RECORD_HEADER_LEN + len as usize;
        if len > RECORD_BYTES_MAX || end > b.len() {
            break;
        }
        if fix_records && damaged != Some(record) {
            let crc = salt.apply(record_crc(
                u64_at(&b, at + 8),
                &b[at + RECORD_HEADER_LEN..end],
            ));
            b[at + 4..at + 8].copy_from_slice(&crc.to_le_bytes());
        }
        records_crc.add(u32_at(&b, at + 4));
        positions += 1;
        record += 1;
        at = end;
    }
    b
}

/// Sequence numbers of a valid header stay below 2^62.
///
/// Near 2^64 they wrap (or panic where overflow is checked): a known
/// limit, reported in testing/fuzz/README.md, that only a damaged header whose CRC
/// still matches (or 2^64 records) can reach. Kept out of the way so that
/// the fuzzer looks for other trouble.
fn keep_seqs_far_from_the_end(b: &mut [u8]) {
    let header_ok = crc32fast::hash(&b[0..60]) == u32_at(b, 60);
    let first_seq = u64_at(b, 24);
    if header_ok && first_seq >= 1 << 62 {
        b[24..32].copy_from_slice(&(first_seq >> 2).to_le_bytes());
        let crc = crc32fast::hash(&b[0..60]);
        b[60..64].copy_from_slice(&crc.to_le_bytes());
    }
}

/// Magic and CRC made right; the format too, unless it is already one
/// this build reads (so both formats are fuzzed).
fn fix_header(b: &mut [u8]) {
    b[0..8].copy_from_slice(&SEGMENT_MAGIC);
    if !matches!(u32_at(b, 8), FORMAT_1 | FORMAT_VERSION) {
        b[8..12].copy_from_slice(&FORMAT_VERSION.to_le_bytes());
    }
    let crc = crc32fast::hash(&b[0..60]);
    b[60..64].copy_from_slice(&crc.to_le_bytes());
}

/// A copy of a segment whose header says it starts one seq later (its
/// header CRC recomputed if it was right).
fn starting_later(bytes: &[u8]) -> Vec<u8> {
    let mut b = bytes.to_vec();
    if b.len() >= SEGMENT_HEADER_LEN {
        let header_ok = crc32fast::hash(&b[0..60]) == u32_at(&b, 60);
        let first_seq = u64_at(&b, 24).wrapping_add(1);
        b[24..32].copy_from_slice(&first_seq.to_le_bytes());
        b[16..24].copy_from_slice(&2u64.to_le_bytes());
        if header_ok {
            let crc = crc32fast::hash(&b[0..60]);
            b[60..64].copy_from_slice(&crc.to_le_bytes());
        }
    }
    b
}

/// One shard folder holding `files`, read, recovered twice, read again.
/// `single`: one segment, so the records read before recovery must all
/// survive it.
fn shard(files: &[(String, &Vec<u8>)], single: bool) {
    let scratch = scratch_dir();
    let dir = scratch.path().join("shard-007");
    std::fs::create_dir(&dir).expect("shard folder");
    for (name, bytes) in files {
        put(&dir, name, bytes);
    }
    let before = read_shard(&FsStorage, &dir).expect("read_shard before recovery");
    let first = recover(&dir, "first");
    let after = read_shard(&FsStorage, &dir).expect("read_shard after recovery");
    let files_after = snapshot(&dir);
    check_records(&after, &first);
    if single {
        check_kept(&before, &after, &first, files[0].1);
    }

    trusting_footers_ends_alike(files, &files_after, &after);

    let second = recover(&dir, "second");
    let files_again = snapshot(&dir);
    let changed: Vec<&std::path::PathBuf> = files_again
        .keys()
        .chain(files_after.keys())
        .filter(|k| files_again.get(*k) != files_after.get(*k))
        .collect();
    assert!(
        changed.is_empty(),
        "a second recovery changed the folder: {changed:?}"
    );
    let r1 = &first.recovered.report;
    let r2 = &second.recovered.report;
    assert!(
        r2.salvaged.is_empty()
            && r2.resealed.is_empty()
            && r2.quarantined.is_empty()
            && r2.footers_repaired.is_empty()
            && r2.headers_repaired.is_empty()
            && r2.cut_short.is_empty()
            && r2.unnumbered.is_empty()
            && r2.removed_partial == 0
            && r2.untrusted_checkpoint.is_none(),
        "the second recovery found work: {r2:?}"
    );
    assert_eq!(
        r2.gaps
            .iter()
            .map(|g| (g.first, g.last))
            .collect::<Vec<_>>(),
        r1.gaps
            .iter()
            .map(|g| (g.first, g.last))
            .collect::<Vec<_>>(),
        "the second recovery found other gaps"
    );
    assert!(
        r2.gaps.iter().all(|g| !g.new || g.reason_file.is_none()),
        "the second recovery reported a gap as new again: {:?}",
        r2.gaps
    );
    assert_eq!(r2.segments, r1.segments);
    assert_eq!(
        (r2.next_seq, r2.next_segment_id),
        (r1.next_seq, r1.next_segment_id)
    );
    assert_eq!(second.confirmed, first.confirmed);
    let spares = |o: &OpenedShard<_>| -> Vec<u64> {
        o.recovered.spares.iter().map(|s| s.segment_id).collect()
    };
    assert_eq!(spares(&second), spares(&first));
    assert_eq!(
        read_shard(&FsStorage, &dir).expect("read_shard after the second recovery"),
        after
    );
}

/// The same files in a folder of their own, recovered as the daemon
/// starts (intact sealed footers taken at their word), then each segment
/// that start did not read checked in id order (`check_sealed`, the
/// daemon's checker): the segment files end byte for byte as a full
/// recovery left them (`full`: that folder's files), the same files are
/// in quarantine (a `.reason` compared by name, as it names its folder)
/// and a reader reads the same records (`read`). Left out: `gap-*`
/// reasons (and a `quarantine/` folder made only for them) and the
/// shard's `checkpoint`, which a start writes from what it knows then (a
/// gap or floor a later check makes is recorded by the next start).
fn trusting_footers_ends_alike(
    files: &[(String, &Vec<u8>)],
    full: &BTreeMap<PathBuf, Option<Vec<u8>>>,
    read: &[StoredRecord],
) {
    let scratch = scratch_dir();
    let dir = scratch.path().join("shard-007");
    std::fs::create_dir(&dir).expect("shard folder");
    for (name, bytes) in files {
        put(&dir, name, bytes);
    }
    let opened = open_shard_with(&FsStorage, &dir, SHARD, SealedCheck::Footer)
        .unwrap_or_else(|e| panic!("recovery trusting footers failed: {e}"));
    let unchecked: Vec<u64> = (opened.recovered.report.unchecked().iter())
        .map(|s| s.segment_id)
        .collect();
    drop(opened);
    for id in unchecked {
        check_sealed(&FsStorage, &dir, SHARD, id)
            .unwrap_or_else(|e| panic!("checking segment {id} failed: {e}"));
    }
    let comparable = |files: &BTreeMap<PathBuf, Option<Vec<u8>>>| {
        let mut kept = files
            .iter()
            .filter(|(p, _)| {
                !p.file_name().is_some_and(|n| {
                    let n = n.to_string_lossy();
                    n.starts_with("gap-") || n == "checkpoint"
                })
            })
            .map(|(p, b)| {
                let reason = p.extension().is_some_and(|e| e == "reason");
                (without_clock(p), b.clone().filter(|_| !reason))
            })
            .collect::<BTreeMap<_, _>>();
        // A folder made only for a gap's reason is left out with it.
        let qdir = Path::new(spillway_wab::QUARANTINE_DIR);
        if !kept.keys().any(|p| p.starts_with(qdir) && p != qdir) {
            kept.remove(qdir);
        }
        kept
    };
    assert_eq!(
        comparable(&snapshot(&dir)),
        comparable(full),
        "a start trusting footers and its checks left other files than a full recovery"
    );
    assert_eq!(
        read_shard(&FsStorage, &dir).expect("read_shard after the checks"),
        read,
        "a start trusting footers and its checks left other records than a full recovery"
    );
}

/// `p` with the clock taken out of a quarantined name: numbers presumed
/// past the clock (`.seqs-<first>-<last>.after-<end>`, `<first>` the time
/// of the start that named it) become `.seqs-clock-clock+<n>.after-<end>`,
/// so two starts at different times compare alike when they presumed the
/// same count past the same end.
fn without_clock(p: &Path) -> PathBuf {
    let name = p.file_name().unwrap_or_default().to_string_lossy();
    let presumed = name.split_once(".seqs-").and_then(|(stem, rest)| {
        let (seqs, after) = rest.split_once(".after-")?;
        let (first, last) = seqs.split_once('-')?;
        let (first, last) = (first.parse::<u64>().ok()?, last.parse::<u64>().ok()?);
        Some(format!(
            "{stem}.seqs-clock-clock+{}.after-{after}",
            last.checked_sub(first)?
        ))
    });
    presumed.map_or_else(|| p.to_path_buf(), |n| p.with_file_name(n))
}

fn recover(dir: &Path, which: &str) -> OpenedShard<spillway_wab::storage::FsFile> {
    open_shard(&FsStorage, dir, SHARD).unwrap_or_else(|e| panic!("{which} recovery failed: {e}"))
}

/// What a recovered shard holds agrees with its report.
fn check_records(after: &[StoredRecord], opened: &OpenedShard<spillway_wab::storage::FsFile>) {
    let report = &opened.recovered.report;
    for pair in after.windows(2) {
        assert!(pair[0].seq < pair[1].seq, "seqs out of order: {pair:?}");
    }
    if let Some(last) = after.last() {
        assert!(
            last.seq < report.next_seq,
            "seq {} is not below next_seq {}",
            last.seq,
            report.next_seq
        );
    }
    assert_eq!(
        after.len() as u64,
        report.record_count(),
        "records read differ from the report's count"
    );
}

/// Every record a reader found before recovery is still there after it,
/// first, under the same seq; or recovery moved the whole file, unchanged,
/// to quarantine.
fn check_kept(
    before: &[StoredRecord],
    after: &[StoredRecord],
    opened: &OpenedShard<spillway_wab::storage::FsFile>,
    original: &[u8],
) {
    let same = |a: &StoredRecord, b: &StoredRecord| {
        (a.seq, a.meta, &a.payload) == (b.seq, b.meta, &b.payload)
    };
    if before.len() <= after.len() && before.iter().zip(after).all(|(a, b)| same(a, b)) {
        return;
    }
    let quarantined = &opened.recovered.report.quarantined;
    assert!(
        after.is_empty() && quarantined.len() == 1,
        "recovery dropped records a reader could read: before {before:?}, after {after:?}, \
         report {:?}",
        opened.recovered.report
    );
    let moved = std::fs::read(&quarantined[0].0).expect("the quarantined file");
    assert_eq!(
        moved, original,
        "the quarantined file is not the segment as it was"
    );
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().unwrap())
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().unwrap())
}
