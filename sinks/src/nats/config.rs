//! The NATS JetStream sink's keys ([`NatsConfig`]: what the user writes,
//! with defaults, ranges and checks) and the [`NatsSettings`] they resolve
//! to. Credentials are read from the environment and files only when the
//! sink is built (start, reload) or preflighted.

use std::ops::RangeInclusive;
use std::path::PathBuf;
use std::time::Duration;

use sink_sdk::keys::{Allowed, DefaultValue, Unit};
use sink_sdk::Limits;

use crate::keys::{check_env_var_name, DeliveryConfig};
use crate::sink_keys;
use crate::KeyProblem;

pub(crate) const DEFAULT_ACK_TIMEOUT_MS: u64 = 5_000;
pub(crate) const ACK_TIMEOUT_MS_RANGE: RangeInclusive<u64> = 100..=600_000;
pub(crate) const DEFAULT_CONNECT_TIMEOUT_MS: u64 = 5_000;
pub(crate) const CONNECT_TIMEOUT_MS_RANGE: RangeInclusive<u64> = 100..=600_000;
pub(crate) const DEFAULT_PUBLISHES_IN_FLIGHT: u32 = 256;
pub(crate) const PUBLISHES_IN_FLIGHT_RANGE: RangeInclusive<u32> = 1..=4096;
/// Two deliveries without a PubAck in a row: one can be a stream's leader
/// election, two in a row on a server that answers nothing is a hung
/// server (issue 39).
pub(crate) const DEFAULT_FAILOVER_AFTER_ACK_TIMEOUTS: u32 = 2;
pub(crate) const FAILOVER_AFTER_ACK_TIMEOUTS_RANGE: RangeInclusive<u32> = 1..=100;
/// async-nats' default is 60 s, and it drops a connection after three
/// unanswered pings: an idle connection to a hung server would look
/// connected for three minutes.
pub(crate) const DEFAULT_PING_INTERVAL_MS: u64 = 5_000;
pub(crate) const PING_INTERVAL_MS_RANGE: RangeInclusive<u64> = 1_000..=600_000;
/// The most servers a table may list.
const SERVERS_MAX: usize = 32;
/// What `{shard}` in `subject` is replaced with.
pub(crate) const SHARD_PLACEHOLDER: &str = "{shard}";

