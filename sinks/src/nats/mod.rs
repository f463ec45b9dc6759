//! The NATS JetStream sink: each record is one message, published with a
//! `Nats-Msg-Id` made of the daemon's instance id, the shard and the
//! record's sequence number, so the stream's duplicate window removes what
//! a retry or a restart publishes again: the stream holds every acked
//! record once.
//!
//! Rooms: [`config`] holds the keys; this module connects, checks the
//! stream, publishes and classifies.
//!
//! Threading: one factory owns a small multi-threaded tokio runtime and,
//! once connected, one client (one connection, which async-nats keeps
//! reconnecting); the drain threads call `deliver` outside any runtime and
//! block on it. The connection's own tasks (pings, reconnects, PubAcks) run
//! on the runtime's workers between deliveries too. A batch's publishes are
//! pipelined, up to `publishes_in_flight` awaiting their PubAck at once.
//!
//! Failover: a server that hangs (SIGSTOP, a frozen VM) keeps its TCP
//! connection open, and async-nats never notices while publishes flow (each
//! one postpones its next ping) and, reconnecting, waits for the hung
//! server's INFO without a deadline. So after `failover_after_ack_timeouts`
//! deliveries in a row with no answer at all, the factory replaces the
//! client by a new one that tries the servers in order from the one after
//! the silent server, which comes last.

mod config;

use std::future::IntoFuture;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use async_nats::connection::State;
use async_nats::jetstream::{self, context::Publish, context::PublishErrorKind};
use async_nats::{Client, ConnectErrorKind, ConnectOptions, Event, HeaderMap, ServerError};
use bytes::Bytes;
use sink_sdk::{Batch, Health, Limits, Outcome, RecordOutcome, Sink};
use tokio::runtime::Runtime;

use crate::keys::DeliveryConfig;
use crate::sink_type::{CheckedSink, Preflight, ReadBack, SinkEnv, SinkType, TypeKeys};
use crate::{CreateError, KeyProblem, SinkError, SinkFactory};
pub use config::NatsConfig;
use config::{Credentials, NatsSettings, SHARD_PLACEHOLDER};

/// The NATS sink in the registry.
pub static TYPE: SinkType = SinkType {
    name: "nats",
    about: "Publish each record to a NATS JetStream stream, once (the stream's duplicate window removes redelivery).",
    reference: NatsConfig::REFERENCE,
    unset: || Box::<NatsConfig>::default(),
};

/// Room the headers of one message take at most (ids, numbers, names).
const HEADER_BYTES_MAX: usize = 256;
/// Worker threads of a factory's runtime: publishes are I/O, and the drain
/// threads do the waiting.
const RUNTIME_WORKERS: usize = 2;

impl TypeKeys for NatsConfig {
    fn sink_type(&self) -> &'static SinkType {
        &TYPE
    }

    fn read_key(&mut self, key: &'static str, value: toml::Value) -> Result<(), toml::de::Error> {
        NatsConfig::read_key(self, key, value)
    }

    fn check(&self, delivery: &DeliveryConfig) -> Result<Arc<dyn CheckedSink>, KeyProblem> {
        Ok(Arc::new(NatsConfig::check(self, delivery)?))
    }
}

impl CheckedSink for NatsSettings {
    fn build(&self, table: &str, env: &SinkEnv) -> Result<Arc<dyn SinkFactory>, SinkError> {
        Ok(Arc::new(NatsFactory::new(self, table, env)?))
    }

    fn preflight(&self, table: &str) -> Result<Preflight, SinkError> {
        let runtime = runtime("preflight")?;
        let options = connect_options(self, table, None)?;
        runtime
            .block_on(async {
                match connect(self, options).await {
                    Ok(client) => check_stream(self, table, &client).await,
                    Err(e) => reachable_later(self, table, e),
                }
            })
            .map(Preflight::from)
    }

    fn read_back(&self, table: &str, limit: usize) -> Option<Result<Vec<ReadBack>, SinkError>> {
        Some(read_back(self, table, limit))
    }
}

