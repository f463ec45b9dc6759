//! The Kafka sink: exactly once for `read_committed` consumers. Each shard
//! has one transactional producer (`transactional.id` =
//! `spillway-<instance id>-<sink>-<shard>`, so a restarted daemon fences
//! its own zombie and aborts its open transaction); each batch is one
//! transaction that writes the batch's records and the shard's new
//! position to the offsets topic ([`position`]). Whenever a producer is
//! made (start, restart, after a fencing or an uncertain commit) the sink
//! reads the shard's committed position back and confirms what it covers
//! without sending it again, whatever the local checkpoint says: the local
//! checkpoint only saves the read.
//!
//! Rooms: [`config`] holds the keys, [`client`] the connection settings,
//! [`position`] the offsets topic (and the committed reads), [`survey`]
//! the look at the cluster (start, `check`, health), [`tail`] `ctl sink
//! tail`; this module produces and classifies.
//!
//! Threading: the drain thread calls `deliver`, which blocks on
//! librdkafka's transactional calls; each producer has librdkafka's
//! threads and one polling thread (rdkafka's `ThreadedProducer`) that
//! hands delivery reports to [`Deliveries`].

mod client;
mod config;
mod position;
mod survey;
mod tail;

use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::{
    BaseProducer, BaseRecord, DeliveryResult, Producer, ProducerContext, ThreadedProducer,
};
use rdkafka::{ClientConfig, ClientContext};
use sink_sdk::exactly_once::{ExactlyOnce, Position, Resumed, Transactions, Txn};
use sink_sdk::{Batch, Health, Limits, Outcome, Record, Sink};

use crate::keys::DeliveryConfig;
use crate::sink_type::{CheckedSink, Preflight, ReadBack, SinkEnv, SinkType, TypeKeys};
use crate::{CreateError, KeyProblem, SinkError, SinkFactory};
use client::{base_config, Quiet};
pub use config::KafkaConfig;
use config::{KafkaSettings, MessageKey};

/// The Kafka sink in the registry.
pub static TYPE: SinkType = SinkType {
    name: "kafka",
    about: "Write each record to a Kafka topic, once for read_committed consumers (one transaction per batch, with the shard's position).",
    reference: KafkaConfig::REFERENCE,
    unset: || Box::<KafkaConfig>::default(),
};

/// How long the sink waits for the delivery reports of a transaction that
/// has ended (they trail the commit's answer by a poll).
const REPORTS_WAIT: Duration = Duration::from_secs(10);

impl TypeKeys for KafkaConfig {
    fn sink_type(&self) -> &'static SinkType {
        &TYPE
    }

    fn read_key(&mut self, key: &'static str, value: toml::Value) -> Result<(), toml::de::Error> {
        KafkaConfig::read_key(self, key, value)
    }

    fn check(&self, delivery: &DeliveryConfig) -> Result<Arc<dyn CheckedSink>, KeyProblem> {
        Ok(Arc::new(KafkaConfig::check(self, delivery)?))
    }
}

impl CheckedSink for KafkaSettings {
    fn build(&self, table: &str, env: &SinkEnv) -> Result<Arc<dyn SinkFactory>, SinkError> {
        Ok(Arc::new(KafkaFactory::new(self, table, env)?))
    }

    fn preflight(&self, table: &str) -> Result<Preflight, SinkError> {
        let config = base_config(self, table)?;
        survey::survey(self, table, &config, survey::Depth::Check)
    }

    fn read_back(&self, table: &str, limit: usize) -> Option<Result<Vec<ReadBack>, SinkError>> {
        Some(tail::read_back(self, table, limit))
    }
}

/// What a factory's instances share.
struct Shared {
    settings: KafkaSettings,
    table: String,
    /// Brokers, TLS and SASL, the password read.
    config: ClientConfig,
    /// `spillway-<instance id>-<sink>-`: a shard's transactional id and
    /// position key is this and the shard.
    id_prefix: String,
    /// A plain (not transactional) client for the health check's metadata.
    probe: BaseProducer<Quiet>,
}

/// Builds one [`KafkaSink`] per shard.
pub struct KafkaFactory {
    shared: Arc<Shared>,
}

