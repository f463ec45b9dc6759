//! A look at the cluster before the sink delivers: at the start and a
//! reload ([`Depth::Start`]: the topic exists; brokers that cannot be
//! reached are a warning, the daemon starts and retries) and in `spillway
//! check` ([`Depth::Check`]: also the topic's partitions, replication and
//! `min.insync.replicas`, its `max.message.bytes` against
//! `message_bytes_max`, the offsets topic, and whether this client may run
//! transactions). Errors name the key at fault.

use std::time::Duration;

use rdkafka::admin::AdminClient;
use rdkafka::error::KafkaError;
use rdkafka::producer::{BaseProducer, Producer};
use rdkafka::types::RDKafkaErrorCode;
use rdkafka::ClientConfig;

use super::client::{topic_configs, unreachable, Quiet, Watched};
use super::config::KafkaSettings;
use crate::sink_type::Preflight;
use crate::SinkError;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Depth {
    Start,
    Check,
}

/// What the topic looks like from its metadata.
struct TopicShape {
    partitions: usize,
    replication: usize,
}

pub(crate) fn survey(
    s: &KafkaSettings,
    table: &str,
    config: &ClientConfig,
    depth: Depth,
) -> Result<Preflight, SinkError> {
    let cannot = |e: rdkafka::error::KafkaError| SinkError::Build {
        reason: format!("kafka sink: cannot make a client: {e}"),
    };
    let admin: AdminClient<Quiet> = config.create_with_context(Quiet).map_err(cannot)?;
    // Metadata through a client whose errors are polled: a refused login
    // or handshake reaches its context only then.
    let probe: BaseProducer<Watched> = config
        .create_with_context(Watched::default())
        .map_err(cannot)?;
    let timeout = s.connect_timeout;
    let mut found = Preflight::default();
    let metadata = match probe.client().fetch_metadata(None, timeout) {
        Ok(m) => m,
        Err(e) => {
            // A login or a handshake the brokers refused is the config's
            // fault, not an outage.
            for _ in 0..10 {
                if let Some((code, why)) = probe.context().last() {
                    return Err(refused_at_connect(s, table, code, &why));
                }
                probe.poll(Duration::from_millis(100));
            }
            found.warnings.push(format!(
                "{table}: cannot reach the Kafka brokers {} now ({}); the daemon starts and retries",
                s.brokers.join(","),
                unreachable(e, timeout)
            ));
            return Ok(found);
        }
    };
    let shape = |name: &str| {
        metadata
            .topics()
            .iter()
            .find(|t| t.name() == name && t.error().is_none() && !t.partitions().is_empty())
            .map(|t| TopicShape {
                partitions: t.partitions().len(),
                replication: t
                    .partitions()
                    .iter()
                    .map(|p| p.replicas().len())
                    .min()
                    .unwrap_or(0),
            })
    };
    let Some(topic) = shape(&s.topic) else {
        return Err(SinkError::key(
            table,
            "topic",
            format!(
                "the cluster ({}) has no topic {:?}: the sink never creates it (create it with replication 3 and min.insync.replicas=2)",
                s.brokers.join(","),
                s.topic
            ),
        ));
    };
    let offsets = shape(&s.offsets_topic);
    if offsets.is_none() && !s.offsets_topic_create {
        return Err(SinkError::key(
            table,
            "offsets_topic",
            format!(
                "the cluster has no topic {:?} and offsets_topic_create = false: create it compacted (cleanup.policy=compact) with replication 3",
                s.offsets_topic
            ),
        ));
    }
    if depth == Depth::Start {
        return Ok(found);
    }
    let brokers = metadata.brokers().len();
    let configs = topic_configs(&admin, &[&s.topic, &s.offsets_topic], timeout);
    let get = |topic: &str, key: &str| -> Option<String> {
        configs
            .iter()
            .find(|(t, k, _)| t == topic && k == key)
            .map(|(_, _, v)| v.clone())
    };
    let min_isr: Option<usize> = get(&s.topic, "min.insync.replicas").and_then(|v| v.parse().ok());
    found.notes.push(format!(
        "topic {:?}: {} partitions, replication {}, min.insync.replicas {} ({} brokers)",
        s.topic,
        topic.partitions,
        topic.replication,
        min_isr.map_or("unknown".to_string(), |n| n.to_string()),
        brokers
    ));
    if topic.replication < 3 {
        found.warnings.push(format!(
            "{table}: topic {:?} has replication {}: an acknowledged write then stands on fewer than three brokers. Use replication 3 with min.insync.replicas=2",
            s.topic, topic.replication
        ));
    } else if min_isr.is_some_and(|n| n < 2) {
        found.warnings.push(format!(
            "{table}: topic {:?} has min.insync.replicas = 1: acks=all is then acknowledged by one broker alone, which a single broker's loss can undo. Set min.insync.replicas=2",
            s.topic
        ));
    }
    if let Some(max) = get(&s.topic, "max.message.bytes").and_then(|v| v.parse::<usize>().ok()) {
        if s.message_bytes_max > max {
            found.warnings.push(format!(
                "{table}.message_bytes_max = {} is over topic {:?}'s max.message.bytes = {max}: records between the two are refused by the broker (to the dead letters, after an aborted transaction). Set message_bytes_max = {max}",
                s.message_bytes_max, s.topic
            ));
        }
    }
    match offsets {
        Some(o) => {
            found.notes.push(format!(
                "offsets topic {:?}: {} partitions, replication {}",
                s.offsets_topic, o.partitions, o.replication
            ));
            if get(&s.offsets_topic, "cleanup.policy").is_some_and(|p| !p.contains("compact")) {
                found.warnings.push(format!(
                    "{table}: the offsets topic {:?} is not compacted (cleanup.policy): retention may delete a shard's position, and a restart then resumes from the local checkpoint (a batch may be written twice). Set cleanup.policy=compact",
                    s.offsets_topic
                ));
            }
        }
        None => found.notes.push(format!(
            "offsets topic {:?}: missing; the first delivery creates it",
            s.offsets_topic
        )),
    }
    transactions_allowed(s, table, config)?;
    found
        .notes
        .push("transactions: this client may run them".to_string());
    Ok(found)
}

