//! Payload CRCs, computed once: the trailer check of a frame also yields
//! the CRC of every large record in it, so the write path can derive each
//! record's stored CRC from it (`spillway_wab::format::record_crc_from`)
//! instead of reading the record's bytes a second time.
//!
//! Every payload byte hashed here is counted on the hashing thread
//! ([`payload_bytes_hashed`]): the test that counts touches per byte on the
//! ingest path reads it.

use std::cell::Cell;

use crate::batch::BATCH_LEN_FIELD;
use crate::frame::read_u32;

/// Records at least this long get their own CRC from the frame check.
/// Below it, hashing the record again costs less than combining CRCs (a
/// combine is up to 24 carry-less multiplications by shift and xor, about
/// what hashing 4 KiB costs with the CPU's CRC instructions).
pub const KNOWN_CRC_MIN: usize = 4096;

thread_local! {
    static HASHED: Cell<u64> = const { Cell::new(0) };
}

/// Payload bytes this thread has hashed through this crate so far.
pub fn payload_bytes_hashed() -> u64 {
    HASHED.with(Cell::get)
}

fn hash_counted(h: &mut crc32fast::Hasher, bytes: &[u8]) {
    HASHED.with(|c| c.set(c.get() + bytes.len() as u64));
    h.update(bytes);
}

/// The CRC-32 of bytes whose CRC is `crc`, `len` bytes long, appended to
/// what `h` has hashed.
fn append_known(h: &mut crc32fast::Hasher, crc: u32, len: usize) {
    h.combine(&crc32fast::Hasher::new_with_initial_len(crc, len as u64));
}

/// CRCs known for some records of a request, by position (0-based): the
/// records of [`KNOWN_CRC_MIN`] bytes or more. Empty (no allocation) for a
/// request of small records.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RecordCrcs(Vec<(u32, u32)>);

impl RecordCrcs {
    /// The CRC-32 of record `index`'s bytes, if it is known.
    pub fn get(&self, index: u32) -> Option<u32> {
        self.0
            .binary_search_by_key(&index, |&(i, _)| i)
            .ok()
            .map(|at| self.0[at].1)
    }

    /// How many records have a known CRC.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Known CRCs as (index, crc), in index order.
    pub fn as_slice(&self) -> &[(u32, u32)] {
        &self.0
    }
}

/// The CRC of a Push payload (one record), and the record's CRC if it is
/// large enough to keep.
pub(crate) fn hash_push(payload: &[u8]) -> (u32, RecordCrcs) {
    let mut h = crc32fast::Hasher::new();
    hash_counted(&mut h, payload);
    let crc = h.finalize();
    let known = if payload.len() >= KNOWN_CRC_MIN {
        vec![(0, crc)]
    } else {
        Vec::new()
    };
    (crc, RecordCrcs(known))
}