impl KafkaFactory {
    fn new(s: &KafkaSettings, table: &str, env: &SinkEnv) -> Result<KafkaFactory, SinkError> {
        let config = base_config(s, table)?;
        // A missing topic (or offsets topic that may not be created) stops
        // the start or the reload here; brokers that cannot be reached are
        // warned about and tried again by every delivery.
        let looked = survey::survey(s, table, &config, survey::Depth::Start)?;
        for w in looked.warnings {
            tracing::warn!("{w}");
        }
        let probe = config
            .create_with_context(Quiet)
            .map_err(|e| SinkError::Build {
                reason: format!("kafka sink: cannot make a client: {e}"),
            })?;
        let context = env.context(table);
        Ok(KafkaFactory {
            shared: Arc::new(Shared {
                settings: s.clone(),
                table: table.to_string(),
                config,
                id_prefix: format!("spillway-{}-{}-", context.instance(), context.sink()),
                probe,
            }),
        })
    }
}

impl SinkFactory for KafkaFactory {
    fn create(&self, shard: u32) -> Result<Box<dyn Sink>, CreateError> {
        // Nothing is connected here: the producer (whose
        // `init_transactions` fences every other producer of this shard's
        // id) is made by the first delivery, so a health probe's instance
        // never fences the instance at work.
        Ok(Box::new(KafkaSink {
            shared: self.shared.clone(),
            shard,
            exactly: ExactlyOnce::new(Producing {
                shared: self.shared.clone(),
                shard,
                id: format!("{}{shard}", self.shared.id_prefix),
                producer: None,
                offsets_partitions: position::OFFSETS_TOPIC_PARTITIONS,
                message_limit: self.shared.settings.message_bytes_max,
                attempt: 0,
            }),
        }))
    }

    fn describe(&self) -> String {
        let s = &self.shared.settings;
        format!(
            "kafka {} topic {} (key {}, compression {}, one transaction per batch, transaction timeout {} ms, positions in {})",
            s.brokers.join(","),
            s.topic,
            match &s.key {
                MessageKey::None => "none".to_string(),
                MessageKey::Shard => "shard".to_string(),
                MessageKey::Fixed(k) => format!("{k:?}"),
            },
            s.compression.name(),
            s.transaction_timeout.as_millis(),
            s.offsets_topic
        )
    }
}

/// One delivery report: done, or refused with librdkafka's code and text.
type Report = Result<(), (RDKafkaErrorCode, String)>;

/// The delivery reports of a producer's current transaction: slot `i` is
/// the `i`th message sent in it (the position last). An opaque carries the
/// attempt and the slot, so a late report of an earlier attempt is
/// ignored.
#[derive(Default)]
struct Deliveries {
    reports: Mutex<Reports>,
    arrived: Condvar,
}

#[derive(Default)]
struct Reports {
    attempt: u32,
    slots: Vec<Option<Report>>,
    arrived: usize,
}

fn opaque(attempt: u32, slot: usize) -> usize {
    ((attempt as usize) << 32) | slot
}

impl ClientContext for Deliveries {
    fn log(&self, level: rdkafka::config::RDKafkaLogLevel, facility: &str, line: &str) {
        Quiet.log(level, facility, line)
    }

    fn error(&self, error: KafkaError, reason: &str) {
        Quiet.error(error, reason)
    }
}

impl ProducerContext for Deliveries {
    type DeliveryOpaque = usize;

    fn delivery(&self, result: &DeliveryResult<'_>, opaque: usize) {
        let attempt = (opaque >> 32) as u32;
        let slot = opaque & 0xffff_ffff;
        let mut r = self.reports.lock().unwrap();
        if r.attempt != attempt || slot >= r.slots.len() || r.slots[slot].is_some() {
            return;
        }
        r.slots[slot] = Some(match result {
            Ok(_) => Ok(()),
            Err((e, _)) => Err((
                e.rdkafka_error_code().unwrap_or(RDKafkaErrorCode::Fail),
                e.to_string(),
            )),
        });
        r.arrived += 1;
        self.arrived.notify_all();
    }
}

impl Deliveries {
    /// Starts attempt `attempt` with `slots` messages to hear of.
    fn begin(&self, attempt: u32, slots: usize) {
        let mut r = self.reports.lock().unwrap();
        *r = Reports {
            attempt,
            slots: vec![None; slots],
            arrived: 0,
        };
    }

    /// The reports of the current attempt once `sent` arrived, or as many
    /// as arrived by `wait`.
    fn wait(&self, sent: usize, wait: Duration) -> Vec<Option<Report>> {
        let deadline = Instant::now() + wait;
        let mut r = self.reports.lock().unwrap();
        while r.arrived < sent {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            r = self.arrived.wait_timeout(r, left).unwrap().0;
        }
        r.slots.clone()
    }
}

