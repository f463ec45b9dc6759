//! The admin socket: what `spillway ctl` talks to.
//!
//! A Unix socket (mode 0600, `admin.socket_path`) speaking a line protocol:
//! the client writes one command line; the daemon answers `ok` or
//! `error: <why>` on the first line, then the body, then closes.
//!
//! Commands: `health`, `stats`, `dead-letter list`,
//! `dead-letter requeue all|<shard>:<seq>...`,
//! `dead-letter drop all|<shard>:<seq>...`, `reload`.

use std::fmt::Write as _;
use std::rc::Rc;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

use actix::prelude::*;
use bytes::Bytes;
use spillway_actors::{
    AcceptErrors, AppendBatch, CommitTarget, DaemonStats, DrainStats, PendingRecord, ShardQueue,
    WabBudget,
};
use spillway_wab::deadletter::{DeadLetter, DeadLetterStore};
use spillway_wab::{FsStorage, RecordMeta};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::oneshot;

/// Longest command line accepted.
const COMMAND_BYTES_MAX: usize = 4096;

/// Everything the admin commands read or act on.
pub struct AdminState {
    pub shards: Vec<Arc<ShardQueue>>,
    pub drains: Vec<Arc<DrainStats>>,
    pub wab: Arc<WabBudget>,
    pub stats: Arc<DaemonStats>,
    pub live_connections: Arc<std::sync::atomic::AtomicUsize>,
    pub dead_letters: Arc<Mutex<DeadLetterStore<FsStorage>>>,
    pub sink_description: Arc<Mutex<String>>,
    /// Runs a reload and returns its report (set by the daemon).
    pub reload: Option<Box<dyn Fn() -> Result<String, String>>>,
    pub reload_stats: Arc<crate::reload::ReloadStats>,
}

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
                                        actix_rt::spawn(serve_metrics(stream, state.clone()));
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
                            actix_rt::spawn(serve(stream, state.clone()));
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
        Ok(_) => spillway_ctl::reply(execute(line.trim(), &state).await),
        Err(e) => spillway_ctl::reply(Err(format!("reading the command: {e}"))),
    };
    let _ = wr.write_all(reply.as_bytes()).await;
    let _ = wr.shutdown().await;
}

async fn execute(line: &str, state: &AdminState) -> Result<String, String> {
    let words: Vec<&str> = line.split_whitespace().collect();
    match words.as_slice() {
        ["health"] => Ok(health(state)),
        ["stats"] => Ok(stats(state)),
        ["metrics"] => Ok(prometheus(state)),
        ["dead-letter", "list"] => dead_letter_list(state),
        ["dead-letter", "drop", sel @ ..] => {
            let sel = Selection::parse(sel)?;
            let removed = state.dead_letters.lock().unwrap().remove_where(|l| sel.matches(l)).map_err(|e| e.to_string())?;
            Ok(format!("dropped {}\n", removed.len()))
        }
        ["dead-letter", "requeue", sel @ ..] => requeue(state, Selection::parse(sel)?).await,
        ["reload"] => match &state.reload {
            Some(f) => f(),
            None => Err("reload is not available".into()),
        },
        [] => Err("empty command".into()),
        _ => Err(format!(
            "unknown command {line:?}; try: health | stats | metrics | dead-letter list | dead-letter requeue all|SHARD:SEQ... | dead-letter drop all|SHARD:SEQ... | reload"
        )),
    }
}

fn health(state: &AdminState) -> String {
    let mut out = String::new();
    for q in &state.shards {
        let _ = write!(out, "shard {} {:?}", q.shard, q.health());
        if let Some(reason) = q.refusal() {
            let why = q.unwritable_why();
            if why.is_empty() {
                let _ = write!(out, " (pushes get {})", reason.name());
            } else {
                let _ = write!(out, " ({why}; pushes get {}, retrying)", reason.name());
            }
        }
        out.push('\n');
    }
    out
}

/// A counter shown by `ctl stats` (as `key`) and exported to Prometheus (as
/// `metric`): one list, so the two views never drift apart.
struct Counter<G> {
    key: &'static str,
    metric: &'static str,
    kind: &'static str,
    help: &'static str,
    get: G,
}

type GlobalGet = fn(&AdminState) -> u64;
type ShardGet = fn(&ShardQueue, &DrainStats) -> u64;

fn load(a: &std::sync::atomic::AtomicU64) -> u64 {
    a.load(Ordering::Relaxed)
}

