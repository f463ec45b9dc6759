//! The HTTP sink: records → HTTP requests.
//!
//! Rooms, as in every spillway sink: [`config`] holds the user's keys and
//! checks and resolves them, [`encoder`] turns records into a body,
//! [`request`] adds the headers and the idempotency key, [`service`] sends
//! and classifies, and this module ties them into a [`Sink`].
//!
//! Threading: the drain calls an instance from one dedicated OS thread that
//! is outside any async runtime. Each instance owns a private current-thread
//! tokio runtime and a reqwest client (with its keep-alive pool) bound to
//! it; `deliver` blocks on that runtime. Instances share only the immutable
//! [`HttpSettings`], never a client: a client's pooled connections belong to
//! the runtime that opened them.

mod config;
mod encoder;
mod request;
mod service;
#[cfg(test)]
mod tests;

use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::time::Duration;

use sink_sdk::{Batch, Health, Limits, Outcome, Record, RecordOutcome, Sink};
use tokio::runtime::Runtime;
use tokio::task::JoinSet;

use crate::keys::DeliveryConfig;
use crate::sink_type::{CheckedSink, Preflight, SinkEnv, SinkType, TypeKeys};
use crate::{CreateError, KeyProblem, SinkError, SinkFactory};
pub(crate) use config::HttpSettings;
pub use config::{Delivery, HttpConfig, HttpEncoding, HttpMethod};
use request::Carried;
pub use service::{response_verdict, ResponseVerdict, REASON_BODY_BYTES_MAX};

/// Idle keep-alive connections are dropped after this long: shorter than
/// the shortest common server keep-alive (Node.js closes after 5 s), so a
/// request rarely lands on a connection the server is closing.
const POOL_IDLE_TIMEOUT: Duration = Duration::from_secs(4);
/// Longest wait for a health check's TCP connect.
const HEALTH_CONNECT_TIMEOUT_MAX: Duration = Duration::from_secs(5);

/// The HTTP sink in the registry: its name and keys here, reading and
/// checking them in [`config`], building in [`HttpFactory::new`], the
/// preflight in [`preflight`].
pub static TYPE: SinkType = SinkType {
    name: "http",
    about: "POST (or PUT/PATCH) the records to an HTTP endpoint.",
    reference: HttpConfig::REFERENCE,
    unset: || Box::<HttpConfig>::default(),
};

impl TypeKeys for HttpConfig {
    fn sink_type(&self) -> &'static SinkType {
        &TYPE
    }

    fn read_key(&mut self, key: &'static str, value: toml::Value) -> Result<(), toml::de::Error> {
        HttpConfig::read_key(self, key, value)
    }

    fn check(&self, delivery: &DeliveryConfig) -> Result<Arc<dyn CheckedSink>, KeyProblem> {
        Ok(Arc::new(HttpConfig::check(self, delivery)?))
    }
}

impl CheckedSink for HttpSettings {
    fn build(&self, table: &str, env: &SinkEnv) -> Result<Arc<dyn SinkFactory>, SinkError> {
        Ok(Arc::new(HttpFactory::new(self, table, &env.instance_id)?))
    }

    fn preflight(&self, table: &str) -> Result<Preflight, SinkError> {
        preflight(self, table).map(Preflight::from)
    }
}

/// Builds one [`HttpSink`] per shard from settings resolved once.
pub struct HttpFactory {
    settings: Arc<HttpSettings>,
    /// The daemon's instance id, in every idempotency key.
    instance: Arc<str>,
}

impl HttpFactory {
    /// From checked settings; reads `token_env` now (an error names
    /// `<table>.token_env`).
    pub(crate) fn new(
        settings: &HttpSettings,
        table: &str,
        instance: &str,
    ) -> Result<HttpFactory, SinkError> {
        Ok(HttpFactory {
            settings: Arc::new(settings.with_bearer_token(table)?),
            instance: instance.into(),
        })
    }
}

impl SinkFactory for HttpFactory {
    fn create(&self, shard: u32) -> Result<Box<dyn Sink>, CreateError> {
        let settings = Arc::clone(&self.settings);
        Ok(Box::new(HttpSink::new(
            settings,
            Arc::clone(&self.instance),
            shard,
        )?))
    }

    fn describe(&self) -> String {
        self.settings.describe()
    }
}

/// One shard's HTTP sink.
pub struct HttpSink {
    settings: Arc<HttpSettings>,
    instance: Arc<str>,
    shard: u32,
    client: reqwest::Client,
    /// Drives `client`'s requests while `deliver` blocks. `None` only
    /// during drop.
    runtime: Option<Runtime>,
}

