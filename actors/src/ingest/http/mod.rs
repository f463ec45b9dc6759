//! The HTTP ingest door (`[server.http]`): `POST /v1/records?tier=...`
//! with an NDJSON body (a record per line) or an `application/octet-stream`
//! body (one record), either one possibly `Content-Encoding: gzip`
//! ([`encoding`]), answered `200 {"accepted": N}` only once every record
//! is durable at its tier, exactly as a push on the Unix socket is acked.
//!
//! Records go through the same admission as the socket's (the shard's
//! health, the WAB budget) and the same group commit. Each connection
//! keeps one shard (round robin), as a socket connection does, so a sink
//! gets one connection's records in the order they were posted. A request
//! becomes
//! one [`AppendBatch`], its records slices of the body (no copy), and its
//! answer waits for the flusher's [`CommitTarget`] call. What it answers
//! otherwise: 400 (a bad tier or parameter, an empty body or line, naming
//! it), 401 (a missing or wrong bearer token), 404/405, 408 (the request
//! did not arrive within `request_timeout_ms`), 413 (over `body_bytes_max`,
//! before or after inflating, or `server.payload_bytes_max`, naming the
//! line), 415 (a `Content-Encoding` other than gzip), 429 with `Retry-After`
//! (the WAB is full: Overloaded), 503 with `Retry-After` (no shard can
//! write, or the daemon's read-buffer budget is taken).
//!
//! Connections are spread over the connection arbiters, as the socket's
//! are. hyper's HTTP/1.1 server (keep-alive on); TLS when configured
//! ([`crate::ingest::tls`]). A connection not in a request (its TLS handshake, the
//! wait for its first request head or the next) waits in the door's
//! [`Lobby`] and must send a complete head within `idle_timeout_ms`; at
//! `connections_max` a newcomer evicts the connection that has waited
//! there longest, and is closed at once only when every connection has a
//! request being answered. Idle keep-alive connections can then no
//! longer keep a client with a request out.

mod body;
mod encoding;
mod reply;

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use actix::prelude::*;
use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use hyper::header::{
    HeaderValue, ALLOW, AUTHORIZATION, CONTENT_ENCODING, CONTENT_LENGTH, CONTENT_TYPE, RETRY_AFTER,
};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use spillway_protocol::NackReason;
use spillway_wab::RecordMeta;

pub use crate::stats::{HttpIngestStats, HTTP_STATUSES as STATUSES};
pub use body::{records_of, tier_of, Layout, Refusal};
pub use encoding::{gunzip, Encoding};

use crate::ingest::accept::AcceptErrors;
use crate::ingest::door::{start_accepting, Door, RoundRobin};
use crate::ingest::read_budget::ReadBudget;
use crate::ingest::tls::TlsServer;
use crate::ingest::{Lobby, LobbyTicket, StopListening};
use crate::shard::{AppendBatch, PendingRecords, ShardQueue};
use crate::stats::DaemonStats;

/// The one path records are posted to.
pub const RECORDS_PATH: &str = "/v1/records";
/// A request head (request line and headers) longer than this gets 431.
const REQUEST_HEAD_BYTES_MAX: usize = 16 * 1024;
/// What a 429 or 503 asks the client to wait, in seconds.
const RETRY_AFTER_SECONDS: &str = "1";

/// `[server.http]`, as the listener needs it.
#[derive(Debug, Clone)]
pub struct HttpIngestSettings {
    /// Largest request body accepted (413 past it).
    pub body_bytes_max: u64,
    /// `server.payload_bytes_max`: the largest record.
    pub payload_bytes_max: u32,
    /// Open connections past this evict the one in the lobby longest, or
    /// are closed at once when none is.
    pub connections_max: usize,
    /// A request's body must arrive within this (408).
    pub request_timeout: Duration,
    /// A connection out of a request (before the first, between two) must
    /// finish its TLS handshake and send a complete request head within
    /// this, or it is closed.
    pub idle_timeout: Duration,
    /// `Authorization: Bearer <token>` every request must carry, if set.
    pub token: Option<String>,
    /// Bytes all connections of the daemon may hold in frames and bodies
    /// being received (`server.read_buffer_bytes_max`).
    pub read_buffer_bytes_max: u64,
}

