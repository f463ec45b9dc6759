//! The dead-letter store read back: whatever its segment files hold, the
//! store opens, lists exactly the envelopes that decode, and writes them
//! back unchanged.

use std::collections::BTreeMap;
use std::path::Path;

use bytes::Bytes;
use spillway_wab::deadletter::{DeadLetter, DeadLetterStore, DEAD_LETTER_SHARD};
use spillway_wab::format::{open_name, sealed_name, RecordMeta};
use spillway_wab::{preallocate, read_shard, seal, ActiveSegment, AppendRecord, FsStorage};

use crate::scratch::{put, scratch_dir, snapshot};

/// Control bit (the first input byte): the rest is records, not a file.
const RECORDS: u8 = 0x01;

/// The fixed part of an envelope: "SPDL", shard, seq, arrival time, tier,
/// dead-letter time, reason length.
const ENVELOPE_FIXED: usize = 4 + 4 + 8 + 8 + 1 + 8 + 4;

/// Input: a control byte, then bytes.
///
/// With bit `0x01` clear the bytes are a dead-letter segment file, written
/// sealed and again as `.open`; with it set they are records (each a
/// u16 LE length and that many bytes; empty ones are skipped), dead-letter
/// envelopes or not, stored in one valid sealed segment of the store.
///
/// Checks: the store opens (recovering its folder) and lists without
/// failing; the list is exactly what [`decode`] (the envelope of
/// `wab/src/deadletter.rs` written out plainly) makes of the records a
/// reader finds, one per `(shard, seq)`, the last stored winning, ordered
/// by dead-letter time, shard and seq; reopening changes no file and lists
/// the same; appending the list to a fresh store lists it back (decode →
/// encode → decode); removing a selection returns it and keeps the rest.
pub fn dead_letter(data: &[u8]) {
    let Some((&control, rest)) = data.split_first() else {
        return;
    };
    if control & RECORDS != 0 {
        let scratch = scratch_dir();
        let dir = scratch.path().join("dead-letter");
        std::fs::create_dir(&dir).expect("dead-letter folder");
        write_segment(&dir, &records(rest));
        check_store(&dir, true);
    } else {
        for name in [sealed_name(1), open_name(1)] {
            let scratch = scratch_dir();
            let dir = scratch.path().join("dead-letter");
            std::fs::create_dir(&dir).expect("dead-letter folder");
            put(&dir, &name, rest);
            check_store(&dir, false);
        }
    }
}

/// Splits `rest` into records: u16 LE length, then the bytes.
fn records(mut rest: &[u8]) -> Vec<&[u8]> {
    let mut out = Vec::new();
    while rest.len() >= 2 {
        let len = u16::from_le_bytes([rest[0], rest[1]]) as usize;
        rest = &rest[2..];
        let record = &rest[..len.min(rest.len())];
        rest = &rest[record.len()..];
        if !record.is_empty() {
            out.push(record);
        }
    }
    out
}

/// One sealed dead-letter segment holding `payloads`, as the store writes it.
fn write_segment(dir: &Path, payloads: &[&[u8]]) {
    if payloads.is_empty() {
        return;
    }
    let bytes: u64 = payloads.iter().map(|p| 16 + p.len() as u64).sum();
    let pre = preallocate(&FsStorage, dir, 0, 64 + bytes + 40).expect("preallocate");
    let mut segment = ActiveSegment::start(pre, DEAD_LETTER_SHARD, 0);
    let meta = RecordMeta {
        tier: 1,
        arrival_unix_us: 1,
    }
    .pack();
    let records: Vec<AppendRecord<'_>> = payloads
        .iter()
        .map(|payload| AppendRecord {
            payload,
            meta,
            payload_crc: None,
        })
        .collect();
    segment.append(&records).expect("append");
    segment.sync().expect("sync");
    seal(&FsStorage, dir, segment.into_sealing()).expect("seal");
}

