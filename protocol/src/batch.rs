//! The records of a PushBatch, kept packed as they arrived.
//!
//! A PushBatch of 16 MiB can carry over three million 1-byte records. One
//! `Bytes` per record (32 bytes each, plus what every later stage adds per
//! record) made such a frame cost ~381 MB in the daemon, measured. So the
//! decoded batch keeps the validated payload as one `Bytes` and walks its
//! length prefixes on demand: the frame costs its own size plus a few
//! words, however many records it holds.

use bytes::{BufMut, Bytes, BytesMut};

use crate::frame::read_u32;

/// Bytes of the record count at the front of a PushBatch payload, and of
/// each record's length prefix.
pub(crate) const BATCH_LEN_FIELD: usize = 4;

/// The records of a validated PushBatch payload, in order (at least one,
/// none empty). Cloning is cheap (one reference count).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BatchRecords {
    /// `(u32 LE length, bytes)` pairs, the count field stripped; validated
    /// by the decoder (or built by [`BatchRecords::from`]).
    body: Bytes,
    count: u32,
}

impl BatchRecords {
    /// Wrap a payload whose structure the decoder has already validated.
    pub(crate) fn from_validated(payload: Bytes) -> Self {
        let count = read_u32(&payload[..BATCH_LEN_FIELD]);
        BatchRecords {
            body: payload.slice(BATCH_LEN_FIELD..),
            count,
        }
    }

    /// Number of records.
    pub fn len(&self) -> usize {
        self.count as usize
    }

    /// Always false for a decoded batch (the decoder refuses a count of 0).
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// Record bytes, without the length prefixes.
    pub fn payload_bytes(&self) -> usize {
        self.body.len() - BATCH_LEN_FIELD * self.count as usize
    }

    /// The records in order, as zero-copy slices of the frame.
    pub fn iter(&self) -> BatchIter<'_> {
        BatchIter {
            body: &self.body,
            at: 0,
            left: self.count,
        }
    }

    /// The records in order, borrowed from the frame (no reference count
    /// is touched per record: the daemon's write path uses this).
    pub fn slices(&self) -> BatchSlices<'_> {
        BatchSlices {
            body: &self.body,
            at: 0,
            left: self.count,
        }
    }

    /// The records as a vector (one `Bytes` each; for tests and small batches).
    pub fn to_vec(&self) -> Vec<Bytes> {
        self.iter().collect()
    }
}

/// Packs `records` into the wire layout (copies; for tests and clients that
/// build a batch by hand).
///
/// # Panics
/// If there are more than `u32::MAX` records or one is longer than `u32::MAX` bytes.
impl<T: AsRef<[u8]>> From<Vec<T>> for BatchRecords {
    fn from(records: Vec<T>) -> Self {
        let bytes: usize = records.iter().map(|r| r.as_ref().len()).sum();
        let mut body = BytesMut::with_capacity(bytes + BATCH_LEN_FIELD * records.len());
        for r in &records {
            let r = r.as_ref();
            body.put_u32_le(u32::try_from(r.len()).expect("record longer than u32::MAX"));
            body.put_slice(r);
        }
        BatchRecords {
            body: body.freeze(),
            count: u32::try_from(records.len()).expect("more than u32::MAX records"),
        }
    }
}

/// Borrowed records of a [`BatchRecords`], in order.
pub struct BatchSlices<'a> {
    body: &'a [u8],
    at: usize,
    left: u32,
}

impl<'a> Iterator for BatchSlices<'a> {
    type Item = &'a [u8];

    fn next(&mut self) -> Option<&'a [u8]> {
        if self.left == 0 {
            return None;
        }
        self.left -= 1;
        let len = read_u32(&self.body[self.at..self.at + BATCH_LEN_FIELD]) as usize;
        let start = self.at + BATCH_LEN_FIELD;
        self.at = start + len;
        Some(&self.body[start..start + len])
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (self.left as usize, Some(self.left as usize))
    }
}

/// Iterator over the records of a [`BatchRecords`].
pub struct BatchIter<'a> {
    body: &'a Bytes,
    at: usize,
    left: u32,
}

impl Iterator for BatchIter<'_> {
    type Item = Bytes;

    fn next(&mut self) -> Option<Bytes> {
        if self.left == 0 {
            return None;
        }
        self.left -= 1;
        let len = read_u32(&self.body[self.at..self.at + BATCH_LEN_FIELD]) as usize;
        let start = self.at + BATCH_LEN_FIELD;
        self.at = start + len;
        Some(self.body.slice(start..start + len))
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (self.left as usize, Some(self.left as usize))
    }
}

impl ExactSizeIterator for BatchIter<'_> {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn packed_records_iterate_in_order() {
        let b = BatchRecords::from(vec![&b"a"[..], b"bcd", b"ef"]);
        assert_eq!((b.len(), b.payload_bytes()), (3, 6));
        assert_eq!(b.to_vec(), vec![&b"a"[..], b"bcd", b"ef"]);
        assert_eq!(b.iter().len(), 3);
        assert!(b.slices().eq(b
            .iter()
            .map(|r| r.to_vec())
            .collect::<Vec<_>>()
            .iter()
            .map(|v| &v[..])));
    }
}
