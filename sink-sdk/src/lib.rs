//! # sink-sdk: the one contract every spillway sink implements
//!
//! spillway delivers the records in its write-ahead buffer to a [`Sink`]:
//! a built-in one (HTTP, file, noop) or a plugin. The drain of each shard
//! hands the sink a [`Batch`] of records in sequence order; the sink answers
//! with an [`Outcome`]:
//!
//! - [`Outcome::Committed`]: every record is safely downstream. The drain
//!   advances its checkpoint past the batch; those records are never sent
//!   again (unless the daemon crashes before the checkpoint is fsynced, in
//!   which case they are sent again: delivery is *at least once*).
//! - [`Outcome::Retry`]: a transient failure (downstream down, timeout,
//!   overload). The same records are offered again after a backoff, or
//!   after `retry_after` if the sink knows better. Records are never dropped
//!   because a sink is down.
//! - [`Outcome::Split`]: one [`RecordOutcome`] per record, in order: some
//!   committed, some rejected for good (they go to the dead-letter store
//!   with the reason), some to retry. The drain commits the longest prefix
//!   that needs no retry and offers the rest again.
//!
//! A sink is called from one dedicated thread (never from a thread that
//! serves sockets), so it may block. It is never called concurrently.
//! If it panics, the daemon catches the panic, drops the instance, creates
//! a new one with backoff, and offers the same batch again.
//!
//! ## Record identity
//!
//! Every record carries `(shard, seq)`: the shard that stored it and its
//! sequence number there, assigned when it was written and recovered from
//! the segments after a crash. It is stable across restarts and
//! redeliveries. Across daemons it is not unique (each numbers from 0), so
//! a sink is told who delivers ([`SinkContext`]: the data folder's
//! instance id and the sink's name), and `(instance, shard, seq)` is the
//! identity a receiver that remembers what it has seen dedupes on: it
//! drops every redelivered record exactly, and no other daemon's. Payload hashes are not
//! identities (two records may carry the same bytes), nor are batch
//! boundaries (a batch re-formed after a restart may be cut differently).
//!
//! ## Plugins
//!
//! A sink can also live in a shared library that the daemon loads at run
//! time: implement [`Sink`] and [`PluginSink`], add
//! `export_sink!(MySink);`, build a `cdylib`. Declare its options once
//! with [`key_table!`] and tell the daemon with `PluginSink::OPTIONS`: the
//! daemon then checks `[sink.options]` against them before `create`. The C ABI behind that line is
//! in [`abi`]; the tutorial and the full reference are `docs/plugins.md`.
//!
//! ## Example
//!
//! A sink that keeps the records it receives in memory, rejects empty-looking
//! JSON, and asks for a retry while "paused":
//!
//! ```
//! use sink_sdk::{Batch, Health, Limits, Outcome, Record, RecordOutcome, Sink};
//! use std::time::Duration;
//!
//! #[derive(Default)]
//! pub struct MemorySink {
//!     pub received: Vec<(u32, u64, Vec<u8>)>,
//!     pub paused: bool,
//! }
//!
//! impl Sink for MemorySink {
//!     fn name(&self) -> &str {
//!         "memory"
//!     }
//!
//!     fn limits(&self) -> Limits {
//!         Limits { max_records: 500, max_bytes: 1 << 20 }
//!     }
//!
//!     fn deliver(&mut self, batch: &Batch<'_>) -> Outcome {
//!         if self.paused {
//!             return Outcome::Retry { after: Some(Duration::from_millis(50)), reason: "paused".into() };
//!         }
//!         let mut outcomes = Vec::with_capacity(batch.len());
//!         for r in batch.records() {
//!             if r.payload == b"{}" {
//!                 outcomes.push(RecordOutcome::Rejected("empty object".into()));
//!             } else {
//!                 self.received.push((r.shard, r.seq, r.payload.to_vec()));
//!                 outcomes.push(RecordOutcome::Committed);
//!             }
//!         }
//!         Outcome::Split(outcomes)
//!     }
//!
//!     fn health_check(&mut self) -> Health {
//!         if self.paused { Health::Unhealthy("paused".into()) } else { Health::Healthy }
//!     }
//! }
//!
//! // Its unit test: build a batch by hand, deliver it, check the outcome.
//! let payloads: [&[u8]; 3] = [b"{\"a\":1}", b"{}", b"{\"b\":2}"];
//! let records: Vec<Record<'_>> = payloads
//!     .iter()
//!     .enumerate()
//!     .map(|(i, p)| Record { shard: 0, seq: 10 + i as u64, tier: 1, arrival_unix_us: 0, payload: p })
//!     .collect();
//! let batch = Batch::new(0, &records);
//! let mut sink = MemorySink::default();
//! match sink.deliver(&batch) {
//!     Outcome::Split(o) => {
//!         assert_eq!(o[0], RecordOutcome::Committed);
//!         assert_eq!(o[1], RecordOutcome::Rejected("empty object".into()));
//!     }
//!     other => panic!("unexpected {other:?}"),
//! }
//! assert_eq!(sink.received.len(), 2);
//! assert_eq!(sink.received[1].1, 12);
//! sink.paused = true;
//! assert!(matches!(sink.deliver(&batch), Outcome::Retry { .. }));
//! ```

