//! The admin socket: what `spillway ctl` talks to.
//!
//! A Unix socket (mode 0600, `admin.socket_path`) speaking a line protocol:
//! the client writes one command line; the daemon answers `ok` or
//! `error: <why>` on the first line, then the body, then closes.
//!
//! Commands (each may end in `--json`): `health`, `stats`, `metrics`,
//! `segments`, `dead-letter list`,
//! `dead-letter requeue all|<shard>:<seq>...`,
//! `dead-letter drop all|<shard>:<seq>...`, `reload`; and `tap`, whose
//! answer is a stream of records until `--limit` or the client goes away.
//!
//! This file holds the actor (it serves the admin socket and, when
//! `admin.metrics_address` is set, the HTTP listener) and the command
//! dispatch. The rest, one job per file: `health` (each shard's and each
//! sink's state: `ctl health`, `GET /ready`), `metrics` (the counter table
//! and its two renderings, `ctl stats` and Prometheus text), `http`
//! (`GET /metrics`, `/health`, `/ready`), `segments` (each shard's
//! segment files and what of them is confirmed), `dead_letters` (list,
//! requeue, drop). The
//! framing of replies is `spillway_ctl`'s, shared with the ctl client.

mod dead_letters;
pub use dead_letters::tier_name;
mod health;
mod http;
pub(crate) mod metrics;
pub(crate) mod segments;
mod sinks;
mod tap;

use std::rc::Rc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use actix::prelude::*;
use spillway_actors::{
    AcceptErrors, DaemonStats, DeliveryBoard, RateLimiter, ReadBudget, ShardQueue, WabBudget,
};

use crate::sinks::{DeadLetterStores, RequeueStores};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{UnixListener, UnixStream};

use dead_letters::Selection;

/// Longest command line accepted.
const COMMAND_BYTES_MAX: usize = 4096;

/// Everything the admin commands read or act on.
pub struct AdminState {
    pub shards: Vec<Arc<ShardQueue>>,
    /// Every sink's delivery figures and every shard's retention.
    pub board: Arc<DeliveryBoard>,
    pub data_dir: std::path::PathBuf,
    pub wab: Arc<WabBudget>,
    pub stats: Arc<DaemonStats>,
    /// The read-buffer budget's waiters and the frame buffers kept for reuse.
    pub read_budget: Arc<ReadBudget>,
    pub live_connections: Arc<std::sync::atomic::AtomicUsize>,
    pub dead_letters: DeadLetterStores,
    /// Each configured sink's requeue store (requeue with several sinks).
    pub requeue: RequeueStores,
    /// Starts a reload; the future answers with its report (set by the
    /// daemon). It waits for the new sink without blocking this arbiter.
    pub reload: Option<Box<dyn Fn() -> ReloadFuture>>,
    pub reload_stats: Arc<crate::reload::ReloadStats>,
    /// `admin.connections_max`: connections each admin listener serves at once.
    pub connections_max: u64,
    /// The admin socket's connections.
    pub admin_socket: Arc<ListenerLoad>,
    /// The metrics address's connections.
    pub metrics_http: Arc<ListenerLoad>,
    /// `admin.ready_stall_ms`: a delivery outstanding longer is stalled.
    pub ready_stall: Duration,
    /// `admin.ready_requires_sinks`: a failing sink makes the daemon not
    /// ready (not only degraded).
    pub ready_requires_sinks: bool,
}

/// Connections one admin listener serves now, and those it closed at once
/// because `admin.connections_max` were open.
#[derive(Debug)]
pub struct ListenerLoad {
    /// Which listener, for the log line.
    name: &'static str,
    open: AtomicU64,
    pub refused: AtomicU64,
    /// One refusal line a second at most; the counter says how many.
    log: RateLimiter,
}

impl ListenerLoad {
    pub fn new(name: &'static str) -> Self {
        ListenerLoad {
            name,
            open: AtomicU64::new(0),
            refused: AtomicU64::new(0),
            log: RateLimiter::per_second(1),
        }
    }