/// The last `limit` messages of the sink's stream (named by `stream`, or
/// the one that takes `subject`), each by its stream sequence number: no
/// consumer is made, nothing is acknowledged or changed.
fn read_back(s: &NatsSettings, table: &str, limit: usize) -> Result<Vec<ReadBack>, SinkError> {
    let runtime = runtime("tail")?;
    let options = connect_options(s, table, None)?;
    let servers = s.servers.join(", ");
    let failed = |what: String| SinkError::Build {
        reason: format!("{table}: {what}"),
    };
    runtime.block_on(async {
        let client = connect(s, options)
            .await
            .map_err(|e| failed(format!("cannot connect to {servers}: {e}")))?;
        let js = jetstream::new(client);
        let name = match &s.stream {
            Some(n) => n.clone(),
            None => {
                let subject = s.subject.replace(SHARD_PLACEHOLDER, "0");
                js.stream_by_subject(subject.as_str()).await.map_err(|e| {
                    failed(format!(
                        "no stream on {servers} takes subject {subject:?} ({e}); set stream"
                    ))
                })?
            }
        };
        let mut stream = js
            .get_stream(&name)
            .await
            .map_err(|e| failed(format!("no stream {name:?} on {servers} ({e})")))?;
        let state = stream
            .info()
            .await
            .map_err(|e| failed(format!("reading stream {name:?}: {e}")))?
            .state
            .clone();
        if state.messages == 0 || limit == 0 {
            return Ok(Vec::new());
        }
        let last = state.last_sequence;
        let from = last
            .saturating_sub(limit as u64 - 1)
            .max(state.first_sequence);
        let mut out = Vec::new();
        for seq in from..=last {
            let m = match stream.get_raw_message(seq).await {
                Ok(m) => m,
                // Deleted (or expired) since the stream's state was read.
                Err(e) if e.kind() == jetstream::stream::RawMessageErrorKind::NoMessageFound => {
                    continue
                }
                Err(e) => {
                    return Err(failed(format!(
                        "reading message {seq} of stream {name:?}: {e}"
                    )))
                }
            };
            let header = |h: &str| {
                m.headers
                    .get(h)
                    .and_then(|v| v.as_str().parse::<u64>().ok())
            };
            let record = header("Spillway-Shard")
                .zip(header("Spillway-Seq"))
                .and_then(|(shard, seq)| Some((u32::try_from(shard).ok()?, seq)));
            out.push(ReadBack {
                at: format!("{name}:{} {}", m.sequence, m.subject),
                record,
                payload: m.payload.to_vec(),
            });
        }
        Ok(out)
    })
}

fn runtime(what: &str) -> Result<Runtime, SinkError> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(RUNTIME_WORKERS)
        .enable_all()
        .thread_name(format!("spillway-nats-{what}"))
        .build()
        .map_err(|e| SinkError::Build {
            reason: format!("nats sink: cannot start its runtime: {e}"),
        })
}

/// The client's options: credentials read now (an unset variable or an
/// unreadable file is an error naming its key), TLS, timeouts; `events`
/// receives the server's asynchronous errors (a permissions violation).
fn connect_options(
    s: &NatsSettings,
    table: &str,
    events: Option<Arc<Mutex<Option<String>>>>,
) -> Result<ConnectOptions, SinkError> {
    let env = |key: &str, var: &str| -> Result<String, SinkError> {
        match std::env::var(var) {
            Ok(v) if !v.is_empty() => Ok(v),
            _ => Err(SinkError::key(
                table,
                key,
                format!("the environment variable {var} is not set (or empty)"),
            )),
        }
    };
    let mut o = match &s.credentials {
        Credentials::None => ConnectOptions::new(),
        Credentials::Token { env: var } => ConnectOptions::with_token(env("token_env", var)?),
        Credentials::UserPassword { user, password_env } => {
            ConnectOptions::with_user_and_password(user.clone(), env("password_env", password_env)?)
        }
        Credentials::CredsFile(path) => {
            let text = std::fs::read_to_string(path).map_err(|source| SinkError::Io {
                table: table.to_string(),
                key: "creds_file",
                path: path.clone(),
                source,
            })?;
            ConnectOptions::with_credentials(&text).map_err(|e| {
                SinkError::key(table, "creds_file", format!("{}: {e}", path.display()))
            })?
        }
    };
    if let Some(ca) = &s.ca_file {
        SinkError::readable(table, "ca_file", ca)?;
        o = o.add_root_certificates(ca.clone()).require_tls(true);
    }
    if let Some((cert, key)) = &s.client_cert {
        SinkError::readable(table, "cert_file", cert)?;
        SinkError::readable(table, "key_file", key)?;
        o = o.add_client_certificate(cert.clone(), key.clone());
    }
    if s.servers.iter().any(|u| u.starts_with("tls://")) {
        o = o.require_tls(true);
    }
    if let Some(seen) = events {
        o = o.event_callback(move |event| {
            let seen = seen.clone();
            async move {
                if let Event::ServerError(ServerError::Other(text)) = &event {
                    if text.to_ascii_lowercase().contains("permissions violation") {
                        *seen.lock().unwrap() = Some(text.clone());
                    }
                }
                tracing::debug!(event = %event, "nats connection event");
            }
        });
    }
    Ok(o.connection_timeout(s.connect_timeout)
        .ping_interval(s.ping_interval)
        .name(concat!("spillway/", env!("CARGO_PKG_VERSION"))))
}