/// What every connection of the door shares.
struct Shared {
    settings: HttpIngestSettings,
    shards: RoundRobin<Arc<ShardQueue>>,
    daemon: Arc<DaemonStats>,
    /// Wakes socket connections waiting for read-buffer budget a body gives back.
    read_budget: Arc<ReadBudget>,
    tls: Option<Arc<TlsServer>>,
    /// Connections between requests: evicted, longest waiting first, to
    /// let a newcomer in at `connections_max`.
    lobby: Arc<Lobby>,
}

impl Shared {
    fn stats(&self) -> &HttpIngestStats {
        &self.daemon.http
    }
}

/// The door's listener: accepts, and starts each connection on one of the
/// connection arbiters. Runs on the system arbiter.
pub struct HttpIngest {
    listener: Option<std::net::TcpListener>,
    door: Arc<Shared>,
    arbiters: RoundRobin<ArbiterHandle>,
    accept_errors: AcceptErrors,
}

impl HttpIngest {
    pub fn new(
        listener: std::net::TcpListener,
        settings: HttpIngestSettings,
        shards: Vec<Arc<ShardQueue>>,
        arbiters: Vec<ArbiterHandle>,
        daemon: Arc<DaemonStats>,
        read_budget: Arc<ReadBudget>,
        tls: Option<Arc<TlsServer>>,
    ) -> Self {
        HttpIngest {
            listener: Some(listener),
            door: Arc::new(Shared {
                settings,
                shards: RoundRobin::new(shards),
                daemon,
                read_budget,
                tls,
                lobby: Arc::new(Lobby::default()),
            }),
            arbiters: RoundRobin::new(arbiters),
            accept_errors: AcceptErrors::new("http ingest"),
        }
    }

    fn on_accept(&mut self, stream: tokio::net::TcpStream, peer: SocketAddr) {
        let stats = &self.door.stats().door;
        let open = stats.connections_open.fetch_add(1, Ordering::Relaxed) + 1;
        if open > self.door.settings.connections_max && !self.evict_idle(peer) {
            stats.connections_open.fetch_sub(1, Ordering::Relaxed);
            stats.connections_refused.fetch_add(1, Ordering::Relaxed);
            if self.door.daemon.log_limiter.allow() {
                tracing::warn!(
                    %peer,
                    connections_max = self.door.settings.connections_max,
                    "HTTP ingest connection refused: server.http.connections_max reached"
                );
            }
            return;
        }
        stats.connections_accepted.fetch_add(1, Ordering::Relaxed);
        let std_stream = match stream.into_std() {
            Ok(s) => s,
            Err(e) => {
                stats.connections_open.fetch_sub(1, Ordering::Relaxed);
                tracing::warn!(error = %e, "could not detach an accepted HTTP connection");
                return;
            }
        };
        let arbiter = self.arbiters.next();
        let door = self.door.clone();
        // In the lobby from the accept on, so the next accept already sees it.
        let ticket = Arc::new(self.door.lobby.enter());
        let started = arbiter.spawn_fn(move || {
            actix_rt::spawn(async move {
                match tokio::net::TcpStream::from_std(std_stream) {
                    Ok(stream) => {
                        tokio::select! {
                            biased;
                            () = serve(stream, peer, door.clone(), ticket.clone()) => {}
                            () = ticket.evicted() => {}
                        }
                    }
                    Err(e) => tracing::warn!(error = %e, "could not register an HTTP connection"),
                }
                door.stats()
                    .door
                    .connections_open
                    .fetch_sub(1, Ordering::Relaxed);
            });
        });
        if !started {
            tracing::error!("connection arbiter is gone; HTTP connection dropped");
        }
    }
}

