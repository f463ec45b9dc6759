//! `e2e_kafka`: the Kafka sink into a real 3-node Kafka 4.4 KRaft cluster
//! on loopback (spillway-test-kafka), 256 B records into a topic of 3
//! partitions, replication 3, `min.insync.replicas=2`. Every phase runs
//! [`RUNS`] times in this one scenario run (the cluster starts once) and
//! each row holds the medians; each phase has a fresh daemon (4 shards)
//! and a fresh topic.
//!
//! - `/transactions`: a backlog pushed at Sync while the sink is paused
//!   (`ctl sink pause`), then released and timed until `ctl stats` counts
//!   every record delivered, with batches of [`BATCH_RECORDS_MAX`] (one
//!   batch is one transaction). The sink's `spillway_sink_request_seconds`
//!   histogram, read before and after, gives each transaction's time
//!   (produce + commit).
//! - `/one_per_transaction`: the same with one record per batch.
//! - `/perf_test`: Kafka's own `ProducerPerformance` (`acks=all`,
//!   idempotent, same record size and compression) on the same cluster:
//!   what the cluster takes from a client that does nothing else.
//! - `/ingest`: a paced Sync load; the ack latency with the Kafka sink
//!   delivering against a daemon with the noop sink, and against the noop
//!   sink beside the same transactional load into the cluster from the
//!   bench's own process (the control: the machine shared with a Kafka
//!   client and its brokers, no sink in the daemon); order rotating.
//! - `/ingest_brokers_niced`: the same once every run is done, with the
//!   brokers' JVMs at nice 10 (brokers on other hosts take none of the
//!   daemon's cores; here they take what the daemon leaves).

use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use serde_json::Value;
use spillway_client::Tier;
use spillway_test_kafka::{Guard, KafkaCluster};

use super::context::Ctx;
use super::daemon::{Launcher, NOOP_SINK};
use super::e2e::{
    launcher, sleep_until, start, stop_daemon, toml_string, wait_for, PUSH_WINDOW, RECORD_BYTES,
};
use super::load::LoadError;
use super::receiver::micros_since;
use super::report::{median_of, Kind, ReportRow, RATE};
use super::stamped::{self, Burst, Pace};
use super::sustained::bucket_delta;

/// Each phase runs this many times; the rows hold the medians.
const RUNS: usize = 3;
/// `server.shards` of every daemon here: one transactional producer per
/// shard, transactions side by side.
const SHARDS: u32 = 4;
/// One connection per shard (connections are spread round-robin).
const PRODUCERS: usize = 4;
const PARTITIONS: i32 = 3;
const REPLICATION: i32 = 3;
const TOPIC_CONFIGS: &[(&str, &str)] = &[("min.insync.replicas", "2")];
/// Records of the backlog phases and of the perf test (`--quick`: a fifth).
const BACKLOG_RECORDS: u64 = 200_000;
/// One record per transaction is slow: it gets this share of the backlog.
const ONE_PER_TRANSACTION_SHARE: u64 = 500;
/// Records per batch, so per transaction, of `/transactions`. Measured
/// 2026-12-07 (docs/benchmarks.md): every transaction costs about 100 ms
/// whatever its size (1 record: 103 ms mean), so 1,000 (the default)
/// delivered 35,000 records/s, 5,000 64,000-98,000 (185-292 ms a
/// transaction) and 16,384 (the 4 MiB `batch_bytes_max` of 256 B records)
/// 71,000 in the run that tried it, with transactions of 646 ms, which
/// hold `read_committed` consumers back that long.
const BATCH_RECORDS_MAX: u64 = 5_000;
const BATCH_BYTES_MAX: u64 = 4 * 1024 * 1024;
const TRANSACTION_TIMEOUT_MS: u64 = 30_000;
/// Records pushed and delivered before a backlog phase, so the sink's
/// producers exist (transactional id registered, position read, the
/// offsets topic made) before the clock starts.
const WARMUP_PER_PRODUCER: u64 = 25;
/// `/ingest`: the offered load, its warm-up and its measured window.
const INGEST_RATE: f64 = 5_000.0;
const INGEST_WINDOW: usize = 64;
const INGEST_WARMUP: Duration = Duration::from_secs(1);
const INGEST_MEASURED: Duration = Duration::from_secs(5);
const INGEST_MEASURED_QUICK: Duration = Duration::from_secs(2);
/// `/ingest_brokers_niced`: the brokers' niceness, so that the daemon
/// (at 0) gets the cores first, as with brokers on other hosts.
const NICE_BROKERS: i32 = 10;
/// The row of the ingest phases with the brokers niced.
pub const INGEST_NICED: &str = "e2e_kafka/ingest_brokers_niced";
/// How often delivery is polled (`ctl stats` on the admin socket).
const POLL_EVERY: Duration = Duration::from_millis(5);

