//! Helpers shared by the WAB integration tests.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::fs;
use std::io;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use spillway_wab::format::{encode_record_header, record_crc, Salt, RECORD_HEADER_LEN};
use spillway_wab::{
    ActiveSegment, AppendRecord, End, Opened, RecordMeta, SegmentHeader, SegmentReader, Storage,
    StorageFile, StoredRecord,
};

/// A record a test wrote, with the sequence number it should carry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rec {
    pub seq: u64,
    pub payload: Vec<u8>,
    pub meta: RecordMeta,
}

/// Deterministic payload of `len` bytes for record `i`; never a zero byte,
/// so a payload can not be mistaken for preallocated space.
pub fn payload(i: u64, len: usize) -> Vec<u8> {
    (0..len)
        .map(|j| (((i * 131 + j as u64 * 7) % 251) + 1) as u8)
        .collect()
}

pub fn meta(i: u64) -> RecordMeta {
    RecordMeta {
        tier: (i % 3) as u8 + 1,
        arrival_unix_us: 1_780_000_000_000_000 + i * 1_003,
    }
}

/// Records `first..first + count`, payload sizes varying with the seq.
pub fn recs(first: u64, count: u64, size: impl Fn(u64) -> usize) -> Vec<Rec> {
    (first..first + count)
        .map(|s| Rec {
            seq: s,
            payload: payload(s, size(s)),
            meta: meta(s),
        })
        .collect()
}

/// Append `group` as one group and check the sequence number it got.
pub fn append<F: StorageFile>(seg: &mut ActiveSegment<F>, group: &[Rec]) -> io::Result<u64> {
    let records: Vec<AppendRecord<'_>> = group
        .iter()
        .map(|r| AppendRecord {
            payload: &r.payload,
            meta: r.meta.pack(),
            // Large records come with their CRC, as the wire check gives
            // them: the stored CRC derived from it must read back.
            payload_crc: (r.payload.len() >= 4096).then(|| crc32fast::hash(&r.payload)),
        })
        .collect();
    let first = seg.append(&records)?;
    if let Some(r) = group.first() {
        assert_eq!(first, r.seq, "append returned the wrong first seq");
    }
    Ok(first)
}

/// The on-disk bytes of `group` in a segment salted by `salt` (preceded
/// by the segment header if given).
pub fn group_bytes(salt: Salt, header: Option<&SegmentHeader>, group: &[Rec]) -> Vec<u8> {
    let mut out = Vec::new();
    if let Some(h) = header {
        out.extend_from_slice(&h.encode());
    }
    for r in group {
        let m = r.meta.pack();
        out.extend_from_slice(&encode_record_header(
            r.payload.len() as u32,
            salt.apply(record_crc(m, &r.payload)),
            m,
        ));
        out.extend_from_slice(&r.payload);
    }
    out
}

pub fn disk_len(group: &[Rec]) -> u64 {
    group
        .iter()
        .map(|r| (RECORD_HEADER_LEN + r.payload.len()) as u64)
        .sum()
}

/// Assert that `got` holds exactly `want`: seqs, payloads and metadata.
#[track_caller]
pub fn assert_records(got: &[StoredRecord], want: &[Rec]) {
    let got_seqs: Vec<u64> = got.iter().map(|r| r.seq).collect();
    let want_seqs: Vec<u64> = want.iter().map(|r| r.seq).collect();
    assert_eq!(got_seqs, want_seqs, "record sequence numbers differ");
    for (g, w) in got.iter().zip(want) {
        assert_eq!(
            g.payload.as_ref(),
            w.payload.as_slice(),
            "payload of seq {} differs",
            w.seq
        );
        assert_eq!(g.meta, w.meta, "meta of seq {} differs", w.seq);
    }
}

/// Every record of one segment file, and why the reader stopped.
pub fn read_segment<S: Storage>(
    storage: &S,
    path: &Path,
) -> (SegmentHeader, Vec<StoredRecord>, End, u64) {
    let mut r = match SegmentReader::open(storage, path).unwrap() {
        Opened::Reader(r) => r,
        Opened::Unused(_) => panic!("{} has an all-zero header", path.display()),
        Opened::BadHeader(e) => panic!("{} has a bad header: {e}", path.display()),
    };
    let mut out = Vec::new();
    while let Some(rec) = r.next().unwrap() {
        out.push(rec);
    }
    (
        *r.header(),
        out,
        r.end().cloned().expect("reader stopped without an end"),
        r.offset(),
    )
}

/// Every file under `dir` (relative path → contents); directories map to
/// `None`.
pub fn snapshot(dir: &Path) -> BTreeMap<String, Option<Vec<u8>>> {
    let mut out = BTreeMap::new();
    fn walk(root: &Path, at: &Path, out: &mut BTreeMap<String, Option<Vec<u8>>>) {
        for e in fs::read_dir(at).unwrap() {
            let p = e.unwrap().path();
            let rel = p.strip_prefix(root).unwrap().to_string_lossy().into_owned();
            if p.is_dir() {
                out.insert(rel, None);
                walk(root, &p, out);
            } else {
                out.insert(rel, Some(fs::read(&p).unwrap()));
            }
        }
    }
    walk(dir, dir, &mut out);
    out
}

/// File names directly in `dir`, sorted.
pub fn names(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

/// Copy a directory tree (nothing if `src` does not exist).
pub fn copy_dir(src: &Path, dst: &Path) {
    if !src.exists() {
        return;
    }
    fs::create_dir_all(dst).unwrap();
    for e in fs::read_dir(src).unwrap() {
        let p = e.unwrap().path();
        let to = dst.join(p.file_name().unwrap());
        if p.is_dir() {
            copy_dir(&p, &to);
        } else {
            fs::copy(&p, &to).unwrap();
        }
    }
}

pub fn mode(path: &Path) -> u32 {
    fs::metadata(path).unwrap().permissions().mode() & 0o777
}

/// Flip every bit of the byte at `at`.
pub fn flip(path: &Path, at: u64) {
    let mut b = fs::read(path).unwrap();
    b[at as usize] ^= 0xff;
    fs::write(path, b).unwrap();
}
