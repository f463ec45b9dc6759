//! A shard's health, as every connection reads it, and the nack a storage
//! error gives.

use std::io;

use spillway_protocol::NackReason;

/// Health of a shard, readable by every connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum ShardHealth {
    /// Recovering or restarting: batches queue up and wait.
    Starting = 0,
    Running = 1,
    /// Stopped for good: the supervisor gave up restarting it, or the
    /// daemon is shutting down. Pushes get InternalError until restart.
    Failed = 2,
    /// Cannot write right now (no segment: the disk is full, or writes and
    /// fsyncs keep failing). Pushes are refused at once (Overloaded for a
    /// full disk, else InternalError) while the flusher retries with
    /// backoff; it turns `Running` by itself once a fresh segment works.
    Unwritable = 3,
}

/// The nack for records a storage error kept off the disk: a full disk is
/// Overloaded (retryable, and delivery frees space), anything else
/// InternalError.
pub fn nack_for(e: &io::Error) -> NackReason {
    if spillway_wab::storage::is_no_space(e) {
        NackReason::Overloaded
    } else {
        NackReason::InternalError
    }
}