/// The `[sink]` body of a Kafka sink into `topic`, batches of
/// `batch_records` records.
fn kafka_sink(brokers: &str, topic: &str, batch_records: u64) -> String {
    let brokers: Vec<String> = brokers.split(',').map(toml_string).collect();
    format!(
        "type = \"kafka\"\nbrokers = [{}]\ntopic = {}\ncompression = \"none\"\n\
         batch_records_max = {batch_records}\nbatch_bytes_max = {BATCH_BYTES_MAX}\n\
         transaction_timeout_ms = {TRANSACTION_TIMEOUT_MS}\n",
        brokers.join(", "),
        toml_string(topic),
    )
}

/// Every `[sink]` body this scenario writes, for the daemon's own test
/// that it accepts each of them.
pub fn sink_tables() -> Vec<String> {
    let brokers = "127.0.0.1:9092,127.0.0.1:9093,127.0.0.1:9094";
    vec![
        kafka_sink(brokers, "transactions-0", BATCH_RECORDS_MAX),
        kafka_sink(brokers, "one-0", 1),
    ]
}

/// The sink's per-batch times (`spillway_sink_request_seconds`, sink
/// `default`, summed over the shards): cumulative buckets (upper bound in
/// s, count) and the sum of the times in s.
#[derive(Debug, Clone, Default, PartialEq)]
struct Requests {
    buckets: Vec<(f64, u64)>,
    sum_s: f64,
}

impl Requests {
    fn count(&self) -> u64 {
        self.buckets.last().map_or(0, |b| b.1)
    }

    /// The requests since `before`.
    fn since(&self, before: &Requests) -> Requests {
        Requests {
            buckets: bucket_delta(&before.buckets, &self.buckets),
            sum_s: self.sum_s - before.sum_s,
        }
    }
}

fn parse_requests(metrics: &Value) -> Requests {
    let mut r = Requests::default();
    for sample in metrics["samples"].as_array().into_iter().flatten() {
        if sample["labels"]["sink"].as_str() != Some("default") {
            continue;
        }
        let value = sample["value"].as_f64().unwrap_or(0.0);
        match sample["name"].as_str() {
            Some("spillway_sink_request_seconds_sum") => r.sum_s += value,
            Some("spillway_sink_request_seconds_bucket") => {
                let le = match sample["labels"]["le"].as_str() {
                    Some("+Inf") | None => f64::INFINITY,
                    Some(v) => v.parse().unwrap_or(f64::INFINITY),
                };
                match r.buckets.iter_mut().find(|(b, _)| *b == le) {
                    Some((_, count)) => *count += value as u64,
                    None => r.buckets.push((le, value as u64)),
                }
            }
            _ => {}
        }
    }
    r.buckets.sort_by(|a, b| a.0.total_cmp(&b.0));
    r
}

