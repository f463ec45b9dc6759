//! The Kafka sink's keys ([`KafkaConfig`]: what the user writes, with
//! defaults, ranges and checks) and the [`KafkaSettings`] they resolve to.
//! The password is read from the environment only when the sink is built
//! (start, reload) or preflighted.

use std::ops::RangeInclusive;
use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;
use sink_sdk::delivery::InFlight;
use sink_sdk::keys::{Allowed, DefaultValue, Unit};
use sink_sdk::Limits;

use crate::keys::{check_env_var_name, DeliveryConfig};
use crate::sink_keys;
use crate::KeyProblem;

pub(crate) const DEFAULT_TRANSACTION_TIMEOUT_MS: u64 = 60_000;
/// The broker's `transaction.max.timeout.ms` is 15 minutes by default: a
/// producer asking for more is refused at `init_transactions`.
pub(crate) const TRANSACTION_TIMEOUT_MS_RANGE: RangeInclusive<u64> = 1_000..=900_000;
/// librdkafka's `message.max.bytes` default and range.
pub(crate) const DEFAULT_MESSAGE_BYTES_MAX: u64 = 1_000_000;
pub(crate) const MESSAGE_BYTES_MAX_RANGE: RangeInclusive<u64> = 1_000..=1_000_000_000;
pub(crate) const DEFAULT_CONNECT_TIMEOUT_MS: u64 = 5_000;
pub(crate) const CONNECT_TIMEOUT_MS_RANGE: RangeInclusive<u64> = 100..=600_000;
pub(crate) const DEFAULT_OFFSETS_TOPIC: &str = "spillway-offsets";
/// The most brokers a table may list.
const BROKERS_MAX: usize = 32;