    /// A place for one more connection, or `None` (counted, logged) at `max`.
    fn enter(self: &Arc<Self>, max: u64) -> Option<Seat> {
        // One arbiter thread runs the accept loop: load then add is exact.
        if self.open.load(Ordering::Relaxed) >= max {
            self.refused.fetch_add(1, Ordering::Relaxed);
            if self.log.allow() {
                tracing::warn!(
                    listener = self.name,
                    admin_connections_max = max,
                    "closed a new connection at once: admin.connections_max are open (at most one such line per second; admin_connections_refused counts them)"
                );
            }
            return None;
        }
        self.open.fetch_add(1, Ordering::Relaxed);
        Some(Seat(self.clone()))
    }
}

/// One connection's place on a listener; given back when dropped.
struct Seat(Arc<ListenerLoad>);

impl Drop for Seat {
    fn drop(&mut self) {
        self.0.open.fetch_sub(1, Ordering::Relaxed);
    }
}

/// What [`AdminState::reload`] returns.
pub type ReloadFuture =
    std::pin::Pin<Box<dyn std::future::Future<Output = Result<String, String>>>>;

/// Serves the admin socket. Runs on the system arbiter.
pub struct Admin {
    listener: Option<std::os::unix::net::UnixListener>,
    /// `admin.metrics_address`, when set.
    metrics: Option<std::net::TcpListener>,
    state: Rc<AdminState>,
}

impl Admin {
    pub fn new(
        listener: std::os::unix::net::UnixListener,
        metrics: Option<std::net::TcpListener>,
        state: AdminState,
    ) -> Self {
        Admin {
            listener: Some(listener),
            metrics,
            state: Rc::new(state),
        }
    }
}

impl Actor for Admin {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        if let Some(std_metrics) = self.metrics.take() {
            match tokio::net::TcpListener::from_std(std_metrics) {
                Ok(listener) => {
                    let state = self.state.clone();
                    ctx.spawn(
                        async move {
                            let mut errors = AcceptErrors::new("metrics");
                            loop {
                                match listener.accept().await {
                                    Ok((stream, _)) => {
                                        errors.accepted();
                                        // Past the cap the socket is closed at once.
                                        let Some(seat) =
                                            state.metrics_http.enter(state.connections_max)
                                        else {
                                            continue;
                                        };
                                        let state = state.clone();
                                        actix_rt::spawn(async move {
                                            http::serve_metrics(stream, state).await;
                                            drop(seat);
                                        });
                                    }
                                    Err(e) => actix_rt::time::sleep(errors.failed(&e)).await,
                                }
                            }
                        }
                        .into_actor(self),
                    );
                }
                Err(e) => tracing::error!(error = %e, "metrics listener unusable"),
            }
        }
        let Some(std_listener) = self.listener.take() else {
            return;
        };
        let listener = match UnixListener::from_std(std_listener) {
            Ok(l) => l,
            Err(e) => {
                tracing::error!(error = %e, "admin socket unusable");
                return;
            }
        };
        let state = self.state.clone();
        ctx.spawn(
            async move {
                let mut errors = AcceptErrors::new("admin");
                loop {
                    match listener.accept().await {
                        Ok((stream, _)) => {
                            errors.accepted();
                            let Some(seat) = state.admin_socket.enter(state.connections_max) else {
                                // Best effort, never waiting: the reason, then close.
                                let _ = stream.try_write(
                                    spillway_ctl::reply(Err(format!(
                                        "too many admin connections open (admin.connections_max = {}); try again",
                                        state.connections_max
                                    )))
                                    .as_bytes(),
                                );
                                continue;
                            };
                            let state = state.clone();
                            actix_rt::spawn(async move {
                                serve(stream, state).await;
                                drop(seat);
                            });
                        }
                        Err(e) => actix_rt::time::sleep(errors.failed(&e)).await,
                    }
                }
            }
            .into_actor(self),
        );
    }
}

async fn serve(stream: UnixStream, state: Rc<AdminState>) {
    let (rd, mut wr) = stream.into_split();
    let mut line = String::new();
    let mut reader = BufReader::new(rd.take(COMMAND_BYTES_MAX as u64));
    let reply = match reader.read_line(&mut line).await {
        Ok(_) if line.split_whitespace().next() == Some("tap") => {
            let words: Vec<&str> = line.split_whitespace().collect();
            return tap::serve(&words, reader, wr, &state).await;
        }
        Ok(_) => spillway_ctl::reply(execute(line.trim(), &state).await),
        Err(e) => spillway_ctl::reply(Err(format!("reading the command: {e}"))),
    };
    let _ = wr.write_all(reply.as_bytes()).await;
    let _ = wr.shutdown().await;
}