/// The upper bound, in ms, of the bucket that holds the `q` quantile
/// (0..=1) of cumulative buckets (upper bound in s, count); for the +Inf
/// bucket, the highest finite bound. `None` when the buckets are empty.
/// The sink's buckets are coarse (100 ms, then 250 ms): interpolating
/// inside one read 175 ms for transactions whose mean was 104 ms, so the
/// bound is reported, beside the exact mean.
fn bound_ms(buckets: &[(f64, u64)], q: f64) -> Option<f64> {
    let total = buckets.last()?.1;
    if total == 0 {
        return None;
    }
    let rank = (total as f64 * q).ceil().max(1.0) as u64;
    let finite = buckets.iter().map(|b| b.0).filter(|b| b.is_finite());
    let highest = finite.fold(0.0, f64::max);
    let (le, _) = buckets.iter().find(|(_, count)| *count >= rank)?;
    Some(if le.is_finite() { *le } else { highest } * 1000.0)
}

fn requests(admin: &Path) -> Result<Requests, String> {
    let body = spillway_ctl::call(admin, "metrics --json")?;
    let metrics: Value =
        serde_json::from_str(&body).map_err(|e| format!("ctl metrics --json: {e}"))?;
    Ok(parse_requests(&metrics))
}

/// Sink `default`'s `delivered_records` and `delivered_batches` from `ctl
/// stats`.
fn parse_delivered(stats: &str) -> (u64, u64) {
    let total = |key: &str| {
        let prefix = format!("sink{{sink=\"default\"}}.{key} ");
        stats
            .lines()
            .find_map(|l| l.strip_prefix(&prefix)?.trim().parse().ok())
            .unwrap_or(0)
    };
    (total("delivered_records"), total("delivered_batches"))
}

fn delivered(admin: &Path) -> Result<(u64, u64), String> {
    let body = spillway_ctl::call(admin, "stats").map_err(|e| format!("ctl stats: {e}"))?;
    Ok(parse_delivered(&body))
}

fn ctl(admin: &Path, command: &str) -> Result<(), LoadError> {
    spillway_ctl::call(admin, command)
        .map(|_| ())
        .map_err(|e| LoadError::Failed(format!("ctl {command}: {e}")))
}

/// `count` records pushed by [`PRODUCERS`] connections at Sync, as fast
/// as the daemon takes them; how many were acked.
fn push(socket: &Path, count: u64) -> Result<u64, LoadError> {
    let (stop, acked) = (AtomicBool::new(false), AtomicU64::new(0));
    let epoch = Instant::now();
    let burst = |i: usize| Burst {
        producer: i as u64,
        count: count / PRODUCERS as u64,
        size: RECORD_BYTES,
        per_frame: 1,
        window: PUSH_WINDOW,
    };
    let producer = |i: usize| stamped::push_all(socket, burst(i), epoch, &acked);
    let (sent, ()) = stamped::with_producers(PRODUCERS, &stop, producer, || ());
    Ok(sent?.acked)
}

/// What one backlog phase measured.
struct Drained {
    records: u64,
    elapsed: Duration,
    /// Batches (transactions) that delivered the backlog.
    batches: u64,
    /// The sink's time per batch over the backlog.
    requests: Requests,
}

impl Drained {
    fn rate(&self) -> f64 {
        self.records as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }

    fn row(&self, name: &str) -> ReportRow {
        let mut o = ReportRow::new(name, Kind::Scenario);
        o.set(RATE, self.rate())
            .set("records", self.records as f64)
            .set("elapsed_s", self.elapsed.as_secs_f64())
            .set("transactions", self.batches as f64)
            .set(
                "records_per_transaction",
                self.records as f64 / self.batches.max(1) as f64,
            );
        let r = &self.requests;
        if let (Some(p50), Some(p99)) = (bound_ms(&r.buckets, 0.5), bound_ms(&r.buckets, 0.99)) {
            o.set("commit_p50_ms", p50)
                .set("commit_p99_ms", p99)
                .set("commit_mean_ms", r.sum_s * 1000.0 / r.count().max(1) as f64);
        }
        o
    }
}