sink_keys! {
    /// The `type = "kafka"` keys as the user wrote them (rendered into
    /// docs/sinks.md).
    pub struct KafkaConfig in "sink.kafka" {
        brokers: Vec<String> = Key {
            default: DefaultValue::Required,
            allowed: Allowed::Shaped {
                text: r#"1..=32 `HOST:PORT` addresses"#,
                schema: r#"{"type": "array", "items": {"type": "string", "pattern": "^[^:/ ]+:[0-9]+$"}, "minItems": 1, "maxItems": 32}"#,
            },
            also: "",
            meaning: r#"Bootstrap brokers; the client learns the rest of the cluster from the first it reaches."#,
        },
        topic: String = Key {
            default: DefaultValue::Required,
            allowed: Allowed::Text(r#"a topic name (1..=249 of letters, digits, `.`, `_`, `-`)"#),
            also: "",
            meaning: r#"The topic every record is written to. It must exist (the sink never creates it): `spillway check` and the start refuse a topic the cluster does not have."#,
        },
        key: String = Key {
            default: DefaultValue::Str("shard"),
            allowed: Allowed::Text(r#"`none`, `shard`, or any other string (used as it is)"#),
            also: "",
            meaning: r#"The message key, which picks the partition: `shard` keys each record by its shard (a shard's records land on one partition, in order); `none` sends no key (the records spread over the partitions, no order across them); any other string is the key of every record (one partition, in order)."#,
        },
        compression: Compression = Key {
            default: DefaultValue::Str("none"),
            allowed: Allowed::OneOf(&["none", "gzip", "lz4", "zstd"]),
            also: "",
            meaning: r#"How the producer compresses its message batches."#,
        },
        tls: bool = Key {
            default: DefaultValue::Bool(false),
            allowed: Allowed::Text(r#"`true`, `false`"#),
            also: "",
            meaning: r#"Speak TLS to the brokers, trusting the system's CAs (implied by `ca_file` and `cert_file`)."#,
        },
        ca_file: PathBuf = Key {
            default: DefaultValue::Unset(""),
            allowed: Allowed::Text(r#"a path (PEM)"#),
            also: "",
            meaning: r#"CA certificates the brokers' certificates must chain to; implies TLS."#,
        },
        cert_file: PathBuf = Key {
            default: DefaultValue::Unset(""),
            allowed: Allowed::Text(r#"a path (PEM)"#),
            also: "",
            meaning: r#"A client certificate for mutual TLS, with `key_file` (both, or neither)."#,
        },
        key_file: PathBuf = Key {
            default: DefaultValue::Unset(""),
            allowed: Allowed::Text(r#"a path (PEM)"#),
            also: "",
            meaning: r#"The client certificate's private key."#,
        },
        sasl_mechanism: SaslMechanism = Key {
            default: DefaultValue::Unset(""),
            allowed: Allowed::OneOf(&["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"]),
            also: "",
            meaning: r#"Authenticate with SASL, as `user` with the password in `password_env` (all three, or none)."#,
        },
        user: String = Key {
            default: DefaultValue::Unset(""),
            allowed: Allowed::Text(r#"a user name"#),
            also: "",
            meaning: r#"The SASL user."#,
        },
        password_env: String = Key {
            default: DefaultValue::Unset(""),
            allowed: Allowed::Text(r#"an environment variable name"#),
            also: "",
            meaning: r#"The variable holding `user`'s password, read when the sink is built."#,
        },
        transaction_timeout_ms: u64 = Key {
            default: DefaultValue::Int(DEFAULT_TRANSACTION_TIMEOUT_MS),
            allowed: Allowed::Range {
                min: *TRANSACTION_TIMEOUT_MS_RANGE.start(),
                max: *TRANSACTION_TIMEOUT_MS_RANGE.end(),
                unit: Unit::Ms,
            },
            also: "",
            meaning: r#"How long one batch's transaction may stay open: the broker aborts it after this, and a commit that has not finished by then is retried (see [Sizing `transaction_timeout_ms`](#sizing-transaction_timeout_ms)). At most the brokers' `transaction.max.timeout.ms`."#,
        },
        message_bytes_max: u64 = Key {
            default: DefaultValue::Int(DEFAULT_MESSAGE_BYTES_MAX),
            allowed: Allowed::Range {
                min: *MESSAGE_BYTES_MAX_RANGE.start(),
                max: *MESSAGE_BYTES_MAX_RANGE.end(),
                unit: Unit::Bytes,
            },
            also: "",
            meaning: r#"The largest message the producer sends (payload, key and headers); a larger record goes to the dead letters at once. Keep it at or under the topic's `max.message.bytes`: a record the broker refuses as too large goes there too, after its transaction is aborted and retried without it."#,
        },
        offsets_topic: String = Key {
            default: DefaultValue::Str(DEFAULT_OFFSETS_TOPIC),
            allowed: Allowed::Text(r#"a topic name"#),
            also: "",
            meaning: r#"The compacted topic each shard's committed position is written to, in the same transaction as its records (see [Exactly once](#exactly-once-into-kafka)). Several daemons and sinks may share it: positions are keyed by instance id, sink and shard."#,
        },
        offsets_topic_create: bool = Key {
            default: DefaultValue::Bool(true),
            allowed: Allowed::Text(r#"`true`, `false`"#),
            also: "",
            meaning: r#"Create `offsets_topic` when it is missing (5 partitions, replication 3 or the cluster's size if smaller, `cleanup.policy=compact`, `min.insync.replicas=2`). With `false` a missing one is an error."#,
        },
        connect_timeout_ms: u64 = Key {
            default: DefaultValue::Int(DEFAULT_CONNECT_TIMEOUT_MS),
            allowed: Allowed::Range {
                min: *CONNECT_TIMEOUT_MS_RANGE.start(),
                max: *CONNECT_TIMEOUT_MS_RANGE.end(),
                unit: Unit::Ms,
            },
            also: "",
            meaning: r#"How long a metadata or admin request (the start's and `check`'s look at the cluster, the health check) waits for the brokers."#,
        },
    }
}

/// The producer's `compression.type`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Compression {
    #[default]
    None,
    Gzip,
    Lz4,
    Zstd,
}

impl Compression {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Compression::None => "none",
            Compression::Gzip => "gzip",
            Compression::Lz4 => "lz4",
            Compression::Zstd => "zstd",
        }
    }
}

/// The SASL mechanisms the sink speaks (librdkafka's names).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
pub enum SaslMechanism {
    #[serde(rename = "PLAIN")]
    Plain,
    #[serde(rename = "SCRAM-SHA-256")]
    ScramSha256,
    #[serde(rename = "SCRAM-SHA-512")]
    ScramSha512,
}

impl SaslMechanism {
    pub(crate) fn name(self) -> &'static str {
        match self {
            SaslMechanism::Plain => "PLAIN",
            SaslMechanism::ScramSha256 => "SCRAM-SHA-256",
            SaslMechanism::ScramSha512 => "SCRAM-SHA-512",
        }
    }
}

/// What decides a record's message key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum MessageKey {
    None,
    Shard,
    Fixed(String),
}

/// SASL credentials: the password is read from `password_env` when the
/// sink is built.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Sasl {
    pub mechanism: SaslMechanism,
    pub user: String,
    pub password_env: String,
}

/// The checked keys of one Kafka sink.
#[derive(Debug, Clone)]
pub(crate) struct KafkaSettings {
    pub brokers: Vec<String>,
    pub topic: String,
    pub key: MessageKey,
    pub compression: Compression,
    pub tls: bool,
    pub ca_file: Option<PathBuf>,
    pub client_cert: Option<(PathBuf, PathBuf)>,
    pub sasl: Option<Sasl>,
    pub transaction_timeout: Duration,
    pub message_bytes_max: usize,
    pub offsets_topic: String,
    pub offsets_topic_create: bool,
    pub connect_timeout: Duration,
    pub limits: Limits,
}

impl KafkaConfig {
    /// Checks every key and resolves them into the settings the sink is
    /// built from. Touches neither the environment, the files nor the
    /// network.
    pub(crate) fn check(&self, delivery: &DeliveryConfig) -> Result<KafkaSettings, KeyProblem> {
        let missing = |key| KeyProblem::Missing {
            key,
            kind: super::TYPE.name,
        };
        let brokers = self.brokers.clone().ok_or_else(|| missing("brokers"))?;
        if brokers.is_empty() || brokers.len() > BROKERS_MAX {
            return Err(invalid(
                "brokers",
                format!("lists {} brokers: allowed 1..={BROKERS_MAX}", brokers.len()),
            ));
        }
        for b in &brokers {
            check_broker(b)?;
        }
        let topic = self.topic.clone().ok_or_else(|| missing("topic"))?;
        check_topic("topic", &topic)?;
        let offsets_topic = self
            .offsets_topic
            .clone()
            .unwrap_or_else(|| DEFAULT_OFFSETS_TOPIC.to_string());
        check_topic("offsets_topic", &offsets_topic)?;
        if offsets_topic == topic {
            return Err(invalid(
                "offsets_topic",
                format!("{offsets_topic:?} is the records' topic too: positions need a compacted topic of their own"),
            ));
        }
        let key = match self.key.as_deref() {
            None | Some("shard") => MessageKey::Shard,
            Some("none") => MessageKey::None,
            Some("") => {
                return Err(invalid(
                    "key",
                    "is empty: say `none` for messages without a key".into(),
                ))
            }
            Some(fixed) => MessageKey::Fixed(fixed.to_string()),
        };
        let client_cert = match (&self.cert_file, &self.key_file) {
            (Some(c), Some(k)) => Some((c.clone(), k.clone())),
            (None, None) => None,
            (Some(_), None) => return Err(needs("cert_file", "key_file")),
            (None, Some(_)) => return Err(needs("key_file", "cert_file")),
        };
        let sasl = match (&self.sasl_mechanism, &self.user, &self.password_env) {
            (None, None, None) => None,
            (Some(mechanism), Some(user), Some(password_env)) => {
                check_env_var_name("password_env", password_env)?;
                Some(Sasl {
                    mechanism: *mechanism,
                    user: user.clone(),
                    password_env: password_env.clone(),
                })
            }
            (None, _, _) => {
                let set = if self.user.is_some() {
                    "user"
                } else {
                    "password_env"
                };
                return Err(needs(set, "sasl_mechanism"));
            }
            (Some(_), None, _) => return Err(needs("sasl_mechanism", "user")),
            (Some(_), Some(_), None) => return Err(needs("sasl_mechanism", "password_env")),
        };
        // One transaction at a time per shard: the shard's committed
        // position is then the last seq of the last committed batch, and
        // the shard's records reach their partition in order.
        if delivery.in_flight() != InFlight::Fixed(1) {
            return Err(invalid(
                "batches_in_flight",
                "must be 1 for type = \"kafka\": each shard delivers one transaction at a time, which keeps its committed position exact and its records in order (more shards, or larger batches, deliver more)".into(),
            ));
        }
        self.check_ranges()?;
        Ok(KafkaSettings {
            brokers,
            topic,
            key,
            compression: self.compression.unwrap_or_default(),
            tls: self.tls.unwrap_or(false) || self.ca_file.is_some() || client_cert.is_some(),
            ca_file: self.ca_file.clone(),
            client_cert,
            sasl,
            transaction_timeout: Duration::from_millis(
                self.transaction_timeout_ms
                    .unwrap_or(DEFAULT_TRANSACTION_TIMEOUT_MS),
            ),
            message_bytes_max: self.message_bytes_max.unwrap_or(DEFAULT_MESSAGE_BYTES_MAX) as usize,
            offsets_topic,
            offsets_topic_create: self.offsets_topic_create.unwrap_or(true),
            connect_timeout: Duration::from_millis(
                self.connect_timeout_ms
                    .unwrap_or(DEFAULT_CONNECT_TIMEOUT_MS),
            ),
            limits: delivery.limits(),
        })
    }
}

/// `key` needs `other` too: both named with the table.
fn needs(key: &'static str, other: &'static str) -> KeyProblem {
    KeyProblem::AgainstKey {
        key: key.into(),
        head: " needs ".into(),
        other,
        tail: " too".into(),
    }
}

fn invalid(key: &str, reason: String) -> KeyProblem {
    KeyProblem::Invalid {
        key: key.into(),
        reason,
    }
}

/// `HOST:PORT`, no scheme.
fn check_broker(address: &str) -> Result<(), KeyProblem> {
    let bad = |why: &str| invalid("brokers", format!("{address:?} {why} (HOST:PORT)"));
    if address.contains("://") {
        return Err(bad("has a scheme: Kafka brokers are written without one"));
    }
    let Some((host, port)) = address.rsplit_once(':') else {
        return Err(bad("has no port"));
    };
    if host.is_empty() || host.contains(char::is_whitespace) || host.contains('/') {
        return Err(bad("has no host"));
    }
    match port.parse::<u16>() {
        Ok(p) if p > 0 => Ok(()),
        _ => Err(bad("has no valid port")),
    }
}

/// A Kafka topic name: 1..=249 of ASCII letters, digits, `.`, `_`, `-`,
/// and not `.` or `..`.
pub(crate) fn check_topic(key: &str, name: &str) -> Result<(), KeyProblem> {
    if name.is_empty() || name.len() > 249 || name == "." || name == ".." {
        return Err(invalid(
            key,
            format!("{name:?} is not a topic name (1..=249 characters, not `.` or `..`)"),
        ));
    }
    if let Some(c) = name
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-')))
    {
        return Err(invalid(
            key,
            format!("{name:?} has {c:?}: topic names take letters, digits, `.`, `_` and `-`"),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg() -> KafkaConfig {
        KafkaConfig {
            brokers: Some(vec!["127.0.0.1:9092".into()]),
            topic: Some("events".into()),
            ..KafkaConfig::default()
        }
    }

    fn problem(c: KafkaConfig, delivery: &DeliveryConfig) -> String {
        let p = c.check(delivery).unwrap_err();
        crate::SinkConfigError::from(p)
            .in_table("sinks.k")
            .to_string()
    }

    #[test]
    fn defaults() {
        let s = cfg().check(&DeliveryConfig::default()).unwrap();
        assert_eq!(s.key, MessageKey::Shard);
        assert_eq!(s.compression, Compression::None);
        assert_eq!(s.transaction_timeout, Duration::from_secs(60));
        assert_eq!(s.message_bytes_max, 1_000_000);
        assert_eq!(s.offsets_topic, "spillway-offsets");
        assert!(s.offsets_topic_create);
        assert!(!s.tls);
        assert_eq!(s.sasl, None);
        let fixed = KafkaConfig {
            key: Some("tenant-7".into()),
            ca_file: Some("ca.pem".into()),
            ..cfg()
        }
        .check(&DeliveryConfig::default())
        .unwrap();
        assert_eq!(fixed.key, MessageKey::Fixed("tenant-7".into()));
        assert!(fixed.tls, "ca_file implies TLS");
    }

    #[test]
    fn bad_keys_are_named() {
        let plain = DeliveryConfig::default();
        let cases: Vec<(KafkaConfig, &str)> = vec![
            (
                KafkaConfig {
                    brokers: None,
                    ..cfg()
                },
                "sinks.k.brokers is required",
            ),
            (
                KafkaConfig {
                    brokers: Some(vec![]),
                    ..cfg()
                },
                "sinks.k.brokers: lists 0 brokers",
            ),
            (
                KafkaConfig {
                    brokers: Some(vec!["kafka://a:9092".into()]),
                    ..cfg()
                },
                "\"kafka://a:9092\" has a scheme",
            ),
            (
                KafkaConfig {
                    brokers: Some(vec!["a".into()]),
                    ..cfg()
                },
                "\"a\" has no port",
            ),
            (
                KafkaConfig {
                    topic: Some("a b".into()),
                    ..cfg()
                },
                "sinks.k.topic: \"a b\" has ' '",
            ),
            (
                KafkaConfig {
                    offsets_topic: Some("events".into()),
                    ..cfg()
                },
                "sinks.k.offsets_topic: \"events\" is the records' topic too",
            ),
            (
                KafkaConfig {
                    key: Some(String::new()),
                    ..cfg()
                },
                "sinks.k.key: is empty",
            ),
            (
                KafkaConfig {
                    cert_file: Some("c.pem".into()),
                    ..cfg()
                },
                "sinks.k.cert_file needs sinks.k.key_file",
            ),
            (
                KafkaConfig {
                    user: Some("u".into()),
                    ..cfg()
                },
                "sinks.k.user needs sinks.k.sasl_mechanism",
            ),
            (
                KafkaConfig {
                    sasl_mechanism: Some(SaslMechanism::ScramSha256),
                    user: Some("u".into()),
                    ..cfg()
                },
                "sinks.k.sasl_mechanism needs sinks.k.password_env",
            ),
            (
                KafkaConfig {
                    transaction_timeout_ms: Some(10),
                    ..cfg()
                },
                "sinks.k.transaction_timeout_ms = 10 is out of range",
            ),
            (
                KafkaConfig {
                    message_bytes_max: Some(1),
                    ..cfg()
                },
                "sinks.k.message_bytes_max = 1 is out of range",
            ),
        ];
        for (c, want) in cases {
            let got = problem(c, &plain);
            assert!(got.contains(want), "{got:?} does not say {want:?}");
        }
        let two = DeliveryConfig {
            batches_in_flight: InFlight::Fixed(2),
            ..DeliveryConfig::default()
        };
        let got = problem(cfg(), &two);
        assert!(
            got.contains("sinks.k.batches_in_flight: must be 1 for type = \"kafka\""),
            "{got}"
        );
    }
}
