//! The daemon's counters, listed once ([`global_counters`],
//! [`shard_counters`]), and their two renderings: `ctl stats` for a human
//! ([`stats`]) and the Prometheus exposition ([`prometheus`], served by
//! `ctl metrics` and `GET /metrics`), encoded by the `prometheus-client`
//! crate from a [`Collector`] that reads the daemon's atomics at scrape
//! time (nothing is registered or updated on the hot path).

use std::fmt::Write as _;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Registry;
use spillway_actors::histogram::Snapshot;
use spillway_actors::{
    DaemonStats, DeliveryBoard, DoorStats, DrainStats, ReadBudget, RetentionStats, ShardHealth,
    ShardQueue, SinkState, WabBudget,
};

use super::AdminState;
use crate::reload::ReloadStats;

/// What the metrics read: shared handles to the daemon's counters.
pub(super) struct Sources {
    shards: Vec<Arc<ShardQueue>>,
    board: Arc<DeliveryBoard>,
    wab: Arc<WabBudget>,
    stats: Arc<DaemonStats>,
    read_budget: Arc<ReadBudget>,
    live_connections: Arc<AtomicUsize>,
    reload_stats: Arc<ReloadStats>,
    data_dir: PathBuf,
    /// Every sink's dead-letter folder, by sink name.
    dead_letter_dirs: Vec<(String, PathBuf)>,
    admin_listeners: [Arc<super::ListenerLoad>; 2],
}

impl Sources {
    pub(super) fn of(state: &AdminState) -> Self {
        Sources {
            shards: state.shards.clone(),
            board: state.board.clone(),
            wab: state.wab.clone(),
            stats: state.stats.clone(),
            read_budget: state.read_budget.clone(),
            live_connections: state.live_connections.clone(),
            reload_stats: state.reload_stats.clone(),
            data_dir: state.data_dir.clone(),
            dead_letter_dirs: state
                .dead_letters
                .lock()
                .unwrap()
                .iter()
                .map(|(n, d)| (n.clone(), d.lock().unwrap().dir().to_path_buf()))
                .collect(),
            admin_listeners: [state.admin_socket.clone(), state.metrics_http.clone()],
        }
    }
}

impl std::fmt::Debug for Sources {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sources")
            .field("shards", &self.shards.len())
            .finish_non_exhaustive()
    }
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

type GlobalGet = fn(&Sources) -> u64;
type ShardGet = fn(&ShardQueue, &ShardView) -> u64;
type SinkGet = fn(&ShardQueue, &DrainStats) -> u64;

/// What a shard's figures read besides its queue: its retention and every
/// sink's delivery from it.
pub(super) struct ShardView {
    retention: Arc<RetentionStats>,
    sinks: Vec<(String, Arc<DrainStats>)>,
}

impl ShardView {
    pub(super) fn of(board: &DeliveryBoard, shard: usize) -> ShardView {
        ShardView {
            retention: board.retention.get(shard).cloned().unwrap_or_default(),
            sinks: board.shard(shard),
        }
    }

    /// The lowest of every sink's `get` (0 with no sink).
    fn lowest(&self, get: impl Fn(&DrainStats) -> u64) -> u64 {
        self.sinks.iter().map(|(_, d)| get(d)).min().unwrap_or(0)
    }

    /// The lowest confirmed bytes of the cursors that have measured theirs
    /// (one that could not read since its start knows nothing yet).
    fn lowest_confirmed_bytes(&self) -> u64 {
        let measured = self
            .sinks
            .iter()
            .filter(|(_, d)| d.backlog_measured.load(Ordering::Relaxed));
        measured
            .map(|(_, d)| load(&d.confirmed_bytes))
            .min()
            .unwrap_or(0)
    }
}

/// When the daemon started (`run`), for `uptime_seconds`.
static STARTED: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();

/// Note the daemon's start; `uptime_seconds` counts from here.
pub(crate) fn mark_start() {
    STARTED.get_or_init(std::time::Instant::now);
}

fn uptime_seconds() -> u64 {
    STARTED.get().map_or(0, |t| t.elapsed().as_secs())
}

fn load(a: &std::sync::atomic::AtomicU64) -> u64 {
    a.load(Ordering::Relaxed)
}