async fn connect(
    s: &NatsSettings,
    options: ConnectOptions,
) -> Result<Client, async_nats::ConnectError> {
    let servers: Vec<async_nats::ServerAddr> =
        s.servers.iter().filter_map(|u| u.parse().ok()).collect();
    options.connect(servers).await
}

/// A client that tries `servers` in order from index `first` (wrapping
/// round), and reconnects in that order too. The whole connect has a
/// deadline: async-nats bounds the TCP connect by `connect_timeout_ms` but
/// waits for a hung server's INFO forever.
async fn connect_from(
    s: &NatsSettings,
    options: ConnectOptions,
    first: usize,
) -> Result<Client, async_nats::ConnectError> {
    let n = s.servers.len();
    let servers: Vec<async_nats::ServerAddr> = (0..n)
        .filter_map(|k| s.servers[(first + k) % n].parse().ok())
        .collect();
    let deadline = s.connect_timeout * n as u32;
    match tokio::time::timeout(deadline, options.retain_servers_order().connect(servers)).await {
        Ok(connected) => connected,
        Err(_) => Err(std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            format!(
                "no server of {} answered within {} ms (connect_timeout_ms for each)",
                s.servers.join(", "),
                deadline.as_millis()
            ),
        )
        .into()),
    }
}

/// Which of `servers` a client is connected to, from the INFO the server
/// sent (its listen host and port); `None` when none matches or several do.
fn connected_index(servers: &[String], info: &async_nats::ServerInfo) -> Option<usize> {
    let wildcard = matches!(info.host.as_str(), "" | "0.0.0.0" | "::" | "[::]");
    let candidates: Vec<usize> = servers
        .iter()
        .enumerate()
        .filter_map(|(i, u)| {
            let a: async_nats::ServerAddr = u.parse().ok()?;
            (a.port() == info.port && (wildcard || a.host() == info.host)).then_some(i)
        })
        .collect();
    match candidates.as_slice() {
        [one] => Some(*one),
        _ => None,
    }
}

/// A connection that failed: credentials the servers refuse are an error
/// (naming the credential's key); servers that cannot be reached now are a
/// warning (the daemon starts and retries, as for an HTTP sink whose host
/// is down).
fn reachable_later(
    s: &NatsSettings,
    table: &str,
    e: async_nats::ConnectError,
) -> Result<Vec<String>, SinkError> {
    match e.kind() {
        ConnectErrorKind::AuthorizationViolation | ConnectErrorKind::Authentication => {
            let key = match &s.credentials {
                Credentials::None => "servers",
                Credentials::Token { .. } => "token_env",
                Credentials::UserPassword { .. } => "password_env",
                Credentials::CredsFile(_) => "creds_file",
            };
            Err(SinkError::key(
                table,
                key,
                format!("the servers refused the credentials: {e}"),
            ))
        }
        ConnectErrorKind::Tls => Err(SinkError::key(
            table,
            if s.ca_file.is_some() {
                "ca_file"
            } else {
                "servers"
            },
            format!("TLS with the servers failed: {e}"),
        )),
        _ => Ok(vec![format!(
            "{table}: cannot reach the NATS servers {} now ({e}); the daemon starts and retries",
            s.servers.join(", ")
        )]),
    }
}