/// A fresh topic and daemon: a warm-up, then `count` records pushed while
/// the sink is paused, released and timed until `ctl stats` counts every
/// one delivered; the topic must then hold exactly what was acked.
fn drain(
    launcher: &Launcher,
    cluster: &KafkaCluster,
    topic: &str,
    batch_records: u64,
    count: u64,
) -> Result<Drained, LoadError> {
    cluster.create_topic(topic, PARTITIONS, REPLICATION, TOPIC_CONFIGS);
    let sink = kafka_sink(&cluster.bootstrap(), topic, batch_records);
    let daemon = start(launcher, topic, sink)?;
    let (socket, admin) = (daemon.socket(), daemon.admin_socket());
    let warm = push(socket, WARMUP_PER_PRODUCER * PRODUCERS as u64)?;
    wait_for(&format!("{topic}: the warm-up"), POLL_EVERY, || {
        Ok(delivered(admin)?.0 >= warm)
    })?;
    ctl(admin, "sink pause default")?;
    let (_, batches_before) = delivered(admin).map_err(LoadError::Failed)?;
    let before = requests(admin).map_err(LoadError::Failed)?;
    let acked = push(socket, count)?;
    ctl(admin, "sink resume default")?;
    let elapsed = wait_for(
        &format!("{topic}: every record delivered"),
        POLL_EVERY,
        || Ok(delivered(admin)?.0 >= warm + acked),
    )?;
    let (_, batches_after) = delivered(admin).map_err(LoadError::Failed)?;
    let after = requests(admin).map_err(LoadError::Failed)?;
    stop_daemon(daemon, topic)?;
    let stored = cluster.read(topic, true).len() as u64;
    if stored != warm + acked {
        return Err(LoadError::Failed(format!(
            "{topic}: {} acked, the topic holds {stored} committed",
            warm + acked
        )));
    }
    Ok(Drained {
        records: acked,
        elapsed,
        batches: batches_after - batches_before,
        requests: after.since(&before),
    })
}

/// Kafka's ProducerPerformance into a fresh topic: `records` of 256 B,
/// uncompressed.
fn perf_test(cluster: &KafkaCluster, topic: &str, records: u64) -> Result<ReportRow, LoadError> {
    cluster.create_topic(topic, PARTITIONS, REPLICATION, TOPIC_CONFIGS);
    let r = cluster
        .perf_test(topic, records, RECORD_BYTES, "none")
        .map_err(|e| LoadError::Failed(format!("kafka-producer-perf-test: {e}")))?;
    let mut o = ReportRow::new("e2e_kafka/perf_test", Kind::Scenario);
    o.set(RATE, r.records_per_sec)
        .set("records", r.records as f64)
        .set("perf_p50_ms", r.p50_ms)
        .set("perf_p99_ms", r.p99_ms);
    Ok(o)
}

/// What one `/ingest` daemon measured.
struct Ingest {
    p50_us: f64,
    p99_us: f64,
    records_per_s: f64,
    cpu: Cpu,
}

/// CPU use over a measured window: the daemon's and the Kafka nodes' CPU
/// time per second (cores), and the machine's busy share (0..=1, every
/// process, whatever its niceness).
#[derive(Debug, Clone, Copy)]
struct Cpu {
    daemon_cores: Option<f64>,
    cluster_cores: Option<f64>,
    machine_busy: Option<f64>,
}

/// The machine's (busy, total) clock ticks since boot, from `/proc/stat`.
fn machine_ticks() -> Option<(u64, u64)> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    let fields: Vec<u64> = stat
        .lines()
        .next()?
        .split_whitespace()
        .skip(1)
        .filter_map(|v| v.parse().ok())
        .collect();
    // user nice system idle iowait irq softirq steal ...: idle and iowait are not busy.
    let total: u64 = fields.iter().take(8).sum();
    let idle = fields.get(3)? + fields.get(4).copied().unwrap_or(0);
    Some((total - idle, total))
}