const GLOBAL_COUNTERS: [Counter<GlobalGet>; 18] = [
    Counter {
        key: "uptime_seconds",
        metric: "spillway_uptime_seconds",
        kind: "gauge",
        help: "Seconds since the daemon started (the counters count from then).",
        get: |_| uptime_seconds(),
    },
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
        key: "connections_evicted",
        metric: "spillway_connections_evicted_total",
        kind: "counter",
        help: "Idle connections (nothing in flight) closed to let a new one in at server.connections_max.",
        get: |s| load(&s.stats.connections_evicted),
    },
    Counter {
        key: "read_timeouts",
        metric: "spillway_read_timeouts_total",
        kind: "counter",
        help: "Connections closed because a frame stalled mid-way.",
        get: |s| load(&s.stats.read_timeouts),
    },
    Counter {
        key: "connections_mid_frame",
        metric: "spillway_connections_mid_frame",
        kind: "gauge",
        help: "Connections holding part of a frame right now (their server.connection_read_timeout_ms clock runs); never evicted.",
        get: |s| load(&s.stats.connections_mid_frame),
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
        help: "Connections closed because the peer read none of its responses for server.connection_idle_timeout_ms.",
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
        key: "fd_exhaustion",
        metric: "spillway_fd_exhaustion_total",
        kind: "counter",
        help: "Operations that failed for lack of a file descriptor (EMFILE, ENFILE) anywhere in the daemon: accepts, segment and checkpoint files, folders. GET /ready says not ready for 10 s after one.",
        get: |_| spillway_wab::descriptors::total(),
    },
    Counter {
        key: "admin_connections_refused",
        metric: "spillway_admin_connections_refused_total",
        kind: "counter",
        help: "Connections to the admin socket or the metrics address closed at once because admin.connections_max were open on it.",
        get: |s| {
            s.admin_listeners
                .iter()
                .map(|l| load(&l.refused))
                .sum()
        },
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
        key: "frame_buffers_kept_bytes",
        metric: "spillway_frame_buffers_kept_bytes",
        kind: "gauge",
        help: "Buffers of frames larger than 64 KiB kept for the next ones (in use or free, at most 32 MiB); dropped once such frames stop coming.",
        get: |s| s.read_budget.frame_buffers.kept().1 as u64,
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
        help: "Bytes of segments on disk counted against wab.wab_bytes_max; falls when a delivered segment is deleted (spillway_pending_bytes and spillway_pending_records say what is undelivered).",
        get: |s| s.wab.used(),
    },
    Counter {
        key: "wab_bytes_max",
        metric: "spillway_wab_bytes_max",
        kind: "gauge",
        help: "wab.wab_bytes_max: past it pushes get Overloaded.",
        get: |s| s.wab.max(),
    },
];

const SHARD_COUNTERS: [Counter<ShardGet>; 23] = [
    Counter {
        key: "pending_records",
        metric: "spillway_pending_records",
        kind: "gauge",
        help: "Records acknowledged durably (fsynced) and not yet confirmed by every sink (delivered or dead-lettered).",
        get: |q, v| {
            q.durable()
                .next_seq
                .saturating_sub(v.lowest(|d| load(&d.checkpoint)))
        },
    },
    Counter {
        key: "pending_bytes",
        metric: "spillway_pending_bytes",
        kind: "gauge",
        help: "Bytes of the pending records in the WAB (record headers and payloads): acknowledged durably, not yet confirmed by every sink.",
        // The cursors' counts first: they never pass the flusher's.
        get: |q, v| {
            let confirmed = v.lowest_confirmed_bytes();
            q.durable().bytes.saturating_sub(confirmed)
        },
    },
    Counter {
        key: "oldest_pending_age_seconds",
        metric: "spillway_oldest_pending_age_seconds",
        kind: "gauge",
        help: "Age of the oldest record some sink has not confirmed yet (0 when none is pending).",
        get: |_, v| v.sinks.iter().map(|(_, d)| oldest_age_seconds(d)).max().unwrap_or(0),
    },
    Counter {
        key: "up",
        metric: "spillway_shard_up",
        kind: "gauge",
        help: "1 while the shard accepts writes.",
        get: |q, _| u64::from(q.health() == ShardHealth::Running),
    },
    Counter {
        key: "records_lost",
        metric: "spillway_records_lost",
        kind: "gauge",
        help: "Acknowledged records recovery found missing or damaged at the last start (gaps, salvaged records, records of a segment whose header nothing proves); see quarantine/*.reason.",
        get: |q, _| load(&q.stats.records_lost),
    },
    Counter {
        key: "recovered_records",
        metric: "spillway_recovered_records",
        kind: "gauge",
        help: "Records recovery found in the shard's segments at the last start (undelivered ones are delivered from there).",
        get: |q, _| load(&q.stats.recovered_records),
    },
    Counter {
        key: "quarantined_files",
        metric: "spillway_quarantined_files",
        kind: "gauge",
        help: "Files recovery moved to the shard's quarantine/ at the last start (a segment or checkpoint it could not trust; each has a .reason).",
        get: |q, _| load(&q.stats.quarantined_files),
    },
    Counter {
        key: "unchecked_segments",
        metric: "spillway_unchecked_segments",
        kind: "gauge",
        help: "Sealed segments found at the last start whose records are not checked yet (read after the start, oldest first); delivery from the shard waits at the first of them.",
        get: |q, _| load(&q.stats.unchecked_segments),
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
        key: "sealed_without_successor",
        metric: "spillway_segments_sealed_without_successor_total",
        kind: "counter",
        help: "Full segments sealed with no room on the disk for the next one; pushes got Overloaded until delivery freed it.",
        get: |q, _| load(&q.stats.sealed_without_successor),
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
        get: |q, _| q.budget.held(),
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
            "Every record below this sequence number is delivered or dead-lettered by every sink (on disk; segments below it are deleted).",
        get: |_, v| load(&v.retention.floor),
    },
    Counter {
        key: "segments_deleted",
        metric: "spillway_segments_deleted_total",
        kind: "counter",
        help: "Segments deleted once every sink had confirmed them (unlinked, or set aside to be written over as a later segment).",
        get: |_, v| load(&v.retention.segments_deleted),
    },
    Counter {
        key: "segments_recycled",
        metric: "spillway_segments_recycled_total",
        kind: "counter",
        help: "Segments made by writing zeros over a delivered one rather than creating a file (no blocks allocated or freed).",
        get: |q, _| load(&q.free.recycled),
    },
];

