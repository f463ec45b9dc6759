//! A shard's committed position in the offsets topic: written in each
//! batch's transaction, read back (read_committed) whenever a producer is
//! made, as Kafka Connect keeps an exactly-once source's offsets
//! (KIP-618).
//!
//! The offsets topic is compacted and keyed by the transactional id
//! (`spillway-<instance id>-<sink>-<shard>`); a key's partition is picked
//! here (CRC-32 of the key, modulo the topic's partitions), not by a
//! client's partitioner, so the reader knows which one partition to read.
//! The value is JSON: `{"seq": LAST, "refused": [[SEQ, "REASON"], ...]}`,
//! the last seq the transaction covered and the records of it that went to
//! the dead letters (so a restart between the commit and the local
//! checkpoint dead-letters them again instead of dropping them).

use std::ops::Range;
use std::time::{Duration, Instant};

use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::message::{BorrowedMessage, Message};
use rdkafka::{ClientConfig, Offset, TopicPartitionList};
use serde::{Deserialize, Serialize};
use sink_sdk::exactly_once::Position;

use super::client::{metadata_partitions, runtime, Quiet};

/// Partitions of an offsets topic the sink creates (Kafka Connect uses
/// 25): shards spread over them, so a shard's read at start waits on few
/// other producers' open transactions.
pub(crate) const OFFSETS_TOPIC_PARTITIONS: i32 = 5;
/// Replication of an offsets topic the sink creates (fewer on a smaller
/// cluster).
const OFFSETS_TOPIC_REPLICATION: i32 = 3;
/// A reason kept in a position is cut to this many bytes.
const REASON_BYTES_MAX: usize = 300;

/// A position as the offsets topic holds it (JSON).
#[derive(Serialize, Deserialize)]
struct Stored {
    seq: u64,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    refused: Vec<(u64, String)>,
}

pub(crate) fn encode(p: &Position) -> Vec<u8> {
    serde_json::to_vec(&Stored {
        seq: p.seq,
        refused: p.refused.clone(),
    })
    .expect("a position is plain data")
}

pub(crate) fn decode(bytes: &[u8]) -> Result<Position, String> {
    let s: Stored = serde_json::from_slice(bytes).map_err(|e| e.to_string())?;
    Ok(Position {
        seq: s.seq,
        refused: s.refused,
    })
}

/// A reason short enough to keep in a position.
pub(crate) fn short_reason(reason: &str) -> String {
    if reason.len() <= REASON_BYTES_MAX {
        return reason.to_string();
    }
    let mut end = REASON_BYTES_MAX;
    while !reason.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}...", &reason[..end])
}

/// The partition of the offsets topic that holds `key`.
pub(crate) fn partition_of(key: &str, partitions: i32) -> i32 {
    (crc32fast::hash(key.as_bytes()) % partitions.max(1) as u32) as i32
}

