//! What every client of a Kafka sink shares: the connection settings
//! (brokers, TLS, SASL) as librdkafka takes them, a context that keeps
//! librdkafka's own chatter at debug level, and metadata lookups.

use std::time::Duration;

use rdkafka::admin::{AdminClient, AdminOptions, ResourceSpecifier};
use rdkafka::client::{Client, ClientContext};
use rdkafka::config::RDKafkaLogLevel;
use rdkafka::error::KafkaError;
use rdkafka::producer::{DeliveryResult, ProducerContext};
use rdkafka::types::RDKafkaErrorCode;
use rdkafka::ClientConfig;

use super::config::KafkaSettings;
use crate::SinkError;

/// The settings every client of the sink connects with: brokers, TLS and
/// SASL (the password read from its variable now: an unset one is an
/// error naming `password_env`), and timeouts.
pub(crate) fn base_config(s: &KafkaSettings, table: &str) -> Result<ClientConfig, SinkError> {
    let mut c = ClientConfig::new();
    c.set("bootstrap.servers", s.brokers.join(","))
        .set("client.id", concat!("spillway/", env!("CARGO_PKG_VERSION")))
        .set(
            "socket.connection.setup.timeout.ms",
            s.connect_timeout.as_millis().max(1000).to_string(),
        )
        // Brokers that come back are tried again soon.
        .set("reconnect.backoff.max.ms", "1000");
    let protocol = match (s.tls, s.sasl.is_some()) {
        (false, false) => "plaintext",
        (true, false) => "ssl",
        (false, true) => "sasl_plaintext",
        (true, true) => "sasl_ssl",
    };
    c.set("security.protocol", protocol);
    if let Some(ca) = &s.ca_file {
        SinkError::readable(table, "ca_file", ca)?;
        c.set("ssl.ca.location", ca.to_string_lossy());
    }
    if let Some((cert, key)) = &s.client_cert {
        SinkError::readable(table, "cert_file", cert)?;
        SinkError::readable(table, "key_file", key)?;
        c.set("ssl.certificate.location", cert.to_string_lossy())
            .set("ssl.key.location", key.to_string_lossy());
    }
    if let Some(sasl) = &s.sasl {
        let password = match std::env::var(&sasl.password_env) {
            Ok(v) if !v.is_empty() => v,
            _ => {
                return Err(SinkError::key(
                    table,
                    "password_env",
                    format!(
                        "the environment variable {} is not set (or empty)",
                        sasl.password_env
                    ),
                ))
            }
        };
        c.set("sasl.mechanism", sasl.mechanism.name())
            .set("sasl.username", &sasl.user)
            .set("sasl.password", password);
    }
    Ok(c)
}

/// A client context that sends librdkafka's log lines to tracing at debug
/// level (its connection errors repeat while a broker is down; the drain's
/// retry reason says what matters once), the gravest ones as warnings.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Quiet;

impl ClientContext for Quiet {
    fn log(&self, level: RDKafkaLogLevel, facility: &str, line: &str) {
        match level {
            RDKafkaLogLevel::Emerg | RDKafkaLogLevel::Alert | RDKafkaLogLevel::Critical => {
                tracing::warn!(target: "librdkafka", "librdkafka {facility}: {line}")
            }
            _ => tracing::debug!(target: "librdkafka", "librdkafka {facility}: {line}"),
        }
    }

    fn error(&self, error: KafkaError, reason: &str) {
        tracing::debug!(target: "librdkafka", "librdkafka: {error}: {reason}");
    }
}

impl rdkafka::consumer::ConsumerContext for Quiet {}

impl ProducerContext for Quiet {
    type DeliveryOpaque = ();

    fn delivery(&self, _: &DeliveryResult<'_>, _: Self::DeliveryOpaque) {}
}

/// [`Quiet`], and the last error librdkafka reported on its own (a
/// refused login, a failed TLS handshake), which a metadata request that
/// timed out does not say.
#[derive(Debug, Default)]
pub(crate) struct Watched {
    last: std::sync::Mutex<Option<(RDKafkaErrorCode, String)>>,
}

impl Watched {
    /// The last refused login or failed handshake.
    pub(crate) fn last(&self) -> Option<(RDKafkaErrorCode, String)> {
        self.last.lock().unwrap().clone()
    }
}

impl ClientContext for Watched {
    fn log(&self, level: RDKafkaLogLevel, facility: &str, line: &str) {
        Quiet.log(level, facility, line)
    }