use std::time::Duration;

pub mod abi;
pub mod declare;
pub mod delivery;
pub mod exactly_once;
pub mod keys;
pub mod output;
pub mod units;

pub use abi::PluginSink;

/// One record offered to a sink: a borrowed view of the stored payload
/// plus its identity and metadata. Valid for the duration of the call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Record<'a> {
    /// The shard that stored the record.
    pub shard: u32,
    /// Its sequence number in that shard: `(shard, seq)` is the record's
    /// stable identity.
    pub seq: u64,
    /// Durability tier it was pushed at: 1 Sync, 2 Batched, 3 Buffered.
    pub tier: u8,
    /// When the daemon accepted it, microseconds since the Unix epoch.
    pub arrival_unix_us: u64,
    pub payload: &'a [u8],
}

/// Records of one shard, in increasing sequence order (not necessarily
/// contiguous: dead-lettered records leave gaps).
#[derive(Debug, Clone, Copy)]
pub struct Batch<'a> {
    shard: u32,
    records: &'a [Record<'a>],
}

impl<'a> Batch<'a> {
    /// A batch of `records`, which must all belong to `shard`, in order.
    pub fn new(shard: u32, records: &'a [Record<'a>]) -> Self {
        debug_assert!(records.iter().all(|r| r.shard == shard));
        debug_assert!(records.windows(2).all(|w| w[0].seq < w[1].seq));
        Batch { shard, records }
    }

    pub fn shard(&self) -> u32 {
        self.shard
    }

    pub fn records(&self) -> &'a [Record<'a>] {
        self.records
    }

    pub fn len(&self) -> usize {
        self.records.len()
    }

    pub fn is_empty(&self) -> bool {
        self.records.is_empty()
    }

    /// Sequence number of the first record (0 for an empty batch).
    pub fn first_seq(&self) -> u64 {
        self.records.first().map_or(0, |r| r.seq)
    }

    /// Sequence number of the last record (0 for an empty batch).
    pub fn last_seq(&self) -> u64 {
        self.records.last().map_or(0, |r| r.seq)
    }

    /// Sum of payload sizes.
    pub fn payload_bytes(&self) -> usize {
        self.records.iter().map(|r| r.payload.len()).sum()
    }
}

/// [`Record`] views over `payloads`, with consecutive sequence numbers from
/// `first_seq`, tier 1 (Sync) and arrival time 0: the records a sink's unit
/// test hands to [`Batch::new`].
pub fn records<P: AsRef<[u8]>>(shard: u32, first_seq: u64, payloads: &[P]) -> Vec<Record<'_>> {
    payloads
        .iter()
        .enumerate()
        .map(|(i, p)| Record {
            shard,
            seq: first_seq + i as u64,
            tier: 1,
            arrival_unix_us: 0,
            payload: p.as_ref(),
        })
        .collect()
}

