//! The targets: each is a bound computed from figures of the same run
//! (mostly relative to the machine probes or to `single_thread_sync`), so a
//! verdict means the same thing on a fast NVMe box and on a slow VM disk.

use std::fmt::Write as _;

use super::e2e::FANOUT_SINKS;
use super::report::{ReportRow, Status, P50, P99, RATE};

/// Slack allowed on top of the probes' floor for the daemon's own work, µs.
const OVERHEAD_US: f64 = 30.0;

/// Direction of a bound.
#[derive(Debug, Clone, Copy)]
pub enum Cmp {
    AtMost,
    AtLeast,
    /// Strictly below.
    Below,
}

/// The numbers behind a verdict.
#[derive(Debug, Clone)]
pub struct Measured {
    pub value: f64,
    pub bound: f64,
    pub detail: String,
}

/// One target and its evaluation (`Err` = skipped, with the reason).
#[derive(Debug, Clone)]
pub struct Target {
    pub name: &'static str,
    pub cmp: Cmp,
    pub result: Result<Measured, String>,
}

impl Target {
    pub fn verdict(&self) -> &'static str {
        match (&self.result, self.cmp) {
            (Err(_), _) => "SKIP",
            (Ok(m), Cmp::AtMost) if m.value <= m.bound => "PASS",
            (Ok(m), Cmp::AtLeast) if m.value >= m.bound => "PASS",
            (Ok(m), Cmp::Below) if m.value < m.bound => "PASS",
            _ => "FAIL",
        }
    }

    pub fn detail(&self) -> &str {
        match &self.result {
            Ok(m) => &m.detail,
            Err(why) => why,
        }
    }

    pub fn value(&self) -> Option<f64> {
        self.result.as_ref().ok().map(|m| m.value)
    }

    pub fn bound(&self) -> Option<f64> {
        self.result.as_ref().ok().map(|m| m.bound)
    }
}

/// Looks figures up by outcome name and key.
struct Figures<'a>(&'a [ReportRow]);

impl Figures<'_> {
    fn get(&self, name: &str, key: &str) -> Result<f64, String> {
        // A row `scenario/part` is missing when its scenario was skipped or failed.
        let scenario = name.split('/').next().unwrap_or(name);
        let found = self.0.iter().find(|o| o.name == name);
        let Some(o) = found.or_else(|| self.0.iter().find(|o| o.name == scenario)) else {
            return Err(format!("{name} was not run"));
        };
        match &o.status {
            Status::Ok => o.get(key).ok_or_else(|| format!("{name} has no {key}")),
            Status::Skipped(_) => Err(format!("{} was skipped", o.name)),
            Status::Failed(_) => Err(format!("{} failed", o.name)),
        }
    }
}

