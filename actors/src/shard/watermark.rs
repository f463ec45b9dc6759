//! How far a shard's records are durable: what the flusher publishes and
//! the drain reads up to.

/// How far a shard's records are durable: everything in segments with a
/// lower id, and everything before `offset` in segment `segment_id`.
/// Published by the flusher after each successful fdatasync; the drain
/// reads up to it (and never past it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Watermark {
    pub segment_id: u64,
    pub offset: u64,
    /// Sequence number the next record will get; all below are durable.
    pub next_seq: u64,
    /// Record bytes (record headers and payloads) made durable so far: what
    /// recovery found in the segments at the daemon's start plus what every
    /// fdatasync since has covered. A running position, never reset while
    /// the process lives; the drain keeps the same count of the bytes it has
    /// confirmed, and the difference is `spillway_pending_bytes`.
    pub bytes: u64,
    /// Readers open no segment with this id or a higher one yet: the first
    /// sealed segment the start took at its footer's word whose records
    /// the shard's checker has not read (`u64::MAX`: none left). Set only
    /// through `ShardQueue::set_unchecked_from`; a published watermark
    /// keeps the value held (the flusher's is ignored), so a change wakes
    /// the readers that wait on the watermark.
    pub unchecked_from: u64,
}

impl Default for Watermark {
    fn default() -> Self {
        Watermark {
            segment_id: 0,
            offset: 0,
            next_seq: 0,
            bytes: 0,
            unchecked_from: u64::MAX,
        }
    }
}

impl Watermark {
    /// Where readers may read up to.
    pub fn tail(&self) -> spillway_wab::follow::Tail {
        spillway_wab::follow::Tail {
            segment_id: self.segment_id,
            offset: self.offset,
            unchecked_from: self.unchecked_from,
        }
    }
}
