//! The daemon's counters, listed once ([`global_counters`],
//! [`shard_counters`]), and their two renderings: `ctl stats` for a human
//! ([`stats`]) and Prometheus text ([`prometheus`], served by `ctl metrics`
//! and `GET /metrics`).

use std::fmt::Write as _;
use std::sync::atomic::Ordering;

use spillway_actors::{DrainStats, ShardQueue};

use super::AdminState;

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
            get: |s| s.wab.used(),
        },
        Counter {
            key: "wab_bytes_max",
            metric: "spillway_wab_bytes_max",
            kind: "gauge",
            help: "wab.wab_bytes_max: past it pushes get Overloaded.",
            get: |s| s.wab.max(),
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
pub(super) fn stats(state: &AdminState) -> String {
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
pub(super) fn prometheus(state: &AdminState) -> String {
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
