//! A segment the flusher gave up on after a failed write or fdatasync,
//! and where its readers must stop.

/// A segment the flusher abandoned after a failed write or fdatasync.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Abandoned {
    pub segment_id: u64,
    /// Its first sequence number (also in its header, which may never
    /// have reached the disk).
    pub first_seq: u64,
    /// Every record before this offset was acknowledged (fsynced, or
    /// Buffered and in the page cache); the group whose write or fsync
    /// failed starts here and was nacked, so the drain delivers nothing
    /// from here on (the producer retries those records itself).
    pub acked_end: u64,
    /// Where its last successful fdatasync left it: the drain delivers up
    /// to here only (see [`spillway_wab::follow::Cut::durable_end`]).
    pub durable_end: u64,
    /// The number after the shard's last durable record when it was
    /// abandoned: where its readers stop, and once every cursor has
    /// confirmed up to here it may be deleted. The numbers after it (the
    /// nacked group's, Buffered records no fsync covered) are confirmed by
    /// no cursor: the next segment starts past them and records the jump
    /// in its header, so no restart mistakes them for a gap, and until
    /// that header is durable a restart may number on from here (no
    /// reader ever got a record under them).
    pub durable_seq: u64,
}

impl Abandoned {
    /// Where the segment ends for its readers.
    pub fn cut(&self) -> spillway_wab::follow::Cut {
        spillway_wab::follow::Cut {
            acked_end: self.acked_end,
            durable_end: self.durable_end,
            durable_seq: self.durable_seq,
        }
    }
}