impl HttpIngest {
    /// At `connections_max`: close the connection waiting longest for a
    /// request (or in its TLS handshake), if there is one (see [`Lobby`]).
    /// The new connection takes its place; until the evicted one is gone
    /// (microseconds) one more is open than the cap.
    fn evict_idle(&self, peer: SocketAddr) -> bool {
        if !self.door.lobby.evict_oldest() {
            return false;
        }
        self.door
            .stats()
            .door
            .connections_evicted
            .fetch_add(1, Ordering::Relaxed);
        if self.door.daemon.log_limiter.allow() {
            tracing::info!(%peer, connections_max = self.door.settings.connections_max, "server.http.connections_max reached: closed the connection waiting longest for a request to let a new one in");
        }
        true
    }
}

impl Actor for HttpIngest {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        let listener = self.listener.take();
        start_accepting(self, ctx, listener);
    }
}

impl Door for HttpIngest {
    type Listener = tokio::net::TcpListener;
    const TABLE: &'static str = "server.http";

    fn on_accept(&mut self, stream: tokio::net::TcpStream, peer: SocketAddr) {
        HttpIngest::on_accept(self, stream, peer)
    }

    fn accept_errors(&mut self) -> &mut AcceptErrors {
        &mut self.accept_errors
    }

    fn daemon_stats(&self) -> &DaemonStats {
        &self.door.daemon
    }
}

impl Handler<StopListening> for HttpIngest {
    type Result = ();
    fn handle(&mut self, _: StopListening, ctx: &mut Context<Self>) {
        ctx.stop();
    }
}

/// Serves one connection: TLS first when configured, then HTTP/1.1 with
/// keep-alive until the client closes or stalls. Out of the lobby while
/// a request is being answered, in it otherwise.
async fn serve(
    stream: tokio::net::TcpStream,
    peer: SocketAddr,
    door: Arc<Shared>,
    ticket: Arc<LobbyTicket>,
) {
    let _ = stream.set_nodelay(true);
    let mut http = http1::Builder::new();
    // hyper's head timer runs from the moment it waits for a head (right
    // after the previous answer, or the handshake) until the head is in:
    // the idle wait and a slow head are one deadline.
    http.keep_alive(true)
        .max_buf_size(REQUEST_HEAD_BYTES_MAX)
        .timer(TokioTimer::new())
        .header_read_timeout(door.settings.idle_timeout);
    let shard = door.shards.next().clone();
    let service_door = door.clone();
    let service = service_fn(move |request| {
        let (door, shard, ticket) = (service_door.clone(), shard.clone(), ticket.clone());
        async move {
            if !ticket.leave() {
                // Claimed between its head's arrival and here: the
                // connection is closing, and nothing of it is taken in.
                door.stats().answered(503);
                return Ok::<_, Infallible>(refused(Refusal::new(
                    503,
                    "the connection was closed to let another in at server.http.connections_max: retry",
                )));
            }
            let response = answer(request, &door, &shard).await;
            ticket.wait();
            Ok(response)
        }
    });
    // A failed exchange (a client gone, a head too slow or too big, which
    // hyper answers itself) leaves nothing to do: the socket closes.
    match &door.tls {
        None => {
            let _ = http.serve_connection(TokioIo::new(stream), service).await;
        }
        Some(tls) => {
            let Some(stream) = tls.accept(stream, peer, &door.stats().door.tls).await else {
                return;
            };
            let _ = http.serve_connection(TokioIo::new(stream), service).await;
        }
    }
}

/// One request's answer (every path counts its status).
async fn answer(
    request: Request<Incoming>,
    door: &Shared,
    shard: &ShardQueue,
) -> Response<Full<Bytes>> {
    let response = match handle(request, door, shard).await {
        Ok(accepted) => {
            door.stats()
                .records
                .fetch_add(accepted as u64, Ordering::Relaxed);
            reply(200, format!("{{\"accepted\":{accepted}}}\n"))
        }
        Err(refusal) => refused(refusal),
    };
    door.stats().answered(response.status().as_u16());
    response
}