fn global_counters() -> [Counter<GlobalGet>; 13] {
    [
        Counter {
            key: "connections_open",
            metric: "spillway_connections_open",
            kind: "gauge",
            help: "Open producer connections.",
            get: |s| s.live_connections.load(Ordering::Relaxed) as u64,
        },
        Counter {
            key: "connections_accepted",
            metric: "spillway_connections_accepted_total",
            kind: "counter",
            help: "Producer connections accepted.",
            get: |s| load(&s.stats.connections_accepted),
        },
        Counter {
            key: "connections_refused",
            metric: "spillway_connections_refused_total",
            kind: "counter",
            help: "Connections closed at once because server.max_connections were open.",
            get: |s| load(&s.stats.connections_refused),
        },
        Counter {
            key: "read_timeouts",
            metric: "spillway_read_timeouts_total",
            kind: "counter",
            help: "Connections closed because a frame stalled mid-way.",
            get: |s| load(&s.stats.read_timeouts),
        },
        Counter {
            key: "socket_replaced",
            metric: "spillway_socket_replaced_total",
            kind: "counter",
            help: "Times the producer socket's name was found removed or replaced by someone else (producers then reach another process).",
            get: |s| load(&s.stats.socket_replaced),
        },
        Counter {
            key: "write_timeouts",
            metric: "spillway_write_timeouts_total",
            kind: "counter",
            help: "Connections closed because the peer read none of its responses for server.connection_read_timeout_ms.",
            get: |s| load(&s.stats.write_timeouts),
        },
        Counter {
            key: "idle_timeouts",
            metric: "spillway_idle_timeouts_total",
            kind: "counter",
            help: "Connections closed after server.connection_idle_timeout_ms with nothing in progress.",
            get: |s| load(&s.stats.idle_timeouts),
        },
        Counter {
            key: "accept_failures",
            metric: "spillway_accept_failures_total",
            kind: "counter",
            help: "accept() failures (EMFILE: out of file descriptors, and the like); each pauses the accept loop.",
            get: |s| load(&s.stats.accept_failures),
        },
        Counter {
            key: "read_buffer_bytes",
            metric: "spillway_read_buffer_bytes",
            kind: "gauge",
            help: "Read-buffer budget reserved by frames larger than 64 KiB while they arrive.",
            get: |s| load(&s.stats.read_buffer_bytes),
        },
        Counter {
            key: "read_buffer_pauses",
            metric: "spillway_read_buffer_pauses_total",
            kind: "counter",
            help: "Times a connection waited before reading because server.read_buffer_bytes_max was reserved.",
            get: |s| load(&s.stats.read_buffer_pauses),
        },
        Counter {
            key: "log_write_failures",
            metric: "spillway_log_write_failures_total",
            kind: "counter",
            help: "Log writes dropped because stderr failed (closed pipe, full disk).",
            get: |_| crate::logging::log_write_failures(),
        },
        Counter {
            key: "wab_bytes_used",
            metric: "spillway_wab_bytes",
            kind: "gauge",
            help: "Bytes held in the write-ahead buffer (undelivered records).",
            get: |s| load(&s.wab.used),
        },
        Counter {
            key: "wab_bytes_max",
            metric: "spillway_wab_bytes_max",
            kind: "gauge",
            help: "wab.wab_bytes_max: past it pushes get Overloaded.",
            get: |s| s.wab.max,
        },
    ]
}