/// The brokers refused the login (SASL) or the TLS handshake: an error
/// naming the key to fix.
fn refused_at_connect(
    s: &KafkaSettings,
    table: &str,
    code: RDKafkaErrorCode,
    why: &str,
) -> SinkError {
    if code == RDKafkaErrorCode::SSL {
        let key = if s.ca_file.is_some() {
            "ca_file"
        } else {
            "brokers"
        };
        return SinkError::key(table, key, format!("TLS with the brokers failed: {why}"));
    }
    let key = if s.sasl.is_some() {
        "password_env"
    } else {
        "brokers"
    };
    SinkError::key(table, key, format!("the brokers refused the login: {why}"))
}

/// A transactional producer of an id of its own initialises its
/// transactions: the cluster runs them (its transaction state log can be
/// written) and lets this client.
fn transactions_allowed(
    s: &KafkaSettings,
    table: &str,
    config: &ClientConfig,
) -> Result<(), SinkError> {
    let id = format!(
        "spillway-check-{}-{}",
        table.strip_prefix("sinks.").unwrap_or("default"),
        std::process::id()
    );
    let producer: BaseProducer<Quiet> = config
        .clone()
        .set("transactional.id", &id)
        .set(
            "transaction.timeout.ms",
            s.transaction_timeout.as_millis().to_string(),
        )
        .set(
            "message.timeout.ms",
            s.transaction_timeout.as_millis().to_string(),
        )
        .create_with_context(Quiet)
        .map_err(|e| SinkError::Build {
            reason: format!("kafka sink: cannot make a producer: {e}"),
        })?;
    let wait = s.connect_timeout.max(Duration::from_secs(10));
    match producer.init_transactions(wait) {
        Ok(()) => Ok(()),
        Err(e) => {
            let key = match e.rdkafka_error_code() {
                Some(RDKafkaErrorCode::TransactionalIdAuthorizationFailed)
                | Some(RDKafkaErrorCode::ClusterAuthorizationFailed)
                    if s.sasl.is_some() =>
                {
                    "user"
                }
                Some(RDKafkaErrorCode::InvalidTransactionTimeout) => "transaction_timeout_ms",
                _ => "brokers",
            };
            Err(SinkError::key(table, key, transactions_refused(e)))
        }
    }
}

fn transactions_refused(e: KafkaError) -> String {
    match e.rdkafka_error_code() {
        Some(RDKafkaErrorCode::InvalidTransactionTimeout) => format!(
            "the brokers refuse this transaction timeout (over their transaction.max.timeout.ms): {e}"
        ),
        Some(RDKafkaErrorCode::TransactionalIdAuthorizationFailed)
        | Some(RDKafkaErrorCode::ClusterAuthorizationFailed) => format!(
            "the cluster does not let this client run transactions (it needs Write and Describe on transactional ids spillway-*, and IdempotentWrite): {e}"
        ),
        _ => format!(
            "cannot initialise a transaction: the cluster's transaction coordinator did not answer (transactions need transaction.state.log.replication.factor brokers up): {e}"
        ),
    }
}