/// Whether a refused message is refused for good: it would be refused
/// again, whatever the cluster's state (too large, invalid, not allowed).
fn refused_for_good(code: RDKafkaErrorCode) -> bool {
    matches!(
        code,
        RDKafkaErrorCode::MessageSizeTooLarge
            | RDKafkaErrorCode::MessageBatchTooLarge
            | RDKafkaErrorCode::InvalidRecord
            | RDKafkaErrorCode::InvalidMessage
            | RDKafkaErrorCode::TopicAuthorizationFailed
            | RDKafkaErrorCode::PolicyViolation
            | RDKafkaErrorCode::InvalidTopic
    )
}

/// One shard's transactional producer: the [`Transactions`] that
/// [`ExactlyOnce`] delivers through.
pub struct KafkaSink {
    shared: Arc<Shared>,
    shard: u32,
    exactly: ExactlyOnce<Producing>,
}

/// The producer of one shard, made by the first delivery.
struct Producing {
    shared: Arc<Shared>,
    shard: u32,
    /// The transactional id, and the key of the shard's position.
    id: String,
    /// Dropped when its state is uncertain (fenced, a commit that did not
    /// answer): the next delivery makes another.
    producer: Option<ThreadedProducer<Deliveries>>,
    /// The offsets topic's partition count, read when the producer was
    /// made.
    offsets_partitions: i32,
    /// The largest message the topic takes and the producer sends:
    /// `message_bytes_max`, or the topic's `max.message.bytes` if smaller
    /// (read when the producer is made). A batch of messages the producer
    /// sends is kept under it too: the broker refuses a whole batch over
    /// it, every record of it alike.
    message_limit: usize,
    /// Transactions begun by this instance (tags delivery reports).
    attempt: u32,
}

impl Producing {
    fn producer_config(&self) -> ClientConfig {
        let s = &self.shared.settings;
        let timeout = s.transaction_timeout.as_millis().to_string();
        let queue_kbytes = (s.limits.max_bytes / 1024 * 2).clamp(1 << 20, i32::MAX as usize / 2);
        let mut c = self.shared.config.clone();
        c.set("transactional.id", &self.id)
            .set("enable.idempotence", "true")
            .set("acks", "all")
            .set("transaction.timeout.ms", &timeout)
            // librdkafka requires it no longer than the transaction's.
            .set("message.timeout.ms", &timeout)
            .set("compression.type", s.compression.name())
            .set("message.max.bytes", s.message_bytes_max.to_string())
            .set("batch.size", self.message_limit.to_string())
            .set(
                "queue.buffering.max.messages",
                (s.limits.max_records * 2 + 16).max(100_000).to_string(),
            )
            .set("queue.buffering.max.kbytes", queue_kbytes.to_string())
            // The Java client's partitioner: a key lands on the partition a
            // Java producer would pick.
            .set("partitioner", "murmur2_random");
        c
    }

    /// Aborts the open transaction and ends with `then`; an abort that
    /// fails leaves the transaction's end unknown.
    fn abort(&mut self, then: Txn) -> Txn {
        let timeout = self.shared.settings.transaction_timeout;
        let Some(producer) = self.producer.as_ref() else {
            return then;
        };
        match producer.abort_transaction(timeout) {
            Ok(()) => then,
            Err(e) => Txn::Unknown(match then {
                Txn::Aborted(reason) => format!("{reason}; aborting it failed too: {e}"),
                _ => format!("aborting a transaction: {e}"),
            }),
        }
    }
}

impl Transactions for Producing {
    fn open(&mut self) -> Result<Option<Position>, String> {
        self.producer = None;
        let s = &self.shared.settings;
        let topic_max =
            client::topic_message_bytes_max(&self.shared.config, &s.topic, s.connect_timeout);
        self.message_limit = topic_max.map_or(s.message_bytes_max, |t| t.min(s.message_bytes_max));
        let producer: ThreadedProducer<Deliveries> = self
            .producer_config()
            .create_with_context(Deliveries::default())
            .map_err(|e| format!("kafka sink: making the producer: {e}"))?;
        let partitions = position::ensure_topic(
            &self.shared.config,
            &s.offsets_topic,
            s.offsets_topic_create,
            s.connect_timeout.max(Duration::from_secs(5)),
        )
        .map_err(|e| format!("kafka sink: {e}"))?;
        // Fences any other producer of this id (this daemon before a
        // crash) and aborts its open transaction, so the read below sees
        // every transaction of this shard ended.
        producer
            .init_transactions(s.transaction_timeout)
            .map_err(|e| {
                format!(
                    "kafka sink: initialising transactions as {:?}: {e}",
                    self.id
                )
            })?;
        let committed = position::read(
            &self.shared.config,
            &s.offsets_topic,
            position::partition_of(&self.id, partitions),
            &self.id,
            s.transaction_timeout + Duration::from_secs(5),
        )
        .map_err(|e| format!("kafka sink: {e}"))?;
        self.producer = Some(producer);
        self.offsets_partitions = partitions;
        Ok(committed)
    }