/// One sink's figures of one shard (labels `sink` and `shard`).
const SINK_COUNTERS: [Counter<SinkGet>; 15] = [
    Counter {
        key: "up",
        metric: "spillway_sink_up",
        kind: "gauge",
        help: "1 while the sink delivers from the shard; 0 while it retries a failed batch or its instance failed (see ctl health, GET /ready).",
        get: |_, d| u64::from(d.sink.lock().unwrap().state == SinkState::Running),
    },
    Counter {
        key: "backlog_records",
        metric: "spillway_sink_backlog_records",
        kind: "gauge",
        help: "Records durable in the shard and not yet confirmed by the sink.",
        get: |q, d| q.durable().next_seq.saturating_sub(load(&d.checkpoint)),
    },
    Counter {
        key: "backlog_bytes",
        metric: "spillway_sink_backlog_bytes",
        kind: "gauge",
        help: "Bytes (record headers and payloads) durable in the shard and not yet confirmed by the sink: what it holds of the WAB.",
        get: |q, d| q.durable().bytes.saturating_sub(load(&d.confirmed_bytes)),
    },
    Counter {
        key: "oldest_age_seconds",
        metric: "spillway_sink_oldest_age_seconds",
        kind: "gauge",
        help: "Age of the oldest record the sink has read and not confirmed (0 when it holds none).",
        get: |_, d| oldest_age_seconds(d),
    },
    Counter {
        key: "checkpoint",
        metric: "spillway_sink_checkpoint_seq",
        kind: "gauge",
        help: "Every record below this sequence number is delivered to the sink or in its dead-letter store (its cursor file).",
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
        help: "Records moved to the sink's dead-letter store.",
        get: |_, d| load(&d.dead_lettered),
    },
    Counter {
        key: "batch_splits",
        metric: "spillway_batch_splits_total",
        kind: "counter",
        help: "Batches halved after failing twice in a row, to find the records that fail (poison records).",
        get: |_, d| load(&d.batch_splits),
    },
    Counter {
        key: "poison_records",
        metric: "spillway_poison_records_total",
        kind: "counter",
        help: "Records set aside as poison (failing alone while the sink took others) and dead-lettered; counted in dead_lettered too.",
        get: |_, d| load(&d.poison_records),
    },
    Counter {
        key: "records_skipped",
        metric: "spillway_records_skipped_total",
        kind: "counter",
        help: "Records the sink skipped because its backlog passed lag_bytes_max (on_lag = \"skip\"); each range is in its folder's skipped file.",
        get: |_, d| load(&d.records_skipped),
    },
    Counter {
        key: "batches_in_flight",
        metric: "spillway_sink_batches_in_flight",
        kind: "gauge",
        help: "Batches offered to the sink and not yet answered.",
        get: |_, d| load(&d.in_flight),
    },
    Counter {
        key: "batches_in_flight_limit",
        metric: "spillway_sink_batches_in_flight_limit",
        kind: "gauge",
        help: "How many batches the sink may have in flight: batches_in_flight, or what \"adaptive\" has learned.",
        get: |_, d| load(&d.in_flight_limit),
    },
    Counter {
        key: "sink_restarts",
        metric: "spillway_sink_restarts_total",
        kind: "counter",
        help: "Sink instances re-created after a panic or a failed creation.",
        get: |_, d| load(&d.sink_restarts),
    },
];

fn oldest_age_seconds(d: &DrainStats) -> u64 {
    let arrival = load(&d.oldest_pending_arrival_us);
    if arrival == 0 {
        return 0;
    }
    spillway_wab::format::now_unix_us().saturating_sub(arrival) / 1_000_000
}

