//! What a connection hands a shard ([`AppendBatch`]), who is told when it
//! is durable ([`CommitTarget`]), and how much one group commit takes
//! ([`GroupBound`]).

use std::sync::Arc;

use spillway_protocol::NackReason;

use super::PendingRecords;

/// Who is told that an [`AppendBatch`] is durable. Called on the flusher's
/// thread, so it must be quick and must not block: a connection writes its
/// acks straight to its socket from here (saving the wake of its arbiter
/// thread on every ack) and otherwise hands over to its actor.
pub trait CommitTarget: Send + Sync {
    /// The batch `token` is durable at its tier (`Ok`, with the sequence
    /// number of its first record) or was not written (`Err`, the nack every
    /// frame of the batch gets).
    fn committed(&self, token: u64, result: Result<u64, NackReason>);
}

/// Everything one connection decoded from one read, headed for one shard.
pub struct AppendBatch {
    pub records: PendingRecords,
    /// Payload bytes in `records`.
    pub bytes: u64,
    /// True if any record is Sync or Batched: the group must be fdatasynced
    /// before this batch is acknowledged.
    pub needs_fsync: bool,
    pub token: u64,
    reply: Option<Arc<dyn CommitTarget>>,
}

impl AppendBatch {
    pub fn new(
        records: impl Into<PendingRecords>,
        bytes: u64,
        needs_fsync: bool,
        token: u64,
        reply: Arc<dyn CommitTarget>,
    ) -> Self {
        AppendBatch {
            records: records.into(),
            bytes,
            needs_fsync,
            token,
            reply: Some(reply),
        }
    }

    /// Identifies the connection that sent the batch (its reply target),
    /// so a group can keep each connection's batches in order.
    pub fn sender_id(&self) -> usize {
        self.reply
            .as_ref()
            .map_or(0, |r| Arc::as_ptr(r) as *const () as usize)
    }

    /// Answer the sender. Called exactly once; a batch dropped unanswered
    /// (a flusher that panicked) answers `InternalError` from `Drop`.
    pub fn complete(mut self, result: Result<u64, NackReason>) {
        if let Some(reply) = self.reply.take() {
            reply.committed(self.token, result);
        }
    }
}

impl Drop for AppendBatch {
    fn drop(&mut self) {
        if let Some(reply) = self.reply.take() {
            reply.committed(self.token, Err(NackReason::InternalError));
        }
    }
}

/// How much one group commit takes besides its first batch (which is
/// always taken whole).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GroupBound {
    /// Payload bytes (`wab.group_bytes_max`): a huge record's write and
    /// fsync is not shared by hundreds of MiB more.
    pub bytes: u64,
    /// Records: every record costs CRC and header work before the write,
    /// so without this bound a flood of tiny records (4 MiB of 5-byte
    /// payloads is 800,000 records) would make one group's preparation,
    /// and every ack riding in it, wait for all of them.
    pub records: usize,
}

/// Default [`GroupBound::records`]: on the order of a millisecond of
/// per-record work, while the records per fsync stay far past where group
/// commit stops paying (the bench's pipelined scenarios put ~1,000 records
/// in a group).
pub const GROUP_RECORDS_MAX: usize = 16 * 1024;