/// Runs one command line. A trailing `--json` asks for the answer as one
/// JSON document (`ctl --json`); an error stays an `error:` reply either way.
/// Takes `name VALUE` out of `words`, if there.
fn take_option<'a>(words: &mut Vec<&'a str>, name: &str) -> Result<Option<&'a str>, String> {
    let Some(i) = words.iter().position(|w| *w == name) else {
        return Ok(None);
    };
    let value = *words
        .get(i + 1)
        .ok_or_else(|| format!("{name} needs a value"))?;
    words.drain(i..=i + 1);
    Ok(Some(value))
}

async fn execute(line: &str, state: &AdminState) -> Result<String, String> {
    let mut words: Vec<&str> = line.split_whitespace().collect();
    let json = words.last() == Some(&"--json");
    if json {
        words.pop();
    }
    let sink = take_option(&mut words, "--sink")?;
    let to = take_option(&mut words, "--to")?;
    let shard = take_option(&mut words, "--shard")?;
    let limit = match take_option(&mut words, "--limit")? {
        None => dead_letters::LIST_LIMIT,
        Some(n) => n
            .parse::<usize>()
            .map_err(|_| format!("--limit {n:?}: not a count (0 for all)"))?,
    };
    let as_json = |v: serde_json::Value| v.to_string() + "\n";
    match words.as_slice() {
        ["health"] if json => Ok(as_json(health::json(state))),
        ["health"] => Ok(health::text(state)),
        ["segments"] => segments::report(state, json),
        ["stats"] if json => Ok(as_json(metrics::stats_json(state))),
        ["stats"] => Ok(metrics::stats(state)),
        ["metrics"] if json => Ok(as_json(metrics::samples_json(&metrics::prometheus(
            state,
        )))),
        ["metrics"] => Ok(metrics::prometheus(state)),
        ["dead-letter", "list"] if json => {
            dead_letters::list_json(&dead_letters::store(state, sink)?, limit).map(as_json)
        }
        ["dead-letter", "list"] => {
            let (name, store) = dead_letters::store_named(state, sink)?;
            dead_letters::list(&name, &store, limit)
        }
        ["dead-letter", "drop", sel @ ..] => {
            let store = dead_letters::store(state, sink)?;
            let n = dead_letters::drop(&store, Selection::parse(sel)?)?;
            Ok(if json {
                as_json(serde_json::json!({ "dropped": n }))
            } else {
                format!("dropped {n}\n")
            })
        }
        ["dead-letter", "requeue", sel @ ..] => {
            let store = dead_letters::store(state, sink)?;
            let n = dead_letters::requeue(state, sink, &store, Selection::parse(sel)?).await?;
            Ok(if json {
                as_json(serde_json::json!({ "requeued": n }))
            } else {
                format!("requeued {n}\n")
            })
        }
        ["sink", "pause", name] => sinks::pause(state, name, true),
        ["sink", "resume", name] => sinks::pause(state, name, false),
        ["sink", "rewind", name] => {
            let to = to.ok_or("sink rewind needs --to oldest|SEQ")?;
            sinks::rewind(state, name, to, shard)
        }
        ["reload"] => {
            let report = match &state.reload {
                Some(f) => f().await?,
                None => return Err("reload is not available".into()),
            };
            Ok(if json {
                as_json(serde_json::json!({ "report": report.lines().collect::<Vec<_>>() }))
            } else {
                report
            })
        }
        [] => Err("empty command".into()),
        _ => Err(format!(
            "unknown command {line:?}; try: health | stats | metrics | segments | dead-letter list [--sink NAME] [--limit N] | dead-letter requeue all|SHARD:SEQ... [--sink NAME] | dead-letter drop all|SHARD:SEQ... [--sink NAME] | sink pause|resume NAME | sink rewind NAME --to oldest|SEQ [--shard N] | reload | tap [--sink NAME] [--tier T] [--limit N] [--rate N]"
        )),
    }
}