/// With `stream` set: it exists and takes the subject (a missing stream,
/// or a subject it does not cover, is an error naming both). Warnings: a
/// duplicate window shorter than the sink's retry horizon, one replica, a
/// server that may not fsync before its PubAck.
async fn check_stream(
    s: &NatsSettings,
    table: &str,
    client: &Client,
) -> Result<Vec<String>, SinkError> {
    let mut warnings = Vec::new();
    let server = client.server_info();
    if !s.server_sync_always {
        warnings.push(sync_warning(&server.version));
    }
    let Some(name) = &s.stream else {
        return Ok(combined(table, warnings));
    };
    let js = jetstream::new(client.clone());
    let mut stream = js.get_stream(name).await.map_err(|e| {
        SinkError::key(
            table,
            "stream",
            format!(
                "no stream {name:?} on the servers {} ({e})",
                s.servers.join(", ")
            ),
        )
    })?;
    let info = stream
        .info()
        .await
        .map_err(|e| SinkError::key(table, "stream", format!("reading stream {name:?}: {e}")))?;
    let subject = s.subject.replace(SHARD_PLACEHOLDER, "0");
    if !info
        .config
        .subjects
        .iter()
        .any(|f| subject_matches(f, &subject))
    {
        return Err(SinkError::key(
            table,
            "subject",
            format!(
                "{:?} is not a subject of stream {name:?} (it takes {:?})",
                s.subject, info.config.subjects
            ),
        ));
    }
    let window = info.config.duplicate_window;
    match s.retry_horizon {
        Some(horizon) if window >= horizon => {}
        horizon => warnings.push(format!(
            "stream {name:?} removes duplicates within {} s, shorter than this sink may retry a batch ({}): a record published again after that is stored twice. Set the stream's duplicate_window to cover the longest outage plus a restart",
            window.as_secs(),
            horizon.map_or("forever: retry_duration_max_ms = 0".to_string(), |h| format!("retry_duration_max_ms = {}", h.as_millis()))
        )),
    }
    if info.config.num_replicas < 2 {
        warnings.push(format!(
            "stream {name:?} has {} replica: a PubAck then stands on one server's disk. Use num_replicas = 3",
            info.config.num_replicas
        ));
    }
    Ok(combined(table, warnings))
}

/// What the servers' fsync policy means for a PubAck, said so that the
/// operator can act on it with the server they run: `sync_interval` came
/// in nats-server 2.10, so an older server is told to upgrade, not to set
/// what it does not have.
fn sync_warning(version: &str) -> String {
    let mut parts = version.split('.').map(|p| p.parse::<u32>().unwrap_or(0));
    let (major, minor) = (parts.next().unwrap_or(0), parts.next().unwrap_or(0));
    if (major, minor) < (2, 10) {
        format!(
            "nats-server {version} fsyncs JetStream about every 2 minutes and has no setting to fsync before its PubAck (`sync_interval` came in 2.10): an acknowledged message is lost only if every server holding a replica loses power within that window, so keep num_replicas = 3 on separate machines, and upgrade to 2.10 or later to close it (then `jetstream {{ sync_interval: always }}` on every server and `server_sync_always = true` here)"
        )
    } else {
        format!(
            "a PubAck is a durable write only if every server runs with `jetstream {{ sync_interval: always }}` (this one is nats-server {version}): otherwise a server's power cut can lose acknowledged messages. Set it on the servers, then `server_sync_always = true` here to silence this"
        )
    }
}

/// The start's warnings as one: what to change, in one line.
fn combined(table: &str, warnings: Vec<String>) -> Vec<String> {
    match warnings.len() {
        0 => warnings,
        1 => vec![format!("{table}: {}", warnings[0])],
        n => vec![format!(
            "{table}: {n} things to change: {}",
            warnings
                .iter()
                .enumerate()
                .map(|(i, w)| format!("({}) {w}", i + 1))
                .collect::<Vec<_>>()
                .join("; ")
        )],
    }
}