impl HttpSink {
    fn new(
        settings: Arc<HttpSettings>,
        instance: Arc<str>,
        shard: u32,
    ) -> Result<HttpSink, SinkError> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .thread_name(format!("spillway-http-sink-{shard}"))
            .build()
            .map_err(|e| SinkError::Build {
                reason: format!("http sink: cannot start its runtime: {e}"),
            })?;
        let client = {
            // The client's connector looks for a runtime when it is built.
            let _in_runtime = runtime.enter();
            reqwest::Client::builder()
                .timeout(settings.timeout)
                .pool_idle_timeout(POOL_IDLE_TIMEOUT)
                .pool_max_idle_per_host(settings.concurrency)
                .redirect(reqwest::redirect::Policy::none())
                .tcp_nodelay(true)
                .user_agent(concat!("spillway/", env!("CARGO_PKG_VERSION")))
                .build()
                .map_err(|e| SinkError::Build {
                    reason: format!("http sink: cannot build the HTTP client: {e}"),
                })?
        };
        Ok(HttpSink {
            settings,
            instance,
            shard,
            client,
            runtime: Some(runtime),
        })
    }

    fn runtime(&self) -> &Runtime {
        self.runtime.as_ref().expect("the runtime lives until drop")
    }

    /// One request for the whole batch.
    fn deliver_batched(&mut self, batch: &Batch<'_>) -> Outcome {
        let records = batch.records();
        let encoded = encoder::encode_batch(self.settings.encoding, records);
        if encoded.included.is_empty() {
            return rejections_only(encoded.rejections);
        }
        let seqs: Vec<u64> = encoded.included.iter().map(|&i| records[i].seq).collect();
        let has_rejections = encoded.has_rejections();
        let body = self.maybe_gzip(encoded.body);
        let carried = Carried::Batch {
            shard: batch.shard(),
            seqs: &seqs,
        };
        let content_type = encoder::content_type(self.settings.encoding);
        let request = request::build(
            &self.client,
            &self.settings,
            &self.instance,
            carried,
            content_type,
            body,
        );
        let verdict = self
            .runtime()
            .block_on(service::send(request, &self.settings));
        match verdict {
            ResponseVerdict::Delivered if !has_rejections => Outcome::Committed,
            ResponseVerdict::Delivered => Outcome::Split(
                encoded
                    .rejections
                    .into_iter()
                    .map(|r| r.map_or(RecordOutcome::Committed, RecordOutcome::Rejected))
                    .collect(),
            ),
            ResponseVerdict::Transient { after, reason } => Outcome::Retry { after, reason },
            ResponseVerdict::Permanent { reason } => Outcome::Split(
                encoded
                    .rejections
                    .into_iter()
                    .map(|r| RecordOutcome::Rejected(r.unwrap_or_else(|| reason.clone())))
                    .collect(),
            ),
        }
    }

    /// One request per record, up to `concurrency` in flight; outcomes in
    /// record order.
    fn deliver_per_record(&mut self, batch: &Batch<'_>) -> Outcome {
        let records = batch.records();
        let verdicts = self.runtime().block_on(self.send_each(records));
        per_record_outcome(verdicts)
    }

    /// Sends each record; after the first transient failure starts no new
    /// request (everything from the first retry on is offered again anyway)
    /// but lets those in flight finish. `None` = never sent.
    async fn send_each(&self, records: &[Record<'_>]) -> Vec<Option<ResponseVerdict>> {
        let mut verdicts: Vec<Option<ResponseVerdict>> = vec![None; records.len()];
        let mut in_flight = JoinSet::new();
        let mut next = 0;
        let mut stop = false;
        loop {
            while !stop && next < records.len() && in_flight.len() < self.settings.concurrency {
                let record = &records[next];
                let carried = Carried::Record {
                    shard: record.shard,
                    seq: record.seq,
                };
                let body = self.maybe_gzip(record.payload.to_vec());
                let request = request::build(
                    &self.client,
                    &self.settings,
                    &self.instance,
                    carried,
                    encoder::PER_RECORD_CONTENT_TYPE,
                    body,
                );
                let settings = Arc::clone(&self.settings);
                let index = next;
                in_flight.spawn(async move { (index, service::send(request, &settings).await) });
                next += 1;
            }
            let Some(joined) = in_flight.join_next().await else {
                break;
            };
            let (index, verdict) = match joined {
                Ok(done) => done,
                Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
                Err(e) => panic!("http sink: a send task was cancelled: {e}"),
            };
            stop |= verdict.is_transient();
            verdicts[index] = Some(verdict);
        }
        verdicts
    }

    fn maybe_gzip(&self, body: Vec<u8>) -> Vec<u8> {
        if self.settings.gzip {
            encoder::gzip(&body)
        } else {
            body
        }
    }
}

