//! The noop sink: commits every batch at once and only counts it. For
//! benchmarks of everything upstream of delivery. It has no keys of its
//! own; the delivery keys give it its batch limits.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use sink_sdk::{Batch, Limits, Outcome, Sink};

use crate::keys::DeliveryConfig;
use crate::sink_type::{CheckedSink, Preflight, SinkEnv, SinkType, TypeKeys};
use crate::{CreateError, KeyProblem, SinkError, SinkFactory};

/// The noop sink in the registry.
pub static TYPE: SinkType = SinkType {
    name: "noop",
    about: "Accept and count the records, deliver them nowhere (benchmarks).",
    reference: &[],
    unset: || Box::new(NoopKeys),
};

/// The keys of `type = "noop"`: none.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct NoopKeys;

impl TypeKeys for NoopKeys {
    fn sink_type(&self) -> &'static SinkType {
        &TYPE
    }

    fn read_key(&mut self, key: &'static str, _: toml::Value) -> Result<(), toml::de::Error> {
        unreachable!("{key} is not a noop key: it has none")
    }

    fn check(&self, delivery: &DeliveryConfig) -> Result<Arc<dyn CheckedSink>, KeyProblem> {
        Ok(Arc::new(NoopSettings(delivery.limits())))
    }
}

/// A checked noop table: the batch limits it reports.
#[derive(Debug, Clone, Copy)]
struct NoopSettings(Limits);

impl CheckedSink for NoopSettings {
    fn build(&self, _table: &str, _env: &SinkEnv) -> Result<Arc<dyn SinkFactory>, SinkError> {
        Ok(Arc::new(NoopFactory::new(self.0)))
    }

    fn preflight(&self, _table: &str) -> Result<Preflight, SinkError> {
        Ok(Preflight::default())
    }
}

/// Counters shared by every instance of one noop sink.
#[derive(Debug, Default)]
struct Counters {
    batches: AtomicU64,
    records: AtomicU64,
    bytes: AtomicU64,
}

/// Builds noop instances; keep an `Arc<NoopFactory>` to read the counters.
pub struct NoopFactory {
    limits: Limits,
    counters: Arc<Counters>,
}

impl NoopFactory {
    pub fn new(limits: Limits) -> NoopFactory {
        NoopFactory {
            limits,
            counters: Arc::default(),
        }
    }

    /// Records committed so far, all shards.
    pub fn records(&self) -> u64 {
        self.counters.records.load(Ordering::Relaxed)
    }

    /// Batches committed so far, all shards.
    pub fn batches(&self) -> u64 {
        self.counters.batches.load(Ordering::Relaxed)
    }

    /// Payload bytes committed so far, all shards.
    pub fn bytes(&self) -> u64 {
        self.counters.bytes.load(Ordering::Relaxed)
    }
}

impl SinkFactory for NoopFactory {
    fn create(&self, _shard: u32) -> Result<Box<dyn Sink>, CreateError> {
        Ok(Box::new(NoopSink {
            limits: self.limits,
            counters: Arc::clone(&self.counters),
        }))
    }

    fn describe(&self) -> String {
        format!(
            "noop ({} records in {} batches so far)",
            self.records(),
            self.batches()
        )
    }
}

/// One shard's noop sink.
pub struct NoopSink {
    limits: Limits,
    counters: Arc<Counters>,
}

impl Sink for NoopSink {
    fn name(&self) -> &str {
        "noop"
    }

    fn limits(&self) -> Limits {
        self.limits
    }

    fn deliver(&mut self, batch: &Batch<'_>) -> Outcome {
        self.counters.batches.fetch_add(1, Ordering::Relaxed);
        self.counters
            .records
            .fetch_add(batch.len() as u64, Ordering::Relaxed);
        self.counters
            .bytes
            .fetch_add(batch.payload_bytes() as u64, Ordering::Relaxed);
        Outcome::Committed
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sink_sdk::Record;

    #[test]
    fn commits_and_counts_across_instances() {
        let factory = NoopFactory::new(Limits::default());
        let payloads: [&[u8]; 3] = [b"a", b"bc", b"def"];
        for shard in 0..2 {
            let records: Vec<Record<'_>> = payloads
                .iter()
                .enumerate()
                .map(|(i, p)| Record {
                    shard,
                    seq: i as u64,
                    tier: 1,
                    arrival_unix_us: 0,
                    payload: p,
                })
                .collect();
            let mut sink = factory.create(shard).unwrap();
            assert_eq!(sink.name(), "noop");
            assert_eq!(
                sink.deliver(&Batch::new(shard, &records)),
                Outcome::Committed
            );
        }
        assert_eq!(
            (factory.batches(), factory.records(), factory.bytes()),
            (2, 6, 12)
        );
        assert_eq!(factory.describe(), "noop (6 records in 2 batches so far)");
    }
}