/// Whether `subject` is taken by the stream subject filter `filter`
/// (tokens; `*` matches one, `>` the rest).
fn subject_matches(filter: &str, subject: &str) -> bool {
    let mut f = filter.split('.');
    let mut s = subject.split('.');
    loop {
        match (f.next(), s.next()) {
            (Some(">"), Some(_)) => return true,
            (Some("*"), Some(_)) => {}
            (Some(a), Some(b)) if a == b => {}
            (None, None) => return true,
            _ => return false,
        }
    }
}

/// Shared by a factory's instances: the runtime, the one client (made on
/// first need, replaced by a failover), the message-id prefix.
struct Shared {
    settings: NatsSettings,
    table: String,
    runtime: Runtime,
    client: tokio::sync::Mutex<Option<Client>>,
    /// Bumped by each failover: an instance whose client is older takes
    /// the current one before its next delivery.
    generation: AtomicU64,
    /// Silence on the current connection, and where the next client
    /// starts in `servers`.
    failover: Mutex<Failover>,
    /// `<instance id>:` (see [`SinkEnv::instance_id`]).
    id_prefix: String,
    /// The last permissions violation the server reported.
    violation: Arc<Mutex<Option<String>>>,
}

struct Failover {
    /// Deliveries in a row on the current connection that got no answer.
    silent: u32,
    /// The index in `servers` a new client tries first.
    first: usize,
}

/// What the server said to one delivery's publishes.
#[derive(Default, Debug, Clone, Copy, PartialEq, Eq)]
struct Heard {
    /// PubAcks (or JetStream errors: the server is alive) received.
    answers: usize,
    /// PubAcks that never came.
    silences: usize,
}

/// Builds one [`NatsSink`] per shard (and per batch in flight); they share
/// one connection.
pub struct NatsFactory {
    shared: Arc<Shared>,
}

impl NatsFactory {
    fn new(s: &NatsSettings, table: &str, env: &SinkEnv) -> Result<NatsFactory, SinkError> {
        let violation = Arc::new(Mutex::new(None));
        // Credentials are read now: an unset variable stops the build.
        connect_options(s, table, Some(violation.clone()))?;
        // Each daemon starts at a server of its own (from its instance id),
        // so a fleet spreads over the cluster as async-nats' shuffle did.
        let first = env.instance_id.bytes().map(usize::from).sum::<usize>() % s.servers.len();
        let shared = Arc::new(Shared {
            settings: s.clone(),
            table: table.to_string(),
            runtime: runtime("sink")?,
            client: tokio::sync::Mutex::new(None),
            generation: AtomicU64::new(0),
            failover: Mutex::new(Failover { silent: 0, first }),
            id_prefix: format!("{}:", env.instance_id),
            violation,
        });
        // Connect now: a missing stream or refused credentials stop the
        // start (or the reload) here; servers that cannot be reached are
        // warned about and tried again by every instance.
        let checked = shared.runtime.block_on(async {
            match shared.client().await {
                Ok((client, _)) => check_stream(s, table, &client).await,
                Err(e) => reachable_later(s, table, e),
            }
        })?;
        for w in checked {
            tracing::warn!("{w}");
        }
        Ok(NatsFactory { shared })
    }
}

impl Shared {
    /// The client and its generation, connecting first if there is none
    /// yet.
    async fn client(&self) -> Result<(Client, u64), async_nats::ConnectError> {
        let mut client = self.client.lock().await;
        let generation = self.generation.load(Ordering::Acquire);
        if let Some(c) = client.as_ref() {
            return Ok((c.clone(), generation));
        }
        // async-nats keeps reconnecting once connected; the first connect
        // is retried by the drain (its instance fails, with backoff).
        let first = self.failover.lock().unwrap().first;
        let c = self.connect_from(first).await?;
        *client = Some(c.clone());
        Ok((c, generation))
    }

    async fn connect_from(&self, first: usize) -> Result<Client, async_nats::ConnectError> {
        // Options are consumed by a connect: made for each one.
        let options = connect_options(&self.settings, &self.table, Some(self.violation.clone()))
            .map_err(|e| std::io::Error::other(e.to_string()))?;
        connect_from(&self.settings, options, first).await
    }