/// The offsets topic's partition count, creating the topic first when it
/// is missing and `create` allows it.
pub(crate) fn ensure_topic(
    config: &ClientConfig,
    topic: &str,
    create: bool,
    timeout: Duration,
) -> Result<i32, String> {
    let admin: AdminClient<Quiet> = config
        .create_with_context(Quiet)
        .map_err(|e| format!("making an admin client: {e}"))?;
    let (partitions, brokers) = metadata_partitions(admin.inner(), topic, timeout)?;
    if let Some(n) = partitions {
        return Ok(n);
    }
    if !create {
        return Err(format!(
            "the offsets topic {topic:?} does not exist (offsets_topic_create = false): create it compacted (cleanup.policy=compact) with replication 3"
        ));
    }
    let replication = OFFSETS_TOPIC_REPLICATION.min(brokers.max(1));
    let min_isr = (replication - 1).max(1).to_string();
    let new = NewTopic::new(
        topic,
        OFFSETS_TOPIC_PARTITIONS,
        TopicReplication::Fixed(replication),
    )
    .set("cleanup.policy", "compact")
    .set("min.insync.replicas", &min_isr)
    // Small segments, so compaction (which skips the active segment)
    // keeps what a start reads back short.
    .set("segment.bytes", "16777216")
    .set("segment.ms", "3600000");
    let options = AdminOptions::new().operation_timeout(Some(timeout));
    let results = runtime()?
        .block_on(admin.create_topics([&new], &options))
        .map_err(|e| format!("creating the offsets topic {topic:?}: {e}"))?;
    for r in results {
        match r {
            Ok(_) => {
                tracing::info!(
                    "kafka sink: created the offsets topic {topic:?} ({OFFSETS_TOPIC_PARTITIONS} partitions, replication {replication}, compacted)"
                );
            }
            // Another shard or daemon made it first.
            Err((_, rdkafka::types::RDKafkaErrorCode::TopicAlreadyExists)) => {}
            Err((_, code)) => {
                return Err(format!(
                    "creating the offsets topic {topic:?}: {code} (create it, compacted with replication 3, or allow this client to)"
                ))
            }
        }
    }
    // The new topic's leaders take a moment to be known.
    let deadline = Instant::now() + timeout;
    loop {
        if let (Some(n), _) = metadata_partitions(admin.inner(), topic, timeout)? {
            return Ok(n);
        }
        if Instant::now() > deadline {
            return Err(format!(
                "the offsets topic {topic:?} was created but has no partitions yet"
            ));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The last committed position of `key` in `topic` (partition
/// `partition`), read with `isolation.level = read_committed` up to the
/// partition's end as it was when the read began; `None` when the key has
/// none. Open transactions of other producers on that partition hold its
/// committed end back: the read waits for them up to `wait`.
pub(crate) fn read(
    config: &ClientConfig,
    topic: &str,
    partition: i32,
    key: &str,
    wait: Duration,
) -> Result<Option<Position>, String> {
    let reader = CommittedReader::new(config, "spillway-position-reader")?;
    let mut found: Option<Position> = None;
    let what = format!("reading the position of {key:?} from {topic}/{partition}");
    let (low, high) = reader.bounds(topic, partition, wait)?;
    reader.read(topic, partition, low..high, wait, &what, |m| {
        if m.key() == Some(key.as_bytes()) {
            found = match m.payload() {
                // A tombstone: the position was deleted.
                None => None,
                Some(p) => Some(decode(p).map_err(|e| {
                    format!(
                        "the position of {key:?} at {topic}/{partition}@{} is not one spillway wrote: {e}",
                        m.offset()
                    )
                })?),
            };
        }
        Ok(())
    })?;
    Ok(found)
}

/// A consumer that reads partitions' committed records
/// (`isolation.level = read_committed`), assigned one partition at a
/// time, committing nothing: the position's read and `ctl sink tail`.
pub(crate) struct CommittedReader {
    consumer: BaseConsumer<Quiet>,
}

impl CommittedReader {
    /// `group` only names the reader to the brokers: nothing joins it.
    pub(crate) fn new(config: &ClientConfig, group: &str) -> Result<CommittedReader, String> {
        let consumer = config
            .clone()
            .set("isolation.level", "read_committed")
            .set("enable.partition.eof", "true")
            .set("enable.auto.commit", "false")
            // An offset deleted since it was asked for: from the oldest.
            .set("auto.offset.reset", "earliest")
            .set("group.id", group)
            .create_with_context(Quiet)
            .map_err(|e| format!("making a consumer: {e}"))?;
        Ok(CommittedReader { consumer })
    }

    /// `topic`'s partition count (`None` when the cluster does not have
    /// it), and how many brokers the cluster has.
    pub(crate) fn partitions(
        &self,
        topic: &str,
        wait: Duration,
    ) -> Result<(Option<i32>, i32), String> {
        metadata_partitions(self.consumer.client(), topic, wait)
    }

    /// The partition's first and next offsets (its log start and high
    /// watermark).
    pub(crate) fn bounds(
        &self,
        topic: &str,
        partition: i32,
        wait: Duration,
    ) -> Result<(i64, i64), String> {
        self.consumer
            .fetch_watermarks(topic, partition, wait)
            .map_err(|e| format!("reading the end of {topic}/{partition}: {e}"))
    }

    /// Hands `each` every committed record of `topic`/`partition` in
    /// `offsets` (its end: the partition's end as [`bounds`] read it when
    /// the read began).
    ///
    /// [`bounds`]: CommittedReader::bounds
    /// Open transactions hold the committed end back: the read waits up to
    /// `wait` for it to move, then fails, its error starting with `what`.
    pub(crate) fn read(
        &self,
        topic: &str,
        partition: i32,
        offsets: Range<i64>,
        wait: Duration,
        what: &str,
        mut each: impl FnMut(&BorrowedMessage<'_>) -> Result<(), String>,
    ) -> Result<(), String> {
        let mut list = TopicPartitionList::new();
        let high = offsets.end;
        list.add_partition_offset(topic, partition, Offset::Offset(offsets.start))
            .map_err(|e| e.to_string())?;
        self.consumer.assign(&list).map_err(|e| e.to_string())?;
        let mut deadline = Instant::now() + wait;
        let mut next = offsets.start;
        while next < high {
            if Instant::now() > deadline {
                return Err(format!(
                    "{what}: stopped at offset {next} of {high} for {} ms: another producer's transaction on that partition stays open (it ends when that producer commits, aborts or times out)",
                    wait.as_millis()
                ));
            }
            match self.consumer.poll(Duration::from_millis(200)) {
                None => {}
                Some(Ok(m)) => {
                    next = m.offset() + 1;
                    deadline = Instant::now() + wait;
                    each(&m)?;
                }
                // The committed end: past it are open transactions'
                // records (or none). Control records have no message: the
                // position tells how far the read is.
                Some(Err(KafkaError::PartitionEOF(_))) => {
                    if let Some(p) = self.consumer.position().ok().and_then(|l| {
                        l.find_partition(topic, partition)
                            .and_then(|e| e.offset().to_raw())
                    }) {
                        if p > next {
                            next = p;
                            deadline = Instant::now() + wait;
                        }
                    }
                }
                Some(Err(e)) => {
                    return Err(format!("reading {topic}/{partition}: {e}"));
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn positions_round_trip() {
        let p = Position {
            seq: 42,
            refused: vec![(40, "too large".into())],
        };
        assert_eq!(decode(&encode(&p)).unwrap(), p);
        let plain = Position {
            seq: 7,
            refused: vec![],
        };
        assert_eq!(encode(&plain), br#"{"seq":7}"#);
        assert!(decode(b"{}").is_err());
    }

    #[test]
    fn keys_spread_over_partitions_the_same_way_every_time() {
        let k = "spillway-abc-events-3";
        assert_eq!(partition_of(k, 5), partition_of(k, 5));
        assert!((0..5).contains(&partition_of(k, 5)));
        assert_eq!(partition_of(k, 1), 0);
        let used: std::collections::BTreeSet<i32> = (0..64)
            .map(|s| partition_of(&format!("spillway-abc-events-{s}"), 5))
            .collect();
        assert_eq!(used.len(), 5);
    }

    #[test]
    fn long_reasons_are_cut_on_a_character() {
        let long = "é".repeat(400);
        let short = short_reason(&long);
        assert!(short.len() <= REASON_BYTES_MAX + 3);
        assert!(short.ends_with("..."));
    }
}