type Rule = (&'static str, Cmp, fn(&Figures) -> Result<Measured, String>);

const RULES: &[Rule] = &[
    (
        "single_thread_sync p50 <= prealloc fsync p50 + socket RTT p50 + 30 µs",
        Cmp::AtMost,
        sync_p50,
    ),
    (
        "single_thread_buffered p50 <= socket RTT p50 + 30 µs",
        Cmp::AtMost,
        buffered_p50,
    ),
    (
        "batch_durable_n256 rate >= 60% of the disk probe's 256-record rate",
        Cmp::AtLeast,
        batch_vs_disk,
    ),
    (
        "batch_durable_n256 rate >= 150x single_thread_sync rate",
        Cmp::AtLeast,
        batch_vs_single,
    ),
    (
        "pipelined_sync_w1024 rate >= 25x single_thread_sync rate",
        Cmp::AtLeast,
        pipelined_vs_single,
    ),
    (
        "thundering_herd_64 rate >= 8x single_thread_sync rate",
        Cmp::AtLeast,
        herd_vs_single,
    ),
    (
        "payload_sweep/64KiB PushBatch, 4 in flight, MiB/s >= 70% of the disk-bandwidth probe",
        Cmp::AtLeast,
        sweep_vs_bandwidth,
    ),
    ("RSS idle after start-up <= 20 MiB", Cmp::AtMost, rss_idle),
    (
        "RSS peak during thundering_herd_64 <= 64 MiB",
        Cmp::AtMost,
        rss_peak,
    ),
    (
        "segment 1 MiB / default, batch_durable_n1024 >= 0.8",
        Cmp::AtLeast,
        segment_batch,
    ),
    (
        "segment 1 MiB / default, pipelined_sync_w1024 >= 0.8",
        Cmp::AtLeast,
        segment_pipelined,
    ),
    (
        "e2e_slow_downstream delivery rate >= 90% of ingest rate",
        Cmp::AtLeast,
        slow_delivery,
    ),
    (
        "e2e_slow_downstream backlog: last 5 s max <= max(2x first 5 s max, 2000)",
        Cmp::AtMost,
        slow_backlog,
    ),
    (
        "e2e_high_latency adaptive: delivery rate >= 90% of ingest rate",
        Cmp::AtLeast,
        high_latency_delivery,
    ),
    (
        "e2e_high_latency adaptive backlog: last 5 s max <= max(2x first 5 s max, 10000)",
        Cmp::AtMost,
        high_latency_backlog,
    ),
    (
        "ingest_http_door: 8 keep-alive connections x 256-record NDJSON at Sync >= 40% of batch_durable_n256 over the socket",
        Cmp::AtLeast,
        http_door_vs_socket,
    ),
    (
        "delivery_keeps_up: noop sink, batch_durable_n256 load, checkpoint_interval_ms = 0: delivered >= 95% of ingest",
        Cmp::AtLeast,
        |f| delivery_ratio(f, "delivery_keeps_up/noop/every_batch/serial"),
    ),
    (
        "delivery_keeps_up: file sink, batch_durable_n256 load, checkpoint_interval_ms = 0: delivered >= 95% of ingest",
        Cmp::AtLeast,
        |f| delivery_ratio(f, "delivery_keeps_up/file/every_batch/serial"),
    ),
    (
        "delivery_keeps_up: noop sink, PushBatch 256 pipelined 16 deep, checkpoint_interval_ms = 100: delivered >= 95% of ingest",
        Cmp::AtLeast,
        |f| delivery_ratio(f, "delivery_keeps_up/noop/interval_100ms/pipelined"),
    ),
    (
        "restart_backlog: ready at 10 GiB pending, page cache warm, <= 2x ready at 1 GiB",
        Cmp::AtMost,
        |f| restart_ratio(f, "warm"),
    ),
    (
        "restart_backlog: ready at 10 GiB pending, page cache dropped, <= 2x ready at 1 GiB",
        Cmp::AtMost,
        |f| restart_ratio(f, "cold"),
    ),
    (
        "big_record_fairness: a 5 B Sync producer's p99 beside 16 connections of 64 KiB Sync records <= 3x its p99 alone",
        Cmp::AtMost,
        fairness_p99,
    ),
    (
        "tap_under_load: a pipelined Sync producer's p99 with `ctl tap` (100 records/s, read) <= 1.25x its p99 untapped",
        Cmp::AtMost,
        |f| tap_p99(f, "sampled"),
    ),
    (
        "tap_under_load: a pipelined Sync producer's p99 with a tap of every record nobody reads <= 1.25x its p99 untapped",
        Cmp::AtMost,
        |f| tap_p99(f, "stalled"),
    ),
    (
        "idle_connections/10000: the daemon's RSS <= 256 MiB",
        Cmp::AtMost,
        idle_rss_10k,
    ),
    (
        "idle_connections/10000: a producer's Sync p99 <= 1.5x its p99 with none",
        Cmp::AtMost,
        idle_p99_10k,
    ),
    (
        "tcp_tls_door: serial Sync p50 over TLS <= the Unix socket's p50 + 60 µs",
        Cmp::AtMost,
        tls_serial_p50,
    ),
    (
        "tcp_tls_door: PushBatch 256 Sync over TLS >= 80% of the Unix socket's rate",
        Cmp::AtLeast,
        tls_batch_ratio,
    ),
    (
        "e2e_jetstream pipelined publishes >= 10x one publish in flight",
        Cmp::AtLeast,
        jetstream_pipelining,
    ),
    (
        "e2e_jetstream failover: acked records missing from the stream = 0",
        Cmp::AtMost,
        jetstream_lost,
    ),
    (
        "e2e_kafka delivered rate >= 70% of kafka-producer-perf-test (acks=all, idempotent, same cluster)",
        Cmp::AtLeast,
        kafka_vs_perf_test,
    ),
    (
        "e2e_kafka transactions of many records >= 10x one record per transaction",
        Cmp::AtLeast,
        kafka_vs_one_per_transaction,
    ),
    (
        "e2e_kafka ingest p50, Kafka sink delivering / noop sink <= 1.1",
        Cmp::AtMost,
        kafka_ingest,
    ),
    (
        "e2e_postgres/plain delivered rows/s >= 70% of a bare loader's",
        Cmp::AtLeast,
        postgres_plain,
    ),
    (
        "e2e_postgres/json_columns delivered rows/s >= 70% of a bare loader's",
        Cmp::AtLeast,
        postgres_columns,
    ),
    (
        "e2e_mariadb/plain delivered rows/s >= 70% of a bare loader's",
        Cmp::AtLeast,
        mariadb_plain,
    ),
    (
        "e2e_mariadb/json_columns delivered rows/s >= 70% of a bare loader's",
        Cmp::AtLeast,
        mariadb_columns,
    ),
    (
        "e2e_batched_vs_per_record: batched >= 10x faster per record",
        Cmp::AtLeast,
        batched_speedup,
    ),
    (
        "e2e_light_load_latency push->arrival p50 < 20 ms",
        Cmp::Below,
        light_p50,
    ),
    (
        "ingest_http_vs_noop single_thread_sync p50, HTTP / noop <= 1.15",
        Cmp::AtMost,
        http_vs_noop,
    ),
    (
        "sink_plugin_vs_builtin_file plugin rate >= 90% of built-in",
        Cmp::AtLeast,
        plugin_vs_builtin,
    ),
    (
        "reload_under_load Overloaded nacks = 0",
        Cmp::AtMost,
        reload_overloaded,
    ),
    (
        "reload_under_load longest ack gap, reload start to 1 s after its report < 50 ms",
        Cmp::Below,
        reload_gap,
    ),
    (
        "reload_under_load acked records missing at A and B = 0",
        Cmp::AtMost,
        reload_lost,
    ),
    (
        "reload_under_load records on the old sink after a reload = 0",
        Cmp::AtMost,
        reload_misrouted,
    ),
    (
        "e2e_fanout_3 every one of 3 sinks delivers >= 95% of ingest",
        Cmp::AtLeast,
        fanout_delivery,
    ),
    (
        "e2e_fanout_3 ingest ack p50, 3 sinks / 1 sink <= 1.15",
        Cmp::AtMost,
        fanout_p50,
    ),
    (
        "hostile p99 under attack <= 3x p99 without attack",
        Cmp::AtMost,
        hostile_p99,
    ),
    (
        "hostile daemon RSS peak during the attack <= 256 MiB",
        Cmp::AtMost,
        hostile_rss,
    ),
];

/// Every target, evaluated against this run's outcomes.
pub fn evaluate(outcomes: &[ReportRow]) -> Vec<Target> {
    let figures = Figures(outcomes);
    RULES
        .iter()
        .map(|(name, cmp, rule)| Target {
            name,
            cmp: *cmp,
            result: rule(&figures),
        })
        .collect()
}

fn sync_p50(f: &Figures) -> Result<Measured, String> {
    let value = f.get("single_thread_sync", P50)?;
    let fsync = f.get("disk_probe", "prealloc_fsync_p50_us")?;
    let rtt = f.get("socket_probe", "rtt_p50_us")?;
    let bound = fsync + rtt + OVERHEAD_US;
    let detail = format!("{value:.1} µs vs {fsync:.1} + {rtt:.1} + {OVERHEAD_US} = {bound:.1} µs");
    Ok(Measured {
        value,
        bound,
        detail,
    })
}

fn buffered_p50(f: &Figures) -> Result<Measured, String> {
    let value = f.get("single_thread_buffered", P50)?;
    let rtt = f.get("socket_probe", "rtt_p50_us")?;
    let bound = rtt + OVERHEAD_US;
    Ok(Measured {
        value,
        bound,
        detail: format!("{value:.1} µs vs {rtt:.1} + {OVERHEAD_US} = {bound:.1} µs"),
    })
}

/// `value / base` against a minimum multiple.
fn ratio(value: f64, base: f64, min: f64, what: &str) -> Measured {
    let r = value / base;
    let detail = format!("{value:.0} / {base:.0} rec/s = {r:.2}x ({what} >= {min}x)");
    Measured {
        value: r,
        bound: min,
        detail,
    }
}

fn batch_vs_disk(f: &Figures) -> Result<Measured, String> {
    let rate = f.get("batch_durable_n256", RATE)?;
    let disk = f.get("disk_probe", "batch256_records_per_s")?;
    let r = rate / disk;
    let detail = format!("{rate:.0} / {disk:.0} rec/s = {:.0}% (>= 60%)", r * 100.0);
    Ok(Measured {
        value: r,
        bound: 0.6,
        detail,
    })
}

fn sweep_vs_bandwidth(f: &Figures) -> Result<Measured, String> {
    let mib = f.get("payload_sweep/64KiB", "pipelined_mib_per_s")?;
    let disk = f.get("disk_bandwidth", "mib_per_s")?;
    let r = mib / disk;
    let detail = format!("{mib:.1} / {disk:.1} MiB/s = {:.0}% (>= 70%)", r * 100.0);
    Ok(Measured {
        value: r,
        bound: 0.7,
        detail,
    })
}

fn single(f: &Figures) -> Result<f64, String> {
    f.get("single_thread_sync", RATE)
}

fn batch_vs_single(f: &Figures) -> Result<Measured, String> {
    Ok(ratio(
        f.get("batch_durable_n256", RATE)?,
        single(f)?,
        150.0,
        "need",
    ))
}

fn pipelined_vs_single(f: &Figures) -> Result<Measured, String> {
    Ok(ratio(
        f.get("pipelined_sync_w1024", RATE)?,
        single(f)?,
        25.0,
        "need",
    ))
}

fn herd_vs_single(f: &Figures) -> Result<Measured, String> {
    Ok(ratio(
        f.get("thundering_herd_64", RATE)?,
        single(f)?,
        8.0,
        "need",
    ))
}

fn mib_limit(value: f64, bound: f64) -> Measured {
    Measured {
        value,
        bound,
        detail: format!("{value:.1} MiB (<= {bound} MiB)"),
    }
}

fn rss_idle(f: &Figures) -> Result<Measured, String> {
    Ok(mib_limit(f.get("daemon_rss", "idle_mib")?, 20.0))
}

fn delivery_ratio(f: &Figures, row: &str) -> Result<Measured, String> {
    let (ratio, delivered, ingest) = (
        f.get(row, "delivery_ratio")?,
        f.get(row, "delivered_per_s")?,
        f.get(row, RATE)?,
    );
    Ok(Measured {
        value: ratio,
        bound: 0.95,
        detail: format!(
            "{delivered:.0}/s delivered of {ingest:.0}/s ingested: {:.0}% (>= 95%)",
            ratio * 100.0
        ),
    })
}

/// `restart_backlog`: the 10 GiB restart against the 1 GiB one, in one
/// cache state (`warm`, `cold`).
fn restart_ratio(f: &Figures, cache: &str) -> Result<Measured, String> {
    let (small, big) = (
        format!("restart_backlog/1024mib/{cache}"),
        format!("restart_backlog/10240mib/{cache}"),
    );
    let (ratio, at_big, at_small) = (
        f.get(&big, "ratio_to_1gib")?,
        f.get(&big, "ready_ms")?,
        f.get(&small, "ready_ms")?,
    );
    Ok(Measured {
        value: ratio,
        bound: 2.0,
        detail: format!("{at_big:.0} ms at 10 GiB, {at_small:.0} ms at 1 GiB: {ratio:.2}x (<= 2x)"),
    })
}

fn fairness_p99(f: &Figures) -> Result<Measured, String> {
    let row = "big_record_fairness";
    let (with, alone, r) = (
        f.get(row, P99)?,
        f.get(row, "alone_p99_us")?,
        f.get(row, "p99_ratio")?,
    );
    let mib = f.get(row, "big_mib_per_s")?;
    Ok(Measured {
        value: r,
        bound: 3.0,
        detail: format!("p99 {with:.0} µs beside 64 KiB records ({mib:.0} MiB/s) vs {alone:.0} µs alone: {r:.2}x (<= 3)"),
    })
}

fn tap_p99(f: &Figures, reader: &str) -> Result<Measured, String> {
    let row = format!("tap_under_load/{reader}");
    let (with, alone) = (f.get(&row, P99)?, f.get(&row, "alone_p99_us")?);
    let r = f.get(&row, "p99_ratio")?;
    let lines = f.get(&row, "tap_lines")?;
    Ok(Measured {
        value: r,
        bound: 1.25,
        detail: format!("p99 {with:.0} µs tapped ({reader}, {lines:.0} lines read) vs {alone:.0} µs untapped: {r:.2}x (<= 1.25)"),
    })
}

fn idle_rss_10k(f: &Figures) -> Result<Measured, String> {
    Ok(mib_limit(
        f.get("idle_connections/10000", "rss_mib")?,
        256.0,
    ))
}

fn idle_p99_10k(f: &Figures) -> Result<Measured, String> {
    let row = "idle_connections/10000";
    let (with, alone) = (f.get(row, "p99_us")?, f.get(row, "alone_p99_us")?);
    let r = f.get(row, "p99_ratio")?;
    Ok(Measured {
        value: r,
        bound: 1.5,
        detail: format!("p99 {with:.1} µs beside 10,000 idle connections vs {alone:.1} µs alone: {r:.2}x (<= 1.5)"),
    })
}

fn rss_peak(f: &Figures) -> Result<Measured, String> {
    Ok(mib_limit(
        f.get("thundering_herd_64", "rss_peak_mib")?,
        64.0,
    ))
}

fn segment(f: &Figures, workload: &str) -> Result<Measured, String> {
    let name = format!("segment_1mib_vs_default/{workload}");
    let small = f.get(&name, RATE)?;
    let default = f.get(&name, "default_records_per_s")?;
    let r = f.get(&name, "ratio")?;
    let detail =
        format!("1 MiB {small:.0} vs default {default:.0} rec/s, median ratio {r:.2} (>= 0.8)");
    Ok(Measured {
        value: r,
        bound: 0.8,
        detail,
    })
}

fn segment_batch(f: &Figures) -> Result<Measured, String> {
    segment(f, "batch_durable_n1024")
}

fn segment_pipelined(f: &Figures) -> Result<Measured, String> {
    segment(f, "pipelined_sync_w1024")
}

fn tls_serial_p50(f: &Figures) -> Result<Measured, String> {
    let row = "tcp_tls_door";
    let (tls, unix) = (f.get(row, "p50_us")?, f.get(row, "unix_serial_p50_us")?);
    let churn = f.get(row, "churn_p99_us").unwrap_or(0.0);
    Ok(Measured {
        value: tls,
        bound: unix + 60.0,
        detail: format!(
            "{tls:.0} µs vs {unix:.0} µs over the socket (<= {:.0} µs); TLS connection churn p99 {churn:.0} µs",
            unix + 60.0
        ),
    })
}

fn tls_batch_ratio(f: &Figures) -> Result<Measured, String> {
    let row = "tcp_tls_door";
    Ok(ratio(
        f.get(row, "tls_batch256_records_per_s")?,
        f.get(row, "unix_batch256_records_per_s")?,
        0.8,
        "need",
    ))
}

fn http_door_vs_socket(f: &Figures) -> Result<Measured, String> {
    let row = "ingest_http_door";
    let (rate, unix, r) = (
        f.get(row, RATE)?,
        f.get(row, "unix_batch256_records_per_s")?,
        f.get(row, "ratio_to_unix_batch256")?,
    );
    let (hp, up) = (
        f.get(row, "http_serial_p50_us").unwrap_or(0.0),
        f.get(row, "unix_serial_p50_us").unwrap_or(0.0),
    );
    Ok(Measured {
        value: r,
        bound: 0.4,
        detail: format!(
            "{rate:.0} vs {unix:.0} rec/s = {:.0}% (>= 40%); one record per request p50 {hp:.0} µs over HTTP, {up:.0} µs over the socket",
            r * 100.0
        ),
    })
}

fn jetstream_pipelining(f: &Figures) -> Result<Measured, String> {
    let row = "e2e_jetstream/pipelined";
    let (rate, one, speedup) = (
        f.get(row, RATE)?,
        f.get(row, "one_in_flight_records_per_s")?,
        f.get(row, "speedup_vs_one_in_flight")?,
    );
    let http = f.get(row, "http_records_per_s").unwrap_or(0.0);
    Ok(Measured {
        value: speedup,
        bound: 10.0,
        detail: format!(
            "{rate:.0} vs {one:.0} rec/s = {speedup:.1}x (>= 10x); the HTTP sink {http:.0} rec/s"
        ),
    })
}

fn kafka_vs_perf_test(f: &Figures) -> Result<Measured, String> {
    let row = "e2e_kafka/transactions";
    let (rate, perf, ratio) = (
        f.get(row, RATE)?,
        f.get(row, "perf_test_records_per_s")?,
        f.get(row, "ratio_vs_perf_test")?,
    );
    let n = f.get(row, "records_per_transaction").unwrap_or(0.0);
    Ok(Measured {
        value: ratio,
        bound: 0.7,
        detail: format!(
            "{rate:.0} vs {perf:.0} rec/s, median ratio {:.0}% (>= 70%); {n:.0} records/transaction",
            ratio * 100.0
        ),
    })
}

fn kafka_vs_one_per_transaction(f: &Figures) -> Result<Measured, String> {
    let row = "e2e_kafka/transactions";
    let (rate, one, speedup) = (
        f.get(row, RATE)?,
        f.get(row, "one_per_transaction_records_per_s")?,
        f.get(row, "speedup_vs_one_per_transaction")?,
    );
    let (p50, p99) = (
        f.get(row, "commit_p50_ms").unwrap_or(0.0),
        f.get(row, "commit_p99_ms").unwrap_or(0.0),
    );
    Ok(Measured {
        value: speedup,
        bound: 10.0,
        detail: format!(
            "{rate:.0} vs {one:.0} rec/s, median {speedup:.1}x (>= 10x); transaction p50/p99 {p50:.0}/{p99:.0} ms"
        ),
    })
}

fn kafka_ingest(f: &Figures) -> Result<Measured, String> {
    let row = "e2e_kafka/ingest";
    let (kafka, noop, ratio) = (
        f.get(row, "ingest_p50_us")?,
        f.get(row, "noop_ingest_p50_us")?,
        f.get(row, "ratio_vs_noop")?,
    );
    // The control, when the row has it: the noop sink beside the same
    // Kafka load from outside the daemon.
    let control = match (
        f.get(row, "beside_ingest_p50_us"),
        f.get(row, "ratio_vs_beside"),
    ) {
        (Ok(beside), Ok(r)) => {
            format!("; noop beside the same Kafka load {beside:.1} µs, Kafka/beside {r:.2}")
        }
        _ => String::new(),
    };
    Ok(Measured {
        value: ratio,
        bound: 1.1,
        detail: format!(
            "Kafka {kafka:.1} vs noop {noop:.1} µs, median ratio {ratio:.2} (<= 1.1){control}"
        ),
    })
}

fn postgres_plain(f: &Figures) -> Result<Measured, String> {
    vs_loader(f, "e2e_postgres/plain")
}

fn postgres_columns(f: &Figures) -> Result<Measured, String> {
    vs_loader(f, "e2e_postgres/json_columns")
}

fn mariadb_plain(f: &Figures) -> Result<Measured, String> {
    vs_loader(f, "e2e_mariadb/plain")
}

fn mariadb_columns(f: &Figures) -> Result<Measured, String> {
    vs_loader(f, "e2e_mariadb/json_columns")
}

/// A SQL plugin's delivered rows/s against the bare loader's, same server,
/// same run (bench/src/sql.rs).
fn vs_loader(f: &Figures, row: &str) -> Result<Measured, String> {
    let (rate, loader, ratio) = (
        f.get(row, RATE)?,
        f.get(row, "loader_records_per_s")?,
        f.get(row, "ratio_vs_loader")?,
    );
    Ok(Measured {
        value: ratio,
        bound: 0.7,
        detail: format!(
            "{rate:.0} vs {loader:.0} rows/s = {:.0}% (>= 70%)",
            ratio * 100.0
        ),
    })
}

fn jetstream_lost(f: &Figures) -> Result<Measured, String> {
    let row = "e2e_jetstream/failover";
    let (lost, dups) = (f.get(row, "lost_records")?, f.get(row, "duplicates")?);
    let resume = f
        .get(row, "resume_after_kill_ms")
        .map_or("did not resume".to_string(), |ms| {
            format!("resumed {ms:.0} ms after the kill")
        });
    Ok(Measured {
        value: lost + dups,
        bound: 0.0,
        detail: format!("{lost:.0} lost, {dups:.0} stored twice; {resume}"),
    })
}

fn slow_delivery(f: &Figures) -> Result<Measured, String> {
    delivery_keeps_up(f, "e2e_slow_downstream")
}

fn slow_backlog(f: &Figures) -> Result<Measured, String> {
    backlog_flat(f, "e2e_slow_downstream")
}

fn high_latency_delivery(f: &Figures) -> Result<Measured, String> {
    let mut m = delivery_keeps_up(f, "e2e_high_latency/adaptive")?;
    if let Ok(one) = f.get("e2e_high_latency/adaptive", "one_at_a_time_delivery_ratio") {
        let _ = write!(m.detail, "; one at a time {:.1}%", one * 100.0);
    }
    Ok(m)
}

fn high_latency_backlog(f: &Figures) -> Result<Measured, String> {
    backlog_flat(f, "e2e_high_latency/adaptive")
}

/// Row `name`'s delivery rate over its ingest rate, at least 90%.
fn delivery_keeps_up(f: &Figures, name: &str) -> Result<Measured, String> {
    let (ingest, delivered, r) = (
        f.get(name, RATE)?,
        f.get(name, "delivered_per_s")?,
        f.get(name, "delivery_ratio")?,
    );
    let detail = format!(
        "{delivered:.0} / {ingest:.0} rec/s = {:.1}% (>= 90%)",
        r * 100.0
    );
    Ok(Measured {
        value: r,
        bound: 0.9,
        detail,
    })
}

/// Row `name`'s backlog at the end no more than twice what it was at the
/// start (or under the floor).
fn backlog_flat(f: &Figures, name: &str) -> Result<Measured, String> {
    let (first, last) = (
        f.get(name, "backlog_first_max")?,
        f.get(name, "backlog_last_max")?,
    );
    let floor = f.get(name, "backlog_floor")?;
    let bound = (2.0 * first).max(floor);
    let detail = format!("last {last:.0} vs max(2 x {first:.0}, {floor:.0}) = {bound:.0} records");
    Ok(Measured {
        value: last,
        bound,
        detail,
    })
}

fn batched_speedup(f: &Figures) -> Result<Measured, String> {
    let batched = f.get("e2e_batched_vs_per_record/batched", "us_per_record")?;
    let per_record = f.get("e2e_batched_vs_per_record/per_record", "us_per_record")?;
    let speedup = f.get("e2e_batched_vs_per_record/batched", "speedup")?;
    let detail =
        format!("{per_record:.2} vs {batched:.2} µs/record, median speedup {speedup:.1}x (>= 10x)");
    Ok(Measured {
        value: speedup,
        bound: 10.0,
        detail,
    })
}

fn light_p50(f: &Figures) -> Result<Measured, String> {
    let value = f.get("e2e_light_load_latency", P50)? / 1000.0;
    Ok(Measured {
        value,
        bound: 20.0,
        detail: format!("{value:.2} ms (< 20 ms)"),
    })
}

/// A scenario's p50 against its baseline's (`base_key`), as a median
/// ratio that must stay at or below 1.15: `label` and `base_label` name
/// the two in the detail.
fn p50_ratio_at_most_1_15(
    f: &Figures,
    scenario: &str,
    base_key: &str,
    label: &str,
    base_label: &str,
) -> Result<Measured, String> {
    let (this, base, r) = (
        f.get(scenario, P50)?,
        f.get(scenario, base_key)?,
        f.get(scenario, "p50_ratio")?,
    );
    let detail =
        format!("{label} {this:.1} vs {base_label} {base:.1} µs, median ratio {r:.2} (<= 1.15)");
    Ok(Measured {
        value: r,
        bound: 1.15,
        detail,
    })
}

fn http_vs_noop(f: &Figures) -> Result<Measured, String> {
    p50_ratio_at_most_1_15(f, "ingest_http_vs_noop", "noop_p50_us", "HTTP", "noop")
}

fn plugin_vs_builtin(f: &Figures) -> Result<Measured, String> {
    let name = "sink_plugin_vs_builtin_file";
    let (plugin, builtin, r) = (
        f.get(name, RATE)?,
        f.get(name, "builtin_records_per_s")?,
        f.get(name, "ratio")?,
    );
    let detail =
        format!("plugin {plugin:.0} vs built-in {builtin:.0} rec/s, median ratio {r:.2} (>= 0.9)");
    Ok(Measured {
        value: r,
        bound: 0.9,
        detail,
    })
}

fn reload_count(f: &Figures, key: &str, what: &str) -> Result<Measured, String> {
    let value = f.get("reload_under_load", key)?;
    Ok(Measured {
        value,
        bound: 0.0,
        detail: format!("{value:.0} {what} (worst repeat; = 0)"),
    })
}

fn reload_overloaded(f: &Figures) -> Result<Measured, String> {
    reload_count(f, "overloaded_nacks", "Overloaded nacks")
}

fn reload_gap(f: &Figures) -> Result<Measured, String> {
    let name = "reload_under_load";
    let value = f.get(name, "max_ack_gap_ms")?;
    let (worst, base) = (
        f.get(name, "max_ack_gap_worst_ms")?,
        f.get(name, "baseline_ack_gap_ms")?,
    );
    let around = f.get(name, "around_ack_gap_ms")?;
    let detail = format!("median {value:.1} ms, worst repeat {worst:.1}; ±1 s around {around:.1}, no reload {base:.1} (< 50 ms)");
    Ok(Measured {
        value,
        bound: 50.0,
        detail,
    })
}

fn reload_lost(f: &Figures) -> Result<Measured, String> {
    reload_count(f, "lost_records", "acked records found at neither receiver")
}

fn reload_misrouted(f: &Figures) -> Result<Measured, String> {
    reload_count(
        f,
        "misrouted_records",
        "records pushed after a reload report delivered to the old sink",
    )
}

/// The row of `e2e_fanout_3` that holds its comparisons.
const FANOUT: &str = "e2e_fanout_3/three_sinks";

fn fanout_delivery(f: &Figures) -> Result<Measured, String> {
    let ingest = f.get(FANOUT, RATE)?;
    let min = f.get(FANOUT, "delivery_ratio_min")?;
    let mut per_sink = Vec::new();
    for sink in FANOUT_SINKS {
        let r = f.get(FANOUT, &format!("delivery_ratio_{sink}"))?;
        per_sink.push(format!("{sink} {:.1}%", r * 100.0));
    }
    let one = f
        .get("e2e_fanout_3/one_sink", "delivery_ratio_min")
        .map(|r| format!("; 1 sink {:.1}%", r * 100.0))
        .unwrap_or_default();
    let detail = format!(
        "{} of {ingest:.0} rec/s, median lowest {:.1}% (>= 95%){one}",
        per_sink.join(", "),
        min * 100.0
    );
    Ok(Measured {
        value: min,
        bound: 0.95,
        detail,
    })
}

fn fanout_p50(f: &Figures) -> Result<Measured, String> {
    p50_ratio_at_most_1_15(f, FANOUT, "one_sink_p50_us", "3 sinks", "1 sink")
}

/// The row of the `hostile` scenario that holds its comparisons.
const HOSTILE: &str = "hostile/under_attack";

fn hostile_p99(f: &Figures) -> Result<Measured, String> {
    let (attack, base, r) = (
        f.get(HOSTILE, P99)?,
        f.get(HOSTILE, "baseline_p99_us")?,
        f.get(HOSTILE, "p99_ratio")?,
    );
    let detail =
        format!("under attack {attack:.0} vs no attack {base:.0} µs, median ratio {r:.2} (<= 3)");
    Ok(Measured {
        value: r,
        bound: 3.0,
        detail,
    })
}

fn hostile_rss(f: &Figures) -> Result<Measured, String> {
    let mut m = mib_limit(f.get(HOSTILE, "rss_peak_mib")?, 256.0);
    if let Ok(worst) = f.get(HOSTILE, "rss_peak_worst_mib") {
        m.detail = format!("median {} (worst repeat {worst:.1} MiB)", m.detail);
    }
    Ok(m)
}

/// The targets section: PASS / FAIL / SKIP with the numbers.
pub fn table(targets: &[Target]) -> String {
    let mut s = String::new();
    let width = targets
        .iter()
        .map(|t| t.name.chars().count())
        .max()
        .unwrap_or(0);
    for t in targets {
        let _ = writeln!(s, "{:<4}  {:<width$} {}", t.verdict(), t.name, t.detail());
    }
    s
}

/// One JSON object per target.
pub fn json(t: &Target) -> serde_json::Value {
    serde_json::json!({
        "kind": "target",
        "name": t.name,
        "verdict": t.verdict(),
        "value": t.value(),
        "bound": t.bound(),
        "detail": t.detail(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::Kind;

    fn outcome(name: &str, kind: Kind, figures: &[(&str, f64)]) -> ReportRow {
        let mut o = ReportRow::new(name, kind);
        for (k, v) in figures {
            o.set(k, *v);
        }
        o
    }

    #[test]
    fn verdicts_use_figures_of_the_run() {
        let outcomes = vec![
            outcome(
                "single_thread_sync",
                Kind::Scenario,
                &[(RATE, 1000.0), (P50, 150.0)],
            ),
            outcome(
                "disk_probe",
                Kind::Probe,
                &[("prealloc_fsync_p50_us", 100.0)],
            ),
            outcome("socket_probe", Kind::Probe, &[("rtt_p50_us", 30.0)]),
            outcome("pipelined_sync_w1024", Kind::Scenario, &[(RATE, 20_000.0)]),
        ];
        let targets = evaluate(&outcomes);
        assert_eq!(targets[0].verdict(), "PASS"); // 150 <= 160
        assert_eq!(targets[1].verdict(), "SKIP");
        assert_eq!(targets[4].verdict(), "FAIL"); // 20x < 25x
        assert!(targets[1].detail().contains("single_thread_buffered"));
    }

    #[test]
    fn large_records_against_the_disk_bandwidth() {
        let verdict = |sweep: f64| {
            let outcomes = vec![
                outcome("disk_bandwidth", Kind::Probe, &[("mib_per_s", 400.0)]),
                // One batch at a time would pass: the target reads the
                // pipelined load.
                outcome(
                    "payload_sweep/64KiB",
                    Kind::Scenario,
                    &[("mib_per_s", 400.0), ("pipelined_mib_per_s", sweep)],
                ),
            ];
            let targets = evaluate(&outcomes);
            let t = targets
                .iter()
                .find(|t| t.name.starts_with("payload_sweep/64KiB"))
                .unwrap();
            (t.verdict(), t.detail().to_string())
        };
        assert_eq!(verdict(280.0).0, "PASS"); // exactly 70%
        let (fail, detail) = verdict(279.0);
        assert_eq!(fail, "FAIL");
        assert!(detail.contains("279.0 / 400.0 MiB/s"), "{detail}");
    }

    #[test]
    fn end_to_end_targets() {
        let outcomes = vec![
            outcome(
                "e2e_slow_downstream",
                Kind::Scenario,
                &[
                    (RATE, 20_000.0),
                    ("delivered_per_s", 19_000.0),
                    ("delivery_ratio", 0.95),
                    ("backlog_first_max", 300.0),
                    ("backlog_last_max", 2500.0),
                    ("backlog_floor", 2000.0),
                ],
            ),
            outcome(
                "e2e_high_latency/adaptive",
                Kind::Scenario,
                &[
                    (RATE, 100_000.0),
                    ("delivered_per_s", 89_000.0),
                    ("delivery_ratio", 0.89),
                    ("one_at_a_time_delivery_ratio", 0.38),
                    ("backlog_first_max", 1_200.0),
                    ("backlog_last_max", 9_000.0),
                    ("backlog_floor", 10_000.0),
                ],
            ),
            outcome("e2e_light_load_latency", Kind::Scenario, &[(P50, 20_000.0)]),
            outcome(
                "reload_under_load",
                Kind::Scenario,
                &[("overloaded_nacks", 0.0), ("lost_records", 1.0)],
            ),
        ];
        let targets = evaluate(&outcomes);
        let verdict = |prefix: &str| {
            targets
                .iter()
                .find(|t| t.name.starts_with(prefix))
                .unwrap()
                .verdict()
        };
        assert_eq!(verdict("e2e_slow_downstream delivery"), "PASS");
        assert_eq!(verdict("e2e_high_latency adaptive: delivery"), "FAIL"); // 89% < 90%
        assert_eq!(verdict("e2e_high_latency adaptive backlog"), "PASS"); // 9000 <= 10000
        assert_eq!(verdict("e2e_slow_downstream backlog"), "FAIL"); // 2500 > max(600, 2000)
        assert_eq!(verdict("e2e_light_load_latency"), "FAIL"); // 20 ms is not < 20 ms
        assert_eq!(verdict("reload_under_load Overloaded"), "PASS");
        assert_eq!(verdict("reload_under_load acked records missing"), "FAIL");
        assert_eq!(verdict("reload_under_load longest"), "SKIP");
    }

    #[test]
    fn kafka_targets_read_the_transactions_and_ingest_rows() {
        let outcomes = vec![
            outcome(
                "e2e_kafka/transactions",
                Kind::Scenario,
                &[
                    (RATE, 70_000.0),
                    ("perf_test_records_per_s", 100_000.0),
                    ("ratio_vs_perf_test", 0.7),
                    ("one_per_transaction_records_per_s", 7_100.0),
                    ("speedup_vs_one_per_transaction", 9.9),
                ],
            ),
            outcome(
                "e2e_kafka/ingest",
                Kind::Scenario,
                &[
                    ("ingest_p50_us", 330.0),
                    ("noop_ingest_p50_us", 300.0),
                    ("ratio_vs_noop", 1.1),
                ],
            ),
        ];
        let targets = evaluate(&outcomes);
        let verdict = |prefix: &str| {
            targets
                .iter()
                .find(|t| t.name.starts_with(prefix))
                .unwrap()
                .verdict()
        };
        assert_eq!(verdict("e2e_kafka delivered"), "PASS"); // exactly 70%
        assert_eq!(verdict("e2e_kafka transactions"), "FAIL"); // 9.9x < 10x
        assert_eq!(verdict("e2e_kafka ingest"), "PASS"); // exactly 1.1
    }

    #[test]
    fn fanout_targets_pass_and_fail() {
        let verdicts = |ratios: [f64; 3], p50_ratio: f64| {
            let outcomes = vec![outcome(
                "e2e_fanout_3/three_sinks",
                Kind::Scenario,
                &[
                    (RATE, 20_000.0),
                    (P50, 300.0),
                    ("one_sink_p50_us", 300.0 / p50_ratio),
                    ("p50_ratio", p50_ratio),
                    ("delivery_ratio_a", ratios[0]),
                    ("delivery_ratio_b", ratios[1]),
                    ("delivery_ratio_c", ratios[2]),
                    (
                        "delivery_ratio_min",
                        ratios.iter().copied().fold(1.0, f64::min),
                    ),
                ],
            )];
            let targets = evaluate(&outcomes);
            let verdict = |prefix: &str| {
                targets
                    .iter()
                    .find(|t| t.name.starts_with(prefix))
                    .unwrap()
                    .verdict()
            };
            (
                verdict("e2e_fanout_3 every"),
                verdict("e2e_fanout_3 ingest"),
            )
        };
        assert_eq!(verdicts([1.0, 0.99, 0.95], 1.15), ("PASS", "PASS"));
        assert_eq!(verdicts([1.0, 0.94, 1.0], 1.16), ("FAIL", "FAIL"));
        // A failed scenario is a skip, not a pass.
        let targets = evaluate(&[ReportRow::failed(
            "e2e_fanout_3",
            Kind::Scenario,
            "x".into(),
        )]);
        let t = targets
            .iter()
            .find(|t| t.name.starts_with("e2e_fanout_3 every"))
            .unwrap();
        assert_eq!((t.verdict(), t.detail()), ("SKIP", "e2e_fanout_3 failed"));
    }
}