/// A process's user + system CPU time in clock ticks, from `/proc/PID/stat`.
fn process_ticks(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The fields after the command's closing parenthesis; utime and stime
    // are the 14th and 15th of the whole line.
    let rest = stat.rsplit_once(')')?.1;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    Some(fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?)
}

/// The CPU ticks of this process's children other than `daemon`: the
/// Kafka nodes' JVMs.
fn cluster_ticks(daemon: u32) -> Option<u64> {
    let me = std::process::id().to_string();
    let mut ticks = 0;
    for entry in std::fs::read_dir("/proc").ok()?.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|p| p.parse::<u32>().ok())
        else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        let parent = stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().nth(1));
        if pid != daemon && parent == Some(me.as_str()) {
            ticks += process_ticks(pid).unwrap_or(0);
        }
    }
    Some(ticks)
}

/// CPU readings at a window's edges.
struct CpuMark {
    daemon: Option<u64>,
    cluster: Option<u64>,
    machine: Option<(u64, u64)>,
    at: Instant,
}

impl CpuMark {
    fn now(pid: u32) -> CpuMark {
        CpuMark {
            daemon: process_ticks(pid),
            cluster: cluster_ticks(pid),
            machine: machine_ticks(),
            at: Instant::now(),
        }
    }

    /// (daemon cores, the cluster's cores, machine busy share) from `self`
    /// to `later`.
    fn until(&self, later: &CpuMark) -> Cpu {
        // SAFETY: sysconf reads a constant of the system.
        let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
        let secs = (later.at - self.at).as_secs_f64().max(1e-9);
        let cores = |a: Option<u64>, b: Option<u64>| {
            a.zip(b)
                .map(|(a, b)| b.saturating_sub(a) as f64 / hz / secs)
        };
        let machine = self.machine.zip(later.machine).map(|((b0, t0), (b1, t1))| {
            b1.saturating_sub(b0) as f64 / t1.saturating_sub(t0).max(1) as f64
        });
        Cpu {
            daemon_cores: cores(self.daemon, later.daemon),
            cluster_cores: cores(self.cluster, later.cluster),
            machine_busy: machine,
        }
    }
}

/// A fresh daemon with `sink` under [`PRODUCERS`] paced connections
/// offering [`INGEST_RATE`] records/s at Sync: after the warm-up,
/// `measured` long, every ack timed. Then waits until the sink delivered
/// every acked record.
fn ingest(
    launcher: &Launcher,
    label: &str,
    sink: String,
    measured: Duration,
) -> Result<Ingest, LoadError> {
    let daemon = start(launcher, label, sink)?;
    let (socket, admin, pid) = (daemon.socket(), daemon.admin_socket(), daemon.pid());
    let (stop, acked) = (AtomicBool::new(false), AtomicU64::new(0));
    let epoch = Instant::now();
    let timed_from = micros_since(epoch) + INGEST_WARMUP.as_micros() as u64;
    let pace = |i: usize| Pace {
        producer: i as u64,
        rate: INGEST_RATE / PRODUCERS as f64,
        size: RECORD_BYTES,
        window: INGEST_WINDOW,
        tier: Tier::Sync,
        ack_times: false,
        latency_from_us: Some(timed_from),
    };
    let producer = |i: usize| stamped::paced(socket, pace(i), epoch, &stop, &acked);
    let (sent, window) = stamped::with_producers(PRODUCERS, &stop, producer, || {
        if !sleep_until(Instant::now() + INGEST_WARMUP, &stop) {
            return None;
        }
        let (t0, a0, cpu0) = (
            Instant::now(),
            acked.load(Ordering::Acquire),
            CpuMark::now(pid),
        );
        let reached = sleep_until(t0 + measured, &stop);
        let (a1, cpu1) = (acked.load(Ordering::Acquire), CpuMark::now(pid));
        reached.then(|| {
            (
                (a1 - a0) as f64 / t0.elapsed().as_secs_f64(),
                cpu0.until(&cpu1),
            )
        })
    });
    let sent = sent?;
    let (records_per_s, cpu) =
        window.ok_or_else(|| LoadError::Failed(format!("{label}: the producers stopped early")))?;
    wait_for(
        &format!("{label}: every record delivered"),
        POLL_EVERY,
        || Ok(delivered(admin)?.0 >= sent.acked),
    )?;
    stop_daemon(daemon, label)?;
    let us = |q: f64| sent.ack_latency.value_at_quantile(q) as f64 / 1000.0;
    Ok(Ingest {
        p50_us: us(0.5),
        p99_us: us(0.99),
        records_per_s,
        cpu,
    })
}