fn shard_counters() -> [Counter<ShardGet>; 20] {
    [
        Counter {
            key: "up",
            metric: "spillway_shard_up",
            kind: "gauge",
            help: "1 while the shard accepts writes.",
            get: |q, _| u64::from(q.health() == spillway_actors::ShardHealth::Running),
        },
        Counter {
            key: "records_lost",
            metric: "spillway_records_lost",
            kind: "gauge",
            help: "Acknowledged records recovery found missing or damaged at the last start (gaps, salvaged records); see quarantine/*.reason.",
            get: |q, _| load(&q.stats.records_lost),
        },
        Counter {
            key: "unwritable_events",
            metric: "spillway_shard_unwritable_total",
            kind: "counter",
            help: "Times the shard could not write (full disk, failed write or fsync); it retries by itself.",
            get: |q, _| load(&q.stats.unwritable_events),
        },
        Counter {
            key: "records_written",
            metric: "spillway_records_written_total",
            kind: "counter",
            help: "Records written to the WAB.",
            get: |q, _| load(&q.stats.records),
        },
        Counter {
            key: "payload_bytes_written",
            metric: "spillway_payload_bytes_written_total",
            kind: "counter",
            help: "Payload bytes written to the WAB.",
            get: |q, _| load(&q.stats.bytes),
        },
        Counter {
            key: "groups",
            metric: "spillway_group_commits_total",
            kind: "counter",
            help: "Group commits (one write, at most one fdatasync each).",
            get: |q, _| load(&q.stats.groups),
        },
        Counter {
            key: "fsyncs",
            metric: "spillway_fsyncs_total",
            kind: "counter",
            help: "fdatasyncs of segments.",
            get: |q, _| load(&q.stats.fsyncs),
        },
        Counter {
            key: "fsync_failures",
            metric: "spillway_fsync_failures_total",
            kind: "counter",
            help: "Failed fdatasyncs (their groups were nacked).",
            get: |q, _| load(&q.stats.fsync_failures),
        },
        Counter {
            key: "write_failures",
            metric: "spillway_write_failures_total",
            kind: "counter",
            help: "Failed segment writes (their groups were nacked).",
            get: |q, _| load(&q.stats.write_failures),
        },
        Counter {
            key: "rotations",
            metric: "spillway_segment_rotations_total",
            kind: "counter",
            help: "Segments sealed.",
            get: |q, _| load(&q.stats.rotations),
        },
        Counter {
            key: "restarts",
            metric: "spillway_shard_restarts_total",
            kind: "counter",
            help: "Restarts of the shard's flusher by the supervisor.",
            get: |q, _| load(&q.stats.restarts),
        },
        Counter {
            key: "bytes_held",
            metric: "spillway_shard_bytes",
            kind: "gauge",
            help: "Bytes of the shard's segments counted against wab_bytes_max.",
            get: |q, _| load(&q.stats.bytes_held),
        },
        Counter {
            key: "durable_next_seq",
            metric: "spillway_durable_next_seq",
            kind: "gauge",
            help: "Every record below this sequence number is durable.",
            get: |q, _| q.durable().next_seq,
        },
        Counter {
            key: "checkpoint",
            metric: "spillway_checkpoint_seq",
            kind: "gauge",
            help:
                "Every record below this sequence number is delivered or dead-lettered (on disk).",
            get: |_, d| load(&d.checkpoint),
        },
        Counter {
            key: "delivered_records",
            metric: "spillway_delivered_records_total",
            kind: "counter",
            help: "Records the sink committed.",
            get: |_, d| load(&d.delivered_records),
        },
        Counter {
            key: "delivered_batches",
            metric: "spillway_delivered_batches_total",
            kind: "counter",
            help: "Batches the sink committed.",
            get: |_, d| load(&d.delivered_batches),
        },
        Counter {
            key: "delivery_retries",
            metric: "spillway_delivery_retries_total",
            kind: "counter",
            help: "Transient delivery failures (each followed by a backoff).",
            get: |_, d| load(&d.retries),
        },
        Counter {
            key: "dead_lettered",
            metric: "spillway_dead_lettered_total",
            kind: "counter",
            help: "Records moved to the dead-letter store.",
            get: |_, d| load(&d.dead_lettered),
        },
        Counter {
            key: "sink_restarts",
            metric: "spillway_sink_restarts_total",
            kind: "counter",
            help: "Sink instances re-created after a panic or a failed creation.",
            get: |_, d| load(&d.sink_restarts),
        },
        Counter {
            key: "segments_deleted",
            metric: "spillway_segments_deleted_total",
            kind: "counter",
            help: "Delivered segments deleted.",
            get: |_, d| load(&d.segments_deleted),
        },
    ]
}

/// `ctl stats`: the counters for a human, plus a few derived figures.
fn stats(state: &AdminState) -> String {
    let mut out = String::new();
    for c in global_counters() {
        let _ = writeln!(out, "{} {}", c.key, (c.get)(state));
    }
    for reason in spillway_protocol::NackReason::ALL {
        let _ = writeln!(
            out,
            "nacks{{reason=\"{}\"}} {}",
            reason.name(),
            state.stats.nack_count(reason)
        );
    }
    let _ = writeln!(out, "sink {:?}", state.sink_description.lock().unwrap());
    let _ = writeln!(
        out,
        "reloads_succeeded {}",
        load(&state.reload_stats.succeeded)
    );
    let _ = writeln!(out, "reloads_failed {}", load(&state.reload_stats.failed));
    for (q, d) in state.shards.iter().zip(&state.drains) {
        let st = &q.stats;
        let (fsyncs, groups, records) = (load(&st.fsyncs), load(&st.groups), load(&st.records));
        let derived = [
            ("health", format!("{:?}", q.health())),
            (
                "fsync_us_mean",
                (load(&st.fsync_us_total) / fsyncs.max(1)).to_string(),
            ),
            ("fsync_us_max", load(&st.fsync_us_max).to_string()),
            (
                "records_per_group",
                format!("{:.1}", records as f64 / groups.max(1) as f64),
            ),
        ];
        let counted = shard_counters().map(|c| (c.key, (c.get)(q, d).to_string()));
        for (k, v) in derived.into_iter().chain(counted) {
            let _ = writeln!(out, "shard{{shard=\"{}\"}}.{k} {v}", q.shard);
        }
    }
    out
}