    fn error(&self, error: KafkaError, reason: &str) {
        if let Some(code) = error.rdkafka_error_code() {
            if matches!(
                code,
                RDKafkaErrorCode::Authentication
                    | RDKafkaErrorCode::SaslAuthenticationFailed
                    | RDKafkaErrorCode::SSL
            ) {
                *self.last.lock().unwrap() = Some((code, reason.to_string()));
            }
        }
        Quiet.error(error, reason)
    }
}

impl ProducerContext for Watched {
    type DeliveryOpaque = ();

    fn delivery(&self, _: &DeliveryResult<'_>, _: Self::DeliveryOpaque) {}
}

/// A current-thread runtime to wait for an admin request on (the admin
/// client answers from its own thread).
pub(crate) fn runtime() -> Result<tokio::runtime::Runtime, String> {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .map_err(|e| format!("cannot start a runtime: {e}"))
}

/// `topic`'s partition count (`None` when the cluster does not have it),
/// and how many brokers the cluster has.
pub(crate) fn metadata_partitions<C: ClientContext>(
    client: &Client<C>,
    topic: &str,
    timeout: Duration,
) -> Result<(Option<i32>, i32), String> {
    let m = client
        .fetch_metadata(Some(topic), timeout)
        .map_err(|e| unreachable(e, timeout))?;
    let brokers = m.brokers().len() as i32;
    let partitions = m.topics().iter().find(|t| t.name() == topic).and_then(|t| {
        match t.error() {
            // Unknown topic (or no leader yet): as if it were missing.
            Some(_) => None,
            None if t.partitions().is_empty() => None,
            None => Some(t.partitions().len() as i32),
        }
    });
    Ok((partitions, brokers))
}

/// `(topic, key, value)` of the topics' configs; empty when they cannot
/// be read (no permission to describe them).
pub(crate) fn topic_configs<C: ClientContext + 'static>(
    admin: &AdminClient<C>,
    topics: &[&str],
    timeout: Duration,
) -> Vec<(String, String, String)> {
    let Ok(rt) = runtime() else {
        return Vec::new();
    };
    let specifiers: Vec<ResourceSpecifier<'_>> =
        topics.iter().map(|t| ResourceSpecifier::Topic(t)).collect();
    let options = AdminOptions::new().request_timeout(Some(timeout));
    let Ok(results) = rt.block_on(admin.describe_configs(&specifiers, &options)) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for (topic, r) in topics.iter().zip(results) {
        if let Ok(resource) = r {
            for e in resource.entries {
                if let Some(v) = e.value {
                    out.push((topic.to_string(), e.name, v));
                }
            }
        }
    }
    out
}

/// The largest message `topic` takes (its `max.message.bytes`), when it
/// can be read.
pub(crate) fn topic_message_bytes_max(
    config: &ClientConfig,
    topic: &str,
    timeout: Duration,
) -> Option<usize> {
    let admin: AdminClient<Quiet> = config.create_with_context(Quiet).ok()?;
    topic_configs(&admin, &[topic], timeout)
        .into_iter()
        .find(|(_, k, _)| k == "max.message.bytes")
        .and_then(|(_, _, v)| v.parse().ok())
}

/// A metadata request that failed: the brokers cannot be reached.
pub(crate) fn unreachable(e: KafkaError, timeout: Duration) -> String {
    match e.rdkafka_error_code() {
        Some(RDKafkaErrorCode::OperationTimedOut) | Some(RDKafkaErrorCode::AllBrokersDown) => {
            format!(
                "no broker answered within {} ms (connect_timeout_ms): {e}",
                timeout.as_millis()
            )
        }
        _ => e.to_string(),
    }
}
