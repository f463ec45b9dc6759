//! The delivery checkpoint file: whatever it holds, reading it must not
//! panic, the readers must agree with each other, and a write after it
//! must read back (touching only the slot it writes).

use spillway_wab::checkpoint::{
    checkpoint_path, encode_legacy, parse, Parsed, CHECKPOINT_BYTES, SLOT_BYTES,
};
use spillway_wab::format::SEQ_MAX;
use spillway_wab::{load_checkpoint, read_checkpoint, write_checkpoint, FsStorage};

use crate::scratch::{put, scratch_dir};

/// Bytes of a slot that carry data (magic, generation, value, time,
/// reserved, CRC).
const SLOT_USED: usize = 40;
/// Bytes of the old one-slot format.
const LEGACY_LEN: usize = 32;

/// Control bits (the first input byte).
const SHAPE_TWO_SLOTS: u8 = 0x01;
const SHAPE_LEGACY: u8 = 0x02;
const FIX_FIRST: u8 = 0x04;
const FIX_SECOND: u8 = 0x08;

/// Input: a control byte, then the file's bytes.
///
/// Shape (bits `0x03`): `0x01` lays the bytes out as the two-slot file
/// (8 KiB: bytes 0..40 are slot 0's, 40..80 slot 1's, the rest follows
/// slot 0's 40 bytes), `0x02` as the old 32-byte file; otherwise they are
/// the file as they are. `0x04` makes slot 0 (or the old format) carry the
/// right magic and CRC, `0x08` slot 1.
///
/// Checks: `parse` classifies by size and takes the valid slot of the
/// highest generation; `read_checkpoint` and `load_checkpoint` agree with
/// it (an unreadable file is moved aside, unchanged); `write_checkpoint`
/// then writes the other slot only, one generation up (or a fresh file
/// when there is none to write in place), and reads back; and a second
/// write reads back too.
pub fn checkpoint(data: &[u8]) {
    let Some((&control, rest)) = data.split_first() else {
        return;
    };
    let bytes = shaped(control, rest);
    let parsed = parse(&bytes);
    check_parse(&bytes, &parsed);

    let scratch = scratch_dir();
    let dir = scratch.path();
    put(dir, "checkpoint", &bytes);
    let read = read_checkpoint(&FsStorage, dir);
    match (&parsed, &read) {
        (Parsed::Corrupt(_), Err(e)) => assert_eq!(e.kind(), std::io::ErrorKind::InvalidData),
        (p, Ok(v)) => assert_eq!(Some(*v), p.newest().map(|s| s.confirmed_next_seq)),
        (p, r) => panic!("parse says {p:?}, read_checkpoint says {r:?}"),
    }
    let load = load_checkpoint(&FsStorage, dir).expect("load_checkpoint");
    assert_eq!(load.corrupt, matches!(parsed, Parsed::Corrupt(_)));
    assert_eq!(load.found, !load.corrupt);
    match &load.moved_aside {
        Some(aside) => {
            assert!(load.corrupt);
            assert_eq!(std::fs::read(aside).expect("the moved file"), bytes);
            assert!(!checkpoint_path(dir).exists());
        }
        None => {
            let newest = parsed.newest().expect("a readable checkpoint");
            assert_eq!(load.confirmed, newest.confirmed_next_seq);
            assert_eq!(load.generation, newest.generation);
        }
    }

    // The value to write: any a shard can reach (at most SEQ_MAX), from
    // the input.
    let mut raw = [0u8; 8];
    let n = rest.len().min(8);
    raw[..n].copy_from_slice(&rest[..n]);
    let value = (u64::from_le_bytes(raw) ^ 0x5a) % SEQ_MAX;
    write_checkpoint(&FsStorage, dir, value).expect("write_checkpoint");
    let written = std::fs::read(checkpoint_path(dir)).expect("the written checkpoint");
    assert_eq!(read_checkpoint(&FsStorage, dir).expect("read back"), value);
    let Parsed::Slots(Some((slot, s))) = parse(&written) else {
        panic!("write_checkpoint left {:?}", parse(&written));
    };
    assert_eq!(s.confirmed_next_seq, value);
    match (&load.moved_aside, &parsed) {
        (None, Parsed::Slots(Some((old_slot, old)))) if old.generation < u64::MAX => {
            // Written in place: the other slot, one generation up; the
            // slot holding the previous checkpoint is untouched.
            assert_eq!(slot, 1 - old_slot);
            assert_eq!(s.generation, old.generation + 1);
            let kept = old_slot * SLOT_BYTES..(old_slot + 1) * SLOT_BYTES;
            assert_eq!(
                written[kept.clone()],
                bytes[kept],
                "the previous slot changed"
            );
        }
        // None readable, the old format, or no generation left: a fresh file.
        _ => assert_eq!((slot, s.generation), (0, 1), "a fresh file"),
    }
    write_checkpoint(&FsStorage, dir, value.wrapping_add(1)).expect("a second write");
    assert_eq!(
        read_checkpoint(&FsStorage, dir).expect("read back"),
        value.wrapping_add(1)
    );
}