/// Prometheus text exposition (format 0.0.4) of every counter: served by
/// `ctl metrics` and on `admin.metrics_address` at `GET /metrics`.
pub fn prometheus(state: &AdminState) -> String {
    let mut out = String::new();
    let mut family = |name: &str, kind: &str, help: &str, samples: &[(String, u64)]| {
        let _ = writeln!(out, "# HELP {name} {help}");
        let _ = writeln!(out, "# TYPE {name} {kind}");
        for (labels, v) in samples {
            let _ = writeln!(out, "{name}{labels} {v}");
        }
    };
    for c in global_counters() {
        family(c.metric, c.kind, c.help, &[(String::new(), (c.get)(state))]);
    }
    let nacks: Vec<(String, u64)> = spillway_protocol::NackReason::ALL
        .iter()
        .map(|r| {
            (
                format!("{{reason=\"{}\"}}", r.name()),
                state.stats.nack_count(*r),
            )
        })
        .collect();
    family(
        "spillway_nacks_total",
        "counter",
        "Nacks sent, by reason.",
        &nacks,
    );
    let reloads = [
        (
            "{result=\"succeeded\"}".to_string(),
            load(&state.reload_stats.succeeded),
        ),
        (
            "{result=\"failed\"}".to_string(),
            load(&state.reload_stats.failed),
        ),
    ];
    family(
        "spillway_reloads_total",
        "counter",
        "Config reloads, by result.",
        &reloads,
    );
    for c in shard_counters() {
        let samples: Vec<(String, u64)> = state
            .shards
            .iter()
            .zip(&state.drains)
            .map(|(q, d)| (format!("{{shard=\"{}\"}}", q.shard), (c.get)(q, d)))
            .collect();
        family(c.metric, c.kind, c.help, &samples);
    }
    let _ = writeln!(
        out,
        "# HELP spillway_fsync_seconds fdatasync latency of group commits."
    );
    let _ = writeln!(out, "# TYPE spillway_fsync_seconds histogram");
    for q in &state.shards {
        let st = &q.stats;
        let mut cumulative = 0;
        for (i, bound) in spillway_actors::FSYNC_BUCKETS_US.iter().enumerate() {
            cumulative += st.fsync_us_buckets[i].load(Ordering::Relaxed);
            let _ = writeln!(
                out,
                "spillway_fsync_seconds_bucket{{shard=\"{}\",le=\"{}\"}} {cumulative}",
                q.shard,
                *bound as f64 / 1e6
            );
        }
        let count = st.fsyncs.load(Ordering::Relaxed);
        let _ = writeln!(
            out,
            "spillway_fsync_seconds_bucket{{shard=\"{}\",le=\"+Inf\"}} {count}",
            q.shard
        );
        let sum = st.fsync_us_total.load(Ordering::Relaxed) as f64 / 1e6;
        let _ = writeln!(
            out,
            "spillway_fsync_seconds_sum{{shard=\"{}\"}} {sum}",
            q.shard
        );
        let _ = writeln!(
            out,
            "spillway_fsync_seconds_count{{shard=\"{}\"}} {count}",
            q.shard
        );
    }
    out
}

