//! The Drain: one per shard. Its OS thread follows the shard's durable tail,
//! forms batches, hands them to the sink through the [`SinkHost`], and on
//! commit advances the shard's checkpoint and deletes fully confirmed
//! sealed segments (releasing their bytes from the WAB budget, so
//! backpressure lifts when delivery catches up).
//!
//! - Reads only durable records: up to the flusher's [`Watermark`], in the
//!   active segment too (delivery does not wait for a seal).
//! - One batch in flight per shard; order within the shard is preserved.
//! - Batches close at `max_records`, `max_bytes` (the smaller of the config
//!   and the sink's limits) or `linger` after their first record was read.
//! - Transient failures retry forever by default, with exponential backoff
//!   and full jitter capped at `retry_max`, honouring the sink's
//!   retry-after; with `max_retry_duration` set, a batch failing that long is
//!   dead-lettered. Permanent rejections go to the dead-letter store (fsynced
//!   before the checkpoint moves past them).
//!
//! The actor half exists for supervision, like the flusher's.
//!
//! One concept per file: `actor` (the supervised actor and the thread's
//! main loop: read, batch, confirm, checkpoint, remove finished segments),
//! `sink_host` (the current sink, its instance, panics and reloads),
//! `delivery` (one batch: offer it, classify the sink's outcome,
//! dead-letter the rejected records and confirm), `retry` (backoff with
//! jitter, retry-after, probing while backing off). The records come from
//! [`spillway_wab::follow::ShardFollower`], which follows the shard's
//! segment files; this folder never builds a file name.

mod actor;
mod delivery;
mod retry;
mod sink_host;

use std::sync::atomic::AtomicU64;

pub use actor::{Drain, DrainConfig, StopDrain};
pub use sink_host::{DrainSettings, SinkHost, SinkMaker, SinkSlot};

/// Counters of one shard's delivery.
#[derive(Debug, Default)]
pub struct DrainStats {
    pub delivered_records: AtomicU64,
    pub delivered_batches: AtomicU64,
    pub retries: AtomicU64,
    pub dead_lettered: AtomicU64,
    pub sink_restarts: AtomicU64,
    pub segments_deleted: AtomicU64,
    /// Every record below this sequence number is confirmed.
    pub checkpoint: AtomicU64,
}