/// Opens, lists, reopens, round-trips and removes, checking each step.
fn check_store(dir: &Path, round_trip: bool) {
    let mut store = DeadLetterStore::open(FsStorage, dir).expect("opening the store");
    let listed = store.list().expect("listing");
    let found = read_shard(&FsStorage, dir).expect("reading the store's segments");
    assert_eq!(
        listed,
        model(found.iter().map(|r| &r.payload)),
        "the list is not what the records hold"
    );
    let files = snapshot(dir);
    drop(store);
    let reopened = DeadLetterStore::open(FsStorage, dir).expect("reopening the store");
    assert_eq!(snapshot(dir), files, "reopening changed the store's files");
    assert_eq!(reopened.list().expect("listing again"), listed);
    store = reopened;
    if !round_trip {
        return;
    }

    let scratch = scratch_dir();
    let fresh = scratch.path().join("dead-letter");
    let mut copy = DeadLetterStore::open(FsStorage, &fresh).expect("a fresh store");
    copy.append(&listed).expect("appending the list");
    assert_eq!(
        copy.list().expect("listing the copy"),
        listed,
        "decode → encode → decode"
    );

    let pick = |l: &DeadLetter| l.seq.is_multiple_of(2);
    let removed = store.remove_where(pick).expect("removing");
    let (expect_removed, expect_kept): (Vec<_>, Vec<_>) =
        listed.iter().cloned().partition(|l| pick(l));
    assert_eq!(removed, expect_removed);
    assert_eq!(store.list().expect("listing after removal"), expect_kept);
    drop(store);
    let reopened = DeadLetterStore::open(FsStorage, dir).expect("reopening after removal");
    assert_eq!(reopened.list().expect("listing"), expect_kept);
}

/// What the store must list for these record payloads.
fn model<'a>(payloads: impl Iterator<Item = &'a Bytes>) -> Vec<DeadLetter> {
    let mut by_id = BTreeMap::new();
    for raw in payloads {
        if let Some(letter) = decode(raw) {
            by_id.insert((letter.shard, letter.seq), letter);
        }
    }
    let mut all: Vec<DeadLetter> = by_id.into_values().collect();
    all.sort_by_key(|l| (l.dead_lettered_unix_us, l.shard, l.seq));
    all
}

/// One envelope (layout below; arrival 5, tier 1) as a record of this
/// target's record mode (u16 length first), for the proptests and the seed
/// corpus.
pub fn envelope_record(shard: u32, seq: u64, dl_us: u64, reason: &[u8], payload: &[u8]) -> Vec<u8> {
    let mut e = b"SPDL".to_vec();
    e.extend_from_slice(&shard.to_le_bytes());
    e.extend_from_slice(&seq.to_le_bytes());
    e.extend_from_slice(&5u64.to_le_bytes());
    e.push(1);
    e.extend_from_slice(&dl_us.to_le_bytes());
    e.extend_from_slice(&(reason.len() as u32).to_le_bytes());
    e.extend_from_slice(reason);
    e.extend_from_slice(payload);
    let mut out = (e.len() as u16).to_le_bytes().to_vec();
    out.extend_from_slice(&e);
    out
}

/// The envelope: `"SPDL" | shard u32 | seq u64 | arrival_unix_us u64 | tier
/// u8 | dead_lettered_unix_us u64 | reason_len u32 | reason | payload`.
fn decode(raw: &Bytes) -> Option<DeadLetter> {
    if raw.len() < ENVELOPE_FIXED || raw[0..4] != *b"SPDL" {
        return None;
    }
    let u32_at = |at: usize| u32::from_le_bytes(raw[at..at + 4].try_into().unwrap());
    let u64_at = |at: usize| u64::from_le_bytes(raw[at..at + 8].try_into().unwrap());
    let reason_end = ENVELOPE_FIXED.checked_add(u32_at(33) as usize)?;
    if raw.len() < reason_end {
        return None;
    }
    Some(DeadLetter {
        shard: u32_at(4),
        seq: u64_at(8),
        arrival_unix_us: u64_at(16),
        tier: raw[24],
        dead_lettered_unix_us: u64_at(25),
        reason: String::from_utf8_lossy(&raw[ENVELOPE_FIXED..reason_end]).into_owned(),
        payload: raw.slice(reason_end..),
    })
}
