//! Delivery: every sink has, per shard, a [`Cursor`] (its own reader, batch,
//! retries, checkpoint file and dead letters) run by a [`Drain`] thread;
//! each shard has one [`Retention`], the only code that deletes its
//! segments, once every sink's cursor has passed them.
//!
//! - Reads only durable records: up to the flusher's [`crate::Watermark`], in the
//!   active segment too (delivery does not wait for a seal). Records are
//!   read from the segment files by each cursor (the page cache serves the
//!   second reader); nothing is copied per sink in memory.
//! - One batch in flight per cursor by default, on the cursor's thread:
//!   order within the shard is preserved for each sink. With
//!   `batches_in_flight` N or `"adaptive"`, up to the limit on worker
//!   threads (`in_flight`); answers come back in any order and the cursor
//!   confirms over the contiguous prefix of finished batches only. A sink
//!   that fails holds only its own cursor.
//! - Batches close at `batch_records_max`, `batch_bytes_max` (the smaller of the config
//!   and the sink's limits) or `linger` after their first record was read.
//! - The cursor file is written after every confirmed batch, before the
//!   next one is offered: a crash redelivers at most the batch in flight.
//! - Transient failures retry forever by default, with exponential backoff
//!   and full jitter capped at `retry_max`, honouring the sink's
//!   retry-after; with `retry_duration_max_ms` set, a batch failing that long is
//!   dead-lettered. Permanent rejections go to the sink's dead-letter store
//!   (fsynced before the cursor moves past them).
//! - A batch that fails twice in a row is halved until the records that
//!   fail are alone (`poison`): the rest is delivered, and a lone record
//!   the sink panics on while it takes others is dead-lettered.
//!
//! One concept per file: `cursor` (one sink's view of one shard and one
//! step of its loop), `retention` (deleting what every sink passed),
//! `actor` (the supervised actor and its thread), `sink_host` (the current
//! sink, its instance, panics and reloads), `pending` (the records read
//! and not yet confirmed, the batches offered over them, and what an
//! answer settles), `in_flight` (the limit on batches out, AIMD, and the
//! worker threads that run them), `retry` (backoff with jitter, retry-after, probing while
//! backing off), `poison` (halving a failing batch, setting a poison
//! record aside), `board` (what the admin side reads: every sink's figures).
//! The records come from [`spillway_wab::follow::ShardFollower`]; this
//! folder never builds a segment's file name.

mod actor;
mod board;
mod control;
mod cursor;
mod in_flight;
mod pending;
mod poison;
mod requeue;
mod retention;
mod retry;
mod sink_host;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;

use crate::histogram::{Histogram, SinkMicros};

pub use actor::{Drain, RetireDrain, StopDrain};
pub use board::{DeliveryBoard, SinkFigures};
pub use control::{CursorControl, RewindTo};
pub use cursor::{Cursor, CursorConfig, DrainWait};
pub use in_flight::Limiter;
pub use requeue::Requeue;
pub use retention::{Membership, Retention, RetentionStats};
pub use sink_host::{SinkHost, SinkSlot};

/// One sink's delivery from one shard as the admin side sees it: its
/// figures (the operator's requests are a [`CursorControl`] of their own).
#[derive(Debug, Default)]
pub struct DrainStats {
    pub delivered_records: AtomicU64,
    pub delivered_batches: AtomicU64,
    pub retries: AtomicU64,
    pub dead_lettered: AtomicU64,
    pub sink_restarts: AtomicU64,
    /// Every record below this sequence number is confirmed.
    pub checkpoint: AtomicU64,
    /// Whether this shard's sink delivers, and if not since when and why
    /// (`ctl health`, `GET /ready`).
    pub sink: Mutex<SinkHealth>,
    /// Arrival time (µs since the epoch) of the oldest record not yet
    /// confirmed by the sink, as far as the drain has read; 0 when it holds
    /// none.
    pub oldest_pending_arrival_us: AtomicU64,
    /// Record bytes confirmed, on the flusher's running count of durable
    /// record bytes ([`crate::Watermark::bytes`]): the difference is what is
    /// pending.
    pub confirmed_bytes: AtomicU64,
    /// `confirmed_bytes` has been measured since the cursor started (its
    /// reader passed the records below it): until then it says nothing,
    /// and a backlog read from it is not to be trusted.
    pub backlog_measured: AtomicBool,
    /// How long each batch offered to the sink took (µs), whatever its
    /// outcome.
    pub sink_request_us: Histogram<SinkMicros>,
    /// When the call into the sink that has not returned yet began (ms
    /// since the epoch): a delivery, with its instance's creation and
    /// health check, or a probe while backing off; 0 when none is
    /// outstanding. `GET /ready` reads it: a sink that hangs is not ready
    /// long before its request times out.
    pub sink_call_since_unix_ms: AtomicU64,
    /// Records this sink skipped (its backlog passed `lag_bytes_max` with
    /// `on_lag = "skip"`): never delivered to it; each range is logged and
    /// written to the sink's `skipped` file.
    pub records_skipped: AtomicU64,
    /// Batches halved after failing twice in a row, to find the records
    /// that fail (see `poison`).
    pub batch_splits: AtomicU64,
    /// Records set aside as poison: failing alone while the sink took
    /// others, dead-lettered (counted in `dead_lettered` too).
    pub poison_records: AtomicU64,
    /// Batches offered to the sink and not yet answered.
    pub in_flight: AtomicU64,
    /// How many may be out at once: `batches_in_flight`, or what an
    /// adaptive limit has learned.
    pub in_flight_limit: AtomicU64,
}