/// Serve `GET /metrics` on a TCP listener (HTTP/1.1, one request per
/// connection). Anything else gets 404; a request over 8 KiB or slower than
/// 5 s is dropped.
async fn serve_metrics(stream: tokio::net::TcpStream, state: Rc<AdminState>) {
    use tokio::io::AsyncBufReadExt as _;
    let (rd, mut wr) = stream.into_split();
    let mut reader = BufReader::new(rd.take(8192));
    let mut request_line = String::new();
    let read = tokio::time::timeout(
        std::time::Duration::from_secs(5),
        reader.read_line(&mut request_line),
    )
    .await;
    if !matches!(read, Ok(Ok(n)) if n > 0) {
        return;
    }
    let (status, body) = match request_line
        .split_whitespace()
        .collect::<Vec<_>>()
        .as_slice()
    {
        ["GET", "/metrics", ..] => ("200 OK", prometheus(&state)),
        _ => ("404 Not Found", "try GET /metrics\n".to_string()),
    };
    let head = format!(
        "HTTP/1.1 {status}\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    let _ = wr.write_all(head.as_bytes()).await;
    let _ = wr.write_all(body.as_bytes()).await;
    let _ = wr.shutdown().await;
}

fn dead_letter_list(state: &AdminState) -> Result<String, String> {
    let all = state
        .dead_letters
        .lock()
        .unwrap()
        .list()
        .map_err(|e| e.to_string())?;
    let mut out = String::new();
    let _ = writeln!(out, "{} dead letters", all.len());
    for l in all {
        let preview: String = String::from_utf8_lossy(&l.payload)
            .chars()
            .take(60)
            .collect();
        let _ = writeln!(
            out,
            "{}:{}\ttier={}\tat_unix_us={}\tbytes={}\treason={}\tpayload={:?}",
            l.shard,
            l.seq,
            l.tier,
            l.dead_lettered_unix_us,
            l.payload.len(),
            l.reason,
            preview
        );
    }
    Ok(out)
}

/// Which dead letters a requeue/drop applies to.
enum Selection {
    All,
    Ids(Vec<(u32, u64)>),
}

impl Selection {
    fn parse(words: &[&str]) -> Result<Selection, String> {
        match words {
            [] => Err("say which dead letters: all, or SHARD:SEQ identities as shown by `dead-letter list`".into()),
            ["all"] => Ok(Selection::All),
            ids => ids
                .iter()
                .map(|w| {
                    let (s, q) = w.split_once(':').ok_or_else(|| format!("{w:?} is not SHARD:SEQ"))?;
                    Ok((s.parse().map_err(|_| format!("bad shard in {w:?}"))?, q.parse().map_err(|_| format!("bad seq in {w:?}"))?))
                })
                .collect::<Result<Vec<_>, String>>()
                .map(Selection::Ids),
        }
    }

    fn matches(&self, l: &DeadLetter) -> bool {
        match self {
            Selection::All => true,
            Selection::Ids(ids) => ids.contains(&(l.shard, l.seq)),
        }
    }
}

/// Receives the commit of a requeued batch (on the flusher's thread).
struct RequeueWaiter(Mutex<Option<oneshot::Sender<Result<u64, spillway_protocol::NackReason>>>>);

impl CommitTarget for RequeueWaiter {
    fn committed(&self, _token: u64, result: Result<u64, spillway_protocol::NackReason>) {
        if let Some(tx) = self.0.lock().unwrap().take() {
            let _ = tx.send(result);
        }
    }
}

/// Push the selected dead letters back into their shards (as new records,
/// Sync, in their original order), then remove them from the store.
async fn requeue(state: &AdminState, sel: Selection) -> Result<String, String> {
    let all = state
        .dead_letters
        .lock()
        .unwrap()
        .list()
        .map_err(|e| e.to_string())?;
    let chosen: Vec<DeadLetter> = all.into_iter().filter(|l| sel.matches(l)).collect();
    if chosen.is_empty() {
        return Ok("requeued 0\n".into());
    }
    let shards = state.shards.len() as u32;
    let mut by_shard: Vec<Vec<&DeadLetter>> = vec![Vec::new(); shards as usize];
    for l in &chosen {
        by_shard[(l.shard % shards) as usize].push(l);
    }
    let arrival = spillway_wab::format::now_unix_us();
    for (i, letters) in by_shard.iter().enumerate() {
        if letters.is_empty() {
            continue;
        }
        let meta = RecordMeta {
            tier: spillway_protocol::Tier::Sync.as_byte(),
            arrival_unix_us: arrival,
        }
        .pack();
        let records: Vec<PendingRecord> = letters
            .iter()
            .map(|l| PendingRecord {
                payload: Bytes::clone(&l.payload),
                meta,
            })
            .collect();
        let bytes = records.iter().map(|r| r.payload.len() as u64).sum();
        let (tx, rx) = oneshot::channel();
        let waiter = Arc::new(RequeueWaiter(Mutex::new(Some(tx))));
        state.shards[i].push(AppendBatch::new(records, bytes, true, 0, waiter));
        match rx.await {
            Ok(Ok(_)) => {}
            Ok(Err(reason)) => {
                return Err(format!("shard {i} refused the requeued records: {reason}"))
            }
            Err(_) => return Err(format!("shard {i} went away during the requeue")),
        }
    }
    let ids: Vec<(u32, u64)> = chosen.iter().map(|l| (l.shard, l.seq)).collect();
    state
        .dead_letters
        .lock()
        .unwrap()
        .remove_where(|l| ids.contains(&(l.shard, l.seq)))
        .map_err(|e| format!("requeued, but removing them from the dead-letter store failed (they may be delivered twice): {e}"))?;
    Ok(format!("requeued {}\n", chosen.len()))
}