    fn transact(&mut self, records: &[&Record<'_>], position: &Position) -> Txn {
        self.attempt = self.attempt.wrapping_add(1);
        let attempt = self.attempt;
        let s = &self.shared.settings;
        let Some(producer) = self.producer.as_ref() else {
            return Txn::Unknown("no producer".into());
        };
        let deliveries = producer.context();
        deliveries.begin(attempt, records.len() + 1);
        if let Err(e) = producer.begin_transaction() {
            return Txn::Unknown(format!("kafka sink: beginning a transaction: {e}"));
        }
        let shard_key = self.shard.to_string();
        let key: Option<&[u8]> = match &s.key {
            MessageKey::None => None,
            MessageKey::Shard => Some(shard_key.as_bytes()),
            MessageKey::Fixed(k) => Some(k.as_bytes()),
        };
        // Records the topic cannot take are refused before anything is
        // sent: the broker would refuse their whole produce batch.
        let too_large: Vec<(usize, String)> = records
            .iter()
            .enumerate()
            .filter(|(_, r)| message_bytes(r, key) > self.message_limit)
            .map(|(slot, r)| {
                (
                    slot,
                    format!(
                        "a record of {} bytes is over the largest message the topic takes ({} bytes with its key and headers: message_bytes_max, or the topic's max.message.bytes if smaller)",
                        r.payload.len(),
                        self.message_limit
                    ),
                )
            })
            .collect();
        if !too_large.is_empty() {
            return self.abort(Txn::Refused(too_large));
        }
        for (slot, r) in records.iter().enumerate() {
            let (seq, arrival) = (r.seq.to_string(), r.arrival_unix_us.to_string());
            let headers = OwnedHeaders::new_with_capacity(3)
                .insert(Header {
                    key: "spillway-shard",
                    value: Some(shard_key.as_str()),
                })
                .insert(Header {
                    key: "spillway-seq",
                    value: Some(seq.as_str()),
                })
                .insert(Header {
                    key: "spillway-arrival-unix-us",
                    value: Some(arrival.as_str()),
                });
            let mut message = BaseRecord::with_opaque_to(&s.topic, opaque(attempt, slot))
                .payload(r.payload)
                .headers(headers);
            if let Some(k) = key {
                message = message.key(k);
            }
            if let Err(e) = send(producer, message) {
                if e.rdkafka_error_code() == Some(RDKafkaErrorCode::MessageSizeTooLarge) {
                    let why = format!(
                        "a record of {} bytes is over message_bytes_max = {} with its key and headers ({e})",
                        r.payload.len(),
                        s.message_bytes_max
                    );
                    return self.abort(Txn::Refused(vec![(slot, why)]));
                }
                return self.abort(Txn::Aborted(format!(
                    "kafka sink: producing to {}: {e}",
                    s.topic
                )));
            }
        }
        let value = position::encode(position);
        let message = BaseRecord::with_opaque_to(&s.offsets_topic, opaque(attempt, records.len()))
            .key(self.id.as_bytes())
            .payload(value.as_slice())
            .partition(position::partition_of(&self.id, self.offsets_partitions));
        if let Err(e) = send(producer, message) {
            return self.abort(Txn::Aborted(format!(
                "kafka sink: writing the position to {}: {e}",
                s.offsets_topic
            )));
        }
        let e = match producer.commit_transaction(s.transaction_timeout) {
            Ok(()) => return Txn::Committed,
            Err(e) => e,
        };
        let reports = deliveries.wait(records.len() + 1, REPORTS_WAIT);
        let mut refused: Vec<(usize, RDKafkaErrorCode, String)> = reports[..records.len()]
            .iter()
            .enumerate()
            .filter_map(|(slot, report)| match report {
                Some(Err((code, text))) if refused_for_good(*code) => Some((
                    slot,
                    *code,
                    position::short_reason(&format!("kafka refused the record for good: {text}")),
                )),
                _ => None,
            })
            .collect();
        // "Too large" is the broker's answer to a whole produce batch:
        // only its largest record is refused, the others go again.
        if refused.len() > 1
            && refused
                .iter()
                .all(|(_, code, _)| *code == RDKafkaErrorCode::MessageSizeTooLarge)
        {
            let largest = refused
                .iter()
                .max_by_key(|(slot, _, _)| records[*slot].payload.len())
                .cloned()
                .expect("not empty");
            refused = vec![largest];
        }
        let refused: Vec<(usize, String)> = refused
            .into_iter()
            .map(|(slot, _, why)| (slot, why))
            .collect();
        let reason = format!("kafka sink: committing the transaction of {}: {e}", self.id);
        let abortable = matches!(&e, KafkaError::Transaction(t) if t.txn_requires_abort());
        if !abortable {
            if matches!(&e, KafkaError::Transaction(t) if t.is_fatal()) {
                tracing::warn!(
                    sink = %self.shared.table,
                    shard = self.shard,
                    "kafka sink: the producer of shard {} can no longer commit ({e}): if it was fenced, another producer took the transactional id {:?} (a second daemon on a copy of this data folder?). A new producer takes it back and reads the shard's committed position",
                    self.shard,
                    self.id
                );
            }
            // Fenced, or a commit whose end is unknown (timed out): a new
            // producer's init completes or aborts it, and the position read
            // back says which.
            return Txn::Unknown(reason);
        }
        if refused.is_empty() {
            self.abort(Txn::Aborted(reason))
        } else {
            self.abort(Txn::Refused(refused))
        }
    }

    fn close(&mut self) {
        self.producer = None;
    }

    fn resumed(&mut self, how: Resumed) {
        let (table, shard, topic) = (
            &self.shared.table,
            self.shard,
            &self.shared.settings.offsets_topic,
        );
        match how {
            Resumed::After { seq } => tracing::info!(
                sink = %table,
                shard,
                "kafka sink: shard {shard} resumes after seq {seq} (its position in {topic}): records up to it are in the topic and are confirmed without being written again"
            ),
            Resumed::NoPosition => tracing::info!(
                sink = %table,
                shard,
                "kafka sink: shard {shard} has no position in {topic} (a first start, or the topic was deleted): it resumes from the local checkpoint"
            ),
            Resumed::Behind { seq, from, to } => tracing::warn!(
                sink = %table,
                shard,
                "kafka sink: the position of shard {shard} in {topic} (seq {seq}) is behind the first record offered (seq {}): records {from}..={to} were confirmed by the local checkpoint (written, dead-lettered or skipped) and are not written again. An offsets topic that lost positions (recreated, truncated, restored from a backup) does this",
                to + 1
            ),
        }
    }
}

/// Room for the three headers and a record's framing in a batch.
const MESSAGE_OVERHEAD_BYTES: usize = 160;

/// What a record takes in the topic: payload, key, headers and framing.
fn message_bytes(r: &Record<'_>, key: Option<&[u8]>) -> usize {
    r.payload.len() + key.map_or(0, <[u8]>::len) + MESSAGE_OVERHEAD_BYTES
}

/// Enqueues one message, waiting while the producer's queue is full.
fn send(
    producer: &ThreadedProducer<Deliveries>,
    mut message: BaseRecord<'_, [u8], [u8], usize>,
) -> Result<(), KafkaError> {
    loop {
        match producer.send(message) {
            Ok(()) => return Ok(()),
            Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), back)) => {
                message = back;
                producer.poll(Duration::from_millis(10));
            }
            Err((e, _)) => return Err(e),
        }
    }
}

impl Sink for KafkaSink {
    fn name(&self) -> &str {
        "kafka"
    }

    fn limits(&self) -> Limits {
        self.shared.settings.limits
    }

    fn deliver(&mut self, batch: &Batch<'_>) -> Outcome {
        debug_assert_eq!(batch.shard(), self.shard);
        self.exactly.deliver(batch)
    }

    fn health_check(&mut self) -> Health {
        let s = &self.shared.settings;
        match client::metadata_partitions(self.shared.probe.client(), &s.topic, s.connect_timeout) {
            Ok((Some(_), _)) => Health::Healthy,
            Ok((None, _)) => Health::Unhealthy(format!(
                "the cluster ({}) has no topic {:?}",
                s.brokers.join(","),
                s.topic
            )),
            Err(e) => Health::Unhealthy(format!(
                "cannot reach the brokers {}: {e}",
                s.brokers.join(",")
            )),
        }
    }
}