/// Producer connections closed at once, by the reason label they carry.
fn refused_by_reason(stats: &spillway_actors::DaemonStats) -> [(&'static str, u64); 2] {
    [
        ("connections_max", load(&stats.connections_refused)),
        ("peer_uid", load(&stats.connections_refused_peer)),
    ]
}

/// The help of each network door's connection metrics, in the order of
/// [`door_connections`].
const DOOR_HELP: [(&str, [&str; 4]); 2] = [
    (
        "http",
        [
            "Open connections of the HTTP ingest door (server.http).",
            "Connections the HTTP ingest door accepted.",
            "Connections the HTTP ingest door closed at once: server.http.connections_max were open, each with a request being answered.",
            "Connections the HTTP ingest door closed between requests (or before the first) to let a new one in at server.http.connections_max.",
        ],
    ),
    (
        "tcp",
        [
            "Open connections of the TCP door (server.tcp).",
            "Connections the TCP door accepted.",
            "Connections the TCP door closed at once: server.tcp.connections_max were open, none in its TLS handshake.",
            "Connections the TCP door closed in their TLS handshake to let a new one in at server.tcp.connections_max.",
        ],
    ),
];

/// A network door's connection figures, by the suffix of their `ctl
/// stats` key (after the door's name) and metric name.
fn door_connections(d: &DoorStats) -> [(&'static str, u64); 4] {
    [
        (
            "connections_open",
            d.connections_open.load(Ordering::Relaxed) as u64,
        ),
        ("connections_accepted", load(&d.connections_accepted)),
        ("connections_refused", load(&d.connections_refused)),
        ("connections_evicted", load(&d.connections_evicted)),
    ]
}

/// The network doors' figures as `ctl stats` keys (zero while off): each
/// door's connections, what only the HTTP door counts, each door's failed
/// TLS handshakes.
fn door_figures(stats: &spillway_actors::DaemonStats) -> Vec<(String, u64)> {
    let mut out = Vec::new();
    for (door, d) in stats.network_doors() {
        for (figure, n) in door_connections(d) {
            out.push((format!("{door}_{figure}"), n));
        }
        if door == "http" {
            let h = &stats.http;
            out.push(("http_records".to_string(), load(&h.records)));
            for (code, n) in spillway_actors::ingest::http::STATUSES
                .iter()
                .zip(&h.responses)
            {
                out.push((format!("http_responses{{code=\"{code}\"}}"), load(n)));
            }
        }
        for (reason, n) in d.tls.by_reason() {
            out.push((
                format!("{door}_tls_handshakes_failed{{reason=\"{reason}\"}}"),
                n,
            ));
        }
    }
    out
}

/// `ctl stats`: the counters for a human, plus a few derived figures.
pub(super) fn stats(state: &AdminState) -> String {
    let src = Sources::of(state);
    let mut out = String::new();
    for c in GLOBAL_COUNTERS {
        let _ = writeln!(out, "{} {}", c.key, (c.get)(&src));
    }
    let refused = refused_by_reason(&state.stats);
    let _ = writeln!(
        out,
        "connections_refused {}",
        refused.iter().map(|(_, n)| n).sum::<u64>()
    );
    for (reason, n) in refused {
        let _ = writeln!(out, "connections_refused{{reason=\"{reason}\"}} {n}");
    }
    for (key, n) in door_figures(&state.stats) {
        let _ = writeln!(out, "{key} {n}");
    }
    for reason in spillway_protocol::NackReason::ALL {
        let _ = writeln!(
            out,
            "nacks{{reason=\"{}\"}} {}",
            reason.name(),
            state.stats.nack_count(reason)
        );
    }
    for (name, f) in state.board.sinks() {
        let _ = writeln!(out, "sink{{sink=\"{name}\"}} {:?}", f.description);
    }
    let _ = writeln!(
        out,
        "reloads_succeeded {}",
        load(&state.reload_stats.succeeded)
    );
    let _ = writeln!(out, "reloads_failed {}", load(&state.reload_stats.failed));
    for (i, q) in state.shards.iter().enumerate() {
        for (k, v) in shard_figures(q, &ShardView::of(&state.board, i)) {
            let _ = writeln!(out, "shard{{shard=\"{}\"}}.{k} {v}", q.shard);
        }
    }
    for (name, f) in state.board.sinks() {
        for (k, v) in sink_totals(&state.shards, &f.shards) {
            let _ = writeln!(out, "sink{{sink=\"{name}\"}}.{k} {v}");
        }
        for (q, d) in state.shards.iter().zip(&f.shards) {
            for c in SINK_COUNTERS {
                let _ = writeln!(
                    out,
                    "sink{{sink=\"{name}\",shard=\"{}\"}}.{} {}",
                    q.shard,
                    c.key,
                    (c.get)(q, d)
                );
            }
        }
    }
    out
}

/// A sink's figures over every shard: counts and backlogs summed, the
/// oldest age the highest, `up` only if every shard's is.
fn sink_totals(shards: &[Arc<ShardQueue>], drains: &[Arc<DrainStats>]) -> Vec<(&'static str, u64)> {
    SINK_COUNTERS
        .into_iter()
        .filter(|c| c.key != "checkpoint")
        .map(|c| {
            let values = shards.iter().zip(drains).map(|(q, d)| (c.get)(q, d));
            let total = match c.key {
                "up" => values.min().unwrap_or(0),
                "oldest_age_seconds" => values.max().unwrap_or(0),
                _ => values.sum(),
            };
            (c.key, total)
        })
        .collect()
}

/// One per-shard figure of `ctl stats`.
enum Figure {
    Text(String),
    Count(u64),
    Ratio(f64),
}

impl std::fmt::Display for Figure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Figure::Text(t) => f.write_str(t),
            Figure::Count(n) => write!(f, "{n}"),
            Figure::Ratio(r) => write!(f, "{r:.1}"),
        }
    }
}

