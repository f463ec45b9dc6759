//! The records of an [`AppendBatch`](super::AppendBatch) on their way to
//! the flusher: single pushes, and PushBatch frames kept packed.

use bytes::Bytes;
use spillway_protocol::{BatchRecords, BatchSlices, RecordCrcs};

/// One record waiting to be written.
#[derive(Debug, Clone)]
pub struct PendingRecord {
    pub payload: Bytes,
    /// Packed [`spillway_wab::RecordMeta`] (tier and arrival time).
    pub meta: u64,
}

/// The records of one [`AppendBatch`], in order: single pushes, and whole
/// PushBatch frames kept packed ([`BatchRecords`]), so a frame of millions
/// of tiny records costs a few words here, not tens of bytes per record.
#[derive(Debug, Clone, Default)]
pub struct PendingRecords {
    items: Vec<(Pending, u64)>,
    count: usize,
}

/// Each carries the payload CRCs the wire check computed (a large record's,
/// see [`spillway_protocol::crc`]), so the flusher never hashes those
/// bytes again.
#[derive(Debug, Clone)]
enum Pending {
    One(Bytes, Option<u32>),
    Batch(BatchRecords, RecordCrcs),
}

impl PendingRecords {
    /// One pushed record, with its packed meta.
    pub fn push_one(&mut self, payload: Bytes, meta: u64) {
        self.push_one_checked(payload, None, meta);
    }

    /// One pushed record, with its payload's CRC-32 when the wire check
    /// computed it.
    pub fn push_one_checked(&mut self, payload: Bytes, crc: Option<u32>, meta: u64) {
        self.items.push((Pending::One(payload, crc), meta));
        self.count += 1;
    }

    /// Every record of a PushBatch frame, sharing one meta, with the CRCs
    /// the wire check computed for its large records.
    pub fn push_batch(&mut self, records: BatchRecords, crcs: RecordCrcs, meta: u64) {
        self.count += records.len();
        self.items.push((Pending::Batch(records, crcs), meta));
    }

    /// Number of records.
    pub fn len(&self) -> usize {
        self.count
    }

    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// Every record in order: (payload, packed meta, the payload's CRC if
    /// known), borrowed (no allocation, and no reference count touched per
    /// record).
    pub fn iter(&self) -> PendingIter<'_> {
        PendingIter {
            items: self.items.iter(),
            current: None,
        }
    }
}

/// Iterator of [`PendingRecords::iter`].
pub struct PendingIter<'a> {
    items: std::slice::Iter<'a, (Pending, u64)>,
    /// The item being walked, and its meta.
    current: Option<(Walk<'a>, u64)>,
}

enum Walk<'a> {
    One(Option<(&'a [u8], Option<u32>)>),
    Batch {
        records: BatchSlices<'a>,
        index: u32,
        /// The known CRCs not yet passed, (index, crc) in index order.
        crcs: &'a [(u32, u32)],
    },
}

impl<'a> Iterator for PendingIter<'a> {
    type Item = (&'a [u8], u64, Option<u32>);

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            if let Some((walk, meta)) = &mut self.current {
                let next = match walk {
                    Walk::One(p) => p.take(),
                    Walk::Batch {
                        records,
                        index,
                        crcs,
                    } => records.next().map(|p| {
                        let at = *index;
                        *index += 1;
                        let crc = match crcs.split_first() {
                            Some((&(i, crc), rest)) if i == at => {
                                *crcs = rest;
                                Some(crc)
                            }
                            _ => None,
                        };
                        (p, crc)
                    }),
                };
                if let Some((p, crc)) = next {
                    return Some((p, *meta, crc));
                }
            }
            let (item, meta) = self.items.next()?;
            let walk = match item {
                Pending::One(p, crc) => Walk::One(Some((&p[..], *crc))),
                Pending::Batch(b, crcs) => Walk::Batch {
                    records: b.slices(),
                    index: 0,
                    crcs: crcs.as_slice(),
                },
            };
            self.current = Some((walk, *meta));
        }
    }
}

impl From<Vec<PendingRecord>> for PendingRecords {
    fn from(records: Vec<PendingRecord>) -> Self {
        let mut out = PendingRecords::default();
        for r in records {
            out.push_one(r.payload, r.meta);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use spillway_protocol::crc::KNOWN_CRC_MIN;
    use spillway_protocol::{decode_request_crcs, encode_push_batch, BytesMut, Request, Tier};

    /// Each record comes out with its own CRC, or none: the flusher writes
    /// the stored CRC derived from it, so a CRC paired with the wrong
    /// record would be a record no reader accepts.
    #[test]
    fn each_record_comes_out_with_its_own_crc() {
        let sizes = [5usize, 4096, 10, 70_000, 4095, 9000];
        let records: Vec<Vec<u8>> = sizes
            .iter()
            .enumerate()
            .map(|(i, &n)| vec![i as u8 + 1; n])
            .collect();
        let mut buf = BytesMut::new();
        encode_push_batch(Tier::Sync, &records, &mut buf);
        let Some((Request::PushBatch { records: batch, .. }, crcs)) =
            decode_request_crcs(&mut buf, 1 << 24).unwrap()
        else {
            panic!("not a batch");
        };
        let one = vec![9u8; 5000];
        let mut pending = PendingRecords::default();
        pending.push_one_checked(Bytes::from(one.clone()), Some(crc32fast::hash(&one)), 1);
        pending.push_batch(batch.clone(), crcs, 2);
        pending.push_batch(batch, RecordCrcs::default(), 3);
        let got: Vec<(usize, u64, Option<u32>)> = pending
            .iter()
            .map(|(p, meta, crc)| (p.len(), meta, crc))
            .collect();
        let mut want = vec![(5000, 1, Some(crc32fast::hash(&one)))];
        for r in &records {
            want.push((
                r.len(),
                2,
                (r.len() >= KNOWN_CRC_MIN).then(|| crc32fast::hash(r)),
            ));
        }
        for r in &records {
            want.push((r.len(), 3, None));
        }
        assert_eq!(got, want);
    }
}