    /// Counts what one delivery on the client of `generation` heard; the
    /// number of silent deliveries in a row on it (0 once it answers).
    fn heard(&self, generation: u64, heard: Heard) -> u32 {
        let mut f = self.failover.lock().unwrap();
        if generation != self.generation.load(Ordering::Acquire) {
            return 0;
        }
        if heard.answers > 0 {
            f.silent = 0;
        } else if heard.silences > 0 {
            f.silent += 1;
        }
        f.silent
    }

    /// Replaces the client of `generation`, which has not answered
    /// `silent` deliveries in a row, by one that tries the next server
    /// first and the silent one last. Another instance may have done it
    /// already (the generation moved on); a connect that fails keeps the
    /// old client, and the count starts again.
    async fn fail_over(&self, generation: u64, silent: u32) {
        let mut client = self.client.lock().await;
        if generation != self.generation.load(Ordering::Acquire) {
            return;
        }
        let Some(old) = client.as_ref() else {
            return;
        };
        let info = old.server_info();
        let servers = &self.settings.servers;
        let first = self.failover.lock().unwrap().first;
        let silent_index = connected_index(servers, &info).unwrap_or(first);
        let next = (silent_index + 1) % servers.len();
        let silent_server = format!("{}:{}", info.host, info.port);
        match self.connect_from(next).await {
            Ok(c) => {
                let now = c.server_info();
                tracing::warn!(
                    sink = %self.table,
                    "nats sink: no answer from {silent_server} to {silent} deliveries in a row (no PubAck within {} ms, ack_timeout_ms; failover_after_ack_timeouts = {}): dropped that connection, now connected to {}:{} (what was not acknowledged is published again; the stream drops what it already has by Nats-Msg-Id)",
                    self.settings.ack_timeout.as_millis(),
                    self.settings.failover_after_ack_timeouts,
                    now.host,
                    now.port
                );
                // Dropping the last clone closes the old connection.
                *client = Some(c);
                let mut f = self.failover.lock().unwrap();
                f.silent = 0;
                f.first = next;
                self.generation.fetch_add(1, Ordering::AcqRel);
            }
            Err(e) => {
                tracing::warn!(
                    sink = %self.table,
                    "nats sink: no answer from {silent_server} to {silent} deliveries in a row, and connecting to the other servers ({}) failed: {e}; keeping the connection, trying again after {} more",
                    servers.join(", "),
                    self.settings.failover_after_ack_timeouts
                );
                self.failover.lock().unwrap().silent = 0;
            }
        }
    }
}

impl SinkFactory for NatsFactory {
    fn create(&self, shard: u32) -> Result<Box<dyn Sink>, CreateError> {
        let shared = self.shared.clone();
        let (client, generation) =
            shared
                .runtime
                .block_on(shared.client())
                .map_err(|e| SinkError::Build {
                    reason: format!(
                        "nats sink: cannot connect to {}: {e}",
                        shared.settings.servers.join(", ")
                    ),
                })?;
        let mut js = jetstream::new(client.clone());
        js.set_timeout(shared.settings.ack_timeout);
        Ok(Box::new(NatsSink {
            subject: shared
                .settings
                .subject
                .replace(SHARD_PLACEHOLDER, &shard.to_string()),
            shared,
            client,
            generation,
            js,
        }))
    }

    fn describe(&self) -> String {
        let s = &self.shared.settings;
        format!(
            "nats {} subject {}{} ({} publishes in flight, ack timeout {} ms, failover after {} without an answer)",
            s.servers.join(","),
            s.subject,
            s.stream
                .as_ref()
                .map_or(String::new(), |n| format!(" stream {n}")),
            s.publishes_in_flight,
            s.ack_timeout.as_millis(),
            s.failover_after_ack_timeouts
        )
    }
}

/// One shard's publisher (its subject made from the template).
pub struct NatsSink {
    shared: Arc<Shared>,
    subject: String,
    client: Client,
    /// The failover generation `client` belongs to.
    generation: u64,
    js: jetstream::Context,
}

impl NatsSink {
    /// Takes the factory's client if a failover replaced this one's.
    fn refresh(&mut self) {
        if self.generation == self.shared.generation.load(Ordering::Acquire) {
            return;
        }
        if let Ok((client, generation)) = self.shared.runtime.block_on(self.shared.client()) {
            let mut js = jetstream::new(client.clone());
            js.set_timeout(self.shared.settings.ack_timeout);
            self.client = client;
            self.js = js;
            self.generation = generation;
        }
    }