sink_keys! {
    /// The `type = "nats"` keys as the user wrote them (rendered into
    /// docs/sinks.md).
    pub struct NatsConfig in "sink.nats" {
        servers: Vec<String> = Key {
            default: DefaultValue::Required,
            allowed: Allowed::Shaped {
                text: r#"1..=32 `nats://HOST:PORT` or `tls://HOST:PORT` URLs"#,
                schema: r#"{"type": "array", "items": {"type": "string", "pattern": "^(nats|tls)://"}, "minItems": 1, "maxItems": 32}"#,
            },
            also: "",
            meaning: r#"Servers of the cluster; the client learns the others from the first it reaches and reconnects by itself."#,
        },
        subject: String = Key {
            default: DefaultValue::Required,
            allowed: Allowed::Text(
                r#"a NATS subject, no wildcards; `{shard}` is replaced by the record's shard"#,
            ),
            also: "",
            meaning: r#"The subject every record is published on, e.g. `"events.{shard}"`."#,
        },
        stream: String = Key {
            default: DefaultValue::Unset(""),
            allowed: Allowed::Text(r#"a stream name (letters, digits, `-`, `_`)"#),
            also: "",
            meaning: r#"The stream that must take `subject`: checked at start, at a reload and by `spillway check` (see below)."#,
        },
        token_env: String = Key {
            default: DefaultValue::Unset(""),
            allowed: Allowed::Text(r#"an environment variable name"#),
            also: "",
            meaning: r#"A token, read from this variable when the sink is built."#,
        },
        user: String = Key {
            default: DefaultValue::Unset(""),
            allowed: Allowed::Text(r#"a user name"#),
            also: "",
            meaning: r#"With `password_env` (both, or neither)."#,
        },
        password_env: String = Key {
            default: DefaultValue::Unset(""),
            allowed: Allowed::Text(r#"an environment variable name"#),
            also: "",
            meaning: r#"The variable holding `user`'s password, read when the sink is built."#,
        },
        creds_file: PathBuf = Key {
            default: DefaultValue::Unset(""),
            allowed: Allowed::Text(r#"a path"#),
            also: "",
            meaning: r#"A `.creds` file (JWT and NKey seed)."#,
        },
        ca_file: PathBuf = Key {
            default: DefaultValue::Unset(""),
            allowed: Allowed::Text(r#"a path (PEM)"#),
            also: "",
            meaning: r#"CA certificates the servers' certificates must chain to; implies TLS."#,
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
        ack_timeout_ms: u64 = Key {
            default: DefaultValue::Int(DEFAULT_ACK_TIMEOUT_MS),
            allowed: Allowed::Range {
                min: *ACK_TIMEOUT_MS_RANGE.start(),
                max: *ACK_TIMEOUT_MS_RANGE.end(),
                unit: Unit::Ms,
            },
            also: "",
            meaning: r#"How long a publish waits for its PubAck before it is retried."#,
        },
        connect_timeout_ms: u64 = Key {
            default: DefaultValue::Int(DEFAULT_CONNECT_TIMEOUT_MS),
            allowed: Allowed::Range {
                min: *CONNECT_TIMEOUT_MS_RANGE.start(),
                max: *CONNECT_TIMEOUT_MS_RANGE.end(),
                unit: Unit::Ms,
            },
            also: "",
            meaning: r#"How long connecting waits for a server."#,
        },
        publishes_in_flight: u32 = Key {
            default: DefaultValue::Int(DEFAULT_PUBLISHES_IN_FLIGHT as u64),
            allowed: Allowed::Range {
                min: *PUBLISHES_IN_FLIGHT_RANGE.start() as u64,
                max: *PUBLISHES_IN_FLIGHT_RANGE.end() as u64,
                unit: Unit::Count,
            },
            also: "",
            meaning: r#"Publishes of one batch awaiting their PubAck at once (pipelining)."#,
        },
        failover_after_ack_timeouts: u32 = Key {
            default: DefaultValue::Int(DEFAULT_FAILOVER_AFTER_ACK_TIMEOUTS as u64),
            allowed: Allowed::Range {
                min: *FAILOVER_AFTER_ACK_TIMEOUTS_RANGE.start() as u64,
                max: *FAILOVER_AFTER_ACK_TIMEOUTS_RANGE.end() as u64,
                unit: Unit::Count,
            },
            also: "",
            meaning: r#"After this many deliveries in a row on one connection got no answer at all (every PubAck timed out), the sink drops that connection and connects to the next server of `servers`, the silent one last (see [A hung server](#a-hung-server))."#,
        },
        ping_interval_ms: u64 = Key {
            default: DefaultValue::Int(DEFAULT_PING_INTERVAL_MS),
            allowed: Allowed::Range {
                min: *PING_INTERVAL_MS_RANGE.start(),
                max: *PING_INTERVAL_MS_RANGE.end(),
                unit: Unit::Ms,
            },
            also: "",
            meaning: r#"How often the client pings an idle connection; after three pings without an answer it connects again."#,
        },
        server_sync_always: bool = Key {
            default: DefaultValue::Bool(false),
            allowed: Allowed::Text(r#"`true`, `false`"#),
            also: "",
            meaning: r#"Say that every server runs with `jetstream { sync_interval: always }`: silences the start-up warning below."#,
        },
    }
}

/// Which credentials the sink sends.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Credentials {
    None,
    Token { env: String },
    UserPassword { user: String, password_env: String },
    CredsFile(PathBuf),
}

/// The checked keys of one NATS sink.
#[derive(Debug, Clone)]
pub(crate) struct NatsSettings {
    pub servers: Vec<String>,
    pub subject: String,
    pub stream: Option<String>,
    pub credentials: Credentials,
    pub ca_file: Option<PathBuf>,
    pub client_cert: Option<(PathBuf, PathBuf)>,
    pub ack_timeout: Duration,
    pub connect_timeout: Duration,
    pub publishes_in_flight: usize,
    pub failover_after_ack_timeouts: u32,
    pub ping_interval: Duration,
    pub server_sync_always: bool,
    /// How long the sink may retry one batch: what the stream's duplicate
    /// window must cover (`retry_duration_max_ms`, or `None`: forever).
    pub retry_horizon: Option<Duration>,
    pub limits: Limits,
}

impl NatsConfig {
    /// Checks every key and resolves them into the settings the sink is
    /// built from. Touches neither the environment, the files nor the
    /// network.
    pub(crate) fn check(&self, delivery: &DeliveryConfig) -> Result<NatsSettings, KeyProblem> {
        let missing = |key| KeyProblem::Missing {
            key,
            kind: super::TYPE.name,
        };
        let servers = self.servers.clone().ok_or_else(|| missing("servers"))?;
        if servers.is_empty() || servers.len() > SERVERS_MAX {
            return Err(KeyProblem::Invalid {
                key: "servers".into(),
                reason: format!("lists {} servers: allowed 1..={SERVERS_MAX}", servers.len()),
            });
        }
        for s in &servers {
            check_server_url(s)?;
        }
        let subject = self.subject.clone().ok_or_else(|| missing("subject"))?;
        check_subject(&subject)?;
        if let Some(stream) = &self.stream {
            check_stream_name(stream)?;
        }
        let credentials = self.credentials()?;
        if let Some(name) = &self.token_env {
            check_env_var_name("token_env", name)?;
        }
        if let Some(name) = &self.password_env {
            check_env_var_name("password_env", name)?;
        }
        let client_cert = match (&self.cert_file, &self.key_file) {
            (Some(c), Some(k)) => Some((c.clone(), k.clone())),
            (None, None) => None,
            (Some(_), None) => return Err(against("cert_file", "key_file")),
            (None, Some(_)) => return Err(against("key_file", "cert_file")),
        };
        self.check_ranges()?;
        Ok(NatsSettings {
            servers,
            subject,
            stream: self.stream.clone(),
            credentials,
            ca_file: self.ca_file.clone(),
            client_cert,
            ack_timeout: Duration::from_millis(
                self.ack_timeout_ms.unwrap_or(DEFAULT_ACK_TIMEOUT_MS),
            ),
            connect_timeout: Duration::from_millis(
                self.connect_timeout_ms
                    .unwrap_or(DEFAULT_CONNECT_TIMEOUT_MS),
            ),
            publishes_in_flight: self
                .publishes_in_flight
                .unwrap_or(DEFAULT_PUBLISHES_IN_FLIGHT) as usize,
            failover_after_ack_timeouts: self
                .failover_after_ack_timeouts
                .unwrap_or(DEFAULT_FAILOVER_AFTER_ACK_TIMEOUTS),
            ping_interval: Duration::from_millis(
                self.ping_interval_ms.unwrap_or(DEFAULT_PING_INTERVAL_MS),
            ),
            server_sync_always: self.server_sync_always.unwrap_or(false),
            retry_horizon: delivery.retry_duration_max(),
            limits: delivery.limits(),
        })
    }

    /// One way to authenticate at most: `token_env`, `user` with
    /// `password_env`, or `creds_file`.
    fn credentials(&self) -> Result<Credentials, KeyProblem> {
        let chosen: Vec<&'static str> = [
            ("token_env", self.token_env.is_some()),
            ("user", self.user.is_some()),
            ("creds_file", self.creds_file.is_some()),
        ]
        .into_iter()
        .filter_map(|(k, set)| set.then_some(k))
        .collect();
        if chosen.len() > 1 {
            return Err(against(chosen[1], chosen[0]));
        }
        match (&self.user, &self.password_env) {
            (Some(_), None) => return Err(against("user", "password_env")),
            (None, Some(_)) => return Err(against("password_env", "user")),
            _ => {}
        }
        Ok(if let Some(env) = &self.token_env {
            Credentials::Token { env: env.clone() }
        } else if let (Some(user), Some(password_env)) = (&self.user, &self.password_env) {
            Credentials::UserPassword {
                user: user.clone(),
                password_env: password_env.clone(),
            }
        } else if let Some(path) = &self.creds_file {
            Credentials::CredsFile(path.clone())
        } else {
            Credentials::None
        })
    }
}

/// `key` needs (or excludes) `other`: both named with the table.
fn against(key: &'static str, other: &'static str) -> KeyProblem {
    let (head, tail) = match (key, other) {
        ("cert_file", _) | ("key_file", _) | ("user", _) | ("password_env", _) => {
            (" needs ", " too")
        }
        _ => (" cannot be set with ", " (one way to authenticate)"),
    };
    KeyProblem::AgainstKey {
        key: key.into(),
        head: head.into(),
        other,
        tail: tail.into(),
    }
}

fn invalid(key: &str, reason: String) -> KeyProblem {
    KeyProblem::Invalid {
        key: key.into(),
        reason,
    }
}

/// `nats://host:port` or `tls://host:port` (port optional).
fn check_server_url(url: &str) -> Result<(), KeyProblem> {
    let rest = url
        .strip_prefix("nats://")
        .or_else(|| url.strip_prefix("tls://"))
        .ok_or_else(|| invalid("servers", format!("{url:?} is not a nats:// or tls:// URL")))?;
    let host = rest.rsplit('@').next().unwrap_or(rest);
    if host.is_empty() || host.starts_with(':') || host.contains('/') {
        return Err(invalid(
            "servers",
            format!("{url:?} has no host (nats://HOST:PORT)"),
        ));
    }
    Ok(())
}

/// A subject to publish on: dot-separated tokens, none empty, no
/// wildcards, no whitespace; `{shard}` allowed.
pub(crate) fn check_subject(subject: &str) -> Result<(), KeyProblem> {
    let plain = subject.replace(SHARD_PLACEHOLDER, "0");
    if plain.is_empty() || plain.len() > 255 {
        return Err(invalid(
            "subject",
            format!("{subject:?} must be 1..=255 bytes"),
        ));
    }
    if let Some(c) = plain
        .chars()
        .find(|c| c.is_whitespace() || c.is_control() || *c == '{' || *c == '}')
    {
        return Err(invalid(
            "subject",
            format!("{subject:?} has {c:?}: subjects have no whitespace, and the only placeholder is {SHARD_PLACEHOLDER}"),
        ));
    }
    for token in plain.split('.') {
        if token.is_empty() {
            return Err(invalid(
                "subject",
                format!("{subject:?} has an empty token (two dots, or a dot at an end)"),
            ));
        }
        if token == "*" || token == ">" {
            return Err(invalid(
                "subject",
                format!(
                    "{subject:?} has the wildcard {token:?}: a record is published on one subject"
                ),
            ));
        }
    }
    Ok(())
}

/// A stream name: 1..=255 of letters, digits, `-` and `_`.
fn check_stream_name(name: &str) -> Result<(), KeyProblem> {
    let ok = !name.is_empty()
        && name.len() <= 255
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
    if ok {
        Ok(())
    } else {
        Err(invalid(
            "stream",
            format!("{name:?} is not a stream name (letters, digits, - and _)"),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg() -> NatsConfig {
        NatsConfig {
            servers: Some(vec!["nats://127.0.0.1:4222".into()]),
            subject: Some("events.{shard}".into()),
            ..NatsConfig::default()
        }
    }

    fn problem(c: NatsConfig) -> String {
        let p = c.check(&DeliveryConfig::default()).unwrap_err();
        crate::SinkConfigError::from(p)
            .in_table("sinks.js")
            .to_string()
    }

    #[test]
    fn defaults_and_a_template() {
        let s = cfg().check(&DeliveryConfig::default()).unwrap();
        assert_eq!(s.subject, "events.{shard}");
        assert_eq!(s.ack_timeout, Duration::from_secs(5));
        assert_eq!(s.publishes_in_flight, 256);
        assert_eq!(s.failover_after_ack_timeouts, 2);
        assert_eq!(s.ping_interval, Duration::from_secs(5));
        assert_eq!(s.credentials, Credentials::None);
        assert!(!s.server_sync_always);
    }

    #[test]
    fn bad_keys_are_named() {
        let cases: Vec<(NatsConfig, &str)> = vec![
            (
                NatsConfig {
                    servers: None,
                    ..cfg()
                },
                "sinks.js.servers is required",
            ),
            (
                NatsConfig {
                    servers: Some(vec![]),
                    ..cfg()
                },
                "sinks.js.servers: lists 0 servers",
            ),
            (
                NatsConfig {
                    servers: Some(vec!["http://x:1".into()]),
                    ..cfg()
                },
                "\"http://x:1\" is not a nats:// or tls:// URL",
            ),
            (
                NatsConfig {
                    subject: None,
                    ..cfg()
                },
                "sinks.js.subject is required",
            ),
            (
                NatsConfig {
                    subject: Some("a.>".into()),
                    ..cfg()
                },
                "wildcard \">\"",
            ),
            (
                NatsConfig {
                    subject: Some("a..b".into()),
                    ..cfg()
                },
                "empty token",
            ),
            (
                NatsConfig {
                    subject: Some("a b".into()),
                    ..cfg()
                },
                "no whitespace",
            ),
            (
                NatsConfig {
                    subject: Some("a.{id}".into()),
                    ..cfg()
                },
                "the only placeholder is {shard}",
            ),
            (
                NatsConfig {
                    stream: Some("a.b".into()),
                    ..cfg()
                },
                "sinks.js.stream: \"a.b\" is not a stream name",
            ),
            (
                NatsConfig {
                    token_env: Some("T".into()),
                    creds_file: Some("x.creds".into()),
                    ..cfg()
                },
                "sinks.js.creds_file cannot be set with sinks.js.token_env",
            ),
            (
                NatsConfig {
                    user: Some("u".into()),
                    ..cfg()
                },
                "sinks.js.user needs sinks.js.password_env",
            ),
            (
                NatsConfig {
                    cert_file: Some("c.pem".into()),
                    ..cfg()
                },
                "sinks.js.cert_file needs sinks.js.key_file",
            ),
            (
                NatsConfig {
                    token_env: Some("A=B".into()),
                    ..cfg()
                },
                "sinks.js.token_env: \"A=B\" is not an environment variable name",
            ),
            (
                NatsConfig {
                    ack_timeout_ms: Some(10),
                    ..cfg()
                },
                "sinks.js.ack_timeout_ms = 10 is out of range",
            ),
            (
                NatsConfig {
                    publishes_in_flight: Some(0),
                    ..cfg()
                },
                "sinks.js.publishes_in_flight = 0 is out of range",
            ),
            (
                NatsConfig {
                    failover_after_ack_timeouts: Some(0),
                    ..cfg()
                },
                "sinks.js.failover_after_ack_timeouts = 0 is out of range",
            ),
            (
                NatsConfig {
                    ping_interval_ms: Some(100),
                    ..cfg()
                },
                "sinks.js.ping_interval_ms = 100 is out of range",
            ),
        ];
        for (c, want) in cases {
            let got = problem(c);
            assert!(got.contains(want), "{got:?} does not say {want:?}");
        }
    }
}