/// The file's bytes, shaped and fixed as the control byte says.
fn shaped(control: u8, rest: &[u8]) -> Vec<u8> {
    let mut b;
    if control & 0x03 == SHAPE_TWO_SLOTS {
        b = vec![0u8; CHECKPOINT_BYTES];
        let first = &rest[..rest.len().min(SLOT_USED)];
        b[..first.len()].copy_from_slice(first);
        let second = rest
            .get(SLOT_USED..rest.len().min(2 * SLOT_USED))
            .unwrap_or(&[]);
        b[SLOT_BYTES..SLOT_BYTES + second.len()].copy_from_slice(second);
        let tail = rest.get(2 * SLOT_USED..).unwrap_or(&[]);
        let tail = &tail[..tail.len().min(SLOT_BYTES - SLOT_USED)];
        b[SLOT_USED..SLOT_USED + tail.len()].copy_from_slice(tail);
        if control & FIX_FIRST != 0 {
            fix_slot(&mut b[..SLOT_USED]);
        }
        if control & FIX_SECOND != 0 {
            fix_slot(&mut b[SLOT_BYTES..SLOT_BYTES + SLOT_USED]);
        }
    } else if control & 0x03 == SHAPE_LEGACY {
        b = vec![0u8; LEGACY_LEN];
        let n = rest.len().min(LEGACY_LEN);
        b[..n].copy_from_slice(&rest[..n]);
        if control & FIX_FIRST != 0 {
            let value = u64::from_le_bytes(b[8..16].try_into().unwrap());
            let mut legacy = encode_legacy(value);
            // encode_legacy writes no time; keep the input's, re-checksummed.
            legacy[16..28].copy_from_slice(&b[16..28]);
            let crc = crc32fast::hash(&legacy[..28]);
            legacy[28..32].copy_from_slice(&crc.to_le_bytes());
            b = legacy.to_vec();
        }
    } else {
        b = rest.to_vec();
    }
    b
}

fn fix_slot(slot: &mut [u8]) {
    slot[0..8].copy_from_slice(b"SPWCKPT2");
    let crc = crc32fast::hash(&slot[0..36]);
    slot[36..40].copy_from_slice(&crc.to_le_bytes());
}

/// `parse` against the layout of the module documentation of
/// `wab/src/checkpoint.rs`.
fn check_parse(bytes: &[u8], parsed: &Parsed) {
    match parsed {
        Parsed::Legacy(s) => {
            assert_eq!(bytes.len(), LEGACY_LEN);
            assert_eq!(s.generation, 0);
            assert!(s.confirmed_next_seq <= SEQ_MAX);
            assert_eq!(
                s.confirmed_next_seq,
                u64::from_le_bytes(bytes[8..16].try_into().unwrap())
            );
        }
        Parsed::Slots(None) => panic!("Slots(None) is never parsed (no valid slot is Corrupt)"),
        Parsed::Slots(Some((i, s))) => {
            assert_eq!(bytes.len(), CHECKPOINT_BYTES);
            let slot = |k: usize| &bytes[k * SLOT_BYTES..k * SLOT_BYTES + SLOT_USED];
            let valid = |k: usize| {
                let b = slot(k);
                b[0..8] == *b"SPWCKPT2"
                    && crc32fast::hash(&b[0..36])
                        == u32::from_le_bytes(b[36..40].try_into().unwrap())
                    && u64::from_le_bytes(b[16..24].try_into().unwrap()) <= SEQ_MAX
            };
            let generation = |k: usize| u64::from_le_bytes(slot(k)[8..16].try_into().unwrap());
            assert!(valid(*i), "slot {i} taken but not valid");
            assert_eq!(s.generation, generation(*i));
            assert_eq!(
                s.confirmed_next_seq,
                u64::from_le_bytes(slot(*i)[16..24].try_into().unwrap())
            );
            let other = 1 - i;
            if valid(other) {
                let (mine, theirs) = (generation(*i), generation(other));
                assert!(
                    mine > theirs || (mine == theirs && *i == 0),
                    "slot {i} (generation {mine}) taken over slot {other} (generation {theirs})"
                );
            }
        }
        Parsed::Corrupt(why) => {
            assert!(!why.is_empty());
        }
    }
}