impl DrainStats {
    /// Marks a call into the sink as outstanding until the guard drops.
    pub(crate) fn sink_call(&self) -> SinkCall<'_> {
        self.sink_call_since_unix_ms
            .store(now_unix_ms().max(1), Ordering::Relaxed);
        SinkCall(self)
    }
}

/// A call into the sink in progress ([`DrainStats::sink_call`]).
pub(crate) struct SinkCall<'a>(&'a DrainStats);

impl Drop for SinkCall<'_> {
    fn drop(&mut self) {
        self.0.sink_call_since_unix_ms.store(0, Ordering::Relaxed);
    }
}

/// The state of one shard's sink, as the drain last saw it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SinkHealth {
    pub state: SinkState,
    /// When the current failure began (wall clock, ms since the epoch);
    /// 0 while running.
    pub since_unix_ms: u64,
    /// The last failure's reason; empty while running.
    pub reason: String,
    /// When a batch was last delivered (ms since the epoch); 0: never.
    pub last_delivery_unix_ms: u64,
}

/// How one shard's sink is doing.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum SinkState {
    /// Delivering (or idle: nothing has failed since the last delivery).
    #[default]
    Running,
    /// A batch failed transiently and is being retried with backoff.
    Retrying,
    /// The sink instance could not be created or panicked; it is being
    /// re-created with backoff (its batch waits).
    Failed,
    /// The operator paused it (`ctl sink pause`): it offers nothing until
    /// resumed; its records are kept.
    Paused,
}

impl SinkState {
    pub fn name(self) -> &'static str {
        match self {
            Self::Running => "running",
            Self::Retrying => "retrying",
            Self::Failed => "failed",
            Self::Paused => "paused",
        }
    }
}

fn now_unix_ms() -> u64 {
    spillway_wab::format::now_unix_us() / 1000
}

impl SinkHealth {
    /// A batch was delivered (wholly or in part).
    pub(crate) fn delivered(&mut self) {
        self.state = SinkState::Running;
        self.since_unix_ms = 0;
        self.reason.clear();
        self.last_delivery_unix_ms = now_unix_ms();
    }

    /// Paused (true) or resumed (false) by the operator.
    pub(crate) fn paused(&mut self, paused: bool) {
        if paused {
            self.state = SinkState::Paused;
            self.since_unix_ms = now_unix_ms();
            self.reason = "paused by the operator (ctl sink resume NAME)".into();
        } else if self.state == SinkState::Paused {
            self.state = SinkState::Running;
            self.since_unix_ms = 0;
            self.reason.clear();
        }
    }

    /// A failed instance was created again: its batch is being retried.
    pub(crate) fn recreated(&mut self) {
        if self.state == SinkState::Failed {
            self.state = SinkState::Retrying;
        }
    }

    /// A delivery failed: `state` (Retrying or Failed) since the first
    /// failure in a row.
    pub(crate) fn failing(&mut self, state: SinkState, reason: &str) {
        if self.state == SinkState::Running {
            self.since_unix_ms = now_unix_ms();
        }
        // An instance that failed stays Failed until a delivery succeeds.
        if self.state != SinkState::Failed {
            self.state = state;
        }
        self.reason = reason.to_string();
    }
}