impl Figure {
    fn json(&self) -> serde_json::Value {
        match self {
            Figure::Text(t) => serde_json::json!(t),
            Figure::Count(n) => serde_json::json!(n),
            Figure::Ratio(r) => serde_json::json!(r),
        }
    }
}

/// A shard's figures for both renderings of `ctl stats`: a few derived
/// ones, then every shard counter.
fn shard_figures(q: &ShardQueue, v: &ShardView) -> Vec<(&'static str, Figure)> {
    let st = &q.stats;
    let (fsyncs, groups, records) = (load(&st.fsyncs), load(&st.groups), load(&st.records));
    let mut figures = vec![
        ("health", Figure::Text(format!("{:?}", q.health()))),
        (
            "fsync_us_mean",
            Figure::Count(st.fsync_us.sum() / fsyncs.max(1)),
        ),
        ("fsync_us_max", Figure::Count(load(&st.fsync_us_max))),
        (
            "records_per_group",
            Figure::Ratio(records as f64 / groups.max(1) as f64),
        ),
    ];
    figures.extend(SHARD_COUNTERS.map(|c| (c.key, Figure::Count((c.get)(q, v)))));
    figures
}

/// `ctl stats --json`: the same counters as [`stats`], as one object.
pub(super) fn stats_json(state: &AdminState) -> serde_json::Value {
    use serde_json::{json, Map, Value};
    let src = Sources::of(state);
    let mut global = Map::new();
    for c in GLOBAL_COUNTERS {
        global.insert(c.key.into(), json!((c.get)(&src)));
    }
    let refused = refused_by_reason(&state.stats);
    global.insert(
        "connections_refused".into(),
        json!(refused.iter().map(|(_, n)| n).sum::<u64>()),
    );
    for (key, n) in door_figures(&state.stats) {
        global.insert(key, json!(n));
    }
    global.insert(
        "connections_refused_by_reason".into(),
        Value::Object(
            refused
                .iter()
                .map(|(r, n)| (r.to_string(), json!(n)))
                .collect(),
        ),
    );
    let nacks: Map<String, Value> = spillway_protocol::NackReason::ALL
        .iter()
        .map(|r| (r.name().to_string(), json!(state.stats.nack_count(*r))))
        .collect();
    let shards: Vec<Value> = state
        .shards
        .iter()
        .enumerate()
        .map(|(i, q)| {
            let mut m = Map::new();
            m.insert("shard".into(), json!(q.shard));
            for (k, v) in shard_figures(q, &ShardView::of(&state.board, i)) {
                m.insert(k.into(), v.json());
            }
            Value::Object(m)
        })
        .collect();
    let sinks: Map<String, Value> = state
        .board
        .sinks()
        .into_iter()
        .map(|(name, f)| {
            let mut total = Map::new();
            total.insert("description".into(), json!(f.description));
            for (k, v) in sink_totals(&state.shards, &f.shards) {
                total.insert(k.into(), json!(v));
            }
            let per_shard: Vec<Value> = state
                .shards
                .iter()
                .zip(&f.shards)
                .map(|(q, d)| {
                    let mut m = Map::new();
                    m.insert("shard".into(), json!(q.shard));
                    for c in SINK_COUNTERS {
                        m.insert(c.key.into(), json!((c.get)(q, d)));
                    }
                    Value::Object(m)
                })
                .collect();
            total.insert("shards".into(), json!(per_shard));
            (name, Value::Object(total))
        })
        .collect();
    json!({
        "global": global,
        "nacks": nacks,
        "sinks": sinks,
        "reloads": {
            "succeeded": load(&state.reload_stats.succeeded),
            "failed": load(&state.reload_stats.failed),
        },
        "shards": shards,
    })
}