    /// What a failed publish means for its record.
    fn settle(&self, e: &jetstream::context::PublishError) -> RecordOutcome {
        match e.kind() {
            PublishErrorKind::StreamNotFound => RecordOutcome::Retry,
            PublishErrorKind::TimedOut => self.timed_out(),
            PublishErrorKind::Other => {
                let text = e.to_string();
                let api =
                    std::error::Error::source(e).and_then(|s| s.downcast_ref::<jetstream::Error>());
                if api.is_some_and(|a| {
                    a.error_code() == jetstream::ErrorCode::STREAM_MESSAGE_EXCEEDS_MAXIMUM
                }) {
                    RecordOutcome::Rejected(format!(
                        "the stream refuses the message as too large: {text}"
                    ))
                } else {
                    RecordOutcome::Retry
                }
            }
            _ => RecordOutcome::Retry,
        }
    }

    /// No PubAck in time: a permissions violation the server reported for
    /// this subject makes it permanent; anything else is retried.
    fn timed_out(&self) -> RecordOutcome {
        match self.shared.violation.lock().unwrap().as_ref() {
            Some(v) if v.contains(&self.subject) => RecordOutcome::Rejected(format!(
                "permission denied to publish to {}: {v}",
                self.subject
            )),
            _ => RecordOutcome::Retry,
        }
    }

    fn no_ack_reason(&self) -> String {
        let info = self.client.server_info();
        format!(
            "no PubAck within {} ms (ack_timeout_ms) from {}:{} (one of {})",
            self.shared.settings.ack_timeout.as_millis(),
            info.host,
            info.port,
            self.shared.settings.servers.join(", ")
        )
    }

    /// Why a record must be retried, for the drain's log and health.
    fn retry_reason(&self, e: &jetstream::context::PublishError) -> String {
        match e.kind() {
            PublishErrorKind::StreamNotFound => format!(
                "no responders on {}: no stream takes it, or its stream has no leader yet (a failover)",
                self.subject
            ),
            PublishErrorKind::TimedOut => self.no_ack_reason(),
            _ => format!("publishing to {}: {e}", self.subject),
        }
    }
}

impl Sink for NatsSink {
    fn name(&self) -> &str {
        "nats"
    }

    fn limits(&self) -> Limits {
        self.shared.settings.limits
    }