/// `/ingest` of one run: the Kafka sink, the noop sink, and the noop sink
/// beside a transactional load of the same rate into the cluster from
/// this process (the control: the machine shared with a delivering Kafka
/// client and its brokers, no sink in the daemon); the order rotates with
/// `run`.
fn ingest_trio(
    launcher: &Launcher,
    cluster: &KafkaCluster,
    run: usize,
    measured: Duration,
    row: &str,
) -> Result<ReportRow, LoadError> {
    let topic = format!("{}-{run}", row.replace('/', "-"));
    let with_kafka = || {
        cluster.create_topic(&topic, PARTITIONS, REPLICATION, TOPIC_CONFIGS);
        let sink = kafka_sink(&cluster.bootstrap(), &topic, BATCH_RECORDS_MAX);
        ingest(launcher, &topic, sink, measured).map(|i| (i, None))
    };
    let with_noop =
        || ingest(launcher, "ingest-noop", NOOP_SINK.to_string(), measured).map(|i| (i, None));
    let beside = format!("{topic}-beside");
    let beside_load = || {
        cluster.create_topic(&beside, PARTITIONS, REPLICATION, TOPIC_CONFIGS);
        let load = cluster
            .transactional_load(&beside, SHARDS as usize, INGEST_RATE, RECORD_BYTES)
            .map_err(|e| LoadError::Failed(format!("the load beside the noop sink: {e}")))?;
        let started = Instant::now();
        let noop = ingest(
            launcher,
            "ingest-noop-beside-kafka",
            NOOP_SINK.to_string(),
            measured,
        );
        let written = load
            .stop()
            .map_err(|e| LoadError::Failed(format!("the load beside the noop sink: {e}")))?;
        Ok((
            noop?,
            Some(written as f64 / started.elapsed().as_secs_f64()),
        ))
    };
    type Phase<'a> = Box<dyn Fn() -> Result<(Ingest, Option<f64>), LoadError> + 'a>;
    let phases: [Phase; 3] = [
        Box::new(with_kafka),
        Box::new(with_noop),
        Box::new(beside_load),
    ];
    let mut done: [Option<(Ingest, Option<f64>)>; 3] = [None, None, None];
    for k in 0..phases.len() {
        let i = (run + k) % phases.len();
        done[i] = Some(phases[i]()?);
    }
    let [Some((kafka, _)), Some((noop, _)), Some((beside, load_rate))] = done else {
        unreachable!("every phase ran");
    };
    let mut o = ReportRow::new(row, Kind::Scenario);
    o.set(RATE, kafka.records_per_s)
        .set("offered_records_per_s", INGEST_RATE)
        .set("ingest_p50_us", kafka.p50_us)
        .set("ingest_p99_us", kafka.p99_us)
        .set("noop_ingest_p50_us", noop.p50_us)
        .set("noop_ingest_p99_us", noop.p99_us)
        .set("ratio_vs_noop", kafka.p50_us / noop.p50_us.max(1e-9))
        .set("beside_ingest_p50_us", beside.p50_us)
        .set("beside_ingest_p99_us", beside.p99_us)
        .set("beside_load_records_per_s", load_rate.unwrap_or(0.0))
        .set("ratio_vs_beside", kafka.p50_us / beside.p50_us.max(1e-9))
        .set(
            "beside_ratio_vs_noop",
            beside.p50_us / noop.p50_us.max(1e-9),
        );
    let cpu = [
        ("daemon_cpu_cores", kafka.cpu.daemon_cores),
        ("noop_daemon_cpu_cores", noop.cpu.daemon_cores),
        ("beside_daemon_cpu_cores", beside.cpu.daemon_cores),
        ("cluster_cpu_cores", kafka.cpu.cluster_cores),
        ("noop_cluster_cpu_cores", noop.cpu.cluster_cores),
        ("beside_cluster_cpu_cores", beside.cpu.cluster_cores),
        ("machine_busy", kafka.cpu.machine_busy),
        ("noop_machine_busy", noop.cpu.machine_busy),
        ("beside_machine_busy", beside.cpu.machine_busy),
    ];
    for (key, value) in cpu {
        if let Some(v) = value {
            o.set(key, v);
        }
    }
    Ok(o)
}