async fn handle(
    request: Request<Incoming>,
    door: &Shared,
    shard: &ShardQueue,
) -> Result<usize, Refusal> {
    if request.uri().path() != RECORDS_PATH {
        return Err(Refusal::new(
            404,
            format!("no such path; records go to POST {RECORDS_PATH}?tier=sync|batched|buffered"),
        ));
    }
    if request.method() != Method::POST {
        return Err(Refusal::new(405, format!("{RECORDS_PATH} takes POST only")));
    }
    if let Some(token) = &door.settings.token {
        check_token(request.headers().get(AUTHORIZATION), token)?;
    }
    let tier = tier_of(request.uri().query())?;
    let layout = Layout::of(request.headers().get(CONTENT_TYPE).map(|v| v.as_bytes()));
    // Before the body is read: an encoding we cannot decode must not be
    // stored as records.
    let encoding = Encoding::of(request.headers().get_all(CONTENT_ENCODING))?;
    let max = door.settings.body_bytes_max;
    let declared = request
        .headers()
        .get(CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if let Some(len) = declared.filter(|&l| l > max) {
        return Err(Refusal::new(
            413,
            format!("body of {len} bytes is over server.http.body_bytes_max ({max} bytes)"),
        ));
    }
    // Held against the daemon's read-buffer budget until the answer: the
    // declared length, or the cap for a chunked body.
    let mut seat = BodySeat::take(door, declared.unwrap_or(max))?;
    let body = tokio::time::timeout(
        door.settings.request_timeout,
        Limited::new(request.into_body(), max as usize).collect(),
    )
    .await
    .map_err(|_| {
        Refusal::new(
            408,
            format!(
                "the body did not arrive within server.http.request_timeout_ms ({} ms)",
                door.settings.request_timeout.as_millis()
            ),
        )
    })?
    .map_err(|e| {
        if e.downcast_ref::<http_body_util::LengthLimitError>()
            .is_some()
        {
            Refusal::new(
                413,
                format!("body is over server.http.body_bytes_max ({max} bytes)"),
            )
        } else {
            Refusal::new(400, format!("reading the body failed: {e}"))
        }
    })?
    .to_bytes();
    let body = match encoding {
        Encoding::Identity => body,
        // The cap holds for the decoded bytes too, and they count against
        // the read-buffer budget as they grow, beside the encoded ones.
        Encoding::Gzip => gunzip(&body, max, |bytes| seat.grow(bytes)).await?,
    };
    let records = records_of(&body, layout, door.settings.payload_bytes_max)?;
    let count = records.len();
    let result = commit(shard, tier, records).await;
    drop(seat);
    result.map(|()| count)
}

/// Bearer token check, in time that does not depend on where it differs.
fn check_token(header: Option<&HeaderValue>, token: &str) -> Result<(), Refusal> {
    let given = header
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::trim);
    let Some(given) = given else {
        return Err(Refusal::new(
            401,
            "missing Authorization: Bearer <token> (server.http.token_env)",
        ));
    };
    let (a, b) = (given.as_bytes(), token.as_bytes());
    let mut diff = a.len() ^ b.len();
    for i in 0..a.len().max(b.len()) {
        diff |= usize::from(a.get(i).copied().unwrap_or(0) ^ b.get(i).copied().unwrap_or(0));
    }
    if diff != 0 {
        return Err(Refusal::new(401, "wrong bearer token"));
    }
    Ok(())
}