    fn deliver(&mut self, batch: &Batch<'_>) -> Outcome {
        self.refresh();
        let records = batch.records();
        let max_payload = self.client.server_info().max_payload;
        let in_flight = self.shared.settings.publishes_in_flight;
        let ack_timeout = self.shared.settings.ack_timeout;
        let this = &*self;
        let (outcomes, first_retry, heard) = self.shared.runtime.block_on(async move {
            let mut outcomes: Vec<Option<RecordOutcome>> = vec![None; records.len()];
            let mut first_retry: Option<String> = None;
            let mut heard = Heard::default();
            let mut pending = std::collections::VecDeque::new();
            for (i, r) in records.iter().enumerate() {
                // A PubAck past due and nothing heard: the server is silent,
                // and every window still to publish would wait its own
                // `ack_timeout` (a batch of 1,000 at 256 in flight: four).
                // The rest waits for the retry, which may fail over.
                if heard.silences > 0 && heard.answers == 0 {
                    break;
                }
                if max_payload > 0 && r.payload.len() + HEADER_BYTES_MAX > max_payload {
                    outcomes[i] = Some(RecordOutcome::Rejected(format!(
                        "a record of {} bytes is over the server's max_payload of {max_payload} bytes (with its headers)",
                        r.payload.len()
                    )));
                    continue;
                }
                let mut headers = HeaderMap::new();
                headers.insert(
                    "Nats-Msg-Id",
                    format!("{}{}:{}", this.shared.id_prefix, r.shard, r.seq).as_str(),
                );
                headers.insert("Spillway-Arrival-Unix-Us", r.arrival_unix_us.to_string().as_str());
                headers.insert("Spillway-Shard", r.shard.to_string().as_str());
                headers.insert("Spillway-Seq", r.seq.to_string().as_str());
                let publish = Publish::build()
                    .payload(Bytes::copy_from_slice(r.payload))
                    .headers(headers);
                match this.js.send_publish(this.subject.clone(), publish).await {
                    // Each PubAck is due `ack_timeout` after its publish
                    // (the client's own timeout starts only when the ack
                    // is first awaited: in turn, a batch of lost acks
                    // would wait one timeout each).
                    Ok(ack) => pending.push_back((i, ack, tokio::time::Instant::now() + ack_timeout)),
                    Err(e) => {
                        let o = this.settle(&e);
                        if matches!(o, RecordOutcome::Retry) && first_retry.is_none() {
                            first_retry = Some(this.retry_reason(&e));
                        }
                        outcomes[i] = Some(o);
                    }
                }
                while pending.len() >= in_flight {
                    let (j, ack, due) = pending.pop_front().expect("non-empty");
                    outcomes[j] = Some(this.acked(until(due, ack).await, &mut first_retry, &mut heard));
                }
            }
            while let Some((j, ack, due)) = pending.pop_front() {
                outcomes[j] = Some(this.acked(until(due, ack).await, &mut first_retry, &mut heard));
            }
            (outcomes, first_retry, heard)
        });
        let silent = self.shared.heard(self.generation, heard);
        if silent >= self.shared.settings.failover_after_ack_timeouts {
            self.shared
                .runtime
                .block_on(self.shared.fail_over(self.generation, silent));
        }
        let outcomes: Vec<RecordOutcome> = outcomes
            .into_iter()
            .map(|o| o.unwrap_or(RecordOutcome::Retry))
            .collect();
        if outcomes
            .iter()
            .all(|o| matches!(o, RecordOutcome::Committed))
        {
            return Outcome::Committed;
        }
        if matches!(outcomes.first(), Some(RecordOutcome::Retry)) {
            return Outcome::Retry {
                after: None,
                reason: first_retry.unwrap_or_else(|| "publish failed".into()),
            };
        }
        Outcome::Split(outcomes)
    }

    fn health_check(&mut self) -> Health {
        self.refresh();
        match self.client.connection_state() {
            State::Connected => Health::Healthy,
            state => Health::Unhealthy(format!(
                "not connected to the NATS servers {} ({state:?})",
                self.shared.settings.servers.join(", ")
            )),
        }
    }
}

/// The answer to `ack`, or `None` once `due` passed without one.
async fn until(
    due: tokio::time::Instant,
    ack: jetstream::context::PublishAckFuture,
) -> Option<Result<jetstream::publish::PublishAck, jetstream::context::PublishError>> {
    tokio::time::timeout_at(due, ack.into_future()).await.ok()
}

impl NatsSink {
    /// A PubAck (a duplicate counts: the stream has the record) or why
    /// not; `heard` counts whether the server answered at all.
    fn acked(
        &self,
        ack: Option<Result<jetstream::publish::PublishAck, jetstream::context::PublishError>>,
        first_retry: &mut Option<String>,
        heard: &mut Heard,
    ) -> RecordOutcome {
        let silent = match &ack {
            None => true,
            Some(Ok(_)) => false,
            Some(Err(e)) => matches!(
                e.kind(),
                PublishErrorKind::TimedOut | PublishErrorKind::BrokenPipe
            ),
        };
        if silent {
            heard.silences += 1;
        } else {
            heard.answers += 1;
        }
        match ack {
            Some(Ok(_)) => RecordOutcome::Committed,
            None => {
                if first_retry.is_none() {
                    *first_retry = Some(self.no_ack_reason());
                }
                self.timed_out()
            }
            Some(Err(e)) => {
                let o = self.settle(&e);
                if matches!(o, RecordOutcome::Retry) && first_retry.is_none() {
                    *first_retry = Some(self.retry_reason(&e));
                }
                o
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::subject_matches;

    #[test]
    fn stream_subject_filters() {
        assert!(subject_matches("events.*", "events.0"));
        assert!(subject_matches("events.>", "events.a.b"));
        assert!(subject_matches("events", "events"));
        assert!(!subject_matches("events.*", "events"));
        assert!(!subject_matches("events.*", "events.a.b"));
        assert!(!subject_matches("logs.>", "events.0"));
        assert!(!subject_matches("events.>", "events"));
    }
}