/// `ctl metrics --json`: every sample of an exposition as
/// `{"name", "labels", "value"}`.
pub(super) fn samples_json(exposition: &str) -> serde_json::Value {
    let samples: Vec<serde_json::Value> = exposition
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .filter_map(|l| {
            let (series, value) = l.rsplit_once(' ')?;
            let (name, labels) = match series.split_once('{') {
                Some((n, rest)) => (n, rest.strip_suffix('}').unwrap_or(rest)),
                None => (series, ""),
            };
            let labels: serde_json::Map<String, serde_json::Value> = labels
                .split("\",")
                .filter_map(|kv| {
                    let (k, v) = kv.split_once("=\"")?;
                    Some((k.to_string(), v.trim_end_matches('"').into()))
                })
                .collect();
            let value: f64 = match value {
                "+Inf" => f64::INFINITY,
                v => v.parse().ok()?,
            };
            Some(serde_json::json!({ "name": name, "labels": labels, "value": value }))
        })
        .collect();
    serde_json::json!({ "samples": samples })
}

/// The Prometheus exposition (OpenMetrics text) of every metric: served by
/// `ctl metrics` and on `admin.metrics_address` at `GET /metrics`.
pub(super) fn prometheus(state: &AdminState) -> String {
    let mut registry = Registry::default();
    registry.register_collector(Box::new(Sources::of(state)));
    let mut out = String::new();
    // Writing into a String cannot fail.
    let _ = prometheus_client::encoding::text::encode(&mut out, &registry);
    out
}

/// The content type of [`prometheus`]'s text.
pub(super) const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// prometheus-client adds `_total` to counter names itself.
fn family_name<'a>(metric: &'a str, kind: &str) -> &'a str {
    match kind {
        "counter" => metric.strip_suffix("_total").unwrap_or(metric),
        _ => metric,
    }
}

fn metric_type(kind: &str) -> MetricType {
    match kind {
        "counter" => MetricType::Counter,
        _ => MetricType::Gauge,
    }
}

/// One family of `kind` with a sample per label set.
fn family<L: prometheus_client::encoding::EncodeLabelSet>(
    encoder: &mut DescriptorEncoder<'_>,
    metric: &str,
    kind: &str,
    help: &str,
    samples: impl IntoIterator<Item = (L, u64)>,
) -> Result<(), std::fmt::Error> {
    let mut metric_encoder =
        encoder.encode_descriptor(family_name(metric, kind), help, None, metric_type(kind))?;
    for (labels, value) in samples {
        let sample = metric_encoder.encode_family(&labels)?;
        encode_value(kind, value, sample)?;
    }
    Ok(())
}

fn encode_value(
    kind: &str,
    value: u64,
    encoder: prometheus_client::encoding::MetricEncoder<'_>,
) -> Result<(), std::fmt::Error> {
    match kind {
        "counter" => ConstCounter::new(value).encode(encoder),
        _ => ConstGauge::new(value as i64).encode(encoder),
    }
}

/// One family with a single, unlabelled sample.
fn single(
    encoder: &mut DescriptorEncoder<'_>,
    metric: &str,
    kind: &str,
    help: &str,
    value: u64,
) -> Result<(), std::fmt::Error> {
    let metric_encoder =
        encoder.encode_descriptor(family_name(metric, kind), help, None, metric_type(kind))?;
    encode_value(kind, value, metric_encoder)
}