/// One run of every phase: its rows.
fn one_run(
    launcher: &Launcher,
    cluster: &KafkaCluster,
    run: usize,
    count: u64,
    measured: Duration,
) -> Result<Vec<ReportRow>, LoadError> {
    let transactions = || {
        drain(
            launcher,
            cluster,
            &format!("transactions-{run}"),
            BATCH_RECORDS_MAX,
            count,
        )
    };
    let perf = || perf_test(cluster, &format!("perf-{run}"), count);
    // The perf test and the sink take turns going first.
    let (t, perf) = if run.is_multiple_of(2) {
        let t = transactions()?;
        (t, perf()?)
    } else {
        let p = perf()?;
        (transactions()?, p)
    };
    let one = drain(
        launcher,
        cluster,
        &format!("one-{run}"),
        1,
        count / ONE_PER_TRANSACTION_SHARE,
    )?;
    let perf_rate = perf.get(RATE).unwrap_or(0.0);
    let mut row = t.row("e2e_kafka/transactions");
    row.set("batch_records_max", BATCH_RECORDS_MAX as f64)
        .set("perf_test_records_per_s", perf_rate)
        .set("ratio_vs_perf_test", t.rate() / perf_rate.max(1e-9))
        .set("one_per_transaction_records_per_s", one.rate())
        .set(
            "speedup_vs_one_per_transaction",
            t.rate() / one.rate().max(1e-9),
        );
    let ingest = ingest_trio(launcher, cluster, run, measured, "e2e_kafka/ingest")?;
    Ok(vec![
        row,
        one.row("e2e_kafka/one_per_transaction"),
        perf,
        ingest,
    ])
}

