//! Reading a whole topic back: every message of every partition, from the
//! beginning up to the end it had when the read began, as the committed
//! view (`read_committed`) or the raw one (`read_uncommitted`).

use std::collections::HashMap;
use std::time::{Duration, Instant};

use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::message::{Headers, Message};
use rdkafka::{Offset, TopicPartitionList};

/// How long a read may take. With `read_committed` a partition ends at its
/// last stable offset: a transaction left open (a producer killed
/// mid-transaction) holds it back until the coordinator aborts it, at the
/// transaction's timeout.
pub(crate) const READ_TIMEOUT: Duration = Duration::from_secs(60);

/// How long one metadata or watermark request may take.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// What one stored message says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredMessage {
    pub partition: i32,
    pub offset: i64,
    pub key: Option<Vec<u8>>,
    pub payload: Vec<u8>,
    /// Every header in order; a header without a value has an empty one.
    pub headers: Vec<(String, Vec<u8>)>,
}

impl StoredMessage {
    /// The first header called `name`, when its value is UTF-8.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k == name)
            .and_then(|(_, v)| std::str::from_utf8(v).ok())
    }
}

/// Every message of `topic`, ordered by partition and offset; `config`
/// reaches the cluster. Panics when the topic does not answer or the read
/// does not reach the end within [`READ_TIMEOUT`].
pub(crate) fn read_topic(
    config: &ClientConfig,
    topic: &str,
    committed_only: bool,
) -> Vec<StoredMessage> {
    let started = Instant::now();
    let ends = high_watermarks(config, topic);
    let isolation = if committed_only {
        "read_committed"
    } else {
        "read_uncommitted"
    };
    let consumer: BaseConsumer = config
        .clone()
        .set("group.id", "spillway-test-kafka-read")
        .set("enable.auto.commit", "false")
        .set("enable.partition.eof", "true")
        .set("isolation.level", isolation)
        .set("fetch.wait.max.ms", "100")
        .create()
        .expect("a consumer");
    let mut assignment = TopicPartitionList::new();
    for p in ends.keys() {
        assignment
            .add_partition_offset(topic, *p, Offset::Beginning)
            .expect("adding a partition");
    }
    consumer
        .assign(&assignment)
        .expect("assigning the partitions");

    let mut out = Vec::new();
    // Partitions that reported EOF since their last message. One is done
    // when, besides, its position reached the end measured at the start;
    // the position (past commit and abort markers, which are never
    // delivered) is asked again on every round: right at the EOF it may
    // still lag the message delivered just before.
    let mut at_eof: HashMap<i32, bool> = ends.keys().map(|p| (*p, false)).collect();
    loop {
        let at = positions(&consumer, topic, &ends);
        let done = ends
            .iter()
            .all(|(p, end)| *end == 0 || (at_eof[p] && at[p] >= *end));
        if done {
            break;
        }
        if started.elapsed() > READ_TIMEOUT {
            panic!(
                "topic {topic}: the read ({isolation}) did not reach the end {ends:?} within \
                 {READ_TIMEOUT:?}: positions {at:?}, at EOF {at_eof:?} (an open transaction holds \
                 back the last stable offset until it ends)"
            );
        }
        match consumer.poll(Duration::from_millis(100)) {
            None => {}
            Some(Ok(m)) => {
                at_eof.insert(m.partition(), false);
                out.push(stored(&m));
            }
            Some(Err(KafkaError::PartitionEOF(p))) => {
                at_eof.insert(p, true);
            }
            Some(Err(e)) => panic!("topic {topic}: reading ({isolation}): {e}"),
        }
    }
    out.sort_by_key(|m| (m.partition, m.offset));
    out
}

/// Each partition's high watermark, asked of a `read_uncommitted`
/// client: a `read_committed` one would answer the last stable offset.
fn high_watermarks(config: &ClientConfig, topic: &str) -> HashMap<i32, i64> {
    let client: BaseConsumer = config
        .clone()
        .set("isolation.level", "read_uncommitted")
        .create()
        .expect("a consumer");
    let metadata = client
        .fetch_metadata(Some(topic), REQUEST_TIMEOUT)
        .unwrap_or_else(|e| panic!("topic {topic}: metadata: {e}"));
    let t = &metadata.topics()[0];
    if let Some(e) = t.error() {
        panic!("topic {topic}: metadata: {e:?}");
    }
    t.partitions()
        .iter()
        .map(|p| {
            let (_, high) = client
                .fetch_watermarks(topic, p.id(), REQUEST_TIMEOUT)
                .unwrap_or_else(|e| panic!("topic {topic} partition {}: watermarks: {e}", p.id()));
            (p.id(), high)
        })
        .collect()
}

/// The consumer's position in each partition (-1 while it has none).
fn positions(consumer: &BaseConsumer, topic: &str, ends: &HashMap<i32, i64>) -> HashMap<i32, i64> {
    let list = consumer.position().expect("the consumer's positions");
    ends.keys()
        .map(|p| {
            let at = match list.find_partition(topic, *p).map(|e| e.offset()) {
                Some(Offset::Offset(o)) => o,
                _ => -1,
            };
            (*p, at)
        })
        .collect()
}

fn stored<M: Message>(m: &M) -> StoredMessage {
    let headers = m
        .headers()
        .map(|hs| {
            hs.iter()
                .map(|h| (h.key.to_string(), h.value.unwrap_or_default().to_vec()))
                .collect()
        })
        .unwrap_or_default();
    StoredMessage {
        partition: m.partition(),
        offset: m.offset(),
        key: m.key().map(<[u8]>::to_vec),
        payload: m.payload().unwrap_or_default().to_vec(),
        headers,
    }
}
