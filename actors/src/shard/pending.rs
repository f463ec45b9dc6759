//! The records of an [`AppendBatch`](super::AppendBatch) on their way to
//! the flusher: single pushes, and PushBatch frames kept packed.

use bytes::Bytes;
use spillway_protocol::{BatchRecords, BatchSlices};

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

#[derive(Debug, Clone)]
enum Pending {
    One(Bytes),
    Batch(BatchRecords),
}

impl PendingRecords {
    /// One pushed record, with its packed meta.
    pub fn push_one(&mut self, payload: Bytes, meta: u64) {
        self.items.push((Pending::One(payload), meta));
        self.count += 1;
    }

    /// Every record of a PushBatch frame, sharing one meta.
    pub fn push_batch(&mut self, records: BatchRecords, meta: u64) {
        self.count += records.len();
        self.items.push((Pending::Batch(records), meta));
    }

    /// Number of records.
    pub fn len(&self) -> usize {
        self.count
    }

    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// Every record in order: (payload, packed meta), borrowed (no
    /// allocation, and no reference count touched per record).
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
    One(Option<&'a [u8]>),
    Batch(BatchSlices<'a>),
}

impl<'a> Iterator for PendingIter<'a> {
    type Item = (&'a [u8], u64);

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            if let Some((walk, meta)) = &mut self.current {
                let next = match walk {
                    Walk::One(p) => p.take(),
                    Walk::Batch(b) => b.next(),
                };
                if let Some(p) = next {
                    return Some((p, *meta));
                }
            }
            let (item, meta) = self.items.next()?;
            let walk = match item {
                Pending::One(p) => Walk::One(Some(&p[..])),
                Pending::Batch(b) => Walk::Batch(b.slices()),
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
