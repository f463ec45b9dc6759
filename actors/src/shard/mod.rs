//! A shard: its append queue (the flusher's mailbox, what connections
//! and the flusher share), the [`flusher`] thread that writes and syncs
//! it, the [`sealer`] that preallocates and seals its segments, the
//! [`checker`] that checks the sealed segments a start trusted, its
//! health and counters, and the WAB byte [`budget`] all shards share.
//!
//! Connections push [`AppendBatch`]es straight into the queue instead of
//! sending an actor message per batch: the flusher thread takes *everything*
//! queued at once (group commit), which an actix mailbox cannot express, and
//! skipping an actor hop saves a thread wake (~40-50 µs on an idle VM core)
//! on every Sync ack.
//!
//! One concept per file: [`PendingRecords`] (the records of a batch),
//! [`AppendBatch`] and [`GroupBound`] (what is queued, and how much a
//! group takes), [`Doorbell`] and [`Until`] (how readers wait for the
//! watermark), [`FreeSegments`] (delivered segments to write over),
//! [`ShardHealth`], [`ShardStats`], [`Watermark`] (how far
//! records are durable), [`Abandoned`] (a segment given up on) and
//! [`ShardQueue`] (the queue that holds them together).

mod abandoned;
mod append;
pub mod budget;
pub mod checker;
mod durable;
pub mod flusher;
mod free;
mod health;
mod pending;
mod queue;
pub mod sealer;
mod stats;
mod watermark;

pub use abandoned::Abandoned;
pub use append::{AppendBatch, CommitTarget, GroupBound, GROUP_RECORDS_MAX};
pub use durable::{Doorbell, DurableWatch, Until};
pub use free::FreeSegments;
pub use health::{nack_for, ShardHealth};
pub use pending::{PendingIter, PendingRecord, PendingRecords};
pub use queue::{ShardQueue, SPIN_BEFORE_SLEEP_DEFAULT};
pub use stats::ShardStats;
pub use watermark::Watermark;