/// The CRC of a PushBatch payload, in one pass over its bytes, and the CRC
/// of each of its large records on the way. Runs of small records (and the
/// length prefixes) are hashed as one span; only a large record is hashed
/// on its own and combined in. A payload too short to hold a large record
/// is hashed whole, without walking it. The walk follows the length
/// prefixes while they make sense and hashes whatever is left as it is, so
/// the result is the payload's CRC however malformed it is (the structure
/// is checked after the CRC, in the order the spec fixes).
pub(crate) fn hash_batch(payload: &[u8]) -> (u32, RecordCrcs) {
    let mut h = crc32fast::Hasher::new();
    let mut known = Vec::new();
    // Bytes before `from` are hashed into `h`.
    let mut from = 0;
    if payload.len() >= 2 * BATCH_LEN_FIELD + KNOWN_CRC_MIN {
        let count = read_u32(&payload[..BATCH_LEN_FIELD]);
        let mut at = BATCH_LEN_FIELD;
        for index in 0..count {
            let Some(prefix) = payload.get(at..at + BATCH_LEN_FIELD) else {
                break;
            };
            let len = read_u32(prefix) as usize;
            let start = at + BATCH_LEN_FIELD;
            let Some(record) = payload.get(start..start + len) else {
                break;
            };
            if len >= KNOWN_CRC_MIN {
                hash_counted(&mut h, &payload[from..start]);
                let mut own = crc32fast::Hasher::new();
                hash_counted(&mut own, record);
                let crc = own.finalize();
                append_known(&mut h, crc, len);
                known.push((index, crc));
                from = start + len;
            }
            at = start + len;
        }
    }
    hash_counted(&mut h, &payload[from..]);
    (h.finalize(), RecordCrcs(known))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn packed(records: &[Vec<u8>]) -> Vec<u8> {
        let mut out = (records.len() as u32).to_le_bytes().to_vec();
        for r in records {
            out.extend_from_slice(&(r.len() as u32).to_le_bytes());
            out.extend_from_slice(r);
        }
        out
    }

    proptest! {
        /// Whatever the bytes (well formed, cut short, lying about lengths),
        /// the one-pass walk gives the payload's plain CRC, and every large
        /// record's own CRC.
        #[test]
        fn one_pass_equals_plain_hashing(
            lens in proptest::collection::vec(prop_oneof![1usize..64, 4090usize..9000], 0..6),
            cut in any::<prop::sample::Index>(),
            damage in any::<Option<(prop::sample::Index, u8)>>(),
        ) {
            let records: Vec<Vec<u8>> = lens.iter().enumerate()
                .map(|(i, &n)| (0..n).map(|b| (b * 31 + i) as u8).collect())
                .collect();
            let mut payload = packed(&records);
            if let Some((at, byte)) = damage {
                let at = at.index(payload.len());
                payload[at] ^= byte;
            }
            let whole = payload.len();
            let payload = &payload[..whole - cut.index(whole.min(8) + 1).min(whole)];
            let (crc, known) = hash_batch(payload);
            prop_assert_eq!(crc, crc32fast::hash(payload));
            if damage.is_none() && payload.len() == whole {
                let large: Vec<(u32, u32)> = records.iter().enumerate()
                    .filter(|(_, r)| r.len() >= KNOWN_CRC_MIN)
                    .map(|(i, r)| (i as u32, crc32fast::hash(r)))
                    .collect();
                prop_assert_eq!(known.as_slice(), &large[..]);
            }
        }
    }

    /// The count behind docs/architecture.md's "CRC passes per byte": the
    /// decoder hashes each payload byte of a frame once, and hands on the
    /// CRC of every large record.
    #[test]
    fn decoding_hashes_each_payload_byte_once() {
        use crate::{decode_request_crcs, encode_push, encode_push_batch, Tier};
        let records: Vec<Vec<u8>> = [65536usize, 5, 4096, 70_000]
            .iter()
            .map(|&n| (0..n).map(|i| (i % 251) as u8).collect())
            .collect();
        let mut buf = bytes::BytesMut::new();
        encode_push_batch(Tier::Sync, &records, &mut buf);
        let payload = buf.len() - crate::HEADER_LEN - crate::TRAILER_LEN;
        let before = payload_bytes_hashed();
        let (_, crcs) = decode_request_crcs(&mut buf, 1 << 24).unwrap().unwrap();
        assert_eq!(payload_bytes_hashed() - before, payload as u64);
        let want: Vec<(u32, u32)> = [0u32, 2, 3]
            .iter()
            .map(|&i| (i, crc32fast::hash(&records[i as usize])))
            .collect();
        assert_eq!(crcs.as_slice(), &want[..]);

        encode_push(Tier::Sync, &records[0], &mut buf);
        let before = payload_bytes_hashed();
        let (_, crcs) = decode_request_crcs(&mut buf, 1 << 24).unwrap().unwrap();
        assert_eq!(payload_bytes_hashed() - before, 65536);
        assert_eq!(crcs.get(0), Some(crc32fast::hash(&records[0])));
    }

    #[test]
    fn a_small_push_keeps_no_crc_and_a_large_one_does() {
        assert!(hash_push(b"hello").1.is_empty());
        let big = vec![7u8; KNOWN_CRC_MIN];
        let (crc, known) = hash_push(&big);
        assert_eq!(crc, crc32fast::hash(&big));
        assert_eq!(known.get(0), Some(crc));
        assert_eq!(known.get(1), None);
    }
}