/// One histogram family with a sample per shard.
fn histograms(
    encoder: &mut DescriptorEncoder<'_>,
    metric: &str,
    help: &str,
    samples: impl IntoIterator<Item = (Vec<(&'static str, String)>, Snapshot)>,
) -> Result<(), std::fmt::Error> {
    let mut metric_encoder =
        encoder.encode_descriptor(metric, help, None, MetricType::Histogram)?;
    for (labels, snap) in samples {
        let mut sample = metric_encoder.encode_family(&labels)?;
        sample.encode_histogram::<NoLabels>(snap.sum, snap.count, &snap.buckets, None)?;
    }
    Ok(())
}

impl Sources {
    /// A shard's segment files by state, read from its folder.
    fn segment_counts(&self, shard: u32) -> [(&'static str, u64); 5] {
        let dir = spillway_wab::shard_dir(&self.data_dir, shard);
        let segs = super::segments::segments(&dir).unwrap_or_default();
        let count = |f: &dyn Fn(&super::segments::Segment) -> bool| {
            segs.iter().filter(|s| f(s)).count() as u64
        };
        let quarantined = std::fs::read_dir(dir.join(spillway_wab::QUARANTINE_DIR))
            .map(|entries| {
                entries
                    .flatten()
                    .filter(|e| !e.file_name().to_string_lossy().ends_with(".reason"))
                    .count() as u64
            })
            .unwrap_or(0);
        let free = std::fs::read_dir(&dir)
            .map(|entries| {
                entries
                    .flatten()
                    .filter(|e| {
                        let name = e.file_name();
                        matches!(
                            spillway_wab::format::classify(&name.to_string_lossy()),
                            Some(spillway_wab::format::FileKind::Free(_))
                        )
                    })
                    .count() as u64
            })
            .unwrap_or(0);
        [
            ("open", count(&|s| !s.sealed && s.first_seq.is_some())),
            ("sealed", count(&|s| s.sealed)),
            ("spare", count(&|s| !s.sealed && s.first_seq.is_none())),
            ("free", free),
            ("quarantined", quarantined),
        ]
    }
}

/// Bytes of the dead-letter store's files.
fn dir_bytes(dir: &std::path::Path) -> u64 {
    std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .filter_map(|e| e.ok()?.metadata().ok())
                .filter(|m| m.is_file())
                .map(|m| m.len())
                .sum()
        })
        .unwrap_or(0)
}

type NoLabels = [(&'static str, String); 0];

fn shard_label(q: &ShardQueue) -> Vec<(&'static str, String)> {
    vec![("shard", q.shard.to_string())]
}

impl Sources {
    /// The build, the daemon-wide counters, refused connections.
    fn encode_daemon(&self, encoder: &mut DescriptorEncoder<'_>) -> Result<(), std::fmt::Error> {
        let info = [
            ("version", env!("CARGO_PKG_VERSION").to_string()),
            (
                "git_commit",
                option_env!("SPILLWAY_GIT_COMMIT")
                    .unwrap_or("unknown")
                    .to_string(),
            ),
            ("abi_version", sink_sdk::abi::ABI_VERSION.to_string()),
        ];
        family(
        encoder,
        "spillway_build_info",
        "gauge",
        "Always 1; the labels say which build runs (version, git commit, sink plugin ABI version).",
        [(info, 1)],
    )?;
        for c in GLOBAL_COUNTERS {
            single(encoder, c.metric, c.kind, c.help, (c.get)(self))?;
        }
        family(
        encoder,
        "spillway_connections_refused_total",
        "counter",
        "Producer connections closed at once, by reason: connections_max (server.connections_max were open and none idle to evict), peer_uid (the peer's uid and gid are not in server.allowed_uids / allowed_gids).",
        refused_by_reason(&self.stats)
            .into_iter()
            .map(|(reason, n)| ([("reason", reason)], n)),
    )?;
        Ok(())
    }

    /// The network doors, and their TLS handshakes.
    fn encode_doors(&self, encoder: &mut DescriptorEncoder<'_>) -> Result<(), std::fmt::Error> {
        for (door, d) in self.stats.network_doors() {
            let help = DOOR_HELP
                .iter()
                .find(|h| h.0 == door)
                .expect("every door has its help")
                .1;
            for ((figure, value), help) in door_connections(d).into_iter().zip(help) {
                let (name, kind) = match figure {
                    "connections_open" => (format!("spillway_{door}_{figure}"), "gauge"),
                    _ => (format!("spillway_{door}_{figure}_total"), "counter"),
                };
                single(encoder, &name, kind, help, value)?;
            }
        }
        let h = &self.stats.http;
        single(
            encoder,
            "spillway_http_records_total",
            "counter",
            "Records acknowledged (200) by the HTTP ingest door.",
            load(&h.records),
        )?;
        let codes: Vec<String> = spillway_actors::ingest::http::STATUSES
            .iter()
            .map(|c| c.to_string())
            .collect();
        family(
            encoder,
            "spillway_http_responses_total",
            "counter",
            "Requests the HTTP ingest door answered, by status code.",
            codes
                .iter()
                .zip(&h.responses)
                .map(|(c, n)| ([("code", c.as_str())], load(n))),
        )?;
        family(
        encoder,
        "spillway_tls_handshakes_failed_total",
        "counter",
        "TLS handshakes a door refused, by door (http, tcp) and reason: no_client_certificate, unknown_ca, expired, bad_certificate, name_not_allowed (allowed_names), other.",
        self.stats.network_doors().into_iter().flat_map(|(door, d)| {
            d.tls
                .by_reason()
                .map(move |(r, n)| ([("door", door), ("reason", r)], n))
        }),
    )?;
        Ok(())
    }

    /// Nacks, reloads, and each sink's dead-letter store.
    fn encode_outcomes(&self, encoder: &mut DescriptorEncoder<'_>) -> Result<(), std::fmt::Error> {
        let nacks = spillway_protocol::NackReason::ALL
            .iter()
            .map(|r| ([("reason", r.name())], self.stats.nack_count(*r)));
        family(
            encoder,
            "spillway_nacks_total",
            "counter",
            "Nacks sent, by reason.",
            nacks,
        )?;
        let reloads = [
            (
                [("result", "succeeded")],
                load(&self.reload_stats.succeeded),
            ),
            ([("result", "failed")], load(&self.reload_stats.failed)),
        ];
        family(
            encoder,
            "spillway_reloads_total",
            "counter",
            "Config reloads, by result.",
            reloads,
        )?;
        let dead_letter_bytes = self
            .dead_letter_dirs
            .iter()
            .map(|(name, dir)| ([("sink", name.clone())], dir_bytes(dir)));
        family(
        encoder,
        "spillway_dead_letter_bytes",
        "gauge",
        "Bytes of each sink's dead-letter store on disk (records the sink rejected for good, with their reasons).",
        dead_letter_bytes,
    )?;
        Ok(())
    }

    /// Per shard and per sink: the counters, sink errors, segments.
    fn encode_delivery(&self, encoder: &mut DescriptorEncoder<'_>) -> Result<(), std::fmt::Error> {
        let views: Vec<ShardView> = (0..self.shards.len())
            .map(|i| ShardView::of(&self.board, i))
            .collect();
        for c in SHARD_COUNTERS {
            let samples = self
                .shards
                .iter()
                .zip(&views)
                .map(|(q, v)| ([("shard", q.shard.to_string())], (c.get)(q, v)));
            family(encoder, c.metric, c.kind, c.help, samples)?;
        }
        for c in SINK_COUNTERS {
            let samples = self.sink_pairs().into_iter().map(|(name, q, d)| {
                (
                    [("sink", name), ("shard", q.shard.to_string())],
                    (c.get)(&q, &d),
                )
            });
            family(encoder, c.metric, c.kind, c.help, samples)?;
        }
        let errors = self.sink_pairs().into_iter().flat_map(|(name, q, d)| {
            let shard = q.shard.to_string();
            [
                ("transient", load(&d.retries)),
                ("rejected", load(&d.dead_lettered)),
                ("instance", load(&d.sink_restarts)),
            ]
            .map(|(kind, v)| {
                (
                    [
                        ("sink", name.clone()),
                        ("shard", shard.clone()),
                        ("kind", kind.to_string()),
                    ],
                    v,
                )
            })
        });
        family(
        encoder,
        "spillway_sink_errors_total",
        "counter",
        "Sink failures by kind: transient (a batch to retry: 5xx, timeout, refused connection), rejected (records dead-lettered), instance (the sink could not be created or panicked).",
        errors,
    )?;
        let segments = self.shards.iter().flat_map(|q| {
            let counts = self.segment_counts(q.shard);
            let shard = q.shard.to_string();
            counts.map(|(state, n)| ([("shard", shard.clone()), ("state", state.to_string())], n))
        });
        family(
        encoder,
        "spillway_segments",
        "gauge",
        "Segment files by state: open (written now, or abandoned after an I/O error and waiting for delivery), sealed (complete, waiting for delivery), spare (preallocated, no record yet), free (delivered, set aside to be written over as the next segment), quarantined (moved to quarantine/ by recovery; see its .reason files).",
        segments,
    )?;
        Ok(())
    }

    /// The latency and size histograms, per shard and per sink.
    fn encode_histograms(
        &self,
        encoder: &mut DescriptorEncoder<'_>,
    ) -> Result<(), std::fmt::Error> {
        histograms(
            encoder,
            "spillway_fsync_seconds",
            "fdatasync latency of group commits.",
            self.shards
                .iter()
                .map(|q| (shard_label(q), q.stats.fsync_us.snapshot())),
        )?;
        histograms(
            encoder,
            "spillway_group_commit_seconds",
            "Write and fdatasync of one group commit.",
            self.shards
                .iter()
                .map(|q| (shard_label(q), q.stats.commit_us.snapshot())),
        )?;
        histograms(
            encoder,
            "spillway_group_commit_records",
            "Records per group commit (one write, at most one fdatasync).",
            self.shards
                .iter()
                .map(|q| (shard_label(q), q.stats.group_records.snapshot())),
        )?;
        histograms(
            encoder,
            "spillway_sink_request_seconds",
            "How long the sink took with each batch offered to it, whatever the outcome.",
            self.sink_pairs().into_iter().map(|(name, q, d)| {
                (
                    vec![("sink", name), ("shard", q.shard.to_string())],
                    d.sink_request_us.snapshot(),
                )
            }),
        )?;
        Ok(())
    }

    /// Every (sink, shard queue, drain stats) pair.
    fn sink_pairs(&self) -> Vec<(String, Arc<ShardQueue>, Arc<DrainStats>)> {
        self.board
            .sinks()
            .into_iter()
            .flat_map(|(name, f)| {
                self.shards
                    .iter()
                    .zip(f.shards)
                    .map(move |(q, d)| (name.clone(), q.clone(), d))
            })
            .collect()
    }
}

impl Collector for Sources {
    fn encode(&self, mut encoder: DescriptorEncoder<'_>) -> Result<(), std::fmt::Error> {
        self.encode_daemon(&mut encoder)?;
        self.encode_doors(&mut encoder)?;
        self.encode_outcomes(&mut encoder)?;
        self.encode_delivery(&mut encoder)?;
        self.encode_histograms(&mut encoder)
    }
}