/// Admit the records on the connection's shard, hand them to its group
/// commit, and wait for it. A connection keeps one shard, as a socket
/// connection does, so a sink gets its records in the order they were
/// posted on it.
async fn commit(
    shard: &ShardQueue,
    tier: spillway_protocol::Tier,
    records: Vec<Bytes>,
) -> Result<(), Refusal> {
    let n = records.len();
    let bytes: u64 = records.iter().map(|r| r.len() as u64).sum();
    shard.admit(bytes, n, 0).map_err(nack_refusal)?;
    let meta = RecordMeta {
        tier: tier.as_byte(),
        arrival_unix_us: spillway_wab::format::now_unix_us(),
    }
    .pack();
    let mut pending = PendingRecords::default();
    for r in records {
        pending.push_one(r, meta);
    }
    let (target, answer) = reply::Waiter::new();
    shard.push(AppendBatch::new(
        pending,
        bytes,
        tier.needs_fsync(),
        0,
        target,
    ));
    match answer.await {
        Ok(Ok(_)) => Ok(()),
        Ok(Err(reason)) => Err(nack_refusal(reason)),
        Err(_) => Err(nack_refusal(NackReason::InternalError)),
    }
}

fn nack_refusal(reason: NackReason) -> Refusal {
    match reason {
        NackReason::Overloaded => Refusal::new(
            429,
            "the write-ahead buffer is full (wab.wab_bytes_max): retry later",
        ),
        other => Refusal::new(
            503,
            format!(
                "the records were not written ({}): retry later",
                other.name()
            ),
        ),
    }
}

/// A body's share of the daemon's read-buffer budget (the one the
/// socket's large frames reserve from), given back on drop, waking any
/// socket connection that waits for it.
struct BodySeat<'a> {
    door: &'a Shared,
    bytes: u64,
}

impl<'a> BodySeat<'a> {
    fn take(door: &'a Shared, bytes: u64) -> Result<Self, Refusal> {
        let held = &door.daemon.read_buffer_bytes;
        if !ReadBudget::reserve(held, bytes, door.settings.read_buffer_bytes_max) {
            door.daemon
                .read_buffer_pauses
                .fetch_add(1, Ordering::Relaxed);
            return Err(Refusal::new(
                503,
                "bodies being received fill server.read_buffer_bytes_max: retry later",
            ));
        }
        Ok(BodySeat { door, bytes })
    }

    /// Hold `bytes` more (a gzip body's decoded bytes); 503 when the
    /// budget is taken.
    fn grow(&mut self, bytes: u64) -> Result<(), Refusal> {
        let held = &self.door.daemon.read_buffer_bytes;
        if !ReadBudget::reserve(held, bytes, self.door.settings.read_buffer_bytes_max) {
            self.door
                .daemon
                .read_buffer_pauses
                .fetch_add(1, Ordering::Relaxed);
            return Err(Refusal::new(
                503,
                "the decoded gzip body would take bodies being received past server.read_buffer_bytes_max: retry later",
            ));
        }
        self.bytes += bytes;
        Ok(())
    }
}

impl Drop for BodySeat<'_> {
    fn drop(&mut self) {
        let held = &self.door.daemon.read_buffer_bytes;
        self.door.read_budget.release(held, self.bytes);
    }
}

fn reply(status: u16, body: String) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from(body)));
    *response.status_mut() =
        StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    response
        .headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    response
}

fn refused(refusal: Refusal) -> Response<Full<Bytes>> {
    let body = sink_sdk::keys::json_string(&refusal.message);
    let mut response = reply(refusal.status, format!("{{\"error\":{body}}}\n"));
    let headers = response.headers_mut();
    match refusal.status {
        429 | 503 => {
            headers.insert(RETRY_AFTER, HeaderValue::from_static(RETRY_AFTER_SECONDS));
        }
        405 => {
            headers.insert(ALLOW, HeaderValue::from_static("POST"));
        }
        401 => {
            headers.insert(
                hyper::header::WWW_AUTHENTICATE,
                HeaderValue::from_static("Bearer"),
            );
        }
        _ => {}
    }
    response
}