/// Who delivers: the daemon's data folder (its instance id, made once and
/// kept there) and the sink's name in the config. A record's identity
/// across a fleet is `(instance, shard, seq)`: two daemons (or one whose
/// data folder was made anew) number their records from 0 in each shard,
/// so a destination that dedupes on `(shard, seq)` alone drops one
/// daemon's records as the other's duplicates. Every sink that dedupes
/// keys on [`SinkContext::record_id`] (or its three parts).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SinkContext {
    instance: String,
    sink: String,
}

impl SinkContext {
    pub fn new(instance: impl Into<String>, sink: impl Into<String>) -> SinkContext {
        SinkContext {
            instance: instance.into(),
            sink: sink.into(),
        }
    }

    /// The data folder's instance id (32 hex digits for a daemon's).
    pub fn instance(&self) -> &str {
        &self.instance
    }

    /// The sink's name (`default` for a lone `[sink]`, `NAME` for
    /// `[sinks.NAME]`).
    pub fn sink(&self) -> &str {
        &self.sink
    }

    /// A record's identity as text, `<instance>:<shard>:<seq>`: the same
    /// on every redelivery, different for every record of every daemon.
    pub fn record_id(&self, shard: u32, seq: u64) -> String {
        format!("{}:{shard}:{seq}", self.instance)
    }
}

/// How large a batch the sink accepts. The drain never offers more.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// At most this many records per batch (>= 1).
    pub max_records: usize,
    /// At most this many payload bytes per batch; a single record larger
    /// than this is still offered alone.
    pub max_bytes: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_records: 1000,
            max_bytes: 4 * 1024 * 1024,
        }
    }
}

/// The fate of one record of a [`Outcome::Split`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RecordOutcome {
    Committed,
    /// Rejected for good; goes to the dead-letter store with this reason.
    Rejected(String),
    /// Not delivered this time; offered again (with every record after it).
    Retry,
}

/// A sink's answer to one batch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Every record is downstream.
    Committed,
    /// Transient failure: offer the whole batch again later.
    Retry {
        /// Wait at least this long (e.g. an HTTP `Retry-After`).
        after: Option<Duration>,
        reason: String,
    },
    /// One outcome per record, same order and length as the batch.
    Split(Vec<RecordOutcome>),
}

/// Result of a sink's health check.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Health {
    Healthy,
    Unhealthy(String),
}

/// The contract. See the crate documentation.
pub trait Sink: Send {
    /// Short name for logs and metrics ("http", "file", a plugin's name).
    fn name(&self) -> &str;

    /// Batch limits; asked once per instance.
    fn limits(&self) -> Limits {
        Limits::default()
    }

    /// Deliver one batch. May block. Never called concurrently.
    fn deliver(&mut self, batch: &Batch<'_>) -> Outcome;

    /// Whether the downstream is reachable; run before a new instance takes
    /// over (start, restart, reload).
    fn health_check(&mut self) -> Health {
        Health::Healthy
    }
}

impl<S: Sink + ?Sized> Sink for Box<S> {
    fn name(&self) -> &str {
        (**self).name()
    }
    fn limits(&self) -> Limits {
        (**self).limits()
    }
    fn deliver(&mut self, batch: &Batch<'_>) -> Outcome {
        (**self).deliver(batch)
    }
    fn health_check(&mut self) -> Health {
        (**self).health_check()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batch_accessors() {
        let p: &[u8] = b"abc";
        let recs = [
            Record {
                shard: 2,
                seq: 5,
                tier: 1,
                arrival_unix_us: 1,
                payload: p,
            },
            Record {
                shard: 2,
                seq: 9,
                tier: 3,
                arrival_unix_us: 2,
                payload: b"de",
            },
        ];
        let b = Batch::new(2, &recs);
        assert_eq!(
            (b.first_seq(), b.last_seq(), b.len(), b.payload_bytes()),
            (5, 9, 2, 5)
        );
        assert_eq!(Batch::new(0, &[]).first_seq(), 0);
    }
}