/// Records the encoder refused, with nothing left to send.
fn rejections_only(rejections: Vec<Option<String>>) -> Outcome {
    Outcome::Split(
        rejections
            .into_iter()
            .map(|r| RecordOutcome::Rejected(r.expect("every record was rejected")))
            .collect(),
    )
}

/// Folds per-record verdicts into one outcome. If the first record must be
/// retried nothing can be committed, so the whole batch is a `Retry` (which,
/// unlike a `Split`, carries the reason and any Retry-After).
fn per_record_outcome(verdicts: Vec<Option<ResponseVerdict>>) -> Outcome {
    if let Some(None | Some(ResponseVerdict::Transient { .. })) = verdicts.first() {
        let first_transient = verdicts.iter().flatten().find(|v| v.is_transient());
        if let Some(ResponseVerdict::Transient { after, reason }) = first_transient {
            return Outcome::Retry {
                after: *after,
                reason: reason.clone(),
            };
        }
        unreachable!("a record is unsent only after a transient failure");
    }
    if verdicts
        .iter()
        .all(|v| matches!(v, Some(ResponseVerdict::Delivered)))
    {
        return Outcome::Committed;
    }
    Outcome::Split(
        verdicts
            .into_iter()
            .map(|v| match v {
                Some(ResponseVerdict::Delivered) => RecordOutcome::Committed,
                Some(ResponseVerdict::Permanent { reason }) => RecordOutcome::Rejected(reason),
                Some(ResponseVerdict::Transient { .. }) | None => RecordOutcome::Retry,
            })
            .collect(),
    )
}

impl Sink for HttpSink {
    fn name(&self) -> &str {
        "http"
    }

    fn limits(&self) -> Limits {
        self.settings.limits
    }

    fn deliver(&mut self, batch: &Batch<'_>) -> Outcome {
        assert!(
            tokio::runtime::Handle::try_current().is_err(),
            "http sink (shard {}): deliver called from inside an async runtime; \
             it must run on the drain's own thread",
            self.shard
        );
        if batch.is_empty() {
            return Outcome::Committed;
        }
        match self.settings.delivery {
            Delivery::Batched => self.deliver_batched(batch),
            Delivery::PerRecord => self.deliver_per_record(batch),
        }
    }

    /// The URL's host:port accepts a TCP connection. Sends no request.
    fn health_check(&mut self) -> Health {
        let reached = resolve(&self.settings).and_then(|addrs| connect(&self.settings, &addrs));
        match reached {
            Ok(()) => Health::Healthy,
            Err(why) => Health::Unhealthy(why),
        }
    }
}

/// The addresses of the URL's host (the first half of the health check).
fn resolve(settings: &HttpSettings) -> Result<Vec<SocketAddr>, String> {
    let target = &settings.target;
    match settings.url.socket_addrs(|| None) {
        Ok(addrs) if !addrs.is_empty() => Ok(addrs),
        Ok(_) => Err(format!("no address for the host of {target}")),
        Err(e) => Err(format!("cannot resolve the host of {target}: {e}")),
    }
}

/// One of `addrs` accepts a TCP connection (the second half).
fn connect(settings: &HttpSettings, addrs: &[SocketAddr]) -> Result<(), String> {
    let timeout = settings.timeout.min(HEALTH_CONNECT_TIMEOUT_MAX);
    let mut last_error = String::new();
    for addr in addrs {
        match TcpStream::connect_timeout(addr, timeout) {
            Ok(_) => return Ok(()),
            Err(e) => last_error = format!("{addr}: {e}"),
        }
    }
    Err(format!(
        "cannot connect ({last_error}) for {}",
        settings.target
    ))
}

/// `spillway check` of an HTTP sink: builds it as the daemon does (reading
/// `token_env`) without delivering anything, resolves the URL's host
/// and tries its health check. A host that does not resolve, or does not
/// answer, is a warning, returned: the daemon starts all the same and
/// retries (a name that resolves later, a service that comes up later),
/// so `check` agrees with `run`.
pub(crate) fn preflight(settings: &HttpSettings, table: &str) -> Result<Vec<String>, SinkError> {
    let factory = HttpFactory::new(settings, table, &SinkEnv::detached().instance_id)?;
    drop(HttpSink::new(
        Arc::clone(&factory.settings),
        Arc::clone(&factory.instance),
        0,
    )?);
    match resolve(settings).and_then(|addrs| connect(settings, &addrs)) {
        Ok(()) => Ok(Vec::new()),
        Err(why) => Ok(vec![format!(
            "{table}.url: {why}; the daemon would start and retry it"
        )]),
    }
}

impl Drop for HttpSink {
    /// The sink may be dropped from an async context (a reload on an actor
    /// thread), where dropping a runtime would panic: shut it down without
    /// waiting. Pooled connections are simply closed.
    fn drop(&mut self) {
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}