/// Every phase [`RUNS`] times on one cluster; four rows of medians, the
/// `/transactions` one holding the comparisons.
pub fn kafka(ctx: &Ctx) -> Result<Vec<ReportRow>, LoadError> {
    let launcher = Launcher {
        shards: SHARDS,
        ..launcher(ctx)?.clone()
    };
    let cluster = KafkaCluster::try_start(3, Guard::default())
        .map_err(|e| LoadError::Unsupported(format!("no Kafka cluster: {e}")))?;
    let (count, measured) = if ctx.quick {
        (BACKLOG_RECORDS / 5, INGEST_MEASURED_QUICK)
    } else {
        (BACKLOG_RECORDS, INGEST_MEASURED)
    };
    let mut runs: Vec<Vec<ReportRow>> = Vec::new();
    for run in 0..RUNS {
        for (i, row) in one_run(&launcher, &cluster, run, count, measured)?
            .into_iter()
            .enumerate()
        {
            match runs.get_mut(i) {
                Some(rows) => rows.push(row),
                None => runs.push(vec![row]),
            }
        }
    }
    // Last (raising the priority again would need CAP_SYS_NICE): the
    // brokers at nice 10, standing in for brokers on hosts of their own.
    cluster
        .set_nice(NICE_BROKERS)
        .map_err(|e| LoadError::Failed(format!("lowering the brokers' priority: {e}")))?;
    let niced: Result<Vec<ReportRow>, LoadError> = (0..RUNS)
        .map(|run| ingest_trio(&launcher, &cluster, run, measured, INGEST_NICED))
        .collect();
    runs.push(niced?);
    Ok(runs.iter().map(|rows| median_of(rows)).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_sink_table_lists_every_broker() {
        let body = kafka_sink("127.0.0.1:1,127.0.0.1:2", "t-0", 5000);
        let value: toml::Value = toml::from_str(&body).unwrap();
        let brokers: Vec<&str> = value["brokers"]
            .as_array()
            .unwrap()
            .iter()
            .map(|b| b.as_str().unwrap())
            .collect();
        assert_eq!(brokers, ["127.0.0.1:1", "127.0.0.1:2"]);
        assert_eq!(value["batch_records_max"].as_integer(), Some(5000));
    }

    #[test]
    fn delivered_totals_of_the_default_sink() {
        let stats = "sink{sink=\"default\",shard=\"0\"}.delivered_records 10\nsink{sink=\"default\"}.delivered_records 30\nsink{sink=\"default\"}.delivered_batches 3\nsink{sink=\"other\"}.delivered_batches 9\n";
        assert_eq!(parse_delivered(stats), (30, 3));
    }

    #[test]
    fn request_buckets_sum_the_shards_of_the_default_sink() {
        let metrics = serde_json::json!({"samples": [
            {"name": "spillway_sink_request_seconds_bucket", "labels": {"sink": "default", "shard": "0", "le": "0.01"}, "value": 2.0},
            {"name": "spillway_sink_request_seconds_bucket", "labels": {"sink": "default", "shard": "1", "le": "0.01"}, "value": 1.0},
            {"name": "spillway_sink_request_seconds_bucket", "labels": {"sink": "default", "shard": "0", "le": "+Inf"}, "value": 4.0},
            {"name": "spillway_sink_request_seconds_bucket", "labels": {"sink": "default", "shard": "1", "le": "+Inf"}, "value": 2.0},
            {"name": "spillway_sink_request_seconds_bucket", "labels": {"sink": "x", "shard": "0", "le": "+Inf"}, "value": 50.0},
            {"name": "spillway_sink_request_seconds_sum", "labels": {"sink": "default", "shard": "0"}, "value": 0.5},
            {"name": "spillway_sink_request_seconds_sum", "labels": {"sink": "default", "shard": "1"}, "value": 0.25},
        ]});
        let r = parse_requests(&metrics);
        assert_eq!(r.buckets, vec![(0.01, 3), (f64::INFINITY, 6)]);
        assert_eq!(r.count(), 6);
        assert!((r.sum_s - 0.75).abs() < 1e-12);
        let before = Requests {
            buckets: vec![(0.01, 1), (f64::INFINITY, 2)],
            sum_s: 0.25,
        };
        let d = r.since(&before);
        assert_eq!(d.buckets, vec![(0.01, 2), (f64::INFINITY, 4)]);
        assert!((d.sum_s - 0.5).abs() < 1e-12);
    }

    #[test]
    fn a_quantile_reads_as_its_bucket_upper_bound() {
        let buckets = [(0.1, 0), (0.25, 98), (0.5, 100), (f64::INFINITY, 100)];
        assert_eq!(bound_ms(&buckets, 0.5), Some(250.0));
        assert_eq!(bound_ms(&buckets, 0.99), Some(500.0));
        let past = [(0.1, 1), (f64::INFINITY, 10)];
        assert_eq!(bound_ms(&past, 0.5), Some(100.0));
        assert_eq!(bound_ms(&[(f64::INFINITY, 0)], 0.5), None);
    }
}
